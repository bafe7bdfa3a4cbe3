/* tests/e2e/test_retry.c — POST /runs/{id}/retry against docs/api.md
 * ("Retrying a run"), over HTTP on a real process: a new run with the
 * type, input and priority of a completed run that did not succeed, its
 * retry_of everywhere a run is shown, the 409s, 404s and 405, the join
 * with an active run of the same identity, and a run type that is no longer
 * configured. Every test case gets a fresh database and its own process. */
#include "../support/harness.h"
#include "../support/sse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* POST /runs/{id}/retry. */
static void retry(const struct th_proc *p, const char *id, struct th_resp *r)
{
    char path[256];

    snprintf(path, sizeof(path), "/runs/%s/retry", id);
    th_post_json(p->url, path, "", r);
}

/* Retries id, asserting 202 with Location and a submission result that
 * names id in retry_of; returns the new run's id (heap). */
static char *retry_new(const struct th_proc *p, const char *id)
{
    struct th_resp r;
    char loc[200], *nid;

    retry(p, id, &r);
    ck_assert_msg(r.status == 202, "retry %s: HTTP %ld, want 202; body %s", id, r.status, r.body);
    ck_assert_msg(r.json && th_js(r.json, "run_id"), "retry %s: no run_id in %s", id, r.body);
    nid = strdup(th_js(r.json, "run_id"));
    ck_assert_msg(strlen(nid) == 26, "new id %s is not a generated one", nid);
    ck_assert_str_ne(nid, id);
    ck_assert_msg(th_streq(th_js(r.json, "retry_of"), id), "retry_of %s, want %s",
                  th_js(r.json, "retry_of"), id);
    ck_assert(json_is_false(json_object_get(r.json, "deduplicated")));
    ck_assert(th_streq(th_js(r.json, "status"), "queued"));
    ck_assert(th_streq(th_js(r.json, "outcome"), "pending"));
    snprintf(loc, sizeof(loc), "/runs/%s", nid);
    ck_assert_str_eq(r.location, loc);
    ck_assert_str_eq(th_js(json_object_get(r.json, "links"), "self"), loc);
    th_resp_free(&r);
    return nid;
}

/* A run that failed is retried: a new run, same type, input and priority,
 * retry_of in the answer, in GET /runs/{id}, in GET /runs and in its
 * stream; the original stays as it was. A retry of the retry chains. */
START_TEST(failed_run)
{
    struct th_proc p;
    struct th_resp r;
    struct th_sse *s;
    struct th_sse_event ev;
    json_t *orig, *run;
    char *nid, *nid2, path[256];

    th_start_fresh(&p, "e2e_retry_failed", NULL);
    free(th_submit(&p,
                   "{\"alert_type\":\"demo\",\"run_id\":\"orig-1\",\"priority\":7,"
                   "\"data\":{\"duration_ms\":0,\"steps\":2,\"fail\":\"permanent\"}}",
                   202));
    th_expect_outcome(&p, "orig-1", "failed", 20);

    nid = retry_new(&p, "orig-1");
    run = th_get_run(&p, nid);
    orig = th_get_run(&p, "orig-1");
    ck_assert_str_eq(th_js(run, "retry_of"), "orig-1");
    ck_assert_str_eq(th_js(run, "type"), "demo");
    ck_assert_str_eq(th_js(run, "tenant"), th_js(orig, "tenant"));
    ck_assert_int_eq(th_ji(run, "priority"), 7);
    ck_assert_int_eq(th_ji(run, "max_attempts"), 3);
    ck_assert(json_equal(json_object_get(run, "input"), json_object_get(orig, "input")));
    ck_assert(json_is_null(json_object_get(orig, "retry_of")));
    ck_assert_str_eq(th_js(orig, "outcome"), "failed");
    json_decref(run);
    json_decref(orig);
    th_expect_outcome(&p, nid, "failed", 20);

    /* the list shows retry_of too */
    th_get(p.url, "/runs?limit=1", &r);
    ck_assert_int_eq(r.status, 200);
    run = json_array_get(json_object_get(r.json, "runs"), 0);
    ck_assert_str_eq(th_js(run, "id"), nid);
    ck_assert_str_eq(th_js(run, "retry_of"), "orig-1");
    th_resp_free(&r);

    /* and the stream's snapshot */
    snprintf(path, sizeof(path), "/runs/%s/stream", nid);
    s = th_sse_open(p.port, path, NULL, 0);
    ck_assert_int_eq(s->status, 200);
    ck_assert_int_eq(th_sse_until(s, "snapshot", &ev, 5000), 1);
    ck_assert_str_eq(th_js(ev.json, "retry_of"), "orig-1");
    th_sse_event_free(&ev);
    th_sse_close(s);

    /* a retry of the retry names the retry */
    nid2 = retry_new(&p, nid);
    run = th_get_run(&p, nid2);
    ck_assert_str_eq(th_js(run, "retry_of"), nid);
    json_decref(run);
    th_expect_outcome(&p, nid2, "failed", 20);

    /* retries are submissions in /metrics: the original and two retries */
    th_get(p.url, "/metrics", &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_msg(strstr(r.body, "\nopsrun_runs_submitted_total{type=\"demo\"} 3\n"),
                  "submissions in /metrics: %.300s",
                  strstr(r.body, "opsrun_runs_submitted_total")
                      ? strstr(r.body, "opsrun_runs_submitted_total")
                      : "none");
    th_resp_free(&r);
    free(nid);
    free(nid2);
    th_stop_clean(&p);
}
END_TEST

/* A cancelled run is retried and its retry runs now (run_at is not
 * copied) and succeeds. */
START_TEST(cancelled_run)
{
    struct th_proc p;
    struct th_resp r;
    char *nid;

    th_start_fresh(&p, "e2e_retry_cancelled", NULL);
    free(th_submit(&p,
                   "{\"alert_type\":\"demo\",\"run_id\":\"later-1\","
                   "\"run_at\":\"2999-01-01T00:00:00Z\",\"data\":{\"duration_ms\":0}}",
                   202));
    th_post_json(p.url, "/runs/later-1/cancel", "", &r);
    ck_assert_int_eq(r.status, 200);
    th_resp_free(&r);
    nid = retry_new(&p, "later-1");
    th_expect_outcome(&p, nid, "succeeded", 20);
    free(nid);
    th_stop_clean(&p);
}
END_TEST

/* 409 for a run that is not completed, and for one that succeeded; 404 for
 * an unknown run; 405 for another method. */
START_TEST(refused)
{
    struct th_proc p;
    struct th_resp r;
    PGconn *pg;
    char *ci;

    th_start_fresh(&p, "e2e_retry_refused", NULL);
    free(th_submit(
        &p, "{\"alert_type\":\"demo\",\"run_id\":\"slow-1\",\"data\":{\"duration_ms\":30000}}",
        202));
    free(th_submit(&p, "{\"alert_type\":\"demo\",\"run_id\":\"ok-1\",\"data\":{\"duration_ms\":0}}",
                   202));
    th_expect_outcome(&p, "ok-1", "succeeded", 20);

    retry(&p, "slow-1", &r);
    th_check_problem(&r, 409, "retry of an active run");
    ck_assert_msg(strstr(th_js(r.json, "detail"), "is not completed"), "detail: %s",
                  th_js(r.json, "detail"));
    th_resp_free(&r);

    retry(&p, "ok-1", &r);
    th_check_problem(&r, 409, "retry of a run that succeeded");
    ck_assert_str_eq(th_js(r.json, "detail"),
                     "run \"ok-1\" succeeded; only a run that did not succeed can be retried");
    th_resp_free(&r);

    retry(&p, "nope", &r);
    th_check_problem(&r, 404, "retry of an unknown run");
    ck_assert_str_eq(th_js(r.json, "detail"), "run \"nope\" does not exist");
    th_resp_free(&r);

    th_get(p.url, "/runs/ok-1/retry", &r);
    th_check_problem(&r, 405, "GET of the retry path");
    ck_assert_str_eq(r.allow, "POST");
    th_resp_free(&r);

    ci = th_conninfo("e2e_retry_refused");
    pg = th_pg(ci);
    free(ci);
    ck_assert_int_eq(th_sql_int(pg, "SELECT count(*) FROM runs WHERE retry_of IS NOT NULL"), 0);
    PQfinish(pg);
    th_post_json(p.url, "/runs/slow-1/cancel", "", &r);
    th_resp_free(&r);
    th_expect_outcome(&p, "slow-1", "cancelled", 20);
    th_stop_clean(&p);
}
END_TEST

/* A retry keeps the identity of the run it repeats: while a run of that
 * identity is active, a retry joins it (200, deduplicated, no Location)
 * rather than starting a second one. */
START_TEST(joins_active)
{
    struct th_proc p;
    struct th_resp r;
    char *nid, *active;

    th_start_fresh(&p, "e2e_retry_join", NULL);
    free(th_submit(&p,
                   "{\"alert_type\":\"demo\",\"run_id\":\"k-1\",\"dedupe_key\":\"k\","
                   "\"data\":{\"duration_ms\":3000,\"fail\":\"permanent\"}}",
                   202));
    th_expect_outcome(&p, "k-1", "failed", 20);

    /* a double click: the second retry joins the first one's run (which
     * takes 3 s to fail, as its original did) */
    nid = retry_new(&p, "k-1");
    retry(&p, "k-1", &r);
    ck_assert_msg(r.status == 200, "second retry: HTTP %ld %s", r.status, r.body);
    ck_assert_str_eq(th_js(r.json, "run_id"), nid);
    ck_assert(json_is_true(json_object_get(r.json, "deduplicated")));
    ck_assert_str_eq(th_js(r.json, "retry_of"), "k-1");
    ck_assert_str_eq(r.location, "");
    th_resp_free(&r);
    th_expect_outcome(&p, nid, "failed", 20);

    /* a fresh submission of the same identity is active: the retry joins it */
    active = th_submit(
        &p, "{\"alert_type\":\"demo\",\"dedupe_key\":\"k\",\"data\":{\"duration_ms\":30000}}", 202);
    retry(&p, "k-1", &r);
    ck_assert_msg(r.status == 200, "retry while active: HTTP %ld %s", r.status, r.body);
    ck_assert_str_eq(th_js(r.json, "run_id"), active);
    ck_assert(json_is_true(json_object_get(r.json, "deduplicated")));
    ck_assert(json_is_null(json_object_get(r.json, "retry_of")));
    th_resp_free(&r);

    th_post_json(p.url, "/runs/k-1/cancel", "", &r); /* completed: 409, nothing else */
    ck_assert_int_eq(r.status, 409);
    th_resp_free(&r);
    {
        char path[256];
        snprintf(path, sizeof(path), "/runs/%s/cancel", active);
        th_post_json(p.url, path, "", &r);
        th_resp_free(&r);
    }
    th_expect_outcome(&p, active, "cancelled", 20);
    free(nid);
    free(active);
    th_stop_clean(&p);
}
END_TEST

/* A run whose run type the configuration no longer has: 422. */
START_TEST(type_gone)
{
    struct th_proc p;
    struct th_resp r;
    const char *ci;
    const char *const args_none[] = {NULL};

    ci = th_start_fresh(&p, "e2e_retry_gone",
                        "{\"run_types\": {\"old\": {\"action\": \"simulate\", "
                        "\"params\": {\"fail\": \"permanent\", \"duration_ms\": 0}}}}");
    free(th_submit(&p, "{\"alert_type\":\"old\",\"run_id\":\"old-1\"}", 202));
    th_expect_outcome(&p, "old-1", "failed", 20);
    th_stop_clean(&p);

    th_start(&p, ci, args_none, NULL);
    retry(&p, "old-1", &r);
    th_check_problem(&r, 422, "retry of a run of a type no longer configured");
    ck_assert_str_eq(th_js(r.json, "detail"),
                     "run \"old-1\" cannot be retried: its run type \"old\" is not configured");
    th_resp_free(&r);
    th_stop_clean(&p);
}
END_TEST

static Suite *retry_suite(void)
{
    Suite *s = suite_create("e2e_retry");
    const struct {
        const char *name;
        const TTest *fn;
    } cases[] = {
        {"failed_run", failed_run},     {"cancelled_run", cancelled_run}, {"refused", refused},
        {"joins_active", joins_active}, {"type_gone", type_gone},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        TCase *tc = tcase_create(cases[i].name);
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, cases[i].fn);
        suite_add_tcase(s, tc);
    }
    return s;
}

int main(void)
{
    return th_run_suite(retry_suite());
}
