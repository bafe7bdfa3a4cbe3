/* tests/e2e/test_concurrency.c — concurrency keys and fair sharing with
 * real processes on one database:
 * - three replicas, each SIGKILLed and restarted in turn while runs of six
 *   keys (one of them hot, submitted by many threads at once) come in
 *   through all three: sampled every 10 ms, no key ever has more runs
 *   running or cancelling than its max_running, every key reaches it, and
 *   every run ends (the killed replicas' runs are rescued, and the runs
 *   held behind them start);
 * - a tenant's flood of higher priority: another tenant's run starts while
 *   most of the flood still waits, with and without a cap per tenant, and
 *   the flooding tenant never has more running than its cap. */
#include "../support/harness.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ORPHAN_QUEUE "\"orphan_after_s\":3,\"heartbeat_interval_s\":1,\"orphan_scan_interval_s\":1"

/* ---- a sampler: the most runs of one key, or of one tenant, active ---- */

struct sampler {
    const char *conninfo;
    const char *sql; /* one row, one integer: the figure sampled */
    atomic_bool stop;
    int max, samples;
    char error[256];
};

static void *sampler_main(void *arg)
{
    struct sampler *s = arg;
    PGconn *c = PQconnectdb(s->conninfo);

    if (PQstatus(c) != CONNECTION_OK) {
        snprintf(s->error, sizeof(s->error), "sampler: %s", PQerrorMessage(c));
        PQfinish(c);
        return NULL;
    }
    while (!atomic_load(&s->stop)) {
        PGresult *r = PQexec(c, s->sql);
        if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1) {
            int n = atoi(PQgetvalue(r, 0, 0));
            s->samples++;
            if (n > s->max)
                s->max = n;
        } else if (!s->error[0]) {
            snprintf(s->error, sizeof(s->error), "sampler: %s", PQerrorMessage(c));
        }
        PQclear(r);
        th_sleep_ms(10);
    }
    PQfinish(c);
    return NULL;
}

/* Polls sql (one integer) every 20 ms until it is 1 (true), at most timeout_ms;
 * returns the last value. */
static long long wait_true(PGconn *db, const char *sql, int timeout_ms)
{
    long long v = -1;

    for (long long until = th_now_ms() + timeout_ms; th_now_ms() < until; th_sleep_ms(20)) {
        v = th_sql_int(db, "%s", sql);
        if (v == 1)
            break;
    }
    return v;
}

/* ---- three replicas, SIGKILLs, a hot key ---- */

#define REPLICAS 3
#define HOSTS 6
#define PER_THREAD 25
#define THREADS 6

/* The most runs of one key running or cancelling at once, across all. */
#define KEY_ACTIVE_SQL                                                                             \
    "SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM runs WHERE conc_key IS NOT NULL "  \
    "AND status IN ('running', 'cancelling') GROUP BY tenant, conc_group, conc_key) k"

struct submitter {
    struct th_proc *procs; /* REPLICAS of them; any may be down */
    int index, ok;
};

/* Submits PER_THREAD runs: even ones to the hot key, odd ones spread over
 * the others, each to the next replica that answers. */
static void *submitter_main(void *arg)
{
    struct submitter *s = arg;

    for (int i = 0; i < PER_THREAD; i++) {
        char body[200];
        char host[32];

        if (i % 2 == 0)
            snprintf(host, sizeof(host), "hot");
        else
            snprintf(host, sizeof(host), "host-%d", 1 + (s->index + i) % (HOSTS - 1));
        /* A run_id of its own: a copy sent again after a replica died
         * with its answer joins the run, even one that ended meanwhile
         * (an identity joins only an active run). */
        snprintf(body, sizeof(body),
                 "{\"alert_type\":\"keyed\",\"run_id\":\"kill-%d-%d\",\"data\":{\"host\":"
                 "\"%s\",\"duration_ms\":%d,\"n\":\"%d-%d\"}}",
                 s->index, i, host, 20 + (i * 7 + s->index * 13) % 60, s->index, i);
        for (int tries = 0; tries < 50; tries++) {
            struct th_resp r = {0};
            const struct th_proc *p = &s->procs[(s->index + i + tries) % REPLICAS];
            char url[128];
            bool ok;

            snprintf(url, sizeof(url), "%s/alerts", p->url);
            /* 200: a copy sent again after a replica died with its answer */
            ok = th_http("POST", url, "application/json", body, &r) &&
                 (r.status == 202 || r.status == 200);
            th_resp_free(&r);
            if (ok) {
                s->ok++;
                break;
            }
            th_sleep_ms(50); /* that replica is down: the next one */
        }
    }
    return NULL;
}

START_TEST(three_replicas_killed_in_turn)
{
    char *ci = th_db_create("e2e_concurrency_kill");
    struct th_proc p[REPLICAS];
    struct submitter subs[THREADS];
    pthread_t sth[THREADS], smp;
    struct sampler s = {.conninfo = ci, .sql = KEY_ACTIVE_SQL};
    char *cfg =
        th_config_file("e2e_concurrency_kill",
                       "{\"queue\":{" ORPHAN_QUEUE "},"
                       "\"run_types\":{\"keyed\":{\"action\":\"simulate\",\"max_attempts\":5,"
                       "\"concurrency\":{\"key\":\"{{input:/host}}\",\"max_running\":2}}}}");
    const char *args[] = {"--config", cfg, "--workers", "8", NULL};
    PGconn *db = th_pg(ci);
    int submitted = 0;
    long long done, ok, rescued;

    for (int i = 0; i < REPLICAS; i++)
        th_start(&p[i], ci, args, NULL);
    ck_assert(pthread_create(&smp, NULL, sampler_main, &s) == 0);
    for (int i = 0; i < THREADS; i++) {
        subs[i] = (struct submitter){.procs = p, .index = i};
        ck_assert(pthread_create(&sth[i], NULL, submitter_main, &subs[i]) == 0);
    }
    /* Each replica SIGKILLed in turn while runs come and go, and started
     * again on its port. */
    for (int k = 0; k < REPLICAS; k++) {
        th_sleep_ms(700);
        ck_assert_int_eq(th_stop(&p[k], SIGKILL, 5), 128 + SIGKILL);
        th_sleep_ms(300);
        th_restart(&p[k], ci, args, NULL);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(sth[i], NULL);
        submitted += subs[i].ok;
    }
    ck_assert_int_eq(submitted, THREADS * PER_THREAD);
    th_wait_all_completed(db, 90000);
    atomic_store(&s.stop, true);
    pthread_join(smp, NULL);

    done =
        th_sql_int(db, "SELECT count(*) FROM runs WHERE type = 'keyed' AND status = 'completed'");
    ok = th_sql_int(db, "SELECT count(*) FROM runs WHERE type = 'keyed' AND outcome = 'succeeded'");
    rescued = th_sql_int(db, "SELECT count(*) FROM runs WHERE type = 'keyed' AND attempt > 1");
    fprintf(stderr,
            "killed in turn: %d samples, at most %d runs of one key active; %lld runs, %lld "
            "succeeded, %lld rescued into a later attempt\n",
            s.samples, s.max, done, ok, rescued);
    ck_assert_msg(s.error[0] == '\0', "%s", s.error);
    ck_assert_msg(s.samples > 100, "only %d samples", s.samples);
    ck_assert_msg(s.max <= 2, "%d runs of one key were active at once with max_running 2", s.max);
    ck_assert_msg(s.max == 2, "no key ever reached its max_running of 2 (the test proves nothing)");
    ck_assert_int_eq(done, THREADS * PER_THREAD);
    ck_assert_int_eq(ok, THREADS * PER_THREAD);
    /* Every run holds a key of its input, per tenant and group. */
    ck_assert_int_eq(th_sql_int(db, "SELECT count(*) FROM runs WHERE type = 'keyed' AND "
                                    "(conc_key IS DISTINCT FROM input->>'host' OR conc_group "
                                    "IS DISTINCT FROM 'keyed')"),
                     0);
    PQfinish(db);
    for (int i = 0; i < REPLICAS; i++)
        th_stop_clean(&p[i]);
    free(cfg);
    free(ci);
}
END_TEST

/* ---- a flood from one tenant ---- */

#define FLOOD 600

/* acme's flood of FLOOD runs (priority 5, 50 ms each) is under way when
 * globex submits one run of priority 0: it must start while most of the
 * flood still waits. With cap > 0 (tenants.acme.max_running), acme never
 * has more than cap running, and reaches it. Runs go straight into the
 * table: tenants come from tokens over HTTP, and the claim is what is
 * tested here. */
static void flood(const char *name, const char *config, int cap)
{
    char *ci = th_db_create(name);
    struct th_proc p;
    struct sampler s = {.conninfo = ci,
                        .sql = "SELECT count(*) FROM runs WHERE tenant = 'acme' AND status IN "
                               "('running', 'cancelling')"};
    pthread_t smp;
    char *cfg = th_config_file(name, config);
    const char *args[] = {"--config", cfg, "--workers", "8", NULL};
    PGconn *db = th_pg(ci);
    long long after, acme_done;
    char *late = NULL;

    th_start(&p, ci, args, NULL);
    ck_assert(pthread_create(&smp, NULL, sampler_main, &s) == 0);
    PQclear(
        th_sql(db,
               "INSERT INTO runs (tenant, id, type, max_attempts, timeout_s, input, "
               "identity_hash, request_hash, priority) SELECT 'acme', 'flood-' || i, 'demo', 1, "
               "60, '{\"duration_ms\": 50}', 'flood-' || i, 'x', 5 "
               "FROM generate_series(1, %d) AS i",
               FLOOD));
    PQclear(th_sql(db, "SELECT pg_notify('opsrun_queue', '')"));
    ck_assert_int_eq(wait_true(db,
                               "SELECT (count(*) > 0)::int FROM runs WHERE tenant = 'acme' AND "
                               "status <> 'queued'",
                               10000),
                     1);
    PQclear(th_sql(db,
                   "INSERT INTO runs (tenant, id, type, max_attempts, timeout_s, input, "
                   "identity_hash, request_hash, priority) VALUES ('globex', 'late', 'demo', 1, "
                   "60, '{\"duration_ms\": 0}', 'late', 'x', 0)"));
    PQclear(th_sql(db, "SELECT pg_notify('opsrun_queue', '')"));
    th_wait_all_completed(db, 120000);
    atomic_store(&s.stop, true);
    pthread_join(smp, NULL);
    after = th_sql_int(db, "SELECT count(*) FROM runs WHERE tenant = 'acme' AND started_at > "
                           "(SELECT started_at FROM runs WHERE id = 'late')");
    acme_done = th_sql_int(db, "SELECT count(*) FROM runs WHERE tenant = 'acme' AND outcome = "
                               "'succeeded'");
    late = th_sql_str(db, "SELECT outcome FROM runs WHERE id = 'late'");
    fprintf(stderr,
            "%s: %lld of acme's %d runs started after globex's; acme at most %d running (%d "
            "samples)\n",
            name, after, FLOOD, s.max, s.samples);
    ck_assert_msg(s.error[0] == '\0', "%s", s.error);
    ck_assert_str_eq(late, "succeeded");
    ck_assert_msg(after > FLOOD / 2,
                  "globex's run waited behind acme's backlog: only %lld of %d acme runs started "
                  "after it",
                  after, FLOOD);
    if (cap > 0) {
        ck_assert_msg(s.max <= cap, "acme had %d runs running with a cap of %d", s.max, cap);
        ck_assert_msg(s.max == cap, "acme never reached its cap of %d (the test proves nothing)",
                      cap);
    }
    ck_assert_int_eq(acme_done, FLOOD);
    free(late);
    PQfinish(db);
    th_stop_clean(&p);
    free(cfg);
    free(ci);
}

START_TEST(flood_does_not_delay_another_tenant)
{
    flood("e2e_concurrency_flood", "{\"queue\":{\"max_running\":8}}", 0);
}
END_TEST

START_TEST(flood_with_a_tenant_cap)
{
    flood("e2e_concurrency_flood_cap",
          "{\"queue\":{\"max_running\":8},\"tenants\":{\"acme\":{\"max_running\":4}}}", 4);
}
END_TEST

static Suite *concurrency_suite(void)
{
    Suite *s = suite_create("e2e_concurrency");
    TCase *tc = tcase_create("core");

    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, three_replicas_killed_in_turn);
    tcase_add_test(tc, flood_does_not_delay_another_tenant);
    tcase_add_test(tc, flood_with_a_tenant_cap);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return th_run_suite(concurrency_suite());
}
