// web/schedules.js — the schedules view: every schedule the token may see
// (GET /schedules), its next fire in its own time zone and in UTC, its
// last run with the outcome (a link to the run), and pause, resume and
// trigger buttons. Read every few seconds, at once after an action, and
// soon after a stream event of a run a schedule made, so it stays as live
// as the rest of the page. Hidden while there is no schedule.
import { api } from './api.js';

const PERIOD_MS = 5000;

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = text;
  return e;
}

// "2026-11-28 02:30" in the zone (the browser's own IANA data).
function inZone(ts, zone) {
  try {
    return new Intl.DateTimeFormat('sv-SE', {
      timeZone: zone, year: 'numeric', month: '2-digit', day: '2-digit',
      hour: '2-digit', minute: '2-digit', second: '2-digit',
    }).format(new Date(ts));
  } catch {
    return null;
  }
}

function utc(ts) {
  return new Date(ts).toISOString().replace('T', ' ').replace(/\.\d+Z$/, '');
}

export class Schedules {
  constructor({ onOpenRun }) {
    this.onOpenRun = onOpenRun;
    this.section = document.getElementById('schedules');
    this.tbody = document.getElementById('sched-rows');
    this.msg = document.getElementById('sched-msg');
    this.list = [];
    this.timer = 0;
    this.soon = 0;
    this.tbody.addEventListener('click', (e) => this.click(e));
  }

  start() {
    this.read();
  }

  // A stream event of a run: one a schedule made changes its last run.
  take(batch) {
    if (!this.list.length || this.soon) return;
    if (batch.some(({ run }) => run && run.schedule)) this.soon = setTimeout(() => this.read(), 300);
  }

  async read() {
    clearTimeout(this.timer);
    clearTimeout(this.soon);
    this.soon = 0;
    try {
      const { body } = await api('/schedules');
      this.list = body.schedules;
      this.render();
    } catch {
      /* no read scope, or the database away: keep what was shown */
    }
    this.timer = setTimeout(() => this.read(), PERIOD_MS);
  }

  render() {
    this.section.hidden = this.list.length === 0;
    const rows = [];
    for (const s of this.list) {
      const tr = el('tr');
      tr.dataset.name = s.name;
      const when = el('td', null, s.cron);
      when.append(el('span', 'sub', s.time_zone));
      const next = el('td');
      if (s.paused) next.append(el('span', 'badge', 'paused'));
      else if (s.next_at) {
        next.append(el('span', null, `${inZone(s.next_at, s.time_zone) || utc(s.next_at)} ${s.time_zone}`));
        next.append(el('span', 'sub', `${utc(s.next_at)} UTC`));
        next.title = 'Your time: ' + new Date(s.next_at).toLocaleString();
      } else next.textContent = '–';
      const last = el('td');
      if (s.last_run_id) {
        const a = el('button', 'link', s.last_run_id);
        a.type = 'button';
        a.dataset.run = s.last_run_id;
        last.append(a, ' ', el('span', 'o-' + (s.last_outcome || 'pending'), s.last_outcome || 'gone'));
      } else last.textContent = '–';
      const act = el('td', 'actions');
      const toggle = el('button', null, s.paused ? 'Resume' : 'Pause');
      toggle.type = 'button';
      toggle.dataset.act = s.paused ? 'resume' : 'pause';
      const trig = el('button', null, 'Trigger');
      trig.type = 'button';
      trig.dataset.act = 'trigger';
      act.append(toggle, trig);
      tr.append(el('td', 'id', s.name), el('td', null, s.run_type), when, next, last, act);
      rows.push(tr);
    }
    this.tbody.replaceChildren(...rows);
  }

  async click(e) {
    const b = e.target.closest('button');
    if (!b) return;
    if (b.dataset.run) {
      this.onOpenRun(b.dataset.run);
      return;
    }
    const name = b.closest('tr').dataset.name;
    const act = b.dataset.act;
    if (act === 'trigger' && !window.confirm(`Start a run of schedule ${name} now?`)) return;
    b.disabled = true;
    try {
      const { body } = await api(`/schedules/${encodeURIComponent(name)}/${act}`, { method: 'POST' });
      this.msg.textContent = act === 'trigger' ? `${name}: started ${body.run_id}.`
        : `${name} ${act === 'pause' ? 'paused' : 'resumed'} on every replica.`;
    } catch (err) {
      this.msg.textContent = `Could not ${act} ${name}: ${err.message}`;
    }
    b.disabled = false;
    this.read();
  }
}
