// tests/browser/dashboard_schedules.mjs — the dashboard's schedules view,
// rate limits and completions chart: the view lists the schedule with its
// next fire in its own zone and in UTC and its last run, which opens the
// run; Pause and Resume act on the server and the view follows; Trigger
// starts a run that shows in the table; a run waiting for its spent rate
// limit says so in its detail, also when the detail opened before the
// page had read the rate limits (their answer held back here), and the
// overview shows the limit's use; the completions chart's legend starts
// with what completed before the page loaded. Everything is read as a
// person sees it. Screenshots go to the build's test directory
// (browser-artifacts/), each checked for anything shown that the page
// meant to hide.
//
// Needs what cors.mjs needs (see there); exits 77 when playwright-core
// or chromium is missing.
import { join } from 'node:path';
import {
  api, checker, connection, createDb, detailClosed, detailOf, dirs, fieldSeen, freePort, launch,
  loadPlaywright, runRow, screenshot, seen, startOpsrun, stopOpsrun, submit, tail, until, watch,
  cleanup,
} from './lib/harness.mjs';

const { check, failures } = checker();
const WAITS = /^waiting for rate limit api, next unit in \d/;

// A queued run's detail opened (by its address, on a fresh page) before
// the page has the rate limits: their answer is held until the detail
// shows the run, read from the server with its events and follow-ups;
// once the limits come, the detail must say the run waits for its limit.
async function limitsLate(browser, base, id, art, problems) {
  const page = await (await browser.newContext({ viewport: { width: 1300, height: 900 } })).newPage();
  const w = watch(page, problems);
  let release;
  const held = new Promise((r) => { release = r; });
  let asked = 0;
  await page.route('**/rate_limits', async (route) => {
    asked++;
    await held;
    await route.continue();
  });
  const read = Promise.all([
    page.waitForResponse((r) => r.url().endsWith(`/runs/${id}/events`)),
    page.waitForResponse((r) => r.url().includes(`parent_id=${id}`)),
  ]);
  await page.goto(`${base}/#/runs/${id}`);
  await detailOf(page, id);
  await read;
  await until('the detail to show the queued run', async () => (await fieldSeen(page, 'Status')) === 'queued');
  await page.waitForTimeout(300); // what the answers drew is on the screen
  check(asked > 0 && (await fieldSeen(page, 'Rate limit')) === null,
    `the detail showed the run before the page had the rate limits (${asked} held)`);
  release();
  const line = await until('the rate limit line after the limits came', async () => {
    const t = await fieldSeen(page, 'Rate limit');
    return WAITS.test(t || '') ? t : null;
  }, 10000).catch(() => null);
  check(line !== null, `once the limits came, the queued run says it waits for its rate limit (${line})`);
  await screenshot(page, join(art, 'dashboard-rate-limit.png'));
  w.closing = true;
  await page.context().close();
}

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
    await connection(page, /^live$/);
    const legend = await until('the chart to count the earlier runs', async () => {
      const l = await seen(page, '#chart + figcaption');
      return /\b3 succeeded\b/.test(l || '') ? l : null;
    }, 10000).catch(() => null);
    check(legend !== null, `the chart's legend starts with the runs completed before the page (${legend})`);

    const nightly = page.locator('#schedules tr', { hasText: 'nightly' });
    const button = (name) => nightly.getByRole('button', { name, exact: true });
    await nightly.waitFor({ state: 'visible' });
    const row = await nightly.innerText();
    check(/Europe\/Berlin/.test(row) && /02:30:00 Europe\/Berlin/.test(row) && /UTC/.test(row),
      `the next fire in the zone and in UTC (${row.replace(/\s+/g, ' ')})`);

    await button('Pause').click();
    await button('Resume').waitFor({ state: 'visible' });
    check((await api(base, '/schedules/nightly')).json.paused === true, 'Pause paused it on the server');
    check(/paused/.test(await nightly.innerText()), 'the view shows it paused');
    await button('Resume').click();
    await button('Pause').waitFor({ state: 'visible' });
    check((await api(base, '/schedules/nightly')).json.paused === false, 'Resume resumed it');

    page.once('dialog', (d) => d.accept());
    await button('Trigger').click();
    const started = await until('the trigger message', async () => {
      const m = /started (\S+)\./.exec((await seen(page, '#sched-msg')) || '');
      return m && m[1];
    });
    await runRow(page, started).waitFor({ state: 'visible' });
    check(true, `the triggered run ${started} is in the table`);
    await until('its last run in the view', async () => (await nightly.innerText()).includes(started));
    await button(started).click();
    await detailOf(page, started);
    check(true, 'the last run opens its detail');
    check((await fieldSeen(page, 'Schedule')) === 'nightly (triggered)', 'the detail names the schedule');
    await page.getByRole('button', { name: 'Close' }).click();
    await detailClosed(page);

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
      /api 1\/1/.test((await seen(page, '#s-limits')) || ''));
    check(true, 'the overview shows the limit spent');
    await runRow(page, queued).click();
    await detailOf(page, queued);
    const wait = await until('the rate limit line', async () => {
      const t = await fieldSeen(page, 'Rate limit');
      return WAITS.test(t || '') ? t : null;
    }, 10000).catch(() => null);
    check(wait !== null, `the queued run says it waits for its rate limit (${wait})`);
    await page.getByRole('button', { name: 'Close' }).click();
    await detailClosed(page);
    await screenshot(page, join(art, 'dashboard-schedules.png'));
    await limitsLate(browser, base, queued, art, problems);
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
