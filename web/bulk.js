// web/bulk.js — "Cancel all that match" and "Retry all that match": the
// list's current filters (status, outcome, type) as one POST /runs/cancel
// or /runs/retry. A dry run first counts the runs (created before that
// instant, so that runs arriving meanwhile are not acted on unseen), the
// count is confirmed, then the action runs with that count as its limit.
// While it runs, the page's stream shows its progress: the runs of the
// filter that became cancelled or cancelling, or the new runs that retry
// others. The answer gives the final count.
import { api } from './api.js';

// What the server acts on at most in one request.
const LIMIT_MAX = 100000;

function plural(n, one) {
  return `${n.toLocaleString('en')} ${n === 1 ? one : one + 's'}`;
}

export class Bulk {
  constructor({ runs, cancelBtn, retryBtn, why, box, msg, progress }) {
    this.runs = runs; // web/runs.js: its filter is the list's
    this.cancelBtn = cancelBtn;
    this.retryBtn = retryBtn;
    this.why = why; // next to the buttons: why they are off
    this.box = box;
    this.msg = msg;
    this.progress = progress;
    this.job = null; // the action under way: {what, filter, since, total, seen}
    cancelBtn.addEventListener('click', () => this.start('cancel'));
    retryBtn.addEventListener('click', () => this.start('retry'));
  }

  // The buttons follow the filters: the search box and the approval view
  // are the page's own, and no request can say them. Why they are off is
  // written next to them (a tooltip would show only on a hover).
  update() {
    const f = this.runs.filter;
    const why = f.search ? 'Clear the search to act on all that match.'
      : f.approval ? 'Not with the approval filter: use status waiting, or each run\'s buttons.' : '';
    for (const b of [this.cancelBtn, this.retryBtn]) b.disabled = !!why || !!this.job;
    this.why.textContent = why;
    this.why.hidden = !why;
  }

  // The list's filters as the request's; every run when there are none.
  filter(before) {
    const f = this.runs.filter;
    const out = { created_before: before };
    if (f.status) out.status = [f.status];
    if (f.outcome) out.outcome = [f.outcome];
    if (f.type) out.type = f.type;
    return out;
  }

  describe() {
    const f = this.runs.filter;
    const parts = [];
    if (f.status) parts.push(`status ${f.status}`);
    if (f.outcome) parts.push(`outcome ${f.outcome}`);
    if (f.type) parts.push(`type ${f.type}`);
    return parts.length ? parts.join(', ') : 'no filter: every run';
  }

  show(text, progress) {
    this.box.hidden = false;
    this.msg.textContent = text;
    this.progress.hidden = !progress;
  }

  async post(what, body) {
    return api(`/runs/${what}`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(body),
    });
  }

  async start(what) {
    if (this.job) return;
    const verb = what === 'cancel' ? 'cancel' : 'retry';
    const filter = this.filter(new Date().toISOString());
    let matched;
    try {
      const { body } = await this.post(what, { filter, dry_run: true, limit: LIMIT_MAX });
      matched = body.matched;
    } catch (err) {
      this.show(`Could not count the runs to ${verb}: ${err.message}`);
      return;
    }
    const which = what === 'cancel' ? 'queued, running or waiting' : 'completed without success';
    if (!matched) {
      this.show(`No ${which} run matches (${this.describe()}).`);
      return;
    }
    if (!window.confirm(`${what === 'cancel' ? 'Cancel' : 'Retry'} all ${plural(matched, 'run')} that match (${this.describe()})?`)) {
      this.show(`Nothing was ${what === 'cancel' ? 'cancelled' : 'retried'}.`);
      return;
    }
    await this.run(what, filter, matched);
  }

  async run(what, filter, total) {
    const doing = what === 'cancel' ? 'Cancelling' : 'Retrying';
    this.job = { what, filter, total, seen: new Set(), since: new Date(Date.now() - 5000).toISOString() };
    this.update();
    this.progress.max = total;
    this.progress.value = 0;
    this.show(`${doing} ${plural(total, 'run')}…`, true);
    try {
      const { body } = await this.post(what, { filter, limit: total });
      const done = what === 'cancel' ? 'Cancelled' : 'Retried';
      this.progress.value = body.acted;
      this.show(`${done} ${body.acted.toLocaleString('en')} of ${plural(body.matched, 'matching run')}.`, false);
    } catch (err) {
      const p = err.problem || {};
      const far = p.acted !== undefined ? ` (${p.acted} of ${p.matched} done)` : '';
      this.show(`Could not ${what}: ${err.message}${far}`);
    } finally {
      this.job = null;
      this.update();
    }
  }

  // The stream's events: how far the action under way has got.
  take(batch) {
    const j = this.job;
    if (!j) return;
    for (const { kind, run } of batch) {
      if (kind !== 'status' || j.seen.has(run.id)) continue;
      if (j.what === 'cancel') {
        const stopped = run.status === 'cancelling' || (run.status === 'completed' && run.outcome === 'cancelled');
        if (!stopped || run.created_at >= j.filter.created_before) continue;
        if (j.filter.type && run.type !== j.filter.type) continue;
      } else if (!run.retry_of || run.created_at < j.since || (j.filter.type && run.type !== j.filter.type)) {
        continue;
      }
      j.seen.add(run.id);
    }
    const n = Math.min(j.seen.size, j.total);
    if (n > this.progress.value) {
      this.progress.value = n;
      this.msg.textContent = `${j.what === 'cancel' ? 'Cancelling' : 'Retrying'}… ${n.toLocaleString('en')} of ${plural(j.total, 'run')}`;
    }
  }
}
