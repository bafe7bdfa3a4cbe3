/* tests/integration/test_events.c — the id-horizon reader of run_events
 * (store/events.h, migration 003, docs/design-event-order.md section 5)
 * against a real PostgreSQL: the two-writer reorder scenarios, a stress run
 * of concurrent writers followed by the reader (every committed event
 * exactly once, in strictly increasing id order; the naive "id > last"
 * reader's misses are printed alongside), a stalled writer holding the
 * horizon back, and events of pruned runs.
 *
 * Each test gets a fresh database cloned from the migrated template. Writers
 * are raw libpq connections running the S_PROGRESS-shaped statement (update
 * the run row, insert its event, one statement); the reader is the code
 * under test on its own struct db. Threads never call ck_assert: they record
 * what went wrong and the test thread asserts after joining them.
 *
 * System headers come before the opsrun headers, ahead of common.h's poison
 * pragma. */
#include <check.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <libpq-fe.h>

#include "common/ids.h"
#include "live/hub.h"
#include "store/db.h"
#include "store/events.h"
#include "store/runs.h"
#include "tests/support/fixture.h"
#include "tests/support/harness.h"

/* ---- helpers ---------------------------------------------------------- */

/* n running runs <prefix>0 .. <prefix>(n-1) held by worker w, attempt 1,
 * inserted without events. */
static void make_runs(const char *prefix, int n)
{
    PQclear(th_sql(g_pg,
                   "INSERT INTO runs (tenant, id, type, status, attempt, max_attempts, "
                   "timeout_s, worker_id, input, identity_hash, request_hash) "
                   "SELECT 't', '%s' || g, 'T', 'running', 1, 3, 300, 'w', '{}', "
                   "'ident-%s' || g, 'req' FROM generate_series(0, %d) g",
                   prefix, prefix, n - 1));
}

/* The S_PROGRESS shape: update the run row, insert its event, in one
 * statement. Its event goes to the partition of the run's creation time
 * (migration 013). */
static const char *const WRITE_SQL =
    "WITH upd AS (UPDATE runs r SET progress = $2::int, step = 'step ' || $2, updated_at = now() "
    "WHERE r.tenant = 't' AND r.id = $1 AND r.worker_id = 'w' AND r.attempt = 1 "
    "AND r.status IN ('running', 'cancelling') "
    "RETURNING r.tenant, r.id, r.status, r.outcome, r.progress, r.step, r.created_at), "
    "ev AS (INSERT INTO run_events (tenant, run_id, type, status, outcome, progress, step, "
    "message, run_created_at) SELECT tenant, id, 'progress', status, outcome, progress, step, "
    "NULL, created_at FROM upd RETURNING id) SELECT id FROM ev";
/* The same as a binary from before migration 013 writes it, without the
 * run's creation time: the event goes to run_events_unknown. */
static const char *const WRITE_SQL_UNNAMED =
    "WITH upd AS (UPDATE runs r SET progress = $2::int, step = 'step ' || $2, updated_at = now() "
    "WHERE r.tenant = 't' AND r.id = $1 AND r.worker_id = 'w' AND r.attempt = 1 "
    "AND r.status IN ('running', 'cancelling') "
    "RETURNING r.tenant, r.id, r.status, r.outcome, r.progress, r.step), "
    "ev AS (INSERT INTO run_events (tenant, run_id, type, status, outcome, progress, step, "
    "message) SELECT tenant, id, 'progress', status, outcome, progress, step, NULL FROM upd "
    "RETURNING id) SELECT id FROM ev";

/* Runs sql (WRITE_SQL's parameters). Returns the new event id, or -1 when
 * the statement failed or matched no run. Thread-safe per connection: never
 * asserts. */
static long long write_sql(PGconn *c, const char *sql, const char *run, int progress)
{
    char p[16];
    const char *params[2] = {run, p};
    PGresult *r;
    long long id = -1;

    snprintf(p, sizeof(p), "%d", progress);
    r = PQexecParams(c, sql, 2, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
        id = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return id;
}

static long long write_event(PGconn *c, const char *run, int progress)
{
    return write_sql(c, WRITE_SQL, run, progress);
}

/* The partition event id is in, as c sees it. */
static char *partition_of(PGconn *c, long long id)
{
    PGresult *r = th_sql(c, "SELECT tableoid::regclass::text FROM run_events WHERE id = %lld", id);
    char *name;

    ck_assert_int_eq(PQntuples(r), 1);
    name = xstrdup(PQgetvalue(r, 0, 0));
    PQclear(r);
    return name;
}

static long long write_ok(PGconn *c, const char *run, int progress)
{
    long long id = write_event(c, run, progress);

    ck_assert_msg(id > 0, "could not write an event of run %s: %s", run, PQerrorMessage(c));
    return id;
}

/* What a reader delivered. */
struct got {
    int64_t *ids;
    int n, cap;
    int not_increasing; /* deliveries whose id was <= the previous one */
    int null_run_json;
    int bad_json; /* fields missing, or run JSON unparsable or of another run */
    char last_run_json[1024];
};

static void got_free(struct got *g)
{
    free(g->ids);
    memset(g, 0, sizeof(*g));
}

static void collect(void *arg, const struct event_row *ev)
{
    struct got *g = arg;
    json_t *run = ev->run_json ? json_loads(ev->run_json, 0, NULL) : NULL;

    if (g->n > 0 && ev->id <= g->ids[g->n - 1])
        g->not_increasing++;
    if (g->n == g->cap) {
        g->cap = g->cap ? g->cap * 2 : 256;
        g->ids = xrealloc(g->ids, (size_t)g->cap * sizeof(*g->ids));
    }
    g->ids[g->n++] = ev->id;
    if (!ev->tenant || !ev->run_id || !th_streq(ev->kind, "progress") ||
        (ev->run_json &&
         (!run || !th_streq(json_string_value(json_object_get(run, "id")), ev->run_id) ||
          !th_streq(json_string_value(json_object_get(run, "status")),
                    run_status_name(ev->status)))))
        g->bad_json++;
    json_decref(run);
    if (!ev->run_json)
        g->null_run_json++;
    snprintf(g->last_run_json, sizeof(g->last_run_json), "%s", ev->run_json ? ev->run_json : "");
}

/* Follows the stream with store_events_advance until it has delivered
 * everything up to want_pos (or timeout_ms passes). */
static void drain(struct db *db, int64_t *pos, int64_t want_pos, struct got *g, int timeout_ms)
{
    long long until = th_now_ms() + timeout_ms;
    int n;

    while (*pos < want_pos && th_now_ms() < until)
        OK(store_events_advance(db, pos, 100, 500, collect, g, &n, &g_err));
    ck_assert_msg(*pos >= want_pos, "reader stuck at %" PRId64 ", want %" PRId64, *pos, want_pos);
}

static void assert_ids(const struct got *g, const long long *want, int n)
{
    ck_assert_int_eq(g->n, n);
    for (int i = 0; i < n; i++)
        ck_assert_msg(g->ids[i] == want[i], "delivery %d is id %" PRId64 ", want %lld", i,
                      g->ids[i], want[i]);
}

/* ---- section 5: the two-writer scenarios ------------------------------ */

/* Scenario 1: A takes id N and holds its transaction, B takes N+1 and
 * commits. The naive reader sees N+1 alone (and would skip N for good); the
 * horizon must not pass N until A commits, then N and N+1 come in order.
 * A's event goes to another partition than B's (A writes as a binary from
 * before migration 013 does): both lock the parent run_events, which is
 * what the horizon looks at. */
START_TEST(reorder_two_writers)
{
    PGconn *a, *b;
    struct event_horizon h;
    struct got naive = {0}, got = {0}, replay = {0};
    long long n1, n2;
    int64_t pos = 0;
    bool settled = true;
    char *where_a, *where_b;
    int n;

    open_test_db("it_events_reorder");
    make_runs("r", 2);
    a = th_pg(g_ci);
    b = th_pg(g_ci);

    PQclear(th_sql(a, "BEGIN"));
    n1 = write_sql(a, WRITE_SQL_UNNAMED, "r0", 10);
    ck_assert_int_gt(n1, 0);
    n2 = write_ok(b, "r1", 20);
    ck_assert_int_eq(n2, n1 + 1);
    where_a = partition_of(a, n1);
    where_b = partition_of(b, n2);
    ck_assert_str_eq(where_a, "run_events_unknown");
    ck_assert_str_ne(where_b, "run_events_unknown");
    ck_assert_str_ne(where_b, "run_events_default");
    free(where_a);
    free(where_b);

    OK(store_events_horizon(g_db, &h, &g_err));
    ck_assert_int_eq(h.h, n2);
    ck_assert_int_ge(h.ninflight, 1);
    OK(store_events_settled(g_db, &h, &settled, &g_err));
    ck_assert(!settled);
    /* The problem is real: "id > 0" right now returns N+1 without N. */
    OK(store_events_after(g_db, 0, INT64_MAX, 100, EVENTS_RUNS, collect, &naive, &n, &g_err));
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(naive.ids[0], n2);
    /* The horizon reader waits and delivers nothing. */
    OK(store_events_advance(g_db, &pos, 50, 100, collect, &got, &n, &g_err));
    ck_assert_int_eq(n, 0);
    ck_assert_int_eq(pos, 0);

    PQclear(th_sql(a, "COMMIT"));
    OK(store_events_settled(g_db, &h, &settled, &g_err));
    ck_assert(settled);
    event_horizon_cleanup(&h);
    event_horizon_cleanup(&h);

    OK(store_events_advance(g_db, &pos, 50, 100, collect, &got, &n, &g_err));
    ck_assert_int_eq(n, 2);
    assert_ids(&got, (long long[]){n1, n2}, 2);
    ck_assert_int_eq(pos, n2);
    ck_assert_int_eq(got.bad_json + got.null_run_json + got.not_increasing, 0);
    /* Nothing more, and a replay from before N gives the same. */
    OK(store_events_advance(g_db, &pos, 10, 100, collect, &got, &n, &g_err));
    ck_assert_int_eq(n, 0);
    OK(store_events_after(g_db, 0, pos, 100, EVENTS_RUNS, collect, &replay, &n, &g_err));
    assert_ids(&replay, (long long[]){n1, n2}, 2);

    got_free(&naive);
    got_free(&got);
    got_free(&replay);
    PQfinish(a);
    PQfinish(b);
    close_test_db();
}
END_TEST

/* Scenario 2: like 1, but B takes its xid first (an update of another run),
 * so xid order and id order differ. */
START_TEST(reorder_xid_first)
{
    PGconn *a, *b;
    struct got got = {0};
    long long n1, n2;
    int64_t pos = 0;
    int n;

    open_test_db("it_events_xid_first");
    make_runs("r", 3);
    a = th_pg(g_ci);
    b = th_pg(g_ci);

    PQclear(th_sql(b, "BEGIN"));
    PQclear(th_sql(b, "UPDATE runs SET updated_at = now() WHERE id = 'r2'"));
    PQclear(th_sql(a, "BEGIN"));
    n1 = write_ok(a, "r0", 10);
    n2 = write_ok(b, "r1", 20);
    ck_assert_int_gt(n2, n1);
    PQclear(th_sql(b, "COMMIT"));

    OK(store_events_advance(g_db, &pos, 50, 100, collect, &got, &n, &g_err));
    ck_assert_int_eq(n, 0);
    PQclear(th_sql(a, "COMMIT"));
    drain(g_db, &pos, n2, &got, 5000);
    assert_ids(&got, (long long[]){n1, n2}, 2);

    got_free(&got);
    PQfinish(a);
    PQfinish(b);
    close_test_db();
}
END_TEST

/* Scenario 3: B takes its xid first; A writes r0 at 10 and holds; B writes
 * r0 at 20 and waits on A's row lock; A commits, then B. Per run, id order
 * is commit order: A's event comes first and the newest state is last. */
START_TEST(per_run_order_behind_a_row_lock)
{
    PGconn *a, *b;
    PGresult *r;
    struct got got = {0};
    const char *params[2] = {"r0", "20"};
    long long n1, n2 = -1;
    int64_t pos = 0;
    json_t *run;

    open_test_db("it_events_row_lock");
    make_runs("r", 2);
    a = th_pg(g_ci);
    b = th_pg(g_ci);

    PQclear(th_sql(b, "BEGIN"));
    PQclear(th_sql(b, "UPDATE runs SET updated_at = now() WHERE id = 'r1'"));
    PQclear(th_sql(a, "BEGIN"));
    n1 = write_ok(a, "r0", 10);
    ck_assert_int_eq(PQsendQueryParams(b, WRITE_SQL, 2, NULL, params, NULL, NULL, 0), 1);
    th_sleep_ms(100);
    PQclear(th_sql(a, "COMMIT"));
    while ((r = PQgetResult(b)) != NULL) {
        if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
            n2 = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
        PQclear(r);
    }
    ck_assert_int_gt(n2, n1);
    PQclear(th_sql(b, "COMMIT"));

    drain(g_db, &pos, n2, &got, 5000);
    assert_ids(&got, (long long[]){n1, n2}, 2);
    run = json_loads(got.last_run_json, 0, NULL);
    ck_assert_ptr_nonnull(run);
    ck_assert_int_eq(json_integer_value(json_object_get(run, "progress")), 20);
    json_decref(run);

    got_free(&got);
    PQfinish(a);
    PQfinish(b);
    close_test_db();
}
END_TEST

/* ---- stress ----------------------------------------------------------- */

#define STRESS_WRITERS 6
#define STRESS_RUNS 16 /* per writer */
#define STRESS_MS 5000

struct writer {
    PGconn *c;
    int k;
    atomic_bool *stop;
    long long written, failed;
    char err[256];
};

/* Autocommit S_PROGRESS statements on the writer's own runs; every third
 * round an explicit transaction writes two runs, which widens the gap
 * between taking an id and committing it. */
static void *writer_main(void *arg)
{
    struct writer *w = arg;
    char run[32], run2[32];

    for (int i = 0; !atomic_load(w->stop); i++) {
        bool tx = i % 3 == 2;
        long long id;

        snprintf(run, sizeof(run), "w%dr%d", w->k, i % STRESS_RUNS);
        snprintf(run2, sizeof(run2), "w%dr%d", w->k, (i + 1) % STRESS_RUNS);
        if (tx)
            PQclear(PQexec(w->c, "BEGIN"));
        id = write_event(w->c, run, i % 101);
        if (id > 0 && tx)
            id = write_event(w->c, run2, i % 101);
        if (tx)
            PQclear(PQexec(w->c, id > 0 ? "COMMIT" : "ROLLBACK"));
        if (id > 0) {
            w->written += tx ? 2 : 1;
        } else if (w->failed++ == 0) {
            snprintf(w->err, sizeof(w->err), "%s", PQerrorMessage(w->c));
        }
    }
    return NULL;
}

/* The naive reader: "id > last ORDER BY id", moving last to the newest id
 * it has seen. Informational only. */
static void naive_round(struct db *db, int64_t *last, struct got *g)
{
    int n;

    OK(store_events_after(db, *last, INT64_MAX, EVENTS_PAGE_MAX, EVENTS_RUNS, collect, g, &n,
                          &g_err));
    if (g->n > 0)
        *last = g->ids[g->n - 1];
}

START_TEST(stress_exactly_once_in_order)
{
    struct writer w[STRESS_WRITERS];
    pthread_t t[STRESS_WRITERS];
    atomic_bool stop = false;
    struct db *naive_db;
    struct got got = {0}, naive = {0};
    int64_t pos = 0, naive_last = 0;
    long long written = 0, total, until, rounds = 0;
    PGresult *r;
    char prefix[16];
    int n;

    open_test_db("it_events_stress");
    for (int k = 0; k < STRESS_WRITERS; k++) {
        snprintf(prefix, sizeof(prefix), "w%dr", k);
        make_runs(prefix, STRESS_RUNS);
    }
    /* Every writer alternates between runs created now and runs created
     * before the template was migrated: two partitions. */
    PQclear(th_sql(g_pg, "UPDATE runs SET created_at = (SELECT hi - interval '1 second' FROM "
                         "opsrun_event_partitions() WHERE lo IS NULL) WHERE "
                         "right(id, 1) IN ('1', '3', '5', '7', '9')"));
    naive_db = connect_db(g_ci);
    for (int k = 0; k < STRESS_WRITERS; k++) {
        w[k] = (struct writer){.c = th_pg(g_ci), .k = k, .stop = &stop};
        ck_assert_int_eq(pthread_create(&t[k], NULL, writer_main, &w[k]), 0);
    }
    until = th_now_ms() + STRESS_MS;
    while (th_now_ms() < until) {
        OK(store_events_advance(g_db, &pos, 20, EVENTS_PAGE_MAX, collect, &got, &n, &g_err));
        naive_round(naive_db, &naive_last, &naive);
        rounds++;
    }
    atomic_store(&stop, true);
    for (int k = 0; k < STRESS_WRITERS; k++) {
        pthread_join(t[k], NULL);
        ck_assert_msg(w[k].failed == 0, "writer %d: %lld failures, first: %s", k, w[k].failed,
                      w[k].err);
        written += w[k].written;
        PQfinish(w[k].c);
    }
    total = th_sql_int(g_pg, "SELECT count(*) FROM run_events");
    ck_assert_int_eq(total, written);
    /* a bound, not a figure: the whole suite beside it on 2 cores once
     * left the reader 3,000 events short after 10 s */
    drain(g_db, &pos, th_sql_int(g_pg, "SELECT max(id) FROM run_events"), &got, 60000);
    naive_round(naive_db, &naive_last, &naive);

    ck_assert_int_eq(got.not_increasing, 0);
    ck_assert_int_eq(got.bad_json, 0);
    ck_assert_int_eq(got.null_run_json, 0);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(DISTINCT tableoid) FROM run_events"), 2);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM run_events_default"), 0);
    r = th_sql(g_pg, "SELECT id FROM run_events ORDER BY id");
    ck_assert_msg(got.n == PQntuples(r), "delivered %d events, %d committed", got.n, PQntuples(r));
    for (int i = 0; i < got.n; i++)
        ck_assert_msg(got.ids[i] == strtoll(PQgetvalue(r, i, 0), NULL, 10),
                      "delivery %d is id %" PRId64 ", committed id %s", i, got.ids[i],
                      PQgetvalue(r, i, 0));
    PQclear(r);
    fprintf(stderr,
            "stress: %d writers, %lld events committed, horizon reader delivered %d in %lld "
            "rounds (0 missed); the naive id > last reader missed %lld\n",
            STRESS_WRITERS, total, got.n, rounds, total - naive.n);

    got_free(&got);
    got_free(&naive);
    db_close(naive_db);
    close_test_db();
}
END_TEST

/* ---- stalls ----------------------------------------------------------- */

/* An open transaction that wrote an event holds the horizon back for as
 * long as it stays open; later commits wait behind it. A rolled-back id is
 * simply never delivered. */
START_TEST(open_writer_stalls_the_horizon)
{
    PGconn *s, *b;
    struct event_horizon h;
    struct got got = {0};
    long long held, after1, after2, gone, last;
    int64_t pos = 0;
    bool settled = true;
    int n;

    open_test_db("it_events_stall");
    make_runs("r", 3);
    s = th_pg(g_ci);
    b = th_pg(g_ci);

    PQclear(th_sql(s, "BEGIN"));
    held = write_ok(s, "r0", 1);
    after1 = write_ok(b, "r1", 2);
    after2 = write_ok(b, "r1", 3);
    for (int i = 0; i < 5; i++) {
        OK(store_events_advance(g_db, &pos, 60, 100, collect, &got, &n, &g_err));
        ck_assert_int_eq(n, 0);
        ck_assert_int_eq(pos, 0);
    }
    OK(store_events_horizon(g_db, &h, &g_err));
    ck_assert_int_eq(h.h, after2);
    ck_assert_int_ge(h.ninflight, 1);
    OK(store_events_settled(g_db, &h, &settled, &g_err));
    ck_assert(!settled);

    PQclear(th_sql(s, "COMMIT"));
    OK(store_events_settled(g_db, &h, &settled, &g_err));
    ck_assert(settled);
    event_horizon_cleanup(&h);
    drain(g_db, &pos, after2, &got, 5000);
    assert_ids(&got, (long long[]){held, after1, after2}, 3);

    /* A rolled-back writer: its id is skipped, the next one delivered. */
    PQclear(th_sql(s, "BEGIN"));
    gone = write_ok(s, "r2", 4);
    PQclear(th_sql(s, "ROLLBACK"));
    last = write_ok(b, "r2", 5);
    ck_assert_int_gt(last, gone);
    drain(g_db, &pos, last, &got, 5000);
    assert_ids(&got, (long long[]){held, after1, after2, last}, 4);
    ck_assert_int_eq(got.not_increasing, 0);

    got_free(&got);
    PQfinish(s);
    PQfinish(b);
    close_test_db();
}
END_TEST

/* ---- pruned runs ------------------------------------------------------ */

/* Deleting a run leaves its events in their partition (no cascade since
 * migration 013: retention drops the partition later). The global reader
 * still moves past them, with run_json NULL, so the hub shows nothing for
 * them; the replays and the snapshot never show them; and a run created
 * later under the same id does not take them over, neither those in its
 * span partition nor one in run_events_unknown. Bad arguments are refused. */
START_TEST(pruned_runs)
{
    struct got got = {0}, one = {0}, all = {0};
    struct event_filter f_one = {.tenant = "t", .run_id = "r0"}, f_all = {.tenant = "t"};
    struct run_snapshot snap;
    long long e0, e1, e2, e3;
    int64_t pos = 0;
    int n;

    open_test_db("it_events_pruned");
    make_runs("r", 2);
    e0 = write_ok(g_pg, "r0", 1);
    e1 = write_sql(g_pg, WRITE_SQL_UNNAMED, "r0", 2);
    e2 = write_ok(g_pg, "r1", 3);
    ck_assert_int_eq(e1, e0 + 1);

    /* Retention deletes r0, and with it e1 (in run_events_unknown); e0
     * stays in its span partition. The pruned-events mark covers both. */
    PQclear(th_sql(g_pg, "UPDATE runs SET status = 'completed', outcome = 'succeeded', "
                         "completed_at = now() - interval '1 hour' WHERE id = 'r0'"));
    OK(store_runs_prune(g_db, 60, 10, &n, &g_err));
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM run_events WHERE run_id = 'r0'"), 1);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT id FROM run_events WHERE run_id = 'r0'"), e0);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT upto FROM run_events_pruned"), e1);
    drain(g_db, &pos, e2, &got, 5000);
    assert_ids(&got, (long long[]){e0, e2}, 2);
    ck_assert_int_eq(got.null_run_json, 1);
    ck_assert_int_eq(got.bad_json, 0);

    /* r0 again, a later run: one event of its own. */
    PQclear(th_sql(g_pg, "INSERT INTO runs (tenant, id, type, status, attempt, max_attempts, "
                         "timeout_s, worker_id, input, identity_hash, request_hash) VALUES "
                         "('t', 'r0', 'T', 'running', 1, 3, 300, 'w', '{}', 'again', 'req')"));
    e3 = write_ok(g_pg, "r0", 4);
    OK(store_events_replay(g_db, &f_one, 0, e3, 100, collect, &one, &n, &g_err));
    assert_ids(&one, (long long[]){e3}, 1);
    OK(store_events_replay(g_db, &f_all, 0, e3, 100, collect, &all, &n, &g_err));
    assert_ids(&all, (long long[]){e2, e3}, 2);
    OK(store_events_run_snapshot(g_db, "t", "r0", e0, &snap, &g_err));
    ck_assert_int_eq(snap.last_id, e3);
    ck_assert(!snap.probe_found);
    run_snapshot_cleanup(&snap);
    OK(store_events_run_snapshot(g_db, "t", "r0", e3, &snap, &g_err));
    ck_assert(snap.probe_found);
    run_snapshot_cleanup(&snap);
    got_free(&got);
    OK(store_events_after(g_db, e2, e3, 10, EVENTS_RUNS, collect, &got, &n, &g_err));
    assert_ids(&got, (long long[]){e3}, 1);
    ck_assert_int_eq(got.null_run_json, 0);

    EXPECT(ST_INVALID, store_events_after(g_db, 0, e2, 0, EVENTS_RUNS, collect, &got, &n, &g_err));
    EXPECT(ST_INVALID, store_events_after(g_db, 0, e2, EVENTS_PAGE_MAX + 1, EVENTS_RUNS, collect,
                                          &got, &n, &g_err));
    EXPECT(ST_INVALID,
           store_events_after(g_db, -1, e2, 10, EVENTS_ENDED, collect, &got, &n, &g_err));
    EXPECT(ST_INVALID, store_events_advance(g_db, &pos, 0, 0, collect, &got, &n, &g_err));

    got_free(&got);
    got_free(&one);
    got_free(&all);
    close_test_db();
}
END_TEST

/* ---- each event's run --------------------------------------------------- */

/* What a page delivered, event by event. */
struct as_of {
    int n;
    long long id[64];
    char *json[64];    /* heap, NULL when the run is gone */
    bool compact[64];  /* run_json_compact */
    bool has_type[64]; /* run_type set */
};

static void as_of_add(void *arg, const struct event_row *ev)
{
    struct as_of *a = arg;

    if (a->n == 64)
        return;
    a->id[a->n] = ev->id;
    a->json[a->n] = ev->run_json ? xstrdup(ev->run_json) : NULL;
    a->compact[a->n] = ev->run_json_compact;
    a->has_type[a->n] = ev->run_type != NULL;
    a->n++;
}

static void as_of_free(struct as_of *a)
{
    for (int i = 0; i < a->n; i++)
        free(a->json[i]);
    memset(a, 0, sizeof(*a));
}

/* Reads every event in pages of `page` and checks each delivered run
 * against PostgreSQL's own opsrun_run_json_at for that event: the same
 * text once compacted, or, for a run jansson cannot hold, PostgreSQL's
 * text itself. Returns how many came through each path. */
static void expect_as_of(int page, int want_n, int *by_jansson, int *by_postgres)
{
    struct as_of a = {0};
    int64_t pos = 0;
    int n;

    *by_jansson = *by_postgres = 0;
    do {
        OK(store_events_after(g_db, pos, INT64_MAX, page, EVENTS_RUNS, as_of_add, &a, &n, &g_err));
        if (n > 0)
            pos = a.id[a.n - 1];
    } while (n == page);
    ck_assert_int_eq(a.n, want_n);
    for (int i = 0; i < a.n; i++) {
        PGresult *r = th_sql(g_pg,
                             "SELECT opsrun_run_json_at(r, e)::text FROM run_events e "
                             "JOIN runs r ON r.tenant = e.tenant AND r.id = e.run_id "
                             "WHERE e.id = %lld",
                             a.id[i]);
        const char *want = PQgetvalue(r, 0, 0);
        char *compact = hub_json_compact(want);
        ck_assert_int_eq(PQntuples(r), 1);
        ck_assert(a.has_type[i]);
        ck_assert_ptr_nonnull(a.json[i]);
        if (compact) {
            ck_assert_msg(a.compact[i] && strcmp(a.json[i], compact) == 0,
                          "event %lld (page %d): got %s, want %s", a.id[i], page, a.json[i],
                          compact);
            (*by_jansson)++;
        } else {
            ck_assert_msg(!a.compact[i] && strcmp(a.json[i], want) == 0,
                          "event %lld (page %d): got %s, want %s", a.id[i], page, a.json[i], want);
            (*by_postgres)++;
        }
        free(compact);
        PQclear(r);
    }
    as_of_free(&a);
}

/* A run's representation is built once per page, and each of its events
 * gets it as of the event (status, outcome, progress, step set in C): the
 * same as opsrun_run_json_at builds per event, whatever the page size and
 * however the runs' events interleave; PostgreSQL's own text for a run
 * jansson cannot hold. EVENTS_ENDED reads only the completions, bare. */
START_TEST(runs_as_of_each_event)
{
    int by_jansson, by_postgres, n;
    long long done;
    struct as_of a = {0};

    open_test_db("it_events_as_of");
    make_runs("j", 3);
    PQclear(th_sql(g_pg, "UPDATE runs SET input = '{\"s\": \"a\\\"b\\\\c \\u00e9 \\u0001 /\", "
                         "\"n\": 1.50, \"e\": 1e3, \"a\": [true, null, {}]}', "
                         "context = '{\"k\": \"v\"}', external_id = 'x-1' WHERE id = 'j0'"));
    PQclear(th_sql(g_pg, "UPDATE runs SET input = '{\"huge\": 123456789012345678901234567890}' "
                         "WHERE id = 'j2'"));
    write_ok(g_pg, "j0", 10);
    write_ok(g_pg, "j1", 20);
    write_ok(g_pg, "j0", 30);
    write_ok(g_pg, "j2", 40);
    write_ok(g_pg, "j1", 50);
    write_ok(g_pg, "j0", 60);
    done = th_sql_int(
        g_pg, "WITH upd AS (UPDATE runs SET status = 'completed', outcome = 'failed', "
              "step = NULL, progress = 55, completed_at = now() WHERE id = 'j1' "
              "RETURNING tenant, id, status, outcome, progress, step), "
              "ev AS (INSERT INTO run_events (tenant, run_id, type, status, outcome, progress, "
              "step) SELECT tenant, id, 'status', status, outcome, progress, step FROM upd "
              "RETURNING id) SELECT id FROM ev");
    write_ok(g_pg, "j2", 70);
    write_ok(g_pg, "j0", 80);

    for (int page = 1; page <= 10; page++) {
        expect_as_of(page, 9, &by_jansson, &by_postgres);
        ck_assert_int_eq(by_jansson, 7);
        ck_assert_int_eq(by_postgres, 2);
    }

    OK(store_events_after(g_db, 0, INT64_MAX, 10, EVENTS_ENDED, as_of_add, &a, &n, &g_err));
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(a.id[0], done);
    ck_assert_ptr_null(a.json[0]);
    ck_assert(!a.has_type[0]);
    as_of_free(&a);
    close_test_db();
}
END_TEST

static TCase *tcase(const char *name, double timeout_s)
{
    TCase *tc = tcase_create(name);
    tcase_set_timeout(tc, timeout_s);
    return tc;
}

int main(void)
{
    Suite *s = suite_create("events");
    TCase *tc;

    tc = tcase("scenarios", 60);
    tcase_add_test(tc, reorder_two_writers);
    tcase_add_test(tc, reorder_xid_first);
    tcase_add_test(tc, per_run_order_behind_a_row_lock);
    suite_add_tcase(s, tc);

    tc = tcase("stress", 120);
    tcase_add_test(tc, stress_exactly_once_in_order);
    suite_add_tcase(s, tc);

    tc = tcase("stall_prune", 60);
    tcase_add_test(tc, open_writer_stalls_the_horizon);
    tcase_add_test(tc, pruned_runs);
    tcase_add_test(tc, runs_as_of_each_event);
    suite_add_tcase(s, tc);

    return th_run_suite(s);
}
