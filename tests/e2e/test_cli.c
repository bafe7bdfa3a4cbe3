/* tests/e2e/test_cli.c — the client commands (docs/cli.md) as a user runs
 * them: the real binary (OPSRUN_BIN) with its output to files, not a
 * terminal, against a real server, and against a scripted HTTP peer where
 * the exact requests matter (the token, Last-Event-ID, a 204).
 *
 * submit and watch with their lines and exit statuses; watch across a
 * server restart on the same port and database, with its lines compared to
 * the run's events in the database (no gap, no repeat); runs as a table and
 * as JSON; cancel; retry; health up and down; usage and connection errors;
 * version. Every test case gets its own database and process. */
#include "../support/cli.h"
#include "../support/harness.h"

#include "client/logs.h"
#include "client/watch.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <regex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static void assert_run_id_line(const char *out, char *id, size_t cap)
{
    ck_assert_msg(cli_line_at(out, 0, id, cap), "no first line in %s", out);
    ck_assert_msg(strlen(id) == 26 && strspn(id, "0123456789ABCDEFGHJKMNPQRSTVWXYZ") == 26,
                  "first line is not a generated run id: \"%s\"", id);
}

/* watch's log lines (those of its output that start with "log ") are the
 * run's whole log, each line once, in order. When watch saw the run end
 * (live), the line before the result is the run's last state, after the
 * last log line; else the first line is. */
static void assert_watch_log(const struct th_proc *p, const char *id, const char *out, bool live)
{
    int n, nout = cli_count_lines(out);
    char *want = cli_expected_log(p->url, id, LOGLINE_WATCH, 0, &n);
    char *got = cli_lines_with(out, "log ", true);
    char line[512];

    ck_assert_msg(n > 0, "run %s has no log", id);
    ck_assert_msg(strcmp(got, want) == 0, "watch's log lines:\n%s\nthe run's log:\n%s", got, want);
    ck_assert(cli_line_at(out, live ? nout - 2 : 0, line, sizeof(line)));
    ck_assert_msg(cli_starts_with(line, live ? "status    completed" : "snapshot  completed"),
                  "the last state: %s\n%s", line, out);
    free(want);
    free(got);
}

/* ---- tests against a real server ---- */

/* submit --watch: the run id, one line per event and per log line, the
 * result; exit 0 when the run succeeded, 1 when it failed. watch of a
 * completed run: its snapshot, its log and the result. watch of an
 * unknown run: 1, the server's problem. */
START_TEST(submit_and_watch)
{
    struct th_proc p;
    struct cli c;
    char id[64], line[512], want[128];
    char *events;
    int n;

    th_start_fresh(&p, "e2e_cli_watch", NULL);
    CLI(&c, p.url, 0, "submit", "demo", "--data", "{\"duration_ms\":600,\"steps\":3}", "--watch");
    assert_run_id_line(c.out, id, sizeof(id));
    ck_assert_msg(cli_line_at(c.out, 1, line, sizeof(line)) && cli_starts_with(line, "snapshot  "),
                  "second line: %s", line);
    ck_assert_msg(strstr(c.out, "\nstatus    completed  succeeded 100%"), "%s", c.out);
    n = cli_count_lines(c.out);
    ck_assert(cli_line_at(c.out, n - 1, line, sizeof(line)));
    snprintf(want, sizeof(want), "run %s succeeded", id);
    ck_assert_str_eq(line, want);
    ck_assert_str_eq(c.err, "");
    assert_watch_log(&p, id, c.out, true);
    ck_assert_msg(strstr(c.out, "\nlog       opsrun  step 2 of 3\n"), "%s", c.out);
    cli_free(&c);

    CLI(&c, p.url, 1, "submit", "demo", "--run-id", "f-1", "--data",
        "{\"duration_ms\":0,\"fail\":\"permanent\"}", "--watch");
    ck_assert(cli_line_at(c.out, 0, line, sizeof(line)));
    ck_assert_str_eq(line, "f-1");
    ck_assert(cli_line_at(c.out, cli_count_lines(c.out) - 1, line, sizeof(line)));
    ck_assert_str_eq(line,
                     "run f-1 failed (simulated_failure): permanent failure requested by \"fail\"");
    cli_free(&c);

    /* the same submission again: the existing run, said so on stderr */
    CLI(&c, p.url, 0, "submit", "demo", "--run-id", "f-1", "--data",
        "{\"duration_ms\":0,\"fail\":\"permanent\"}");
    ck_assert_str_eq(c.out, "f-1\n");
    ck_assert_str_eq(c.err, "opsrun: f-1 is an existing run (deduplicated)\n");
    cli_free(&c);

    CLI(&c, p.url, 1, "watch", "f-1");
    ck_assert_msg(cli_starts_with(c.out, "snapshot  completed  failed  "), "%s", c.out);
    events = cli_lines_with(c.out, "log ", false);
    ck_assert_int_eq(cli_count_lines(events), 2);
    free(events);
    assert_watch_log(&p, "f-1", c.out, false);
    cli_free(&c);
    CLI(&c, p.url, 0, "watch", id);
    events = cli_lines_with(c.out, "log ", false);
    ck_assert_int_eq(cli_count_lines(events), 2);
    free(events);
    assert_watch_log(&p, id, c.out, false);
    cli_free(&c);

    CLI(&c, p.url, 1, "watch", "nope");
    ck_assert_str_eq(c.out, "");
    ck_assert_msg(cli_starts_with(c.err, "opsrun: watch: Not Found: run \"nope\""), "%s", c.err);
    cli_free(&c);

    /* a submission the server refuses: its problem, exit 1 */
    CLI(&c, p.url, 1, "submit", "no-such-type");
    ck_assert_str_eq(c.err, "opsrun: submit: Unprocessable Content: invalid \"alert_type\": no "
                            "route or run type matches \"no-such-type\" (known run types: demo)\n");
    cli_free(&c);
    CLI(&c, p.url, 1, "submit", "dmeo");
    ck_assert_str_eq(c.err, "opsrun: submit: Unprocessable Content: invalid \"alert_type\": no "
                            "route or run type matches \"dmeo\" (known run types: demo); did you "
                            "mean \"demo\"?\n");
    cli_free(&c);
    th_stop_clean(&p);
}
END_TEST

/* The lines watch prints for the run's events in the database, oldest
 * first, as watch_format_line writes them. */
static char **db_event_lines(PGconn *pg, const char *run_id, int *n)
{
    PGresult *r = th_sql(pg,
                         "SELECT type, status, outcome, progress, coalesce(step, '') FROM "
                         "run_events WHERE run_id = '%s' ORDER BY id",
                         run_id);
    char **lines = calloc((size_t)PQntuples(r) + 1, sizeof(char *));

    *n = PQntuples(r);
    for (int i = 0; i < *n; i++) {
        json_t *run = json_pack("{s:s, s:s, s:i, s:s}", "status", PQgetvalue(r, i, 1), "outcome",
                                PQgetvalue(r, i, 2), "progress", atoi(PQgetvalue(r, i, 3)), "step",
                                PQgetvalue(r, i, 4));
        char buf[512];
        if (!*PQgetvalue(r, i, 4))
            json_object_set_new(run, "step", json_null());
        watch_format_line(PQgetvalue(r, i, 0), run, buf, sizeof(buf));
        lines[i] = strdup(buf);
        json_decref(run);
    }
    PQclear(r);
    return lines;
}

/* watch across a restart of the server on the same port and database: the
 * stream ends when the server stops, watch reconnects with Last-Event-ID
 * until it is back, and prints every event of the run once, in order. */
START_TEST(watch_across_restart)
{
    static const char config[] = "{\"queue\": {\"shutdown_grace_s\": 0}}";
    struct th_proc p;
    struct cli c;
    char *path = th_config_file("e2e_cli_restart", config);
    const char *const args[] = {"--config", path, NULL};
    const char *ci;
    char **want, line[512], *out_lines, *events;
    int nwant, nout, rc;
    PGconn *pg;

    ci = th_start_fresh(&p, "e2e_cli_restart", config);
    free(th_submit(&p,
                   "{\"alert_type\":\"demo\",\"run_id\":\"long-1\","
                   "\"data\":{\"duration_ms\":6000,\"steps\":12}}",
                   202));
    cli_spawn(&c, p.url, (const char *const[]){"watch", "long-1", NULL});
    ck_assert_msg(cli_file_has(c.out_path, "\nprogress  running", 15000), "no progress line");
    rc = th_stop(&p, SIGTERM, 30);
    ck_assert_msg(rc == 0, "the server exited %d; log: %s", rc, p.log);
    ck_assert_msg(cli_file_has(c.err_path, "reconnecting", 10000), "no reconnect message");
    th_sleep_ms(1000);
    th_restart(&p, ci, args, NULL);
    ck_assert_int_eq(cli_wait(&c, 60), 0);

    pg = th_pg(ci);
    want = db_event_lines(pg, "long-1", &nwant);
    events = cli_lines_with(c.out, "log ", false);
    nout = cli_count_lines(events);
    /* the first line is the snapshot, the last the result; those in
     * between are the events after the snapshot's, each once, in order */
    ck_assert_msg(nout >= 4 && nout - 2 <= nwant, "%d lines for %d events:\n%s", nout, nwant,
                  c.out);
    for (int i = 1; i < nout - 1; i++) {
        ck_assert(cli_line_at(events, i, line, sizeof(line)));
        ck_assert_msg(strcmp(line, want[nwant - (nout - 2) + i - 1]) == 0,
                      "line %d \"%s\", want \"%s\"\nstdout:\n%s", i, line,
                      want[nwant - (nout - 2) + i - 1], c.out);
    }
    ck_assert(cli_line_at(events, nout - 1, line, sizeof(line)));
    ck_assert_str_eq(line, "run long-1 succeeded");
    /* the run was handed back at the stop, and watch saw that too */
    out_lines = strstr(events, "\nstatus    queued     pending");
    ck_assert_msg(out_lines != NULL, "no hand-back line:\n%s", c.out);
    ck_assert_msg(strstr(c.err, "opsrun: stream of run long-1 lost ("), "stderr: %s", c.err);
    /* the log across the restart: both attempts' lines, each once, in
     * order; its stream reconnected without a word */
    assert_watch_log(&p, "long-1", c.out, true);
    ck_assert_msg(strstr(c.out, "\nlog       opsrun  attempt 1 handed back at shutdown "), "%s",
                  c.out);
    ck_assert_msg(!strstr(c.err, "log stream"), "stderr: %s", c.err);
    free(events);
    for (int i = 0; i < nwant; i++)
        free(want[i]);
    free(want);
    PQfinish(pg);
    cli_free(&c);
    free(path);
    th_stop_clean(&p);
}
END_TEST

/* runs as a table and as JSON, with filters; cancel; retry. */
START_TEST(runs_cancel_retry)
{
    struct th_proc p;
    struct cli c;
    struct th_resp r;
    json_t *j, *run;
    char id[64], id2[64], line[512], path[128];

    th_start_fresh(&p, "e2e_cli_runs", NULL);
    free(th_submit(&p,
                   "{\"alert_type\":\"demo\",\"run_id\":\"later-1\","
                   "\"run_at\":\"2999-01-01T00:00:00Z\",\"data\":{\"duration_ms\":0}}",
                   202));
    free(th_submit(
        &p, "{\"alert_type\":\"demo\",\"run_id\":\"slow-1\",\"data\":{\"duration_ms\":30000}}",
        202));
    free(th_submit(&p,
                   "{\"alert_type\":\"demo\",\"run_id\":\"fail-1\","
                   "\"data\":{\"duration_ms\":0,\"fail\":\"permanent\"}}",
                   202));
    th_expect_outcome(&p, "fail-1", "failed", 20);
    ck_assert(th_wait_status(&p, "slow-1", "running", 10000));

    CLI(&c, p.url, 0, "runs", "--json", "--limit", "2");
    j = json_loads(c.out, 0, NULL);
    ck_assert_msg(j != NULL, "not JSON: %s", c.out);
    ck_assert_int_eq(json_array_size(json_object_get(j, "runs")), 2);
    ck_assert(json_is_string(json_object_get(j, "next_cursor")));
    ck_assert_str_eq(th_js(json_array_get(json_object_get(j, "runs"), 0), "id"), "fail-1");
    json_decref(j);
    cli_free(&c);

    CLI(&c, p.url, 0, "runs", "--status", "completed", "--type", "demo");
    ck_assert(cli_line_at(c.out, 0, line, sizeof(line)));
    ck_assert_msg(cli_starts_with(line, "ID      TYPE  STATUS      OUTCOME"), "header: %s", line);
    ck_assert(cli_line_at(c.out, 1, line, sizeof(line)));
    ck_assert_msg(cli_starts_with(line, "fail-1  demo  completed   failed  "), "row: %s", line);
    ck_assert_int_eq(cli_count_lines(c.out), 2);
    cli_free(&c);
    CLI(&c, p.url, 0, "runs", "--type", "nosuch");
    ck_assert_str_eq(c.out, "");
    ck_assert_str_eq(c.err, "opsrun: no runs\n");
    cli_free(&c);
    CLI(&c, p.url, 0, "runs", "--limit", "1");
    ck_assert_int_eq(cli_count_lines(c.out), 2);
    ck_assert_str_eq(c.err, "opsrun: more runs match than shown (--limit N, at most 500)\n");
    cli_free(&c);

    CLI(&c, p.url, 0, "cancel", "later-1");
    ck_assert_str_eq(c.out, "run later-1 cancelled\n");
    cli_free(&c);
    CLI(&c, p.url, 0, "cancel", "slow-1");
    ck_assert_str_eq(c.out, "run slow-1 cancelling\n");
    cli_free(&c);
    CLI(&c, p.url, 1, "cancel", "later-1");
    ck_assert_str_eq(
        c.err, "opsrun: cancel: Conflict: run \"later-1\" is already completed (cancelled)\n");
    cli_free(&c);
    CLI(&c, p.url, 1, "cancel", "nope");
    ck_assert_str_eq(c.err, "opsrun: cancel: Not Found: run \"nope\" does not exist\n");
    cli_free(&c);

    /* retry prints the new run's id; the run names the one it repeats */
    CLI(&c, p.url, 0, "retry", "fail-1");
    assert_run_id_line(c.out, id, sizeof(id));
    ck_assert_int_eq(cli_count_lines(c.out), 1);
    run = th_get_run(&p, id);
    ck_assert_str_eq(th_js(run, "retry_of"), "fail-1");
    json_decref(run);
    th_expect_outcome(&p, id, "failed", 20);
    cli_free(&c);
    /* --watch follows it: this one fails again (exit 1) ... */
    CLI(&c, p.url, 1, "retry", id, "--watch");
    assert_run_id_line(c.out, id2, sizeof(id2));
    ck_assert(cli_line_at(c.out, cli_count_lines(c.out) - 1, line, sizeof(line)));
    ck_assert_msg(cli_starts_with(line, "run ") && strstr(line, " failed (simulated_failure)"),
                  "%s", line);
    cli_free(&c);
    /* ... and the cancelled one runs now and succeeds (exit 0) */
    CLI(&c, p.url, 0, "retry", "later-1", "--watch");
    assert_run_id_line(c.out, id2, sizeof(id2));
    ck_assert(cli_line_at(c.out, cli_count_lines(c.out) - 1, line, sizeof(line)));
    snprintf(path, sizeof(path), "run %s succeeded", id2);
    ck_assert_str_eq(line, path);
    cli_free(&c);
    CLI(&c, p.url, 1, "retry", id2);
    ck_assert_msg(cli_starts_with(c.err, "opsrun: retry: Conflict: run \""), "%s", c.err);
    cli_free(&c);

    th_expect_outcome(&p, "slow-1", "cancelled", 20);
    th_get(p.url, "/runs?status=running", &r);
    ck_assert_int_eq(json_array_size(json_object_get(r.json, "runs")), 0);
    th_resp_free(&r);
    th_stop_clean(&p);
}
END_TEST

/* approve and reject a run that waits for it; cancel and retry by a
 * filter, with --dry-run first, --since and --json. */
START_TEST(approve_reject_and_bulk)
{
    const char *config = "{\"run_types\": {\"gated\": {\"action\": \"simulate\", "
                         "\"params\": {\"duration_ms\": 0}, \"approval\": {}}}}";
    struct th_proc p;
    struct cli c;
    json_t *run, *j;

    th_start_fresh(&p, "e2e_cli_decide", config);
    free(th_submit(&p, "{\"alert_type\":\"gated\",\"run_id\":\"g-1\"}", 202));
    free(th_submit(&p, "{\"alert_type\":\"gated\",\"run_id\":\"g-2\"}", 202));
    for (int i = 0; i < 30; i++) {
        char body[160];
        snprintf(body, sizeof(body),
                 "{\"alert_type\":\"demo\",\"run_id\":\"later-%d\","
                 "\"run_at\":\"2999-01-01T00:00:00Z\"}",
                 i);
        free(th_submit(&p, body, 202));
    }

    CLI(&c, p.url, 0, "approve", "g-1", "--comment", "window is open");
    ck_assert_str_eq(c.out, "run g-1 approved\n");
    cli_free(&c);
    th_expect_outcome(&p, "g-1", "succeeded", 20);
    run = th_get_run(&p, "g-1");
    ck_assert_str_eq(th_js(json_object_get(run, "approval"), "comment"), "window is open");
    json_decref(run);
    CLI(&c, p.url, 0, "reject", "g-2");
    ck_assert_str_eq(c.out, "run g-2 rejected\n");
    cli_free(&c);
    CLI(&c, p.url, 1, "approve", "g-2");
    ck_assert_str_eq(c.err, "opsrun: approve: Conflict: run \"g-2\" is not awaiting approval: it "
                            "is completed (rejected)\n");
    cli_free(&c);

    CLI(&c, p.url, 0, "cancel", "--status", "queued", "--type", "demo", "--dry-run");
    ck_assert_str_eq(c.out, "30 runs match (dry run: nothing was cancelled)\n");
    cli_free(&c);
    CLI(&c, p.url, 1, "cancel", "--status", "queued", "--type", "demo", "--limit", "29");
    ck_assert_msg(cli_starts_with(c.err, "opsrun: cancel: Conflict: more than 29 runs match"), "%s",
                  c.err);
    cli_free(&c);
    CLI(&c, p.url, 0, "cancel", "--status", "queued", "--type", "demo");
    ck_assert_str_eq(c.out, "cancelled 30 of 30 matching runs\n");
    cli_free(&c);
    CLI(&c, p.url, 0, "retry", "--outcome", "cancelled", "--type", "demo", "--since", "1h",
        "--dry-run");
    ck_assert_str_eq(c.out, "30 runs match (dry run: nothing was retried)\n");
    cli_free(&c);
    CLI(&c, p.url, 0, "retry", "--outcome", "cancelled,failed", "--type", "demo", "--since", "1h",
        "--json");
    j = json_loads(c.out, 0, NULL);
    ck_assert_msg(j != NULL, "not JSON: %s", c.out);
    ck_assert_int_eq(th_ji(j, "acted"), 30);
    ck_assert_int_eq(json_array_size(json_object_get(j, "new_run_ids")), 30);
    json_decref(j);
    cli_free(&c);
    CLI(&c, p.url, 2, "cancel");
    ck_assert_msg(strstr(c.err, "cancel needs a run id (opsrun cancel ID) or a filter"), "%s",
                  c.err);
    cli_free(&c);
    th_stop_clean(&p);
}
END_TEST

/* health: 0 and "ready" while the server serves; 1, quickly, once it is
 * gone (never 2, which Docker reserves). */
START_TEST(health)
{
    struct th_proc p;
    struct cli c;
    char url[sizeof(p.url)];
    long long t0;

    th_start_fresh(&p, "e2e_cli_health", NULL);
    CLI(&c, NULL, 0, "health", "--server", p.url);
    ck_assert_str_eq(c.out, "ready\n");
    cli_free(&c);
    snprintf(url, sizeof(url), "%s", p.url);
    th_stop_clean(&p);
    t0 = th_now_ms();
    CLI(&c, NULL, 1, "--server", url, "health");
    ck_assert_msg(th_now_ms() - t0 < 5000, "health took %lld ms", th_now_ms() - t0);
    ck_assert_msg(cli_starts_with(c.err, "opsrun: not ready: could not reach "), "%s", c.err);
    cli_free(&c);
}
END_TEST

/* Usage errors and unreachable servers exit 2 before or without a request;
 * the token is never printed. version and --version name the build. */
START_TEST(usage_and_version)
{
    static const char *const usage[][5] = {
        {"watch", NULL},
        {"runs", "--limit", "0", NULL},
        {"submit", "demo", "--data", "[1]"},
        {"health", "--json", NULL},
        {"frobnicate", NULL},
        {"cancel", "a/b", NULL},
        {"logs", NULL},
        {"logs", "x", "--attempt", "0"},
    };
    struct cli c;
    char url[64];
    regex_t re;

    for (size_t i = 0; i < sizeof(usage) / sizeof(usage[0]); i++) {
        cli_spawn(&c, "http://127.0.0.1:1", usage[i]);
        ck_assert_msg(cli_wait(&c, 20) == 2, "%s: exit %d: %s", usage[i][0], c.rc, c.err);
        ck_assert_msg(cli_starts_with(c.err, "opsrun: "), "%s: stderr %s", usage[i][0], c.err);
        ck_assert_str_eq(c.out, "");
        cli_free(&c);
    }
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", cli_dead_port());
    CLI(&c, url, 2, "runs", "--token", "s3cr3t-t0ken");
    ck_assert_msg(cli_starts_with(c.err, "opsrun: could not reach http://127.0.0.1:"), "%s", c.err);
    ck_assert_ptr_null(strstr(c.err, "s3cr3t"));
    cli_free(&c);
    CLI(&c, url, 2, "cancel", "x");
    cli_free(&c);

    CLI(&c, NULL, 0, "submit", "--help");
    ck_assert_msg(strstr(c.out, "client commands") && strstr(c.out, "OPSRUN_TOKEN"), "%s", c.out);
    cli_free(&c);
    CLI(&c, NULL, 0, "--help");
    ck_assert_msg(strstr(c.out, "  serve ") && strstr(c.out, "  watch ID") &&
                      strstr(c.out, "  logs ID [--attempt N] [--follow|-f] [--json]"),
                  "%s", c.out);
    cli_free(&c);

    /* A mistyped command is what is blamed, not its operand; the usage
     * after it is --help's, client commands included. */
    CLI(&c, NULL, 2, "sumbit", "demo");
    ck_assert_msg(cli_starts_with(c.err, "opsrun: unknown command \"sumbit\"; did you mean "
                                         "\"submit\"?\nusage: opsrun <command>"),
                  "%s", c.err);
    ck_assert_msg(strstr(c.err, "  serve ") && strstr(c.err, "  watch ID") &&
                      strstr(c.err, "  token new ") && strstr(c.err, "  health "),
                  "%s", c.err);
    ck_assert_str_eq(c.out, "");
    cli_free(&c);
    CLI(&c, NULL, 2, "frobnicate");
    ck_assert_msg(cli_starts_with(c.err, "opsrun: unknown command \"frobnicate\"\nusage: "), "%s",
                  c.err);
    cli_free(&c);
    CLI(&c, NULL, 2, "serve", "--bogus");
    ck_assert_msg(cli_starts_with(c.err, "opsrun: unknown argument \"--bogus\"\nusage: "), "%s",
                  c.err);
    ck_assert_msg(strstr(c.err, "client commands") && strstr(c.err, "  submit TYPE"), "%s", c.err);
    cli_free(&c);

    ck_assert(regcomp(&re,
                      "^opsrun [0-9]+\\.[0-9]+\\.[0-9]+ \\(commit [0-9a-z-]+, built "
                      "[0-9]{4}-[0-9]{2}-[0-9]{2}\\)\n$",
                      REG_EXTENDED | REG_NOSUB) == 0);
    CLI(&c, NULL, 0, "version");
    ck_assert_msg(regexec(&re, c.out, 0, NULL, 0) == 0, "version: %s", c.out);
    cli_free(&c);
    CLI(&c, NULL, 0, "--version");
    ck_assert_msg(regexec(&re, c.out, 0, NULL, 0) == 0, "--version: %s", c.out);
    cli_free(&c);
    regfree(&re);
}
END_TEST

/* The exact requests of watch: the token as a bearer header; after the
 * stream breaks, the same path again with Last-Event-ID; a 204 ends it, and
 * the outcome comes from GET /runs/{id}. The log stream opens once the
 * first event has come, and resumes with the seq of its last line; the
 * log's lines are all shown once, cleaned, before the result, and its
 * reconnect says nothing. */
static void answer_log_stream(int fd, int nth, const char *req)
{
    static const char head[] =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
        "retry: 3000\n\n";
    char body[1024];

    if (nth == 0) {
        ck_assert_msg(!strstr(req, "Last-Event-ID"), "%s", req);
        snprintf(body, sizeof(body),
                 "%sid: 1\nevent: log\ndata: {\"seq\":1,\"attempt\":1,\"at\":"
                 "\"2026-12-06T14:46:10.864845Z\",\"stream\":\"opsrun\",\"text\":\"attempt 1 of 1 "
                 "started\"}\n\nid: 2\nevent: log\ndata: {\"seq\":2,\"attempt\":1,\"at\":"
                 "\"2026-12-06T14:46:10.9Z\",\"stream\":\"stderr\",\"text\":\"tab\\tand "
                 "\\u001b[2J escape\"}\n\n",
                 head);
    } else {
        ck_assert_msg(cli_has_header(req, "Last-Event-ID: 2"), "%s", req);
        /* line 2 again, as a server that resumes a line early would:
         * shown once */
        snprintf(body, sizeof(body),
                 "%sid: 2\nevent: log\ndata: {\"seq\":2,\"attempt\":1,\"at\":"
                 "\"2026-12-06T14:46:10.9Z\",\"stream\":\"stderr\",\"text\":\"again\"}\n\n"
                 "id: 3\nevent: log\ndata: {\"seq\":3,\"attempt\":1,\"at\":"
                 "\"2026-12-06T14:46:11Z\",\"stream\":\"stderr\",\"text\":\"third\"}\n\n"
                 "event: end\ndata: {\"last_seq\":3}\n\n",
                 head);
    }
    cli_peer_answer(fd, body);
}

START_TEST(watch_requests)
{
    struct cli c;
    char req[4096], url[64];
    int port, lfd = cli_peer_listen(&port), fd, logs = 0;
    bool resumed = false, read_run = false;

    snprintf(url, sizeof(url), "http://127.0.0.1:%d/", port);
    cli_spawn(&c, url, (const char *const[]){"watch", "w-1", "--token", "tok-123", NULL});

    fd = cli_peer_accept(lfd, req, sizeof(req));
    ck_assert_msg(cli_starts_with(req, "GET /runs/w-1/stream HTTP/1.1\r\n"), "%s", req);
    ck_assert_msg(cli_has_header(req, "Authorization: Bearer tok-123"), "%s", req);
    ck_assert_msg(cli_has_header(req, "Accept: text/event-stream"), "%s", req);
    ck_assert_msg(!strstr(req, "Last-Event-ID"), "%s", req);
    cli_peer_answer(
        fd, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
            "retry: 3000\n\nid: 41\nevent: snapshot\ndata: {\"id\":\"w-1\",\"status\":"
            "\"running\",\"outcome\":\"pending\",\"progress\":0,\"step\":null}\n\n: hb\n\n"
            "id: 42\nevent: progress\ndata: {\"id\":\"w-1\",\"status\":\"running\","
            "\"outcome\":\"pending\",\"progress\":50,\"step\":\"half\"}\n\n");

    /* the run's stream again, the log's stream twice and the run: in any
     * order, as the client makes them side by side */
    while (!resumed || !read_run || logs < 2) {
        fd = cli_peer_accept(lfd, req, sizeof(req));
        ck_assert_msg(cli_has_header(req, "Authorization: Bearer tok-123"), "%s", req);
        if (cli_starts_with(req, "GET /runs/w-1/stream HTTP/1.1\r\n")) {
            ck_assert_msg(!resumed && cli_has_header(req, "Last-Event-ID: 42"), "%s", req);
            cli_peer_answer(fd, "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n");
            resumed = true;
        } else if (cli_starts_with(req, "GET /runs/w-1/logs/stream HTTP/1.1\r\n")) {
            ck_assert_msg(cli_has_header(req, "Accept: text/event-stream"), "%s", req);
            answer_log_stream(fd, logs++, req);
        } else {
            ck_assert_msg(resumed && cli_starts_with(req, "GET /runs/w-1 HTTP/1.1\r\n"), "%s", req);
            cli_peer_answer(fd,
                            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                            "83\r\nConnection: close\r\n\r\n"
                            "{\"id\":\"w-1\",\"status\":\"completed\",\"outcome\":\"succeeded\","
                            "\"progress\":100,\"error\":null}");
            read_run = true;
        }
    }
    ck_assert_int_eq(cli_wait(&c, 20), 0);
    ck_assert_str_eq(c.out, "snapshot  running    pending     0%\n"
                            "progress  running    pending    50%  half\n"
                            "log       opsrun  attempt 1 of 1 started\n"
                            "log       stderr  tab\tand ?[2J escape\n"
                            "log       stderr  third\n"
                            "run w-1 succeeded\n");
    ck_assert_msg(cli_starts_with(c.err, "opsrun: stream of run w-1 lost (the stream ended before "
                                         "the run did); reconnecting in "),
                  "%s", c.err);
    ck_assert_int_eq(cli_count_lines(c.err), 1);
    ck_assert_ptr_null(strstr(c.err, "tok-123"));
    cli_free(&c);
    close(lfd);
}
END_TEST

/* A stream that keeps breaking: watch gives up after its tries, exit 2. A
 * 4xx other than 408/429 is final at once: exit 1. */
START_TEST(watch_gives_up)
{
    struct cli c;
    char req[4096], url[64];
    int port, lfd = cli_peer_listen(&port), fd;

    snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
    cli_spawn(&c, url, (const char *const[]){"watch", "w-2", NULL});
    for (int i = 0; i < WATCH_TRIES; i++) {
        fd = cli_peer_accept(lfd, req, sizeof(req));
        cli_peer_answer(fd,
                        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/problem+json"
                        "\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}");
    }
    ck_assert_int_eq(cli_wait(&c, 60), 2);
    ck_assert_msg(
        strstr(c.err, "opsrun: gave up on the stream of run w-2 after 10 tries: HTTP 503"), "%s",
        c.err);
    cli_free(&c);

    cli_spawn(&c, url, (const char *const[]){"watch", "w-3", NULL});
    fd = cli_peer_accept(lfd, req, sizeof(req));
    cli_peer_answer(
        fd, "HTTP/1.1 401 Unauthorized\r\nContent-Type: application/problem+json\r\n"
            "Connection: close\r\nContent-Length: 84\r\n\r\n"
            "{\"type\":\"about:blank\",\"title\":\"Unauthorized\",\"status\":401,\"detail\":"
            "\"no token given\"}");
    ck_assert_int_eq(cli_wait(&c, 20), 1);
    ck_assert_str_eq(c.err, "opsrun: watch: Unauthorized: no token given\n");
    cli_free(&c);
    close(lfd);
}
END_TEST

static Suite *cli_suite(void)
{
    Suite *s = suite_create("e2e_cli");
    const struct {
        const char *name;
        const TTest *fn;
        int timeout;
    } cases[] = {
        {"submit_and_watch", submit_and_watch, 120},
        {"watch_across_restart", watch_across_restart, 180},
        {"runs_cancel_retry", runs_cancel_retry, 120},
        {"approve_reject_and_bulk", approve_reject_and_bulk, 120},
        {"health", health, 60},
        {"usage_and_version", usage_and_version, 120},
        {"watch_requests", watch_requests, 60},
        {"watch_gives_up", watch_gives_up, 120},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        TCase *tc = tcase_create(cases[i].name);
        tcase_set_timeout(tc, cases[i].timeout);
        tcase_add_test(tc, cases[i].fn);
        suite_add_tcase(s, tc);
    }
    return s;
}

int main(void)
{
    return th_run_suite(cli_suite());
}
