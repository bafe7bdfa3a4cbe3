// web/app.js — the dashboard: runs from GET /runs (newest first, older
// pages on demand), kept live by the one GET /stream; a run's detail;
// the overview strip, its completions chart and rate limits; the
// schedules; cancel and retry of all the runs the filters match. A run's
// detail has an address, #/runs/<id> (the link a notification carries):
// loading it, or going to it, opens the run. Stream events are queued and
// applied in batches
// (web/live.js: in an animation frame, at most every 100 ms), so the DOM
// changes at most once per batch whatever the event rate.
import { api, ensureToken, forgetToken } from './api.js';
import { Live } from './live.js';
import { Runs } from './runs.js';
import { Table } from './table.js';
import { Detail } from './detail.js';
import { Chart } from './chart.js';
import { startOverview } from './overview.js';
import { Schedules } from './schedules.js';
import { Limits } from './limits.js';
import { Bulk } from './bulk.js';

// Runs per GET /runs page: its largest, or ?limit=N (1 to 500) in the
// page's address.
const PAGE = Math.min(500, Math.max(1, Number(new URLSearchParams(location.search).get('limit')) || 500));

const $ = (id) => document.getElementById(id);
const runs = new Runs();
let cursor = null; // next_cursor of the last page read
let opener = null; // the element that had focus when the detail opened

const table = new Table({
  wrap: $('table-wrap'), tbody: $('rows'), table: $('runs'), runs,
  onOpen: (id) => openDetail(id),
});
const chart = new Chart($('chart'));
const bulk = new Bulk({
  runs, cancelBtn: $('bulk-cancel'), retryBtn: $('bulk-retry'), why: $('bulk-why'), box: $('bulk-box'),
  msg: $('bulk-msg'), progress: $('bulk-progress'),
});
const limits = new Limits((list) => {
  $('s-limits-box').hidden = list.length === 0;
  $('s-limits').textContent = list.map((l) => `${l.name} ${l.used}/${l.limit}`).join(', ');
  detail.limitsChanged();
});
const detail = new Detail({
  runs,
  limits,
  onChanged: (run) => {
    if (run && run.id && runs.put(run)) table.schedule();
  },
  onOpenRun: (id) => openDetail(id),
  onClosed: () => {
    if (hashRun() !== null) history.replaceState(null, '', location.pathname + location.search);
    if (opener && opener.isConnected && opener !== document.body) opener.focus();
    else table.focusSelected();
  },
});

// The run id in the page's address (#/runs/<id>), or null.
function hashRun() {
  const m = /^#\/runs\/(.+)$/.exec(location.hash);
  if (!m) return null;
  try {
    return decodeURIComponent(m[1]);
  } catch {
    return null; // a stray %
  }
}

// Opening a run writes its address, without a history entry per run.
function openDetail(id) {
  if (!detail.dlg.open) opener = document.activeElement;
  if (hashRun() !== id) history.replaceState(null, '', '#/runs/' + encodeURIComponent(id));
  detail.open(id);
}

// An address typed or pasted while the page is open, or Back to one.
function followHash() {
  const id = hashRun();
  if (id !== null && id !== detail.id) openDetail(id);
  else if (id === null && detail.dlg.open) detail.dlg.close();
}

// "1 run", "12 runs".
const nRuns = (n) => `${n} run${n === 1 ? '' : 's'}`;

function updateCount() {
  runs.refreshView();
  const shown = runs.view.length;
  const total = runs.order.length;
  $('count').textContent = shown === total ? nRuns(total) : `${shown} of ${nRuns(total)}`;
  $('older').hidden = !cursor; // nothing older to load: no button
  $('older').disabled = false;
}

// The list's server-side filters: those GET /runs takes.
function listQuery(extra) {
  const q = new URLSearchParams({ limit: String(PAGE) });
  const f = runs.filter;
  if (f.status) q.set('status', f.status);
  if (f.outcome) q.set('outcome', f.outcome);
  if (f.type) q.set('type', f.type);
  if (f.approval) q.set('approval', f.approval);
  for (const [k, v] of Object.entries(extra || {})) q.set(k, v);
  return '/runs?' + q;
}

function addTypes() {
  const sel = $('f-type');
  const have = new Set([...sel.options].map((o) => o.value));
  for (const t of [...runs.types].sort()) {
    if (have.has(t)) continue;
    const o = document.createElement('option');
    o.textContent = t;
    sel.append(o);
  }
}

function take(list) {
  let changed = false;
  for (const r of list) changed = runs.put(r) || changed;
  if (changed) {
    addTypes();
    table.schedule();
  }
  updateCount();
}

// The newest page again (a first load, a reconnect without an id, a
// reset): runs that completed while the page was not listening are read
// back, also active ones older than that page.
async function reload() {
  const { body } = await api(listQuery());
  cursor = body.next_cursor;
  take(body.runs);
  const seen = new Set(body.runs.map((r) => r.id));
  const stale = runs.order.filter((r) => r.status !== 'completed' && !seen.has(r.id)).slice(0, 100);
  for (const r of stale) {
    try {
      take([(await api(`/runs/${encodeURIComponent(r.id)}`)).body]);
    } catch {
      /* deleted by retention, or gone with its tenant: leave it */
    }
  }
}

async function older() {
  if (!cursor) return;
  $('older').disabled = true;
  const { body } = await api(listQuery({ cursor }));
  cursor = body.next_cursor;
  take(body.runs);
}

function setConn(state) {
  const c = $('conn');
  c.dataset.state = state;
  c.textContent = { live: 'live', connecting: 'connecting', reconnecting: 'reconnecting', offline: 'offline, retrying' }[state] || state;
}

const schedules = new Schedules({ onOpenRun: (id) => openDetail(id) });

let overview = null; // startOverview's answer, once main started it

const live = new Live({
  onState: setConn,
  onFresh: (why) => {
    if (why === 'reset') {
      // The event ids the page had mean nothing to the server any more (a
      // restored database, or events past retention): start over.
      runs.clear();
      cursor = null;
      table.render();
    }
    reload().catch(() => {});
    detail.reread();
  },
  onEvents: (batch) => {
    let changed = false;
    let moved = false;
    for (const { kind, run } of batch) {
      const before = runs.get(run.id);
      const wasDone = before && before.status === 'completed';
      if (runs.put(run)) changed = true;
      if (kind === 'status' && run.status === 'completed' && !wasDone) chart.add(run.outcome);
      if (kind === 'status') moved = true;
    }
    if (moved && overview) overview.soon(); // the figures by status follow
    if (changed) {
      addTypes();
      table.render(); // already in an animation frame
      updateCount();
    }
    detail.take(batch);
    schedules.take(batch);
    bulk.take(batch);
  },
});

function filters() {
  const search = $('f-search').value.trim().toLowerCase();
  const f = {
    status: $('f-status').value, outcome: $('f-outcome').value, type: $('f-type').value,
    approval: $('f-approval').value,
  };
  const listChanged = ['status', 'outcome', 'type', 'approval'].some((k) => f[k] !== runs.filter[k]);
  runs.setFilter({ ...f, search });
  bulk.update();
  table.sel = 0;
  table.wrap.scrollTop = 0;
  table.schedule();
  updateCount();
  if (listChanged) reload().then(updateCount).catch(() => {});
}

// Enter in the search box looks the text up as a run id and as an
// external id on the server, for runs older than the pages read so far.
async function lookup() {
  const s = $('f-search').value.trim();
  if (!s) return;
  const found = [];
  try {
    found.push((await api(`/runs/${encodeURIComponent(s)}`)).body);
  } catch {
    /* not a run id */
  }
  try {
    found.push(...(await api(listQuery({ external_id: s }))).body.runs);
  } catch {
    /* not valid as an external id */
  }
  take(found);
}

async function main() {
  for (const id of ['f-status', 'f-outcome', 'f-type', 'f-approval']) $(id).addEventListener('change', filters);
  $('f-search').addEventListener('input', filters);
  $('f-search').addEventListener('keydown', (e) => {
    if (e.key === 'Enter') {
      e.preventDefault();
      lookup();
    }
  });
  $('filters').addEventListener('submit', (e) => e.preventDefault());
  $('older').addEventListener('click', () => older().catch(() => updateCount()));
  $('forget').addEventListener('click', () => {
    forgetToken();
    location.reload();
  });
  setInterval(() => table.schedule(), 1000); // ages
  // A 401 asks for the token here; any other failure (the database away:
  // 503) is left to the stream, which retries by itself.
  await ensureToken().catch(() => {});
  window.addEventListener('hashchange', followHash);
  followHash();
  // The chart starts from what the server counted, not from nothing.
  api('/stats/completions').then(({ body }) => chart.seed(body)).catch(() => {});
  live.start();
  overview = startOverview();
  schedules.start();
  limits.start();
  bulk.update();
  updateCount();
}

main();
