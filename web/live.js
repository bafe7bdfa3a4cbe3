// web/live.js — one EventSource on GET /stream for the whole page (a
// browser opens at most 6 HTTP/1.1 connections per origin), with the
// token as ?access_token= when there is one.
//
// Nothing twice, nothing missing: status, progress, notification,
// follow_up and step events carry increasing ids (each with its run as of the
// event). An event whose id is not above the last one taken is a
// duplicate and dropped. The browser's own reconnect sends Last-Event-ID;
// when the EventSource gives up (closed), a new one is opened with
// ?last_event_id= the last id taken, so the server replays what was missed
// while it was away. A connection that starts without an id (or a reset)
// gets snapshots; onFresh then reloads the list, since runs may have
// completed in between and a snapshot covers active runs only. After a
// reset (the server does not know the id), onFresh('reset') starts over.
import { getToken, api } from './api.js';

const KINDS = ['snapshot', 'status', 'progress', 'notification', 'follow_up', 'step', 'reset'];
// Batches are applied in an animation frame, at most one per MIN_GAP_MS:
// at 100 events/s, 10 repaints a second show every change as well as 60
// would, for a sixth of the work.
const MIN_GAP_MS = 100;

export class Live {
  constructor({ onEvents, onState, onFresh }) {
    this.onEvents = onEvents; // (batch of {kind, id, run}) per animation frame
    this.onState = onState;
    this.onFresh = onFresh;
    this.lastId = 0;
    this.duplicates = 0;
    this.queue = [];
    this.scheduled = false;
    this.lastFlush = 0;
    this.es = null;
    this.retryMs = 1000;
    this.timer = 0;
    this.resetId = null; // the id the browser repeats on id-less events after a reset
  }

  start() {
    this.open();
  }

  url() {
    const q = new URLSearchParams();
    const t = getToken();
    if (t) q.set('access_token', t);
    if (this.lastId) q.set('last_event_id', String(this.lastId));
    const s = q.toString();
    return '/stream' + (s ? '?' + s : '');
  }

  open() {
    clearTimeout(this.timer);
    if (this.es) this.es.close();
    const es = new EventSource(this.url());
    this.es = es;
    this.resetId = null;
    this.onState(this.lastId ? 'reconnecting' : 'connecting');
    es.onopen = () => {
      this.retryMs = 1000;
      this.onState('live');
      // Without an id the stream starts with snapshots (also when the
      // browser reconnected by itself before any id came).
      if (!this.lastId) this.onFresh('connected');
    };
    es.onerror = () => {
      if (es !== this.es) return;
      if (es.readyState === EventSource.CLOSED) this.reopenLater();
      else this.onState('reconnecting');
    };
    for (const k of KINDS) es.addEventListener(k, (e) => this.take(k, e));
  }

  // The EventSource gave up (the server was gone, or refused the stream):
  // find out why, then open a new one after a backoff.
  async reopenLater() {
    this.onState('offline');
    try {
      await api('/runs?limit=1'); // a 401 asks for a token here
    } catch {
      /* still away */
    }
    this.timer = setTimeout(() => this.open(), this.retryMs);
    this.retryMs = Math.min(this.retryMs * 2, 10000);
  }

  take(kind, e) {
    if (kind === 'reset') {
      // Ids start over: what the server has no longer follows ours.
      this.lastId = 0;
      this.resetId = e.lastEventId;
      this.queue.length = 0;
      this.onFresh('reset');
      return;
    }
    let run;
    try {
      run = JSON.parse(e.data);
    } catch {
      return;
    }
    let id = 0;
    if (kind !== 'snapshot') {
      // An event without an id line repeats the EventSource's last id.
      if (this.resetId !== null && e.lastEventId === this.resetId) id = 0;
      else {
        this.resetId = null;
        id = Number(e.lastEventId) || 0;
      }
      if (id && id <= this.lastId) {
        this.duplicates++;
        return;
      }
      if (id) this.lastId = id;
    }
    this.queue.push({ kind, id, run });
    if (!this.scheduled) {
      this.scheduled = true;
      const wait = Math.max(0, this.lastFlush + MIN_GAP_MS - performance.now());
      // No animation frames in a hidden tab: a timer keeps the queue short.
      if (document.hidden) setTimeout(() => this.flush(), 500);
      else if (wait) setTimeout(() => requestAnimationFrame(() => this.flush()), wait);
      else requestAnimationFrame(() => this.flush());
    }
  }

  flush() {
    this.scheduled = false;
    this.lastFlush = performance.now();
    const batch = this.queue;
    this.queue = [];
    if (batch.length) this.onEvents(batch);
  }

  // A new token: reopen with it, resuming where the stream was.
  restart() {
    this.open();
  }
}
