// web/runs.js — the runs the page knows, newest first (created_at, then
// id, as GET /runs orders them), and the filtered view the table shows.
const ACTIVE = new Set(['queued', 'running', 'waiting', 'cancelling']);

export function isActive(run) {
  return ACTIVE.has(run.status);
}

// The run waits for a person to approve or reject it.
export function awaitsApproval(run) {
  return run.status === 'waiting' && !!run.approval && run.approval.state === 'pending';
}

function newer(a, b) {
  // true when a sorts before b (newest first)
  if (a.created_at !== b.created_at) return a.created_at > b.created_at;
  return a.id > b.id;
}

// A check changes the run's poll schedule and nothing else (not even
// updated_at): a run read again after a check is news.
function samePoll(a, b) {
  if (!a || !b) return !a === !b;
  return a.checks === b.checks && a.next_check_at === b.next_check_at;
}

export class Runs {
  constructor() {
    this.byId = new Map();
    this.order = []; // run objects, newest first
    this.view = this.order;
    this.filter = { status: '', outcome: '', type: '', approval: '', search: '' };
    this.types = new Set();
    this.viewDirty = false;
  }

  // Index of the first run not newer than run (binary search).
  position(run) {
    let lo = 0;
    let hi = this.order.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (newer(this.order[mid], run)) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  // Takes a run's newer state. A completed run never changes again, so an
  // older, active state arriving late (a list read before the stream's
  // event) never moves it back. Returns true when something changed.
  put(run) {
    const old = this.byId.get(run.id);
    if (old) {
      if (old.status === 'completed' && run.status !== 'completed') return false;
      if (old.updated_at === run.updated_at && old.status === run.status &&
          old.progress === run.progress && old.step === run.step && old.outcome === run.outcome &&
          old.attempt === run.attempt && samePoll(old.poll, run.poll)) return false;
      Object.assign(old, run); // created_at never changes: its place stays
      if (this.matches(old) !== old._shown) this.viewDirty = true;
      return true;
    }
    const r = { ...run };
    this.byId.set(r.id, r);
    this.order.splice(this.position(r), 0, r);
    if (!this.types.has(r.type)) this.types.add(r.type);
    this.viewDirty = true;
    return true;
  }

  // Forgets every run (a reset: the server's history is not the one
  // this page followed).
  clear() {
    this.byId.clear();
    this.order.length = 0;
    this.view = this.order;
    this.viewDirty = true;
  }

  get(id) {
    return this.byId.get(id);
  }

  setFilter(f) {
    Object.assign(this.filter, f);
    this.viewDirty = true;
  }

  matches(r) {
    const f = this.filter;
    if (f.status && r.status !== f.status) return false;
    if (f.outcome && r.outcome !== f.outcome) return false;
    if (f.type && r.type !== f.type) return false;
    if (f.approval && !awaitsApproval(r)) return false;
    if (f.search) {
      const s = f.search;
      if (!r.id.toLowerCase().includes(s) && !(r.external_id || '').toLowerCase().includes(s)) return false;
    }
    return true;
  }

  // The view, recomputed only when membership may have changed.
  refreshView() {
    if (!this.viewDirty) return false;
    this.viewDirty = false;
    const f = this.filter;
    if (!f.status && !f.outcome && !f.type && !f.approval && !f.search) {
      for (const r of this.order) r._shown = true;
      this.view = this.order;
    } else {
      const v = [];
      for (const r of this.order) {
        r._shown = this.matches(r);
        if (r._shown) v.push(r);
      }
      this.view = v;
    }
    return true;
  }
}
