/* tests/e2e/test_upgrade.c — a rolling upgrade under load
 * (docs/operations.md, "Upgrades"). The previous release's binary
 * (scripts/previous-release.sh: opsrun as it was just before the newest
 * migration was added) serves a database it migrated itself, under a
 * steady stream of submissions. This checkout's binary starts beside it
 * on the same database and applies every migration the old one lacks,
 * while the old one keeps serving and running runs; both take submissions
 * and run runs; then the old one is taken out of the load and stopped, as
 * a rolling upgrade replaces each replica in turn.
 *
 * What holds: the new binary applied exactly the migrations the previous
 * release lacks; no request fails (every submission, to either binary, is
 * acknowledged); every run succeeds, none is lost and none runs twice (one
 * start per run, attempt 1); the old binary starts runs after the
 * migration as well as the new one, stays ready, and each binary reads
 * the runs the other created; neither logs a database error (an old
 * prepared statement broken by the new schema would), but for the old
 * binary's claims that waited for the migration's lock on runs and fail
 * once when it commits (old_database_errors). Every success is notified
 * to a webhook, from one outbox that both binaries deliver: each run's
 * run.succeeded arrives, under one delivery_id, and nothing is left
 * undelivered (check_notifications).
 *
 * Generic: whatever migrations this checkout has beyond the previous
 * release are applied under load, and the test prints which. So every new
 * migration must work with the binary before it: expand now, contract a
 * release later (docs/operations.md, "Upgrades").
 *
 * Skipped (exit 77, which ctest reports as skipped) when the source is not
 * a git checkout with its history (a source archive, a shallow clone), as
 * scripts/previous-release.sh then says. The previous binary is built
 * once per commit into the build tree (previous-release/), about 15 s the
 * first time. */
#include "../support/harness.h"
#include "../support/load.h"
#include "../support/receiver.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DB "e2e_upgrade"
#define SKIPPED 77
#define NOTIFY_PATH "/trail"

static const char *env_or_die(const char *name)
{
    const char *v = getenv(name);

    ck_assert_msg(v && *v, "%s is not set: run the tests through ctest", name);
    return v;
}

/* Runs scripts/previous-release.sh with args; its exit status, and its
 * standard output and error (heap). */
static int previous_release(const char *what, const char *arg, char **out, char **err)
{
    const char *src = getenv("OPSRUN_SOURCE_DIR");
    char script[512];
    const char *argv[] = {"bash", script, what, arg, NULL};

    snprintf(script, sizeof(script), "%s/scripts/previous-release.sh", src ? src : ".");
    /* Well below the test's own timeout (600 s), so that a hung build is ended
     * by th_run, with its process group, and not left holding the lock. */
    return th_run(argv, NULL, 240, out, err);
}

/* The migrations this checkout adds to the previous release, as
 * schema_migrations names them (the file name without ".sql"), in order,
 * separated by spaces (heap). */
static char *new_migrations(void)
{
    char *out = NULL, *err = NULL, *names, *line, *save = NULL;
    int rc = previous_release("commit", NULL, &out, &err);
    size_t len = 0, cap;

    ck_assert_msg(rc == 0, "previous-release.sh commit: exit %d: %s", rc, err);
    cap = strlen(out) + 1;
    names = calloc(1, cap);
    ck_assert_ptr_nonnull(names);
    line = strtok_r(out, "\n", &save); /* the previous release's commit */
    while ((line = strtok_r(NULL, "\n", &save)) != NULL) {
        size_t n = strlen(line);
        if (n > 4 && strcmp(line + n - 4, ".sql") == 0)
            n -= 4;
        len += (size_t)snprintf(names + len, cap - len, "%s%.*s", len ? " " : "", (int)n, line);
    }
    free(out);
    free(err);
    ck_assert_msg(len > 0,
                  "previous-release.sh names no migration newer than the previous release");
    return names;
}

/* The previous release's binary, built unless the build tree has it. */
static char *previous_binary(void)
{
    char *out = NULL, *err = NULL;
    int rc = previous_release("build", env_or_die("OPSRUN_PREVIOUS_CACHE"), &out, &err);

    ck_assert_msg(rc == 0, "could not build the previous release (exit %d): %s", rc, err);
    out[strcspn(out, "\n")] = '\0';
    fprintf(stderr, "%s", err);
    free(err);
    return out;
}

/* The worker id of the process p (from the workers table). */
static char *worker_of(PGconn *pg, const struct th_proc *p)
{
    char *w =
        th_sql_str(pg, "SELECT id FROM workers WHERE pid = %d AND status = 'running'", (int)p->pid);

    ck_assert_msg(w != NULL, "no workers row for pid %d", (int)p->pid);
    return w;
}

/* Runs started by worker since a time of the database. */
static long long started_by_since(PGconn *pg, const char *worker, const char *since)
{
    return th_sql_int(pg,
                      "SELECT count(*) FROM run_events WHERE message LIKE 'attempt %% started by "
                      "%s' AND created_at > '%s'::timestamptz",
                      worker, since);
}

/* Each binary reads a run the other created, after the migration, and
 * the old one is still ready. Two runs more in the database. */
static void cross_read(const struct th_proc *old, const struct th_proc *cur)
{
    char *by_old = th_submit(
        old, "{\"alert_type\":\"demo\",\"data\":{\"duration_ms\":10,\"by\":\"old\"}}", 202);
    char *by_new = th_submit(
        cur, "{\"alert_type\":\"demo\",\"data\":{\"duration_ms\":10,\"by\":\"new\"}}", 202);
    json_t *a = th_get_run(cur, by_old), *b = th_get_run(old, by_new);
    struct th_resp r;

    ck_assert_str_eq(th_js(a, "id"), by_old);
    ck_assert_str_eq(th_js(b, "id"), by_new);
    th_get(old->url, "/readyz", &r);
    ck_assert_msg(r.status == 200, "the old binary is not ready after the migration: %ld %s",
                  r.status, r.body);
    th_resp_free(&r);
    json_decref(a);
    json_decref(b);
    free(by_old);
    free(by_new);
}

/* Every acknowledged run is there, succeeded on attempt 1 and started
 * once; the others (extra of them) succeeded too. */
static void check_runs(PGconn *pg, struct th_load *l, const struct th_load_tally *t, int extra)
{
    for (int i = 0; i < t->acked; i++)
        ck_assert_msg(th_sql_int(pg,
                                 "SELECT count(*) FROM runs WHERE id = '%s' AND outcome = "
                                 "'succeeded' AND attempt = 1",
                                 th_load_acked_id(l, i)) == 1,
                      "acknowledged run %s was lost, failed or took another attempt",
                      th_load_acked_id(l, i));
    ck_assert_int_eq(th_sql_int(pg, "SELECT count(*) FROM runs"), t->acked + extra);
    ck_assert_int_eq(th_sql_int(pg, "SELECT count(*) FROM runs WHERE outcome <> 'succeeded'"), 0);
    ck_assert_int_eq(th_sql_int(pg, "SELECT count(*) FROM (SELECT run_id FROM run_events WHERE "
                                    "message LIKE 'attempt %% started by %%' GROUP BY run_id "
                                    "HAVING count(*) > 1) twice"),
                     0);
}

/* Every run's run.succeeded reached the receiver, each under one
 * delivery_id, and the outbox holds nothing undelivered. A delivery that
 * arrives twice (an attempt handed back at the old binary's drain, sent
 * again by the new one: at least once) is counted, not failed. */
static void check_notifications(PGconn *pg, struct receiver *rv, int runs)
{
    struct rcv_request *req;
    int n, twice = 0, pending;
    json_t *seen = json_object();

    ck_assert_msg(receiver_wait(rv, NOTIFY_PATH, runs, 30000) >= runs,
                  "fewer than %d notifications arrived", runs);
    th_sleep_ms(500);
    n = receiver_count(rv, NOTIFY_PATH, NULL);
    req = calloc((size_t)n, sizeof(*req));
    ck_assert_ptr_nonnull(req);
    n = receiver_requests(rv, NOTIFY_PATH, req, n);
    for (int i = 0; i < n; i++) {
        json_t *body = json_loads(req[i].body, 0, NULL);
        const char *id = json_string_value(json_object_get(json_object_get(body, "run"), "id"));
        json_t *first;

        ck_assert_msg(id && strcmp(req[i].event, "run.succeeded") == 0, "unexpected: %s %s",
                      req[i].event, req[i].body);
        first = json_object_get(seen, id);
        if (first) {
            ck_assert_str_eq(json_string_value(first), req[i].delivery);
            twice++;
        } else {
            json_object_set_new(seen, id, json_string(req[i].delivery));
        }
        json_decref(body);
    }
    pending = (int)th_sql_int(pg, "SELECT count(*) FROM notifications");
    fprintf(stderr, "upgrade: %d notifications for %d runs, %d of them a second time, %d left\n", n,
            (int)json_object_size(seen), twice, pending);
    ck_assert_int_eq((int)json_object_size(seen), runs);
    ck_assert_int_eq(pending, 0);
    json_decref(seen);
    rcv_requests_free(req, n);
    free(req);
}

/* The old binary's database errors but one kind; -1 with the first other
 * in line. The kind: a claim under way when the migration that adds
 * columns to runs commits. The old binary's statement expects runs as it
 * was; inside opsrun_claim the query, planned again after the commit,
 * returns the new columns: 42804 ("structure of query does not match
 * function result type"), once per claim that waited for the migration's
 * lock. The claim rolls back and the next one works: no run is lost or
 * started twice (check_runs). Returns how many there were. */
static int old_database_errors(const char *log, char *line, size_t cap)
{
    FILE *f = fopen(log, "r");
    int straddled = 0;

    ck_assert_msg(f != NULL, "cannot read %s", log);
    while (fgets(line, (int)cap, f)) {
        if (!strstr(line, "database error"))
            continue;
        if (strstr(line, "stmt=runs_claim") && strstr(line, "sqlstate=42804")) {
            straddled++;
            continue;
        }
        fclose(f);
        return -1;
    }
    fclose(f);
    return straddled;
}

START_TEST(previous_and_new_side_by_side)
{
    char *old_bin = previous_binary(), *ci = th_db_create_empty(DB), *before, *applied, *since;
    char *want = new_migrations(), config[1024], url[256], *cfg;
    struct receiver *rv = receiver_start();
    const char *args[] = {"--config", NULL, "--workers", "8", NULL};
    char *w_old, *w_new, line[1024];
    struct th_proc old, cur;
    struct th_load *load;
    struct th_load_tally t;
    long long old_during, started_old, started_new, max_before, t0, start_ms;
    int straddled;
    PGconn *pg;

    receiver_url(rv, NOTIFY_PATH, url, sizeof(url));
    snprintf(config, sizeof(config),
             "{\"limits\": {\"submit_rate_per_s\": 0},"
             " \"queue\": {\"heartbeat_interval_s\": 1, \"orphan_after_s\": 10},"
             " \"notifiers\": {\"trail\": {\"kind\": \"webhook\", \"url\": \"%s\"}},"
             " \"run_types\": {\"demo\": {\"action\": \"simulate\","
             "  \"notify\": [{\"on\": [\"succeeded\"], \"to\": \"trail\"}]}}}",
             url);
    cfg = th_config_file("upgrade", config);
    args[1] = cfg;
    th_start_bin(&old, old_bin, ci, args, NULL);
    pg = th_pg(ci);
    before = th_sql_str(pg, "SELECT string_agg(name, ' ' ORDER BY version) FROM schema_migrations");
    max_before = th_sql_int(pg, "SELECT max(version) FROM schema_migrations");
    w_old = worker_of(pg, &old);
    load = th_load_start("up", 2, 50, 20);
    th_load_targets(load, (const char *const[]){old.url}, 1);
    th_sleep_ms(1500);

    /* The new binary migrates as it starts, the old one serving meanwhile. */
    old_during = th_load_acked_by(load, old.url);
    t0 = th_now_ms();
    th_start(&cur, ci, args, NULL);
    start_ms = th_now_ms() - t0;
    old_during = th_load_acked_by(load, old.url) - old_during;
    since = th_sql_str(pg, "SELECT now()::text");
    applied = th_sql_str(pg,
                         "SELECT coalesce(string_agg(name, ' ' ORDER BY version), 'none') FROM "
                         "schema_migrations WHERE version > %lld",
                         max_before);
    ck_assert_str_eq(applied, want);
    w_new = worker_of(pg, &cur);
    th_load_targets(load, (const char *const[]){old.url, cur.url}, 2);
    cross_read(&old, &cur);
    th_sleep_ms(3000);

    /* Out of the load balancer first, then stopped: it drains. */
    th_load_targets(load, (const char *const[]){cur.url}, 1);
    started_old = started_by_since(pg, w_old, since);
    started_new = started_by_since(pg, w_new, since);
    ck_assert_int_eq(th_stop(&old, SIGTERM, 60), 0);
    th_sleep_ms(1500);
    th_load_stop(load);
    th_load_tally(load, &t);
    th_wait_all_completed(pg, 60000);

    fprintf(stderr,
            "upgrade: the previous release (%s) had migrations %s; the new binary applied %s "
            "as it started (%lld ms), while the old one acknowledged %lld submissions; after "
            "the migration the old one started %lld runs and the new one %lld; %d acknowledged "
            "(%d by the old binary, %d by the new), %d refused, %d failed\n",
            old_bin, before, applied, start_ms, old_during, started_old, started_new, t.acked,
            th_load_acked_by(load, old.url), th_load_acked_by(load, cur.url), t.refused, t.bad);
    ck_assert_msg(t.bad == 0 && t.refused == 0, "%d requests failed, %d refused (\"%s\"), e.g. %s",
                  t.bad, t.refused, t.refusal, t.bad_example);
    ck_assert_msg(old_during > 0, "the old binary acknowledged nothing while the new one started");
    ck_assert_msg(started_old > 0, "the old binary started no run after the migration");
    ck_assert_msg(started_new > 0, "the new binary started no run");
    check_runs(pg, load, &t, 2);
    check_notifications(pg, rv, t.acked + 2);
    straddled = old_database_errors(old.log, line, sizeof(line));
    ck_assert_msg(straddled >= 0, "old: %s", line);
    fprintf(stderr, "upgrade: %d claims of the old binary straddled the migration (42804)\n",
            straddled);
    ck_assert_msg(!th_log_find(cur.log, "database error", line, sizeof(line)), "new: %s", line);
    ck_assert_int_eq(th_stop(&cur, SIGTERM, 30), 0);

    receiver_stop(rv);
    th_load_free(load);
    PQfinish(pg);
    free(w_old);
    free(w_new);
    free(since);
    free(applied);
    free(want);
    free(before);
    free(cfg);
    free(ci);
    free(old_bin);
}
END_TEST

/* Skipped, before any test runs, when there is no previous release to
 * build: not a git checkout, or a shallow one. Any other failure of the
 * script fails the test. */
static bool previous_release_found(void)
{
    char *out = NULL, *err = NULL;
    int rc = previous_release("commit", NULL, &out, &err);

    if (rc == SKIPPED)
        fprintf(stderr, "upgrade: skipped: %s", err);
    free(out);
    free(err);
    return rc != SKIPPED;
}

int main(void)
{
    Suite *s;
    TCase *tc;

    if (!previous_release_found())
        return SKIPPED;
    s = suite_create("upgrade");
    tc = tcase_create("upgrade");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, previous_and_new_side_by_side);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
