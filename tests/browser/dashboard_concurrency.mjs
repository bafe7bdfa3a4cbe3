// tests/browser/dashboard_concurrency.mjs — why a run waits, in the
// dashboard, at 1280 and at 360 px wide, read as a person reads it:
// - two runs of a concurrency key that allows one at a time (an exec
//   command that waits for a file the test creates): once a claim held the
//   second one back, the overview counts it as queued and held ("1 (1
//   held)"); its detail shows its key and says that it waits for the key
//   and which run holds it; that run is a link, and clicking it opens the
//   holder, whose detail shows its key and no waiting line; once the
//   holder ends, the waiting line goes and the second run runs;
// - a run of a type without a key shows no concurrency; with its tenant at
//   its cap of two running runs, a third such run says that it waits for
//   the tenant's cap, and runs once the others end.
// Each state is screenshotted (browser-artifacts/concurrency-*.png)
// through the harness, which fails if anything meant to be hidden is on
// the screen.
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
const gated = (extra) => ({
  action: 'exec', max_attempts: 1,
  params: { argv: ['/bin/sh', '-c', `${AWAIT}; echo '{}'`, 'gate', '{{input:/flag}}'] },
  ...extra,
});

async function submit(base, type, data) {
  const r = await api(base, '/alerts', { method: 'POST', body: { alert_type: type, data } });
  if (r.status !== 202) throw new Error(`POST /alerts answered ${r.status}: ${r.text}`);
  return r.json.run_id;
}

const statusOf = (base, id, want) => until(`run ${id} to be ${want}`, async () =>
  (await api(base, `/runs/${id}`)).json.status === want);

// The open detail's link (a button) to run id.
const linkTo = (page, id) => page.locator('#d-body').getByRole('button', { name: id, exact: true });

async function openByAddress(page, id) {
  await page.evaluate((h) => { location.hash = h; }, `#/runs/${encodeURIComponent(id)}`);
  await detailOf(page, id);
}

async function shot(page, art, name, width) {
  const file = `concurrency-${name}-${width}.png`;
  try {
    await screenshot(page, join(art, file));
    check(true, `${width} px, ${name}: nothing hidden is on the screen (${file})`);
  } catch (e) {
    check(false, `${width} px, ${name}: ${e.message}`);
  }
}

// A key held by one run, a second run waiting for it.
async function keyWaits(page, base, tmp, art, width) {
  const flagA = join(tmp, `a-${width}`);
  const flagB = join(tmp, `b-${width}`);
  const a = await submit(base, 'restart', { host: 'web-1', flag: flagA });
  await statusOf(base, a, 'running');
  const b = await submit(base, 'restart', { host: 'web-1', flag: flagB });
  await until(`run ${b} to be held`, async () =>
    (await api(base, `/runs/${b}`)).json.concurrency?.held === true);

  // a held run is queued: the overview counts it, and says it is held
  const queued = await until('the overview to count the held run', async () => {
    const t = await seen(page, '#s-queued');
    return t === '1 (1 held)' ? t : null;
  }, 10000).catch(async () => seen(page, '#s-queued'));
  check(queued === '1 (1 held)', `${width} px: the overview counts the held run as queued, and held ("${queued}")`);
  await shot(page, art, 'held', width);

  await openByAddress(page, b);
  const want = `Waiting for key web-1 (group host): held by ${a} (running)`;
  const waiting = await until('the waiting line', async () => {
    const t = await seen(page, '#d-waiting');
    return t === want ? t : null;
  }, 15000).catch(async () => seen(page, '#d-waiting'));
  check(waiting === want, `${width} px: the queued run says what it waits for ("${waiting}")`);
  check(await fieldSeen(page, 'Status') === 'queued', `${width} px: and it is queued`);
  const conc = await fieldSeen(page, 'Concurrency');
  check(conc === 'key web-1, group host: at most 1 running, strategy queue',
    `${width} px: its concurrency is shown ("${conc}")`);
  check(await linkTo(page, a).isVisible(), `${width} px: the holder is a link`);
  await shot(page, art, 'waiting', width);

  await linkTo(page, a).click();
  await detailOf(page, a);
  check(true, `${width} px: clicking the holder opened it`);
  await until('the holder to read running', async () => (await fieldSeen(page, 'Status')) === 'running');
  check(await seen(page, '#d-waiting') === null, `${width} px: the holder waits for nothing`);
  check(await fieldSeen(page, 'Concurrency') === conc, `${width} px: the holder shows the same key`);
  await shot(page, art, 'holder', width);

  await openByAddress(page, b);
  await until('the waiting line again', async () => (await seen(page, '#d-waiting')) === want);
  release(flagA);
  const gone = await until('the waiting line to go and the run to run', async () =>
    (await seen(page, '#d-waiting')) === null && (await fieldSeen(page, 'Status')) === 'running', 30000)
    .catch(() => false);
  check(gone, `${width} px: once the holder ended the line went and the run runs ` +
    `(status ${await fieldSeen(page, 'Status')}, waiting ${await seen(page, '#d-waiting')})`);
  await shot(page, art, 'started', width);
  release(flagB);
  await statusOf(base, b, 'completed');
}

// A tenant at its cap of two running runs.
async function capWaits(page, base, tmp, art, width) {
  const flagC = join(tmp, `c-${width}`);
  const flagD = join(tmp, `d-${width}`);
  const c = await submit(base, 'block', { flag: flagC });
  const c2 = await submit(base, 'block', { flag: flagC, second: true });
  await statusOf(base, c, 'running');
  await statusOf(base, c2, 'running');
  const d = await submit(base, 'block', { flag: flagD });

  await openByAddress(page, d);
  const want = 'Waiting: tenant default is at its cap of 2 running runs';
  const waiting = await until('the cap line', async () => {
    const t = await seen(page, '#d-waiting');
    return t === want ? t : null;
  }, 15000).catch(async () => seen(page, '#d-waiting'));
  check(waiting === want, `${width} px: a run over its tenant's cap says so ("${waiting}")`);
  check(await fieldSeen(page, 'Concurrency') === null, `${width} px: a run without a key shows no concurrency`);
  await shot(page, art, 'tenant-cap', width);
  release(flagC);
  const gone = await until('the cap line to go', async () =>
    (await seen(page, '#d-waiting')) === null && (await fieldSeen(page, 'Status')) === 'running', 30000)
    .catch(() => false);
  check(gone, `${width} px: once the other run ended the line went and the run runs`);
  release(flagD);
  await statusOf(base, d, 'completed');
}

async function look(browser, base, tmp, art, width, height) {
  const problems = [];
  const page = await (await browser.newContext({ viewport: { width, height } })).newPage();
  const w = watch(page, problems);
  await page.goto(base + '/');
  await connection(page, /^live$/);
  await keyWaits(page, base, tmp, art, width);
  await capWaits(page, base, tmp, art, width);
  const wide = await page.evaluate(() => document.documentElement.scrollWidth);
  check(wide <= width, `${width} px: nothing scrolls sideways (${wide})`);
  w.closing = true;
  await page.context().close();
  for (const p of problems) console.log('  ' + p);
  check(problems.length === 0, `${width} px: no console error, failed request or error answer (${problems.length})`);
}

async function main() {
  const pw = loadPlaywright();
  const { tmp, art } = dirs('dashboard-concurrency');
  const log = join(tmp, 'opsrun.log');
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const proc = await startOpsrun({ port, db: createDb('browser_dashboard_concurrency'), log, tmp, config: {
    queue: { shutdown_grace_s: 1 },
    tenants: { default: { max_running: 2 } },
    run_types: {
      restart: gated({ concurrency: { group: 'host', key: '{{input:/host}}', max_running: 1 } }),
      block: gated(),
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
    console.error(`dashboard_concurrency.mjs: ${failures.length} failed; opsrun's log ${log}:\n${tail(log)}`);
    process.exit(1);
  }
  cleanup(tmp);
}

main().catch((e) => {
  console.error('dashboard_concurrency.mjs:', e);
  process.exit(1);
});
