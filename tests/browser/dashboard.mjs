// tests/browser/dashboard.mjs — the built-in dashboard (GET /) in headless
// Chromium against a real opsrun and PostgreSQL:
// - the files: types, ETag and 304, the Content-Security-Policy;
// - the page loads with no console error, page error or failed request;
// - a run submitted through the API appears and reaches succeeded without
//   a reload, its progress bar showing at least two values on the way;
// - filters, search, and older pages by cursor (?limit=3);
// - the detail: opened with Enter, its timeline the run's events, closed
//   with Escape; cancel and retry behind a confirm (dismissed: nothing
//   happens; accepted: it is done);
// - a finished run's stream asked past its end (204) stops EventSource;
// - keyboard: Tab from the search box reaches the rows; 360 px wide does
//   not scroll sideways.
// Screenshots of the dashboard and of a run's detail go to the build's
// test directory (browser-artifacts/).
//
// Needs what cors.mjs needs (see there); exits 77 when playwright-core
// or chromium is missing.
import { join } from 'node:path';
import {
  api, checker, createDb, dirs, freePort, launch, loadPlaywright, startOpsrun, stopOpsrun,
  submit, tail, until, watch, cleanup,
} from './lib/harness.mjs';

const { check, failures } = checker();

const rowState = (page, id) => page.evaluate((rid) => {
  const tr = document.querySelector(`tr.run[data-id="${rid}"]`);
  if (!tr) return null;
  return {
    status: tr.children[2].textContent, outcome: tr.children[3].textContent,
    step: tr.querySelector('.bar span').textContent,
  };
}, id);

async function files(base) {
  const index = await fetch(base + '/');
  const csp = index.headers.get('content-security-policy') || '';
  check(index.status === 200 && index.headers.get('content-type') === 'text/html; charset=utf-8',
    `GET / is the page (${index.status} ${index.headers.get('content-type')})`);
  check(csp.includes("default-src 'none'") && csp.includes("script-src 'self'") &&
    !csp.includes('unsafe'), `GET / has a strict Content-Security-Policy (${csp})`);
  const js = await fetch(base + '/web/app.js');
  check(js.headers.get('content-type') === 'text/javascript; charset=utf-8', 'app.js is JavaScript');
  const css = await fetch(base + '/web/app.css');
  check(css.headers.get('content-type') === 'text/css; charset=utf-8', 'app.css is CSS');
  const etag = js.headers.get('etag');
  check(/^"[0-9a-f]{64}"$/.test(etag || '') && js.headers.get('cache-control') === 'no-cache',
    `app.js has a strong ETag and no-cache (${etag}, ${js.headers.get('cache-control')})`);
  const again = await fetch(base + '/web/app.js', { headers: { 'If-None-Match': etag } });
  check(again.status === 304 && (await again.text()) === '', 'If-None-Match with its ETag gets 304');
  const missing = await fetch(base + '/web/nothing.js');
  check(missing.status === 404, `an unknown file gets 404 (${missing.status})`);
}

async function liveRun(page, base) {
  const id = await submit(base, { duration_ms: 3000, steps: 6 });
  const steps = new Set();
  let last;
  await until('the run to succeed on the page', async () => {
    last = await rowState(page, id);
    if (last) steps.add(last.step);
    return last && last.status === 'completed';
  });
  check(last.outcome === 'succeeded', `the run reached succeeded on the page (${last.outcome})`);
  const moving = [...steps].filter((s) => !/^0%/.test(s) && !/^100%/.test(s));
  check(moving.length >= 2, `the progress bar moved through at least two values (${[...steps].join(' | ')})`);
  return id;
}

async function filtersAndPaging(page, base, ids) {
  const statuses = () => page.$$eval('tr.run', (rows) => rows.map((r) => r.children[2].textContent));
  await page.selectOption('#f-status', 'running');
  const running = await until('the status filter', async () => {
    const s = await statuses();
    return s.every((x) => x === 'running') ? s : null;
  });
  check(running.every((s) => s === 'running'), `the status filter shows running runs only (${running.length})`);
  await page.selectOption('#f-status', '');
  await page.fill('#f-search', ids[0].slice(-8).toLowerCase());
  const found = await until('the search', async () => {
    const rows = await page.$$eval('tr.run', (r) => r.map((x) => x.dataset.id));
    return rows.length === 1 ? rows : null;
  });
  check(found[0] === ids[0], 'search by run id finds the run');
  await page.fill('#f-search', '');

  const paged = await page.context().newPage();
  await paged.goto(base + '/?limit=3');
  const count = () => paged.$$eval('tr.run', (r) => r.length);
  await until('the first page of 3', async () => (await count()) === 3);
  check(await paged.isEnabled('#older'), 'with more runs than a page, older ones can be loaded');
  await paged.click('#older');
  await until('the second page', async () => (await count()) === 6);
  check((await count()) === 6, 'Load older runs added the next page (cursor)');
  await paged.close();
}

async function detailAndKeys(page, base, id, art) {
  await page.focus('#f-search');
  await page.keyboard.press('Tab');
  const focused = await page.evaluate(() => document.activeElement.matches('tr.run'));
  check(focused, 'Tab from the search box reaches the rows');
  await page.focus(`tr.run[data-id="${id}"]`).catch(() => {});
  await page.evaluate((rid) => {
    // focus the run's row through the keyboard path: select it, then Enter
    document.querySelector(`tr.run[data-id="${rid}"]`).focus();
  }, id);
  await page.keyboard.press('Enter');
  await page.waitForSelector('#detail[open] #d-events[data-loaded="true"]');
  const shown = await page.$$eval('#d-events li', (li) => li.map((x) => Number(x.dataset.eventId)));
  const real = (await api(base, `/runs/${id}/events`)).json.events.map((e) => e.id);
  check(JSON.stringify(shown) === JSON.stringify(real),
    `the detail's timeline is the run's events (${shown.length} of ${real.length})`);
  check((await page.textContent('#d-title')) === id, 'Enter opened the run\'s detail');
  await page.screenshot({ path: join(art, 'dashboard-detail.png') });
  await page.keyboard.press('Escape');
  await until('the detail to close', async () => !(await page.$('#detail[open]')));
  const back = await page.evaluate(() => document.activeElement.matches('tr.run'));
  check(back, 'Escape closed the detail and focus went back to the row');
}

async function cancelAndRetry(page, base) {
  const id = await submit(base, { duration_ms: 60000, steps: 60 });
  await until('the long run on the page', async () => (await rowState(page, id))?.status === 'running');
  await page.click(`tr.run[data-id="${id}"]`);
  await page.waitForSelector('#detail[open] #d-cancel:not([disabled])');
  page.once('dialog', (d) => d.dismiss());
  await page.click('#d-cancel');
  await page.waitForTimeout(300);
  check((await api(base, `/runs/${id}`)).json.status === 'running', 'a dismissed confirm cancels nothing');
  let asked = '';
  page.once('dialog', (d) => {
    asked = d.message();
    d.accept();
  });
  await page.click('#d-cancel');
  await until('the cancel on the page', async () => (await rowState(page, id))?.outcome === 'cancelled');
  check(asked.includes(id), `cancel asked first (${asked})`);
  check((await api(base, `/runs/${id}`)).json.outcome === 'cancelled', 'the run was cancelled');
  await page.waitForSelector('#d-retry:not([disabled])');
  page.once('dialog', (d) => d.accept());
  await page.click('#d-retry');
  const msg = await until('the retry', async () => {
    const t = await page.textContent('#d-msg');
    return /Retried as/.test(t) ? t : null;
  });
  const newId = /Retried as ([^ .]+)/.exec(msg)[1];
  const again = (await api(base, `/runs/${newId}`)).json;
  check(again && again.retry_of === id, `retry made a new run ${newId} with retry_of ${id}`);
  await until('the retried run in the table', async () => !!(await rowState(page, newId)));
  check(true, 'the retried run appeared in the table');
  await page.keyboard.press('Escape');
  await api(base, `/runs/${newId}/cancel`, { method: 'POST' });
}

// A completed run's stream resumed at its end answers 204, and the
// browser's EventSource stops for good (readyState CLOSED, no event).
async function stream204(browser, base, id) {
  const p = await browser.newPage();
  await p.goto(base + '/web/icon.svg');
  const events = (await api(base, `/runs/${id}/events`)).json.events;
  const last = events[events.length - 1].id;
  const r = await p.evaluate(([rid, lid]) => new Promise((resolve) => {
    const es = new EventSource(`/runs/${rid}/stream?last_event_id=${lid}`);
    let n = 0;
    for (const k of ['snapshot', 'status', 'progress']) es.addEventListener(k, () => n++);
    es.onerror = () => resolve({ state: es.readyState, n });
  }), [id, last]);
  check(r.state === 2 && r.n === 0, `a 204 stream stops EventSource (readyState ${r.state}, ${r.n} events)`);
  await p.close();
}

async function narrow(page, art) {
  await page.setViewportSize({ width: 360, height: 740 });
  await page.waitForTimeout(200);
  const w = await page.evaluate(() => document.documentElement.scrollWidth);
  check(w <= 360, `at 360 px wide nothing scrolls sideways (${w})`);
  await page.screenshot({ path: join(art, 'dashboard-360.png') });
  await page.setViewportSize({ width: 1200, height: 800 });
}

async function main() {
  const pw = loadPlaywright();
  const { tmp, art } = dirs('dashboard');
  const log = join(tmp, 'opsrun.log');
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const proc = await startOpsrun({ port, db: createDb('browser_dashboard'), log, tmp,
    config: { queue: { progress_interval_ms: 0, shutdown_grace_s: 1 } } });
  let browser;
  const problems = [];
  try {
    await files(base);
    browser = await launch(pw);
    const ctx = await browser.newContext({ viewport: { width: 1200, height: 800 } });
    const page = await ctx.newPage();
    const w = watch(page, problems);
    await page.goto(base + '/');
    await page.waitForSelector('#conn[data-state="live"]');
    const ids = [];
    for (const [i, data] of [{ fail: 'permanent' }, { fail: 'first:1' }, {}, { duration_ms: 30000, steps: 30 },
      { duration_ms: 20000, steps: 10 }].entries()) ids.push(await submit(base, { duration_ms: 400, n: i, ...data }));
    const id = await liveRun(page, base);
    await until('the overview', async () => (await page.textContent('#s-workers')).includes('/'));
    await page.screenshot({ path: join(art, 'dashboard.png') });
    await filtersAndPaging(page, base, ids);
    await detailAndKeys(page, base, id, art);
    await cancelAndRetry(page, base);
    await narrow(page, art);
    w.closing = true;
    await stream204(browser, base, id);
    for (const rid of ids) await api(base, `/runs/${rid}/cancel`, { method: 'POST' });
  } catch (e) {
    check(false, `the test ran to its end: ${e.stack || e}`);
  } finally {
    if (browser) await browser.close();
    await stopOpsrun(proc);
  }
  for (const p of problems) console.log('  ' + p);
  check(problems.length === 0, `no console error, page error, failed request or error answer (${problems.length})`);
  check(proc.exitCode === 0, `opsrun exited cleanly (status ${proc.exitCode}, signal ${proc.signalCode})`);
  console.log(`screenshots in ${art}`);
  if (failures.length) {
    console.error(`dashboard.mjs: ${failures.length} failed; opsrun's log ${log}:\n${tail(log)}`);
    process.exit(1);
  }
  cleanup(tmp);
}

main().catch((e) => {
  console.error('dashboard.mjs:', e);
  process.exit(1);
});
