/* tests/unit/test_remote.c — the pure parts of the remote actions: request
 * templates (text, URL and XML escaping, JSON bodies where a lone
 * placeholder keeps its type, secrets from the environment), request checks
 * at load, the answer classes, and the poller's backoff schedule; and
 * untrusted input: every injection attempt in each position a placeholder
 * can stand (URL origin, path, query, header, JSON, XML, exec's argv[0]),
 * encoded where that is enough, refused with its exact message where not. */
#include "engine/actions/action.h"
#include "engine/actions/registry.h"
#include "engine/actions/remote.h"
#include "engine/poller_internal.h"

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

/* ---- untrusted input ------------------------------------------------------ */

/* The attempts every position below is tried with. */
#define IN_DOTDOT "../admin"
#define IN_AT "x@evil.example"
#define IN_PCT "%2e%2e"
#define IN_CRLF "a\r\nX-Injected: 1"
#define IN_XML "</Value><Evil/>"
#define IN_SHELL "$(touch /tmp/pwned)"
#define IN_FLAG "--extra-flag"

/* Expands tmpl as a URL with {{input:/v}} = value; returns the status, the
 * URL or the error message in out (heap). */
static enum status url_with(const char *tmpl, const char *value, char **out)
{
    json_t *in = json_pack("{s:s}", "v", value);
    struct remote_vars v = {"run-1", "acme", "job-7", 1, in, NULL};
    struct error err = {0};
    enum status st = remote_expand_url(tmpl, &v, out, &err);

    if (st != ST_OK) {
        ck_assert_ptr_null(*out);
        *out = strdup(err.message);
    }
    json_decref(in);
    return st;
}

static void url_ok(const char *tmpl, const char *value, const char *want)
{
    char *out = NULL;

    ck_assert_msg(url_with(tmpl, value, &out) == ST_OK, "%s with \"%s\": %s", tmpl, value, out);
    ck_assert_str_eq(out, want);
    free(out);
}

static void url_refused(const char *tmpl, const char *value, enum status want, const char *message)
{
    char *out = NULL;

    ck_assert_int_eq(url_with(tmpl, value, &out), want);
    ck_assert_str_eq(out, message);
    free(out);
}

#define PATH_DOT "unsafe value of {{input:/v}}: \".\" and \"..\" are not allowed as path segments"
#define URL_CRLF "unsafe value of {{input:/v}}: a line break is not allowed in a URL"

/* A value in a path segment is percent-encoded, "/" included; "." and ".."
 * (alone or between slashes) and line breaks are refused; in the query it
 * is encoded too, and a ".." there is harmless. The host never changes. */
START_TEST(url_values)
{
    const char *t = "https://api.example/jobs/{{input:/v}}?q={{input:/v}}";

    url_refused(t, IN_DOTDOT, ST_UNPROCESSABLE, PATH_DOT);
    url_refused(t, "..", ST_UNPROCESSABLE, PATH_DOT);
    url_refused(t, ".", ST_UNPROCESSABLE, PATH_DOT);
    url_refused(t, "a/../../b", ST_UNPROCESSABLE, PATH_DOT);
    url_refused(t, "..\\admin", ST_UNPROCESSABLE, PATH_DOT);
    url_ok(t, IN_AT, "https://api.example/jobs/x%40evil.example?q=x%40evil.example");
    url_ok(t, IN_PCT, "https://api.example/jobs/%252e%252e?q=%252e%252e");
    url_refused(t, IN_CRLF, ST_UNPROCESSABLE, URL_CRLF);
    url_refused("https://api.example/jobs?q={{input:/v}}", "a\nb", ST_UNPROCESSABLE, URL_CRLF);
    url_ok(t, IN_XML,
           "https://api.example/jobs/%3C%2FValue%3E%3CEvil%2F%3E?q=%3C%2FValue%3E%3CEvil%2F%3E");
    url_ok(t, IN_SHELL,
           "https://api.example/jobs/"
           "%24%28touch%20%2Ftmp%2Fpwned%29?q=%24%28touch%20%2Ftmp%2Fpwned%29");
    url_ok(t, IN_FLAG, "https://api.example/jobs/--extra-flag?q=--extra-flag");
    url_ok(t, "evil.example:443/x",
           "https://api.example/jobs/evil.example%3A443%2Fx?q=evil.example%3A443%2Fx");
    url_ok(t, "#f?x=1&y", "https://api.example/jobs/%23f%3Fx%3D1%26y?q=%23f%3Fx%3D1%26y");
    url_ok(t, "...", "https://api.example/jobs/...?q=...");
    url_ok("https://api.example/jobs?q={{input:/v}}#{{input:/v}}", "..",
           "https://api.example/jobs?q=..#..");
}
END_TEST

/* A segment the values make "." or ".." or leave empty is refused, even
 * when no single value is one. */
START_TEST(url_segments)
{
    url_refused("https://h/jobs/..{{input:/v}}/x", "", ST_UNPROCESSABLE,
                "unsafe value in the URL path segment \"..{{input:/v}}\": it makes the segment "
                "\"..\"");
    url_refused("https://h/jobs/.{{input:/v}}", "", ST_UNPROCESSABLE,
                "unsafe value in the URL path segment \".{{input:/v}}\": it makes the segment "
                "\".\"");
    url_refused("https://h/jobs/{{input:/v}}{{input:/v}}", ".", ST_UNPROCESSABLE, PATH_DOT);
    url_refused("https://h/jobs/{{input:/v}}", "", ST_UNPROCESSABLE,
                "unsafe value in the URL path segment \"{{input:/v}}\": it leaves the segment "
                "empty");
    url_ok("https://h/jobs/x{{input:/v}}/", "", "https://h/jobs/x/");
    url_ok("https://h/jobs/{{input:/v}}.json", "a..b", "https://h/jobs/a..b.json");
    url_ok("https://h", "x", "https://h");
}
END_TEST

/* Every value of the run is checked, not only the input: the run id (the
 * client may choose it), the external id and the poll state (the remote's
 * answers). {{env:NAME}} is the operator's: before the path it goes in as
 * it is, so a base URL may come from the environment. */
START_TEST(url_other_values)
{
    json_t *state = json_pack("{s:s}", "q", "x/../y");
    struct remote_vars v = {"..", "acme", "../../admin", 1, g_input, state};
    struct error err = {0};
    char *out = NULL;

    ck_assert_int_eq(remote_expand_url("https://h/runs/{{run_id}}", &v, &out, &err),
                     ST_UNPROCESSABLE);
    ck_assert_str_eq(err.message,
                     "unsafe value of {{run_id}}: \".\" and \"..\" are not allowed as path "
                     "segments");
    ck_assert_int_eq(remote_expand_url("https://h/jobs/{{external_id}}", &v, &out, &err),
                     ST_UNPROCESSABLE);
    ck_assert_int_eq(remote_expand_url("https://h/q/{{state:q}}", &v, &out, &err),
                     ST_UNPROCESSABLE);
    ck_assert_str_eq(err.message,
                     "unsafe value of {{state:q}}: \".\" and \"..\" are not allowed as path "
                     "segments");
    setenv("OPSRUN_TEST_BASE", "http://127.0.0.1:8080", 1);
    ck_assert_int_eq(remote_expand_url("{{env:OPSRUN_TEST_BASE}}/jobs/{{external_id}}?r={{run_id}}",
                                       &(struct remote_vars){"r.1", "acme", "j 1", 1, NULL, NULL},
                                       &out, &err),
                     ST_OK);
    ck_assert_str_eq(out, "http://127.0.0.1:8080/jobs/j%201?r=r.1");
    free(out);
    ck_assert_int_eq(remote_expand_url("https://{{input:/s}}/x", &v, &out, &err), ST_INVALID);
    ck_assert_str_eq(err.message, "could not expand the URL: only {{env:...}} placeholders may "
                                  "stand before its path");
    ck_assert_ptr_null(out);
    json_decref(state);
}
END_TEST

static void url_check_fails(const char *url, const char *message)
{
    json_t *req = json_pack("{s:s}", "url", url);
    struct error err = {0};

    ck_assert_int_eq(remote_check_request(req, "p.r", true, &err), ST_INVALID);
    ck_assert_str_eq(err.message, message);
    json_decref(req);
}

/* At load: no value of the run before the path, so none can choose the
 * scheme, user, host or port; no literal dot segment. */
START_TEST(url_checks)
{
    static const char *const origin[] = {
        "https://{{input:/host}}/x",  "https://h{{input:/x}}",
        "https://h:{{input:/p}}/",    "https://{{input:/u}}@h/",
        "http://{{run_id}}.h/",       "https://h.{{tenant}}?x=1",
        "https://h{{external_id}}#x", "{{env:OPSRUN_TEST_BASE}}{{input:/p}}/x",
    };
    json_t *ok = json_pack("{s:s}", "url", "{{env:OPSRUN_TEST_BASE}}/jobs/{{input:/v}}");
    struct error err = {0};

    setenv("OPSRUN_TEST_BASE", "http://127.0.0.1:8080", 1);
    for (size_t i = 0; i < sizeof(origin) / sizeof(origin[0]); i++)
        url_check_fails(origin[i], "invalid \"p.r.url\": only {{env:...}} placeholders may stand "
                                   "before the path (in the scheme, host or port)");
    url_check_fails("{{input:/url}}", "invalid \"p.r.url\": expected an http:// or https:// URL");
    url_check_fails("https://h/a/../{{input:/v}}",
                    "invalid \"p.r.url\": a \".\" or \"..\" path segment");
    url_check_fails("https://h/./x", "invalid \"p.r.url\": a \".\" or \"..\" path segment");
    ck_assert_int_eq(remote_check_request(ok, "p.r", true, &err), ST_OK);
    json_decref(ok);
}
END_TEST

/* A reference in an answer (Location, a status URL field) resolved against
 * the URL called, in every form RFC 3986 allows; only http and https come
 * out. */
START_TEST(url_resolve)
{
    static const char *const cases[][2] = {
        {"https://api.example/ops/17", "https://api.example/ops/17"},
        {"/ops/17", "http://h:8080/ops/17"},
        {"ops/17", "http://h:8080/v1/ops/17"},
        {"./ops/17?x=1", "http://h:8080/v1/ops/17?x=1"},
        {"../ops/17", "http://h:8080/ops/17"},
        {"?page=2", "http://h:8080/v1/call?page=2"},
        {"//other.example/s", "http://other.example/s"},
        {"ftp://files.example/x", NULL},
        {"file:///etc/passwd", NULL},
        {"http://[::1", NULL},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *got = remote_url_resolve("http://h:8080/v1/call?q=1", cases[i][0]);
        if (cases[i][1])
            ck_assert_msg(got && strcmp(got, cases[i][1]) == 0, "%s: %s", cases[i][0],
                          got ? got : "(null)");
        else
            ck_assert_msg(!got, "%s: %s", cases[i][0], got);
        free(got);
    }
    ck_assert_ptr_null(remote_url_resolve("not a url", "/x"));
}
END_TEST

/* A request with a refused value is never sent: remote_call fails before
 * it connects (port 9 would refuse the connection: ST_UNAVAILABLE). */
START_TEST(call_refused)
{
    json_t *in = json_pack("{s:s}", "v", IN_CRLF);
    struct remote_vars v = {"run-1", "acme", NULL, 1, in, NULL};
    json_t *hdr = json_pack("{s:s, s:{s:s}}", "url", "http://127.0.0.1:9/x", "headers", "X-Value",
                            "{{input:/v}}");
    json_t *url = json_pack("{s:s}", "url", "http://127.0.0.1:9/x/{{input:/v}}");
    struct remote_response r;
    struct error err = {0};

    ck_assert_int_eq(remote_call(hdr, &v, NULL, NULL, &r, &err), ST_UNPROCESSABLE);
    ck_assert_str_eq(err.message, "header X-Value: unsafe value of {{input:/v}}: a control "
                                  "character is not allowed in a header");
    ck_assert(!r.transport_error);
    remote_response_cleanup(&r);
    ck_assert_int_eq(remote_call(url, &v, NULL, NULL, &r, &err), ST_UNPROCESSABLE);
    ck_assert_str_eq(err.message, URL_CRLF);
    remote_response_cleanup(&r);
    json_decref(in);
    in = json_pack("{s:s}", "v", "tab\tok");
    v.input = in;
    ck_assert_int_eq(remote_call(hdr, &v, NULL, NULL, &r, &err), ST_UNAVAILABLE);
    ck_assert(r.transport_error);
    remote_response_cleanup(&r);
    json_decref(in);
    json_decref(hdr);
    json_decref(url);
}
END_TEST

static char *text_with(const char *tmpl, json_t *take_input, int mode, enum status want)
{
    struct remote_vars v = {"run-1", "acme", NULL, 1, take_input, NULL};
    struct error err = {0};
    char *out = NULL;

    ck_assert_int_eq(remote_expand_text(tmpl, &v, mode, &out, &err), want);
    json_decref(take_input);
    return want == ST_OK ? out : strdup(err.message);
}

static void text_is(const char *tmpl, const char *value, int mode, enum status want,
                    const char *expect)
{
    char *out = text_with(tmpl, json_pack("{s:s}", "v", value), mode, want);

    ck_assert_str_eq(out, expect);
    free(out);
}

/* XML bodies: every markup character escaped, so a value stays text in its
 * element, attribute or CDATA section; characters XML does not allow are
 * refused rather than sent to a parser that would reject the envelope. */
START_TEST(xml_values)
{
    const char *t = "<Value a=\"{{input:/v}}\">{{input:/v}}</Value>";

    text_is(t, IN_XML, REMOTE_XML, ST_OK,
            "<Value a=\"&lt;/Value&gt;&lt;Evil/&gt;\">&lt;/Value&gt;&lt;Evil/&gt;</Value>");
    text_is(t, "\" onload=\"x", REMOTE_XML, ST_OK,
            "<Value a=\"&quot; onload=&quot;x\">&quot; onload=&quot;x</Value>");
    text_is("<![CDATA[{{input:/v}}]]>", "]]><Evil/>", REMOTE_XML, ST_OK,
            "<![CDATA[]]&gt;&lt;Evil/&gt;]]>");
    text_is(t, "&amp;&#x3C;", REMOTE_XML, ST_OK,
            "<Value a=\"&amp;amp;&amp;#x3C;\">&amp;amp;&amp;#x3C;</Value>");
    text_is(t, IN_CRLF, REMOTE_XML, ST_OK,
            "<Value a=\"a\r\nX-Injected: 1\">a\r\nX-Injected: 1</Value>");
    text_is(t, "a\x01", REMOTE_XML, ST_UNPROCESSABLE,
            "unsafe value of {{input:/v}}: a control character is not allowed in XML");
    text_is(t, "\xEF\xBF\xBF", REMOTE_XML, ST_UNPROCESSABLE,
            "unsafe value of {{input:/v}}: a control character is not allowed in XML");
    text_is(t, IN_SHELL, REMOTE_XML, ST_OK,
            "<Value a=\"$(touch /tmp/pwned)\">$(touch /tmp/pwned)</Value>");
}
END_TEST

/* Header values: no control character but tab from the run's values. */
START_TEST(header_values)
{
    text_is("v={{input:/v}}", IN_CRLF, REMOTE_HEADER, ST_UNPROCESSABLE,
            "unsafe value of {{input:/v}}: a control character is not allowed in a header");
    text_is("v={{input:/v}}", "a\rb", REMOTE_HEADER, ST_UNPROCESSABLE,
            "unsafe value of {{input:/v}}: a control character is not allowed in a header");
    text_is("v={{input:/v}}", "a\x7f", REMOTE_HEADER, ST_UNPROCESSABLE,
            "unsafe value of {{input:/v}}: a control character is not allowed in a header");
    text_is("v={{input:/v}}", IN_XML " " IN_AT "\t" IN_FLAG, REMOTE_HEADER, ST_OK,
            "v=" IN_XML " " IN_AT "\t" IN_FLAG);
}
END_TEST

/* A string with a NUL inside (jansson keeps it; the server's parser does
 * not accept one, but a remote's answer might carry one) is never cut
 * short as text; as a whole JSON value it is kept. */
START_TEST(nul_values)
{
    json_t *in = json_pack("{s:o}", "z", json_stringn("ok\0--evil", 9));
    struct remote_vars v = {"run-1", "acme", NULL, 1, in, NULL};
    json_t *tmpl = json_pack("{s:s}", "z", "{{input:/z}}"), *out = NULL;
    struct error err = {0};
    char *s;

    for (int mode = REMOTE_RAW; mode <= REMOTE_HEADER; mode++) {
        s = text_with("{{input:/z}}", json_incref(in), mode, ST_UNPROCESSABLE);
        ck_assert_str_eq(s, "unsafe value of {{input:/z}}: a NUL character is not allowed");
        free(s);
    }
    ck_assert_int_eq(remote_expand_json(tmpl, &v, &out, &err), ST_OK);
    ck_assert_int_eq(json_string_length(json_object_get(out, "z")), 9);
    json_decref(out);
    json_decref(tmpl);
    tmpl = json_pack("{s:s}", "z", "x {{input:/z}}");
    ck_assert_int_eq(remote_expand_json(tmpl, &v, &out, &err), ST_UNPROCESSABLE);
    json_decref(tmpl);
    json_decref(in);
}
END_TEST

/* JSON bodies: a value is a JSON value, or text inside a JSON string; it
 * never adds a member. */
START_TEST(json_values)
{
    json_t *in = json_pack("{s:s}", "v", "\",\"admin\":true,\"x\":\"" IN_CRLF);
    struct remote_vars v = {"run-1", "acme", NULL, 1, in, NULL};
    json_t *tmpl = json_pack("{s:s, s:s}", "v", "{{input:/v}}", "note", "v={{input:/v}}");
    json_t *out = NULL;
    struct error err = {0};

    ck_assert_int_eq(remote_expand_json(tmpl, &v, &out, &err), ST_OK);
    ck_assert_int_eq(json_object_size(out), 2);
    ck_assert_str_eq(json_string_value(json_object_get(out, "v")),
                     "\",\"admin\":true,\"x\":\"" IN_CRLF);
    ck_assert_str_eq(json_string_value(json_object_get(out, "note")),
                     "v=\",\"admin\":true,\"x\":\"" IN_CRLF);
    json_decref(out);
    json_decref(tmpl);
    json_decref(in);
}
END_TEST

/* body_text is XML-escaped unless "xml_escape": false, which loads only
 * when no value of the run goes in. */
START_TEST(body_text_checks)
{
    json_t *ok = json_pack("{s:s, s:s}", "url", "http://h/", "body_text", "<a>{{input:/v}}</a>");
    json_t *raw = json_pack("{s:s, s:s, s:b}", "url", "http://h/", "body_text",
                            "<a>{{env:OPSRUN_TEST_TOKEN}}</a>", "xml_escape", 0);
    struct error err = {0};

    setenv("OPSRUN_TEST_TOKEN", "x", 1);
    ck_assert_int_eq(remote_check_request(ok, "p.r", true, &err), ST_OK);
    ck_assert_int_eq(remote_check_request(raw, "p.r", true, &err), ST_OK);
    check_fails("{\"url\": \"http://h/\", \"body_text\": \"<a>{{input:/v}}</a>\", \"xml_escape\": "
                "false}",
                "invalid \"p.r.body_text\": with \"xml_escape\": false only {{env:...}} "
                "placeholders may be used (a run's values would go in unescaped)");
    check_fails("{\"url\": \"http://h/\", \"body_text\": \"<a>{{run_id}}</a>\", \"xml_escape\": "
                "false}",
                "invalid \"p.r.body_text\": with \"xml_escape\": false only {{env:...}} "
                "placeholders may be used (a run's values would go in unescaped)");
    json_decref(ok);
    json_decref(raw);
}
END_TEST

/* The run's error for a request that could not be built: "unsafe_input"
 * for a refused value, "invalid_request" otherwise; a message cut inside a
 * character (a long placeholder name) still makes an error. */
START_TEST(build_errors)
{
    struct run_ctx rc = {0};
    struct error err = {0};

    ck_assert(remote_built(&rc, ST_OK, "the request", &err));
    ck_assert(remote_built(&rc, ST_UNAVAILABLE, "the request", &err));
    ck_assert_ptr_null(rc.error);
    error_set(&err, ST_UNPROCESSABLE, "unsafe value of {{input:/v}}: a line break");
    ck_assert(!remote_built(&rc, ST_UNPROCESSABLE, "the request", &err));
    ck_assert_str_eq(json_string_value(json_object_get(rc.error, "code")), "unsafe_input");
    ck_assert_str_eq(json_string_value(json_object_get(rc.error, "message")),
                     "could not build the request: unsafe value of {{input:/v}}: a line break");
    memset(err.message, 0, sizeof(err.message));
    for (size_t i = 0; i + 2 < sizeof(err.message); i += 2)
        memcpy(err.message + i, "\xC3\xA9", 2); /* "é" over and over */
    ck_assert(!remote_built(&rc, ST_INVALID, "the status request", &err));
    ck_assert_str_eq(json_string_value(json_object_get(rc.error, "code")), "invalid_request");
    ck_assert_ptr_nonnull(json_object_get(rc.error, "message"));
    rc_cleanup(&rc);
}
END_TEST

/* exec at load: argv[0] takes no value of the run. */
START_TEST(exec_checks)
{
    json_t *bad = json_pack("{s:[s]}", "argv", "/usr/lib/tools/{{input:/tool}}");
    json_t *ok = json_pack("{s:[s, s, s]}", "argv", "/usr/lib/{{env:OPSRUN_TEST_TOKEN}}/tool", "--",
                           "{{input:/v}}");
    struct error err = {0};

    setenv("OPSRUN_TEST_TOKEN", "x", 1);
    ck_assert_int_eq(action_registry.check_params("exec", bad, "x", &err), ST_INVALID);
    ck_assert_str_eq(err.message,
                     "invalid \"x.argv[0]\": only {{env:...}} placeholders may choose the program");
    ck_assert_int_eq(action_registry.check_params("exec", ok, "x", &err), ST_OK);
    json_decref(bad);
    json_decref(ok);
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
    tcase_add_test(t, url_values);
    tcase_add_test(t, url_segments);
    tcase_add_test(t, url_other_values);
    tcase_add_test(t, url_checks);
    tcase_add_test(t, call_refused);
    tcase_add_test(t, xml_values);
    tcase_add_test(t, header_values);
    tcase_add_test(t, nul_values);
    tcase_add_test(t, json_values);
    tcase_add_test(t, body_text_checks);
    tcase_add_test(t, url_resolve);
    tcase_add_test(t, build_errors);
    tcase_add_test(t, exec_checks);
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
