/* tests/e2e/test_api.c — the HTTP API of one real opsrun process against
 * docs/api.md: submissions, dedupe, errors, listing, cancel, retries,
 * timeouts, health, poll-only mode, a PostgreSQL restart while serving, and
 * SIGTERM drains. Every test case gets a fresh database (th_db_create) and
 * its own process. */
#include "../support/harness.h"

#include <pthread.h>
#include <regex.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- helpers ---- */

static bool req(const struct th_proc *p, const char *method, const char *path, const char *ct,
                const char *body, struct th_resp *r)
{
    char url[512];
    snprintf(url, sizeof(url), "%s%s", p->url, path);
    return th_http(method, url, ct, body, r);
}

/* GET path, asserting transport success and want. */
static void get_ok(const struct th_proc *p, const char *path, long want, struct th_resp *r)
{
    th_get(p->url, path, r);
    ck_assert_msg(r->status == want, "GET %s: HTTP %ld, want %ld; body %s", path, r->status, want,
                  r->body);
    ck_assert_msg(r->json != NULL, "GET %s: body is not JSON: %s", path, r->body);
}

static json_t *get_events(const struct th_proc *p, const char *id)
{
    char path[256];
    struct th_resp r;
    json_t *j;

    snprintf(path, sizeof(path), "/runs/%s/events", id);
    get_ok(p, path, 200, &r);
    j = json_incref(json_object_get(r.json, "events"));
    ck_assert_msg(json_is_array(j), "events is not an array: %s", r.body);
    th_resp_free(&r);
    return j;
}

static bool is_problem_type(const char *ct)
{
    return strncmp(ct, "application/problem+json", 24) == 0;
}

/* Whether the problem's errors[] names field. */
static bool has_error_field(const struct th_resp *r, const char *field)
{
    return th_has_error_field(json_object_get(r->json, "errors"), field);
}

static bool is_rfc3339z(const char *s)
{
    static const char pat[] =
        "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{1,9})?Z$";
    regex_t re;
    bool ok;

    if (!s)
        return false;
    ck_assert(regcomp(&re, pat, REG_EXTENDED | REG_NOSUB) == 0);
    ok = regexec(&re, s, 0, NULL, 0) == 0;
    regfree(&re);
    return ok;
}

/* An RFC 3339 UTC time offset_s from now. */
static void rfc3339_in(long offset_s, char *out, size_t cap)
{
    time_t t = time(NULL) + offset_s;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* ---- POST /alerts, GET /runs/{id}, GET /runs/{id}/events ---- */

static const char *const run_keys[] = {
    "id",           "tenant",      "initiator",      "type",
    "status",       "outcome",     "priority",       "attempt",
    "max_attempts", "progress",    "step",           "input",
    "result",       "error",       "summary_counts", "failure_summary",
    "context",      "external_id", "worker_id",      "created_at",
    "run_at",       "started_at",  "completed_at",   "updated_at"};

static const char *const event_keys[] = {"id",       "run_id", "type",    "status",    "outcome",
                                         "progress", "step",   "message", "created_at"};

START_TEST(test_submit_generic)
{
    struct th_proc p;
    struct th_resp r;
    const json_t *links, *ev;
    json_t *run, *events;
    char path[256];
    const char *id;
    size_t i;
    int phase = 0, nprogress = 0, last_pct = -1;
    long long last_id = 0;

    th_start_fresh(&p, "e2e_api_generic", NULL);
    th_post_json(p.url, "/alerts",
                 "{\"alert_type\":\"demo\",\"data\":{\"duration_ms\":400,\"steps\":4}}", &r);
    ck_assert_msg(r.status == 202, "HTTP %ld: %s", r.status, r.body);
    ck_assert_msg(strncmp(r.content_type, "application/json", 16) == 0, "Content-Type %s",
                  r.content_type);
    ck_assert_ptr_nonnull(r.json);
    id = th_js(r.json, "run_id");
    ck_assert_msg(id && *id, "no run_id: %s", r.body);
    snprintf(path, sizeof(path), "/runs/%s", id);
    ck_assert_msg(th_streq(r.location, path), "Location \"%s\", want \"%s\"", r.location, path);
    ck_assert_msg(th_streq(th_js(r.json, "status"), "queued"), "status: %s", r.body);
    ck_assert_msg(th_streq(th_js(r.json, "outcome"), "pending"), "outcome: %s", r.body);
    ck_assert_msg(json_is_false(json_object_get(r.json, "deduplicated")), "deduplicated: %s",
                  r.body);
    links = json_object_get(r.json, "links");
    ck_assert_msg(json_is_object(links), "links: %s", r.body);
    ck_assert_msg(th_streq(th_js(links, "self"), path), "links.self: %s", r.body);
    snprintf(path, sizeof(path), "/runs/%s/stream", id);
    ck_assert_msg(th_streq(th_js(links, "stream"), path), "links.stream: %s", r.body);
    snprintf(path, sizeof(path), "/runs/%s/cancel", id);
    ck_assert_msg(th_streq(th_js(links, "cancel"), path), "links.cancel: %s", r.body);

    th_expect_outcome(&p, id, "succeeded", 20);

    run = th_get_run(&p, id);
    for (i = 0; i < sizeof(run_keys) / sizeof(run_keys[0]); i++)
        ck_assert_msg(json_object_get(run, run_keys[i]) != NULL, "GET /runs/{id} lacks \"%s\"",
                      run_keys[i]);
    ck_assert(th_streq(th_js(run, "id"), id));
    ck_assert(th_streq(th_js(run, "type"), "demo"));
    ck_assert(th_streq(th_js(run, "status"), "completed"));
    ck_assert(th_streq(th_js(run, "outcome"), "succeeded"));
    ck_assert_int_eq(th_ji(run, "attempt"), 1);
    ck_assert_int_eq(th_ji(run, "max_attempts"), 3);
    ck_assert_int_eq(th_ji(run, "progress"), 100);
    ck_assert_int_eq(th_ji(json_object_get(run, "input"), "duration_ms"), 400);
    ck_assert_msg(json_is_string(json_object_get(run, "worker_id")), "worker_id not set");
    {
        static const char *const ts[] = {"created_at", "run_at", "started_at", "completed_at",
                                         "updated_at"};
        for (i = 0; i < sizeof(ts) / sizeof(ts[0]); i++)
            ck_assert_msg(is_rfc3339z(th_js(run, ts[i])), "%s \"%s\" is not RFC 3339 UTC (Z)",
                          ts[i], th_js(run, ts[i]) ? th_js(run, ts[i]) : "(null)");
        ck_assert_msg(strcmp(th_js(run, "created_at"), th_js(run, "started_at")) <= 0 &&
                          strcmp(th_js(run, "started_at"), th_js(run, "completed_at")) <= 0,
                      "timestamps out of order");
    }

    events = get_events(&p, id);
    ck_assert_msg(json_array_size(events) >= 4, "only %zu events", json_array_size(events));
    json_array_foreach(events, i, ev)
    {
        const char *type = th_js(ev, "type"), *status = th_js(ev, "status");
        for (size_t k = 0; k < sizeof(event_keys) / sizeof(event_keys[0]); k++)
            ck_assert_msg(json_object_get(ev, event_keys[k]) != NULL, "event %zu lacks \"%s\"", i,
                          event_keys[k]);
        ck_assert_msg(th_ji(ev, "id") > last_id, "events not oldest first at %zu", i);
        last_id = th_ji(ev, "id");
        ck_assert(th_streq(th_js(ev, "run_id"), id));
        ck_assert_msg(is_rfc3339z(th_js(ev, "created_at")), "event created_at");
        /* queued → running → progress… → completed */
        if (phase == 0) {
            ck_assert_msg(th_streq(type, "status") && th_streq(status, "queued"),
                          "first event is %s/%s, want status/queued", type, status);
            phase = 1;
        } else if (phase == 1) {
            ck_assert_msg(th_streq(type, "status") && th_streq(status, "running"),
                          "second event is %s/%s, want status/running", type, status);
            phase = 2;
        } else if (phase == 2 && th_streq(type, "progress")) {
            ck_assert(th_streq(status, "running"));
            ck_assert_msg(th_ji(ev, "progress") >= last_pct, "progress went backwards");
            last_pct = (int)th_ji(ev, "progress");
            nprogress++;
        } else if (phase == 2) {
            ck_assert_msg(th_streq(type, "status") && th_streq(status, "completed") &&
                              th_streq(th_js(ev, "outcome"), "succeeded"),
                          "event %zu is %s/%s, want status/completed", i, type, status);
            phase = 3;
        } else {
            ck_abort_msg("event after the terminal one: %s/%s", type, status);
        }
    }
    ck_assert_msg(phase == 3, "no completed event");
    ck_assert_msg(nprogress >= 1, "no progress events");
    json_decref(events);
    json_decref(run);
    th_resp_free(&r);
    th_stop_clean(&p);
}
END_TEST

/* ---- dedupe ---- */

START_TEST(test_dedupe)
{
    struct th_proc p;
    struct th_resp r;
    char *a, *b, *c, *d, path[256];
    const char *by_id = "{\"alert_type\":\"demo\",\"run_id\":\"dup-1\","
                        "\"data\":{\"duration_ms\":30000}}";

    th_start_fresh(&p, "e2e_api_dedupe", NULL);

    /* run_id: same body joins, a different body conflicts */
    a = th_submit(&p, by_id, 202);
    ck_assert_str_eq(a, "dup-1");
    th_post_json(p.url, "/alerts", by_id, &r);
    ck_assert_msg(r.status == 200, "repeat: HTTP %ld %s", r.status, r.body);
    ck_assert(json_is_true(json_object_get(r.json, "deduplicated")));
    ck_assert(th_streq(th_js(r.json, "run_id"), "dup-1"));
    ck_assert(json_is_object(json_object_get(r.json, "links")));
    th_resp_free(&r);
    th_post_json(p.url, "/alerts",
                 "{\"alert_type\":\"demo\",\"run_id\":\"dup-1\",\"data\":{\"duration_ms\":1}}", &r);
    th_check_problem(&r, 409, "run_id repeated with another body");
    th_resp_free(&r);

    /* no run_id: the same data joins the active run */
    b = th_submit(&p, "{\"alert_type\":\"demo\",\"data\":{\"duration_ms\":30000,\"k\":\"same\"}}",
                  202);
    th_post_json(p.url, "/alerts",
                 "{\"alert_type\":\"demo\",\"data\":{\"k\":\"same\",\"duration_ms\":30000}}", &r);
    ck_assert_msg(r.status == 200, "same data: HTTP %ld %s", r.status, r.body);
    ck_assert(json_is_true(json_object_get(r.json, "deduplicated")));
    ck_assert_msg(th_streq(th_js(r.json, "run_id"), b), "joined %s, want %s",
                  th_js(r.json, "run_id"), b);
    th_resp_free(&r);

    /* dedupe_key: different data, same key joins */
    c = th_submit(&p,
                  "{\"alert_type\":\"demo\",\"dedupe_key\":\"dk-1\","
                  "\"data\":{\"duration_ms\":30000,\"n\":1}}",
                  202);
    th_post_json(p.url, "/alerts",
                 "{\"alert_type\":\"demo\",\"dedupe_key\":\"dk-1\","
                 "\"data\":{\"duration_ms\":30000,\"n\":2}}",
                 &r);
    ck_assert_msg(r.status == 200, "dedupe_key: HTTP %ld %s", r.status, r.body);
    ck_assert(json_is_true(json_object_get(r.json, "deduplicated")));
    ck_assert_msg(th_streq(th_js(r.json, "run_id"), c), "joined %s, want %s",
                  th_js(r.json, "run_id"), c);
    th_resp_free(&r);

    /* Once the run is over, the same data starts a new run; the same run_id
     * with the same body still answers 200 with the finished run. */
    th_post_json(p.url, "/runs/dup-1/cancel", "", &r);
    ck_assert_msg(r.status == 200 || r.status == 202, "cancel: %ld", r.status);
    th_resp_free(&r);
    snprintf(path, sizeof(path), "/runs/%s/cancel", b);
    th_post_json(p.url, path, "", &r);
    th_resp_free(&r);
    snprintf(path, sizeof(path), "/runs/%s/cancel", c);
    th_post_json(p.url, path, "", &r);
    th_resp_free(&r);
    th_expect_outcome(&p, "dup-1", "cancelled", 10);
    th_expect_outcome(&p, b, "cancelled", 10);
    th_expect_outcome(&p, c, "cancelled", 10);
    th_post_json(p.url, "/alerts", by_id, &r);
    ck_assert_msg(r.status == 200, "repeat after completion: HTTP %ld %s", r.status, r.body);
    ck_assert(json_is_true(json_object_get(r.json, "deduplicated")));
    ck_assert(th_streq(th_js(r.json, "status"), "completed"));
    th_resp_free(&r);
    d = th_submit(&p, "{\"alert_type\":\"demo\",\"data\":{\"duration_ms\":0,\"k\":\"same\"}}", 202);
    ck_assert_str_ne(d, b);
    th_expect_outcome(&p, d, "succeeded", 10);
    free(a), free(b), free(c), free(d);
    th_stop_clean(&p);
}
END_TEST

/* ---- 50 concurrent identical submissions ---- */

#define CONCURRENT 50

struct sub_arg {
    const char *url;
    pthread_barrier_t *bar;
    long status;
    bool transport_ok;
    char run_id[160];
    bool dedup;
};

static void *concurrent_submit(void *p)
{
    struct sub_arg *a = p;
    struct th_resp r;

    pthread_barrier_wait(a->bar);
    a->transport_ok =
        th_http("POST", a->url, "application/json",
                "{\"alert_type\":\"demo\",\"data\":{\"duration_ms\":60000,\"tag\":\"c50\"}}", &r);
    a->status = r.status;
    if (r.json && th_js(r.json, "run_id"))
        snprintf(a->run_id, sizeof(a->run_id), "%s", th_js(r.json, "run_id"));
    a->dedup = r.json && json_is_true(json_object_get(r.json, "deduplicated"));
    th_resp_free(&r);
    return NULL;
}

START_TEST(test_concurrent_identical)
{
    struct th_proc p;
    struct sub_arg args[CONCURRENT];
    pthread_t th[CONCURRENT];
    pthread_barrier_t bar;
    char url[160], cancel[256];
    int n202 = 0, n200 = 0;
    struct th_resp r;
    const char *ci = th_start_fresh(&p, "e2e_api_concurrent", NULL);
    PGconn *db;

    snprintf(url, sizeof(url), "%s/alerts", p.url);
    pthread_barrier_init(&bar, NULL, CONCURRENT);
    for (int i = 0; i < CONCURRENT; i++) {
        args[i] = (struct sub_arg){.url = url, .bar = &bar};
        ck_assert(pthread_create(&th[i], NULL, concurrent_submit, &args[i]) == 0);
    }
    for (int i = 0; i < CONCURRENT; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&bar);
    for (int i = 0; i < CONCURRENT; i++) {
        ck_assert_msg(args[i].transport_ok, "request %d failed in transport", i);
        ck_assert_msg(args[i].status == 202 || args[i].status == 200, "request %d: HTTP %ld", i,
                      args[i].status);
        ck_assert_msg(th_streq(args[i].run_id, args[0].run_id), "request %d got run %s, not %s", i,
                      args[i].run_id, args[0].run_id);
        if (args[i].status == 202) {
            n202++;
            ck_assert(!args[i].dedup);
        } else {
            n200++;
            ck_assert(args[i].dedup);
        }
    }
    ck_assert_int_eq(n202, 1);
    ck_assert_int_eq(n200, CONCURRENT - 1);
    db = th_pg(ci);
    ck_assert_int_eq(th_sql_int(db, "SELECT count(*) FROM runs"), 1);
    PQfinish(db);
    snprintf(cancel, sizeof(cancel), "/runs/%s/cancel", args[0].run_id);
    th_post_json(p.url, cancel, "", &r);
    th_resp_free(&r);
    th_expect_outcome(&p, args[0].run_id, "cancelled", 10);
    th_stop_clean(&p);
}
END_TEST

/* ---- errors ---- */

START_TEST(test_errors)
{
    struct th_proc p;
    struct th_resp r;
    size_t big_n = 2u * 1024 * 1024;
    char *big, *big_id, body[512];
    const char *big_prefix = "{\"alert_type\":\"demo\",\"data\":{\"duration_ms\":0,\"blob\":\"";
    static const char *const bad_lists[][2] = {
        {"/runs?limit=0", "limit"},
        {"/runs?limit=501", "limit"},
        {"/runs?limit=abc", "limit"},
        {"/runs?status=bogus", "status"},
        {"/runs?outcome=bogus", "outcome"},
        {"/runs?cursor=garbage", "cursor"},
        {"/runs?cursor=djE6MTIzOmFiYw_garbage", "cursor"},
    };

    th_start_fresh(&p, "e2e_api_errors", NULL);

    ck_assert(req(&p, "POST", "/alerts", "application/json", "{\"alert_type\": \"demo\",", &r));
    th_check_problem(&r, 400, "malformed JSON");
    th_resp_free(&r);

    ck_assert(req(&p, "POST", "/alerts", "application/json", "", &r));
    th_check_problem(&r, 400, "empty body");
    th_resp_free(&r);

    /* An array is several submissions: its items that are no objects are
     * answered one by one (tests/e2e/test_bulk.c has the rest). */
    ck_assert(req(&p, "POST", "/alerts", "application/json", "[1,2]", &r));
    ck_assert_msg(r.status == 200, "array body: HTTP %ld: %s", r.status, r.body);
    ck_assert_int_eq(json_array_size(json_object_get(r.json, "runs")), 2);
    ck_assert_int_eq(json_integer_value(json_object_get(
                         json_array_get(json_object_get(r.json, "runs"), 1), "status")),
                     400);
    th_resp_free(&r);

    ck_assert(req(&p, "POST", "/alerts", "application/json",
                  "{\"alert_type\":5,\"priority\":\"high\",\"run_at\":\"yesterday\","
                  "\"run_id\":\"has space\",\"data\":[1],\"colour\":\"red\"}",
                  &r));
    th_check_problem(&r, 400, "wrong types");
    {
        static const char *const fields[] = {"alert_type", "priority", "run_at",
                                             "run_id",     "data",     "colour"};
        for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
            ck_assert_msg(has_error_field(&r, fields[i]), "errors[] does not name \"%s\": %s",
                          fields[i], r.body);
    }
    th_resp_free(&r);

    ck_assert(req(&p, "POST", "/alerts", "application/json",
                  "{\"alert_type\":\"demo\",\"priority\":1.5,\"dedupe_key\":\"\"}", &r));
    th_check_problem(&r, 400, "priority not an integer, empty dedupe_key");
    ck_assert_msg(has_error_field(&r, "priority") && has_error_field(&r, "dedupe_key"), "%s",
                  r.body);
    th_resp_free(&r);

    {
        char long_id[200];
        memset(long_id, 'x', 129);
        long_id[129] = '\0';
        snprintf(body, sizeof(body), "{\"alert_type\":\"demo\",\"run_id\":\"%s\"}", long_id);
        ck_assert(req(&p, "POST", "/alerts", "application/json", body, &r));
        th_check_problem(&r, 400, "run_id of 129 characters");
        ck_assert_msg(has_error_field(&r, "run_id"), "%s", r.body);
        th_resp_free(&r);
    }
    ck_assert(req(&p, "POST", "/alerts", "application/json",
                  "{\"alert_type\":\"demo\",\"priority\":1001}", &r));
    th_check_problem(&r, 400, "priority 1001");
    ck_assert_msg(has_error_field(&r, "priority"), "%s", r.body);
    th_resp_free(&r);
    ck_assert(req(&p, "POST", "/alerts", "application/json",
                  "{\"alert_type\":\"demo\",\"alert_type\":\"demo\"}", &r));
    th_check_problem(&r, 400, "duplicate key");
    th_resp_free(&r);
    ck_assert(req(&p, "POST", "/alerts", "application/json",
                  "{\"alert_type\":\"demo\",\"data\":{\"s\":\"\xff\xfe\"}}", &r));
    th_check_problem(&r, 400, "invalid UTF-8");
    th_resp_free(&r);

    ck_assert(req(&p, "POST", "/alerts", "application/json", "{\"data\":{}}", &r));
    th_check_problem(&r, 400, "alert_type missing");
    ck_assert_msg(has_error_field(&r, "alert_type"), "%s", r.body);
    th_resp_free(&r);

    big = malloc(big_n + 1);
    memset(big, ' ', big_n);
    memcpy(big, big_prefix, strlen(big_prefix));
    memset(big + strlen(big_prefix), 'a', big_n - strlen(big_prefix) - 3);
    memcpy(big + big_n - 3, "\"}}", 3);
    big[big_n] = '\0';
    ck_assert_msg(req(&p, "POST", "/alerts", "application/json", big, &r),
                  "2 MiB body: transport failure instead of a 413");
    th_check_problem(&r, 413, "2 MiB body");
    th_resp_free(&r);
    free(big);

    /* 512 KiB is under the 1 MiB default limit: accepted */
    big = malloc(512 * 1024 + 1);
    memset(big, 'b', 512 * 1024);
    memcpy(big, big_prefix, strlen(big_prefix));
    memcpy(big + 512 * 1024 - 3, "\"}}", 3);
    big[512 * 1024] = '\0';
    ck_assert(req(&p, "POST", "/alerts", "application/json", big, &r));
    ck_assert_msg(r.status == 202, "512 KiB body: HTTP %ld %.300s", r.status, r.body);
    big_id = strdup(th_js(r.json, "run_id"));
    th_resp_free(&r);
    free(big);
    th_expect_outcome(&p, big_id, "succeeded", 15);
    free(big_id);

    ck_assert(req(&p, "POST", "/alerts", "text/plain", "{\"alert_type\":\"demo\"}", &r));
    th_check_problem(&r, 415, "text/plain");
    th_resp_free(&r);

    ck_assert(req(&p, "POST", "/alerts", NULL, "{\"alert_type\":\"demo\"}", &r));
    th_check_problem(&r, 415, "no content type");
    th_resp_free(&r);

    ck_assert(req(&p, "POST", "/alerts", "application/json; charset=utf-8",
                  "{\"alert_type\":\"nosuchtype\"}", &r));
    th_check_problem(&r, 422, "unknown alert_type");
    th_resp_free(&r);

    ck_assert(req(&p, "GET", "/nope", NULL, NULL, &r));
    th_check_problem(&r, 404, "unknown path");
    th_resp_free(&r);

    ck_assert(req(&p, "DELETE", "/runs", NULL, NULL, &r));
    th_check_problem(&r, 405, "DELETE /runs");
    ck_assert_msg(strstr(r.allow, "GET") != NULL, "Allow \"%s\" for /runs", r.allow);
    th_resp_free(&r);

    ck_assert(req(&p, "GET", "/alerts", NULL, NULL, &r));
    th_check_problem(&r, 405, "GET /alerts");
    ck_assert_msg(strstr(r.allow, "POST") != NULL, "Allow \"%s\" for /alerts", r.allow);
    th_resp_free(&r);

    ck_assert(req(&p, "GET", "/runs/no-such-run", NULL, NULL, &r));
    th_check_problem(&r, 404, "GET unknown run");
    th_resp_free(&r);
    ck_assert(req(&p, "POST", "/runs/no-such-run/cancel", NULL, NULL, &r));
    th_check_problem(&r, 404, "cancel unknown run");
    th_resp_free(&r);
    ck_assert(req(&p, "GET", "/runs/no-such-run/events", NULL, NULL, &r));
    th_check_problem(&r, 404, "events of unknown run");
    th_resp_free(&r);

    for (size_t i = 0; i < sizeof(bad_lists) / sizeof(bad_lists[0]); i++) {
        ck_assert(req(&p, "GET", bad_lists[i][0], NULL, NULL, &r));
        th_check_problem(&r, 400, bad_lists[i][0]);
        ck_assert_msg(has_error_field(&r, bad_lists[i][1]), "%s: errors[] lacks %s: %s",
                      bad_lists[i][0], bad_lists[i][1], r.body);
        th_resp_free(&r);
    }

    /* Nothing but the 512 KiB run was stored by any of it. */
    get_ok(&p, "/runs", 200, &r);
    ck_assert_int_eq(json_array_size(json_object_get(r.json, "runs")), 1);
    th_resp_free(&r);
    ck_assert(th_alive(p.pid));
    th_stop_clean(&p);
}
END_TEST

/* ---- GET /runs ---- */

START_TEST(test_list)
{
    struct th_proc p;
    struct th_resp r;
    char body[512], later[40], path[600], *ids[12];
    json_t *all = json_array();
    const char *cursor = NULL;
    char cur[512] = "";
    int pages = 0;
    const json_t *run;
    size_t i;

    th_start_fresh(&p, "e2e_api_list",
                   "{\"run_types\":{\"other\":{\"action\":\"simulate\",\"max_attempts\":1}}}");
    rfc3339_in(3600, later, sizeof(later));
    /* 5 demo succeeded, 2 demo failed, 3 other succeeded, 2 demo queued */
    for (int k = 0; k < 12; k++) {
        const char *type = k >= 7 && k < 10 ? "other" : "demo";
        const char *fail = k >= 5 && k < 7 ? "permanent" : "never";
        if (k >= 10)
            snprintf(body, sizeof(body),
                     "{\"alert_type\":\"demo\",\"run_at\":\"%s\",\"data\":{\"n\":%d}}", later, k);
        else
            snprintf(body, sizeof(body),
                     "{\"alert_type\":\"%s\",\"data\":{\"n\":%d,\"duration_ms\":0,\"steps\":0,"
                     "\"fail\":\"%s\"}}",
                     type, k, fail);
        ids[k] = th_submit(&p, body, 202);
    }
    for (int k = 0; k < 10; k++)
        th_expect_outcome(&p, ids[k], k >= 5 && k < 7 ? "failed" : "succeeded", 20);

    {
        static const struct {
            const char *q, *key, *val;
            size_t n;
        } filters[] = {
            {"/runs?status=completed", "status", "completed", 10},
            {"/runs?status=queued", "status", "queued", 2},
            {"/runs?outcome=failed", "outcome", "failed", 2},
            {"/runs?outcome=succeeded", "outcome", "succeeded", 8},
            {"/runs?type=other", "type", "other", 3},
            {"/runs?type=demo&status=completed&outcome=succeeded", "type", "demo", 5},
            {"/runs?status=running", "status", "running", 0},
        };
        for (size_t f = 0; f < sizeof(filters) / sizeof(filters[0]); f++) {
            get_ok(&p, filters[f].q, 200, &r);
            ck_assert_msg(json_array_size(json_object_get(r.json, "runs")) == filters[f].n,
                          "%s: %zu runs, want %zu", filters[f].q,
                          json_array_size(json_object_get(r.json, "runs")), filters[f].n);
            json_array_foreach(json_object_get(r.json, "runs"), i, run) ck_assert_msg(
                th_streq(th_js(run, filters[f].key), filters[f].val), "%s: run %s has %s",
                filters[f].q, th_js(run, "id"), th_js(run, filters[f].key));
            ck_assert(json_is_null(json_object_get(r.json, "next_cursor")));
            th_resp_free(&r);
        }
    }

    /* Paging: 12 runs by 4 makes three full pages, the last without cursor. */
    do {
        if (cursor)
            snprintf(path, sizeof(path), "/runs?limit=4&cursor=%s", cur);
        else
            snprintf(path, sizeof(path), "/runs?limit=4");
        get_ok(&p, path, 200, &r);
        ck_assert_msg(json_array_size(json_object_get(r.json, "runs")) == 4, "page %d has %zu",
                      pages, json_array_size(json_object_get(r.json, "runs")));
        json_array_foreach(json_object_get(r.json, "runs"), i, run)
            json_array_append(all, (json_t *)run);
        cursor = th_js(r.json, "next_cursor");
        ck_assert_msg(cursor || json_is_null(json_object_get(r.json, "next_cursor")),
                      "next_cursor is neither a string nor null: %s", r.body);
        if (cursor)
            snprintf(cur, sizeof(cur), "%s", cursor), cursor = cur;
        pages++;
        th_resp_free(&r);
        ck_assert_msg(pages <= 3, "more than 3 pages of 4 for 12 runs");
    } while (cursor);
    ck_assert_int_eq(pages, 3);
    ck_assert_int_eq(json_array_size(all), 12);
    for (i = 0; i < 12; i++) {
        const json_t *a = json_array_get(all, i);
        for (size_t k = i + 1; k < 12; k++) {
            const json_t *b = json_array_get(all, k);
            ck_assert_msg(!th_streq(th_js(a, "id"), th_js(b, "id")), "run %s listed twice",
                          th_js(a, "id"));
        }
        if (i + 1 < 12) {
            const json_t *b = json_array_get(all, i + 1);
            int c = strcmp(th_js(a, "created_at"), th_js(b, "created_at"));
            ck_assert_msg(c > 0 || (c == 0 && strcmp(th_js(a, "id"), th_js(b, "id")) > 0),
                          "not newest first at %zu: %s %s / %s %s", i, th_js(a, "created_at"),
                          th_js(a, "id"), th_js(b, "created_at"), th_js(b, "id"));
        }
    }
    /* newest first: the last submission comes first */
    ck_assert_str_eq(th_js(json_array_get(all, 0), "id"), ids[11]);
    ck_assert_str_eq(th_js(json_array_get(all, 11), "id"), ids[0]);

    /* limit=5 over 12: 5, 5, 2 */
    get_ok(&p, "/runs?limit=5", 200, &r);
    ck_assert_int_eq(json_array_size(json_object_get(r.json, "runs")), 5);
    ck_assert(th_js(r.json, "next_cursor") != NULL);
    th_resp_free(&r);

    /* cancel the two delayed runs so the drain is quick */
    for (int k = 10; k < 12; k++) {
        snprintf(path, sizeof(path), "/runs/%s/cancel", ids[k]);
        th_post_json(p.url, path, "", &r);
        ck_assert_int_eq(r.status, 200);
        th_resp_free(&r);
    }
    for (int k = 0; k < 12; k++)
        free(ids[k]);
    json_decref(all);
    th_stop_clean(&p);
}
END_TEST

/* ---- cancel ---- */

START_TEST(test_cancel)
{
    struct th_proc p;
    struct th_resp r;
    char body[256], later[40], path[256];
    char *q, *q2, *run;
    long long t0, took;
    char *o;

    th_start_fresh(&p, "e2e_api_cancel", NULL);

    /* queued (delayed an hour) → 200 completed/cancelled at once */
    rfc3339_in(3600, later, sizeof(later));
    snprintf(body, sizeof(body), "{\"alert_type\":\"demo\",\"run_at\":\"%s\"}", later);
    q = th_submit(&p, body, 202);
    snprintf(path, sizeof(path), "/runs/%s/cancel", q);
    th_post_json(p.url, path, "", &r);
    ck_assert_msg(r.status == 200, "cancel queued: HTTP %ld %s", r.status, r.body);
    ck_assert(th_streq(th_js(r.json, "status"), "completed"));
    ck_assert(th_streq(th_js(r.json, "outcome"), "cancelled"));
    ck_assert(th_streq(th_js(r.json, "id"), q));
    th_resp_free(&r);
    th_post_json(p.url, path, "", &r);
    th_check_problem(&r, 409, "cancel of a completed run");
    th_resp_free(&r);

    /* run_at with a numeric offset is stored and shown in UTC */
    q2 = th_submit(&p, "{\"alert_type\":\"demo\",\"run_at\":\"2999-01-01T01:30:00+02:00\"}", 202);
    {
        json_t *j = th_get_run(&p, q2);
        ck_assert_msg(strncmp(th_js(j, "run_at"), "2998-12-31T23:30:00", 19) == 0 &&
                          is_rfc3339z(th_js(j, "run_at")),
                      "run_at %s, want 2998-12-31T23:30:00Z", th_js(j, "run_at"));
        ck_assert(th_streq(th_js(j, "status"), "queued"));
        ck_assert(json_is_null(json_object_get(j, "started_at")));
        json_decref(j);
    }
    snprintf(path, sizeof(path), "/runs/%s/cancel", q2);
    th_post_json(p.url, path, "", &r);
    ck_assert_int_eq(r.status, 200);
    th_resp_free(&r);
    free(q2);

    /* running → 202 cancelling, then completed/cancelled within 1.5 s */
    run = th_submit(&p, "{\"alert_type\":\"demo\",\"data\":{\"duration_ms\":10000}}", 202);
    ck_assert_msg(th_wait_status(&p, run, "running", 10000), "run never started");
    snprintf(path, sizeof(path), "/runs/%s/cancel", run);
    t0 = th_now_ms();
    th_post_json(p.url, path, "", &r);
    ck_assert_msg(r.status == 202, "cancel running: HTTP %ld %s", r.status, r.body);
    ck_assert_msg(th_streq(th_js(r.json, "status"), "cancelling"), "status %s",
                  th_js(r.json, "status"));
    ck_assert(th_streq(th_js(r.json, "outcome"), "pending"));
    th_resp_free(&r);
    o = th_wait_run(p.url, run, 10);
    took = th_now_ms() - t0;
    ck_assert_msg(o && th_streq(o, "cancelled"), "outcome %s", o ? o : "(timeout)");
    fprintf(stderr, "cancel of a running run took %lld ms\n", took);
    ck_assert_msg(took <= 1500, "cancel took %lld ms (> 1500)", took);
    free(o);
    th_post_json(p.url, path, "", &r);
    th_check_problem(&r, 409, "cancel after cancelled");
    th_resp_free(&r);
    free(q);
    free(run);
    th_stop_clean(&p);
}
END_TEST

/* ---- retries ---- */

START_TEST(test_retries)
{
    struct th_proc p;
    json_t *run, *events;
    const json_t *ev;
    char *first2, *transient, *permanent;
    size_t i;
    int running = 0, retried = 0;
    bool after_running = false;

    th_start_fresh(&p, "e2e_api_retries", NULL);
    first2 = th_submit(
        &p, "{\"alert_type\":\"demo\",\"data\":{\"duration_ms\":0,\"fail\":\"first:2\"}}", 202);
    transient = th_submit(
        &p, "{\"alert_type\":\"demo\",\"data\":{\"duration_ms\":0,\"fail\":\"transient\"}}", 202);
    permanent = th_submit(
        &p, "{\"alert_type\":\"demo\",\"data\":{\"duration_ms\":0,\"fail\":\"permanent\"}}", 202);

    th_expect_outcome(&p, first2, "succeeded", 20);
    run = th_get_run(&p, first2);
    ck_assert_int_eq(th_ji(run, "attempt"), 3);
    json_decref(run);
    events = get_events(&p, first2);
    json_array_foreach(events, i, ev)
    {
        if (!th_streq(th_js(ev, "type"), "status"))
            continue;
        if (th_streq(th_js(ev, "status"), "running")) {
            running++;
            after_running = true;
        } else if (th_streq(th_js(ev, "status"), "queued") && after_running) {
            retried++;
            ck_assert_msg(th_js(ev, "message") && strstr(th_js(ev, "message"), "failed"),
                          "retry event message: %s", th_js(ev, "message"));
            after_running = false;
        }
    }
    ck_assert_int_eq(running, 3);
    ck_assert_int_eq(retried, 2);
    json_decref(events);

    th_expect_outcome(&p, transient, "failed", 20);
    run = th_get_run(&p, transient);
    ck_assert_int_eq(th_ji(run, "attempt"), 3);
    ck_assert_int_eq(th_ji(run, "max_attempts"), 3);
    ck_assert_msg(th_streq(th_js(json_object_get(run, "error"), "code"), "simulated_transient"),
                  "error.code %s", th_js(json_object_get(run, "error"), "code"));
    json_decref(run);

    th_expect_outcome(&p, permanent, "failed", 20);
    run = th_get_run(&p, permanent);
    ck_assert_int_eq(th_ji(run, "attempt"), 1);
    ck_assert(json_is_object(json_object_get(run, "error")));
    json_decref(run);
    free(first2), free(transient), free(permanent);
    th_stop_clean(&p);
}
END_TEST

/* ---- timeout ---- */

START_TEST(test_timeout)
{
    struct th_proc p;
    json_t *run;
    char *id;
    long long t0, took;

    th_start_fresh(&p, "e2e_api_timeout",
                   "{\"run_types\":{\"slow\":{\"action\":\"simulate\",\"timeout_s\":1}}}");
    t0 = th_now_ms();
    id = th_submit(&p, "{\"alert_type\":\"slow\",\"data\":{\"duration_ms\":5000}}", 202);
    th_expect_outcome(&p, id, "timed_out", 10);
    took = th_now_ms() - t0;
    fprintf(stderr, "timeout_s 1 run ended after %lld ms\n", took);
    ck_assert_msg(took < 3000, "timed out only after %lld ms", took);
    run = th_get_run(&p, id);
    ck_assert(th_streq(th_js(run, "type"), "slow"));
    ck_assert_msg(th_streq(th_js(json_object_get(run, "error"), "code"), "timeout"),
                  "error.code %s", th_js(json_object_get(run, "error"), "code"));
    ck_assert_int_eq(th_ji(run, "attempt"), 1);
    json_decref(run);
    free(id);
    th_stop_clean(&p);
}
END_TEST

/* ---- health ---- */

START_TEST(test_health)
{
    struct th_proc p;
    struct th_resp r;
    const json_t *engine, *w;
    size_t i;
    bool found = false;

    th_start_fresh(&p, "e2e_api_health", NULL);
    get_ok(&p, "/healthz", 200, &r);
    ck_assert(th_streq(th_js(r.json, "status"), "ok"));
    engine = json_object_get(r.json, "engine");
    ck_assert_msg(json_is_object(engine), "no engine object: %s", r.body);
    ck_assert(th_js(engine, "worker_id") != NULL);
    ck_assert_int_eq(th_ji(engine, "workers"), 8);
    ck_assert(json_is_integer(json_object_get(engine, "busy")));
    ck_assert(json_is_true(json_object_get(engine, "claiming")));
    ck_assert(json_is_object(json_object_get(r.json, "runs")));
    json_array_foreach(json_object_get(r.json, "workers"), i, w)
    {
        if (th_streq(th_js(w, "id"), th_js(engine, "worker_id")))
            found = th_streq(th_js(w, "status"), "running");
    }
    ck_assert_msg(found, "own worker row missing or not running: %s", r.body);
    th_resp_free(&r);
    get_ok(&p, "/livez", 200, &r);
    ck_assert(th_streq(th_js(r.json, "status"), "ok"));
    th_resp_free(&r);
    get_ok(&p, "/readyz", 200, &r);
    ck_assert(th_streq(th_js(r.json, "status"), "ready"));
    th_resp_free(&r);
    /* SIGINT drains like SIGTERM. */
    th_check_exit0(&p, th_stop(&p, SIGINT, 20));
}
END_TEST

/* ---- poll-only mode ---- */

START_TEST(test_poll_only)
{
    struct th_proc p;
    struct th_resp r;
    char *ids[3];
    const char *ci = th_start_fresh(&p, "e2e_api_pollonly",
                                    "{\"queue\":{\"listen\":false,\"poll_interval_ms\":200}}");
    PGconn *db = th_pg(ci);
    char *o;

    get_ok(&p, "/healthz", 200, &r);
    ck_assert_msg(th_streq(th_js(json_object_get(r.json, "engine"), "wakeups"), "poll"), "%s",
                  r.body);
    th_resp_free(&r);
    for (int i = 0; i < 3; i++) {
        char body[128];
        snprintf(body, sizeof(body), "{\"alert_type\":\"demo\",\"data\":{\"n\":%d}}", i);
        ids[i] = th_submit(&p, body, 202);
    }
    for (int i = 0; i < 3; i++) {
        th_expect_outcome(&p, ids[i], "succeeded", 15);
        free(ids[i]);
    }
    /* A run this process was not told about (as from another replica
     * without NOTIFY) is found by polling alone. */
    PQclear(th_sql(db, "INSERT INTO runs (tenant, id, type, max_attempts, timeout_s, input, "
                       "identity_hash, request_hash) VALUES ('default', 'from-sql', 'demo', 3, "
                       "60, '{\"duration_ms\": 0}', 'from-sql', 'from-sql')"));
    o = th_wait_run(p.url, "from-sql", 5);
    ck_assert_msg(o && th_streq(o, "succeeded"), "SQL-inserted run: %s", o ? o : "(timeout)");
    free(o);
    PQfinish(db);
    th_stop_clean(&p);
}
END_TEST

/* ---- PostgreSQL restart while serving ---- */

struct hammer {
    const struct th_proc *p;
    atomic_bool stop;
    int requests, n503, transport, bad;
    long bad_status;
    char bad_body[512];
    char accepted[256][32];
    int naccepted;
};

static void hammer_check(struct hammer *h, const struct th_resp *r, bool ok)
{
    h->requests++;
    if (!ok) {
        h->transport++;
        return;
    }
    if (r->status == 503 && is_problem_type(r->content_type) && r->json &&
        th_ji(r->json, "status") == 503) {
        h->n503++;
        return;
    }
    if (r->status >= 200 && r->status < 300)
        return;
    h->bad++;
    h->bad_status = r->status;
    snprintf(h->bad_body, sizeof(h->bad_body), "%s [%s]", r->body, r->content_type);
}

static void *hammer_main(void *arg)
{
    struct hammer *h = arg;

    for (int n = 0; !atomic_load(&h->stop); n++) {
        struct th_resp r;
        char body[160];
        bool ok;

        snprintf(body, sizeof(body),
                 "{\"alert_type\":\"demo\",\"data\":{\"duration_ms\":0,\"steps\":0,\"h\":%d}}", n);
        ok = req(h->p, "POST", "/alerts", "application/json", body, &r);
        hammer_check(h, &r, ok);
        if (ok && r.status == 202 && th_js(r.json, "run_id") && h->naccepted < 256)
            snprintf(h->accepted[h->naccepted++], sizeof(h->accepted[0]), "%s",
                     th_js(r.json, "run_id"));
        th_resp_free(&r);
        ok = req(h->p, "GET", "/runs?limit=5", NULL, NULL, &r);
        hammer_check(h, &r, ok);
        th_resp_free(&r);
        ok = req(h->p, "GET", "/runs/before-restart", NULL, NULL, &r);
        hammer_check(h, &r, ok);
        th_resp_free(&r);
        ok = req(h->p, "GET", "/healthz", NULL, NULL, &r);
        h->requests++;
        if (!ok)
            h->transport++;
        else if (r.status != 200 && r.status != 503) {
            h->bad++;
            h->bad_status = r.status;
            snprintf(h->bad_body, sizeof(h->bad_body), "healthz: %s", r.body);
        }
        th_resp_free(&r);
        th_sleep_ms(50);
    }
    return NULL;
}

START_TEST(test_pg_restart)
{
    struct th_proc p;
    struct th_resp r;
    struct hammer h = {0};
    pthread_t th;
    long long t0, until;
    char *id = NULL, *across;

    th_start_fresh(&p, "e2e_api_pgrestart", NULL);
    id = th_submit(&p,
                   "{\"alert_type\":\"demo\",\"run_id\":\"before-restart\","
                   "\"data\":{\"duration_ms\":0}}",
                   202);
    th_expect_outcome(&p, id, "succeeded", 10);
    free(id);

    /* A run that is running while the database goes away still finishes. */
    across = th_submit(&p, "{\"alert_type\":\"demo\",\"data\":{\"duration_ms\":2500}}", 202);
    ck_assert_msg(th_wait_status(&p, across, "running", 10000), "run never started");
    h.p = &p;
    ck_assert(pthread_create(&th, NULL, hammer_main, &h) == 0);
    th_sleep_ms(300);
    th_pg_restart();
    t0 = th_now_ms();
    th_sleep_ms(1500);
    atomic_store(&h.stop, true);
    pthread_join(th, NULL);
    fprintf(stderr, "during the restart: %d requests, %d × 503, %d other errors\n", h.requests,
            h.n503, h.bad);
    ck_assert_msg(th_alive(p.pid), "opsrun died during the PostgreSQL restart; log: %s", p.log);
    ck_assert_msg(h.transport == 0, "%d requests failed in transport", h.transport);
    ck_assert_msg(h.bad == 0, "%d requests answered neither 2xx nor 503 problem+json: %ld %s",
                  h.bad, h.bad_status, h.bad_body);

    /* Within 15 s of the restart a submission works and its run completes. */
    id = NULL;
    for (until = t0 + 15000; th_now_ms() < until && !id; th_sleep_ms(200)) {
        bool ok = req(&p, "POST", "/alerts", "application/json",
                      "{\"alert_type\":\"demo\",\"data\":{\"duration_ms\":0,\"after\":1}}", &r);
        if (ok && r.status == 202)
            id = strdup(th_js(r.json, "run_id"));
        else
            ck_assert_msg(ok && r.status == 503 && is_problem_type(r.content_type),
                          "after restart: HTTP %ld %s", r.status, r.body);
        th_resp_free(&r);
    }
    ck_assert_msg(id, "no successful submission within 15 s of the restart");
    {
        char *o = th_wait_run(p.url, id, (int)((until - th_now_ms()) / 1000) + 1);
        ck_assert_msg(o && th_streq(o, "succeeded"), "run after restart: %s", o ? o : "(timeout)");
        fprintf(stderr, "run after the restart completed %lld ms after it\n", th_now_ms() - t0);
        free(o);
    }
    free(id);
    th_expect_outcome(&p, across, "succeeded", 15);
    {
        json_t *run = th_get_run(&p, across);
        ck_assert_int_eq(th_ji(run, "attempt"), 1);
        json_decref(run);
    }
    free(across);
    /* Every run accepted around the restart completes too: none was lost. */
    for (int i = 0; i < h.naccepted; i++)
        th_expect_outcome(&p, h.accepted[i], "succeeded", 15);
    get_ok(&p, "/readyz", 200, &r);
    th_resp_free(&r);
    /* The LISTEN connection came back too (wake-ups from other replicas). */
    {
        bool listening = false;
        for (until = th_now_ms() + 15000; th_now_ms() < until && !listening; th_sleep_ms(200)) {
            get_ok(&p, "/healthz", 200, &r);
            listening = th_streq(th_js(json_object_get(r.json, "engine"), "wakeups"), "listen");
            th_resp_free(&r);
        }
        ck_assert_msg(listening, "the LISTEN connection did not come back within 15 s");
    }
    ck_assert(th_alive(p.pid));
    th_stop_clean(&p);
}
END_TEST

/* ---- SIGTERM ---- */

START_TEST(test_sigterm_drain)
{
    struct th_proc p;
    struct th_resp r;
    const char *ci = th_start_fresh(&p, "e2e_api_drain", NULL);
    char *id;
    bool saw503 = false, late_accepted;
    long long t0;
    int rc;
    PGconn *db;
    PGresult *res;

    id =
        th_submit(&p, "{\"alert_type\":\"demo\",\"data\":{\"duration_ms\":1500,\"steps\":3}}", 202);
    ck_assert_msg(th_wait_status(&p, id, "running", 10000), "run never started");
    t0 = th_now_ms();
    kill(p.pid, SIGTERM);
    while (th_now_ms() - t0 < 1000 && !saw503) {
        ck_assert_msg(req(&p, "GET", "/readyz", NULL, NULL, &r), "/readyz unreachable while "
                                                                 "draining");
        saw503 = r.status == 503;
        ck_assert_msg(r.status == 200 || r.status == 503, "/readyz: HTTP %ld", r.status);
        th_resp_free(&r);
        th_sleep_ms(20);
    }
    ck_assert_msg(saw503, "/readyz did not turn 503 within 1 s of SIGTERM");
    /* A draining process claims nothing new: a submission now waits in the
     * queue for another replica (or is refused with a 503). */
    ck_assert(req(&p, "POST", "/alerts", "application/json",
                  "{\"alert_type\":\"demo\",\"run_id\":\"late\",\"data\":{\"duration_ms\":0}}",
                  &r));
    ck_assert_msg(r.status == 202 || (r.status == 503 && is_problem_type(r.content_type)),
                  "POST while draining: HTTP %ld %s", r.status, r.body);
    late_accepted = r.status == 202;
    th_resp_free(&r);
    rc = th_stop(&p, 0, 20); /* no second signal: that would cut the grace short */
    fprintf(stderr, "drain: exit %d after %lld ms\n", rc, th_now_ms() - t0);
    th_check_exit0(&p, rc);
    db = th_pg(ci);
    res = th_sql(db, "SELECT status, outcome, attempt FROM runs WHERE id = '%s'", id);
    ck_assert_str_eq(PQgetvalue(res, 0, 0), "completed");
    ck_assert_str_eq(PQgetvalue(res, 0, 1), "succeeded");
    ck_assert_str_eq(PQgetvalue(res, 0, 2), "1");
    PQclear(res);
    ck_assert_int_eq(th_sql_int(db, "SELECT count(*) FROM workers WHERE status <> 'stopped'"), 0);
    if (late_accepted)
        ck_assert_msg(th_sql_int(db, "SELECT count(*) FROM runs WHERE id = 'late' AND "
                                     "status = 'queued' AND attempt = 0") == 1,
                      "the draining process claimed a run submitted after SIGTERM");
    PQfinish(db);
    free(id);
}
END_TEST

/* A second SIGTERM during the drain hands running runs back at once. */
START_TEST(test_sigterm_twice)
{
    struct th_proc p;
    const char *ci = th_start_fresh(&p, "e2e_api_twice", NULL);
    char *id;
    long long t0, took;
    int rc;
    PGconn *db;

    id = th_submit(&p, "{\"alert_type\":\"demo\",\"data\":{\"duration_ms\":30000}}", 202);
    ck_assert_msg(th_wait_status(&p, id, "running", 10000), "run never started");
    kill(p.pid, SIGTERM);
    th_sleep_ms(500);
    ck_assert_msg(th_alive(p.pid),
                  "exited on the first SIGTERM with a run in progress (grace 900 s)");
    t0 = th_now_ms();
    rc = th_stop(&p, SIGTERM, 10);
    took = th_now_ms() - t0;
    fprintf(stderr, "second SIGTERM: exit %d after %lld ms\n", rc, took);
    th_check_exit0(&p, rc);
    ck_assert_msg(took <= 2000, "exit took %lld ms after the second SIGTERM", took);
    db = th_pg(ci);
    ck_assert_msg(th_sql_int(db,
                             "SELECT count(*) FROM runs WHERE id = '%s' AND status = 'queued' "
                             "AND attempt = 0 AND worker_id IS NULL",
                             id) == 1,
                  "the run was not handed back to the queue");
    PQfinish(db);
    free(id);
}
END_TEST

START_TEST(test_sigterm_short_grace)
{
    struct th_proc p, p2;
    const char *ci = th_start_fresh(&p, "e2e_api_grace", "{\"queue\":{\"shutdown_grace_s\":1}}");
    char *cfg = th_config_file("e2e_api_grace", "{\"queue\":{\"shutdown_grace_s\":1}}");
    const char *args[] = {"--config", cfg, NULL};
    char *id;
    long long t0, took;
    int rc;
    PGconn *db;
    PGresult *res;

    id = th_submit(&p, "{\"alert_type\":\"demo\",\"data\":{\"duration_ms\":20000}}", 202);
    ck_assert_msg(th_wait_status(&p, id, "running", 10000), "run never started");
    t0 = th_now_ms();
    rc = th_stop(&p, SIGTERM, 10);
    took = th_now_ms() - t0;
    fprintf(stderr, "short grace: exit %d after %lld ms\n", rc, took);
    th_check_exit0(&p, rc);
    ck_assert_msg(took <= 3000, "exit took %lld ms with a 1 s grace", took);
    db = th_pg(ci);
    res = th_sql(db, "SELECT status, outcome, attempt, worker_id IS NULL FROM runs WHERE id = '%s'",
                 id);
    ck_assert_msg(th_streq(PQgetvalue(res, 0, 0), "queued"), "status %s after the hand-back",
                  PQgetvalue(res, 0, 0));
    ck_assert_str_eq(PQgetvalue(res, 0, 1), "pending");
    ck_assert_msg(th_streq(PQgetvalue(res, 0, 2), "0"),
                  "attempt %s: the hand-back spent an attempt", PQgetvalue(res, 0, 2));
    ck_assert_str_eq(PQgetvalue(res, 0, 3), "t");
    PQclear(res);
    ck_assert_int_eq(th_sql_int(db,
                                "SELECT count(*) FROM run_events WHERE run_id = '%s' AND "
                                "status = 'queued' AND message LIKE 'released%%'",
                                id),
                     1);
    /* Keep the suite short: the next instance need not sleep 20 s again. */
    PQclear(th_sql(db, "UPDATE runs SET input = '{\"duration_ms\": 100}' WHERE id = '%s'", id));
    th_start(&p2, ci, args, NULL);
    free(cfg);
    th_expect_outcome(&p2, id, "succeeded", 15);
    res = th_sql(db, "SELECT attempt FROM runs WHERE id = '%s'", id);
    ck_assert_str_eq(PQgetvalue(res, 0, 0), "1");
    PQclear(res);
    PQfinish(db);
    free(id);
    th_stop_clean(&p2);
}
END_TEST

/* `opsrun migrate` against a database that refuses connections: one try,
 * exit 1, one error line naming the cause, no retry (serve waits up to
 * 30 s; migrate is for scripts that do their own retrying). */
START_TEST(test_migrate_once)
{
    char cmd[1024], line[1024];
    int errors = 0, retries = 0, rc;
    long long t0 = th_now_ms();
    FILE *f;

    snprintf(cmd, sizeof(cmd),
             "'%s' migrate --database-url 'postgresql://127.0.0.1:1/none?connect_timeout=2' 2>&1",
             getenv("OPSRUN_BIN"));
    f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    while (fgets(line, sizeof(line), f)) {
        errors += strstr(line, "could not migrate") != NULL;
        retries += strstr(line, "retrying") != NULL;
    }
    rc = pclose(f);
    ck_assert_msg(WIFEXITED(rc) && WEXITSTATUS(rc) == 1, "migrate exited %d", rc);
    ck_assert_int_eq(errors, 1);
    ck_assert_int_eq(retries, 0);
    ck_assert_msg(th_now_ms() - t0 < 1500, "migrate took %lld ms", th_now_ms() - t0);
}
END_TEST

/* A configuration with mistakes in the file, the environment and the
 * flags: exit 2 before anything starts, one line for each mistake. */
START_TEST(test_config_errors)
{
    char *path = th_config_file("e2e_api_config_errors",
                                "{\"queue\": {\"wokers\": 4}, \"http\": {\"threads\": 1}}");
    const char *args[] = {"serve",
                          "--config",
                          path,
                          "--workers",
                          "x",
                          "--database-url",
                          "postgresql://127.0.0.1:1/none",
                          NULL};
    const char *env[] = {"OPSRUN_LOG_LEVEL=loud", NULL};
    char *out = NULL, *err = NULL;

    ck_assert_int_eq(th_exec(args, env, 20, &out, &err), 2);
    ck_assert_str_eq(out, "");
    ck_assert_str_eq(err,
                     "opsrun: invalid configuration: unknown key \"queue.wokers\"; did you "
                     "mean \"queue.workers\"?\n"
                     "opsrun: invalid configuration: invalid \"http.threads\": must be "
                     "between 2 and 64\n"
                     "opsrun: invalid configuration: invalid OPSRUN_LOG_LEVEL: expected "
                     "\"debug\", \"info\", \"warn\" or \"error\"\n"
                     "opsrun: invalid configuration: invalid --workers: expected an integer\n");
    free(out);
    free(err);
    free(path);
}
END_TEST

/* A second server on the port the first holds: it exits non-zero, one
 * line names the address and the reason, and it stops before its engine
 * starts, so no worker row of it appears (and none shows as stopped in
 * /healthz). */
START_TEST(test_port_in_use)
{
    struct th_proc p;
    const char *ci = th_start_fresh(&p, "e2e_api_port_in_use", NULL);
    char listen[64], want[128];
    const char *args[] = {"serve", "--listen", listen, "--database-url", ci, NULL};
    PGconn *db = th_pg(ci);
    long long workers = th_sql_int(db, "SELECT count(*) FROM workers");
    char *err = NULL, *first;
    struct th_resp r;

    ck_assert_int_eq(workers, 1);
    snprintf(listen, sizeof(listen), "127.0.0.1:%d", p.port);
    snprintf(want, sizeof(want), "could not listen on %s: Address already in use\n", listen);
    ck_assert_int_eq(th_exec(args, NULL, 60, NULL, &err), 1);
    first = strstr(err, "Address already in use");
    ck_assert_msg(first && strstr(err, want) && !strstr(first + 1, "Address already in use"),
                  "stderr: %s", err);
    ck_assert_int_eq(th_sql_int(db, "SELECT count(*) FROM workers"), workers);
    th_get(p.url, "/livez", &r);
    ck_assert_int_eq(r.status, 200);
    th_resp_free(&r);
    free(err);
    PQfinish(db);
    th_stop_clean(&p);
}
END_TEST

static Suite *api_suite(void)
{
    Suite *s = suite_create("e2e_api");
    const struct {
        const char *name;
        const TTest *fn;
    } cases[] = {
        {"submit", test_submit_generic},
        {"dedupe", test_dedupe},
        {"concurrent", test_concurrent_identical},
        {"errors", test_errors},
        {"list", test_list},
        {"cancel", test_cancel},
        {"retries", test_retries},
        {"timeout", test_timeout},
        {"health", test_health},
        {"poll_only", test_poll_only},
        {"pg_restart", test_pg_restart},
        {"sigterm_drain", test_sigterm_drain},
        {"sigterm_grace", test_sigterm_short_grace},
        {"sigterm_twice", test_sigterm_twice},
        {"migrate_once", test_migrate_once},
        {"config_errors", test_config_errors},
        {"port_in_use", test_port_in_use},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        TCase *tc = tcase_create(cases[i].name);
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, cases[i].fn);
        suite_add_tcase(s, tc);
    }
    return s;
}

int main(void)
{
    return th_run_suite(api_suite());
}
