/* tests/e2e/test_pooler.c — opsrun through Debian's PgBouncer (1.18) in
 * transaction mode, with db.prepared_statements false and queue.listen
 * false (docs/operations.md, "PgBouncer and poll-only mode"): a burst of
 * submissions all run to completion, a cancel, a stream of every run
 * (GET /stream) and a long-poll (GET /runs/{id}?wait=), and no database
 * error in opsrun's log. PgBouncer listens on a free loopback port, with
 * its ini and log in a directory of the test's own; it refuses to run as
 * root, so under root it runs as the cluster's owner, "postgres". */
#include "../support/harness.h"
#include "../support/sse.h"
#include "../support/tcp_proxy.h"

#include <errno.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define PGBOUNCER "/usr/sbin/pgbouncer"
#define BURST 300

struct bouncer {
    pid_t pid;
    int port;
    char dir[128];
    char url[256]; /* opsrun's database_url through it */
};

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");

    ck_assert_msg(f != NULL, "could not write %s: %s", path, strerror(errno));
    fputs(text, f);
    fclose(f);
    chmod(path, 0644);
}

/* The child: drops root for the cluster's owner (PgBouncer refuses root),
 * dies with the test, and becomes PgBouncer. */
static void bouncer_exec(const char *ini, const char *log)
{
    FILE *f = freopen(log, "a", stderr);

    (void)f;
    if (geteuid() == 0) {
        struct passwd *pw = getpwnam("postgres");
        if (!pw || setgid(pw->pw_gid) != 0 || setuid(pw->pw_uid) != 0)
            _exit(126);
    }
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* after setuid, which clears it */
    execl(PGBOUNCER, "pgbouncer", ini, (char *)NULL);
    _exit(127);
}

/* Starts PgBouncer in transaction mode in front of database db of the test
 * cluster and waits until a query passes through it. */
static void bouncer_start(struct bouncer *b, const char *db)
{
    char host[256], ini[4096], path[256], log[256];
    int pgport;
    long long t0;

    ck_assert_msg(access(PGBOUNCER, X_OK) == 0,
                  PGBOUNCER " is missing (scripts/test.sh installs the pgbouncer package)");
    th_pg_host_port(host, sizeof(host), &pgport);
    mkdir("/tmp/opsrun-tests", 0777);
    snprintf(b->dir, sizeof(b->dir), "/tmp/opsrun-tests/pgbouncer-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(b->dir));
    chmod(b->dir, 0777);
    b->port = th_free_port();
    snprintf(ini, sizeof(ini),
             "[databases]\n"
             "%s = host=%s port=%d dbname=%s user=opsrun\n"
             "[pgbouncer]\n"
             "listen_addr = 127.0.0.1\n"
             "listen_port = %d\n"
             "unix_socket_dir =\n"
             "auth_type = any\n"
             "pool_mode = transaction\n"
             "max_client_conn = 400\n"
             "default_pool_size = 10\n"
             ";; opsrun sends its settings as the options startup parameter,\n"
             ";; which PgBouncer 1.18 refuses: the database carries them instead\n"
             "ignore_startup_parameters = options\n"
             "logfile = %s/pgbouncer.log\n",
             db, host, pgport, db, b->port, b->dir);
    snprintf(path, sizeof(path), "%s/pgbouncer.ini", b->dir);
    write_file(path, ini);
    snprintf(log, sizeof(log), "%s/stderr.log", b->dir);
    b->pid = fork();
    ck_assert_int_ge(b->pid, 0);
    if (b->pid == 0)
        bouncer_exec(path, log);
    snprintf(b->url, sizeof(b->url), "host=127.0.0.1 port=%d dbname=%s user=opsrun", b->port, db);
    for (t0 = th_now_ms(); th_now_ms() - t0 < 20000; th_sleep_ms(100)) {
        PGconn *c = PQconnectdb(b->url);
        bool up = PQstatus(c) == CONNECTION_OK;
        PQfinish(c);
        if (up)
            return;
        ck_assert_msg(th_alive(b->pid), "pgbouncer exited; see %s", b->dir);
    }
    ck_abort_msg("pgbouncer did not accept connections within 20 s; see %s", b->dir);
}

static void bouncer_stop(struct bouncer *b)
{
    int status;

    kill(b->pid, SIGTERM);
    waitpid(b->pid, &status, 0);
}

/* Every line of the log holding needle, counted. */
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

/* POSTs BURST generic bodies as one array; asserts every item was taken
 * (202) and returns how many. */
static int submit_burst(const struct th_proc *p)
{
    size_t cap = (size_t)BURST * 96 + 16, len = 0;
    char *body = malloc(cap);
    struct th_resp r;
    json_t *runs;
    int ok = 0;

    len += (size_t)snprintf(body + len, cap - len, "[");
    for (int i = 0; i < BURST; i++)
        len += (size_t)snprintf(
            body + len, cap - len,
            "%s{\"alert_type\":\"demo\",\"data\":{\"duration_ms\":20,\"b\":%d}}", i ? "," : "", i);
    snprintf(body + len, cap - len, "]");
    th_post_json(p->url, "/alerts", body, &r);
    ck_assert_msg(r.status == 200, "burst: %ld %s", r.status, r.body);
    runs = json_object_get(r.json, "runs");
    for (size_t i = 0; i < json_array_size(runs); i++)
        ok += th_js(json_array_get(runs, i), "run_id") != NULL;
    th_resp_free(&r);
    free(body);
    return ok;
}

/* Reads the stream until want terminal events (completed status) arrived
 * or timeout_ms passed; returns how many did. */
static int stream_terminal_events(struct th_sse *s, int want, int timeout_ms)
{
    long long t0 = th_now_ms();
    int n = 0;

    while (n < want && th_now_ms() - t0 < timeout_ms) {
        struct th_sse_event ev;
        int r = th_sse_next(s, &ev, 1000);
        if (r < 0)
            break;
        if (r == 0)
            continue;
        if (ev.json && th_streq(th_js(ev.json, "status"), "completed") &&
            th_streq(ev.event, "status"))
            n++;
        th_sse_event_free(&ev);
    }
    return n;
}

/* A run of 30 s is cancelled while it runs; another is long-polled. */
static void cancel_and_long_poll(const struct th_proc *p)
{
    char *slow = th_submit(p, "{\"alert_type\":\"demo\",\"data\":{\"duration_ms\":30000}}", 202);
    char *lp = th_submit(p, "{\"alert_type\":\"demo\",\"data\":{\"duration_ms\":1500}}", 202);
    char path[160];
    struct th_resp r;
    long long t0;

    ck_assert_msg(th_wait_status(p, slow, "running", 20000), "%s never ran", slow);
    snprintf(path, sizeof(path), "/runs/%s/cancel", slow);
    th_post_json(p->url, path, NULL, &r);
    ck_assert_msg(r.status == 202, "cancel: %ld %s", r.status, r.body);
    th_resp_free(&r);
    th_expect_outcome(p, slow, "cancelled", 20);

    snprintf(path, sizeof(path), "/runs/%s?wait=30", lp);
    t0 = th_now_ms();
    th_get(p->url, path, &r);
    ck_assert_msg(r.status == 200 && th_streq(th_js(r.json, "status"), "completed") &&
                      th_streq(th_js(r.json, "outcome"), "succeeded"),
                  "long-poll after %lld ms: %ld %s", th_now_ms() - t0, r.status, r.body);
    th_resp_free(&r);
    free(slow);
    free(lp);
}

START_TEST(through_pgbouncer_transaction_mode)
{
    const char *db = "e2e_pooler";
    char *ci = th_db_create(db), *admin = th_conninfo("postgres");
    char *cfg =
        th_config_file("pooler", "{\"db\": {\"prepared_statements\": false},"
                                 " \"queue\": {\"listen\": false, \"poll_interval_ms\": 200},"
                                 " \"sse\": {\"poll_interval_ms\": 100},"
                                 " \"limits\": {\"submit_rate_per_s\": 0}}");
    const char *args[] = {"--config", cfg, NULL};
    PGconn *a = th_pg(admin), *pg = th_pg(ci);
    struct bouncer b;
    struct th_proc p;
    struct th_sse *s;
    int taken, seen;
    long long t0;

    /* What opsrun's options would have set, on the database instead. */
    PQclear(th_sql(a, "ALTER DATABASE \"%s\" SET statement_timeout = '10s'", db));
    PQclear(th_sql(a, "ALTER DATABASE \"%s\" SET jit = off", db));
    bouncer_start(&b, db);
    th_start(&p, b.url, args, NULL);
    s = th_sse_open(p.port, "/stream", NULL, 0);
    ck_assert_int_eq(s->status, 200);

    t0 = th_now_ms();
    taken = submit_burst(&p);
    ck_assert_int_eq(taken, BURST);
    while (th_now_ms() - t0 < 90000 &&
           th_sql_int(pg, "SELECT count(*) FROM runs WHERE outcome = 'succeeded'") < BURST)
        th_sleep_ms(200);
    ck_assert_int_eq(th_sql_int(pg, "SELECT count(*) FROM runs WHERE outcome = 'succeeded'"),
                     BURST);
    fprintf(stderr, "pooler: %d runs through pgbouncer in %lld ms\n", BURST, th_now_ms() - t0);
    seen = stream_terminal_events(s, BURST, 30000);
    ck_assert_msg(seen == BURST, "GET /stream carried %d of %d completions", seen, BURST);

    cancel_and_long_poll(&p);
    ck_assert_int_eq(th_stop(&p, SIGTERM, 30), 0);
    th_sse_close(s);
    ck_assert_msg(log_count(p.log, "database error") == 0 &&
                      log_count(p.log, "prepared statement") == 0 &&
                      log_count(p.log, "answering 5") == 0 && log_count(p.log, "could not") == 0,
                  "database errors in %s", p.log);
    bouncer_stop(&b);
    PQclear(th_sql(a, "ALTER DATABASE \"%s\" RESET ALL", db));
    PQfinish(pg);
    PQfinish(a);
    free(cfg);
    free(admin);
    free(ci);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("pooler");
    TCase *tc = tcase_create("pooler");

    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, through_pgbouncer_transaction_mode);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
