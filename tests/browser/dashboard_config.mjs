// tests/browser/dashboard_config.mjs — the configuration each replica runs,
// in the dashboard's overview, read as a person reads it, at 1280 and at
// 360 px wide: two replicas on one database with different configurations;
// the dashboard of the first shows its version and that the other replica
// runs another; after the first reloads the second's configuration
// (POST /admin/reload), it shows the new version and no difference. Each
// state is screenshotted (browser-artifacts/config-*.png) through the
// harness, which fails if anything meant to be hidden is on the screen.
//
// Needs what cors.mjs needs (see there); exits 77 when playwright-core
// or chromium is missing.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  api, checker, cleanup, connection, createDb, dirs, freePort, launch, loadPlaywright,
  screenshot, seen, startOpsrun, stopOpsrun, tail, until, watch,
} from './lib/harness.mjs';

const { check, failures } = checker();

const base = (extra) => ({
  queue: { heartbeat_interval_s: 1, orphan_after_s: 5, shutdown_grace_s: 1 },
  run_types: { first: { action: 'simulate' }, ...extra },
});

async function shot(page, art, name, width) {
  const file = `config-${name}-${width}.png`;
  try {
    await screenshot(page, join(art, file));
    check(true, `${width} px, ${name}: nothing hidden is on the screen (${file})`);
  } catch (e) {
    check(false, `${width} px, ${name}: ${e.message}`);
  }
}

const version = async (url) => (await api(url, '/healthz')).json.config.version;

async function look(browser, a, tmpA, b, art, width, height) {
  const problems = [];
  const page = await (await browser.newContext({ viewport: { width, height } })).newPage();
  const w = watch(page, problems);
  writeFileSync(join(tmpA, 'config.json'), JSON.stringify(base()));
  check((await api(a, '/admin/reload', { method: 'POST' })).status === 200, `${width} px: the first replica reloaded its own configuration`);
  const va = await version(a);
  const vb = await version(b);
  check(va !== vb, `${width} px: the replicas run different configurations (${va}, ${vb})`);
  await page.goto(a + '/');
  await connection(page, /^live$/);
  const drift = `${va} (1 other replica runs another)`;
  const shown = await until('the overview to show the other version', async () => {
    const t = await seen(page, '#s-config');
    return t === drift ? t : null;
  }, 15000).catch(async () => seen(page, '#s-config'));
  check(shown === drift, `${width} px: the overview says the other replica runs another ("${shown}")`);
  await shot(page, art, 'drift', width);

  writeFileSync(join(tmpA, 'config.json'), JSON.stringify(base({ second: { action: 'simulate' } })));
  const r = await api(a, '/admin/reload', { method: 'POST' });
  check(r.status === 200 && r.json.config_version === vb,
    `${width} px: the reload answered 200 with the second's version (${r.status} ${r.text})`);
  const same = await until('the overview to show one version', async () => {
    const t = await seen(page, '#s-config');
    return t === vb ? t : null;
  }, 15000).catch(async () => seen(page, '#s-config'));
  check(same === vb, `${width} px: after the reload it shows the one version, no difference ("${same}")`);
  await shot(page, art, 'agree', width);
  const wide = await page.evaluate(() => document.documentElement.scrollWidth);
  check(wide <= width, `${width} px: nothing scrolls sideways (${wide})`);
  w.closing = true;
  await page.context().close();
  for (const p of problems) console.log('  ' + p);
  check(problems.length === 0, `${width} px: no console error, failed request or error answer (${problems.length})`);
}

async function main() {
  const pw = loadPlaywright();
  const { tmp, art } = dirs('dashboard-config');
  const { tmp: tmpB } = dirs('dashboard-config-b');
  const log = join(tmp, 'opsrun.log');
  const db = createDb('browser_dashboard_config');
  const [pa, pb] = [await freePort(), await freePort()];
  const a = `http://127.0.0.1:${pa}`;
  const b = `http://127.0.0.1:${pb}`;
  const procB = await startOpsrun({ port: pb, db, log: join(tmpB, 'opsrun.log'), tmp: tmpB,
    config: base({ second: { action: 'simulate' } }) });
  const procA = await startOpsrun({ port: pa, db, log, tmp, config: base() });
  let browser;
  try {
    browser = await launch(pw);
    await look(browser, a, tmp, b, art, 1280, 800);
    await look(browser, a, tmp, b, art, 360, 740);
  } catch (e) {
    check(false, `the test ran to its end: ${e.stack || e}`);
  } finally {
    if (browser) await browser.close();
    await stopOpsrun(procA);
    await stopOpsrun(procB);
  }
  check(procA.exitCode === 0 && procB.exitCode === 0,
    `both exited cleanly (${procA.exitCode}, ${procB.exitCode})`);
  console.log(`screenshots in ${art}`);
  if (failures.length) {
    console.error(`dashboard_config.mjs: ${failures.length} failed; opsrun's log ${log}:\n${tail(log)}`);
    process.exit(1);
  }
  cleanup(tmp);
  cleanup(tmpB);
}

main().catch((e) => {
  console.error('dashboard_config.mjs:', e);
  process.exit(1);
});
