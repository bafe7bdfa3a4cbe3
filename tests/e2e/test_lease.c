/* tests/e2e/test_lease.c — a worker whose heartbeat cannot reach the
 * database stops its action at the end of the run's lease, before another
 * replica may rescue the run, even though the maintenance thread is stuck
 * inside the heartbeat statement; the run is then rescued and completed by
 * a new attempt. */
#include "../support/harness.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The duration_ms of the worker's "not settling run=<id> attempt=<n> ...
 * by=worker" log line (an attempt that lost its lease writes nothing), or
 * -1 when there is none yet. The completer writes the same line with
 * by=completer for a finished run it could not write in time. */
static long finished_after_ms(const char *log, const char *id, int attempt)
{
    char want[200], line[1024];
    long ms = -1;
    FILE *f = fopen(log, "r");

    snprintf(want, sizeof(want), "not settling run=%s attempt=%d ", id, attempt);
    while (f && fgets(line, sizeof(line), f)) {
        const char *d = strstr(line, "duration_ms=");
        if (strstr(line, want) && strstr(line, " by=worker:") && d)
            ms = atol(d + 12);
    }
    if (f)
        fclose(f);
    return ms;
}

START_TEST(lease_stops_the_action_when_heartbeats_hang)
{
    char *ci = th_db_create("e2e_lease");
    char *cfg = th_config_file("lease", "{\"queue\": {\"heartbeat_interval_s\": 1, "
                                        "\"orphan_after_s\": 3, \"orphan_scan_interval_s\": 1}}");
    const char *args[] = {"--config", cfg, "--workers", "2", NULL};
    PGconn *db = th_pg(ci), *locker = th_pg(ci);
    struct th_proc p;
    long long t0;
    long ms = -1;
    char *id, *outcome;

    th_start(&p, ci, args, NULL);
    id =
        th_submit(&p, "{\"alert_type\":\"demo\",\"data\":{\"duration_ms\":8000,\"steps\":8}}", 202);
    for (t0 = th_now_ms(); th_now_ms() - t0 < 5000; th_sleep_ms(20))
        if (th_sql_int(db, "SELECT count(*) FROM runs WHERE status = 'running'") == 1)
            break;
    ck_assert_int_eq(th_sql_int(db, "SELECT count(*) FROM runs WHERE status = 'running'"), 1);

    /* Every statement on runs now waits, the heartbeat among them. */
    PQclear(th_sql(locker, "BEGIN"));
    PQclear(th_sql(locker, "LOCK TABLE runs IN ACCESS EXCLUSIVE MODE"));
    t0 = th_now_ms();
    while (th_now_ms() - t0 < 5000 && (ms = finished_after_ms(p.log, id, 1)) < 0)
        th_sleep_ms(50);
    PQclear(th_sql(locker, "COMMIT"));

    /* The lease is orphan_after_s - heartbeat_interval_s = 2 s from the last
     * heartbeat: the 8 s action stopped long before its end. */
    ck_assert_msg(ms >= 0, "attempt 1 did not stop while the heartbeat hung (log %s)", p.log);
    ck_assert_msg(ms < 5000, "attempt 1 ran %ld ms, want it stopped by its lease", ms);
    {
        char line[1024];
        ck_assert_msg(!th_log_find(p.log, "by=completer", line, sizeof(line)),
                      "the completer gave up a run: %s", line);
    }

    /* Nothing was written for attempt 1; the run is rescued and retried. */
    outcome = th_wait_run(p.url, id, 30);
    ck_assert_msg(outcome && strcmp(outcome, "succeeded") == 0, "outcome %s",
                  outcome ? outcome : "(timeout)");
    ck_assert_int_eq(th_sql_int(db, "SELECT attempt FROM runs WHERE id = '%s'", id), 2);
    ck_assert_int_eq(th_sql_int(db,
                                "SELECT count(*) FROM run_events WHERE run_id = '%s' AND "
                                "message LIKE 'orphan rescued%%'",
                                id),
                     1);
    ck_assert_int_eq(th_stop(&p, SIGTERM, 20), 0);
    free(outcome);
    free(id);
    PQfinish(db);
    PQfinish(locker);
    free(cfg);
    free(ci);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("lease");
    TCase *tc = tcase_create("lease");

    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, lease_stops_the_action_when_heartbeats_hang);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
