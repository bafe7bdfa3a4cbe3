/* tests/e2e/test_rate_limits.c — shared rate limits over HTTP on real
 * processes (docs/schedules.md, "Rate limits"): two replicas under 20 units
 * a second start 400 runs submitted at once, never more than 20 in any
 * one-second window of their started events' database times, and all of
 * them complete; a polling type's checks take units too, against a fake
 * jobs API; what waits is counted, shown by GET /rate_limits and
 * /metrics, and never fails. */
#include "../support/fake_jobs.h"
#include "../support/harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long long sql_int(const char *conninfo, const char *sql)
{
    PGconn *c = th_pg(conninfo);
    long long v = th_sql_int(c, "%s", sql);

    PQfinish(c);
    return v;
}

/* The most started events (claims) in any window [t, t + 1 s), by the
 * database's clock: the sliding window the limit promises. */
static long long most_starts_in_a_second(const char *conninfo)
{
    return sql_int(conninfo,
                   "SELECT coalesce(max(n), 0) FROM (SELECT count(*) OVER (ORDER BY created_at "
                   "RANGE BETWEEN CURRENT ROW AND interval '999999 microseconds' FOLLOWING) AS n "
                   "FROM run_events WHERE message LIKE 'attempt % started by %') x");
}

/* POST /alerts with an array of n demo submissions of 10 ms. */
static void submit_many(const struct th_proc *p, const char *type, int n)
{
    size_t cap = (size_t)n * 96 + 16, len = 0;
    char *body = malloc(cap);
    struct th_resp r;

    len += (size_t)snprintf(body + len, cap - len, "[");
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(body + len, cap - len,
                                "%s{\"alert_type\":\"%s\",\"data\":{\"duration_ms\":10,"
                                "\"steps\":1,\"i\":%d}}",
                                i ? "," : "", type, i);
    snprintf(body + len, cap - len, "]");
    th_post_json(p->url, "/alerts", body, &r);
    ck_assert_msg(r.status == 200, "POST /alerts: HTTP %ld; %.300s", r.status, r.body);
    th_resp_free(&r);
    free(body);
}

/* Two replicas, 20 per second, 400 runs submitted at once. */
START_TEST(two_replicas_share_the_limit)
{
    const char *config = "{\"queue\": {\"workers\": 16, \"max_running\": 200},"
                         " \"rate_limits\": {\"api\": {\"limit\": 20, \"per_s\": 1}},"
                         " \"run_types\": {\"limited\": {\"action\": \"simulate\","
                         " \"rate_limit\": \"api\"}}}";
    char *ci = th_db_create("e2e_rate_two"), *path = th_config_file("e2e_rate_two", config);
    const char *args[] = {"--config", path, NULL};
    struct th_proc a, b;
    struct th_resp r;
    long long t0 = th_now_ms(), done, worst;
    const json_t *l;

    th_start(&a, ci, args, NULL);
    th_start(&b, ci, args, NULL);
    submit_many(&a, "limited", 400);
    do {
        th_sleep_ms(500);
        done = sql_int(ci, "SELECT count(*) FROM runs WHERE outcome = 'succeeded'");
    } while (done < 400 && th_now_ms() - t0 < 60000);
    ck_assert_msg(done == 400, "%lld of 400 runs succeeded in 60 s", done);
    worst = most_starts_in_a_second(ci);
    ck_assert_msg(worst <= 20, "%lld runs started within one second", worst);
    /* Not starved either: 400 at 20 a second take about 20 s. */
    ck_assert_msg(th_now_ms() - t0 < 40000, "400 runs took %lld ms", th_now_ms() - t0);
    ck_assert_int_eq(sql_int(ci, "SELECT count(*) FROM runs WHERE outcome <> 'succeeded' OR "
                                 "attempt <> 1"),
                     0);
    /* What waited is counted, and the limit is shown. */
    th_get(a.url, "/metrics", &r);
    ck_assert_msg(strstr(r.body, "opsrun_rate_limit_waits_total{limit=\"api\"} ") &&
                      !strstr(r.body, "opsrun_rate_limit_waits_total{limit=\"api\"} 0\n"),
                  "no waits counted");
    ck_assert_ptr_nonnull(strstr(r.body, "opsrun_rate_limit_used{limit=\"api\"} "));
    th_resp_free(&r);
    th_get(b.url, "/rate_limits", &r);
    ck_assert_int_eq(r.status, 200);
    l = json_array_get(json_object_get(r.json, "rate_limits"), 0);
    ck_assert_str_eq(th_js(l, "name"), "api");
    ck_assert_int_eq(th_ji(l, "limit"), 20);
    ck_assert_int_eq(th_ji(l, "per_s"), 1);
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(l, "run_types"), 0)),
                     "limited");
    th_resp_free(&r);
    th_stop_clean(&a);
    th_stop_clean(&b);
    free(path);
    free(ci);
}
END_TEST

/* A rest_job type under 10 units a second: 10 runs, each a submit and 5
 * checks, are 60 units, so at least 5 s of windows; the checks that wait
 * are postponed, not failed, and every run succeeds. A second type under a
 * limit of its own is claimed in the same claims and goes on. */
START_TEST(checks_take_units)
{
    int port = fake_jobs_start();
    char config[4096], *ci, *path;
    const char *args[3] = {"--config", NULL, NULL};
    struct th_proc p;
    long long t0, took, done;

#define JOB_TYPE(name, limit)                                                                      \
    " \"" name "\": {\"action\": \"rest_job\", \"rate_limit\": \"" limit "\","                     \
    " \"poll\": {\"initial_delay_ms\": 50, \"multiplier\": 1, \"max_delay_ms\": 50,"               \
    " \"jitter_pct\": 0},"                                                                         \
    " \"params\": {"                                                                               \
    "  \"submit\": {\"method\": \"POST\", \"url\": \"http://127.0.0.1:%d/jobs\","                  \
    "   \"body\": {\"scenario\": \"done_after:5\", \"run\": \"{{run_id}}\"}},"                     \
    "  \"id_pointer\": \"/id\","                                                                   \
    "  \"status\": {\"url\": \"http://127.0.0.1:%d/jobs/{{external_id}}\"},"                       \
    "  \"state_pointer\": \"/state\","                                                             \
    "  \"state_map\": {\"RUNNING\": \"running\", \"DONE\": \"succeeded\"}}}"
    /* "fast" under a limit of its own, far above its load: its checks go
     * on beside the spent limit of "job", in the same claims. */
    snprintf(config, sizeof(config),
             "{\"poller\": {\"interval_ms\": 100},"
             " \"rate_limits\": {\"api\": {\"limit\": 10, \"per_s\": 1},"
             " \"other\": {\"limit\": 1000, \"per_s\": 1}},"
             " \"run_types\": {" JOB_TYPE("job", "api") "," JOB_TYPE("fast", "other") "}}",
             port, port, port, port);
    ci = th_db_create("e2e_rate_checks");
    path = th_config_file("e2e_rate_checks", config);
    args[1] = path;
    th_start(&p, ci, args, NULL);
    t0 = th_now_ms();
    submit_many(&p, "job", 10);
    submit_many(&p, "fast", 10);
    do {
        th_sleep_ms(200);
        done = sql_int(ci, "SELECT count(*) FROM runs WHERE status = 'completed' AND type = 'job'");
    } while (done < 10 && th_now_ms() - t0 < 40000);
    took = th_now_ms() - t0;
    ck_assert_msg(done == 10, "%lld of 10 runs completed", done);
    ck_assert_int_eq(sql_int(ci, "SELECT count(*) FROM runs WHERE outcome = 'succeeded'"), 20);
    ck_assert_int_eq(fake_jobs_checks(), 100);
    ck_assert_msg(took >= 4500, "60 units at 10 a second took only %lld ms", took);
    /* The other limit's runs were not held back by the spent one. */
    ck_assert_int_eq(sql_int(ci, "SELECT count(*) FROM runs WHERE type = 'fast' AND completed_at "
                                 "> (SELECT min(completed_at) FROM runs WHERE type = 'job') + "
                                 "interval '3 s'"),
                     0);
    /* A check that waited for its unit is not a failed check. */
    ck_assert_int_eq(sql_int(ci, "SELECT count(*) FROM run_events WHERE message LIKE '%failed%'"),
                     0);
    th_stop_clean(&p);
    fake_jobs_stop();
    free(path);
    free(ci);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("rate_limits");
    TCase *t = tcase_create("rate_limits");

    tcase_set_timeout(t, 120);
    tcase_add_test(t, two_replicas_share_the_limit);
    tcase_add_test(t, checks_take_units);
    suite_add_tcase(s, t);
    return th_run_suite(s);
}
