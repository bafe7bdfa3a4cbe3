/* tests/integration/test_rate_limits.c — shared rate limits
 * (store/rate_limits.h, migration 016) against a real PostgreSQL: the claim
 * starts no more runs of a limited type than the limit has units, leaves
 * other types alone, shares one limit between types, frees units as the
 * window moves on, and never takes more than the limit in any window
 * while eight connections claim at once (judged from the database times of
 * the runs' started events); the poller's take, the status read, and a
 * limit lowered below what was taken.
 *
 * Each test gets a fresh database cloned from the migrated template.
 *
 * System headers come before the opsrun headers, ahead of common.h's poison
 * pragma. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <libpq-fe.h>

#include "store/db.h"
#include "store/rate_limits.h"
#include "store/runs.h"
#include "tests/support/fixture.h"
#include "tests/support/harness.h"

/* n queued runs of type, due now. */
static void queue_runs(const char *type, int n)
{
    PQclear(th_sql(g_pg,
                   "INSERT INTO runs (tenant, id, type, max_attempts, timeout_s, input, "
                   "identity_hash, request_hash, run_at) SELECT 'default', '%s-' || i, '%s', 1, "
                   "60, '{}', '%s-' || i, 'x', now() - interval '1 second' "
                   "FROM generate_series(1, %d) i",
                   type, type, type, n));
}

/* Claims up to want runs of the given types (with their limits) as
 * worker; returns how many of each type came, in got[0..ntypes). */
static size_t claim(struct db *db, const char *worker, int want, const char *const *types,
                    const struct rate_limit *const *rates, size_t ntypes, size_t *got)
{
    static const int caps[4] = {0, 0, 0, 0};
    struct run **runs = NULL;
    struct error err = {0}; /* not g_err: racing threads call this */
    size_t n = 0;
    enum status st =
        store_runs_claim(db, worker, want, 1000, types, caps, rates, ntypes, &runs, &n, &err);

    ck_assert_msg(st == ST_OK, "claim: %s", err.message);
    for (size_t i = 0; got && i < ntypes; i++)
        got[i] = 0;
    for (size_t i = 0; i < n; i++) {
        for (size_t t = 0; got && t < ntypes; t++)
            got[t] += strcmp(runs[i]->type, types[t]) == 0;
        run_free(runs[i]);
    }
    free(runs);
    return n;
}

START_TEST(claim_stops_at_the_limit)
{
    const struct rate_limit api = {"api", 5, 1000};
    const char *types[] = {"L", "U"};
    const struct rate_limit *rates[] = {&api, NULL};
    size_t got[2];
    struct rate_status rs;

    open_test_db("it_rate_claim");
    queue_runs("L", 20);
    queue_runs("U", 20);
    /* Five of L; U is not held back by L's limit. */
    ck_assert_int_eq(claim(g_db, "w1", 100, types, rates, 2, got), 25);
    ck_assert_int_eq(got[0], 5);
    ck_assert_int_eq(got[1], 20);
    ck_assert_int_eq(claim(g_db, "w1", 100, types, rates, 2, got), 0);
    OK(store_rate_status(g_db, &api, 1, &rs, &g_err));
    ck_assert_int_eq(rs.used, 5);
    ck_assert(rs.next_ms >= 0 && rs.next_ms <= 1010);
    /* The window moves on: five more. */
    th_sleep_ms(rs.next_ms + 20);
    ck_assert_int_eq(claim(g_db, "w1", 100, types, rates, 2, got), 5);
    ck_assert_int_eq(got[0], 5);
    /* Without the limit (a binary that knows none), the claim of 013. */
    ck_assert_int_eq(claim(g_db, "w1", 100, types, NULL, 2, got), 10);
    close_test_db();
}
END_TEST

START_TEST(types_share_a_limit)
{
    const struct rate_limit api = {"api", 6, 60000};
    const char *types[] = {"A", "B"};
    const struct rate_limit *rates[] = {&api, &api};
    size_t got[2];

    open_test_db("it_rate_shared");
    queue_runs("A", 10);
    queue_runs("B", 10);
    ck_assert_int_eq(claim(g_db, "w1", 4, types, rates, 2, got), 4);
    ck_assert_int_eq(claim(g_db, "w1", 100, types, rates, 2, got), 2);
    ck_assert_int_eq(claim(g_db, "w1", 100, types, rates, 2, got), 0);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE status = 'running'"), 6);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT sum(units) FROM rate_limit_slices"), 6);
    close_test_db();
}
END_TEST

/* A type's max_running cap still holds beside its limit: the claim takes
 * the smaller, and units only for the runs it started. */
START_TEST(cap_and_limit)
{
    static const int caps[1] = {2};
    const struct rate_limit api = {"api", 5, 60000};
    const char *types[] = {"L"};
    const struct rate_limit *rates[] = {&api};
    struct run **runs = NULL;
    size_t n = 0;

    open_test_db("it_rate_cap");
    queue_runs("L", 10);
    OK(store_runs_claim(g_db, "w1", 100, 1000, types, caps, rates, 1, &runs, &n, &g_err));
    ck_assert_uint_eq(n, 2);
    for (size_t i = 0; i < n; i++)
        run_free(runs[i]);
    free(runs);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT sum(units) FROM rate_limit_slices"), 2);
    /* The cap is full: nothing more, and no unit taken. */
    OK(store_runs_claim(g_db, "w1", 100, 1000, types, caps, rates, 1, &runs, &n, &g_err));
    ck_assert_uint_eq(n, 0);
    free(runs);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT sum(units) FROM rate_limit_slices"), 2);
    close_test_db();
}
END_TEST

START_TEST(take_and_status)
{
    const struct rate_limit api = {"api", 3, 60000}, other = {"other", 10, 1000};
    const struct rate_limit both[] = {api, other};
    struct rate_status rs[2];
    int taken = -1;
    int64_t next = -1;

    open_test_db("it_rate_take");
    OK(store_rate_take(g_db, &api, 2, &taken, &next, &g_err));
    ck_assert_int_eq(taken, 2);
    ck_assert_int_eq(next, 0);
    OK(store_rate_take(g_db, &api, 2, &taken, &next, &g_err));
    ck_assert_int_eq(taken, 1);
    ck_assert(next > 59000 && next <= 60600); /* the slice ends within 600 ms */
    OK(store_rate_take(g_db, &api, 1, &taken, &next, &g_err));
    ck_assert_int_eq(taken, 0);
    OK(store_rate_status(g_db, both, 2, rs, &g_err));
    ck_assert_int_eq(rs[0].used, 3);
    ck_assert(rs[0].next_ms > 59000);
    ck_assert_int_eq(rs[1].used, 0);
    ck_assert_int_eq(rs[1].next_ms, -1);
    /* A limit lowered below what its window holds has no room (not a
     * negative grant). */
    {
        const struct rate_limit lower = {"api", 1, 60000};

        OK(store_rate_take(g_db, &lower, 1, &taken, &next, &g_err));
        ck_assert_int_eq(taken, 0);
    }
    /* Old slices are deleted by the takes, a minute after their window. */
    PQclear(th_sql(g_pg, "UPDATE rate_limit_slices SET until = until - interval '5 minutes'"));
    OK(store_rate_take(g_db, &api, 1, &taken, &next, &g_err));
    ck_assert_int_eq(taken, 1);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM rate_limit_slices WHERE until < "
                                      "now() - interval '2 minutes'"),
                     0);
    close_test_db();
}
END_TEST

/* Eight connections claim at once, for about three seconds, under 20 per
 * second: in every window of one second (from the started events' times)
 * at most 20 runs started, and the limit was used (not starved). */
#define RACE_LIMIT 20
struct racer {
    pthread_barrier_t *start;
    atomic_bool *stop;
    char worker[16];
};

static void *race(void *arg)
{
    static const char *const types[] = {"L"};
    static const struct rate_limit api = {"api", RACE_LIMIT, 1000};
    static const struct rate_limit *const rates[] = {&api};
    struct racer *r = arg;
    struct db *db = connect_db(g_ci);

    pthread_barrier_wait(r->start);
    while (!atomic_load(r->stop)) {
        if (claim(db, r->worker, 3, types, rates, 1, NULL) == 0)
            th_sleep_ms(2);
    }
    db_close(db);
    return NULL;
}

START_TEST(no_window_holds_more)
{
    pthread_barrier_t start;
    pthread_t th[8];
    struct racer r[8];
    atomic_bool stop = false;
    PGresult *res;
    int n, worst = 0;
    long long *t;

    open_test_db("it_rate_race");
    queue_runs("L", 400);
    pthread_barrier_init(&start, NULL, 9);
    for (int i = 0; i < 8; i++) {
        r[i] = (struct racer){.start = &start, .stop = &stop};
        snprintf(r[i].worker, sizeof(r[i].worker), "w%d", i);
        ck_assert_int_eq(pthread_create(&th[i], NULL, race, &r[i]), 0);
    }
    pthread_barrier_wait(&start);
    th_sleep_ms(3300);
    atomic_store(&stop, true);
    for (int i = 0; i < 8; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&start);
    res = th_sql(g_pg, "SELECT (extract(epoch FROM created_at) * 1000000)::bigint FROM run_events "
                       "WHERE message LIKE 'attempt %% started by %%' ORDER BY 1");
    n = PQntuples(res);
    t = calloc((size_t)n + 1, sizeof(*t));
    for (int i = 0; i < n; i++)
        t[i] = atoll(PQgetvalue(res, i, 0));
    PQclear(res);
    for (int i = 0, j = 0; i < n; i++) {
        while (j < n && t[j] < t[i] + 1000000)
            j++;
        if (j - i > worst)
            worst = j - i;
    }
    free(t);
    ck_assert_msg(worst <= RACE_LIMIT, "%d runs started within one second", worst);
    /* Three windows and some: at least three limits' worth started. */
    ck_assert_msg(n >= 3 * RACE_LIMIT, "only %d runs started in 3.3 s", n);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE status = 'running'"), n);
    close_test_db();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("rate_limits");
    TCase *tc = tcase_create("rate_limits");

    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, claim_stops_at_the_limit);
    tcase_add_test(tc, types_share_a_limit);
    tcase_add_test(tc, cap_and_limit);
    tcase_add_test(tc, take_and_status);
    tcase_add_test(tc, no_window_holds_more);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
