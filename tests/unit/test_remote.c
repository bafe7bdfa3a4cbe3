/* tests/unit/test_remote.c — the pure parts of the remote actions: request
 * templates (text, URL and XML escaping, JSON bodies where a lone
 * placeholder keeps its type, secrets from the environment), request checks
 * at load, the answer classes, and the poller's backoff schedule. */
#include "engine/actions/remote.h"
#include "engine/poller.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

static json_t *parse(const char *text)
{
    json_t *j = json_loads(text, 0, NULL);

    ck_assert_ptr_nonnull(j);
    return j;
}

static json_t *g_input;

static struct remote_vars vars(void)
{
    return (struct remote_vars){"run/1", "acme", "job 7&<x>", 2, g_input, NULL};
}

START_TEST(text_templates)
{
    struct remote_vars v = vars();
    struct error err = {0};
    char *out = NULL;

    setenv("OPSRUN_TEST_TOKEN", "t0k&n", 1);
    ck_assert_int_eq(remote_expand_text("{{run_id}}/{{attempt}}/{{tenant}}/{{external_id}}", &v,
                                        REMOTE_RAW, &out, &err),
                     ST_OK);
    ck_assert_str_eq(out, "run/1/2/acme/job 7&<x>");
    free(out);
    ck_assert_int_eq(remote_expand_text("https://h/jobs/{{external_id}}?r={{run_id}}", &v,
                                        REMOTE_URL, &out, &err),
                     ST_OK);
    ck_assert_str_eq(out, "https://h/jobs/job%207%26%3Cx%3E?r=run%2F1");
    free(out);
    ck_assert_int_eq(remote_expand_text("<id>{{external_id}}</id><t>{{env:OPSRUN_TEST_TOKEN}}</t>",
                                        &v, REMOTE_XML, &out, &err),
                     ST_OK);
    ck_assert_str_eq(out, "<id>job 7&amp;&lt;x&gt;</id><t>t0k&amp;n</t>");
    free(out);
    ck_assert_int_eq(
        remote_expand_text("{{input}} {{input:/n}} {{input:/s}}", &v, REMOTE_RAW, &out, &err),
        ST_OK);
    ck_assert_str_eq(out, "{\"n\":3,\"s\":\"x y\",\"o\":{\"k\":[1]}} 3 x y");
    free(out);
    ck_assert_int_eq(remote_expand_text("{{input:/nope}}", &v, REMOTE_RAW, &out, &err), ST_INVALID);
    ck_assert_str_eq(err.message, "the run's input has no value at \"/nope\"");
    ck_assert_int_eq(
        remote_expand_text("{{env:OPSRUN_TEST_UNSET_VAR}}", &v, REMOTE_RAW, &out, &err),
        ST_INVALID);
    ck_assert_str_eq(err.message, "environment variable OPSRUN_TEST_UNSET_VAR is not set");
    v.external_id = NULL;
    ck_assert_int_eq(remote_expand_text("{{external_id}}", &v, REMOTE_RAW, &out, &err), ST_INVALID);
    ck_assert_ptr_null(out);
}
END_TEST

/* {{state:NAME}}: a value the action kept in the poll state. */
START_TEST(state_placeholder)
{
    struct remote_vars v = vars();
    json_t *state = json_pack("{s:s, s:i, s:o}", "query_id", "q-7", "n", 3, "o", json_object());
    struct error err = {0};
    char *out = NULL;

    v.state = state;
    ck_assert_int_eq(
        remote_expand_text("<id>{{state:query_id}}</id> {{state:n}}", &v, REMOTE_XML, &out, &err),
        ST_OK);
    ck_assert_str_eq(out, "<id>q-7</id> 3");
    free(out);
    ck_assert_int_eq(remote_expand_text("{{state:o}}", &v, REMOTE_RAW, &out, &err), ST_INVALID);
    ck_assert_str_eq(err.message, "the run's poll state has no \"o\"");
    v.state = NULL;
    ck_assert_int_eq(remote_expand_text("{{state:query_id}}", &v, REMOTE_RAW, &out, &err),
                     ST_INVALID);
    json_decref(state);
}
END_TEST

/* A string that is exactly one placeholder keeps the value's JSON type. */
START_TEST(json_templates)
{
    struct remote_vars v = vars();
    struct error err = {0};
    json_t *t = parse("{\"whole\": \"{{input}}\", \"obj\": \"{{input:/o}}\", \"n\": "
                      "\"{{input:/n}}\", \"att\": \"{{attempt}}\", \"mixed\": \"run {{run_id}} "
                      "#{{attempt}}\", \"list\": [\"{{tenant}}\", 1, null, true]}");
    json_t *out = NULL;
    char *s;

    ck_assert_int_eq(remote_expand_json(t, &v, &out, &err), ST_OK);
    s = json_dumps(out, JSON_COMPACT);
    ck_assert_str_eq(s, "{\"whole\":{\"n\":3,\"s\":\"x y\",\"o\":{\"k\":[1]}},\"obj\":{\"k\":[1]},"
                        "\"n\":3,\"att\":2,\"mixed\":\"run run/1 #2\",\"list\":[\"acme\",1,null,"
                        "true]}");
    free(s);
    json_decref(out);
    json_decref(t);
}
END_TEST

static void check_fails(const char *req, const char *message)
{
    json_t *j = parse(req);
    struct error err = {0};

    ck_assert_int_eq(remote_check_request(j, "p.r", true, &err), ST_INVALID);
    ck_assert_str_eq(err.message, message);
    json_decref(j);
}

START_TEST(request_checks)
{
    json_t *ok = parse("{\"method\": \"PUT\", \"url\": \"https://h/{{external_id}}\", \"headers\": "
                       "{\"X-A\": \"{{env:OPSRUN_TEST_TOKEN}}\"}, \"body\": {\"a\": "
                       "\"{{input:/n}}\"}, \"timeout_ms\": 5000}");
    struct error err = {0};

    setenv("OPSRUN_TEST_TOKEN", "x", 1);
    ck_assert_int_eq(remote_check_request(ok, "p.r", true, &err), ST_OK);
    json_decref(ok);
    check_fails("{}", "missing \"p.r.url\"");
    check_fails("{\"url\": \"http://h\", \"verb\": 1}", "unknown key \"p.r.verb\"");
    check_fails("{\"url\": \"http://h\", \"method\": \"TRACE\"}",
                "invalid \"p.r.method\": expected GET, POST, PUT, PATCH or DELETE");
    check_fails("{\"url\": \"file:///etc/passwd\"}",
                "invalid \"p.r.url\": expected an http:// or https:// URL");
    check_fails("{\"url\": \"http://h/{{secret}}\"}",
                "invalid \"p.r.url\": unknown placeholder {{secret}}");
    check_fails("{\"url\": \"http://h/{{run_id\"}",
                "invalid \"p.r.url\": an unterminated or empty {{...}}");
    check_fails("{\"url\": \"http://h\", \"headers\": {\"X\": \"a\\r\\nB: c\"}}",
                "invalid \"p.r.headers.X\": expected a header name and a one-line string");
    check_fails("{\"url\": \"http://h\", \"body\": {}, \"body_text\": \"x\"}",
                "invalid \"p.r\": \"body\" and \"body_text\" exclude each other");
    check_fails("{\"url\": \"http://h\", \"body\": [\"{{env:OPSRUN_TEST_UNSET_VAR}}\"]}",
                "invalid \"p.r.body\": environment variable OPSRUN_TEST_UNSET_VAR is not set");
    check_fails("{\"url\": \"http://h\", \"timeout_ms\": 0}",
                "invalid \"p.r.timeout_ms\": must be between 1 and 600000");
}
END_TEST

START_TEST(classes)
{
    struct remote_response r = {0};

    r.transport_error = true;
    ck_assert_int_eq(remote_classify(&r), REMOTE_TRANSIENT);
    r.transport_error = false;
    for (long s = 200; s < 300; s += 37) {
        r.status = s;
        ck_assert_int_eq(remote_classify(&r), REMOTE_OK);
    }
    static const struct {
        long status;
        enum remote_class want;
    } cases[] = {{404, REMOTE_GONE},      {410, REMOTE_GONE},      {408, REMOTE_TRANSIENT},
                 {429, REMOTE_TRANSIENT}, {503, REMOTE_TRANSIENT}, {400, REMOTE_REJECTED},
                 {302, REMOTE_REJECTED}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        r.status = cases[i].status;
        ck_assert_int_eq(remote_classify(&r), cases[i].want);
    }
}
END_TEST

/* The default poll schedule (docs/configuration.md): 2 s, x2, 30 s cap, +-20 %. */
START_TEST(backoff)
{
    const struct poll_policy pp = {
        .initial_delay_ms = 2000, .multiplier = 2, .max_delay_ms = 30000, .jitter_pct = 20};
    const struct poll_policy exact = {
        .initial_delay_ms = 2000, .multiplier = 2, .max_delay_ms = 30000, .jitter_pct = 0};
    static const int64_t want[] = {2000, 4000, 8000, 16000, 30000, 30000};

    for (int n = 1; n <= 6; n++)
        ck_assert_int_eq(poller_backoff_ms(&exact, n), want[n - 1]);
    ck_assert_int_eq(poller_backoff_ms(&exact, 1000000), 30000);
    for (int i = 0; i < 2000; i++) {
        int n = 1 + i % 6;
        int64_t d = poller_backoff_ms(&pp, n);
        ck_assert_msg(d >= want[n - 1] * 8 / 10 && d <= want[n - 1] * 12 / 10, "check %d: %lld ms",
                      n, (long long)d);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("remote");
    TCase *t = tcase_create("pure");
    SRunner *r;
    int failed;

    g_input = json_loads("{\"n\": 3, \"s\": \"x y\", \"o\": {\"k\": [1]}}", 0, NULL);
    tcase_add_test(t, text_templates);
    tcase_add_test(t, json_templates);
    tcase_add_test(t, state_placeholder);
    tcase_add_test(t, request_checks);
    tcase_add_test(t, classes);
    tcase_add_test(t, backoff);
    suite_add_tcase(s, t);
    r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    failed = srunner_ntests_failed(r);
    srunner_free(r);
    json_decref(g_input);
    return failed == 0 ? 0 : 1;
}
