/* tests/unit/test_handlers.c — the pure parts of the HTTP layer: generic
 * submission validation, list filter parsing, the bodies of approvals and
 * bulk actions, routing, and the status → problem+json mapping. */
#include "handlers/bulk.h"
#include "handlers/handlers.h"
#include "server/route.h"

#include "common/cursor.h"
#include "engine/actions/action.h"
#include "engine/actions/registry.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

static json_t *parse(const char *text)
{
    json_t *j = json_loads(text, 0, NULL);
    ck_assert_ptr_nonnull(j);
    return j;
}

/* Asserts that body fails validation with exactly the given field first. */
static void assert_invalid(const char *body, const char *field, const char *message)
{
    json_t *j = parse(body);
    struct submission s;
    struct error err = {0};

    ck_assert_int_eq(alerts_parse_generic(j, &s, &err), ST_INVALID);
    ck_assert_uint_ge(err.nfields, 1);
    ck_assert_str_eq(err.fields[0].field, field);
    ck_assert_str_eq(err.fields[0].message, message);
    json_decref(j);
}

START_TEST(generic_valid_full)
{
    json_t *j = parse("{\"alert_type\":\"demo\",\"data\":{\"a\":1},\"run_id\":\"deploy-1.a:b_c\","
                      "\"dedupe_key\":\"k\",\"priority\":-5,\"run_at\":\"2030-01-02T03:04:05Z\","
                      "\"labels\":{\"severity\":\"page\"}}");
    struct submission s;
    struct error err = {0};

    ck_assert_int_eq(alerts_parse_generic(j, &s, &err), ST_OK);
    ck_assert_str_eq(s.alert_type, "demo");
    ck_assert_str_eq(s.run_id, "deploy-1.a:b_c");
    ck_assert_str_eq(s.dedupe_key, "k");
    ck_assert_int_eq(s.priority, -5);
    ck_assert(s.has_run_at);
    ck_assert_int_eq(s.run_at_us, 1893553445000000LL);
    ck_assert(json_is_object(s.data));
    ck_assert(json_is_object(s.labels));
    json_decref(j);
}
END_TEST

START_TEST(generic_minimal)
{
    json_t *j = parse("{\"alert_type\":\"demo\"}");
    struct submission s;
    struct error err = {0};

    ck_assert_int_eq(alerts_parse_generic(j, &s, &err), ST_OK);
    ck_assert_ptr_null(s.data);
    ck_assert_ptr_null(s.run_id);
    ck_assert_int_eq(s.priority, 0);
    ck_assert(!s.has_run_at);
    json_decref(j);
}
END_TEST

START_TEST(generic_invalid_fields)
{
    assert_invalid("[]", "body", "must be a JSON object");
    assert_invalid("{}", "alert_type", "is required");
    assert_invalid("{\"alert_type\":3}", "alert_type", "must be a string of 1 to 128 characters");
    assert_invalid("{\"alert_type\":\"\"}", "alert_type",
                   "must be a string of 1 to 128 characters");
    assert_invalid("{\"alert_type\":\"d\",\"run_id\":\"a/b\"}", "run_id",
                   "must match [A-Za-z0-9._:-]{1,128}");
    assert_invalid("{\"alert_type\":\"d\",\"run_id\":7}", "run_id",
                   "must match [A-Za-z0-9._:-]{1,128}");
    assert_invalid("{\"alert_type\":\"d\",\"dedupe_key\":\"\"}", "dedupe_key",
                   "must be a string of 1 to 512 characters");
    assert_invalid("{\"alert_type\":\"d\",\"data\":[1]}", "data", "must be an object");
    assert_invalid("{\"alert_type\":\"d\",\"priority\":1.5}", "priority",
                   "must be an integer from -1000 to 1000");
    assert_invalid("{\"alert_type\":\"d\",\"priority\":1001}", "priority",
                   "must be an integer from -1000 to 1000");
    assert_invalid("{\"alert_type\":\"d\",\"run_at\":\"tomorrow\"}", "run_at",
                   "must be an RFC 3339 timestamp");
    /* Valid RFC 3339, but before year 1 in UTC: PostgreSQL has no year 0. */
    assert_invalid("{\"alert_type\":\"d\",\"run_at\":\"0000-01-01T00:00:00Z\"}", "run_at",
                   "must be between years 0001 and 9999 in UTC");
    assert_invalid("{\"alert_type\":\"d\",\"run_at\":\"0001-01-01T00:00:00+01:00\"}", "run_at",
                   "must be between years 0001 and 9999 in UTC");
    assert_invalid("{\"alert_type\":\"d\",\"labels\":{\"a\":1}}", "labels",
                   "label \"a\" must be a string");
    assert_invalid("{\"alert_type\":\"d\",\"labels\":\"x\"}", "labels",
                   "must be an object of strings");
    assert_invalid("{\"alert_type\":\"d\",\"prority\":1}", "prority", "is not a known field");
}
END_TEST

START_TEST(generic_reports_every_field)
{
    json_t *j = parse("{\"alert_type\":1,\"priority\":\"x\",\"run_at\":5,\"bogus\":true}");
    struct submission s;
    struct error err = {0};

    ck_assert_int_eq(alerts_parse_generic(j, &s, &err), ST_INVALID);
    ck_assert_uint_eq(err.nfields, 4);
    ck_assert_str_eq(err.fields[0].field, "alert_type");
    ck_assert_str_eq(err.fields[1].field, "priority");
    ck_assert_str_eq(err.fields[2].field, "run_at");
    ck_assert_str_eq(err.fields[3].field, "bogus");
    ck_assert_str_eq(err.message,
                     "invalid \"alert_type\": must be a string of 1 to 128 characters");
    json_decref(j);
}
END_TEST

struct qpairs {
    const char *k[8], *v[8];
};

static const char *qlookup(const struct request *rq, const char *key)
{
    const struct qpairs *q = rq->query_arg;
    for (int i = 0; i < 8 && q->k[i]; i++)
        if (strcmp(q->k[i], key) == 0)
            return q->v[i];
    return NULL;
}

static enum status filter(struct qpairs *q, struct run_filter *f, struct error *err)
{
    struct request rq = {.query = qlookup, .query_arg = q};
    return runs_parse_filter(&rq, f, err);
}

START_TEST(filter_defaults_and_values)
{
    struct qpairs q = {{"status", "outcome", "type", "external_id", "limit"},
                       {"running", "timed_out", "demo", "job-7", "500"}};
    struct qpairs none = {{NULL}, {NULL}};
    struct run_filter f;
    struct error err = {0};

    ck_assert_int_eq(filter(&none, &f, &err), ST_OK);
    ck_assert_int_eq(f.limit, 50);
    ck_assert(!f.has_status);
    ck_assert(!f.has_outcome);
    ck_assert(!f.has_cursor);
    ck_assert_int_eq(filter(&q, &f, &err), ST_OK);
    ck_assert(f.has_status);
    ck_assert_int_eq(f.status, RUN_RUNNING);
    ck_assert(f.has_outcome);
    ck_assert_int_eq(f.outcome, OUTCOME_TIMED_OUT);
    ck_assert_str_eq(f.type, "demo");
    ck_assert_str_eq(f.external_id, "job-7");
    ck_assert_int_eq(f.limit, 500);
}
END_TEST

/* ?wait=S: whole seconds 0..60, in milliseconds; anything else names
 * "wait". */
START_TEST(wait_param)
{
    static const char *const bad[] = {"", "-1", "61", "1.5", "2s", " 3", "99999999999999999999"};
    struct qpairs none = {{NULL}, {NULL}}, q = {{"wait"}, {"60"}};
    struct request rq = {.query = qlookup, .query_arg = &none};
    struct error err = {0};
    int64_t ms = -1;

    ck_assert_int_eq(parse_wait(&rq, &ms, &err), ST_OK);
    ck_assert_int_eq(ms, 0);
    rq.query_arg = &q;
    ck_assert_int_eq(parse_wait(&rq, &ms, &err), ST_OK);
    ck_assert_int_eq(ms, 60000);
    q.v[0] = "0";
    ck_assert_int_eq(parse_wait(&rq, &ms, &err), ST_OK);
    ck_assert_int_eq(ms, 0);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct error e = {0};
        q.v[0] = bad[i];
        ck_assert_msg(parse_wait(&rq, &ms, &e) == ST_INVALID, "wait=\"%s\" accepted", bad[i]);
        ck_assert_str_eq(e.fields[0].field, "wait");
        ck_assert_str_eq(e.fields[0].message, "must be whole seconds from 0 to 60");
    }
}
END_TEST

START_TEST(stream_filter)
{
    struct qpairs q = {{"type", "status", "limit", "parent_id"},
                       {"demo", "running", "junk", "w-1"}};
    struct qpairs bad = {{"type", "status", "parent_id"}, {"", "done", ""}};
    struct request rq = {.query = qlookup, .query_arg = &q};
    const char *type, *parent;
    bool has_status;
    enum run_status status;
    struct error err = {0};

    ck_assert_int_eq(stream_parse_filter(&rq, &type, &parent, &has_status, &status, &err),
                     ST_OK); /* limit: not ours */
    ck_assert_str_eq(type, "demo");
    ck_assert_str_eq(parent, "w-1");
    ck_assert(has_status);
    ck_assert_int_eq(status, RUN_RUNNING);
    rq.query_arg = &bad;
    ck_assert_int_eq(stream_parse_filter(&rq, &type, &parent, &has_status, &status, &err),
                     ST_INVALID);
    ck_assert(!has_status);
    ck_assert_uint_eq(err.nfields, 3);
    ck_assert_str_eq(err.fields[0].field, "status");
    ck_assert_str_eq(err.fields[1].field, "type");
    ck_assert_str_eq(err.fields[2].field, "parent_id");
}
END_TEST

START_TEST(filter_cursor_round_trip)
{
    char *token = cursor_encode(1700000000123456LL, "01ABC");
    struct qpairs q = {{"cursor"}, {token}};
    struct run_filter f;
    struct error err = {0};

    ck_assert_int_eq(filter(&q, &f, &err), ST_OK);
    ck_assert(f.has_cursor);
    ck_assert_int_eq(f.cursor_us, 1700000000123456LL);
    ck_assert_str_eq(f.cursor_id, "01ABC");
    free(token);
}
END_TEST

START_TEST(filter_invalid)
{
    static const struct {
        const char *k, *v, *field;
    } cases[] = {
        {"limit", "0", "limit"},    {"limit", "501", "limit"},    {"limit", "5x", "limit"},
        {"limit", "", "limit"},     {"status", "done", "status"}, {"outcome", "ok", "outcome"},
        {"cursor", "!!", "cursor"}, {"type", "", "type"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct qpairs q = {{cases[i].k}, {cases[i].v}};
        struct run_filter f;
        struct error err = {0};
        ck_assert_int_eq(filter(&q, &f, &err), ST_INVALID);
        ck_assert_str_eq(err.fields[0].field, cases[i].field);
    }
}
END_TEST

/* ?concurrency_key= (1 to 512 bytes, a key's longest) and
 * ?concurrency_group= (1 to 64 characters), each on its own or both. */
START_TEST(filter_concurrency)
{
    struct qpairs both = {{"concurrency_key", "concurrency_group"}, {"host/web-1", "host"}};
    struct qpairs key = {{"concurrency_key"}, {NULL}};
    char longest[513], over[514], group[66];
    struct run_filter f;
    struct error err = {0};

    ck_assert_int_eq(filter(&both, &f, &err), ST_OK);
    ck_assert_str_eq(f.conc_key, "host/web-1");
    ck_assert_str_eq(f.conc_group, "host");
    memset(longest, 'k', sizeof(longest) - 1);
    longest[sizeof(longest) - 1] = '\0';
    key.v[0] = longest;
    ck_assert_int_eq(filter(&key, &f, &err), ST_OK);
    ck_assert_str_eq(f.conc_key, longest);
    ck_assert_ptr_null(f.conc_group);

    memset(over, 'k', sizeof(over) - 1);
    over[sizeof(over) - 1] = '\0';
    memset(group, 'g', sizeof(group) - 1);
    group[sizeof(group) - 1] = '\0';
    {
        struct qpairs bad = {{"concurrency_key", "concurrency_group"}, {over, group}};
        struct error e = {0};
        ck_assert_int_eq(filter(&bad, &f, &e), ST_INVALID);
        ck_assert_uint_eq(e.nfields, 2);
        ck_assert_str_eq(e.fields[0].field, "concurrency_key");
        ck_assert_str_eq(e.fields[0].message, "must be 1 to 512 characters");
        ck_assert_str_eq(e.fields[1].field, "concurrency_group");
        ck_assert_str_eq(e.fields[1].message, "must be 1 to 64 characters");
    }
    {
        struct qpairs empty = {{"concurrency_key", "concurrency_group"}, {"", ""}};
        struct error e = {0};
        ck_assert_int_eq(filter(&empty, &f, &e), ST_INVALID);
        ck_assert_uint_eq(e.nfields, 2);
    }
}
END_TEST

START_TEST(routes_match)
{
    struct route_hit m;

    ck_assert_int_eq(route_find("POST", "/alerts", &m), ROUTE_FOUND);
    ck_assert(m.entry->json_body);
    ck_assert_int_eq(route_find("GET", "/runs", &m), ROUTE_FOUND);
    ck_assert_int_eq(route_find("GET", "/runs/abc.1:2-3_4", &m), ROUTE_FOUND);
    ck_assert_str_eq(m.id, "abc.1:2-3_4");
    ck_assert_int_eq(route_find("GET", "/runs/r1/events", &m), ROUTE_FOUND);
    ck_assert_str_eq(m.id, "r1");
    ck_assert_int_eq(route_find("POST", "/runs/r1/cancel", &m), ROUTE_FOUND);
    ck_assert(!m.entry->json_body);
    ck_assert_int_eq(route_find("POST", "/runs/r1/approve", &m), ROUTE_FOUND);
    ck_assert_int_eq(m.entry->json_body, BODY_JSON_OPTIONAL);
    ck_assert_int_eq(m.entry->need, NEED_APPROVE);
    ck_assert_int_eq(route_find("POST", "/runs/r1/reject", &m), ROUTE_FOUND);
    ck_assert(m.entry->fn == handle_runs_reject);
    /* the bulk actions before /runs/{id}: "cancel" is not a run there */
    ck_assert_int_eq(route_find("POST", "/runs/cancel", &m), ROUTE_FOUND);
    ck_assert(m.entry->fn == handle_runs_bulk_cancel);
    ck_assert_int_eq(m.entry->json_body, BODY_JSON);
    ck_assert_int_eq(m.entry->need, NEED_CANCEL);
    ck_assert_int_eq(route_find("POST", "/runs/retry", &m), ROUTE_FOUND);
    ck_assert(m.entry->fn == handle_runs_bulk_retry);
    ck_assert_int_eq(route_find("GET", "/runs/retry", &m), ROUTE_FOUND);
    ck_assert(m.entry->fn == handle_runs_get);
    ck_assert_int_eq(route_find("HEAD", "/healthz", &m), ROUTE_FOUND);
    ck_assert_int_eq(route_find("GET", "/", &m), ROUTE_FOUND);
    ck_assert(m.entry->fn == handle_web_get);
    ck_assert_int_eq(m.entry->need, NEED_OPEN);
    ck_assert_str_eq(m.id, "");
    ck_assert_int_eq(route_find("GET", "/web/app.js", &m), ROUTE_FOUND);
    ck_assert_str_eq(m.entry->pattern, "/web/{name}");
    ck_assert_int_eq(m.entry->need, NEED_OPEN);
    ck_assert_str_eq(m.id, "app.js");
}
END_TEST

START_TEST(routes_reject)
{
    struct route_hit m;

    ck_assert_int_eq(route_find("GET", "//", &m), ROUTE_NOT_FOUND);
    ck_assert_int_eq(route_find("GET", "/web/", &m), ROUTE_NOT_FOUND);
    ck_assert_int_eq(route_find("GET", "/web/a/b.js", &m), ROUTE_NOT_FOUND);
    ck_assert_int_eq(route_find("POST", "/", &m), ROUTE_METHOD);
    ck_assert_str_eq(m.allow, "GET");
    ck_assert_int_eq(route_find("GET", "/runs/", &m), ROUTE_NOT_FOUND);
    ck_assert_int_eq(route_find("GET", "/runs/a b", &m), ROUTE_NOT_FOUND);
    ck_assert_int_eq(route_find("GET", "/runs/r1/events/x", &m), ROUTE_NOT_FOUND);
    ck_assert_int_eq(route_find("GET", "/alertsx", &m), ROUTE_NOT_FOUND);
    ck_assert_int_eq(route_find("DELETE", "/runs", &m), ROUTE_METHOD);
    ck_assert_str_eq(m.allow, "GET");
    ck_assert_int_eq(route_find("GET", "/alerts", &m), ROUTE_METHOD);
    ck_assert_str_eq(m.allow, "POST");
    ck_assert_int_eq(route_find("GET", "/runs/r1/cancel", &m), ROUTE_METHOD);
    ck_assert_str_eq(m.allow, "POST");
}
END_TEST

static const char *no_query(const struct request *rq, const char *key)
{
    (void)rq;
    (void)key;
    return NULL;
}

/* The dashboard's files: index.html at /, the others by name, each with
 * its type, a strong ETag and the headers that keep the page to itself. */
START_TEST(web_files)
{
    struct request rq = {.method = "GET", .path = "/", .query = no_query};
    struct reply rp;

    ck_assert_str_eq(web_content_type("index.html"), "text/html; charset=utf-8");
    ck_assert_str_eq(web_content_type("app.js"), "text/javascript; charset=utf-8");
    ck_assert_str_eq(web_content_type("app.css"), "text/css; charset=utf-8");
    ck_assert_str_eq(web_content_type("icon.svg"), "image/svg+xml");
    ck_assert_ptr_null(web_content_type("x.exe"));
    ck_assert_ptr_null(web_content_type(".js"));

    reply_init(&rp);
    ck_assert_int_eq(handle_web_get(NULL, &rq, &rp), ST_OK);
    ck_assert_uint_eq(rp.http_status, 200);
    ck_assert_str_eq(rp.text_type, "text/html; charset=utf-8");
    ck_assert_ptr_nonnull(strstr(rp.text, "<script type=\"module\" src=\"/web/app.js\">"));
    ck_assert_uint_eq(strlen(reply_header_get(&rp, "ETag")), 66);
    ck_assert_str_eq(reply_header_get(&rp, "Cache-Control"), "no-cache");
    ck_assert_ptr_nonnull(strstr(reply_header_get(&rp, "Content-Security-Policy"),
                                 "default-src 'none'; script-src 'self'"));
    ck_assert_str_eq(reply_header_get(&rp, "X-Content-Type-Options"), "nosniff");
    reply_cleanup(&rp);

    rq.path = "/web/app.js";
    rq.path_id = "app.js";
    reply_init(&rp);
    ck_assert_int_eq(handle_web_get(NULL, &rq, &rp), ST_OK);
    ck_assert_str_eq(rp.text_type, "text/javascript; charset=utf-8");
    reply_cleanup(&rp);

    rq.path = "/web/nothing.js";
    rq.path_id = "nothing.js";
    reply_init(&rp);
    ck_assert_int_eq(handle_web_get(NULL, &rq, &rp), ST_NOT_FOUND);
    ck_assert_uint_eq(rp.http_status, 404);
    ck_assert(rp.problem);
    reply_cleanup(&rp);
}
END_TEST

START_TEST(problem_mapping)
{
    static const struct {
        enum status st;
        unsigned http;
    } map[] = {
        {ST_INVALID, 400},   {ST_NOT_FOUND, 404},   {ST_METHOD, 405},        {ST_CONFLICT, 409},
        {ST_TOO_LARGE, 413}, {ST_UNSUPPORTED, 415}, {ST_UNPROCESSABLE, 422}, {ST_UNAVAILABLE, 503},
        {ST_BUSY, 503},      {ST_DB, 500},          {ST_INTERNAL, 500},
    };
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
        struct reply rp;
        struct error err = {0};
        error_field(&err, map[i].st, "f", "bad");
        reply_init(&rp);
        reply_error(&rp, map[i].st, &err);
        ck_assert_uint_eq(rp.http_status, map[i].http);
        ck_assert(rp.problem);
        ck_assert_int_eq(json_integer_value(json_object_get(rp.body, "status")), map[i].http);
        ck_assert(json_is_string(json_object_get(rp.body, "title")));
        ck_assert_str_eq(json_string_value(json_object_get(rp.body, "type")), "about:blank");
        if (map[i].http == 500)
            ck_assert_str_eq(json_string_value(json_object_get(rp.body, "detail")),
                             "internal error; see the server log");
        else if (map[i].st == ST_UNAVAILABLE) /* internal details stay in the log */
            ck_assert_str_eq(json_string_value(json_object_get(rp.body, "detail")),
                             "temporarily unavailable (database unreachable or busy); retry later");
        else
            ck_assert_str_eq(json_string_value(json_object_get(rp.body, "detail")),
                             "invalid \"f\": bad");
        ck_assert_uint_eq(json_array_size(json_object_get(rp.body, "errors")), 1);
        ck_assert_uint_eq(rp.nheaders, map[i].http == 503 ? 1u : 0u);
        reply_cleanup(&rp);
    }
}
END_TEST

/* A state of the database a client may know (read-only, full, too slow)
 * is named in a 503's detail and as "reason"; the database's own words
 * stay in the log. */
START_TEST(problem_names_a_database_state)
{
    struct reply rp;
    struct error err = {0};

    (void)error_set(&err, ST_UNAVAILABLE,
                    "runs_submit_batch failed: cannot execute INSERT in a "
                    "read-only transaction");
    err.reason = "the database is read-only";
    reply_init(&rp);
    reply_error(&rp, ST_UNAVAILABLE, &err);
    ck_assert_uint_eq(rp.http_status, 503);
    ck_assert_str_eq(json_string_value(json_object_get(rp.body, "detail")),
                     "temporarily unavailable: the database is read-only; retry later");
    ck_assert_str_eq(json_string_value(json_object_get(rp.body, "reason")),
                     "the database is read-only");
    ck_assert_str_eq(reply_header_get(&rp, "Retry-After"), "1");
    reply_cleanup(&rp);

    /* A new message forgets the old reason. */
    (void)error_set(&err, ST_UNAVAILABLE, "no database connection free within 2000 ms");
    ck_assert_ptr_null(err.reason);
    reply_init(&rp);
    reply_error(&rp, ST_UNAVAILABLE, &err);
    ck_assert_ptr_null(json_object_get(rp.body, "reason"));
    reply_cleanup(&rp);
}
END_TEST

/* Extension members follow the four standard ones in their order, and
 * cannot replace them; a 503 carries Retry-After. */
START_TEST(problem_extra_members)
{
    struct reply rp;
    char *got;

    reply_init(&rp);
    reply_problem_take(&rp, ST_UNAVAILABLE, "why",
                       json_pack("{s:s, s:s, s:i, s:n}", "reason", "why", "title", "replaced",
                                 "status", 200, "engine"));
    ck_assert_uint_eq(rp.http_status, 503);
    ck_assert(rp.problem);
    got = json_dumps(rp.body, JSON_COMPACT);
    ck_assert_str_eq(got, "{\"type\":\"about:blank\",\"title\":\"Service Unavailable\","
                          "\"status\":503,\"detail\":\"why\",\"reason\":\"why\",\"engine\":null}");
    ck_assert_uint_eq(rp.nheaders, 1);
    ck_assert_str_eq(rp.headers[0].name, "Retry-After");
    ck_assert_str_eq(rp.headers[0].value, "1");
    free(got);
    reply_cleanup(&rp);

    reply_init(&rp);
    reply_problem_take(&rp, ST_NOT_FOUND, "no such thing", NULL);
    got = json_dumps(rp.body, JSON_COMPACT);
    ck_assert_str_eq(got, "{\"type\":\"about:blank\",\"title\":\"Not Found\",\"status\":404,"
                          "\"detail\":\"no such thing\"}");
    ck_assert_uint_eq(rp.nheaders, 0);
    free(got);
    reply_cleanup(&rp);
}
END_TEST

/* The detail of POST /alerts for body, which must be a 422, with the run
 * types of config (a JSON configuration) besides "demo". */
static char *unknown_type_detail(const char *config, const char *body)
{
    struct config cfg;
    struct error err = {0};
    struct hctx hc = {.cfg = &cfg};
    struct request rq = {.method = "POST",
                         .path = "/alerts",
                         .tenant = "default",
                         .initiator = "anonymous",
                         .query = no_query};
    struct reply rp;
    char *detail;

    cfg_init(&cfg, &action_registry);
    ck_assert_msg(cfg_load_json(&cfg, config, &err) == ST_OK, "%s", err.message);
    rq.body = parse(body);
    reply_init(&rp);
    ck_assert_int_eq(handle_alerts_create(&hc, &rq, &rp), ST_UNPROCESSABLE);
    ck_assert_uint_eq(rp.http_status, 422);
    detail = strdup(json_string_value(json_object_get(rp.body, "detail")));
    reply_cleanup(&rp);
    json_decref(rq.body);
    cfg_cleanup(&cfg);
    return detail;
}

/* An unknown alert_type's detail lists the first 20 run types and names
 * the nearest one; long names are listed as far as the detail has room. */
START_TEST(unknown_alert_type_detail)
{
    char config[4096], *detail;
    size_t len = 0;

    len += (size_t)snprintf(config + len, sizeof(config) - len, "{\"run_types\": {");
    for (int i = 0; i < 25; i++)
        len += (size_t)snprintf(config + len, sizeof(config) - len,
                                "%s\"t%02d\": {\"action\": \"simulate\"}", i ? ", " : "", i);
    snprintf(config + len, sizeof(config) - len, "}}");
    detail = unknown_type_detail(config, "{\"alert_type\": \"t2x\"}");
    ck_assert_str_eq(detail, "invalid \"alert_type\": no route or run type matches \"t2x\" "
                             "(known run types: demo, t00, t01, t02, t03, t04, t05, t06, t07, "
                             "t08, t09, t10, t11, t12, t13, t14, t15, t16, t17, t18, and 6 more); "
                             "did you mean \"t20\"?");
    free(detail);

    len = (size_t)snprintf(config, sizeof(config), "{\"run_types\": {\"demo\": null");
    for (int i = 0; i < 5; i++)
        len += (size_t)snprintf(config + len, sizeof(config) - len,
                                ", \"%c%063d\": {\"action\": \"simulate\"}", 'a' + i, i);
    snprintf(config + len, sizeof(config) - len, "}}");
    detail = unknown_type_detail(config, "{\"alert_type\": \"nosuch\"}");
    ck_assert_str_eq(detail, "invalid \"alert_type\": no route or run type matches \"nosuch\" "
                             "(known run types: "
                             "a000000000000000000000000000000000000000000000000000000000000000, "
                             "b000000000000000000000000000000000000000000000000000000000000001, "
                             "and 3 more)");
    free(detail);

    detail = unknown_type_detail("{\"run_types\": {\"demo\": null}}", "{\"alert_type\": \"x\"}");
    ck_assert_str_eq(detail, "invalid \"alert_type\": no route or run type matches \"x\" "
                             "(no run types are configured)");
    free(detail);
}
END_TEST

/* ---- approvals and bulk actions ---- */

START_TEST(approval_body)
{
    struct error err = {0};
    const char *comment = "x";
    char long_comment[2048];
    json_t *j;

    ck_assert_int_eq(approvals_parse_body(NULL, &comment, &err), ST_OK);
    ck_assert_ptr_null(comment);
    j = parse("{\"comment\": \"looks right\"}");
    ck_assert_int_eq(approvals_parse_body(j, &comment, &err), ST_OK);
    ck_assert_str_eq(comment, "looks right");
    json_decref(j);
    j = parse("{\"comment\": \"\"}");
    ck_assert_int_eq(approvals_parse_body(j, &comment, &err), ST_OK);
    ck_assert_ptr_null(comment);
    json_decref(j);
    j = parse("{}");
    ck_assert_int_eq(approvals_parse_body(j, &comment, &err), ST_OK);
    json_decref(j);
    /* characters, not bytes: 1000 of two bytes each are allowed, 1001 are not */
    for (int i = 0; i < 1000; i++)
        memcpy(long_comment + 2 * i, "\xc3\xa9", 2);
    j = json_pack("{s:s%}", "comment", long_comment, (size_t)2000);
    ck_assert_int_eq(approvals_parse_body(j, &comment, &err), ST_OK);
    json_decref(j);
    memset(long_comment, 'a', 1001);
    long_comment[1001] = '\0';
    j = json_pack("{s:s}", "comment", long_comment);
    ck_assert_int_eq(approvals_parse_body(j, &comment, &err), ST_INVALID);
    ck_assert_str_eq(err.message, "invalid \"comment\": must be at most 1000 characters");
    json_decref(j);
    memset(&err, 0, sizeof(err));
    j = parse("{\"comment\": 1, \"by\": \"me\"}");
    ck_assert_int_eq(approvals_parse_body(j, &comment, &err), ST_INVALID);
    ck_assert_uint_eq(err.nfields, 2);
    ck_assert_str_eq(err.fields[0].field, "comment");
    ck_assert_str_eq(err.fields[1].field, "by");
    json_decref(j);
    memset(&err, 0, sizeof(err));
    j = parse("[1]");
    ck_assert_int_eq(approvals_parse_body(j, &comment, &err), ST_INVALID);
    ck_assert_str_eq(err.message, "invalid \"body\": must be a JSON object");
    json_decref(j);
}
END_TEST

START_TEST(bulk_body)
{
    struct bulk_request b;
    struct error err = {0};
    json_t *j =
        parse("{\"filter\": {\"status\": [\"queued\", \"waiting\"], \"outcome\": "
              "[\"failed\"], \"type\": \"deploy\", \"created_after\": "
              "\"2026-01-01T00:00:00Z\", \"created_before\": \"2026-01-02T00:00:00+02:00\", "
              "\"schedule\": \"nightly\", \"parent_id\": \"r-1\"}, \"dry_run\": true, "
              "\"limit\": 100000}");

    ck_assert_int_eq(bulk_parse(j, &b, &err), ST_OK);
    ck_assert_uint_eq(b.filter.statuses, (1u << RUN_QUEUED) | (1u << RUN_WAITING));
    ck_assert_uint_eq(b.filter.outcomes, 1u << OUTCOME_FAILED);
    ck_assert_str_eq(b.filter.type, "deploy");
    ck_assert_str_eq(b.filter.schedule, "nightly");
    ck_assert_str_eq(b.filter.parent_id, "r-1");
    ck_assert_str_eq(b.filter.created_after, "2026-01-01T00:00:00Z");
    ck_assert_str_eq(b.filter.created_before, "2026-01-02T00:00:00+02:00");
    ck_assert(b.dry_run);
    ck_assert_int_eq(b.limit, 100000);
    json_decref(j);
    j = parse("{\"filter\": {\"all\": true}}");
    ck_assert_int_eq(bulk_parse(j, &b, &err), ST_OK);
    ck_assert(!b.dry_run);
    ck_assert_int_eq(b.limit, BULK_LIMIT_DEFAULT);
    ck_assert_uint_eq(b.filter.statuses, 0);
    json_decref(j);
}
END_TEST

/* Each bad body, with the field and the message of its first error. */
START_TEST(bulk_body_invalid)
{
    static const struct {
        const char *body, *field, *message;
    } v[] = {
        {"[]", "body", "must be a JSON object"},
        {"{}", "filter", "is required: an object of criteria"},
        {"{\"filter\": {}}", "filter",
         "is empty; to act on every run, say so: {\"filter\": {\"all\": true}}"},
        {"{\"filter\": {\"all\": false}}", "filter",
         "is empty; to act on every run, say so: {\"filter\": {\"all\": true}}"},
        {"{\"filter\": {\"all\": 1}}", "filter.all", "must be true or false"},
        {"{\"filter\": {\"status\": []}}", "filter.status",
         "must be a non-empty array of status names"},
        {"{\"filter\": {\"status\": \"queued\"}}", "filter.status",
         "must be a non-empty array of status names"},
        {"{\"filter\": {\"status\": [\"done\"]}}", "filter.status",
         "must hold status names: queued, running, waiting, cancelling, completed"},
        {"{\"filter\": {\"outcome\": [\"queued\"]}}", "filter.outcome",
         "must hold outcome names: pending, succeeded, partially_succeeded, failed, cancelled, "
         "timed_out"},
        {"{\"filter\": {\"type\": \"\"}}", "filter.type", "must be a string of 1 to 64 characters"},
        {"{\"filter\": {\"created_after\": \"yesterday\"}}", "filter.created_after",
         "must be an RFC 3339 timestamp"},
        {"{\"filter\": {\"parent_id\": 7}}", "filter.parent_id",
         "must be a string of 1 to 128 characters"},
        {"{\"filter\": {\"tenant\": \"x\"}}", "filter.tenant",
         "is not a filter; expected status, outcome, type, created_after, created_before, "
         "parent_id, schedule or all"},
        {"{\"filter\": {\"all\": true}, \"limit\": 100001}", "limit",
         "must be an integer from 1 to 100000"},
        {"{\"filter\": {\"all\": true}, \"limit\": 0}", "limit",
         "must be an integer from 1 to 100000"},
        {"{\"filter\": {\"all\": true}, \"dry_run\": \"yes\"}", "dry_run", "must be true or false"},
        {"{\"filter\": {\"all\": true}, \"force\": true}", "force",
         "is not a known field; expected filter, dry_run or limit"},
    };

    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        struct bulk_request b;
        struct error err = {0};
        json_t *j = parse(v[i].body);

        ck_assert_msg(bulk_parse(j, &b, &err) == ST_INVALID, "%s accepted", v[i].body);
        ck_assert_uint_ge(err.nfields, 1);
        ck_assert_str_eq(err.fields[0].field, v[i].field);
        ck_assert_str_eq(err.fields[0].message, v[i].message);
        json_decref(j);
    }
}
END_TEST

START_TEST(filter_approval)
{
    struct qpairs q = {{"approval"}, {"pending"}};
    struct run_filter f;
    struct error err = {0};

    ck_assert_int_eq(filter(&q, &f, &err), ST_OK);
    ck_assert(f.approval_pending);
    q.v[0] = "approved";
    ck_assert_int_eq(filter(&q, &f, &err), ST_INVALID);
    ck_assert_str_eq(err.message, "invalid \"approval\": must be pending");
}
END_TEST

static Suite *handlers_suite(void)
{
    Suite *s = suite_create("handlers");
    TCase *t = tcase_create("validation");

    tcase_add_test(t, generic_valid_full);
    tcase_add_test(t, generic_minimal);
    tcase_add_test(t, generic_invalid_fields);
    tcase_add_test(t, generic_reports_every_field);
    tcase_add_test(t, filter_defaults_and_values);
    tcase_add_test(t, filter_cursor_round_trip);
    tcase_add_test(t, wait_param);
    tcase_add_test(t, stream_filter);
    tcase_add_test(t, filter_invalid);
    tcase_add_test(t, filter_concurrency);
    tcase_add_test(t, routes_match);
    tcase_add_test(t, routes_reject);
    tcase_add_test(t, web_files);
    tcase_add_test(t, problem_mapping);
    tcase_add_test(t, problem_names_a_database_state);
    tcase_add_test(t, problem_extra_members);
    tcase_add_test(t, unknown_alert_type_detail);
    tcase_add_test(t, approval_body);
    tcase_add_test(t, bulk_body);
    tcase_add_test(t, bulk_body_invalid);
    tcase_add_test(t, filter_approval);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(handlers_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
