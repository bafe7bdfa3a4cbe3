/* tests/unit/test_limits.c — the Check suite for common/limits.c: the token
 * bucket's arithmetic on an injected clock, submissions per caller with
 * their exact refusal, the bounded table of callers, connections per
 * address (the 429 zone and the hard limit), streams per tenant, the
 * counters, and the problems a refusal becomes.
 *
 * System headers come before limits.h, ahead of common.h's poison pragma. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "common/limits.h"
#include "handlers/handlers.h"

static int64_t fake_now;

static int64_t fake_clock(void)
{
    return fake_now;
}

static struct limits *limits_with(int conns, int streams, int rate, int burst, int callers)
{
    const struct limits_options o = {.conns_per_addr = conns,
                                     .streams_per_tenant = streams,
                                     .submit_rate_per_s = rate,
                                     .submit_burst = burst,
                                     .max_callers = callers,
                                     .clock_ms = fake_clock};
    fake_now = 1000000;
    return limits_new(&o);
}

static int64_t total(struct limits *l, enum limits_event ev)
{
    struct limits_stats s;

    limits_stats(l, &s);
    return s.total[ev];
}

/* ---- the bucket ---------------------------------------------------------- */

START_TEST(bucket_starts_full_and_empties)
{
    struct bucket b;
    int64_t wait = -1;

    bucket_init(&b, 3, 0);
    for (int i = 0; i < 3; i++)
        ck_assert(bucket_take(&b, 10, 3, 0, &wait));
    ck_assert(!bucket_take(&b, 10, 3, 0, &wait));
    ck_assert_int_eq(wait, 100); /* one token at 10 a second */
}
END_TEST

START_TEST(bucket_refills_at_its_rate)
{
    struct bucket b;
    int64_t wait = -1;

    bucket_init(&b, 1, 0);
    ck_assert(bucket_take(&b, 3, 1, 0, NULL));
    ck_assert(!bucket_take(&b, 3, 1, 333, &wait)); /* 999 thousandths */
    ck_assert_int_eq(wait, 1);
    ck_assert(bucket_take(&b, 3, 1, 334, &wait)); /* 1002, held to the burst: 1000 */
    ck_assert(!bucket_take(&b, 3, 1, 334, &wait));
    ck_assert_int_eq(wait, 334); /* 1000 / 3, rounded up */
    /* with room above one token, the remainder is kept */
    bucket_init(&b, 2, 0);
    ck_assert(bucket_take(&b, 3, 2, 0, NULL));
    ck_assert(bucket_take(&b, 3, 2, 0, NULL));
    ck_assert(bucket_take(&b, 3, 2, 334, NULL)); /* 1002 */
    ck_assert(!bucket_take(&b, 3, 2, 334, &wait));
    ck_assert_int_eq(wait, 333); /* (1000 - 2) / 3, rounded up */
}
END_TEST

START_TEST(bucket_holds_at_most_burst)
{
    struct bucket b;
    int n = 0;

    bucket_init(&b, 5, 0);
    while (bucket_take(&b, 1, 5, 0, NULL))
        n++;
    ck_assert_int_eq(n, 5);
    /* a year later, still 5 (no overflow of elapsed time times rate) */
    for (n = 0; bucket_take(&b, 1000000, 5, 365LL * 86400 * 1000, NULL); n++)
        ;
    ck_assert_int_eq(n, 5);
}
END_TEST

START_TEST(bucket_ignores_a_clock_going_back)
{
    struct bucket b;
    int64_t wait = -1;

    bucket_init(&b, 1, 5000);
    ck_assert(bucket_take(&b, 1, 1, 5000, NULL));
    ck_assert(!bucket_take(&b, 1, 1, 1000, &wait));
    ck_assert_int_eq(wait, 1000);
    ck_assert(!bucket_take(&b, 1, 1, 5999, &wait)); /* measured from 5000, not 1000 */
    ck_assert(bucket_take(&b, 1, 1, 6000, &wait));
}
END_TEST

/* ---- submissions --------------------------------------------------------- */

START_TEST(submit_burst_then_refused_then_again)
{
    struct limits *l = limits_with(0, 0, 2, 3, 0);
    struct error err = {0};
    int retry = 0;

    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(limits_submit(l, "addr:10.0.0.1", &retry, &err), ST_OK);
    ck_assert_int_eq(limits_submit(l, "addr:10.0.0.1", &retry, &err), ST_LIMITED);
    ck_assert_int_eq(retry, 1); /* 500 ms, rounded up to whole seconds */
    ck_assert_str_eq(err.message,
                     "too many submissions (limit 2 per second, bursts of 3); retry in 1 s");
    ck_assert_int_eq(total(l, LIMITS_SUBMIT_REFUSED), 1);
    /* another caller has its own bucket */
    ck_assert_int_eq(limits_submit(l, "addr:10.0.0.2", &retry, &err), ST_OK);
    fake_now += 499;
    ck_assert_int_eq(limits_submit(l, "addr:10.0.0.1", &retry, &err), ST_LIMITED);
    fake_now += 1;
    ck_assert_int_eq(limits_submit(l, "addr:10.0.0.1", &retry, &err), ST_OK);
    ck_assert_int_eq(total(l, LIMITS_SUBMIT_REFUSED), 2);
    limits_free(l);
}
END_TEST

START_TEST(submit_retry_after_rounds_up)
{
    struct limits *l = limits_with(0, 0, 1, 1, 0);
    struct error err = {0};
    int retry = 0;

    ck_assert_int_eq(limits_submit(l, "c", &retry, &err), ST_OK);
    fake_now += 1;
    ck_assert_int_eq(limits_submit(l, "c", &retry, &err), ST_LIMITED);
    ck_assert_int_eq(retry, 1); /* 999 ms */
    limits_free(l);
    l = limits_with(0, 0, 1, 1, 0);
    ck_assert_int_eq(limits_submit(l, "c", &retry, &err), ST_OK);
    ck_assert_int_eq(limits_submit(l, "c", &retry, &err), ST_LIMITED);
    ck_assert_int_eq(retry, 1); /* exactly 1000 ms */
    limits_free(l);
}
END_TEST

START_TEST(submit_unlimited_when_rate_is_zero)
{
    struct limits *l = limits_with(0, 0, 0, 1, 0);
    struct limits_stats s;
    int retry = 0;

    for (int i = 0; i < 1000; i++)
        ck_assert_int_eq(limits_submit(l, "c", &retry, NULL), ST_OK);
    limits_stats(l, &s);
    ck_assert_int_eq(s.callers, 0);
    limits_free(l);
}
END_TEST

/* A flood of distinct callers keeps at most max_callers buckets; the one
 * forgotten starts again with a full burst. */
START_TEST(callers_are_bounded)
{
    struct limits *l = limits_with(0, 0, 1, 1, 3);
    struct limits_stats s;
    char key[32];
    int retry = 0;

    ck_assert_int_eq(limits_submit(l, "first", &retry, NULL), ST_OK);
    ck_assert_int_eq(limits_submit(l, "first", &retry, NULL), ST_LIMITED);
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof(key), "flood-%d", i);
        ck_assert_int_eq(limits_submit(l, key, &retry, NULL), ST_OK);
        limits_stats(l, &s);
        ck_assert_int_le(s.callers, 3);
    }
    ck_assert_int_eq(limits_submit(l, "first", &retry, NULL), ST_OK);
    limits_free(l);
}
END_TEST

/* A caller seen again moves to the front: the oldest other one goes. */
START_TEST(callers_forget_the_least_recent)
{
    struct limits *l = limits_with(0, 0, 1, 1, 2);
    int retry = 0;

    ck_assert_int_eq(limits_submit(l, "a", &retry, NULL), ST_OK);
    ck_assert_int_eq(limits_submit(l, "b", &retry, NULL), ST_OK);
    ck_assert_int_eq(limits_submit(l, "a", &retry, NULL), ST_LIMITED); /* a is newest now */
    ck_assert_int_eq(limits_submit(l, "c", &retry, NULL), ST_OK);      /* b goes */
    ck_assert_int_eq(limits_submit(l, "a", &retry, NULL), ST_LIMITED); /* a is remembered */
    ck_assert_int_eq(limits_submit(l, "b", &retry, NULL), ST_OK);      /* b starts afresh */
    limits_free(l);
}
END_TEST

/* Buckets that have refilled are dropped as new callers arrive. */
START_TEST(refilled_callers_are_dropped)
{
    struct limits *l = limits_with(0, 0, 10, 2, 0);
    struct limits_stats s;
    int retry = 0;

    ck_assert_int_eq(limits_submit(l, "a", &retry, NULL), ST_OK);
    ck_assert_int_eq(limits_submit(l, "b", &retry, NULL), ST_OK);
    fake_now += 100; /* a and b are full again */
    ck_assert_int_eq(limits_submit(l, "c", &retry, NULL), ST_OK);
    limits_stats(l, &s);
    ck_assert_int_eq(s.callers, 1);
    limits_free(l);
}
END_TEST

/* ---- connections per address --------------------------------------------- */

START_TEST(connections_per_address)
{
    struct limits *l = limits_with(2, 0, 0, 1, 0);
    struct limits_stats s;

    ck_assert(limits_conn_admit(l, "10.0.0.1"));
    ck_assert(limits_conn_open(l, "10.0.0.1"));
    ck_assert(limits_conn_open(l, "10.0.0.1"));
    /* over the limit: accepted, to be answered 429 */
    ck_assert(limits_conn_admit(l, "10.0.0.1"));
    ck_assert(!limits_conn_open(l, "10.0.0.1"));
    ck_assert(limits_conn_admit(l, "10.0.0.1"));
    ck_assert(!limits_conn_open(l, "10.0.0.1"));
    /* twice the limit: refused at accept */
    ck_assert(!limits_conn_admit(l, "10.0.0.1"));
    ck_assert_int_eq(total(l, LIMITS_CONN_REFUSED), 1);
    /* another address is not affected */
    ck_assert(limits_conn_admit(l, "10.0.0.2"));
    ck_assert(limits_conn_open(l, "10.0.0.2"));
    limits_conn_close(l, "10.0.0.1");
    ck_assert(limits_conn_admit(l, "10.0.0.1"));
    for (int i = 0; i < 3; i++)
        limits_conn_close(l, "10.0.0.1");
    ck_assert(limits_conn_open(l, "10.0.0.1")); /* back under the limit */
    limits_stats(l, &s);
    ck_assert_int_eq(s.connections, 2);
    ck_assert_int_eq(s.addresses, 2);
    limits_conn_close(l, "10.0.0.1");
    limits_conn_close(l, "10.0.0.2");
    limits_conn_close(l, "10.0.0.2"); /* one too many changes nothing */
    limits_stats(l, &s);
    ck_assert_int_eq(s.connections, 0);
    ck_assert_int_eq(s.addresses, 0);
    limits_free(l);
}
END_TEST

START_TEST(connections_unlimited_when_zero)
{
    struct limits *l = limits_with(0, 0, 0, 1, 0);
    struct limits_stats s;

    for (int i = 0; i < 100; i++) {
        ck_assert(limits_conn_admit(l, "10.0.0.1"));
        ck_assert(limits_conn_open(l, "10.0.0.1"));
    }
    limits_stats(l, &s);
    ck_assert_int_eq(s.addresses, 0);
    limits_free(l);
}
END_TEST

/* ---- streams per tenant --------------------------------------------------- */

START_TEST(streams_per_tenant)
{
    struct limits *l = limits_with(0, 2, 0, 1, 0);
    struct error err = {0};
    struct limits_stats s;

    ck_assert_int_eq(limits_stream_open(l, "acme", &err), ST_OK);
    ck_assert_int_eq(limits_stream_open(l, "acme", &err), ST_OK);
    ck_assert_int_eq(limits_stream_open(l, "acme", &err), ST_LIMITED);
    ck_assert_str_eq(err.message, "too many event streams for tenant \"acme\" (limit 2)");
    ck_assert_int_eq(limits_stream_open(l, "other", &err), ST_OK);
    limits_stream_close(l, "acme");
    ck_assert_int_eq(limits_stream_open(l, "acme", &err), ST_OK);
    ck_assert_int_eq(total(l, LIMITS_STREAM_REFUSED), 1);
    limits_stats(l, &s);
    ck_assert_int_eq(s.tenants, 2);
    limits_stream_close(l, "acme");
    limits_stream_close(l, "acme");
    limits_stream_close(l, "other");
    limits_stats(l, &s);
    ck_assert_int_eq(s.tenants, 0);
    limits_free(l);
}
END_TEST

START_TEST(counters_and_names)
{
    struct limits *l = limits_with(0, 0, 0, 1, 0);

    limits_note(l, LIMITS_DEADLINE);
    limits_note(l, LIMITS_DEADLINE);
    limits_note(l, LIMITS_CONN_ANSWERED);
    ck_assert_int_eq(total(l, LIMITS_DEADLINE), 2);
    ck_assert_int_eq(total(l, LIMITS_CONN_ANSWERED), 1);
    ck_assert_str_eq(limits_event_name(LIMITS_DEADLINE), "requests_timed_out_total");
    ck_assert_str_eq(limits_event_name(LIMITS_CONN_REFUSED), "connections_refused_total");
    ck_assert_str_eq(limits_event_name(LIMITS_NEVENTS), "unknown");
    limits_free(l);
    limits_free(NULL);
}
END_TEST

/* A refusal reaches the client as a problem whose detail is the message. */
START_TEST(refusals_are_problems)
{
    static const struct {
        enum status st;
        unsigned http;
        const char *title;
    } map[] = {{ST_LIMITED, 429, "Too Many Requests"}, {ST_TIMEOUT, 408, "Request Timeout"}};

    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
        struct error err = {0};
        struct reply rp;

        error_set(&err, map[i].st, "what was refused");
        reply_init(&rp);
        reply_error(&rp, map[i].st, &err);
        ck_assert_uint_eq(rp.http_status, map[i].http);
        ck_assert(rp.problem);
        ck_assert_str_eq(json_string_value(json_object_get(rp.body, "title")), map[i].title);
        ck_assert_str_eq(json_string_value(json_object_get(rp.body, "detail")), "what was refused");
        ck_assert_uint_eq(rp.nheaders, 0); /* Retry-After is the caller's to give */
        reply_cleanup(&rp);
    }
    ck_assert_str_eq(status_name(ST_LIMITED), "limited");
    ck_assert_str_eq(status_name(ST_TIMEOUT), "timeout");
}
END_TEST

static Suite *limits_suite(void)
{
    Suite *s = suite_create("limits");
    TCase *tc = tcase_create("core");

    tcase_add_test(tc, bucket_starts_full_and_empties);
    tcase_add_test(tc, bucket_refills_at_its_rate);
    tcase_add_test(tc, bucket_holds_at_most_burst);
    tcase_add_test(tc, bucket_ignores_a_clock_going_back);
    tcase_add_test(tc, submit_burst_then_refused_then_again);
    tcase_add_test(tc, submit_retry_after_rounds_up);
    tcase_add_test(tc, submit_unlimited_when_rate_is_zero);
    tcase_add_test(tc, callers_are_bounded);
    tcase_add_test(tc, callers_forget_the_least_recent);
    tcase_add_test(tc, refilled_callers_are_dropped);
    tcase_add_test(tc, connections_per_address);
    tcase_add_test(tc, connections_unlimited_when_zero);
    tcase_add_test(tc, streams_per_tenant);
    tcase_add_test(tc, counters_and_names);
    tcase_add_test(tc, refusals_are_problems);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(limits_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
