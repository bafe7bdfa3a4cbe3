// web/detail.js — one run: its fields, input, result, error, counts and
// failures, the run it follows up and its follow-ups, and its event
// timeline: GET /runs/{id}/events once, then the events of the page's one
// stream (no second connection), kept by event id so that none shows
// twice. Only the actions that apply to the run are shown: Cancel for a
// queued, running or waiting run, Retry for one that completed without
// success, Approve and Reject (with a comment box) for one that waits for
// approval; each asks first. A run that waits for approval shows when it
// expires and what happens then; a decided one, the decision.
//
// A stream event says what the run was at that moment, not the event's
// message; the message is what a notification or follow_up event is about,
// so such an event has the run's events read again (once per burst). The
// follow-ups (GET /runs?parent_id=) are read when the detail opens and
// when a follow_up event comes; their status follows the stream.
//
// A waiting run's poll schedule (the run's "poll"): the next check and the
// end of the wait count down every second on the page's own clock, with
// no request. Checks write no event, so once the next check is due the run
// is read again, once (and again after 1 s, 2 s, ... up to 30 s while a
// check is in flight), for the new count and the next check time.
//
// Above the fields, the run's log, one attempt at a time, live while the
// run runs (web/logview.js: a stream of its own while the detail is open).
//
// A run with a concurrency key shows it (key, group, max_running,
// strategy). Why a queued run waits (its key, and the runs that hold it,
// each a link; or its tenant's cap) is only in GET /runs/{id}: lists and
// streams do not carry it. The page keeps it from the last read of the
// open run (this.wait), shows it while the run stays queued, and reads the
// run again (at most once a second) when an event comes of a run that may
// change it: a holder, a run of the same key, or, for a tenant's cap, a
// run of the same tenant.
import { api } from './api.js';
import { awaitsApproval } from './runs.js';
import { LogView } from './logview.js';

const REFRESH_MAX_MS = 30000;
const EVENTS_READ_MS = 250; // a burst of events with messages: one read after it
const WAIT_READ_MS = 1000; // why a run waits: read again at most this often

// The run as lists and streams have it: without what only its detail
// carries (why it waits), which the page keeps apart (Detail.wait).
function listed(run) {
  if (!run || (run.waiting_for === undefined && !(run.concurrency && run.concurrency.holders))) return run;
  const { waiting_for: _, ...rest } = run;
  if (rest.concurrency) {
    const { holders: __, ...conc } = rest.concurrency;
    rest.concurrency = conc;
  }
  return rest;
}

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = text;
  return e;
}

function time(ts) {
  if (!ts) return '–';
  const d = new Date(ts);
  return d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

function json(v) {
  return JSON.stringify(v, null, 2);
}

// 5s, 4m 05s, 2h 03m.
function span(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  const pad = (n) => String(n).padStart(2, '0');
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${pad(s % 60)}s`;
  return `${Math.floor(s / 3600)}h ${pad(Math.floor(s / 60) % 60)}m`;
}

// "in 12s (at …)" for a time ahead, `late` once it has passed.
function until(ts, now, late) {
  const ms = Date.parse(ts) - now;
  return `${ms > 0 ? 'in ' + span(ms) : late} (at ${time(ts)})`;
}

export class Detail {
  constructor({ runs, limits, onChanged, onOpenRun, onClosed }) {
    this.runs = runs;
    this.limits = limits; // web/limits.js: a queued run may wait for its type's limit
    this.onChanged = onChanged; // (run) a run read here, for the table
    this.onOpenRun = onOpenRun;
    this.onClosed = onClosed;
    this.dlg = document.getElementById('detail');
    this.body = document.getElementById('d-body');
    this.list = document.getElementById('d-events');
    this.msg = document.getElementById('d-msg');
    this.cancelBtn = document.getElementById('d-cancel');
    this.retryBtn = document.getElementById('d-retry');
    this.approvalBox = document.getElementById('d-approval');
    this.comment = document.getElementById('d-comment');
    this.id = null;
    this.events = new Map(); // event id → event
    this.dirty = false;
    this.clocks = []; // {el, text(now)}: the countdowns on show
    this.timer = 0; // ticks them while the detail is open
    this.refreshAt = 0; // when to read a waiting run again (0: no need)
    this.refreshMs = 1000; // the wait before the next read while none is scheduled
    this.reading = false;
    this.followUps = []; // the runs this one's end created, newest first
    this.eventsTimer = 0;
    this.shown = null; // the run as last drawn
    this.limitShown = false; // the run as last drawn has its rate limit row
    this.wait = null; // {id, waitingFor, holders}: why the open run waits, as last read
    this.waitTimer = 0; // a read of the open run for it, scheduled
    this.waitReadAt = 0; // when the last such read began
    document.getElementById('d-close').addEventListener('click', () => this.dlg.close());
    this.dlg.addEventListener('close', () => {
      this.id = null;
      this.wait = null;
      clearTimeout(this.waitTimer);
      this.waitTimer = 0;
      clearInterval(this.timer);
      this.timer = 0;
      this.log.close();
      this.onClosed();
    });
    this.cancelBtn.addEventListener('click', () => this.act('cancel'));
    this.retryBtn.addEventListener('click', () => this.act('retry'));
    document.getElementById('d-approve').addEventListener('click', () => this.decide('approve'));
    document.getElementById('d-reject').addEventListener('click', () => this.decide('reject'));
    this.log = new LogView(); // the run's log, above the fields and the timeline
    this.logSection = document.querySelector('.d-log');
  }

  async open(id) {
    this.id = id;
    this.events = new Map();
    this.list.replaceChildren();
    this.msg.textContent = '';
    this.comment.value = '';
    this.list.dataset.loaded = 'false';
    this.refreshAt = 0;
    this.refreshMs = 1000;
    this.followUps = [];
    this.wait = null;
    clearTimeout(this.waitTimer);
    this.waitTimer = 0;
    const known = this.runs.get(id);
    this.renderRun(known || { id });
    if (!this.dlg.open) this.dlg.showModal();
    if (!this.timer) this.timer = setInterval(() => this.tick(), 1000);
    this.log.open(id, known);
    this.readFollowUps(id);
    try {
      let [{ body: run }, { body: ev }] = await Promise.all([
        api(`/runs/${encodeURIComponent(id)}`),
        api(`/runs/${encodeURIComponent(id)}/events`),
      ]);
      if (this.id !== id) return;
      run = this.tookDetail(run);
      this.log.runChanged(this.runs.get(id) || run);
      for (const e of ev.events) this.events.set(e.id, e);
      this.list.dataset.loaded = 'true';
      this.renderRun(this.runs.get(id) || run);
      this.renderEvents();
    } catch (err) {
      if (this.id === id) this.msg.textContent = 'Could not read the run: ' + err.message;
    }
  }

  // The page's stream started over (a reconnect without an id, a reset):
  // what happened to the open run while nothing came is read back.
  async reread() {
    const id = this.id;
    if (!id) return;
    try {
      // The run and its timeline together: a status that moved on beside
      // a timeline that has not would contradict itself on the screen.
      const [{ body }] = await Promise.all([
        api(`/runs/${encodeURIComponent(id)}`),
        this.readEvents(id),
      ]);
      if (this.id !== id) return;
      const run = this.tookDetail(body);
      const r = this.runs.get(id) || run;
      this.renderRun(r);
      this.log.runChanged(r);
    } catch {
      /* the next event, or the next reconnect, brings it */
    }
  }

  // The stream's events of this run (called with each frame's batch).
  take(batch) {
    if (!this.id) return;
    let changed = false;
    let kids = false; // a follow-up the list does not have yet
    let messages = false; // an event whose message the stream does not carry
    for (const { kind, id, run } of batch) {
      if (run.parent_id === this.id) {
        changed = true;
        kids = kids || !this.followUps.some((f) => f.id === run.id);
      }
      if (run.id !== this.id) continue;
      changed = true;
      kids = kids || kind === 'follow_up';
      if (!id || kind === 'snapshot' || this.events.has(id)) continue;
      this.events.set(id, {
        id, run_id: run.id, type: kind, status: run.status, outcome: run.outcome,
        progress: run.progress, step: run.step, message: null, created_at: null,
      });
      messages = messages || kind === 'notification' || kind === 'follow_up' || kind === 'step';
    }
    if (kids) this.readFollowUps(this.id);
    if (messages) this.readEventsSoon();
    if (batch.some(({ run }) => this.concernsWait(run))) this.readWaitSoon();
    if (changed) {
      this.renderRun(this.runs.get(this.id));
      this.log.runChanged(this.runs.get(this.id));
      if (this.list.dataset.loaded === 'true') this.renderEvents();
    }
  }

  field(dl, name, value) {
    dl.append(el('dt', null, name), el('dd', null, value === null || value === undefined || value === '' ? '–' : String(value)));
  }

  // A field the run may not have yet, or ever (no worker took a queued
  // run, a run without a remote job has no external id): left out then.
  maybeField(dl, name, value) {
    if (value !== null && value !== undefined && value !== '') this.field(dl, name, value);
  }

  // A button that opens run id in this detail.
  runLink(id) {
    const a = el('button', 'link', id);
    a.type = 'button';
    a.dataset.run = id;
    a.addEventListener('click', () => this.onOpenRun(id));
    return a;
  }

  linkField(dl, name, id) {
    dl.append(el('dt', null, name), el('dd'));
    dl.lastChild.append(this.runLink(id));
  }

  renderRun(r) {
    if (!r) return;
    this.shown = r;
    // A workflow runs no command of its own: it has no log (its steps do).
    this.logSection.hidden = !!r.workflow;
    if (r.workflow && this.log.id) this.log.close();
    document.getElementById('d-title').textContent = r.id;
    const b = this.body;
    b.replaceChildren();
    const waiting = this.waitingLine(r);
    if (waiting) b.append(waiting);
    const dl = el('dl');
    this.field(dl, 'Type', r.type);
    this.field(dl, 'Status', r.status);
    this.field(dl, 'Outcome', r.outcome);
    const bar = el('div', r.status === 'completed' ? 'bar done' : 'bar');
    const fill = el('i');
    fill.style.transform = `scaleX(${Math.max(0, Math.min(100, r.progress || 0)) / 100})`;
    bar.append(fill, el('span', null, `${r.progress ?? 0}%${r.step ? ' ' + r.step : ''}`));
    dl.append(el('dt', null, 'Progress'), el('dd'));
    dl.lastChild.append(bar);
    if (r.concurrency) this.renderConcurrency(dl, r);
    if (!r.workflow) this.field(dl, 'Attempt', r.attempt !== undefined ? `${r.attempt} of ${r.max_attempts}` : null);
    this.field(dl, 'Initiator', r.initiator);
    this.field(dl, 'Tenant', r.tenant);
    this.field(dl, 'Priority', r.priority);
    this.maybeField(dl, 'External id', r.external_id);
    this.maybeField(dl, 'Worker', r.worker_id);
    this.field(dl, 'Created', time(r.created_at));
    this.field(dl, 'Due', time(r.run_at));
    this.maybeField(dl, 'Started', r.started_at && time(r.started_at));
    this.maybeField(dl, 'Completed', r.completed_at && time(r.completed_at));
    this.field(dl, 'Updated', time(r.updated_at));
    this.clocks = [];
    this.limitShown = false;
    if (r.schedule) {
      const slot = r.schedule.slot ? ` (slot ${time(r.schedule.slot)})` : ' (triggered)';
      this.field(dl, 'Schedule', r.schedule.name + slot);
    }
    if (r.approval) this.renderApproval(dl, r);
    if ((r.status === 'queued' || r.status === 'waiting') && this.limits) this.renderLimit(dl, r);
    if (r.poll) this.renderPoll(dl, r);
    if (r.retry_of) this.linkField(dl, 'Retry of', r.retry_of);
    if (r.parent_id) {
      this.linkField(dl, r.workflow_step ? `Step ${r.workflow_step} of` : 'Follow-up of', r.parent_id);
      dl.lastChild.id = 'd-parent';
    }
    b.append(dl);
    if (r.workflow) this.renderWorkflow(r);
    this.renderFollowUps(!!r.workflow);
    const block = (title, v) => {
      if (v === null || v === undefined) return;
      b.append(el('h3', null, title), el('pre', null, json(v)));
    };
    block('Input', r.input);
    block('Result', r.result);
    block('Error', r.error);
    if (r.summary_counts) {
      b.append(el('h3', null, 'Summary counts'));
      const sc = el('dl');
      for (const [k, v] of Object.entries(r.summary_counts)) this.field(sc, k, typeof v === 'object' ? json(v) : v);
      b.append(sc);
    }
    if (Array.isArray(r.failure_summary) && r.failure_summary.length) {
      b.append(el('h3', null, 'Failures'));
      const ul = el('ul');
      for (const f of r.failure_summary) ul.append(el('li', null, f.code ? `${f.code}: ${f.message ?? ''}` : json(f)));
      b.append(ul);
    }
    block('Context', r.context);
    // What does not apply is not shown (a run not read yet has no status:
    // nothing applies until it is).
    this.cancelBtn.hidden = !['queued', 'running', 'waiting'].includes(r.status);
    this.retryBtn.hidden = !(r.status === 'completed' && r.outcome !== 'succeeded');
    this.approvalBox.hidden = !awaitsApproval(r);
  }

  // A run read from GET /runs/{id}: why it waits is kept here, the rest
  // goes to the page's runs. Returns the run as lists have it.
  tookDetail(run) {
    const c = run.concurrency;
    this.wait = {
      id: run.id,
      waitingFor: run.waiting_for || null,
      holders: (c && c.holders) || [],
    };
    const plain = listed(run);
    this.onChanged(plain);
    return plain;
  }

  // Whether an event of run may change why the open run waits: it is the
  // open run, holds its key or shares it, or, while the open run waits for
  // its tenant's cap, is of the same tenant.
  concernsWait(run) {
    const open = this.id && this.runs.get(this.id);
    const w = this.wait;
    if (!open || !w || w.id !== this.id || open.status !== 'queued') return false;
    if (run.id === open.id || w.holders.includes(run.id)) return true;
    const a = open.concurrency;
    const b = run.concurrency;
    if (a && b && run.tenant === open.tenant && a.group === b.group && a.key === b.key) return true;
    return !!w.waitingFor && w.waitingFor.reason === 'tenant_cap' && run.tenant === open.tenant;
  }

  // Reads the open run again for why it waits, at most once a second.
  readWaitSoon() {
    if (this.waitTimer) return;
    const ms = Math.max(0, this.waitReadAt + WAIT_READ_MS - Date.now());
    this.waitTimer = setTimeout(() => {
      this.waitTimer = 0;
      this.waitReadAt = Date.now();
      if (this.id && !this.reading) this.read(this.id);
    }, ms);
  }

  // The run's concurrency key: the key, its group, how many of its runs
  // may run at once, and the strategy.
  renderConcurrency(dl, r) {
    const c = r.concurrency;
    const key = c.key === null ? 'no key (it could not be made from the input)' : `key ${c.key}`;
    this.field(dl, 'Concurrency', `${key}, group ${c.group}: at most ${c.max_running} running, strategy ${c.strategy}`);
    dl.lastChild.id = 'd-concurrency';
  }

  // The line that says why the run waits (null when it does not): its
  // key and the runs that hold it, or its tenant's cap.
  waitingLine(r) {
    const w = this.wait;
    if (r.status !== 'queued' || !w || w.id !== r.id || !w.waitingFor) return null;
    const dd = el('p', 'd-waiting');
    dd.id = 'd-waiting';
    if (w.waitingFor.reason === 'tenant_cap') {
      const n = w.waitingFor.max_running;
      dd.textContent = `Waiting: tenant ${r.tenant} is at its cap of ${n} running run${n === 1 ? '' : 's'}`;
      return dd;
    }
    const c = r.concurrency || {};
    const what = `Waiting for key ${c.key} (group ${c.group})`;
    if (!w.holders.length) {
      dd.textContent = `${what}: it is free again, the run starts at the next claim`;
      return dd;
    }
    dd.append(`${what}: held by `);
    w.holders.forEach((id, i) => {
      const h = this.runs.get(id);
      if (i) dd.append(', ');
      dd.append(this.runLink(id));
      if (h && h.status) dd.append(` (${h.status})`);
    });
    const more = w.waitingFor.running - w.holders.length;
    if (more > 0) dd.append(` and ${more} more`);
    return dd;
  }

  // The rate limits were read (web/limits.js, every few seconds): a queued
  // or waiting run on show without its rate limit row gets it once its
  // type's limit is spent, also when the limits came after the run (the
  // row, once drawn, follows the limit on the clock).
  limitsChanged() {
    const r = this.shown;
    if (!this.id || !r || this.limitShown || !(r.status === 'queued' || r.status === 'waiting')) return;
    if (this.limits.spentFor(r.type)) this.renderRun(this.runs.get(this.id) || r);
  }

  // A run of a type with approval: pending (and until when, and what then)
  // or the decision, who made it, when, and the comment.
  renderApproval(dl, r) {
    const a = r.approval;
    const then = a.on_timeout === 'approve' ? 'approved' : 'rejected';
    if (awaitsApproval(r)) {
      this.clock(dl, 'Approval', 'd-approval-state', (now) =>
        `pending: ${until(a.expires_at, now, 'expiring now')}, then ${then}`);
      this.tick();
      return;
    }
    const what = {
      approved: 'approved', rejected: 'rejected', cancelled: 'cancelled while pending',
      expired: `expired: ${then} on timeout`, pending: 'pending',
    }[a.state] || a.state;
    this.field(dl, 'Approval', `${what}${a.decided_by ? ' by ' + a.decided_by : ''}${a.decided_at ? ' at ' + time(a.decided_at) : ''}`);
    dl.lastChild.id = 'd-approval-state';
    if (a.comment) {
      this.field(dl, 'Comment', a.comment);
      dl.lastChild.id = 'd-approval-comment';
    }
  }

  // Approve or reject the run on show, with the comment box's text.
  async decide(what) {
    const id = this.id;
    const q = what === 'approve' ? `Approve run ${id}? It will start.` : `Reject run ${id}? It will not run.`;
    if (!window.confirm(q)) return;
    const comment = this.comment.value.trim();
    this.msg.textContent = what === 'approve' ? 'Approving…' : 'Rejecting…';
    try {
      const { body } = await api(`/runs/${encodeURIComponent(id)}/${what}`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify(comment ? { comment } : {}),
      });
      this.onChanged(body);
      this.comment.value = '';
      this.msg.textContent = what === 'approve' ? 'Approved.' : 'Rejected.';
      if (this.id === id) this.renderRun(this.runs.get(id) || body);
    } catch (err) {
      this.msg.textContent = `Could not ${what}: ${err.message}`;
    }
  }

  // A workflow's steps in columns by depth (each step one column right of
  // the deepest step it needs; the steps come needs first), each with its
  // name, its run type, what it waits for ("after a, b · when failed"),
  // its state and, once it has one, a link to its run. A step that runs
  // shows its run's state as the stream last gave it, which comes before
  // the workflow's own next event.
  renderWorkflow(r) {
    const steps = Object.entries(r.workflow.steps || {});
    const depth = new Map();
    const cols = [];
    for (const [name, s] of steps) {
      const d = Math.max(-1, ...s.needs.map((n) => depth.get(n) ?? 0)) + 1;
      depth.set(name, d);
      (cols[d] ||= []).push([name, s]);
    }
    const wrap = el('div', 'wf');
    wrap.id = 'd-workflow';
    for (const col of cols) {
      const c = el('ol', 'wf-col');
      for (const [name, s] of col || []) c.append(this.stepBox(name, s));
      wrap.append(c);
    }
    this.body.append(el('h3', null, 'Steps'), wrap);
  }

  stepBox(name, s) {
    const live = s.run_id && s.state !== 'skipped' ? this.runs.get(s.run_id) : null;
    const state = live ? (live.status === 'completed' ? live.outcome : live.status) : s.state;
    const li = el('li', 'wf-step');
    li.dataset.step = name;
    li.append(el('span', 'wf-name', name), el('span', 'wf-type', s.run_type));
    if (s.needs.length) {
      li.append(el('span', 'wf-after', `after ${s.needs.join(', ')}${s.when !== 'succeeded' ? ' · when ' + s.when : ''}`));
    }
    li.append(el('span', 'wf-state o-' + state, state));
    if (s.run_id) li.append(this.runLink(s.run_id));
    return li;
  }

  // Each follow-up, and each step of a run that is not a workflow's graph
  // apart: its id (a link), its step's name or its type, and its status
  // (its outcome once it ended) as the stream last said.
  renderFollowUps(graphed) {
    const steps = this.followUps.filter((f) => f.workflow_step);
    const others = this.followUps.filter((f) => !f.workflow_step);
    if (steps.length && !graphed) this.renderKids('Steps', 'd-steps', steps, (r) => `${r.workflow_step} (${r.type})`);
    if (others.length) this.renderKids('Follow-ups', 'd-follow-ups', others, (r) => r.type);
  }

  renderKids(title, id, kids, what) {
    const ul = el('ul', 'follow-ups');
    ul.id = id;
    for (const f of kids) {
      const r = this.runs.get(f.id) || f;
      const li = el('li');
      li.dataset.id = r.id;
      const state = r.status === 'completed' ? el('span', 'o-' + r.outcome, r.outcome) : el('span', null, r.status);
      li.append(this.runLink(r.id), ` ${what(r)} `, state);
      ul.append(li);
    }
    this.body.append(el('h3', null, title), ul);
  }

  async readFollowUps(id) {
    try {
      const { body } = await api(`/runs?parent_id=${encodeURIComponent(id)}`);
      if (this.id !== id) return;
      this.followUps = body.runs;
      this.renderRun(this.runs.get(id) || this.shown);
    } catch {
      /* no follow-ups shown: the rest of the detail stands */
    }
  }

  readEventsSoon() {
    clearTimeout(this.eventsTimer);
    const id = this.id;
    this.eventsTimer = setTimeout(() => this.readEvents(id), EVENTS_READ_MS);
  }

  // The run's events again, for the messages the stream does not carry.
  async readEvents(id) {
    try {
      const { body } = await api(`/runs/${encodeURIComponent(id)}/events`);
      if (this.id !== id) return;
      for (const e of body.events) this.events.set(e.id, e);
      if (this.list.dataset.loaded === 'true') this.renderEvents();
    } catch {
      /* the events from the stream stay, without their messages */
    }
  }

  // A field whose text follows the clock: written now and at every tick.
  clock(dl, name, id, text) {
    const dd = el('dd');
    dd.id = id;
    dl.append(el('dt', null, name), dd);
    this.clocks.push({ el: dd, text });
  }

  // A run whose type's rate limit has no unit left waits for it: "waiting
  // for rate limit api, next unit in 3s", counted down on the page's clock.
  renderLimit(dl, r) {
    const l = this.limits.spentFor(r.type);
    if (!l) return; // limitsChanged() draws it if the limit is spent later
    this.limitShown = true;
    this.clock(dl, 'Rate limit', 'd-rate-limit', (now) => {
      const spent = this.limits.spentFor(r.type);
      if (!spent) return `${l.name}: a unit is free`;
      const ms = Date.parse(spent.next_unit_at) - now;
      return `waiting for rate limit ${spent.name}, next unit ${ms > 0 ? 'in ' + span(ms) : 'now'}`;
    });
    this.tick();
  }

  // The poll schedule of a run that waits (or waited) on a remote job.
  renderPoll(dl, r) {
    const p = r.poll;
    const of = p.max_checks !== null && p.max_checks !== undefined ? ` of ${p.max_checks}` : '';
    if (r.status !== 'waiting') {
      const n = p.checks === 1 ? '1 check' : `${p.checks} checks`;
      const waited = r.completed_at ? ` (${span(Date.parse(r.completed_at) - Date.parse(p.waiting_since))})` : '';
      this.field(dl, 'Checks', `took ${n}${of}`);
      dl.lastChild.id = 'd-checks';
      this.field(dl, 'Waited', `from ${time(p.waiting_since)}${waited}`);
      this.scheduleRead(r);
      return;
    }
    this.field(dl, 'Waiting', `for ${r.external_id || 'its remote job'} since ${time(p.waiting_since)}`);
    this.clock(dl, 'Next check', 'd-next-check', (now) => p.next_check_at
      ? until(p.next_check_at, now, 'due now') : 'checking now');
    this.field(dl, 'Checks', `${p.checks}${of}`);
    dl.lastChild.id = 'd-checks';
    this.clock(dl, 'Gives up', 'd-give-up', (now) => p.give_up_at
      ? until(p.give_up_at, now, 'at its next check') : "when its type's poll budget runs out");
    this.scheduleRead(r);
    this.tick();
  }

  // When to read the run again: a little after its next check is due, or
  // (a check in flight, or the check not yet made) after a growing wait.
  scheduleRead(r) {
    const now = Date.now();
    const next = r.poll && r.poll.next_check_at ? Date.parse(r.poll.next_check_at) : 0;
    if (r.status !== 'waiting') {
      this.refreshAt = 0;
    } else if (next > now) {
      this.refreshAt = next + 1000;
      this.refreshMs = 1000;
    } else if (!this.refreshAt || this.refreshAt <= now) {
      this.refreshAt = now + this.refreshMs;
      this.refreshMs = Math.min(this.refreshMs * 2, REFRESH_MAX_MS);
    }
  }

  tick() {
    const now = Date.now();
    for (const c of this.clocks) {
      const t = c.text(now);
      if (c.el.textContent !== t) c.el.textContent = t;
    }
    if (this.id && this.refreshAt && now >= this.refreshAt && !this.reading) this.read(this.id);
  }

  // Reads the run again (its poll schedule moved without an event).
  async read(id) {
    this.reading = true;
    this.refreshAt = 0;
    try {
      const { body } = await api(`/runs/${encodeURIComponent(id)}`);
      if (this.id !== id) return;
      const run = this.tookDetail(body);
      this.renderRun(this.runs.get(id) || run);
    } catch {
      if (this.id === id) this.scheduleRead(this.runs.get(id) || { status: 'waiting' });
    } finally {
      this.reading = false;
    }
  }

  renderEvents() {
    const ids = [...this.events.keys()].sort((a, b) => a - b);
    const frag = document.createDocumentFragment();
    for (const id of ids) {
      const e = this.events.get(id);
      const li = el('li');
      li.dataset.eventId = String(id);
      li.dataset.progress = String(e.progress ?? '');
      li.dataset.type = e.type;
      let what;
      if (e.type === 'progress') what = `${e.progress}%${e.step ? ' ' + e.step : ''}`;
      else if (e.type === 'status') what = `${e.status}${e.outcome && e.outcome !== 'pending' ? ' ' + e.outcome : ''}${e.message ? ' — ' + e.message : ''}`;
      else what = e.message || '…'; // notification, follow_up, step: the message says it all
      li.append(el('span', 'ev-id', '#' + id), el('span', 'ev-type', e.type), el('span', null, what));
      if (e.created_at) li.title = time(e.created_at);
      frag.append(li);
    }
    this.list.replaceChildren(frag);
    this.list.dataset.count = String(ids.length);
  }

  async act(what) {
    const id = this.id;
    const q = what === 'cancel' ? `Cancel run ${id}?` : `Retry run ${id} as a new run?`;
    if (!window.confirm(q)) return;
    this.msg.textContent = what === 'cancel' ? 'Cancelling…' : 'Retrying…';
    try {
      const { status, body } = await api(`/runs/${encodeURIComponent(id)}/${what}`, { method: 'POST' });
      if (what === 'cancel') {
        this.onChanged(body);
        this.msg.textContent = status === 202 ? 'Cancel requested.' : 'Cancelled.';
        if (this.id === id) this.renderRun(this.runs.get(id));
      } else {
        this.msg.textContent = `Retried as ${body.run_id}.`;
        const open = el('button', 'link', 'Open it');
        open.type = 'button';
        open.addEventListener('click', () => this.onOpenRun(body.run_id));
        this.msg.append(' ', open);
      }
    } catch (err) {
      this.msg.textContent = `Could not ${what}: ${err.message}`;
    }
  }
}
