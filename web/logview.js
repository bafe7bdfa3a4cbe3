// web/logview.js — a run's log in its detail: one attempt at a time (the
// latest by default, a chooser once there are several), read with
// GET /runs/{id}/logs?attempt=N page by page, then, while that attempt is
// the run's latest and the run has not completed, followed live on
// GET /runs/{id}/logs/stream from the last line read.
//
// Nothing twice, nothing missing: the stream's events carry the line's
// seq as their id. The browser's own reconnect sends Last-Event-ID, and a
// line at or below the last seq taken is dropped. When the EventSource
// gives up (the server refused it, or was away too long), the page reads
// the run: a run that completed meanwhile has the rest of its lines read
// with the JSON pages (its stream would answer 204); otherwise a new
// stream starts with ?last_event_id= after a backoff (1 s, doubling to
// 10 s).
//
// Bounded: at most CAP lines of the attempt are on the page (the newest;
// a note says how many there are, and the plain text has them all); lines
// are added in batches, in an animation frame, at most every 100 ms.
// The box follows new lines only while it is scrolled to its bottom; a
// reader scrolled up keeps the lines they read, and new ones wait (at most
// CAP of them) until they go back to the bottom.
// The plain text is a link to ?format=text; with a token, or for more
// lines than one page holds, a click reads every page with the token and
// opens the text as a blob URL.
import { api, getToken, ApiError } from './api.js';

const CAP = 5000; // lines of one attempt kept on the page
const BLOCK = 250; // lines per block of the page (see add())
const PER_BATCH = 1000; // lines added to the page per batch
const PAGE = 5000; // lines per GET /runs/{id}/logs: its largest
const MIN_GAP_MS = 100; // between two batches
const BOTTOM_PX = 16; // this close to the bottom counts as at the bottom
const END = { end: true }; // in the queue: the stream said the run ended

const fmt = new Intl.NumberFormat('en-US').format; // 100,000
const lines = (n) => `${fmt(n)} line${n === 1 ? '' : 's'}`;

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

// "14:46:10.864" of "2026-12-06T14:46:10.864845Z".
function clock(at) {
  const m = /T(\d\d:\d\d:\d\d(?:\.\d{1,3})?)/.exec(at || '');
  return m ? m[1] : at || '';
}

// "2026-12-06 14:46:10.864845Z".
function stamp(at) {
  return (at || '').replace('T', ' ');
}

export class LogView {
  constructor() {
    const $ = (id) => document.getElementById(id);
    this.box = $('log-box');
    this.list = $('log-lines');
    this.empty = $('log-empty');
    this.endNote = $('log-end');
    this.note = $('log-note');
    this.trunc = $('log-trunc');
    this.chooserBox = $('log-attempt-box');
    this.chooser = $('log-attempt');
    this.textLink = $('log-text');
    this.newest = $('log-newest');
    this.times = $('log-times');
    this.id = null;
    this.gen = 0; // every open, attempt change and close: older async work stops
    this.es = null;
    this.timer = 0;
    this.queue = [];
    this.scheduled = false;
    this.lastFlush = 0;
    this.blobUrl = null;
    this.lastSeq = 0; // the stream's position: the last seq it gave
    this.retryMs = 1000;
    this.stuckAt = -1; // where stick() put the box
    this.clearView();
    this.box.addEventListener('scroll', () => this.scrolled());
    // A person scrolling up stops the following at once, before the next
    // batch could pull the box back down.
    this.box.addEventListener('wheel', (e) => {
      if (e.deltaY < 0) this.setFollow(false);
    }, { passive: true });
    this.box.addEventListener('keydown', (e) => {
      if (['ArrowUp', 'PageUp', 'Home'].includes(e.key)) this.setFollow(false);
    });
    this.newest.addEventListener('click', () => {
      this.setFollow(true);
      this.stick();
    });
    this.chooser.addEventListener('change', () => {
      const a = Number(this.chooser.value);
      this.auto = a >= this.maxAttempt; // the latest: keep following the latest
      this.show(a);
    });
    this.times.addEventListener('change', () => {
      this.box.classList.toggle('times', this.times.checked);
      this.render();
    });
    this.textLink.addEventListener('click', (e) => this.openText(e));
  }

  // The view of one attempt, empty: nothing read, following the bottom.
  clearView() {
    this.total = 0; // the attempt's lines so far (on the page or not)
    this.lastShown = 0; // the seq of the attempt's last line taken
    this.truncated = false;
    this.reading = false; // its pages are being read
    this.loading = 0; // lines read so far while reading
    this.done = false; // no more lines will come to this attempt
    this.failed = '';
    this.follow = true;
    this.unseen = 0; // lines added while the reader was scrolled up
    this.kept = 0; // lines on the page
    this.waiting = []; // lines for the page, in the next batches
    this.ending = false; // the stream ended: once the waiting lines are in
    this.list.replaceChildren();
  }

  // Stops the stream and whatever is in flight for the view.
  stop() {
    this.gen++;
    if (this.es) this.es.close();
    this.es = null;
    clearTimeout(this.timer);
    this.queue = [];
    this.lastSeq = 0;
    this.retryMs = 1000;
  }

  // The detail opened run id (run: as the page knows it, maybe only {id}).
  async open(id, run) {
    this.stop();
    this.id = id;
    this.run = run && run.status ? run : null;
    this.maxAttempt = (this.run && this.run.attempt) || 0;
    this.auto = true;
    this.attempt = Math.max(1, this.maxAttempt);
    this.clearView();
    this.render();
    const gen = this.gen;
    if (!this.run) {
      try {
        this.run = (await api(`/runs/${encodeURIComponent(id)}`)).body;
      } catch (err) {
        if (gen === this.gen) this.fail(err, () => this.open(id, null));
        return;
      }
      if (gen !== this.gen) return;
      this.maxAttempt = Math.max(this.maxAttempt, this.run.attempt || 0);
    }
    this.show(Math.max(1, this.maxAttempt));
  }

  close() {
    this.stop();
    this.id = null;
    this.clearView();
    if (this.blobUrl) URL.revokeObjectURL(this.blobUrl);
    this.blobUrl = null;
  }

  // The run as the page's stream (or a read) has it now.
  runChanged(run) {
    if (!this.id || !run || run.id !== this.id) return;
    this.run = run;
    if ((run.attempt || 0) <= this.maxAttempt) return;
    this.maxAttempt = run.attempt;
    // The attempt on show already: a view opened before the run had an
    // attempt shows attempt 1, and may have read its first lines before
    // the page learnt that it started. Those lines stay: the stream does
    // not send them again.
    if (run.attempt === this.attempt) {
      this.render();
      return;
    }
    // A new attempt began: the view moves to it while it follows the
    // latest and the reader is at the bottom (once the attempt on show is
    // read, if it is being read); otherwise the chooser offers it.
    if (this.auto && !this.follow) this.auto = false; // the reader stays on what they read
    if (this.auto && !this.reading) {
      if (this.es) this.switchTo(run.attempt);
      else this.show(run.attempt);
      return;
    }
    this.render();
  }

  // Attempt a from its first line: its pages, then its stream if it may
  // still grow.
  async show(a) {
    this.stop();
    this.clearView();
    this.attempt = a;
    this.reading = true;
    this.render();
    const gen = this.gen;
    const completed = this.run && this.run.status === 'completed'; // before the read
    let tail = [];
    let n = 0;
    let r;
    try {
      r = await this.readPages(a, 0, gen, (page) => {
        n += page.length;
        tail.push(...page);
        if (tail.length > 2 * CAP) tail = tail.slice(-CAP);
        this.loading = n;
        this.render();
      });
    } catch (err) {
      if (gen === this.gen) this.fail(err, () => this.show(a));
      return;
    }
    if (!r) return; // another attempt, or closed
    this.reading = false;
    this.loading = 0;
    this.total = n;
    this.lastShown = r.after;
    this.truncated = r.truncated;
    this.waiting = tail.slice(-CAP);
    this.schedule();
    if (this.auto && a < this.maxAttempt) {
      this.show(this.maxAttempt); // a new attempt began while this one was read
      return;
    }
    if (completed || a < this.maxAttempt) this.done = true;
    else this.openStream(r.after);
    this.render();
  }

  // Reads attempt a's lines after seq `after`, page by page, giving each
  // page's lines to take. Resolves {after: the last seq read, truncated},
  // or null once gen is over.
  async readPages(a, after, gen, take) {
    let truncated = false;
    for (;;) {
      const q = `attempt=${a}&after=${after}&limit=${PAGE}`;
      const { body } = await api(`/runs/${encodeURIComponent(this.id)}/logs?${q}`);
      if (gen !== this.gen) return null;
      truncated = body.truncated;
      if (body.lines.length) {
        take(body.lines);
        after = body.lines[body.lines.length - 1].seq;
      }
      if (body.next_after === null || !body.lines.length) return { after, truncated };
      after = body.next_after;
    }
  }

  // The lines of the run after seq `after`, live, until its end. The
  // stream starts one line back (a line the view has, dropped as such):
  // for a run that completed meanwhile it then has a line to send before
  // its end, where it would answer 204, which an EventSource takes for a
  // failure.
  openStream(after) {
    const q = new URLSearchParams();
    const t = getToken();
    if (t) q.set('access_token', t);
    if (after > 1) q.set('last_event_id', String(after - 1));
    this.lastSeq = Math.max(this.lastSeq, after);
    const s = q.toString();
    const es = new EventSource(`/runs/${encodeURIComponent(this.id)}/logs/stream${s ? '?' + s : ''}`);
    this.es = es;
    es.onopen = () => {
      this.retryMs = 1000;
    };
    es.addEventListener('log', (e) => {
      if (es !== this.es) return;
      let line;
      try {
        line = JSON.parse(e.data);
      } catch {
        return;
      }
      if (line.seq <= this.lastSeq) return; // had it already
      this.lastSeq = line.seq;
      this.push(line);
    });
    // After its end the server closes the stream; the EventSource is
    // closed then (closed at the end event, its request would count as
    // aborted), before it could try again.
    let ended = false;
    es.addEventListener('end', () => {
      if (es !== this.es) return;
      ended = true;
      this.push(END);
    });
    es.onerror = () => {
      if (ended) {
        es.close();
        if (es === this.es) this.es = null;
      } else if (es === this.es && es.readyState === EventSource.CLOSED) {
        this.reopenLater();
      }
    };
  }

  // The EventSource gave up: after a backoff, read the run; the rest of a
  // completed run's lines come from the pages, else a new stream resumes.
  reopenLater() {
    this.es = null;
    const gen = this.gen;
    clearTimeout(this.timer);
    this.timer = setTimeout(async () => {
      try {
        const { body: run } = await api(`/runs/${encodeURIComponent(this.id)}`);
        if (gen !== this.gen) return;
        this.runChanged(run);
        if (gen !== this.gen) return; // it moved to a new attempt
        if (run.status !== 'completed') {
          this.openStream(this.lastSeq);
          return;
        }
        const r = await this.readPages(this.attempt, this.lastShown, gen, (page) => {
          for (const l of page) this.push(l);
        });
        if (!r) return;
        this.truncated = r.truncated;
        this.push(END);
      } catch (err) {
        if (gen !== this.gen) return;
        if (err instanceof ApiError && err.status === 404) this.fail(err);
        else this.reopenLater();
      }
    }, this.retryMs);
    this.retryMs = Math.min(this.retryMs * 2, 10000);
  }

  // The attempt a started while the view followed the one before, on the
  // stream that brings a's lines too: the view moves to it, empty.
  switchTo(a) {
    this.clearView();
    this.attempt = a;
    this.render();
  }

  // Lines (and END) of the current view only: whatever pushes checks that
  // its stream or its read is still the view's.
  push(item) {
    this.queue.push(item);
    this.schedule();
  }

  schedule() {
    if (this.scheduled) return;
    this.scheduled = true;
    const run = () => this.flush();
    const wait = Math.max(0, this.lastFlush + MIN_GAP_MS - performance.now());
    // No animation frames in a hidden tab: a timer keeps the queue short.
    if (document.hidden) setTimeout(run, 500);
    else if (wait) setTimeout(() => requestAnimationFrame(run), wait);
    else requestAnimationFrame(run);
  }

  // One batch: the queue's lines of the attempt on show join the lines
  // waiting for the page, of which at most PER_BATCH are added now (the
  // rest in the next batches), while the box follows the bottom; a reader
  // scrolled up keeps what they read, and the lines wait. Lines waiting
  // beyond CAP push the oldest out, which the page would drop anyway:
  // what it has then goes too.
  flush() {
    this.scheduled = false;
    this.lastFlush = performance.now();
    const q = this.queue;
    this.queue = [];
    for (const l of q) {
      if (l === END) {
        this.ending = true;
        continue;
      }
      if (l.attempt > this.maxAttempt) this.maxAttempt = l.attempt;
      if (l.attempt > this.attempt && this.auto) {
        if (this.follow) {
          this.clearView();
          this.attempt = l.attempt;
        } else {
          this.auto = false; // the reader stays on what they read
        }
      }
      if (l.attempt !== this.attempt || l.seq <= this.lastShown) continue;
      this.waiting.push(l);
      this.total++;
      this.lastShown = l.seq;
      if (!this.follow) this.unseen++;
      if (this.waiting.length > 2 * CAP) this.waiting = this.waiting.slice(-CAP);
    }
    if (this.waiting.length > CAP) this.waiting = this.waiting.slice(-CAP);
    if (this.follow) {
      if (this.waiting.length >= CAP && this.kept) {
        this.list.replaceChildren(); // all of it would go before the waiting lines are in
        this.kept = 0;
      }
      this.add(this.waiting.splice(0, PER_BATCH));
      if (this.waiting.length) this.schedule();
    }
    if (!this.waiting.length && this.ending) {
      this.ending = false;
      this.done = true;
      this.recheckTruncated();
    }
    this.render();
  }

  // Whether the attempt lost output, asked again once it is over.
  async recheckTruncated() {
    const gen = this.gen;
    try {
      const q = `attempt=${this.attempt}&limit=1`;
      const { body } = await api(`/runs/${encodeURIComponent(this.id)}/logs?${q}`);
      if (gen !== this.gen) return;
      this.truncated = body.truncated;
      this.render();
    } catch {
      /* the flag stays as it was */
    }
  }

  line(l) {
    const d = el('div', l.stream === 'opsrun' ? 'ln op' : 'ln');
    d.title = `${stamp(l.at)} · ${l.stream === 'opsrun' ? 'opsrun' : 'the command (stderr)'}`;
    d.append(el('span', 'at', clock(l.at) + ' '), el('span', 'tx', l.text));
    return d;
  }

  // Adds lines at the bottom; past CAP, the oldest go. Lines are kept in
  // blocks of BLOCK: a batch lays out the last block and the new ones,
  // and whole blocks go from the top, so the work of a batch does not
  // grow with the lines kept. A block with two more after it is "far":
  // out of view it is not laid out at all (content-visibility in app.css).
  add(list) {
    if (!list.length) return;
    let block = this.list.lastElementChild;
    let n = block ? block.childElementCount : BLOCK;
    let frag = null;
    for (const l of list) {
      if (n >= BLOCK) {
        if (frag) block.append(frag);
        block = el('div', 'lb');
        this.list.append(block);
        frag = null;
        n = 0;
      }
      if (!frag) frag = document.createDocumentFragment();
      frag.append(this.line(l));
      n++;
    }
    if (frag) block.append(frag);
    this.kept += list.length;
    if (this.kept > CAP) this.trim();
    this.markFar();
  }

  // A block that goes far keeps the height it has now as its size while
  // it is not laid out: it may never have been drawn whole (filled and
  // passed in one batch), and the browser would otherwise size it as it
  // last drew it. Heights first, then the changes: one layout.
  markFar() {
    const near = [];
    for (let b = this.list.lastElementChild?.previousElementSibling?.previousElementSibling;
      b && !b.classList.contains('far'); b = b.previousElementSibling) near.push(b);
    const heights = near.map((b) => b.offsetHeight);
    near.forEach((b, i) => this.far(b, heights[i]));
  }

  far(b, height) {
    b.style.containIntrinsicSize = `auto ${height}px`;
    b.classList.add('far');
  }

  // Down to CAP lines: whole blocks first, then lines of the first one,
  // which moves into a new block (a far block would keep its old size).
  trim() {
    const first = () => this.list.firstElementChild;
    while (this.kept - first().childElementCount >= CAP) {
      this.kept -= first().childElementCount;
      first().remove();
    }
    const excess = this.kept - CAP;
    if (excess > 0) {
      const b = first();
      const count = b.childElementCount;
      const r = document.createRange();
      r.setStartBefore(b.firstChild);
      r.setEndBefore(b.children[excess]);
      r.deleteContents();
      this.kept = CAP;
      if (b.classList.contains('far')) {
        const nb = el('div', 'lb');
        nb.append(...b.children);
        this.far(nb, Math.round(parseFloat(b.style.containIntrinsicSize.split(' ')[1]) * (count - excess) / count));
        b.replaceWith(nb);
      }
    }
  }

  setFollow(on) {
    if (this.follow === on) return;
    this.follow = on;
    if (on) {
      this.unseen = 0;
      if (this.waiting.length || this.ending) this.schedule(); // the lines that waited
    }
    this.renderNewest();
  }

  // A scroll event says where the box is when it is dispatched, which may
  // be after its content changed size: blocks out of view take their
  // remembered or guessed size (content-visibility) at the next rendering,
  // not when the lines were added. A box still where the page put it was
  // not scrolled by the reader: it goes back to the bottom.
  scrolled() {
    const b = this.box;
    const atBottom = b.scrollHeight - b.scrollTop - b.clientHeight <= BOTTOM_PX;
    if (!atBottom && this.follow && Math.abs(b.scrollTop - this.stuckAt) < 1) {
      this.stick();
      return;
    }
    this.setFollow(atBottom);
  }

  // To the bottom, remembering where that was.
  stick() {
    this.box.scrollTop = this.box.scrollHeight;
    this.stuckAt = this.box.scrollTop;
  }

  fail(err, retry) {
    this.reading = false;
    this.loading = 0;
    this.failed = 'Could not read the log: ' + (err.message || err);
    this.render();
    if (retry && !(err instanceof ApiError && err.status < 500)) {
      const gen = this.gen;
      this.timer = setTimeout(() => {
        if (gen === this.gen) retry();
      }, this.retryMs);
      this.retryMs = Math.min(this.retryMs * 2, 10000);
    }
  }

  renderNewest() {
    const show = !this.follow && this.total > 0;
    this.newest.hidden = !show;
    if (show) {
      this.newest.textContent = this.unseen
        ? `Jump to the newest line (${lines(this.unseen)} more) ↓` : 'Jump to the newest line ↓';
    }
  }

  // The chooser, the notes, the link: what the state says.
  render() {
    const a = this.attempt;
    const many = this.maxAttempt > 1;
    this.chooserBox.hidden = !many;
    if (many && this.chooser.options.length !== this.maxAttempt) {
      this.chooser.replaceChildren();
      for (let i = 1; i <= this.maxAttempt; i++) {
        this.chooser.append(new Option(`${i} of ${this.maxAttempt}${i === this.maxAttempt ? ' (latest)' : ''}`, String(i)));
      }
    }
    if (many) this.chooser.value = String(a);
    let note = this.failed;
    if (!note && this.reading) note = `Reading the log… ${lines(this.loading)}`;
    else if (!note && this.total > CAP) {
      note = `Showing the last ${fmt(CAP)} of ${lines(this.total)} of this attempt; the plain text has them all.`;
    }
    this.note.textContent = note;
    this.note.hidden = !note;
    this.trunc.hidden = !this.truncated;
    const over = this.done || a < this.maxAttempt;
    this.empty.hidden = this.reading || this.total > 0 || !!this.failed;
    this.empty.textContent = over ? 'No lines: this attempt wrote none.' : 'No lines yet.';
    // The end once the last line is on the page, not while lines wait.
    this.endNote.hidden = !over || this.reading || this.waiting.length > 0 || this.total === 0;
    this.endNote.textContent = a < this.maxAttempt ? `End of attempt ${a}.` : 'End of the log: the run completed.';
    this.textLink.href = this.id
      ? `/runs/${encodeURIComponent(this.id)}/logs?format=text&attempt=${a}&limit=${PAGE}` : '#';
    this.renderNewest();
    // Last, after every change of the box's content: a scroll event is
    // dispatched later, and reads where the box is then.
    if (this.follow) this.stick();
  }

  // The plain text as it is, when a link can carry it: no token to send,
  // and one page holds the attempt. Otherwise every page is read with the
  // token and the text opens as a blob URL, in a window opened now (a
  // window opened after the reads would count as a pop-up); if the
  // browser opens none, the text is downloaded instead.
  async openText(e) {
    if (!this.id) return;
    if (!getToken() && this.total <= PAGE && !this.reading) return;
    e.preventDefault();
    const w = window.open('', '_blank');
    if (w) {
      w.opener = null;
      w.document.title = `${this.id} attempt ${this.attempt}`;
      if (w.document.body) w.document.body.textContent = 'Reading the log…';
    }
    const parts = [];
    let after = 0;
    try {
      for (;;) {
        const q = `format=text&attempt=${this.attempt}&after=${after}&limit=${PAGE}`;
        const { body, headers } = await api(`/runs/${encodeURIComponent(this.id)}/logs?${q}`);
        parts.push(body);
        const next = headers.get('Opsrun-Next-After');
        if (!next || Number(next) <= after) break;
        after = Number(next);
      }
    } catch (err) {
      if (w) w.close();
      this.failed = 'Could not read the plain text: ' + err.message;
      this.render();
      return;
    }
    if (this.blobUrl) URL.revokeObjectURL(this.blobUrl);
    this.blobUrl = URL.createObjectURL(new Blob(parts, { type: 'text/plain;charset=utf-8' }));
    if (w) {
      w.location.href = this.blobUrl;
      return;
    }
    const a = el('a');
    a.href = this.blobUrl;
    a.download = `${this.id}-attempt-${this.attempt}.log`;
    a.click();
  }
}
