/* tests/e2e/test_due.c — due runs start when they are due, not at the
 * dispatcher's next poll: a retry after its backoff, and delayed
 * submissions (run_at ahead), on a process whose poll interval is 30 s and
 * that does not LISTEN, so nothing but the engine's own timing can start
 * them. These are functional checks that the wake-ups exist, with a margin
 * of a second against a poll of 15 to 45 s; they measure nothing
 * (bench/lateness.sh does). */
#include "../support/harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SLOW_POLL "{\"queue\": {\"poll_interval_ms\": 30000, \"listen\": false}}"

/* The start of the run's attempt `attempt` minus its run_at, in ms. */
static long long late_ms(PGconn *db, const char *id, int attempt)
{
    return th_sql_int(db,
                      "SELECT (extract(epoch FROM e.created_at - r.run_at) * 1000)::bigint "
                      "FROM runs r JOIN run_events e ON e.tenant = r.tenant AND e.run_id = r.id "
                      "WHERE r.id = '%s' AND e.message LIKE 'attempt %d started%%'",
                      id, attempt);
}

/* An attempt that fails is retried after the run type's backoff (at most
 * 200 ms for demo), and the retry starts then. Many in a row: the wake-up
 * of a retry was once lost when its claim began a hair before run_at (see
 * store_runs_next_due), one retry in tens on a loaded machine. */
START_TEST(retry_starts_after_its_backoff)
{
    struct th_proc p;
    const char *ci = th_start_fresh(&p, "e2e_due_retry", SLOW_POLL);
    PGconn *db = th_pg(ci);

    for (int i = 0; i < 40; i++) {
        char body[256], id[32];
        json_t *run;
        long long late;

        snprintf(id, sizeof(id), "retry-%d", i);
        snprintf(body, sizeof(body),
                 "{\"alert_type\":\"demo\",\"run_id\":\"%s\",\"data\":{\"duration_ms\":0,"
                 "\"steps\":0,\"fail\":\"first:1\"}}",
                 id);
        free(th_submit(&p, body, 202));
        run = th_wait_done(&p, id, 10);
        ck_assert_str_eq(th_js(run, "outcome"), "succeeded");
        ck_assert_int_eq(th_ji(run, "attempt"), 2);
        json_decref(run);
        late = late_ms(db, id, 2);
        ck_assert_msg(late >= 0 && late < 1000,
                      "the retry of %s started %lld ms after it was due (poll: 30 s)", id, late);
    }
    PQfinish(db);
    th_stop_clean(&p);
}
END_TEST

/* Delayed runs submitted latest first: each starts at its run_at, the
 * dispatcher waking for the earliest and then for the next. */
START_TEST(delayed_runs_start_at_run_at)
{
    struct th_proc p;
    const char *ci = th_start_fresh(&p, "e2e_due_delayed", SLOW_POLL);
    PGconn *db = th_pg(ci);
    long long now_ms = th_sql_int(db, "SELECT (extract(epoch FROM now()) * 1000)::bigint");

    for (int i = 2; i >= 0; i--) {
        char body[256], at[64];
        long long t = now_ms + 1500 + 700LL * i;
        time_t secs = (time_t)(t / 1000);
        struct tm tm;

        gmtime_r(&secs, &tm);
        strftime(at, sizeof(at), "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(body, sizeof(body),
                 "{\"alert_type\":\"demo\",\"run_id\":\"delayed-%d\",\"run_at\":\"%s.%03lldZ\","
                 "\"data\":{\"duration_ms\":0,\"steps\":0}}",
                 i, at, t % 1000);
        free(th_submit(&p, body, 202));
    }
    for (int i = 0; i < 3; i++) {
        char id[32];
        long long late;

        snprintf(id, sizeof(id), "delayed-%d", i);
        th_expect_outcome(&p, id, "succeeded", 10);
        late = late_ms(db, id, 1);
        ck_assert_msg(late >= 0 && late < 1000, "%s started %lld ms after its run_at (poll: 30 s)",
                      id, late);
    }
    PQfinish(db);
    th_stop_clean(&p);
}
END_TEST

static Suite *due_suite(void)
{
    Suite *s = suite_create("e2e_due");
    TCase *tc = tcase_create("due");

    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, retry_starts_after_its_backoff);
    tcase_add_test(tc, delayed_runs_start_at_run_at);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return th_run_suite(due_suite());
}
