/* tests/e2e/test_poller.c — the poller and the rest_job action against a
 * fake jobs API (tests/support/fake_jobs.c) with scripted scenarios: the
 * success path and the backoff schedule (from the fake's request times),
 * every remote outcome (done, failed, cancelled, partial, vanished), faults
 * (500s, hangs past the time limit, malformed JSON, unknown states), the
 * budgets (checks and duration), the cancel and cleanup hooks, submit
 * errors, secrets kept out of logs and results, at most one check in
 * flight per run across two replicas, a replica killed mid-check, checkers
 * that keep their connections, a claim given back after waiting too long
 * in the queue, checks that yield to runs, the schedule and budget in the
 * run object ("poll") and the budget enforced from the run, 5,000 waiting
 * runs beside demo runs; the http and soap_job actions; and, for every
 * action that polls, a long wait that ends well without a failed check
 * counted or logged. */
#include "../support/fake_jobs.h"
#include "../support/harness.h"
#include "../support/reload.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SECRET "s3cret-t0ken-42"

static int g_port;
static PGconn *g_db;

static const char *const SECRET_ENV[] = {"FAKE_TOKEN=" SECRET, NULL};

/* The rest_job run type "job" against the fake, with a poll policy and
 * poller.concurrency. */
static char *job_config_n(const char *poll, const char *extra_params, int concurrency)
{
    char *cfg = malloc(8192);

    snprintf(
        cfg, 8192,
        "{\"poller\": {\"concurrency\": %d, \"interval_ms\": 200},"
        " \"run_types\": {\"job\": {\"action\": \"rest_job\", \"max_attempts\": 2,"
        " \"retry_backoff_ms\": 50, \"poll\": %s, \"params\": {"
        "  \"submit\": {\"method\": \"POST\", \"url\": \"http://127.0.0.1:%d/jobs\","
        "   \"headers\": {\"Authorization\": \"Bearer {{env:FAKE_TOKEN}}\"},"
        "   \"body\": {\"scenario\": \"{{input:/scenario}}\", \"run\": \"{{run_id}}\"},"
        "   \"timeout_ms\": 2000},"
        "  \"id_pointer\": \"/id\","
        "  \"status\": {\"url\": \"http://127.0.0.1:%d/jobs/{{external_id}}\","
        "   \"headers\": {\"Authorization\": \"Bearer {{env:FAKE_TOKEN}}\"}},"
        "  \"state_pointer\": \"/state\","
        "  \"state_map\": {\"RUNNING\": \"running\", \"DONE\": \"succeeded\","
        "   \"FAILED\": \"failed\", \"CANCELLED\": \"cancelled\"},"
        "  \"result_pointer\": \"/output\", \"error_pointer\": \"/error/message\","
        "  \"summary_counts_pointer\": \"/counts\", \"failure_summary_pointer\": \"/failures\","
        "  \"cancel\": {\"method\": \"POST\","
        "   \"url\": \"http://127.0.0.1:%d/jobs/{{external_id}}/cancel\"},"
        "  \"cleanup\": {\"method\": \"DELETE\","
        "   \"url\": \"http://127.0.0.1:%d/jobs/{{external_id}}\"}%s%s}}}}",
        concurrency, poll, g_port, g_port, g_port, g_port, extra_params ? ", " : "",
        extra_params ? extra_params : "");
    return cfg;
}

static char *job_config(const char *poll, const char *extra_params)
{
    return job_config_n(poll, extra_params, 8);
}

static const char *const FAST_POLL =
    "{\"initial_delay_ms\": 200, \"multiplier\": 2, \"max_delay_ms\": 800, \"jitter_pct\": 0,"
    " \"max_checks\": 20, \"max_duration_s\": 60, \"check_timeout_s\": 1}";

static void start(struct th_proc *p, const char *db, const char *poll, const char *extra)
{
    char *cfg = job_config(poll, extra);
    char *path = th_config_file(db, cfg);
    const char *args[3] = {"--config", path, NULL};
    char *conninfo = th_db_create(db);

    th_start(p, conninfo, args, SECRET_ENV);
    if (g_db)
        PQfinish(g_db);
    g_db = th_pg(conninfo);
    free(cfg);
    free(path);
    free(conninfo);
}

static void stop(struct th_proc *p)
{
    th_stop_clean(p);
    PQfinish(g_db);
    g_db = NULL;
}

/* Submits a "job" run with this scenario; returns its id (heap). */
static char *submit(const struct th_proc *p, const char *run_id, const char *scenario)
{
    char body[512];

    snprintf(body, sizeof(body),
             "{\"alert_type\":\"job\",\"run_id\":\"%s\",\"data\":{\"scenario\":\"%s\"}}", run_id,
             scenario);
    return th_submit(p, body, 202);
}

/* Waits for the run to complete; returns it (new reference). */
static const char *err_code(const json_t *run)
{
    return th_js(json_object_get(run, "error"), "code");
}

static const char *err_msg(const json_t *run)
{
    return th_js(json_object_get(run, "error"), "message");
}

static long long poller_stat(const struct th_proc *p, const char *key)
{
    struct th_resp r;
    long long v;

    th_get(p->url, "/healthz", &r);
    ck_assert_msg(r.status == 200 && r.json, "/healthz: HTTP %ld", r.status);
    v = json_integer_value(
        json_object_get(json_object_get(json_object_get(r.json, "engine"), "poller"), key));
    th_resp_free(&r);
    return v;
}

static long long engine_stat(const struct th_proc *p, const char *key)
{
    struct th_resp r;
    long long v;

    th_get(p->url, "/healthz", &r);
    ck_assert_msg(r.status == 200 && r.json, "/healthz: HTTP %ld", r.status);
    v = json_integer_value(json_object_get(json_object_get(r.json, "engine"), key));
    th_resp_free(&r);
    return v;
}

/* Waits until the fake has seen the hooks (cancel, cleanup) of run_id. */
static void wait_hooks(const char *run_id, int cancels, int cleanups)
{
    struct fake_job j = {0};

    for (long long until = th_now_ms() + 10000; th_now_ms() < until; th_sleep_ms(50))
        if (fake_jobs_get(run_id, &j) && j.cancels >= cancels && j.cleanups >= cleanups)
            break;
    ck_assert_msg(j.cancels == cancels && j.cleanups == cleanups,
                  "run %s: %d cancels and %d cleanups, want %d and %d", run_id, j.cancels,
                  j.cleanups, cancels, cleanups);
}

static void setup(void)
{
    g_port = fake_jobs_start();
}

static void teardown(void)
{
    fake_jobs_stop();
}

/* ---- the success path and the schedule -------------------------------- */

/* submit -> waiting (the worker slot free) -> the first check after 200 ms,
 * then 200, 400, 800, 800 ms apart (initial 200, x2, cap 800, jitter 0;
 * the default schedule's shape, scaled down) -> succeeded with the remote
 * output as result; found by external_id; cleanup called once, cancel
 * never; the secret went to the fake but nowhere else. */
START_TEST(success_and_schedule)
{
    struct th_proc p;
    struct fake_job j;
    struct th_resp r;
    json_t *run;
    char *id, path[128];
    static const long long want[] = {200, 400, 800, 800}; /* after checks 1..4 */
    PGresult *ev;

    start(&p, "e2e_poll_ok", FAST_POLL, NULL);
    id = submit(&p, "ok-1", "done_after:5");
    ck_assert(th_wait_status(&p, id, "waiting", 5000));
    ck_assert_int_eq(engine_stat(&p, "busy"), 0); /* waiting holds no worker slot */
    run = th_wait_done(&p, id, 30);
    ck_assert_str_eq(th_js(run, "outcome"), "succeeded");
    ck_assert_int_eq(th_ji(json_object_get(run, "result"), "rows"), 5);
    ck_assert_ptr_nonnull(fake_jobs_get("ok-1", &j) ? &j : NULL);
    ck_assert_str_eq(th_js(run, "external_id"), j.id);
    ck_assert_int_eq(j.checks, 5);
    ck_assert_msg(j.check_ms[0] - j.submit_ms >= 190, "first check %lld ms after the submit",
                  j.check_ms[0] - j.submit_ms);
    for (int k = 1; k < 5; k++) {
        long long gap = j.check_ms[k] - j.check_ms[k - 1];
        fprintf(stderr, "check %d after %lld ms (want %lld)\n", k + 1, gap, want[k - 1]);
        ck_assert_msg(gap >= want[k - 1] - 20 && gap <= want[k - 1] + 300,
                      "check %d came %lld ms after check %d, want %lld", k + 1, gap, k,
                      want[k - 1]);
    }
    snprintf(path, sizeof(path), "/runs?external_id=%s", j.id);
    th_get(p.url, path, &r);
    ck_assert_int_eq(json_array_size(json_object_get(r.json, "runs")), 1);
    ck_assert_str_eq(th_js(json_array_get(json_object_get(r.json, "runs"), 0), "id"), "ok-1");
    th_resp_free(&r);
    wait_hooks("ok-1", 0, 1);
    ev = th_sql(g_db, "SELECT string_agg(status, ',' ORDER BY id) FROM run_events WHERE "
                      "run_id = 'ok-1' AND type = 'status'");
    ck_assert_str_eq(PQgetvalue(ev, 0, 0), "queued,running,waiting,completed");
    PQclear(ev);
    /* Every writer on the way, the poller's included, named the run's
     * creation time (the partition key, migration 013). */
    ck_assert_int_eq(th_sql_int(g_db, "SELECT count(*) FROM run_events e JOIN runs r ON r.tenant "
                                      "= e.tenant AND r.id = e.run_id WHERE r.id = 'ok-1' AND "
                                      "e.run_created_at <> r.created_at"),
                     0);
    ck_assert_int_eq(th_sql_int(g_db, "SELECT count(*) FROM run_events WHERE run_id = 'ok-1' "
                                      "AND position('" SECRET "' in coalesce(message, '')) > 0"),
                     0);
    {
        char *text = json_dumps(run, 0);
        ck_assert_ptr_null(strstr(text, SECRET));
        free(text);
    }
    json_decref(run);
    free(id);
    stop(&p);
    {
        char cmd[512];
        snprintf(cmd, sizeof(cmd), "grep -q '" SECRET "' %s", p.log);
        ck_assert_msg(system(cmd) != 0, "the secret appears in the log %s", p.log);
    }
}
END_TEST

/* ---- an idle poller ---------------------------------------------------- */

/* With a pollable type configured and nothing waiting, the poller sleeps
 * (it once claimed in a loop: 16,000 transactions a second on an idle
 * server); a waiting run that no replica polls shows in /healthz as an
 * overdue check with its lag. */
START_TEST(idle_and_lag)
{
    struct th_proc p;
    struct th_resp r;
    long long x0, x1;
    json_t *polls;
    char *id;

    start(&p, "e2e_poll_idle", FAST_POLL, NULL);
    id = submit(&p, "idle-1", "done_after:1");
    json_decref(th_wait_done(&p, id, 20));
    th_sleep_ms(1500); /* hooks done, stats flushed */
    x0 = th_sql_int(g_db, "SELECT xact_commit FROM pg_stat_database WHERE datname = "
                          "current_database()");
    th_sleep_ms(3000);
    x1 = th_sql_int(g_db, "SELECT xact_commit FROM pg_stat_database WHERE datname = "
                          "current_database()");
    fprintf(stderr, "idle: %lld transactions in 3 s\n", x1 - x0);
    ck_assert_msg(x1 - x0 < 150, "an idle server committed %lld transactions in 3 s", x1 - x0);

    PQclear(th_sql(g_db, "INSERT INTO runs (tenant, id, type, status, attempt, max_attempts, "
                         "timeout_s, input, identity_hash, request_hash, external_id, "
                         "next_poll_at, poll_started_at) VALUES ('default', 'orphan-wait', "
                         "'not_here', 'waiting', 1, 1, 60, '{}', 'ow', 'req', 'x-1', "
                         "now() - interval '5 s', now() - interval '6 s')"));
    th_get(p.url, "/healthz", &r);
    polls = json_object_get(r.json, "polls");
    ck_assert_int_eq(th_ji(polls, "overdue"), 1);
    ck_assert_msg(th_ji(polls, "lag_ms") >= 4900, "lag %lld ms", th_ji(polls, "lag_ms"));
    th_resp_free(&r);
    PQclear(th_sql(g_db, "DELETE FROM runs WHERE id = 'orphan-wait'"));
    free(id);
    stop(&p);
}
END_TEST

/* ---- remote outcomes -------------------------------------------------- */

/* Every way a remote job can end, one run each, in one process. */
START_TEST(remote_outcomes)
{
    static const struct {
        const char *run, *scenario, *outcome, *code, *msg_part;
    } cases[] = {
        {"o-fail", "fail_after:2", "failed", "remote_failed", "boom"},
        {"o-cancel", "cancelled_after:2", "cancelled", "remote_cancelled", "CANCELLED"},
        {"o-vanish", "vanish_after:2", "failed", "job_gone", "no longer knows"},
        {"o-partial", "partial,done_after:2", "partially_succeeded", NULL, NULL},
        {"o-flaky", "flaky:2,done_after:3", "succeeded", NULL, NULL},
        {"o-hang", "hang:1,done_after:2", "succeeded", NULL, NULL},
        {"o-malformed", "malformed:2,done_after:3", "succeeded", NULL, NULL},
        {"o-unknown", "unknown:2,done_after:3", "succeeded", NULL, NULL},
    };
    struct th_proc p;
    char *ids[sizeof(cases) / sizeof(cases[0])];

    start(&p, "e2e_poll_outcomes", FAST_POLL, NULL);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        ids[i] = submit(&p, cases[i].run, cases[i].scenario);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *run = th_wait_done(&p, ids[i], 30);
        ck_assert_msg(th_streq(th_js(run, "outcome"), cases[i].outcome), "%s: outcome %s, want %s",
                      cases[i].run, th_js(run, "outcome"), cases[i].outcome);
        if (cases[i].code) {
            ck_assert_str_eq(err_code(run), cases[i].code);
            ck_assert_msg(strstr(err_msg(run), cases[i].msg_part), "%s: error %s", cases[i].run,
                          err_msg(run));
        }
        if (th_streq(cases[i].outcome, "partially_succeeded")) {
            ck_assert_int_eq(th_ji(json_object_get(run, "summary_counts"), "failed"), 2);
            ck_assert_int_eq(json_array_size(json_object_get(run, "failure_summary")), 2);
        }
        json_decref(run);
        free(ids[i]);
    }
    /* cleanup after every end; the remote cancel only where opsrun gave up */
    wait_hooks("o-fail", 0, 1);
    wait_hooks("o-cancel", 0, 1);
    wait_hooks("o-vanish", 0, 1);
    ck_assert_int_ge(poller_stat(&p, "check_failures_total"), 2 + 1 + 2);
    stop(&p);
}
END_TEST

/* A state the map does not know is "running" by default, a failure with
 * "unknown_state": "failed"; a vanished job may count as succeeded. */
START_TEST(unknown_state_and_gone_options)
{
    struct th_proc p;
    json_t *run;
    char *a, *b;

    start(&p, "e2e_poll_options", FAST_POLL,
          "\"unknown_state\": \"failed\", \"gone\": \"succeeded\"");
    a = submit(&p, "u-1", "unknown:1,done_after:3");
    b = submit(&p, "g-1", "vanish_after:2");
    run = th_wait_done(&p, a, 30);
    ck_assert_str_eq(th_js(run, "outcome"), "failed");
    ck_assert_msg(strstr(err_msg(run), "WEIRD"), "error: %s", err_msg(run));
    json_decref(run);
    run = th_wait_done(&p, b, 30);
    ck_assert_str_eq(th_js(run, "outcome"), "succeeded");
    json_decref(run);
    free(a);
    free(b);
    stop(&p);
}
END_TEST

/* ---- budgets and hooks ------------------------------------------------ */

/* Past poll.max_checks, or poll.max_duration_s, the run ends timed_out with
 * an error that names the budget; the remote job is cancelled and cleaned
 * up. */
START_TEST(budgets)
{
    struct th_proc p;
    struct fake_job j;
    json_t *run;
    char *a, *b;

    start(&p, "e2e_poll_budget",
          "{\"initial_delay_ms\": 100, \"max_delay_ms\": 300, \"jitter_pct\": 0,"
          " \"max_checks\": 3, \"max_duration_s\": 600, \"check_timeout_s\": 1}",
          NULL);
    a = submit(&p, "b-checks", "flaky:1");
    run = th_wait_done(&p, a, 30);
    ck_assert_str_eq(th_js(run, "outcome"), "timed_out");
    ck_assert_str_eq(err_code(run), "poll_budget");
    ck_assert_msg(strstr(err_msg(run), "after 3 checks (poll.max_checks 3)"), "%s", err_msg(run));
    json_decref(run);
    ck_assert(fake_jobs_get("b-checks", &j));
    ck_assert_int_eq(j.checks, 3);
    wait_hooks("b-checks", 1, 1);
    stop(&p);

    start(&p, "e2e_poll_budget2",
          "{\"initial_delay_ms\": 300, \"max_delay_ms\": 300, \"jitter_pct\": 0,"
          " \"max_checks\": 1000, \"max_duration_s\": 2, \"check_timeout_s\": 1}",
          NULL);
    b = submit(&p, "b-time", "forever");
    run = th_wait_done(&p, b, 30);
    ck_assert_str_eq(th_js(run, "outcome"), "timed_out");
    ck_assert_msg(strstr(err_msg(run), "(poll.max_duration_s 2)"), "%s", err_msg(run));
    json_decref(run);
    ck_assert(fake_jobs_get("b-time", &j));
    ck_assert_msg(j.checks >= 4 && j.checks <= 9, "%d checks in 2 s at 300 ms", j.checks);
    wait_hooks("b-time", 1, 1);
    ck_assert_int_ge(poller_stat(&p, "timed_out_total"), 1);
    free(a);
    free(b);
    stop(&p);
}
END_TEST

/* ---- the poll schedule in the run object ------------------------------ */

/* Checks 1.5 s, 3 s and 7.5 s after the run began waiting (1.5 s, then x3);
 * the next, at 21 s, would pass the end of the 10 s wait and is cut to it. */
static const char *const WAIT10_POLL =
    "{\"initial_delay_ms\": 1500, \"multiplier\": 3, \"max_delay_ms\": 60000, \"jitter_pct\": 0,"
    " \"max_checks\": 50, \"max_duration_s\": 10, \"check_timeout_s\": 1}";

/* GET /runs/{id} until the run waits with at least `checks` checks made and
 * its next one scheduled; returns it (new reference). */
static json_t *wait_scheduled(const struct th_proc *p, const char *id, int checks)
{
    for (long long until = th_now_ms() + 15000; th_now_ms() < until; th_sleep_ms(50)) {
        json_t *run = th_get_run(p, id);
        const json_t *poll = json_object_get(run, "poll");
        if (th_streq(th_js(run, "status"), "waiting") && th_ji(poll, "checks") >= checks &&
            th_js(poll, "next_check_at"))
            return run;
        json_decref(run);
    }
    ck_abort_msg("run %s: no check %d scheduled while waiting", id, checks);
    return NULL;
}

/* Whether timestamp a (plus secs seconds) compares to timestamp b as op
 * says, by PostgreSQL (the run object's timestamps carry microseconds). */
static bool ts_cmp(const char *a, int secs, const char *op, const char *b)
{
    return th_sql_int(g_db,
                      "SELECT ('%s'::timestamptz + make_interval(secs => %d) %s "
                      "'%s'::timestamptz)::int",
                      a ? a : "-infinity", secs, op, b ? b : "infinity") == 1;
}

/* GET /runs/{id} of a waiting run has "poll": the checks counting up, the
 * budget stored when it began waiting, next_check_at in the future (and
 * never past give_up_at), give_up_at = waiting_since + max_duration_s. A
 * finished run keeps it with the checks it took and no next check. */
START_TEST(poll_in_the_run_object)
{
    struct th_proc p;
    struct fake_job j;
    json_t *run, *done;
    const json_t *poll;
    char *a, *b, *t0;
    PGresult *now;
    long long first;

    start(&p, "e2e_poll_json", WAIT10_POLL, NULL);
    a = submit(&p, "pj-1", "forever");
    b = submit(&p, "pj-2", "done_after:2");
    ck_assert(th_wait_status(&p, a, "waiting", 5000));

    now = th_sql(g_db, "SELECT opsrun_ts(now())");
    t0 = strdup(PQgetvalue(now, 0, 0));
    PQclear(now);
    run = wait_scheduled(&p, a, 1);
    poll = json_object_get(run, "poll");
    first = th_ji(poll, "checks");
    ck_assert_msg(first == 1 || first == 2, "%lld checks at first", first);
    ck_assert_int_eq(th_ji(poll, "max_checks"), 50);
    ck_assert_int_eq(th_ji(poll, "max_duration_s"), 10);
    ck_assert_msg(ts_cmp(th_js(poll, "next_check_at"), 0, ">", t0),
                  "next_check_at %s is not after %s", th_js(poll, "next_check_at"), t0);
    ck_assert_msg(ts_cmp(th_js(poll, "waiting_since"), 10, "=", th_js(poll, "give_up_at")),
                  "give_up_at %s, waiting_since %s", th_js(poll, "give_up_at"),
                  th_js(poll, "waiting_since"));
    json_decref(run);

    run = wait_scheduled(&p, a, 3);
    poll = json_object_get(run, "poll");
    ck_assert_int_eq(th_ji(poll, "checks"), 3); /* counting up */
    /* the next check, 13.5 s after check 3, would be past the wait's end */
    ck_assert_msg(ts_cmp(th_js(poll, "next_check_at"), 0, "<=", th_js(poll, "give_up_at")),
                  "next check %s after give_up_at %s", th_js(poll, "next_check_at"),
                  th_js(poll, "give_up_at"));

    done = th_wait_done(&p, a, 30);
    ck_assert_str_eq(th_js(done, "outcome"), "timed_out");
    ck_assert_msg(strstr(err_msg(done), "(poll.max_duration_s 10)"), "%s", err_msg(done));
    ck_assert(fake_jobs_get("pj-1", &j));
    poll = json_object_get(done, "poll");
    ck_assert_int_eq(th_ji(poll, "checks"), j.checks); /* the claim that gave up made none */
    ck_assert_int_eq(th_ji(poll, "checks"), 3);
    ck_assert_ptr_null(th_js(poll, "next_check_at"));
    ck_assert_str_eq(th_js(poll, "give_up_at"), th_js(json_object_get(run, "poll"), "give_up_at"));
    json_decref(done);
    json_decref(run);

    done = th_wait_done(&p, b, 30);
    ck_assert_str_eq(th_js(done, "outcome"), "succeeded");
    poll = json_object_get(done, "poll");
    ck_assert_int_eq(th_ji(poll, "checks"), 2);
    ck_assert_int_eq(th_ji(poll, "max_checks"), 50);
    ck_assert_ptr_null(th_js(poll, "next_check_at"));
    ck_assert_ptr_nonnull(th_js(poll, "waiting_since"));
    json_decref(done);

    free(t0);
    free(a);
    free(b);
    stop(&p);
}
END_TEST

/* Checks every 1.5 s after the run began waiting; 50 checks or 5 s. */
static const char *const WAIT5_POLL =
    "{\"initial_delay_ms\": 1500, \"multiplier\": 1, \"max_delay_ms\": 60000, \"jitter_pct\": 0,"
    " \"max_checks\": 50, \"max_duration_s\": 5, \"check_timeout_s\": 1}";

/* The poller enforces the budget stored on the run, not the configuration
 * (which says 50 checks and 5 s here): rb-1, allowed 1 check, ends at its
 * second claim (3 s), well before the 5 s; a run with none stored (it began
 * waiting before migration 010) gets the configuration's, and rb-2 ends
 * after 5 s, not after 50 checks. */
START_TEST(budget_from_the_run)
{
    struct th_proc p;
    json_t *run;
    char *a, *b;

    start(&p, "e2e_poll_row_budget", WAIT5_POLL, NULL);
    a = submit(&p, "rb-1", "forever");
    b = submit(&p, "rb-2", "forever");
    ck_assert(th_wait_status(&p, a, "waiting", 5000));
    ck_assert(th_wait_status(&p, b, "waiting", 5000));
    PQclear(th_sql(g_db, "UPDATE runs SET poll_max_checks = 1 WHERE id = 'rb-1'"));
    PQclear(th_sql(g_db, "UPDATE runs SET poll_max_checks = NULL, poll_max_duration_s = NULL "
                         "WHERE id = 'rb-2'"));
    run = th_get_run(&p, b);
    ck_assert(json_is_null(json_object_get(json_object_get(run, "poll"), "max_checks")));
    ck_assert(json_is_null(json_object_get(json_object_get(run, "poll"), "give_up_at")));
    json_decref(run);

    run = th_wait_done(&p, a, 30);
    ck_assert_str_eq(th_js(run, "outcome"), "timed_out");
    ck_assert_msg(strstr(err_msg(run), "after 1 checks (poll.max_checks 1)"), "%s", err_msg(run));
    ck_assert_int_eq(th_ji(json_object_get(run, "poll"), "checks"), 1);
    ck_assert_int_eq(th_ji(json_object_get(run, "poll"), "max_checks"), 1);
    json_decref(run);
    run = th_wait_done(&p, b, 30);
    ck_assert_str_eq(th_js(run, "outcome"), "timed_out");
    ck_assert_msg(strstr(err_msg(run), "(poll.max_duration_s 5)"), "%s", err_msg(run));
    json_decref(run);
    free(a);
    free(b);
    stop(&p);
}
END_TEST

/* Cancelling a waiting run ends it at once (200, cancelled), calls the
 * remote cancel and cleanup, and checks it no more. A failing cleanup is
 * counted and changes nothing. */
START_TEST(cancel_and_cleanup)
{
    struct th_proc p;
    struct fake_job j;
    struct th_resp r;
    json_t *run;
    char *a, *b;
    int checks;

    start(&p, "e2e_poll_cancel", FAST_POLL, NULL);
    a = submit(&p, "c-1", "forever");
    ck_assert(th_wait_status(&p, a, "waiting", 5000));
    th_sleep_ms(700);
    th_post_json(p.url, "/runs/c-1/cancel", "{}", &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(th_js(r.json, "status"), "completed");
    ck_assert_str_eq(th_js(r.json, "outcome"), "cancelled");
    th_resp_free(&r);
    wait_hooks("c-1", 1, 1);
    ck_assert(fake_jobs_get("c-1", &j));
    checks = j.checks;
    th_sleep_ms(1500);
    ck_assert(fake_jobs_get("c-1", &j));
    ck_assert_int_eq(j.checks, checks);

    b = submit(&p, "c-2", "cleanup_fail,done_after:1");
    run = th_wait_done(&p, b, 30);
    ck_assert_str_eq(th_js(run, "outcome"), "succeeded");
    json_decref(run);
    wait_hooks("c-2", 0, 1);
    for (long long until = th_now_ms() + 5000;
         poller_stat(&p, "hook_failures_total") < 1 && th_now_ms() < until;)
        th_sleep_ms(50);
    ck_assert_int_ge(poller_stat(&p, "hook_failures_total"), 1);
    free(a);
    free(b);
    stop(&p);
}
END_TEST

/* Submit errors: a 5xx is retried (max_attempts 2) then fails; a 4xx fails
 * at once; an answer without an id fails. None of them waits. */
START_TEST(submit_errors)
{
    struct th_proc p;
    json_t *run;
    char *a, *b, *c;

    start(&p, "e2e_poll_submit", FAST_POLL, NULL);
    a = submit(&p, "s-500", "submit_500");
    b = submit(&p, "s-400", "submit_400");
    c = submit(&p, "s-noid", "submit_noid");
    run = th_wait_done(&p, a, 30);
    ck_assert_str_eq(th_js(run, "outcome"), "failed");
    ck_assert_str_eq(err_code(run), "submit_unavailable");
    ck_assert_int_eq(th_ji(run, "attempt"), 2);
    json_decref(run);
    run = th_wait_done(&p, b, 30);
    ck_assert_str_eq(err_code(run), "submit_rejected");
    ck_assert_msg(strstr(err_msg(run), "HTTP 400: {\"error\":\"bad job\"}"), "%s", err_msg(run));
    ck_assert_int_eq(th_ji(run, "attempt"), 1);
    json_decref(run);
    run = th_wait_done(&p, c, 30);
    ck_assert_str_eq(err_code(run), "submit_no_id");
    json_decref(run);
    ck_assert_int_eq(fake_jobs_submits(), 2 + 1 + 1);
    free(a);
    free(b);
    free(c);
    stop(&p);
}
END_TEST

/* ---- several replicas ------------------------------------------------- */

static void start_on(struct th_proc *p, const char *conninfo, const char *name, const char *poll,
                     const char *extra)
{
    char *cfg = job_config(poll, extra);
    char *path = th_config_file(name, cfg);
    const char *args[3] = {"--config", path, NULL};

    th_start(p, conninfo, args, SECRET_ENV);
    free(cfg);
    free(path);
}

/* Two replicas poll the same 30 runs, every check slow (150 ms) and due
 * often: the fake never sees two checks of one job at once, both replicas
 * check, and every run succeeds. */
START_TEST(one_check_in_flight)
{
    static const char *const poll =
        "{\"initial_delay_ms\": 50, \"max_delay_ms\": 100, \"jitter_pct\": 0,"
        " \"max_checks\": 100, \"check_timeout_s\": 2}";
    struct th_proc a, b;
    char *conninfo = th_db_create("e2e_poll_inflight"), *ids[30];

    g_db = th_pg(conninfo);
    start_on(&a, conninfo, "e2e_poll_inflight_a", poll, NULL);
    start_on(&b, conninfo, "e2e_poll_inflight_b", poll, NULL);
    for (int i = 0; i < 30; i++) {
        char rid[16];
        snprintf(rid, sizeof(rid), "if-%d", i);
        ids[i] = submit(i % 2 ? &a : &b, rid, "slow:150,done_after:8");
    }
    for (int i = 0; i < 30; i++) {
        json_t *run = th_wait_done(&a, ids[i], 60);
        ck_assert_str_eq(th_js(run, "outcome"), "succeeded");
        json_decref(run);
        free(ids[i]);
    }
    fprintf(stderr, "in flight: checks A %lld, B %lld, most at once per job %d\n",
            poller_stat(&a, "checks_total"), poller_stat(&b, "checks_total"),
            fake_jobs_max_in_flight());
    ck_assert_int_eq(fake_jobs_max_in_flight(), 1);
    ck_assert_int_gt(poller_stat(&a, "checks_total"), 0);
    ck_assert_int_gt(poller_stat(&b, "checks_total"), 0);
    ck_assert_int_eq(fake_jobs_checks(), 30 * 8);
    th_stop_clean(&a);
    th_stop_clean(&b);
    PQfinish(g_db);
    g_db = NULL;
    free(conninfo);
}
END_TEST

/* A replica SIGKILLed in the middle of a check: the run is due again when
 * the claim's lease ends (2 x check_timeout_s + 5 s), and another replica
 * finishes it. */
START_TEST(killed_mid_check)
{
    static const char *const poll =
        "{\"initial_delay_ms\": 100, \"max_delay_ms\": 100, \"jitter_pct\": 0,"
        " \"max_checks\": 100, \"check_timeout_s\": 2}";
    struct th_proc a, b;
    struct fake_job j = {0};
    char *conninfo = th_db_create("e2e_poll_killed"), *id;
    long long killed, took;
    json_t *run;

    g_db = th_pg(conninfo);
    start_on(&a, conninfo, "e2e_poll_killed_a", poll, NULL);
    id = submit(&a, "k-1", "slow:1500,done_after:2");
    for (long long until = th_now_ms() + 10000; th_now_ms() < until; th_sleep_ms(10))
        if (fake_jobs_get("k-1", &j) && j.in_flight == 1)
            break;
    ck_assert_int_eq(j.in_flight, 1);
    kill(a.pid, SIGKILL);
    killed = th_now_ms();
    th_stop(&a, SIGKILL, 5);
    start_on(&b, conninfo, "e2e_poll_killed_b", poll, NULL);
    run = th_wait_done(&b, id, 60);
    took = th_now_ms() - killed;
    ck_assert_str_eq(th_js(run, "outcome"), "succeeded");
    ck_assert(fake_jobs_get("k-1", &j));
    fprintf(stderr, "killed mid-check: taken over after %lld ms, %d checks\n", took, j.checks);
    ck_assert_int_eq(j.checks, 2);
    ck_assert_int_eq(j.max_in_flight, 1);
    ck_assert_msg(took >= 6000, "taken over %lld ms after the kill, before the lease ended", took);
    json_decref(run);
    free(id);
    th_stop_clean(&b);
    PQfinish(g_db);
    g_db = NULL;
    free(conninfo);
}
END_TEST

/* ---- the checkers ------------------------------------------------------ */

static void run_demos(const struct th_proc *p, const char *tag, int n);

/* A server whose "job" type is checked every 50 ms by `concurrency`
 * checkers with this check time limit, on its own database; workers 0: the
 * default. */
static void start_fast(struct th_proc *p, const char *db, int concurrency, int timeout_s,
                       int workers)
{
    char poll[256], nw[16], *cfg, *path, *conninfo = th_db_create(db);
    const char *args[5] = {NULL};

    snprintf(poll, sizeof(poll),
             "{\"initial_delay_ms\": 50, \"max_delay_ms\": 50, \"jitter_pct\": 0,"
             " \"max_checks\": 100, \"check_timeout_s\": %d}",
             timeout_s);
    cfg = job_config_n(poll, NULL, concurrency);
    path = th_config_file(db, cfg);
    args[0] = "--config", args[1] = path;
    if (workers > 0) {
        snprintf(nw, sizeof(nw), "%d", workers);
        args[2] = "--workers", args[3] = nw;
    }
    th_start(p, conninfo, args, SECRET_ENV);
    g_db = th_pg(conninfo);
    free(cfg);
    free(path);
    free(conninfo);
}

/* A checker keeps its connection to the remote open between checks: twenty
 * checks of one run by two checkers, and its cleanup, take at most three
 * connections (the worker's submit, one per checker), not one per check. */
START_TEST(checks_reuse_connections)
{
    struct th_proc p;
    struct fake_job j;
    json_t *run;
    char *id;
    long long c0, conns;

    start_fast(&p, "e2e_poll_reuse", 2, 2, 0);
    c0 = fake_jobs_connections();
    id = submit(&p, "reuse-1", "done_after:20");
    run = th_wait_done(&p, id, 60);
    ck_assert_str_eq(th_js(run, "outcome"), "succeeded");
    wait_hooks("reuse-1", 0, 1);
    ck_assert(fake_jobs_get("reuse-1", &j));
    ck_assert_int_eq(j.checks, 20);
    conns = fake_jobs_connections() - c0;
    fprintf(stderr, "reuse: %d checks and a cleanup over %lld connections (with the submit)\n",
            j.checks, conns);
    ck_assert_msg(conns <= 3, "%lld connections for a submit, 20 checks and a cleanup", conns);
    json_decref(run);
    free(id);
    stop(&p);
}
END_TEST

/* count waiting runs of "job" (ids prefix-0..), checking the fake's jobs
 * from job-<first> on, each first due at due (SQL). */
static void insert_waiting(const char *prefix, int first, int count, const char *due)
{
    PQclear(th_sql(g_db,
                   "INSERT INTO runs (tenant, id, type, status, attempt, max_attempts, timeout_s, "
                   "input, identity_hash, request_hash, external_id, poll_state, next_poll_at, "
                   "poll_started_at, started_at) SELECT 'default', '%s-' || g, 'job', 'waiting', "
                   "1, 2, 900, '{}', '%s-ident-' || g, 'req', 'job-' || (g + %d), '{}', "
                   "%s, now(), now() FROM generate_series(0, %d) g",
                   prefix, prefix, first, due, count - 1));
}

/* Two waiting "job" runs, PREFIX-0 and PREFIX-1, of the fake jobs first
 * and first + 1, both due in 500 ms. */
static void two_due_soon(const char *prefix, int first)
{
    insert_waiting(prefix, first, 2, "now() + interval '500 ms'");
}

/* Stops the server 300 ms into the one check in flight (a slow one). */
static void stop_during_a_check(struct th_proc *p)
{
    for (int i = 0; i < 100 && fake_jobs_max_in_flight() < 1; i++)
        usleep(50000);
    ck_assert_int_eq(fake_jobs_max_in_flight(), 1);
    usleep(300000); /* well inside the 3 s check and the 2.5 s queue limit */
    th_stop_clean(p);
}

/* A claim that waited in the poller's queue longer than 2.5 s, its checker
 * held by a slow check, is given back (due again at once) rather than
 * checked late, close to the end of its lease. One checker holds two
 * claims: two runs due at the same moment, each check taking 3 s, so the
 * claim that waits behind the other's check is given back. It is counted
 * (engine.poller.given_back_total) but not as a check: each run's checks
 * (poll.checks) are the checks the fake saw; both runs end well, never two
 * checks of one job at once. */
START_TEST(late_claim_given_back)
{
    struct th_proc p;
    int first;
    long long claims, given_back, checks = 0;

    start_fast(&p, "e2e_poll_give_back", 1, 5, 0);
    first = fake_jobs_create(2, "slow:3000,done_after:2");
    two_due_soon("gb", first);
    for (int i = 0; i < 2; i++) {
        char rid[32];
        json_t *run;
        struct fake_job j;
        snprintf(rid, sizeof(rid), "gb-%d", i);
        run = th_wait_done(&p, rid, 60);
        ck_assert_str_eq(th_js(run, "outcome"), "succeeded");
        json_decref(run);
        snprintf(rid, sizeof(rid), "job-%d", first + i);
        ck_assert(fake_jobs_get(rid, &j));
        ck_assert_int_eq(j.checks, 2);
        checks += j.checks;
    }
    claims = th_sql_int(g_db, "SELECT sum(poll_count) FROM runs WHERE id LIKE 'gb-%%'");
    given_back = poller_stat(&p, "given_back_total");
    fprintf(stderr, "given back: %lld claims, %lld checks counted for %lld made\n", given_back,
            claims, checks);
    ck_assert_int_gt(given_back, 0);
    ck_assert_int_eq(claims, checks);
    ck_assert_int_eq(fake_jobs_max_in_flight(), 1);
    stop(&p);
}
END_TEST

/* A cancelled run (PREFIX-hooks) of the fake job `job`, its hooks due in
 * 600 ms. */
static void insert_hooks_due(const char *prefix, int job)
{
    PQclear(th_sql(g_db,
                   "INSERT INTO runs (tenant, id, type, status, outcome, attempt, max_attempts, "
                   "timeout_s, input, identity_hash, request_hash, external_id, poll_state, "
                   "started_at, completed_at, hooks_at) VALUES ('default', '%s-hooks', 'job', "
                   "'completed', 'cancelled', 1, 2, 900, '{}', '%s-ident-hooks', 'req', 'job-%d', "
                   "'{}', now(), now(), now() + interval '600 ms')",
                   prefix, prefix, job));
}

/* A waiting run PREFIX-0 (fake job first, checked with scenario), due in
 * 500 ms, and the hooks of PREFIX-hooks (job first + 1), due 100 ms later,
 * inserted in one transaction (one now()). A claim reads checks first,
 * then hooks, in two statements: had both been due at one instant, a claim
 * whose first statement came just before it and whose second just after
 * would take the hooks alone, and the one checker would run them before
 * the check. 100 ms apart, the hooks are claimed with the check or by a
 * round after it (200 ms), behind it in the queue either way. Returns
 * first. */
static int check_and_hooks_due(const char *prefix, const char *scenario)
{
    int first = fake_jobs_create(2, scenario);

    PQclear(th_sql(g_db, "BEGIN"));
    insert_waiting(prefix, first, 1, "now() + interval '500 ms'");
    insert_hooks_due(prefix, first + 1);
    PQclear(th_sql(g_db, "COMMIT"));
    return first;
}

/* A run's hooks claimed with a check that takes 3 s (or just after it),
 * behind it for the one checker: they wait in the queue past 2.5 s and are given
 * back (due again at once, their try taken back) rather than run late,
 * then claimed again and run: the remote cancel and the cleanup once each,
 * on the first try, long before the 15 s lease of the first claim ends. */
START_TEST(late_hooks_given_back)
{
    struct th_proc p;
    int first;
    long long t0;
    char job[32];

    start_fast(&p, "e2e_poll_hooks_back", 1, 5, 0);
    first = check_and_hooks_due("lh", "slow:3000,done_after:1");
    t0 = th_now_ms();
    snprintf(job, sizeof(job), "job-%d", first + 1);
    wait_hooks(job, 1, 1);
    fprintf(stderr, "late hooks: run %lld ms after they were inserted, %lld claims given back\n",
            th_now_ms() - t0, poller_stat(&p, "given_back_total"));
    ck_assert_int_ge(poller_stat(&p, "given_back_total"), 1);
    ck_assert_int_lt(th_now_ms() - t0, 10000);
    for (long long until = th_now_ms() + 5000; th_now_ms() < until; th_sleep_ms(20))
        if (th_sql_int(g_db, "SELECT count(*) FROM runs WHERE id = 'lh-hooks' AND "
                             "hooks_at IS NULL") == 1)
            break;
    ck_assert_int_eq(th_sql_int(g_db, "SELECT count(*) FROM runs WHERE id = 'lh-hooks' AND "
                                      "hooks_at IS NULL AND hooks_attempts = 1"),
                     1);
    stop(&p);
}
END_TEST

/* Every claim names its own owner, the replica's worker id and the claim's
 * number, never the same twice: a claim given back takes its count back,
 * so the count alone would let a late write for the old claim pass the
 * fence of the next one. One run checked three times, each check 400 ms:
 * its schedule row, read while each check is in flight, names three
 * owners. */
START_TEST(each_claim_its_own_owner)
{
    struct th_proc p;
    char owners[3][128] = {{0}}, *worker;
    int n = 0, first;
    json_t *run;

    start_fast(&p, "e2e_poll_owners", 1, 5, 0);
    first = fake_jobs_create(1, "slow:400,done_after:3");
    insert_waiting("ow", first, 1, "now()");
    for (long long until = th_now_ms() + 10000; th_now_ms() < until && n < 3; th_sleep_ms(20)) {
        char *o = th_sql_str(g_db, "SELECT poll_owner FROM run_polls WHERE run_id = 'ow-0' "
                                   "AND poll_owner IS NOT NULL");
        if (o && (n == 0 || strcmp(owners[n - 1], o) != 0))
            snprintf(owners[n++], sizeof(owners[0]), "%s", o);
        free(o);
    }
    run = th_wait_done(&p, "ow-0", 30);
    ck_assert_str_eq(th_js(run, "outcome"), "succeeded");
    json_decref(run);
    worker = th_sql_str(g_db, "SELECT id FROM workers");
    fprintf(stderr, "owners of the checks: %s, %s, %s (worker %s)\n", owners[0], owners[1],
            owners[2], worker);
    ck_assert_int_eq(n, 3);
    ck_assert_str_ne(owners[0], owners[2]);
    for (int i = 0; i < 3; i++) {
        ck_assert_msg(strncmp(owners[i], worker, strlen(worker)) == 0 &&
                          owners[i][strlen(worker)] == '/',
                      "owner %s is not worker %s's", owners[i], worker);
    }
    free(worker);
    stop(&p);
}
END_TEST

/* A stop gives back the claims still queued for a checker: they made no
 * check, so their count is taken back and a restart spends none of the
 * run's check budget. One checker, two runs due at once, each check taking
 * 3 s: at the stop one check is in flight and the other claim waits in the
 * queue; that run's count is 0 again in both tables. */
START_TEST(stop_gives_back_queued_claims)
{
    struct th_proc p;
    int first, queued = 0;

    start_fast(&p, "e2e_poll_stop_queued", 1, 5, 0);
    first = fake_jobs_create(2, "slow:3000,done_after:2");
    two_due_soon("sq", first);
    stop_during_a_check(&p);
    for (int i = 0; i < 2; i++) {
        char rid[32];
        struct fake_job j;
        snprintf(rid, sizeof(rid), "job-%d", first + i);
        ck_assert(fake_jobs_get(rid, &j));
        if (j.checks > 0)
            continue;
        queued++;
        ck_assert_int_eq(th_sql_int(g_db, "SELECT poll_count FROM runs WHERE id = 'sq-%d'", i), 0);
        ck_assert_int_eq(
            th_sql_int(g_db, "SELECT poll_count FROM run_polls WHERE run_id = 'sq-%d'", i), 0);
        ck_assert_int_eq(th_sql_int(g_db,
                                    "SELECT count(*) FROM run_polls WHERE run_id = 'sq-%d' AND "
                                    "poll_owner IS NULL AND next_poll_at <= now()",
                                    i),
                         1);
    }
    ck_assert_int_eq(queued, 1);
    PQfinish(g_db);
    g_db = NULL;
}
END_TEST

/* A stop gives back the hooks claims still queued, too: their try is taken
 * back and they are due again at once, rather than waiting out the lease.
 * One checker; a check that takes 3 s and a cancelled run's hooks, due
 * 100 ms after it, are claimed; the hooks wait behind the check when the
 * server stops. */
START_TEST(stop_gives_back_queued_hooks)
{
    struct th_proc p;
    int claimed = 0;

    start_fast(&p, "e2e_poll_stop_hooks", 1, 5, 0);
    check_and_hooks_due("sh", "slow:3000,done_after:2");
    for (long long until = th_now_ms() + 2000; th_now_ms() < until && !claimed; th_sleep_ms(20))
        claimed = th_sql_int(g_db, "SELECT count(*) FROM runs WHERE id = 'sh-hooks' AND "
                                   "poll_owner IS NOT NULL AND hooks_attempts = 1");
    ck_assert_msg(claimed, "the hooks were not claimed within 2 s");
    stop_during_a_check(&p);
    ck_assert_int_eq(th_sql_int(g_db, "SELECT count(*) FROM runs WHERE id = 'sh-hooks' AND "
                                      "hooks_attempts = 0 AND poll_owner IS NULL AND hooks_at "
                                      "<= now()"),
                     1);
    PQfinish(g_db);
    g_db = NULL;
}
END_TEST

/* Checks yield to runs: 2,000 runs due every 50 ms keep the poller behind
 * (4,000 checks made shows it busy; the wait for them is bounded only
 * generously, for a machine running many tests at once).
 * Demo runs one at a time (the workers keep up) never hold it back; 150
 * demo runs submitted at once to two workers (a backlog) do
 * (engine.poller.yielded_ms_total grows), and every one succeeds. */
START_TEST(checks_yield_to_runs)
{
    struct th_proc p;
    int first;
    long long y0, y1, c0;
    char *ids[150];

    start_fast(&p, "e2e_poll_yield", 8, 2, 2);
    first = fake_jobs_create(2000, "forever");
    insert_waiting("y", first, 2000, "now()");
    for (long long until = th_now_ms() + 60000;
         poller_stat(&p, "checks_total") < 4000 && th_now_ms() < until; th_sleep_ms(50))
        ;
    c0 = poller_stat(&p, "checks_total");
    ck_assert_int_ge(c0, 4000);
    run_demos(&p, "one", 20);
    y0 = poller_stat(&p, "yielded_ms_total");
    for (int i = 0; i < 150; i++) {
        char body[192];
        snprintf(body, sizeof(body),
                 "{\"alert_type\":\"demo\",\"run_id\":\"yd-%d\",\"data\":{\"duration_ms\":20,"
                 "\"steps\":0}}",
                 i);
        ids[i] = th_submit(&p, body, 202);
    }
    for (int i = 0; i < 150; i++) {
        char *o = th_wait_run(p.url, ids[i], 60);
        ck_assert_msg(o && strcmp(o, "succeeded") == 0, "demo run %s: %s", ids[i],
                      o ? o : "timeout");
        free(o);
        free(ids[i]);
    }
    y1 = poller_stat(&p, "yielded_ms_total");
    fprintf(stderr,
            "yield: held back %lld ms beside 20 demo runs one at a time, %lld ms beside "
            "150 at once; %lld checks before\n",
            y0, y1 - y0, c0);
    /* A yield lasts at most poller.interval_ms. Were runs one at a time a
     * backlog, every one would hold the poller back (20 yields or more); on
     * a starved machine a worker may still be on its way back to idle when
     * the next run arrives, a backlog of one claim: allow two yields. */
    ck_assert_msg(y0 <= 400, "the poller held back %lld ms beside runs one at a time", y0);
    ck_assert_int_gt(y1, 0);
    stop(&p);
}
END_TEST

/* ---- 5,000 waiting runs ------------------------------------------------ */

/* completed_at - created_at of demo runs d-<tag>-0..n-1, p50 and p99 in ms. */
static void demo_latency(const char *tag, int n, double *p50, double *p99)
{
    PGresult *r = th_sql(g_db,
                         "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), "
                         "percentile_cont(0.99) WITHIN GROUP (ORDER BY ms), count(*) FROM "
                         "(SELECT extract(epoch FROM completed_at - created_at) * 1000 AS ms "
                         "FROM runs WHERE id LIKE 'd-%s-%%' AND outcome = 'succeeded') x",
                         tag);

    ck_assert_int_eq(atoi(PQgetvalue(r, 0, 2)), n);
    *p50 = atof(PQgetvalue(r, 0, 0));
    *p99 = atof(PQgetvalue(r, 0, 1));
    PQclear(r);
}

/* n demo runs d-<tag>-0..n-1 one after another, each submitted 20 ms after
 * the one before succeeded (a long-poll answers the moment it does). */
static void run_demos(const struct th_proc *p, const char *tag, int n)
{
    for (int i = 0; i < n; i++) {
        char body[160], path[128], *id;
        struct th_resp r;
        snprintf(body, sizeof(body),
                 "{\"alert_type\":\"demo\",\"run_id\":\"d-%s-%d\",\"data\":{\"duration_ms\":0,"
                 "\"steps\":0}}",
                 tag, i);
        id = th_submit(p, body, 202);
        snprintf(path, sizeof(path), "/runs/%s?wait=20", id);
        th_get(p->url, path, &r);
        ck_assert_msg(r.status == 200 && th_streq(th_js(r.json, "outcome"), "succeeded"),
                      "demo run %s: HTTP %ld, %s", id, r.status, r.body);
        th_resp_free(&r);
        free(id);
        th_sleep_ms(20);
    }
}

/* 5,000 runs waiting on remote jobs, checked by 32 concurrent checks, on a
 * replica with 2 workers: demo runs still start and finish (their latency
 * is printed beside the same measurement without the waiting runs;
 * bench/ has the figures), and the poller keeps checking throughout. */
START_TEST(load_5000_waiting)
{
    static const char *const poll =
        "{\"initial_delay_ms\": 500, \"max_delay_ms\": 2000, \"jitter_pct\": 20,"
        " \"max_checks\": 100000, \"max_duration_s\": 3600, \"check_timeout_s\": 5}";
    struct th_proc p;
    char *conninfo = th_db_create("e2e_poll_load"), *cfg, *path;
    const char *args[5];
    double b50, b99, l50, l99;
    long long c0, c1, t0, t1;
    int first;

    g_db = th_pg(conninfo);
    cfg = job_config_n(poll, NULL, 32); /* 32 concurrent checks, 2 workers */
    path = th_config_file("e2e_poll_load", cfg);
    args[0] = "--config", args[1] = path, args[2] = "--workers", args[3] = "2", args[4] = NULL;
    th_start(&p, conninfo, args, SECRET_ENV);
    run_demos(&p, "base", 100);
    demo_latency("base", 100, &b50, &b99);

    first = fake_jobs_create(5000, "forever");
    PQclear(th_sql(g_db,
                   "INSERT INTO runs (tenant, id, type, status, attempt, max_attempts, timeout_s, "
                   "input, identity_hash, request_hash, external_id, poll_state, next_poll_at, "
                   "poll_started_at, started_at) SELECT 'default', 'w-' || g, 'job', 'waiting', 1, "
                   "2, 900, '{}', 'w-ident-' || g, 'req', 'job-' || (g + %d), '{}', now() + "
                   "random() * interval '2 s', now(), now() FROM generate_series(0, 4999) g",
                   first));
    ck_assert_int_eq(th_sql_int(g_db, "SELECT count(*) FROM runs WHERE status = 'waiting'"), 5000);
    th_sleep_ms(3000); /* the poller in its stride */
    c0 = fake_jobs_checks();
    t0 = th_now_ms();
    run_demos(&p, "load", 100);
    c1 = fake_jobs_checks();
    t1 = th_now_ms();
    demo_latency("load", 100, &l50, &l99);
    fprintf(stderr,
            "load: demo latency p50/p99 %.1f/%.1f ms without waiting runs, %.1f/%.1f ms with "
            "5,000 (ratio p50 %.2f); the poller made %.0f checks/s meanwhile\n",
            b50, b99, l50, l99, b50 > 0 ? l50 / b50 : 0,
            (double)(c1 - c0) * 1000 / (double)(t1 - t0));
    ck_assert_int_gt(c1 - c0, 1000); /* one demo run at a time: no backlog to yield to */
    ck_assert_int_eq(th_sql_int(g_db, "SELECT count(*) FROM runs WHERE status = 'waiting'"), 5000);
    stop(&p);
    free(cfg);
    free(path);
    free(conninfo);
}
END_TEST

/* ---- the http action ---------------------------------------------------- */

/* Three http run types against the fake's /call: status by Location, by a
 * body field, and through a state map. */
static void start_http(struct th_proc *p, const char *db)
{
    char *cfg = malloc(8192), *path, *conninfo = th_db_create(db);
    const char *args[3];
    const char *common =
        "\"max_attempts\": 2, \"retry_backoff_ms\": 50, \"poll\": {\"initial_delay_ms\": 100, "
        "\"max_delay_ms\": 200, \"jitter_pct\": 0, \"max_checks\": 200, \"check_timeout_s\": 2}";
    char req[512];

    snprintf(req, sizeof(req),
             "\"request\": {\"method\": \"POST\", \"url\": \"http://127.0.0.1:%d/call\","
             " \"headers\": {\"X-Token\": \"{{env:FAKE_TOKEN}}\"}, \"timeout_ms\": 1000,"
             " \"body\": {\"scenario\": \"{{input:/scenario}}\", \"run\": \"{{run_id}}\"}}",
             g_port);
    snprintf(cfg, 8192,
             "{\"poller\": {\"interval_ms\": 200}, \"run_types\": {"
             " \"call\": {\"action\": \"http\", %s, \"params\": {%s,"
             "   \"cancel\": {\"method\": \"DELETE\"}}},"
             " \"call_body\": {\"action\": \"http\", %s, \"params\": {%s,"
             "   \"status_url_pointer\": \"/statusUrl\"}},"
             " \"call_state\": {\"action\": \"http\", %s, \"params\": {%s,"
             "   \"state_pointer\": \"/status\", \"error_pointer\": \"/why\","
             "   \"state_map\": {\"working\": \"running\", \"broken\": \"failed\"}}}}}",
             common, req, common, req, common, req);
    path = th_config_file(db, cfg);
    args[0] = "--config", args[1] = path, args[2] = NULL;
    th_start(p, conninfo, args, SECRET_ENV);
    if (g_db)
        PQfinish(g_db);
    g_db = th_pg(conninfo);
    free(cfg);
    free(path);
    free(conninfo);
}

static char *submit_to(const struct th_proc *p, const char *type, const char *run_id,
                       const char *scenario)
{
    char body[512];

    snprintf(body, sizeof(body),
             "{\"alert_type\":\"%s\",\"run_id\":\"%s\",\"data\":{\"scenario\":\"%s\"}}", type,
             run_id, scenario);
    return th_submit(p, body, 202);
}

/* The log of an http run that waited: the call and each check, with its
 * status, and what each check saw, in order, the check that ended it
 * last (docs/logs.md). */
static void assert_http_log(const struct th_proc *p, const char *id, const char *status_url)
{
    char path[160], want[1024];
    struct th_resp r;
    const char *text;

    snprintf(path, sizeof(path), "/runs/%s/logs?format=text", id);
    th_get(p->url, path, &r);
    ck_assert_int_eq(r.status, 200);
    text = strstr(r.body, "POST http://127.0.0.1:");
    ck_assert_msg(text && strstr(text, "/call: 202 in "), "%s", r.body);
    snprintf(want, sizeof(want), "GET %s: 202 in ", status_url);
    ck_assert_msg(strstr(r.body, want), "no \"%s\" in %s", want, r.body);
    ck_assert_msg(strstr(r.body, "\ncheck 1: the external job is still running\nnext check in "),
                  "%s", r.body);
    snprintf(want, sizeof(want), "GET %s: 200 in ", status_url);
    text = strstr(r.body, want);
    ck_assert_msg(text && strstr(text, "\ncheck 3: the external job ended: succeeded\n"), "%s",
                  r.body);
    ck_assert_msg(!strstr(r.body, "{{") && !strstr(r.body, SECRET), "%s", r.body);
    th_resp_free(&r);
}

/* A 2xx answer ends the run: its JSON (or its text) is the result. A 202
 * with a status URL (a relative Location, or a field of the answer) makes
 * the run wait; the poller GETs the URL until it answers other than 202
 * (honouring Retry-After, in seconds or as an HTTP date); a state map may
 * read a failure out of a 200. A Location relative to the path called
 * ("./status/job-9" after POST /call) is resolved as RFC 3986 says. */
START_TEST(http_sync_and_async)
{
    struct th_proc p;
    struct fake_job j;
    json_t *run;
    char *ids[9], want_url[96];
    static const char *const cases[][3] = {
        {"call", "h-sync", "sync"},
        {"call", "h-text", "sync_text"},
        {"call", "h-async", "async:3"},
        {"call_body", "h-body", "async_body:2"},
        {"call", "h-ra", "async_retry_after:3"},
        {"call_state", "h-state", "async_state:2"},
        /* a status URL on another host would get the configured headers */
        {"call_body", "h-other", "async_other_host:2"},
        {"call", "h-rel", "async_rel:2"},
        {"call", "h-date", "async_retry_date:2"},
    };

    start_http(&p, "e2e_http_ok");
    for (int i = 0; i < 9; i++)
        ids[i] = submit_to(&p, cases[i][0], cases[i][1], cases[i][2]);
    run = th_wait_done(&p, ids[0], 20);
    ck_assert_str_eq(th_js(run, "outcome"), "succeeded");
    ck_assert_int_eq(th_ji(json_object_get(run, "result"), "answer"), 42);
    ck_assert_str_eq(th_js(json_object_get(run, "result"), "run"), "h-sync");
    json_decref(run);
    run = th_wait_done(&p, ids[1], 20);
    ck_assert_str_eq(th_js(json_object_get(run, "result"), "body"), "plain ok");
    json_decref(run);
    run = th_wait_done(&p, ids[2], 20);
    ck_assert_str_eq(th_js(run, "outcome"), "succeeded");
    ck_assert_int_eq(th_ji(json_object_get(run, "result"), "rows"), 3);
    ck_assert(fake_jobs_get("h-async", &j));
    snprintf(want_url, sizeof(want_url), "http://127.0.0.1:%d/status/%s", g_port, j.id);
    ck_assert_str_eq(th_js(run, "external_id"), want_url);
    ck_assert_int_eq(j.checks, 3);
    json_decref(run);
    assert_http_log(&p, "h-async", want_url);
    run = th_wait_done(&p, ids[3], 20);
    ck_assert_str_eq(th_js(run, "outcome"), "succeeded");
    json_decref(run);
    run = th_wait_done(&p, ids[4], 20);
    ck_assert_str_eq(th_js(run, "outcome"), "succeeded");
    ck_assert(fake_jobs_get("h-ra", &j));
    ck_assert_int_eq(j.checks, 3);
    for (int k = 0; k < 3; k++) { /* Retry-After: 1 beat the 100 ms schedule */
        long long gap = j.check_ms[k] - (k ? j.check_ms[k - 1] : j.submit_ms);
        ck_assert_msg(gap >= 950, "check %d came %lld ms after the previous answer", k + 1, gap);
    }
    json_decref(run);
    run = th_wait_done(&p, ids[5], 20);
    ck_assert_str_eq(th_js(run, "outcome"), "failed");
    ck_assert_msg(strstr(err_msg(run), "\"broken\": nope"), "%s", err_msg(run));
    json_decref(run);
    run = th_wait_done(&p, ids[6], 20);
    ck_assert_str_eq(th_js(run, "outcome"), "failed");
    ck_assert_str_eq(err_code(run), "unsafe_status_url");
    ck_assert(fake_jobs_get("h-other", &j));
    ck_assert_int_eq(j.checks, 0); /* never asked */
    json_decref(run);
    run = th_wait_done(&p, ids[7], 20);
    ck_assert_str_eq(th_js(run, "outcome"), "succeeded");
    ck_assert(fake_jobs_get("h-rel", &j));
    snprintf(want_url, sizeof(want_url), "http://127.0.0.1:%d/status/%s", g_port, j.id);
    ck_assert_str_eq(th_js(run, "external_id"), want_url);
    ck_assert_int_eq(j.checks, 2);
    json_decref(run);
    run = th_wait_done(&p, ids[8], 20);
    ck_assert_str_eq(th_js(run, "outcome"), "succeeded");
    ck_assert(fake_jobs_get("h-date", &j));
    ck_assert_int_eq(j.checks, 2);
    for (int k = 0; k < 2; k++) { /* a date 3 s ahead: a wait of 2-3 s */
        long long gap = j.check_ms[k] - (k ? j.check_ms[k - 1] : j.submit_ms);
        ck_assert_msg(gap >= 1500, "check %d came %lld ms after the previous answer", k + 1, gap);
    }
    json_decref(run);
    for (int i = 0; i < 9; i++)
        free(ids[i]);
    stop(&p);
}
END_TEST

/* 5xx and hangs are retried, then fail; a 404 fails at once; a status URL
 * that vanishes is "gone"; a cancelled waiting call gets its DELETE. */
START_TEST(http_errors_and_cancel)
{
    struct th_proc p;
    struct th_resp r;
    json_t *run;
    char *a, *b, *c, *d, *e;

    start_http(&p, "e2e_http_err");
    a = submit_to(&p, "call", "h-500", "call_500");
    b = submit_to(&p, "call", "h-404", "call_404");
    c = submit_to(&p, "call", "h-hang", "call_hang");
    d = submit_to(&p, "call", "h-vanish", "async_vanish");
    e = submit_to(&p, "call", "h-cancel", "async:1000");
    run = th_wait_done(&p, a, 20);
    ck_assert_str_eq(err_code(run), "unavailable");
    ck_assert_int_eq(th_ji(run, "attempt"), 2);
    json_decref(run);
    run = th_wait_done(&p, b, 20);
    ck_assert_str_eq(err_code(run), "rejected");
    ck_assert_int_eq(th_ji(run, "attempt"), 1);
    json_decref(run);
    run = th_wait_done(&p, c, 30);
    ck_assert_str_eq(err_code(run), "unavailable");
    ck_assert_msg(strstr(err_msg(run), "{{") || strstr(err_msg(run), "/call"), "%s", err_msg(run));
    json_decref(run);
    run = th_wait_done(&p, d, 20);
    ck_assert_str_eq(err_code(run), "job_gone");
    json_decref(run);
    ck_assert(th_wait_status(&p, e, "waiting", 5000));
    th_post_json(p.url, "/runs/h-cancel/cancel", "{}", &r);
    ck_assert_int_eq(r.status, 200);
    th_resp_free(&r);
    wait_hooks("h-cancel", 1, 0);
    free(a), free(b), free(c), free(d), free(e);
    stop(&p);
}
END_TEST

/* ---- the soap_job action ------------------------------------------------ */

static json_t *soap_request(const char *action, const char *inner)
{
    char url[96], *text = NULL;
    json_t *r;

    snprintf(url, sizeof(url), "http://127.0.0.1:%d/soap", g_port);
    if (asprintf(&text,
                 "<soap:Envelope xmlns:soap=\"http://schemas.xmlsoap.org/soap/envelope/\">"
                 "<soap:Body>%s</soap:Body></soap:Envelope>",
                 inner) < 0)
        abort();
    r = json_pack("{s:s, s:s, s:{s:s, s:s}, s:s, s:b}", "method", "POST", "url", url, "headers",
                  "SOAPAction", action, "Authorization", "Bearer {{env:FAKE_TOKEN}}", "body_text",
                  text, "xml_escape", 1);
    free(text);
    return r;
}

/* Adds the members of take (stolen) to dst. */
static void merge(json_t *dst, json_t *take)
{
    json_object_update(dst, take);
    json_decref(take);
}

static json_t *rest_helper(const char *what, const char *pointer)
{
    char url[128];

    snprintf(url, sizeof(url), "http://127.0.0.1:%d/rest/%s/{{state:query_id}}", g_port, what);
    return json_pack("{s:{s:s}, s:s}", "request", "url", url, "pointer", pointer);
}

/* The soap_job type "soap" against the fake's /soap and /rest helpers, with
 * the decision tree of docs/actions/soap_job.md on short timings: checks
 * initial_ms, then up to max_ms, apart. */
static void start_soap_at(struct th_proc *p, const char *db, int initial_ms, int max_ms)
{
    json_t *gate = rest_helper("isrunning", "/isRunning"), *probe = rest_helper("probe", "/count");
    json_t *ready = rest_helper("rowset", "/ready"), *params, *cfg;
    char *text, *path, *conninfo = th_db_create(db);
    const char *args[3];

    merge(gate, json_pack("{s:i, s:i, s:i, s:i}", "confirmations", 2, "min_gap_s", 1,
                          "after_completed_date_s", 0, "stuck_after_s", 2));
    merge(probe, json_pack("{s:i, s:i}", "min_runtime_s", 0, "min_interval_s", 1));
    merge(ready, json_pack("{s:i, s:i, s:i}", "max_attempts", 3, "initial_delay_ms", 100,
                           "max_delay_ms", 200));
    params = json_pack(
        "{s:{s:s}, s:o, s:s, s:{s:s}, s:o, s:s, s:s, s:s, s:o, s:o, s:o, s:o, s:o}", "namespaces",
        "f", "urn:fake", "start",
        soap_request("Perform", "<PerformRequestMsg xmlns=\"urn:fake\"><Scenario>"
                                "{{input:/scenario}}</Scenario><Run>{{run_id}}</Run>"
                                "</PerformRequestMsg>"),
        "task_id_xpath", "//f:Task/f:ID", "capture", "query_id", "//f:Object/f:ObjectID", "status",
        soap_request("Retrieve", "<RetrieveRequestMsg xmlns=\"urn:fake\"><TaskID>{{external_id}}"
                                 "</TaskID></RetrieveRequestMsg>"),
        "status_xpath", "//f:Property[f:Name='Status']/f:Value", "error_xpath",
        "//f:Property[f:Name='ErrorMsg']/f:Value", "completed_date_xpath",
        "//f:Property[f:Name='CompletedDate']/f:Value", "is_running", gate, "row_probe", probe,
        "readiness", ready, "cancel",
        soap_request("Cancel", "<CancelRequestMsg xmlns=\"urn:fake\"><TaskID>{{external_id}}"
                               "</TaskID></CancelRequestMsg>"),
        "cleanup",
        soap_request("Delete", "<DeleteRequestMsg xmlns=\"urn:fake\"><ObjectID>"
                               "{{state:query_id}}</ObjectID></DeleteRequestMsg>"));
    cfg = json_pack("{s:{s:i}, s:{s:{s:s, s:i, s:i, s:{s:i, s:i, s:i, s:i, s:i, s:i}, s:o}}}",
                    "poller", "interval_ms", 200, "run_types", "soap", "action", "soap_job",
                    "max_attempts", 2, "retry_backoff_ms", 50, "poll", "initial_delay_ms",
                    initial_ms, "max_delay_ms", max_ms, "jitter_pct", 0, "max_checks", 300,
                    "max_duration_s", 60, "check_timeout_s", 2, "params", params);
    ck_assert_ptr_nonnull(cfg);
    text = json_dumps(cfg, 0);
    path = th_config_file(db, text);
    args[0] = "--config", args[1] = path, args[2] = NULL;
    th_start(p, conninfo, args, SECRET_ENV);
    if (g_db)
        PQfinish(g_db);
    g_db = th_pg(conninfo);
    json_decref(cfg);
    free(text);
    free(path);
    free(conninfo);
}

static void start_soap(struct th_proc *p, const char *db)
{
    start_soap_at(p, db, 100, 200);
}

/* The soap_job decision tree, one branch per run: complete (with readiness
 * retries), error status, error message, server faults and malformed
 * answers (failed checks), a stuck task confirmed "not running" twice at
 * least min_gap_s apart, a completed date opening the gate early, the row
 * probe's fast path, results never ready, a client fault at the start. */
START_TEST(soap_decision_tree)
{
    static const struct {
        const char *run, *scenario, *outcome, *code, *msg;
    } cases[] = {
        {"s-done", "soap_done:3,ready_after:2", "succeeded", NULL, NULL},
        {"s-error", "soap_error:2", "failed", "remote_failed", "syntax error near FROM"},
        {"s-errmsg", "soap_errmsg:2", "failed", "remote_failed", "quota exceeded"},
        {"s-fault", "soap_fault_server:2,soap_done:3", "succeeded", NULL, NULL},
        {"s-malformed", "soap_malformed:1,soap_done:2", "succeeded", NULL, NULL},
        /* a check cut off at check_timeout_s is a failed check, not the end */
        {"s-hang", "soap_hang:1,soap_done:2", "succeeded", NULL, NULL},
        {"s-stuck", "soap_stuck,running_for:1", "succeeded", NULL, NULL},
        {"s-date", "soap_completed_date", "succeeded", NULL, NULL},
        {"s-probe", "soap_stuck,running_for:1000,probe_rows:2", "succeeded", NULL, NULL},
        {"s-notready", "soap_done:1,never_ready", "failed", "not_ready", "not ready after 3"},
        {"s-client", "soap_fault_client", "failed", "soap_fault", "bad query: unknown table"},
    };
    struct th_proc p;
    struct fake_job j;
    char *ids[sizeof(cases) / sizeof(cases[0])], want[40];

    start_soap(&p, "e2e_soap_tree");
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        ids[i] = submit_to(&p, "soap", cases[i].run, cases[i].scenario);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *run = th_wait_done(&p, ids[i], 40);
        ck_assert_msg(th_streq(th_js(run, "outcome"), cases[i].outcome), "%s: %s (%s)",
                      cases[i].run, th_js(run, "outcome"), err_msg(run) ? err_msg(run) : "");
        if (cases[i].code) {
            ck_assert_str_eq(err_code(run), cases[i].code);
            ck_assert_msg(strstr(err_msg(run), cases[i].msg), "%s: %s", cases[i].run, err_msg(run));
        } else {
            ck_assert(fake_jobs_get(cases[i].run, &j));
            ck_assert_str_eq(th_js(json_object_get(run, "result"), "task_id"), j.id);
            ck_assert_str_eq(th_js(run, "external_id"), j.id);
        }
        json_decref(run);
        free(ids[i]);
    }
    ck_assert(fake_jobs_get("s-done", &j));
    ck_assert_int_eq(j.checks, 3);
    ck_assert_int_eq(j.readiness, 2);
    ck_assert_int_eq(j.isrunning, 0);
    ck_assert(fake_jobs_get("s-stuck", &j));
    ck_assert_int_eq(j.isrunning, 3); /* true, then false twice */
    ck_assert_msg(j.isrunning_ms[2] - j.isrunning_ms[1] >= 950,
                  "the two \"not running\" answers came %lld ms apart",
                  j.isrunning_ms[2] - j.isrunning_ms[1]);
    ck_assert_msg(j.isrunning_ms[0] - j.submit_ms >= 1900,
                  "is-running asked %lld ms after the start, before stuck_after_s",
                  j.isrunning_ms[0] - j.submit_ms);
    ck_assert(fake_jobs_get("s-date", &j));
    ck_assert_int_eq(j.isrunning, 2);
    ck_assert_msg(j.isrunning_ms[0] - j.submit_ms < 1500, "the completed date did not open the "
                                                          "gate early");
    ck_assert(fake_jobs_get("s-probe", &j));
    ck_assert_int_ge(j.probes, 2);
    ck_assert(fake_jobs_get("s-notready", &j));
    ck_assert_int_eq(j.readiness, 3);
    /* two server faults, one malformed answer, one check cut off; no
     * Queued or Processing answer counts */
    ck_assert_int_eq(poller_stat(&p, "check_failures_total"), 4);
    /* cleanup (a SOAP Delete of the captured query definition) after every
     * end of a run that waited */
    wait_hooks("s-done", 0, 1);
    wait_hooks("s-error", 0, 1);
    ck_assert(fake_jobs_get("s-done", &j));
    /* The fake numbers jobs as their starts arrive, and workers start runs
     * in parallel: s-done's job is job-N, and its query definition q-N. */
    ck_assert_msg(strncmp(j.id, "job-", 4) == 0, "job id %s", j.id);
    snprintf(want, sizeof(want), "q-%.28s", j.id + 4);
    ck_assert_str_eq(j.cleanup_object, want);
    stop(&p);
}
END_TEST

/* A cancelled waiting task gets its SOAP Cancel and its cleanup. */
START_TEST(soap_cancel)
{
    struct th_proc p;
    struct th_resp r;
    char *id;

    start_soap(&p, "e2e_soap_cancel");
    id = submit_to(&p, "soap", "s-cancel", "soap_stuck,running_for:1000");
    ck_assert(th_wait_status(&p, id, "waiting", 5000));
    th_post_json(p.url, "/runs/s-cancel/cancel", "{}", &r);
    ck_assert_int_eq(r.status, 200);
    th_resp_free(&r);
    wait_hooks("s-cancel", 1, 1);
    free(id);
    stop(&p);
}
END_TEST

/* ---- a long wait is not a failure ----------------------------------------- */

/* Checks 50 ms, then 100 ms, apart. */
static const char *const QUICK_POLL =
    "{\"initial_delay_ms\": 50, \"multiplier\": 2, \"max_delay_ms\": 100, \"jitter_pct\": 0,"
    " \"max_checks\": 100, \"max_duration_s\": 60, \"check_timeout_s\": 2}";

/* Run id of type `type` succeeds after exactly `checks` checks, every one
 * but the last finding the remote job still going. None of them is a
 * failure: check_failures_total stays where it was before the run
 * (failures_before), and p's log, complete once p is stopped, records the
 * run's end but no "check failed" and no "unknown error" line. Stops p. */
static void expect_quiet_success(struct th_proc *p, const char *id, const char *type, int checks,
                                 long long failures_before)
{
    json_t *run = th_wait_done(p, id, 30);
    char want[160], line[1024];

    ck_assert_msg(th_streq(th_js(run, "outcome"), "succeeded"), "%s: %s (%s)", id,
                  th_js(run, "outcome"), err_msg(run) ? err_msg(run) : "");
    json_decref(run);
    ck_assert_int_ge(poller_stat(p, "checks_total"), checks);
    ck_assert_int_eq(poller_stat(p, "check_failures_total"), failures_before);
    stop(p);
    snprintf(want, sizeof(want), "run finished run=%s type=%s outcome=succeeded checks=%d ", id,
             type, checks);
    ck_assert_msg(th_log_find(p->log, want, line, sizeof(line)), "no \"%s\" in %s", want, p->log);
    ck_assert_msg(!th_log_find(p->log, "check failed", line, sizeof(line)), "%s: %s", p->log, line);
    ck_assert_msg(!th_log_find(p->log, "unknown error", line, sizeof(line)), "%s: %s", p->log,
                  line);
}

/* rest_job: the remote state RUNNING for 19 checks, DONE at the 20th. */
START_TEST(rest_job_long_wait_is_quiet)
{
    struct th_proc p;
    struct fake_job j;
    long long before;
    char *id;

    start(&p, "e2e_quiet_rest", QUICK_POLL, NULL);
    before = poller_stat(&p, "check_failures_total");
    id = submit(&p, "q-rest", "done_after:20");
    expect_quiet_success(&p, id, "job", 20, before);
    ck_assert(fake_jobs_get("q-rest", &j));
    ck_assert_int_eq(j.checks, 20);
    free(id);
}
END_TEST

/* http: the status URL answers 202 for 15 checks, 200 at the 16th. */
START_TEST(http_long_wait_is_quiet)
{
    struct th_proc p;
    struct fake_job j;
    long long before;
    char *id;

    start_http(&p, "e2e_quiet_http");
    before = poller_stat(&p, "check_failures_total");
    id = submit_to(&p, "call", "q-http", "async:16");
    expect_quiet_success(&p, id, "call", 16, before);
    ck_assert(fake_jobs_get("q-http", &j));
    ck_assert_int_eq(j.checks, 16);
    free(id);
}
END_TEST

/* soap_job: Retrieve answers "Processing" for 29 checks, " Complete " at
 * the 30th. Past stuck_after_s (2 s) the is-running gate is asked too (it
 * answers true), and the row probe every second (no rows): normal checks
 * as well. */
START_TEST(soap_long_processing_is_quiet)
{
    struct th_proc p;
    struct fake_job j;
    long long before;
    char *id;

    start_soap_at(&p, "e2e_quiet_soap", 50, 100);
    before = poller_stat(&p, "check_failures_total");
    id = submit_to(&p, "soap", "q-soap", "soap_processing:30,running_for:1000");
    expect_quiet_success(&p, id, "soap", 30, before);
    ck_assert(fake_jobs_get("q-soap", &j));
    ck_assert_int_eq(j.checks, 30);
    ck_assert_int_eq(j.readiness, 1);
    ck_assert_int_ge(j.isrunning, 1);
    ck_assert_int_ge(j.probes, 2);
    free(id);
}
END_TEST

/* ---- a reload --------------------------------------------------------- */

/* A reload adds the first type that can poll to a server started with
 * none (which once started no poller then): its run waits, is checked
 * until its remote job is done, and succeeds. */
START_TEST(polling_type_added_by_reload)
{
    struct th_proc p;
    struct fake_job j;
    char *cfg = job_config(FAST_POLL, NULL), *path, *conninfo, *id;
    const char *args[3] = {"--config", NULL, NULL};
    json_t *run;

    path = th_config_file("e2e_poll_reload",
                          "{\"poller\": {\"concurrency\": 2, \"interval_ms\": 200},"
                          " \"run_types\": {\"other\": {\"action\": \"simulate\"}}}");
    args[1] = path;
    conninfo = th_db_create("e2e_poll_reload");
    th_start(&p, conninfo, args, SECRET_ENV);
    g_db = th_pg(conninfo);

    th_config_rewrite(path, cfg);
    th_reload(&p, NULL, "run_types.job");
    id = submit(&p, "reload-1", "done_after:3");
    run = th_wait_done(&p, id, 30);
    ck_assert_str_eq(th_js(run, "outcome"), "succeeded");
    ck_assert(fake_jobs_get("reload-1", &j));
    ck_assert_int_eq(j.checks, 3);
    json_decref(run);
    free(id);
    free(cfg);
    free(path);
    free(conninfo);
    stop(&p);
}
END_TEST

static Suite *poller_suite(void)
{
    Suite *s = suite_create("e2e_poller");
    const struct {
        const char *name;
        const TTest *fn;
        int timeout;
    } cases[] = {
        {"success_and_schedule", success_and_schedule, 60},
        {"idle_and_lag", idle_and_lag, 60},
        {"remote_outcomes", remote_outcomes, 90},
        {"unknown_state_and_gone_options", unknown_state_and_gone_options, 60},
        {"budgets", budgets, 90},
        {"poll_in_the_run_object", poll_in_the_run_object, 60},
        {"budget_from_the_run", budget_from_the_run, 60},
        {"cancel_and_cleanup", cancel_and_cleanup, 60},
        {"submit_errors", submit_errors, 60},
        {"one_check_in_flight", one_check_in_flight, 120},
        {"killed_mid_check", killed_mid_check, 120},
        {"checks_reuse_connections", checks_reuse_connections, 60},
        {"late_claim_given_back", late_claim_given_back, 90},
        {"late_hooks_given_back", late_hooks_given_back, 60},
        {"each_claim_its_own_owner", each_claim_its_own_owner, 60},
        {"stop_gives_back_queued_claims", stop_gives_back_queued_claims, 60},
        {"stop_gives_back_queued_hooks", stop_gives_back_queued_hooks, 60},
        {"checks_yield_to_runs", checks_yield_to_runs, 120},
        {"load_5000_waiting", load_5000_waiting, 300},
        {"http_sync_and_async", http_sync_and_async, 60},
        {"http_errors_and_cancel", http_errors_and_cancel, 60},
        {"soap_decision_tree", soap_decision_tree, 90},
        {"soap_cancel", soap_cancel, 60},
        {"rest_job_long_wait_is_quiet", rest_job_long_wait_is_quiet, 60},
        {"http_long_wait_is_quiet", http_long_wait_is_quiet, 60},
        {"soap_long_processing_is_quiet", soap_long_processing_is_quiet, 60},
        {"polling_type_added_by_reload", polling_type_added_by_reload, 60},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        TCase *tc = tcase_create(cases[i].name);
        tcase_set_timeout(tc, cases[i].timeout);
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, cases[i].fn);
        suite_add_tcase(s, tc);
    }
    return s;
}

int main(void)
{
    return th_run_suite(poller_suite());
}
