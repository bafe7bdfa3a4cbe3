/* tests/unit/test_metrics.c — the Check suite for common/metrics.c: the
 * exact exposition text of each kind of family, label values kept to their
 * sets, the values added later (a reload's) and their bound, escaping, number formatting, exact
 * counts under concurrent recording, and the single-flight cache.
 *
 * System headers come before metrics.h, ahead of common.h's poison pragma. */
#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/metrics.h"

static const char *const types[] = {"demo", "etl"};
static const char *const outcomes[] = {"succeeded", "failed"};
static const char *const routes[] = {"/alerts", "/runs/{id}", "/runs/{id}", "/metrics"};

static struct metrics *new_metrics(void)
{
    const struct metrics_setup su = {
        .types = types,
        .ntypes = 2,
        .outcomes = outcomes,
        .noutcomes = 2,
        .routes = routes,
        .nroutes = 4,
        .version = "1.2.3",
        .commit = "abc\"def",
    };
    return metrics_new(&su);
}

/* The rendered text (heap). */
static char *render(const struct metrics *m)
{
    struct dynbuf b;

    dynbuf_init(&b, 1 << 20);
    ck_assert_int_eq(metrics_render(m, &b), ST_OK);
    return dynbuf_take(&b);
}

/* Asserts that text has line as one whole line. */
#define ck_assert_line(text, line)                                                                 \
    do {                                                                                           \
        char want_[512];                                                                           \
        snprintf(want_, sizeof(want_), "\n%s\n", (line));                                          \
        if (!strstr((text), want_))                                                                \
            fprintf(stderr, "%s\n", (text));                                                       \
        ck_assert_msg(strstr((text), want_) != NULL, "no line \"%s\" (text above)", (line));       \
    } while (0)
static int occurrences(const char *text, const char *part)
{
    int n = 0;

    for (const char *p = strstr(text, part); p; p = strstr(p + 1, part))
        n++;
    return n;
}

#define ck_assert_no(text, part)                                                                   \
    ck_assert_msg(strstr((text), (part)) == NULL, "\"%s\" should not be in the text", (part))

START_TEST(fresh_registry)
{
    struct metrics *m = new_metrics();
    char *t = render(m);

    ck_assert_msg(strncmp(t, "# HELP opsrun_runs_submitted_total ", 35) == 0, "%s", t);
    ck_assert_line(t, "# TYPE opsrun_runs_submitted_total counter");
    ck_assert_line(t, "opsrun_runs_submitted_total{type=\"demo\"} 0");
    ck_assert_line(t, "opsrun_runs_submitted_total{type=\"etl\"} 0");
    ck_assert_line(t, "opsrun_runs_completed_total{type=\"etl\",outcome=\"failed\"} 0");
    ck_assert_line(t, "# TYPE opsrun_run_duration_seconds histogram");
    ck_assert_line(t, "opsrun_run_duration_seconds_bucket{type=\"demo\",le=\"0.1\"} 0");
    ck_assert_line(t, "opsrun_run_duration_seconds_bucket{type=\"demo\",le=\"+Inf\"} 0");
    ck_assert_line(t, "opsrun_run_duration_seconds_sum{type=\"demo\"} 0");
    ck_assert_line(t, "opsrun_run_duration_seconds_count{type=\"demo\"} 0");
    ck_assert_line(t, "opsrun_claim_duration_seconds_bucket{le=\"0.0025\"} 0");
    ck_assert_line(t, "opsrun_claim_duration_seconds_count 0");
    ck_assert_line(t, "opsrun_poll_checks_total{type=\"demo\",result=\"running\"} 0");
    ck_assert_line(t, "opsrun_poll_hooks_total{type=\"etl\",result=\"failed\"} 0");
    /* Sparse: the header, but no series before the first request. */
    ck_assert_line(t, "# TYPE opsrun_http_requests_total counter");
    ck_assert_no(t, "opsrun_http_requests_total{");
    ck_assert_no(t, "opsrun_http_request_duration_seconds_bucket");
    ck_assert_line(t, "opsrun_build_info{version=\"1.2.3\",commit=\"abc\\\"def\"} 1");
    ck_assert_line(t, "# TYPE opsrun_start_time_seconds gauge");
    free(t);
    metrics_free(m);
}
END_TEST

START_TEST(runs_and_unknown_values)
{
    struct metrics *m = new_metrics();
    char *t;

    metrics_run_submitted(m, "demo");
    metrics_run_submitted(m, "demo");
    metrics_run_submitted(m, "etl");
    metrics_run_submitted(m, "nope"); /* not configured: dropped */
    metrics_run_submitted(m, NULL);
    metrics_run_completed(m, "demo", "succeeded", 0.3);
    metrics_run_completed(m, "demo", "succeeded", 12);
    metrics_run_completed(m, "etl", "failed", -1);  /* counted, no duration */
    metrics_run_completed(m, "demo", "pending", 1); /* not an outcome: dropped */
    metrics_run_claimed(m, "etl", 0.02);
    metrics_run_retried(m, "etl");
    metrics_claim_latency(m, 0.004);
    metrics_poll_check(m, "etl", METRICS_CHECK_ERROR);
    metrics_poll_check(m, "etl", "maybe");
    metrics_poll_budget_exhausted(m, "etl");
    metrics_poll_hooks(m, "etl", true);
    t = render(m);
    ck_assert_line(t, "opsrun_runs_submitted_total{type=\"demo\"} 2");
    ck_assert_line(t, "opsrun_runs_submitted_total{type=\"etl\"} 1");
    ck_assert_no(t, "nope");
    ck_assert_line(t, "opsrun_runs_completed_total{type=\"demo\",outcome=\"succeeded\"} 2");
    ck_assert_line(t, "opsrun_runs_completed_total{type=\"demo\",outcome=\"failed\"} 0");
    ck_assert_line(t, "opsrun_runs_completed_total{type=\"etl\",outcome=\"failed\"} 1");
    ck_assert_no(t, "pending");
    ck_assert_line(t, "opsrun_run_duration_seconds_bucket{type=\"demo\",le=\"0.25\"} 0");
    ck_assert_line(t, "opsrun_run_duration_seconds_bucket{type=\"demo\",le=\"0.5\"} 1");
    ck_assert_line(t, "opsrun_run_duration_seconds_bucket{type=\"demo\",le=\"10\"} 1");
    ck_assert_line(t, "opsrun_run_duration_seconds_bucket{type=\"demo\",le=\"30\"} 2");
    ck_assert_line(t, "opsrun_run_duration_seconds_bucket{type=\"demo\",le=\"+Inf\"} 2");
    ck_assert_line(t, "opsrun_run_duration_seconds_sum{type=\"demo\"} 12.3");
    ck_assert_line(t, "opsrun_run_duration_seconds_count{type=\"demo\"} 2");
    ck_assert_line(t, "opsrun_run_duration_seconds_count{type=\"etl\"} 0");
    ck_assert_line(t, "opsrun_run_queue_wait_seconds_bucket{type=\"etl\",le=\"0.01\"} 0");
    ck_assert_line(t, "opsrun_run_queue_wait_seconds_bucket{type=\"etl\",le=\"0.025\"} 1");
    ck_assert_line(t, "opsrun_run_retries_total{type=\"etl\"} 1");
    ck_assert_line(t, "opsrun_claim_duration_seconds_bucket{le=\"0.005\"} 1");
    ck_assert_line(t, "opsrun_claim_duration_seconds_sum 0.004");
    ck_assert_line(t, "opsrun_poll_checks_total{type=\"etl\",result=\"error\"} 1");
    ck_assert_no(t, "maybe");
    ck_assert_line(t, "opsrun_poll_budget_exhausted_total{type=\"etl\"} 1");
    ck_assert_line(t, "opsrun_poll_hooks_total{type=\"etl\",result=\"failed\"} 1");
    ck_assert_line(t, "opsrun_poll_hooks_total{type=\"etl\",result=\"ok\"} 0");
    free(t);
    metrics_free(m);
}
END_TEST

START_TEST(http_routes_and_codes)
{
    struct metrics *m = new_metrics();
    char *t;

    metrics_http_request(m, "/runs/{id}", 200, 0.0007);
    metrics_http_request(m, "/runs/{id}", 200, 0.002);
    metrics_http_request(m, "/runs/{id}", 404, 0.001);
    metrics_http_request(m, NULL, 404, 0.001);
    metrics_http_request(m, "/alerts", 418, 0.001);
    metrics_http_request(m, "/runs/01HX", 200, 0.001); /* a raw path: dropped */
    t = render(m);
    ck_assert_line(t, "opsrun_http_requests_total{route=\"/runs/{id}\",code=\"200\"} 2");
    ck_assert_line(t, "opsrun_http_requests_total{route=\"/runs/{id}\",code=\"404\"} 1");
    ck_assert_line(t, "opsrun_http_requests_total{route=\"unmatched\",code=\"404\"} 1");
    ck_assert_line(t, "opsrun_http_requests_total{route=\"/alerts\",code=\"other\"} 1");
    ck_assert_no(t, "01HX");
    ck_assert_no(t, "route=\"/metrics\"");
    ck_assert_line(t, "opsrun_http_request_duration_seconds_bucket{route=\"/runs/{id}\",le="
                      "\"0.0005\"} 0");
    ck_assert_line(t, "opsrun_http_request_duration_seconds_bucket{route=\"/runs/{id}\",le="
                      "\"0.001\"} 2");
    ck_assert_line(t, "opsrun_http_request_duration_seconds_count{route=\"/runs/{id}\"} 3");
    ck_assert_line(t, "opsrun_http_request_duration_seconds_count{route=\"unmatched\"} 1");
    /* The repeated template is one series, not two. */
    ck_assert_int_eq(occurrences(t, "_count{route=\"/runs/{id}\"}"), 1);
    free(t);
    metrics_free(m);
}
END_TEST

START_TEST(null_registry_is_a_no_op)
{
    struct dynbuf b;
    int v = 0;

    metrics_run_submitted(NULL, "demo");
    metrics_run_completed(NULL, "demo", "succeeded", 1);
    metrics_http_request(NULL, "/alerts", 202, 0.1);
    dynbuf_init(&b, 100);
    ck_assert_int_eq(metrics_render(NULL, &b), ST_OK);
    ck_assert_uint_eq(dynbuf_len(&b), 0);
    ck_assert_int_eq(metrics_cache_begin(NULL, 1000, 0, &v, sizeof(v)), METRICS_REFRESH);
    metrics_cache_end(NULL, &v, sizeof(v));
    metrics_free(NULL);
}
END_TEST

START_TEST(put_escapes_and_formats)
{
    struct dynbuf b;

    dynbuf_init(&b, 1000);
    ck_assert_int_eq(metrics_put_header(&b, "opsrun_x", "gauge", "a \\ b\nc \"q\""), ST_OK);
    ck_assert_int_eq(metrics_put_sample(&b, "opsrun_x",
                                        (const char *const[]){"k", "a\"b\\c\nd", "j", "", NULL},
                                        0.1),
                     ST_OK);
    ck_assert_int_eq(metrics_put_sample(&b, "opsrun_x", NULL, 1234567), ST_OK);
    ck_assert_int_eq(metrics_put_sample(&b, "opsrun_x", NULL, 2.5e-7), ST_OK);
    ck_assert_int_eq(metrics_put_sample(&b, "opsrun_x", NULL, 1.0 / 3), ST_OK);
    ck_assert_str_eq(dynbuf_ptr(&b), "# HELP opsrun_x a \\\\ b\\nc \"q\"\n"
                                     "# TYPE opsrun_x gauge\n"
                                     "opsrun_x{k=\"a\\\"b\\\\c\\nd\",j=\"\"} 0.1\n"
                                     "opsrun_x 1234567\n"
                                     "opsrun_x 2.5e-07\n"
                                     "opsrun_x 0.3333333333333333\n");
    dynbuf_free(&b);
}
END_TEST

START_TEST(render_reports_the_cap)
{
    struct metrics *m = new_metrics();
    struct dynbuf b;

    dynbuf_init(&b, 300);
    ck_assert_int_eq(metrics_render(m, &b), ST_TOO_LARGE);
    dynbuf_free(&b);
    metrics_free(m);
}
END_TEST

/* ---- concurrency ---- */

/* ---- label values added later (a reload) ---- */

START_TEST(labels_added_later)
{
    struct metrics *m = new_metrics();
    static const char *const more_types[] = {"etl", "ingest"};
    static const char *const scheds[] = {"nightly"};
    static const char *const limits[] = {"api"};
    static const char *const notifiers[] = {"slack"};
    const struct metrics_setup more = {.types = more_types,
                                       .ntypes = 2,
                                       .schedules = scheds,
                                       .nschedules = 1,
                                       .limits = limits,
                                       .nlimits = 1,
                                       .notifiers = notifiers,
                                       .nnotifiers = 1};
    char *t;

    metrics_run_submitted(m, "etl");
    metrics_run_submitted(m, "ingest"); /* not known yet: dropped */
    metrics_schedule_slot(m, "nightly", METRICS_SLOT_CREATED, 1);
    ck_assert_uint_eq(metrics_add_labels(m, &more), 0);
    ck_assert_uint_eq(metrics_add_labels(m, &more), 0); /* known now: nothing to add */
    metrics_run_submitted(m, "ingest");
    metrics_run_submitted(m, "etl");
    metrics_run_completed(m, "ingest", "failed", 2);
    metrics_schedule_slot(m, "nightly", METRICS_SLOT_MISSED, 3);
    metrics_rate_limit_wait(m, "api", 2);
    metrics_notification(m, "slack", METRICS_NOTIFY_DELIVERED, 0.2);
    t = render(m);
    /* the counts before the addition are kept, each series written once */
    ck_assert_line(t, "opsrun_runs_submitted_total{type=\"etl\"} 2");
    ck_assert_line(t, "opsrun_runs_submitted_total{type=\"demo\"} 0");
    ck_assert_line(t, "opsrun_runs_submitted_total{type=\"ingest\"} 1");
    ck_assert_int_eq(occurrences(t, "opsrun_runs_submitted_total{type=\"etl\"}"), 1);
    ck_assert_int_eq(occurrences(t, "opsrun_runs_submitted_total{"), 3);
    ck_assert_line(t, "opsrun_runs_completed_total{type=\"ingest\",outcome=\"failed\"} 1");
    ck_assert_line(t, "opsrun_runs_completed_total{type=\"ingest\",outcome=\"succeeded\"} 0");
    ck_assert_line(t, "opsrun_run_duration_seconds_count{type=\"ingest\"} 1");
    ck_assert_line(t, "opsrun_poll_hooks_total{type=\"ingest\",result=\"ok\"} 0");
    ck_assert_line(t, "opsrun_schedule_runs_total{schedule=\"nightly\",result=\"created\"} 0");
    ck_assert_line(t, "opsrun_schedule_runs_total{schedule=\"nightly\",result=\"missed\"} 3");
    ck_assert_line(t, "opsrun_rate_limit_waits_total{limit=\"api\"} 2");
    ck_assert_line(t, "opsrun_notifications_total{notifier=\"slack\",result=\"delivered\"} 1");
    ck_assert_line(t, "opsrun_notification_latency_seconds_count{notifier=\"slack\"} 1");
    free(t);
    metrics_free(m);
}
END_TEST

START_TEST(labels_added_are_bounded)
{
    struct metrics *m = new_metrics();
    enum { N = METRICS_LABELS_ADDED_MAX + 3 };
    char names[N][16], line[128], *t;
    const char *v[N];

    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof(names[i]), "t%d", i);
        v[i] = names[i];
    }
    ck_assert_uint_eq(metrics_add_labels(m, &(struct metrics_setup){.types = v, .ntypes = N}), 3);
    ck_assert_uint_eq(metrics_add_labels(m, &(struct metrics_setup){.types = v, .ntypes = 2}), 0);
    for (int i = 0; i < N; i++)
        metrics_run_retried(m, v[i]);
    t = render(m);
    snprintf(line, sizeof(line), "opsrun_run_retries_total{type=\"t%d\"} 1",
             METRICS_LABELS_ADDED_MAX - 1);
    ck_assert_line(t, line);
    snprintf(line, sizeof(line), "type=\"t%d\"", METRICS_LABELS_ADDED_MAX);
    ck_assert_no(t, line);
    ck_assert_int_eq(occurrences(t, "opsrun_run_retries_total{"), METRICS_LABELS_ADDED_MAX + 2);
    free(t);
    metrics_free(m);
}
END_TEST

/* Recording races the additions: every count of a value known throughout
 * is exact, and nothing is lost or torn (ASan, TSan). */
static void *record_while_added(void *arg)
{
    struct metrics *m = arg;
    char name[16];

    for (int i = 0; i < 20000; i++) {
        snprintf(name, sizeof(name), "n%d", i % 64);
        metrics_run_submitted(m, "demo");
        metrics_run_submitted(m, name);
    }
    return NULL;
}

START_TEST(labels_added_while_recording)
{
    struct metrics *m = new_metrics();
    pthread_t th[2];
    char names[64][16], *t;
    const char *v[1];

    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, record_while_added, m), 0);
    for (int i = 0; i < 64; i++) {
        snprintf(names[i], sizeof(names[i]), "n%d", i);
        v[0] = names[i];
        ck_assert_uint_eq(metrics_add_labels(m, &(struct metrics_setup){.types = v, .ntypes = 1}),
                          0);
    }
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    t = render(m);
    ck_assert_line(t, "opsrun_runs_submitted_total{type=\"demo\"} 40000");
    ck_assert_int_eq(occurrences(t, "opsrun_runs_submitted_total{"), 66);
    free(t);
    metrics_free(m);
}
END_TEST

#define THREADS 8
#define PER_THREAD 50000

static void *hammer(void *arg)
{
    struct metrics *m = arg;

    for (int i = 0; i < PER_THREAD; i++) {
        metrics_http_request(m, "/alerts", 202, 0.5);
        metrics_run_submitted(m, i % 2 ? "demo" : "etl");
    }
    return NULL;
}

START_TEST(concurrent_recording_is_exact)
{
    struct metrics *m = new_metrics();
    pthread_t th[THREADS];
    char line[200], *t;

    for (int i = 0; i < THREADS; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, hammer, m), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    t = render(m);
    snprintf(line, sizeof(line), "opsrun_http_requests_total{route=\"/alerts\",code=\"202\"} %d",
             THREADS * PER_THREAD);
    ck_assert_line(t, line);
    snprintf(line, sizeof(line), "opsrun_http_request_duration_seconds_sum{route=\"/alerts\"} %d",
             THREADS * PER_THREAD / 2);
    ck_assert_line(t, line);
    snprintf(line, sizeof(line), "opsrun_runs_submitted_total{type=\"demo\"} %d",
             THREADS * PER_THREAD / 2);
    ck_assert_line(t, line);
    free(t);
    metrics_free(m);
}
END_TEST

/* ---- the cache ---- */

struct waiter_arg {
    struct metrics *m;
    enum metrics_cached got;
    int value;
};

static void *cache_waiter(void *arg)
{
    struct waiter_arg *w = arg;

    w->got = metrics_cache_begin(w->m, 60000, 10000, &w->value, sizeof(w->value));
    return NULL;
}

START_TEST(cache_single_flight)
{
    struct metrics *m = new_metrics();
    struct waiter_arg w = {.m = m};
    pthread_t th;
    int v = 0, one = 1, two = 2;

    ck_assert_int_eq(metrics_cache_begin(m, 60000, 0, &v, sizeof(v)), METRICS_REFRESH);
    /* A refresh is under way and there is no value yet. */
    ck_assert_int_eq(metrics_cache_begin(m, 60000, 0, &v, sizeof(v)), METRICS_NONE);
    ck_assert_int_eq(pthread_create(&th, NULL, cache_waiter, &w), 0);
    metrics_cache_end(m, &one, sizeof(one));
    pthread_join(th, NULL);
    ck_assert_int_eq(w.got, METRICS_CACHED);
    ck_assert_int_eq(w.value, 1);
    ck_assert_int_eq(metrics_cache_begin(m, 60000, 0, &v, sizeof(v)), METRICS_CACHED);
    ck_assert_int_eq(v, 1);
    /* Stale: one caller refreshes, the others get the old value meanwhile. */
    ck_assert_int_eq(metrics_cache_begin(m, 0, 0, &v, sizeof(v)), METRICS_REFRESH);
    v = 0;
    ck_assert_int_eq(metrics_cache_begin(m, 0, 5000, &v, sizeof(v)), METRICS_CACHED);
    ck_assert_int_eq(v, 1);
    metrics_cache_end(m, &two, sizeof(two));
    ck_assert_int_eq(metrics_cache_begin(m, 60000, 0, &v, sizeof(v)), METRICS_CACHED);
    ck_assert_int_eq(v, 2);
    metrics_free(m);
}
END_TEST

static Suite *metrics_suite(void)
{
    Suite *s = suite_create("metrics");
    TCase *tc = tcase_create("core");

    tcase_add_test(tc, fresh_registry);
    tcase_add_test(tc, runs_and_unknown_values);
    tcase_add_test(tc, http_routes_and_codes);
    tcase_add_test(tc, null_registry_is_a_no_op);
    tcase_add_test(tc, put_escapes_and_formats);
    tcase_add_test(tc, render_reports_the_cap);
    tcase_add_test(tc, labels_added_later);
    tcase_add_test(tc, labels_added_are_bounded);
    tcase_add_test(tc, labels_added_while_recording);
    tcase_add_test(tc, concurrent_recording_is_exact);
    tcase_add_test(tc, cache_single_flight);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(metrics_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
