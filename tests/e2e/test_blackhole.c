/* tests/e2e/test_blackhole.c — the network path between a replica and
 * PostgreSQL black-holes (docs/operations.md, "Database faults"): replica
 * A reaches the database through tests/support/tcp_proxy.c, replica B
 * directly. A runs four runs of a command that records in a ledger when
 * each attempt starts and stops; then the proxy stops forwarding without
 * closing anything. A notices within its configured silence
 * (db.tcp_user_timeout_ms; the proxy's kernel still acknowledges, so only
 * that wait can notice) and /readyz answers 503; its leases end and it
 * stops the commands; B rescues the runs and runs attempt 2. The ledger
 * shows every attempt started once, and attempt 1 stopped before attempt
 * 2 started (the lease fence held). When the path returns, A is ready
 * again and takes work. */
#include "../support/harness.h"
#include "../support/tcp_proxy.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define RUNS 4
#define SILENCE_MS 2000
#define CONNECT_S 2

static const char *const SCRIPT =
    "#!/bin/sh\n"
    "ledger=\"$1\"\n"
    "echo \"start $OPSRUN_RUN_ID $OPSRUN_ATTEMPT $(date +%s%N)\" >> \"$ledger\"\n"
    "trap 'echo \"stop $OPSRUN_RUN_ID $OPSRUN_ATTEMPT $(date +%s%N)\" >> \"$ledger\"; exit 143' "
    "TERM\n"
    "i=0\n"
    "while [ $i -lt 80 ]; do sleep 0.1; i=$((i + 1)); done\n"
    "echo \"end $OPSRUN_RUN_ID $OPSRUN_ATTEMPT $(date +%s%N)\" >> \"$ledger\"\n"
    "echo '{}'\n";

/* The ledger's time (ns) of kind ("start", "stop", "end") for run id's
 * attempt, and how many such lines there are. */
static int ledger_find(const char *ledger, const char *kind, const char *id, int attempt,
                       long long *ns)
{
    char line[256], k[16], rid[64];
    int a, n = 0;
    long long t;
    FILE *f = fopen(ledger, "r");

    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "%15s %63s %d %lld", k, rid, &a, &t) == 4 && strcmp(k, kind) == 0 &&
            strcmp(rid, id) == 0 && a == attempt) {
            n++;
            *ns = t;
        }
    if (f)
        fclose(f);
    return n;
}

/* GET /readyz until it answers want, at most timeout_ms; the time it took
 * from since_ms, or -1. Each probe of a black-holed replica may itself
 * take a few seconds. */
static long long readyz_until(const struct th_proc *p, long want, long long since_ms,
                              int timeout_ms)
{
    while (th_now_ms() - since_ms < timeout_ms) {
        struct th_resp r;
        char url[160];
        bool ok;

        snprintf(url, sizeof(url), "%s/readyz", p->url);
        ok = th_http("GET", url, NULL, NULL, &r);
        if (ok && r.status == want) {
            th_resp_free(&r);
            return th_now_ms() - since_ms;
        }
        th_resp_free(&r);
        th_sleep_ms(100);
    }
    return -1;
}

static char *config(const char *script, const char *ledger)
{
    char json[2048];

    snprintf(json, sizeof(json),
             "{\"db\": {\"statement_timeout_ms\": 1000, \"tcp_user_timeout_ms\": %d,"
             "  \"connect_timeout_s\": %d},"
             " \"queue\": {\"heartbeat_interval_s\": 2, \"orphan_after_s\": 8,"
             "  \"orphan_scan_interval_s\": 1, \"poll_interval_ms\": 200},"
             " \"run_types\": {\"ledger\": {\"action\": \"exec\", \"max_attempts\": 3,"
             "  \"params\": {\"argv\": [\"%s\", \"%s\"], \"grace_ms\": 2000}}}}",
             SILENCE_MS, CONNECT_S, script, ledger);
    return th_config_file("blackhole", json);
}

/* Every run of the ledger succeeded on attempt 2, each attempt started
 * once, and attempt 1 stopped (its lease over) before attempt 2 began. */
static void check_ledger(PGconn *pg, const char *ledger, char **ids)
{
    for (int i = 0; i < RUNS; i++) {
        long long stop1 = 0, start2 = 0, t;
        ck_assert_msg(th_sql_int(pg,
                                 "SELECT count(*) FROM runs WHERE id = '%s' AND attempt = 2 AND "
                                 "outcome = 'succeeded'",
                                 ids[i]) == 1,
                      "run %s did not succeed on attempt 2", ids[i]);
        ck_assert_int_eq(ledger_find(ledger, "start", ids[i], 1, &t), 1);
        ck_assert_int_eq(ledger_find(ledger, "start", ids[i], 2, &start2), 1);
        ck_assert_int_eq(ledger_find(ledger, "start", ids[i], 3, &t), 0);
        ck_assert_msg(ledger_find(ledger, "stop", ids[i], 1, &stop1) == 1,
                      "attempt 1 of %s was not stopped by its lease (ledger %s)", ids[i], ledger);
        ck_assert_int_eq(ledger_find(ledger, "end", ids[i], 1, &t), 0);
        ck_assert_msg(stop1 < start2, "run %s: attempt 2 started %lld ms before attempt 1 stopped",
                      ids[i], (stop1 - start2) / 1000000);
        fprintf(stderr, "black hole: run %s attempt 1 stopped %lld ms before attempt 2 began\n",
                ids[i], (start2 - stop1) / 1000000);
    }
}

START_TEST(black_hole_between_replica_and_database)
{
    char *ci = th_db_create("e2e_blackhole");
    char host[256], url[256], script[160], ledger[160], *cfg;
    int pgport;
    struct tcp_proxy *proxy;
    struct th_proc a, b;
    const char *args[] = {"--config", NULL, "--workers", "4", NULL};
    PGconn *pg = th_pg(ci);
    char *ids[RUNS], *after;
    long long t_hole, t_back, noticed, ready;
    FILE *f;

    mkdir("/tmp/opsrun-tests", 0777);
    snprintf(script, sizeof(script), "/tmp/opsrun-tests/blackhole-%d.sh", (int)getpid());
    snprintf(ledger, sizeof(ledger), "/tmp/opsrun-tests/blackhole-%d.ledger", (int)getpid());
    unlink(ledger);
    f = fopen(script, "w");
    ck_assert_ptr_nonnull(f);
    fputs(SCRIPT, f);
    fclose(f);
    chmod(script, 0755);
    cfg = config(script, ledger);
    args[1] = cfg;

    th_pg_host_port(host, sizeof(host), &pgport);
    proxy = tcp_proxy_start(host, pgport);
    snprintf(url, sizeof(url), "host=127.0.0.1 port=%d dbname=e2e_blackhole user=opsrun",
             tcp_proxy_port(proxy));
    th_start(&a, url, args, NULL);
    for (int i = 0; i < RUNS; i++) {
        char body[96];
        snprintf(body, sizeof(body), "{\"alert_type\":\"ledger\",\"data\":{\"i\":%d}}", i);
        ids[i] = th_submit(&a, body, 202);
    }
    for (int i = 0; i < RUNS; i++)
        ck_assert_msg(th_wait_status(&a, ids[i], "running", 20000), "%s never ran", ids[i]);
    th_start(&b, ci, args, NULL);
    th_sleep_ms(1000);

    tcp_proxy_blackhole(proxy, true);
    t_hole = th_now_ms();
    noticed = readyz_until(&a, 503, t_hole, 30000);
    fprintf(stderr,
            "black hole: replica A's /readyz answered 503 after %lld ms (silence %d ms, "
            "connect timeout %d s)\n",
            noticed, SILENCE_MS, CONNECT_S);
    ck_assert_msg(noticed >= 0 && noticed <= SILENCE_MS + CONNECT_S * 1000 + 3000,
                  "A noticed the black hole after %lld ms", noticed);
    /* A's leases end 6 s after its last heartbeat; B rescues the runs once
     * that heartbeat is 8 s old, and runs them. */
    for (int i = 0; i < RUNS; i++)
        ck_assert_msg(th_wait_status(&b, ids[i], "completed", 40000), "%s not completed by B",
                      ids[i]);
    tcp_proxy_blackhole(proxy, false);
    t_back = th_now_ms();
    ready = readyz_until(&a, 200, t_back, 30000);
    fprintf(stderr, "black hole: replica A ready again %lld ms after the path returned\n", ready);
    ck_assert_msg(ready >= 0, "A did not become ready within 30 s of the path's return");
    after = th_submit(&a, "{\"alert_type\":\"demo\",\"data\":{\"after\":1}}", 202);
    th_expect_outcome(&a, after, "succeeded", 30);

    check_ledger(pg, ledger, ids);
    ck_assert_int_eq(th_sql_int(pg, "SELECT count(*) FROM runs WHERE outcome <> 'succeeded'"), 0);
    {
        char line[1024];
        ck_assert_msg(
            th_log_find(a.log, "no answer from the database within 2000 ms", line, sizeof(line)),
            "A's log does not say what it noticed (%s)", a.log);
        ck_assert_msg(th_log_find(a.log, "not settling run=", line, sizeof(line)),
                      "A's log has no lease end (%s)", a.log);
        ck_assert_msg(!th_log_find(a.log, "database error", line, sizeof(line)), "%s", line);
    }
    ck_assert_int_eq(th_stop(&a, SIGTERM, 30), 0);
    ck_assert_int_eq(th_stop(&b, SIGTERM, 30), 0);
    tcp_proxy_stop(proxy);
    for (int i = 0; i < RUNS; i++)
        free(ids[i]);
    free(after);
    unlink(script);
    unlink(ledger);
    PQfinish(pg);
    free(cfg);
    free(ci);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("blackhole");
    TCase *tc = tcase_create("blackhole");

    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, black_hole_between_replica_and_database);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
