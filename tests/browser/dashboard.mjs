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
// - a waiting run's detail (a rest_job run against a fake jobs API served
//   here): the next check and the end of the wait count down without a
//   request, the checks count up once a check was due (the page reads the
//   run again), and after a cancel (a stream event) the checks it took;
// - keyboard: Tab from the search box reaches the rows; Page Down, Page
//   Up, End and Home move the focused row; 360 px wide does not scroll
//   sideways.
// Everything is read as a person sees it: text on the screen, what is
// visible, where the focus is. Screenshots of the dashboard and of a
// run's detail go to the build's test directory (browser-artifacts/),
// each checked for anything shown that the page meant to hide.
//
// Needs what cors.mjs needs (see there); exits 77 when playwright-core
// or chromium is missing.
import { createServer } from 'node:http';
import { join } from 'node:path';
import {
  api, checker, connection, createDb, detailClosed, detailOf, dirs, fieldSeen, freePort, launch,
  loadPlaywright, rowSeen, runRow, screenshot, seen, startOpsrun, stopOpsrun, submit, tableSeen,
  tail, timelineSeen, until, watch, cleanup,
} from './lib/harness.mjs';

const { check, failures } = checker();

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
    last = await rowSeen(page, id);
    if (last) steps.add(last.progress);
    return last && last.status === 'completed';
  });
  check(last.outcome === 'succeeded', `the run reached succeeded on the page (${last.outcome})`);
  const moving = [...steps].filter((s) => !/^0%/.test(s) && !/^100%/.test(s));
  check(moving.length >= 2, `the progress bar moved through at least two values (${[...steps].join(' | ')})`);
  return id;
}

async function filtersAndPaging(page, base, ids) {
  const statuses = async () => (await tableSeen(page)).map((r) => r.status);
  await page.selectOption('#f-status', 'running');
  const running = await until('the status filter', async () => {
    const s = await statuses();
    return s.length && s.every((x) => x === 'running') ? s : null;
  });
  check(running.every((s) => s === 'running'), `the status filter shows running runs only (${running.length})`);
  await page.selectOption('#f-status', '');
  await page.fill('#f-search', ids[0].slice(-8).toLowerCase());
  const found = await until('the search', async () => {
    const rows = (await tableSeen(page)).map((r) => r.run);
    return rows.length === 1 ? rows : null;
  });
  check(found[0] === ids[0], 'search by run id finds the run');
  await page.fill('#f-search', '');

  const paged = await page.context().newPage();
  await paged.goto(base + '/?limit=3');
  const count = async () => (await tableSeen(paged)).length;
  await until('the first page of 3', async () => (await count()) === 3);
  const older = (p) => p.getByRole('button', { name: 'Load older runs' });
  const offered = await older(paged).waitFor({ state: 'visible', timeout: 10000 }).then(() => true, () => false);
  check(offered && await older(paged).isEnabled(), 'with more runs than a page, older ones can be loaded');
  await older(paged).click();
  await until('the second page', async () => (await count()) === 6);
  check((await count()) === 6, 'Load older runs added the next page (cursor)');
  await paged.close();
  check(await older(page).isHidden(), 'with every run on the page, no button offers older ones');
}

// The run id of the table row that has the focus, or null.
const focusedRow = (page) => seen(page, '#runs tr:focus td:first-child');

async function detailAndKeys(page, base, id, art) {
  await page.focus('#f-search');
  await page.keyboard.press('Tab');
  check(await focusedRow(page) !== null, 'Tab from the search box reaches the rows');
  await runRow(page, id).focus(); // the row in the tab order, then Enter
  await page.keyboard.press('Enter');
  await detailOf(page, id);
  check(true, 'Enter opened the run\'s detail');
  const real = (await api(base, `/runs/${id}/events`)).json.events.map((e) => e.id);
  let shown = [];
  await until('the timeline', async () => {
    shown = (await timelineSeen(page)).map((e) => e.id);
    return JSON.stringify(shown) === JSON.stringify(real);
  }, 10000).catch(() => {});
  check(JSON.stringify(shown) === JSON.stringify(real),
    `the detail's timeline is the run's events (${shown.length} of ${real.length})`);
  check(await page.getByRole('button', { name: 'Retry run' }).isHidden() &&
    await page.getByRole('button', { name: 'Cancel run' }).isHidden(),
  'a run that succeeded offers neither cancel nor retry');
  await screenshot(page, join(art, 'dashboard-detail.png'));
  await page.keyboard.press('Escape');
  await detailClosed(page);
  const back = await focusedRow(page);
  check(back === id, `Escape closed the detail and focus went back to the row (${back})`);
}

// A remote jobs API whose jobs never end: POST /jobs starts one, GET
// /jobs/{id} says RUNNING. Resolves to the server and its port.
async function fakeJobs() {
  let n = 0;
  const srv = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const post = req.method === 'POST' && req.url === '/jobs';
      res.writeHead(post ? 201 : 200, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify(post ? { id: `job-${++n}` } : { state: 'RUNNING' }));
    });
  });
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  return { srv, port: srv.address().port };
}

// The run type "job" on it: checks 2 s and 4 s after the start (the
// first delay, then initial × multiplier^(n−1) after check n), the third
// 20 s later, then every 60 s; at most 100 checks or 600 s. The 20 s are
// the window in which the page is watched: on a loaded machine opening the
// detail and its screenshot took 6 s.
function jobType(port) {
  return {
    action: 'rest_job', max_attempts: 1,
    poll: { initial_delay_ms: 2000, multiplier: 10, max_delay_ms: 60000, jitter_pct: 0,
      max_checks: 100, max_duration_s: 600, check_timeout_s: 2 },
    params: {
      submit: { method: 'POST', url: `http://127.0.0.1:${port}/jobs`, body: { run: '{{run_id}}' } },
      id_pointer: '/id',
      status: { url: `http://127.0.0.1:${port}/jobs/{{external_id}}` },
      state_pointer: '/state',
      state_map: { RUNNING: 'running', DONE: 'succeeded' },
    },
  };
}

const AT = '\\(at \\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\dZ\\)';
const secondsIn = (t) => Number(/^in (\d+)s /.exec(t)?.[1] ?? NaN);

async function waitingRun(page, base, art) {
  const r = await api(base, '/alerts', { method: 'POST', body: { alert_type: 'job', data: {} } });
  const id = r.json.run_id;
  // After check 2 the next one is 20 s away: time to watch the page.
  const first = await until('the run to wait with two checks made', async () => {
    const run = (await api(base, `/runs/${id}`)).json;
    return run.status === 'waiting' && run.poll?.checks === 2 && run.poll.next_check_at ? run : null;
  });
  const reads = [];
  const onRequest = (q) => {
    if (new URL(q.url()).pathname.startsWith(`/runs/${id}`)) reads.push(Date.now());
  };
  await until('the waiting run in the table', async () => (await rowSeen(page, id))?.status === 'waiting');
  await runRow(page, id).click();
  await detailOf(page, id);
  const text = (name) => fieldSeen(page, name);
  const next0 = await until('the next check on the page', async () => {
    const t = await text('Next check');
    return new RegExp(`^in \\d+s ${AT}$`).test(t) ? t : null;
  });
  check(true, `the detail shows the next check (${next0})`);
  const checks0 = await text('Checks');
  check(checks0 === '2 of 100', `the detail shows the checks made of the budget (${checks0})`);
  const give0 = await text('Gives up');
  check(new RegExp(`^in (10m 00s|9m \\d\\ds) ${AT}$`).test(give0), `the detail shows when it gives up (${give0})`);
  const actions = await page.locator('#detail button:visible:not(.link)').allInnerTexts();
  check(JSON.stringify(actions) === JSON.stringify(['Close', 'Cancel run']),
    `a waiting run offers cancel only (${actions.join(', ')})`);
  await screenshot(page, join(art, 'dashboard-detail-waiting.png'));

  // The countdowns tick on the page's clock: no request.
  page.on('request', onRequest);
  const next1 = await until('the next check countdown to tick', async () => {
    const t = await text('Next check');
    return secondsIn(t) < secondsIn(next0) ? t : null;
  });
  // Each countdown ticks on its own second (their instants differ by a
  // fraction of one): the give-up one within the next second.
  const give1 = await until('the give-up countdown to tick', async () => {
    const t = await text('Gives up');
    return t !== give0 ? t : null;
  }, 3000);
  const due = Date.parse(first.poll.next_check_at);
  check(reads.length === 0 && Date.now() < due,
    `the countdowns tick without a request (${next0} → ${next1}; ${give0} → ${give1}; ${reads.length} reads)`);
  check(give1 !== give0, 'the give-up countdown ticks too');

  // Check 3 writes no event: once it was due, the page reads the run again
  // and shows the new count and the next check, 60 s later.
  const checks3 = await until('check 3 on the page', async () => {
    const t = await text('Checks');
    return t === '3 of 100' ? t : null;
  }, 40000);
  const next3 = await text('Next check');
  check(reads.length >= 1 && reads[0] >= due,
    `after the check was due the page read the run again (${reads.length} reads) and shows ${checks3}`);
  check(new RegExp(`^in \\d+s ${AT}$`).test(next3) && secondsIn(next3) > 30, `and the next check (${next3})`);
  page.off('request', onRequest);

  // A cancel arrives as a stream event: the run shows the checks it took.
  await api(base, `/runs/${id}/cancel`, { method: 'POST' });
  const took = await until('the cancel in the detail', async () => {
    const t = await text('Checks');
    return /^took/.test(t || '') ? t : null;
  });
  check(took === 'took 3 checks of 100', `a finished run shows the checks it took (${took})`);
  check(await text('Next check') === null && await text('Gives up') === null,
    'a finished run shows no next check and no give-up time');
  await page.keyboard.press('Escape');
  await detailClosed(page);
}

// Page Down, Page Up, End and Home in the runs table move the focused row
// (the roving tabindex): by a page, to the last run, to the first, each
// time with the row in sight below the table's heading. Where a row is
// comes from the run id it shows and the runs' order (newest first, as
// GET /runs lists them). Each check fails if the key left the focus where
// it was.
async function tableKeys(page, base) {
  await api(base, '/alerts', { method: 'POST',
    body: Array.from({ length: 40 }, (_, i) => ({ alert_type: 'demo', data: { duration_ms: 10, n: 100 + i } })) });
  // The array is in the database when the POST answers: the page must come
  // to show every run GET /runs lists (it may take a while to get there).
  const order = (await api(base, '/runs?limit=500')).json.runs.map((r) => r.id);
  let shown = null;
  const total = await until('the page to count every run', async () => {
    const m = /^(\d+) runs$/.exec((await seen(page, '#count')) || '');
    shown = m ? Number(m[1]) : shown;
    return shown === order.length ? shown : null;
  }).catch(() => shown);
  check(order.length >= 45 && order.length === total,
    `the page counts the runs there are (${total} of ${order.length})`);
  const at = async () => {
    const id = await focusedRow(page);
    const row = id && await page.locator('#runs tr:focus').boundingBox();
    if (!row) return null;
    const view = await page.locator('#table-wrap').boundingBox();
    const head = await page.locator('#runs th').first().boundingBox(); // sticky: always in sight
    const below = head.y + head.height;
    return {
      id, index: order.indexOf(id), top: Math.round(row.y - below),
      visible: row.y >= below - 2 && row.y + row.height <= view.y + view.height + 1,
      rows: Math.floor((view.y + view.height - below) / row.height),
    };
  };
  if (!(await at())) {
    await page.focus('#f-search');
    await page.keyboard.press('Tab');
  }
  let last = await at();
  check(last && last.index >= 0 && last.index < total - 1, `a row of the table has the focus (${JSON.stringify(last)})`);
  const press = async (key, want, what) => {
    const from = last;
    await page.keyboard.press(key);
    const got = await until(`${key} to move the focus`, async () => {
      const a = await at();
      return a && want(a, from) ? a : null;
    }, 5000).catch(() => null);
    check(!!got && got.visible,
      `${key}: ${what} (from ${from && from.index} to ${JSON.stringify(got || (await at()))})`);
    last = got || (await at());
  };
  await press('End', (a) => a.index === total - 1, 'to the last run');
  await press('PageUp', (a, f) => f.index - a.index > 1 && f.index - a.index >= a.rows - 2, 'up by a page');
  await press('PageUp', (a, f) => f.index - a.index > 1 && a.index > 0, 'and another page');
  await press('PageDown', (a, f) => a.index - f.index > 1 && a.index < total - 1, 'down by a page');
  await press('Home', (a) => a.index === 0, 'to the first run');
  check(last && Math.abs(last.top) <= 2, `Home scrolled the table to the top: the first run right below the heading (${last && last.top} px)`);
  await press('PageDown', (a, f) => a.index - f.index > 1 && a.index < total - 1, 'down by a page from the first');
  await press('PageUp', (a) => a.index === 0, 'and back up to the first');
}

async function cancelAndRetry(page, base) {
  const id = await submit(base, { duration_ms: 60000, steps: 60 });
  await until('the long run on the page', async () => (await rowSeen(page, id))?.status === 'running');
  await runRow(page, id).click();
  await detailOf(page, id);
  const cancel = page.getByRole('button', { name: 'Cancel run' });
  const retry = page.getByRole('button', { name: 'Retry run' });
  await cancel.waitFor({ state: 'visible' });
  check(await retry.isHidden(), 'a running run offers cancel, not retry');
  page.once('dialog', (d) => d.dismiss());
  await cancel.click();
  await page.waitForTimeout(300);
  check((await api(base, `/runs/${id}`)).json.status === 'running', 'a dismissed confirm cancels nothing');
  let asked = '';
  page.once('dialog', (d) => {
    asked = d.message();
    d.accept();
  });
  await cancel.click();
  await until('the cancel on the page', async () => (await rowSeen(page, id))?.outcome === 'cancelled');
  check(asked.includes(id), `cancel asked first (${asked})`);
  check((await api(base, `/runs/${id}`)).json.outcome === 'cancelled', 'the run was cancelled');
  await retry.waitFor({ state: 'visible' });
  await cancel.waitFor({ state: 'hidden' });
  check(true, 'the cancelled run offers retry, no longer cancel');
  page.once('dialog', (d) => d.accept());
  await retry.click();
  const msg = await until('the retry', async () => {
    const t = await seen(page, '#d-msg');
    return /Retried as/.test(t || '') ? t : null;
  });
  const newId = /Retried as ([^ .]+)/.exec(msg)[1];
  const again = (await api(base, `/runs/${newId}`)).json;
  check(again && again.retry_of === id, `retry made a new run ${newId} with retry_of ${id}`);
  await until('the retried run in the table', async () => !!(await rowSeen(page, newId)));
  check(true, 'the retried run appeared in the table');
  await page.keyboard.press('Escape');
  await detailClosed(page);
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
  await screenshot(page, join(art, 'dashboard-360.png'));
  await page.setViewportSize({ width: 1200, height: 800 });
}

async function main() {
  const pw = loadPlaywright();
  const { tmp, art } = dirs('dashboard');
  const log = join(tmp, 'opsrun.log');
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const jobs = await fakeJobs();
  const proc = await startOpsrun({ port, db: createDb('browser_dashboard'), log, tmp,
    config: { queue: { progress_interval_ms: 0, shutdown_grace_s: 1 },
      run_types: { job: jobType(jobs.port) } } });
  let browser;
  const problems = [];
  try {
    await files(base);
    browser = await launch(pw);
    const ctx = await browser.newContext({ viewport: { width: 1200, height: 800 } });
    const page = await ctx.newPage();
    const w = watch(page, problems);
    await page.goto(base + '/');
    await connection(page, /^live$/);
    const ids = [];
    for (const [i, data] of [{ fail: 'permanent' }, { fail: 'first:1' }, {}, { duration_ms: 30000, steps: 30 },
      { duration_ms: 20000, steps: 10 }].entries()) ids.push(await submit(base, { duration_ms: 400, n: i, ...data }));
    const id = await liveRun(page, base);
    await until('the overview', async () => ((await seen(page, '#s-workers')) || '').includes('/'));
    await screenshot(page, join(art, 'dashboard.png'));
    await filtersAndPaging(page, base, ids);
    await detailAndKeys(page, base, id, art);
    await cancelAndRetry(page, base);
    await waitingRun(page, base, art);
    await tableKeys(page, base);
    await narrow(page, art);
    w.closing = true;
    await stream204(browser, base, id);
    for (const rid of ids) await api(base, `/runs/${rid}/cancel`, { method: 'POST' });
  } catch (e) {
    check(false, `the test ran to its end: ${e.stack || e}`);
  } finally {
    if (browser) await browser.close();
    await stopOpsrun(proc);
    jobs.srv.close();
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
