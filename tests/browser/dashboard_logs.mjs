// tests/browser/dashboard_logs.mjs — a run's log in the dashboard's
// detail, against exec runs whose commands (written here) print to stderr:
// - a run that prints 40 lines, waiting for the test after lines 10 and
//   20, opened at 10: lines 11 to 20 appear on the screen while its status
//   reads running, in order; then every connection is cut and the page
//   cannot reach opsrun (it goes through a proxy of this test) while the
//   run prints the rest and ends; once it can, the log stream comes back
//   with Last-Event-ID, the status reads completed, the log says it
//   ended, and the lines on the screen are exactly the run's, none twice,
//   none missing;
// - the same run, finished, opened again: every line;
// - opsrun's own lines look unlike the command's;
// - a run whose first attempt exits 75 (retried): opened while attempt 1
//   runs, the log moves to attempt 2 when it starts; the attempt chooser
//   shows each attempt's lines only;
// - a run opened while queued, whose first lines the log reads before the
//   page learns that its attempt started (the page's answers held back):
//   the lines stay on the screen;
// - a reader who scrolls up stays where they are while lines come (the
//   newest is not in view), and "Jump to the newest line" brings it back;
// - a run not started yet says it has no lines yet; a line cut at
//   logs.max_line_bytes makes the log say output was left out;
// (a run of 100,000 lines: dashboard_logs_100k.mjs)
// - the plain text link opens the text, and with a token (a second opsrun
//   with auth.tokens) too;
// - at 360 px wide nothing scrolls sideways.
// Everything is read as a person sees it: text on the screen, what is in
// view. Screenshots at 1280 and 360 px go to the build's test directory
// (browser-artifacts/), each checked for anything shown that the page
// meant to hide.
//
// Needs what cors.mjs needs (see there); exits 77 when playwright-core
// or chromium is missing.
import { execFileSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import net from 'node:net';
import { join } from 'node:path';
import {
  api, checker, createDb, detailOf, dirs, fieldSeen, freePort, launch, loadPlaywright, need, screenshot,
  seen, sleep, startOpsrun, stopOpsrun, tail, until, watch, cleanup,
} from './lib/harness.mjs';
import {
  apiLines, closeDetail, completed, configFor, logInView, logSeen, numbered, openRun, plainText,
  release, same, submitRun,
} from './lib/logs.mjs';

const { check, failures } = checker();

// A TCP proxy to port: the page talks to opsrun through it, and cut()
// drops every connection at once (a network blip), and refuse(true) turns
// new ones away until refuse(false). Each GET that passes
// is kept, with its Last-Event-ID header if any.
async function proxy(port, target) {
  const socks = new Set();
  const requests = [];
  let refusing = false;
  const server = net.createServer((c) => {
    if (refusing) {
      c.destroy();
      return;
    }
    const u = net.connect(target, '127.0.0.1');
    socks.add(c);
    socks.add(u);
    let buf = '';
    c.on('data', (d) => {
      buf = (buf + d.toString('latin1')).slice(-65536);
      const re = /GET (\S+) HTTP\/1\.1\r\n((?:[^\r\n]+\r\n)*)\r\n/g;
      let m;
      let end = 0;
      while ((m = re.exec(buf))) {
        const lid = /^Last-Event-ID: *(.*)$/im.exec(m[2]);
        requests.push({ path: m[1], lastEventId: lid ? lid[1].trim() : null });
        end = re.lastIndex;
      }
      buf = buf.slice(end);
    });
    c.pipe(u);
    u.pipe(c);
    const gone = () => {
      c.destroy();
      u.destroy();
      socks.delete(c);
      socks.delete(u);
    };
    for (const s of [c, u]) {
      s.on('error', gone);
      s.on('close', gone);
    }
  });
  await new Promise((r) => server.listen(port, '127.0.0.1', r));
  return {
    port,
    requests,
    cut: () => [...socks].forEach((s) => s.destroy()),
    refuse: (on) => {
      refusing = on;
    },
    close: () => new Promise((r) => {
      [...socks].forEach((s) => s.destroy());
      server.close(r);
    }),
  };
}

// A run that prints its lines while the test watches: they show while it
// runs, in order; a cut of every connection loses and doubles none. The
// command waits for the test after lines 10 and 20, so that each step
// happens while the run runs however slow the machine: the page opens
// with ten lines to read, the stream brings 11 to 20, every connection
// is cut and the page cannot reach opsrun while the run prints 21 to 40
// and ends; once it can, the streams resume: the rest of the log, and the
// run's status. direct: opsrun without the proxy.
async function followLive(page, w, base, direct, px, art, tmp) {
  const go1 = join(tmp, 'go-live-1');
  const go2 = join(tmp, 'go-live-2');
  const id = await submitRun(base, 'gated', { go1, go2, tag: 'live' });
  await until('the first ten lines', async () => numbered(await apiLines(base, id, 1)).length >= 10, 15000);
  await openRun(page, base, id);
  let whileRunning = null;
  let cutAt = null;
  const orders = [];
  const looks = async () => {
    const status = await fieldSeen(page, 'Status');
    const lines = (await logSeen(page)) || [];
    const nums = numbered(lines);
    orders.push(nums);
    return { status, lines, nums, end: await seen(page, '#log-end') };
  };
  const shows = (what, n) => until(what, async () => {
    const l = await looks();
    return l.status === 'running' && l.nums.length === n ? l.nums : null;
  }, 30000);
  const stuck = async () => {
    const l = await looks();
    console.log(`  the page shows: status ${l.status}, lines ${l.nums.join(' ')}, end ${l.end}, `
      + `jump ${await seen(page, '#log-newest')}; requests ${JSON.stringify(px.requests.filter((r) => r.path.includes('/logs')))}`);
    await screenshot(page, join(art, 'dashboard-log-stuck.png'));
    return null;
  };
  const ended = await (async () => {
    await shows('the lines read when the page opened', 10);
    release(go1);
    whileRunning = await shows('lines 11 to 20, streamed', 20);
    await screenshot(page, join(art, 'dashboard-log-live.png'));
    w.closing = true; // what is in flight fails: no failure of the page
    px.refuse(true);
    px.cut(); // a network outage mid-run
    cutAt = 20;
    release(go2);
    await completed(direct, id);
    px.refuse(false);
    return until('the run to end on the page', async () => {
      const { status, lines, nums, end } = await looks();
      if (nums.length >= cutAt + 5) w.closing = false; // the stream is back
      return status === 'completed' && end ? lines : null;
    }, 45000);
  })().catch(stuck);
  check(ended !== null, 'the run ended on the page, its log too');
  check(cutAt !== null, `the connections were cut while the run ran (at line ${cutAt})`);
  check(whileRunning !== null, `streamed lines appear while the status reads running (${whileRunning && whileRunning.length} of 40 then)`);
  check(orders.every((n) => n.every((v, i) => v === i + 1)),
    'every time the log was looked at, its command lines were 1, 2, 3… in order, none missing');
  const end = await seen(page, '#log-end');
  check(end === 'End of the log: the run completed.', `the log says it ended (${end})`);
  const timeline = await page.locator('#d-events').innerText();
  check(/completed succeeded/.test(timeline), `the run's events, read back with it, show its end (${timeline.replace(/\s+/g, ' ')})`);
  const shown = await logSeen(page);
  const want = await apiLines(base, id, 1);
  check(same(shown, want), `after the cut, the lines on the screen are the run's, none twice, none missing (${shown.length} shown, ${want.length} in GET /runs/{id}/logs)`);
  const resumed = px.requests.filter((r) => r.path.startsWith(`/runs/${id}/logs/stream`) && r.lastEventId);
  check(resumed.length >= 1 && Number(resumed[0].lastEventId) >= cutAt,
    `the log stream came back with Last-Event-ID (${resumed.map((r) => r.lastEventId).join(', ')})`);
  // opsrun's lines (the attempt, the command, the end) look unlike the
  // command's own.
  const colours = await page.evaluate(() => {
    const c = (l) => getComputedStyle(l.querySelector('.tx')).color;
    const ls = [...document.querySelectorAll('#log-box .ln')];
    const op = ls.find((l) => /^attempt 1 of 1 started/.test(l.innerText.trim()));
    const cmd = ls.find((l) => /^line 1 of/.test(l.innerText.trim()));
    return op && cmd ? { op: c(op), cmd: c(cmd) } : null;
  });
  check(colours && colours.op !== colours.cmd, `opsrun's own lines are dimmer than the command's (${JSON.stringify(colours)})`);
  // The times, on demand.
  await page.getByLabel('Times').check();
  const timed = await page.locator('#log-box .ln').first().innerText();
  check(/^\d\d:\d\d:\d\d\.\d{3}/.test(timed.trim()), `with Times on, each line shows its time (${timed.trim()})`);
  await screenshot(page, join(art, 'dashboard-log-1280.png'));
  await page.getByLabel('Times').uncheck();
  await closeDetail(page);

  // The same run, finished, from the start: every line.
  await openRun(page, base, id);
  const again = await until('the finished log', async () => {
    const l = await logSeen(page);
    return l && l.length === want.length ? l : null;
  }, 10000).catch(() => logSeen(page));
  check(same(again, want), `a finished run's log shows every line (${again && again.length} of ${want.length})`);
  check((await seen(page, '#log-attempt')) === null, 'one attempt: no attempt chooser');
  await closeDetail(page);
  return id;
}

// A run whose first attempt fails with 75 and is retried.
async function attempts(page, base, tmp) {
  const flag = join(tmp, 'go-flaky');
  const id = await submitRun(base, 'flaky', { flag });
  await openRun(page, base, id);
  const one = await until('attempt 1\'s lines', async () => {
    const l = await logSeen(page);
    return l && l.includes('attempt one: starting') ? l : null;
  }, 20000).catch(async (e) => {
    // Say whether the line was stored (the server's side) or only not
    // shown (the page's), so that a failure tells where to look.
    const run = (await api(base, `/runs/${id}`)).json;
    const stored = (await api(base, `/runs/${id}/logs?attempt=1`)).text;
    throw new Error(`${e.message}: the run is ${run.status}, attempt ${run.attempt}; ` +
      `GET /runs/${id}/logs?attempt=1 has ${stored}; the page shows ` +
      `${JSON.stringify(await logSeen(page))}`);
  });
  check(!one.some((t) => t.startsWith('attempt two')), 'while attempt 1 runs, its lines show');
  release(flag); // attempt 1 fails now
  const two = await until('the log to move to attempt 2', async () => {
    const l = await logSeen(page);
    return l && l.includes('attempt two: done') ? l : null;
  }, 20000);
  check(!two.some((t) => t.startsWith('attempt one')), `the log moved to attempt 2 by itself, its lines only (${two.join(' | ')})`);
  const chosen = await page.locator('#log-attempt').evaluate((s) => s.selectedOptions[0].text);
  check(await page.locator('#log-attempt').isVisible() && chosen === '2 of 2 (latest)',
    `the attempt chooser shows, on the latest (${chosen})`);
  await completed(base, id);
  await closeDetail(page);

  await openRun(page, base, id);
  const want2 = await apiLines(base, id, 2);
  const want1 = await apiLines(base, id, 1);
  const latest = await until('attempt 2 of the finished run', async () => {
    const l = await logSeen(page);
    return l && same(l, want2) ? l : null;
  }, 10000).catch(() => logSeen(page));
  check(same(latest, want2), `a finished run opens on its latest attempt, its lines only (${latest && latest.length} of ${want2.length})`);
  await page.getByLabel('Attempt').selectOption({ label: '1 of 2' });
  const first = await until('attempt 1 chosen', async () => {
    const l = await logSeen(page);
    return l && same(l, want1) ? l : null;
  }, 10000).catch(() => logSeen(page));
  check(same(first, want1) && first.includes('attempt one: host unreachable, exiting 75'),
    `attempt 1 chosen: its lines only (${first && first.join(' | ')})`);
  check((await seen(page, '#log-end')) === 'End of attempt 1.', 'it says where attempt 1 ended');
  return id;
}

// A run opened while it is queued (behind another run of its key), whose
// first lines the log reads before the page learns that attempt 1 started
// (the page's stream and its reads of the run are held back until then,
// as a loaded machine may hold them): the news of the start leaves them on
// the screen. Its command prints once, then waits for the test: a line
// the page lost would not come again.
async function startedUnseen(browser, base, tmp) {
  const page = await (await browser.newContext({ viewport: { width: 1280, height: 900 } })).newPage();
  const problems = [];
  const w = watch(page, problems);
  const gate = () => {
    let open;
    const p = new Promise((r) => { open = r; });
    return { p, open };
  };
  const lines = gate(); // the log's first read: once the lines are stored
  const news = gate(); // the page's stream, and its reads of the run once it started
  const holderFlag = join(tmp, 'go-holder');
  const flag = join(tmp, 'go-unseen');
  const holder = await submitRun(base, 'keyed', { flag: holderFlag });
  await until('the first run of the key to start', async () => (await api(base, `/runs/${holder}`)).json.status === 'running' || null, 20000);
  const id = await submitRun(base, 'keyed', { flag });
  let started = false;
  let logReads = 0;
  await page.route((u) => u.pathname === '/stream', async (route) => {
    await news.p;
    await route.continue();
  });
  await page.route((u) => u.pathname === `/runs/${id}`, async (route) => {
    if (started) await news.p;
    await route.continue();
  });
  await page.route((u) => u.pathname === `/runs/${id}/logs`, async (route) => {
    if (logReads++ === 0) await lines.p;
    await route.continue();
  });
  await openRun(page, base, id);
  await until('the page to read the run, and ask for its log', async () => logReads > 0 && (await fieldSeen(page, 'Status')) === 'queued' || null, 10000);
  started = true;
  release(holderFlag);
  await until('the run\'s first line to be stored', async () => (await apiLines(base, id, 1)).includes('attempt one: starting') || null, 20000);
  lines.open();
  const read = await until('the lines read', async () => ((await logSeen(page)) || []).includes('attempt one: starting') || null, 10000).catch(() => null);
  check(read && (await fieldSeen(page, 'Status')) === 'queued', 'the log shows lines read while the page still has the run queued');
  news.open();
  await until('the page to learn the run started', async () => (await fieldSeen(page, 'Status')) === 'running' || null, 10000);
  const kept = await until('the line still there', async () => {
    const l = await logSeen(page);
    return l && l.includes('attempt one: starting') ? l : null;
  }, 5000).catch(() => logSeen(page));
  check(kept && kept.includes('attempt one: starting'),
    `once the page learns that attempt 1 started, the lines it read are still on the screen (${JSON.stringify(kept)})`);
  release(flag);
  await completed(base, id);
  w.closing = true;
  await page.close();
  return problems;
}

// Scrolled up, the reader stays put while lines come; the jump button
// brings the newest back. The command waits after line 40 until the
// reader has scrolled up, so that lines still come however slow the
// machine.
async function scrollUp(page, base, tmp) {
  const flag = join(tmp, 'go-scroll');
  const id = await submitRun(base, 'paced', { n: '90', gap: '0.08', hold: '40', flag, tag: 'scroll' });
  await openRun(page, base, id);
  await until('the log to fill its box', async () => numbered((await logSeen(page)) || []).length >= 40, 20000);
  const box = page.locator('#log-box');
  const b = await box.boundingBox();
  await page.mouse.move(b.x + b.width / 2, b.y + b.height / 2);
  await page.mouse.wheel(0, -120);
  await sleep(300);
  const before = await logInView(page);
  const written = (await apiLines(base, id, 1)).length;
  release(flag);
  const more = await until('more lines', async () => {
    const l = await apiLines(base, id, 1);
    return l.length >= written + 10 ? l : null;
  }, 20000);
  await sleep(300); // a batch or two
  const after = await logInView(page);
  const newest = more[more.length - 1];
  check(!after.includes(newest), `scrolled up, the newest line is not in view (${newest}; in view ${after[0]} … ${after[after.length - 1]})`);
  check(same(before, after), `the lines in view stayed where they were (${before[0]} … ${before[before.length - 1]}, then ${after[0]} … ${after[after.length - 1]})`);
  const jump = await seen(page, '#log-newest');
  check(jump !== null && /^Jump to the newest line \(\d+ lines more\) ↓$/.test(jump), `a button offers the newest lines (${jump})`);
  const seenUpTo = numbered((await apiLines(base, id, 1)).slice(-1))[0] || 0;
  await page.getByRole('button', { name: /Jump to the newest line/ }).click();
  const inView = await until('the newest lines in view', async () => {
    const v = numbered(await logInView(page));
    return v.length && v[v.length - 1] >= seenUpTo ? v : null;
  }, 5000).catch(() => null);
  check(inView !== null, `after the jump the newest lines are in view (line ${inView && inView[inView.length - 1]}, at least ${seenUpTo})`);
  check((await seen(page, '#log-newest')) === null, 'and the jump button is gone');
  await completed(base, id);
  const last = await until('the end in view', async () => {
    const v = await logInView(page);
    return v.includes('line 90 of 90') ? v : null;
  }, 10000).catch(() => null);
  check(last !== null, 'following again: the last line came into view by itself');
  await until('the end of the log', () => seen(page, '#log-end'), 10000).catch(() => null);
  const all = await logSeen(page);
  check(same(all, await apiLines(base, id, 1)), `no line lost or doubled on the way (${all.length})`);
  await closeDetail(page);
}

// A queued run says it has no lines yet; a cut line says output was left out.
async function emptyAndCut(page, base) {
  const later = new Date(Date.now() + 3600e3).toISOString();
  const q = await submitRun(base, 'slow', { n: '1', gap: '0', tag: 'later' }, { run_at: later });
  await openRun(page, base, q);
  const empty = await until('the empty note', () => seen(page, '#log-empty'), 10000).catch(() => null);
  check(empty === 'No lines yet.', `a run not started yet: "${empty}"`);
  await closeDetail(page);
  await api(base, `/runs/${q}/cancel`, { method: 'POST' });

  const cut = await submitRun(base, 'long', { tag: 'cut' });
  await completed(base, cut);
  await openRun(page, base, cut);
  const trunc = await until('the truncation note', () => seen(page, '#log-trunc'), 10000).catch(() => null);
  check(trunc !== null && /left out/.test(trunc), `a cut line: the log says output was left out (${trunc})`);
  const { t, url } = await plainText(page);
  const want = (await apiLines(base, cut, 1)).join('\n') + '\n';
  check(!url.startsWith('blob:') && t.trim() === want.trim(), `without a token the plain text is a plain link (${url.replace(/^http:\/\/[^/]+/, '')})`);
  await closeDetail(page);
}

async function narrow(browser, base, art, ids) {
  const page = await (await browser.newContext({ viewport: { width: 360, height: 740 } })).newPage();
  const problems = [];
  const w = watch(page, problems);
  await openRun(page, base, ids.flaky);
  await until('the log at 360 px', async () => ((await logSeen(page)) || []).length > 0, 10000);
  const wide = await page.evaluate(() => {
    const d = document.getElementById('detail');
    return Math.max(document.documentElement.scrollWidth, d.scrollWidth - d.clientWidth + 360);
  });
  check(wide <= 360, `at 360 px wide nothing scrolls sideways (${wide})`);
  check(await page.locator('#log-attempt').isVisible(), 'the attempt chooser shows at 360 px');
  await screenshot(page, join(art, 'dashboard-log-360.png'));
  await page.locator('#log-box').evaluate((b) => { b.scrollTop = 0; });
  await openRun(page, base, ids.live);
  await until('the log at 360 px', async () => ((await logSeen(page)) || []).length > 30, 10000);
  await page.getByLabel('Times').check();
  await screenshot(page, join(art, 'dashboard-log-360-times.png'));
  w.closing = true;
  await page.close();
  return problems;
}

// With auth.tokens, the plain text still opens: read with the token.
async function withToken(browser, tmp, configFor) {
  const out = execFileSync(need('OPSRUN_BIN'), ['token', 'new', '--name', 'logs', '--tenant', 'default',
    '--scopes', 'read,submit,health'], { encoding: 'utf8' }).split('\n');
  const token = out[0].trim();
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const dir = join(tmp, 'auth');
  mkdirSync(dir, { recursive: true });
  const proc = await startOpsrun({ port, db: createDb('browser_dashboard_logs_auth'), log: join(tmp, 'opsrun-auth.log'),
    tmp: dir, config: { ...configFor(tmp), auth: { tokens: [JSON.parse(out[1])] } } });
  const problems = [];
  try {
    const id = await submitRun(base, 'slow', { n: '5', gap: '0', tag: 'auth' }, {}, token);
    await completed(base, id, token);
    const page = await (await browser.newContext({ viewport: { width: 1280, height: 900 } })).newPage();
    const w = watch(page, problems);
    w.closing = true; // the page's first call is answered 401: that asks for the token
    await page.goto(`${base}/#/runs/${id}`);
    await page.locator('#l-token').fill(token);
    await page.getByRole('button', { name: 'Use token' }).click();
    await detailOf(page, id);
    w.closing = false;
    await until('the log with a token', async () => numbered((await logSeen(page)) || []).length === 5, 10000);
    const { t, url } = await plainText(page);
    const want = await apiLines(base, id, 1, token);
    check(url.startsWith('blob:') && same(t.replace(/\n$/, '').split('\n'), want),
      `with a token the plain text opens, read with it (${url.slice(0, 5)}, ${t.split('\n').length - 1} lines)`);
    w.closing = true;
  } finally {
    await stopOpsrun(proc);
  }
  return problems;
}

async function main() {
  const pw = loadPlaywright();
  const { tmp, art } = dirs('dashboard-logs');
  const log = join(tmp, 'opsrun.log');
  const port = await freePort();
  const proc = await startOpsrun({ port, db: createDb('browser_dashboard_logs'), log, tmp, config: configFor(tmp) });
  const px = await proxy(await freePort(), port);
  const base = `http://127.0.0.1:${px.port}`;
  let browser;
  const problems = [];
  try {
    browser = await launch(pw);
    const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const page = await ctx.newPage();
    const w = watch(page, problems);
    const ids = {};
    ids.live = await followLive(page, w, base, `http://127.0.0.1:${port}`, px, art, tmp);
    ids.flaky = await attempts(page, base, tmp);
    await screenshot(page, join(art, 'dashboard-log-attempts.png'));
    await closeDetail(page);
    await scrollUp(page, base, tmp);
    await emptyAndCut(page, base);
    problems.push(...await narrow(browser, base, art, ids));
    problems.push(...await startedUnseen(browser, base, tmp));
    problems.push(...await withToken(browser, tmp, configFor));
    w.closing = true;
  } catch (e) {
    check(false, `the test ran to its end: ${e.stack || e}`);
  } finally {
    if (browser) await browser.close();
    await px.close();
    await stopOpsrun(proc);
  }
  for (const p of problems) console.log('  ' + p);
  check(problems.length === 0, `no console error, failed request or error answer (${problems.length})`);
  check(proc.exitCode === 0, `opsrun exited cleanly (status ${proc.exitCode}, signal ${proc.signalCode})`);
  console.log(`screenshots in ${art}`);
  if (failures.length) {
    console.error(`dashboard_logs.mjs: ${failures.length} failed; opsrun's log ${log}:\n${tail(log)}`);
    process.exit(1);
  }
  cleanup(tmp);
}

main().catch((e) => {
  console.error('dashboard_logs.mjs:', e);
  process.exit(1);
});
