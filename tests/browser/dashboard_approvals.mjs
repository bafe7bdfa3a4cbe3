// tests/browser/dashboard_approvals.mjs — the dashboard's approvals and
// bulk actions: the "awaiting approval" filter lists the runs that wait
// for a person (and asks the server for them); a run's detail says until
// when it waits and what happens then, and Approve and Reject (with a
// comment, after a confirmation) decide it on the server, the detail then
// showing the decision; "Cancel all that match" counts the runs of the
// current filters, shows the count in its confirmation (dismissed:
// nothing changes), then cancels exactly those with its progress and the
// final count; "Retry all that match" retries the failed runs of a type;
// the bulk buttons are off while the search box is in use, and say why.
// Everything is read as a person sees it (text on the screen, what is
// visible). Screenshots go to the build's test directory
// (browser-artifacts/), each checked for anything shown that the page
// meant to hide.
//
// Needs what cors.mjs needs (see there); exits 77 when playwright-core
// or chromium is missing.
import { execFileSync, spawn } from 'node:child_process';
import { join } from 'node:path';
import {
  actionsSeen, api, checker, connection, createDb, detailClosed, detailOf, dirs, fieldSeen,
  freePort, launch, loadPlaywright, rowSeen, runRow, screenshot, seen, startOpsrun, stopOpsrun,
  tableSeen, tail, until, watch, cleanup,
} from './lib/harness.mjs';

const { check, failures } = checker();
const LATER = '2999-01-01T00:00:00Z';
const WAITS = 'This run waits for approval';

async function post(base, path, body) {
  const r = await api(base, path, { method: 'POST', body });
  if (r.status >= 300) throw new Error(`POST ${path} answered ${r.status}: ${r.text}`);
  return r.json;
}

// n runs of type, delayed far ahead when held.
async function submitMany(base, type, n, held) {
  for (let done = 0; done < n;) {
    const k = Math.min(1000, n - done);
    const items = [];
    for (let i = 0; i < k; i++) {
      const it = { alert_type: type, data: { i: done + i, duration_ms: 0, steps: 1 } };
      if (held) it.run_at = LATER;
      items.push(it);
    }
    await post(base, '/alerts', items);
    done += k;
  }
}

// Answers the next confirmation; resolves with its text.
function onDialog(page, accept) {
  return new Promise((resolve) => {
    page.once('dialog', async (d) => {
      const text = d.message();
      if (accept) await d.accept();
      else await d.dismiss();
      resolve(text);
    });
  });
}

async function approvals(page, base, art) {
  const a = (await post(base, '/alerts', { alert_type: 'gated', data: { n: 1 } })).run_id;
  const b = (await post(base, '/alerts', { alert_type: 'gated', data: { n: 2 } })).run_id;
  await post(base, '/alerts', { alert_type: 'demo', data: { n: 3 }, run_at: LATER });
  const shownIds = async () => (await tableSeen(page)).map((r) => r.run).sort();

  const listed = page.waitForRequest((r) => r.url().includes('/runs?') && r.url().includes('approval=pending'));
  await page.selectOption('#f-approval', 'pending');
  check(!!(await listed), 'the approval filter asks the server for the runs awaiting approval');
  await until('the two runs awaiting approval', async () =>
    JSON.stringify(await shownIds()) === JSON.stringify([a, b].sort()));
  const badge = (await rowSeen(page, a)).status;
  check(badge === 'awaiting approval', `the table says the run awaits approval (${badge})`);
  const bulkCancel = page.getByRole('button', { name: 'Cancel all that match…' });
  const why = await seen(page, '#bulk-why');
  check(await bulkCancel.isDisabled() && /approval filter/.test(why || ''),
    `the bulk buttons are off with the approval filter and say why (${why})`);

  const comment = page.getByLabel(/Comment \(optional\)/);
  const approve = page.getByRole('button', { name: 'Approve', exact: true });
  const reject = page.getByRole('button', { name: 'Reject', exact: true });
  await runRow(page, a).click();
  await detailOf(page, a);
  await page.getByText(WAITS).waitFor({ state: 'visible' });
  const state = await fieldSeen(page, 'Approval');
  check(/^pending: in (59m \d\ds|1h 00m) \(at .+\), then rejected$/.test(state || ''), `the detail says until when and what then (${state})`);
  const offered = await actionsSeen(page);
  check(JSON.stringify(offered) === JSON.stringify(['Cancel run', 'Approve', 'Reject']),
    `a run awaiting approval offers cancel, approve and reject (${offered.join(', ')})`);
  await comment.fill('change window is open');
  await screenshot(page, join(art, 'dashboard-approval-detail.png'));
  const asked = onDialog(page, true);
  await approve.click();
  check(/Approve run/.test(await asked), 'Approve asks first');
  await page.getByText(WAITS).waitFor({ state: 'hidden' });
  check(await approve.isHidden() && await reject.isHidden(), 'once approved, Approve and Reject are gone');
  const run = (await api(base, `/runs/${a}`)).json;
  check(run.approval.state === 'approved' && run.approval.comment === 'change window is open' &&
    run.approval.decided_by === 'anonymous', `the server has the decision (${JSON.stringify(run.approval)})`);
  const decided = await until('the detail to show the decision', async () => {
    const t = (await seen(page, '#d-body')) || '';
    return /approved by anonymous at/.test(t) && /change window is open/.test(t) ? t : null;
  });
  check(!!decided, 'the detail shows who approved, when, and the comment');
  await until('the approved run to succeed', async () => (await api(base, `/runs/${a}`)).json.outcome === 'succeeded');
  await until('the detail to show it succeeded', async () => (await fieldSeen(page, 'Outcome')) === 'succeeded');
  const after = await actionsSeen(page);
  check(after.length === 0, `the approved run that succeeded offers no action (${after.join(', ')})`);
  await page.getByRole('button', { name: 'Close' }).click();
  await detailClosed(page);

  await runRow(page, b).click();
  await detailOf(page, b);
  await page.getByText(WAITS).waitFor({ state: 'visible' });
  await comment.fill('not tonight');
  const asked2 = onDialog(page, true);
  await reject.click();
  check(/Reject run/.test(await asked2), 'Reject asks first');
  const rejected = await until('the rejection', async () => {
    const r = (await api(base, `/runs/${b}`)).json;
    return r.status === 'completed' ? r : null;
  });
  check(rejected.outcome === 'cancelled' && rejected.error.code === 'rejected' &&
    rejected.approval.comment === 'not tonight', 'Reject rejected it on the server, with the comment');
  await until('the detail to show the rejection', async () => /rejected by anonymous/.test((await seen(page, '#d-body')) || ''));
  await page.getByText(WAITS).waitFor({ state: 'hidden' });
  const left = await until('the rejected run to offer retry only', async () => {
    const t = await actionsSeen(page);
    return JSON.stringify(t) === JSON.stringify(['Retry run']) ? t : null;
  }, 10000).catch(() => null);
  check(left !== null, `the rejected run offers retry only (${(await actionsSeen(page)).join(', ')})`);
  await page.getByRole('button', { name: 'Close' }).click();
  await detailClosed(page);
  await until('the filter to empty', async () => (await tableSeen(page)).length === 0);
  check(true, 'decided runs leave the "awaiting approval" view');
  await page.selectOption('#f-approval', '');
  await until('the bulk buttons on again', async () => await bulkCancel.isEnabled() && (await seen(page, '#bulk-why')) === null);
  check(true, 'without the approval filter the bulk buttons are on and no longer say why not');
}

// One psql query on db, its first value.
function psql(db, query) {
  return execFileSync('psql', [db, '-qAtX', '-v', 'ON_ERROR_STOP=1', '-c', query]).toString().trim();
}

// The run types the Type filter offers, by their text.
const typesOffered = (page) => page.locator('#f-type option').allInnerTexts();

async function bulkCancel(page, base, db) {
  const button = page.getByRole('button', { name: 'Cancel all that match…' });
  const msg = async () => (await seen(page, '#bulk-msg')) || '';
  await submitMany(base, 'demo', 3000, true);
  await page.selectOption('#f-status', 'queued');
  await until('the demo type in the filter', async () => (await typesOffered(page)).includes('demo'));
  await page.selectOption('#f-type', 'demo');
  // the count in the confirmation; dismissed, nothing changes
  let asked = onDialog(page, false);
  await button.click();
  const text = await asked;
  check(/Cancel all 3,001 runs that match \(status queued, type demo\)\?/.test(text), `the confirmation shows the count (${text})`);
  await until('the dismissal', async () => /Nothing was cancelled/.test(await msg()));
  check((await api(base, '/runs?status=queued&type=demo&limit=1')).json.runs.length === 1, 'dismissed: nothing was cancelled');

  // Every text the message shows while it runs, with "bar " before it
  // while the progress bar is on the screen, kept by the page itself
  // (polling from here could miss a short action).
  await page.evaluate(() => {
    window.seenBulk = [];
    const msg = document.getElementById('bulk-msg');
    const bar = document.getElementById('bulk-progress');
    new MutationObserver(() => window.seenBulk.push(`${bar.checkVisibility() ? 'bar ' : ''}${msg.innerText}`))
      .observe(msg, { childList: true, characterData: true, subtree: true });
  });
  // A run of the cancel's fourth batch (500 a batch, in created_at order)
  // locked for 10 s: the first three batches commit and reach the page's
  // stream while the fourth waits, however loaded the machine (2 s, then
  // 5 s, were not always enough with the whole suite running on 2 cores),
  // so the progress has something to show before the answer comes.
  const locker = spawn('psql', [db, '-qX', '-v', 'ON_ERROR_STOP=1', '-c',
    "BEGIN; SELECT 1 FROM runs WHERE id = (SELECT id FROM runs WHERE type = 'demo' AND " +
    "status = 'queued' ORDER BY created_at, id OFFSET 1600 LIMIT 1) FOR UPDATE; " +
    'SELECT pg_sleep(10); COMMIT;'], { stdio: 'ignore' });
  await until('the lock on a run of the fourth batch', async () =>
    psql(db, "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep' " +
      'AND datname = current_database()') === '1');
  asked = onDialog(page, true);
  await button.click();
  await asked;
  const done = await until('the bulk cancel to end', async () => {
    const t = await msg();
    return /^Cancelled/.test(t) ? t : null;
  }, 60000);
  const texts = await page.evaluate(() => window.seenBulk);
  await new Promise((r) => (locker.exitCode !== null ? r() : locker.on('exit', r)));
  check(done === 'Cancelled 3,001 of 3,001 matching runs.', `the final count (${done})`);
  check(texts.some((t) => t === 'bar Cancelling 3,001 runs…'), 'the progress bar showed while it ran');
  const counted = texts.filter((t) => /^bar Cancelling… [\d,]+ of 3,001 runs$/.test(t));
  check(counted.length > 0, `the stream's events moved the progress while it ran (${counted.join(', ')})`);
  const left = (await api(base, '/runs?status=queued&type=demo&limit=1')).json.runs.length;
  check(left === 0, 'no queued demo run is left on the server');
  const last = counted.length ? /([\d,]+) of/.exec(counted[counted.length - 1])[1] : null;
  check(await page.locator('#bulk-progress').isHidden(),
    `once it ended the progress bar is gone, the message giving the count (the bar's last count: ${last})`);
}

async function bulkRetry(page, base) {
  await submitMany(base, 'flaky', 20, false);
  await until('the flaky runs to fail', async () =>
    (await api(base, '/runs?type=flaky&outcome=failed&limit=50')).json.runs.length === 20);
  const cancel = page.getByRole('button', { name: 'Cancel all that match…' });
  const retry = page.getByRole('button', { name: 'Retry all that match…' });
  await page.selectOption('#f-status', '');
  await until('the flaky type in the filter', async () => (await typesOffered(page)).includes('flaky'));
  await page.selectOption('#f-type', 'flaky');
  await page.selectOption('#f-outcome', 'failed');
  const asked = onDialog(page, true);
  await retry.click();
  check(/Retry all 20 runs that match \(outcome failed, type flaky\)\?/.test(await asked), 'Retry shows its count');
  const done = await until('the bulk retry to end', async () => {
    const t = (await seen(page, '#bulk-msg')) || '';
    return /^Retried/.test(t) ? t : null;
  });
  check(done === 'Retried 20 of 20 matching runs.', `the retry's count (${done})`);
  await page.fill('#f-search', 'x');
  const why = await until('the reason next to the buttons', () => seen(page, '#bulk-why'), 5000).catch(() => null);
  check(await cancel.isDisabled() && await retry.isDisabled() && why === 'Clear the search to act on all that match.',
    `the bulk buttons are off while searching, and say why (${why})`);
  await page.fill('#f-search', '');
  await until('the buttons on again', async () => await retry.isEnabled(), 5000).catch(() => {});
  check(await retry.isEnabled() && (await seen(page, '#bulk-why')) === null, 'and on again without the search, with no reason shown');
}

async function main() {
  const pw = loadPlaywright();
  const { tmp, art } = dirs('dashboard-approvals');
  const log = join(tmp, 'opsrun.log');
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const db = createDb('browser_dashboard_approvals');
  const proc = await startOpsrun({ port, db, log, tmp, config: {
    queue: { shutdown_grace_s: 1 },
    limits: { submit_rate_per_s: 0 },
    run_types: {
      gated: { action: 'simulate', params: { duration_ms: 0 }, approval: { timeout_s: 3600 } },
      flaky: { action: 'simulate', params: { fail: 'permanent' } },
    },
  } });
  let browser;
  const problems = [];
  try {
    browser = await launch(pw);
    const page = await (await browser.newContext({ viewport: { width: 1300, height: 900 } })).newPage();
    watch(page, problems);
    await page.goto(base + '/');
    await connection(page, /^live$/);
    await approvals(page, base, art);
    await bulkCancel(page, base, db);
    await bulkRetry(page, base);
    await screenshot(page, join(art, 'dashboard-approvals.png'));
  } catch (e) {
    check(false, `the test ran to its end: ${e.stack || e}`);
  } finally {
    if (browser) await browser.close();
    await stopOpsrun(proc);
  }
  for (const p of problems) console.log('  ' + p);
  check(problems.length === 0, `no console error, failed request or error answer (${problems.length})`);
  if (failures.length) {
    console.error(`dashboard_approvals.mjs: ${failures.length} failed; opsrun's log ${log}:\n${tail(log)}`);
    process.exit(1);
  }
  cleanup(tmp);
}

main().catch((e) => {
  console.error('dashboard_approvals.mjs:', e);
  process.exit(1);
});
