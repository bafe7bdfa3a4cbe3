// tests/browser/lib/logs.mjs — what the tests of a run's log in the
// dashboard share (dashboard_logs.mjs, dashboard_logs_100k.mjs): the run
// types, whose commands (written into the test's scratch directory) print
// to stderr; the log as a person sees it (the lines shown, those in view
// of its box, the plain text its link opens); the lines as the API gives
// them; opening and closing a run's detail. Not a test itself.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { api, detailClosed, detailOf, until } from './harness.mjs';

// The log's lines as the screen shows them, top to bottom (each line's
// text, without the time column), or null while the log is not shown.
export const logSeen = (page) => page.evaluate(() => {
  const box = document.getElementById('log-box');
  if (!box || !box.checkVisibility()) return null;
  return [...box.querySelectorAll('.ln')].filter((l) => l.checkVisibility())
    .map((l) => l.querySelector('.tx').innerText);
});

// The lines a person has in view in the log's box (scrolled there), once
// the page has been painted since the last change.
export const logInView = (page) => page.evaluate(async () => {
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  const box = document.getElementById('log-box');
  const r = box.getBoundingClientRect();
  return [...box.querySelectorAll('.ln')].filter((l) => {
    const b = l.getBoundingClientRect();
    return l.checkVisibility() && b.bottom > r.top + 2 && b.top < r.bottom - 2;
  }).map((l) => l.querySelector('.tx').innerText);
});

// The texts of a run's lines as the API gives them (one attempt).
export async function apiLines(base, id, attempt, token) {
  const out = [];
  let after = 0;
  for (;;) {
    const r = await api(base, `/runs/${id}/logs?attempt=${attempt}&after=${after}&limit=5000`, { token });
    out.push(...r.json.lines.map((l) => l.text));
    if (r.json.next_after === null) return out;
    after = r.json.next_after;
  }
}

export async function submitRun(base, type, data, extra = {}, token) {
  const r = await api(base, '/alerts', { method: 'POST', body: { alert_type: type, data, ...extra }, token });
  if (r.status !== 202) throw new Error(`POST /alerts answered ${r.status}: ${r.text}`);
  return r.json.run_id;
}

export const completed = (base, id, token) => until(`run ${id} to complete`, async () => {
  const r = await api(base, `/runs/${id}`, { token });
  return r.json && r.json.status === 'completed' ? r.json : null;
}, 60000);

// The detail of id opened by its address, its log box in view.
export async function openRun(page, base, id) {
  await page.goto(`${base}/#/runs/${id}`);
  await detailOf(page, id);
  await page.locator('#log-box').scrollIntoViewIfNeeded();
}

// Escape closes the detail (and stops its log stream, if one is open).
export async function closeDetail(page) {
  await page.keyboard.press('Escape');
  await detailClosed(page);
}

export const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

// "line 3 of 30" lines only, in the order shown, as numbers.
export const numbered = (lines) => lines.filter((t) => /^line \d+ of \d+$/.test(t)).map((t) => Number(t.split(' ')[1]));

// The plain text link of the open detail: the text of the page it opens.
export async function plainText(page) {
  const [tab] = await Promise.all([
    page.context().waitForEvent('page'),
    page.getByRole('link', { name: 'Plain text' }).click(),
  ]);
  const text = await until('the plain text', async () => {
    await tab.waitForLoadState();
    const t = await tab.evaluate(() => document.body && document.body.innerText).catch(() => null);
    return t && !t.startsWith('Reading') ? { t, url: tab.url() } : null;
  }, 30000);
  await tab.close();
  return text;
}

// A command that waits for the test (its argument: a file the test
// creates with release()) before it goes on, at most 30 s.
const AWAIT = 'i=0; while [ ! -e "$1" ] && [ "$i" -lt 300 ]; do sleep 0.1; i=$((i + 1)); done';
export const release = (flag) => writeFileSync(flag, '');

// The run types: commands that print to stderr, written here.
export function configFor(tmp) {
  const script = (name, text) => {
    const f = join(tmp, name);
    writeFileSync(f, text);
    return f;
  };
  // n lines, gap seconds apart; given a line number and a file (paced),
  // it waits after that line until the test creates the file.
  const slow = script('slow.sh', [
    'n=$1; gap=$2; i=1',
    'while [ "$i" -le "$n" ]; do',
    '  echo "line $i of $n" >&2; sleep "$gap"',
    '  if [ "$i" = "$3" ]; then w=0; while [ ! -e "$4" ] && [ "$w" -lt 300 ]; do sleep 0.1; w=$((w + 1)); done; fi',
    '  i=$((i + 1))',
    'done',
    "echo '{}'", '',
  ].join('\n'));
  // Lines 1 to 10, then (once the test creates $2) 11 to 20, then (once
  // it creates $3) 21 to 40, a tenth of a second apart.
  const gated = script('gated.sh', [
    'i=1',
    'while [ "$i" -le "$1" ]; do',
    '  if [ "$i" = 11 ]; then f=$2; elif [ "$i" = 21 ]; then f=$3; else f=; fi',
    '  if [ -n "$f" ]; then w=0; while [ ! -e "$f" ] && [ "$w" -lt 300 ]; do sleep 0.1; w=$((w + 1)); done; fi',
    '  echo "line $i of $1" >&2; sleep 0.1; i=$((i + 1))',
    'done',
    "echo '{}'", '',
  ].join('\n'));
  const flaky = script('flaky.sh', [
    'if [ "$OPSRUN_ATTEMPT" = 1 ]; then',
    '  echo "attempt one: starting" >&2', AWAIT,
    '  echo "attempt one: host unreachable, exiting 75" >&2; exit 75',
    'fi',
    'echo "attempt two: starting" >&2; sleep 1; echo "attempt two: done" >&2',
    "echo '{}'", '',
  ].join('\n'));
  const burst = script('burst.sh', [
    AWAIT,
    'awk \'BEGIN { for (i = 1; i <= 20000; i++) { print i > "/dev/stderr"; if (i % 5000 == 0) {'
      + ' fflush("/dev/stderr"); system("sleep 1") } } }\'',
    "echo '{}'", '',
  ].join('\n'));
  return {
    queue: { shutdown_grace_s: 1 },
    logs: { max_line_bytes: 256 },
    run_types: {
      slow: { action: 'exec', max_attempts: 1, params: { argv: ['/bin/sh', slow, '{{input:/n}}', '{{input:/gap}}'] } },
      paced: {
        action: 'exec', max_attempts: 1,
        params: { argv: ['/bin/sh', slow, '{{input:/n}}', '{{input:/gap}}', '{{input:/hold}}', '{{input:/flag}}'] },
      },
      gated: { action: 'exec', max_attempts: 1, params: { argv: ['/bin/sh', gated, '40', '{{input:/go1}}', '{{input:/go2}}'] } },
      flaky: { action: 'exec', max_attempts: 2, retry_backoff_ms: 1500, params: { argv: ['/bin/sh', flaky, '{{input:/flag}}'] } },
      // Attempt 1 of flaky, one run at a time: a second run waits, queued.
      keyed: {
        action: 'exec', max_attempts: 1, concurrency: { key: 'one' }, params: { argv: ['/bin/sh', flaky, '{{input:/flag}}'] },
      },
      // 100,000 lines at once; 20,000 in four bursts, a second apart.
      flood: { action: 'exec', max_attempts: 1, params: { argv: ['/bin/sh', '-c', "seq 1 100000 >&2; echo '{}'"] } },
      burst: { action: 'exec', max_attempts: 1, params: { argv: ['/bin/sh', burst, '{{input:/flag}}'] } },
      long: { action: 'exec', max_attempts: 1, params: { argv: ['/bin/sh', '-c', "printf 'x%.0s' $(seq 600) >&2; echo >&2; echo '{}'"] } },
    },
  };
}
