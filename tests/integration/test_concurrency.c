/* tests/integration/test_concurrency.c — concurrency keys and fair claims
 * (migration 022) against a real PostgreSQL: the key as the database makes
 * it, the rules a replica writes, eight connections claiming runs of three
 * keys at once (never more running than a key allows, judged inside every
 * claim's transaction and sampled from outside; every run ends, also when
 * every marker of a freed key is lost and only the sweep releases), each
 * strategy (and what a retry superseded at once owes: its notifications,
 * each with the run as its transition left it, and its follow-up once), a
 * group shared by two run types, keys per tenant, a key that cannot be
 * made, tenants served in turn and capped under concurrent claimers, the
 * claims of older binaries, and the new claim's plan.
 *
 * Each test gets a fresh database cloned from the migrated template. The
 * rules are written as a replica writes them (notify_rules_json, then
 * store_rules_sync) from run types filled in here: the configuration's
 * parsing of "concurrency" is not what these tests are about. Threads never
 * call ck_assert: they record what went wrong and the test thread asserts
 * after joining them.
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

#include <jansson.h>
#include <libpq-fe.h>

#include "common/ids.h"
#include "config/config.h"
#include "engine/notify_body.h"
#include "store/db.h"
#include "store/approvals.h"
#include "store/notify.h"
#include "store/polls.h"
#include "store/runs.h"
#include "tests/support/fixture.h"
#include "tests/support/harness.h"

/* ---- helpers ---------------------------------------------------------- */

/* A run type as these tests configure it: parts NULL for one without
 * concurrency; then and notify (JSON, or NULL) its follow-up and
 * notification rules as the configuration has them. */
struct ctype {
    const char *name, *group, *parts;
    int max;
    enum conc_strategy strategy;
    const char *then, *notify;
};

/* Writes the rules of the n types as a replica does at start. */
static void sync_types(const struct ctype *t, size_t n)
{
    struct run_type *rts = xcalloc(n, sizeof(*rts));
    struct config cfg = {0};
    char *rules;

    for (size_t i = 0; i < n; i++) {
        rts[i].name = xstrdup(t[i].name);
        rts[i].max_attempts = 3;
        rts[i].timeout_s = 300;
        rts[i].notify = t[i].notify ? json_loads(t[i].notify, 0, NULL) : json_array();
        ck_assert_ptr_nonnull(rts[i].notify);
        rts[i].then = t[i].then ? json_loads(t[i].then, 0, NULL) : json_array();
        ck_assert_ptr_nonnull(rts[i].then);
        if (t[i].parts) {
            rts[i].conc.on = true;
            rts[i].conc.group = t[i].group ? xstrdup(t[i].group) : NULL;
            rts[i].conc.parts = json_loads(t[i].parts, 0, NULL);
            ck_assert_ptr_nonnull(rts[i].conc.parts);
            rts[i].conc.max_running = t[i].max;
            rts[i].conc.strategy = t[i].strategy;
        }
    }
    cfg.run_types = rts;
    cfg.nrun_types = n;
    rules = notify_rules_json(&cfg);
    OK(store_rules_sync(g_db, rules, 10, NULL, NULL, &g_err));
    free(rules);
    for (size_t i = 0; i < n; i++) {
        free(rts[i].name);
        free(rts[i].conc.group);
        json_decref(rts[i].notify);
        json_decref(rts[i].then);
        json_decref(rts[i].conc.parts);
    }
    free(rts);
}

/* Submits a run (identity: ident, else its id) on db; returns it. */
static struct run *submit_full(struct db *db, const char *tenant, const char *type,
                               const char *input, int priority, const char *ident, bool *dedup)
{
    char id[27];
    json_t *in = json_loads(input, 0, NULL);
    struct run_new rn = {0};
    struct run *run = NULL;
    bool d = false;

    ck_assert_ptr_nonnull(in);
    run_id_new(id);
    rn = (struct run_new){.tenant = tenant,
                          .id = id,
                          .type = type,
                          .priority = priority,
                          .max_attempts = 3,
                          .timeout_s = 300,
                          .input = in,
                          .identity_hash = ident ? ident : id,
                          .request_hash = "req"};
    OK(store_runs_submit(db, &rn, &run, &d, &g_err));
    json_decref(in);
    if (dedup)
        *dedup = d;
    return run;
}

/* Submits a new run (asserting it was not joined); returns its id (heap). */
static char *submit(const char *tenant, const char *type, const char *input, int priority)
{
    bool dedup = true;
    struct run *run = submit_full(g_db, tenant, type, input, priority, NULL, &dedup);
    char *id = xstrdup(run->id);

    ck_assert(!dedup);
    run_free(run);
    return id;
}

/* Submits a run of tenant "default" that waits for approval (10 minutes);
 * returns its id (heap). */
static char *submit_awaiting(const char *type, const char *input)
{
    char id[27];
    json_t *in = json_loads(input, 0, NULL);
    struct run *run = NULL;
    bool dedup = true;

    ck_assert_ptr_nonnull(in);
    run_id_new(id);
    OK(store_runs_submit(g_db,
                         &(struct run_new){.tenant = "default",
                                           .id = id,
                                           .type = type,
                                           .max_attempts = 3,
                                           .timeout_s = 300,
                                           .input = in,
                                           .identity_hash = id,
                                           .request_hash = "req",
                                           .approval_timeout_s = 600},
                         &run, &dedup, &g_err));
    ck_assert(!dedup);
    run_free(run);
    json_decref(in);
    return xstrdup(id);
}

/* Approves run id of tenant "default". */
static void approve(const char *id)
{
    struct run *out = NULL;

    OK(store_approvals_decide(g_db, &(struct approval_decision){"default", id, true, "ops", NULL},
                              &out, &g_err));
    run_free(out);
}

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

/* Asserts that SQL expression expr over run id's row is the text want
 * (NULL = SQL NULL). */
static void assert_col(const char *id, const char *expr, const char *want)
{
    char *got = sql_str("SELECT (%s)::text FROM runs WHERE id = '%s'", expr, id);

    if (want)
        ck_assert_msg(got && strcmp(got, want) == 0, "run %s: %s is %s, want %s", id, expr,
                      got ? got : "NULL", want);
    else
        ck_assert_msg(!got, "run %s: %s is %s, want NULL", id, expr, got);
    free(got);
}

static void assert_state(const char *id, const char *status, const char *outcome)
{
    assert_col(id, "status", status);
    assert_col(id, "outcome", outcome);
}

/* Asserts that run id has an event whose message is want. */
static void assert_event(const char *id, const char *want)
{
    char *all;

    if (th_sql_int(g_pg, "SELECT count(*) FROM run_events WHERE run_id = '%s' AND message = '%s'",
                   id, want) == 1)
        return;
    all = sql_str("SELECT string_agg(status || ': ' || coalesce(message, '-'), ' | ' ORDER BY id) "
                  "FROM run_events WHERE run_id = '%s'",
                  id);
    ck_abort_msg("run %s has no event \"%s\" (its events: %s)", id, want, all ? all : "none");
}

/* Claims up to limit runs of the types on db; returns how many, their ids
 * in ids (heap strings, when ids is not NULL). */
static size_t claim_on(struct db *db, const char *worker, int limit, const char *const *types,
                       size_t ntypes, const struct claim_tenants *tenants, char **ids)
{
    static const int caps[8] = {0};
    struct run **runs = NULL;
    size_t n = 0;

    ck_assert(ntypes <= 8);
    OK(store_runs_claim_fair(db, worker, limit, 1000, types, caps, NULL, ntypes, tenants, &runs, &n,
                             &g_err));
    for (size_t i = 0; i < n; i++) {
        if (ids)
            ids[i] = xstrdup(runs[i]->id);
        run_free(runs[i]);
    }
    free(runs);
    return n;
}

/* Claims and expects exactly the runs named (in any order), as worker w1. */
static void claim_expect(const char *const *types, size_t ntypes, const char *const *want,
                         size_t nwant)
{
    char *ids[16] = {0};
    size_t n = claim_on(g_db, "w1", 16, types, ntypes, NULL, ids);

    ck_assert_msg(n == nwant, "claimed %zu runs, want %zu (first %s)", n, nwant, n ? ids[0] : "-");
    for (size_t i = 0; i < nwant; i++) {
        bool found = false;
        for (size_t k = 0; k < n; k++)
            found |= strcmp(ids[k], want[i]) == 0;
        ck_assert_msg(found, "run %s was not claimed", want[i]);
    }
    for (size_t i = 0; i < n; i++)
        free(ids[i]);
}

/* Ends the running run id (attempt 1, worker w1) with outcome. */
static void finish(const char *id, enum run_outcome outcome)
{
    struct fence f = {"default", id, "w1", 1};
    struct run_result res = {.outcome = outcome, .message = "done"};

    OK(store_runs_finish(g_db, &f, &res, &g_err));
}

/* ---- the key ---------------------------------------------------------- */

/* opsrun_conc_key's rules, which the API's evaluator shares: text as it
 * is, the tenant, a value at a JSON pointer (escapes, array indexes) that
 * is a string, an integer or a boolean, and nothing else; at most 512
 * bytes. */
START_TEST(key_rules)
{
    static const struct {
        const char *parts, *tenant, *input, *want;
    } cases[] = {
        {"[[\"text\",\"host:\"],[\"input\",\"/labels/instance\"]]", "t",
         "{\"labels\":{\"instance\":\"db-1\"}}", "host:db-1"},
        {"[[\"tenant\"],[\"text\",\"/\"],[\"input\",\"/n\"]]", "acme", "{\"n\":42}", "acme/42"},
        {"[[\"input\",\"/n\"]]", "t", "{\"n\":-7}", "-7"},
        {"[[\"input\",\"/b\"]]", "t", "{\"b\":false}", "false"},
        {"[[\"input\",\"/a~1b/1\"]]", "t", "{\"a/b\":[\"x\",\"y\"]}", "y"},
        {"[[\"input\",\"/m~0n\"]]", "t", "{\"m~n\":\"z\"}", "z"},
        {"[[\"input\",\"\"]]", "t", "\"whole\"", "whole"},
        {"[[\"text\",\"fixed\"]]", "t", "{}", "fixed"},
        {"[[\"input\",\"/n\"]]", "t", "{\"n\":1.5}", NULL},
        {"[[\"input\",\"/n\"]]", "t", "{\"n\":2.0}", NULL},
        {"[[\"input\",\"/n\"]]", "t", "{\"n\":9223372036854775807}", "9223372036854775807"},
        {"[[\"input\",\"/n\"]]", "t", "{\"n\":-9223372036854775808}", "-9223372036854775808"},
        {"[[\"input\",\"/n\"]]", "t", "{\"n\":9223372036854775808}", NULL},
        {"[[\"input\",\"/n\"]]", "t", "{\"n\":1e+20}", NULL},
        {"[[\"input\",\"/n\"]]", "t", "{\"n\":123456789012345678901234567890}", NULL},
        {"[[\"input\",\"/n\"]]", "t", "{\"n\":null}", NULL},
        {"[[\"input\",\"/n\"]]", "t", "{\"n\":{\"a\":1}}", NULL},
        {"[[\"input\",\"/n\"]]", "t", "{\"n\":[1]}", NULL},
        {"[[\"input\",\"/n\"]]", "t", "{}", NULL},
        {"[[\"input\",\"/a/01\"]]", "t", "{\"a\":[\"x\",\"y\"]}", NULL},
        {"[[\"input\",\"/a/5\"]]", "t", "{\"a\":[\"x\"]}", NULL},
        {"[[\"text\",\"a\"],[\"input\",\"/x\"]]", "t", "{\"y\":1}", NULL},
    };

    open_test_db("it_conc_key");
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        char *got = sql_str("SELECT opsrun_conc_key('%s', '%s', '%s')", cases[i].parts,
                            cases[i].tenant, cases[i].input);
        if (cases[i].want)
            ck_assert_msg(got && strcmp(got, cases[i].want) == 0, "%s over %s: %s, want %s",
                          cases[i].parts, cases[i].input, got ? got : "NULL", cases[i].want);
        else
            ck_assert_msg(!got, "%s over %s: %s, want NULL", cases[i].parts, cases[i].input, got);
        free(got);
    }
    /* 512 bytes are a key, 513 are not; a pointer's token over 511 bytes
     * finds nothing (common/jsonptr.c). */
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT octet_length(opsrun_conc_key(('[[\"text\",\"' || "
                                      "repeat('x', 500) || '\"],[\"input\",\"/s\"]]')::jsonb, 't', "
                                      "jsonb_build_object('s', repeat('y', 12))))"),
                     512);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) WHERE opsrun_conc_key(('[[\"text\",\"' || "
                                      "repeat('x', 500) || '\"],[\"input\",\"/s\"]]')::jsonb, "
                                      "'t', jsonb_build_object('s', repeat('y', 13))) IS NULL"),
                     1);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) WHERE opsrun_conc_key(jsonb_build_array("
                                      "jsonb_build_array('input', '/' || repeat('k', 512))), "
                                      "'t', jsonb_build_object(repeat('k', 512), 'v')) IS NULL"),
                     1);
    close_test_db();
}
END_TEST

/* A replica writes each type's concurrency into its rules, changes it when
 * the configuration does, and takes it away; reacts bit 256 follows. */
START_TEST(rules_carry_concurrency)
{
    const struct ctype on[] = {
        {"R", "host", "[[\"input\",\"/h\"]]", 2, CONC_KEEP_NEWEST, NULL, NULL},
        {"N", NULL, "[[\"input\",\"/h\"]]", 1, CONC_QUEUE, NULL, NULL},
        {"T", NULL, NULL, 0, CONC_QUEUE, NULL, NULL},
    };
    const struct ctype off[] = {{"R", NULL, NULL, 0, CONC_QUEUE, NULL, NULL}};

    open_test_db("it_conc_rules");
    sync_types(on, ARRAY_LEN(on));
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM run_type_rules WHERE type = 'R' AND "
                                      "conc_group = 'host' AND conc_parts = '[[\"input\", "
                                      "\"/h\"]]' AND conc_max = 2 AND conc_strategy = "
                                      "'keep_newest' AND reacts = 256"),
                     1);
    /* The group defaults to the type's name. */
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM run_type_rules WHERE type = 'N' AND "
                                      "conc_group = 'N' AND conc_strategy = 'queue'"),
                     1);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM run_type_rules WHERE type = 'T' AND "
                                      "conc_group IS NULL AND conc_parts IS NULL AND reacts = 0"),
                     1);
    sync_types(off, ARRAY_LEN(off));
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM run_type_rules WHERE type = 'R' AND "
                                      "conc_group IS NULL AND conc_max IS NULL AND reacts = 0"),
                     1);
    close_test_db();
}
END_TEST

/* ---- many claimers ---------------------------------------------------- */

#define MANY_RUNS_PER_KEY 80
#define MANY_CLAIMERS 8

/* Every claim checks, in its own transaction and so under the claim lock,
 * that no key and no tenant it started a run of is over its limit; what
 * it finds is kept in violations. */
static void install_checker(int tenant_cap)
{
    PQclear(th_sql(g_pg, "CREATE TABLE violations (what text, n bigint)"));
    PQclear(th_sql(g_pg,
                   "CREATE FUNCTION check_limits() RETURNS trigger LANGUAGE plpgsql AS $$ "
                   "DECLARE n bigint; BEGIN "
                   "IF NEW.conc_key IS NOT NULL THEN "
                   "SELECT count(*) INTO n FROM runs WHERE tenant = NEW.tenant AND conc_group = "
                   "NEW.conc_group AND conc_key = NEW.conc_key AND status IN ('running', "
                   "'cancelling'); IF n > NEW.conc_max THEN INSERT INTO violations VALUES "
                   "(NEW.conc_group || '/' || NEW.conc_key, n); END IF; END IF; "
                   "IF %d > 0 THEN SELECT count(*) INTO n FROM runs WHERE tenant = NEW.tenant "
                   "AND status IN ('running', 'cancelling'); IF n > %d THEN INSERT INTO "
                   "violations VALUES ('tenant ' || NEW.tenant, n); END IF; END IF; "
                   "RETURN NULL; END $$",
                   tenant_cap, tenant_cap));
    PQclear(th_sql(g_pg, "CREATE TRIGGER zz_check AFTER UPDATE OF status ON runs FOR EACH ROW "
                         "WHEN (NEW.status = 'running') EXECUTE FUNCTION check_limits()"));
}

static void assert_no_violation(void)
{
    char *v = sql_str("SELECT string_agg(what || ': ' || n, ', ') FROM violations");

    ck_assert_msg(!v, "over the limit inside a claim: %s", v);
}

struct many {
    const char *ci;
    const char *const *types;
    size_t ntypes;
    const struct claim_tenants *tenants;
    int total; /* runs that must end */
    pthread_barrier_t bar;
    atomic_bool stop;
    atomic_bool done;
};

struct claimer {
    struct many *m;
    char worker[16];
    int claimed;
    enum status st;
    char msg[640];
};

/* Ends or hands back one claimed run, at random: mostly a success, else a
 * retry, a release, or a cancel that its worker then ends. */
static enum status act_on(struct db *db, const char *worker, const struct run *run,
                          struct error *err)
{
    struct fence f = {run->tenant, run->id, worker, run->attempt};
    struct run_result ok = {.outcome = OUTCOME_SUCCEEDED, .message = "done"};
    struct run_result cancelled = {.outcome = OUTCOME_CANCELLED, .message = "cancelled"};
    uint64_t dice = rand_below(100);
    enum status st;

    th_sleep_ms(1 + (long)rand_below(6));
    if (dice < 12 && run->attempt < run->max_attempts)
        return store_runs_retry(db, &f, 0, NULL, NULL, err);
    if (dice < 20)
        return store_runs_release(db, &f, NULL, err);
    if (dice < 26) {
        struct run *c = NULL;
        bool changed = false;
        st = store_runs_cancel(db, run->tenant, run->id, &c, &changed, err);
        run_free(c);
        if (st != ST_OK)
            return st;
        th_sleep_ms(2);
        return store_runs_finish(db, &f, &cancelled, err);
    }
    return store_runs_finish(db, &f, &ok, err);
}

static void *claimer_main(void *arg)
{
    static const int caps[8] = {0};
    struct claimer *w = arg;
    struct many *m = w->m;
    struct db *db = NULL;
    struct db_options o = {.conninfo = m->ci, .connect_timeout_s = 10};
    struct error err = {0};

    w->st = db_connect(&o, &db, &err);
    if (w->st != ST_OK)
        snprintf(w->msg, sizeof(w->msg), "connect: %s", err.message);
    pthread_barrier_wait(&m->bar);
    while (w->st == ST_OK && !atomic_load(&m->stop) && !atomic_load(&m->done)) {
        struct run **runs = NULL;
        size_t n = 0;
        w->st = store_runs_claim_fair(db, w->worker, 3, 100, m->types, caps, NULL, m->ntypes,
                                      m->tenants, &runs, &n, &err);
        if (w->st != ST_OK)
            snprintf(w->msg, sizeof(w->msg), "claim: %s", err.message);
        for (size_t i = 0; i < n; i++) {
            if (w->st == ST_OK && (w->st = act_on(db, w->worker, runs[i], &err)) != ST_OK)
                snprintf(w->msg, sizeof(w->msg), "run %s: %s", runs[i]->id, err.message);
            run_free(runs[i]);
        }
        w->claimed += (int)n;
        free(runs);
        if (n == 0)
            th_sleep_ms(2);
    }
    if (w->st != ST_OK)
        atomic_store(&m->stop, true);
    db_close(db);
    return NULL;
}

/* Samples from outside the claims: the most runs running or cancelling of
 * any key of each group, and of tenant "A". */
struct sampler {
    struct many *m;
    long samples;
    int max_g1, max_g2, max_a;
    long g1_full, g2_full, a_full;
    char msg[640];
};

static void *sampler_main(void *arg)
{
    struct sampler *s = arg;
    PGconn *pg = PQconnectdb(s->m->ci);

    if (PQstatus(pg) != CONNECTION_OK)
        snprintf(s->msg, sizeof(s->msg), "connect: %s", PQerrorMessage(pg));
    pthread_barrier_wait(&s->m->bar);
    while (!s->msg[0] && !atomic_load(&s->m->done) && !atomic_load(&s->m->stop)) {
        PGresult *r = PQexec(
            pg, "SELECT coalesce(max(n) FILTER (WHERE g = 'g1'), 0), coalesce(max(n) FILTER "
                "(WHERE g = 'g2'), 0), (SELECT count(*) FROM runs WHERE tenant = 'A' AND status "
                "IN ('running', 'cancelling')) FROM (SELECT conc_group AS g, count(*) AS n FROM "
                "runs WHERE status IN ('running', 'cancelling') AND conc_key IS NOT NULL "
                "GROUP BY tenant, conc_group, conc_key) x");
        int g1, g2, a;
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
            snprintf(s->msg, sizeof(s->msg), "sample: %s", PQerrorMessage(pg));
            PQclear(r);
            break;
        }
        g1 = atoi(PQgetvalue(r, 0, 0));
        g2 = atoi(PQgetvalue(r, 0, 1));
        a = atoi(PQgetvalue(r, 0, 2));
        PQclear(r);
        s->samples++;
        s->max_g1 = g1 > s->max_g1 ? g1 : s->max_g1;
        s->max_g2 = g2 > s->max_g2 ? g2 : s->max_g2;
        s->max_a = a > s->max_a ? a : s->max_a;
        s->g1_full += g1 == 1;
        s->g2_full += g2 == 2;
        s->a_full += a > 0;
    }
    PQfinish(pg);
    return NULL;
}

/* Releases held runs as maintenance does, every 20 ms, until done. */
static void *sweeper_main(void *arg)
{
    struct many *m = arg;
    struct db_options o = {.conninfo = m->ci, .connect_timeout_s = 10};
    struct error err = {0};
    struct db *db = NULL;

    if (db_connect(&o, &db, &err) != ST_OK)
        return NULL;
    while (!atomic_load(&m->done) && !atomic_load(&m->stop)) {
        if (store_runs_conc_sweep(db, NULL, &err) != ST_OK)
            break;
        th_sleep_ms(20);
    }
    db_close(db);
    return NULL;
}

/* Runs the claimers (and the sampler, and the sweeper when sweep) until
 * every run ended or deadline_ms passed; asserts that every run ended and
 * that no claimer failed. */
static void run_many(struct many *m, struct sampler *s, bool sweep, long deadline_ms)
{
    static struct claimer ws[MANY_CLAIMERS];
    pthread_t th[MANY_CLAIMERS], sth, wth;
    long long t0 = th_now_ms(), left = 0;

    m->ci = g_ci;
    atomic_init(&m->stop, false);
    atomic_init(&m->done, false);
    pthread_barrier_init(&m->bar, NULL, MANY_CLAIMERS + 2);
    s->m = m;
    ck_assert_int_eq(pthread_create(&sth, NULL, sampler_main, s), 0);
    if (sweep)
        ck_assert_int_eq(pthread_create(&wth, NULL, sweeper_main, m), 0);
    for (int i = 0; i < MANY_CLAIMERS; i++) {
        memset(&ws[i], 0, sizeof(ws[i]));
        ws[i].m = m;
        snprintf(ws[i].worker, sizeof(ws[i].worker), "w%02d", i);
        ck_assert_int_eq(pthread_create(&th[i], NULL, claimer_main, &ws[i]), 0);
    }
    pthread_barrier_wait(&m->bar);
    while (th_now_ms() - t0 < deadline_ms && !atomic_load(&m->stop)) {
        left = th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE status <> 'completed'");
        if (left == 0)
            break;
        th_sleep_ms(50);
    }
    atomic_store(&m->done, true);
    for (int i = 0; i < MANY_CLAIMERS; i++)
        pthread_join(th[i], NULL);
    pthread_join(sth, NULL);
    if (sweep)
        pthread_join(wth, NULL);
    pthread_barrier_destroy(&m->bar);
    fprintf(stderr,
            "concurrency: %d runs, %lld left, in %lld ms; %ld samples, max g1 %d (full %ld), "
            "max g2 %d (full %ld), max A %d\n",
            m->total, left, th_now_ms() - t0, s->samples, s->max_g1, s->g1_full, s->max_g2,
            s->g2_full, s->max_a);
    for (int i = 0; i < MANY_CLAIMERS; i++)
        ck_assert_msg(ws[i].st == ST_OK, "%s: %s: %s", ws[i].worker, status_name(ws[i].st),
                      ws[i].msg);
    ck_assert_msg(!s->msg[0], "sampler: %s", s->msg);
    ck_assert_msg(left == 0, "%lld of %d runs never ended (%lld held)", left, m->total,
                  th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE conc_held AND "
                                   "status = 'queued'"));
}

/* Three keys, of max_running 1, 1 and 2, and runs without a key, claimed
 * by eight connections at once, ended, retried, released and cancelled at
 * random. */
static void queue_many(void)
{
    const struct ctype types[] = {
        {"K1", "g1", "[[\"input\",\"/k\"]]", 1, CONC_QUEUE, NULL, NULL},
        {"K2", "g2", "[[\"input\",\"/k\"]]", 2, CONC_QUEUE, NULL, NULL},
        {"U", NULL, NULL, 0, CONC_QUEUE, NULL, NULL},
    };
    const struct {
        const char *type, *input;
    } kinds[] = {
        {"K1", "{\"k\":\"a\"}"}, {"K1", "{\"k\":\"b\"}"}, {"K2", "{\"k\":\"c\"}"}, {"U", "{}"}};

    sync_types(types, ARRAY_LEN(types));
    for (int i = 0; i < MANY_RUNS_PER_KEY; i++)
        for (size_t k = 0; k < ARRAY_LEN(kinds); k++)
            free(submit("default", kinds[k].type, kinds[k].input, (int)rand_below(3)));
}

START_TEST(keys_hold_under_concurrent_claims)
{
    static const char *const types[] = {"K1", "K2", "U"};
    struct many m = {.types = types, .ntypes = 3, .total = 4 * MANY_RUNS_PER_KEY};
    struct sampler s = {0};

    open_test_db("it_conc_many");
    queue_many();
    install_checker(0);
    run_many(&m, &s, false, 90000);
    assert_no_violation();
    ck_assert_msg(s.max_g1 <= 1, "sampled %d runs of one key of g1 running, max_running 1",
                  s.max_g1);
    ck_assert_msg(s.max_g2 <= 2, "sampled %d runs of key c running, max_running 2", s.max_g2);
    /* The sampler saw the contention it judges. */
    ck_assert_msg(s.samples >= 50, "only %ld samples", s.samples);
    ck_assert_msg(s.g2_full > 0, "never saw key c at its max_running 2");
    /* (A held run cancelled keeps its flag, which counts only while queued.) */
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE conc_held AND status <> "
                                      "'completed'"),
                     0);
    close_test_db();
}
END_TEST

/* The same when every marker of a freed key is lost (as if deleted by hand
 * as soon as written): the sweep alone releases the held runs, and every
 * run still ends. */
START_TEST(sweep_releases_when_markers_are_lost)
{
    static const char *const types[] = {"K1", "K2", "U"};
    struct many m = {.types = types, .ntypes = 3, .total = 4 * MANY_RUNS_PER_KEY};
    struct sampler s = {0};

    open_test_db("it_conc_sweep");
    queue_many();
    install_checker(0);
    PQclear(th_sql(g_pg, "CREATE RULE lose_markers AS ON INSERT TO conc_freed DO INSTEAD NOTHING"));
    run_many(&m, &s, true, 90000);
    assert_no_violation();
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM conc_freed"), 0);
    close_test_db();
}
END_TEST

/* ---- strategies ------------------------------------------------------- */

static const struct ctype STRATEGIES[] = {
    {"Q", "q", "[[\"input\",\"/k\"]]", 1, CONC_QUEUE, NULL, NULL},
    {"CN", "cn", "[[\"input\",\"/k\"]]", 2, CONC_CANCEL_NEWEST, NULL, NULL},
    {"KN", "kn", "[[\"input\",\"/k\"]]", 1, CONC_KEEP_NEWEST, NULL, NULL},
    {"CI", "ci", "[[\"input\",\"/k\"]]", 1, CONC_CANCEL_IN_PROGRESS, NULL, NULL},
};

/* queue: a run whose key is full stays queued, held, and the key's runs
 * start one at a time by priority, then age. In both modes (the loop's _i:
 * 0 named prepared statements, 1 unnamed, where the next-due query that
 * reports the held runs is migration 027's opsrun_next_due). */
START_TEST(queue_by_priority_then_age)
{
    static const char *const types[] = {"Q"};
    static const int prio[] = {0, 0, 5, 5, 0};
    char *id[5];
    int64_t ms = 0;
    bool left_behind = false;

    g_unnamed = _i == 1;
    open_test_db(g_unnamed ? "it_conc_queue_fn" : "it_conc_queue");
    sync_types(STRATEGIES, ARRAY_LEN(STRATEGIES));
    for (int i = 0; i < 5; i++)
        id[i] = submit("default", "Q", "{\"k\":\"a\"}", prio[i]);
    claim_expect(types, 1, (const char *const[]){id[2]}, 1);
    for (int i = 0; i < 5; i++)
        if (i != 2) {
            assert_state(id[i], "queued", "pending");
            assert_col(id[i], "opsrun_run_json(runs)->'concurrency'->>'held'", "true");
        }
    assert_col(id[2], "opsrun_run_json(runs)->'concurrency'->>'held'", "false");
    assert_col(id[2], "opsrun_run_json(runs)->'concurrency'->>'key'", "a");
    assert_col(id[2], "opsrun_run_json(runs)->'concurrency'->>'group'", "q");
    assert_col(id[2], "opsrun_run_json(runs)->'concurrency'->>'max_running'", "1");
    assert_col(id[2], "opsrun_run_json(runs)->'concurrency'->>'strategy'", "queue");
    /* Nothing more starts while the key is taken; the held runs are not
     * due for the dispatcher's sleep, but they make it claim again when a
     * run of its own ends. */
    claim_expect(types, 1, NULL, 0);
    OK(store_runs_next_due(g_db, clock_mono_us(), &ms, &left_behind, &g_err));
    ck_assert_int_eq(ms, -1);
    ck_assert(left_behind);
    {
        /* which path answered: without the function, only the named one can */
        struct error err = {0};
        enum status st;
        PQclear(th_sql(g_pg, "ALTER FUNCTION opsrun_next_due() RENAME TO away"));
        st = store_runs_next_due(g_db, clock_mono_us(), &ms, &left_behind, &err);
        PQclear(th_sql(g_pg, "ALTER FUNCTION away() RENAME TO opsrun_next_due"));
        ck_assert_msg((st == ST_OK) == !g_unnamed, "next due: %s (unnamed %d)", status_name(st),
                      g_unnamed);
    }
    finish(id[2], OUTCOME_SUCCEEDED);
    claim_expect(types, 1, (const char *const[]){id[3]}, 1);
    finish(id[3], OUTCOME_FAILED);
    claim_expect(types, 1, (const char *const[]){id[0]}, 1);
    finish(id[0], OUTCOME_SUCCEEDED);
    claim_expect(types, 1, (const char *const[]){id[1]}, 1);
    finish(id[1], OUTCOME_SUCCEEDED);
    claim_expect(types, 1, (const char *const[]){id[4]}, 1);
    for (int i = 0; i < 5; i++)
        free(id[i]);
    close_test_db();
}
END_TEST

/* cancel_newest: a new run whose key has max_running runs queued or
 * running completes at once, cancelled (concurrency_limit), with an event;
 * one that joins an active run by its identity is not cancelled. */
START_TEST(cancel_newest_refuses_a_full_key)
{
    static const char *const types[] = {"CN"};
    char *a, *b, *c, *e, *y, *msg;
    struct run *run;
    bool dedup = false;

    open_test_db("it_conc_cancel_newest");
    sync_types(STRATEGIES, ARRAY_LEN(STRATEGIES));
    a = submit("default", "CN", "{\"k\":\"x\"}", 0);
    b = submit("default", "CN", "{\"k\":\"x\"}", 0);
    c = submit("default", "CN", "{\"k\":\"x\"}", 0);
    assert_state(a, "queued", "pending");
    assert_state(b, "queued", "pending");
    assert_state(c, "completed", "cancelled");
    assert_col(c, "error->>'code'", "concurrency_limit");
    msg = sql_str("SELECT error->>'message' FROM runs WHERE id = '%s'", c);
    ck_assert_str_eq(msg, "concurrency key \"x\" of group \"cn\" is full: 2 queued or running, "
                          "max_running 2");
    assert_event(c, "cancelled: concurrency key \"x\" of group \"cn\" is full: 2 queued or "
                    "running, max_running 2");
    free(msg);
    /* Another key of the group has room. */
    y = submit("default", "CN", "{\"k\":\"y\"}", 0);
    /* Deduplication wins over the strategy. */
    run = submit_full(g_db, "default", "CN", "{\"k\":\"x\"}", 0, a, &dedup);
    ck_assert(dedup);
    ck_assert_str_eq(run->id, a);
    run_free(run);
    claim_expect(types, 1, (const char *const[]){a, b, y}, 3);
    finish(a, OUTCOME_SUCCEEDED);
    e = submit("default", "CN", "{\"k\":\"x\"}", 0);
    assert_state(e, "queued", "pending");
    free(a);
    free(b);
    free(c);
    free(e);
    free(y);
    close_test_db();
}
END_TEST

/* keep_newest: a new run cancels its key's queued run (superseded, with an
 * event naming it); a running run is left alone. */
START_TEST(keep_newest_supersedes_the_queued_run)
{
    static const char *const types[] = {"KN"};
    char *a, *b, *c, *d, *o, *ev;
    struct run *run;
    bool dedup = false;

    open_test_db("it_conc_keep_newest");
    sync_types(STRATEGIES, ARRAY_LEN(STRATEGIES));
    a = submit("default", "KN", "{\"k\":\"x\"}", 0);
    claim_expect(types, 1, (const char *const[]){a}, 1);
    b = submit("default", "KN", "{\"k\":\"x\"}", 0);
    c = submit("default", "KN", "{\"k\":\"x\"}", 0);
    assert_state(a, "running", "pending");
    assert_state(b, "completed", "cancelled");
    assert_state(c, "queued", "pending");
    assert_col(b, "error->>'code'", "superseded");
    ev = xasprintf("cancelled: superseded by %s", c);
    assert_event(b, ev);
    free(ev);
    /* A submission that joins c supersedes nothing. */
    run = submit_full(g_db, "default", "KN", "{\"k\":\"x\"}", 0, c, &dedup);
    ck_assert(dedup);
    run_free(run);
    assert_state(c, "queued", "pending");
    /* Another key, and the same key of another tenant, are not touched. */
    d = submit("default", "KN", "{\"k\":\"y\"}", 0);
    o = submit("other", "KN", "{\"k\":\"x\"}", 0);
    assert_state(c, "queued", "pending");
    assert_state(d, "queued", "pending");
    finish(a, OUTCOME_SUCCEEDED);
    claim_expect(types, 1, (const char *const[]){c, d, o}, 3);
    free(a);
    free(b);
    free(c);
    free(d);
    free(o);
    close_test_db();
}
END_TEST

/* cancel_in_progress: a new run cancels its key's queued and waiting runs
 * (a waiting run's remote cancel is due) and asks its running run to
 * cancel; the running run's "superseded" survives its worker's end; the
 * new run starts once the key frees. */
START_TEST(cancel_in_progress_supersedes_every_run_of_the_key)
{
    static const char *const types[] = {"CI"};
    const struct poll_budget budget = {10, 600};
    char *a, *b, *c, *d, *ev;
    bool cancelled = true;

    open_test_db("it_conc_cancel_in_progress");
    sync_types(STRATEGIES, ARRAY_LEN(STRATEGIES));
    /* a waits on a remote job: it holds no slot of the key. */
    a = submit("default", "CI", "{\"k\":\"x\"}", 0);
    claim_expect(types, 1, (const char *const[]){a}, 1);
    {
        struct fence f = {"default", a, "w1", 1};
        OK(store_runs_wait(g_db, &f, "job-1", NULL, 60000, &budget, &cancelled, &g_err));
        ck_assert(!cancelled);
    }
    b = submit("default", "CI", "{\"k\":\"x\"}", 0);
    assert_state(a, "completed", "cancelled");
    assert_col(a, "error->>'code'", "superseded");
    assert_col(a, "hooks_at IS NOT NULL", "true");
    ev = xasprintf("cancelled: superseded by %s", b);
    assert_event(a, ev);
    free(ev);
    claim_expect(types, 1, (const char *const[]){b}, 1);
    /* b runs: c asks it to cancel. */
    c = submit("default", "CI", "{\"k\":\"x\"}", 0);
    assert_state(b, "cancelling", "pending");
    assert_col(b, "error->>'code'", "superseded");
    ev = xasprintf("cancel requested: superseded by %s", c);
    assert_event(b, ev);
    free(ev);
    /* c waits for the key, which b holds while it is cancelling. */
    claim_expect(types, 1, NULL, 0);
    assert_state(c, "queued", "pending");
    /* d supersedes c (queued), and asks nothing more of b. */
    d = submit("default", "CI", "{\"k\":\"x\"}", 0);
    assert_state(c, "completed", "cancelled");
    ev = xasprintf("cancelled: superseded by %s", d);
    assert_event(c, ev);
    free(ev);
    ck_assert_int_eq(th_sql_int(g_pg,
                                "SELECT count(*) FROM run_events WHERE run_id = '%s' AND "
                                "message LIKE 'cancel requested%%'",
                                b),
                     1);
    /* b's worker stops it: cancelled, without an error of its own. */
    finish(b, OUTCOME_CANCELLED);
    assert_state(b, "completed", "cancelled");
    assert_col(b, "error->>'code'", "superseded");
    claim_expect(types, 1, (const char *const[]){d}, 1);
    free(a);
    free(b);
    free(c);
    free(d);
    close_test_db();
}
END_TEST

/* A retry of a run being superseded keeps "superseded" too (the hand-back
 * ends it cancelled). */
START_TEST(superseded_survives_a_hand_back)
{
    static const char *const types[] = {"CI"};
    json_t *err = json_pack("{s:s, s:s}", "code", "http_500", "message", "boom");
    char *a, *b;
    bool cancelled = false;

    open_test_db("it_conc_hand_back");
    sync_types(STRATEGIES, ARRAY_LEN(STRATEGIES));
    a = submit("default", "CI", "{\"k\":\"x\"}", 0);
    claim_expect(types, 1, (const char *const[]){a}, 1);
    b = submit("default", "CI", "{\"k\":\"x\"}", 0);
    {
        struct fence f = {"default", a, "w1", 1};
        OK(store_runs_retry(g_db, &f, 0, err, &cancelled, &g_err));
    }
    ck_assert(cancelled);
    assert_state(a, "completed", "cancelled");
    assert_col(a, "error->>'code'", "superseded");
    claim_expect(types, 1, (const char *const[]){b}, 1);
    json_decref(err);
    free(a);
    free(b);
    close_test_db();
}
END_TEST

/* A run queued again after its insert is judged with the runs that came
 * after it. keep_newest: running a fails and is retried while the newer b
 * is queued: a is superseded by b instead of running after it. */
START_TEST(keep_newest_judges_a_retried_run)
{
    static const char *const types[] = {"KN"};
    json_t *err = json_pack("{s:s, s:s}", "code", "http_500", "message", "boom");
    char *a, *b, *ev;
    bool cancelled = true;

    open_test_db("it_conc_keep_newest_retry");
    sync_types(STRATEGIES, ARRAY_LEN(STRATEGIES));
    a = submit("default", "KN", "{\"k\":\"x\"}", 0);
    claim_expect(types, 1, (const char *const[]){a}, 1);
    b = submit("default", "KN", "{\"k\":\"x\"}", 0);
    assert_state(b, "queued", "pending");
    {
        struct fence f = {"default", a, "w1", 1};
        OK(store_runs_retry(g_db, &f, 0, err, &cancelled, &g_err));
    }
    assert_state(a, "completed", "cancelled");
    assert_col(a, "error->>'code'", "superseded");
    ev = xasprintf("cancelled: superseded by %s", b);
    assert_event(a, ev);
    free(ev);
    assert_state(b, "queued", "pending");
    claim_expect(types, 1, (const char *const[]){b}, 1);
    json_decref(err);
    free(a);
    free(b);
    close_test_db();
}
END_TEST

/* A run queued again and superseded by its own requeue, in the same
 * statement (keep_newest, a newer run queued), owes each transition what
 * any run does (migration 031 writes its "retrying" from the BEFORE
 * trigger runs_react_note): its "retrying" carries the run as the retry
 * left it, queued, its "cancelled" the cancelled run (built when it is
 * claimed, migration 036), the two in that
 * order, and its end's follow-up is made and reported once. */
START_TEST(a_superseded_retry_owes_each_transition_once)
{
    static const char *const types[] = {"KN"};
    const struct ctype ts[] = {
        {"KN", "kn", "[[\"input\",\"/k\"]]", 1, CONC_KEEP_NEWEST,
         "[{\"on\":[\"cancelled\"],\"run_type\":\"P\"}]",
         "[{\"on\":[\"retrying\",\"cancelled\"],\"to\":\"audit\"}]"},
        {"P", NULL, NULL, 0, CONC_QUEUE, NULL, NULL},
    };
    json_t *err = json_pack("{s:s, s:s}", "code", "http_500", "message", "boom");
    char *a, *b, *ev;
    bool cancelled = false;

    open_test_db("it_conc_retry_notify");
    sync_types(ts, ARRAY_LEN(ts));
    a = submit("default", "KN", "{\"k\":\"x\"}", 0);
    claim_expect(types, 1, (const char *const[]){a}, 1);
    b = submit("default", "KN", "{\"k\":\"x\"}", 0);
    {
        struct fence f = {"default", a, "w1", 1};
        OK(store_runs_retry(g_db, &f, 0, err, &cancelled, &g_err));
    }
    assert_state(a, "completed", "cancelled");
    ck_assert_int_eq(th_sql_int(g_pg,
                                "SELECT count(*) FROM notifications WHERE run_id = '%s' AND "
                                "event = 'run.retrying' AND run->>'status' = 'queued' AND "
                                "run->>'outcome' = 'pending' AND run->>'attempt' = '1'",
                                a),
                     1);
    ck_assert_int_eq(th_sql_int(g_pg,
                                "SELECT count(*) FROM notifications n JOIN runs r ON r.tenant = "
                                "n.tenant AND r.id = n.run_id WHERE n.run_id = '%s' AND n.event = "
                                "'run.cancelled' AND n.run IS NULL AND "
                                "opsrun_run_json(r)->>'status' = 'completed' AND "
                                "opsrun_run_json(r)->>'outcome' = 'cancelled'",
                                a),
                     1);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM notifications WHERE run_id = '%s'", a),
                     2);
    /* in the order of the transitions, which is the order they go out in */
    ck_assert_int_eq(th_sql_int(g_pg,
                                "SELECT (min(id) FILTER (WHERE event = 'run.retrying') < min(id) "
                                "FILTER (WHERE event = 'run.cancelled'))::int FROM notifications "
                                "WHERE run_id = '%s'",
                                a),
                     1);
    ck_assert_int_eq(th_sql_int(g_pg,
                                "SELECT count(*) FROM run_events WHERE run_id = '%s' AND type = "
                                "'follow_up'",
                                a),
                     1);
    ev = xasprintf("follow-up 1 (P) created: %s.1", a);
    assert_event(a, ev);
    free(ev);
    json_decref(err);
    free(a);
    free(b);
    close_test_db();
}
END_TEST

/* A run that waits for approval supersedes nothing until it is approved:
 * cancel_in_progress's n leaves running a alone while it waits, and asks a
 * to cancel once approved; keep_newest's q, approved after the newer r was
 * queued, is superseded by r; cancel_newest's run, approved while its key
 * is full, is cancelled then, not when it was submitted. */
START_TEST(approval_decides_when_the_strategy_acts)
{
    static const char *const types[] = {"CI", "KN", "CN"};
    char *a, *n, *q, *r, *m, *c1, *ev;

    open_test_db("it_conc_approval");
    sync_types(STRATEGIES, ARRAY_LEN(STRATEGIES));
    a = submit("default", "CI", "{\"k\":\"x\"}", 0);
    claim_expect(types, 3, (const char *const[]){a}, 1);
    /* n: cancel_in_progress, awaiting approval. */
    n = submit_awaiting("CI", "{\"k\":\"x\"}");
    assert_state(n, "waiting", "pending");
    assert_state(a, "running", "pending");
    approve(n);
    assert_state(n, "queued", "pending");
    assert_state(a, "cancelling", "pending");
    ev = xasprintf("cancel requested: superseded by %s", n);
    assert_event(a, ev);
    free(ev);

    /* keep_newest: q waits for approval, r comes and is queued. */
    q = submit_awaiting("KN", "{\"k\":\"x\"}");
    r = submit("default", "KN", "{\"k\":\"x\"}", 0);
    assert_state(q, "waiting", "pending");
    assert_state(r, "queued", "pending");
    approve(q);
    assert_state(q, "completed", "cancelled");
    ev = xasprintf("cancelled: superseded by %s", r);
    assert_event(q, ev);
    free(ev);
    assert_state(r, "queued", "pending");

    /* cancel_newest (max_running 2): m is submitted while the key is
     * free, approved once c1 and c2 filled it. */
    m = submit_awaiting("CN", "{\"k\":\"x\"}");
    assert_state(m, "waiting", "pending");
    c1 = submit("default", "CN", "{\"k\":\"x\"}", 0);
    free(submit("default", "CN", "{\"k\":\"x\"}", 0));
    assert_state(c1, "queued", "pending");
    approve(m);
    assert_state(m, "completed", "cancelled");
    assert_col(m, "error->>'code'", "concurrency_limit");
    assert_state(c1, "queued", "pending");
    free(a);
    free(n);
    free(q);
    free(r);
    free(m);
    free(c1);
    close_test_db();
}
END_TEST

/* A cancel_in_progress insert passes over an older run awaiting approval
 * whose row another transaction holds (its decision, which then waits for
 * the key's lock: waiting for the row here would deadlock); the decision,
 * once made, finds the newer run and the approved run is superseded. */
START_TEST(an_insert_passes_over_a_run_being_decided)
{
    char *id, *ev;
    char *ci = th_conninfo("it_conc_pass_over");
    PGconn *other;

    open_test_db("it_conc_pass_over");
    sync_types(STRATEGIES, ARRAY_LEN(STRATEGIES));
    id = submit_awaiting("CI", "{\"k\":\"x\"}");
    other = th_pg(ci);
    PQclear(th_sql(other, "BEGIN"));
    PQclear(th_sql(other, "SELECT 1 FROM runs WHERE id = '%s' FOR UPDATE", id));
    PQclear(th_sql(g_pg, "SET lock_timeout = '5s'"));
    PQclear(th_sql(g_pg, "INSERT INTO runs (tenant, id, type, max_attempts, timeout_s, input, "
                         "identity_hash, request_hash, reacts) VALUES ('default', 'newer', 'CI', "
                         "3, 300, '{\"k\": \"x\"}', 'newer', 'x', 256)"));
    assert_state(id, "waiting", "pending");
    PQclear(th_sql(other, "ROLLBACK"));
    PQfinish(other);
    approve(id);
    assert_state(id, "completed", "cancelled");
    ev = xasprintf("cancelled: superseded by %s", "newer");
    assert_event(id, ev);
    free(ev);
    assert_state("newer", "queued", "pending");
    free(id);
    free(ci);
    close_test_db();
}
END_TEST

/* cancel_newest within one array: the later items are the newer, whatever
 * their identities' order (the batch inserts in identity order otherwise):
 * of three items of one key of max_running 2, the third is cancelled. */
START_TEST(cancel_newest_in_an_array_cancels_the_later_item)
{
    const char *idents[3] = {"zz", "yy", "aa"};
    struct run_new items[3];
    struct run_submitted out[3];
    json_t *in = json_pack("{s:s}", "k", "x");
    char ids[3][27];

    open_test_db("it_conc_cancel_newest_array");
    sync_types(STRATEGIES, ARRAY_LEN(STRATEGIES));
    for (int i = 0; i < 3; i++) {
        run_id_new(ids[i]);
        items[i] = (struct run_new){.tenant = "default",
                                    .id = ids[i],
                                    .type = "CN",
                                    .max_attempts = 3,
                                    .timeout_s = 300,
                                    .input = in,
                                    .identity_hash = idents[i],
                                    .request_hash = "req"};
    }
    OK(store_runs_submit_batch(g_db, items, 3, out, &g_err));
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(out[i].st, ST_OK);
    run_submitted_cleanup(out, 3);
    assert_state(ids[0], "queued", "pending");
    assert_state(ids[1], "queued", "pending");
    assert_state(ids[2], "completed", "cancelled");
    assert_col(ids[2], "error->>'code'", "concurrency_limit");
    json_decref(in);
    close_test_db();
}
END_TEST

/* A backlog of 200 due runs on a full key, better placed than another
 * key's run, does not keep that run out of claims of one: the first claim
 * that finds the key full holds all its due runs. */
START_TEST(a_full_keys_backlog_does_not_hide_another_key)
{
    static const char *const types[] = {"Q"};
    char *a, *y, *ids[1] = {0};
    size_t n = 0;
    bool found = false;

    open_test_db("it_conc_full_backlog");
    sync_types(STRATEGIES, ARRAY_LEN(STRATEGIES));
    a = submit("default", "Q", "{\"k\":\"x\"}", 0);
    claim_expect(types, 1, (const char *const[]){a}, 1);
    PQclear(th_sql(g_pg, "INSERT INTO runs (tenant, id, type, priority, max_attempts, timeout_s, "
                         "input, identity_hash, request_hash, reacts) SELECT 'default', 'x-' || "
                         "i, 'Q', 5, 3, 300, '{\"k\": \"x\"}', 'x-' || i, 'x', 256 FROM "
                         "generate_series(1, 200) i"));
    y = submit("default", "Q", "{\"k\":\"y\"}", 0);
    for (int i = 0; i < 2 && !found; i++) {
        n = claim_on(g_db, "w1", 1, types, 1, NULL, ids);
        if (n == 1) {
            found = strcmp(ids[0], y) == 0;
            free(ids[0]);
        }
    }
    ck_assert_msg(found, "the run of key y was not in the first two claims");
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE conc_key = 'x' AND "
                                      "conc_held"),
                     200);
    free(a);
    free(y);
    close_test_db();
}
END_TEST

/* ---- groups, tenants, missing keys ------------------------------------ */

/* Two run types name one group: their runs share its keys, each type
 * making the key from its own input; two tenants' runs of the same key
 * text do not share it. */
START_TEST(group_shared_by_two_types_and_keys_per_tenant)
{
    static const char *const types[] = {"restart", "patch"};
    const struct ctype ts[] = {
        {"restart", "host", "[[\"input\",\"/labels/instance\"]]", 1, CONC_QUEUE, NULL, NULL},
        {"patch", "host", "[[\"input\",\"/host\"]]", 1, CONC_QUEUE, NULL, NULL},
    };
    char *r1, *p1, *r2, *ids[4] = {0};
    size_t n;

    open_test_db("it_conc_group");
    sync_types(ts, ARRAY_LEN(ts));
    r1 = submit("acme", "restart", "{\"labels\":{\"instance\":\"db-1\"}}", 0);
    p1 = submit("acme", "patch", "{\"host\":\"db-1\"}", 0);
    r2 = submit("umbrella", "restart", "{\"labels\":{\"instance\":\"db-1\"}}", 0);
    assert_col(p1, "conc_group || '/' || conc_key", "host/db-1");
    n = claim_on(g_db, "w1", 10, types, 2, NULL, ids);
    ck_assert_int_eq(n, 2);
    assert_state(r1, "running", "pending");
    assert_state(r2, "running", "pending");
    assert_state(p1, "queued", "pending");
    assert_col(p1, "conc_held", "true");
    for (size_t i = 0; i < n; i++)
        free(ids[i]);
    {
        struct fence f = {"acme", r1, "w1", 1};
        struct run_result res = {.outcome = OUTCOME_SUCCEEDED, .message = "done"};
        OK(store_runs_finish(g_db, &f, &res, &g_err));
    }
    n = claim_on(g_db, "w1", 10, types, 2, NULL, ids);
    ck_assert_int_eq(n, 1);
    ck_assert_str_eq(ids[0], p1);
    free(ids[0]);
    free(r1);
    free(p1);
    free(r2);
    close_test_db();
}
END_TEST

/* A run whose key cannot be made from its input (here a follow-up whose
 * data lacks the value, and a submission that reached the database
 * without it) completes at once, failed, invalid_concurrency_key, with an
 * event saying which value is missing; its outcome's follow-ups and
 * notifications are owed as for any end. */
START_TEST(missing_key_fails_the_run)
{
    static const char *const types[] = {"parent"};
    const struct ctype ts[] = {
        {"keyed", "host", "[[\"text\",\"h:\"],[\"input\",\"/host\"]]", 1, CONC_QUEUE, NULL, NULL},
        {"parent", NULL, NULL, 0, CONC_QUEUE,
         "[{\"on\":[\"succeeded\"],\"run_type\":\"keyed\",\"data\":{\"other\":\"x\"}}]", NULL},
    };
    char *bad, *parent, *child;

    open_test_db("it_conc_missing");
    sync_types(ts, ARRAY_LEN(ts));
    bad = submit("default", "keyed", "{\"host\":{\"name\":\"db-1\"}}", 0);
    assert_state(bad, "completed", "failed");
    assert_col(bad, "error->>'code'", "invalid_concurrency_key");
    assert_col(bad, "opsrun_run_json(runs)->'concurrency'->>'key'", NULL);
    assert_event(bad, "failed: the concurrency key of run type \"keyed\" could not be made: the "
                      "value at /host of its input is an object, not a string, an integer or a "
                      "boolean");
    parent = submit("default", "parent", "{}", 0);
    claim_expect(types, 1, (const char *const[]){parent}, 1);
    finish(parent, OUTCOME_SUCCEEDED);
    child = xasprintf("%s.1", parent);
    assert_state(child, "completed", "failed");
    assert_col(child, "error->>'code'", "invalid_concurrency_key");
    assert_event(child, "failed: the concurrency key of run type \"keyed\" could not be made: "
                        "its input has no value at /host");
    free(bad);
    free(parent);
    free(child);
    close_test_db();
}
END_TEST

/* ---- tenants ---------------------------------------------------------- */

/* Tenant A has 2,000 queued runs of a higher priority, B one, submitted
 * last: B's run is in the first claim. Then the claims go round the
 * tenants: each starts at another one. */
START_TEST(a_backlog_does_not_delay_another_tenant)
{
    static const char *const types[] = {"T"};
    const struct ctype ts[] = {{"T", NULL, NULL, 0, CONC_QUEUE, NULL, NULL}};
    char *ids[10] = {0}, *b;
    size_t n;
    bool found = false;

    open_test_db("it_conc_fair");
    sync_types(ts, ARRAY_LEN(ts));
    PQclear(th_sql(g_pg, "INSERT INTO runs (tenant, id, type, priority, max_attempts, timeout_s, "
                         "input, identity_hash, request_hash) SELECT 'A', 'a-' || i, 'T', 5, 3, "
                         "300, '{}', 'a-' || i, 'x' FROM generate_series(1, 2000) i"));
    PQclear(th_sql(g_pg, "ANALYZE runs"));
    b = submit("B", "T", "{}", 0);
    n = claim_on(g_db, "w1", 10, types, 1, NULL, ids);
    ck_assert_int_eq(n, 10);
    for (size_t i = 0; i < n; i++) {
        found |= strcmp(ids[i], b) == 0;
        free(ids[i]);
    }
    ck_assert_msg(found, "tenant B's run was not in the first claim");
    /* Three tenants with a backlog each: claims of 2 runs start at each
     * tenant in turn, one run each, so that six claims give each tenant
     * four runs, whatever the priorities. */
    PQclear(th_sql(g_pg, "INSERT INTO runs (tenant, id, type, max_attempts, timeout_s, input, "
                         "identity_hash, request_hash) SELECT t, t || '-' || i, 'T', 3, 300, "
                         "'{}', t || '-' || i, 'x' FROM generate_series(1, 20) i, "
                         "unnest(ARRAY['B', 'C']) t"));
    for (int i = 0; i < 6; i++) {
        n = claim_on(g_db, "w1", 2, types, 1, NULL, ids);
        ck_assert_int_eq(n, 2);
        for (size_t k = 0; k < n; k++)
            free(ids[k]);
    }
    {
        char *got = sql_str("SELECT string_agg(tenant || '=' || n, ',' ORDER BY tenant) FROM "
                            "(SELECT tenant, count(*) AS n FROM runs WHERE status = 'running' "
                            "GROUP BY tenant) x");
        ck_assert_str_eq(got, "A=13,B=5,C=4");
        free(got);
    }
    free(b);
    close_test_db();
}
END_TEST

/* Only tenants with a due run take a turn: thirty tenants whose runs wait
 * for a later time, and twenty whose due runs are all of a type at its cap,
 * do not keep tenant zz's due runs out of a claim, however the turn
 * falls. */
START_TEST(tenants_without_a_startable_run_take_no_turn)
{
    static const char *const types[] = {"T", "C"};
    static const int caps[2] = {0, 1};
    const struct ctype ts[] = {{"T", NULL, NULL, 0, CONC_QUEUE, NULL, NULL},
                               {"C", NULL, NULL, 0, CONC_QUEUE, NULL, NULL}};
    struct run **runs = NULL;
    size_t n = 0, total = 0;

    open_test_db("it_conc_fair_due");
    sync_types(ts, ARRAY_LEN(ts));
    PQclear(th_sql(g_pg, "INSERT INTO runs (tenant, id, type, max_attempts, timeout_s, input, "
                         "identity_hash, request_hash, run_at) SELECT 'd' || lpad(i::text, 2, "
                         "'0'), 'd-' || i, 'T', 3, 300, '{}', 'd-' || i, 'x', now() + interval "
                         "'1 hour' FROM generate_series(1, 30) i"));
    /* C's cap (1) is taken by c-0; ten tenants have only C runs due. */
    PQclear(th_sql(g_pg, "INSERT INTO runs (tenant, id, type, status, worker_id, attempt, "
                         "max_attempts, timeout_s, input, identity_hash, request_hash) VALUES "
                         "('c', 'c-0', 'C', 'running', 'w9', 1, 3, 300, '{}', 'c-0', 'x')"));
    PQclear(th_sql(g_pg, "INSERT INTO runs (tenant, id, type, max_attempts, timeout_s, input, "
                         "identity_hash, request_hash) SELECT 'c' || lpad(i::text, 2, '0'), "
                         "'c-' || i, 'C', 3, 300, '{}', 'c-' || i, 'x' FROM generate_series(1, "
                         "20) i"));
    PQclear(th_sql(g_pg, "INSERT INTO runs (tenant, id, type, max_attempts, timeout_s, input, "
                         "identity_hash, request_hash) SELECT 'zz', 'z-' || i, 'T', 3, 300, "
                         "'{}', 'z-' || i, 'x' FROM generate_series(1, 40) i"));
    /* Claims of one: the window (one tenant) doubles past the closed
     * tenants, however the turn falls. */
    for (int i = 0; i < 5; i++) {
        OK(store_runs_claim_fair(g_db, "w1", 1, 1000, types, caps, NULL, 2, NULL, &runs, &n,
                                 &g_err));
        ck_assert_msg(n == 1, "claim of one %d took %zu runs", i, n);
        ck_assert_str_eq(runs[0]->tenant, "zz");
        run_free(runs[0]);
        free(runs);
        runs = NULL;
        total += n;
    }
    for (int i = 0; i < 7; i++) {
        OK(store_runs_claim_fair(g_db, "w1", 5, 1000, types, caps, NULL, 2, NULL, &runs, &n,
                                 &g_err));
        ck_assert_msg(n == 5, "claim %d took %zu runs, want 5", i, n);
        for (size_t k = 0; k < n; k++) {
            ck_assert_str_eq(runs[k]->tenant, "zz");
            run_free(runs[k]);
        }
        free(runs);
        runs = NULL;
        total += n;
    }
    ck_assert_int_eq(total, 40);
    close_test_db();
}
END_TEST

/* A raised max_running reaches the runs queued before it: their key's
 * held runs are released (the sweep), and start. */
START_TEST(a_changed_max_running_reaches_queued_runs)
{
    static const char *const types[] = {"K"};
    struct ctype ts[] = {{"K", "g", "[[\"input\",\"/k\"]]", 1, CONC_QUEUE, NULL, NULL}};
    char *a, *b, *c;

    open_test_db("it_conc_max_changed");
    sync_types(ts, ARRAY_LEN(ts));
    a = submit("default", "K", "{\"k\":\"x\"}", 0);
    b = submit("default", "K", "{\"k\":\"x\"}", 0);
    c = submit("default", "K", "{\"k\":\"x\"}", 0);
    claim_expect(types, 1, (const char *const[]){a}, 1);
    assert_col(b, "conc_held", "true");
    ts[0].max = 3;
    sync_types(ts, ARRAY_LEN(ts));
    assert_col(b, "conc_max", "3");
    assert_col(c, "conc_max", "3");
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT opsrun_conc_sweep()"), 2);
    claim_expect(types, 1, (const char *const[]){b, c}, 2);
    free(a);
    free(b);
    free(c);
    close_test_db();
}
END_TEST

/* The claim counts a key's running runs after its lock: only a snapshot
 * taken after it sees the claims before. Under another isolation level
 * it refuses to run. */
START_TEST(claim_needs_read_committed)
{
    PGresult *r;

    open_test_db("it_conc_isolation");
    PQclear(th_sql(g_pg, "BEGIN ISOLATION LEVEL REPEATABLE READ"));
    r = PQexec(g_pg, "SELECT count(*) FROM opsrun_claim('w1', 4, 100, '{T}', '{NULL}')");
    ck_assert_int_eq(PQresultStatus(r), PGRES_FATAL_ERROR);
    ck_assert_msg(strstr(PQresultErrorMessage(r), "read committed") != NULL, "%s",
                  PQresultErrorMessage(r));
    PQclear(r);
    PQclear(th_sql(g_pg, "ROLLBACK"));
    close_test_db();
}
END_TEST

/* A's running runs are capped at 4 (its tenants entry), every other
 * tenant's at 6 (queue.tenant_max_running), under eight claimers at once:
 * judged inside every claim and sampled; B's runs start beside A's. */
START_TEST(tenant_cap_under_concurrent_claims)
{
    static const char *const types[] = {"T"};
    static const char *const names[] = {"A"};
    static const int caps[] = {4};
    const struct ctype ts[] = {{"T", NULL, NULL, 0, CONC_QUEUE, NULL, NULL}};
    const struct claim_tenants tenants = {names, caps, 1, 6};
    struct many m = {.types = types, .ntypes = 1, .tenants = &tenants, .total = 300};
    struct sampler s = {0};

    open_test_db("it_conc_tenant_cap");
    sync_types(ts, ARRAY_LEN(ts));
    PQclear(th_sql(g_pg, "INSERT INTO runs (tenant, id, type, max_attempts, timeout_s, input, "
                         "identity_hash, request_hash, priority) SELECT t, t || '-' || i, 'T', 3, "
                         "300, '{}', t || '-' || i, 'x', CASE t WHEN 'A' THEN 9 ELSE 0 END "
                         "FROM generate_series(1, 150) i, unnest(ARRAY['A', 'B']) t"));
    /* The checker judges A against 4; B is judged by its own count below. */
    install_checker(0);
    PQclear(th_sql(g_pg, "CREATE FUNCTION check_tenants() RETURNS trigger LANGUAGE plpgsql AS $$ "
                         "DECLARE n bigint; BEGIN SELECT count(*) INTO n FROM runs WHERE tenant = "
                         "NEW.tenant AND status IN ('running', 'cancelling'); IF n > (CASE "
                         "NEW.tenant WHEN 'A' THEN 4 ELSE 6 END) THEN INSERT INTO violations "
                         "VALUES ('tenant ' || NEW.tenant, n); END IF; RETURN NULL; END $$"));
    PQclear(th_sql(g_pg, "CREATE TRIGGER zz_tenants AFTER UPDATE OF status ON runs FOR EACH ROW "
                         "WHEN (NEW.status = 'running') EXECUTE FUNCTION check_tenants()"));
    run_many(&m, &s, false, 90000);
    assert_no_violation();
    ck_assert_msg(s.max_a <= 4, "sampled %d runs of tenant A running, its cap is 4", s.max_a);
    ck_assert_msg(s.a_full > 0, "never saw tenant A running");
    close_test_db();
}
END_TEST

/* ---- older binaries --------------------------------------------------- */

/* The claims an older binary calls (5 and 8 arguments) are this one's
 * without tenant caps: they start runs, hold the ones whose key is full,
 * and take rate units. */
START_TEST(claims_of_older_binaries)
{
    const struct ctype ts[] = {{"K", NULL, "[[\"input\",\"/k\"]]", 1, CONC_QUEUE, NULL, NULL},
                               {"T", NULL, NULL, 0, CONC_QUEUE, NULL, NULL}};
    char *k1, *k2;

    open_test_db("it_conc_old_claims");
    sync_types(ts, ARRAY_LEN(ts));
    k1 = submit("default", "K", "{\"k\":\"x\"}", 0);
    k2 = submit("default", "K", "{\"k\":\"x\"}", 0);
    for (int i = 0; i < 3; i++)
        free(submit("default", "T", "{}", 0));
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM opsrun_claim('w1', 2, 100, "
                                      "'{K,T}', '{NULL,NULL}')"),
                     2);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM opsrun_claim('w1', 10, 100, "
                                      "'{K,T}', '{NULL,NULL}')"),
                     2);
    assert_state(k1, "running", "pending");
    assert_col(k2, "conc_held", "true");
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE status = 'running'"), 4);
    /* The 8-argument claim, with a rate limit of 1 unit for T. */
    for (int i = 0; i < 3; i++)
        free(submit("default", "T", "{}", 0));
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM opsrun_claim('w1', 10, 100, "
                                      "'{K,T}', '{NULL,NULL}', '{NULL,api}', '{NULL,1}', "
                                      "'{NULL,60000}')"),
                     1);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT sum(units) FROM rate_limit_slices"), 1);
    finish(k1, OUTCOME_SUCCEEDED);
    ck_assert_int_eq(th_sql_int(g_pg,
                                "SELECT count(*) FROM opsrun_claim('w1', 10, 100, "
                                "'{K}', '{NULL}') WHERE id = '%s'",
                                k2),
                     1);
    free(k1);
    free(k2);
    close_test_db();
}
END_TEST

/* ---- the plan --------------------------------------------------------- */

static long long stat_of(const char *sql)
{
    return th_sql_int(g_pg, "%s", sql);
}

/* The claim is planned once per connection with its plan fixed (as the
 * claim of migration 011): planned while the table is tiny, it must not
 * scan runs once it holds 20,000 queued runs of three tenants, keys and
 * held runs among them; its candidates come from runs_ready. */
START_TEST(claim_plan_uses_the_indexes)
{
    static const char *const q =
        "SELECT count(*) FROM opsrun_claim('w1', 4, 100000, '{T,K}', '{NULL,NULL}', NULL, NULL, "
        "NULL, '{A}', '{1000}', 500)";
    const struct ctype ts[] = {{"K", NULL, "[[\"input\",\"/k\"]]", 1, CONC_QUEUE, NULL, NULL},
                               {"T", NULL, NULL, 0, CONC_QUEUE, NULL, NULL}};

    open_test_db("it_conc_plan");
    sync_types(ts, ARRAY_LEN(ts));
    for (int i = 0; i < 3; i++) {
        free(submit("A", "T", "{}", 0));
        free(submit("B", "K", "{\"k\":\"x\"}", 0));
    }
    PQclear(th_sql(g_pg, "ANALYZE runs"));
    for (int round = 0; round < 3; round++) {
        long long seq, ready, open_scans;
        if (round == 1)
            PQclear(th_sql(g_pg,
                           "INSERT INTO runs (tenant, id, type, max_attempts, timeout_s, input, "
                           "identity_hash, request_hash, reacts) SELECT t, t || '-' || i, "
                           "CASE WHEN i %% 2 = 0 THEN 'K' ELSE 'T' END, 3, 300, "
                           "jsonb_build_object('k', i %% 7), t || '-' || i, 'x', CASE WHEN i %% 2 "
                           "= 0 THEN 256 ELSE 0 END FROM generate_series(1, 6667) i, "
                           "unnest(ARRAY['A', 'B', 'C']) t"));
        if (round == 2)
            PQclear(th_sql(g_pg, "ANALYZE runs"));
        PQclear(th_sql(g_pg, "BEGIN"));
        seq = stat_of("SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relname = 'runs'");
        ready = stat_of("SELECT pg_stat_get_xact_numscans('runs_ready'::regclass)");
        open_scans = stat_of("SELECT pg_stat_get_xact_numscans('runs_key_held'::regclass)");
        ck_assert_int_eq(th_sql_int(g_pg, "%s", q), 4);
        /* The dispatcher's read of the tenants' earliest runs: none left
         * of the first six (A's taken, B's held behind its key). */
        ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM opsrun_ready_tenants()"),
                         (round == 0 ? 0 : 3));
        ck_assert_msg(stat_of("SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relname = "
                              "'runs'") == seq,
                      "round %d: the claim scanned runs", round);
        ck_assert_msg(stat_of("SELECT pg_stat_get_xact_numscans('runs_ready'::regclass)") > ready,
                      "round %d: the claim did not read runs_ready", round);
        /* A key's running runs are counted on runs_key_held. */
        ck_assert_msg(stat_of("SELECT pg_stat_get_xact_numscans('runs_key_held'::regclass)") >
                          open_scans,
                      "round %d: the claim did not count the keys on runs_key_held", round);
        PQclear(th_sql(g_pg, "COMMIT"));
    }
    ck_assert_int_gt(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE conc_held"), 0);
    close_test_db();
}
END_TEST

/* With one tenant queued, a claim of 4 among 20,000 queued runs reads a
 * handful of index entries: a generic plan of "another tenant than the
 * first?" once read every queued run (runs_queued_at, 50 ms a claim). */
START_TEST(one_tenant_claim_reads_few_entries)
{
    static const char *const entries = "SELECT sum(pg_stat_get_xact_tuples_returned(c.oid)) "
                                       "FROM pg_class c WHERE c.relname LIKE 'runs%' AND "
                                       "c.relkind = 'i'";
    long long before, read;

    open_test_db("it_conc_one_tenant");
    PQclear(th_sql(g_pg, "INSERT INTO runs (tenant, id, type, max_attempts, timeout_s, input, "
                         "identity_hash, request_hash) SELECT 'default', 'r-' || i, 'T', 3, 300, "
                         "'{}', 'r-' || i, 'x' FROM generate_series(1, 20000) i"));
    PQclear(th_sql(g_pg, "ANALYZE runs"));
    for (int round = 0; round < 3; round++) {
        PQclear(th_sql(g_pg, "BEGIN"));
        before = stat_of(entries);
        ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM opsrun_claim('w1', 4, 100000, "
                                          "'{T}', '{NULL}')"),
                         4);
        read = stat_of(entries) - before;
        ck_assert_msg(read < 100, "round %d: the claim read %lld index entries", round, read);
        PQclear(th_sql(g_pg, "COMMIT"));
    }
    close_test_db();
}
END_TEST

/* Migration 033: the entries of the runs claimed since the last vacuum
 * stay at the start of runs_ready, dead, and a claim with one tenant walks
 * them once, in its read of the candidates (which must take them in that
 * order), not once more to find its tenant. 6,000 of 20,000 runs claimed,
 * no vacuum: the blocks of runs_ready one claim reads are those of the
 * candidates' read, plus a few for the descents, not twice as many. */
START_TEST(one_tenant_claim_walks_the_claimed_once)
{
    static const char *const blocks =
        "SELECT pg_stat_get_xact_blocks_fetched('runs_ready'::regclass)";
    long long before, claim, cands;

    open_test_db("it_conc_walk");
    PQclear(th_sql(g_pg, "ALTER TABLE runs SET (autovacuum_enabled = false)"));
    PQclear(th_sql(g_pg, "INSERT INTO runs (tenant, id, type, max_attempts, timeout_s, input, "
                         "identity_hash, request_hash, run_at) SELECT 'default', 'r-' || i, 'T', "
                         "3, 300, '{}', 'r-' || i, 'x', now() - make_interval(secs => 20001 - i) "
                         "FROM generate_series(1, 20000) i"));
    PQclear(th_sql(g_pg, "ANALYZE runs"));
    for (int i = 0; i < 12; i++)
        ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM opsrun_claim('w1', 500, 100000, "
                                          "'{T}', '{NULL}')"),
                         500);
    PQclear(th_sql(g_pg, "BEGIN"));
    before = stat_of(blocks);
    ck_assert_int_eq(
        th_sql_int(g_pg, "SELECT count(*) FROM opsrun_claim('w1', 4, 100000, '{T}', '{NULL}')"), 4);
    claim = stat_of(blocks) - before;
    PQclear(th_sql(g_pg, "SET LOCAL enable_seqscan = off"));
    PQclear(th_sql(g_pg, "SET LOCAL enable_bitmapscan = off"));
    PQclear(th_sql(g_pg, "SET LOCAL enable_sort = off"));
    before = stat_of(blocks);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM (SELECT r.id FROM runs r WHERE "
                                      "r.tenant = 'default' AND r.status = 'queued' AND NOT "
                                      "r.conc_held AND r.run_at <= now() ORDER BY r.priority DESC, "
                                      "r.run_at, r.created_at LIMIT 4) x"),
                     4);
    cands = stat_of(blocks) - before;
    PQclear(th_sql(g_pg, "COMMIT"));
    fprintf(stderr,
            "one tenant, 6004 claimed: the claim read %lld blocks of runs_ready, the "
            "candidates' read %lld\n",
            claim, cands);
    ck_assert_msg(cands >= 20, "the candidates' read took %lld blocks: no dead entries to walk?",
                  cands);
    /* 46 against 38 here; 78 when the tenant was read from the start */
    ck_assert_msg(2 * claim < 3 * cands,
                  "the claim read %lld blocks of runs_ready, %lld for its candidates", claim,
                  cands);
    close_test_db();
}
END_TEST

/* GET /runs?concurrency_key= reads runs_conc_list and never scans runs: a
 * key of 12 runs among 20,000 runs of 2,000 keys and three tenants, one
 * tenant's list and an admin's, with a plan made for the key's value and
 * with the generic plan a prepared statement may keep after its first
 * executions. */
/* A statistic of this backend (pg_stat_get_xact_<what>) noted in the
 * transaction's settings, and how much it grew since: the backend's
 * figures are those of every transaction since it last reported them, and
 * it reports them only between transactions. */
#define MARK(what, rel)                                                                            \
    "set_config('opsrun_test." what "_" rel "', pg_stat_get_xact_" what "('" rel                   \
    "'::regclass)::text, true)"
#define SINCE(what, rel)                                                                           \
    "(pg_stat_get_xact_" what "('" rel "'::regclass) - current_setting('opsrun_test." what "_" rel \
    "')::bigint)"

START_TEST(key_list_plan_uses_runs_conc_list)
{
    static const char *const modes[] = {"force_custom_plan", "force_generic_plan"};
    static const char *const tenants[] = {"B", NULL};
    const struct ctype ts[] = {{"K", "host", "[[\"input\",\"/k\"]]", 1, CONC_QUEUE, NULL, NULL}};

    open_test_db("it_conc_list_plan");
    sync_types(ts, ARRAY_LEN(ts));
    PQclear(th_sql(g_pg, "INSERT INTO runs (tenant, id, type, max_attempts, timeout_s, input, "
                         "identity_hash, request_hash, reacts, created_at) "
                         "SELECT t, t || '-' || i, 'K', 3, 300, jsonb_build_object('k', 'h-' || "
                         "(i %% 2000)), t || '-' || i, 'x', 256, now() - i * interval '1 s' "
                         "FROM generate_series(1, 6667) i, unnest(ARRAY['A', 'B', 'C']) t"));
    PQclear(th_sql(g_pg, "ANALYZE runs"));
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE conc_key = 'h-7'"), 12);
    for (size_t m = 0; m < ARRAY_LEN(modes); m++) {
        char set[64];
        snprintf(set, sizeof(set), "SET plan_cache_mode = %s", modes[m]);
        OK(db_exec_simple(g_db, set, &g_err));
        for (size_t t = 0; t < ARRAY_LEN(tenants); t++) {
            struct run_filter f = {.limit = 50, .conc_key = "h-7"};
            const char *who = tenants[t] ? "one tenant" : "every tenant";
            char check[1024];
            json_t *runs = NULL;
            char *next = NULL;
            OK(db_exec_simple(g_db, "BEGIN", &g_err));
            OK(db_exec_simple(g_db,
                              "SELECT " MARK("numscans", "runs") ", " MARK(
                                  "tuples_fetched", "runs") ", " MARK("numscans", "runs_conc_list"),
                              &g_err));
            for (int i = 0; i < 8; i++) {
                OK(store_runs_list(g_db, tenants[t], &f, &runs, &next, &g_err));
                ck_assert_uint_eq(json_array_size(runs), tenants[t] ? 4 : 12);
                ck_assert_ptr_null(next);
                json_decref(runs);
            }
            /* A plan that reads the tenant's runs from runs_list and
             * filters them by key fetches thousands of rows, which no
             * seq scan shows (a bitmap heap scan is none). */
            snprintf(
                check, sizeof(check),
                "DO $$ BEGIN "
                "IF " SINCE(
                    "numscans",
                    "runs") " > 0 THEN "
                            "RAISE EXCEPTION '%s, %s: the list scanned runs'; END IF; "
                            "IF " SINCE(
                                "tuples_fetched",
                                "runs") " > 800 THEN "
                                        "RAISE EXCEPTION '%s, %s: the list fetched %% rows of "
                                        "runs', " SINCE(
                                            "tuples_fetched",
                                            "runs") "; END IF; "
                                                    "IF " SINCE(
                                                        "numscans",
                                                        "runs_conc_list") " < 8 THEN "
                                                                          "RAISE EXCEPTION '%s, "
                                                                          "%s: the list did not "
                                                                          "read runs_conc_list'; "
                                                                          "END IF; "
                                                                          "END $$",
                modes[m], who, modes[m], who, modes[m], who);
            OK(db_exec_simple(g_db, check, &g_err));
            OK(db_exec_simple(g_db, "COMMIT", &g_err));
        }
    }
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
    Suite *s = suite_create("concurrency");
    TCase *tc;

    tc = tcase("keys", 60);
    tcase_add_test(tc, key_rules);
    tcase_add_test(tc, rules_carry_concurrency);
    suite_add_tcase(s, tc);

    tc = tcase("many", 180);
    tcase_add_test(tc, keys_hold_under_concurrent_claims);
    tcase_add_test(tc, sweep_releases_when_markers_are_lost);
    tcase_add_test(tc, tenant_cap_under_concurrent_claims);
    suite_add_tcase(s, tc);

    tc = tcase("strategies", 60);
    tcase_add_loop_test(tc, queue_by_priority_then_age, 0, 2);
    tcase_add_test(tc, cancel_newest_refuses_a_full_key);
    tcase_add_test(tc, keep_newest_supersedes_the_queued_run);
    tcase_add_test(tc, cancel_in_progress_supersedes_every_run_of_the_key);
    tcase_add_test(tc, superseded_survives_a_hand_back);
    tcase_add_test(tc, keep_newest_judges_a_retried_run);
    tcase_add_test(tc, a_superseded_retry_owes_each_transition_once);
    tcase_add_test(tc, approval_decides_when_the_strategy_acts);
    tcase_add_test(tc, an_insert_passes_over_a_run_being_decided);
    tcase_add_test(tc, cancel_newest_in_an_array_cancels_the_later_item);
    tcase_add_test(tc, a_full_keys_backlog_does_not_hide_another_key);
    tcase_add_test(tc, group_shared_by_two_types_and_keys_per_tenant);
    tcase_add_test(tc, missing_key_fails_the_run);
    suite_add_tcase(s, tc);

    tc = tcase("claims", 120);
    tcase_add_test(tc, a_backlog_does_not_delay_another_tenant);
    tcase_add_test(tc, tenants_without_a_startable_run_take_no_turn);
    tcase_add_test(tc, a_changed_max_running_reaches_queued_runs);
    tcase_add_test(tc, claim_needs_read_committed);
    tcase_add_test(tc, claims_of_older_binaries);
    tcase_add_test(tc, claim_plan_uses_the_indexes);
    tcase_add_test(tc, one_tenant_claim_reads_few_entries);
    tcase_add_test(tc, one_tenant_claim_walks_the_claimed_once);
    tcase_add_test(tc, key_list_plan_uses_runs_conc_list);
    suite_add_tcase(s, tc);

    return th_run_suite(s);
}
