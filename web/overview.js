// web/overview.js — the strip above the table, from GET /healthz every few
// seconds, and soon after the stream brings a change of a run's status:
// active runs by status (the whole database; the queued figure says how
// many of them are held back by their concurrency key), this process's
// workers, the poller's lag, the stream subscribers, and the version of
// the configuration this process runs, with how many other running
// replicas run another (a reload not made everywhere). While the server
// does not answer, a note says the figures are those of the last answer.
import { api, ApiError } from './api.js';

const PERIOD_MS = 3000;
const SOON_MS = 250; // after a change: the changes of one moment together
const GAP_MS = 1000; // at least this long between two readings

function set(id, text) {
  const e = document.getElementById(id);
  if (e.textContent !== text) e.textContent = text;
}

// "3", or "3 (1 held)" when some queued runs wait for their key, the
// held part smaller.
function setQueued(runs) {
  const e = document.getElementById('s-queued');
  const n = String(runs.queued ?? 0);
  const held = runs.held > 0 ? ` (${runs.held} held)` : '';
  if (e.textContent === n + held) return;
  e.textContent = n;
  if (!held) return;
  const s = document.createElement('span');
  s.className = 'held';
  s.title = 'queued runs held back because their concurrency key is full';
  s.textContent = held;
  e.append(s);
}

// "3f2a0c9e1b7d", and " (1 other replica runs another)" when the running
// replicas' last heartbeats name other versions; loaded_at in the title.
function setConfig(h) {
  const v = h.config && h.config.version;
  const self = h.engine && h.engine.worker_id;
  const others = (h.workers || []).filter((w) => w.status === 'running' && w.id !== self &&
    w.config_version && w.config_version !== v).length;
  const text = !v ? '–' : others === 0 ? v
    : `${v} (${others} other replica${others > 1 ? 's' : ''} run${others > 1 ? '' : 's'} another)`;
  set('s-config', text);
  const e = document.getElementById('s-config');
  const title = h.config && h.config.loaded_at ? `loaded at ${h.config.loaded_at}` : '';
  if (e.title !== title) e.title = title;
  e.classList.toggle('drift', others > 0);
}

// Starts the readings; the answer's soon() asks for one shortly (at most
// one a second), so that the figures follow the table rather than lag it.
export function startOverview() {
  const note = document.getElementById('health-note');
  let stopped = false;
  let lastOk = 0; // when the figures were read
  let timer = null;
  let due = 0; // when the timer fires
  let reading = false;
  let again = false; // a change came during a reading
  let lastRead = 0;
  const tick = async () => {
    try {
      const { body: h } = await api('/healthz');
      const runs = h.runs || {};
      setQueued(runs);
      for (const s of ['running', 'waiting', 'cancelling']) set('s-' + s, String(runs[s] ?? 0));
      const e = h.engine || {};
      set('s-workers', `${e.busy ?? '?'}/${e.workers ?? '?'}`);
      const lag = h.polls && h.polls.lag_ms;
      set('s-lag', lag === undefined ? '–' : lag >= 1000 ? (lag / 1000).toFixed(1) + ' s' : lag + ' ms');
      set('s-subs', String((h.streams && h.streams.subscribers) ?? '–'));
      setConfig(h);
      note.hidden = true;
      lastOk = Date.now();
    } catch (err) {
      if (err instanceof ApiError && err.status === 403) {
        note.textContent = 'The overview needs a token with the scope health (or admin).';
        note.hidden = false;
        stopped = true; // it will not change by asking again
      } else if (err instanceof ApiError && err.status === 503) {
        note.textContent = 'Health: ' + err.message;
        note.hidden = false;
      } else if (!(err instanceof ApiError)) {
        // no answer at all (the server away, the network down)
        const at = lastOk ? `: the figures are those of ${new Date(lastOk).toISOString().slice(11, 19)}Z` : '';
        note.textContent = `The server does not answer${at}.`;
        note.hidden = false;
      }
    }
  };
  const soonMs = () => Math.max(SOON_MS, lastRead + GAP_MS - Date.now());
  const at = (ms) => {
    clearTimeout(timer);
    due = Date.now() + ms;
    timer = setTimeout(read, ms);
  };
  const read = async () => {
    timer = null;
    reading = true;
    lastRead = Date.now();
    await tick();
    reading = false;
    if (stopped) return;
    at(again ? soonMs() : PERIOD_MS);
    again = false;
  };
  read();
  return {
    soon() {
      if (stopped) return;
      if (reading) {
        again = true;
        return;
      }
      const ms = soonMs();
      if (Date.now() + ms < due) at(ms);
    },
  };
}
