/* tests/e2e/test_db_faults.c — the database refuses writes or holds them,
 * under a steady load of submissions, with runs in flight
 * (docs/operations.md, "Database faults"):
 *   - it becomes read-only (ALTER DATABASE ... SET
 *     default_transaction_read_only, its sessions terminated), then
 *     writable again (RESET, no session terminated: opsrun must notice);
 *   - it is "full": every write fails with SQLSTATE 53100 (disk_full), as
 *     PostgreSQL's own failure to extend a file does, raised by triggers
 *     (a disk cannot be filled here; see the operations page);
 *   - a transaction holds LOCK TABLE runs for 20 s.
 * Submissions get 503 problem+json naming the reason, nothing acknowledged
 * is lost, runs in flight are not failed (their writes retry), requests
 * under the lock answer within the statement timeout and a margin, the
 * dispatcher backs off, and service comes back by itself. Each test prints
 * what it measured. */
#include "../support/harness.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INFLIGHT 6
#define ACKED_MAX 4096
#define STATEMENT_TIMEOUT_MS 1000

/* A client submitting one run at a time, with its own ids, recording what
 * it was told. */
struct load {
    char url[160]; /* the server's /alerts */
    const char *prefix;
    const char *want; /* the reason the fault should be named by */
    pthread_t thread;
    atomic_bool stop;
    pthread_mutex_t mu;
    char (*acked)[48];
    int nacked, n503, nreason, nwant, bad;
    char reason[128], bad_body[512];
    long long last_ok_ms, first_want_ms, slowest_ms, slowest_fault_ms;
    long long fault_from_ms, fault_to_ms; /* set by the test */
};

static bool is_problem(const struct th_resp *r)
{
    return strncmp(r->content_type, "application/problem+json", 24) == 0 && r->json &&
           th_ji(r->json, "status") == 503 && th_streq(r->retry_after, "1");
}

static void load_note(struct load *l, const struct th_resp *r, bool ok, const char *id,
                      long long t0, long long t1)
{
    pthread_mutex_lock(&l->mu);
    if (t1 - t0 > l->slowest_ms)
        l->slowest_ms = t1 - t0;
    if (l->fault_from_ms && t0 >= l->fault_from_ms && (!l->fault_to_ms || t0 < l->fault_to_ms) &&
        t1 - t0 > l->slowest_fault_ms)
        l->slowest_fault_ms = t1 - t0;
    if (ok && r->status == 202 && l->nacked < ACKED_MAX) {
        snprintf(l->acked[l->nacked++], sizeof(l->acked[0]), "%s", id);
        l->last_ok_ms = t1;
    } else if (ok && r->status == 503 && is_problem(r)) {
        const char *why = th_js(r->json, "reason");
        l->n503++;
        if (why) {
            l->nreason++;
            snprintf(l->reason, sizeof(l->reason), "%s", why);
            /* Not only the last: the moments a fault begins and ends
             * (a trigger made or dropped waits for a lock) may also show
             * as a timeout. */
            if (th_streq(why, l->want)) {
                l->nwant++;
                if (!l->first_want_ms)
                    l->first_want_ms = t1;
            }
        }
    } else {
        l->bad++;
        snprintf(l->bad_body, sizeof(l->bad_body), "%ld %s", ok ? r->status : -1L,
                 ok && r->body ? r->body : "(transport failure)");
    }
    pthread_mutex_unlock(&l->mu);
}

static void *load_main(void *arg)
{
    struct load *l = arg;

    for (int n = 0; !atomic_load(&l->stop); n++) {
        struct th_resp r;
        char id[48], body[192];
        long long t0 = th_now_ms();
        bool ok;

        snprintf(id, sizeof(id), "%s-%d", l->prefix, n);
        snprintf(body, sizeof(body),
                 "{\"alert_type\":\"demo\",\"run_id\":\"%s\",\"data\":{\"duration_ms\":50}}", id);
        ok = th_http("POST", l->url, "application/json", body, &r);
        load_note(l, &r, ok, id, t0, th_now_ms());
        th_resp_free(&r);
        th_sleep_ms(20);
    }
    return NULL;
}

static void load_start(struct load *l, const struct th_proc *p, const char *prefix,
                       const char *want)
{
    memset(l, 0, sizeof(*l));
    snprintf(l->url, sizeof(l->url), "%s/alerts", p->url);
    l->prefix = prefix;
    l->want = want;
    l->acked = calloc(ACKED_MAX, sizeof(*l->acked));
    pthread_mutex_init(&l->mu, NULL);
    ck_assert_int_eq(pthread_create(&l->thread, NULL, load_main, l), 0);
}

static void load_stop(struct load *l)
{
    atomic_store(&l->stop, true);
    pthread_join(l->thread, NULL);
}

static long long load_get(struct load *l, const long long *field)
{
    long long v;

    pthread_mutex_lock(&l->mu);
    v = *field;
    pthread_mutex_unlock(&l->mu);
    return v;
}

/* INFLIGHT runs, running when it returns: the even ones of short_ms, the
 * odd ones of long_ms. */
static void start_inflight(const struct th_proc *p, char **ids, int short_ms, int long_ms)
{
    char body[160];

    for (int i = 0; i < INFLIGHT; i++) {
        snprintf(body, sizeof(body),
                 "{\"alert_type\":\"demo\",\"data\":{\"duration_ms\":%d,\"steps\":8,\"i\":%d}}",
                 i % 2 ? long_ms : short_ms, i);
        ids[i] = th_submit(p, body, 202);
    }
    for (int i = 0; i < INFLIGHT; i++)
        ck_assert_msg(th_wait_status(p, ids[i], "running", 20000), "%s never ran", ids[i]);
}

/* Reads still work while writes are refused. */
static void check_reads(const struct th_proc *p, const char *what)
{
    struct th_resp r;

    th_get(p->url, "/readyz", &r);
    ck_assert_msg(r.status == 200, "%s: /readyz %ld %s", what, r.status, r.body);
    th_resp_free(&r);
    th_get(p->url, "/runs?limit=5", &r);
    ck_assert_msg(r.status == 200, "%s: GET /runs %ld %s", what, r.status, r.body);
    th_resp_free(&r);
}

/* Every acknowledged submission and every run in flight ended succeeded,
 * the runs in flight on their first attempt; no run failed. */
static void check_nothing_lost(const char *ci, struct load *l, char **inflight, const char *what)
{
    PGconn *pg = th_pg(ci);

    th_wait_all_completed(pg, 90000);
    ck_assert_int_eq(th_sql_int(pg, "SELECT count(*) FROM runs WHERE outcome <> 'succeeded'"), 0);
    for (int i = 0; i < l->nacked; i++)
        ck_assert_msg(th_sql_int(pg, "SELECT count(*) FROM runs WHERE id = '%s'", l->acked[i]) == 1,
                      "%s: acknowledged run %s was lost", what, l->acked[i]);
    for (int i = 0; i < INFLIGHT; i++)
        ck_assert_msg(th_sql_int(pg, "SELECT attempt FROM runs WHERE id = '%s'", inflight[i]) == 1,
                      "%s: run %s in flight took another attempt", what, inflight[i]);
    PQfinish(pg);
}

static int log_count(const char *log, const char *needle)
{
    char line[4096];
    int n = 0;
    FILE *f = fopen(log, "r");

    while (f && fgets(line, sizeof(line), f))
        n += strstr(line, needle) != NULL;
    if (f)
        fclose(f);
    return n;
}

/* A fault of the database named db, made by sql_on and undone by sql_off
 * (run on the cluster's "postgres" database, or on db itself when they
 * begin with "db:"; {db} stands for its name) for hold_ms under load. */
struct fault {
    const char *name, *db, *want_reason;
    const char *const *sql_on, *const *sql_off;
    int hold_ms;
};

static void run_sql(PGconn *admin, const char *dbci, const char *const *sql, const char *db)
{
    for (int i = 0; sql[i]; i++) {
        bool on_db = strncmp(sql[i], "db:", 3) == 0;
        const char *t = sql[i] + (on_db ? 3 : 0), *at = strstr(t, "{db}");
        PGconn *c = on_db ? th_pg(dbci) : admin;
        char q[1024];

        if (at)
            snprintf(q, sizeof(q), "%.*s%s%s", (int)(at - t), t, db, at + 4);
        else
            snprintf(q, sizeof(q), "%s", t);
        PQclear(th_sql(c, "%s", q));
        if (on_db)
            PQfinish(c);
    }
}

static void fault_under_load(const struct fault *f)
{
    char *ci = th_db_create(f->db), *admin_ci = th_conninfo("postgres");
    char cfgjson[512], *cfg;
    PGconn *admin = th_pg(admin_ci);
    struct th_proc p;
    struct load l;
    char *inflight[INFLIGHT];
    long long t_on, t_off, detected, recovered;
    const char *args[] = {"--config", NULL, NULL};

    snprintf(cfgjson, sizeof(cfgjson),
             "{\"db\": {\"statement_timeout_ms\": %d}, \"limits\": {\"submit_rate_per_s\": 0},"
             " \"queue\": {\"heartbeat_interval_s\": 1, \"orphan_after_s\": 60}}",
             STATEMENT_TIMEOUT_MS);
    cfg = th_config_file(f->db, cfgjson);
    args[1] = cfg;
    th_start(&p, ci, args, NULL);
    /* Half of them end during the fault: their final writes must wait. */
    start_inflight(&p, inflight, f->hold_ms / 2, f->hold_ms + 3000);
    load_start(&l, &p, f->db, f->want_reason);
    th_sleep_ms(500);

    t_on = th_now_ms();
    pthread_mutex_lock(&l.mu);
    l.fault_from_ms = t_on;
    pthread_mutex_unlock(&l.mu);
    run_sql(admin, ci, f->sql_on, f->db);
    th_sleep_ms(1000);
    check_reads(&p, f->name);
    while (th_now_ms() - t_on < f->hold_ms)
        th_sleep_ms(50);
    detected = load_get(&l, &l.first_want_ms);
    t_off = th_now_ms();
    run_sql(admin, ci, f->sql_off, f->db);
    pthread_mutex_lock(&l.mu);
    l.fault_to_ms = t_off;
    pthread_mutex_unlock(&l.mu);
    while (th_now_ms() - t_off < 30000 && load_get(&l, &l.last_ok_ms) <= t_off)
        th_sleep_ms(20);
    recovered = load_get(&l, &l.last_ok_ms);
    th_sleep_ms(500);
    load_stop(&l);

    fprintf(stderr,
            "db fault %s: first 503 naming it %lld ms after the fault; %d answered 503 (%d "
            "naming it, %d with a reason, the last \"%s\"); slowest answer %lld ms; first 202 "
            "%lld ms after the end of the fault; %d acknowledged\n",
            f->name, detected ? detected - t_on : -1, l.n503, l.nwant, l.nreason, l.reason,
            l.slowest_fault_ms, recovered - t_off, l.nacked);
    ck_assert_msg(l.bad == 0, "%s: %d unexpected answers, e.g. %s", f->name, l.bad, l.bad_body);
    ck_assert_msg(detected > 0 && l.nwant > 0, "%s: no 503 named the reason (last: \"%s\")",
                  f->name, l.reason);
    ck_assert_msg(recovered > t_off, "%s: no submission was taken within 30 s after the fault",
                  f->name);
    check_nothing_lost(ci, &l, inflight, f->name);
    ck_assert_msg(log_count(p.log, "could not complete runs=") > 0,
                  "%s: no completion had to wait (log %s)", f->name, p.log);
    ck_assert_int_eq(log_count(p.log, "database error"), 0);
    ck_assert_int_eq(th_stop(&p, SIGTERM, 30), 0);
    for (int i = 0; i < INFLIGHT; i++)
        free(inflight[i]);
    free(l.acked);
    PQfinish(admin);
    free(admin_ci);
    free(cfg);
    free(ci);
}

START_TEST(read_only_database)
{
    /* Made writable again without ending a session: opsrun has to notice. */
    static const char *const on[] = {
        "ALTER DATABASE \"{db}\" SET default_transaction_read_only = on",
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = '{db}'",
        NULL};
    static const char *const off[] = {"ALTER DATABASE \"{db}\" RESET default_transaction_read_only",
                                      NULL};
    const struct fault f = {"read-only", "e2e_dbf_ro", "the database is read-only", on, off, 8000};

    fault_under_load(&f);
}
END_TEST

START_TEST(full_database)
{
    static const char *const on[] = {
        "db:CREATE FUNCTION test_disk_full() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "RAISE EXCEPTION 'could not extend file \"base/1/2\": No space left on device' "
        "USING ERRCODE = 'disk_full', HINT = 'Check free disk space.'; END $$",
        "db:CREATE TRIGGER disk_full BEFORE INSERT OR UPDATE ON runs FOR EACH ROW "
        "EXECUTE FUNCTION test_disk_full()",
        "db:CREATE TRIGGER disk_full BEFORE INSERT OR UPDATE ON run_events FOR EACH ROW "
        "EXECUTE FUNCTION test_disk_full()",
        "db:CREATE TRIGGER disk_full BEFORE INSERT OR UPDATE ON workers FOR EACH ROW "
        "EXECUTE FUNCTION test_disk_full()",
        NULL};
    /* run_events is partitioned: DROP TRIGGER locks the partitions' copies
     * of the trigger before the parent, where an insert locks the parent
     * first, and the two deadlocked once under load. LOCK TABLE takes the
     * parent first, then its partitions, as the insert does. */
    static const char *const off[] = {
        "db:DROP TRIGGER disk_full ON runs",
        "db:LOCK TABLE run_events IN ACCESS EXCLUSIVE MODE; DROP TRIGGER disk_full ON run_events",
        "db:DROP TRIGGER disk_full ON workers", NULL};
    const struct fault f = {"full", "e2e_dbf_full", "the database is out of disk space", on, off,
                            8000};

    fault_under_load(&f);
}
END_TEST

/* A transaction holds LOCK TABLE runs for 20 s: requests answer within the
 * statement timeout and a margin, the dispatcher backs off, runs in flight
 * finish (their lease, 59 s here, outlasts the lock), nothing is lost. */
START_TEST(lock_on_runs)
{
    char *ci = th_db_create("e2e_dbf_lock");
    char *cfg = th_config_file("dbf-lock", "{\"db\": {\"statement_timeout_ms\": 1000},"
                                           " \"limits\": {\"submit_rate_per_s\": 0},"
                                           " \"queue\": {\"heartbeat_interval_s\": 1,"
                                           " \"orphan_after_s\": 60}}");
    const char *args[] = {"--config", cfg, NULL};
    PGconn *locker = th_pg(ci);
    struct th_proc p;
    struct load l;
    char *inflight[INFLIGHT];
    int claims_before, claims;
    long long t_on, t_off, recovered;
    const long long hold_ms = 20000, bound_ms = 2 * STATEMENT_TIMEOUT_MS + 3000;

    th_start(&p, ci, args, NULL);
    start_inflight(&p, inflight, 4000, 4000);
    load_start(&l, &p, "e2e_dbf_lock", "the database did not answer in time");
    th_sleep_ms(500);
    claims_before = log_count(p.log, "could not claim runs");

    PQclear(th_sql(locker, "BEGIN"));
    PQclear(th_sql(locker, "LOCK TABLE runs IN ACCESS EXCLUSIVE MODE"));
    t_on = th_now_ms();
    pthread_mutex_lock(&l.mu);
    l.fault_from_ms = t_on;
    pthread_mutex_unlock(&l.mu);
    while (th_now_ms() - t_on < hold_ms)
        th_sleep_ms(50);
    t_off = th_now_ms();
    PQclear(th_sql(locker, "COMMIT"));
    pthread_mutex_lock(&l.mu);
    l.fault_to_ms = t_off;
    pthread_mutex_unlock(&l.mu);
    claims = log_count(p.log, "could not claim runs") - claims_before;
    while (th_now_ms() - t_off < 30000 && load_get(&l, &l.last_ok_ms) <= t_off)
        th_sleep_ms(20);
    recovered = load_get(&l, &l.last_ok_ms);
    th_sleep_ms(500);
    load_stop(&l);

    fprintf(stderr,
            "db fault lock: %d answered 503 (reason \"%s\"); slowest answer during the lock "
            "%lld ms (statement timeout %d ms); %d failed claims in %lld s; first 202 %lld ms "
            "after the lock; %d acknowledged\n",
            l.n503, l.reason, l.slowest_fault_ms, STATEMENT_TIMEOUT_MS, claims, hold_ms / 1000,
            recovered - t_off, l.nacked);
    ck_assert_msg(l.bad == 0, "lock: %d unexpected answers, e.g. %s", l.bad, l.bad_body);
    ck_assert_msg(l.nwant > 0, "lock: no 503 named the timeout (last: \"%s\")", l.reason);
    ck_assert_msg(l.slowest_fault_ms <= bound_ms, "lock: an answer took %lld ms (bound %lld)",
                  l.slowest_fault_ms, bound_ms);
    /* Backing off: at most one claim per statement timeout plus the
     * shortest poll (0.5 s), not a loop. */
    ck_assert_msg(claims <= (int)(hold_ms / (STATEMENT_TIMEOUT_MS + 500)) + 2,
                  "lock: %d failed claims in %lld ms", claims, hold_ms);
    ck_assert_msg(recovered > t_off, "lock: nothing taken within 30 s after the lock");
    check_nothing_lost(ci, &l, inflight, "lock");
    ck_assert_msg(log_count(p.log, "could not complete runs=") > 0,
                  "lock: no completion had to wait (log %s)", p.log);
    ck_assert_int_eq(log_count(p.log, "database error"), 0);
    ck_assert_int_eq(th_stop(&p, SIGTERM, 30), 0);
    for (int i = 0; i < INFLIGHT; i++)
        free(inflight[i]);
    free(l.acked);
    PQfinish(locker);
    free(cfg);
    free(ci);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("db_faults");
    TCase *tc = tcase_create("db_faults");

    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, read_only_database);
    tcase_add_test(tc, full_database);
    tcase_add_test(tc, lock_on_runs);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
