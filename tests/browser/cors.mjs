// tests/browser/cors.mjs — CORS as a real browser enforces it: headless
// Chromium (the system's /usr/bin/chromium, driven by playwright-core)
// loads a page from another origin than opsrun's, whose script submits a
// run with fetch (a JSON POST: the browser preflights it), reads the
// exposed Location header, and follows the run's EventSource stream to its
// terminal event. With the page's origin in http.cors_origins all of it
// works; from an origin not listed, the fetch rejects and the stream of the
// same (existing, completed) run fails without delivering an event.
//
// Needs: OPSRUN_BIN, OPSRUN_TEST_DATABASE_URL and OPSRUN_TEST_ADMIN_URL (as
// every e2e suite, from scripts/test.sh), OPSRUN_PLAYWRIGHT_DIR (where
// scripts/test.sh installed playwright-core), psql, and chromium
// (OPSRUN_CHROMIUM, default /usr/bin/chromium). Exits 77 (skipped) when
// playwright-core or chromium is missing, 0 on success, 1 on failure.
import { spawn, execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { existsSync, mkdtempSync, writeFileSync, openSync, readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from './lib/harness.mjs';

const SKIP = 77;
const DB = 'browser_cors';
const chromiumPath = process.env.OPSRUN_CHROMIUM || '/usr/bin/chromium';

function need(name) {
  const v = process.env[name];
  if (!v) {
    console.error(`cors.mjs: ${name} is not set (run through scripts/test.sh)`);
    process.exit(SKIP);
  }
  return v;
}

function loadPlaywright() {
  const dir = need('OPSRUN_PLAYWRIGHT_DIR');
  try {
    return createRequire(join(dir, 'node_modules', 'x.js'))('playwright-core');
  } catch (e) {
    console.error(`cors.mjs: could not load playwright-core from ${dir}: ${e.message}`);
    process.exit(SKIP);
  }
}

// The page both origins serve: the script runs in the page, against api.
// The run lasts 2 s, so that its stream is open before it ends even when
// the browser is slow (a stream opened on a finished run gets its snapshot
// and ends, with no terminal event to follow).
const PAGE = `<!doctype html><meta charset="utf-8"><title>cors</title>
<script>
window.tryApi = async (api, streamId) => {
  const out = {};
  try {
    const r = await fetch(api + '/alerts', {
      method: 'POST',
      headers: {'Content-Type': 'application/json'},
      body: JSON.stringify({alert_type: 'demo', data: {duration_ms: 2000, steps: 3}}),
    });
    out.status = r.status;
    out.location = r.headers.get('Location');
    out.run_id = (await r.json()).run_id;
  } catch (e) {
    out.fetchError = String(e);
  }
  const id = streamId || out.run_id;
  out.stream = await new Promise((resolve) => {
    const es = new EventSource(api + '/runs/' + id + '/stream');
    const kinds = [];
    const timer = setTimeout(() => { es.close(); resolve({kinds, result: 'timeout'}); }, 10000);
    const done = (result) => { clearTimeout(timer); es.close(); resolve({kinds, result}); };
    for (const k of ['snapshot', 'progress', 'status']) {
      es.addEventListener(k, (e) => {
        kinds.push(k);
        const d = JSON.parse(e.data);
        if (k === 'status' && d.status === 'completed') done('terminal:' + d.outcome);
      });
    }
    es.onerror = () => done('error');
  });
  return out;
};
</script>`;

function listen(server) {
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server.address().port)));
}


// postgresql://user@/dbname?host=... (WHATWG URL refuses an empty host
// after a user, so the database name is cut out by hand).
const DB_IN_URL = /^(postgres(?:ql)?:\/\/[^/?]*\/)([^?]*)/;

function dbUrl(template, name) {
  return template.replace(DB_IN_URL, (_, head) => head + encodeURIComponent(name));
}

function createDb() {
  const admin = need('OPSRUN_TEST_ADMIN_URL');
  const m = DB_IN_URL.exec(need('OPSRUN_TEST_DATABASE_URL'));
  const tmpl = m && m[2] ? decodeURIComponent(m[2]) : 'opsrun_template';
  execFileSync('psql', [admin, '-q', '-v', 'ON_ERROR_STOP=1',
    '-c', `DROP DATABASE IF EXISTS "${DB}" WITH (FORCE)`,
    '-c', `CREATE DATABASE "${DB}" TEMPLATE "${tmpl}"`], {stdio: ['ignore', 'ignore', 'inherit'],
    env: {...process.env, PGOPTIONS: '-c client_min_messages=warning'}});
  return dbUrl(need('OPSRUN_TEST_DATABASE_URL'), DB);
}

async function waitLive(base, proc) {
  for (let i = 0; i < 200; i++) {
    if (proc.exitCode !== null) throw new Error(`opsrun exited with ${proc.exitCode}`);
    try {
      if ((await fetch(base + '/livez')).ok) return;
    } catch { /* not yet */ }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error('opsrun did not answer /livez within 10 s');
}

const failures = [];
function check(ok, what) {
  console.log(`${ok ? 'ok' : 'FAIL'}: ${what}`);
  if (!ok) failures.push(what);
}

async function main() {
  const bin = need('OPSRUN_BIN');
  if (!existsSync(chromiumPath)) {
    console.error(`cors.mjs: ${chromiumPath} not found (scripts/deps.sh chromium)`);
    process.exit(SKIP);
  }
  const { chromium } = loadPlaywright();
  const pages = createServer((req, res) => {
    res.writeHead(200, {'Content-Type': 'text/html; charset=utf-8'});
    res.end(PAGE);
  });
  const denied = createServer((req, res) => {
    res.writeHead(200, {'Content-Type': 'text/html; charset=utf-8'});
    res.end(PAGE);
  });
  const allowedOrigin = `http://127.0.0.1:${await listen(pages)}`;
  const deniedOrigin = `http://127.0.0.1:${await listen(denied)}`;
  const apiPort = await freePort();
  const api = `http://127.0.0.1:${apiPort}`;
  const dir = mkdtempSync(join(tmpdir(), 'opsrun-browser-'));
  const cfg = join(dir, 'config.json');
  const log = join(dir, 'opsrun.log');
  writeFileSync(cfg, JSON.stringify({http: {cors_origins: [allowedOrigin]}}));
  const proc = spawn(bin, ['serve', '--listen', `127.0.0.1:${apiPort}`, '--database-url',
    createDb(), '--config', cfg], {stdio: ['ignore', 'ignore', openSync(log, 'w')]});
  let browser;
  try {
    await waitLive(api, proc);
    browser = await chromium.launch({executablePath: chromiumPath, args: ['--no-sandbox']});
    const page = await browser.newPage();

    await page.goto(allowedOrigin + '/');
    const ok = await page.evaluate(([a]) => window.tryApi(a), [api]);
    console.log('allowed origin:', JSON.stringify(ok));
    check(ok.status === 202, `allowed origin: POST /alerts answered 202 (got ${ok.status})`);
    check(ok.location === `/runs/${ok.run_id}`, 'allowed origin: the exposed Location is readable');
    check(ok.stream.result === 'terminal:succeeded',
      `allowed origin: the stream delivered the terminal event (got ${ok.stream.result})`);
    check(ok.stream.kinds[0] === 'snapshot', 'allowed origin: the stream began with its snapshot');

    await page.goto(deniedOrigin + '/');
    const no = await page.evaluate(([a, id]) => window.tryApi(a, id), [api, ok.run_id]);
    console.log('denied origin:', JSON.stringify(no));
    check(typeof no.fetchError === 'string' && no.status === undefined,
      `denied origin: fetch rejected (${no.fetchError})`);
    check(no.stream.result === 'error' && no.stream.kinds.length === 0,
      `denied origin: the stream failed with no event (got ${no.stream.result})`);
  } finally {
    if (browser) await browser.close();
    proc.kill('SIGTERM');
    await new Promise((r) => (proc.exitCode !== null ? r() : proc.on('exit', r)));
    pages.close();
    denied.close();
  }
  check(proc.exitCode === 0, `opsrun exited cleanly (status ${proc.exitCode}, signal ${proc.signalCode})`);
  if (failures.length) {
    console.error(`cors.mjs: ${failures.length} failed; opsrun's log: ${log}`);
    console.error(readFileSync(log, 'utf8').split('\n').slice(-30).join('\n'));
    process.exit(1);
  }
}

main().catch((e) => {
  console.error('cors.mjs:', e);
  process.exit(1);
});
