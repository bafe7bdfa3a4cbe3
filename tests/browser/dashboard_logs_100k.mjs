// tests/browser/dashboard_logs_100k.mjs — long logs in the dashboard's
// detail, from exec commands that print to stderr:
// - a run of 20,000 lines in four bursts a second apart, followed live
//   from its start (its command waits until the page shows it): the page keeps the newest 5,000 and says so; the top
//   of the log's box shows line 15,003 onwards, its bottom the last lines,
//   and "Jump to the newest line" brings them back;
// - a finished run of 100,000 lines: the same, from its pages, and the
//   plain text link opens every line (read page by page, as a blob);
// - the page's work per task is bounded: no task puts more than 1,250
//   lines on it (a batch of 1,000 and a block of 250 regrouped; a count,
//   not a time: on a loaded machine any task can take a second; its long
//   tasks are printed for the reader).
// Everything is read as a person sees it: text on the screen, what is in
// view. A screenshot goes to the build's test directory
// (browser-artifacts/), checked for anything shown that the page meant to
// hide. The rest of the log view: dashboard_logs.mjs.
//
// Needs what cors.mjs needs (see there); exits 77 when playwright-core
// or chromium is missing.
import { join } from 'node:path';
import {
  checker, createDb, detailOf, dirs, fieldSeen, freePort, launch, loadPlaywright, screenshot, seen,
  startOpsrun, stopOpsrun, tail, until, watch, cleanup,
} from './lib/harness.mjs';
import {
  apiLines, closeDetail, completed, configFor, logInView, logSeen, plainText, release, same, submitRun,
} from './lib/logs.mjs';

const { check, failures } = checker();

// The page's long tasks (over 50 ms) from now on, and the most log lines
// one task put on the page (lines added between two observer calls: one
// call per task).
const watchTasks = (page) => page.evaluate(() => {
  window.longTasks = [];
  new PerformanceObserver((l) => window.longTasks.push(...l.getEntries().map((e) => e.duration)))
    .observe({ type: 'longtask' });
  window.mostLines = 0;
  new MutationObserver((records) => {
    const added = new Set();
    for (const r of records) {
      for (const n of r.addedNodes) {
        if (n.nodeType !== 1) continue;
        if (n.classList.contains('ln')) added.add(n);
        n.querySelectorAll('.ln').forEach((l) => added.add(l));
      }
    }
    window.mostLines = Math.max(window.mostLines, added.size);
  }).observe(document.querySelector('#log-box'), { childList: true, subtree: true });
});

async function most(page, what) {
  const { tasks, lines } = await page.evaluate(() => {
    const r = { tasks: window.longTasks.splice(0), lines: window.mostLines };
    window.mostLines = 0;
    return r;
  });
  console.log(`  ${what}: long tasks ${tasks.map(Math.round).join(', ') || 'none'}; at most ${lines} lines put on the page by one task`);
  return lines;
}

// What the page shows of a long run once it has all its lines: the note,
// then, scrolled to the top of the box, the first of the newest 5,000
// lines, and back at the bottom (the jump button), the last ones.
async function showsTheNewest(page, base, id, what) {
  await completed(base, id);
  const all = await apiLines(base, id, 1);
  const want = `Showing the last 5,000 of ${all.length.toLocaleString('en-US')} lines of this attempt; the plain text has them all.`;
  const note = await until('the note on the lines shown', async () => {
    const n = await seen(page, '#log-note');
    return n === want && (await seen(page, '#log-end')) ? n : null;
  }, 90000).catch(() => seen(page, '#log-note'));
  check(note === want, `${what}: the page says it shows the last 5,000 (${note})`);
  await page.locator('#log-box').scrollIntoViewIfNeeded();
  const bottom = await logInView(page);
  check(same(bottom, all.slice(-bottom.length)) && bottom.length > 5,
    `${what}: at the bottom of the box, the last lines (${bottom[0]} … ${bottom[bottom.length - 1]})`);
  await page.locator('#log-box').evaluate((b) => { b.scrollTop = 0; });
  const top = await until('the top of the box', async () => {
    const v = await logInView(page);
    return v.length > 5 && v[0] !== '' ? v : null;
  }, 5000).catch(() => logInView(page));
  const from = all.length - 5000;
  check(same(top, all.slice(from, from + top.length)),
    `${what}: at the top of the box, line ${from + 1} of ${all.length} onwards (${top[0]} … ${top[top.length - 1]})`);
  await page.getByRole('button', { name: /Jump to the newest line/ }).click();
  const back = await until('the bottom again', async () => {
    const v = await logInView(page);
    return v.length && v[v.length - 1] === all[all.length - 1] ? v : null;
  }, 5000).catch(() => null);
  check(back !== null, `${what}: the jump button brings the last line back into view`);
  return all;
}

// A run of 20,000 lines followed live from its start, then one of
// 100,000 opened finished: bounded on the page, whole in the plain text.
async function longLogs(page, base, art, tmp) {
  const flood = await submitRun(base, 'flood', { tag: 'big' });
  const flag = join(tmp, 'go-burst');
  const burst = await submitRun(base, 'burst', { flag });
  await watchTasks(page);
  let t0 = Date.now();
  await page.evaluate((rid) => { location.hash = `#/runs/${rid}`; }, burst);
  await detailOf(page, burst);
  // The command prints once the page shows its start.
  await until('the run\'s first line', async () => ((await logSeen(page)) || []).length > 0, 30000);
  check((await fieldSeen(page, 'Status')) === 'running', '20,000 lines: the page follows the run from its start');
  release(flag);
  t0 = Date.now();
  await showsTheNewest(page, base, burst, '20,000 lines followed live');
  console.log(`  20,000 lines followed: ${Date.now() - t0} ms to the end`);
  const live = await most(page, 'followed live');
  check(live > 0 && live <= 1250, `20,000 lines followed live: no task put more than 1,250 lines on the page (${live})`);
  await closeDetail(page);

  await completed(base, flood);
  t0 = Date.now();
  await page.evaluate((rid) => { location.hash = `#/runs/${rid}`; }, flood);
  await detailOf(page, flood);
  const all = await showsTheNewest(page, base, flood, '100,000 lines opened finished');
  console.log(`  100,000 lines finished: ${Date.now() - t0} ms to show`);
  const opened = await most(page, 'opened finished');
  check(opened > 0 && opened <= 1250, `100,000 lines opened finished: no task put more than 1,250 lines on the page (${opened})`);
  await page.locator('#log-box').scrollIntoViewIfNeeded();
  await screenshot(page, join(art, 'dashboard-log-100k.png'));
  const { t, url } = await plainText(page);
  const lines = t.replace(/\n$/, '').split('\n');
  check(url.startsWith('blob:') && same(lines, all), `the plain text has all ${all.length} lines (${lines.length}, ${url.slice(0, 5)})`);
  await closeDetail(page);
}

async function main() {
  const pw = loadPlaywright();
  const { tmp, art } = dirs('dashboard-logs-100k');
  const log = join(tmp, 'opsrun.log');
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const proc = await startOpsrun({ port, db: createDb('browser_dashboard_logs_100k'), log, tmp, config: configFor(tmp) });
  let browser;
  const problems = [];
  try {
    browser = await launch(pw);
    const page = await (await browser.newContext({ viewport: { width: 1280, height: 900 } })).newPage();
    const w = watch(page, problems);
    await page.goto(base + '/');
    await longLogs(page, base, art, tmp);
    w.closing = true;
  } catch (e) {
    check(false, `the test ran to its end: ${e.stack || e}`);
  } finally {
    if (browser) await browser.close();
    await stopOpsrun(proc);
  }
  for (const p of problems) console.log('  ' + p);
  check(problems.length === 0, `no console error, failed request or error answer (${problems.length})`);
  check(proc.exitCode === 0, `opsrun exited cleanly (status ${proc.exitCode}, signal ${proc.signalCode})`);
  console.log(`screenshots in ${art}`);
  if (failures.length) {
    console.error(`dashboard_logs_100k.mjs: ${failures.length} failed; opsrun's log ${log}:\n${tail(log)}`);
    process.exit(1);
  }
  cleanup(tmp);
}

main().catch((e) => {
  console.error('dashboard_logs_100k.mjs:', e);
  process.exit(1);
});
