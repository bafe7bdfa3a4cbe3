/* tests/integration/test_store.c — the store API (store/runs.h, store/db.h,
 * store/migrations.h) driven in-process against a real PostgreSQL: migrations,
 * submit and dedupe (with a 50-thread race), claim order, max_running and
 * per-type caps under contention (sampled from outside), fencing, orphan
 * rescue, every cancel and retry path, progress, retention, listing with
 * cursors, tenant isolation, and a PostgreSQL restart (last).
 *
 * Each test gets a fresh database cloned from the migrated template. The code
 * under test only sees its own struct db; raw libpq (th_sql) arranges states
 * and checks rows. Threads never call ck_assert: they record what went wrong
 * and the test thread asserts after joining them.
 *
 * System headers come before the opsrun headers, ahead of common.h's poison
 * pragma. */
#include <check.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>
#include <libpq-fe.h>

#include "common/cursor.h"
#include "common/ids.h"
#include "common/time_rfc3339.h"
#include "store/db.h"
#include "store/migrations.h"
#include "store/polls.h"
#include "store/runs.h"
#include "tests/support/fixture.h"
#include "tests/support/harness.h"

/* ---- helpers ---------------------------------------------------------- */

static const char *const TYPES_T[] = {"T"};
static const int CAPS_NONE[] = {0};
static const struct poll_budget BUDGET = {120, 1740};

/* The first column of the first row as a heap string (NULL for SQL NULL or
 * no row). */
static char *sql_str(const char *fmt, ...) PRINTF_LIKE(1, 2);
static char *sql_str(const char *fmt, ...)
{
    char sql[4096];
    va_list ap;
    PGresult *r;
    char *v = NULL;

    va_start(ap, fmt);
    vsnprintf(sql, sizeof(sql), fmt, ap);
    va_end(ap);
    r = th_sql(g_pg, "%s", sql);
    if (PQntuples(r) > 0 && !PQgetisnull(r, 0, 0))
        v = xstrdup(PQgetvalue(r, 0, 0));
    PQclear(r);
    return v;
}

/* Asserts that got, expr read from what (e.g. "run X"), is the text want
 * (NULL = SQL NULL, or no row); frees got. */
static void assert_text(const char *what, const char *expr, char *got, const char *want)
{
    if (want)
        ck_assert_msg(got && strcmp(got, want) == 0, "%s: %s is %s, want %s", what, expr,
                      got ? got : "NULL", want);
    else
        ck_assert_msg(!got, "%s: %s is %s, want NULL", what, expr, got);
    free(got);
}

/* Asserts that SQL expression expr over run id's row is the text want
 * (NULL = SQL NULL). */
static void assert_col(const char *id, const char *expr, const char *want)
{
    char what[96];

    snprintf(what, sizeof(what), "run %s", id);
    assert_text(what, expr, sql_str("SELECT (%s)::text FROM runs WHERE id = '%s'", expr, id), want);
}

static long long col_int(const char *id, const char *expr)
{
    return th_sql_int(g_pg, "SELECT (%s)::bigint FROM runs WHERE id = '%s'", expr, id);
}

static void assert_state(const char *id, const char *status, const char *outcome)
{
    assert_col(id, "status", status);
    assert_col(id, "outcome", outcome);
}

static long long n_events(const char *id)
{
    return th_sql_int(g_pg, "SELECT count(*) FROM run_events WHERE run_id = '%s'", id);
}

/* The newest event of run id, as "type/status/outcome/progress/step/message"
 * (NULL parts as "-"). */
static char *last_event(const char *id)
{
    return sql_str("SELECT concat_ws('/', type, status, outcome, progress, coalesce(step, '-'), "
                   "coalesce(message, '-')) FROM run_events WHERE run_id = '%s' "
                   "ORDER BY id DESC LIMIT 1",
                   id);
}

static void assert_last_event(const char *id, const char *want)
{
    char *got = last_event(id);

    ck_assert_msg(got && strcmp(got, want) == 0, "run %s: last event %s, want %s", id,
                  got ? got : "(none)", want);
    free(got);
}

struct sub {
    const char *tenant, *id, *type, *ident, *req, *run_at;
    int priority, max_attempts;
};

/* Submits with the store API on db, asserting ST_OK; returns the run. */
static struct run *submit_on(struct db *db, const struct sub *s, bool *dedup)
{
    json_t *in = json_pack("{s:s}", "ident", s->ident);
    struct run_new rn = {
        .tenant = s->tenant ? s->tenant : "default",
        .id = s->id,
        .type = s->type ? s->type : "T",
        .priority = s->priority,
        .run_at = s->run_at,
        .max_attempts = s->max_attempts ? s->max_attempts : 3,
        .timeout_s = 300,
        .input = in,
        .identity_hash = s->ident,
        .request_hash = s->req ? s->req : "req",
    };
    struct run *run = NULL;
    bool d = true;

    OK(store_runs_submit(db, &rn, &run, &d, &g_err));
    ck_assert_ptr_nonnull(run);
    json_decref(in);
    if (dedup)
        *dedup = d;
    return run;
}

/* A new queued run with a generated id; returns the id (heap). */
static char *new_run_full(const char *tenant, const char *type, int priority, const char *run_at,
                          int max_attempts)
{
    char id[27], ident[64];
    bool dedup = true;
    struct run *run;
    char *out;

    run_id_new(id);
    snprintf(ident, sizeof(ident), "ident-%s", id);
    run = submit_on(g_db,
                    &(struct sub){.tenant = tenant,
                                  .id = id,
                                  .type = type,
                                  .ident = ident,
                                  .run_at = run_at,
                                  .priority = priority,
                                  .max_attempts = max_attempts},
                    &dedup);
    ck_assert(!dedup);
    ck_assert_str_eq(run->id, id);
    ck_assert_str_eq(run_status_name(run->status), "queued");
    out = xstrdup(run->id);
    run_free(run);
    return out;
}

static char *new_run(int max_attempts)
{
    return new_run_full(NULL, "T", 0, NULL, max_attempts);
}

/* Claims up to limit runs of type T for worker (max_running 100). */
static size_t claim_t(const char *worker, int limit, struct run ***runs)
{
    size_t n = 0;

    OK(store_runs_claim(g_db, worker, limit, 100, TYPES_T, CAPS_NONE, NULL, 1, runs, &n, &g_err));
    return n;
}

static void free_runs(struct run **runs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        run_free(runs[i]);
    free(runs);
}

/* Claims one run of type T for worker and asserts it is id at attempt. */
static void claim_expect(const char *worker, const char *id, int attempt)
{
    struct run **runs = NULL;
    size_t n = claim_t(worker, 1, &runs);

    ck_assert_msg(n == 1, "%s claimed %zu runs, want 1 (%s)", worker, n, id);
    ck_assert_str_eq(runs[0]->id, id);
    ck_assert_str_eq(run_status_name(runs[0]->status), "running");
    ck_assert_int_eq(runs[0]->attempt, attempt);
    free_runs(runs, n);
    assert_col(id, "worker_id", worker);
}

/* The SQL expression expr over run id's row as a double. */
static double col_double(const char *id, const char *expr)
{
    char *v = sql_str("SELECT (%s)::float8 FROM runs WHERE id = '%s'", expr, id);
    double d = v ? atof(v) : -1;

    free(v);
    return d;
}

static void claim_none(const char *worker)
{
    struct run **runs = NULL;
    size_t n = claim_t(worker, 10, &runs);

    ck_assert_msg(n == 0, "%s claimed %zu runs (first %s), want none", worker, n,
                  n ? runs[0]->id : "");
    free_runs(runs, n);
}

static enum status finish_as(const char *id, const char *worker, int attempt,
                             enum run_outcome outcome)
{
    struct fence f = {"default", id, worker, attempt};
    struct run_result res = {.outcome = outcome, .message = run_outcome_name(outcome)};

    memset(&g_err, 0, sizeof(g_err));
    return store_runs_finish(g_db, &f, &res, &g_err);
}

static void rfc3339_in(int64_t offset_ms, char out[40])
{
    time_format_rfc3339((clock_wall_ms() + offset_ms) * 1000, out, 40);
}

/* ---- migrations ------------------------------------------------------- */

START_TEST(migrate_idempotent)
{
    char *admin = th_conninfo("postgres"), *ci;
    PGconn *a;
    struct db *db;
    int applied = -1;

    open_test_db("it_store_migrate");
    OK(store_migrate(g_db, &applied, &g_err));
    ck_assert_int_eq(applied, 0);
    OK(store_migrations_current(g_db, &g_err));
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM schema_migrations"),
                     (long long)migrations_count);

    /* An empty database: everything once, then nothing. */
    a = th_pg(admin);
    PQclear(th_sql(a, "DROP DATABASE IF EXISTS it_store_empty WITH (FORCE)"));
    PQclear(th_sql(a, "CREATE DATABASE it_store_empty TEMPLATE template0"));
    ci = th_conninfo("it_store_empty");
    db = connect_db(ci);
    applied = -1;
    OK(store_migrate(db, &applied, &g_err));
    ck_assert_int_eq(applied, (int)migrations_count);
    OK(store_migrations_current(db, &g_err));
    applied = -1;
    OK(store_migrate(db, &applied, &g_err));
    ck_assert_int_eq(applied, 0);
    OK(store_migrations_current(db, &g_err));
    db_close(db);
    PQclear(th_sql(a, "DROP DATABASE it_store_empty WITH (FORCE)"));
    PQfinish(a);
    free(ci);
    free(admin);
    close_test_db();
}
END_TEST

/* ---- submit and dedupe ------------------------------------------------ */

/* opsrun's connections run without JIT, whatever the server's default
 * (on in PostgreSQL 15): compiling a generically planned list took 0.4 s. */
START_TEST(connections_run_without_jit)
{
    open_test_db("it_store_jit");
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT (current_setting('jit') = 'on')::int"), 1);
    OK(db_exec_simple(g_db,
                      "DO $$BEGIN IF current_setting('jit') <> 'off' THEN RAISE EXCEPTION "
                      "'jit is %', current_setting('jit'); END IF; END$$",
                      &g_err));
    close_test_db();
}
END_TEST

START_TEST(submit_dedupe_and_conflict)
{
    struct sub s1 = {.id = "sub-1", .ident = "ident-1", .req = "req-1"};
    struct run *run;
    bool dedup = true;
    json_t *evs = NULL;

    open_test_db("it_store_submit");

    /* New run. */
    run = submit_on(g_db, &s1, &dedup);
    ck_assert(!dedup);
    ck_assert_str_eq(run->id, "sub-1");
    ck_assert_str_eq(run->tenant, "default");
    ck_assert_str_eq(run_status_name(run->status), "queued");
    ck_assert_str_eq(run_outcome_name(run->outcome), "pending");
    ck_assert_int_eq(run->attempt, 0);
    ck_assert_int_eq(run->max_attempts, 3);
    ck_assert_str_eq(json_string_value(json_object_get(run->json, "status")), "queued");
    ck_assert_str_eq(json_string_value(json_object_get(run_input(run), "ident")), "ident-1");
    run_free(run);
    OK(store_events_list(g_db, "default", "sub-1", &evs, &g_err));
    ck_assert_int_eq(json_array_size(evs), 1);
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(evs, 0), "type")), "status");
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(evs, 0), "status")),
                     "queued");
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(evs, 0), "message")),
                     "submitted");
    json_decref(evs);

    /* Same id, same request: the same run. */
    run = submit_on(g_db, &s1, &dedup);
    ck_assert(dedup);
    ck_assert_str_eq(run->id, "sub-1");
    ck_assert_str_eq(run_status_name(run->status), "queued");
    run_free(run);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs"), 1);
    ck_assert_int_eq(n_events("sub-1"), 1);

    /* Same id, another request: conflict, nothing touched. */
    {
        json_t *in = json_object();
        struct run_new rn = {.tenant = "default",
                             .id = "sub-1",
                             .type = "T",
                             .max_attempts = 1,
                             .timeout_s = 5,
                             .input = in,
                             .identity_hash = "ident-other",
                             .request_hash = "req-2"};
        run = (struct run *)1;
        EXPECT(ST_CONFLICT, store_runs_submit(g_db, &rn, &run, &dedup, &g_err));
        ck_assert_ptr_null(run);
        ck_assert_msg(strstr(g_err.message, "sub-1") != NULL, "message: %s", g_err.message);
        json_decref(in);
    }
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs"), 1);
    assert_col("sub-1", "request_hash", "req-1");
    assert_col("sub-1", "max_attempts", "3");
    ck_assert_int_eq(n_events("sub-1"), 1);

    /* Another id, same identity while active: joins the active run. */
    run = submit_on(g_db, &(struct sub){.id = "sub-2", .ident = "ident-1", .req = "req-3"}, &dedup);
    ck_assert(dedup);
    ck_assert_str_eq(run->id, "sub-1");
    run_free(run);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs"), 1);

    /* Also while running (any status but completed is active). */
    claim_expect("w1", "sub-1", 1);
    run = submit_on(g_db, &(struct sub){.id = "sub-2", .ident = "ident-1", .req = "req-3"}, &dedup);
    ck_assert(dedup);
    ck_assert_str_eq(run->id, "sub-1");
    ck_assert_str_eq(run_status_name(run->status), "running");
    run_free(run);

    /* Once it completed, the identity starts a new run. */
    ck_assert_int_eq(finish_as("sub-1", "w1", 1, OUTCOME_SUCCEEDED), ST_OK);
    run = submit_on(g_db, &(struct sub){.id = "sub-2", .ident = "ident-1", .req = "req-3"}, &dedup);
    ck_assert(!dedup);
    ck_assert_str_eq(run->id, "sub-2");
    ck_assert_str_eq(run_status_name(run->status), "queued");
    run_free(run);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE identity_hash = 'ident-1'"),
                     2);
    ck_assert_int_eq(n_events("sub-2"), 1);

    /* The id still names the completed run: an id collision wins over the
     * identity. */
    run = submit_on(g_db, &s1, &dedup);
    ck_assert(dedup);
    ck_assert_str_eq(run->id, "sub-1");
    ck_assert_str_eq(run_status_name(run->status), "completed");
    run_free(run);
    close_test_db();
}
END_TEST

/* ---- the dedupe race -------------------------------------------------- */

#define RACE_THREADS 50
#define RACE_ROUNDS 3

struct racer {
    pthread_barrier_t *bar;
    const char *ci;
    char id[RACE_ROUNDS][27];
    char got[RACE_ROUNDS][130];
    bool dedup[RACE_ROUNDS];
    enum status st;
    char msg[640];
};

static void *racer_main(void *arg)
{
    struct racer *r = arg;
    struct db_options o = {.conninfo = r->ci, .connect_timeout_s = 10};
    struct error err = {0};
    struct db *db = NULL;

    r->st = db_connect(&o, &db, &err);
    if (r->st != ST_OK)
        snprintf(r->msg, sizeof(r->msg), "connect: %s", err.message);
    for (int round = 0; round < RACE_ROUNDS; round++) {
        char ident[32];
        json_t *in = json_object();
        struct run_new rn = {.tenant = "default",
                             .id = r->id[round],
                             .type = "T",
                             .max_attempts = 3,
                             .timeout_s = 60,
                             .input = in,
                             .identity_hash = ident,
                             .request_hash = r->id[round]};
        struct run *run = NULL;

        snprintf(ident, sizeof(ident), "race-%d", round);
        run_id_new(r->id[round]);
        pthread_barrier_wait(r->bar);
        if (r->st == ST_OK) {
            r->st = store_runs_submit(db, &rn, &run, &r->dedup[round], &err);
            if (r->st != ST_OK)
                snprintf(r->msg, sizeof(r->msg), "round %d submit: %s", round, err.message);
            else
                snprintf(r->got[round], sizeof(r->got[round]), "%s", run->id);
        }
        run_free(run);
        json_decref(in);
    }
    db_close(db);
    return NULL;
}

START_TEST(dedupe_race)
{
    static struct racer rs[RACE_THREADS];
    pthread_t th[RACE_THREADS];
    pthread_barrier_t bar;

    open_test_db("it_store_race");
    pthread_barrier_init(&bar, NULL, RACE_THREADS);
    for (int i = 0; i < RACE_THREADS; i++) {
        memset(&rs[i], 0, sizeof(rs[i]));
        rs[i].bar = &bar;
        rs[i].ci = g_ci;
        ck_assert_int_eq(pthread_create(&th[i], NULL, racer_main, &rs[i]), 0);
    }
    for (int i = 0; i < RACE_THREADS; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&bar);

    for (int i = 0; i < RACE_THREADS; i++)
        ck_assert_msg(rs[i].st == ST_OK, "racer %d: %s: %s", i, status_name(rs[i].st), rs[i].msg);
    for (int round = 0; round < RACE_ROUNDS; round++) {
        int inserted = 0, winner = -1;

        for (int i = 0; i < RACE_THREADS; i++) {
            ck_assert_msg(strcmp(rs[i].got[round], rs[0].got[round]) == 0,
                          "round %d: racer %d got run %s, racer 0 got %s", round, i,
                          rs[i].got[round], rs[0].got[round]);
            if (!rs[i].dedup[round]) {
                inserted++;
                winner = i;
            }
        }
        ck_assert_msg(inserted == 1, "round %d: %d submissions were not deduplicated", round,
                      inserted);
        ck_assert_str_eq(rs[winner].got[round], rs[winner].id[round]);
        ck_assert_int_eq(
            th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE identity_hash = 'race-%d'", round),
            1);
        ck_assert_int_eq(n_events(rs[winner].id[round]), 1);
    }
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs"), RACE_ROUNDS);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM run_events WHERE type = 'status' "
                                      "AND message = 'submitted'"),
                     RACE_ROUNDS);
    close_test_db();
}
END_TEST

/* ---- max_running and caps under contention ---------------------------- */

#define CONT_RUNS 300
#define CONT_CLAIMERS 16
#define CONT_MAX_RUNNING 10
#define CONT_CAP_A 3

struct contention {
    const char *ci;
    pthread_barrier_t bar;
    atomic_int done;     /* runs finished */
    atomic_bool stop;    /* a claimer failed: everyone stops */
    atomic_bool sampler; /* claimers are done: the sampler stops */
};

struct claimer {
    struct contention *c;
    char worker[16];
    int claimed, finished, bad_attempt;
    enum status st;
    char msg[640];
};

static void *claimer_main(void *arg)
{
    static const char *const types[] = {"A", "B"};
    static const int caps[] = {CONT_CAP_A, 0};
    struct claimer *w = arg;
    struct contention *c = w->c;
    struct db_options o = {.conninfo = c->ci, .connect_timeout_s = 10};
    struct error err = {0};
    struct db *db = NULL;
    int64_t deadline = clock_mono_ms() + 40000;

    w->st = db_connect(&o, &db, &err);
    if (w->st != ST_OK)
        snprintf(w->msg, sizeof(w->msg), "connect: %s", err.message);
    pthread_barrier_wait(&c->bar);
    while (w->st == ST_OK && !atomic_load(&c->stop) && atomic_load(&c->done) < CONT_RUNS &&
           clock_mono_ms() < deadline) {
        struct run **runs = NULL;
        size_t n = 0;

        w->st = store_runs_claim(db, w->worker, 4, CONT_MAX_RUNNING, types, caps, NULL, 2, &runs,
                                 &n, &err);
        if (w->st != ST_OK) {
            snprintf(w->msg, sizeof(w->msg), "claim: %s", err.message);
            break;
        }
        w->claimed += (int)n;
        for (size_t i = 0; i < n; i++) {
            struct fence f = {runs[i]->tenant, runs[i]->id, w->worker, runs[i]->attempt};
            struct run_result res = {.outcome = OUTCOME_SUCCEEDED, .message = "done"};

            if (runs[i]->attempt != 1)
                w->bad_attempt++;
            th_sleep_ms(10 + (long)rand_below(10));
            if (w->st == ST_OK) {
                w->st = store_runs_finish(db, &f, &res, &err);
                if (w->st != ST_OK)
                    snprintf(w->msg, sizeof(w->msg), "finish %s: %s", runs[i]->id, err.message);
                else {
                    w->finished++;
                    atomic_fetch_add(&c->done, 1);
                }
            }
        }
        free_runs(runs, n);
        if (n == 0)
            th_sleep_ms(1);
    }
    if (w->st != ST_OK)
        atomic_store(&c->stop, true);
    db_close(db);
    return NULL;
}

struct sampler {
    struct contention *c;
    long samples, at_max, a_at_cap, hist[CONT_MAX_RUNNING + 2];
    int max_total, max_a;
    char msg[640];
};

static void *sampler_main(void *arg)
{
    struct sampler *s = arg;
    PGconn *pg = PQconnectdb(s->c->ci);

    if (PQstatus(pg) != CONNECTION_OK)
        snprintf(s->msg, sizeof(s->msg), "connect: %s", PQerrorMessage(pg));
    pthread_barrier_wait(&s->c->bar);
    while (!s->msg[0] && !atomic_load(&s->c->sampler)) {
        PGresult *r = PQexec(pg, "SELECT count(*) FILTER (WHERE status IN ('running', "
                                 "'cancelling')), count(*) FILTER (WHERE type = 'A' AND "
                                 "status IN ('running', 'cancelling')) FROM runs");
        int total, a;

        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
            snprintf(s->msg, sizeof(s->msg), "sample: %s", PQerrorMessage(pg));
            PQclear(r);
            break;
        }
        total = atoi(PQgetvalue(r, 0, 0));
        a = atoi(PQgetvalue(r, 0, 1));
        PQclear(r);
        s->samples++;
        s->max_total = total > s->max_total ? total : s->max_total;
        s->max_a = a > s->max_a ? a : s->max_a;
        s->at_max += total == CONT_MAX_RUNNING;
        s->a_at_cap += a == CONT_CAP_A;
        s->hist[total > CONT_MAX_RUNNING ? CONT_MAX_RUNNING + 1 : total]++;
    }
    PQfinish(pg);
    return NULL;
}

START_TEST(max_running_under_contention)
{
    static struct claimer ws[CONT_CLAIMERS];
    struct contention c = {0};
    struct sampler s = {.c = &c};
    pthread_t th[CONT_CLAIMERS], sth;
    int claimed = 0, finished = 0;
    int64_t t0;

    open_test_db("it_store_contention");
    /* Half A (capped at 3), half B (no cap), interleaved. */
    for (int i = 0; i < CONT_RUNS; i++)
        free(new_run_full(NULL, i % 2 ? "B" : "A", 0, NULL, 3));
    c.ci = g_ci;
    atomic_init(&c.done, 0);
    atomic_init(&c.stop, false);
    atomic_init(&c.sampler, false);
    pthread_barrier_init(&c.bar, NULL, CONT_CLAIMERS + 1);
    ck_assert_int_eq(pthread_create(&sth, NULL, sampler_main, &s), 0);
    t0 = clock_mono_ms();
    for (int i = 0; i < CONT_CLAIMERS; i++) {
        memset(&ws[i], 0, sizeof(ws[i]));
        ws[i].c = &c;
        snprintf(ws[i].worker, sizeof(ws[i].worker), "w%02d", i);
        ck_assert_int_eq(pthread_create(&th[i], NULL, claimer_main, &ws[i]), 0);
    }
    for (int i = 0; i < CONT_CLAIMERS; i++)
        pthread_join(th[i], NULL);
    atomic_store(&c.sampler, true);
    pthread_join(sth, NULL);
    pthread_barrier_destroy(&c.bar);
    fprintf(stderr,
            "contention: %d runs in %lld ms; %ld samples, max total %d (at max %ld), max A %d "
            "(at cap %ld)\n",
            atomic_load(&c.done), (long long)(clock_mono_ms() - t0), s.samples, s.max_total,
            s.at_max, s.max_a, s.a_at_cap);
    for (int i = 0; i <= CONT_MAX_RUNNING + 1; i++)
        fprintf(stderr, "%d:%ld ", i, s.hist[i]);
    fprintf(stderr, "\n");

    for (int i = 0; i < CONT_CLAIMERS; i++) {
        ck_assert_msg(ws[i].st == ST_OK, "%s: %s: %s", ws[i].worker, status_name(ws[i].st),
                      ws[i].msg);
        ck_assert_msg(ws[i].bad_attempt == 0, "%s claimed %d runs at attempt != 1", ws[i].worker,
                      ws[i].bad_attempt);
        claimed += ws[i].claimed;
        finished += ws[i].finished;
    }
    ck_assert_msg(!s.msg[0], "sampler: %s", s.msg);
    ck_assert_int_eq(claimed, CONT_RUNS);
    ck_assert_int_eq(finished, CONT_RUNS);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE status = 'completed' AND "
                                      "outcome = 'succeeded' AND attempt = 1"),
                     CONT_RUNS);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs r WHERE (SELECT count(*) FROM "
                                      "run_events e WHERE e.run_id = r.id AND e.type = 'status' "
                                      "AND e.status = 'running') <> 1"),
                     0);
    ck_assert_msg(s.max_total <= CONT_MAX_RUNNING, "sampled %d running, max_running is %d",
                  s.max_total, CONT_MAX_RUNNING);
    ck_assert_msg(s.max_a <= CONT_CAP_A, "sampled %d running of type A, its cap is %d", s.max_a,
                  CONT_CAP_A);
    /* The sampler looked often enough to see anything (the peaks below say
     * it saw the contention); how often depends on the machine's load (266
     * samples on a loaded 2-core machine, about 500 on a quiet one), so the
     * floor is low. */
    ck_assert_msg(s.samples >= 100, "only %ld samples", s.samples);
    ck_assert_msg(s.at_max > 0, "never saw %d running: no contention", CONT_MAX_RUNNING);
    ck_assert_msg(s.a_at_cap > 0, "never saw %d running of type A: the cap never bit", CONT_CAP_A);
    close_test_db();
}
END_TEST

/* ---- claim order ------------------------------------------------------ */

/* Whether the store's statement went through migration 027's function fn
 * (its signature, for ALTER FUNCTION): call, run with fn renamed away, fails
 * when it did (g_unnamed), and succeeds when it did not. So that the loop
 * tests that run in both modes compare what they say they compare. */
#define ASSERT_THROUGH_FN(fn, args, call)                                                          \
    do {                                                                                           \
        enum status through_;                                                                      \
        struct error through_err_ = {0};                                                           \
        PQclear(th_sql(g_pg, "ALTER FUNCTION " fn args " RENAME TO away"));                        \
        through_ = (call);                                                                         \
        PQclear(th_sql(g_pg, "ALTER FUNCTION away" args " RENAME TO " fn));                        \
        if (g_unnamed)                                                                             \
            ck_assert_msg(through_ != ST_OK, "%s did not call " fn, #call);                        \
        else                                                                                       \
            ck_assert_msg(through_ == ST_OK, "%s: %s", #call, through_err_.message);               \
    } while (0)

/* Both in both modes (the loop's _i: 0 named prepared statements, 1
 * unnamed, where the next-due query is migration 027's function). */
START_TEST(claim_order_delay_and_types)
{
    char at_m20[40], at_m10[40], at_m5[40], at_m1[40], at_p1h[40];
    char *lo_old, *hi, *oldest, *tie1, *tie2, *future, *unknown;
    int64_t due = -2;
    bool due_now = true;

    g_unnamed = _i == 1;
    open_test_db(g_unnamed ? "it_store_order_fn" : "it_store_order");
    rfc3339_in(-20000, at_m20);
    rfc3339_in(-10000, at_m10);
    rfc3339_in(-5000, at_m5);
    rfc3339_in(-1000, at_m1);
    rfc3339_in(3600000, at_p1h);
    OK(store_runs_next_due(g_db, clock_mono_us(), &due, &due_now, &g_err));
    ck_assert_int_eq(due, -1);
    ck_assert(!due_now);

    lo_old = new_run_full(NULL, "T", 0, at_m10, 3);
    hi = new_run_full(NULL, "T", 5, at_m1, 3);
    oldest = new_run_full(NULL, "T", 0, at_m20, 3);
    tie1 = new_run_full(NULL, "T", 0, at_m5, 3);
    tie2 = new_run_full(NULL, "T", 0, at_m5, 3);
    future = new_run_full(NULL, "T", 10, at_p1h, 3);
    /* Same priority and run_at: creation decides, not insertion order. */
    PQclear(th_sql(g_pg,
                   "UPDATE runs SET created_at = created_at - interval '1 minute' "
                   "WHERE id = '%s'",
                   tie2));

    claim_expect("w1", hi, 1);     /* priority first */
    claim_expect("w1", oldest, 1); /* then run_at */
    claim_expect("w1", lo_old, 1);
    claim_expect("w1", tie2, 1); /* then creation */
    claim_expect("w1", tie1, 1);
    claim_none("w1"); /* the future run is not due, for all its priority */
    assert_state(future, "queued", "pending");
    ck_assert_int_eq(col_int(future, "attempt"), 0);

    OK(store_runs_next_due(g_db, clock_mono_us(), &due, &due_now, &g_err));
    ck_assert_msg(due > 3590000 && due <= 3600000, "next due in %lld ms, want ~3600000",
                  (long long)due);
    ck_assert(!due_now);

    /* A type this process does not execute is never claimed; it is reported
     * as due now, so the dispatcher waits instead of spinning on it. */
    unknown = new_run_full(NULL, "U", 100, at_m20, 3);
    claim_none("w1");
    OK(store_runs_next_due(g_db, clock_mono_us(), &due, &due_now, &g_err));
    ck_assert(due_now);
    ck_assert_msg(due > 3590000, "a due run must not make the delay 0 (got %lld)", (long long)due);
    assert_state(unknown, "queued", "pending");
    assert_col(unknown, "worker_id", NULL);
    {
        static const char *const tu[] = {"T", "U"};
        static const int cu[] = {0, 0};
        struct run **runs = NULL;
        size_t n = 0;
        OK(store_runs_claim(g_db, "w2", 10, 100, tu, cu, NULL, 2, &runs, &n, &g_err));
        ck_assert_int_eq(n, 1);
        ck_assert_str_eq(runs[0]->id, unknown);
        free_runs(runs, n);
    }
    /* limit and max_running bound a claim. */
    PQclear(th_sql(g_pg, "UPDATE runs SET run_at = now() WHERE id = '%s'", future));
    {
        struct run **runs = NULL;
        size_t n = 0;
        /* Six running already: max_running 6 leaves no room. */
        OK(store_runs_claim(g_db, "w3", 10, 6, TYPES_T, CAPS_NONE, NULL, 1, &runs, &n, &g_err));
        ck_assert_int_eq(n, 0);
        free_runs(runs, n);
        OK(store_runs_claim(g_db, "w3", 10, 7, TYPES_T, CAPS_NONE, NULL, 1, &runs, &n, &g_err));
        ck_assert_int_eq(n, 1);
        ck_assert_str_eq(runs[0]->id, future);
        free_runs(runs, n);
    }
    free(lo_old);
    free(hi);
    free(oldest);
    free(tie1);
    free(tie2);
    free(future);
    free(unknown);
    ASSERT_THROUGH_FN("opsrun_next_due", "()",
                      store_runs_next_due(g_db, clock_mono_us(), &due, &due_now, &through_err_));
    close_test_db();
}
END_TEST

/* Asserts that the one claimed run holds what its worker needs: no API
 * representation, its input, its deadline, and by the database's clock how
 * long it had been due and how long it ran before this attempt. */
static void assert_claimed(const struct run *run, const char *id, int attempt)
{
    char *in = json_dumps(run_input(run), JSON_COMPACT | JSON_SORT_KEYS);

    ck_assert_str_eq(run->id, id);
    ck_assert_str_eq(run->tenant, "default");
    ck_assert_str_eq(run->type, "T");
    ck_assert_str_eq(run_status_name(run->status), "running");
    ck_assert_str_eq(run_outcome_name(run->outcome), "pending");
    ck_assert_int_eq(run->attempt, attempt);
    ck_assert_int_eq(run->max_attempts, 3);
    ck_assert_ptr_null(run->json);
    ck_assert_str_eq(in, "{\"a\":[1,2.5,\"x\"],\"b\":{\"c\":null,\"d\":\"\u00e9\"}}");
    ck_assert(run->has_deadline);
    ck_assert_msg(run->deadline_left_ms > 290000 && run->deadline_left_ms <= 300000,
                  "deadline in %lld ms, want ~300000", (long long)run->deadline_left_ms);
    ck_assert_int_eq(run->created_us, col_int(id, "extract(epoch FROM created_at) * 1000000"));
    ck_assert_double_eq_tol(run->claim_due_s,
                            col_double(id, "extract(epoch FROM updated_at - run_at)"), 1e-6);
    ck_assert_double_eq_tol(run->claim_ran_s,
                            col_double(id, "extract(epoch FROM updated_at - started_at)"), 1e-6);
    free(in);
}

START_TEST(claim_returns_what_the_worker_needs)
{
    char at_m10[40];
    char *id;
    struct run **runs = NULL;
    size_t n;

    open_test_db("it_store_claim_cols");
    rfc3339_in(-10000, at_m10);
    id = new_run_full(NULL, "T", 0, at_m10, 3);
    PQclear(th_sql(g_pg,
                   "UPDATE runs SET input = '{\"b\": {\"c\": null, \"d\": \"\\u00e9\"}, "
                   "\"a\": [1, 2.5, \"x\"]}' WHERE id = '%s'",
                   id));
    n = claim_t("w1", 10, &runs);
    ck_assert_int_eq(n, 1);
    assert_claimed(runs[0], id, 1);
    ck_assert_msg(runs[0]->claim_due_s >= 9.0, "due for %f s, want ~10", runs[0]->claim_due_s);
    ck_assert_double_eq(runs[0]->claim_ran_s, 0);
    free_runs(runs, n);

    /* A second attempt: it ran (from its first start) before this claim. */
    {
        struct fence f = {"default", id, "w1", 1};
        OK(store_runs_retry(g_db, &f, 0, NULL, NULL, &g_err));
    }
    PQclear(th_sql(g_pg, "UPDATE runs SET started_at = started_at - interval '5 s' WHERE id = '%s'",
                   id));
    n = claim_t("w2", 10, &runs);
    ck_assert_int_eq(n, 1);
    assert_claimed(runs[0], id, 2);
    ck_assert_msg(runs[0]->claim_ran_s >= 5.0, "ran %f s before, want >= 5", runs[0]->claim_ran_s);
    free_runs(runs, n);
    free(id);
    close_test_db();
}
END_TEST

/* Sequential scans of runs by g_pg not yet reported (those of its open
 * transaction among them). */
static long long runs_seq_scans(void)
{
    return th_sql_int(g_pg, "SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relname = 'runs'");
}

/* Claims two runs of type T on g_pg with opsrun_claim (caps: an int[]
 * literal) and asserts that it never scanned the table. */
static void claim_two_by_index(const char *caps)
{
    long long before;

    PQclear(th_sql(g_pg, "BEGIN"));
    before = runs_seq_scans();
    ck_assert_int_eq(
        th_sql_int(g_pg, "SELECT count(*) FROM opsrun_claim('w1', 2, 100000, '{T}', '%s')", caps),
        2);
    ck_assert_msg(runs_seq_scans() == before, "the claim (caps %s) scanned runs %lld times", caps,
                  runs_seq_scans() - before);
    PQclear(th_sql(g_pg, "COMMIT"));
}

/* The claim is planned once per connection (migration 011), and its plan is
 * fixed: candidates from runs_claim in order (runs_ready, each tenant's
 * part, since migration 022, whose claim this 5-argument one calls), picks
 * updated through an index. Planned while the statistics say the table is tiny, where a scan
 * of it is cheapest, it must not scan the table once it has grown; and it
 * must not join back to the table by hashing it whole, the generic plan's
 * choice at 20,000 queued runs. Both paths, with and without a type cap. */
START_TEST(claim_plan_never_scans_the_table)
{
    static const char *const caps[] = {"{NULL}", "{100000}"};
    char *id, *id2;

    open_test_db("it_store_claim_plan");
    id = new_run(3);
    id2 = new_run(3);
    PQclear(th_sql(g_pg, "ANALYZE runs"));
    for (size_t i = 0; i < ARRAY_LEN(caps); i++) {
        PQclear(th_sql(g_pg, "UPDATE runs SET status = 'queued', worker_id = NULL"));
        claim_two_by_index(caps[i]);
    }
    PQclear(th_sql(g_pg,
                   "INSERT INTO runs (tenant, id, type, max_attempts, timeout_s, input, "
                   "identity_hash, request_hash) SELECT 'default', 'bulk-' || i, 'T', 3, 300, "
                   "'{}', 'bulk-' || i, 'x' FROM generate_series(1, 20000) AS i"));
    for (size_t i = 0; i < ARRAY_LEN(caps); i++)
        claim_two_by_index(caps[i]);
    PQclear(th_sql(g_pg, "ANALYZE runs"));
    for (size_t i = 0; i < ARRAY_LEN(caps); i++)
        claim_two_by_index(caps[i]);
    /* The claim of migration 022 fixes its plan so; the claims of 013 and
     * 016 call it (for older binaries) and plan nothing themselves. */
    ck_assert_int_eq(th_sql_int(g_pg,
                                "SELECT count(*) FROM pg_proc WHERE proname = "
                                "'opsrun_claim' AND 'plan_cache_mode=force_generic_plan' "
                                "= ANY (proconfig) AND 'enable_seqscan=off' = ANY (proconfig) "
                                "AND pronargs = 11"),
                     1);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM pg_proc WHERE proname = "
                                      "'opsrun_claim' AND prolang = (SELECT oid FROM "
                                      "pg_language WHERE lanname = 'sql')"),
                     2);
    free(id);
    free(id2);
    close_test_db();
}
END_TEST

/* Index entries the claim read from the partial indexes of held runs, in
 * this transaction (pg_stat_get_xact_tuples_returned counts them per index;
 * runs_heartbeat went in migration 014). */
static long long held_entries_read(void)
{
    return th_sql_int(g_pg, "SELECT sum(pg_stat_get_xact_tuples_returned(c.oid)) FROM pg_class c "
                            "WHERE c.relname IN ('runs_held')");
}

/* The count of held runs in the claim must not walk the entries of runs
 * that held a worker once and completed since: until autovacuum removes
 * them they stay in runs_held and runs_heartbeat, and a bitmap scan (the
 * planner's choice) returned every one of them on every claim (1.4 ms a
 * claim after a 50,000-run bulk). A plain index scan marks them dead the
 * first time and skips (nearly all of) them afterwards. */
START_TEST(claim_skips_runs_that_completed)
{
    long long first, second, before;

    open_test_db("it_store_claim_dead");
    PQclear(th_sql(g_pg, "ALTER TABLE runs SET (autovacuum_enabled = false)"));
    PQclear(th_sql(g_pg,
                   "INSERT INTO runs (tenant, id, type, max_attempts, timeout_s, input, "
                   "identity_hash, request_hash) SELECT 'default', 'held-' || i, 'T', 3, 300, "
                   "'{}', 'held-' || i, 'x' FROM generate_series(1, 3000) AS i"));
    ck_assert_int_eq(
        th_sql_int(g_pg, "SELECT count(*) FROM opsrun_claim('w1', 3000, 100000, '{T}', '{NULL}')"),
        3000);
    PQclear(th_sql(g_pg, "UPDATE runs SET status = 'completed', outcome = 'succeeded', "
                         "completed_at = now(), heartbeat_at = NULL"));
    free(new_run(3));
    PQclear(th_sql(g_pg, "BEGIN"));
    before = held_entries_read();
    ck_assert_int_eq(
        th_sql_int(g_pg, "SELECT count(*) FROM opsrun_claim('w1', 1, 100000, '{T}', '{NULL}')"), 1);
    first = held_entries_read() - before;
    PQclear(th_sql(g_pg, "COMMIT"));
    PQclear(th_sql(g_pg, "UPDATE runs SET status = 'queued', worker_id = NULL WHERE id NOT LIKE "
                         "'held-%%'"));
    PQclear(th_sql(g_pg, "BEGIN"));
    before = held_entries_read();
    ck_assert_int_eq(
        th_sql_int(g_pg, "SELECT count(*) FROM opsrun_claim('w1', 1, 100000, '{T}', '{NULL}')"), 1);
    second = held_entries_read() - before;
    PQclear(th_sql(g_pg, "COMMIT"));
    ck_assert_msg(first >= 3000 && second * 4 < first,
                  "the second claim read %lld entries of held runs (first %lld)", second, first);
    close_test_db();
}
END_TEST

/* ---- fencing ---------------------------------------------------------- */

START_TEST(fencing_of_a_stale_worker)
{
    char *id;
    int rescued = -1;
    json_t *err_json = json_pack("{s:s,s:s}", "code", "x", "message", "late");

    open_test_db("it_store_fencing");
    id = new_run(3);
    claim_expect("w1", id, 1);
    PQclear(th_sql(g_pg, "UPDATE runs SET heartbeat_at = now() - interval '1 hour' WHERE id = '%s'",
                   id));
    OK(store_runs_rescue(g_db, 30, 100, &rescued, &g_err));
    ck_assert_int_eq(rescued, 1);
    assert_state(id, "queued", "pending");
    assert_col(id, "error->>'code'", "orphaned");
    assert_col(id, "worker_id", NULL);
    assert_col(id, "heartbeat_at", NULL);
    assert_col(id, "attempt", "1");
    assert_last_event(id, "status/queued/pending/0/-/orphan rescued: heartbeat went stale");

    claim_expect("w2", id, 2);
    assert_col(id, "error", NULL);
    ck_assert_int_eq(n_events(id), 4);

    /* w1 wakes up with attempt 1: every fenced write is refused. */
    {
        struct fence f1 = {"default", id, "w1", 1};
        struct fence w1_att2 = {"default", id, "w1", 2}; /* right attempt, wrong worker */
        struct fence w2_att1 = {"default", id, "w2", 1}; /* right worker, wrong attempt */
        struct fence other_tenant = {"t2", id, "w2", 2};
        struct run_result res = {.outcome = OUTCOME_SUCCEEDED, .message = "late"};

        EXPECT(ST_LOST, store_runs_progress(g_db, &f1, 50, "late", &g_err));
        ck_assert_msg(strstr(g_err.message, id) != NULL, "message: %s", g_err.message);
        EXPECT(ST_LOST, store_runs_finish(g_db, &f1, &res, &g_err));
        EXPECT(ST_LOST, store_runs_retry(g_db, &f1, 0, err_json, NULL, &g_err));
        EXPECT(ST_LOST, store_runs_release(g_db, &f1, NULL, &g_err));
        EXPECT(ST_LOST, store_runs_progress(g_db, &w1_att2, 50, "late", &g_err));
        EXPECT(ST_LOST, store_runs_finish(g_db, &w1_att2, &res, &g_err));
        EXPECT(ST_LOST, store_runs_finish(g_db, &w2_att1, &res, &g_err));
        EXPECT(ST_LOST, store_runs_finish(g_db, &other_tenant, &res, &g_err));
    }
    assert_state(id, "running", "pending");
    assert_col(id, "worker_id", "w2");
    assert_col(id, "attempt", "2");
    assert_col(id, "progress", "0");
    assert_col(id, "step", NULL);
    assert_col(id, "error", NULL);
    ck_assert_int_eq(n_events(id), 4);

    /* w2 finishes; after that its fence is spent too. */
    ck_assert_int_eq(finish_as(id, "w2", 2, OUTCOME_SUCCEEDED), ST_OK);
    assert_state(id, "completed", "succeeded");
    assert_col(id, "progress", "100");
    ck_assert_int_eq(finish_as(id, "w2", 2, OUTCOME_FAILED), ST_LOST);
    assert_state(id, "completed", "succeeded");
    ck_assert_int_eq(n_events(id), 5);
    json_decref(err_json);
    free(id);
    close_test_db();
}
END_TEST

/* ---- orphan rescue and heartbeats ------------------------------------- */

struct seen {
    int n;
    char tenant[64], id[130];
    int attempt;
};

static void on_cancelling(void *arg, const char *tenant, const char *id, int attempt)
{
    struct seen *s = arg;

    s->n++;
    snprintf(s->tenant, sizeof(s->tenant), "%s", tenant);
    snprintf(s->id, sizeof(s->id), "%s", id);
    s->attempt = attempt;
}

/* What store_runs_rescue_each reported as ended. */
struct ended {
    int failed, cancelled, other;
    char type[16];
};

static void on_ended(void *arg, const char *type, enum run_outcome outcome, int n)
{
    struct ended *e = arg;

    snprintf(e->type, sizeof(e->type), "%s", type);
    if (outcome == OUTCOME_FAILED)
        e->failed += n;
    else if (outcome == OUTCOME_CANCELLED)
        e->cancelled += n;
    else
        e->other += n;
}

/* A hand-back (retry, release, the hand-over to waiting) of a run asked to
 * cancel meanwhile ends it cancelled, and says so: the engine counts it in
 * opsrun_runs_completed_total like any other end. */
START_TEST(hand_back_of_a_cancelling_run)
{
    const char *how[] = {"retry", "release", "wait"};
    json_t *fail = json_pack("{s:s, s:s}", "code", "x", "message", "boom");

    open_test_db("it_store_hand_back_cancel");
    for (int i = 0; i < 3; i++) {
        char *id = new_run(3), *plain = new_run(3);
        struct fence f = {"default", id, "w1", 1}, fp = {"default", plain, "w1", 1};
        struct run *run = NULL;
        bool changed = false, cancelled = true;

        claim_expect("w1", id, 1);
        claim_expect("w1", plain, 1);
        OK(store_runs_cancel(g_db, "default", id, &run, &changed, &g_err));
        ck_assert(changed);
        run_free(run);
        if (i == 0) {
            OK(store_runs_retry(g_db, &fp, 60000, fail, &cancelled, &g_err));
            ck_assert_msg(!cancelled, "a plain retry reported a cancel");
            OK(store_runs_retry(g_db, &f, 60000, fail, &cancelled, &g_err));
        } else if (i == 1) {
            OK(store_runs_release(g_db, &fp, &cancelled, &g_err));
            ck_assert_msg(!cancelled, "a plain release reported a cancel");
            OK(store_runs_release(g_db, &f, &cancelled, &g_err));
        } else {
            OK(store_runs_wait(g_db, &fp, "ext-1", NULL, 60000, &BUDGET, &cancelled, &g_err));
            ck_assert_msg(!cancelled, "a plain hand-over to waiting reported a cancel");
            OK(store_runs_wait(g_db, &f, "ext-2", NULL, 60000, &BUDGET, &cancelled, &g_err));
        }
        ck_assert_msg(cancelled, "%s of a cancelling run: not reported as cancelled", how[i]);
        assert_state(id, "completed", "cancelled");
        assert_state(plain, i == 2 ? "waiting" : "queued", "pending");
        /* Not due for the next round's claims. */
        PQclear(th_sql(g_pg, "UPDATE runs SET run_at = now() + interval '1 day' WHERE id = '%s'",
                       plain));
        free(id);
        free(plain);
    }
    json_decref(fail);
    close_test_db();
}
END_TEST

START_TEST(orphan_rescue_paths)
{
    char *spent, *cancelling, *fresh;
    struct run *run = NULL;
    struct ended ended = {0};
    bool changed = false;
    int rescued = -1;

    open_test_db("it_store_orphans");
    spent = new_run(1);
    cancelling = new_run(3);
    fresh = new_run(3);
    claim_expect("w1", spent, 1);
    claim_expect("w1", cancelling, 1);
    claim_expect("w2", fresh, 1);
    OK(store_runs_cancel(g_db, "default", cancelling, &run, &changed, &g_err));
    ck_assert(changed);
    ck_assert_str_eq(run_status_name(run->status), "cancelling");
    run_free(run);
    PQclear(th_sql(g_pg, "UPDATE runs SET heartbeat_at = now() - interval '5 minutes' "
                         "WHERE worker_id = 'w1'"));
    PQclear(th_sql(g_pg, "UPDATE runs SET heartbeat_at = now() - interval '20 seconds' "
                         "WHERE worker_id = 'w2'"));

    OK(store_runs_rescue_each(g_db, 30, 100, &rescued, on_ended, &ended, &g_err));
    ck_assert_int_eq(rescued, 2);
    /* Both ended rather than requeued, and are reported with their type. */
    ck_assert_int_eq(ended.failed, 1);
    ck_assert_int_eq(ended.cancelled, 1);
    ck_assert_int_eq(ended.other, 0);
    ck_assert_str_eq(ended.type, "T");
    /* Past max_attempts: failed, for good. */
    assert_state(spent, "completed", "failed");
    assert_col(spent, "error->>'code'", "orphaned");
    assert_col(spent, "completed_at IS NOT NULL", "true");
    assert_col(spent, "attempt", "1");
    assert_last_event(spent, "status/completed/failed/0/-/orphan rescued: heartbeat went stale");
    /* Cancelling: the cancel wins. */
    assert_state(cancelling, "completed", "cancelled");
    assert_col(cancelling, "completed_at IS NOT NULL", "true");
    assert_last_event(cancelling,
                      "status/completed/cancelled/0/-/orphan rescued: heartbeat went stale");
    /* Fresh enough: untouched. */
    assert_state(fresh, "running", "pending");
    assert_col(fresh, "worker_id", "w2");
    ck_assert_int_eq(n_events(fresh), 2);

    /* Nothing left to rescue. */
    OK(store_runs_rescue(g_db, 30, 100, &rescued, &g_err));
    ck_assert_int_eq(rescued, 0);
    /* Ended runs are not requeued. */
    claim_none("w3");
    free(spent);
    free(cancelling);
    free(fresh);
    close_test_db();
}
END_TEST

START_TEST(rescue_batches)
{
    struct ended ended = {0};
    int rescued = -1;

    open_test_db("it_store_rescue_batch");
    for (int i = 0; i < 5; i++) {
        char *id = new_run(3);
        claim_expect("w1", id, 1);
        free(id);
    }
    PQclear(th_sql(g_pg, "UPDATE runs SET heartbeat_at = now() - interval '1 hour'"));
    OK(store_runs_rescue_each(g_db, 30, 3, &rescued, on_ended, &ended, &g_err));
    ck_assert_int_eq(rescued, 3);
    /* Requeued (attempts left): none ended. */
    ck_assert_int_eq(ended.failed + ended.cancelled + ended.other, 0);
    OK(store_runs_rescue(g_db, 30, 3, &rescued, &g_err));
    ck_assert_int_eq(rescued, 2);
    OK(store_runs_rescue(g_db, 30, 3, &rescued, &g_err));
    ck_assert_int_eq(rescued, 0);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE status = 'queued' AND "
                                      "worker_id IS NULL AND error->>'code' = 'orphaned'"),
                     5);
    close_test_db();
}
END_TEST

START_TEST(heartbeat_only_own_runs)
{
    char *a1, *a2, *a3, *b1, *done;
    int held = -1;
    struct run *run = NULL;
    bool changed = false;

    open_test_db("it_store_heartbeat");
    a1 = new_run(3);
    a2 = new_run(3);
    a3 = new_run(3);
    done = new_run(3);
    b1 = new_run(3);
    claim_expect("w1", a1, 1);
    claim_expect("w1", a2, 1);
    claim_expect("w1", a3, 1);
    claim_expect("w1", done, 1);
    claim_expect("w2", b1, 1);
    ck_assert_int_eq(finish_as(done, "w1", 1, OUTCOME_SUCCEEDED), ST_OK);
    /* A cancelling run is still held. */
    OK(store_runs_cancel(g_db, "default", a3, &run, &changed, &g_err));
    ck_assert(changed);
    run_free(run);
    PQclear(th_sql(g_pg, "UPDATE runs SET heartbeat_at = now() - interval '1 hour' "
                         "WHERE status IN ('running', 'cancelling')"));

    /* w1 says it executes a1, a3, the finished run and w2's run, plus one
     * that does not exist; it does not name a2 (a claim whose answer it
     * never got). Only a1 and a3 are refreshed and reported. */
    {
        const struct run_ref refs[] = {
            {"default", a1, 1}, {"default", a3, 1},      {"default", done, 1},
            {"default", b1, 1}, {"default", "ghost", 1}, {"default", a2, 2},
        };
        OK(store_runs_heartbeat(g_db, "w1", refs, 6, &held, NULL, NULL, &g_err));
    }
    ck_assert_int_eq(held, 2);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE heartbeat_at > "
                                      "now() - interval '10 seconds'"),
                     2);
    assert_col(a1, "heartbeat_at > now() - interval '10 seconds'", "true");
    assert_col(a3, "heartbeat_at > now() - interval '10 seconds'", "true");
    assert_col(a2, "heartbeat_at < now() - interval '50 minutes'", "true");
    assert_col(b1, "heartbeat_at < now() - interval '50 minutes'", "true");
    assert_col(done, "heartbeat_at", NULL);
    {
        const struct run_ref refs[] = {{"default", a1, 1}};
        OK(store_runs_heartbeat(g_db, "nobody", refs, 1, &held, NULL, NULL, &g_err));
        ck_assert_int_eq(held, 0);
        OK(store_runs_heartbeat(g_db, "w1", NULL, 0, &held, NULL, NULL, &g_err));
        ck_assert_int_eq(held, 0);
    }

    /* A heartbeat keeps the rescue away; the other worker's run goes. */
    {
        int rescued = -1;
        OK(store_runs_rescue(g_db, 30, 100, &rescued, &g_err));
        ck_assert_int_eq(rescued, 2); /* b1, and a2 which w1 no longer claimed */
        assert_state(b1, "queued", "pending");
        assert_state(a2, "queued", "pending");
        assert_state(a1, "running", "pending");
        assert_state(a3, "cancelling", "pending");
    }
    free(a1);
    free(a2);
    free(a3);
    free(b1);
    free(done);
    close_test_db();
}
END_TEST

/* ---- cancel ----------------------------------------------------------- */

START_TEST(cancel_paths)
{
    char *queued, *running, *waiting, *retried, *released;
    struct run *run = NULL;
    bool changed = false;
    struct seen s = {0};
    json_t *evs = NULL, *fail = json_pack("{s:s,s:s}", "code", "boom", "message", "it broke");

    open_test_db("it_store_cancel");
    queued = new_run(3);
    running = new_run(3);
    waiting = new_run(3);
    retried = new_run(3);
    released = new_run(3);

    /* queued: ends cancelled at once. */
    OK(store_runs_cancel(g_db, "default", queued, &run, &changed, &g_err));
    ck_assert(changed);
    ck_assert_str_eq(run_status_name(run->status), "completed");
    ck_assert_str_eq(run_outcome_name(run->outcome), "cancelled");
    ck_assert_str_eq(json_string_value(json_object_get(run->json, "outcome")), "cancelled");
    run_free(run);
    assert_state(queued, "completed", "cancelled");
    assert_col(queued, "completed_at IS NOT NULL", "true");
    assert_last_event(queued, "status/completed/cancelled/0/-/cancel requested");
    OK(store_events_list(g_db, "default", queued, &evs, &g_err));
    ck_assert_int_eq(json_array_size(evs), 2);
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(evs, 1), "outcome")),
                     "cancelled");
    ck_assert(json_integer_value(json_object_get(json_array_get(evs, 1), "id")) >
              json_integer_value(json_object_get(json_array_get(evs, 0), "id")));
    json_decref(evs);

    /* running: cancelling, and the owner hears of it. */
    claim_expect("w1", running, 1);
    OK(store_runs_cancel(g_db, "default", running, &run, &changed, &g_err));
    ck_assert(changed);
    ck_assert_str_eq(run_status_name(run->status), "cancelling");
    ck_assert_str_eq(run_outcome_name(run->outcome), "pending");
    run_free(run);
    assert_state(running, "cancelling", "pending");
    assert_col(running, "worker_id", "w1");
    assert_last_event(running, "status/cancelling/pending/0/-/cancel requested");
    ck_assert_int_eq(n_events(running), 3);
    OK(store_runs_cancelling(g_db, "w1", on_cancelling, &s, &g_err));
    ck_assert_int_eq(s.n, 1);
    ck_assert_str_eq(s.tenant, "default");
    ck_assert_str_eq(s.id, running);
    ck_assert_int_eq(s.attempt, 1);
    memset(&s, 0, sizeof(s));
    OK(store_runs_cancelling(g_db, "w2", on_cancelling, &s, &g_err));
    ck_assert_int_eq(s.n, 0);

    /* Again: nothing changes, no event. */
    OK(store_runs_cancel(g_db, "default", running, &run, &changed, &g_err));
    ck_assert(!changed);
    ck_assert_str_eq(run_status_name(run->status), "cancelling");
    run_free(run);
    ck_assert_int_eq(n_events(running), 3);

    /* The owner ends it cancelled; still fenced, progress works meanwhile. */
    {
        struct fence f = {"default", running, "w1", 1};
        OK(store_runs_progress(g_db, &f, 30, "aborting", &g_err));
    }
    ck_assert_int_eq(finish_as(running, "w1", 1, OUTCOME_CANCELLED), ST_OK);
    assert_state(running, "completed", "cancelled");
    assert_last_event(running, "status/completed/cancelled/30/aborting/cancelled");
    ck_assert_int_eq(n_events(running), 5);
    memset(&s, 0, sizeof(s));
    OK(store_runs_cancelling(g_db, "w1", on_cancelling, &s, &g_err));
    ck_assert_int_eq(s.n, 0);

    /* completed: nothing changes, no event. */
    changed = true;
    OK(store_runs_cancel(g_db, "default", running, &run, &changed, &g_err));
    ck_assert(!changed);
    ck_assert_str_eq(run_status_name(run->status), "completed");
    ck_assert_str_eq(run_outcome_name(run->outcome), "cancelled");
    run_free(run);
    OK(store_runs_cancel(g_db, "default", queued, &run, &changed, &g_err));
    ck_assert(!changed);
    ck_assert_str_eq(run_status_name(run->status), "completed");
    run_free(run);
    ck_assert_int_eq(n_events(running), 5);
    ck_assert_int_eq(n_events(queued), 2);

    /* Unknown. */
    run = (struct run *)1;
    EXPECT(ST_NOT_FOUND, store_runs_cancel(g_db, "default", "nope", &run, &changed, &g_err));
    ck_assert_ptr_null(run);
    ck_assert_msg(strstr(g_err.message, "nope") != NULL, "message: %s", g_err.message);

    /* waiting: ends cancelled at once, the poll schedule cleared. */
    claim_expect("w1", waiting, 1);
    PQclear(th_sql(g_pg,
                   "UPDATE runs SET status = 'waiting', worker_id = NULL, "
                   "heartbeat_at = NULL, next_poll_at = now() + interval '1 minute' "
                   "WHERE id = '%s'",
                   waiting));
    OK(store_runs_cancel(g_db, "default", waiting, &run, &changed, &g_err));
    ck_assert(changed);
    ck_assert_str_eq(run_status_name(run->status), "completed");
    ck_assert_str_eq(run_outcome_name(run->outcome), "cancelled");
    run_free(run);
    assert_col(waiting, "next_poll_at", NULL);
    assert_col(waiting, "completed_at IS NOT NULL", "true");
    ck_assert_int_eq(n_events(waiting), 3);

    /* A retry of a cancelling run ends it cancelled. */
    claim_expect("w1", retried, 1);
    OK(store_runs_cancel(g_db, "default", retried, &run, &changed, &g_err));
    run_free(run);
    {
        struct fence f = {"default", retried, "w1", 1};
        OK(store_runs_retry(g_db, &f, 60000, fail, NULL, &g_err));
    }
    assert_state(retried, "completed", "cancelled");
    assert_col(retried, "completed_at IS NOT NULL", "true");
    assert_col(retried, "heartbeat_at", NULL);
    assert_col(retried, "error->>'code'", "boom");
    assert_col(retried, "worker_id", "w1");
    ck_assert_int_eq(n_events(retried), 4);

    /* So does a release at shutdown. */
    claim_expect("w1", released, 1);
    OK(store_runs_cancel(g_db, "default", released, &run, &changed, &g_err));
    run_free(run);
    {
        struct fence f = {"default", released, "w1", 1};
        OK(store_runs_release(g_db, &f, NULL, &g_err));
    }
    assert_state(released, "completed", "cancelled");
    assert_col(released, "attempt", "1");
    ck_assert_int_eq(n_events(released), 4);
    /* Neither came back to the queue. */
    claim_none("w2");

    json_decref(fail);
    free(queued);
    free(running);
    free(waiting);
    free(retried);
    free(released);
    close_test_db();
}
END_TEST

/* ---- retry and release ------------------------------------------------ */

START_TEST(retry_paths)
{
    char *id;
    int64_t due = -2;
    bool due_now = false;
    json_t *fail = json_pack("{s:s,s:s}", "code", "http_500", "message", "upstream said 500");

    open_test_db("it_store_retry");
    id = new_run(5);
    claim_expect("w1", id, 1);
    {
        struct fence f = {"default", id, "w1", 1};
        OK(store_runs_retry(g_db, &f, 60000, fail, NULL, &g_err));
        /* The fence is spent. */
        EXPECT(ST_LOST, store_runs_retry(g_db, &f, 0, fail, NULL, &g_err));
    }
    assert_state(id, "queued", "pending");
    assert_col(id, "attempt", "1");
    assert_col(id, "worker_id", NULL);
    assert_col(id, "heartbeat_at", NULL);
    assert_col(id, "deadline_at", NULL);
    assert_col(id, "error->>'code'", "http_500");
    assert_col(id, "error->>'message'", "upstream said 500");
    {
        long long ms = col_int(id, "extract(epoch FROM run_at - now()) * 1000");
        ck_assert_msg(ms > 55000 && ms <= 60000, "run_at is now + %lld ms, want ~60000", ms);
    }
    assert_last_event(
        id, "status/queued/pending/0/-/attempt 1 failed, retrying in 60000 ms: upstream said 500");
    ck_assert_int_eq(n_events(id), 3);

    /* Not claimable before run_at; the dispatcher is told when. */
    claim_none("w2");
    OK(store_runs_next_due(g_db, clock_mono_us(), &due, &due_now, &g_err));
    ck_assert_msg(due > 55000 && due <= 60000, "next due in %lld ms, want ~60000", (long long)due);
    ck_assert(!due_now);

    /* Due: the next attempt, the old error cleared. Due for 10 s, before a
     * claim that began just now: that claim left it behind. */
    PQclear(th_sql(g_pg, "UPDATE runs SET run_at = now() - interval '10 s' WHERE id = '%s'", id));
    OK(store_runs_next_due(g_db, clock_mono_us(), &due, &due_now, &g_err));
    ck_assert_int_eq(due, -1);
    ck_assert(due_now);
    /* Due since a claim that began a minute ago: not left behind by that
     * claim but due for the next one, at once. */
    OK(store_runs_next_due(g_db, clock_mono_us() - 60000000, &due, &due_now, &g_err));
    ck_assert_int_eq(due, 0);
    ck_assert(!due_now);
    /* Due after the claim began: not left behind, however short the claim
     * (it may have begun on the database before the run was due). */
    {
        int64_t began = clock_mono_us();
        PQclear(th_sql(g_pg, "UPDATE runs SET run_at = now() WHERE id = '%s'", id));
        OK(store_runs_next_due(g_db, began, &due, &due_now, &g_err));
    }
    ck_assert_int_eq(due, 0);
    ck_assert(!due_now);
    claim_expect("w2", id, 2);
    assert_col(id, "error", NULL);

    /* Release at shutdown: queued, due now, the attempt given back. */
    {
        struct fence f = {"default", id, "w2", 2};
        OK(store_runs_release(g_db, &f, NULL, &g_err));
        EXPECT(ST_LOST, store_runs_release(g_db, &f, NULL, &g_err));
    }
    assert_state(id, "queued", "pending");
    assert_col(id, "attempt", "1");
    assert_col(id, "worker_id", NULL);
    assert_col(id, "heartbeat_at", NULL);
    assert_col(id, "run_at <= now()", "true");
    assert_last_event(id, "status/queued/pending/0/-/released by w2 at shutdown");
    claim_expect("w3", id, 2);

    /* A retry without delay is due at once. */
    {
        struct fence f = {"default", id, "w3", 2};
        OK(store_runs_retry(g_db, &f, 0, NULL, NULL, &g_err));
    }
    assert_col(id, "error", NULL);
    claim_expect("w1", id, 3);
    ck_assert_int_eq(finish_as(id, "w1", 3, OUTCOME_FAILED), ST_OK);
    assert_state(id, "completed", "failed");
    assert_col(id, "progress", "0");
    json_decref(fail);
    free(id);
    close_test_db();
}
END_TEST

/* ---- progress --------------------------------------------------------- */

START_TEST(progress_writes_and_clamps)
{
    char *id;
    struct fence f = {"default", NULL, "w1", 1};

    open_test_db("it_store_progress");
    id = new_run(3);
    f.id = id;
    claim_expect("w1", id, 1);

    OK(store_runs_progress(g_db, &f, 42, "downloading", &g_err));
    assert_col(id, "progress", "42");
    assert_col(id, "step", "downloading");
    assert_last_event(id, "progress/running/pending/42/downloading/-");
    {
        struct run *run = NULL;
        OK(store_runs_get(g_db, "default", id, &run, &g_err));
        ck_assert_int_eq(json_integer_value(json_object_get(run->json, "progress")), 42);
        ck_assert_str_eq(json_string_value(json_object_get(run->json, "step")), "downloading");
        run_free(run);
    }

    OK(store_runs_progress(g_db, &f, -5, NULL, &g_err));
    assert_col(id, "progress", "0");
    assert_col(id, "step", NULL);
    assert_last_event(id, "progress/running/pending/0/-/-");

    OK(store_runs_progress(g_db, &f, 250, "almost", &g_err));
    assert_col(id, "progress", "100");
    assert_last_event(id, "progress/running/pending/100/almost/-");

    OK(store_runs_progress(g_db, &f, 100, "done", &g_err));
    assert_col(id, "progress", "100");
    ck_assert_int_eq(
        th_sql_int(g_pg,
                   "SELECT count(*) FROM run_events WHERE run_id = '%s' AND type = 'progress'", id),
        4);
    ck_assert_int_eq(n_events(id), 6);
    free(id);
    close_test_db();
}
END_TEST

/* ---- retention -------------------------------------------------------- */

START_TEST(prune_in_batches)
{
    char *old[5], *recent, *active, *held;
    int deleted = -1;
    const int want[] = {2, 2, 1, 0};

    open_test_db("it_store_prune");
    for (int i = 0; i < 5; i++) {
        old[i] = new_run(3);
        PQclear(th_sql(g_pg,
                       "UPDATE runs SET status = 'completed', outcome = 'succeeded', "
                       "completed_at = now() - interval '2 days' - %d * interval '1 minute', "
                       "created_at = now() - interval '3 days' WHERE id = '%s'",
                       i, old[i]));
        PQclear(th_sql(g_pg,
                       "INSERT INTO run_events (tenant, run_id, type, status, outcome, progress) "
                       "VALUES ('default', '%s', 'status', 'completed', 'succeeded', 100)",
                       old[i]));
    }
    recent = new_run(3);
    PQclear(th_sql(g_pg,
                   "UPDATE runs SET status = 'completed', outcome = 'failed', "
                   "completed_at = now() - interval '23 hours', created_at = now() - "
                   "interval '3 days' WHERE id = '%s'",
                   recent));
    held = new_run(3);
    claim_expect("w1", held, 1);
    active = new_run(3);
    PQclear(th_sql(g_pg,
                   "UPDATE runs SET created_at = now() - interval '10 days', updated_at = "
                   "now() - interval '10 days' WHERE id = '%s'",
                   active));
    PQclear(th_sql(g_pg,
                   "UPDATE runs SET created_at = now() - interval '10 days', started_at = "
                   "now() - interval '10 days' WHERE id = '%s'",
                   held));
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM run_events"), 5 * 2 + 1 + 1 + 2);
    /* The schedule rows a cancel of a waiting run leaves when no replica
     * polls its type (only a claim of that type deletes them): they go
     * with their run, and not before. */
    PQclear(th_sql(g_pg, "UPDATE runs SET external_id = 'job-' || id WHERE id IN ('%s', '%s')",
                   old[0], recent));
    PQclear(th_sql(g_pg,
                   "INSERT INTO run_polls (tenant, run_id, type, next_poll_at) SELECT tenant, id, "
                   "'unpolled', now() - interval '2 days' FROM runs WHERE id IN ('%s', '%s')",
                   old[0], recent));

    for (size_t i = 0; i < ARRAY_LEN(want); i++) {
        OK(store_runs_prune(g_db, 86400, 2, &deleted, &g_err));
        ck_assert_msg(deleted == want[i], "prune round %zu deleted %d, want %d", i, deleted,
                      want[i]);
    }
    /* A pruned run's submission event stays in its partition of run_events
     * until retention drops the partition (migration 013), shown nowhere;
     * the one written without the run's creation time went with the run. */
    for (int i = 0; i < 5; i++) {
        json_t *ev = NULL;
        ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE id = '%s'", old[i]), 0);
        ck_assert_int_eq(n_events(old[i]), 1);
        ck_assert_int_eq(
            th_sql_int(g_pg, "SELECT count(*) FROM run_events_unknown WHERE run_id = '%s'", old[i]),
            0);
        EXPECT(ST_NOT_FOUND, store_events_list(g_db, "default", old[i], &ev, &g_err));
        free(old[i]);
    }
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs"), 3);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM run_polls"), 1);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM run_polls WHERE run_id = '%s'", recent),
                     1);
    assert_state(recent, "completed", "failed");
    assert_state(active, "queued", "pending");
    assert_state(held, "running", "pending");
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM run_events"), 5 + 1 + 1 + 2);
    free(recent);
    free(active);
    free(held);
    close_test_db();
}
END_TEST

/* ---- list, cursor, tenants -------------------------------------------- */

/* One page of tenant's runs under f (a new JSON array); *next gets the cursor. */
static json_t *list_page(const char *tenant, struct run_filter *f, char **next)
{
    json_t *runs = NULL;

    OK(store_runs_list(g_db, tenant, f, &runs, next, &g_err));
    ck_assert_ptr_nonnull(runs);
    return runs;
}

static void assert_list_ids(const char *tenant, struct run_filter *f, const char *const *want,
                            size_t nwant)
{
    char *next = NULL;
    json_t *runs = list_page(tenant, f, &next);

    ck_assert_msg(json_array_size(runs) == nwant, "listed %zu runs, want %zu",
                  json_array_size(runs), nwant);
    for (size_t i = 0; i < nwant; i++)
        ck_assert_str_eq(json_string_value(json_object_get(json_array_get(runs, i), "id")),
                         want[i]);
    ck_assert_ptr_null(next);
    json_decref(runs);
}

START_TEST(list_cursor_filters_and_tenants)
{
    /* Seconds after a base with microseconds; r3 ties with r6 on created_at
     * and the tie straddles the first page boundary. */
    static const int created_s[7] = {5, 1, 6, 4, 3, 0, 4};
    char *ids[7], *want_order[7];
    char *x1;
    PGresult *r;
    int seen = 0;
    struct run_filter f = {.limit = 3};
    const size_t page_sizes[] = {3, 3, 1};

    open_test_db("it_store_list");
    for (int i = 0; i < 7; i++) {
        ids[i] = new_run_full(NULL, i == 0 || i == 2 ? "B" : "A", 0, NULL, 3);
        PQclear(th_sql(g_pg,
                       "UPDATE runs SET created_at = timestamptz '2026-01-01 00:00:00.123457+00' "
                       "+ %d * interval '1 second' WHERE id = '%s'",
                       created_s[i], ids[i]));
    }
    x1 = new_run_full("t2", "A", 0, NULL, 3);
    r = th_sql(g_pg, "SELECT id FROM runs WHERE tenant = 'default' ORDER BY created_at DESC, "
                     "id DESC");
    ck_assert_int_eq(PQntuples(r), 7);
    for (int i = 0; i < 7; i++)
        want_order[i] = xstrdup(PQgetvalue(r, i, 0));
    PQclear(r);
    /* Sanity of the arrangement: newest is r2 (6 s), oldest r5 (0 s). */
    ck_assert_str_eq(want_order[0], ids[2]);
    ck_assert_str_eq(want_order[6], ids[5]);

    /* Pages of 3, 3, 1, newest first, no duplicates, no gaps. */
    for (size_t p = 0; p < ARRAY_LEN(page_sizes); p++) {
        char *next = NULL;
        json_t *runs = list_page("default", &f, &next);

        ck_assert_msg(json_array_size(runs) == page_sizes[p], "page %zu has %zu runs, want %zu", p,
                      json_array_size(runs), page_sizes[p]);
        for (size_t i = 0; i < json_array_size(runs); i++) {
            const char *id = json_string_value(json_object_get(json_array_get(runs, i), "id"));
            ck_assert_msg(strcmp(id, want_order[seen]) == 0, "position %d: %s, want %s", seen, id,
                          want_order[seen]);
            seen++;
        }
        if (p + 1 < ARRAY_LEN(page_sizes)) {
            ck_assert_ptr_nonnull(next);
            f.has_cursor = cursor_decode(next, &f.cursor_us, f.cursor_id);
            ck_assert(f.has_cursor);
        } else {
            ck_assert_ptr_null(next);
        }
        free(next);
        json_decref(runs);
    }
    ck_assert_int_eq(seen, 7);

    /* Filters. */
    {
        char *cancel_ids[2] = {ids[1], ids[5]};
        for (int i = 0; i < 2; i++) {
            struct run *run = NULL;
            bool changed = false;
            OK(store_runs_cancel(g_db, "default", cancel_ids[i], &run, &changed, &g_err));
            ck_assert(changed);
            run_free(run);
        }
    }
    {
        struct run_filter fs = {.limit = 100, .has_status = true, .status = RUN_COMPLETED};
        const char *want[] = {ids[1], ids[5]};
        assert_list_ids("default", &fs, want, 2);
    }
    {
        struct run_filter fo = {.limit = 100, .has_outcome = true, .outcome = OUTCOME_CANCELLED};
        const char *want[] = {ids[1], ids[5]};
        assert_list_ids("default", &fo, want, 2);
    }
    {
        struct run_filter ft = {.limit = 100, .type = "B"};
        const char *want[] = {ids[2], ids[0]};
        assert_list_ids("default", &ft, want, 2);
    }
    {
        struct run_filter fst = {
            .limit = 100, .has_status = true, .status = RUN_QUEUED, .type = "A"};
        const char *want[] = {want_order[2], want_order[3], ids[4]};
        assert_list_ids("default", &fst, want, 3);
    }
    {
        struct run_filter fe = {.limit = 100, .external_id = "nothing"};
        assert_list_ids("default", &fe, NULL, 0);
    }

    /* Tenant isolation. */
    {
        struct run *run = NULL;
        bool changed = false;
        json_t *evs = NULL;
        struct run_filter fa = {.limit = 500};
        const char *want[] = {x1};

        run = (struct run *)1;
        EXPECT(ST_NOT_FOUND, store_runs_get(g_db, "default", x1, &run, &g_err));
        ck_assert_ptr_null(run);
        EXPECT(ST_NOT_FOUND, store_runs_cancel(g_db, "default", x1, &run, &changed, &g_err));
        EXPECT(ST_NOT_FOUND, store_events_list(g_db, "default", x1, &evs, &g_err));
        ck_assert_ptr_null(evs);
        assert_state(x1, "queued", "pending");
        ck_assert_int_eq(n_events(x1), 1);
        {
            char *next = NULL;
            json_t *runs = list_page("default", &fa, &next);
            ck_assert_int_eq(json_array_size(runs), 7);
            for (size_t i = 0; i < json_array_size(runs); i++)
                ck_assert_str_ne(json_string_value(json_object_get(json_array_get(runs, i), "id")),
                                 x1);
            json_decref(runs);
        }
        assert_list_ids("t2", &fa, want, 1);
        OK(store_runs_get(g_db, "t2", x1, &run, &g_err));
        ck_assert_str_eq(run->tenant, "t2");
        run_free(run);
        OK(store_events_list(g_db, "t2", x1, &evs, &g_err));
        ck_assert_int_eq(json_array_size(evs), 1);
        json_decref(evs);
        EXPECT(ST_NOT_FOUND, store_runs_get(g_db, "t2", ids[0], &run, &g_err));
    }

    /* The same id and identity in two tenants are two runs. */
    {
        struct sub s = {.tenant = "default", .id = "shared", .ident = "same", .req = "r"};
        struct run *run;
        bool dedup = true, changed = false;

        run = submit_on(g_db, &s, &dedup);
        ck_assert(!dedup);
        run_free(run);
        s.tenant = "t2";
        run = submit_on(g_db, &s, &dedup);
        ck_assert(!dedup);
        ck_assert_str_eq(run->tenant, "t2");
        run_free(run);
        OK(store_runs_cancel(g_db, "t2", "shared", &run, &changed, &g_err));
        ck_assert(changed);
        run_free(run);
        ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE id = 'shared' AND "
                                          "tenant = 'default' AND status = 'queued'"),
                         1);
        ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE id = 'shared' AND "
                                          "tenant = 't2' AND status = 'completed'"),
                         1);
    }
    for (int i = 0; i < 7; i++) {
        free(ids[i]);
        free(want_order[i]);
    }
    free(x1);
    close_test_db();
}
END_TEST

/* An admin token's reads: every tenant's list, and a run id found in the
 * one tenant that has it; and every run's initiator, filtered in lists. */
START_TEST(all_tenants_and_initiator)
{
    static const char *const newest_first[] = {"b-only", "a-only"};
    struct run_filter f = {.limit = 2};
    struct run *run;
    char tenant[65], *next = NULL;
    json_t *runs;

    open_test_db("it_store_tenants");
    run_free(submit_on(g_db, &(struct sub){.tenant = "a", .id = "a-only", .ident = "1"}, NULL));
    run_free(submit_on(g_db, &(struct sub){.tenant = "b", .id = "b-only", .ident = "2"}, NULL));
    run_free(submit_on(g_db, &(struct sub){.tenant = "a", .id = "both", .ident = "3"}, NULL));
    run_free(submit_on(g_db, &(struct sub){.tenant = "b", .id = "both", .ident = "4"}, NULL));
    PQclear(th_sql(g_pg, "UPDATE runs SET created_at = timestamptz '2026-01-01 00:00:00+00' + "
                         "CASE id WHEN 'a-only' THEN interval '1 s' WHEN 'b-only' THEN "
                         "interval '2 s' ELSE interval '0 s' END"));

    OK(store_runs_locate(g_db, "a-only", tenant, &g_err));
    ck_assert_str_eq(tenant, "a");
    OK(store_runs_locate(g_db, "b-only", tenant, &g_err));
    ck_assert_str_eq(tenant, "b");
    EXPECT(ST_NOT_FOUND, store_runs_locate(g_db, "nope", tenant, &g_err));
    ck_assert_str_eq(g_err.message, "run \"nope\" does not exist");
    EXPECT(ST_CONFLICT, store_runs_locate(g_db, "both", tenant, &g_err));
    ck_assert_str_eq(g_err.message,
                     "run \"both\" exists in several tenants; choose one with ?tenant=");

    /* NULL: every tenant, newest first across them, paged by the cursor. */
    runs = list_page(NULL, &f, &next);
    ck_assert_int_eq(json_array_size(runs), 2);
    for (size_t i = 0; i < 2; i++)
        ck_assert_str_eq(json_string_value(json_object_get(json_array_get(runs, i), "id")),
                         newest_first[i]);
    json_decref(runs);
    ck_assert_ptr_nonnull(next);
    f.has_cursor = cursor_decode(next, &f.cursor_us, f.cursor_id);
    ck_assert(f.has_cursor);
    free(next);
    runs = list_page(NULL, &f, &next);
    ck_assert_int_eq(json_array_size(runs), 2); /* "both" of a and of b */
    ck_assert_str_ne(th_js(json_array_get(runs, 0), "tenant"),
                     th_js(json_array_get(runs, 1), "tenant"));
    json_decref(runs);
    ck_assert_ptr_null(next);

    /* The initiator: NULL is opsrun's own; the list filters on it. */
    OK(store_runs_get(g_db, "a", "both", &run, &g_err));
    ck_assert_str_eq(th_js(run->json, "initiator"), "system");
    run_free(run);
    PQclear(th_sql(g_pg, "UPDATE runs SET initiator = 'ci' WHERE id = 'a-only'"));
    runs = list_page("a", &(struct run_filter){.limit = 10, .initiator = "ci"}, &next);
    ck_assert_int_eq(json_array_size(runs), 1);
    ck_assert_str_eq(th_js(json_array_get(runs, 0), "id"), "a-only");
    json_decref(runs);
    runs = list_page("b", &(struct run_filter){.limit = 10, .initiator = "ci"}, &next);
    ck_assert_int_eq(json_array_size(runs), 0);
    json_decref(runs);
    OK(store_runs_get(g_db, "a", "a-only", &run, &g_err));
    ck_assert_str_eq(th_js(run->json, "initiator"), "ci");
    run_free(run);
    close_test_db();
}
END_TEST

/* An admin's list over every tenant merges each tenant's newest runs
 * (migration 014): pages of every size, with and without a filter, give
 * the order of one sort over all tenants, with no run twice or missing. */
START_TEST(every_tenant_list_is_one_order)
{
    static const char *const tenants[] = {"c", "e", "d", "c", "d", "e", "e", "c", "d", "c", "d"};
    const size_t n = ARRAY_LEN(tenants);

    open_test_db("it_store_list_every_tenant");
    for (size_t i = 0; i < n; i++) {
        char id[16], ident[16];

        xsnprintf(id, sizeof(id), "run-%02zu", (i * 7) % n);
        xsnprintf(ident, sizeof(ident), "i%zu", i);
        run_free(submit_on(
            g_db,
            &(struct sub){
                .tenant = tenants[i], .id = id, .ident = ident, .type = i % 3 ? "A" : "B"},
            NULL));
        /* Created out of id order, one tie on created_at (runs 3 and 4). */
        PQclear(th_sql(g_pg,
                       "UPDATE runs SET created_at = timestamptz '2026-01-01 00:00:00+00' + %zu * "
                       "interval '1 ms' WHERE tenant = '%s' AND id = '%s'",
                       i == 4 ? (size_t)3 : i, tenants[i], id));
    }
    for (int limit = 1; limit <= (int)n + 1; limit++) {
        for (int typed = 0; typed < 2; typed++) {
            struct run_filter f = {.limit = limit, .type = typed ? "A" : NULL};
            PGresult *want = th_sql(g_pg,
                                    "SELECT tenant || '/' || id FROM runs WHERE %s ORDER BY "
                                    "created_at DESC, id DESC",
                                    typed ? "type = 'A'" : "true");
            int seen = 0, pages = 0;

            for (;;) {
                char *next = NULL;
                json_t *runs = list_page(NULL, &f, &next);

                ck_assert_int_le(json_array_size(runs), limit);
                for (size_t i = 0; i < json_array_size(runs); i++, seen++) {
                    json_t *run = json_array_get(runs, i);
                    char got[64];

                    ck_assert_int_lt(seen, PQntuples(want));
                    xsnprintf(got, sizeof(got), "%s/%s", th_js(run, "tenant"), th_js(run, "id"));
                    ck_assert_msg(strcmp(got, PQgetvalue(want, seen, 0)) == 0,
                                  "limit %d typed %d position %d: %s, want %s", limit, typed, seen,
                                  got, PQgetvalue(want, seen, 0));
                }
                json_decref(runs);
                pages++;
                if (!next)
                    break;
                f.has_cursor = cursor_decode(next, &f.cursor_us, f.cursor_id);
                ck_assert(f.has_cursor);
                free(next);
            }
            ck_assert_int_eq(seen, PQntuples(want));
            ck_assert_int_ge(pages, (PQntuples(want) + limit - 1) / limit);
            PQclear(want);
        }
    }
    close_test_db();
}
END_TEST

/* ---- PostgreSQL restart (runs last) ----------------------------------- */

/* Retries pool get + store_runs_get for up to 10 s; every failure must be
 * ST_UNAVAILABLE. Returns the number of failures before success. */
static int get_through_pool(struct db_pool *pool, const char *id, int hold)
{
    int failures = 0;
    int64_t until = clock_mono_ms() + 10000;

    for (;;) {
        struct db *dbs[4] = {0};
        struct run *run = NULL;
        struct error err = {0};
        enum status st = ST_OK;
        int got = 0;

        /* hold connections at once, so the stale ones are used too */
        for (; got < hold && st == ST_OK; got++)
            st = db_pool_get(pool, &dbs[got], &err);
        for (int i = 0; i < got && st == ST_OK; i++) {
            st = store_runs_get(dbs[i], "default", id, &run, &err);
            if (st == ST_OK) {
                ck_assert_str_eq(run->id, id);
                run_free(run);
            }
        }
        for (int i = 0; i < got; i++)
            db_pool_put(pool, dbs[i]);
        if (st == ST_OK)
            return failures;
        ck_assert_msg(st == ST_UNAVAILABLE, "after a restart: %s (%s), want ST_UNAVAILABLE",
                      status_name(st), err.message);
        failures++;
        ck_assert_msg(clock_mono_ms() < until, "no connection within 10 s: %s", err.message);
        th_sleep_ms(100);
    }
}

/* The age of the longest-due queued run, and the pool's figures. */
START_TEST(queue_age_and_pool_stats)
{
    struct db_options o = {.conninfo = NULL, .connect_timeout_s = 5};
    struct db_pool_stats ps;
    struct db_pool *pool;
    struct db *a = NULL, *b = NULL;
    int64_t age = -1;
    char *due, *later;

    open_test_db("it_store_queue_age");
    OK(store_runs_queue_age(g_db, &age, &g_err));
    ck_assert_int_eq(age, 0);
    later = new_run_full(NULL, "T", 0, "2999-01-01T00:00:00Z", 3); /* not due: not counted */
    OK(store_runs_queue_age(g_db, &age, &g_err));
    ck_assert_int_eq(age, 0);
    due = new_run(3);
    PQclear(th_sql(g_pg, "UPDATE runs SET run_at = now() - interval '90 seconds' WHERE id = '%s'",
                   due));
    OK(store_runs_queue_age(g_db, &age, &g_err));
    ck_assert_msg(age >= 90000 && age < 100000, "age %lld ms", (long long)age);
    claim_expect("w1", due, 1);
    OK(store_runs_queue_age(g_db, &age, &g_err));
    ck_assert_int_eq(age, 0);

    o.conninfo = g_ci;
    pool = db_pool_new(&o, 1, 2000);
    OK(db_pool_get_wait(pool, 0, &a, &g_err));
    db_pool_stats(pool, &ps);
    ck_assert_int_eq(ps.size, 1);
    ck_assert_int_eq(ps.open, 1);
    ck_assert_int_eq(ps.in_use, 1);
    ck_assert_int_eq(ps.waits_total, 0);
    EXPECT(ST_UNAVAILABLE, db_pool_get_wait(pool, 50, &b, &g_err));
    db_pool_stats(pool, &ps);
    ck_assert_int_eq(ps.waits_total, 1);
    ck_assert_int_eq(ps.timeouts_total, 1);
    ck_assert_msg(ps.wait_us_total >= 40000, "waited %lld us", (long long)ps.wait_us_total);
    db_pool_put(pool, a);
    db_pool_stats(pool, &ps);
    ck_assert_int_eq(ps.in_use, 0);
    db_pool_free(pool);
    free(due);
    free(later);
    close_test_db();
}
END_TEST

START_TEST(survives_postgres_restart)
{
    struct db_options o = {.conninfo = NULL, .connect_timeout_s = 5};
    struct db_pool *pool;
    struct run *run = NULL;
    char *id;
    int failures;
    int64_t until;
    enum status st;

    open_test_db("it_store_restart");
    id = new_run(3);
    o.conninfo = g_ci;
    pool = db_pool_new(&o, 2, 2000);
    ck_assert_int_eq(get_through_pool(pool, id, 2), 0); /* two open connections */

    th_pg_restart();

    failures = get_through_pool(pool, id, 2);
    fprintf(stderr, "restart: the pool recovered after %d failed attempts\n", failures);
    /* Idle pooled connections closed by the restart are noticed at checkout
     * (db_ensure reads the socket), so no request pays for them. */
    ck_assert_int_eq(failures, 0);
    ck_assert_int_eq(get_through_pool(pool, id, 2), 0);
    db_pool_free(pool);

    /* A standalone connection: one ST_UNAVAILABLE at most, then db_ensure
     * reconnects. */
    memset(&g_err, 0, sizeof(g_err));
    st = store_runs_get(g_db, "default", id, &run, &g_err);
    ck_assert_msg(st == ST_OK || st == ST_UNAVAILABLE, "standalone after restart: %s (%s)",
                  status_name(st), g_err.message);
    run_free(run);
    until = clock_mono_ms() + 10000;
    while ((st = db_ensure(g_db, &g_err)) != ST_OK) {
        ck_assert_int_eq(st, ST_UNAVAILABLE);
        ck_assert_msg(clock_mono_ms() < until, "db_ensure: %s", g_err.message);
        th_sleep_ms(100);
    }
    OK(store_runs_get(g_db, "default", id, &run, &g_err));
    ck_assert_str_eq(run->id, id);
    run_free(run);
    /* The writes work too (statements are prepared again). */
    {
        bool changed = false;
        OK(store_runs_cancel(g_db, "default", id, &run, &changed, &g_err));
        ck_assert(changed);
        run_free(run);
    }
    PQfinish(g_pg);
    g_pg = th_pg(g_ci);
    assert_state(id, "completed", "cancelled");
    free(id);
    close_test_db();
}
END_TEST

struct cancel_call {
    const char *ci, *id;
    enum status st;
    bool changed;
    char status[16], outcome[24];
};

/* Cancels on a connection of its own (the caller's test may block it). */
static void *cancel_main(void *arg)
{
    struct cancel_call *c = arg;
    struct db *db = connect_db(c->ci);
    struct error err = {0};
    struct run *run = NULL;

    c->st = store_runs_cancel(db, "default", c->id, &run, &c->changed, &err);
    if (run) {
        snprintf(c->status, sizeof(c->status), "%s", run_status_name(run->status));
        snprintf(c->outcome, sizeof(c->outcome), "%s", run_outcome_name(run->outcome));
    }
    run_free(run);
    db_close(db);
    return NULL;
}

/* A cancel that waits behind another writer answers with the run as that
 * writer left it: after a finish, the completed run (the handler's 409);
 * after another cancel, cancelling (not the running version the statement
 * started with). */
START_TEST(cancel_waits_for_the_newest_version)
{
    struct cancel_call c;
    pthread_t th;
    PGconn *other;
    char *id;

    open_test_db("it_store_cancel_race");
    other = th_pg(g_ci);

    id = new_run(3);
    claim_expect("w1", id, 1);
    PQclear(th_sql(other, "BEGIN"));
    PQclear(th_sql(other,
                   "UPDATE runs SET status = 'completed', outcome = 'succeeded', "
                   "completed_at = now() WHERE id = '%s'",
                   id));
    c = (struct cancel_call){.ci = g_ci, .id = id};
    pthread_create(&th, NULL, cancel_main, &c);
    th_sleep_ms(300); /* the cancel now waits for the row lock */
    PQclear(th_sql(other, "COMMIT"));
    pthread_join(th, NULL);
    ck_assert_int_eq(c.st, ST_OK);
    ck_assert(!c.changed);
    ck_assert_str_eq(c.status, "completed");
    ck_assert_str_eq(c.outcome, "succeeded");
    free(id);

    id = new_run(3);
    claim_expect("w1", id, 1);
    PQclear(th_sql(other, "BEGIN"));
    PQclear(th_sql(other, "UPDATE runs SET status = 'cancelling' WHERE id = '%s'", id));
    c = (struct cancel_call){.ci = g_ci, .id = id};
    pthread_create(&th, NULL, cancel_main, &c);
    th_sleep_ms(300);
    PQclear(th_sql(other, "COMMIT"));
    pthread_join(th, NULL);
    ck_assert_int_eq(c.st, ST_OK);
    ck_assert(!c.changed);
    ck_assert_str_eq(c.status, "cancelling");
    free(id);
    PQfinish(other);
    close_test_db();
}
END_TEST

/* A submission that matches a run being cancelled starts a new run: joining
 * it would start nothing, since that run is about to end cancelled. */
START_TEST(identity_does_not_join_a_cancelling_run)
{
    struct run *a, *b, *c;
    bool dedup = true, changed = false;
    struct run *cancelled = NULL;

    open_test_db("it_store_identity_cancelling");
    a = submit_on(g_db, &(struct sub){.id = "first", .ident = "k1"}, &dedup);
    ck_assert(!dedup);
    claim_expect("w1", "first", 1);
    OK(store_runs_cancel(g_db, "default", "first", &cancelled, &changed, &g_err));
    ck_assert(changed);
    ck_assert_str_eq(run_status_name(cancelled->status), "cancelling");
    b = submit_on(g_db, &(struct sub){.id = "second", .ident = "k1"}, &dedup);
    ck_assert(!dedup);
    ck_assert_str_eq(b->id, "second");
    /* While "second" is active, the same identity joins it. */
    c = submit_on(g_db, &(struct sub){.id = "third", .ident = "k1"}, &dedup);
    ck_assert(dedup);
    ck_assert_str_eq(c->id, "second");
    run_free(a);
    run_free(b);
    run_free(c);
    run_free(cancelled);
    close_test_db();
}
END_TEST

/* ---- the suite -------------------------------------------------------- */

/* The completer's write: many runs in one statement, each fenced on its
 * own, each with its terminal event; the cleanup rule of a finish holds for
 * every row; a run another worker holds is left alone, and a spent fence
 * writes nothing a second time. In both modes, as claim_order_delay_and_types. */
START_TEST(finish_batch_fences_each_run)
{
    char *a, *b, *c;
    json_t *result = json_pack("{s:i}", "x", 1);
    json_t *boom = json_pack("{s:s,s:s}", "code", "boom", "message", "it broke");
    struct run_finish fin[3];

    g_unnamed = _i == 1;
    open_test_db(g_unnamed ? "it_store_finish_batch_fn" : "it_store_finish_batch");
    a = new_run(3);
    b = new_run(3);
    c = new_run(3);
    claim_expect("w1", a, 1);
    claim_expect("w1", b, 1);
    claim_expect("w1", c, 1);
    PQclear(th_sql(g_pg, "UPDATE runs SET cleanup_due = true WHERE id = '%s'", b));
    PQclear(th_sql(g_pg, "UPDATE runs SET worker_id = 'w2' WHERE id = '%s'", c));
    fin[0] = (struct run_finish){
        .tenant = "default",
        .id = a,
        .attempt = 1,
        .res = {.outcome = OUTCOME_SUCCEEDED, .result = result, .message = "finished"},
        .log_lines_json = "[[1795000000000000,\"opsrun\",\"attempt 1 succeeded\"]]",
        .log_nlines = 1};
    fin[1] =
        (struct run_finish){.tenant = "default",
                            .id = b,
                            .attempt = 1,
                            .res = {.outcome = OUTCOME_FAILED, .error = boom, .message = "failed"}};
    fin[2] = (struct run_finish){.tenant = "default",
                                 .id = c,
                                 .attempt = 1,
                                 .res = {.outcome = OUTCOME_SUCCEEDED, .message = "x"},
                                 .log_lines_json = "[[1,\"opsrun\",\"never written\"]]",
                                 .log_nlines = 1};

    OK(store_runs_finish_batch(g_db, "w1", fin, 3, &g_err));
    ck_assert(fin[0].written && fin[1].written && !fin[2].written);
    /* the last lines ride with the end, and only with an end written */
    assert_col(a, "log_seq", "1");
    ck_assert_int_eq(th_sql_int(g_pg,
                                "SELECT count(*) FROM run_logs WHERE run_id = '%s' AND "
                                "first_seq = 1 AND last_seq = 1 AND attempt = 1 AND "
                                "lines->0->>2 = 'attempt 1 succeeded'",
                                a),
                     1);
    ck_assert_int_eq(
        th_sql_int(g_pg, "SELECT count(*) FROM run_logs WHERE run_id IN ('%s', '%s')", b, c), 0);
    assert_state(a, "completed", "succeeded");
    assert_col(a, "result->>'x'", "1");
    assert_col(a, "error", NULL);
    assert_col(a, "hooks_at", NULL);
    assert_last_event(a, "status/completed/succeeded/100/-/finished");
    assert_state(b, "completed", "failed");
    assert_col(b, "error->>'code'", "boom");
    assert_col(b, "result", NULL);
    assert_col(b, "cleanup_due", "false");
    assert_col(b, "hooks_attempts", "0");
    ck_assert_int_eq(
        th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE id = '%s' AND hooks_at IS NOT NULL", b),
        1);
    assert_last_event(b, "status/completed/failed/0/-/failed");
    assert_state(c, "running", "pending");
    ck_assert_int_eq(n_events(c), 2);

    /* spent: nothing is written twice */
    fin[0].res.outcome = OUTCOME_FAILED;
    OK(store_runs_finish_batch(g_db, "w1", fin, 1, &g_err));
    ck_assert(!fin[0].written);
    assert_state(a, "completed", "succeeded");
    ck_assert_int_eq(n_events(a), 3);
    ASSERT_THROUGH_FN("opsrun_finish_batch", "(text, jsonb, text[])",
                      store_runs_finish_batch(g_db, "w1", fin, 1, &through_err_));
    ck_assert(!fin[0].written);

    json_decref(result);
    json_decref(boom);
    free(a);
    free(b);
    free(c);
    close_test_db();
}
END_TEST

/* What the completion batch writes through the inline statement (named,
 * tenant "n") and through opsrun_finish_batch (unnamed, tenant "u"), from
 * the same runs: the same rows, events and log chunks, column by column.
 * The runs cover each arm of the statement: a success with log lines (some
 * dropped) and counts, a failure whose cleanup is due, a cancel without an
 * error of its own (keeps the run's), and two fences that fail (another
 * worker; another attempt). */
START_TEST(finish_batch_function_writes_what_the_statement_writes)
{
    static const char *const ids[] = {"f-ok", "f-clean", "f-cancel", "f-other", "f-stale"};
    json_t *result = json_pack("{s:i}", "x", 1), *counts = json_pack("{s:i}", "ok", 2);
    json_t *boom = json_pack("{s:s,s:s}", "code", "boom", "message", "it broke");
    json_t *why = json_pack("{s:[s]}", "failed", "step-a");
    struct run_finish fin[ARRAY_LEN(ids)];
    struct db *unnamed;
    bool written[2][ARRAY_LEN(ids)];
    char *diff;

    open_test_db("it_store_finish_fn_writes");
    g_unnamed = true;
    unnamed = connect_db(g_ci);
    g_unnamed = false;
    for (int t = 0; t < 2; t++)
        for (size_t k = 0; k < ARRAY_LEN(ids); k++)
            run_free(submit_on(
                g_db, &(struct sub){.tenant = t ? "u" : "n", .id = ids[k], .ident = ids[k]}, NULL));
    PQclear(th_sql(g_pg, "UPDATE runs SET status = 'running', attempt = 1, worker_id = 'w1', "
                         "started_at = '2026-01-01T00:00:00Z', heartbeat_at = "
                         "'2026-01-01T00:00:01Z', deadline_at = '2099-01-01T00:00:00Z', "
                         "progress = 40, step = 'half'"));
    PQclear(th_sql(g_pg, "UPDATE runs SET cleanup_due = true WHERE id = 'f-clean'"));
    PQclear(th_sql(g_pg, "UPDATE runs SET status = 'cancelling', error = '{\"code\": "
                         "\"superseded\"}', hooks_at = '2030-01-01T00:00:00Z' "
                         "WHERE id = 'f-cancel'"));
    PQclear(th_sql(g_pg, "UPDATE runs SET worker_id = 'w2' WHERE id = 'f-other'"));
    PQclear(th_sql(g_pg, "UPDATE runs SET attempt = 2 WHERE id = 'f-stale'"));
    for (int t = 0; t < 2; t++) {
        fin[0] = (struct run_finish){
            .id = ids[0],
            .res = {.outcome = OUTCOME_SUCCEEDED,
                    .result = result,
                    .summary_counts = counts,
                    .message = "finished"},
            .log_lines_json =
                "[[1795000000000000,\"opsrun\",\"a\"],[1795000000000001,\"w\",\"b\"]]",
            .log_nlines = 2,
            .log_dropped = 3};
        fin[1] = (struct run_finish){.id = ids[1],
                                     .res = {.outcome = OUTCOME_FAILED,
                                             .error = boom,
                                             .failure_summary = why,
                                             .message = "failed"}};
        /* lines at the third position, after a run without any: each run
         * gets its own element of the array */
        fin[2] = (struct run_finish){.id = ids[2],
                                     .res = {.outcome = OUTCOME_CANCELLED, .message = "cancelled"},
                                     .log_lines_json = "[[1795000000000002,\"opsrun\",\"c\"]]",
                                     .log_nlines = 1};
        fin[3] = (struct run_finish){.id = ids[3],
                                     .res = {.outcome = OUTCOME_SUCCEEDED, .message = "x"}};
        fin[4] = (struct run_finish){.id = ids[4],
                                     .res = {.outcome = OUTCOME_SUCCEEDED, .message = "x"}};
        for (size_t k = 0; k < ARRAY_LEN(ids); k++) {
            fin[k].tenant = t ? "u" : "n";
            fin[k].attempt = 1;
        }
        OK(store_runs_finish_batch(t ? unnamed : g_db, "w1", fin, ARRAY_LEN(ids), &g_err));
        for (size_t k = 0; k < ARRAY_LEN(ids); k++)
            written[t][k] = fin[k].written;
    }
    for (size_t k = 0; k < ARRAY_LEN(ids); k++)
        ck_assert_msg(written[0][k] == written[1][k] && written[0][k] == (k < 3),
                      "%s: written %d named, %d unnamed", ids[k], written[0][k], written[1][k]);
    /* The arrangement shows what it should: the cancel kept its error, the
     * cleanup became due, the lines were written. */
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE id = 'f-cancel' AND "
                                      "error->>'code' = 'superseded' AND outcome = 'cancelled'"),
                     2);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE id = 'f-clean' AND "
                                      "hooks_at = completed_at AND NOT cleanup_due"),
                     2);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM run_logs WHERE run_id = 'f-ok' AND "
                                      "first_seq = 1 AND last_seq = 2 AND dropped = 3"),
                     2);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM run_logs WHERE run_id = 'f-cancel' "
                                      "AND first_seq = 1 AND last_seq = 1 AND lines->0->>2 = 'c'"),
                     2);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM run_logs WHERE run_id NOT IN "
                                      "('f-ok', 'f-cancel')"),
                     0);
    diff = tenants_differ("n", "u");
    if (diff)
        fprintf(stderr, "rows of one tenant only (first: named, second: unnamed):\n%s\n", diff);
    ck_assert_msg(!diff, "the function wrote otherwise than the statement (rows above)");
    db_close(unnamed);
    json_decref(result);
    json_decref(counts);
    json_decref(boom);
    json_decref(why);
    close_test_db();
}
END_TEST

/* Asserts that SQL expression expr over run id's schedule row (run_polls)
 * is the text want (NULL = SQL NULL, or no row). */
static void assert_poll(const char *id, const char *expr, const char *want)
{
    char what[96];

    snprintf(what, sizeof(what), "schedule of %s", id);
    assert_text(what, expr,
                sql_str("SELECT (%s)::text FROM run_polls WHERE run_id = '%s'", expr, id), want);
}

/* Claims due checks of type T for w1 and expects exactly one, of run id
 * when id is not NULL; returns its check number (the fence). */
static int claim_one_check(const char *id)
{
    static const char *const types[] = {"T"};
    struct poll_claim *c = NULL;
    size_t nc = 0;
    int count;

    OK(store_polls_claim(g_db, "w1", 10, 60000, types, 1, &c, &nc, &g_err));
    ck_assert_uint_eq(nc, 1);
    if (id)
        ck_assert_str_eq(c[0].run->id, id);
    count = c[0].poll_count;
    poll_claims_free(c, nc);
    return count;
}

/* Runs a and b of type T, claimed by w1 and handed over to waiting, their
 * first checks due now. */
static void two_waiting(char **a, char **b)
{
    *a = new_run(3);
    *b = new_run(3);
    claim_expect("w1", *a, 1);
    claim_expect("w1", *b, 1);
    {
        struct fence fa = {"default", *a, "w1", 1}, fb = {"default", *b, "w1", 1};
        bool cancelled = true;
        OK(store_runs_wait(g_db, &fa, "ext-a", NULL, 0, &BUDGET, &cancelled, &g_err));
        ck_assert(!cancelled);
        OK(store_runs_wait(g_db, &fb, "ext-b", NULL, 0, &BUDGET, &cancelled, &g_err));
        ck_assert(!cancelled);
    }
    PQclear(th_sql(g_pg, "UPDATE run_polls SET next_poll_at = now() - interval '1 s'"));
}

/* The poller's writer: the next checks of many runs in one statement, each
 * fenced on its own check (owner and poll_count in run_polls); a spent
 * fence is left alone. The claim writes the schedule row's lease and the
 * check's number and owner on both rows; the result writes the schedule
 * row and the runs row's next_poll_at and poll_state, and clears the
 * owners. A claim given back takes its count back. */
START_TEST(polls_again_batch_fences_each_check)
{
    static const char *const types[] = {"T"};
    char *a, *b;
    struct poll_claim *c = NULL;
    size_t nc = 0;
    json_t *state = json_pack("{s:i}", "seen", 2);
    struct poll_again w[2];

    open_test_db("it_store_again_batch");
    two_waiting(&a, &b);
    assert_poll(a, "poll_count", "0");
    OK(store_polls_claim(g_db, "w1", 10, 60000, types, 1, &c, &nc, &g_err));
    ck_assert_uint_eq(nc, 2);
    ck_assert_int_eq(c[0].poll_count, 1);
    poll_claims_free(c, nc);
    assert_poll(a, "poll_count", "1");
    assert_poll(a, "poll_owner", "w1");
    assert_poll(a, "next_poll_at > now() + interval '50 s'", "true");
    assert_col(a, "poll_count", "1");
    assert_col(a, "poll_owner", "w1");
    assert_col(a, "next_poll_at < now()", "true"); /* the runs row keeps the due time */

    w[0] = (struct poll_again){"default", a, "w1", 1, state, 60000, false, false};
    w[1] =
        (struct poll_again){"default", b, "w1", 2, NULL, 60000, false, false}; /* not this check */
    OK(store_polls_again_batch(g_db, w, 2, &g_err));
    ck_assert(w[0].written && !w[1].written);
    assert_poll(a, "poll_owner", NULL);
    assert_col(a, "poll_state->>'seen'", "2");
    assert_col(a, "poll_count", "1");
    ck_assert_int_eq(th_sql_int(g_pg,
                                "SELECT count(*) FROM runs r JOIN run_polls p ON p.run_id = r.id "
                                "WHERE r.id = '%s' AND r.next_poll_at = p.next_poll_at AND "
                                "p.next_poll_at BETWEEN now() + interval '50 s' AND now() + "
                                "interval '61 s'",
                                a),
                     1);
    assert_col(a, "poll_owner", NULL);
    assert_poll(b, "poll_owner", "w1");
    assert_col(b, "poll_count", "1");
    assert_col(b, "poll_owner", "w1");
    assert_state(a, "waiting", "pending");

    /* spent: the same check is not written twice */
    OK(store_polls_again_batch(g_db, w, 1, &g_err));
    ck_assert(!w[0].written);

    /* b's claim given back unchecked: its count is taken back */
    w[1] = (struct poll_again){"default", b, "w1", 1, NULL, 0, false, true};
    OK(store_polls_again_batch(g_db, &w[1], 1, &g_err));
    ck_assert(w[1].written);
    assert_poll(b, "poll_count", "0");
    assert_poll(b, "poll_owner", NULL);
    assert_col(b, "poll_count", "0");
    assert_col(b, "poll_owner", NULL);

    /* b claimed again by a claim of its own: the same count, another
     * owner; the give-back of the old claim, written again (a batch tried
     * again after its commit was lost), does not pass the new claim's
     * fence, which takes b's next check */
    OK(store_polls_claim(g_db, "w1/2", 10, 60000, types, 1, &c, &nc, &g_err));
    ck_assert_uint_eq(nc, 1);
    ck_assert_str_eq(c[0].owner, "w1/2");
    ck_assert_int_eq(c[0].poll_count, 1);
    poll_claims_free(c, nc);
    OK(store_polls_again_batch(g_db, &w[1], 1, &g_err));
    ck_assert(!w[1].written);
    assert_poll(b, "poll_count", "1");
    assert_poll(b, "poll_owner", "w1/2");
    w[1] = (struct poll_again){"default", b, "w1/2", 1, NULL, 60000, false, false};
    OK(store_polls_again_batch(g_db, &w[1], 1, &g_err));
    ck_assert(w[1].written);
    assert_poll(b, "poll_owner", NULL);

    json_decref(state);
    free(a);
    free(b);
    close_test_db();
}
END_TEST

/* Two entries for one run in one batch (a writer that fell behind while the
 * run was claimed again by the same owner): only the entry whose fence
 * holds is written, to both rows, and only it is reported written, wherever
 * it stands in the batch. */
START_TEST(polls_again_batch_stale_entry_never_wins)
{
    char *a, *b;
    json_t *one = json_pack("{s:s}", "from", "one"), *two = json_pack("{s:s}", "from", "two");
    struct poll_again w[2];

    open_test_db("it_store_again_stale");
    two_waiting(&a, &b);
    PQclear(th_sql(g_pg,
                   "UPDATE run_polls SET next_poll_at = now() + interval '1 h' "
                   "WHERE run_id = '%s'",
                   b));
    /* claimed (count 1), written, due again, claimed again (count 2) */
    ck_assert_int_eq(claim_one_check(a), 1);
    w[0] = (struct poll_again){"default", a, "w1", 1, NULL, 0, false, false};
    OK(store_polls_again_batch(g_db, w, 1, &g_err));
    ck_assert(w[0].written);
    ck_assert_int_eq(claim_one_check(a), 2);

    /* the stale entry (count 1) first, then the one that holds */
    w[0] = (struct poll_again){"default", a, "w1", 1, one, 60000, false, false};
    w[1] = (struct poll_again){"default", a, "w1", 2, two, 30000, false, false};
    OK(store_polls_again_batch(g_db, w, 2, &g_err));
    ck_assert(!w[0].written);
    ck_assert(w[1].written);
    assert_col(a, "poll_state->>'from'", "two");
    assert_col(a, "poll_count", "2");
    assert_col(a, "poll_owner", NULL);
    assert_poll(a, "poll_owner", NULL);
    assert_poll(a, "next_poll_at < now() + interval '45 s'", "true");

    /* and the other way round: claimed again (count 3), the holding entry first */
    PQclear(th_sql(g_pg,
                   "UPDATE run_polls SET next_poll_at = now() - interval '1 s' "
                   "WHERE run_id = '%s'",
                   a));
    ck_assert_int_eq(claim_one_check(a), 3);
    w[0] = (struct poll_again){"default", a, "w1", 3, one, 30000, false, false};
    w[1] = (struct poll_again){"default", a, "w1", 2, two, 60000, false, false};
    OK(store_polls_again_batch(g_db, w, 2, &g_err));
    ck_assert(w[0].written);
    ck_assert(!w[1].written);
    assert_col(a, "poll_state->>'from'", "one");
    assert_col(a, "poll_count", "3");

    json_decref(one);
    json_decref(two);
    free(a);
    free(b);
    close_test_db();
}
END_TEST

#define INDEX_SCANS "idx_scan FROM pg_stat_user_indexes WHERE indexrelname"
#define SEQ_SCANS "seq_scan FROM pg_stat_user_tables WHERE relname"

/* Scans of index or table `name` so far (what: INDEX_SCANS or SEQ_SCANS),
 * as the statistics say once the store's connection has ended (its
 * backend writes them at exit) and index `flushed` has more than `after`
 * scans (a sign they are written); a new store connection replaces the old
 * one. */
static long long scans(const char *what, const char *name, const char *flushed, long long after)
{
    long long n = -1;

    db_close(g_db);
    for (int i = 0; i < 100; i++, usleep(50000))
        if (th_sql_int(g_pg, "SELECT " INDEX_SCANS " = '%s'", flushed) > after)
            break;
    n = th_sql_int(g_pg, "SELECT %s = '%s'", what, name);
    g_db = connect_db(g_ci);
    return n;
}

/* The writer's batch reaches the runs by their ids (the primary key), also
 * while the table has no statistics yet (a new database, before
 * autovacuum's first ANALYZE): never through runs_list, whose first
 * column is the tenant, which reads every run of the tenant per entry. */
START_TEST(polls_again_batch_reads_runs_by_id)
{
    static const char *const types[] = {"job"};
    struct poll_claim *c = NULL;
    size_t nc = 0;
    struct poll_again *w;
    long long polls0, list0, list1;

    open_test_db("it_store_again_by_id");
    PQclear(th_sql(g_pg, "ALTER TABLE runs SET (autovacuum_enabled = false)"));
    PQclear(th_sql(g_pg, "ALTER TABLE run_polls SET (autovacuum_enabled = false)"));
    PQclear(th_sql(
        g_pg, "INSERT INTO runs (tenant, id, type, status, attempt, max_attempts, timeout_s, "
              "input, identity_hash, request_hash, external_id, poll_state, next_poll_at, "
              "poll_started_at, started_at) SELECT 'default', 'ab-' || g, 'job', 'waiting', 1, "
              "2, 900, '{}', 'ab-ident-' || g, 'req', 'job-' || g, '{}', now(), now(), now() "
              "FROM generate_series(1, 2000) g"));
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM pg_stats WHERE tablename = 'runs'"), 0);
    OK(store_polls_claim(g_db, "w1/1", 256, 60000, types, 1, &c, &nc, &g_err));
    ck_assert_uint_eq(nc, 256);
    polls0 = scans(INDEX_SCANS, "run_polls_pkey", "run_polls_due", 0);
    list0 = scans(INDEX_SCANS, "runs_list", "run_polls_pkey", -1);
    w = xcalloc(nc, sizeof(*w));
    for (size_t i = 0; i < nc; i++)
        w[i] = (struct poll_again){
            c[i].run->tenant, c[i].run->id, c[i].owner, c[i].poll_count, NULL, 60000, false, false};
    OK(store_polls_again_batch(g_db, w, nc, &g_err));
    for (size_t i = 0; i < nc; i++)
        ck_assert(w[i].written);
    list1 = scans(INDEX_SCANS, "runs_list", "run_polls_pkey", polls0);
    ck_assert_msg(list1 == list0, "runs_list scanned %lld times by one batch", list1 - list0);
    free(w);
    poll_claims_free(c, nc);
    close_test_db();
}
END_TEST

/* A claim reads the schedule by its due index and its key only, however
 * many runs wait: it never scans run_polls whole, neither to claim nor to
 * delete the due rows of runs that no longer wait (it read all 5,000 rows
 * of a bench's schedule in every claim, 1.2 ms of its 3). One run of the
 * 2,000 due is cancelled: the claim deletes its schedule row. (This test's
 * own statements read run_polls by its key too, since its statistics may
 * be written late.) */
START_TEST(polls_claim_reads_schedule_by_key)
{
    static const char *const types[] = {"job"};
    struct poll_claim *c = NULL;
    size_t nc = 0;
    long long due0, seq0, seq1;

    open_test_db("it_store_claim_by_key");
    PQclear(th_sql(g_pg, "ALTER TABLE run_polls SET (autovacuum_enabled = false)"));
    PQclear(th_sql(
        g_pg, "INSERT INTO runs (tenant, id, type, status, attempt, max_attempts, timeout_s, "
              "input, identity_hash, request_hash, external_id, poll_state, next_poll_at, "
              "poll_started_at, started_at) SELECT 'default', 'ck-' || g, 'job', 'waiting', 1, "
              "2, 900, '{}', 'ck-ident-' || g, 'req', 'job-' || g, '{}', now(), now(), now() "
              "FROM generate_series(1, 2000) g"));
    PQclear(th_sql(g_pg, "UPDATE run_polls SET next_poll_at = next_poll_at - interval '1 hour' "
                         "WHERE tenant = 'default' AND run_id = 'ck-1'"));
    PQclear(th_sql(g_pg, "UPDATE runs SET status = 'completed', outcome = 'cancelled', "
                         "completed_at = now() WHERE id = 'ck-1'"));
    PQclear(th_sql(g_pg, "ANALYZE runs"));
    PQclear(th_sql(g_pg, "ANALYZE run_polls"));
    due0 = scans(INDEX_SCANS, "run_polls_due", "run_polls_pkey", -1);
    seq0 = scans(SEQ_SCANS, "run_polls", "run_polls_pkey", -1);
    OK(store_polls_claim(g_db, "w1/1", 40, 60000, types, 1, &c, &nc, &g_err));
    ck_assert_uint_eq(nc, 39); /* and ck-1's row deleted */
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM run_polls WHERE tenant = 'default' "
                                      "AND run_id = 'ck-1'"),
                     0);
    poll_claims_free(c, nc);
    OK(store_polls_claim(g_db, "w1/2", 40, 60000, types, 1, &c, &nc, &g_err));
    ck_assert_uint_eq(nc, 40);
    poll_claims_free(c, nc);
    seq1 = scans(SEQ_SCANS, "run_polls", "run_polls_due", due0);
    ck_assert_msg(seq1 == seq0, "run_polls scanned whole %lld times by two claims", seq1 - seq0);
    close_test_db();
}
END_TEST

/* The schedule row follows the run: created whichever way a run enters
 * waiting (the hand-over, an INSERT, an UPDATE by hand); a run cancelled
 * while waiting is not claimed again (its row is deleted by the claim that
 * reaches it), and a check in flight at the cancel writes nothing; the
 * check that ends a run deletes its row and leaves the hooks to its owner. */
START_TEST(poll_schedule_follows_the_run)
{
    static const char *const types[] = {"T"};
    char *a, *b, *c;
    struct poll_claim *cl = NULL;
    size_t nc = 0;
    struct run *run = NULL;
    bool changed = false;
    struct run_result done = {.outcome = OUTCOME_SUCCEEDED, .message = "finished"};

    open_test_db("it_store_poll_schedule");
    two_waiting(&a, &b);
    PQclear(th_sql(g_pg,
                   "UPDATE run_polls SET next_poll_at = now() - interval '3 s' "
                   "WHERE run_id = '%s'",
                   b));
    assert_poll(a, "type", "T");
    c = new_run(3);
    PQclear(th_sql(g_pg,
                   "UPDATE runs SET status = 'waiting', next_poll_at = now() - interval '1 s', "
                   "poll_count = 4 WHERE id = '%s'",
                   c));
    assert_poll(c, "poll_count", "4");
    PQclear(th_sql(g_pg, "INSERT INTO runs (tenant, id, type, status, attempt, max_attempts, "
                         "timeout_s, input, identity_hash, request_hash, next_poll_at) VALUES "
                         "('default', 'by-insert', 'T', 'waiting', 1, 1, 60, '{}', 'i-x', 'r', "
                         "now() + interval '1 h')"));
    assert_poll("by-insert", "next_poll_at > now() + interval '59 min'", "true");

    /* a cancelled with no check in flight, b with one: neither is claimed */
    OK(store_polls_claim(g_db, "w1", 1, 60000, types, 1, &cl, &nc, &g_err));
    ck_assert_uint_eq(nc, 1);
    ck_assert_str_eq(cl[0].run->id, b);
    poll_claims_free(cl, nc);
    OK(store_runs_cancel(g_db, "default", a, &run, &changed, &g_err));
    run_free(run);
    OK(store_runs_cancel(g_db, "default", b, &run, &changed, &g_err));
    run_free(run);
    assert_poll(a, "poll_count", "0"); /* left to the next claim */
    ck_assert_int_eq(claim_one_check(c), 5);
    assert_poll(a, "run_id", NULL);
    {
        struct poll_fence f = {"default", b, "w1", 1};
        struct poll_again w = {"default", b, "w1", 1, NULL, 0, true, false};
        OK(store_polls_again_batch(g_db, &w, 1, &g_err));
        ck_assert(!w.written);              /* the run is no longer waiting */
        assert_poll(b, "poll_owner", NULL); /* due now, for the claim that deletes it */
        OK(store_polls_claim(g_db, "w1", 10, 60000, types, 1, &cl, &nc, &g_err));
        ck_assert_uint_eq(nc, 0);
        poll_claims_free(cl, nc);
        EXPECT(ST_LOST, store_polls_finish(g_db, &f, 1, &done, NULL, 60000, &g_err));
    }
    assert_state(b, "completed", "cancelled");
    assert_poll(b, "run_id", NULL);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM run_polls"), 2); /* c, by-insert */

    /* c ends: its row goes, the hooks are due and still w1's */
    {
        struct poll_fence f = {"default", c, "w1", 5};
        OK(store_polls_finish(g_db, &f, 5, &done, NULL, 60000, &g_err));
    }
    assert_state(c, "completed", "succeeded");
    assert_poll(c, "run_id", NULL);
    assert_col(c, "poll_count", "5");
    assert_col(c, "next_poll_at", NULL);
    assert_col(c, "poll_owner", "w1");
    assert_col(c, "hooks_at > now()", "true");
    OK(store_hooks_done(g_db, "default", c, "w1", true, NULL, 3, 1000, &g_err));
    assert_col(c, "hooks_at", NULL);

    free(a);
    free(b);
    free(c);
    close_test_db();
}
END_TEST

/* No index of runs covers a column that a claim or the result of a check
 * writes (poll_count, poll_owner, next_poll_at, poll_state), so those
 * writes can be HOT; the schedule's index is on run_polls. */
START_TEST(hot_update_columns_are_not_indexed)
{
    open_test_db("it_store_poll_hot");
    /* heartbeat_at too, since migration 014: a heartbeat is a HOT update. */
    ck_assert_int_eq(th_sql_int(g_pg,
                                "SELECT count(*) FROM pg_index i JOIN pg_attribute a ON "
                                "a.attrelid = i.indrelid WHERE i.indrelid = 'runs'::regclass "
                                "AND a.attname IN ('poll_count', 'next_poll_at', "
                                "'poll_state', 'poll_owner', 'heartbeat_at') AND (a.attnum = ANY "
                                "(i.indkey) OR "
                                "pg_get_expr(i.indpred, i.indrelid) ~ a.attname OR "
                                "pg_get_expr(i.indexprs, i.indrelid) ~ a.attname)"),
                     0);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM pg_indexes WHERE tablename = "
                                      "'run_polls' AND indexdef ~ '\\(next_poll_at\\)'"),
                     1);
    close_test_db();
}
END_TEST

/* Migration 029: a run that uses no notification, concurrency key or
 * workflow never reaches the functions behind the gates of the triggers
 * of runs. Each is replaced by one that raises; the whole path of plain
 * runs (submitted, claimed, retried, claimed again, finished one by one
 * and in a batch, cancelled queued and running), in both statement modes,
 * must not call one (nor migration 031's opsrun_react_batch, behind the
 * notes, nor migrations 034's and 035's functions of the triggers that
 * took the place of several). A run with a notification bit does, through its
 * gate. No WHEN condition of a trigger of runs calls an SQL function,
 * which PostgreSQL would parse again to inline at every statement. And a
 * change of status fires four row triggers (migration 034), an insert two
 * (035): each one's condition is prepared again at every statement, so a
 * new feature's test joins one of them rather than adding a trigger. */
START_TEST(status_triggers_gate_plain_runs)
{
    /* the signatures, with migration 029's names of the arguments */
    static const char *const wanted[] = {
        "opsrun_react_wanted(n_status text, o_status text, n_outcome text, n_reacts integer, "
        "o_started_at timestamptz, n_attempt integer, o_attempt integer)",
        "opsrun_conc_requeued_wanted(n_status text, o_status text, n_conc_key text, "
        "n_conc_strategy text, o_approval_state text)",
        "opsrun_conc_freed_wanted(o_conc_key text, o_status text, n_status text)",
        "opsrun_wf_approved_wanted(n_wf_def jsonb, n_status text, o_approval_state text, "
        "n_approval_state text)",
        "opsrun_wf_ended_wanted(n_wf_def jsonb, n_status text, o_status text, n_wf_steps jsonb)",
        "opsrun_wf_hold_wanted(n_wf_def jsonb, n_status text, o_status text, "
        "n_summary_counts jsonb)",
        "opsrun_wf_step_note_wanted(n_step_name text, n_status text, o_status text)",
        "opsrun_approval_requested_wanted(n_approval_state text, n_status text, "
        "n_reacts integer)",
        "opsrun_conc_insert_wanted(n_conc_group text, n_status text, n_conc_strategy text)",
        "opsrun_poll_enter_insert_wanted(n_status text, n_approval_state text, n_wf_def jsonb)",
        "opsrun_react_due(n_status text, o_status text, n_outcome text, n_reacts integer, "
        "o_started_at timestamptz, n_attempt integer, o_attempt integer, n_workflow boolean, "
        "n_conc_key text)"};
    /* migration 031's statement trigger, 034's and 035's row triggers */
    static const char *const fired[] = {"opsrun_react_batch()", "opsrun_status_before()",
                                        "opsrun_conc_polls()",  "opsrun_wf_status()",
                                        "opsrun_fill()",        "opsrun_inserted()"};
    char *a, *b, *c, *d, *e;
    struct run *run = NULL;
    bool changed = false, cancelled = false;
    struct run_finish fin[2];

    g_unnamed = _i == 1;
    open_test_db(g_unnamed ? "it_store_gates_fn" : "it_store_gates");
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM pg_trigger t, "
                                      "regexp_matches(t.tgqual, ':(?:op)?funcid (\\d+)', 'g') "
                                      "AS f(m) JOIN pg_proc p ON p.oid = f.m[1]::oid "
                                      "JOIN pg_language l ON l.oid = p.prolang "
                                      "WHERE t.tgrelid = 'runs'::regclass AND l.lanname = 'sql'"),
                     0);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM pg_trigger WHERE tgrelid = "
                                      "'runs'::regclass AND NOT tgisinternal AND tgtype & 1 = 1 "
                                      "AND tgtype & 16 = 16"),
                     4);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM pg_trigger WHERE tgrelid = "
                                      "'runs'::regclass AND NOT tgisinternal AND tgtype & 1 = 1 "
                                      "AND tgtype & 4 = 4"),
                     2);
    for (size_t i = 0; i < sizeof(wanted) / sizeof(wanted[0]); i++)
        PQclear(th_sql(g_pg,
                       "CREATE OR REPLACE FUNCTION %s RETURNS boolean LANGUAGE plpgsql "
                       "IMMUTABLE AS $$BEGIN RAISE EXCEPTION 'called'; END$$",
                       wanted[i]));
    for (size_t i = 0; i < sizeof(fired) / sizeof(fired[0]); i++)
        PQclear(th_sql(g_pg,
                       "CREATE OR REPLACE FUNCTION %s RETURNS trigger LANGUAGE plpgsql "
                       "AS $$BEGIN RAISE EXCEPTION 'called'; END$$",
                       fired[i]));
    a = new_run(3);
    b = new_run(3);
    c = new_run(3);
    claim_expect("w1", a, 1);
    claim_expect("w1", b, 1);
    claim_expect("w1", c, 1);
    OK(store_runs_retry(g_db, &(struct fence){"default", a, "w1", 1}, 0, NULL, &cancelled, &g_err));
    ck_assert(!cancelled);
    claim_expect("w1", a, 2); /* retried with no delay: due at once */
    /* d and e in one batch submission, as the HTTP server submits */
    {
        json_t *in = json_object();
        struct run_new items[2];
        struct run_submitted out[2];
        char ids[2][27];

        for (int k = 0; k < 2; k++) {
            run_id_new(ids[k]);
            items[k] = (struct run_new){.tenant = "default",
                                        .id = ids[k],
                                        .type = "T",
                                        .max_attempts = 3,
                                        .timeout_s = 300,
                                        .input = in,
                                        .identity_hash = ids[k],
                                        .request_hash = "req"};
        }
        OK(store_runs_submit_batch(g_db, items, 2, out, &g_err));
        ck_assert(out[0].st == ST_OK && !out[0].dedup && out[1].st == ST_OK && !out[1].dedup);
        run_submitted_cleanup(out, 2);
        json_decref(in);
        d = xstrdup(ids[0]);
        e = xstrdup(ids[1]);
    }
    fin[0] = (struct run_finish){.tenant = "default",
                                 .id = a,
                                 .attempt = 2,
                                 .res = {.outcome = OUTCOME_SUCCEEDED, .message = "ok"},
                                 .log_lines_json = "[[1795000000000000,\"opsrun\",\"done\"]]",
                                 .log_nlines = 1};
    fin[1] = (struct run_finish){.tenant = "default",
                                 .id = b,
                                 .attempt = 1,
                                 .res = {.outcome = OUTCOME_FAILED, .message = "failed"}};
    OK(store_runs_finish_batch(g_db, "w1", fin, 2, &g_err));
    ck_assert(fin[0].written && fin[1].written);
    OK(store_runs_cancel(g_db, "default", c, &run, &changed, &g_err));
    ck_assert(changed);
    run_free(run);
    ck_assert_int_eq(finish_as(c, "w1", 1, OUTCOME_SUCCEEDED), ST_OK);
    OK(store_runs_cancel(g_db, "default", d, &run, &changed, &g_err));
    ck_assert(changed);
    run_free(run);
    assert_state(a, "completed", "succeeded");
    assert_state(b, "completed", "failed");
    assert_state(c, "completed", "succeeded"); /* it ended before the cancel reached it */
    assert_state(d, "completed", "cancelled");
    /* past its gate, a run asking to be told of its start reaches the
     * trigger function (migration 034's runs_status_before, which raises
     * here) */
    PQclear(th_sql(g_pg, "UPDATE runs SET reacts = 1 WHERE id = '%s'", e));
    EXPECT(ST_DB, store_runs_claim(g_db, "w1", 1, 100, TYPES_T, CAPS_NONE, NULL, 1,
                                   &(struct run **){NULL}, &(size_t){0}, &g_err));
    ck_assert_msg(strstr(g_err.message, "called") != NULL, "%s", g_err.message);
    assert_state(e, "queued", "pending");
    /* and past their gates, inserts reach migration 035's functions: a
     * concurrency key's fill (BEFORE) and a waiting run's poll (AFTER) */
    {
        static const char *const cases[][2] = {{"256", "queued"}, {"0", "waiting"}};

        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
            PGresult *r = PQexecParams(g_pg,
                                       "INSERT INTO runs (tenant, id, type, max_attempts, "
                                       "timeout_s, input, identity_hash, request_hash, reacts, "
                                       "status) VALUES ('default', 'gate-' || $2, 'T', 1, 60, "
                                       "'{}', 'gate-' || $2, 'r', $1::int, $2)",
                                       2, NULL, cases[i], NULL, NULL, 0);
            ck_assert_int_eq(PQresultStatus(r), PGRES_FATAL_ERROR);
            ck_assert_msg(strstr(PQresultErrorMessage(r), "called") != NULL, "%s: %s", cases[i][1],
                          PQresultErrorMessage(r));
            PQclear(r);
        }
    }

    free(a);
    free(b);
    free(c);
    free(d);
    free(e);
    close_test_db();
}
END_TEST

/* A hooks claim given back: fenced on its owner and its try, due again at
 * once with the try taken back; a second give-back finds nothing, nor does
 * one written again after the next claim, which has the same try but
 * another owner. An owner too long to keep is refused. */
START_TEST(hooks_give_back_fences_each_claim)
{
    static const char *const types[] = {"T"};
    struct poll_claim *c = NULL;
    size_t n = 0;
    int given = -1;

    open_test_db("it_store_hooks_give_back");
    PQclear(th_sql(g_pg, "INSERT INTO runs (tenant, id, type, status, outcome, max_attempts, "
                         "timeout_s, input, identity_hash, request_hash, external_id, "
                         "completed_at, hooks_at) VALUES ('default', 'h1', 'T', 'completed', "
                         "'cancelled', 1, 60, '{}', 'h1', 'r', 'job-1', now(), now())"));
    OK(store_hooks_claim(g_db, "w1/1", 5, 60000, types, 1, &c, &n, &g_err));
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(c[0].hooks_attempts, 1);
    ck_assert_str_eq(c[0].owner, "w1/1");
    {
        const struct run_ref one = {"default", "h1", 1}, other_try = {"default", "h1", 2},
                             other_tenant = {"t2", "h1", 1};
        const char *const other = "w1/0", *const mine = "w1/1";
        OK(store_hooks_give_back(g_db, &one, &other, 1, &given, &g_err));
        ck_assert_int_eq(given, 0);
        OK(store_hooks_give_back(g_db, &other_try, &mine, 1, &given, &g_err));
        ck_assert_int_eq(given, 0);
        OK(store_hooks_give_back(g_db, &other_tenant, &mine, 1, &given, &g_err));
        ck_assert_int_eq(given, 0);
        assert_col("h1", "hooks_at > now() + interval '50 seconds'", "true");
    }
    {
        const struct run_ref ref = {"default", "h1", c[0].hooks_attempts};
        const char *const mine = "w1/1"; /* c[0].owner, kept past the claims' free */
        OK(store_hooks_give_back(g_db, &ref, &mine, 1, &given, &g_err));
        ck_assert_int_eq(given, 1);
        assert_col("h1", "hooks_attempts", "0");
        assert_col("h1", "poll_owner", NULL);
        assert_col("h1", "hooks_at <= now()", "true");
        OK(store_hooks_give_back(g_db, &ref, &mine, 1, &given, &g_err));
        ck_assert_int_eq(given, 0);
        OK(store_hooks_give_back(g_db, NULL, NULL, 0, &given, &g_err));
        ck_assert_int_eq(given, 0);
        poll_claims_free(c, n);
        OK(store_hooks_claim(g_db, "w1/2", 5, 60000, types, 1, &c, &n, &g_err));
        ck_assert_uint_eq(n, 1);
        ck_assert_int_eq(c[0].hooks_attempts, 1);
        OK(store_hooks_give_back(g_db, &ref, &mine, 1, &given, &g_err));
        ck_assert_int_eq(given, 0);
        assert_col("h1", "poll_owner", "w1/2");
        assert_col("h1", "hooks_attempts", "1");
    }
    poll_claims_free(c, n);
    {
        char owner[POLL_OWNER_MAX + 1];
        memset(owner, 'w', POLL_OWNER_MAX);
        owner[POLL_OWNER_MAX] = '\0';
        c = NULL;
        n = 7;
        ck_assert_int_eq(store_hooks_claim(g_db, owner, 5, 60000, types, 1, &c, &n, &g_err),
                         ST_INVALID);
        ck_assert_ptr_null(c);
        ck_assert_uint_eq(n, 0);
        owner[POLL_OWNER_MAX - 1] = '\0'; /* the longest kept */
        OK(store_hooks_claim(g_db, owner, 5, 60000, types, 1, &c, &n, &g_err));
        ck_assert_uint_eq(n, 0);
        free(c);
    }
    close_test_db();
}
END_TEST

/* ---- the batch claim of due checks under contention --------------------- */

#define RACE_WAITING 3000
#define RACE_POLLERS 8

struct poll_racer {
    const char *ci;
    pthread_barrier_t *bar;
    char owner[24];
    char **ids; /* the claims, in order (heap strings) */
    int n, cap, statements, biggest;
    enum status st;
    char msg[640];
};

/* Claims batches of 1..40 due checks until a claim finds none. */
static void *poll_racer_main(void *arg)
{
    static const char *const types[] = {"T"};
    struct poll_racer *w = arg;
    struct db_options o = {.conninfo = w->ci, .connect_timeout_s = 10};
    struct error err = {0};
    struct db *db = NULL;

    w->st = db_connect(&o, &db, &err);
    if (w->st != ST_OK)
        snprintf(w->msg, sizeof(w->msg), "connect: %s", err.message);
    pthread_barrier_wait(w->bar);
    while (w->st == ST_OK) {
        struct poll_claim *c = NULL;
        size_t n = 0;
        w->st = store_polls_claim(db, w->owner, 1 + (int)rand_below(40), 600000, types, 1, &c, &n,
                                  &err);
        if (w->st != ST_OK) {
            snprintf(w->msg, sizeof(w->msg), "claim: %s", err.message);
            break;
        }
        if (n == 0) {
            poll_claims_free(c, n);
            break;
        }
        w->statements++;
        if ((int)n > w->biggest)
            w->biggest = (int)n;
        for (size_t i = 0; i < n; i++) {
            if (w->n == w->cap) {
                w->cap = w->cap ? 2 * w->cap : 256;
                w->ids = xrealloc(w->ids, (size_t)w->cap * sizeof(*w->ids));
            }
            w->ids[w->n++] = xstrdup(c[i].run->id);
            if (c[i].poll_count != 1)
                w->st = ST_CONFLICT; /* claimed before */
        }
        poll_claims_free(c, n);
    }
    db_close(db);
    return NULL;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Eight pollers, each on its own connection and owner, race to claim 3,000
 * due checks in batches: every check is claimed exactly once (never by two,
 * none left), in batches of more than one, and each run's schedule row and
 * run row name the one claimer that got it. */
START_TEST(poll_claims_race)
{
    static struct poll_racer rs[RACE_POLLERS];
    pthread_t th[RACE_POLLERS];
    pthread_barrier_t bar;
    char **all = xcalloc(RACE_WAITING, sizeof(*all));
    int total = 0, statements = 0, biggest = 0;

    open_test_db("it_store_poll_race");
    PQclear(th_sql(g_pg,
                   "INSERT INTO runs (tenant, id, type, status, attempt, max_attempts, timeout_s, "
                   "input, identity_hash, request_hash, external_id, next_poll_at, "
                   "poll_started_at) SELECT 'default', 'pr-' || g, 'T', 'waiting', 1, 1, 60, "
                   "'{}', 'pr-ident-' || g, 'r', 'job-' || g, now() - random() * interval '10 s', "
                   "now() FROM generate_series(1, %d) g",
                   RACE_WAITING));
    pthread_barrier_init(&bar, NULL, RACE_POLLERS);
    for (int i = 0; i < RACE_POLLERS; i++) {
        memset(&rs[i], 0, sizeof(rs[i]));
        rs[i].ci = g_ci;
        rs[i].bar = &bar;
        snprintf(rs[i].owner, sizeof(rs[i].owner), "poller-%d", i);
        ck_assert_int_eq(pthread_create(&th[i], NULL, poll_racer_main, &rs[i]), 0);
    }
    for (int i = 0; i < RACE_POLLERS; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&bar);

    for (int i = 0; i < RACE_POLLERS; i++) {
        ck_assert_msg(rs[i].st == ST_OK, "poller %d: %s: %s", i, status_name(rs[i].st), rs[i].msg);
        for (int k = 0; k < rs[i].n; k++) {
            ck_assert_int_lt(total, RACE_WAITING);
            ck_assert_int_eq(th_sql_int(g_pg,
                                        "SELECT count(*) FROM run_polls WHERE run_id = '%s' AND "
                                        "poll_owner = 'poller-%d' AND poll_count = 1",
                                        rs[i].ids[k], i),
                             1);
            all[total++] = rs[i].ids[k];
        }
        statements += rs[i].statements;
        if (rs[i].biggest > biggest)
            biggest = rs[i].biggest;
    }
    fprintf(stderr,
            "poll claims race: %d checks in %d statements by %d pollers, at most %d in one\n",
            total, statements, RACE_POLLERS, biggest);
    ck_assert_int_eq(total, RACE_WAITING);
    qsort(all, (size_t)total, sizeof(*all), cmp_str);
    for (int k = 1; k < total; k++)
        ck_assert_msg(strcmp(all[k - 1], all[k]) != 0, "run %s was claimed twice", all[k]);
    ck_assert_int_gt(biggest, 1);
    ck_assert_int_lt(statements, RACE_WAITING / 2);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM run_polls WHERE poll_owner IS NULL"),
                     0);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs r JOIN run_polls p ON "
                                      "p.run_id = r.id WHERE r.poll_count = 1 AND "
                                      "r.poll_owner = p.poll_owner"),
                     RACE_WAITING);
    for (int i = 0; i < RACE_POLLERS; i++) {
        for (int k = 0; k < rs[i].n; k++)
            free(rs[i].ids[k]);
        free(rs[i].ids);
    }
    free(all);
    close_test_db();
}
END_TEST

/* The hand-over to waiting stores the poll budget on the run (migration
 * 010), and the run object reports it with the schedule as "poll", its last
 * member: next_check_at only while no check is in flight; null for a run
 * that never waited, or was cancelled during the hand-over; the limits null
 * for a run that began waiting before they were stored. The claim's run
 * carries the budget to the poller. */
START_TEST(wait_stores_the_budget_the_run_object_shows)
{
    static const char *const types[] = {"T"};
    static const struct poll_budget b = {7, 300};
    char *a = NULL, *never = NULL, *cancelled_id = NULL, *keys;
    struct poll_claim *c = NULL;
    struct poll_budget got = {0, 0};
    struct run *run = NULL;
    size_t nc = 0;
    bool cancelled = true, changed = false;

    open_test_db("it_store_poll_budget");
    a = new_run(3);
    cancelled_id = new_run(3);
    claim_expect("w1", a, 1);
    claim_expect("w1", cancelled_id, 1);
    never = new_run(3);
    {
        struct fence fa = {"default", a, "w1", 1}, fc = {"default", cancelled_id, "w1", 1};
        OK(store_runs_wait(g_db, &fa, "ext-a", NULL, 60000, &b, &cancelled, &g_err));
        ck_assert(!cancelled);
        OK(store_runs_cancel(g_db, "default", cancelled_id, &run, &changed, &g_err));
        run_free(run);
        OK(store_runs_wait(g_db, &fc, "ext-c", NULL, 60000, &b, &cancelled, &g_err));
        ck_assert(cancelled);
    }
    assert_col(a, "poll_max_checks", "7");
    assert_col(a, "poll_max_duration_s", "300");
#define POLL(m) "opsrun_run_json(runs)->'poll'->>'" m "'"
    assert_col(a, POLL("checks"), "0");
    assert_col(a, POLL("max_checks"), "7");
    assert_col(a, POLL("max_duration_s"), "300");
    assert_col(a, POLL("next_check_at") " = opsrun_ts(next_poll_at)", "true");
    assert_col(a, POLL("waiting_since") " = opsrun_ts(poll_started_at)", "true");
    assert_col(a, POLL("give_up_at") " = opsrun_ts(poll_started_at + interval '300 s')", "true");
    assert_col(a, "next_poll_at > now() + interval '50 s'", "true");
    assert_col(never, "json_typeof(opsrun_run_json(runs)->'poll')", "null");
    assert_col(cancelled_id, "json_typeof(opsrun_run_json(runs)->'poll')", "null");
    keys = sql_str("SELECT string_agg(k, ',') FROM runs r, json_object_keys(opsrun_run_json(r)) "
                   "k WHERE r.id = '%s'",
                   a);
#define LAST_MEMBERS                                                                               \
    ",updated_at,retry_of,poll,parent_id,schedule,approval,concurrency,workflow,workflow_step"
    ck_assert_msg(keys && strstr(keys, LAST_MEMBERS) &&
                      strcmp(strstr(keys, LAST_MEMBERS), LAST_MEMBERS) == 0,
                  "members: %s", keys);
#undef LAST_MEMBERS
    free(keys);

    /* a check in flight: counted, and no next check until it is done */
    PQclear(th_sql(
        g_pg, "UPDATE run_polls SET next_poll_at = now() - interval '1 s' WHERE run_id = '%s'", a));
    OK(store_polls_claim(g_db, "w1", 10, 60000, types, 1, &c, &nc, &g_err));
    ck_assert_uint_eq(nc, 1);
    ck_assert(run_poll_budget(c[0].run, &got));
    ck_assert_int_eq(got.max_checks, 7);
    ck_assert_int_eq(got.max_duration_s, 300);
    poll_claims_free(c, nc);
    assert_col(a, POLL("checks"), "1");
    assert_col(a, POLL("next_check_at"), NULL);
    {
        struct poll_again w = {"default", a, "w1", 1, NULL, 30000, false, false};
        OK(store_polls_again_batch(g_db, &w, 1, &g_err));
        ck_assert(w.written);
    }
    assert_col(a, POLL("checks"), "1");
    assert_col(a, POLL("next_check_at") " = opsrun_ts(next_poll_at)", "true");

    /* a next check past the end of the wait is cut to it */
    PQclear(th_sql(
        g_pg, "UPDATE run_polls SET next_poll_at = now() - interval '1 s' WHERE run_id = '%s'", a));
    ck_assert_int_eq(claim_one_check(a), 2);
    {
        struct poll_again w = {"default", a, "w1", 2, NULL, 86400000, false, false};
        OK(store_polls_again_batch(g_db, &w, 1, &g_err));
        ck_assert(w.written);
    }
    assert_col(a, "next_poll_at = poll_started_at + interval '300 s'", "true");
    assert_col(a, POLL("next_check_at") " = " POLL("give_up_at"), "true");

    /* written before the budget was stored: the limits are not known */
    PQclear(th_sql(g_pg,
                   "UPDATE runs SET poll_max_checks = NULL, poll_max_duration_s = NULL "
                   "WHERE id = '%s'",
                   a));
    assert_col(a, POLL("max_checks"), NULL);
    assert_col(a, POLL("give_up_at"), NULL);
    assert_col(a, POLL("checks"), "2");
    PQclear(th_sql(
        g_pg, "UPDATE run_polls SET next_poll_at = now() - interval '1 s' WHERE run_id = '%s'", a));
    ck_assert_int_eq(claim_one_check(a), 3);
    {
        struct poll_again w = {"default", a, "w1", 3, NULL, 86400000, false, false};
        OK(store_polls_again_batch(g_db, &w, 1, &g_err));
        ck_assert(w.written);
    }
    assert_col(a, "next_poll_at > now() + interval '23 hours'", "true");
#undef POLL
    OK(store_runs_get(g_db, "default", a, &run, &g_err));
    got = (struct poll_budget){-1, -1};
    ck_assert(!run_poll_budget(run, &got));
    ck_assert_int_eq(got.max_checks, -1);
    run_free(run);
    free(a);
    free(never);
    free(cancelled_id);
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
    Suite *s = suite_create("store");
    TCase *tc;

    tc = tcase("migrate", 60);
    tcase_add_test(tc, migrate_idempotent);
    tcase_add_test(tc, connections_run_without_jit);
    suite_add_tcase(s, tc);

    tc = tcase("submit", 60);
    tcase_add_test(tc, submit_dedupe_and_conflict);
    tcase_add_test(tc, dedupe_race);
    suite_add_tcase(s, tc);

    tc = tcase("claim", 120);
    tcase_add_test(tc, max_running_under_contention);
    tcase_add_loop_test(tc, claim_order_delay_and_types, 0, 2);
    tcase_add_test(tc, claim_returns_what_the_worker_needs);
    tcase_add_test(tc, claim_plan_never_scans_the_table);
    tcase_add_test(tc, claim_skips_runs_that_completed);
    suite_add_tcase(s, tc);

    tc = tcase("fencing", 60);
    tcase_add_test(tc, fencing_of_a_stale_worker);
    tcase_add_loop_test(tc, finish_batch_fences_each_run, 0, 2);
    tcase_add_test(tc, finish_batch_function_writes_what_the_statement_writes);
    tcase_add_test(tc, polls_again_batch_fences_each_check);
    tcase_add_test(tc, polls_again_batch_stale_entry_never_wins);
    tcase_add_test(tc, polls_again_batch_reads_runs_by_id);
    tcase_add_test(tc, polls_claim_reads_schedule_by_key);
    tcase_add_test(tc, poll_schedule_follows_the_run);
    tcase_add_test(tc, hot_update_columns_are_not_indexed);
    tcase_add_loop_test(tc, status_triggers_gate_plain_runs, 0, 2);
    tcase_add_test(tc, hooks_give_back_fences_each_claim);
    tcase_add_test(tc, poll_claims_race);
    tcase_add_test(tc, wait_stores_the_budget_the_run_object_shows);
    tcase_add_test(tc, orphan_rescue_paths);
    tcase_add_test(tc, hand_back_of_a_cancelling_run);
    tcase_add_test(tc, rescue_batches);
    tcase_add_test(tc, queue_age_and_pool_stats);
    tcase_add_test(tc, heartbeat_only_own_runs);
    suite_add_tcase(s, tc);

    tc = tcase("cancel_retry", 60);
    tcase_add_test(tc, cancel_paths);
    tcase_add_test(tc, cancel_waits_for_the_newest_version);
    tcase_add_test(tc, identity_does_not_join_a_cancelling_run);
    tcase_add_test(tc, retry_paths);
    tcase_add_test(tc, progress_writes_and_clamps);
    suite_add_tcase(s, tc);

    tc = tcase("retention_list", 60);
    tcase_add_test(tc, prune_in_batches);
    tcase_add_test(tc, list_cursor_filters_and_tenants);
    tcase_add_test(tc, all_tenants_and_initiator);
    tcase_add_test(tc, every_tenant_list_is_one_order);
    suite_add_tcase(s, tc);

    /* Last: it restarts the server under everyone. */
    tc = tcase("restart", 120);
    tcase_add_test(tc, survives_postgres_restart);
    suite_add_tcase(s, tc);

    return th_run_suite(s);
}
