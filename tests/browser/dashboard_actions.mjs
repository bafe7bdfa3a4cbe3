// tests/browser/dashboard_actions.mjs — a new user opens runs in the
// dashboard, at 1280 px and at 360 px wide, and sees only the actions that
// apply to each, as they are on the screen (not as the DOM says):
// - a run that succeeded: no action at all (no Approve or Reject, no
//   Cancel, no Retry) and no "waits for approval" box;
// - a run that failed, and one that was cancelled: Retry only;
// - a queued run (due far ahead) and a running one: Cancel only;
// - a run awaiting approval: Approve, Reject, Cancel, and the box that
//   says it waits for approval.
// Each detail is screenshotted (browser-artifacts/actions-<run>-<width>.png)
// through the harness, which fails if anything meant to be hidden is on
// the screen.
//
// Needs what cors.mjs needs (see there); exits 77 when playwright-core
// or chromium is missing.
import { join } from 'node:path';
import {
  actionsSeen, api, checker, cleanup, connection, createDb, detailClosed, detailOf, dirs,
  fieldSeen, freePort, launch, loadPlaywright, runRow, screenshot, seen, startOpsrun,
  stopOpsrun, tail, until, watch,
} from './lib/harness.mjs';

const { check, failures } = checker();
const LATER = '2999-01-01T00:00:00Z';
const WAITS = 'This run waits for approval';

async function post(base, path, body) {
  const r = await api(base, path, { method: 'POST', body });
  if (r.status >= 300) throw new Error(`POST ${path} answered ${r.status}: ${r.text}`);
  return r.json;
}

async function runIn(base, id, want) {
  return until(`run ${id} to be ${JSON.stringify(want)}`, async () => {
    const r = (await api(base, `/runs/${id}`)).json;
    return Object.entries(want).every(([k, v]) => r[k] === v) ? r : null;
  });
}

// One run in each state, with what its detail must offer, in the order a
// person would read the buttons.
async function makeRuns(base) {
  const alert = async (type, data, extra) =>
    (await post(base, '/alerts', { alert_type: type, data, ...extra })).run_id;
  const runs = {
    succeeded: await alert('demo', { duration_ms: 0, steps: 1 }),
    failed: await alert('demo', { duration_ms: 0, steps: 1, fail: 'permanent' }),
    cancelled: await alert('demo', { n: 1 }, { run_at: LATER }),
    queued: await alert('demo', { n: 2 }, { run_at: LATER }),
    running: await alert('demo', { duration_ms: 600000, steps: 600 }),
    approval: await alert('gated', { n: 3 }),
  };
  await post(base, `/runs/${runs.cancelled}/cancel`);
  await runIn(base, runs.succeeded, { outcome: 'succeeded' });
  await runIn(base, runs.failed, { outcome: 'failed' });
  await runIn(base, runs.cancelled, { outcome: 'cancelled' });
  await runIn(base, runs.running, { status: 'running' });
  await runIn(base, runs.approval, { status: 'waiting' });
  return [
    { name: 'succeeded', what: 'a run that succeeded', id: runs.succeeded, status: 'completed', actions: [] },
    { name: 'failed', what: 'a run that failed', id: runs.failed, status: 'completed', actions: ['Retry run'] },
    { name: 'cancelled', what: 'a cancelled run', id: runs.cancelled, status: 'completed', actions: ['Retry run'] },
    { name: 'queued', what: 'a queued run', id: runs.queued, status: 'queued', actions: ['Cancel run'] },
    { name: 'running', what: 'a running run', id: runs.running, status: 'running', actions: ['Cancel run'] },
    { name: 'approval', what: 'a run awaiting approval', id: runs.approval, status: 'waiting', actions: ['Cancel run', 'Approve', 'Reject'] },
  ];
}

// Opens each run from the table as a person would (a click on its row)
// and compares the actions on the screen with those that apply.
async function look(browser, base, runs, art, width, height) {
  const problems = [];
  const page = await (await browser.newContext({ viewport: { width, height } })).newPage();
  const w = watch(page, problems);
  await page.goto(base + '/');
  await connection(page, /^live$/);
  for (const run of runs) {
    const row = runRow(page, run.id);
    await row.waitFor({ state: 'visible', timeout: 15000 });
    await row.click();
    await detailOf(page, run.id);
    // the timeline is shown once the run was read again from the server
    await until(`the detail to read ${run.status}`, async () => (await fieldSeen(page, 'Status')) === run.status);
    const shot = `actions-${run.name}-${width}.png`;
    try {
      await screenshot(page, join(art, shot));
      check(true, `${width} px, ${run.name}: nothing hidden is on the screen (${shot})`);
    } catch (e) {
      check(false, `${width} px, ${run.name}: ${e.message}`);
    }
    const actions = await actionsSeen(page);
    check(JSON.stringify(actions) === JSON.stringify(run.actions),
      `${width} px, ${run.what} offers ${run.actions.length ? run.actions.join(', ') : 'no action'} ` +
      `(on the screen: ${actions.length ? actions.join(', ') : 'none'})`);
    const box = await page.getByText(WAITS).isVisible();
    const wants = run.name === 'approval';
    check(box === wants, `${width} px, ${run.what} ${wants ? 'says' : 'does not say'} "${WAITS}"`);
    if (wants) {
      const state = await fieldSeen(page, 'Approval');
      check(/^pending: in /.test(state || ''), `${width} px, and until when (${state})`);
    }
    await page.keyboard.press('Escape');
    await detailClosed(page);
  }
  const narrow = await page.evaluate(() => document.documentElement.scrollWidth);
  check(narrow <= width, `${width} px: nothing scrolls sideways (${narrow})`);
  check(await seen(page, '#bulk-box') === null, `${width} px: no bulk action message before any bulk action`);
  w.closing = true;
  await page.context().close();
  for (const p of problems) console.log('  ' + p);
  check(problems.length === 0, `${width} px: no console error, failed request or error answer (${problems.length})`);
}

async function main() {
  const pw = loadPlaywright();
  const { tmp, art } = dirs('dashboard-actions');
  const log = join(tmp, 'opsrun.log');
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const proc = await startOpsrun({ port, db: createDb('browser_dashboard_actions'), log, tmp, config: {
    queue: { shutdown_grace_s: 1 },
    run_types: { gated: { action: 'simulate', params: { duration_ms: 0 }, approval: { timeout_s: 3600 } } },
  } });
  let browser;
  try {
    const runs = await makeRuns(base);
    browser = await launch(pw);
    await look(browser, base, runs, art, 1280, 800);
    await look(browser, base, runs, art, 360, 740);
    for (const r of runs) if (r.status !== 'completed') await api(base, `/runs/${r.id}/cancel`, { method: 'POST' });
  } catch (e) {
    check(false, `the test ran to its end: ${e.stack || e}`);
  } finally {
    if (browser) await browser.close();
    await stopOpsrun(proc);
  }
  check(proc.exitCode === 0, `opsrun exited cleanly (status ${proc.exitCode}, signal ${proc.signalCode})`);
  console.log(`screenshots in ${art}`);
  if (failures.length) {
    console.error(`dashboard_actions.mjs: ${failures.length} failed; opsrun's log ${log}:\n${tail(log)}`);
    process.exit(1);
  }
  cleanup(tmp);
}

main().catch((e) => {
  console.error('dashboard_actions.mjs:', e);
  process.exit(1);
});
