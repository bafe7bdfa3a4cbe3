// tests/browser/dashboard_schedules.mjs — the dashboard's schedules view,
// rate limits and completions chart: the view lists the schedule with its
// next fire in its own zone and in UTC and its last run, which opens the
// run; Pause and Resume act on the server and the view follows; Trigger
// starts a run that shows in the table; a run waiting for its spent rate
// limit says so in its detail, and the overview shows the limit's use;
// the completions chart starts with what completed before the page loaded.
// A screenshot goes to the build's test directory (browser-artifacts/).
//
// Needs what cors.mjs needs (see there); exits 77 when playwright-core
// or chromium is missing.
import { join } from 'node:path';
import {
  api, checker, createDb, dirs, freePort, launch, loadPlaywright, startOpsrun, stopOpsrun,
  submit, tail, until, watch, cleanup,
} from './lib/harness.mjs';

const { check, failures } = checker();

async function main() {
  const pw = loadPlaywright();
  const { tmp, art } = dirs('dashboard-schedules');
  const log = join(tmp, 'opsrun.log');
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const proc = await startOpsrun({ port, db: createDb('browser_dashboard_schedules'), log, tmp, config: {
    queue: { shutdown_grace_s: 1 },
    rate_limits: { api: { limit: 1, per_s: 60 } },
    run_types: { limited: { action: 'simulate', rate_limit: 'api' } },
    schedules: {
      nightly: { cron: '30 2 * * *', time_zone: 'Europe/Berlin', run_type: 'demo',
        data: { duration_ms: 50 } },
    },
  } });
  let browser;
  const problems = [];
  try {
    // Completed before the page opens: the chart must show them.
    const done = [];
    for (let i = 0; i < 3; i++) done.push(await submit(base, { duration_ms: 0, steps: 1, i }));
    await until('three runs to complete', async () => {
      const r = await api(base, '/runs?status=completed');
      return r.json.runs.length >= 3;
    });

    browser = await launch(pw);
    const page = await (await browser.newContext({ viewport: { width: 1300, height: 900 } })).newPage();
    watch(page, problems);
    await page.goto(base + '/');
    await page.waitForSelector('#conn[data-state="live"]');
    const label = await until('the chart to count the earlier runs', async () => {
      const l = await page.getAttribute('#chart', 'aria-label');
      return /3 succeeded/.test(l) ? l : null;
    }, 10000).catch(() => null);
    check(label !== null, `the chart starts with the runs completed before the page (${label})`);

    await page.waitForSelector('#schedules:not([hidden]) tr[data-name="nightly"]');
    const row = await page.textContent('tr[data-name="nightly"]');
    check(/Europe\/Berlin/.test(row) && /02:30:00 Europe\/Berlin/.test(row) && /UTC/.test(row),
      `the next fire in the zone and in UTC (${row.replace(/\s+/g, ' ')})`);

    await page.click('tr[data-name="nightly"] button[data-act="pause"]');
    await page.waitForSelector('tr[data-name="nightly"] button[data-act="resume"]');
    check((await api(base, '/schedules/nightly')).json.paused === true, 'Pause paused it on the server');
    check(/paused/.test(await page.textContent('tr[data-name="nightly"]')), 'the view shows it paused');
    await page.click('tr[data-name="nightly"] button[data-act="resume"]');
    await page.waitForSelector('tr[data-name="nightly"] button[data-act="pause"]');
    check((await api(base, '/schedules/nightly')).json.paused === false, 'Resume resumed it');

    page.once('dialog', (d) => d.accept());
    await page.click('tr[data-name="nightly"] button[data-act="trigger"]');
    const started = await until('the trigger message', async () => {
      const m = /started (\S+)\./.exec(await page.textContent('#sched-msg'));
      return m && m[1];
    });
    await page.waitForSelector(`tr.run[data-id="${started}"]`);
    check(true, `the triggered run ${started} is in the table`);
    await until('its last run in the view', async () =>
      (await page.textContent('tr[data-name="nightly"]')).includes(started));
    await page.click(`tr[data-name="nightly"] button[data-run="${started}"]`);
    await page.waitForSelector('#detail[open]');
    check((await page.textContent('#d-title')) === started, 'the last run opens its detail');
    check(/nightly \(triggered\)/.test(await page.textContent('#d-body')), 'the detail names the schedule');
    await page.click('#d-close');

    // One unit a minute: the second run of the limited type waits.
    for (let i = 0; i < 2; i++) {
      const r = await api(base, '/alerts', { method: 'POST', body: { alert_type: 'limited', data: { duration_ms: 0, i } } });
      check(r.status === 202, `a run of the limited type (${r.status})`);
    }
    const queued = await until('a run waiting for the limit', async () => {
      const r = await api(base, '/runs?type=limited&status=queued');
      return r.json.runs.length ? r.json.runs[0].id : null;
    });
    await until('the overview to show the limit', async () =>
      /api 1\/1/.test(await page.textContent('#s-limits')));
    check(true, 'the overview shows the limit spent');
    await page.click(`tr.run[data-id="${queued}"]`);
    await page.waitForSelector('#detail[open]');
    const wait = await until('the rate limit line', async () => {
      const t = await page.textContent('#d-body');
      return /waiting for rate limit api, next unit in \d/.test(t) ? t : null;
    }, 10000).catch(() => null);
    check(wait !== null, 'the queued run says it waits for its rate limit');
    await page.click('#d-close');
    await page.screenshot({ path: join(art, 'dashboard-schedules.png') });
  } catch (e) {
    check(false, `the test ran to its end: ${e.stack || e}`);
  } finally {
    if (browser) await browser.close();
    await stopOpsrun(proc);
  }
  for (const p of problems) console.log('  ' + p);
  check(problems.length === 0, `no console error, failed request or error answer (${problems.length})`);
  if (failures.length) {
    console.error(`dashboard_schedules.mjs: ${failures.length} failed; opsrun's log ${log}:\n${tail(log)}`);
    process.exit(1);
  }
  cleanup(tmp);
}

main().catch((e) => {
  console.error('dashboard_schedules.mjs:', e);
  process.exit(1);
});
