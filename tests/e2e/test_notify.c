/* tests/e2e/test_notify.c — notifications and follow-up runs
 * (docs/notifications.md) on real processes with real receivers: a signed
 * webhook answered 503, 503, 200 gets exactly three attempts of one
 * delivery, each an event on the run; a 410 stops at once; the only
 * replica killed after a completion commits and before its delivery
 * delivers it once after a restart, with the follow-up created once;
 * Prometheus Alertmanager (the Debian package, started here) shows
 * OpsrunRunFailed for a failed run; a receiver that hangs holds only its
 * own notifier's slots; chains (failed pages, succeeded verifies after
 * delay_s, a self-loop stopped by queue.max_chain_depth, a missing
 * pointer); and the receiver of docs/examples/webhook_receiver.py accepts
 * opsrun's signature and refuses a wrong one.
 *
 * The receivers are tests/support/receiver.c, in this process, answering
 * as their paths say. Every test gets a fresh database and stops what it
 * started. */
#include "../support/harness.h"
#include "../support/receiver.h"
#include "../support/reload.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/digest.h"

#define SECRET "e2e-notify-secret-4f9a1c"
#define SECRET_ENV "OPSRUN_E2E_HOOK_SECRET=" SECRET
#define PERMANENT_ERROR_TEXT "permanent failure requested by \"fail\""

/* The members of a run type of the simulate action whose runs take 10 ms
 * and succeed (SIM) or fail for good (SIM_FAILING). */
#define SIM                                                                                        \
    "\"action\": \"simulate\", \"max_attempts\": 1, \"params\": {\"duration_ms\": 10, \"steps\": " \
    "1}"
#define SIM_FAILING                                                                                \
    "\"action\": \"simulate\", \"max_attempts\": 1,"                                               \
    " \"params\": {\"duration_ms\": 10, \"steps\": 1, \"fail\": \"permanent\"}"

/* ---- helpers ---- */

static long long q_int(const char *conninfo, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static long long q_int(const char *conninfo, const char *fmt, ...)
{
    char sql[2048];
    va_list ap;
    PGconn *c = th_pg(conninfo);
    long long v;

    va_start(ap, fmt);
    vsnprintf(sql, sizeof(sql), fmt, ap);
    va_end(ap);
    v = th_sql_int(c, "%s", sql);
    PQfinish(c);
    return v;
}

static char *q_str(const char *conninfo, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static char *q_str(const char *conninfo, const char *fmt, ...)
{
    char sql[2048];
    va_list ap;
    PGconn *c = th_pg(conninfo);
    char *v;

    va_start(ap, fmt);
    vsnprintf(sql, sizeof(sql), fmt, ap);
    va_end(ap);
    v = th_sql_str(c, "%s", sql);
    PQfinish(c);
    return v;
}

/* Waits up to timeout_ms until the query's count reaches want; returns the
 * last count. */
static long long wait_count(const char *conninfo, long long want, int timeout_ms, const char *sql)
{
    long long until = th_now_ms() + timeout_ms, n;

    while ((n = q_int(conninfo, "%s", sql)) < want && th_now_ms() < until)
        th_sleep_ms(50);
    return n;
}

/* Starts p on a fresh database db with the configuration config and extra
 * environment env (may be NULL); returns the conninfo (heap), and the
 * configuration file's path in *path (heap) when path is not NULL. */
static char *start_on(struct th_proc *p, const char *db, const char *config, const char *const *env,
                      char **path)
{
    char *ci = th_db_create(db), *file = th_config_file(db, config);
    const char *args[] = {"--config", file, NULL};

    th_start(p, ci, args, env);
    if (path)
        *path = file;
    else
        free(file);
    return ci;
}

/* The messages of the run's events of type `type`, oldest first, each
 * followed by "\n", into out; returns how many there are. token may be
 * NULL. */
static int run_events(const struct th_proc *p, const char *token, const char *id, const char *type,
                      char *out, size_t cap)
{
    char url[512];
    struct th_resp r;
    size_t i, len = 0;
    const json_t *e;
    int n = 0;

    snprintf(url, sizeof(url), "%s/runs/%s/events", p->url, id);
    ck_assert(th_http_token("GET", url, token, NULL, NULL, &r));
    ck_assert_msg(r.status == 200, "GET /runs/%s/events: HTTP %ld; %s", id, r.status, r.body);
    out[0] = '\0';
    json_array_foreach(json_object_get(r.json, "events"), i, e)
    {
        if (!th_streq(th_js(e, "type"), type))
            continue;
        len += (size_t)snprintf(out + len, len < cap ? cap - len : 0, "%s\n",
                                th_js(e, "message") ? th_js(e, "message") : "(null)");
        if (len >= cap)
            len = cap - 1;
        n++;
    }
    th_resp_free(&r);
    return n;
}

/* run_events until there are at least n, for up to timeout_ms. */
static int wait_events(const struct th_proc *p, const char *token, const char *id, const char *type,
                       int n, int timeout_ms, char *out, size_t cap)
{
    long long until = th_now_ms() + timeout_ms;
    int got;

    while ((got = run_events(p, token, id, type, out, cap)) < n && th_now_ms() < until)
        th_sleep_ms(50);
    return got;
}

/* The value of the sample `series` (its name and labels, as /metrics
 * writes them) in GET /metrics; -1 when there is none. */
static long long metric(const struct th_proc *p, const char *series)
{
    struct th_resp r;
    long long v = -1;
    size_t n = strlen(series);

    th_get(p->url, "/metrics", &r);
    ck_assert_int_eq(r.status, 200);
    for (const char *l = r.body; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (strncmp(l, series, n) == 0 && l[n] == ' ')
            v = atoll(l + n + 1);
    th_resp_free(&r);
    return v;
}

/* POST /alerts as token (NULL: none); asserts a 202 and returns the run id. */
static char *submit_as(const struct th_proc *p, const char *token, const char *body)
{
    char url[512], *id;
    struct th_resp r;

    snprintf(url, sizeof(url), "%s/alerts", p->url);
    ck_assert(th_http_token("POST", url, token, "application/json", body, &r));
    ck_assert_msg(r.status == 202, "POST /alerts %s: HTTP %ld; %s", body, r.status, r.body);
    id = strdup(th_js(r.json, "run_id"));
    th_resp_free(&r);
    return id;
}

/* GET path as token; asserts 200 and returns the JSON body (new reference). */
static json_t *get_as(const struct th_proc *p, const char *token, const char *path)
{
    char url[512];
    struct th_resp r;
    json_t *j;

    snprintf(url, sizeof(url), "%s%s", p->url, path);
    ck_assert(th_http_token("GET", url, token, NULL, NULL, &r));
    ck_assert_msg(r.status == 200 && r.json, "GET %s: HTTP %ld; %s", path, r.status, r.body);
    j = json_incref(r.json);
    th_resp_free(&r);
    return j;
}

/* ---- processes other than opsrun, and HTTP to them ---- */

#define MAX_CHILDREN 4
static pid_t children[MAX_CHILDREN];

static void kill_children(void)
{
    for (int i = 0; i < MAX_CHILDREN; i++)
        if (children[i] > 0)
            kill(children[i], SIGKILL);
}

/* Starts argv (argv[0] found on PATH) with the extra environment env (may
 * be NULL), its output appended to log; it is killed at exit if the test
 * does not stop it. */
static pid_t child_start(const char *const *argv, const char *const *env, const char *log)
{
    static bool registered;
    pid_t pid;

    if (!registered) {
        atexit(kill_children);
        registered = true;
    }
    pid = fork();
    ck_assert_msg(pid >= 0, "fork failed");
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        dup2(fd, 1);
        dup2(fd, 2);
        for (int i = 0; env && env[i]; i++)
            putenv((char *)env[i]);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    for (int i = 0; i < MAX_CHILDREN; i++)
        if (children[i] <= 0) {
            children[i] = pid;
            break;
        }
    return pid;
}

/* SIGTERM, up to 10 s for it to exit, then SIGKILL. */
static void child_stop(pid_t pid)
{
    int st;

    kill(pid, SIGTERM);
    for (long long until = th_now_ms() + 10000; th_now_ms() < until; th_sleep_ms(20))
        if (waitpid(pid, &st, WNOHANG) == pid)
            goto reaped;
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
reaped:
    for (int i = 0; i < MAX_CHILDREN; i++)
        if (children[i] == pid)
            children[i] = 0;
}

static size_t on_raw_body(char *p, size_t size, size_t n, void *arg)
{
    FILE *f = arg;
    return fwrite(p, size, n, f);
}

/* One request with libcurl to something that is not opsrun (th_http would
 * record it for the check against opsrun's openapi.yaml). headers: "Name:
 * value" lines, NULL-terminated, may be NULL. Returns the status, 0 when
 * nothing answered; *out (may be NULL) gets the body (heap). */
static long raw_http(const char *method, const char *url, const char *const *headers,
                     const char *body, char **out)
{
    CURL *c = curl_easy_init();
    struct curl_slist *h = curl_slist_append(NULL, "Expect:");
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    long status = 0;

    for (int i = 0; headers && headers[i]; i++)
        h = curl_slist_append(h, headers[i]);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_raw_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, f);
    if (body)
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    fclose(f);
    if (out)
        *out = buf;
    else
        free(buf);
    return status;
}

/* ---- a webhook answered 503, 503, 200 ---- */

#define CODES_PATH "/codes/503,503,200/audit"

/* What every attempt of the delivery carried: one delivery id, the event,
 * a valid signature of the same body, whose run is the failed run. */
static void check_attempts(const struct rcv_request *a, int n, const char *id, const json_t *run)
{
    json_t *body = json_loads(a[0].body, 0, NULL);
    const json_t *sent = json_object_get(body, "run");
    const char *key;
    json_t *v;

    for (int i = 0; i < n; i++) {
        long long t = 0;
        ck_assert_str_eq(a[i].method, "POST");
        ck_assert_str_eq(a[i].event, "run.failed");
        ck_assert_str_eq(a[i].delivery, a[0].delivery);
        ck_assert_str_eq(a[i].content_type, "application/json");
        ck_assert_str_eq(a[i].body, a[0].body);
        ck_assert_msg(receiver_signature_ok(SECRET, a[i].signature, a[i].body, &t),
                      "attempt %d: bad signature \"%s\"", i + 1, a[i].signature);
        ck_assert_msg(llabs((long long)time(NULL) - t) < 120, "attempt %d signed at %lld", i + 1,
                      t);
        ck_assert_msg(!receiver_signature_ok("another secret", a[i].signature, a[i].body, NULL),
                      "a signature any secret verifies");
    }
    ck_assert_msg(json_is_object(body) && json_object_size(body) == 3, "body %s", a[0].body);
    ck_assert_str_eq(th_js(body, "event"), "run.failed");
    ck_assert_str_eq(th_js(body, "delivery_id"), a[0].delivery);
    /* The run object as GET /runs/{id} shows it, member for member, but
     * for waiting_for, which that answer alone has (its type has no
     * concurrency key: no holders either). */
    ck_assert_str_eq(th_js(sent, "id"), id);
    ck_assert_str_eq(th_js(sent, "status"), "completed");
    ck_assert_str_eq(th_js(sent, "outcome"), "failed");
    ck_assert_str_eq(th_js(json_object_get(sent, "error"), "message"), PERMANENT_ERROR_TEXT);
    ck_assert_msg(json_is_null(json_object_get(run, "concurrency")), "the run has a key");
    ck_assert_msg(json_object_get(sent, "waiting_for") == NULL, "%s", a[0].body);
    json_object_foreach((json_t *)run, key, v)
    {
        if (strcmp(key, "waiting_for") == 0)
            continue;
        ck_assert_msg(json_equal(v, json_object_get(sent, key)), "run member \"%s\" differs: %s",
                      key, a[0].body);
    }
    ck_assert_int_eq(json_object_size(sent), json_object_size(run) - 1);
    json_decref(body);
}

START_TEST(webhook_retries_then_delivers)
{
    struct receiver *rv = receiver_start();
    const char *env[] = {SECRET_ENV, NULL};
    char url[256], config[2048], *ci, *id, events[4096], line[512];
    struct rcv_request a[4];
    struct th_proc p;
    json_t *run;
    int n;

    receiver_url(rv, CODES_PATH, url, sizeof(url));
    snprintf(config, sizeof(config),
             "{\"notifiers\": {\"audit\": {\"kind\": \"webhook\", \"url\": \"%s\","
             " \"secret\": \"{{env:OPSRUN_E2E_HOOK_SECRET}}\"}},"
             " \"run_types\": {\"boom\": {" SIM_FAILING ","
             "  \"notify\": [{\"on\": [\"failed\"], \"to\": \"audit\"}]}}}",
             url);
    ci = start_on(&p, "e2e_notify_retries", config, env, NULL);
    id = th_submit(&p, "{\"alert_type\": \"boom\", \"data\": {}}", 202);
    run = th_wait_done(&p, id, 30);
    ck_assert_str_eq(th_js(run, "outcome"), "failed");

    /* Three attempts (1 s, then 2 s apart), and no fourth. */
    ck_assert_int_eq(receiver_wait(rv, CODES_PATH, 3, 30000), 3);
    th_sleep_ms(2500);
    n = receiver_requests(rv, CODES_PATH, a, 4);
    ck_assert_int_eq(n, 3);
    ck_assert_int_eq(a[0].status, 503);
    ck_assert_int_eq(a[1].status, 503);
    ck_assert_int_eq(a[2].status, 200);
    check_attempts(a, n, id, run);
    rcv_requests_free(a, n);

    /* Each attempt is an event on the run; the outbox is empty. */
    ck_assert_int_eq(wait_events(&p, NULL, id, "notification", 3, 10000, events, sizeof(events)),
                     3);
    ck_assert_str_eq(events, "notified audit: 503 (run.failed), attempt 1 of 8, next in 1 s\n"
                             "notified audit: 503 (run.failed), attempt 2 of 8, next in 2 s\n"
                             "notified audit: 200 (run.failed)\n");
    ck_assert_int_eq(q_int(ci, "SELECT count(*) FROM notifications"), 0);
    ck_assert_int_eq(
        metric(&p, "opsrun_notifications_total{notifier=\"audit\",result=\"delivered\"}"), 1);
    ck_assert_int_eq(
        metric(&p, "opsrun_notifications_total{notifier=\"audit\",result=\"retried\"}"), 2);
    ck_assert_int_eq(
        metric(&p, "opsrun_notifications_total{notifier=\"audit\",result=\"gave_up\"}"), 0);
    ck_assert_int_eq(metric(&p, "opsrun_notification_latency_seconds_count{notifier=\"audit\"}"),
                     1);

    th_stop_clean(&p);
    ck_assert_msg(!th_log_find(p.log, SECRET, line, sizeof(line)), "the secret in the log: %s",
                  line);
    receiver_stop(rv);
    json_decref(run);
    free(id);
    free(ci);
}
END_TEST

/* A 410 ends the delivery at its first attempt. */
START_TEST(gone_stops_at_once)
{
    struct receiver *rv = receiver_start();
    char url[256], config[2048], *ci, *id, events[1024];
    struct th_proc p;
    json_t *run;

    receiver_url(rv, "/gone/old", url, sizeof(url));
    snprintf(config, sizeof(config),
             "{\"notifiers\": {\"old\": {\"kind\": \"webhook\", \"url\": \"%s\"}},"
             " \"run_types\": {\"boom\": {" SIM_FAILING ","
             "  \"notify\": [{\"on\": [\"failed\"], \"to\": \"old\"}]}}}",
             url);
    ci = start_on(&p, "e2e_notify_gone", config, NULL, NULL);
    id = th_submit(&p, "{\"alert_type\": \"boom\", \"data\": {}}", 202);
    run = th_wait_done(&p, id, 30);
    ck_assert_int_eq(wait_events(&p, NULL, id, "notification", 1, 10000, events, sizeof(events)),
                     1);
    ck_assert_str_eq(events,
                     "notified old: 410 (run.failed), the receiver is gone: not tried again\n");
    th_sleep_ms(2500); /* past the first retry's time */
    ck_assert_int_eq(receiver_count(rv, "/gone/old", NULL), 1);
    ck_assert_int_eq(q_int(ci, "SELECT count(*) FROM notifications"), 0);
    ck_assert_int_eq(metric(&p, "opsrun_notifications_total{notifier=\"old\",result=\"gave_up\"}"),
                     1);
    ck_assert_int_eq(metric(&p, "opsrun_notifications_total{notifier=\"old\",result=\"retried\"}"),
                     0);
    th_stop_clean(&p);
    receiver_stop(rv);
    json_decref(run);
    free(id);
    free(ci);
}
END_TEST

/* A run's deliveries to one notifier go out in the order of its
 * transitions: its end waits while its start is still owed (503, then
 * 200 a second later). */
#define ORDER_PATH "/codes/503,200/order"

START_TEST(deliveries_of_a_run_in_order)
{
    struct receiver *rv = receiver_start();
    char url[256], config[2048], *ci, *id;
    struct rcv_request a[4];
    struct th_proc p;
    int n;

    receiver_url(rv, ORDER_PATH, url, sizeof(url));
    snprintf(config, sizeof(config),
             "{\"notifiers\": {\"trail\": {\"kind\": \"webhook\", \"url\": \"%s\"}},"
             " \"run_types\": {\"quick\": {" SIM ","
             "  \"notify\": [{\"on\": [\"started\", \"succeeded\"], \"to\": \"trail\"}]}}}",
             url);
    ci = start_on(&p, "e2e_notify_order", config, NULL, NULL);
    id = th_submit(&p, "{\"alert_type\": \"quick\", \"data\": {}}", 202);
    th_expect_outcome(&p, id, "succeeded", 30);
    ck_assert_int_eq(receiver_wait(rv, ORDER_PATH, 3, 20000), 3);
    th_sleep_ms(1500);
    n = receiver_requests(rv, ORDER_PATH, a, 4);
    ck_assert_int_eq(n, 3);
    ck_assert_str_eq(a[0].event, "run.started");
    ck_assert_int_eq(a[0].status, 503);
    ck_assert_str_eq(a[1].event, "run.started");
    ck_assert_str_eq(a[1].delivery, a[0].delivery);
    ck_assert_int_eq(a[1].status, 200);
    ck_assert_str_eq(a[2].event, "run.succeeded");
    ck_assert_str_ne(a[2].delivery, a[0].delivery);
    ck_assert_int_eq(a[2].status, 200);
    ck_assert_msg(a[2].at_ms >= a[1].answered_ms, "the end arrived %lld ms before the start",
                  a[1].answered_ms - a[2].at_ms);
    rcv_requests_free(a, n);
    th_stop_clean(&p);
    receiver_stop(rv);
    free(id);
    free(ci);
}
END_TEST

/* A run handed back at shutdown and started again by the next process
 * started once: one run.started, no run.retrying (the hand-back spends no
 * attempt), then run.succeeded. */
#define TRAIL_PATH "/codes/200/trail"

START_TEST(started_once_across_a_release)
{
    struct receiver *rv = receiver_start();
    char url[256], config[2048], *ci, *path, *id;
    const char *args[3] = {"--config", NULL, NULL};
    struct rcv_request a[4];
    struct th_proc p;
    PGconn *db;
    int n;

    receiver_url(rv, TRAIL_PATH, url, sizeof(url));
    snprintf(config, sizeof(config),
             "{\"queue\": {\"shutdown_grace_s\": 1},"
             " \"notifiers\": {\"trail\": {\"kind\": \"webhook\", \"url\": \"%s\"}},"
             " \"run_types\": {\"long\": {\"action\": \"simulate\", \"notify\": [{\"on\":"
             " [\"started\", \"retrying\", \"succeeded\"], \"to\": \"trail\"}]}}}",
             url);
    ci = start_on(&p, "e2e_notify_release", config, NULL, &path);
    args[1] = path;
    id = th_submit(&p, "{\"alert_type\": \"long\", \"data\": {\"duration_ms\": 20000}}", 202);
    ck_assert_int_eq(receiver_wait(rv, TRAIL_PATH, 1, 20000), 1);
    th_stop_clean(&p); /* the 1 s grace ends: the run is handed back */
    ck_assert_int_eq(q_int(ci,
                           "SELECT count(*) FROM runs WHERE id = '%s' AND status = 'queued' AND "
                           "attempt = 0 AND started_at IS NOT NULL",
                           id),
                     1);
    db = th_pg(ci); /* the next attempt need not take 20 s */
    PQclear(th_sql(db, "UPDATE runs SET input = '{\"duration_ms\": 100}' WHERE id = '%s'", id));
    PQfinish(db);
    th_restart(&p, ci, args, NULL);
    th_expect_outcome(&p, id, "succeeded", 30);
    ck_assert_int_eq(receiver_wait(rv, TRAIL_PATH, 2, 20000), 2);
    th_sleep_ms(1500);
    n = receiver_requests(rv, TRAIL_PATH, a, 4);
    ck_assert_int_eq(n, 2);
    ck_assert_str_eq(a[0].event, "run.started");
    ck_assert_str_eq(a[1].event, "run.succeeded");
    rcv_requests_free(a, n);
    th_stop_clean(&p);
    receiver_stop(rv);
    free(id);
    free(path);
    free(ci);
}
END_TEST

/* The notification and follow_up events of a run's end come after its
 * terminal event, and its stream still ends there: resumed from before it,
 * the stream replays up to it and ends; resumed at it or past it (at a
 * notification event), 204. */
START_TEST(run_stream_ends_at_its_terminal_event)
{
    struct receiver *rv = receiver_start();
    char url[256], config[2048], path[256], *ci, *id;
    long long terminal, last, before;
    struct th_proc p;
    struct th_resp r;

    receiver_url(rv, TRAIL_PATH, url, sizeof(url));
    snprintf(config, sizeof(config),
             "{\"notifiers\": {\"trail\": {\"kind\": \"webhook\", \"url\": \"%s\"}},"
             " \"run_types\": {\"quick\": {" SIM ","
             "  \"notify\": [{\"on\": [\"succeeded\"], \"to\": \"trail\"}],"
             "  \"then\": [{\"on\": [\"succeeded\"], \"run_type\": \"demo\"}]}}}",
             url);
    ci = start_on(&p, "e2e_notify_stream_end", config, NULL, NULL);
    id = th_submit(&p, "{\"alert_type\": \"quick\", \"data\": {}}", 202);
    th_expect_outcome(&p, id, "succeeded", 30);
    ck_assert_int_eq(
        wait_count(ci, 1, 20000, "SELECT count(*) FROM run_events WHERE type = 'notification'"), 1);
    terminal = q_int(ci,
                     "SELECT min(id) FROM run_events WHERE run_id = '%s' AND type = 'status' "
                     "AND status = 'completed'",
                     id);
    last = q_int(ci, "SELECT max(id) FROM run_events WHERE run_id = '%s'", id);
    before =
        q_int(ci, "SELECT max(id) FROM run_events WHERE run_id = '%s' AND id < %lld", id, terminal);
    ck_assert_int_eq(q_int(ci,
                           "SELECT count(*) FROM run_events WHERE run_id = '%s' AND id > %lld "
                           "AND type IN ('notification', 'follow_up')",
                           id, terminal),
                     2);
    snprintf(path, sizeof(path), "/runs/%s/stream?last_event_id=%lld", id, terminal);
    th_get(p.url, path, &r);
    ck_assert_int_eq(r.status, 204);
    th_resp_free(&r);
    snprintf(path, sizeof(path), "/runs/%s/stream?last_event_id=%lld", id, last);
    th_get(p.url, path, &r);
    ck_assert_int_eq(r.status, 204);
    th_resp_free(&r);
    snprintf(path, sizeof(path), "/runs/%s/stream?last_event_id=%lld", id, before);
    th_get(p.url, path, &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_msg(strstr(r.body, "event: status") && !strstr(r.body, "event: notification") &&
                      !strstr(r.body, "event: follow_up"),
                  "the stream: %s", r.body);
    th_resp_free(&r);
    th_stop_clean(&p);
    receiver_stop(rv);
    free(id);
    free(ci);
}
END_TEST

/* ---- SIGKILL between the commit and the delivery ---- */

/* The notifier's only slot is taken by a first run's delivery, which the
 * receiver holds for a minute (the notifier waits as long); a second run's
 * delivery, committed with its completion, cannot be claimed meanwhile.
 * That is the moment after the commit and before the delivery, held open
 * as long as the test needs, with no hook in opsrun: the only replica is
 * killed in it. Started again, it delivers the second run's notification
 * (once, with the delivery id committed before the kill), and the
 * follow-up the completion created exists once. */
#define HELD_PATH "/codes/200@60000,200/held"

START_TEST(sigkill_after_commit_loses_nothing)
{
    struct receiver *rv = receiver_start();
    char url[256], config[2048], *ci, *path, *first, *second, *delivery, events[1024], child[160];
    const char *args[3] = {"--config", NULL, NULL};
    struct rcv_request a[4];
    struct th_proc p;
    int in_flight, n, mine = 0;

    receiver_url(rv, HELD_PATH, url, sizeof(url));
    snprintf(config, sizeof(config),
             "{\"notifiers\": {\"hook\": {\"kind\": \"webhook\", \"url\": \"%s\","
             " \"max_in_flight\": 1, \"timeout_ms\": 60000}},"
             " \"run_types\": {"
             "  \"job\": {" SIM ", \"notify\": [{\"on\": [\"succeeded\"], \"to\": \"hook\"}],"
             "   \"then\": [{\"on\": [\"succeeded\"], \"run_type\": \"check\"}]},"
             "  \"check\": {" SIM "}}}",
             url);
    ci = start_on(&p, "e2e_notify_sigkill", config, NULL, &path);
    args[1] = path;
    first = th_submit(&p, "{\"alert_type\": \"job\", \"data\": {\"n\": 1}}", 202);
    th_expect_outcome(&p, first, "succeeded", 30);
    ck_assert_int_eq(receiver_wait(rv, HELD_PATH, 1, 20000), 1);

    second = th_submit(&p, "{\"alert_type\": \"job\", \"data\": {\"n\": 2}}", 202);
    th_expect_outcome(&p, second, "succeeded", 30);
    th_sleep_ms(1500); /* a claim would have come by now, were there room */
    ck_assert_int_eq(receiver_count(rv, HELD_PATH, &in_flight), 1);
    ck_assert_int_eq(in_flight, 1);
    ck_assert_int_eq(q_int(ci,
                           "SELECT count(*) FROM notifications WHERE run_id = '%s' AND "
                           "event = 'run.succeeded' AND owner IS NULL AND attempts = 0",
                           second),
                     1);
    delivery = q_str(ci, "SELECT delivery_id FROM notifications WHERE run_id = '%s'", second);
    ck_assert_int_eq(q_int(ci, "SELECT count(*) FROM runs WHERE parent_id = '%s'", second), 1);

    ck_assert_int_eq(th_stop(&p, SIGKILL, 10), 128 + SIGKILL);
    th_restart(&p, ci, args, NULL);

    ck_assert_int_eq(
        wait_events(&p, NULL, second, "notification", 1, 20000, events, sizeof(events)), 1);
    ck_assert_str_eq(events, "notified hook: 200 (run.succeeded)\n");
    th_sleep_ms(1500); /* time for a second delivery, were there one */
    n = receiver_requests(rv, HELD_PATH, a, 4);
    for (int i = 0; i < n && i < 4; i++) {
        if (strcmp(a[i].delivery, delivery) != 0)
            continue;
        mine++;
        ck_assert_int_eq(a[i].status, 200);
        ck_assert_ptr_nonnull(strstr(a[i].body, second));
    }
    rcv_requests_free(a, n < 4 ? n : 4);
    ck_assert_int_eq(mine, 1);
    ck_assert_int_eq(q_int(ci, "SELECT count(*) FROM notifications WHERE run_id = '%s'", second),
                     0);
    ck_assert_int_eq(q_int(ci, "SELECT count(*) FROM runs WHERE parent_id = '%s'", second), 1);
    snprintf(child, sizeof(child), "%s.1", second);
    th_expect_outcome(&p, child, "succeeded", 30);

    th_stop_clean(&p);
    receiver_stop(rv);
    free(delivery);
    free(second);
    free(first);
    free(path);
    free(ci);
}
END_TEST

/* ---- Prometheus Alertmanager ---- */

#define ALERTMANAGER "/usr/bin/prometheus-alertmanager"
#define PUBLIC_URL "https://opsrun.example.com"

struct alertmanager {
    pid_t pid;
    int port;
    char dir[128], url[64];
};

/* Starts Debian's Alertmanager on a free port with a configuration that
 * routes every alert to a receiver that sends nothing, its storage in a
 * directory of its own, no clustering; waits until it is ready. */
static void alertmanager_start(struct alertmanager *am)
{
    char cfg[192], storage[192], listen[64], log[192], ready[96];
    FILE *f;

    ck_assert_msg(access(ALERTMANAGER, X_OK) == 0,
                  ALERTMANAGER " not found: install the Debian package prometheus-alertmanager "
                               "(scripts/test.sh does)");
    mkdir("/tmp/opsrun-tests", 0777);
    snprintf(am->dir, sizeof(am->dir), "/tmp/opsrun-tests/alertmanager-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(am->dir));
    snprintf(cfg, sizeof(cfg), "--config.file=%s/alertmanager.yml", am->dir);
    f = fopen(cfg + strlen("--config.file="), "w");
    ck_assert_ptr_nonnull(f);
    fputs("route:\n  receiver: nowhere\nreceivers:\n  - name: nowhere\n", f);
    fclose(f);
    snprintf(storage, sizeof(storage), "--storage.path=%s/data", am->dir);
    snprintf(log, sizeof(log), "%s/alertmanager.log", am->dir);
    for (int tries = 0; tries < 5; tries++) {
        am->port = th_free_port();
        snprintf(listen, sizeof(listen), "--web.listen-address=127.0.0.1:%d", am->port);
        snprintf(am->url, sizeof(am->url), "http://127.0.0.1:%d", am->port);
        snprintf(ready, sizeof(ready), "%s/-/ready", am->url);
        {
            const char *argv[] = {
                ALERTMANAGER, cfg, storage, listen, "--cluster.listen-address=", NULL};
            am->pid = child_start(argv, NULL, log);
        }
        for (long long until = th_now_ms() + 30000; th_now_ms() < until; th_sleep_ms(100)) {
            if (raw_http("GET", ready, NULL, NULL, NULL) == 200)
                return;
            if (!th_alive(am->pid))
                break; /* the port was taken in between, or worse: see the log */
        }
        child_stop(am->pid);
    }
    ck_abort_msg("Alertmanager did not get ready; its log: %s", log);
}

static void alertmanager_stop(struct alertmanager *am)
{
    char cmd[192];

    child_stop(am->pid);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", am->dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* The alert Alertmanager holds for run id (new reference), or NULL. */
static json_t *alert_of(const struct alertmanager *am, const char *id)
{
    char url[128], *body = NULL;
    json_t *all, *a, *found = NULL;
    size_t i;

    snprintf(url, sizeof(url), "%s/api/v2/alerts", am->url);
    ck_assert_int_eq(raw_http("GET", url, NULL, NULL, &body), 200);
    all = json_loads(body, 0, NULL);
    ck_assert_msg(json_is_array(all), "GET /api/v2/alerts: %s", body);
    json_array_foreach(all, i, a)
    {
        if (th_streq(th_js(json_object_get(a, "labels"), "run_id"), id))
            found = json_incref(a);
    }
    json_decref(all);
    free(body);
    return found;
}

START_TEST(alertmanager_shows_failed_run)
{
    struct alertmanager am;
    char config[2048], *ci, *id, events[1024], link[256];
    struct th_proc p;
    json_t *run, *alert = NULL;
    const json_t *labels, *notes;

    alertmanager_start(&am);
    snprintf(config, sizeof(config),
             "{\"http\": {\"public_url\": \"" PUBLIC_URL "\"},"
             " \"notifiers\": {\"am\": {\"kind\": \"alertmanager\", \"url\": \"%s\","
             " \"labels\": {\"team\": \"ops\"}}},"
             " \"run_types\": {\"boom\": {" SIM_FAILING ","
             "  \"notify\": [{\"on\": [\"failed\"], \"to\": \"am\"}]}}}",
             am.url);
    ci = start_on(&p, "e2e_notify_alertmanager", config, NULL, NULL);
    id = th_submit(&p, "{\"alert_type\": \"boom\", \"data\": {}}", 202);
    run = th_wait_done(&p, id, 30);
    ck_assert_int_eq(wait_events(&p, NULL, id, "notification", 1, 20000, events, sizeof(events)),
                     1);
    ck_assert_str_eq(events, "notified am: 200 (run.failed)\n");
    for (long long until = th_now_ms() + 10000; !alert && th_now_ms() < until; th_sleep_ms(100))
        alert = alert_of(&am, id);
    ck_assert_msg(alert != NULL, "Alertmanager has no alert for run %s", id);
    labels = json_object_get(alert, "labels");
    notes = json_object_get(alert, "annotations");
    ck_assert_str_eq(th_js(labels, "alertname"), "OpsrunRunFailed");
    ck_assert_str_eq(th_js(labels, "run_type"), "boom");
    ck_assert_str_eq(th_js(labels, "run_id"), id);
    ck_assert_str_eq(th_js(labels, "tenant"), th_js(run, "tenant"));
    ck_assert_str_eq(th_js(labels, "team"), "ops");
    ck_assert_int_eq(json_object_size(labels), 5);
    ck_assert_str_eq(th_js(notes, "description"), PERMANENT_ERROR_TEXT);
    ck_assert_str_eq(th_js(notes, "description"), th_js(json_object_get(run, "error"), "message"));
    snprintf(link, sizeof(link), PUBLIC_URL "/#/runs/%s", id);
    ck_assert_str_eq(th_js(alert, "generatorURL"), link);
    ck_assert_str_eq(th_js(json_object_get(alert, "status"), "state"), "active");

    th_stop_clean(&p);
    alertmanager_stop(&am);
    json_decref(alert);
    json_decref(run);
    free(id);
    free(ci);
}
END_TEST

/* ---- a receiver that hangs ---- */

/* Notifier "slow" (2 slots, 10 s timeouts) is held by a receiver that
 * answers after 30 s; type a notifies it, type b notifies "fast". With
 * slow's slots all taken, a's runs still complete (no worker waits for a
 * notification), a's other deliveries wait in the outbox, and every one of
 * b's runs completes and is delivered before slow's first attempts time
 * out, the earliest moment a slot of slow could be free again. */
#define SLOW_PATH "/sleep/30000/slow"
#define FAST_PATH "/codes/200/fast"
#define FAST_RUNS 20

START_TEST(slow_receiver_holds_only_its_own_slots)
{
    struct receiver *rv = receiver_start();
    char slow[256], fast[256], config[2048], *ci;
    struct rcv_request s[8], f[FAST_RUNS + 1];
    long long last_fast = 0;
    struct th_proc p;
    int in_flight, ns, nf;

    receiver_url(rv, SLOW_PATH, slow, sizeof(slow));
    receiver_url(rv, FAST_PATH, fast, sizeof(fast));
    snprintf(config, sizeof(config),
             "{\"notifiers\": {"
             "  \"slow\": {\"kind\": \"webhook\", \"url\": \"%s\", \"timeout_ms\": 10000,"
             "   \"max_in_flight\": 2, \"max_attempts\": 1},"
             "  \"fast\": {\"kind\": \"webhook\", \"url\": \"%s\"}},"
             " \"run_types\": {"
             "  \"a\": {" SIM ", \"notify\": [{\"on\": [\"succeeded\"], \"to\": \"slow\"}]},"
             "  \"b\": {" SIM ", \"notify\": [{\"on\": [\"succeeded\"], \"to\": \"fast\"}]}}}",
             slow, fast);
    ci = start_on(&p, "e2e_notify_slow", config, NULL, NULL);
    for (int i = 0; i < 4; i++) {
        char body[96];
        snprintf(body, sizeof(body), "{\"alert_type\": \"a\", \"data\": {\"i\": %d}}", i);
        free(th_submit(&p, body, 202));
    }
    ck_assert_int_eq(receiver_wait(rv, SLOW_PATH, 2, 20000), 2);
    ck_assert_int_eq(
        wait_count(ci, 4, 20000,
                   "SELECT count(*) FROM runs WHERE type = 'a' AND status = 'completed'"),
        4);
    ck_assert_int_eq(wait_count(ci, 2, 10000,
                                "SELECT count(*) FROM notifications WHERE notifier = 'slow' AND "
                                "owner IS NULL"),
                     2);

    for (int i = 0; i < FAST_RUNS; i++) {
        char body[96];
        snprintf(body, sizeof(body), "{\"alert_type\": \"b\", \"data\": {\"i\": %d}}", i);
        free(th_submit(&p, body, 202));
    }
    ck_assert_int_eq(receiver_wait(rv, FAST_PATH, FAST_RUNS, 60000), FAST_RUNS);
    ck_assert_int_eq(q_int(ci, "SELECT count(*) FROM runs WHERE type = 'b' AND outcome = "
                               "'succeeded'"),
                     FAST_RUNS);
    nf = receiver_requests(rv, FAST_PATH, f, FAST_RUNS + 1);
    ns = receiver_requests(rv, SLOW_PATH, s, 8);
    ck_assert_int_eq(nf, FAST_RUNS);
    for (int i = 0; i < nf; i++)
        last_fast = f[i].at_ms > last_fast ? f[i].at_ms : last_fast;
    fprintf(stderr, "slow receiver: its 2 slots taken; %d fast deliveries in %lld ms after\n",
            FAST_RUNS, last_fast - s[1].at_ms);
    /* A third request to slow comes only once an attempt has timed out. */
    ck_assert_msg(ns == 2 || s[2].at_ms > last_fast,
                  "a fast delivery arrived %lld ms after slow had a slot again",
                  last_fast - s[2].at_ms);
    ck_assert_msg(ns == 2 || s[2].at_ms - s[0].at_ms >= 9000,
                  "slow's third request came %lld ms after its first: more than 2 in flight",
                  s[2].at_ms - s[0].at_ms);
    receiver_count(rv, SLOW_PATH, &in_flight);
    ck_assert_int_ge(in_flight, 2);
    ck_assert_int_eq(wait_count(ci, FAST_RUNS, 10000,
                                "SELECT count(*) FROM run_events WHERE type = 'notification' AND "
                                "message = 'notified fast: 200 (run.succeeded)'"),
                     FAST_RUNS);
    rcv_requests_free(f, nf < FAST_RUNS + 1 ? nf : FAST_RUNS + 1);
    rcv_requests_free(s, ns < 8 ? ns : 8);

    th_stop_clean(&p); /* the attempts in flight are abandoned, their deliveries handed back */
    ck_assert_int_eq(q_int(ci, "SELECT count(*) FROM notifications WHERE notifier = 'slow' AND "
                               "owner IS NOT NULL"),
                     0);
    receiver_stop(rv);
    free(ci);
}
END_TEST

/* ---- follow-up runs ---- */

#define TOKEN "opsrun_e2e-notify-chains-7777777777"

/* Tenant acme's token "ci-bot"; restart pages on failure and verifies 2 s
 * after success; loop follows itself on failure, 3 deep at most; bad
 * names a value its runs do not have. */
static char *chains_config(void)
{
    char hex[65], *out = malloc(4096);

    sha256_hex(TOKEN, strlen(TOKEN), hex);
    snprintf(out, 4096,
             "{\"auth\": {\"tokens\": [{\"name\": \"ci-bot\", \"tenant\": \"acme\","
             " \"scopes\": [\"submit\", \"read\"], \"sha256\": \"%s\"}]},"
             " \"queue\": {\"max_chain_depth\": 3},"
             " \"run_types\": {"
             "  \"restart\": {" SIM ", \"then\": ["
             "   {\"on\": [\"failed\"], \"run_type\": \"page\", \"data\": {"
             "    \"why\": \"{{run:/error/message}}\", \"run\": \"{{run:/id}}\","
             "    \"text\": \"restart {{run:/id}} failed: {{run:/error/message}}\"}},"
             "   {\"on\": [\"succeeded\"], \"run_type\": \"verify\", \"delay_s\": 2,"
             "    \"data\": {\"after\": \"{{run:/id}}\", \"result\": \"{{run:/result}}\"}}]},"
             "  \"page\": {" SIM "},"
             "  \"verify\": {" SIM "},"
             "  \"loop\": {" SIM_FAILING ","
             "   \"then\": [{\"on\": [\"failed\"], \"run_type\": \"loop\"}]},"
             "  \"bad\": {" SIM ", \"then\": [{\"on\": [\"*\"], \"run_type\": \"page\","
             "   \"data\": {\"x\": \"{{run:/result/nope}}\"}}]}}}",
             hex);
    return out;
}

static char *start_chains(struct th_proc *p, const char *db)
{
    char *config = chains_config(), *ci = start_on(p, db, config, NULL, NULL);

    free(config);
    return ci;
}

static void wait_completed(const char *ci, const char *id)
{
    char sql[512];

    snprintf(sql, sizeof(sql), "SELECT count(*) FROM runs WHERE id = '%s' AND status = 'completed'",
             id);
    ck_assert_msg(wait_count(ci, 1, 30000, sql) == 1, "run %s did not complete", id);
}

/* What a follow-up inherits and points back to. */
static void check_child(const json_t *child, const char *parent, const char *type)
{
    ck_assert_str_eq(th_js(child, "type"), type);
    ck_assert_str_eq(th_js(child, "parent_id"), parent);
    ck_assert_str_eq(th_js(child, "tenant"), "acme");
    ck_assert_str_eq(th_js(child, "initiator"), "ci-bot");
}

START_TEST(chain_failed_pages_succeeded_verifies)
{
    struct th_proc p;
    char *ci = start_chains(&p, "e2e_notify_chains"), *failed, *ok, path[256], child[160],
         text[512], events[1024];
    json_t *run, *list;
    const json_t *in;

    failed = submit_as(&p, TOKEN,
                       "{\"alert_type\": \"restart\", \"data\": {\"fail\": "
                       "\"permanent\"}}");
    ok = submit_as(&p, TOKEN, "{\"alert_type\": \"restart\", \"data\": {}}");

    /* failed -> page, its input from the failed run. */
    snprintf(child, sizeof(child), "%s.1", failed);
    wait_completed(ci, failed);
    wait_completed(ci, child);
    snprintf(path, sizeof(path), "/runs/%s", child);
    run = get_as(&p, TOKEN, path);
    check_child(run, failed, "page");
    ck_assert_str_eq(th_js(run, "outcome"), "succeeded");
    in = json_object_get(run, "input");
    ck_assert_str_eq(th_js(in, "why"), PERMANENT_ERROR_TEXT);
    ck_assert_str_eq(th_js(in, "run"), failed);
    snprintf(text, sizeof(text), "restart %s failed: " PERMANENT_ERROR_TEXT, failed);
    ck_assert_str_eq(th_js(in, "text"), text);
    json_decref(run);
    ck_assert_int_eq(q_int(ci, "SELECT count(*) FROM runs WHERE parent_id = '%s'", failed), 1);
    ck_assert_int_eq(run_events(&p, TOKEN, failed, "follow_up", events, sizeof(events)), 1);
    snprintf(text, sizeof(text), "follow-up 1 (page) created: %s\n", child);
    ck_assert_str_eq(events, text);

    /* succeeded -> verify, due 2 s after the parent's end by the database's
     * clock, and started no earlier. */
    snprintf(child, sizeof(child), "%s.2", ok);
    wait_completed(ci, ok);
    ck_assert_int_eq(q_int(ci,
                           "SELECT (extract(epoch FROM c.run_at - p.completed_at) * 1000)::bigint "
                           "FROM runs c JOIN runs p ON p.tenant = c.tenant AND p.id = c.parent_id "
                           "WHERE c.id = '%s'",
                           child),
                     2000);
    wait_completed(ci, child);
    ck_assert_int_eq(
        q_int(ci, "SELECT count(*) FROM runs WHERE id = '%s' AND started_at >= run_at", child), 1);
    snprintf(path, sizeof(path), "/runs?parent_id=%s", ok);
    list = get_as(&p, TOKEN, path);
    ck_assert_int_eq(json_array_size(json_object_get(list, "runs")), 1);
    run = json_array_get(json_object_get(list, "runs"), 0);
    ck_assert_str_eq(th_js(run, "id"), child);
    check_child(run, ok, "verify");
    in = json_object_get(run, "input");
    ck_assert_str_eq(th_js(in, "after"), ok);
    ck_assert_msg(json_is_true(json_object_get(json_object_get(in, "result"), "simulated")),
                  "the parent's result is not the child's input.result");
    json_decref(list);
    ck_assert_int_eq(run_events(&p, TOKEN, ok, "follow_up", events, sizeof(events)), 1);
    snprintf(text, sizeof(text), "follow-up 2 (verify) created: %s, due in 2 s\n", child);
    ck_assert_str_eq(events, text);
    /* A root run has no parent. */
    snprintf(path, sizeof(path), "/runs/%s", ok);
    run = get_as(&p, TOKEN, path);
    ck_assert(json_is_null(json_object_get(run, "parent_id")));
    json_decref(run);

    th_stop_clean(&p);
    free(ok);
    free(failed);
    free(ci);
}
END_TEST

/* A type that follows itself on failure: the root and 3 follow-ups, the
 * last one with an event naming the limit. */
START_TEST(chain_self_loop_stops_at_depth)
{
    struct th_proc p;
    char *ci = start_chains(&p, "e2e_notify_loop"), *root, last[160], events[1024], want[512];

    root = submit_as(&p, TOKEN, "{\"alert_type\": \"loop\", \"data\": {}}");
    snprintf(last, sizeof(last), "%s.1.1.1", root);
    wait_completed(ci, last);
    th_sleep_ms(1500); /* time for a fifth run, were there one */
    ck_assert_int_eq(q_int(ci, "SELECT count(*) FROM runs WHERE type = 'loop'"), 4);
    ck_assert_int_eq(q_int(ci,
                           "SELECT count(*) FROM runs WHERE type = 'loop' AND outcome = 'failed' "
                           "AND chain_depth = length(id) - length(replace(id, '.', '')) AND "
                           "id LIKE '%s%%'",
                           root),
                     4);
    ck_assert_int_eq(run_events(&p, TOKEN, last, "follow_up", events, sizeof(events)), 1);
    snprintf(want, sizeof(want),
             "follow-up 1 (loop) not created: this run is 3 follow-ups down its chain, the most "
             "queue.max_chain_depth (3) allows\n");
    ck_assert_str_eq(events, want);
    th_stop_clean(&p);
    free(root);
    free(ci);
}
END_TEST

/* Data naming a value the run does not have: an event on the run, no
 * follow-up, and the run's own outcome untouched. */
START_TEST(chain_missing_pointer)
{
    struct th_proc p;
    char *ci = start_chains(&p, "e2e_notify_pointer"), *id, events[1024], path[256];
    json_t *run;

    id = submit_as(&p, TOKEN, "{\"alert_type\": \"bad\", \"data\": {}}");
    wait_completed(ci, id);
    ck_assert_int_eq(run_events(&p, TOKEN, id, "follow_up", events, sizeof(events)), 1);
    ck_assert_str_eq(events, "follow-up 1 (page) not created: its data names "
                             "{{run:/result/nope}}, which this run does not have\n");
    ck_assert_int_eq(q_int(ci, "SELECT count(*) FROM runs WHERE parent_id = '%s'", id), 0);
    snprintf(path, sizeof(path), "/runs/%s", id);
    run = get_as(&p, TOKEN, path);
    ck_assert_str_eq(th_js(run, "outcome"), "succeeded");
    json_decref(run);
    th_stop_clean(&p);
    free(id);
    free(ci);
}
END_TEST

/* ---- the receiver of the documentation ---- */

/* A request signed as opsrun signs, at time t, to the example receiver. */
static long signed_post(const char *url, const char *delivery, long long t)
{
    char body[256], h_sig[200], h_del[120];
    const char *headers[] = {"Content-Type: application/json", "Opsrun-Event: run.failed", h_del,
                             h_sig, NULL};
    size_t n;

    snprintf(body, sizeof(body),
             "{\"event\":\"run.failed\",\"delivery_id\":\"%s\",\"run\":{\"id\":\"by-hand\","
             "\"outcome\":\"failed\"}}",
             delivery);
    n = (size_t)snprintf(h_sig, sizeof(h_sig), "Opsrun-Signature: ");
    receiver_sign(SECRET, t, body, h_sig + n, sizeof(h_sig) - n);
    snprintf(h_del, sizeof(h_del), "Opsrun-Delivery: %s", delivery);
    return raw_http("POST", url, headers, body, NULL);
}

/* The lines of the file at path holding needle. */
static int lines_with(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    char line[1024];
    int n = 0;

    ck_assert_ptr_nonnull(f);
    while (fgets(line, sizeof(line), f))
        n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

/* The whole file at path (heap, NUL-terminated). */
static char *file_text(const char *path)
{
    FILE *f = fopen(path, "r");
    char *text = NULL;
    size_t len = 0;

    ck_assert_msg(f != NULL, "could not open %s", path);
    ck_assert_int_eq(getdelim(&text, &len, '\0', f) > 0, 1);
    fclose(f);
    return text;
}

/* docs/examples/webhook_receiver.py, run with python3: opsrun's delivery
 * signed with the shared secret is accepted (204, one line printed); a
 * notifier with another secret is refused (401, given up after its one
 * attempt). By hand: a repeated delivery id is acknowledged but not
 * handled again, and a signature five minutes old is refused. And
 * docs/notifications.md shows the file as it is. */
START_TEST(docs_receiver_example)
{
    const char *src = getenv("OPSRUN_SOURCE_DIR");
    const char *env[] = {SECRET_ENV, "OPSRUN_E2E_WRONG_SECRET=not-the-secret", NULL};
    const char *py_env[] = {"OPSRUN_HOOK_SECRET=" SECRET, NULL};
    char script[512], port[16], url[96], log[192], config[2048], *ci, *id, events[1024];
    struct th_proc p;
    pid_t py;
    int n;

    ck_assert_ptr_nonnull(src);
    snprintf(script, sizeof(script), "%s/docs/examples/webhook_receiver.py", src);
    /* docs/notifications.md shows the example as it is. */
    {
        char doc[512], *example = file_text(script), *text;
        snprintf(doc, sizeof(doc), "%s/docs/notifications.md", src);
        text = file_text(doc);
        while (strlen(example) && example[strlen(example) - 1] == '\n')
            example[strlen(example) - 1] = '\0';
        ck_assert_msg(strstr(text, example), "docs/notifications.md does not show %s as it is",
                      script);
        free(example);
        free(text);
    }
    snprintf(port, sizeof(port), "%d", th_free_port());
    snprintf(url, sizeof(url), "http://127.0.0.1:%s/opsrun", port);
    snprintf(log, sizeof(log), "/tmp/opsrun-tests/webhook-receiver-%d-%s.log", (int)getpid(), port);
    unlink(log);
    {
        const char *argv[] = {"python3", script, port, NULL};
        py = child_start(argv, py_env, log);
    }
    for (long long until = th_now_ms() + 20000;
         raw_http("GET", url, NULL, NULL, NULL) == 0 && th_now_ms() < until; th_sleep_ms(50))
        ck_assert_msg(th_alive(py), "the example receiver exited; its log: %s", log);

    snprintf(config, sizeof(config),
             "{\"notifiers\": {"
             "  \"hook\": {\"kind\": \"webhook\", \"url\": \"%s\","
             "   \"secret\": \"{{env:OPSRUN_E2E_HOOK_SECRET}}\"},"
             "  \"forged\": {\"kind\": \"webhook\", \"url\": \"%s\","
             "   \"secret\": \"{{env:OPSRUN_E2E_WRONG_SECRET}}\", \"max_attempts\": 1}},"
             " \"run_types\": {\"boom\": {" SIM_FAILING ","
             "  \"notify\": [{\"on\": [\"failed\"], \"to\": \"hook\"},"
             "   {\"on\": [\"failed\"], \"to\": \"forged\"}]}}}",
             url, url);
    ci = start_on(&p, "e2e_notify_docs_receiver", config, env, NULL);
    id = th_submit(&p, "{\"alert_type\": \"boom\", \"data\": {}}", 202);
    th_expect_outcome(&p, id, "failed", 30);
    n = wait_events(&p, NULL, id, "notification", 2, 20000, events, sizeof(events));
    ck_assert_msg(n == 2, "%d notification events: %s", n, events);
    ck_assert_msg(strstr(events, "notified hook: 204 (run.failed)\n"), "events: %s", events);
    ck_assert_msg(strstr(events, "notified forged: 401 (run.failed), gave up after 1 attempts\n"),
                  "events: %s", events);
    ck_assert_int_eq(lines_with(log, id), 1);
    ck_assert_int_eq(lines_with(log, "run.failed"), 1);

    /* The example's own rules. */
    ck_assert_int_eq(signed_post(url, "by-hand-delivery-1", (long long)time(NULL)), 204);
    ck_assert_int_eq(signed_post(url, "by-hand-delivery-1", (long long)time(NULL)), 204);
    ck_assert_int_eq(signed_post(url, "by-hand-delivery-2", (long long)time(NULL) - 301), 401);
    th_sleep_ms(200);
    ck_assert_int_eq(lines_with(log, "by-hand"), 1);
    ck_assert_int_eq(lines_with(log, "by-hand-delivery-2"), 0);

    th_stop_clean(&p);
    child_stop(py);
    free(id);
    free(ci);
}
END_TEST

/* The run type "job" notifying notifier "audit" at url (a webhook) of its
 * successes. */
#define NOTIFIED_CONFIG                                                                            \
    "{\"notifiers\": {\"audit\": {\"kind\": \"webhook\", \"url\": \"%s\"}},"                       \
    " \"run_types\": {\"job\": {" SIM ", \"notify\": [{\"on\": [\"succeeded\"], \"to\": "          \
    "\"audit\"}]}}}"

/* Waits until the database's rules of type send to notifier (maintenance
 * writes them after a reload, within a tick); a run that ends before then
 * ends under the rules before. */
static void wait_rules(const char *ci, const char *type, const char *notifier, bool want)
{
    long long until = th_now_ms() + 10000, n;

    do {
        n = q_int(ci,
                  "SELECT count(*) FROM run_type_rules WHERE type = '%s' AND notify::text LIKE "
                  "'%%\"%s\"%%'",
                  type, notifier);
        if ((n > 0) == want)
            return;
        th_sleep_ms(50);
    } while (th_now_ms() < until);
    ck_abort_msg("the rules of %s never %s notifier %s", type, want ? "named" : "stopped naming",
                 notifier);
}

/* One run of "job", succeeded. */
static void job_succeeds(const struct th_proc *p)
{
    char *id = th_submit(p, "{\"alert_type\": \"job\", \"data\": {}}", 202);

    th_expect_outcome(p, id, "succeeded", 30);
    free(id);
}

/* Notifiers follow a reload. One started without notifiers gets one by
 * POST /admin/reload, and the runs completed from then on are delivered
 * to it; a SIGHUP moves it to another URL, and the next delivery goes
 * there; a delivery that is to be retried when a reload removes its
 * notifier is logged, stays owed in the outbox, and is not sent. */
START_TEST(notifiers_follow_a_reload)
{
    struct receiver *rv = receiver_start();
    char u1[256], u2[256], u3[256], config[2048], line[512], *path;
    struct th_proc p;
    char *ci;
    int n;

    receiver_url(rv, "/ok/first", u1, sizeof(u1));
    receiver_url(rv, "/ok/second", u2, sizeof(u2));
    receiver_url(rv, "/codes/503/third", u3, sizeof(u3));
    ci = start_on(&p, "e2e_notify_reload", "{\"run_types\": {\"job\": {" SIM "}}}", NULL, &path);
    job_succeeds(&p);

    snprintf(config, sizeof(config), NOTIFIED_CONFIG, u1);
    th_config_rewrite(path, config);
    th_reload(&p, NULL, "notifiers.audit");
    wait_rules(ci, "job", "audit", true);
    job_succeeds(&p);
    ck_assert_int_eq(receiver_wait(rv, "/ok/first", 1, 10000), 1);

    snprintf(config, sizeof(config), NOTIFIED_CONFIG, u2);
    th_config_rewrite(path, config);
    th_reload_signal(&p);
    job_succeeds(&p);
    ck_assert_int_eq(receiver_wait(rv, "/ok/second", 1, 10000), 1);
    ck_assert_int_eq(receiver_count(rv, "/ok/first", NULL), 1);

    /* Answered 503 (to be retried in 1 s), then removed. */
    snprintf(config, sizeof(config), NOTIFIED_CONFIG, u3);
    th_config_rewrite(path, config);
    th_reload(&p, NULL, "notifiers.audit");
    job_succeeds(&p);
    ck_assert_int_eq(receiver_wait(rv, "/codes/503/third", 1, 10000), 1);
    th_config_rewrite(path, "{\"run_types\": {\"job\": {" SIM "}}}");
    th_reload(&p, NULL, "notifiers.audit");
    n = receiver_count(rv, "/codes/503/third", NULL);
    th_sleep_ms(3500);
    ck_assert_int_eq(receiver_count(rv, "/codes/503/third", NULL), n);
    ck_assert_int_eq(q_int(ci, "SELECT count(*) FROM notifications WHERE notifier = 'audit'"), 1);
    ck_assert_msg(th_log_find(p.log, "notifier removed notifier=audit", line, sizeof(line)),
                  "no line of the removed notifier in %s", p.log);

    th_stop_clean(&p);
    receiver_stop(rv);
    free(path);
    free(ci);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("notify");
    TCase *t = tcase_create("notify");

    tcase_set_timeout(t, 120);
    tcase_add_test(t, webhook_retries_then_delivers);
    tcase_add_test(t, gone_stops_at_once);
    tcase_add_test(t, deliveries_of_a_run_in_order);
    tcase_add_test(t, started_once_across_a_release);
    tcase_add_test(t, run_stream_ends_at_its_terminal_event);
    tcase_add_test(t, sigkill_after_commit_loses_nothing);
    tcase_add_test(t, alertmanager_shows_failed_run);
    tcase_add_test(t, slow_receiver_holds_only_its_own_slots);
    tcase_add_test(t, chain_failed_pages_succeeded_verifies);
    tcase_add_test(t, chain_self_loop_stops_at_depth);
    tcase_add_test(t, chain_missing_pointer);
    tcase_add_test(t, docs_receiver_example);
    tcase_add_test(t, notifiers_follow_a_reload);
    suite_add_tcase(s, t);
    return th_run_suite(s);
}
