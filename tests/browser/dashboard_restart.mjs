// tests/browser/dashboard_restart.mjs — the dashboard across a server
// crash: a run is followed in the detail view, opsrun is killed (SIGKILL)
// mid-run and started again on the same port and database. The page must
// show that it lost the connection (its badge, and the overview saying
// its figures are old), reconnect by itself (resuming the
// stream from the last event id it had), and end with the run completed
// and a timeline equal to GET /runs/{id}/events: no event missing, none
// twice. Then opsrun is started again on a new, empty database: the
// page's last event id is unknown there, the stream answers with a
// reset, and the page must start over, showing the new database's runs
// and none of the old one's. Read as a person sees it: the connection
// badge's text, the timeline's event numbers, the table's rows. A
// screenshot of the page while the server is away goes to the build's
// test directory (browser-artifacts/), checked for anything shown that
// the page meant to hide.
//
// Needs what cors.mjs needs (see there); exits 77 when playwright-core
// or chromium is missing.
import { join } from 'node:path';
import {
  api, checker, connection, createDb, detailOf, dirs, freePort, killed, launch, loadPlaywright,
  rowSeen, runRow, screenshot, seen, startOpsrun, stopOpsrun, submit, tableSeen, tail, timelineSeen,
  until, watch, cleanup,
} from './lib/harness.mjs';

const { check, failures } = checker();

// A short heartbeat, orphan limit and orphan scan, so the new process
// rescues the run the killed one held within seconds.
const CONFIG = {
  queue: { progress_interval_ms: 0, heartbeat_interval_s: 1, orphan_after_s: 3,
    orphan_scan_interval_s: 1, shutdown_grace_s: 1 },
};

const timeline = async (page) => (await timelineSeen(page)).map((e) => e.id);

async function main() {
  const pw = loadPlaywright();
  const { tmp, art } = dirs('dashboard-restart');
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
    await connection(page, /^live$/);
    // long enough to be running still when the page has shown a few of
    // its steps, however slowly a loaded machine draws them
    const id = await submit(base, { duration_ms: 15000, steps: 30 });
    await until('the run on the page', () => rowSeen(page, id));
    await runRow(page, id).click();
    await detailOf(page, id);
    await until('a few progress events', async () => (await timeline(page)).length >= 5);
    const before = await timeline(page);
    const pre = (await api(base, `/runs/${id}`)).json;
    check(pre.status === 'running', `the run is running when opsrun is killed (${pre.status})`);

    w.closing = true; // the stream and polls fail while the server is away
    await killed(proc);
    const lost = await connection(page, /^(reconnecting|offline, retrying)$/);
    check(true, `the page showed it lost the connection (${lost})`);
    const note = await until('the overview to say the server does not answer', async () => {
      const t = await seen(page, '#health-note');
      return /^The server does not answer: the figures are those of \d\d:\d\d:\d\dZ\.$/.test(t || '') ? t : null;
    }, 15000).catch(() => null);
    check(note !== null, `the overview says its figures are old (${note})`);
    await screenshot(page, join(art, 'dashboard-offline.png'));
    proc = await startOpsrun({ port, db, log, tmp, config: CONFIG });
    await connection(page, /^live$/);
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
    const row = (await rowSeen(page, id))?.outcome;
    check(row === 'succeeded', `the table shows the run succeeded (${row})`);
    await page.keyboard.press('Escape');

    w.closing = true;
    await stopOpsrun(proc);
    await connection(page, /^(reconnecting|offline, retrying)$/);
    proc = await startOpsrun({ port, db: createDb('browser_dashboard_reset'), log, tmp, config: CONFIG });
    await connection(page, /^live$/);
    w.closing = false;
    const fresh = await submit(base, { duration_ms: 200, steps: 1 });
    const shownIds = async () => (await tableSeen(page)).map((r) => r.run);
    const after = await until('the new database\'s run alone', async () => {
      const ids = await shownIds();
      return ids.length === 1 && ids[0] === fresh ? ids : null;
    }).catch(() => null);
    const shownNow = await shownIds();
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
