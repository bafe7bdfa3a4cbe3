// tests/browser/dashboard_restart.mjs — the dashboard across a server
// crash: a run is followed in the detail view, opsrun is killed (SIGKILL)
// mid-run and started again on the same port and database. The page must
// show that it lost the connection, reconnect by itself (resuming the
// stream from the last event id it had), and end with the run completed
// and a timeline equal to GET /runs/{id}/events: no event missing, none
// twice. Then opsrun is started again on a new, empty database: the
// page's last event id is unknown there, the stream answers with a
// reset, and the page must start over, showing the new database's runs
// and none of the old one's.
//
// Needs what cors.mjs needs (see there); exits 77 when playwright-core
// or chromium is missing.
import { join } from 'node:path';
import {
  api, checker, createDb, dirs, freePort, killed, launch, loadPlaywright, startOpsrun,
  stopOpsrun, submit, tail, until, watch, cleanup,
} from './lib/harness.mjs';

const { check, failures } = checker();

// A short heartbeat, orphan limit and orphan scan, so the new process
// rescues the run the killed one held within seconds.
const CONFIG = {
  queue: { progress_interval_ms: 0, heartbeat_interval_s: 1, orphan_after_s: 3,
    orphan_scan_interval_s: 1, shutdown_grace_s: 1 },
};

const timeline = (page) => page.$$eval('#d-events li', (li) => li.map((x) => Number(x.dataset.eventId)));

async function main() {
  const pw = loadPlaywright();
  const { tmp } = dirs('dashboard-restart');
  const log = join(tmp, 'opsrun.log');
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const db = createDb('browser_dashboard_restart');
  let proc = await startOpsrun({ port, db, log, tmp, config: CONFIG });
  let browser;
  const problems = [];
  try {
    browser = await launch(pw);
    const page = await (await browser.newContext({ viewport: { width: 1200, height: 800 } })).newPage();
    const w = watch(page, problems);
    await page.goto(base + '/');
    await page.waitForSelector('#conn[data-state="live"]');
    const id = await submit(base, { duration_ms: 6000, steps: 12 });
    await until('the run on the page', () => page.$(`tr.run[data-id="${id}"]`));
    await page.click(`tr.run[data-id="${id}"]`);
    await page.waitForSelector('#d-events[data-loaded="true"]');
    await until('a few progress events', async () => (await timeline(page)).length >= 5);
    const before = await timeline(page);

    w.closing = true; // the stream and polls fail while the server is away
    await killed(proc);
    await until('the page to notice', async () => (await page.getAttribute('#conn', 'data-state')) !== 'live');
    check(true, `the page showed it lost the connection (${await page.textContent('#conn')})`);
    proc = await startOpsrun({ port, db, log, tmp, config: CONFIG });
    await until('the page to reconnect', async () => (await page.getAttribute('#conn', 'data-state')) === 'live');
    w.closing = false;
    check(true, 'the page reconnected by itself');

    const done = await until('the run to complete', async () => {
      const r = (await api(base, `/runs/${id}`)).json;
      return r.status === 'completed' ? r : null;
    }, 60000);
    check(done.outcome === 'succeeded' && done.attempt >= 2,
      `the run was rescued and succeeded (${done.outcome}, attempt ${done.attempt})`);
    const real = (await api(base, `/runs/${id}/events`)).json.events.map((e) => e.id);
    let shown = [];
    try {
      await until('the timeline to catch up', async () => {
        shown = await timeline(page);
        return shown.length >= real.length && shown[shown.length - 1] === real[real.length - 1];
      });
    } catch { /* compared below */ }
    check(new Set(shown).size === shown.length, `no event shows twice (${shown.length} shown)`);
    check(JSON.stringify(shown) === JSON.stringify(real),
      `the timeline equals GET /runs/{id}/events: ${before.length} before the crash, ` +
      `${shown.length} shown, ${real.length} in the database` +
      (JSON.stringify(shown) === JSON.stringify(real) ? '' : ` (shown ${shown}, real ${real})`));
    const row = await page.$eval(`tr.run[data-id="${id}"]`, (tr) => tr.children[3].textContent);
    check(row === 'succeeded', `the table shows the run succeeded (${row})`);
    await page.keyboard.press('Escape');

    w.closing = true;
    await stopOpsrun(proc);
    await until('the page to notice', async () => (await page.getAttribute('#conn', 'data-state')) !== 'live');
    proc = await startOpsrun({ port, db: createDb('browser_dashboard_reset'), log, tmp, config: CONFIG });
    await until('the page to reconnect', async () => (await page.getAttribute('#conn', 'data-state')) === 'live');
    w.closing = false;
    const fresh = await submit(base, { duration_ms: 200, steps: 1 });
    const after = await until('the new database\'s run alone', async () => {
      const ids = await page.$$eval('tr.run', (rows) => rows.map((r) => r.dataset.id));
      return ids.length === 1 && ids[0] === fresh ? ids : null;
    }).catch(() => null);
    const shownNow = await page.$$eval('tr.run', (rows) => rows.map((r) => r.dataset.id));
    check(after !== null, `after a reset the page shows the new database's run alone (${shownNow})`);
  } catch (e) {
    check(false, `the test ran to its end: ${e.stack || e}`);
  } finally {
    if (browser) await browser.close();
    await stopOpsrun(proc);
  }
  for (const p of problems) console.log('  ' + p);
  check(problems.length === 0, `no console error, page error, failed request or error answer (${problems.length})`);
  if (failures.length) {
    console.error(`dashboard_restart.mjs: ${failures.length} failed; opsrun's log ${log}:\n${tail(log)}`);
    process.exit(1);
  }
  cleanup(tmp);
}

main().catch((e) => {
  console.error('dashboard_restart.mjs:', e);
  process.exit(1);
});
