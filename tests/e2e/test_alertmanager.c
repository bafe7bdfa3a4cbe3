/* tests/e2e/test_alertmanager.c — POST /alerts with Prometheus Alertmanager
 * webhook bodies (version 4, as Alertmanager documents them) against one
 * real opsrun process: a firing alert becomes a run whose input is the whole
 * alert plus the group's receiver, externalURL and groupKey; repeated
 * notifications join it; a batch with mixed routes, an unroutable and an
 * invalid alert is answered 2xx with one result per alert; resolved alerts
 * cancel or leave their run as the route says; alerts without a fingerprint
 * are identified by their labels; truncatedAlerts is echoed and logged; a
 * malformed envelope is a 400 naming the fields; generic bodies route by
 * labels; and with the database down the batch is a 503 that Alertmanager
 * can retry without losing or duplicating anything. Every test case gets a
 * fresh database and its own process; the database-down case runs last and
 * always restarts PostgreSQL (an unchecked fixture). */
#include "../support/harness.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- configuration ---- */

/* "restart" runs long, so that repeats, resolutions and cancels meet an
 * active run; route A picks it by an exact alertname and a regex severity
 * and cancels on resolve. Route B sends every Disk* alert to "demo" (3 s
 * runs) and leaves it alone on resolve (the default). No default route, so
 * other alerts are unroutable. */
static const char config_json[] =
    "{\"queue\": {\"shutdown_grace_s\": 1},"
    " \"run_types\": {"
    "  \"restart\": {\"action\": \"simulate\", \"params\": {\"duration_ms\": 20000, \"steps\": 4},"
    "               \"max_attempts\": 1},"
    "  \"demo\": {\"params\": {\"duration_ms\": 3000}}},"
    " \"routes\": ["
    "  {\"match\": {\"alertname\": \"HighLatency\", \"severity\": \"~critical|page\"},"
    "   \"run_type\": \"restart\", \"on_resolved\": \"cancel\"},"
    "  {\"match\": {\"alertname\": \"~Disk.*\"}, \"run_type\": \"demo\"}]}";

/* ---- payloads ---- */

#define STARTS_AT "2026-11-22T09:52:26.739266876+02:00"
#define ENDS_AT_RESOLVED "2026-11-22T10:07:26.739266876+02:00"
#define EXTERNAL_URL "http://alertmanager.example.com:9093"
#define RECEIVER "opsrun-webhook"

/* One alert as Alertmanager sends it. labels is a JSON object's text;
 * fingerprint NULL leaves it out; extra ("" or ", \"k\": v") adds fields. */
static void am_alert(char *out, size_t cap, const char *status, const char *labels,
                     const char *fingerprint, const char *extra)
{
    char fp[200] = "";
    bool resolved = strcmp(status, "resolved") == 0;

    if (fingerprint)
        snprintf(fp, sizeof(fp), ", \"fingerprint\": \"%s\"", fingerprint);
    snprintf(out, cap,
             "{\"status\": \"%s\", \"labels\": %s,"
             " \"annotations\": {\"summary\": \"p99 request latency above 2s\","
             "  \"description\": \"api p99 latency is 2.7s on api-1:9100\","
             "  \"runbook_url\": \"https://runbooks.example.com/high-latency\"},"
             " \"startsAt\": \"" STARTS_AT "\", \"endsAt\": \"%s\","
             " \"generatorURL\": \"http://prometheus.example.com:9090/graph?g0.expr="
             "histogram_quantile%%280.99%%2C+rate%%28http_request_duration_seconds_bucket%%5B5m"
             "%%5D%%29%%29+%%3E+2&g0.tab=1\"%s%s}",
             status, labels, resolved ? ENDS_AT_RESOLVED : "0001-01-01T00:00:00Z", fp, extra);
}

/* The notification around alerts (a comma-separated list of alerts). */
static void am_body(char *out, size_t cap, const char *status, const char *group,
                    const char *alerts, long truncated, const char *extra)
{
    snprintf(out, cap,
             "{\"receiver\": \"" RECEIVER "\", \"status\": \"%s\","
             " \"alerts\": [%s],"
             " \"groupLabels\": {\"alertname\": \"%s\"},"
             " \"commonLabels\": {\"alertname\": \"%s\"},"
             " \"commonAnnotations\": {},"
             " \"externalURL\": \"" EXTERNAL_URL "\","
             " \"version\": \"4\","
             " \"groupKey\": \"{}/{severity=\\\"critical\\\"}:{alertname=\\\"%s\\\"}\","
             " \"truncatedAlerts\": %ld%s}",
             status, alerts, group, group, group, truncated, extra);
}

#define LATENCY_LABELS                                                                             \
    "{\"alertname\": \"HighLatency\", \"severity\": \"critical\", \"instance\": \"api-1:9100\","   \
    " \"job\": \"api\"}"

/* ---- helpers ---- */

/* POSTs a webhook body, asserts the HTTP status, a JSON body and, for 2xx,
 * the shape {"runs": [...], "truncated_alerts": n}. */
static void post_am(const struct th_proc *p, const char *body, long want, struct th_resp *r)
{
    th_post_json(p->url, "/alerts", body, r);
    ck_assert_msg(r->status == want, "POST /alerts: HTTP %ld, want %ld; body %s\nrequest %s",
                  r->status, want, r->body, body);
    ck_assert_msg(r->json != NULL, "POST /alerts: body is not JSON: %s", r->body);
    if (want < 300) {
        ck_assert_msg(strncmp(r->content_type, "application/json", 16) == 0, "Content-Type %s",
                      r->content_type);
        ck_assert_msg(json_is_array(json_object_get(r->json, "runs")), "no runs[]: %s", r->body);
        ck_assert_msg(json_is_integer(json_object_get(r->json, "truncated_alerts")),
                      "no truncated_alerts: %s", r->body);
    }
}

/* results[i], asserting its index and action (NULL: an error result). */
static const json_t *result(const struct th_resp *r, size_t i, const char *action)
{
    const json_t *res = json_array_get(json_object_get(r->json, "runs"), i);

    ck_assert_msg(json_is_object(res), "no result %zu: %s", i, r->body);
    ck_assert_msg(json_is_integer(json_object_get(res, "index")) &&
                      th_ji(res, "index") == (long long)i,
                  "result %zu: index %lld: %s", i, th_ji(res, "index"), r->body);
    ck_assert_msg(json_object_get(res, "fingerprint") != NULL, "result %zu: no fingerprint: %s", i,
                  r->body);
    if (action)
        ck_assert_msg(th_streq(th_js(res, "action"), action), "result %zu: action %s, want %s: %s",
                      i, th_js(res, "action") ? th_js(res, "action") : "(none)", action, r->body);
    return res;
}

/* A created or joined result's run id, with the intake result's shape. */
static const char *result_run(const struct th_resp *r, size_t i, const char *action)
{
    const json_t *res = result(r, i, action);
    const char *id = th_js(res, "run_id");
    char path[256];

    ck_assert_msg(id && *id, "result %zu: no run_id: %s", i, r->body);
    ck_assert_msg(json_is_string(json_object_get(res, "status")) &&
                      json_is_string(json_object_get(res, "outcome")),
                  "result %zu: no status/outcome: %s", i, r->body);
    ck_assert_msg(json_is_boolean(json_object_get(res, "deduplicated")) &&
                      json_is_true(json_object_get(res, "deduplicated")) ==
                          !th_streq(action, "created"),
                  "result %zu: deduplicated wrong for %s: %s", i, action, r->body);
    snprintf(path, sizeof(path), "/runs/%s", id);
    ck_assert_msg(th_streq(th_js(json_object_get(res, "links"), "self"), path),
                  "result %zu: links: %s", i, r->body);
    return id;
}

/* A per-alert error result: {"index", "fingerprint", "error": {"status",
 * "detail", "errors": [...]}}; returns "error". */
static const json_t *result_error(const struct th_resp *r, size_t i, long http)
{
    const json_t *res = result(r, i, NULL);
    const json_t *e = json_object_get(res, "error");

    ck_assert_msg(json_is_object(e), "result %zu: no error: %s", i, r->body);
    ck_assert_msg(!json_object_get(res, "run_id") && !json_object_get(res, "action"),
                  "result %zu: an error result with a run: %s", i, r->body);
    ck_assert_msg(th_ji(e, "status") == http, "result %zu: error status %lld, want %ld: %s", i,
                  th_ji(e, "status"), http, r->body);
    ck_assert_msg(json_is_string(json_object_get(e, "detail")), "result %zu: no detail: %s", i,
                  r->body);
    ck_assert_msg(json_is_array(json_object_get(e, "errors")), "result %zu: no errors[]: %s", i,
                  r->body);
    return e;
}

/* The current test's database (each test case runs in its own process). */
static const char *test_conninfo;

/* A process with config_json on a fresh database (test_conninfo). */
static void start_fresh(struct th_proc *p, const char *db)
{
    test_conninfo = th_start_fresh(p, db, config_json);
}

/* Runs in the database of the current test case. */
static long long count_runs(const char *where)
{
    PGconn *c = th_pg(test_conninfo);
    long long n = th_sql_int(c, "SELECT count(*) FROM runs WHERE %s", where);
    PQfinish(c);
    return n;
}

/* Whether the run's events hold a cancel request. */
static bool cancel_requested(const struct th_proc *p, const char *id)
{
    char path[256];
    struct th_resp r;
    size_t i;
    const json_t *ev;
    bool found = false;

    snprintf(path, sizeof(path), "/runs/%s/events", id);
    th_get(p->url, path, &r);
    ck_assert_msg(r.status == 200 && r.json, "GET %s: HTTP %ld %s", path, r.status, r.body);
    json_array_foreach(json_object_get(r.json, "events"), i, ev)
    {
        found = found || th_streq(th_js(ev, "message"), "cancel requested");
    }
    th_resp_free(&r);
    return found;
}

/* Whether the process log has a line holding every needle (polls 3 s). */
static bool log_has_line(const char *log, const char *const *needles)
{
    for (long long until = th_now_ms() + 3000; th_now_ms() < until; th_sleep_ms(50)) {
        FILE *f = fopen(log, "r");
        char line[2048];
        bool found = false;

        while (f && !found && fgets(line, sizeof(line), f)) {
            found = true;
            for (size_t i = 0; needles[i] && found; i++)
                found = strstr(line, needles[i]) != NULL;
        }
        if (f)
            fclose(f);
        if (found)
            return true;
    }
    return false;
}

/* ---- firing, then repeated notifications ---- */

START_TEST(test_firing_and_repeat)
{
    struct th_proc p;
    struct th_resp r;
    char alert[4096], body[20480];
    char *id;
    json_t *run, *in, *want_labels;

    start_fresh(&p, "e2e_am_firing");
    /* Fields no Alertmanager sends yet, at both levels, are ignored. */
    am_alert(alert, sizeof(alert), "firing", LATENCY_LABELS, "6d1c9b2a8f7e0d43",
             ", \"silencedBy\": [], \"inhibitedBy\": [], \"mutedBy\": [\"window\"]");
    am_body(body, sizeof(body), "firing", "HighLatency", alert, 0,
            ", \"notificationTimestamp\": \"2026-11-22T07:52:56Z\", \"meta\": {\"x\": 1}");
    post_am(&p, body, 202, &r);
    ck_assert_msg(r.location[0] == '\0', "a batch answer with Location: %s", r.location);
    ck_assert_uint_eq(json_array_size(json_object_get(r.json, "runs")), 1);
    ck_assert_int_eq(th_ji(r.json, "truncated_alerts"), 0);
    id = strdup(result_run(&r, 0, "created"));
    ck_assert_str_eq(th_js(result(&r, 0, NULL), "fingerprint"), "6d1c9b2a8f7e0d43");
    th_resp_free(&r);

    /* The run: type from route A, input the whole alert plus the group's
     * receiver, externalURL and groupKey. */
    run = th_get_run(&p, id);
    ck_assert_str_eq(th_js(run, "type"), "restart");
    in = json_object_get(run, "input");
    want_labels = json_loads(LATENCY_LABELS, 0, NULL);
    ck_assert_msg(json_equal(json_object_get(in, "labels"), want_labels), "input.labels: %s",
                  json_dumps(in, 0));
    ck_assert_str_eq(th_js(json_object_get(in, "annotations"), "summary"),
                     "p99 request latency above 2s");
    ck_assert_str_eq(th_js(json_object_get(in, "annotations"), "runbook_url"),
                     "https://runbooks.example.com/high-latency");
    ck_assert_str_eq(th_js(in, "status"), "firing");
    ck_assert_str_eq(th_js(in, "fingerprint"), "6d1c9b2a8f7e0d43");
    ck_assert_str_eq(th_js(in, "startsAt"), STARTS_AT);
    ck_assert_str_eq(th_js(in, "endsAt"), "0001-01-01T00:00:00Z");
    ck_assert(strncmp(th_js(in, "generatorURL"), "http://prometheus.example.com:9090/graph?", 41) ==
              0);
    ck_assert_str_eq(th_js(in, "receiver"), RECEIVER);
    ck_assert_str_eq(th_js(in, "externalURL"), EXTERNAL_URL);
    ck_assert_str_eq(th_js(in, "groupKey"),
                     "{}/{severity=\"critical\"}:{alertname=\"HighLatency\"}");
    ck_assert(json_is_array(json_object_get(in, "mutedBy")));
    ck_assert_ptr_null(json_object_get(in, "notificationTimestamp"));
    json_decref(want_labels);
    json_decref(run);

    /* Alertmanager repeats the notification: the alert joins its run. */
    post_am(&p, body, 200, &r);
    ck_assert_str_eq(result_run(&r, 0, "joined"), id);
    th_resp_free(&r);

    /* Again once it runs, its severity escalated (same fingerprint). */
    ck_assert_msg(th_wait_status(&p, id, "running", 10000), "run %s never started", id);
    am_alert(
        alert, sizeof(alert), "firing",
        "{\"alertname\": \"HighLatency\", \"severity\": \"page\", \"instance\": \"api-1:9100\","
        " \"job\": \"api\"}",
        "6d1c9b2a8f7e0d43", ", \"escalatedBy\": \"oncall\"");
    am_body(body, sizeof(body), "firing", "HighLatency", alert, 0, "");
    post_am(&p, body, 200, &r);
    ck_assert_str_eq(result_run(&r, 0, "joined"), id);
    ck_assert_str_eq(th_js(result(&r, 0, NULL), "status"), "running");
    th_resp_free(&r);
    /* Joining does not change the input: it is the creating alert's. */
    run = th_get_run(&p, id);
    ck_assert_str_eq(th_js(json_object_get(json_object_get(run, "input"), "labels"), "severity"),
                     "critical");
    ck_assert_ptr_null(json_object_get(json_object_get(run, "input"), "escalatedBy"));
    json_decref(run);

    ck_assert_int_eq(count_runs("input->>'fingerprint' = '6d1c9b2a8f7e0d43'"), 1);
    ck_assert_int_eq(count_runs("true"), 1);
    free(id);
    th_stop_clean(&p);
}
END_TEST

/* ---- a batch with mixed routes; resolved with the ignore route ---- */

START_TEST(test_mixed_batch)
{
    struct th_proc p;
    struct th_resp r;
    char a[4][2048], alerts[16384], body[20480];
    char *id_a, *id_b;
    const json_t *e;
    json_t *run;

    start_fresh(&p, "e2e_am_mixed");
    am_alert(
        a[0], sizeof(a[0]), "firing",
        "{\"alertname\": \"HighLatency\", \"severity\": \"page\", \"instance\": \"api-2:9100\"}",
        "0a0a0a0a0a0a0a0a", "");
    am_alert(a[1], sizeof(a[1]), "firing",
             "{\"alertname\": \"DiskWillFillIn4Hours\", \"severity\": \"warning\","
             " \"device\": \"/dev/nvme0n1p1\", \"instance\": \"db-1:9100\"}",
             "0b0b0b0b0b0b0b0b", "");
    /* No route: HighLatency at warning, and no default route. */
    am_alert(a[2], sizeof(a[2]), "firing",
             "{\"alertname\": \"HighLatency\", \"severity\": \"warning\"}", "0c0c0c0c0c0c0c0c", "");
    /* Invalid: a label value that is not a string. */
    snprintf(a[3], sizeof(a[3]),
             "{\"status\": \"firing\", \"labels\": {\"alertname\": \"DiskFull\", \"replicas\": 3},"
             " \"annotations\": {}, \"startsAt\": \"" STARTS_AT "\","
             " \"endsAt\": \"0001-01-01T00:00:00Z\", \"generatorURL\": \"\","
             " \"fingerprint\": \"0d0d0d0d0d0d0d0d\"}");
    snprintf(alerts, sizeof(alerts), "%s, %s, %s, %s", a[0], a[1], a[2], a[3]);
    am_body(body, sizeof(body), "firing", "HighLatency", alerts, 0, "");
    post_am(&p, body, 202, &r);
    ck_assert_uint_eq(json_array_size(json_object_get(r.json, "runs")), 4);
    id_a = strdup(result_run(&r, 0, "created"));
    id_b = strdup(result_run(&r, 1, "created"));
    ck_assert_str_ne(id_a, id_b);
    ck_assert_str_eq(th_js(result(&r, 1, NULL), "fingerprint"), "0b0b0b0b0b0b0b0b");
    e = result_error(&r, 2, 422);
    ck_assert_msg(strstr(th_js(e, "detail"), "HighLatency") != NULL, "422 detail: %s", r.body);
    ck_assert_str_eq(th_js(result(&r, 2, NULL), "fingerprint"), "0c0c0c0c0c0c0c0c");
    e = result_error(&r, 3, 400);
    ck_assert_msg(th_has_error_field(json_object_get(e, "errors"), "alerts[3].labels"),
                  "400 errors[] lacks alerts[3].labels: %s", r.body);
    ck_assert_str_eq(th_js(result(&r, 3, NULL), "fingerprint"), "0d0d0d0d0d0d0d0d");
    th_resp_free(&r);
    {
        static const char *const line[] = {"alertmanager notification receiver=\"" RECEIVER "\""
                                           " alerts=4 created=2 joined=0 cancelled=0 ignored=0"
                                           " unrouted=1 invalid=1 truncated=0",
                                           NULL};
        ck_assert_msg(log_has_line(p.log, line), "no notification log line with the counts in %s",
                      p.log);
    }

    run = th_get_run(&p, id_a);
    ck_assert_str_eq(th_js(run, "type"), "restart");
    json_decref(run);
    run = th_get_run(&p, id_b);
    ck_assert_str_eq(th_js(run, "type"), "demo");
    ck_assert_str_eq(th_js(json_object_get(json_object_get(run, "input"), "labels"), "device"),
                     "/dev/nvme0n1p1");
    json_decref(run);
    ck_assert_int_eq(count_runs("true"), 2);

    /* The same batch again: two joined, the same two errors, nothing new. */
    post_am(&p, body, 200, &r);
    ck_assert_str_eq(result_run(&r, 0, "joined"), id_a);
    ck_assert_str_eq(result_run(&r, 1, "joined"), id_b);
    (void)result_error(&r, 2, 422);
    (void)result_error(&r, 3, 400);
    th_resp_free(&r);
    ck_assert_int_eq(count_runs("true"), 2);

    /* A valid envelope whose only alert is unroutable: still 2xx. */
    am_body(body, sizeof(body), "firing", "HighLatency", a[2], 0, "");
    post_am(&p, body, 200, &r);
    ck_assert_uint_eq(json_array_size(json_object_get(r.json, "runs")), 1);
    (void)result_error(&r, 0, 422);
    th_resp_free(&r);

    /* Resolved through route B (on_resolved ignore, the default): the run
     * is left alone and succeeds. */
    am_alert(a[1], sizeof(a[1]), "resolved",
             "{\"alertname\": \"DiskWillFillIn4Hours\", \"severity\": \"warning\","
             " \"device\": \"/dev/nvme0n1p1\", \"instance\": \"db-1:9100\"}",
             "0b0b0b0b0b0b0b0b", "");
    am_body(body, sizeof(body), "resolved", "DiskWillFillIn4Hours", a[1], 0, "");
    post_am(&p, body, 200, &r);
    (void)result(&r, 0, "ignored");
    ck_assert_str_eq(th_js(result(&r, 0, NULL), "fingerprint"), "0b0b0b0b0b0b0b0b");
    th_resp_free(&r);
    run = th_get_run(&p, id_b);
    ck_assert_msg(!th_streq(th_js(run, "status"), "completed") &&
                      !th_streq(th_js(run, "status"), "cancelling"),
                  "run %s is %s right after the ignored resolve", id_b, th_js(run, "status"));
    json_decref(run);
    th_expect_outcome(&p, id_b, "succeeded", 15);
    ck_assert_msg(!cancel_requested(&p, id_b), "an ignored resolve requested a cancel");

    /* Resolved through route A for an alert with no active run: none. */
    am_alert(a[0], sizeof(a[0]), "resolved",
             "{\"alertname\": \"HighLatency\", \"severity\": \"critical\", \"instance\": \"x\"}",
             "0e0e0e0e0e0e0e0e", "");
    am_body(body, sizeof(body), "resolved", "HighLatency", a[0], 0, "");
    post_am(&p, body, 200, &r);
    (void)result(&r, 0, "none");
    ck_assert_str_eq(th_js(result(&r, 0, NULL), "fingerprint"), "0e0e0e0e0e0e0e0e");
    th_resp_free(&r);
    ck_assert_msg(!cancel_requested(&p, id_a), "another alert's resolve touched run %s", id_a);
    ck_assert_int_eq(count_runs("true"), 2);
    free(id_a);
    free(id_b);
    th_stop_clean(&p);
}
END_TEST

/* ---- resolved with the cancel route ---- */

START_TEST(test_resolved_cancel)
{
    struct th_proc p;
    struct th_resp r;
    char alert[4096], body[20480];
    char *id, *id2;
    json_t *run;

    start_fresh(&p, "e2e_am_cancel");
    am_alert(alert, sizeof(alert), "firing", LATENCY_LABELS, "5f5f5f5f00000001", "");
    am_body(body, sizeof(body), "firing", "HighLatency", alert, 0, "");
    post_am(&p, body, 202, &r);
    id = strdup(result_run(&r, 0, "created"));
    th_resp_free(&r);
    ck_assert_msg(th_wait_status(&p, id, "running", 10000), "run %s never started", id);

    am_alert(alert, sizeof(alert), "resolved", LATENCY_LABELS, "5f5f5f5f00000001", "");
    am_body(body, sizeof(body), "resolved", "HighLatency", alert, 0, "");
    post_am(&p, body, 200, &r);
    ck_assert_str_eq(result_run(&r, 0, "cancelled"), id);
    ck_assert_str_eq(th_js(result(&r, 0, NULL), "fingerprint"), "5f5f5f5f00000001");
    th_resp_free(&r);
    /* The 20 s run stops long before it would have finished. */
    th_expect_outcome(&p, id, "cancelled", 10);
    run = th_get_run(&p, id);
    ck_assert_str_eq(th_js(run, "status"), "completed");
    json_decref(run);
    ck_assert(cancel_requested(&p, id));

    /* Alertmanager repeats the resolved notification: nothing left to do. */
    post_am(&p, body, 200, &r);
    (void)result(&r, 0, "none");
    th_resp_free(&r);

    /* The alert fires again: a new incident, a new run. */
    am_alert(alert, sizeof(alert), "firing", LATENCY_LABELS, "5f5f5f5f00000001", "");
    am_body(body, sizeof(body), "firing", "HighLatency", alert, 0, "");
    post_am(&p, body, 202, &r);
    id2 = strdup(result_run(&r, 0, "created"));
    ck_assert_str_ne(id2, id);
    th_resp_free(&r);

    /* A queued or running run cancelled by a resolve that arrives in the same
     * batch as another alert's firing: per alert. */
    {
        char a2[4096], alerts[16384];
        am_alert(alert, sizeof(alert), "resolved", LATENCY_LABELS, "5f5f5f5f00000001", "");
        am_alert(a2, sizeof(a2), "firing",
                 "{\"alertname\": \"HighLatency\", \"severity\": \"critical\","
                 " \"instance\": \"api-9:9100\"}",
                 "5f5f5f5f00000002", "");
        /* The resolved alert twice: the second finds nothing left to do,
         * with the run's fields when it is still cancelling. */
        snprintf(alerts, sizeof(alerts), "%s, %s, %s", alert, alert, a2);
        am_body(body, sizeof(body), "firing", "HighLatency", alerts, 0, "");
        post_am(&p, body, 202, &r);
        ck_assert_str_eq(result_run(&r, 0, "cancelled"), id2);
        ck_assert_msg(!th_js(result(&r, 1, "none"), "run_id") ||
                          th_streq(th_js(result(&r, 1, NULL), "run_id"), id2),
                      "second resolve: %s", r.body);
        (void)result_run(&r, 2, "created");
        th_resp_free(&r);
    }
    th_expect_outcome(&p, id2, "cancelled", 10);
    ck_assert_int_eq(count_runs("input->>'fingerprint' = '5f5f5f5f00000001'"), 2);
    free(id);
    free(id2);
    th_stop_clean(&p);
}
END_TEST

/* ---- alerts without a fingerprint: identified by their labels ---- */

START_TEST(test_no_fingerprint)
{
    struct th_proc p;
    struct th_resp r;
    char alert[4096], body[20480];
    char *id, *lat;

    start_fresh(&p, "e2e_am_nofp");
    am_alert(alert, sizeof(alert), "firing",
             "{\"alertname\": \"DiskFull\", \"device\": \"/dev/sda1\", \"instance\": \"db-1\"}",
             NULL, "");
    am_body(body, sizeof(body), "firing", "DiskFull", alert, 0, "");
    post_am(&p, body, 202, &r);
    id = strdup(result_run(&r, 0, "created"));
    ck_assert(json_is_null(json_object_get(result(&r, 0, NULL), "fingerprint")));
    th_resp_free(&r);

    /* The same labels in another order: the same alert. */
    am_alert(alert, sizeof(alert), "firing",
             "{\"instance\": \"db-1\", \"alertname\": \"DiskFull\", \"device\": \"/dev/sda1\"}",
             NULL, "");
    am_body(body, sizeof(body), "firing", "DiskFull", alert, 0, "");
    post_am(&p, body, 200, &r);
    ck_assert_str_eq(result_run(&r, 0, "joined"), id);
    th_resp_free(&r);

    /* Another device: another alert. */
    am_alert(alert, sizeof(alert), "firing",
             "{\"alertname\": \"DiskFull\", \"device\": \"/dev/sdb1\", \"instance\": \"db-1\"}",
             NULL, "");
    am_body(body, sizeof(body), "firing", "DiskFull", alert, 0, "");
    post_am(&p, body, 202, &r);
    ck_assert_str_ne(result_run(&r, 0, "created"), id);
    th_resp_free(&r);

    /* The same alert twice in one notification: one run. */
    {
        char a1[4096], alerts[16384];
        am_alert(a1, sizeof(a1), "firing",
                 "{\"alertname\": \"DiskFull\", \"device\": \"/dev/sdc1\", \"instance\": \"db-1\"}",
                 NULL, "");
        snprintf(alerts, sizeof(alerts), "%s, %s", a1, a1);
        am_body(body, sizeof(body), "firing", "DiskFull", alerts, 0, "");
        post_am(&p, body, 202, &r);
        const char *first = result_run(&r, 0, "created");
        ck_assert_str_eq(result_run(&r, 1, "joined"), first);
        th_resp_free(&r);
    }

    /* Resolve-cancel finds the run by its labels too. */
    am_alert(alert, sizeof(alert), "firing",
             "{\"alertname\": \"HighLatency\", \"severity\": \"page\", \"job\": \"api\"}", NULL,
             "");
    am_body(body, sizeof(body), "firing", "HighLatency", alert, 0, "");
    post_am(&p, body, 202, &r);
    lat = strdup(result_run(&r, 0, "created"));
    th_resp_free(&r);
    am_alert(alert, sizeof(alert), "resolved",
             "{\"job\": \"api\", \"severity\": \"page\", \"alertname\": \"HighLatency\"}", NULL,
             "");
    am_body(body, sizeof(body), "resolved", "HighLatency", alert, 0, "");
    post_am(&p, body, 200, &r);
    ck_assert_str_eq(result_run(&r, 0, "cancelled"), lat);
    th_resp_free(&r);
    th_expect_outcome(&p, lat, "cancelled", 10);
    ck_assert_int_eq(count_runs("input->'labels'->>'alertname' = 'DiskFull'"), 3);
    free(id);
    free(lat);
    th_stop_clean(&p);
}
END_TEST

/* ---- truncatedAlerts ---- */

START_TEST(test_truncated)
{
    struct th_proc p;
    struct th_resp r;
    char a1[4096], a2[4096], alerts[16384], body[20480];
    static const char *const line[] = {"alertmanager notification",
                                       "receiver=\"" RECEIVER "\"",
                                       "alerts=2",
                                       "created=2",
                                       "truncated=37",
                                       NULL};

    start_fresh(&p, "e2e_am_truncated");
    am_alert(a1, sizeof(a1), "firing", "{\"alertname\": \"DiskFull\", \"instance\": \"db-1\"}",
             "7a7a7a7a00000001", "");
    am_alert(a2, sizeof(a2), "firing", "{\"alertname\": \"DiskFull\", \"instance\": \"db-2\"}",
             "7a7a7a7a00000002", "");
    snprintf(alerts, sizeof(alerts), "%s, %s", a1, a2);
    am_body(body, sizeof(body), "firing", "DiskFull", alerts, 37, "");
    post_am(&p, body, 202, &r);
    ck_assert_int_eq(th_ji(r.json, "truncated_alerts"), 37);
    ck_assert_uint_eq(json_array_size(json_object_get(r.json, "runs")), 2);
    (void)result_run(&r, 0, "created");
    (void)result_run(&r, 1, "created");
    th_resp_free(&r);
    ck_assert_msg(log_has_line(p.log, line), "no log line with truncated=37 in %s", p.log);

    /* Absent truncatedAlerts: 0. */
    snprintf(body, sizeof(body), "{\"version\": \"4\", \"status\": \"firing\", \"alerts\": [%s]}",
             a1);
    post_am(&p, body, 200, &r);
    ck_assert_int_eq(th_ji(r.json, "truncated_alerts"), 0);
    (void)result_run(&r, 0, "joined");
    th_resp_free(&r);
    th_stop_clean(&p);
}
END_TEST

/* ---- a malformed envelope ---- */

static void expect_400_fields(const struct th_proc *p, const char *body, const char *const *fields)
{
    struct th_resp r;
    char what[160];

    snprintf(what, sizeof(what), "malformed envelope (%s...)", fields[0]);
    th_post_json(p->url, "/alerts", body, &r);
    th_check_problem(&r, 400, what);
    for (size_t i = 0; fields[i]; i++)
        ck_assert_msg(th_has_error_field(json_object_get(r.json, "errors"), fields[i]),
                      "%s: errors[] does not name \"%s\": %s", what, fields[i], r.body);
    th_resp_free(&r);
}

START_TEST(test_malformed_envelope)
{
    struct th_proc p;
    struct th_resp r;
    char alert[4096], body[20480];

    start_fresh(&p, "e2e_am_malformed");
    am_alert(alert, sizeof(alert), "firing", LATENCY_LABELS, "9e9e9e9e9e9e9e9e", "");

    snprintf(body, sizeof(body),
             "{\"version\": \"4\", \"receiver\": \"" RECEIVER "\", \"alerts\": {\"0\": %s}}",
             alert);
    expect_400_fields(&p, body, (const char *const[]){"alerts", NULL});
    expect_400_fields(&p, "{\"version\": \"4\", \"alerts\": null}",
                      (const char *const[]){"alerts", NULL});
    snprintf(body, sizeof(body), "{\"version\": 4, \"alerts\": [%s]}", alert);
    expect_400_fields(&p, body, (const char *const[]){"version", NULL});
    snprintf(body, sizeof(body),
             "{\"version\": \"4\", \"alerts\": [%s], \"groupLabels\": [\"alertname\"]}", alert);
    expect_400_fields(&p, body, (const char *const[]){"groupLabels", NULL});
    snprintf(body, sizeof(body), "{\"version\": \"4\", \"alerts\": [%s], \"truncatedAlerts\": -4}",
             alert);
    expect_400_fields(&p, body, (const char *const[]){"truncatedAlerts", NULL});
    snprintf(body, sizeof(body),
             "{\"version\": \"4\", \"alerts\": [%s], \"receiver\": 1, \"groupKey\": [],"
             " \"externalURL\": {}, \"commonLabels\": \"x\", \"truncatedAlerts\": \"2\"}",
             alert);
    expect_400_fields(&p, body,
                      (const char *const[]){"receiver", "groupKey", "externalURL", "commonLabels",
                                            "truncatedAlerts", NULL});

    /* Not JSON at all: 400 too. */
    th_post_json(p.url, "/alerts", "{\"version\": \"4\", \"alerts\": [", &r);
    th_check_problem(&r, 400, "truncated JSON");
    th_resp_free(&r);

    /* A malformed envelope creates nothing, even around a valid alert. */
    ck_assert_int_eq(count_runs("true"), 0);

    /* An empty batch is a valid envelope. */
    post_am(&p, "{\"version\": \"4\", \"status\": \"resolved\", \"alerts\": []}", 200, &r);
    ck_assert_uint_eq(json_array_size(json_object_get(r.json, "runs")), 0);
    th_resp_free(&r);
    th_stop_clean(&p);
}
END_TEST

/* ---- generic bodies route by labels ---- */

START_TEST(test_generic_labels)
{
    struct th_proc p;
    struct th_resp r;
    json_t *run;
    char *id;

    start_fresh(&p, "e2e_am_generic");
    th_post_json(p.url, "/alerts",
                 "{\"alert_type\": \"latency\", \"data\": {\"duration_ms\": 0},"
                 " \"labels\": {\"alertname\": \"HighLatency\", \"severity\": \"page\"}}",
                 &r);
    ck_assert_msg(r.status == 202 && r.json, "HTTP %ld: %s", r.status, r.body);
    id = strdup(th_js(r.json, "run_id"));
    th_resp_free(&r);
    run = th_get_run(&p, id);
    ck_assert_str_eq(th_js(run, "type"), "restart");
    json_decref(run);
    th_expect_outcome(&p, id, "succeeded", 15);
    free(id);

    th_post_json(p.url, "/alerts",
                 "{\"alert_type\": \"disk\", \"data\": {\"duration_ms\": 0},"
                 " \"labels\": {\"alertname\": \"DiskPressure\"}}",
                 &r);
    ck_assert_msg(r.status == 202 && r.json, "HTTP %ld: %s", r.status, r.body);
    run = th_get_run(&p, th_js(r.json, "run_id"));
    ck_assert_str_eq(th_js(run, "type"), "demo");
    json_decref(run);
    th_resp_free(&r);

    /* Labels that match no route, and an alert_type naming no run type. */
    th_post_json(p.url, "/alerts",
                 "{\"alert_type\": \"latency\","
                 " \"labels\": {\"alertname\": \"HighLatency\", \"severity\": \"info\"}}",
                 &r);
    th_check_problem(&r, 422, "generic body, no route");
    th_resp_free(&r);
    th_stop_clean(&p);
}
END_TEST

/* ---- the same notification from several senders at once ---- */

#define RACERS 8

struct racer {
    const char *url, *body;
    pthread_barrier_t *start;
    bool sent;
    struct th_resp r;
};

static void *racer_main(void *arg)
{
    struct racer *rc = arg;

    pthread_barrier_wait(rc->start);
    rc->sent = th_http("POST", rc->url, "application/json", rc->body, &rc->r);
    return NULL;
}

START_TEST(test_concurrent_senders)
{
    struct th_proc p;
    char a[3][2048], alerts[16384], body[20480], url[256];
    struct racer rc[RACERS];
    pthread_t th[RACERS];
    pthread_barrier_t start;
    const char *ids[3] = {NULL, NULL, NULL};
    int created[3] = {0, 0, 0}, joined[3] = {0, 0, 0};

    start_fresh(&p, "e2e_am_concurrent");
    am_alert(a[0], sizeof(a[0]), "firing", LATENCY_LABELS, "cc00000000000001", "");
    am_alert(a[1], sizeof(a[1]), "firing", "{\"alertname\": \"DiskFull\", \"instance\": \"db-1\"}",
             "cc00000000000002", "");
    am_alert(a[2], sizeof(a[2]), "firing", "{\"alertname\": \"DiskFull\", \"instance\": \"db-2\"}",
             NULL, "");
    snprintf(alerts, sizeof(alerts), "%s, %s, %s", a[0], a[1], a[2]);
    am_body(body, sizeof(body), "firing", "HighLatency", alerts, 0, "");
    snprintf(url, sizeof(url), "%s/alerts", p.url);
    ck_assert(pthread_barrier_init(&start, NULL, RACERS) == 0);
    for (int i = 0; i < RACERS; i++) {
        rc[i] = (struct racer){.url = url, .body = body, .start = &start};
        ck_assert(pthread_create(&th[i], NULL, racer_main, &rc[i]) == 0);
    }
    for (int i = 0; i < RACERS; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&start);

    /* Every sender is answered 2xx; each alert is created once and joined
     * by everyone else, all naming the same run. */
    for (int i = 0; i < RACERS; i++) {
        ck_assert_msg(rc[i].sent, "sender %d: transport failure", i);
        ck_assert_msg((rc[i].r.status == 200 || rc[i].r.status == 202) && rc[i].r.json,
                      "sender %d: HTTP %ld %s", i, rc[i].r.status, rc[i].r.body);
        int created_here = 0;
        ck_assert_uint_eq(json_array_size(json_object_get(rc[i].r.json, "runs")), 3);
        for (size_t k = 0; k < 3; k++) {
            const json_t *res = result(&rc[i].r, k, NULL);
            const char *action = th_js(res, "action");
            const char *id = result_run(&rc[i].r, k, action);
            ck_assert_msg(th_streq(action, "created") || th_streq(action, "joined"),
                          "sender %d alert %zu: %s", i, k, rc[i].r.body);
            created[k] += th_streq(action, "created");
            created_here += th_streq(action, "created");
            joined[k] += th_streq(action, "joined");
            if (!ids[k])
                ids[k] = id;
            ck_assert_msg(th_streq(ids[k], id), "alert %zu: runs %s and %s", k, ids[k], id);
        }
        ck_assert_msg((rc[i].r.status == 202) == (created_here > 0),
                      "sender %d: HTTP %ld with %d alerts created", i, rc[i].r.status,
                      created_here);
    }
    for (size_t k = 0; k < 3; k++)
        ck_assert_msg(created[k] == 1 && joined[k] == RACERS - 1,
                      "alert %zu: created %d times, joined %d times", k, created[k], joined[k]);
    ck_assert_int_eq(count_runs("true"), 3);
    for (int i = 0; i < RACERS; i++)
        th_resp_free(&rc[i].r);
    th_stop_clean(&p);
}
END_TEST

/* ---- the database is down: 503, then the retry loses nothing ---- */

static void pg_ctl(const char *what)
{
    const char *ctl = getenv("OPSRUN_TEST_PGCTL"), *data = getenv("OPSRUN_TEST_PGDATA");
    char cmd[1024];

    ck_assert_msg(ctl && data, "OPSRUN_TEST_PGCTL and OPSRUN_TEST_PGDATA must be set");
    snprintf(cmd, sizeof(cmd), "'%s' %s '%s' >&2", ctl, what, data);
    ck_assert_msg(system(cmd) == 0, "failed: %s", cmd);
}

/* Unchecked teardown (in the runner's process, after a failure too):
 * PostgreSQL is running again whatever happened. */
static void pg_always_started(void)
{
    const char *ctl = getenv("OPSRUN_TEST_PGCTL"), *data = getenv("OPSRUN_TEST_PGDATA");
    char cmd[1024];

    if (!ctl || !data)
        return;
    snprintf(cmd, sizeof(cmd), "'%s' start '%s' >&2", ctl, data);
    if (system(cmd) != 0)
        fprintf(stderr, "could not start PostgreSQL again: %s\n", cmd);
}

START_TEST(test_db_down)
{
    struct th_proc p;
    struct th_resp r;
    char a[3][2048], alerts[16384], body[20480];
    char *ids[2] = {NULL, NULL};
    long long until;
    bool accepted = false;

    start_fresh(&p, "e2e_am_dbdown");
    am_alert(a[0], sizeof(a[0]), "firing", LATENCY_LABELS, "dbd0000000000001", "");
    am_alert(a[1], sizeof(a[1]), "firing", "{\"alertname\": \"DiskFull\", \"instance\": \"db-1\"}",
             "dbd0000000000002", "");
    am_alert(a[2], sizeof(a[2]), "firing", "{\"alertname\": \"Watchdog\"}", "dbd0000000000003", "");
    snprintf(alerts, sizeof(alerts), "%s, %s, %s", a[0], a[1], a[2]);
    am_body(body, sizeof(body), "firing", "HighLatency", alerts, 0, "");

    pg_ctl("stop");
    th_post_json(p.url, "/alerts", body, &r);
    th_check_problem(&r, 503, "database down");
    ck_assert_msg(r.retry_after[0] != '\0', "503 without Retry-After");
    ck_assert_msg(!json_object_get(r.json, "runs"), "503 with results: %s", r.body);
    th_resp_free(&r);
    pg_ctl("start");

    /* Alertmanager retries the whole batch: answered once the database is
     * back, with every alert accounted for. */
    for (until = th_now_ms() + 15000; th_now_ms() < until && !accepted; th_sleep_ms(200)) {
        th_post_json(p.url, "/alerts", body, &r);
        if (r.status == 503) {
            th_check_problem(&r, 503, "database coming back");
            th_resp_free(&r);
            continue;
        }
        ck_assert_msg(r.status == 202 && r.json, "retry: HTTP %ld %s", r.status, r.body);
        accepted = true;
        ids[0] = strdup(result_run(&r, 0, "created"));
        ids[1] = strdup(result_run(&r, 1, "created"));
        (void)result_error(&r, 2, 422);
        th_resp_free(&r);
    }
    ck_assert_msg(accepted, "the batch was not accepted within 15 s of the restart");

    /* And again (a duplicate delivery): joined, nothing doubled. */
    post_am(&p, body, 200, &r);
    ck_assert_str_eq(result_run(&r, 0, "joined"), ids[0]);
    ck_assert_str_eq(result_run(&r, 1, "joined"), ids[1]);
    th_resp_free(&r);
    ck_assert_int_eq(count_runs("input->>'fingerprint' = 'dbd0000000000001'"), 1);
    ck_assert_int_eq(count_runs("input->>'fingerprint' = 'dbd0000000000002'"), 1);
    ck_assert_int_eq(count_runs("true"), 2);
    free(ids[0]);
    free(ids[1]);
    th_stop_clean(&p);
}
END_TEST

static Suite *alertmanager_suite(void)
{
    Suite *s = suite_create("e2e_alertmanager");
    const struct {
        const char *name;
        const TTest *fn;
    } cases[] = {
        {"firing_repeat", test_firing_and_repeat},
        {"mixed_batch", test_mixed_batch},
        {"resolved_cancel", test_resolved_cancel},
        {"no_fingerprint", test_no_fingerprint},
        {"truncated", test_truncated},
        {"malformed", test_malformed_envelope},
        {"generic_labels", test_generic_labels},
        {"concurrent", test_concurrent_senders},
        {"db_down", test_db_down}, /* last: stops PostgreSQL */
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        TCase *tc = tcase_create(cases[i].name);
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, cases[i].fn);
        if (cases[i].fn == test_db_down)
            tcase_add_unchecked_fixture(tc, NULL, pg_always_started);
        suite_add_tcase(s, tc);
    }
    return s;
}

int main(void)
{
    return th_run_suite(alertmanager_suite());
}
