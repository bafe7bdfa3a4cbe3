// tests/browser/dashboard_workflows.mjs — a workflow in the dashboard, at
// 1280 and at 360 px wide, read as a person reads it: the detail of a
// running workflow draws its steps by depth (each with its run type, what
// it waits for, and its state), and the states change on the screen as the
// steps run (an exec step that waits for a file the test creates): first
// step running, then succeeded with the next two running or done, the last
// pending, and at the end every step done and the branch for failures
// skipped. A step's state is a link to its run, whose detail names the
// workflow as a link back. Each state is screenshotted
// (browser-artifacts/workflows-*.png) through the harness, which fails if
// anything meant to be hidden is on the screen.
//
// Needs what cors.mjs needs (see there); exits 77 when playwright-core
// or chromium is missing.
import { join } from 'node:path';
import {
  api, checker, cleanup, connection, createDb, detailOf, dirs, fieldSeen, freePort, launch,
  loadPlaywright, screenshot, seen, startOpsrun, stopOpsrun, tail, until, watch,
} from './lib/harness.mjs';
import { release } from './lib/logs.mjs';

const { check, failures } = checker();

// Waits (at most 60 s) for the file its first argument names, then ends.
const AWAIT = 'i=0; while [ ! -e "$1" ] && [ "$i" -lt 600 ]; do sleep 0.1; i=$((i + 1)); done';
const gated = {
  action: 'exec', max_attempts: 1,
  params: { argv: ['/bin/sh', '-c', `${AWAIT}; echo '{}'`, 'gate', '{{input:/flag}}'] },
};
const quick = { action: 'simulate', params: { duration_ms: 50, steps: 1 } };

// What a person reads in the box of step name: its lines, joined by " | ".
const boxSeen = (page, name) => seen(page, `#d-workflow li[data-step="${name}"]`)
  .then((t) => (t === null ? null : t.split('\n').map((x) => x.trim()).filter(Boolean).join(' | ')));

async function shot(page, art, name, width) {
  const file = `workflows-${name}-${width}.png`;
  try {
    await screenshot(page, join(art, file));
    check(true, `${width} px, ${name}: nothing hidden is on the screen (${file})`);
  } catch (e) {
    check(false, `${width} px, ${name}: ${e.message}`);
  }
}

// Waits until step name's box reads want; returns what it read last.
async function boxReads(page, name, want, limitMs = 20000) {
  return until(`step ${name} to read "${want}"`, async () => {
    const t = await boxSeen(page, name);
    return t === want ? t : null;
  }, limitMs).catch(async () => boxSeen(page, name));
}

async function look(browser, base, tmp, art, width, height) {
  const problems = [];
  const page = await (await browser.newContext({ viewport: { width, height } })).newPage();
  const w = watch(page, problems);
  await page.goto(base + '/');
  await connection(page, /^live$/);
  const id = `disk-${width}`;
  const flag1 = join(tmp, `diag-${width}`);
  const flag2 = join(tmp, `clean-${width}`);
  const r = await api(base, '/alerts', {
    method: 'POST', body: { alert_type: 'disk-full', run_id: id, data: { f1: flag1, f2: flag2 } },
  });
  if (r.status !== 202) throw new Error(`POST /alerts answered ${r.status}: ${r.text}`);
  await page.evaluate((h) => { location.hash = h; }, `#/runs/${encodeURIComponent(id)}`);
  await detailOf(page, id);

  // diagnose runs; the rest wait for it
  let t = await boxReads(page, 'diagnose', `diagnose | collect-diag | running | ${id}.diagnose`);
  check(t === `diagnose | collect-diag | running | ${id}.diagnose`, `${width} px: diagnose is drawn running, with its run ("${t}")`);
  t = await boxSeen(page, 'verify');
  check(t === 'verify | verify-disk | after clean_tmp, rotate_logs | pending',
    `${width} px: verify says what it waits for ("${t}")`);
  t = await boxSeen(page, 'page');
  check(t === 'page | page-oncall | after verify · when failed | pending', `${width} px: page says it is for failures ("${t}")`);
  check(await fieldSeen(page, 'Status') === 'waiting', `${width} px: the workflow is waiting`);
  check(await seen(page, '#log-title') === null, `${width} px: a workflow shows no log of its own`);
  await shot(page, art, 'first', width);

  // diagnose done: clean_tmp runs (it waits for its file), rotate_logs ends
  release(flag1);
  t = await boxReads(page, 'diagnose', `diagnose | collect-diag | succeeded | ${id}.diagnose`);
  check(t === `diagnose | collect-diag | succeeded | ${id}.diagnose`, `${width} px: diagnose turns succeeded ("${t}")`);
  t = await boxReads(page, 'clean_tmp', `clean_tmp | clean-tmp | after diagnose | running | ${id}.clean_tmp`);
  check(t === `clean_tmp | clean-tmp | after diagnose | running | ${id}.clean_tmp`, `${width} px: clean_tmp turns running ("${t}")`);
  t = await boxReads(page, 'rotate_logs', `rotate_logs | rotate-logs | after diagnose | succeeded | ${id}.rotate_logs`);
  check(t === `rotate_logs | rotate-logs | after diagnose | succeeded | ${id}.rotate_logs`, `${width} px: rotate_logs ran beside it ("${t}")`);
  check((await boxSeen(page, 'verify')).endsWith('| pending'), `${width} px: verify still waits for clean_tmp`);
  await shot(page, art, 'middle', width);

  // a step's state is a link to its run, which names the workflow
  await page.locator('#d-workflow').getByRole('button', { name: `${id}.clean_tmp`, exact: true }).click();
  await detailOf(page, `${id}.clean_tmp`);
  check(await fieldSeen(page, 'Step clean_tmp of') === id, `${width} px: the step's detail names its workflow`);
  check(await seen(page, '#log-title') === 'Log', `${width} px: a step shows its log`);
  await shot(page, art, 'step', width);
  await page.locator('#d-body').getByRole('button', { name: id, exact: true }).click();
  await detailOf(page, id);
  check(true, `${width} px: the workflow opens again from its step`);

  // the end
  release(flag2);
  t = await boxReads(page, 'verify', `verify | verify-disk | after clean_tmp, rotate_logs | succeeded | ${id}.verify`);
  check(t === `verify | verify-disk | after clean_tmp, rotate_logs | succeeded | ${id}.verify`, `${width} px: verify ran and succeeded ("${t}")`);
  t = await boxReads(page, 'page', 'page | page-oncall | after verify · when failed | skipped');
  check(t === 'page | page-oncall | after verify · when failed | skipped', `${width} px: page is skipped ("${t}")`);
  const done = await until('the workflow to read succeeded', async () =>
    (await fieldSeen(page, 'Outcome')) === 'succeeded').catch(() => false);
  check(done, `${width} px: the workflow ends succeeded (${await fieldSeen(page, 'Outcome')})`);
  const timeline = await seen(page, '#d-events');
  check(timeline !== null && timeline.includes('diagnose succeeded; started clean_tmp, rotate_logs'),
    `${width} px: the timeline tells the steps' story`);
  await shot(page, art, 'done', width);

  const wide = await page.evaluate(() => document.documentElement.scrollWidth);
  check(wide <= width, `${width} px: nothing scrolls sideways (${wide})`);
  w.closing = true;
  await page.context().close();
  for (const p of problems) console.log('  ' + p);
  check(problems.length === 0, `${width} px: no console error, failed request or error answer (${problems.length})`);
}

async function main() {
  const pw = loadPlaywright();
  const { tmp, art } = dirs('dashboard-workflows');
  const log = join(tmp, 'opsrun.log');
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const proc = await startOpsrun({ port, db: createDb('browser_dashboard_workflows'), log, tmp, config: {
    queue: { shutdown_grace_s: 1 },
    run_types: {
      'collect-diag': gated, 'clean-tmp': gated, 'rotate-logs': quick, 'verify-disk': quick,
      'page-oncall': quick,
      'disk-full': { action: 'workflow', params: { steps: {
        diagnose: { run_type: 'collect-diag', data: { flag: '{{input:/f1}}' } },
        clean_tmp: { run_type: 'clean-tmp', needs: ['diagnose'], data: { flag: '{{input:/f2}}' } },
        rotate_logs: { run_type: 'rotate-logs', needs: ['diagnose'] },
        verify: { run_type: 'verify-disk', needs: ['clean_tmp', 'rotate_logs'] },
        page: { run_type: 'page-oncall', needs: ['verify'], when: 'failed' },
      } } },
    },
  } });
  let browser;
  try {
    browser = await launch(pw);
    await look(browser, base, tmp, art, 1280, 800);
    await look(browser, base, tmp, art, 360, 740);
  } catch (e) {
    check(false, `the test ran to its end: ${e.stack || e}`);
  } finally {
    if (browser) await browser.close();
    await stopOpsrun(proc);
  }
  check(proc.exitCode === 0, `opsrun exited cleanly (status ${proc.exitCode}, signal ${proc.signalCode})`);
  console.log(`screenshots in ${art}`);
  if (failures.length) {
    console.error(`dashboard_workflows.mjs: ${failures.length} failed; opsrun's log ${log}:\n${tail(log)}`);
    process.exit(1);
  }
  cleanup(tmp);
}

main().catch((e) => {
  console.error('dashboard_workflows.mjs:', e);
  process.exit(1);
});
