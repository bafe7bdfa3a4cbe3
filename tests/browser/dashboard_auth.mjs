// tests/browser/dashboard_auth.mjs — the dashboard with authentication on
// (auth.tokens): the page and its files load without a token; the page
// asks for one (a wrong one is refused in the form; Escape does not close
// it, before or after typing), keeps it in
// sessionStorage (a reload does not ask again), sends it as a bearer
// token to the API and as ?access_token= on its stream, which then
// delivers a run to its end. The server's log, at debug level, never
// holds the token. The page is read as a person sees it (the form on the
// screen, where the caret is, the text shown); a screenshot of the token
// form goes to the build's test directory (browser-artifacts/), checked
// for anything shown that the page meant to hide.
//
// Needs what cors.mjs needs (see there); exits 77 when playwright-core
// or chromium is missing.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  checker, connection, createDb, dirs, freePort, launch, loadPlaywright, need, rowSeen, screenshot,
  seen, startOpsrun, stopOpsrun, submit, tail, until, watch, cleanup,
} from './lib/harness.mjs';

const { check, failures } = checker();

function newToken(name, scopes) {
  const out = execFileSync(need('OPSRUN_BIN'), ['token', 'new', '--name', name, '--tenant', 'default',
    '--scopes', scopes], { encoding: 'utf8' }).split('\n');
  return { token: out[0].trim(), entry: JSON.parse(out[1]) };
}

// Escape in the token form: the key reaches the dialog (its cancel event
// fires), and the form stays open, since without a token the page has
// nothing to show. Fails if the key does nothing, and if it closes the form.
async function escapeKeepsTheForm(page, when) {
  await page.evaluate(() => {
    window.escapes = [];
    document.getElementById('login').addEventListener('cancel', (e) => window.escapes.push(e.cancelable), { once: true });
  });
  await page.focus('#l-token');
  await page.keyboard.press('Escape');
  const seen = await until('the Escape to reach the form', () => page.evaluate(() => window.escapes.length > 0), 5000)
    .catch(() => false);
  check(seen, `Escape ${when} reached the token form (its cancel event)`);
  // The browser may close the form despite the refused cancel; the page
  // then opens it again at once, with the caret in the token field.
  const kept = await until('the token form to be open', async () =>
    await page.locator('#login').isVisible() && await page.locator('#l-token:focus').isVisible(), 5000)
    .catch(() => false);
  check(kept, `after Escape ${when} the token form is open, the focus in its field`);
}

async function main() {
  const pw = loadPlaywright();
  const { tmp, art } = dirs('dashboard-auth');
  const log = join(tmp, 'opsrun.log');
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const { token, entry } = newToken('dash', 'read,submit,cancel,health');
  const proc = await startOpsrun({ port, db: createDb('browser_dashboard_auth'), log, tmp, config: {
    auth: { tokens: [entry] }, log: { level: 'debug' },
    queue: { progress_interval_ms: 0, shutdown_grace_s: 1 },
  } });
  let browser;
  const problems = [];
  try {
    for (const path of ['/', '/web/app.js', '/web/app.css']) {
      const r = await fetch(base + path);
      check(r.status === 200, `${path} loads without a token (${r.status})`);
    }
    check((await fetch(base + '/runs')).status === 401, 'the API itself needs the token');

    browser = await launch(pw);
    const page = await (await browser.newContext({ viewport: { width: 1200, height: 800 } })).newPage();
    const w = watch(page, problems);
    await page.goto(base + '/');
    const form = page.locator('#login');
    await form.waitFor({ state: 'visible' });
    check(true, 'the page asked for a token');
    await screenshot(page, join(art, 'dashboard-token.png'));
    await escapeKeepsTheForm(page, 'at once');
    await page.fill('#l-token', 'opsrun_not_a_token_at_all');
    await page.getByRole('button', { name: 'Use token' }).click();
    await until('the refusal', async () => /does not know/.test((await seen(page, '#l-error')) || ''));
    check(await form.isVisible(), 'a wrong token is refused and the form stays');
    await escapeKeepsTheForm(page, 'after a refused token');
    await page.fill('#l-token', token);
    await page.getByRole('button', { name: 'Use token' }).click();
    await connection(page, /^live$/);
    check(await form.isHidden(), 'the right token closes the form and the stream is live');
    check(await page.getByRole('button', { name: 'Forget token' }).isVisible(), 'the page offers to forget the token');
    check(await page.evaluate(() => sessionStorage.getItem('opsrun.token')) === token,
      'the token is kept in sessionStorage');

    const id = await submit(base, { duration_ms: 1500, steps: 3 }, token);
    const outcome = await until('the run to succeed on the page', async () => {
      const r = await rowSeen(page, id);
      return r && r.status === 'completed' ? r.outcome : null;
    });
    check(outcome === 'succeeded', `the stream (access_token) delivered the run to its end (${outcome})`);
    await until('the overview', async () => ((await seen(page, '#s-workers')) || '').includes('/'));
    check(true, 'the overview reads /healthz with the token');

    w.closing = true; // a reload aborts the stream and what is in flight
    await page.reload();
    w.closing = false;
    await connection(page, /^live$/);
    check(await form.isHidden(), 'after a reload the page does not ask again');
  } catch (e) {
    check(false, `the test ran to its end: ${e.stack || e}`);
  } finally {
    if (browser) await browser.close();
    await stopOpsrun(proc);
  }
  // The first look without a token is answered 401 (and Chromium reports
  // that on its console): expected here, nothing else is.
  const unexpected = problems.filter((p) => !/\b401\b/.test(p));
  for (const p of problems) console.log('  ' + p);
  check(unexpected.length === 0, `no other console error, failed request or error answer (${unexpected.length})`);
  const text = readFileSync(log, 'utf8');
  check(/path=\/stream\b.*token=dash/.test(text), 'the log has the stream requests, by token name');
  check(!text.includes(token) && !text.includes(token.slice(10)),
    'the token appears nowhere in the server\'s log');
  if (failures.length) {
    console.error(`dashboard_auth.mjs: ${failures.length} failed; opsrun's log ${log}:\n${tail(log)}`);
    process.exit(1);
  }
  cleanup(tmp);
}

main().catch((e) => {
  console.error('dashboard_auth.mjs:', e);
  process.exit(1);
});
