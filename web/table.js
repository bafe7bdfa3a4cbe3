// web/table.js — the runs table, virtualized: only the rows in sight (and a
// few around them) exist in the DOM, whatever the number of runs; two
// spacer rows stand for the others. Rows are reused and a cell is written
// only when its text changed. Keyboard: one row is in the tab order
// (roving tabindex); Up/Down/Home/End/PageUp/PageDown move, Enter opens.
const OVERSCAN = 8;

function age(ts, now) {
  if (!ts) return '';
  const s = Math.max(0, Math.round((now - Date.parse(ts)) / 1000));
  if (s < 60) return s + 's';
  if (s < 3600) return Math.floor(s / 60) + 'm';
  if (s < 86400) return Math.floor(s / 3600) + 'h';
  return Math.floor(s / 86400) + 'd';
}

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function setText(e, t) {
  if (e.textContent !== t) e.textContent = t;
}

function setClass(e, c) {
  if (e.className !== c) e.className = c;
}

export class Table {
  constructor({ wrap, tbody, table, runs, onOpen }) {
    this.wrap = wrap;
    this.tbody = tbody;
    this.table = table;
    this.runs = runs;
    this.onOpen = onOpen;
    this.rowH = 35;
    this.pool = [];
    this.sel = 0; // index in the view of the row in the tab order
    this.selId = null;
    this.top = this.spacer();
    this.bottom = this.spacer();
    this.tbody.append(this.top, this.bottom);
    this.dirty = true;
    this.wrap.addEventListener('scroll', () => this.schedule(), { passive: true });
    window.addEventListener('resize', () => {
      this.measured = false;
      this.schedule();
    });
    this.tbody.addEventListener('click', (e) => {
      const tr = e.target.closest('tr.run');
      if (tr && tr._run) {
        this.select(tr._index, false);
        this.onOpen(tr._run.id);
      }
    });
    this.tbody.addEventListener('keydown', (e) => this.key(e));
  }

  spacer() {
    const tr = el('tr', 'spacer');
    tr.setAttribute('aria-hidden', 'true');
    const td = el('td');
    td.colSpan = 9;
    tr.append(td);
    return tr;
  }

  row() {
    const tr = el('tr', 'run');
    tr.tabIndex = -1;
    const c = {
      id: el('td', 'id'), type: el('td', 'opt2'), status: el('td'), outcome: el('td', 'opt2'),
      progress: el('td'), attempt: el('td', 'opt'), initiator: el('td', 'opt'), age: el('td'),
      ext: el('td', 'opt'),
    };
    c.statusBadge = el('span', 'badge');
    c.status.append(c.statusBadge);
    c.bar = el('div', 'bar');
    c.fill = el('i');
    c.step = el('span');
    c.bar.append(c.fill, c.step);
    c.progress.append(c.bar);
    tr.append(c.id, c.type, c.status, c.outcome, c.progress, c.attempt, c.initiator, c.age, c.ext);
    tr._c = c;
    return tr;
  }

  schedule() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => {
      this.pending = false;
      this.render();
    });
  }

  fill(tr, r, i, now) {
    const c = tr._c;
    if (tr._run !== r || tr._index !== i) {
      tr._run = r;
      tr._index = i;
      tr.dataset.id = r.id;
      tr.setAttribute('aria-rowindex', String(i + 2));
      setText(c.id, r.id);
      c.id.title = r.id;
    }
    const selected = i === this.sel;
    if (tr._selected !== selected) {
      tr._selected = selected;
      tr.tabIndex = selected ? 0 : -1;
      tr.setAttribute('aria-selected', selected ? 'true' : 'false');
    }
    setText(c.type, r.type);
    const pending = r.status === 'waiting' && r.approval && r.approval.state === 'pending';
    setText(c.statusBadge, pending ? 'awaiting approval' : r.status);
    setClass(c.statusBadge, pending ? 'badge s-approval' : 'badge s-' + r.status);
    setText(c.outcome, r.outcome);
    setClass(c.outcome, 'opt2 o-' + r.outcome);
    const p = Math.max(0, Math.min(100, r.progress || 0));
    // a transform, not a width: it changes no layout
    const w = `scaleX(${p / 100})`;
    if (c.fill.style.transform !== w) c.fill.style.transform = w;
    setClass(c.bar, r.status === 'completed' ? 'bar done' : 'bar');
    setText(c.step, r.step ? `${p}% ${r.step}` : `${p}%`);
    if (c.bar.title !== (r.step || '')) c.bar.title = r.step || '';
    setText(c.attempt, `${r.attempt}/${r.max_attempts}`);
    setText(c.initiator, r.initiator || '');
    setText(c.age, age(r.created_at, now));
    setText(c.ext, r.external_id || '');
  }

  // Writes the rows in sight, in an animation frame.
  render() {
    const runs = this.runs;
    runs.refreshView();
    const view = runs.view;
    if (this.selId) {
      // keep the selected run selected when rows are inserted above it
      const r = runs.get(this.selId);
      if (r && view[this.sel] !== r) {
        const j = view.indexOf(r);
        if (j >= 0) this.sel = j;
      }
    }
    if (this.sel >= view.length) this.sel = Math.max(0, view.length - 1);
    const viewH = this.wrap.clientHeight || 400;
    const head = this.table.tHead ? this.table.tHead.offsetHeight : 28;
    const scroll = Math.max(0, this.wrap.scrollTop - head);
    const first = Math.max(0, Math.floor(scroll / this.rowH) - OVERSCAN);
    const last = Math.min(view.length, Math.ceil((scroll + viewH) / this.rowH) + OVERSCAN);
    const n = Math.max(0, last - first);
    const focusedId = document.activeElement && document.activeElement._run && this.tbody.contains(document.activeElement)
      ? document.activeElement._run.id : null;
    while (this.pool.length < n) this.pool.push(this.row());
    const now = Date.now();
    let prev = this.top;
    for (let k = 0; k < n; k++) {
      const tr = this.pool[k];
      this.fill(tr, view[first + k], first + k, now);
      if (prev.nextSibling !== tr) prev.after(tr);
      prev = tr;
    }
    for (let k = n; k < this.pool.length; k++) if (this.pool[k].parentNode) this.pool[k].remove();
    const top = first * this.rowH + 'px';
    const bottom = (view.length - last) * this.rowH + 'px';
    if (this.top.firstChild.style.height !== top) this.top.firstChild.style.height = top;
    if (this.bottom.firstChild.style.height !== bottom) this.bottom.firstChild.style.height = bottom;
    const count = String(view.length + 1);
    if (this.table.getAttribute('aria-rowcount') !== count) this.table.setAttribute('aria-rowcount', count);
    if (n && !this.measured && this.pool[0].offsetHeight) {
      // once (and after a resize): a read after the writes forces a layout
      this.rowH = this.pool[0].offsetHeight;
      this.measured = true;
    }
    if (focusedId) {
      const tr = this.rowFor(this.sel);
      if (tr && document.activeElement !== tr) tr.focus({ preventScroll: true });
    }
    this.dirty = false;
  }

  rowFor(i) {
    for (const tr of this.pool) if (tr.parentNode && tr._index === i) return tr;
    return null;
  }

  select(i, focus) {
    const view = this.runs.view;
    if (!view.length) return;
    this.sel = Math.max(0, Math.min(view.length - 1, i));
    this.selId = view[this.sel].id;
    const head = this.table.tHead ? this.table.tHead.offsetHeight : 28;
    const y = this.sel * this.rowH + head;
    if (y < this.wrap.scrollTop + head) this.wrap.scrollTop = y - head;
    else if (y + this.rowH > this.wrap.scrollTop + this.wrap.clientHeight)
      this.wrap.scrollTop = y + this.rowH - this.wrap.clientHeight;
    this.render();
    if (focus) {
      const tr = this.rowFor(this.sel);
      if (tr) tr.focus({ preventScroll: true });
    }
  }

  focusSelected() {
    this.select(this.sel, true);
  }

  key(e) {
    const tr = e.target.closest('tr.run');
    if (!tr) return;
    const page = Math.max(1, Math.floor(this.wrap.clientHeight / this.rowH) - 1);
    const moves = { ArrowDown: 1, ArrowUp: -1, PageDown: page, PageUp: -page };
    if (e.key in moves) this.select(tr._index + moves[e.key], true);
    else if (e.key === 'Home') this.select(0, true);
    else if (e.key === 'End') this.select(this.runs.view.length - 1, true);
    else if (e.key === 'Enter' || e.key === ' ') this.onOpen(tr._run.id);
    else return;
    e.preventDefault();
  }
}
