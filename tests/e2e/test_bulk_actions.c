/* tests/e2e/test_bulk_actions.c — POST /runs/cancel and POST /runs/retry
 * (docs/api.md, "Acting on many runs") on a real process: 2,000 queued
 * runs cancelled by type beside runs of another type, each with its event;
 * 300 failed runs retried by outcome and time range, each new run with
 * retry_of, and a retry sent twice acting once on each run; a dry run that changes
 * nothing; the limit (409, nothing changed); the filters refused; a
 * run's follow-ups by parent_id; the tenants and the scope; submissions
 * that keep completing while 10,000 runs are cancelled; and a drain in the
 * middle of a bulk cancel. */
#include "../support/harness.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define T_OPS "opsrun_e2e-bulk-ops-acme-000000000000"
#define T_READ "opsrun_e2e-bulk-read-acme-11111111111"
#define T_OTHER "opsrun_e2e-bulk-ops-other-2222222222"

#define LATER "2999-01-01T00:00:00Z"

/* demo, and "held" and "spare": simulate run types whose runs the tests
 * delay with run_at; "slowfail" fails after 6 s, "twinfail" after 1 s; "gated" waits for
 * approval; "parent" succeeds at once and makes a follow-up of each of
 * "held" and "spare", due in an hour. With tokens when auth is true. */
static char *config(bool auth)
{
    static const struct th_token t[] = {
        {"ops", "acme", "\"submit\", \"read\", \"cancel\"", T_OPS},
        {"reader", "acme", "\"read\"", T_READ},
        {"other", "other", "\"submit\", \"read\", \"cancel\"", T_OTHER},
    };
    char *out = malloc(8192);
    size_t n = 0;

    n += (size_t)snprintf(
        out + n, 8192 - n,
        "{\"queue\": {\"workers\": 8}, \"limits\": {\"submit_rate_per_s\": 0}, \"run_types\": {"
        "\"held\": {\"action\": \"simulate\"}, \"spare\": {\"action\": \"simulate\"},"
        "\"slowfail\": {\"action\": \"simulate\", \"params\": {\"duration_ms\": 6000, \"steps\": "
        "1, \"fail\": \"permanent\"}},"
        "\"twinfail\": {\"action\": \"simulate\", \"params\": {\"duration_ms\": 1000, \"steps\": "
        "1, \"fail\": \"permanent\"}},"
        "\"gated\": {\"action\": \"simulate\", \"approval\": {\"timeout_s\": 600}},"
        "\"parent\": {\"action\": \"simulate\", \"params\": {\"duration_ms\": 1, \"steps\": 1}, "
        "\"then\": [{\"on\": [\"succeeded\"], \"run_type\": \"held\", \"delay_s\": 3600}, "
        "{\"on\": [\"succeeded\"], \"run_type\": \"spare\", \"delay_s\": 3600}]}}");
    if (auth) {
        char *tokens = th_auth_tokens(t, sizeof(t) / sizeof(t[0]));
        n += (size_t)snprintf(out + n, 8192 - n, ", %s", tokens);
        free(tokens);
    }
    snprintf(out + n, 8192 - n, "}");
    return out;
}

static const char *start_fresh(struct th_proc *p, const char *db, bool auth)
{
    char *c = config(auth);
    const char *ci = th_start_fresh(p, db, c);

    free(c);
    return ci;
}

/* n runs of type, as arrays of up to 1,000; data {"i", "fail"?}; run_at
 * when not NULL. */
static void submit_many(const struct th_proc *p, const char *token, const char *type, int n,
                        const char *fail, const char *run_at, int from)
{
    size_t cap = 160 * 1000 + 64;
    char *body = malloc(cap);

    for (int done = 0; done < n;) {
        int k = n - done < 1000 ? n - done : 1000;
        size_t len = 0;
        struct th_resp r;

        len += (size_t)snprintf(body + len, cap - len, "[");
        for (int i = 0; i < k; i++)
            len += (size_t)snprintf(body + len, cap - len,
                                    "%s{\"alert_type\": \"%s\", \"data\": {\"i\": %d%s%s%s, "
                                    "\"duration_ms\": 1, \"steps\": 1}%s%s%s}",
                                    i ? "," : "", type, from + done + i,
                                    fail ? ", \"fail\": \"" : "", fail ? fail : "",
                                    fail ? "\"" : "", run_at ? ", \"run_at\": \"" : "",
                                    run_at ? run_at : "", run_at ? "\"" : "");
        snprintf(body + len, cap - len, "]");
        th_post_expect(p, "/alerts", token, body, 200, &r);
        ck_assert_int_eq(json_array_size(json_object_get(r.json, "runs")), (size_t)k);
        th_resp_free(&r);
        done += k;
    }
    free(body);
}

static long long count(const char *conninfo, const char *where)
{
    PGconn *c = th_pg(conninfo);
    long long v = th_sql_int(c, "SELECT count(*) FROM runs WHERE %s", where);

    PQfinish(c);
    return v;
}

static long long sql(const char *conninfo, const char *query)
{
    PGconn *c = th_pg(conninfo);
    long long v = th_sql_int(c, "%s", query);

    PQfinish(c);
    return v;
}

/* 2,000 queued runs cancelled by type and status, beside 100 of another
 * type and 5 awaiting approval; then the pending ones by status; the
 * limit first, and a dry run. */
START_TEST(cancel_by_type)
{
    struct th_proc p;
    const char *ci = start_fresh(&p, "e2e_bulkact_cancel", false);
    struct th_resp r;

    submit_many(&p, NULL, "held", 2000, NULL, LATER, 0);
    submit_many(&p, NULL, "spare", 100, NULL, LATER, 0);
    for (int i = 0; i < 5; i++) {
        char body[128];
        snprintf(body, sizeof(body), "{\"alert_type\": \"gated\", \"data\": {\"i\": %d}}", i);
        free(th_submit(&p, body, 202));
    }
    /* past the limit: 409, nothing changes */
    th_post_expect(&p, "/runs/cancel", NULL,
                   "{\"filter\": {\"type\": \"held\", \"status\": [\"queued\"]}, \"limit\": 1999}",
                   409, &r);
    th_check_problem(&r, 409, "past the limit");
    ck_assert_msg(strstr(th_js(r.json, "detail"), "more than 1999 runs match"), "%s", r.body);
    th_resp_free(&r);
    ck_assert_int_eq(count(ci, "status = 'queued'"), 2100);
    /* a dry run counts and lists, and changes nothing */
    th_post_expect(
        &p, "/runs/cancel", NULL,
        "{\"filter\": {\"type\": \"held\", \"status\": [\"queued\"]}, \"dry_run\": true}", 200, &r);
    ck_assert_int_eq(th_ji(r.json, "matched"), 2000);
    ck_assert_int_eq(th_ji(r.json, "acted"), 0);
    ck_assert_int_eq(json_array_size(json_object_get(r.json, "run_ids")), 1000);
    th_resp_free(&r);
    ck_assert_int_eq(count(ci, "status = 'queued'"), 2100);
    ck_assert_int_eq(sql(ci, "SELECT count(*) FROM run_events WHERE message = 'cancel requested'"),
                     0);

    th_post_expect(&p, "/runs/cancel", NULL,
                   "{\"filter\": {\"type\": \"held\", \"status\": [\"queued\"]}, \"limit\": 2000}",
                   200, &r);
    ck_assert_int_eq(th_ji(r.json, "matched"), 2000);
    ck_assert_int_eq(th_ji(r.json, "acted"), 2000);
    ck_assert_int_eq(json_array_size(json_object_get(r.json, "run_ids")), 1000);
    th_resp_free(&r);
    ck_assert_int_eq(count(ci, "type = 'held' AND status = 'completed' AND outcome = 'cancelled'"),
                     2000);
    ck_assert_int_eq(count(ci, "type = 'spare' AND status = 'queued'"), 100);
    /* each run got its usual event, once */
    ck_assert_int_eq(sql(ci, "SELECT count(*) FROM run_events e JOIN runs r ON r.id = e.run_id "
                             "WHERE r.type = 'held' AND e.message = 'cancel requested' "
                             "AND e.status = 'completed'"),
                     2000);
    /* again: nothing left to act on */
    th_post_expect(&p, "/runs/cancel", NULL, "{\"filter\": {\"type\": \"held\"}}", 200, &r);
    ck_assert_int_eq(th_ji(r.json, "matched"), 0);
    ck_assert_int_eq(th_ji(r.json, "acted"), 0);
    th_resp_free(&r);
    /* runs awaiting approval are waiting runs: cancelled at once */
    th_post_expect(&p, "/runs/cancel", NULL, "{\"filter\": {\"status\": [\"waiting\"]}}", 200, &r);
    ck_assert_int_eq(th_ji(r.json, "acted"), 5);
    th_resp_free(&r);
    ck_assert_int_eq(count(ci, "type = 'gated' AND outcome = 'cancelled' AND hooks_at IS NULL"), 5);
    /* everything, when asked for */
    th_post_expect(&p, "/runs/cancel", NULL, "{\"filter\": {\"all\": true}}", 200, &r);
    ck_assert_int_eq(th_ji(r.json, "acted"), 100);
    th_resp_free(&r);
    ck_assert_int_eq(count(ci, "status <> 'completed'"), 0);
    th_stop_clean(&p);
}
END_TEST

/* Waits until every run of the database has completed. */
static void wait_all_completed(PGconn *c)
{
    for (long long until = th_now_ms() + 20000; th_now_ms() < until; th_sleep_ms(50))
        if (th_sql_int(c, "SELECT count(*) FROM runs WHERE status <> 'completed'") == 0)
            return;
    ck_abort_msg("runs still not completed after 20 s");
}

/* The database's now() as RFC 3339, into out. */
static void db_now(PGconn *c, char *out, size_t cap)
{
    char *t = th_sql_str(c, "SELECT opsrun_ts(now())");

    snprintf(out, cap, "%s", t);
    free(t);
}

/* 100 failed runs, then (between instants A and B) 300 failed and 50 that
 * succeeded, then 80 failed: a retry by outcome, created_after A and
 * created_before B retries the 300 and nothing else, each new run with
 * retry_of and the caller as initiator. */
START_TEST(retry_by_outcome_and_time)
{
    struct th_proc p;
    const char *ci = start_fresh(&p, "e2e_bulkact_retry", true);
    char body[512], after[64], before[64];
    struct th_resp r;
    PGconn *c;

    submit_many(&p, T_OPS, "demo", 100, "permanent", NULL, 0);
    c = th_pg(ci);
    wait_all_completed(c);
    db_now(c, after, sizeof(after));
    submit_many(&p, T_OPS, "demo", 300, "permanent", NULL, 100);
    submit_many(&p, T_OPS, "demo", 50, NULL, NULL, 400);
    wait_all_completed(c);
    db_now(c, before, sizeof(before));
    submit_many(&p, T_OPS, "demo", 80, "permanent", NULL, 450);
    wait_all_completed(c);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM runs WHERE outcome = 'failed'"), 480);

    snprintf(body, sizeof(body),
             "{\"filter\": {\"outcome\": [\"failed\"], \"type\": \"demo\", \"created_after\": "
             "\"%s\", \"created_before\": \"%s\"}}",
             after, before);
    th_post_expect(&p, "/runs/retry", T_READ, body, 403, &r); /* read only: no cancel scope */
    th_resp_free(&r);
    th_post_expect(&p, "/runs/retry", T_OPS, body, 200, &r);
    ck_assert_int_eq(th_ji(r.json, "matched"), 300);
    ck_assert_int_eq(th_ji(r.json, "acted"), 300);
    ck_assert_int_eq(json_array_size(json_object_get(r.json, "run_ids")), 300);
    ck_assert_int_eq(json_array_size(json_object_get(r.json, "new_run_ids")), 300);
    th_resp_free(&r);
    ck_assert_int_eq(th_sql_int(c,
                                "SELECT count(*) FROM runs n JOIN runs o ON o.id = n.retry_of "
                                "WHERE o.created_at >= '%s' AND o.created_at < '%s' "
                                "AND o.outcome = 'failed' AND n.initiator = 'ops'",
                                after, before),
                     300);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM runs WHERE retry_of IS NOT NULL"), 300);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM run_events e JOIN runs n ON n.id = "
                                   "e.run_id WHERE n.retry_of IS NOT NULL AND e.message = "
                                   "'submitted'"),
                     300);
    PQfinish(c);
    th_stop_clean(&p);
}
END_TEST

/* Waits until `where` counts n runs. */
static void wait_count(const char *conninfo, const char *where, long long n)
{
    for (long long until = th_now_ms() + 20000; th_now_ms() < until; th_sleep_ms(50))
        if (count(conninfo, where) == n)
            return;
    ck_abort_msg("%s: not %lld runs within 20 s", where, n);
}

/* A run of type (slowfail, twinfail); dedupe_key when not NULL. */
static void submit_failing(const struct th_proc *p, const char *type, int i, const char *dedupe_key)
{
    char body[192];

    snprintf(body, sizeof(body), "{\"alert_type\": \"%s\", \"data\": {\"i\": %d}%s%s%s}", type, i,
             dedupe_key ? ", \"dedupe_key\": \"" : "", dedupe_key ? dedupe_key : "",
             dedupe_key ? "\"" : "");
    free(th_submit(p, body, 202));
}

/* opsrun retry of the failed runs of type, through the command line; its
 * output. */
static char *cli_retry(const struct th_proc *p, const char *type)
{
    const char *const args[] = {"retry",  "--type",   type,   "--outcome",
                                "failed", "--server", p->url, NULL};
    char *out = NULL, *err = NULL;

    ck_assert_int_eq(th_exec(args, NULL, 30, &out, &err), 0);
    free(err);
    return out;
}

/* A retry by a filter sent twice acts once on each run: the second finds
 * nothing to do, while the first's retries run and after they ended (the
 * runs it retried are left out). The retries run 6 s: the second command
 * starts a process of its own, which took over 2 s on a loaded machine. */
START_TEST(retry_sent_twice_acts_once)
{
    struct th_proc p;
    const char *ci = start_fresh(&p, "e2e_bulkact_twice", false);
    char body[256], before[64], *out;
    struct th_resp r;
    PGconn *c;

    for (int i = 0; i < 5; i++) /* its params' duration: no duration_ms in the data */
        submit_failing(&p, "slowfail", i, NULL);
    wait_count(ci, "outcome = 'failed'", 5);
    c = th_pg(ci);
    db_now(c, before, sizeof(before));
    out = cli_retry(&p, "slowfail");
    ck_assert_str_eq(out, "retried 5 of 5 matching runs\n");
    free(out);
    out = cli_retry(&p, "slowfail"); /* the retries are still active */
    ck_assert_str_eq(out, "retried 0 of 0 matching runs\n");
    free(out);
    ck_assert_int_eq(count(ci, "retry_of IS NOT NULL"), 5);

    /* The retries ended too: the same request for the first runs still
     * finds nothing to retry. */
    wait_count(ci, "outcome = 'failed'", 10);
    snprintf(body, sizeof(body),
             "{\"filter\": {\"type\": \"slowfail\", \"outcome\": [\"failed\"], "
             "\"created_before\": \"%s\"}}",
             before);
    th_post_expect(&p, "/runs/retry", NULL, body, 200, &r);
    ck_assert_int_eq(th_ji(r.json, "matched"), 0);
    ck_assert_int_eq(th_ji(r.json, "acted"), 0);
    ck_assert_int_eq(th_ji(r.json, "joined"), 0);
    th_resp_free(&r);
    ck_assert_int_eq(count(ci, "retry_of IS NOT NULL"), 5);
    /* Without the time range, the failed retries are what is left. */
    th_post_expect(&p, "/runs/retry", NULL,
                   "{\"filter\": {\"type\": \"slowfail\", \"outcome\": [\"failed\"]}}", 200, &r);
    ck_assert_int_eq(th_ji(r.json, "matched"), 5);
    ck_assert_int_eq(th_ji(r.json, "acted"), 5);
    th_resp_free(&r);
    ck_assert_int_eq(count(ci, "retry_of IS NOT NULL"), 10);
    PQfinish(c);
    th_stop_clean(&p);
}
END_TEST

/* Two failed runs of one identity (the same request failed twice) are
 * retried as one run, the second joining the first's retry, as POST
 * /runs/{id}/retry does; the answer and the command line say so. */
START_TEST(retry_joins_a_run_of_its_identity)
{
    struct th_proc p;
    const char *ci = start_fresh(&p, "e2e_bulkact_join", false);
    char *out;

    submit_failing(&p, "twinfail", 1, "twin");
    wait_count(ci, "outcome = 'failed'", 1);
    submit_failing(&p, "twinfail", 2, "twin"); /* the first ended: a new run of its identity */
    wait_count(ci, "outcome = 'failed'", 2);
    out = cli_retry(&p, "twinfail");
    ck_assert_str_eq(out, "retried 2 of 2 matching runs: 1 new, 1 joined a run already active\n");
    free(out);
    ck_assert_int_eq(count(ci, "retry_of IS NOT NULL"), 1);
    th_stop_clean(&p);
}
END_TEST

/* A filter that matches only acme's runs acts on none of them for another
 * tenant, dry or not; that tenant's own runs of the type are acted on; a
 * refused filter changes nothing. */
START_TEST(tenants_and_filters)
{
    struct th_proc p;
    const char *ci = start_fresh(&p, "e2e_bulkact_tenants", true);
    struct th_resp r;

    submit_many(&p, T_OPS, "held", 50, NULL, LATER, 0);
    submit_many(&p, T_OPS, "spare", 20, NULL, LATER, 0);
    submit_many(&p, T_OTHER, "held", 7, NULL, LATER, 0);
    th_post_expect(&p, "/runs/cancel", T_OTHER,
                   "{\"filter\": {\"type\": \"spare\"}, \"dry_run\": true}", 200, &r);
    ck_assert_int_eq(th_ji(r.json, "matched"), 0);
    th_resp_free(&r);
    th_post_expect(&p, "/runs/cancel", T_OTHER, "{\"filter\": {\"type\": \"spare\"}}", 200, &r);
    ck_assert_int_eq(th_ji(r.json, "matched"), 0);
    ck_assert_int_eq(th_ji(r.json, "acted"), 0);
    ck_assert_int_eq(json_array_size(json_object_get(r.json, "run_ids")), 0);
    th_resp_free(&r);
    ck_assert_int_eq(count(ci, "tenant = 'acme' AND type = 'spare' AND status = 'queued'"), 20);
    th_post_expect(&p, "/runs/cancel", T_OTHER,
                   "{\"filter\": {\"type\": \"held\"}, \"dry_run\": true}", 200, &r);
    ck_assert_int_eq(th_ji(r.json, "matched"), 7);
    th_resp_free(&r);
    th_post_expect(&p, "/runs/cancel", T_OTHER, "{\"filter\": {\"all\": true}}", 200, &r);
    ck_assert_int_eq(th_ji(r.json, "acted"), 7);
    th_resp_free(&r);
    ck_assert_int_eq(count(ci, "tenant = 'acme' AND status = 'queued'"), 70);
    ck_assert_int_eq(count(ci, "tenant = 'other' AND outcome = 'cancelled'"), 7);
    th_post_expect(&p, "/runs/cancel", T_OPS, "{\"filter\": {}}", 400, &r);
    th_check_problem(&r, 400, "empty filter");
    ck_assert(th_has_error_field(json_object_get(r.json, "errors"), "filter"));
    th_resp_free(&r);
    th_post_expect(&p, "/runs/cancel", T_OPS, "{\"filter\": {\"parent_id\": \"\"}}", 400, &r);
    ck_assert(th_has_error_field(json_object_get(r.json, "errors"), "filter.parent_id"));
    th_resp_free(&r);
    th_post_expect(&p, "/runs/retry", T_OPS, "{\"filter\": {\"status\": [\"finished\"]}}", 400, &r);
    th_resp_free(&r);
    th_post_expect(&p, "/runs/cancel", T_OPS, "not json", 400, &r);
    th_resp_free(&r);
    ck_assert_int_eq(count(ci, "tenant = 'acme' AND status = 'queued'"), 70);
    th_stop_clean(&p);
}
END_TEST

/* The follow-ups of one run, by parent_id: both of its, none of another
 * parent's, nothing else. */
START_TEST(cancel_follow_ups_by_parent)
{
    struct th_proc p;
    const char *ci = start_fresh(&p, "e2e_bulkact_parent", false);
    char *a = th_submit(&p, "{\"alert_type\": \"parent\", \"data\": {\"n\": 1}}", 202);
    char *b = th_submit(&p, "{\"alert_type\": \"parent\", \"data\": {\"n\": 2}}", 202);
    char body[256];
    struct th_resp r;

    submit_many(&p, NULL, "held", 10, NULL, LATER, 0);
    th_expect_outcome(&p, a, "succeeded", 10);
    th_expect_outcome(&p, b, "succeeded", 10);
    ck_assert_int_eq(count(ci, "parent_id IS NOT NULL AND status = 'queued'"), 4);
    snprintf(body, sizeof(body), "{\"filter\": {\"parent_id\": \"%s\"}}", a);
    th_post_expect(&p, "/runs/cancel", NULL, body, 200, &r);
    ck_assert_int_eq(th_ji(r.json, "matched"), 2);
    ck_assert_int_eq(th_ji(r.json, "acted"), 2);
    th_resp_free(&r);
    snprintf(body, sizeof(body), "parent_id = '%s' AND outcome = 'cancelled'", a);
    ck_assert_int_eq(count(ci, body), 2);
    snprintf(body, sizeof(body), "parent_id = '%s' AND status = 'queued'", b);
    ck_assert_int_eq(count(ci, body), 2);
    ck_assert_int_eq(count(ci, "parent_id IS NULL AND type = 'held' AND status = 'queued'"), 10);
    th_stop_clean(&p);
    free(a);
    free(b);
}
END_TEST

/* Submissions made while a bulk cancel of 10,000 runs is under way. */
struct feeder {
    const struct th_proc *p;
    atomic_bool stop;
    atomic_int made; /* ids[0..made) are answered */
    char *ids[4096];
};

static void *feed(void *arg)
{
    struct feeder *f = arg;
    char body[160];

    for (int n = 0; !atomic_load(&f->stop) && n < 4096; n++) {
        snprintf(body, sizeof(body),
                 "{\"alert_type\": \"spare\", \"data\": {\"n\": %d, \"steps\": 1, "
                 "\"duration_ms\": 1}}",
                 n);
        f->ids[n] = th_submit(f->p, body, 202);
        atomic_store(&f->made, n + 1);
        th_sleep_ms(5);
    }
    return NULL;
}

/* 10,000 queued runs cancelled while other runs are submitted and run:
 * every submission is answered and completes (none cancelled), and the
 * cancel acts on exactly the 10,000. */
START_TEST(queue_moves_during_bulk_cancel)
{
    struct th_proc p;
    const char *ci = start_fresh(&p, "e2e_bulkact_10000", false);
    struct feeder f = {.p = &p};
    struct th_resp r;
    pthread_t th;
    int before, during, made;

    atomic_init(&f.stop, false);
    atomic_init(&f.made, 0);
    submit_many(&p, NULL, "held", 10000, NULL, LATER, 0);
    pthread_create(&th, NULL, feed, &f);
    th_sleep_ms(300);
    before = atomic_load(&f.made);
    th_post_expect(&p, "/runs/cancel", NULL, "{\"filter\": {\"type\": \"held\"}}", 200, &r);
    during = atomic_load(&f.made) - before;
    ck_assert_int_eq(th_ji(r.json, "matched"), 10000);
    ck_assert_int_eq(th_ji(r.json, "acted"), 10000);
    th_resp_free(&r);
    th_sleep_ms(300);
    atomic_store(&f.stop, true);
    pthread_join(th, NULL);
    made = atomic_load(&f.made);
    ck_assert_msg(during > 0, "no submission was answered during the cancel");
    for (int i = 0; i < made; i++) {
        th_expect_outcome(&p, f.ids[i], "succeeded", 30);
        free(f.ids[i]);
    }
    ck_assert_int_eq(count(ci, "type = 'held' AND outcome = 'cancelled'"), 10000);
    th_stop_clean(&p);
}
END_TEST

struct bulk_call {
    const struct th_proc *p;
    struct th_resp r;
};

static void *bulk_cancel_held(void *arg)
{
    struct bulk_call *c = arg;
    char url[256];

    snprintf(url, sizeof(url), "%s/runs/cancel", c->p->url);
    ck_assert(th_http("POST", url, "application/json",
                      "{\"filter\": {\"type\": \"held\"}, \"limit\": 100000}", &c->r));
    return NULL;
}

/* A drain during a bulk cancel of 20,000 runs: the request stops after
 * its current batch and is answered 503 with how far it got, every batch
 * it did stays done (and none half), and the process exits 0. */
START_TEST(shutdown_interrupts_between_batches)
{
    struct th_proc p;
    const char *ci = start_fresh(&p, "e2e_bulkact_drain", false);
    struct bulk_call c = {.p = &p};
    pthread_t th;
    long long acted;

    submit_many(&p, NULL, "held", 20000, NULL, LATER, 0);
    pthread_create(&th, NULL, bulk_cancel_held, &c);
    /* The drain begins once the cancel is under way (a first batch
     * committed), not after a guess: before the request arrives, a drain
     * refuses the connection itself. */
    {
        PGconn *pg = th_pg(ci);
        long long t0 = th_now_ms();

        while (th_sql_int(pg, "SELECT count(*) FROM runs WHERE outcome = 'cancelled'") == 0 &&
               th_now_ms() - t0 < 30000)
            th_sleep_ms(5);
        PQfinish(pg);
    }
    th_check_exit0(&p, th_stop(&p, SIGTERM, 60));
    pthread_join(th, NULL);
    if (c.r.status == 200) { /* it finished before the drain reached it */
        ck_assert_int_eq(th_ji(c.r.json, "acted"), 20000);
    } else {
        th_check_problem(&c.r, 503, "interrupted bulk cancel");
        ck_assert_msg(
            strstr(th_js(c.r.json, "detail"), "the server is shutting down after acting on"), "%s",
            c.r.body);
        ck_assert_int_eq(th_ji(c.r.json, "matched"), 20000);
        acted = th_ji(c.r.json, "acted");
        ck_assert_msg(acted % 500 == 0 && acted < 20000, "acted %lld", acted);
        ck_assert_int_eq(count(ci, "outcome = 'cancelled'"), acted);
        ck_assert_int_eq(count(ci, "status = 'queued'"), 20000 - acted);
    }
    th_resp_free(&c.r);
}
END_TEST

static Suite *bulk_suite(void)
{
    Suite *s = suite_create("bulk_actions");
    TCase *tc = tcase_create("bulk_actions");

    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, cancel_by_type);
    tcase_add_test(tc, retry_by_outcome_and_time);
    tcase_add_test(tc, retry_sent_twice_acts_once);
    tcase_add_test(tc, retry_joins_a_run_of_its_identity);
    tcase_add_test(tc, tenants_and_filters);
    tcase_add_test(tc, cancel_follow_ups_by_parent);
    tcase_add_test(tc, queue_moves_during_bulk_cancel);
    tcase_add_test(tc, shutdown_interrupts_between_batches);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return th_run_suite(bulk_suite());
}
