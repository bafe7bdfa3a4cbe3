// tests/browser/dashboard_notify.mjs — follow-up runs and notifications in
// the dashboard: a run of a type whose "then" makes a follow-up on failure,
// and whose "notify" goes to a webhook nothing listens on, so that each
// attempt fails and the notifier gives up after two.
// - opened by its address (#/runs/<id>) while it runs, the detail lists
//   the follow-up once its end makes one, and shows the follow_up and
//   notification events with their messages as the stream brings them;
// - the runs table keeps the run completed and failed through the
//   notification events that come after its end;
// - a full page load of #/runs/<id> opens the run, for the follow-up's id
//   (with a dot) too; the follow-up's link opens it, its "Follow-up of"
//   link leads back, and each writes the address; a new address in the
//   same page opens that run, and closing the detail clears it.
// Everything is read as a person sees it. A screenshot goes to the
// build's test directory (browser-artifacts/), checked for anything shown
// that the page meant to hide.
//
// Needs what cors.mjs needs (see there); exits 77 when playwright-core
// or chromium is missing.
import { join } from 'node:path';
import {
  actionsSeen, api, checker, createDb, detailClosed, detailOf, dirs, fieldSeen, freePort, launch,
  loadPlaywright, rowSeen, screenshot, seen, startOpsrun, stopOpsrun, tail, timelineSeen, until,
  watch, cleanup,
} from './lib/harness.mjs';

const { check, failures } = checker();

const timeline = timelineSeen;

// The follow-ups the detail lists, under its "Follow-ups" heading:
// [{id, text}], id the run id its link shows.
const followUps = (page) => page.evaluate(() => {
  const h = [...document.querySelectorAll('#d-body h3')]
    .find((e) => e.checkVisibility() && e.innerText.trim() === 'Follow-ups');
  const ul = h && h.nextElementSibling;
  if (!ul || !ul.checkVisibility()) return [];
  return [...ul.querySelectorAll('li')].map((li) => ({
    id: li.querySelector('button').innerText.trim(), text: li.innerText.trim(),
  }));
});

// The link (a button) to run id in the open detail.
const linkTo = (page, id) => page.locator('#d-body').getByRole('button', { name: id, exact: true });

// A full page load of url (about:blank first, so that a new address on
// the same page is a load, not a jump).
async function load(page, w, url) {
  w.closing = true; // leaving aborts the stream and what is in flight
  await page.goto('about:blank');
  w.closing = false;
  await page.goto(url);
}

const hash = (page) => page.evaluate(() => location.hash);

const openedOn = (page, id) => detailOf(page, id);

async function main() {
  const pw = loadPlaywright();
  const { tmp, art } = dirs('dashboard-notify');
  const log = join(tmp, 'opsrun.log');
  const port = await freePort();
  const closed = await freePort(); // nothing listens there
  const base = `http://127.0.0.1:${port}`;
  const proc = await startOpsrun({ port, db: createDb('browser_dashboard_notify'), log, tmp, config: {
    queue: { shutdown_grace_s: 1 },
    notifiers: { hook: { kind: 'webhook', url: `http://127.0.0.1:${closed}/h`, max_attempts: 2 } },
    run_types: {
      fix: {
        action: 'simulate',
        notify: [{ on: ['failed'], to: 'hook' }],
        then: [{ on: ['failed'], run_type: 'page', data: { why: '{{run:/error/message}}' } }],
      },
      page: { action: 'simulate' },
    },
  } });
  let browser;
  const problems = [];
  try {
    browser = await launch(pw);
    const ctx = await browser.newContext({ viewport: { width: 1300, height: 900 } });
    const page = await ctx.newPage();
    const w = watch(page, problems);

    const sub = await api(base, '/alerts', { method: 'POST', body: { alert_type: 'fix',
      data: { fail: 'permanent', duration_ms: 12000, steps: 12 } } });
    check(sub.status === 202, `a run of type fix (${sub.status})`);
    const parent = sub.json.run_id;
    const child = `${parent}.1`;

    // Open while it runs: what its end sets off comes through the stream.
    await page.goto(`${base}/#/runs/${parent}`);
    await openedOn(page, parent);
    check(true, `#/runs/${parent} opened the run on a full page load`);
    const status = await fieldSeen(page, 'Status');
    check(status !== 'completed', `the run had not ended when its detail opened (${status})`);
    const listed = await until('the follow-up in the detail', async () => {
      const f = await followUps(page);
      return f.length ? f : null;
    });
    check(listed.length === 1 && listed[0].id === child && /\bpage\b/.test(listed[0].text),
      `the follow-up is listed with its type as it is made (${JSON.stringify(listed)})`);
    await until('the follow-up to succeed in the list', async () =>
      /succeeded/.test((await followUps(page))[0].text));
    check(true, 'the follow-up\'s outcome follows the stream');

    const gaveUp = await until('the notifier to give up', async () => {
      const ev = (await api(base, `/runs/${parent}/events`)).json.events;
      return ev.some((e) => e.type === 'notification' && /gave up/.test(e.message)) ? ev : null;
    });
    const shown = await until('the timeline to show every event with its message', async () => {
      const t = await timeline(page);
      return t.length === gaveUp.length && t.every((e) => e.text !== '…') ? t : null;
    }, 10000).catch(() => null);
    check(shown !== null, 'the live timeline has every event of GET /runs/{id}/events');
    const live = shown || await timeline(page);
    const notes = live.filter((e) => e.type === 'notification');
    check(notes.length === 2 && /^notified hook: .*attempt 1 of 2/.test(notes[0].text) &&
      /gave up after 2 attempts/.test(notes[1].text),
      `both notification attempts with their messages (${JSON.stringify(notes)})`);
    const made = live.find((e) => e.type === 'follow_up');
    check(made && made.text === `follow-up 1 (page) created: ${child}`,
      `the follow_up event with its message (${made && made.text})`);

    const seenRow = await rowSeen(page, parent);
    const row = seenRow && `${seenRow.status} ${seenRow.outcome}`;
    check(row === 'completed failed', `the table keeps the run completed after its notifications (${row})`);
    const offered = await actionsSeen(page);
    check(JSON.stringify(offered) === JSON.stringify(['Retry run']), `the failed run offers retry only (${offered.join(', ')})`);
    await screenshot(page, join(art, 'dashboard-notify.png'));

    // A full page load, after the fact; then the links both ways.
    await load(page, w, `${base}/#/runs/${parent}`);
    await openedOn(page, parent);
    await linkTo(page, child).waitFor({ state: 'visible' });
    const types = new Set((await timeline(page)).map((e) => e.type));
    check(types.has('notification') && types.has('follow_up'),
      `a fresh load shows the notification and follow_up events (${[...types].join(', ')})`);
    await linkTo(page, child).click();
    await openedOn(page, child);
    check(await hash(page) === `#/runs/${child}`, `the follow-up's link opened it (${await hash(page)})`);
    check((await fieldSeen(page, 'Follow-up of')) === parent, 'the follow-up names its parent');
    check(/permanent failure requested/.test((await seen(page, '#d-body')) || ''),
      'the follow-up\'s input came from the parent\'s error');
    await linkTo(page, parent).click();
    await openedOn(page, parent);
    check(await hash(page) === `#/runs/${parent}`, `its parent link leads back (${await hash(page)})`);

    await page.evaluate((h) => { location.hash = h; }, `#/runs/${child}`);
    await openedOn(page, child);
    check(true, 'a new address in the same page opens that run');
    await page.keyboard.press('Escape');
    await detailClosed(page);
    // The dialog's close event comes a task after its open attribute goes.
    const cleared = await until('the address to clear', async () => (await hash(page)) === '', 5000)
      .catch(() => false);
    check(cleared, `closing the detail clears the address (${await hash(page)})`);

    await load(page, w, `${base}/#/runs/${encodeURIComponent(child)}`);
    await openedOn(page, child);
    check(true, `#/runs/${child} (an id with a dot) opened the follow-up on a full page load`);
    w.closing = true;
  } catch (e) {
    check(false, `the test ran to its end: ${e.stack || e}`);
  } finally {
    if (browser) await browser.close();
    await stopOpsrun(proc);
  }
  for (const p of problems) console.log('  ' + p);
  check(problems.length === 0, `no console error, failed request or error answer (${problems.length})`);
  check(proc.exitCode === 0, `opsrun exited cleanly (status ${proc.exitCode}, signal ${proc.signalCode})`);
  if (failures.length) {
    console.error(`dashboard_notify.mjs: ${failures.length} failed; opsrun's log ${log}:\n${tail(log)}`);
    process.exit(1);
  }
  cleanup(tmp);
}

main().catch((e) => {
  console.error('dashboard_notify.mjs:', e);
  process.exit(1);
});
