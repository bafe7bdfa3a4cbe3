/* tests/e2e/test_retention.c — retention keeps up with a backlog: runs
 * that expire faster than one pass a minute can delete are deleted by
 * passes that follow each other a second apart, and only those. */
#include "../support/harness.h"

#include <stdio.h>
#include <stdlib.h>

#define EXPIRED 3000

START_TEST(retention_catches_up)
{
    char *conninfo = th_db_create("e2e_retention");
    char *cfg = th_config_file("e2e_retention",
                               "{\"queue\": {\"retention_s\": 60, \"retention_batch\": 25}}");
    const char *args[] = {"--config", cfg, NULL};
    PGconn *c = th_pg(conninfo);
    long long left = -1, t0;
    struct th_proc p;

    /* A pass deletes at most 20 statements of 25 runs: 500. EXPIRED runs
     * take 6 passes; at one a minute that would be 6 minutes. */
    PQclear(th_sql(c,
                   "INSERT INTO runs (tenant, id, type, status, outcome, max_attempts, timeout_s, "
                   "input, identity_hash, request_hash, created_at, completed_at) "
                   "SELECT 'default', 'old-' || g, 'demo', 'completed', 'succeeded', 1, 60, "
                   "'{}', 'i' || g, 'r' || g, now() - interval '3 hours', "
                   "now() - interval '2 hours' FROM generate_series(1, %d) g",
                   EXPIRED));
    PQclear(th_sql(c, "INSERT INTO run_events (tenant, run_id, type, status, outcome, progress) "
                      "SELECT tenant, id, 'status', status, outcome, 100 FROM runs"));
    PQclear(th_sql(c, "INSERT INTO runs (tenant, id, type, status, outcome, max_attempts, "
                      "timeout_s, input, identity_hash, request_hash, completed_at) VALUES "
                      "('default', 'recent', 'demo', 'completed', 'succeeded', 1, 60, '{}', "
                      "'ir', 'rr', now()), "
                      "('default', 'active', 'demo', 'queued', 'pending', 1, 60, '{}', 'ia', "
                      "'ra', NULL)"));
    PQclear(th_sql(c, "UPDATE runs SET run_at = now() + interval '1 day' WHERE id = 'active'"));

    th_start(&p, conninfo, args, NULL);
    t0 = th_now_ms();
    while (th_now_ms() - t0 < 50000) {
        left = th_sql_int(c, "SELECT count(*) FROM runs WHERE id LIKE 'old-%%'");
        if (left == 0)
            break;
        th_sleep_ms(250);
    }
    ck_assert_msg(left == 0, "%lld of %d expired runs still there after %lld ms", left, EXPIRED,
                  th_now_ms() - t0);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM run_events WHERE run_id LIKE 'old-%%'"),
                     0);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM runs WHERE id IN ('recent', 'active')"),
                     2);
    ck_assert_int_gt(th_sql_int(c, "SELECT upto FROM run_events_pruned"), 0);
    th_stop_clean(&p);
    PQfinish(c);
    free(cfg);
    free(conninfo);
}
END_TEST

static Suite *retention_suite(void)
{
    Suite *s = suite_create("e2e_retention");
    TCase *tc = tcase_create("retention_catches_up");

    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, retention_catches_up);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return th_run_suite(retention_suite());
}
