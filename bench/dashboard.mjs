// bench/dashboard.mjs — how the dashboard (GET /) holds up with 10,000 runs
// loaded and about 100 events/s, in headless Chromium. A measurement, not
// a test: it prints figures and judges nothing.
//
//   node bench/dashboard.mjs [RUNS] [EVENTS_PER_S] [SECONDS]   defaults 10000 100 20
//
// It starts a private PostgreSQL cluster (scripts/pg.sh, --fast: the page is
// measured, not the disk) and a Release opsrun (OPSRUN_BIN, default
// build/opsrun; build it first: cmake -S . -B build && cmake --build build),
// submits RUNS short demo runs and waits for them, opens the page and loads
// every run (the newest page, then "Load older runs" until there is none),
// then measures three phases of the same page, in the same run:
//   baseline  10 s with no event;
//   events    SECONDS s of 300 ms demo runs submitted at EVENTS_PER_S / 5
//             per second (each writes about 5 events: submitted, started,
//             progress, finished; 16 workers keep up); the events the
//             database wrote and those the page's stream delivered in that
//             time are counted and printed;
//   +scroll   10 s more of the same while the table is scrolled (350 px
//             every 250 ms).
// For each: frame times (requestAnimationFrame deltas) p50/p99/max, and
// long tasks (PerformanceObserver "longtask": over 50 ms) count and total.
// Also: the time to load every run, the rows in the DOM, the events the
// database wrote during the load phase, and the size of web/.
//
// Needs: node, chromium (/usr/bin/chromium or OPSRUN_CHROMIUM), and
// playwright-core (OPSRUN_PLAYWRIGHT_DIR, default .cache/playwright-core-*
// as scripts/test.sh installs it).
import { execFileSync, spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { existsSync, mkdtempSync, openSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import { readFileSync } from 'node:fs';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const RUNS = Number(process.argv[2] || 10000);
const RATE = Number(process.argv[3] || 100);
const SECONDS = Number(process.argv[4] || 20);
const PORT = 18191;
const BASE = `http://127.0.0.1:${PORT}`;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function playwright() {
  let dir = process.env.OPSRUN_PLAYWRIGHT_DIR;
  if (!dir) {
    const c = join(ROOT, '.cache');
    const d = existsSync(c) && readdirSync(c).find((n) => n.startsWith('playwright-core-'));
    if (d) dir = join(c, d);
  }
  if (!dir) throw new Error('playwright-core not found: run scripts/test.sh once, or set OPSRUN_PLAYWRIGHT_DIR');
  return createRequire(join(dir, 'node_modules', 'x.js'))('playwright-core');
}

function webSize() {
  let raw = 0;
  let gz = 0;
  const dir = join(ROOT, 'web');
  for (const f of readdirSync(dir)) {
    const b = readFileSync(join(dir, f));
    raw += statSync(join(dir, f)).size;
    gz += gzipSync(b).length;
  }
  return { raw, gz, files: readdirSync(dir).length };
}

const pg = (...args) => execFileSync('bash', [join(ROOT, 'scripts/pg.sh'), ...args], { encoding: 'utf8' }).trim();
const psql = (url, sql) => execFileSync('psql', [url, '-Atqc', sql], { encoding: 'utf8' }).trim();

async function post(body) {
  const r = await fetch(BASE + '/alerts', { method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(body) });
  if (r.status !== 202) throw new Error(`POST /alerts: ${r.status} ${await r.text()}`);
}

// The hub's position (GET /healthz) up to the newest event: the page
// then starts from a quiet stream.
async function settled(url) {
  const last = Number(psql(url, 'SELECT coalesce(max(id), 0) FROM run_events'));
  for (;;) {
    const h = await (await fetch(BASE + '/healthz')).json();
    if (h.streams && h.streams.position >= last) return;
    await sleep(200);
  }
}

async function fill(n) {
  let next = 0;
  const worker = async () => {
    while (next < n) {
      const i = next++;
      await post({ alert_type: 'demo', data: { duration_ms: 1, steps: 1, fill: i } });
    }
  };
  await Promise.all(Array.from({ length: 16 }, worker));
  for (;;) {
    const h = await (await fetch(BASE + '/healthz')).json();
    const active = Object.values(h.runs || {}).reduce((a, b) => a + b, 0);
    if (!active) return;
    await sleep(500);
  }
}

// Installed before the page's own scripts: frame deltas and long tasks,
// from the moment window.__bench.reset() is called.
const RECORDER = () => {
  const b = { frames: [], long: [], last: 0, events: 0, all: 0, from: 0 };
  b.reset = (from) => { b.frames = []; b.long = []; b.last = 0; b.events = 0; b.all = 0; b.from = from || 0; };
  // counts the status and progress events the page's stream delivers
  const add = EventSource.prototype.addEventListener;
  EventSource.prototype.addEventListener = function (type, fn, opts) {
    const counted = type === 'status' || type === 'progress'
      ? function (e) {
        b.all++;
        if (Number(e.lastEventId) > b.from) b.events++;
        return fn.call(this, e);
      } : fn;
    return add.call(this, type, counted, opts);
  };
  const tick = (t) => {
    if (b.last) b.frames.push(t - b.last);
    b.last = t;
    requestAnimationFrame(tick);
  };
  requestAnimationFrame(tick);
  new PerformanceObserver((l) => { for (const e of l.getEntries()) b.long.push(e.duration); })
    .observe({ type: 'longtask', buffered: false });
  window.__bench = b;
};

// The page's own time from Chrome's Performance domain, in ms: main-thread
// tasks (wall time), of which script, style and layout, and DevTools
// commands (this script's scrolling and reads); and CPU time of the main
// thread and of the whole renderer process, which, unlike wall time, other
// processes on a busy machine do not inflate.
async function busy(cdp) {
  const { metrics } = await cdp.send('Performance.getMetrics');
  const m = Object.fromEntries(metrics.map((x) => [x.name, x.value]));
  return { task: m.TaskDuration * 1000, script: m.ScriptDuration * 1000,
    layout: (m.LayoutDuration + m.RecalcStyleDuration) * 1000, devtools: m.DevToolsCommandDuration * 1000,
    thread: m.ThreadTime * 1000, process: m.ProcessTime * 1000 };
}

function perSec(a, b, seconds) {
  const f = (k) => ((b[k] - a[k]) / seconds).toFixed(0);
  return `per second: main-thread tasks ${f('task')} ms (script ${f('script')}, style and layout ` +
    `${f('layout')}, DevTools ${f('devtools')}); CPU main thread ${f('thread')} ms, renderer ${f('process')} ms`;
}

function stats(name, { frames, long }) {
  const s = [...frames].sort((a, b) => a - b);
  const q = (p) => (s.length ? s[Math.min(s.length - 1, Math.floor(p * s.length))] : NaN);
  const total = long.reduce((a, b) => a + b, 0);
  console.log(`${name.padEnd(9)} frames ${String(s.length).padStart(5)}  p50 ${q(0.5).toFixed(1)} ms  ` +
    `p99 ${q(0.99).toFixed(1)} ms  max ${(s[s.length - 1] || 0).toFixed(1)} ms  ` +
    `long tasks ${long.length} (${total.toFixed(0)} ms)`);
}

async function main() {
  const bin = process.env.OPSRUN_BIN || join(ROOT, 'build/opsrun');
  const chromium = process.env.OPSRUN_CHROMIUM || '/usr/bin/chromium';
  const pw = playwright();
  const tmp = mkdtempSync(join(tmpdir(), 'opsrun-bench-dash-'));
  execFileSync('chmod', ['0755', tmp]);
  const data = join(tmp, 'pg');
  pg('start', data, '--fast');
  let proc;
  let browser;
  try {
    pg('createdb', data, 'opsrun');
    const url = pg('url', data, 'opsrun');
    const cfg = join(tmp, 'config.json');
    writeFileSync(cfg, JSON.stringify({
      queue: { workers: 16, progress_interval_ms: 0, shutdown_grace_s: 1 },
      limits: { submit_rate_per_s: 100000, submit_burst: 100000 },
    }));
    proc = spawn(bin, ['serve', '--listen', `127.0.0.1:${PORT}`, '--database-url', url, '--config', cfg],
      { stdio: ['ignore', 'ignore', openSync(join(tmp, 'opsrun.log'), 'w')] });
    for (let i = 0; ; i++) {
      try {
        if ((await fetch(BASE + '/readyz')).ok) break;
      } catch { /* not yet */ }
      if (i > 400) throw new Error('opsrun did not start');
      await sleep(50);
    }
    let t = Date.now();
    await fill(RUNS);
    await settled(url);
    console.log(`submitted and finished ${RUNS} runs in ${((Date.now() - t) / 1000).toFixed(1)} s`);

    browser = await pw.chromium.launch({ executablePath: chromium, args: ['--no-sandbox'] });
    const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    await page.addInitScript(RECORDER);
    t = Date.now();
    await page.goto(BASE + '/');
    await page.waitForSelector('#conn[data-state="live"]');
    await page.waitForFunction(() => document.querySelectorAll('tr.run').length > 0);
    while (await page.isEnabled('#older')) {
      await page.click('#older');
      await page.waitForFunction(() => !document.getElementById('older').disabled || /No older/.test(document.getElementById('older').textContent));
    }
    const count = await page.textContent('#count');
    console.log(`page: ${count} loaded in ${((Date.now() - t) / 1000).toFixed(1)} s`);

    const cdp = await page.context().newCDPSession(page);
    await cdp.send('Performance.enable');
    await page.evaluate(() => window.__bench.reset());
    let b0 = await busy(cdp);
    await sleep(10000);
    stats('baseline', await page.evaluate(() => window.__bench));
    console.log(`baseline  ${perSec(b0, await busy(cdp), 10)}`);

    // Runs at RATE / 5 per second for SECONDS + 10 s: the events phase,
    // then the scroll phase.
    const before = Number(psql(url, 'SELECT coalesce(max(id), 0) FROM run_events'));
    const perSecond = RATE / 5;
    let sent = 0;
    const t0 = Date.now();
    const total = (SECONDS + 10) * 1000;
    const submitter = (async () => {
      while (Date.now() - t0 < total) {
        const due = Math.floor(((Date.now() - t0) / 1000) * perSecond);
        while (sent < due) post({ alert_type: 'demo', data: { duration_ms: 300, steps: 3, load: sent++ } });
        await sleep(20);
      }
    })();
    await page.evaluate((from) => window.__bench.reset(from), before);
    b0 = await busy(cdp);
    await sleep(SECONDS * 1000);
    const load = await page.evaluate(() => window.__bench);
    const b1 = await busy(cdp);
    const events = Number(psql(url, `SELECT count(*) FROM run_events WHERE id > ${before}`));
    stats('events', load);
    console.log(`events    ${perSec(b0, b1, SECONDS)}`);
    console.log(`events: ${events} written in ${SECONDS} s (${(events / SECONDS).toFixed(0)}/s), ` +
      `${load.events} of them delivered to the page by then; ${load.all} delivered in all`);

    await page.evaluate(() => window.__bench.reset());
    await page.hover('#table-wrap');
    const b2 = await busy(cdp);
    const t1 = Date.now();
    while (Date.now() - t1 < 10000) {
      await page.mouse.wheel(0, 350);
      await sleep(250);
    }
    const scroll = await page.evaluate(() => window.__bench);
    stats('+scroll', scroll);
    console.log(`+scroll   ${perSec(b2, await busy(cdp), 10)}`);
    await submitter;
    const rows = await page.evaluate(() => document.querySelectorAll('tr.run').length);
    console.log(`rows in the DOM: ${rows} of ${await page.textContent('#count')}`);
  } finally {
    if (browser) await browser.close();
    if (proc) {
      proc.kill('SIGTERM');
      await new Promise((r) => (proc.exitCode !== null ? r() : proc.on('exit', r)));
    }
    pg('destroy', data);
  }
  rmSync(tmp, { recursive: true, force: true });
  const w = webSize();
  console.log(`web/: ${w.files} files, ${w.raw} bytes (${w.gz} bytes gzipped file by file)`);
}

main().catch((e) => {
  console.error('bench/dashboard.mjs:', e);
  process.exit(1);
});
