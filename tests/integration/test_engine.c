/* tests/integration/test_engine.c — the engine's lifecycle against a real
 * PostgreSQL: a start that fails at any thread leaves no thread running and
 * the worker row marked stopped, and a full start and drain joins every
 * thread it started.
 *
 * The engine starts its threads through e->spawn (engine_internal.h). The
 * spawn below counts the threads alive, by running each thread's function
 * inside a wrapper, and fails the Nth start on request.
 *
 * System headers come before the opsrun headers, ahead of common.h's poison
 * pragma. */
#include <check.h>
#include <pthread.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "engine/actions/action.h"
#include "engine/actions/registry.h"
#include "engine/engine.h"
#include "engine/engine_internal.h"
#include "tests/support/fixture.h"
#include "tests/support/harness.h"

#define WORKERS 3
#define CHECKERS 2

static _Atomic int alive;   /* threads started and not yet returned */
static _Atomic int started; /* spawn calls that succeeded */
static _Atomic int calls;   /* spawn calls */
static int fail_at;         /* the call that fails (1-based); 0 = none */

struct trampoline {
    void *(*fn)(void *);
    void *arg;
};

static void *run_counted(void *p)
{
    struct trampoline t = *(struct trampoline *)p;
    void *r;

    free(p);
    r = t.fn(t.arg);
    atomic_fetch_sub(&alive, 1);
    return r;
}

static int counting_spawn(pthread_t *t, void *(*fn)(void *), void *arg)
{
    struct trampoline *tr;
    int rc;

    if (atomic_fetch_add(&calls, 1) + 1 == fail_at)
        return EAGAIN;
    tr = malloc(sizeof(*tr));
    tr->fn = fn;
    tr->arg = arg;
    atomic_fetch_add(&alive, 1);
    rc = pthread_create(t, NULL, run_counted, tr);
    if (rc != 0) {
        atomic_fetch_sub(&alive, 1);
        free(tr);
        return rc;
    }
    atomic_fetch_add(&started, 1);
    return 0;
}

static struct config cfg;
static struct db_pool *pool;

/* A configuration whose every thread exists: LISTEN on, and a run type
 * whose action can wait, so the poller starts too. */
static void setup(void)
{
    static int n;
    char name[64];
    struct error err = {0};
    struct db_options opt = {0};

    snprintf(name, sizeof(name), "engine_%d_%d", (int)getpid(), n++);
    open_test_db(name);
    cfg_init(&cfg, &action_registry);
    ck_assert_int_eq(cfg_set(&cfg, "database_url", g_ci, CFG_SRC_FLAG, &err), ST_OK);
    ck_assert_int_eq(cfg_set(&cfg, "workers", "3", CFG_SRC_FLAG, &err), ST_OK);
    ck_assert_msg(cfg_load_json(&cfg,
                                "{\"poller\": {\"concurrency\": 2}, \"run_types\": {\"call\": "
                                "{\"action\": \"http\", \"params\": {\"request\": {\"url\": "
                                "\"http://127.0.0.1:9/x\"}}}}}",
                                &err) == ST_OK,
                  "%s", err.message);
    opt.conninfo = g_ci;
    opt.connect_timeout_s = 5;
    pool = db_pool_new(&opt, cfg_pool_size(&cfg), 2000);
    atomic_store(&alive, 0);
    atomic_store(&started, 0);
    atomic_store(&calls, 0);
}

static void teardown(void)
{
    db_pool_free(pool);
    cfg_cleanup(&cfg);
    close_test_db();
}

/* The worker row's "stopped_at IS NOT NULL". */
static bool worker_stopped(const char *worker_id)
{
    PGresult *r =
        th_sql(g_pg, "SELECT stopped_at IS NOT NULL FROM workers WHERE id = '%s'", worker_id);
    bool stopped = PQntuples(r) == 1 && strcmp(PQgetvalue(r, 0, 0), "t") == 0;

    PQclear(r);
    return stopped;
}

/* Every thread the engine starts, in a full start. */
#define THREADS                                                                                    \
    (2 /* doorbell, listener */ + 1 /* maintenance */ + 1 /* poll writer */ + CHECKERS +           \
     1 /* scheduler */                                                                             \
     + 1 /* approvals */ + 1 /* completer */ + WORKERS + 1 /* dispatcher */)

START_TEST(test_full_start_and_drain_join_everything)
{
    struct engine *e = engine_new(&cfg, pool);
    struct error err = {0};

    e->spawn = counting_spawn;
    ck_assert_msg(engine_start(e, &err) == ST_OK, "%s", err.message);
    ck_assert_int_eq(atomic_load(&started), THREADS);
    ck_assert_int_eq(atomic_load(&alive), THREADS);
    engine_drain(e, 1);
    ck_assert_int_eq(atomic_load(&alive), 0);
    ck_assert(worker_stopped(e->worker_id));
    engine_free(e);
}
END_TEST

/* Fails the _i-th thread start (1 = the doorbell ... THREADS = the
 * dispatcher): the start fails naming it, and nothing is left running. */
START_TEST(test_failed_start_leaves_no_thread)
{
    struct engine *e = engine_new(&cfg, pool);
    struct error err = {0};

    fail_at = _i;
    e->spawn = counting_spawn;
    ck_assert_int_eq(engine_start(e, &err), ST_INTERNAL);
    ck_assert_msg(strncmp(err.message, "could not start the ", 20) == 0 &&
                      strstr(err.message, " thread: ") != NULL,
                  "message: %s", err.message);
    ck_assert_int_eq(atomic_load(&started), _i - 1);
    ck_assert_int_eq(atomic_load(&alive), 0);
    ck_assert(worker_stopped(e->worker_id));
    engine_drain(e, 1); /* a no-op after a failed start */
    engine_free(e);
    fail_at = 0;
}
END_TEST

static Suite *engine_suite(void)
{
    Suite *s = suite_create("engine");
    TCase *tc = tcase_create("lifecycle");

    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_full_start_and_drain_join_everything);
    tcase_add_loop_test(tc, test_failed_start_leaves_no_thread, 1, THREADS + 1);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(engine_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
