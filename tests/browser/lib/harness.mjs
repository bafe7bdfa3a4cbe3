// tests/browser/lib/harness.mjs — what the dashboard's browser tests
// share: the environment scripts/test.sh sets, a fresh database from the
// template, an opsrun process, headless Chromium (playwright-core), a
// page that records every console error, page error, failed request and
// error answer, screenshots that fail on anything shown that the page
// meant to hide, and ways to read the page as a person sees it (rendered
// text of what is on screen, never attributes or DOM state). Not a test
// itself (ctest runs tests/browser/*.mjs only).
import { spawn, execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';

export const SKIP = 77;
const chromiumPath = process.env.OPSRUN_CHROMIUM || '/usr/bin/chromium';

export function need(name) {
  const v = process.env[name];
  if (!v) {
    console.error(`${name} is not set (run through scripts/test.sh)`);
    process.exit(SKIP);
  }
  return v;
}

export function loadPlaywright() {
  const dir = need('OPSRUN_PLAYWRIGHT_DIR');
  if (!existsSync(chromiumPath)) {
    console.error(`${chromiumPath} not found (scripts/deps.sh chromium)`);
    process.exit(SKIP);
  }
  try {
    return createRequire(join(dir, 'node_modules', 'x.js'))('playwright-core');
  } catch (e) {
    console.error(`could not load playwright-core from ${dir}: ${e.message}`);
    process.exit(SKIP);
  }
}

export async function launch(pw) {
  return pw.chromium.launch({ executablePath: chromiumPath, args: ['--no-sandbox'] });
}

// A port for a server of this test: from 32000-32767, above the ports the
// C tests hand out (tests/support/harness.c: 20000-31999) and below the
// kernel's ephemeral range, where a port taken from listen(0) and closed
// could go to another test's server or connection before opsrun binds it.
// A lock file (created exclusively, holding this process's pid, removed at
// exit; one of a dead process is taken over) keeps two browser tests off
// one port; a bind proves nothing else holds it.
const PORTS_FIRST = 32000;
const PORTS_COUNT = 768;
const PORT_LOCKS = '/tmp/opsrun-tests/browser-ports';
const portLocks = [];
process.on('exit', () => portLocks.forEach((f) => rmSync(f, { force: true })));

function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return e.code === 'EPERM';
  }
}

function lockPort(port) {
  const f = join(PORT_LOCKS, String(port));
  for (let tries = 0; tries < 2; tries++) {
    try {
      writeFileSync(f, String(process.pid), { flag: 'wx' });
      portLocks.push(f);
      return true;
    } catch (e) {
      if (e.code !== 'EEXIST') throw e;
      const pid = Number(readFileSync(f, 'utf8'));
      if (pid && alive(pid)) return false;
      rmSync(f, { force: true }); // a dead test's
    }
  }
  return false;
}

async function bindable(port) {
  const s = createServer();
  const ok = await new Promise((r) => {
    s.once('error', () => r(false));
    s.listen(port, '127.0.0.1', () => r(true));
  });
  if (ok) await new Promise((r) => s.close(r));
  return ok;
}

export async function freePort() {
  mkdirSync(PORT_LOCKS, { recursive: true });
  const start = Math.floor(Math.random() * PORTS_COUNT);
  for (let i = 0; i < PORTS_COUNT; i++) {
    const port = PORTS_FIRST + ((start + i) % PORTS_COUNT);
    if (lockPort(port) && await bindable(port)) return port;
  }
  throw new Error(`no free port in ${PORTS_FIRST}-${PORTS_FIRST + PORTS_COUNT - 1}`);
}

// postgresql://user@/dbname?host=... (WHATWG URL refuses an empty host
// after a user, so the database name is cut out by hand).
const DB_IN_URL = /^(postgres(?:ql)?:\/\/[^/?]*\/)([^?]*)/;

export function createDb(name) {
  const admin = need('OPSRUN_TEST_ADMIN_URL');
  const url = need('OPSRUN_TEST_DATABASE_URL');
  const m = DB_IN_URL.exec(url);
  const tmpl = m && m[2] ? decodeURIComponent(m[2]) : 'opsrun_template';
  execFileSync('psql', [admin, '-q', '-v', 'ON_ERROR_STOP=1',
    '-c', `DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`,
    '-c', `CREATE DATABASE "${name}" TEMPLATE "${tmpl}"`], { stdio: ['ignore', 'ignore', 'inherit'],
    env: { ...process.env, PGOPTIONS: '-c client_min_messages=warning' } });
  return url.replace(DB_IN_URL, (_, head) => head + encodeURIComponent(name));
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// A scratch directory for configuration and logs, and the artifacts
// directory (screenshots) under the build's test directory.
export function dirs(test) {
  const tmp = mkdtempSync(join(tmpdir(), `opsrun-${test}-`));
  const art = process.env.OPSRUN_ARTIFACTS || join(process.cwd(), 'browser-artifacts');
  mkdirSync(art, { recursive: true });
  return { tmp, art };
}

// opsrun serve on port, with config (an object) and its log appended to
// log. Resolves once /livez answers.
export async function startOpsrun({ port, db, config, log, tmp }) {
  const cfg = join(tmp, 'config.json');
  writeFileSync(cfg, JSON.stringify(config || {}));
  const proc = spawn(need('OPSRUN_BIN'), ['serve', '--listen', `127.0.0.1:${port}`,
    '--database-url', db, '--config', cfg], { stdio: ['ignore', 'ignore', openSync(log, 'a')] });
  const base = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 400; i++) {
    if (proc.exitCode !== null) throw new Error(`opsrun exited with ${proc.exitCode}`);
    try {
      if ((await fetch(base + '/readyz')).ok) return proc;
    } catch { /* not yet */ }
    await sleep(50);
  }
  throw new Error('opsrun was not ready within 20 s');
}

export async function stopOpsrun(proc) {
  if (!proc || proc.exitCode !== null || proc.signalCode) return;
  proc.kill('SIGTERM');
  await new Promise((r) => (proc.exitCode !== null || proc.signalCode ? r() : proc.on('exit', r)));
}

export function killed(proc) {
  return new Promise((r) => {
    proc.on('exit', r);
    proc.kill('SIGKILL');
  });
}

// Every console error, uncaught page error, failed request and error
// answer of page goes to problems (a request the test itself stops when
// it closes the page is no failure: see settle()). Nor is an event stream
// the page closes itself (EventSource.close(): a run's log stream when
// its detail closes), which ends as aborted.
export function watch(page, problems) {
  const state = { closing: false };
  page.on('console', (m) => {
    if (m.type() === 'error' && !state.closing) problems.push(`console error: ${m.text()}`);
  });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('requestfailed', (r) => {
    const closed = r.resourceType() === 'eventsource' && r.failure()?.errorText === 'net::ERR_ABORTED';
    if (!state.closing && !closed) problems.push(`request failed: ${r.url()} ${r.failure()?.errorText}`);
  });
  page.on('response', (r) => {
    if (r.status() >= 400 && !state.closing) problems.push(`answer ${r.status()}: ${r.url()}`);
  });
  return state;
}

export function checker() {
  const failures = [];
  const check = (ok, what) => {
    console.log(`${ok ? 'ok' : 'FAIL'}: ${what}`);
    if (!ok) failures.push(what);
    return ok;
  };
  return { failures, check };
}

export async function api(base, path, { method = 'GET', body, token } = {}) {
  const headers = {};
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (token) headers.Authorization = 'Bearer ' + token;
  const r = await fetch(base + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await r.text();
  let json = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch { /* not JSON */ }
  return { status: r.status, headers: r.headers, json, text };
}

export async function submit(base, data, token) {
  const r = await api(base, '/alerts', { method: 'POST', body: { alert_type: 'demo', data }, token });
  if (r.status !== 202) throw new Error(`POST /alerts answered ${r.status}: ${r.text}`);
  return r.json.run_id;
}

// Polls fn until it returns a truthy value; the limit only keeps a broken
// build from hanging the suite (ctest's timeout would too).
export async function until(what, fn, limitMs = 30000) {
  const end = Date.now() + limitMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`gave up waiting for ${what}`);
    await sleep(50);
  }
}

// The scratch directory goes once a test passed; a failed one keeps it
// (the server's log) for inspection.
export function cleanup(tmp) {
  rmSync(tmp, { recursive: true, force: true });
}

export function tail(log) {
  try {
    return readFileSync(log, 'utf8').split('\n').slice(-40).join('\n');
  } catch {
    return '';
  }
}

// Every screenshot of a test goes through here. It is written, then the
// page is checked as a person sees it: no element that carries the
// hidden attribute may be rendered (a class that sets display beats the
// attribute unless the style sheet says otherwise, and the element shows
// while the DOM says hidden). Throws, naming each such element, if any is.
export async function screenshot(page, path, opts = {}) {
  await page.screenshot({ path, ...opts });
  const shown = await page.evaluate(() => {
    const name = (e) => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') +
      [...e.classList].map((c) => '.' + c).join('');
    const text = (e) => (e.textContent || '').trim().replace(/\s+/g, ' ').slice(0, 60);
    return [...document.querySelectorAll('[hidden]')]
      .filter((e) => e.getClientRects().length > 0 || e.checkVisibility())
      .map((e) => `${name(e)} "${text(e)}"`);
  });
  if (shown.length) {
    throw new Error(`${basename(path)}: hidden, yet on the screen: ${shown.join('; ')}`);
  }
}

// The text a person sees in the first element selector (a string or a
// Playwright locator) matches: its rendered text, or null while it is not
// on the screen.
export async function seen(page, selector) {
  const l = (typeof selector === 'string' ? page.locator(selector) : selector).first();
  try {
    if (!(await l.isVisible())) return null;
    return (await l.innerText({ timeout: 2000 })).trim();
  } catch {
    return null; // gone between the two calls
  }
}

// The runs table's row of run id, found by the id it shows.
export function runRow(page, id) {
  return page.locator('#runs').getByRole('row')
    .filter({ has: page.getByRole('cell', { name: id, exact: true }) });
}

// The rows the runs table shows, top to bottom: each row's cells by
// their column's heading, lower case ({run, type, status, outcome,
// progress, ...}; a column not shown at this width is left out).
export function tableSeen(page) {
  return page.evaluate(() => {
    const shown = (e) => (e.checkVisibility() ? e.innerText.trim() : null);
    const heads = [...document.querySelectorAll('#runs thead th')].map(shown);
    const rows = [];
    for (const tr of document.querySelectorAll('#runs tbody tr')) {
      if (tr.cells.length < 2 || !tr.checkVisibility()) continue; // a spacer
      const cells = [...tr.cells].map(shown);
      const row = {};
      heads.forEach((h, i) => {
        if (h && cells[i] !== null) row[h.toLowerCase()] = cells[i];
      });
      rows.push(row);
    }
    return rows;
  });
}

// Run id's row as tableSeen() gives it, or null while the table does not
// show it.
export async function rowSeen(page, id) {
  return (await tableSeen(page)).find((r) => r.run === id) || null;
}

// The open run detail's field called name (Status, Outcome, Approval...)
// as shown, or null.
export function fieldSeen(page, name) {
  return page.evaluate((n) => {
    for (const dt of document.querySelectorAll('#detail dt')) {
      if (!dt.checkVisibility() || dt.innerText.trim() !== n) continue;
      const dd = dt.nextElementSibling;
      return dd && dd.checkVisibility() ? dd.innerText.trim() : null;
    }
    return null;
  }, name);
}

// The detail's timeline as shown: [{id, type, text}], id the number after
// its "#".
export function timelineSeen(page) {
  return page.evaluate(() => [...document.querySelectorAll('#d-events li')]
    .filter((li) => li.checkVisibility())
    .map((li) => {
      const [id, type, text] = [...li.children].map((c) => c.innerText.trim());
      return { id: Number(id.replace(/^#/, '')), type, text };
    }));
}

// The connection badge's text once it reads want (a RegExp).
export async function connection(page, want, limitMs = 30000) {
  return until(`the connection badge to read ${want}`, async () => {
    const t = await seen(page, '#conn');
    return t !== null && want.test(t) ? t : null;
  }, limitMs);
}

// The run detail on the screen, showing run id with its timeline.
export async function detailOf(page, id, limitMs = 15000) {
  await page.locator('#detail').waitFor({ state: 'visible', timeout: limitMs });
  await until(`the detail of ${id}`, async () => (await seen(page, '#d-title')) === id, limitMs);
  await page.locator('#d-events li').first().waitFor({ state: 'visible', timeout: limitMs });
}

// The detail off the screen, and the address bar no longer naming a run:
// the dialog's close event, which rewrites the address, comes a task after
// the dialog is hidden, and opening the same address again before it would
// not be a change of address at all.
export async function detailClosed(page) {
  await page.locator('#detail').waitFor({ state: 'hidden', timeout: 10000 });
  await page.waitForFunction(() => !location.hash.startsWith('#/runs/'), null, { timeout: 10000 });
}

// The buttons a person sees in the run detail, other than Close, by
// their text (not the links to other runs); a disabled one with " (off)".
export async function actionsSeen(page) {
  const out = [];
  for (const b of await page.locator('#detail button:visible:not(.link)').all()) {
    const name = (await b.innerText()).trim();
    if (name === 'Close') continue;
    out.push((await b.isEnabled()) ? name : `${name} (off)`);
  }
  return out;
}
