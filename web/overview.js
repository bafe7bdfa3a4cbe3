// web/overview.js — the strip above the table, from GET /healthz every few
// seconds: active runs by status (the whole database), this process's
// workers, the poller's lag and the stream subscribers. While the server
// does not answer, a note says the figures are those of the last answer.
import { api, ApiError } from './api.js';

const PERIOD_MS = 3000;

function set(id, text) {
  const e = document.getElementById(id);
  if (e.textContent !== text) e.textContent = text;
}

export function startOverview() {
  const note = document.getElementById('health-note');
  let stopped = false;
  let lastOk = 0; // when the figures were read
  const tick = async () => {
    try {
      const { body: h } = await api('/healthz');
      const runs = h.runs || {};
      for (const s of ['queued', 'running', 'waiting', 'cancelling']) set('s-' + s, String(runs[s] ?? 0));
      const e = h.engine || {};
      set('s-workers', `${e.busy ?? '?'}/${e.workers ?? '?'}`);
      const lag = h.polls && h.polls.lag_ms;
      set('s-lag', lag === undefined ? '–' : lag >= 1000 ? (lag / 1000).toFixed(1) + ' s' : lag + ' ms');
      set('s-subs', String((h.streams && h.streams.subscribers) ?? '–'));
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
    if (!stopped) setTimeout(tick, PERIOD_MS);
  };
  tick();
}
