/* tests/e2e/test_complete.c — finished runs are written in batches by each
 * process's completer (engine/complete.c): many workers in two replicas
 * complete many tiny runs, and every run is completed exactly once, by the
 * attempt that ran it, with exactly one terminal event after its start
 * event; every terminal event reaches a /stream subscriber, in id order; the
 * replicas' /metrics count every completion once. */
#include "../support/harness.h"
#include "../support/sse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RUNS 2000
#define WORKERS "16"

/* opsrun_runs_completed_total{type="demo",outcome="succeeded"} of p. */
static long long completed_metric(const struct th_proc *p)
{
    static const char key[] = "\nopsrun_runs_completed_total{type=\"demo\",outcome=\"succeeded\"} ";
    struct th_resp r;
    const char *at;
    long long n = 0;

    th_get(p->url, "/metrics", &r);
    ck_assert_int_eq(r.status, 200);
    at = strstr(r.body, key);
    if (at)
        n = atoll(at + strlen(key));
    th_resp_free(&r);
    return n;
}

/* Reads /stream?status=completed until every run's terminal event came:
 * ids strictly increasing, no run twice. Returns how many came. */
static int read_terminal_events(struct th_sse *s, PGconn *db)
{
    long long last = 0;
    int got = 0;

    PQclear(th_sql(db, "CREATE TEMP TABLE seen (id text PRIMARY KEY)"));
    while (got < RUNS) {
        struct th_sse_event ev;
        int rc = th_sse_until(s, "status", &ev, 30000);
        if (rc != 1)
            break;
        ck_assert_msg(ev.has_id && ev.id > last, "event id %lld after %lld", ev.id, last);
        last = ev.id;
        ck_assert_msg(ev.json && th_streq(th_js(ev.json, "status"), "completed"),
                      "a non-terminal event on ?status=completed: %s", ev.data);
        /* a second terminal event of a run fails the primary key */
        PQclear(th_sql(db, "INSERT INTO seen VALUES ('%s')", th_js(ev.json, "id")));
        th_sse_event_free(&ev);
        got++;
    }
    return got;
}

START_TEST(many_workers_many_runs_each_completed_once)
{
    char *ci = th_db_create("e2e_complete");
    const char *args[] = {"--workers", WORKERS, NULL};
    struct th_proc a, b;
    PGconn *db = th_pg(ci);
    struct th_sse *s;
    long long n;

    th_start(&a, ci, args, NULL);
    th_start(&b, ci, args, NULL);
    s = th_sse_open(a.port, "/stream?status=completed", NULL, 0);
    ck_assert_int_eq(s->status, 200);

    /* All due at once, inserted as a submission would (the event horizon
     * and the claim see them the same way). */
    PQclear(th_sql(db,
                   "INSERT INTO runs (tenant, id, type, max_attempts, timeout_s, input, "
                   "identity_hash, request_hash) SELECT 'default', 'c-' || i, 'demo', 3, 900, "
                   "'{\"duration_ms\": 0, \"steps\": 0}', 'c-' || i, 'x' "
                   "FROM generate_series(1, %d) AS i",
                   RUNS));
    PQclear(th_sql(db, "ANALYZE runs"));
    PQclear(th_sql(db, "SELECT pg_notify('opsrun_queue', '')"));

    ck_assert_int_eq(read_terminal_events(s, db), RUNS);
    th_sse_close(s);

    /* every run completed once, by its first attempt */
    ck_assert_int_eq(th_sql_int(db, "SELECT count(*) FROM runs WHERE status = 'completed' AND "
                                    "outcome = 'succeeded' AND attempt = 1 AND progress = 100"),
                     RUNS);
    /* both replicas worked */
    ck_assert_int_eq(th_sql_int(db, "SELECT count(DISTINCT worker_id) FROM runs"), 2);
    /* per run: one start event, then one terminal event, and nothing after it */
    n = th_sql_int(db, "SELECT count(*) FROM runs r WHERE "
                       "(SELECT count(*) FROM run_events e WHERE e.tenant = r.tenant AND "
                       "e.run_id = r.id AND e.status = 'running') <> 1 OR "
                       "(SELECT count(*) FROM run_events e WHERE e.tenant = r.tenant AND "
                       "e.run_id = r.id AND e.status = 'completed') <> 1 OR "
                       "(SELECT max(e.id) FROM run_events e WHERE e.tenant = r.tenant AND "
                       "e.run_id = r.id AND e.status = 'running') > "
                       "(SELECT max(e.id) FROM run_events e WHERE e.tenant = r.tenant AND "
                       "e.run_id = r.id AND e.status = 'completed')");
    ck_assert_msg(n == 0, "%lld runs without exactly one start and then one terminal event", n);
    ck_assert_int_eq(th_sql_int(db, "SELECT count(*) FROM run_events WHERE status = 'completed' "
                                    "AND (outcome <> 'succeeded' OR progress <> 100 "
                                    "OR message <> 'finished')"),
                     0);
    /* each completion counted once, by the replica that made it */
    ck_assert_int_eq(completed_metric(&a) + completed_metric(&b), RUNS);

    PQfinish(db);
    th_stop_clean(&a);
    th_stop_clean(&b);
    free(ci);
}
END_TEST

static Suite *complete_suite(void)
{
    Suite *s = suite_create("e2e_complete");
    TCase *tc = tcase_create("complete");

    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, many_workers_many_runs_each_completed_once);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return th_run_suite(complete_suite());
}
