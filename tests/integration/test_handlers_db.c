/* tests/integration/test_handlers_db.c — the handlers of handlers/handlers.h
 * called in-process, the way server/http_request.c calls them, on a struct hctx over
 * a real configuration and a real pool on a fresh database per test:
 * POST /alerts (generic and Alertmanager bodies), GET /runs/{id}, GET /runs,
 * POST /runs/{id}/cancel, the health probes, up and unavailable, and GET
 * /metrics.
 *
 * Each test asserts the HTTP status, the headers that matter and the exact
 * bytes the server would send: the body as json_dumps(JSON_COMPACT), which is
 * what http_send writes. Timestamps that the database sets are pinned with
 * SQL first, or the expected run is the database's own rendering of the row
 * (opsrun_run_json). The engine and the hub are NULL, which struct hctx
 * allows: nothing here claims, executes or streams a run.
 *
 * System headers come before the opsrun headers, ahead of common.h's poison
 * pragma. */
#include <check.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <libpq-fe.h>

#include "common/canon_json.h"
#include "common/cursor.h"
#include "common/metrics.h"
#include "config/config.h"
#include "engine/actions/action.h"
#include "engine/actions/registry.h"
#include "handlers/handlers.h"
#include "handlers/metrics.h"
#include "engine/notify_body.h"
#include "store/db.h"
#include "store/notify.h"
#include "tests/support/fixture.h"
#include "tests/support/harness.h"

/* ---- the handler context ---------------------------------------------- */

/* The built-in "demo" type plus "other", for the type filter. */
static const char config_json[] = "{\"run_types\": {\"other\": {\"action\": \"simulate\"}}}";

#define PINNED "2030-01-02T03:04:05.000000Z"

static struct config g_cfg;
static struct db_pool *g_pool;
static _Atomic bool g_draining;
static struct hctx g_hc;
/* Who the requests are from: a tenant, and whether they reach every
 * tenant (an admin token without ?tenant=); "default" and no unless a test
 * says otherwise. */
static const char *g_tenant;
static bool g_all_tenants;

/* A fresh database and a handler context over it; the pool has pool_size
 * connections and waits wait_ms for one. */
static void hc_open(const char *dbname, int pool_size, int wait_ms)
{
    struct error err = {0};
    struct db_options opt;

    open_test_db(dbname);
    cfg_init(&g_cfg, &action_registry);
    ck_assert_msg(cfg_load_json(&g_cfg, config_json, &err) == ST_OK &&
                      cfg_validate(&g_cfg, &err) == ST_OK,
                  "configuration: %s", err.message);
    opt = (struct db_options){.conninfo = g_ci,
                              .connect_timeout_s = 5,
                              .statement_timeout_ms = 10000,
                              .application_name = "opsrun_it"};
    g_pool = db_pool_new(&opt, pool_size, wait_ms);
    atomic_store(&g_draining, false);
    g_hc = (struct hctx){.cfg = &g_cfg, .pool = g_pool, .draining = &g_draining};
    g_tenant = "default";
    g_all_tenants = false;
}

static void hc_close(void)
{
    db_pool_free(g_pool);
    cfg_cleanup(&g_cfg);
    close_test_db();
    g_pool = NULL;
}

/* ---- requests and replies --------------------------------------------- */

struct query {
    const char *k[8], *v[8];
};

static const char *query_get(const struct request *rq, const char *key)
{
    const struct query *q = rq->query_arg;

    for (int i = 0; i < 8 && q->k[i]; i++)
        if (strcmp(q->k[i], key) == 0)
            return q->v[i];
    return NULL;
}

/* Calls fn as server/http_request.c does: g_tenant, path_id (NULL: none),
 * query q (NULL: none) and body parsed as the server parses it (NULL: no
 * body). rp is initialised here; the caller cleans it up. */
/* As call, with a body built in C (one the server's parser might not make). */
static enum status call_json(handler_fn fn, const char *path_id, struct query *q, json_t *body,
                             struct reply *rp)
{
    static struct query none;

    reply_init(rp);
    return fn(&g_hc,
              &(struct request){.path_id = path_id,
                                .tenant = g_tenant,
                                .all_tenants = g_all_tenants,
                                .initiator = "anonymous",
                                .body = body,
                                .query = query_get,
                                .query_arg = q ? q : &none},
              rp);
}

static enum status call(handler_fn fn, const char *path_id, struct query *q, const char *body,
                        struct reply *rp)
{
    json_error_t jerr;
    json_t *j = NULL;
    enum status st;

    if (body) {
        j = json_loads(body, JSON_REJECT_DUPLICATES, &jerr);
        ck_assert_msg(j != NULL, "test body %s: %s", body, jerr.text);
    }
    st = call_json(fn, path_id, q, j, rp);
    json_decref(j);
    return st;
}

/* The body as http_send puts it on the wire (heap), or NULL for none. */
static char *wire(const json_t *body)
{
    return body ? json_dumps(body, JSON_COMPACT) : NULL;
}

/* Asserts the HTTP status, the content type (problem+json or JSON) and the
 * exact body. */
static void expect_reply(const struct reply *rp, unsigned http, bool problem, const char *want)
{
    char *got = wire(rp->body);

    ck_assert_msg(rp->http_status == http, "HTTP %u, want %u; body %s", rp->http_status, http,
                  got ? got : "(none)");
    ck_assert_msg(rp->problem == problem, "problem is %d, want %d; body %s", rp->problem, problem,
                  got ? got : "(none)");
    ck_assert_msg(got && strcmp(got, want) == 0, "body\n  %s\nwant\n  %s", got ? got : "(none)",
                  want);
    free(got);
}

/* The value of response header name, or NULL. */
static const char *header(const struct reply *rp, const char *name)
{
    for (unsigned i = 0; i < rp->nheaders; i++)
        if (strcmp(rp->headers[i].name, name) == 0)
            return rp->headers[i].value;
    return NULL;
}

static void expect_headers(const struct reply *rp, unsigned n, const char *name, const char *value)
{
    const char *got = name ? header(rp, name) : NULL;

    ck_assert_msg(rp->nheaders == n, "%u headers, want %u", rp->nheaders, n);
    if (name)
        ck_assert_msg(got && strcmp(got, value) == 0, "header %s is %s, want %s", name,
                      got ? got : "(absent)", value);
}

/* The submission result of POST /alerts for run id. */
static char *submit_result(const char *id, const char *status, const char *outcome, bool dedup)
{
    return xasprintf("{\"run_id\":\"%s\",\"status\":\"%s\",\"outcome\":\"%s\","
                     "\"deduplicated\":%s,\"links\":{\"self\":\"/runs/%s\",\"stream\":\"/runs/%s/"
                     "stream\",\"cancel\":\"/runs/%s/cancel\"}}",
                     id, status, outcome, dedup ? "true" : "false", id, id, id);
}

/* POST /alerts with a generic body, asserting 202 and a new run. */
static void create(const char *body)
{
    struct reply rp;

    ck_assert_int_eq(call(handle_alerts_create, NULL, NULL, body, &rp), ST_OK);
    ck_assert_msg(rp.http_status == 202, "POST /alerts %s: HTTP %u", body, rp.http_status);
    reply_cleanup(&rp);
}

/* ---- the database's side ---------------------------------------------- */

static char *sql_str(const char *fmt, ...) PRINTF_LIKE(1, 2);
static char *sql_str(const char *fmt, ...)
{
    char sql[1024];
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

/* Run id as the database renders it (opsrun_run_json), on the wire (the
 * ids of these tests are unique across their tenants). */
static char *db_run(const char *id)
{
    char *text = sql_str("SELECT opsrun_run_json(r)::text FROM runs r WHERE id = '%s'", id);
    json_t *j;
    char *s;

    ck_assert_msg(text != NULL, "no run %s", id);
    j = json_loads(text, 0, NULL);
    ck_assert_ptr_nonnull(j);
    s = wire(j);
    json_decref(j);
    free(text);
    return s;
}

/* Sets every timestamp the database gave run id to `at` (those still NULL
 * stay NULL). */
static void pin_times(const char *id, const char *at)
{
    PQclear(th_sql(g_pg,
                   "UPDATE runs SET created_at = '%s', run_at = '%s', updated_at = '%s', "
                   "completed_at = CASE WHEN completed_at IS NULL THEN NULL ELSE "
                   "timestamptz '%s' END WHERE id = '%s'",
                   at, at, at, at, id));
}

static long long n_runs(void)
{
    return th_sql_int(g_pg, "SELECT count(*) FROM runs");
}

/* ---- POST /alerts ----------------------------------------------------- */

/* A new run is 202 with a Location; the same body again joins it (200, no
 * Location); the same run_id with another body is a 409 problem. */
START_TEST(alerts_create_join_and_conflict)
{
    static const char first[] = "{\"alert_type\":\"demo\",\"run_id\":\"r-1\","
                                "\"data\":{\"host\":\"db1\"},\"priority\":7}";
    struct reply rp;
    char *want;
    char *input;

    hc_open("it_handlers_create", 2, 2000);
    ck_assert_int_eq(call(handle_alerts_create, NULL, NULL, first, &rp), ST_OK);
    want = submit_result("r-1", "queued", "pending", false);
    expect_reply(&rp, 202, false, want);
    expect_headers(&rp, 1, "Location", "/runs/r-1");
    ck_assert_str_eq(rp.run_id, "r-1");
    ck_assert_int_eq(rp.wait_ms, 0);
    reply_cleanup(&rp);
    free(want);
    input = sql_str("SELECT concat_ws(' ', type, status, priority, max_attempts, input::text) "
                    "FROM runs WHERE id = 'r-1'");
    ck_assert_str_eq(input, "demo queued 7 3 {\"host\": \"db1\"}");
    free(input);

    ck_assert_int_eq(call(handle_alerts_create, NULL, NULL, first, &rp), ST_OK);
    want = submit_result("r-1", "queued", "pending", true);
    expect_reply(&rp, 200, false, want);
    expect_headers(&rp, 0, NULL, NULL);
    reply_cleanup(&rp);
    free(want);

    ck_assert_int_eq(
        call(handle_alerts_create, NULL, NULL,
             "{\"alert_type\":\"demo\",\"run_id\":\"r-1\",\"data\":{\"host\":\"db2\"}}", &rp),
        ST_CONFLICT);
    expect_reply(&rp, 409, true,
                 "{\"type\":\"about:blank\",\"title\":\"Conflict\",\"status\":409,"
                 "\"detail\":\"run \\\"r-1\\\" already exists with a different request body\"}");
    expect_headers(&rp, 0, NULL, NULL);
    reply_cleanup(&rp);
    ck_assert_int_eq(n_runs(), 1);
    hc_close();
}
END_TEST

/* Without a run_id the identity is the dedupe_key: the second submission
 * joins the run the first created, under the id the first got. */
START_TEST(alerts_create_dedupe_key)
{
    static const char body[] = "{\"alert_type\":\"other\",\"dedupe_key\":\"disk-full:db1\"}";
    struct reply rp;
    char *id, *want, *loc;

    hc_open("it_handlers_dedupe", 2, 2000);
    ck_assert_int_eq(call(handle_alerts_create, NULL, NULL, body, &rp), ST_OK);
    ck_assert_uint_eq(rp.http_status, 202);
    id = sql_str("SELECT id FROM runs WHERE type = 'other'");
    ck_assert_ptr_nonnull(id);
    ck_assert_uint_eq(strlen(id), 26);
    want = submit_result(id, "queued", "pending", false);
    loc = xasprintf("/runs/%s", id);
    expect_reply(&rp, 202, false, want);
    expect_headers(&rp, 1, "Location", loc);
    reply_cleanup(&rp);
    free(want);

    ck_assert_int_eq(call(handle_alerts_create, NULL, NULL, body, &rp), ST_OK);
    want = submit_result(id, "queued", "pending", true);
    expect_reply(&rp, 200, false, want);
    expect_headers(&rp, 0, NULL, NULL);
    ck_assert_str_eq(rp.run_id, id);
    reply_cleanup(&rp);
    ck_assert_int_eq(n_runs(), 1);
    free(want);
    free(loc);
    free(id);
    hc_close();
}
END_TEST

/* Every problem of a bad body is in errors[], the first one is the detail;
 * an unroutable type is 422; a bad ?wait is 400. Nothing is written. */
START_TEST(alerts_create_invalid)
{
    struct query wait = {{"wait"}, {"61"}};
    struct reply rp;

    hc_open("it_handlers_invalid", 2, 2000);
    ck_assert_int_eq(call(handle_alerts_create, NULL, NULL,
                          "{\"alert_type\":1,\"priority\":\"x\",\"bogus\":true}", &rp),
                     ST_INVALID);
    expect_reply(&rp, 400, true,
                 "{\"type\":\"about:blank\",\"title\":\"Bad Request\",\"status\":400,"
                 "\"detail\":\"invalid \\\"alert_type\\\": must be a string of 1 to 128 "
                 "characters\",\"errors\":["
                 "{\"field\":\"alert_type\",\"message\":\"must be a string of 1 to 128 "
                 "characters\"},"
                 "{\"field\":\"priority\",\"message\":\"must be an integer from -1000 to 1000\"},"
                 "{\"field\":\"bogus\",\"message\":\"is not a known field\"}]}");
    expect_headers(&rp, 0, NULL, NULL);
    reply_cleanup(&rp);

    {
        json_t *five = json_integer(5); /* the server's parser makes only objects and arrays */
        ck_assert_int_eq(call_json(handle_alerts_create, NULL, NULL, five, &rp), ST_INVALID);
        json_decref(five);
    }
    expect_reply(&rp, 400, true,
                 "{\"type\":\"about:blank\",\"title\":\"Bad Request\",\"status\":400,"
                 "\"detail\":\"invalid \\\"body\\\": must be a JSON object\",\"errors\":["
                 "{\"field\":\"body\",\"message\":\"must be a JSON object\"}]}");
    reply_cleanup(&rp);

    /* An array is several submissions, each answered on its own. */
    ck_assert_int_eq(call(handle_alerts_create, NULL, NULL, "[1]", &rp), ST_OK);
    expect_reply(&rp, 200, false,
                 "{\"runs\":[{\"type\":\"about:blank\",\"title\":\"Bad Request\",\"status\":400,"
                 "\"detail\":\"invalid \\\"body\\\": must be a JSON object\",\"errors\":["
                 "{\"field\":\"body\",\"message\":\"must be a JSON object\"}]}]}");
    reply_cleanup(&rp);

    ck_assert_int_eq(call(handle_alerts_create, NULL, NULL, "{\"alert_type\":\"nope\"}", &rp),
                     ST_UNPROCESSABLE);
    expect_reply(&rp, 422, true,
                 "{\"type\":\"about:blank\",\"title\":\"Unprocessable Content\",\"status\":422,"
                 "\"detail\":\"invalid \\\"alert_type\\\": no route or run type matches "
                 "\\\"nope\\\" (known run types: demo, other)\",\"errors\":[{\"field\":"
                 "\"alert_type\",\"message\":\"no route or run type matches \\\"nope\\\"\"}]}");
    reply_cleanup(&rp);

    /* A typo of a run type is named with it. */
    ck_assert_int_eq(call(handle_alerts_create, NULL, NULL, "{\"alert_type\":\"dmeo\"}", &rp),
                     ST_UNPROCESSABLE);
    expect_reply(&rp, 422, true,
                 "{\"type\":\"about:blank\",\"title\":\"Unprocessable Content\",\"status\":422,"
                 "\"detail\":\"invalid \\\"alert_type\\\": no route or run type matches "
                 "\\\"dmeo\\\" (known run types: demo, other); did you mean \\\"demo\\\"?\","
                 "\"errors\":[{\"field\":\"alert_type\",\"message\":\"no route or run type "
                 "matches \\\"dmeo\\\"; did you mean \\\"demo\\\"?\"}]}");
    reply_cleanup(&rp);

    ck_assert_int_eq(call(handle_alerts_create, NULL, &wait, "{\"alert_type\":\"demo\"}", &rp),
                     ST_INVALID);
    expect_reply(&rp, 400, true,
                 "{\"type\":\"about:blank\",\"title\":\"Bad Request\",\"status\":400,"
                 "\"detail\":\"invalid \\\"wait\\\": must be whole seconds from 0 to 60\","
                 "\"errors\":[{\"field\":\"wait\",\"message\":\"must be whole seconds from 0 to "
                 "60\"}]}");
    reply_cleanup(&rp);
    ck_assert_int_eq(n_runs(), 0);
    hc_close();
}
END_TEST

/* A valid ?wait on a new run arms the long-poll the server holds. */
START_TEST(alerts_create_wait)
{
    struct query wait = {{"wait"}, {"5"}};
    struct reply rp;

    hc_open("it_handlers_wait", 2, 2000);
    ck_assert_int_eq(call(handle_alerts_create, NULL, &wait,
                          "{\"alert_type\":\"demo\",\"run_id\":\"w-1\"}", &rp),
                     ST_OK);
    ck_assert_uint_eq(rp.http_status, 202);
    ck_assert_int_eq(rp.wait_ms, 5000);
    ck_assert_str_eq(rp.wait_run_id, "w-1");
    ck_assert(rp.refresh != NULL);
    /* What the server calls when the wait ends: the run as it is now. */
    PQclear(th_sql(g_pg, "UPDATE runs SET status = 'completed', outcome = 'succeeded' "
                         "WHERE id = 'w-1'"));
    ck_assert_int_eq(rp.refresh(&g_hc, &(struct request){.tenant = "default"}, &rp), ST_OK);
    ck_assert_int_eq(rp.wait_ms, 0);
    {
        char *want = submit_result("w-1", "completed", "succeeded", false);
        expect_reply(&rp, 202, false, want);
        free(want);
    }
    reply_cleanup(&rp);
    hc_close();
}
END_TEST

/* An Alertmanager body goes to the webhook intake: one result per alert, a
 * bad or unroutable alert is an error item, and the same notification again
 * joins the run the first created. */
START_TEST(alerts_create_alertmanager)
{
    static const char body[] =
        "{\"version\":\"4\",\"status\":\"firing\",\"receiver\":\"opsrun\",\"groupKey\":\"g1\","
        "\"alerts\":["
        "{\"status\":\"firing\",\"labels\":{\"alertname\":\"demo\",\"host\":\"db1\"},"
        "\"fingerprint\":\"fp-1\"},"
        "{\"status\":\"bogus\",\"labels\":{\"alertname\":\"demo\"}},"
        "{\"status\":\"firing\",\"labels\":{\"alertname\":\"Nope\"},\"fingerprint\":\"fp-3\"}]}";
    static const char errors[] =
        "{\"index\":1,\"fingerprint\":null,\"error\":{\"status\":400,"
        "\"detail\":\"invalid \\\"alerts[1].status\\\": must be \\\"firing\\\" or "
        "\\\"resolved\\\"\",\"errors\":[{\"field\":\"alerts[1].status\",\"message\":\"must be "
        "\\\"firing\\\" or \\\"resolved\\\"\"}]}},"
        "{\"index\":2,\"fingerprint\":\"fp-3\",\"error\":{\"status\":422,"
        "\"detail\":\"no route matches alert \\\"Nope\\\"\",\"errors\":[]}}";
    struct reply rp;
    char *id, *run, *want, *input;

    hc_open("it_handlers_am", 2, 2000);
    ck_assert_int_eq(call(handle_alerts_create, NULL, NULL, body, &rp), ST_OK);
    id = sql_str("SELECT id FROM runs");
    ck_assert_ptr_nonnull(id);
    run = submit_result(id, "queued", "pending", false);
    run[strlen(run) - 1] = '\0'; /* the object goes on */
    want = xasprintf("{\"runs\":[%s,\"action\":\"created\",\"index\":0,\"fingerprint\":\"fp-1\"},"
                     "%s],\"truncated_alerts\":0}",
                     run, errors);
    expect_reply(&rp, 202, false, want);
    expect_headers(&rp, 0, NULL, NULL);
    reply_cleanup(&rp);
    free(want);
    free(run);
    input = sql_str("SELECT concat_ws(' ', type, input->>'receiver', input->>'groupKey', "
                    "input->>'fingerprint') FROM runs");
    ck_assert_str_eq(input, "demo opsrun g1 fp-1");
    free(input);

    ck_assert_int_eq(call(handle_alerts_create, NULL, NULL, body, &rp), ST_OK);
    run = submit_result(id, "queued", "pending", true);
    run[strlen(run) - 1] = '\0';
    want = xasprintf("{\"runs\":[%s,\"action\":\"joined\",\"index\":0,\"fingerprint\":\"fp-1\"},"
                     "%s],\"truncated_alerts\":0}",
                     run, errors);
    expect_reply(&rp, 200, false, want);
    reply_cleanup(&rp);
    ck_assert_int_eq(n_runs(), 1);
    free(want);
    free(run);
    free(id);
    hc_close();
}
END_TEST

/* ---- concurrency keys ------------------------------------------------ */

/* A run type with a concurrency key, added to the context's configuration. */
static void add_keyed_type(const char *key)
{
    struct error err = {0};
    char *text = xasprintf("{\"run_types\": {\"restart-host\": {\"action\": \"simulate\", "
                           "\"concurrency\": {\"key\": \"%s\"}}}}",
                           key);

    ck_assert_msg(cfg_load_json(&g_cfg, text, &err) == ST_OK, "%s", err.message);
    free(text);
}

#define KEY_MISSING                                                                                \
    "run_types.restart-host.concurrency: the input has no value at \\\"/labels/instance\\\""

/* A submission whose input cannot make its type's concurrency key is 400
 * naming the pointer, and nothing is written; one that can is accepted.
 * In an array, the item that fails is the one answered so. */
START_TEST(alerts_concurrency_key_generic)
{
    static const char missing[] =
        "{\"type\":\"about:blank\",\"title\":\"Bad Request\",\"status\":400,"
        "\"detail\":\"invalid \\\"data\\\": " KEY_MISSING "\","
        "\"errors\":[{\"field\":\"data\",\"message\":\"" KEY_MISSING "\"}]}";
    struct reply rp;
    char *want, *a, *b;

    hc_open("it_handlers_conc_generic", 2, 2000);
    add_keyed_type("{{tenant}}/{{input:/labels/instance}}");
    ck_assert_int_eq(call(handle_alerts_create, NULL, NULL,
                          "{\"alert_type\":\"restart-host\",\"data\":{\"labels\":{}}}", &rp),
                     ST_INVALID);
    expect_reply(&rp, 400, true, missing);
    reply_cleanup(&rp);
    ck_assert_int_eq(
        call(handle_alerts_create, NULL, NULL, "{\"alert_type\":\"restart-host\"}", &rp),
        ST_INVALID);
    expect_reply(&rp, 400, true, missing);
    reply_cleanup(&rp);
    ck_assert_int_eq(call(handle_alerts_create, NULL, NULL,
                          "{\"alert_type\":\"restart-host\",\"data\":{\"labels\":{\"instance\":"
                          "[\"db-1\"]}}}",
                          &rp),
                     ST_INVALID);
    expect_reply(&rp, 400, true,
                 "{\"type\":\"about:blank\",\"title\":\"Bad Request\",\"status\":400,"
                 "\"detail\":\"invalid \\\"data\\\": run_types.restart-host.concurrency: the "
                 "value at \\\"/labels/instance\\\" is an array, not a string, a whole number or "
                 "a boolean\",\"errors\":[{\"field\":\"data\",\"message\":\"run_types.restart-host."
                 "concurrency: the value at \\\"/labels/instance\\\" is an array, not a string, a "
                 "whole number or a boolean\"}]}");
    reply_cleanup(&rp);
    ck_assert_int_eq(n_runs(), 0);

    create("{\"alert_type\":\"restart-host\",\"run_id\":\"rh-1\","
           "\"data\":{\"labels\":{\"instance\":\"db-1:9100\"}}}");
    ck_assert_int_eq(n_runs(), 1);

    /* an array: each item as if alone */
    ck_assert_int_eq(call(handle_alerts_create, NULL, NULL,
                          "[{\"alert_type\":\"restart-host\",\"run_id\":\"rh-2\",\"data\":"
                          "{\"labels\":{\"instance\":7}}},"
                          "{\"alert_type\":\"restart-host\",\"run_id\":\"rh-3\"},"
                          "{\"alert_type\":\"demo\",\"run_id\":\"d-1\"}]",
                          &rp),
                     ST_OK);
    a = submit_result("rh-2", "queued", "pending", false);
    b = submit_result("d-1", "queued", "pending", false);
    want = xasprintf("{\"runs\":[%s,%s,%s]}", a, missing, b);
    expect_reply(&rp, 200, false, want);
    reply_cleanup(&rp);
    free(want);
    free(a);
    free(b);
    ck_assert_int_eq(n_runs(), 3);
    hc_close();
}
END_TEST

/* An Alertmanager alert whose input cannot make the key is an error item
 * (400) naming the alert and the pointer; the others go on. A resolved
 * alert makes no run, so has no key to check. */
START_TEST(alerts_concurrency_key_alertmanager)
{
    static const char body[] =
        "{\"version\":\"4\",\"status\":\"firing\",\"receiver\":\"opsrun\",\"groupKey\":\"g1\","
        "\"alerts\":["
        "{\"status\":\"firing\",\"labels\":{\"alertname\":\"restart-host\"},"
        "\"fingerprint\":\"fp-1\"},"
        "{\"status\":\"firing\",\"labels\":{\"alertname\":\"restart-host\",\"instance\":\"db1\"},"
        "\"fingerprint\":\"fp-2\"},"
        "{\"status\":\"resolved\",\"labels\":{\"alertname\":\"restart-host\"},"
        "\"fingerprint\":\"fp-3\"}]}";
    struct reply rp;
    char *id, *run, *want;

    hc_open("it_handlers_conc_am", 2, 2000);
    add_keyed_type("{{input:/receiver}}/{{input:/labels/instance}}");
    ck_assert_int_eq(call(handle_alerts_create, NULL, NULL, body, &rp), ST_OK);
    id = sql_str("SELECT id FROM runs");
    ck_assert_ptr_nonnull(id);
    run = submit_result(id, "queued", "pending", false);
    run[strlen(run) - 1] = '\0'; /* the object goes on */
    want = xasprintf(
        "{\"runs\":[{\"index\":0,\"fingerprint\":\"fp-1\",\"error\":{\"status\":400,"
        "\"detail\":\"invalid \\\"alerts[0]\\\": " KEY_MISSING "\","
        "\"errors\":[{\"field\":\"alerts[0]\",\"message\":\"" KEY_MISSING "\"}]}},"
        "%s,\"action\":\"created\",\"index\":1,\"fingerprint\":\"fp-2\"},"
        "{\"action\":\"ignored\",\"index\":2,\"fingerprint\":\"fp-3\"}],\"truncated_alerts\":0}",
        run);
    expect_reply(&rp, 202, false, want);
    reply_cleanup(&rp);
    ck_assert_int_eq(n_runs(), 1);
    free(want);
    free(run);
    free(id);
    hc_close();
}
END_TEST

/* A retry whose run type gained a key its input cannot make is refused
 * (422), as one whose type is gone; with the key it can make, it starts. */
START_TEST(retry_concurrency_key)
{
    struct reply rp;

    hc_open("it_handlers_conc_retry", 2, 2000);
    add_keyed_type("{{input:/labels/instance}}");
    create("{\"alert_type\":\"restart-host\",\"run_id\":\"rh-1\","
           "\"data\":{\"labels\":{\"instance\":\"db-1\"}}}");
    PQclear(th_sql(g_pg, "UPDATE runs SET status = 'completed', outcome = 'failed', "
                         "completed_at = now() WHERE id = 'rh-1'"));
    add_keyed_type("{{input:/host}}");
    ck_assert_int_eq(call(handle_runs_retry, "rh-1", NULL, NULL, &rp), ST_UNPROCESSABLE);
    expect_reply(&rp, 422, true,
                 "{\"type\":\"about:blank\",\"title\":\"Unprocessable Content\",\"status\":422,"
                 "\"detail\":\"run \\\"rh-1\\\" cannot be retried: run_types.restart-host."
                 "concurrency: the input has no value at \\\"/host\\\"\"}");
    reply_cleanup(&rp);
    ck_assert_int_eq(n_runs(), 1);
    add_keyed_type("{{input:/labels/instance}}");
    ck_assert_int_eq(call(handle_runs_retry, "rh-1", NULL, NULL, &rp), ST_OK);
    ck_assert_uint_eq(rp.http_status, 202);
    reply_cleanup(&rp);
    ck_assert_int_eq(n_runs(), 2);
    hc_close();
}
END_TEST

/* The configuration's rules written to the database, as a replica writes
 * them at start: the insert trigger then gives runs their keys. */
static void sync_rules(void)
{
    struct error err = {0};
    struct db *db = NULL;
    char *rules = notify_rules_json(&g_cfg);

    ck_assert_int_eq(db_pool_get(g_pool, &db, &err), ST_OK);
    ck_assert_msg(store_rules_sync(db, rules, 10, NULL, NULL, &err) == ST_OK, "%s", err.message);
    db_pool_put(g_pool, db);
    free(rules);
}

/* A bulk retry leaves out a run whose type gained a key its input cannot
 * make, as a single retry refuses it (422) and as a bulk retry leaves out a
 * run whose type is gone: it is matched, not acted on, and no run is made
 * for it (before, its retry was inserted and completed at once, failed,
 * invalid_concurrency_key). The runs whose key can be made are retried. */
START_TEST(bulk_retry_concurrency_key)
{
    struct reply rp;

    hc_open("it_handlers_conc_bulk_retry", 2, 2000);
    add_keyed_type("{{input:/labels/instance}}");
    sync_rules();
    create("{\"alert_type\":\"restart-host\",\"run_id\":\"rh-1\","
           "\"data\":{\"labels\":{\"instance\":\"db-1\"}}}");
    create("{\"alert_type\":\"restart-host\",\"run_id\":\"rh-2\","
           "\"data\":{\"labels\":{\"instance\":\"db-2\"},\"host\":\"db-2\"}}");
    PQclear(th_sql(g_pg, "UPDATE runs SET status = 'completed', outcome = 'failed', "
                         "completed_at = now()"));
    add_keyed_type("{{input:/host}}");
    sync_rules();
    ck_assert_int_eq(
        call(handle_runs_bulk_retry, NULL, NULL, "{\"filter\":{\"outcome\":[\"failed\"]}}", &rp),
        ST_OK);
    ck_assert_uint_eq(rp.http_status, 200);
    ck_assert_int_eq(json_integer_value(json_object_get(rp.body, "matched")), 2);
    ck_assert_int_eq(json_integer_value(json_object_get(rp.body, "acted")), 1);
    ck_assert_int_eq(json_array_size(json_object_get(rp.body, "run_ids")), 1);
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(rp.body, "run_ids"), 0)),
                     "rh-2");
    reply_cleanup(&rp);
    ck_assert_int_eq(n_runs(), 3);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE retry_of = 'rh-1'"), 0);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE retry_of = 'rh-2' AND "
                                      "status = 'queued' AND conc_key = 'db-2'"),
                     1);
    hc_close();
}
END_TEST

/* A body without a canonical JSON text (a string that is not UTF-8, which
 * only a *_nocheck constructor makes; in production canon_json fails so
 * only when jansson cannot allocate) is a 500 problem, before any run is
 * written: for the generic body, and for an Alertmanager alert whose labels
 * are its identity. */
START_TEST(alerts_create_without_canonical_json)
{
    static const char internal[] =
        "{\"type\":\"about:blank\",\"title\":\"Internal Server Error\",\"status\":500,"
        "\"detail\":\"internal error; see the server log\"}";
    json_t *generic = json_pack("{s:s, s:{s:o}}", "alert_type", "demo", "data", "bad",
                                json_string_nocheck("\xff"));
    json_t *am =
        json_pack("{s:s, s:[{s:s, s:{s:s, s:o}}]}", "version", "4", "alerts", "status", "firing",
                  "labels", "alertname", "demo", "bad", json_string_nocheck("\xff"));
    struct reply rp;

    ck_assert_ptr_nonnull(generic);
    ck_assert_ptr_nonnull(am);
    hc_open("it_handlers_canon", 2, 2000);
    ck_assert_int_eq(call_json(handle_alerts_create, NULL, NULL, generic, &rp), ST_INTERNAL);
    expect_reply(&rp, 500, true, internal);
    expect_headers(&rp, 0, NULL, NULL);
    reply_cleanup(&rp);
    ck_assert_int_eq(call_json(handle_alerts_create, NULL, NULL, am, &rp), ST_INTERNAL);
    expect_reply(&rp, 500, true, internal);
    reply_cleanup(&rp);
    ck_assert_int_eq(n_runs(), 0);
    json_decref(generic);
    json_decref(am);
    hc_close();
}
END_TEST

/* ---- GET /runs/{id} --------------------------------------------------- */

START_TEST(runs_get_found_and_missing)
{
    struct query bad_wait = {{"wait"}, {"x"}};
    struct reply rp;

    hc_open("it_handlers_get", 2, 2000);
    create("{\"alert_type\":\"demo\",\"run_id\":\"r-get\",\"data\":{\"host\":\"db1\"},"
           "\"priority\":7}");
    pin_times("r-get", PINNED);
    ck_assert_int_eq(call(handle_runs_get, "r-get", NULL, NULL, &rp), ST_OK);
    expect_reply(&rp, 200, false,
                 "{\"id\":\"r-get\",\"tenant\":\"default\",\"initiator\":\"anonymous\","
                 "\"type\":\"demo\",\"status\":\"queued\","
                 "\"outcome\":\"pending\",\"priority\":7,\"attempt\":0,\"max_attempts\":3,"
                 "\"progress\":0,\"step\":null,\"input\":{\"host\":\"db1\"},\"result\":null,"
                 "\"error\":null,\"summary_counts\":null,\"failure_summary\":null,"
                 "\"context\":null,\"external_id\":null,\"worker_id\":null,"
                 "\"created_at\":\"" PINNED "\",\"run_at\":\"" PINNED "\","
                 "\"started_at\":null,\"completed_at\":null,\"updated_at\":\"" PINNED "\","
                 "\"retry_of\":null,\"poll\":null,\"parent_id\":null,\"schedule\":null,"
                 "\"approval\":null,\"concurrency\":null,\"workflow\":null,\"workflow_step\":null,"
                 "\"waiting_for\":null}");
    expect_headers(&rp, 0, NULL, NULL);
    ck_assert_str_eq(rp.run_id, "r-get");
    ck_assert_int_eq(rp.wait_ms, 0);
    reply_cleanup(&rp);

    ck_assert_int_eq(call(handle_runs_get, "nope", NULL, NULL, &rp), ST_NOT_FOUND);
    expect_reply(&rp, 404, true,
                 "{\"type\":\"about:blank\",\"title\":\"Not Found\",\"status\":404,"
                 "\"detail\":\"run \\\"nope\\\" does not exist\"}");
    expect_headers(&rp, 0, NULL, NULL);
    reply_cleanup(&rp);

    ck_assert_int_eq(call(handle_runs_get, "r-get", &bad_wait, NULL, &rp), ST_INVALID);
    expect_reply(&rp, 400, true,
                 "{\"type\":\"about:blank\",\"title\":\"Bad Request\",\"status\":400,"
                 "\"detail\":\"invalid \\\"wait\\\": must be whole seconds from 0 to 60\","
                 "\"errors\":[{\"field\":\"wait\",\"message\":\"must be whole seconds from 0 to "
                 "60\"}]}");
    reply_cleanup(&rp);
    hc_close();
}
END_TEST

/* ---- GET /runs -------------------------------------------------------- */

/* GET /runs with query q: asserts 200 and a body of exactly the runs ids
 * (as the database renders them, in this order) and next_cursor. */
static void expect_list(struct query *q, const char *const *ids, size_t n, const char *next)
{
    struct reply rp;
    char *want = xstrdup("{\"runs\":["), *grown;

    for (size_t i = 0; i < n; i++) {
        char *run = db_run(ids[i]);
        grown = xasprintf("%s%s%s", want, i ? "," : "", run);
        free(want);
        free(run);
        want = grown;
    }
    grown = next ? xasprintf("%s],\"next_cursor\":\"%s\"}", want, next)
                 : xasprintf("%s],\"next_cursor\":null}", want);
    free(want);
    ck_assert_int_eq(call(handle_runs_list, NULL, q, NULL, &rp), ST_OK);
    expect_reply(&rp, 200, false, grown);
    expect_headers(&rp, 0, NULL, NULL);
    reply_cleanup(&rp);
    free(grown);
}

START_TEST(runs_list_filters_and_cursor)
{
    static const char *const all[] = {"r-d", "r-c", "r-b", "r-a"};
    static const char *const queued_demo[] = {"r-d", "r-a"};
    static const char *const other[] = {"r-b"};
    static const char *const cancelled[] = {"r-c"};
    struct query page1 = {{"limit"}, {"2"}}, page2 = {{"limit", "cursor"}, {"2", NULL}};
    struct query by_type = {{"type"}, {"other"}};
    struct query by_state = {{"status", "outcome"}, {"completed", "cancelled"}};
    struct query by_both = {{"status", "type"}, {"queued", "demo"}};
    struct query bad = {{"limit", "status", "cursor"}, {"0", "done", "!!"}};
    struct reply rp;
    char *cursor;

    hc_open("it_handlers_list", 2, 2000);
    create("{\"alert_type\":\"demo\",\"run_id\":\"r-a\"}");
    create("{\"alert_type\":\"other\",\"run_id\":\"r-b\"}");
    create("{\"alert_type\":\"demo\",\"run_id\":\"r-c\"}");
    create("{\"alert_type\":\"demo\",\"run_id\":\"r-d\"}");
    ck_assert_int_eq(call(handle_runs_cancel, "r-c", NULL, NULL, &rp), ST_OK);
    reply_cleanup(&rp);
    pin_times("r-a", "2030-01-01T00:00:01Z");
    pin_times("r-b", "2030-01-01T00:00:02Z");
    pin_times("r-c", "2030-01-01T00:00:03Z");
    pin_times("r-d", "2030-01-01T00:00:04Z");

    expect_list(NULL, all, 4, NULL);
    /* 2030-01-01T00:00:03Z in microseconds, and the last id of page 1. */
    cursor = cursor_encode(1893456003000000LL, "r-c");
    expect_list(&page1, all, 2, cursor);
    page2.v[1] = cursor;
    expect_list(&page2, all + 2, 2, NULL);
    free(cursor);
    expect_list(&by_type, other, 1, NULL);
    expect_list(&by_state, cancelled, 1, NULL);
    expect_list(&by_both, queued_demo, 2, NULL);

    ck_assert_int_eq(call(handle_runs_list, NULL, &bad, NULL, &rp), ST_INVALID);
    expect_reply(&rp, 400, true,
                 "{\"type\":\"about:blank\",\"title\":\"Bad Request\",\"status\":400,"
                 "\"detail\":\"invalid \\\"status\\\": must be one of queued, running, waiting, "
                 "cancelling, completed\",\"errors\":["
                 "{\"field\":\"status\",\"message\":\"must be one of queued, running, waiting, "
                 "cancelling, completed\"},"
                 "{\"field\":\"limit\",\"message\":\"must be an integer from 1 to 500\"},"
                 "{\"field\":\"cursor\",\"message\":\"is not a cursor this service issued\"}]}");
    reply_cleanup(&rp);
    hc_close();
}
END_TEST

/* ---- concurrency keys: a key's runs, why a run waits ------------------ */

/* restart-host and patch-host share group "host" (at most one run of a
 * key), backup has group "db" (two), all three keyed on the input's
 * /host; then the JSON more (NULL: nothing), and the rules written to the
 * database as a replica writes them at start. */
static void keyed_types(const char *more)
{
    static const char types[] =
        "{\"run_types\": {"
        "\"restart-host\": {\"action\": \"simulate\", \"concurrency\": {\"group\": \"host\", "
        "\"key\": \"{{input:/host}}\"}},"
        "\"patch-host\": {\"action\": \"simulate\", \"concurrency\": {\"group\": \"host\", "
        "\"key\": \"{{input:/host}}\"}},"
        "\"backup\": {\"action\": \"simulate\", \"concurrency\": {\"group\": \"db\", "
        "\"key\": \"{{input:/host}}\", \"max_running\": 2}}}}";
    struct error err = {0};
    struct db *db = NULL;
    char *rules;

    ck_assert_msg(cfg_load_json(&g_cfg, types, &err) == ST_OK, "%s", err.message);
    ck_assert_msg(!more || cfg_load_json(&g_cfg, more, &err) == ST_OK, "%s", err.message);
    ck_assert_msg(cfg_validate(&g_cfg, &err) == ST_OK, "%s", err.message);
    rules = notify_rules_json(&g_cfg);
    ck_assert_int_eq(db_pool_get(g_pool, &db, &err), ST_OK);
    ck_assert_msg(store_rules_sync(db, rules, 10, NULL, NULL, &err) == ST_OK, "%s", err.message);
    db_pool_put(g_pool, db);
    free(rules);
}

/* POST /alerts of a run of type on host, as tenant, with run_id id. */
static void create_keyed(const char *tenant, const char *type, const char *host, const char *id)
{
    char *body = xasprintf("{\"alert_type\":\"%s\",\"run_id\":\"%s\",\"data\":"
                           "{\"host\":\"%s\"}}",
                           type, id, host);

    g_tenant = tenant;
    create(body);
    g_tenant = "default";
    free(body);
}

/* ?concurrency_key= lists one key's runs of the caller's tenant, newest
 * first, in pages, with the other filters; ?concurrency_group= one
 * group's; an admin's list without ?tenant= has every tenant's runs of
 * that key; a bad value is a 400 naming it. */
START_TEST(runs_list_concurrency_key)
{
    static const char *const web1[] = {"k-5", "k-3", "k-2", "k-1"};
    static const char *const web1_host[] = {"k-3", "k-2", "k-1"};
    static const char *const db_group[] = {"k-5"};
    static const char *const web1_queued_restart[] = {"k-1"};
    static const char *const every_tenant[] = {"a-1", "k-5", "k-3", "k-2", "k-1"};
    struct query key = {{"concurrency_key"}, {"web-1"}};
    struct query key_group = {{"concurrency_key", "concurrency_group"}, {"web-1", "host"}};
    struct query group = {{"concurrency_group"}, {"db"}};
    struct query with_others = {{"concurrency_key", "status", "type"},
                                {"web-1", "queued", "restart-host"}};
    struct query page1 = {{"concurrency_key", "limit"}, {"web-1", "2"}};
    struct query page2 = {{"concurrency_key", "limit", "cursor"}, {"web-1", "2", NULL}};
    struct query none = {{"concurrency_key"}, {"web-9"}};
    struct query bad = {{"concurrency_key", "concurrency_group"}, {"", ""}};
    struct reply rp;
    char *cursor;

    hc_open("it_handlers_list_key", 2, 2000);
    keyed_types(NULL);
    create_keyed("default", "restart-host", "web-1", "k-1");
    create_keyed("default", "patch-host", "web-1", "k-2");
    create_keyed("default", "restart-host", "web-1", "k-3");
    create_keyed("default", "restart-host", "web-2", "k-4");
    create_keyed("default", "backup", "web-1", "k-5");
    create("{\"alert_type\":\"demo\",\"run_id\":\"k-6\",\"data\":{\"host\":\"web-1\"}}");
    create_keyed("acme", "restart-host", "web-1", "a-1");
    ck_assert_int_eq(call(handle_runs_cancel, "k-3", NULL, NULL, &rp), ST_OK);
    reply_cleanup(&rp);
    pin_times("k-1", "2030-01-01T00:00:01Z");
    pin_times("k-2", "2030-01-01T00:00:02Z");
    pin_times("k-3", "2030-01-01T00:00:03Z");
    pin_times("k-4", "2030-01-01T00:00:04Z");
    pin_times("k-5", "2030-01-01T00:00:05Z");
    pin_times("k-6", "2030-01-01T00:00:06Z");
    pin_times("a-1", "2030-01-01T00:00:07Z");

    expect_list(&key, web1, 4, NULL);
    expect_list(&key_group, web1_host, 3, NULL);
    expect_list(&group, db_group, 1, NULL);
    expect_list(&with_others, web1_queued_restart, 1, NULL);
    expect_list(&none, NULL, 0, NULL);
    cursor = cursor_encode(1893456003000000LL, "k-3");
    expect_list(&page1, web1, 2, cursor);
    page2.v[2] = cursor;
    expect_list(&page2, web1 + 2, 2, NULL);
    free(cursor);

    /* another tenant's: its own run of that key text only */
    g_tenant = "acme";
    expect_list(&key, every_tenant, 1, NULL);
    g_tenant = "default";
    g_all_tenants = true;
    expect_list(&key, every_tenant, 5, NULL);
    g_all_tenants = false;

    ck_assert_int_eq(call(handle_runs_list, NULL, &bad, NULL, &rp), ST_INVALID);
    expect_reply(&rp, 400, true,
                 "{\"type\":\"about:blank\",\"title\":\"Bad Request\",\"status\":400,"
                 "\"detail\":\"invalid \\\"concurrency_key\\\": must be 1 to 512 characters\","
                 "\"errors\":["
                 "{\"field\":\"concurrency_key\",\"message\":\"must be 1 to 512 characters\"},"
                 "{\"field\":\"concurrency_group\",\"message\":\"must be 1 to 64 characters\"}]}");
    reply_cleanup(&rp);
    hc_close();
}
END_TEST

/* Run id as GET /runs/{id} answers it: the database's rendering with
 * "waiting_for" (JSON) last and, when the run has a concurrency key, its
 * "holders" (JSON) last in "concurrency". */
static char *db_detail(const char *id, const char *waiting_for, const char *holders)
{
    char *text = db_run(id);
    json_t *run = json_loads(text, 0, NULL), *conc;
    char *s;

    ck_assert_ptr_nonnull(run);
    conc = json_object_get(run, "concurrency");
    json_object_set_new(run, "waiting_for", json_loads(waiting_for, JSON_DECODE_ANY, NULL));
    ck_assert_ptr_nonnull(json_object_get(run, "waiting_for"));
    if (json_is_object(conc)) {
        ck_assert_ptr_nonnull(holders);
        json_object_set_new(conc, "holders", json_loads(holders, 0, NULL));
        ck_assert_ptr_nonnull(json_object_get(conc, "holders"));
    } else {
        ck_assert_ptr_null(holders);
    }
    s = wire(run);
    json_decref(run);
    free(text);
    return s;
}

/* GET /runs/{id} of id: asserts 200 and exactly db_detail's body. */
static void expect_detail(const char *id, const char *waiting_for, const char *holders)
{
    char *want = db_detail(id, waiting_for, holders);
    struct reply rp;

    ck_assert_int_eq(call(handle_runs_get, id, NULL, NULL, &rp), ST_OK);
    expect_reply(&rp, 200, false, want);
    reply_cleanup(&rp);
    free(want);
}

/* Sets run id running (or cancelling) as a claim by worker w-t would. */
static void set_running(const char *id, const char *status)
{
    PQclear(th_sql(g_pg,
                   "UPDATE runs SET status = '%s', attempt = 1, worker_id = 'w-t', "
                   "started_at = now(), heartbeat_at = now() WHERE id = '%s'",
                   status, id));
}

#define KEY_FULL(n, max)                                                                           \
    "{\"reason\":\"concurrency_key\",\"running\":" #n ",\"max_running\":" #max "}"
#define TENANT_CAP(n, max) "{\"reason\":\"tenant_cap\",\"running\":" #n ",\"max_running\":" #max "}"

/* GET /runs/{id} says why a queued run waits: its key (held, or due with
 * max_running runs of its key running or cancelling), with the runs that
 * hold it, or its tenant's cap (as this replica's configuration says it);
 * nothing for a run that is not due, runs, or has room. The long-poll's
 * refresh says the same; a list says none of it. */
START_TEST(runs_get_waiting_for)
{
    struct query wait = {{"wait"}, {"5"}};
    struct query by_key = {{"concurrency_key"}, {"web-1"}};
    static const char *const web1[] = {"b-2", "b-1", "h-3", "h-2", "h-1"};
    struct reply rp;

    hc_open("it_handlers_waiting_for", 2, 2000);
    keyed_types("{\"tenants\": {\"default\": {\"max_running\": 2}}}");
    create_keyed("default", "restart-host", "web-1", "h-1");
    create_keyed("default", "patch-host", "web-1", "h-2");
    create("{\"alert_type\":\"restart-host\",\"run_id\":\"h-3\",\"data\":{\"host\":"
           "\"web-1\"},\"run_at\":\"2999-01-01T00:00:00Z\"}");
    create_keyed("default", "restart-host", "web-2", "h-4");
    create_keyed("default", "backup", "web-1", "b-1");
    create_keyed("default", "backup", "web-1", "b-2");
    create("{\"alert_type\":\"demo\",\"run_id\":\"d-1\"}");
    create_keyed("acme", "restart-host", "web-1", "a-1");
    create_keyed("acme", "restart-host", "web-1", "a-2");
    PQclear(th_sql(g_pg, "UPDATE runs SET run_at = now() - interval '1 minute' "
                         "WHERE id IN ('h-2', 'h-4', 'b-2', 'd-1', 'a-2')"));

    /* Nothing runs: nothing waits. */
    expect_detail("h-2", "null", "[]");
    expect_detail("d-1", "null", NULL);

    /* h-1 holds web-1 of group host; b-1 the first of two places of web-1
     * of group db: the tenant is at its cap of 2. */
    set_running("h-1", "running");
    set_running("b-1", "running");
    expect_detail("h-2", KEY_FULL(1, 1), "[\"h-1\"]");
    expect_detail("h-3", "null", "[\"h-1\"]"); /* not due yet */
    expect_detail("h-1", "null", "[]");        /* not itself */
    expect_detail("h-4", TENANT_CAP(2, 2), "[]");
    expect_detail("b-2", TENANT_CAP(2, 2), "[\"b-1\"]");
    expect_detail("d-1", TENANT_CAP(2, 2), NULL);
    /* acme has no cap; its key is its own */
    g_tenant = "acme";
    expect_detail("a-2", "null", "[]");
    g_tenant = "default";

    /* A cancelling run still holds its key; the long-poll's refresh says
     * the same as the first answer. */
    set_running("h-1", "cancelling");
    expect_detail("h-2", KEY_FULL(1, 1), "[\"h-1\"]");
    {
        char *want = db_detail("h-2", KEY_FULL(1, 1), "[\"h-1\"]");
        struct request rq = {
            .path_id = "h-2", .tenant = "default", .query = query_get, .query_arg = &wait};
        ck_assert_int_eq(call(handle_runs_get, "h-2", &wait, NULL, &rp), ST_OK);
        expect_reply(&rp, 200, false, want);
        ck_assert(rp.refresh != NULL);
        ck_assert_int_eq(rp.refresh(&g_hc, &rq, &rp), ST_OK);
        expect_reply(&rp, 200, false, want);
        reply_cleanup(&rp);
        free(want);
    }

    /* Held while its key is free: it waits for its key until the next
     * claim releases it. */
    PQclear(th_sql(g_pg, "UPDATE runs SET status = 'completed', outcome = 'cancelled', "
                         "completed_at = now() WHERE id = 'h-1'"));
    PQclear(th_sql(g_pg, "UPDATE runs SET conc_held = true WHERE id = 'h-2'"));
    expect_detail("h-2", KEY_FULL(0, 1), "[]");
    expect_detail("h-1", "null", "[]");
    expect_detail("h-4", "null", "[]"); /* one running: room under the cap */

    /* A list carries none of it. */
    expect_list(&by_key, web1, 5, NULL);
    hc_close();
}
END_TEST

/* ---- POST /runs/{id}/cancel ------------------------------------------- */

/* A queued run ends cancelled at once (200); again is a 409; a running run
 * becomes cancelling (202); an unknown id is a 404. */
START_TEST(runs_cancel_paths)
{
    struct reply rp;
    char *want, *state;

    hc_open("it_handlers_cancel", 2, 2000);
    create("{\"alert_type\":\"demo\",\"run_id\":\"r-q\"}");
    create("{\"alert_type\":\"demo\",\"run_id\":\"r-r\"}");

    ck_assert_int_eq(call(handle_runs_cancel, "r-q", NULL, NULL, &rp), ST_OK);
    state = sql_str("SELECT concat_ws(' ', status, outcome, completed_at IS NOT NULL) "
                    "FROM runs WHERE id = 'r-q'");
    ck_assert_str_eq(state, "completed cancelled t");
    want = db_run("r-q");
    expect_reply(&rp, 200, false, want);
    ck_assert_ptr_nonnull(strstr(want, "\"status\":\"completed\",\"outcome\":\"cancelled\""));
    expect_headers(&rp, 0, NULL, NULL);
    ck_assert_str_eq(rp.run_id, "r-q");
    reply_cleanup(&rp);
    free(want);
    free(state);

    ck_assert_int_eq(call(handle_runs_cancel, "r-q", NULL, NULL, &rp), ST_CONFLICT);
    expect_reply(&rp, 409, true,
                 "{\"type\":\"about:blank\",\"title\":\"Conflict\",\"status\":409,"
                 "\"detail\":\"run \\\"r-q\\\" is already completed (cancelled)\"}");
    reply_cleanup(&rp);

    PQclear(th_sql(g_pg, "UPDATE runs SET status = 'running', attempt = 1, worker_id = 'w-x', "
                         "started_at = now(), heartbeat_at = now() WHERE id = 'r-r'"));
    ck_assert_int_eq(call(handle_runs_cancel, "r-r", NULL, NULL, &rp), ST_OK);
    want = db_run("r-r");
    expect_reply(&rp, 202, false, want);
    ck_assert_ptr_nonnull(strstr(want, "\"status\":\"cancelling\",\"outcome\":\"pending\""));
    reply_cleanup(&rp);
    free(want);

    ck_assert_int_eq(call(handle_runs_cancel, "nope", NULL, NULL, &rp), ST_NOT_FOUND);
    expect_reply(&rp, 404, true,
                 "{\"type\":\"about:blank\",\"title\":\"Not Found\",\"status\":404,"
                 "\"detail\":\"run \\\"nope\\\" does not exist\"}");
    ck_assert_str_eq(rp.run_id, "nope");
    reply_cleanup(&rp);
    hc_close();
}
END_TEST

/* ---- health ----------------------------------------------------------- */

/* The body with its "runs" object's keys sorted: the store returns the
 * counts in its query plan's order, which the hash join decides. */
static char *wire_sorted_counts(const json_t *body)
{
    json_t *copy = json_deep_copy(body);
    char *canon = canon_json(json_object_get(body, "runs"));
    char *s;

    json_object_set_new(copy, "runs", json_loads(canon, 0, NULL));
    s = wire(copy);
    json_decref(copy);
    free(canon);
    return s;
}

START_TEST(health_up)
{
    struct reply rp;
    char *got;

    hc_open("it_handlers_health", 2, 2000);
    create("{\"alert_type\":\"demo\",\"run_id\":\"h-1\"}");
    create("{\"alert_type\":\"demo\",\"run_id\":\"h-2\"}");
    /* a run held back by its key (as a claim marks it) is queued, and held */
    PQclear(th_sql(g_pg, "UPDATE runs SET conc_held = true WHERE id = 'h-2'"));

    ck_assert_int_eq(call(handle_health_healthz, NULL, NULL, NULL, &rp), ST_OK);
    ck_assert_uint_eq(rp.http_status, 200);
    ck_assert(!rp.problem);
    {
        /* Without a live configuration (no serve): the version of hc's
         * configuration, and no time it was put in place. */
        const char *v =
            json_string_value(json_object_get(json_object_get(rp.body, "config"), "version"));
        char want[512];
        ck_assert_msg(v && strlen(v) == 12 && strspn(v, "0123456789abcdef") == 12, "version %s",
                      v ? v : "(none)");
        snprintf(want, sizeof(want),
                 "{\"status\":\"ok\",\"draining\":false,\"database\":\"ok\","
                 "\"config\":{\"version\":\"%s\",\"loaded_at\":null},"
                 "\"engine\":null,\"streams\":null,\"limits\":null,"
                 "\"runs\":{\"cancelling\":0,\"held\":1,\"queued\":2,\"running\":0,"
                 "\"waiting\":0},"
                 "\"polls\":{\"overdue\":0,\"lag_ms\":0},\"workers\":[]}",
                 v);
        got = wire_sorted_counts(rp.body);
        ck_assert_str_eq(got, want);
    }
    expect_headers(&rp, 0, NULL, NULL);
    reply_cleanup(&rp);
    free(got);

    ck_assert_int_eq(call(handle_health_livez, NULL, NULL, NULL, &rp), ST_OK);
    expect_reply(&rp, 200, false, "{\"status\":\"ok\"}");
    reply_cleanup(&rp);

    ck_assert_int_eq(call(handle_health_readyz, NULL, NULL, NULL, &rp), ST_OK);
    expect_reply(&rp, 200, false, "{\"status\":\"ready\"}");
    expect_headers(&rp, 0, NULL, NULL);
    reply_cleanup(&rp);
    hc_close();
}
END_TEST

/* Draining: /readyz is a 503 problem that says why, /healthz stays 200. */
START_TEST(health_draining)
{
    struct reply rp;

    hc_open("it_handlers_draining", 2, 2000);
    atomic_store(&g_draining, true);
    ck_assert_int_eq(call(handle_health_readyz, NULL, NULL, NULL, &rp), ST_OK);
    expect_reply(&rp, 503, true,
                 "{\"type\":\"about:blank\",\"title\":\"Service Unavailable\",\"status\":503,"
                 "\"detail\":\"shutting down\",\"reason\":\"shutting down\"}");
    expect_headers(&rp, 1, "Retry-After", "1");
    reply_cleanup(&rp);

    ck_assert_int_eq(call(handle_health_healthz, NULL, NULL, NULL, &rp), ST_OK);
    ck_assert_uint_eq(rp.http_status, 200);
    ck_assert(json_is_true(json_object_get(rp.body, "draining")));
    reply_cleanup(&rp);
    hc_close();
}
END_TEST

/* Every connection of the pool taken: the probes answer 503 with the
 * reason in full (and /healthz with the engine member), while the API hides
 * it behind the generic 503 detail. */
START_TEST(health_pool_exhausted)
{
    static const char busy[] = "no database connection free within 1000 ms";
    struct error err = {0};
    struct db *held = NULL;
    struct reply rp;
    char *want;

    hc_open("it_handlers_exhausted", 1, 100);
    ck_assert_int_eq(db_pool_get(g_pool, &held, &err), ST_OK);

    ck_assert_int_eq(call(handle_health_healthz, NULL, NULL, NULL, &rp), ST_OK);
    want = xasprintf("{\"type\":\"about:blank\",\"title\":\"Service Unavailable\",\"status\":503,"
                     "\"detail\":\"%s\",\"reason\":\"%s\",\"engine\":null,\"limits\":null}",
                     busy, busy);
    expect_reply(&rp, 503, true, want);
    expect_headers(&rp, 1, "Retry-After", "1");
    reply_cleanup(&rp);
    free(want);

    ck_assert_int_eq(call(handle_health_readyz, NULL, NULL, NULL, &rp), ST_OK);
    want = xasprintf("{\"type\":\"about:blank\",\"title\":\"Service Unavailable\",\"status\":503,"
                     "\"detail\":\"%s\",\"reason\":\"%s\"}",
                     busy, busy);
    expect_reply(&rp, 503, true, want);
    expect_headers(&rp, 1, "Retry-After", "1");
    reply_cleanup(&rp);
    free(want);

    ck_assert_int_eq(call(handle_runs_get, "r-1", NULL, NULL, &rp), ST_UNAVAILABLE);
    expect_reply(&rp, 503, true,
                 "{\"type\":\"about:blank\",\"title\":\"Service Unavailable\",\"status\":503,"
                 "\"detail\":\"temporarily unavailable (database unreachable or busy); retry "
                 "later\"}");
    expect_headers(&rp, 1, "Retry-After", "1");
    reply_cleanup(&rp);

    db_pool_put(g_pool, held);
    hc_close();
}
END_TEST

/* ---- GET /metrics ------------------------------------------------------ */

/* A registry for the test's configuration, put into g_hc. */
static struct metrics *metrics_open(void)
{
    static const char *const outcomes[] = {"succeeded", "partially_succeeded", "failed",
                                           "cancelled", "timed_out"};
    const char *types[8];
    struct metrics *m;

    ck_assert_uint_le(g_cfg.nrun_types, 8);
    for (size_t i = 0; i < g_cfg.nrun_types; i++)
        types[i] = g_cfg.run_types[i].name;
    m = metrics_new(&(struct metrics_setup){.types = types,
                                            .ntypes = g_cfg.nrun_types,
                                            .outcomes = outcomes,
                                            .noutcomes = 5,
                                            .version = "test",
                                            .commit = "none"});
    g_hc.metrics = m;
    return m;
}

/* GET /metrics: asserts a 200 text answer in the exposition format; the
 * body (the reply's, until reply_cleanup). */
static const char *scrape(struct reply *rp)
{
    ck_assert_int_eq(call(handle_metrics_get, NULL, NULL, NULL, rp), ST_OK);
    ck_assert_uint_eq(rp->http_status, 200);
    ck_assert_ptr_null(rp->body);
    ck_assert_ptr_nonnull(rp->text);
    ck_assert_str_eq(rp->text_type, "text/plain; version=0.0.4; charset=utf-8");
    return rp->text;
}

#define ck_assert_has(text, line)                                                                  \
    ck_assert_msg(strstr((text), "\n" line "\n") != NULL, "no line \"%s\"", line)
/* The value of the sample series (a whole line's start), -1 if none. */
static double value_of(const char *text, const char *series)
{
    char key[256];
    const char *at;

    snprintf(key, sizeof(key), "\n%s ", series);
    at = strstr(text, key);
    return at ? strtod(at + strlen(key), NULL) : -1;
}

#define ck_assert_hasnt(text, part)                                                                \
    ck_assert_msg(strstr((text), part) == NULL, "\"%s\" should not be there", part)

/* Submissions and a cancel counted by the handlers; the database figures
 * read once and then served from the cache; no engine or hub: no figures
 * of theirs. */
START_TEST(metrics_counts_and_cache)
{
    struct metrics *m;
    struct reply rp;
    const char *t;

    hc_open("it_handlers_metrics", 2, 2000);
    m = metrics_open();
    create("{\"alert_type\":\"demo\",\"run_id\":\"m-1\"}");
    create("{\"alert_type\":\"other\",\"run_id\":\"m-2\"}");
    create("{\"alert_type\":\"demo\",\"run_id\":\"m-3\"}");
    ck_assert_int_eq(call(handle_runs_cancel, "m-3", NULL, NULL, &rp), ST_OK);
    reply_cleanup(&rp);

    t = scrape(&rp);
    ck_assert_has(t, "opsrun_runs_submitted_total{type=\"demo\"} 2");
    ck_assert_has(t, "opsrun_runs_submitted_total{type=\"other\"} 1");
    ck_assert_has(t, "opsrun_runs_completed_total{type=\"demo\",outcome=\"cancelled\"} 1");
    /* Cancelled before it started: no duration. */
    ck_assert_has(t, "opsrun_run_duration_seconds_count{type=\"demo\"} 0");
    ck_assert_has(t, "opsrun_runs{status=\"queued\"} 2");
    ck_assert_has(t, "opsrun_runs{status=\"running\"} 0");
    ck_assert_msg(value_of(t, "opsrun_queue_oldest_due_seconds") >= 0 &&
                      value_of(t, "opsrun_queue_oldest_due_seconds") < 5,
                  "the runs were just submitted");
    ck_assert_has(t, "opsrun_database_up 1");
    ck_assert_has(t, "opsrun_ready 1");
    ck_assert_has(t, "opsrun_draining 0");
    ck_assert_has(t, "opsrun_db_pool_size 2");
    ck_assert_has(t, "opsrun_db_pool_in_use_connections 0");
    ck_assert_has(t, "opsrun_build_info{version=\"test\",commit=\"none\"} 1");
    ck_assert_hasnt(t, "opsrun_workers");
    ck_assert_hasnt(t, "opsrun_sse_");
    reply_cleanup(&rp);

    /* Counters move at once; the database figures come from the cache. */
    create("{\"alert_type\":\"demo\",\"run_id\":\"m-4\"}");
    PQclear(th_sql(g_pg, "UPDATE runs SET run_at = now() - interval '1 minute'"));
    t = scrape(&rp);
    ck_assert_has(t, "opsrun_runs_submitted_total{type=\"demo\"} 3");
    ck_assert_has(t, "opsrun_runs{status=\"queued\"} 2");
    ck_assert_msg(value_of(t, "opsrun_queue_oldest_due_seconds") < 5, "not read again");
    reply_cleanup(&rp);

    /* A drain shows at once, whatever the cache holds. */
    atomic_store(&g_draining, true);
    t = scrape(&rp);
    ck_assert_has(t, "opsrun_draining 1");
    ck_assert_has(t, "opsrun_ready 0");
    reply_cleanup(&rp);

    /* A new registry has an empty cache: the figures are read again. */
    metrics_free(m);
    m = metrics_open();
    t = scrape(&rp);
    ck_assert_has(t, "opsrun_runs{status=\"queued\"} 3");
    ck_assert_has(t, "opsrun_runs_submitted_total{type=\"demo\"} 0");
    ck_assert_msg(value_of(t, "opsrun_queue_oldest_due_seconds") >= 60 &&
                      value_of(t, "opsrun_queue_oldest_due_seconds") < 70,
                  "oldest due %g s, want the minute set by SQL",
                  value_of(t, "opsrun_queue_oldest_due_seconds"));
    reply_cleanup(&rp);
    metrics_free(m);
    g_hc.metrics = NULL;
    hc_close();
}
END_TEST

/* opsrun_runs_held_by_key: the queued runs held for their key, per group,
 * over the whole database (every tenant); 0 for a group this replica
 * configures that has none; a group another replica's runs have, too. */
START_TEST(metrics_held_by_key)
{
    struct metrics *m;
    struct reply rp;
    const char *t;

    hc_open("it_handlers_metrics_held", 2, 2000);
    keyed_types(NULL);
    m = metrics_open();
    create_keyed("default", "restart-host", "web-1", "h-1");
    create_keyed("default", "patch-host", "web-1", "h-2");
    create_keyed("default", "restart-host", "web-1", "h-3");
    create_keyed("default", "restart-host", "web-2", "h-4");
    create_keyed("acme", "restart-host", "web-1", "a-1");
    create_keyed("default", "backup", "web-1", "b-1");

    t = scrape(&rp);
    ck_assert_has(t, "# TYPE opsrun_runs_held_by_key gauge");
    ck_assert_has(t, "opsrun_runs_held_by_key{group=\"db\"} 0");
    ck_assert_has(t, "opsrun_runs_held_by_key{group=\"host\"} 0");
    reply_cleanup(&rp);

    set_running("h-1", "running");
    PQclear(th_sql(g_pg, "UPDATE runs SET conc_held = true WHERE id IN ('h-2', 'h-3', 'a-1')"));
    /* held, then cancelled: no longer queued */
    PQclear(th_sql(g_pg, "UPDATE runs SET conc_held = true, status = 'completed', "
                         "outcome = 'cancelled', completed_at = now() WHERE id = 'h-4'"));
    /* a group of another replica's configuration */
    PQclear(th_sql(g_pg, "UPDATE runs SET conc_held = true, conc_group = 'legacy' "
                         "WHERE id = 'b-1'"));
    metrics_free(m);
    m = metrics_open(); /* an empty cache: read again */
    t = scrape(&rp);
    ck_assert_has(t, "opsrun_runs_held_by_key{group=\"db\"} 0");
    ck_assert_has(t, "opsrun_runs_held_by_key{group=\"host\"} 3");
    ck_assert_has(t, "opsrun_runs_held_by_key{group=\"legacy\"} 1");
    ck_assert_msg(strstr(t, "\n# TYPE opsrun_runs_held_by_key gauge\n"
                            "opsrun_runs_held_by_key{group=\"db\"} 0\n"
                            "opsrun_runs_held_by_key{group=\"host\"} 3\n"
                            "opsrun_runs_held_by_key{group=\"legacy\"} 1\n") != NULL,
                  "one family, its groups in order");
    reply_cleanup(&rp);
    metrics_free(m);
    g_hc.metrics = NULL;
    hc_close();
}
END_TEST

/* The database out of reach: still 200, with opsrun_database_up 0 and
 * without the database figures. */
START_TEST(metrics_database_down)
{
    struct error err = {0};
    struct db *held = NULL;
    struct metrics *m;
    struct reply rp;
    const char *t;

    hc_open("it_handlers_metrics_down", 1, 100);
    m = metrics_open();
    ck_assert_int_eq(db_pool_get(g_pool, &held, &err), ST_OK);
    t = scrape(&rp);
    ck_assert_has(t, "opsrun_database_up 0");
    ck_assert_has(t, "opsrun_ready 0");
    ck_assert_has(t, "opsrun_db_pool_in_use_connections 1");
    ck_assert_has(t, "opsrun_db_pool_wait_timeouts_total 1");
    ck_assert_hasnt(t, "opsrun_runs{");
    ck_assert_hasnt(t, "opsrun_poll_lag_seconds");
    reply_cleanup(&rp);
    db_pool_put(g_pool, held);
    metrics_free(m);
    g_hc.metrics = NULL;
    hc_close();
}
END_TEST

/* ---- the suite -------------------------------------------------------- */

static TCase *tcase(const char *name, double timeout_s)
{
    TCase *tc = tcase_create(name);
    tcase_set_timeout(tc, timeout_s);
    return tc;
}

int main(void)
{
    Suite *s = suite_create("handlers_db");
    TCase *tc;

    tc = tcase("alerts", 60);
    tcase_add_test(tc, alerts_create_join_and_conflict);
    tcase_add_test(tc, alerts_create_dedupe_key);
    tcase_add_test(tc, alerts_create_invalid);
    tcase_add_test(tc, alerts_create_wait);
    tcase_add_test(tc, alerts_create_alertmanager);
    tcase_add_test(tc, alerts_create_without_canonical_json);
    tcase_add_test(tc, alerts_concurrency_key_generic);
    tcase_add_test(tc, alerts_concurrency_key_alertmanager);
    tcase_add_test(tc, retry_concurrency_key);
    tcase_add_test(tc, bulk_retry_concurrency_key);
    suite_add_tcase(s, tc);

    tc = tcase("runs", 60);
    tcase_add_test(tc, runs_get_found_and_missing);
    tcase_add_test(tc, runs_list_filters_and_cursor);
    tcase_add_test(tc, runs_list_concurrency_key);
    tcase_add_test(tc, runs_get_waiting_for);
    tcase_add_test(tc, runs_cancel_paths);
    suite_add_tcase(s, tc);

    tc = tcase("health", 60);
    tcase_add_test(tc, health_up);
    tcase_add_test(tc, health_draining);
    tcase_add_test(tc, health_pool_exhausted);
    tcase_add_test(tc, metrics_counts_and_cache);
    tcase_add_test(tc, metrics_held_by_key);
    tcase_add_test(tc, metrics_database_down);
    suite_add_tcase(s, tc);

    return th_run_suite(s);
}
