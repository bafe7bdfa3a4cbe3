/* tests/e2e/test_inject.c — untrusted input against the remote actions, end
 * to end: alerts whose data tries to leave a URL's path ("../admin",
 * "%2e%2e"), change its host ("x@evil.example"), add a header ("a\r\nX-
 * Injected: 1"), add XML ("</Value><Evil/>"), or look like a shell command
 * or an option, sent through the http, rest_job and soap_job actions to the
 * fake API's /echo (tests/support/fake_jobs.c), which records each request
 * as it arrived. For each attempt the test asserts what the remote received
 * (the request target as sent, the headers, the body), or that nothing was
 * sent and the run failed with "unsafe_input". */
#include "../support/fake_jobs.h"
#include "../support/harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_port;

#define IN_DOTDOT "../admin"
#define IN_AT "x@evil.example"
#define IN_PCT "%2e%2e"
#define IN_CRLF "a\r\nX-Injected: 1"
#define IN_XML "</Value><Evil/>"
#define IN_SHELL "$(touch /tmp/pwned)"
#define IN_FLAG "--extra-flag"

/* Each attempt, and the same percent-encoded. */
static const struct {
    const char *value, *encoded;
} INPUTS[] = {
    {IN_DOTDOT, "..%2Fadmin"},
    {IN_AT, "x%40evil.example"},
    {IN_PCT, "%252e%252e"},
    {IN_CRLF, "a%0D%0AX-Injected%3A%201"},
    {IN_XML, "%3C%2FValue%3E%3CEvil%2F%3E"},
    {IN_SHELL, "%24%28touch%20%2Ftmp%2Fpwned%29"},
    {IN_FLAG, "--extra-flag"},
};
#define NINPUTS (sizeof(INPUTS) / sizeof(INPUTS[0]))

#define PATH_DOT "unsafe value of {{input:/v}}: \".\" and \"..\" are not allowed as path segments"
#define URL_CRLF "unsafe value of {{input:/v}}: a line break is not allowed in a URL"
#define HEADER_CRLF                                                                                \
    "header X-Value: unsafe value of {{input:/v}}: a control character is not allowed in a "       \
    "header"

/* A request description to the fake's /echo: url (after the port), a
 * header X-Value (NULL: none), a JSON body (NULL: none). New reference. */
static json_t *echo_request(const char *url, const char *header, json_t *body_take)
{
    char full[256];
    json_t *r;

    snprintf(full, sizeof(full), "http://127.0.0.1:%d%s", g_port, url);
    r = json_pack("{s:s, s:s, s:i}", "method", body_take ? "POST" : "GET", "url", full,
                  "timeout_ms", 5000);
    if (header)
        json_object_set_new(r, "headers", json_pack("{s:s}", "X-Value", header));
    if (body_take)
        json_object_set_new(r, "body", body_take);
    return r;
}

static json_t *soap_echo(const char *url, const char *body_text)
{
    char full[256];

    snprintf(full, sizeof(full), "http://127.0.0.1:%d%s", g_port, url);
    return json_pack("{s:s, s:s, s:{s:s}, s:s}", "method", "POST", "url", full, "headers",
                     "SOAPAction", "Echo", "body_text", body_text);
}

/* The run types, each putting {{input:/v}} somewhere:
 *   h_all   http: a path segment, the query, a header, a JSON body
 *   h_hdr   http: only a header
 *   h_body  http: only the JSON body (whole and spliced into a string)
 *   r_job   rest_job: the submit's path, query and body
 *   s_job   soap_job: the start URL's query, an XML element and attribute
 *           (body_text without "xml_escape": escaped by default) */
static void start(struct th_proc *p, const char *db)
{
    json_t *types = json_object(), *cfg;
    char *text;

    json_object_set_new(
        types, "h_all",
        json_pack("{s:s, s:i, s:{s:o}}", "action", "http", "max_attempts", 1, "params", "request",
                  echo_request("/echo/{{input:/v}}?run={{run_id}}&q={{input:/v}}", "{{input:/v}}",
                               json_pack("{s:s, s:s, s:s}", "run", "{{run_id}}", "v",
                                         "{{input:/v}}", "note", "v={{input:/v}}"))));
    json_object_set_new(types, "h_hdr",
                        json_pack("{s:s, s:i, s:{s:o}}", "action", "http", "max_attempts", 1,
                                  "params", "request",
                                  echo_request("/echo/hdr?run={{run_id}}&", "{{input:/v}}", NULL)));
    json_object_set_new(
        types, "h_body",
        json_pack(
            "{s:s, s:i, s:{s:o}}", "action", "http", "max_attempts", 1, "params", "request",
            echo_request("/echo/body?run={{run_id}}&", NULL,
                         json_pack("{s:s, s:s}", "v", "{{input:/v}}", "note", "v={{input:/v}}"))));
    json_object_set_new(
        types, "r_job",
        json_pack("{s:s, s:i, s:{s:i, s:i, s:i}, s:{s:o, s:s, s:o, s:s, s:{s:s}}}", "action",
                  "rest_job", "max_attempts", 1, "poll", "initial_delay_ms", 100, "max_delay_ms",
                  200, "jitter_pct", 0, "params", "submit",
                  echo_request("/echo/jobs/{{input:/v}}?run={{run_id}}&q={{input:/v}}", NULL,
                               json_pack("{s:s, s:s}", "run", "{{run_id}}", "v", "{{input:/v}}")),
                  "id_pointer", "/id", "status",
                  echo_request("/echo/jobs/{{external_id}}?run={{run_id}}&check=1", NULL, NULL),
                  "state_pointer", "/state", "state_map", "DONE", "succeeded"));
    json_object_set_new(
        types, "s_job",
        json_pack(
            "{s:s, s:i, s:{s:i, s:i, s:i}, s:{s:{s:s}, s:o, s:s, s:o, s:s}}", "action", "soap_job",
            "max_attempts", 1, "poll", "initial_delay_ms", 100, "max_delay_ms", 200, "jitter_pct",
            0, "params", "namespaces", "f", "urn:fake", "start",
            soap_echo("/echo/soap?run={{run_id}}&v={{input:/v}}",
                      "<Start xmlns=\"urn:fake\"><Run>{{run_id}}</Run><Value>{{input:/v}}</Value>"
                      "<Attr v=\"{{input:/v}}\"/></Start>"),
            "task_id_xpath", "//f:ID", "status",
            soap_echo("/echo/soap?run={{run_id}}&check=1",
                      "<Retrieve xmlns=\"urn:fake\"><TaskID>{{external_id}}</TaskID></Retrieve>"),
            "status_xpath", "//f:Status"));
    cfg = json_pack("{s:{s:i}, s:o}", "poller", "interval_ms", 100, "run_types", types);
    ck_assert_ptr_nonnull(cfg);
    text = json_dumps(cfg, 0);
    th_start_fresh(p, db, text);
    json_decref(cfg);
    free(text);
}

/* Submits a run of type with data {"v": value}; returns its id (heap). */
static char *submit(const struct th_proc *p, const char *type, const char *run_id,
                    const char *value)
{
    json_t *a =
        json_pack("{s:s, s:s, s:{s:s}}", "alert_type", type, "run_id", run_id, "data", "v", value);
    char *body = json_dumps(a, 0), *id = th_submit(p, body, 202);

    json_decref(a);
    free(body);
    return id;
}

/* The run failed with unsafe_input and this message, and the remote never
 * saw a request of it. */
static void expect_refused(const json_t *run, const char *id, const char *message)
{
    const json_t *e = json_object_get(run, "error");
    char needle[96];

    ck_assert_msg(th_streq(th_js(run, "outcome"), "failed"), "%s: %s", id, th_js(run, "outcome"));
    ck_assert_str_eq(th_js(e, "code"), "unsafe_input");
    ck_assert_str_eq(th_js(e, "message"), message);
    ck_assert_int_eq(th_ji(run, "attempt"), 1);
    snprintf(needle, sizeof(needle), "run=%s&", id);
    ck_assert_int_eq(fake_requests_with(needle, NULL, 0), 0);
}

/* The run succeeded; *out is its first request, as the remote received it
 * (it went to the fake, on the fake's host and port). */
static void expect_sent(const json_t *run, const char *id, struct fake_request *out)
{
    char needle[96], host[64];

    ck_assert_msg(th_streq(th_js(run, "outcome"), "succeeded"), "%s: %s (%s)", id,
                  th_js(run, "outcome"), th_js(json_object_get(run, "error"), "message"));
    snprintf(needle, sizeof(needle), "run=%s&", id);
    ck_assert_int_ge(fake_requests_with(needle, out, 1), 1);
    snprintf(host, sizeof(host), "Host: 127.0.0.1:%d\n", g_port);
    ck_assert_msg(strstr(out->headers, host), "%s: %s", id, out->headers);
    ck_assert_msg(!strstr(out->headers, "X-Injected"), "%s: %s", id, out->headers);
}

/* The JSON body holds exactly the template's members, v the value as it was. */
static void expect_json_body(const struct fake_request *r, const char *value, size_t members)
{
    json_t *b = json_loads(r->body, 0, NULL);
    char *note = NULL;

    ck_assert_msg(b, "not JSON: %s", r->body);
    ck_assert_int_eq(json_object_size(b), members);
    ck_assert_str_eq(th_js(b, "v"), value);
    if (json_object_get(b, "note")) {
        ck_assert_int_ge(asprintf(&note, "v=%s", value), 0);
        ck_assert_str_eq(th_js(b, "note"), note);
        free(note);
    }
    json_decref(b);
}

/* http: a value in a path segment and the query is percent-encoded ("/"
 * included), so the request stays on the template's host and path; "../"
 * and line breaks are refused before anything is sent; a header gets the
 * value as it is, unless it holds a line break; a JSON body gets it as a
 * string. */
START_TEST(http_inputs)
{
    struct th_proc p;
    struct fake_request r;
    char id[32], target[256], header[128];
    json_t *run;
    char *got;

    start(&p, "e2e_inject_http");
    for (size_t i = 0; i < NINPUTS; i++) {
        snprintf(id, sizeof(id), "h-all-%zu", i);
        got = submit(&p, "h_all", id, INPUTS[i].value);
        run = th_wait_done(&p, got, 20);
        if (strcmp(INPUTS[i].value, IN_DOTDOT) == 0) {
            expect_refused(run, id, "could not build the request: " PATH_DOT);
        } else if (strcmp(INPUTS[i].value, IN_CRLF) == 0) {
            expect_refused(run, id, "could not build the request: " URL_CRLF);
        } else {
            expect_sent(run, id, &r);
            ck_assert_str_eq(r.method, "POST");
            snprintf(target, sizeof(target), "/echo/%s?run=%s&q=%s", INPUTS[i].encoded, id,
                     INPUTS[i].encoded);
            ck_assert_str_eq(r.target, target);
            snprintf(header, sizeof(header), "X-Value: %s\n", INPUTS[i].value);
            ck_assert_msg(strstr(r.headers, header), "%s: %s", id, r.headers);
            expect_json_body(&r, INPUTS[i].value, 3);
        }
        json_decref(run);
        free(got);
    }
    got = submit(&p, "h_hdr", "h-hdr", IN_CRLF);
    run = th_wait_done(&p, got, 20);
    expect_refused(run, "h-hdr", "could not build the request: " HEADER_CRLF);
    json_decref(run);
    free(got);
    for (size_t i = 0; i < NINPUTS; i++) {
        snprintf(id, sizeof(id), "h-body-%zu", i);
        got = submit(&p, "h_body", id, INPUTS[i].value);
        run = th_wait_done(&p, got, 20);
        expect_sent(run, id, &r);
        expect_json_body(&r, INPUTS[i].value, 2);
        json_decref(run);
        free(got);
    }
    th_stop_clean(&p);
}
END_TEST

/* rest_job: the same protections for the submit request; a submitted job
 * is followed on the fake's host with its own id. */
START_TEST(rest_job_inputs)
{
    struct th_proc p;
    struct fake_request r[2];
    char id[32], target[256];
    json_t *run;
    char *got;

    start(&p, "e2e_inject_rest");
    for (size_t i = 0; i < NINPUTS; i++) {
        snprintf(id, sizeof(id), "r-job-%zu", i);
        got = submit(&p, "r_job", id, INPUTS[i].value);
        run = th_wait_done(&p, got, 20);
        if (strcmp(INPUTS[i].value, IN_DOTDOT) == 0) {
            expect_refused(run, id, "could not build the submit request: " PATH_DOT);
        } else if (strcmp(INPUTS[i].value, IN_CRLF) == 0) {
            expect_refused(run, id, "could not build the submit request: " URL_CRLF);
        } else {
            expect_sent(run, id, &r[0]);
            snprintf(target, sizeof(target), "/echo/jobs/%s?run=%s&q=%s", INPUTS[i].encoded, id,
                     INPUTS[i].encoded);
            ck_assert_str_eq(r[0].target, target);
            expect_json_body(&r[0], INPUTS[i].value, 2);
            snprintf(target, sizeof(target), "?run=%s&", id);
            ck_assert_int_eq(fake_requests_with(target, r, 2), 2);
            snprintf(target, sizeof(target), "/echo/jobs/%s?run=%s&check=1",
                     th_js(run, "external_id"), id);
            ck_assert_str_eq(r[1].target, target);
        }
        json_decref(run);
        free(got);
    }
    th_stop_clean(&p);
}
END_TEST

/* soap_job: body_text is XML-escaped by default, so "</Value><Evil/>"
 * stays the text of <Value> and of the attribute; in the URL's query the
 * value is percent-encoded, and a line break there is refused. */
START_TEST(soap_job_inputs)
{
    struct th_proc p;
    struct fake_request r;
    char id[32], target[256];
    json_t *run;
    char *got;

    start(&p, "e2e_inject_soap");
    for (size_t i = 0; i < NINPUTS; i++) {
        snprintf(id, sizeof(id), "s-job-%zu", i);
        got = submit(&p, "s_job", id, INPUTS[i].value);
        run = th_wait_done(&p, got, 20);
        if (strcmp(INPUTS[i].value, IN_CRLF) == 0) {
            expect_refused(run, id, "could not build the start envelope: " URL_CRLF);
        } else {
            expect_sent(run, id, &r);
            snprintf(target, sizeof(target), "/echo/soap?run=%s&v=%s", id, INPUTS[i].encoded);
            ck_assert_str_eq(r.target, target);
            ck_assert_msg(strstr(r.headers, "Content-Type: text/xml"), "%s", r.headers);
            ck_assert_ptr_null(strstr(r.body, "<Evil"));
            if (strcmp(INPUTS[i].value, IN_XML) == 0)
                ck_assert_str_eq(strstr(r.body, "<Value>"),
                                 "<Value>&lt;/Value&gt;&lt;Evil/&gt;</Value>"
                                 "<Attr v=\"&lt;/Value&gt;&lt;Evil/&gt;\"/></Start>");
            else
                ck_assert_msg(strstr(r.body, INPUTS[i].value), "%s: %s", id, r.body);
        }
        json_decref(run);
        free(got);
    }
    th_stop_clean(&p);
}
END_TEST

static void setup(void)
{
    g_port = fake_jobs_start();
}

static void teardown(void)
{
    fake_jobs_stop();
}

static Suite *inject_suite(void)
{
    Suite *s = suite_create("e2e_inject");
    const struct {
        const char *name;
        const TTest *fn;
    } cases[] = {
        {"http_inputs", http_inputs},
        {"rest_job_inputs", rest_job_inputs},
        {"soap_job_inputs", soap_job_inputs},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        TCase *tc = tcase_create(cases[i].name);
        tcase_set_timeout(tc, 120);
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, cases[i].fn);
        suite_add_tcase(s, tc);
    }
    return s;
}

int main(void)
{
    return th_run_suite(inject_suite());
}
