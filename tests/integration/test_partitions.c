/* tests/integration/test_partitions.c — the time partitions of run_events
 * (store/partitions.h, migrations 013 and 019) against a real PostgreSQL:
 * spans created ahead without gaps, an event that found no span moved into
 * the span created for it, a span dropped only once no run created in it
 * is left in any tenant (found without reading all of runs), and the lock
 * waits that make a pass give up instead of stalling writers.
 *
 * Each test gets a fresh database cloned from the migrated template; raw
 * libpq (th_sql) arranges runs and events and checks the catalog.
 *
 * System headers come before the opsrun headers, ahead of common.h's poison
 * pragma. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <libpq-fe.h>

#include "common/ids.h"
#include "store/db.h"
#include "store/partitions.h"
#include "store/runs.h"
#include "tests/support/fixture.h"
#include "tests/support/harness.h"

/* ---- helpers ---------------------------------------------------------- */

struct names {
    char list[2048]; /* "a,b," */
    int n;
};

static void add_name(void *arg, const char *name)
{
    struct names *ns = arg;
    size_t len = strlen(ns->list);

    snprintf(ns->list + len, sizeof(ns->list) - len, "%s,", name);
    ns->n++;
}

static bool has_name(const struct names *ns, const char *name)
{
    char want[128];

    snprintf(want, sizeof(want), "%s,", name);
    return strstr(ns->list, want) != NULL;
}

static bool table_exists(const char *name)
{
    return th_sql_int(g_pg, "SELECT count(*) FROM pg_class WHERE relname = '%s'", name) == 1;
}

/* Asserts the span partitions join up without a gap or an overlap and
 * reach at least `ahead` (an SQL interval) past now. */
static void assert_contiguous(const char *ahead)
{
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM (SELECT hi, lead(lo) OVER (ORDER BY "
                                      "hi) AS next FROM opsrun_event_partitions()) p "
                                      "WHERE next IS NOT NULL AND next <> hi"),
                     0);
    ck_assert_int_eq(th_sql_int(g_pg,
                                "SELECT (max(hi) >= now() + interval '%s')::int "
                                "FROM opsrun_event_partitions()",
                                ahead),
                     1);
}

/* The test's now, rounded to the second and read once (pin_now): spans made by two
 * statements must join up even when the clock ticks between them. */
static char g_t0[64];

static void pin_now(void)
{
    PGresult *r = th_sql(g_pg, "SELECT date_trunc('second', now())::text");

    snprintf(g_t0, sizeof(g_t0), "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
}

/* The name of the span partition [t0 + lo, t0 + hi); created here. */
static char *make_span(const char *lo, const char *hi)
{
    PGresult *r;
    char *name;

    ck_assert(g_t0[0] != '\0');
    r = th_sql(g_pg,
               "SELECT opsrun_event_partition_create(timestamptz '%s' + interval '%s', "
               "timestamptz '%s' + interval '%s')",
               g_t0, lo, g_t0, hi);
    name = xstrdup(PQgetvalue(r, 0, 0));

    PQclear(r);
    return name;
}

/* A run of tenant created at t0 + created (an interval), completed at
 * now() + completed unless that is NULL (then it is waiting), with two
 * events named with its creation time, as the store writes them. */
static void make_run(const char *tenant, const char *id, const char *created, const char *completed)
{
    PQclear(th_sql(g_pg,
                   "INSERT INTO runs (tenant, id, type, status, outcome, max_attempts, timeout_s, "
                   "input, identity_hash, request_hash, created_at, completed_at) VALUES "
                   "('%s', '%s', 'T', %s, %s, 1, 60, '{}', 'i-%s', 'r', timestamptz '%s' + "
                   "interval '%s', now() + interval '%s')",
                   tenant, id, completed ? "'completed'" : "'waiting'",
                   completed ? "'succeeded'" : "'pending'", id, g_t0, created,
                   completed ? completed : "0 s"));
    if (!completed)
        PQclear(th_sql(g_pg, "UPDATE runs SET completed_at = NULL WHERE id = '%s'", id));
    PQclear(th_sql(g_pg,
                   "INSERT INTO run_events (tenant, run_id, type, status, outcome, progress, "
                   "run_created_at) SELECT tenant, id, 'status', s, 'pending', 0, created_at "
                   "FROM runs, unnest(ARRAY['queued', 'running']) s WHERE id = '%s'",
                   id));
}

/* Drops every span partition of the cloned template (empty), and its twin
 * in run_logs (migration 021), so a test can lay out its own. */
static void drop_spans(void)
{
    PGresult *r = th_sql(g_pg, "SELECT name, opsrun_log_partition_name(name) FROM "
                               "opsrun_event_partitions()");

    for (int i = 0; i < PQntuples(r); i++)
        PQclear(th_sql(g_pg, "DROP TABLE %s, %s", PQgetvalue(r, i, 0), PQgetvalue(r, i, 1)));
    PQclear(r);
}

/* ---- spans ahead ------------------------------------------------------ */

/* The template was migrated with the default span (a day): its spans reach
 * two days ahead after one more pass, and a pass with nothing to do creates
 * nothing. A longer span continues from the newest span's end. The store's
 * writers put each event in the span of its run's creation time. */
START_TEST(spans_ahead)
{
    struct names created = {0};
    struct run *run = NULL;
    json_t *in = json_pack("{s:s}", "k", "v");
    bool dedup = true;
    struct partition_step step;

    open_test_db("it_parts_ahead");
    ck_assert(table_exists("run_events_pmin"));
    ck_assert(table_exists("run_events_unknown"));
    ck_assert(table_exists("run_events_default"));
    OK(store_partitions_ensure(g_db, 86400, add_name, &created, &step, &g_err));
    assert_contiguous("2 days");
    OK(store_partitions_ensure(g_db, 86400, add_name, &created, &step, &g_err));
    ck_assert_int_eq(step.n, 0);
    ck_assert(!step.gave_way);

    OK(store_runs_submit(g_db,
                         &(struct run_new){.tenant = "default",
                                           .id = "placed",
                                           .type = "T",
                                           .max_attempts = 1,
                                           .timeout_s = 60,
                                           .input = in,
                                           .identity_hash = "ph",
                                           .request_hash = "rh"},
                         &run, &dedup, &g_err));
    run_free(run);
    ck_assert_int_eq(th_sql_int(g_pg,
                                "SELECT count(*) FROM run_events e JOIN runs r ON r.id = e.run_id "
                                "JOIN opsrun_event_partitions() p ON p.name = "
                                "e.tableoid::regclass::text WHERE r.id = 'placed' AND "
                                "e.run_created_at = r.created_at AND r.created_at >= p.lo AND "
                                "r.created_at < p.hi"),
                     1);

    /* Thirty-day spans, from the end of the daily ones on. */
    created = (struct names){0};
    OK(store_partitions_ensure(g_db, 30 * 86400, add_name, &created, &step, &g_err));
    ck_assert_int_ge(step.n, 2);
    ck_assert_int_eq(step.n, created.n);
    assert_contiguous("60 days");
    ck_assert_int_ge(th_sql_int(g_pg, "SELECT count(*) FROM opsrun_event_partitions() WHERE hi - "
                                      "lo = interval '30 days'"),
                     step.n - 1);
    json_decref(in);
    close_test_db();
}
END_TEST

/* An event whose run's creation time no span covers yet goes to
 * run_events_default; creating the span moves it there, id and all. */
START_TEST(default_rows_move)
{
    long long id;
    char *where;
    PGresult *r;
    struct partition_step step;

    open_test_db("it_parts_default");
    OK(store_partitions_ensure(g_db, 86400, NULL, NULL, &step, &g_err));
    r = th_sql(g_pg, "INSERT INTO run_events (tenant, run_id, type, status, outcome, progress, "
                     "run_created_at) SELECT 'default', 'later', 'status', 'queued', 'pending', "
                     "0, max(hi) + interval '1 hour' FROM opsrun_event_partitions() "
                     "RETURNING id, tableoid::regclass::text");
    id = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    ck_assert_str_eq(PQgetvalue(r, 0, 1), "run_events_default");
    PQclear(r);

    OK(store_partitions_ensure(g_db, 30 * 86400, NULL, NULL, &step, &g_err));
    ck_assert_int_ge(step.n, 1);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM run_events_default"), 0);
    r = th_sql(g_pg, "SELECT tableoid::regclass::text FROM run_events WHERE id = %lld", id);
    ck_assert_int_eq(PQntuples(r), 1);
    where = xstrdup(PQgetvalue(r, 0, 0));
    PQclear(r);
    ck_assert_msg(strncmp(where, "run_events_p", 12) == 0, "event %lld is in %s", id, where);
    free(where);
    close_test_db();
}
END_TEST

/* ---- drops ------------------------------------------------------------ */

/* Spans A and B ended hours ago. Nothing goes while a run created in them
 * is left; once retention deleted A's runs, A goes (its events with it) and
 * B, which still holds a waiting run, stays, its runs' events readable.
 * The pruned-events mark covers what was dropped. */
START_TEST(drop_when_no_run_left)
{
    struct names dropped = {0}, created = {0};
    char *a, *b;
    json_t *ev = NULL;
    long long a_max;
    struct partition_step step;
    int n = -1;

    open_test_db("it_parts_drop");
    pin_now();
    drop_spans();
    a = make_span("-4 hours", "-3 hours");
    b = make_span("-3 hours", "-2 hours");
    OK(store_partitions_ensure(g_db, 3600, add_name, &created, &step, &g_err));
    ck_assert_int_ge(step.n, 3);
    assert_contiguous("2 hours");

    make_run("default", "a1", "-210 minutes", "-200 minutes");
    make_run("default", "b1", "-150 minutes", "-140 minutes");
    make_run("default", "b2", "-150 minutes", NULL);
    PQclear(th_sql(g_pg, "INSERT INTO run_events (tenant, run_id, type, status, outcome, "
                         "progress) VALUES ('default', 'a1', 'status', 'completed', "
                         "'succeeded', 100)"));
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM %s", a), 2);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM %s", b), 4);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM run_events_unknown"), 1);
    a_max = th_sql_int(g_pg, "SELECT max(id) FROM %s", a);

    OK(store_partitions_drop(g_db, add_name, &dropped, &step, &g_err));
    ck_assert_msg(!has_name(&dropped, a) && !has_name(&dropped, b), "dropped %s", dropped.list);
    ck_assert(table_exists(a));

    OK(store_runs_prune(g_db, 3600, 100, &n, &g_err));
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM run_events_unknown"), 0);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM %s", a), 2);
    EXPECT(ST_NOT_FOUND, store_events_list(g_db, "default", "a1", &ev, &g_err));

    dropped = (struct names){0};
    OK(store_partitions_drop(g_db, add_name, &dropped, &step, &g_err));
    ck_assert_msg(has_name(&dropped, a) && !has_name(&dropped, b), "dropped %s", dropped.list);
    ck_assert(!table_exists(a));
    ck_assert(table_exists(b));
    { /* run_logs' twins (migration 021) go with their spans */
        char twin[128];
        snprintf(twin, sizeof(twin), "run_logs_%s", a + strlen("run_events_"));
        ck_assert(!table_exists(twin));
        snprintf(twin, sizeof(twin), "run_logs_%s", b + strlen("run_events_"));
        ck_assert(table_exists(twin));
    }
    ck_assert_int_ge(th_sql_int(g_pg, "SELECT upto FROM run_events_pruned"), a_max);
    OK(store_events_list(g_db, "default", "b2", &ev, &g_err));
    ck_assert_int_eq(json_array_size(ev), 2);
    json_decref(ev);
    ev = NULL;
    EXPECT(ST_NOT_FOUND, store_events_list(g_db, "default", "b1", &ev, &g_err));
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM %s WHERE run_id = 'b1'", b), 2);
    free(a);
    free(b);
    close_test_db();
}
END_TEST

/* The shared buffers (hit or read) the statement touched, from EXPLAIN
 * (ANALYZE, BUFFERS): what a function called by it read included. */
static long buffers_of(const char *sql)
{
    PGresult *r = th_sql(g_pg, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) %s", sql);
    json_t *plan = json_loads(PQgetvalue(r, 0, 0), 0, NULL);
    json_t *top = json_object_get(json_array_get(plan, 0), "Plan");
    long n;

    ck_assert_ptr_nonnull(top);
    n = (long)json_integer_value(json_object_get(top, "Shared Hit Blocks")) +
        (long)json_integer_value(json_object_get(top, "Shared Read Blocks"));
    json_decref(plan);
    PQclear(r);
    return n;
}

/* The drop asks whether a run created in the span is left in any tenant:
 * a span whose only run is in the middle tenant, then in the last one,
 * stays; empty, it goes. The question reads a few index pages per tenant
 * however many runs there are (migration 019): with 30,000 runs in three
 * tenants, a pass that keeps the span reads about 90 buffers, under 300
 * asserted, where 013's scan of runs_list read about 650. */
START_TEST(drop_sees_every_tenant)
{
    struct names dropped = {0};
    struct partition_step step;
    char *a;
    long buffers;

    open_test_db("it_parts_tenants");
    pin_now();
    drop_spans();
    a = make_span("-3 hours", "-2 hours");
    OK(store_partitions_ensure(g_db, 3600, NULL, NULL, &step, &g_err));
    PQclear(th_sql(g_pg, "INSERT INTO runs (tenant, id, type, status, outcome, max_attempts, "
                         "timeout_s, input, identity_hash, request_hash, created_at, "
                         "completed_at) SELECT (ARRAY['a', 'm', 'z'])[g %% 3 + 1], 'n' || g, 'T', "
                         "'completed', 'succeeded', 1, 60, '{}', 'i-n' || g, 'r', now() - g * "
                         "interval '10 ms', now() FROM generate_series(1, 30000) g"));
    PQclear(th_sql(g_pg, "VACUUM ANALYZE runs"));

    make_run("m", "m-old", "-150 minutes", NULL);
    OK(store_partitions_drop(g_db, add_name, &dropped, &step, &g_err));
    ck_assert_msg(!has_name(&dropped, a), "dropped %s", dropped.list);
    PQclear(th_sql(g_pg, "DELETE FROM runs WHERE id = 'm-old'"));
    make_run("z", "z-old", "-150 minutes", NULL);
    OK(store_partitions_drop(g_db, add_name, &dropped, &step, &g_err));
    ck_assert_msg(!has_name(&dropped, a), "dropped %s", dropped.list);
    for (int i = 0; i < 2; i++) /* this session's first calls also read the catalog */
        PQclear(
            th_sql(g_pg, "SELECT * FROM opsrun_event_partitions_drop(interval '1 minute', 500)"));
    buffers = buffers_of("SELECT * FROM opsrun_event_partitions_drop(interval '1 minute', 500)");
    ck_assert_msg(buffers < 300, "the drop read %ld buffers", buffers);
    ck_assert(table_exists(a));

    PQclear(th_sql(g_pg, "DELETE FROM runs WHERE id = 'z-old'"));
    OK(store_partitions_drop(g_db, add_name, &dropped, &step, &g_err));
    ck_assert_msg(has_name(&dropped, a), "dropped %s", dropped.list);
    ck_assert(!table_exists(a));
    free(a);
    close_test_db();
}
END_TEST

/* A pass gives up, without an error, while another session holds a lock on
 * run_events longer than PARTITION_LOCK_TIMEOUT_MS, or while another
 * replica holds the partition lock; the next pass drops. */
START_TEST(drop_gives_way)
{
    struct names dropped = {0};
    PGconn *x;
    char *b;
    struct partition_step step;

    open_test_db("it_parts_locks");
    pin_now();
    drop_spans();
    b = make_span("-3 hours", "-2 hours");
    OK(store_partitions_ensure(g_db, 3600, NULL, NULL, &step, &g_err));
    make_run("default", "b1", "-150 minutes", "-140 minutes");
    PQclear(th_sql(g_pg, "DELETE FROM runs"));

    x = th_pg(g_ci);
    PQclear(th_sql(x, "BEGIN"));
    PQclear(th_sql(x, "SELECT count(*) FROM run_events"));
    OK(store_partitions_drop(g_db, add_name, &dropped, &step, &g_err));
    ck_assert_int_eq(step.n, 0);
    ck_assert(step.gave_way);
    ck_assert(table_exists(b));
    PQclear(th_sql(x, "COMMIT"));

    PQclear(th_sql(x, "BEGIN"));
    PQclear(th_sql(x, "SELECT pg_advisory_xact_lock(7260017013)"));
    OK(store_partitions_drop(g_db, add_name, &dropped, &step, &g_err));
    ck_assert_int_eq(step.n, 0);
    ck_assert(!step.gave_way);
    OK(store_partitions_ensure(g_db, 30 * 86400, NULL, NULL, &step, &g_err));
    ck_assert_int_eq(step.n, 0);
    PQclear(th_sql(x, "ROLLBACK"));

    OK(store_partitions_drop(g_db, add_name, &dropped, &step, &g_err));
    ck_assert_msg(has_name(&dropped, b), "dropped %s", dropped.list);
    ck_assert(!table_exists(b));
    PQfinish(x);
    free(b);
    close_test_db();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("partitions");
    TCase *tc = tcase_create("partitions");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, spans_ahead);
    tcase_add_test(tc, default_rows_move);
    tcase_add_test(tc, drop_when_no_run_left);
    tcase_add_test(tc, drop_sees_every_tenant);
    tcase_add_test(tc, drop_gives_way);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
