/* tests/integration/test_batch.c — many submissions in one statement
 * (store_runs_submit_batch) and the shared-commit queue (handlers/submitq.h)
 * against a real PostgreSQL.
 *
 * The batch must answer every item exactly as store_runs_submit would, one
 * item after another: the oracle runs the same items one by one in another
 * tenant (tenants share nothing a submission looks at) and every answer is
 * compared. Then 16 threads push 500 single submissions each through the
 * queue, with overlapping identities: every one is answered, and each
 * identity has exactly one run, the one every answer names.
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

#include "common/ids.h"
#include "handlers/handlers.h"
#include "handlers/submitq.h"
#include "store/db.h"
#include "store/runs.h"
#include "tests/support/fixture.h"
#include "tests/support/harness.h"

/* One item to submit: its id, identity and request hash (plain strings:
 * the store compares them, never computes them). */
struct item {
    char id[64], ident[64], req[64];
};

static json_t *g_input;

static struct run_new run_new_of(const char *tenant, const struct item *it, const char *run_at)
{
    return (struct run_new){
        .tenant = tenant,
        .id = it->id,
        .type = "T",
        .max_attempts = 3,
        .timeout_s = 60,
        .run_at = run_at,
        .input = g_input,
        .identity_hash = it->ident,
        .request_hash = it->req,
        .initiator = "tester",
    };
}

/* What one answer says, comparable across tenants. */
struct answer {
    enum status st;
    bool dedup;
    char run_id[64];
    char status[16];
};

static void answer_of_one(const char *tenant, const struct item *it, struct answer *a)
{
    struct run_new rn = run_new_of(tenant, it, NULL);
    struct run *run = NULL;
    struct error err = {0};

    memset(a, 0, sizeof(*a));
    a->st = store_runs_submit(g_db, &rn, &run, &a->dedup, &err);
    if (a->st == ST_OK) {
        snprintf(a->run_id, sizeof(a->run_id), "%s", run->id);
        snprintf(a->status, sizeof(a->status), "%s", run_status_name(run->status));
    } else {
        a->dedup = false;
    }
    run_free(run);
}

/* The batch's answers for items[0..n) in tenant. */
static void answers_of_batch(const char *tenant, const struct item *items, size_t n,
                             struct answer *a)
{
    struct run_new *rn = calloc(n, sizeof(*rn));
    struct run_submitted *out = calloc(n, sizeof(*out));

    for (size_t i = 0; i < n; i++)
        rn[i] = run_new_of(tenant, &items[i], NULL);
    OK(store_runs_submit_batch(g_db, rn, n, out, &g_err));
    for (size_t i = 0; i < n; i++) {
        memset(&a[i], 0, sizeof(a[i]));
        a[i].st = out[i].st;
        if (out[i].st == ST_OK) {
            a[i].dedup = out[i].dedup;
            snprintf(a[i].run_id, sizeof(a[i].run_id), "%s", out[i].run->id);
            snprintf(a[i].status, sizeof(a[i].status), "%s", run_status_name(out[i].run->status));
        } else {
            ck_assert_msg(out[i].message[0], "item %zu: no message", i);
        }
    }
    run_submitted_cleanup(out, n);
    free(out);
    free(rn);
}

static void assert_same_answers(const struct item *items, size_t n, const struct answer *batch,
                                const struct answer *seq)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(batch[i].st == seq[i].st && batch[i].dedup == seq[i].dedup &&
                          strcmp(batch[i].run_id, seq[i].run_id) == 0 &&
                          strcmp(batch[i].status, seq[i].status) == 0,
                      "item %zu (id %s ident %s req %s): batch %s dedup=%d run=%s %s, "
                      "one by one %s dedup=%d run=%s %s",
                      i, items[i].id, items[i].ident, items[i].req, status_name(batch[i].st),
                      batch[i].dedup, batch[i].run_id, batch[i].status, status_name(seq[i].st),
                      seq[i].dedup, seq[i].run_id, seq[i].status);
}

/* The same runs in both tenants before the batch: an active one, and a
 * completed one. */
static void arrange_existing(const char *tenant)
{
    static const struct item old = {"old-1", "ident-old", "req-old"};
    static const struct item done = {"done-1", "ident-done", "req-done"};
    struct answer a;

    answer_of_one(tenant, &old, &a);
    ck_assert_int_eq(a.st, ST_OK);
    answer_of_one(tenant, &done, &a);
    ck_assert_int_eq(a.st, ST_OK);
    PQclear(th_sql(g_pg,
                   "UPDATE runs SET status = 'completed', outcome = 'failed', completed_at = now() "
                   "WHERE tenant = '%s' AND id = 'done-1'",
                   tenant));
}

/* That the batch went through migration 027's function (unnamed: the
 * function is renamed away and the batch then fails), or did not (named:
 * it still succeeds): so that the loop tests below compare what they say
 * they compare. */
static void assert_batch_went_through(bool fn)
{
    static const struct item it = {"probe", "probe", "probe"};
    struct run_new rn = run_new_of("p", &it, NULL);
    struct run_submitted out = {0};
    struct error err = {0};
    enum status st;

    PQclear(th_sql(g_pg, "ALTER FUNCTION opsrun_submit_batch(json) RENAME TO away"));
    st = store_runs_submit_batch(g_db, &rn, 1, &out, &err);
    PQclear(th_sql(g_pg, "ALTER FUNCTION away(json) RENAME TO opsrun_submit_batch"));
    run_submitted_cleanup(&out, 1);
    if (fn)
        ck_assert_msg(st != ST_OK, "the batch did not call opsrun_submit_batch");
    else
        ck_assert_msg(st == ST_OK && out.st == ST_OK, "the batch failed: %s", err.message);
}

/* Both runs in both modes (the loop's _i: 0 named prepared statements, 1
 * unnamed, where the batch is migration 027's function). */
START_TEST(batch_answers_as_one_by_one)
{
    /* Each line: what store_runs_submit answers one by one, noted. */
    static const struct item items[] = {
        {"new-a", "A", "ra"},                 /* new */
        {"new-b", "A", "rb"},                 /* joins new-a (identity, same array) */
        {"new-a", "A", "ra"},                 /* new-a again, same body: new-a */
        {"new-a", "X", "rx"},                 /* new-a with another body: 409 */
        {"old-1", "ident-old", "req-old"},    /* an existing run, same body */
        {"old-1", "Q", "rq"},                 /* an existing run, another body: 409 */
        {"new-c", "ident-old", "rc"},         /* joins old-1 (identity) */
        {"new-d", "D", "rd"},                 /* new */
        {"new-e", "A", "re"},                 /* joins new-a; creates no new-e */
        {"new-e", "E", "re2"},                /* so this one creates new-e */
        {"done-1", "ident-done", "req-done"}, /* the completed run, same body */
        {"new-f", "ident-done", "rf"},        /* a completed run is not joined: new */
        {"new-g", "D", "rg"},                 /* joins new-d */
        {"new-g", "D", "rg"},                 /* new-g does not exist: joins new-d */
    };
    size_t n = ARRAY_LEN(items);
    struct answer batch[ARRAY_LEN(items)], seq[ARRAY_LEN(items)];

    g_unnamed = _i == 1;
    open_test_db(g_unnamed ? "it_batch_answers_fn" : "it_batch_answers");
    g_input = json_pack("{s:i}", "k", 1);
    arrange_existing("b");
    arrange_existing("s");
    answers_of_batch("b", items, n, batch);
    for (size_t i = 0; i < n; i++)
        answer_of_one("s", &items[i], &seq[i]);
    assert_same_answers(items, n, batch, seq);

    /* And the expectations written above, so the oracle is not trusted blindly. */
    ck_assert(!batch[0].dedup && strcmp(batch[0].run_id, "new-a") == 0);
    ck_assert(batch[1].dedup && strcmp(batch[1].run_id, "new-a") == 0);
    ck_assert(batch[2].dedup && strcmp(batch[2].run_id, "new-a") == 0);
    ck_assert_int_eq(batch[3].st, ST_CONFLICT);
    ck_assert(batch[4].dedup && strcmp(batch[4].run_id, "old-1") == 0);
    ck_assert_int_eq(batch[5].st, ST_CONFLICT);
    ck_assert(batch[6].dedup && strcmp(batch[6].run_id, "old-1") == 0);
    ck_assert(!batch[7].dedup && strcmp(batch[7].run_id, "new-d") == 0);
    ck_assert(batch[8].dedup && strcmp(batch[8].run_id, "new-a") == 0);
    ck_assert(!batch[9].dedup && strcmp(batch[9].run_id, "new-e") == 0);
    ck_assert(batch[10].dedup && strcmp(batch[10].status, "completed") == 0);
    ck_assert(!batch[11].dedup && strcmp(batch[11].run_id, "new-f") == 0);
    ck_assert(batch[12].dedup && strcmp(batch[12].run_id, "new-d") == 0);
    ck_assert(batch[13].dedup && strcmp(batch[13].run_id, "new-d") == 0);

    /* Every new run has its one "submitted" event, and nothing else was stored. */
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE tenant = 'b'"), 2 + 4);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM run_events WHERE tenant = 'b' AND "
                                      "message = 'submitted'"),
                     2 + 4);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE tenant = 'b' AND "
                                      "initiator = 'tester'"),
                     2 + 4);
    assert_batch_went_through(_i == 1);
    json_decref(g_input);
    close_test_db();
}
END_TEST

/* Random items over few ids, identities and bodies, so that every kind of
 * repeat happens many times within one batch and against earlier batches;
 * the batch must still answer as one by one. */
START_TEST(batch_random_against_one_by_one)
{
    enum { N = 400, ROUNDS = 3 };
    struct item *items = calloc(N, sizeof(*items));
    struct answer *batch = calloc(N, sizeof(*batch)), *seq = calloc(N, sizeof(*seq));
    unsigned seed = 12345;

    g_unnamed = _i == 1;
    open_test_db(g_unnamed ? "it_batch_random_fn" : "it_batch_random");
    g_input = json_object();
    for (int round = 0; round < ROUNDS; round++) {
        for (size_t i = 0; i < N; i++) {
            int id = rand_r(&seed) % 40, ident = rand_r(&seed) % 15, v = rand_r(&seed) % 2;
            snprintf(items[i].id, sizeof(items[i].id), "r%d", id);
            snprintf(items[i].ident, sizeof(items[i].ident), "i%d", ident);
            snprintf(items[i].req, sizeof(items[i].req), "q%d-%d-%d", id, ident, v);
        }
        answers_of_batch("b", items, N, batch);
        for (size_t i = 0; i < N; i++)
            answer_of_one("s", &items[i], &seq[i]);
        assert_same_answers(items, N, batch, seq);
        /* Complete some runs between rounds, the same in both tenants. */
        PQclear(th_sql(g_pg, "UPDATE runs SET status = 'completed', outcome = 'succeeded', "
                             "completed_at = now() WHERE status = 'queued' AND id LIKE 'r1%%'"));
    }
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE tenant = 'b'"),
                     th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE tenant = 's'"));
    assert_batch_went_through(_i == 1);
    json_decref(g_input);
    free(items);
    free(batch);
    free(seq);
    close_test_db();
}
END_TEST

/* What the batch writes, and not only what it answers: the same items
 * through the inline statement (named prepared statements, tenant "n")
 * and through opsrun_submit_batch (unnamed, tenant "u") make the same
 * runs, events and answers, column by column. The items have what the
 * answers above do not show: a priority, a delay, a schedule, an
 * initiator and none, approvals (due now and later), a join, and two runs
 * of a cancel_newest key whose identities sort against their order, so
 * that the order of the inserts decides which one the key refuses. */
START_TEST(batch_function_writes_what_the_statement_writes)
{
    static const char *const later = "2099-01-01T00:00:00Z";
    json_t *in_x = json_pack("{s:s}", "h", "x"), *in_y = json_pack("{s:s,s:i}", "h", "y", "n", 2);
    struct run_new items[] = {
        {.id = "plain",
         .type = "T",
         .priority = 5,
         .max_attempts = 2,
         .timeout_s = 30,
         .input = in_y,
         .identity_hash = "i-plain",
         .request_hash = "r-plain"},
        {.id = "later",
         .type = "T",
         .run_at = later,
         .max_attempts = 3,
         .timeout_s = 60,
         .input = in_y,
         .identity_hash = "i-later",
         .request_hash = "r-later",
         .initiator = "alice",
         .schedule_name = "nightly",
         .schedule_slot = later},
        {.id = "ask",
         .type = "T",
         .max_attempts = 1,
         .timeout_s = 10,
         .input = in_y,
         .identity_hash = "i-ask",
         .request_hash = "r-ask",
         .initiator = "bob",
         .approval_timeout_s = 60,
         .approve_on_timeout = true},
        {.id = "ask-later",
         .type = "T",
         .run_at = later,
         .max_attempts = 1,
         .timeout_s = 10,
         .input = in_y,
         .identity_hash = "i-ask-later",
         .request_hash = "r-ask-later",
         .approval_timeout_s = 120},
        {.id = "key-1",
         .type = "K",
         .max_attempts = 1,
         .timeout_s = 10,
         .input = in_x,
         .identity_hash = "z-key-1",
         .request_hash = "r-key-1"},
        {.id = "key-2",
         .type = "K",
         .max_attempts = 1,
         .timeout_s = 10,
         .input = in_x,
         .identity_hash = "a-key-2",
         .request_hash = "r-key-2"},
        {.id = "joins",
         .type = "T",
         .max_attempts = 1,
         .timeout_s = 10,
         .input = in_y,
         .identity_hash = "i-later",
         .request_hash = "r-joins"},
        {.id = "plain",
         .type = "T",
         .priority = 5,
         .max_attempts = 2,
         .timeout_s = 30,
         .input = in_y,
         .identity_hash = "i-plain",
         .request_hash = "r-plain"},
    };
    size_t n = ARRAY_LEN(items);
    struct run_submitted out_n[ARRAY_LEN(items)], out_u[ARRAY_LEN(items)];
    struct db *unnamed;
    char *diff;

    open_test_db("it_batch_fn_writes");
    g_unnamed = true;
    unnamed = connect_db(g_ci);
    g_unnamed = false;
    PQclear(th_sql(g_pg, "INSERT INTO run_type_rules (type, max_attempts, timeout_s, conc_group, "
                         "conc_parts, conc_max, conc_strategy) VALUES ('K', 1, 10, 'host', "
                         "'[[\"input\", \"/h\"]]', 1, 'cancel_newest')"));
    for (size_t i = 0; i < n; i++)
        items[i].tenant = "n";
    OK(store_runs_submit_batch(g_db, items, n, out_n, &g_err));
    for (size_t i = 0; i < n; i++)
        items[i].tenant = "u";
    OK(store_runs_submit_batch(unnamed, items, n, out_u, &g_err));
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(out_n[i].st == ST_OK && out_u[i].st == ST_OK, "item %zu: %s / %s", i,
                      out_n[i].message, out_u[i].message);
        ck_assert_msg(out_n[i].dedup == out_u[i].dedup &&
                          strcmp(out_n[i].run->id, out_u[i].run->id) == 0 &&
                          out_n[i].run->status == out_u[i].run->status,
                      "item %zu: named %s %s dedup=%d, unnamed %s %s dedup=%d", i, out_n[i].run->id,
                      run_status_name(out_n[i].run->status), out_n[i].dedup, out_u[i].run->id,
                      run_status_name(out_u[i].run->status), out_u[i].dedup);
    }
    /* The arrangement shows what it should: the later run of the key
     * refused, two awaiting approval, and a join. */
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE id = 'key-2' AND "
                                      "outcome = 'cancelled' AND error->>'code' = "
                                      "'concurrency_limit'"),
                     2);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE approval_state = "
                                      "'pending'"),
                     4);
    ck_assert(out_u[6].dedup && strcmp(out_u[6].run->id, "later") == 0);
    diff = tenants_differ("n", "u");
    if (diff)
        fprintf(stderr, "rows of one tenant only (first: named, second: unnamed):\n%s\n", diff);
    ck_assert_msg(!diff, "the function wrote otherwise than the statement (rows above)");
    run_submitted_cleanup(out_n, n);
    run_submitted_cleanup(out_u, n);
    db_close(unnamed);
    json_decref(in_x);
    json_decref(in_y);
    close_test_db();
}
END_TEST

/* ---- the queue --------------------------------------------------------- */

enum { THREADS = 16, PER_THREAD = 500, IDENTS = 40 };

struct waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
};

static void waiter_done(void *arg)
{
    struct waiter *w = arg;

    pthread_mutex_lock(&w->mu);
    w->done = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

struct pusher {
    struct submitq *q;
    int index;
    /* results, checked by the test thread */
    int answered, created, failed;
    char (*run_of)[64]; /* per submission: the run it was answered with */
};

/* Pushes PER_THREAD single submissions one after another, each waiting for
 * its answer; identities overlap across all threads. */
static void *pusher_main(void *arg)
{
    struct pusher *p = arg;
    struct waiter w = {.done = false};
    json_t *input = json_object(); /* each thread its own, as each request has */

    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    for (int i = 0; i < PER_THREAD; i++) {
        struct item it;
        struct run_new rn;
        struct submit_batch *b = submit_batch_new(1);

        snprintf(it.id, sizeof(it.id), "t%d-%d", p->index, i);
        snprintf(it.ident, sizeof(it.ident), "k%d", (p->index * 7 + i) % IDENTS);
        snprintf(it.req, sizeof(it.req), "req-t%d-%d", p->index, i);
        rn = run_new_of("default", &it, "2999-01-01T00:00:00Z");
        rn.input = input;
        submit_batch_set(b, 0, &rn);
        w.done = false;
        submitq_push(p->q, b, waiter_done, &w);
        pthread_mutex_lock(&w.mu);
        while (!w.done)
            pthread_cond_wait(&w.cv, &w.mu);
        pthread_mutex_unlock(&w.mu);
        p->answered++;
        if (b->st != ST_OK || b->out[0].st != ST_OK) {
            p->failed++;
        } else {
            p->created += !b->out[0].dedup;
            snprintf(p->run_of[i], 64, "%s", b->out[0].run->id);
        }
        submit_batch_free(b);
        submitq_release(p->q);
    }
    pthread_cond_destroy(&w.cv);
    pthread_mutex_destroy(&w.mu);
    json_decref(input);
    return NULL;
}

START_TEST(queue_many_threads_one_run_per_identity)
{
    struct db_options opt = {
        .connect_timeout_s = 5, .statement_timeout_ms = 10000, .application_name = "opsrun_it"};
    struct pusher pushers[THREADS];
    pthread_t th[THREADS];
    struct db_pool *pool;
    struct hctx hc;
    struct submitq *q;
    struct submit_batch *late;
    struct waiter w = {.done = false};
    int answered = 0, created = 0, failed = 0;

    open_test_db("it_batch_queue");
    g_input = json_object();
    opt.conninfo = g_ci;
    pool = db_pool_new(&opt, 4, 10000);
    hc = (struct hctx){.pool = pool};
    q = submitq_new(&hc,
                    &(struct submitq_options){.flushers = 2, .batch_max = 64, .queue_max = 100000});
    OK(submitq_start(q, &g_err));
    for (int i = 0; i < THREADS; i++) {
        pushers[i] = (struct pusher){.q = q, .index = i};
        pushers[i].run_of = calloc(PER_THREAD, 64);
        ck_assert(pthread_create(&th[i], NULL, pusher_main, &pushers[i]) == 0);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        answered += pushers[i].answered;
        created += pushers[i].created;
        failed += pushers[i].failed;
    }
    ck_assert_int_eq(answered, THREADS * PER_THREAD);
    ck_assert_int_eq(failed, 0);
    /* Nothing completes (run_at is far away): one run per identity, ever. */
    ck_assert_int_eq(created, IDENTS);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs"), IDENTS);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(DISTINCT identity_hash) FROM runs"), IDENTS);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM run_events"), IDENTS);
    /* Every answer names the run of its identity. */
    for (int t = 0; t < THREADS; t++)
        for (int i = 0; i < PER_THREAD; i++) {
            char ident[16];
            snprintf(ident, sizeof(ident), "k%d", (t * 7 + i) % IDENTS);
            ck_assert_int_eq(th_sql_int(g_pg,
                                        "SELECT count(*) FROM runs WHERE id = '%s' AND "
                                        "identity_hash = '%s'",
                                        pushers[t].run_of[i], ident),
                             1);
        }
    for (int i = 0; i < THREADS; i++)
        free(pushers[i].run_of);

    /* Closed: a late push is answered at once, busy, and nothing is stored. */
    ck_assert(submitq_close(q, 5000));
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    late = submit_batch_new(1);
    {
        struct item it = {"late-1", "late", "late"};
        struct run_new rn = run_new_of("default", &it, NULL);
        submit_batch_set(late, 0, &rn);
    }
    submitq_push(q, late, waiter_done, &w);
    ck_assert(w.done);
    ck_assert_int_eq(late->st, ST_BUSY);
    submit_batch_free(late);
    submitq_release(q);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE id = 'late-1'"), 0);
    pthread_cond_destroy(&w.cv);
    pthread_mutex_destroy(&w.mu);
    submitq_free(q);
    db_pool_free(pool);
    json_decref(g_input);
    close_test_db();
}
END_TEST

static atomic_int g_answered;

static void count_done(void *arg)
{
    (void)arg;
    atomic_fetch_add(&g_answered, 1);
}

/* Closing writes and answers everything queued before the flushers stop. */
START_TEST(queue_close_answers_everything_queued)
{
    enum { QUEUED = 300 };
    struct db_options opt = {
        .connect_timeout_s = 5, .statement_timeout_ms = 10000, .application_name = "opsrun_it"};
    struct submit_batch *b[QUEUED];
    struct db_pool *pool;
    struct hctx hc;
    struct submitq *q;

    open_test_db("it_batch_close");
    g_input = json_object();
    opt.conninfo = g_ci;
    pool = db_pool_new(&opt, 2, 10000);
    hc = (struct hctx){.pool = pool};
    q = submitq_new(&hc,
                    &(struct submitq_options){.flushers = 1, .batch_max = 7, .queue_max = 100000});
    OK(submitq_start(q, &g_err));
    atomic_store(&g_answered, 0);
    for (int i = 0; i < QUEUED; i++) {
        struct item it;
        struct run_new rn;

        snprintf(it.id, sizeof(it.id), "c-%d", i);
        snprintf(it.ident, sizeof(it.ident), "c-%d", i);
        snprintf(it.req, sizeof(it.req), "c-%d", i);
        rn = run_new_of("default", &it, NULL);
        b[i] = submit_batch_new(1);
        submit_batch_set(b[i], 0, &rn);
        submitq_push(q, b[i], count_done, NULL);
    }
    /* Each batch is held until released: closing waits for that too. */
    ck_assert(!submitq_close(q, 0));
    ck_assert_int_eq(atomic_load(&g_answered), QUEUED);
    for (int i = 0; i < QUEUED; i++) {
        ck_assert_msg(b[i]->st == ST_OK && b[i]->out[0].st == ST_OK && !b[i]->out[0].dedup,
                      "batch %d: %s", i, status_name(b[i]->st));
        submit_batch_free(b[i]);
        submitq_release(q);
    }
    ck_assert(submitq_close(q, 0));
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs"), QUEUED);
    submitq_free(q);
    db_pool_free(pool);
    json_decref(g_input);
    close_test_db();
}
END_TEST

/* Past queue_max a batch is refused at once, busy, and nothing of it is
 * stored; a batch alone in the queue is taken whatever its size. The queue
 * is started only after the pushes, so what is queued is known. */
START_TEST(queue_full_refuses_at_once)
{
    struct db_options opt = {
        .connect_timeout_s = 5, .statement_timeout_ms = 10000, .application_name = "opsrun_it"};
    struct submit_batch *big, *more, *late;
    struct db_pool *pool;
    struct hctx hc;
    struct submitq *q;
    struct run_new rn;
    struct item it;

    open_test_db("it_batch_full");
    g_input = json_object();
    opt.conninfo = g_ci;
    pool = db_pool_new(&opt, 2, 10000);
    hc = (struct hctx){.pool = pool};
    q = submitq_new(&hc, &(struct submitq_options){.flushers = 1, .batch_max = 10, .queue_max = 3});
    atomic_store(&g_answered, 0);
    big = submit_batch_new(5); /* over queue_max, but alone: taken */
    for (size_t i = 0; i < 5; i++) {
        snprintf(it.id, sizeof(it.id), "big-%zu", i);
        snprintf(it.ident, sizeof(it.ident), "big-%zu", i);
        snprintf(it.req, sizeof(it.req), "big-%zu", i);
        rn = run_new_of("default", &it, NULL);
        submit_batch_set(big, i, &rn);
    }
    submitq_push(q, big, count_done, NULL);
    ck_assert_int_eq(atomic_load(&g_answered), 0);
    more = submit_batch_new(1);
    snprintf(it.id, sizeof(it.id), "more");
    snprintf(it.ident, sizeof(it.ident), "more");
    snprintf(it.req, sizeof(it.req), "more");
    rn = run_new_of("default", &it, NULL);
    submit_batch_set(more, 0, &rn);
    submitq_push(q, more, count_done, NULL);
    ck_assert_int_eq(atomic_load(&g_answered), 1); /* refused at once */
    ck_assert_int_eq(more->st, ST_BUSY);
    ck_assert_str_eq(more->err.message,
                     "too many submissions are waiting to be written; retry shortly");
    submit_batch_free(more);
    submitq_release(q);

    OK(submitq_start(q, &g_err));
    ck_assert(!submitq_close(q, 0)); /* drained: big answered, still held */
    ck_assert_int_eq(atomic_load(&g_answered), 2);
    ck_assert_int_eq(big->st, ST_OK);
    for (size_t i = 0; i < 5; i++)
        ck_assert(big->out[i].st == ST_OK && !big->out[i].dedup);
    submit_batch_free(big);
    submitq_release(q);
    late = submit_batch_new(1);
    rn = run_new_of("default", &it, NULL);
    submit_batch_set(late, 0, &rn);
    submitq_push(q, late, count_done, NULL);
    ck_assert_int_eq(late->st, ST_BUSY);
    ck_assert_str_eq(late->err.message, "the server is shutting down; retry shortly");
    submit_batch_free(late);
    submitq_release(q);
    ck_assert(submitq_close(q, 0));
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs"), 5);
    submitq_free(q);
    db_pool_free(pool);
    json_decref(g_input);
    close_test_db();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("batch");
    TCase *tc = tcase_create("batch");

    tcase_set_timeout(tc, 240);
    tcase_add_loop_test(tc, batch_answers_as_one_by_one, 0, 2);
    tcase_add_loop_test(tc, batch_random_against_one_by_one, 0, 2);
    tcase_add_test(tc, batch_function_writes_what_the_statement_writes);
    tcase_add_test(tc, queue_many_threads_one_run_per_identity);
    tcase_add_test(tc, queue_close_answers_everything_queued);
    tcase_add_test(tc, queue_full_refuses_at_once);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
