/* tests/unit/test_notify.c — the Check suite for what a notification sends
 * (engine/notify_body.h) and the pieces under it: HMAC-SHA256 against RFC 4231,
 * the Opsrun-Signature header, the {{run:/pointer}} templates
 * (common/template.h), the body and headers of each kind of notifier, the
 * verdict on an answer and the pause before a retry, and the rules the
 * database receives.
 *
 * System headers come before the opsrun headers, ahead of common.h's poison
 * pragma. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/digest.h"
#include "common/encoding.h"
#include "common/template.h"
#include "config/config.h"
#include "engine/actions/action.h"
#include "engine/actions/registry.h"
#include "engine/notify_body.h"

#define RUN                                                                                        \
    "{\"id\": \"r1\", \"tenant\": \"acme\", \"type\": \"restart-pod\", \"status\": "               \
    "\"completed\", \"outcome\": \"failed\", \"input\": {\"pod\": \"web-1\", \"n\": 3, "           \
    "\"tags\": [\"a\", \"b\"]}, \"error\": {\"code\": \"boom\", \"message\": \"pod did not come "  \
    "back\"}, \"completed_at\": \"2026-11-27T10:00:00.000000Z\", \"updated_at\": "                 \
    "\"2026-11-27T10:00:00.000000Z\"}"

static const char *hex_hmac(const void *key, size_t klen, const void *msg, size_t n)
{
    static char out[65];
    struct hmac_sha256 h;
    unsigned char mac[32];

    hmac_sha256_init(&h, key, klen);
    hmac_sha256_update(&h, msg, n);
    hmac_sha256_final(&h, mac);
    hex_encode(mac, sizeof(mac), out);
    return out;
}

/* RFC 4231, test cases 1, 2, 3 and 6 (a key longer than a block). */
START_TEST(hmac_rfc4231)
{
    unsigned char k1[20], k3[20], d3[50], k6[131];

    memset(k1, 0x0b, sizeof(k1));
    ck_assert_str_eq(hex_hmac(k1, sizeof(k1), "Hi There", 8),
                     "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    ck_assert_str_eq(hex_hmac("Jefe", 4, "what do ya want for nothing?", 28),
                     "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    memset(k3, 0xaa, sizeof(k3));
    memset(d3, 0xdd, sizeof(d3));
    ck_assert_str_eq(hex_hmac(k3, sizeof(k3), d3, sizeof(d3)),
                     "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
    memset(k6, 0xaa, sizeof(k6));
    ck_assert_str_eq(
        hex_hmac(k6, sizeof(k6), "Test Using Larger Than Block-Size Key - Hash Key First", 54),
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}
END_TEST

/* The same message in parts gives the same MAC. */
START_TEST(hmac_in_parts)
{
    struct hmac_sha256 h;
    unsigned char mac[32];
    char hex[65];

    hmac_sha256_init(&h, "Jefe", 4);
    hmac_sha256_update(&h, "what do ya ", 11);
    hmac_sha256_update(&h, "want for nothing?", 17);
    hmac_sha256_final(&h, mac);
    hex_encode(mac, sizeof(mac), hex);
    ck_assert_str_eq(hex, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}
END_TEST

/* "t=<t>,v1=<HMAC of secret over "<t>.<body>">". */
START_TEST(signature_header)
{
    char sig[128], want[128];

    notify_signature("s3cret", 1795000000, "{\"a\":1}", sig, sizeof(sig));
    snprintf(want, sizeof(want), "t=1795000000,v1=%s",
             hex_hmac("s3cret", 6, "1795000000.{\"a\":1}", 18));
    ck_assert_str_eq(sig, want);
}
END_TEST

START_TEST(templates_checked)
{
    char why[160];

    ck_assert(tmpl_check("plain", why, sizeof(why)));
    ck_assert(tmpl_check("{{run:/id}} and {{run:/error/message}}", why, sizeof(why)));
    ck_assert(tmpl_check("{{run:}}", why, sizeof(why)));
    ck_assert(!tmpl_check("{{input:/x}}", why, sizeof(why)));
    ck_assert_str_eq(why, "\"{{input:/x}}\" is not a placeholder {{run:/json/pointer}}");
    ck_assert(!tmpl_check("{{run:id}}", why, sizeof(why)));   /* not a pointer */
    ck_assert(!tmpl_check("{{run:/a~2}}", why, sizeof(why))); /* a bad escape */
    ck_assert(!tmpl_check("{{run:/a", why, sizeof(why)));     /* unterminated */
    ck_assert(!tmpl_check("{{run:/a}", why, sizeof(why)));
}
END_TEST

static char *expand(const char *s, bool missing_ok, enum status want)
{
    json_t *doc = json_loads(RUN, 0, NULL);
    struct error err = {0};
    char *out = NULL;

    ck_assert_int_eq(tmpl_expand_text(s, doc, missing_ok, TMPL_AS_IS, &out, &err), want);
    json_decref(doc);
    return out;
}

/* Strings as they are, anything else as JSON; a missing pointer is an
 * error, or "" when allowed. */
START_TEST(templates_expanded)
{
    char *s = expand("{{run:/type}} {{run:/id}}: {{run:/error/message}}", false, ST_OK);

    ck_assert_str_eq(s, "restart-pod r1: pod did not come back");
    free(s);
    s = expand("n={{run:/input/n}} tags={{run:/input/tags}} t1={{run:/input/tags/1}}", false,
               ST_OK);
    ck_assert_str_eq(s, "n=3 tags=[\"a\", \"b\"] t1=b");
    free(s);
    ck_assert_ptr_null(expand("x {{run:/result/nope}}", false, ST_NOT_FOUND));
    s = expand("x[{{run:/result/nope}}]", true, ST_OK);
    ck_assert_str_eq(s, "x[]");
    free(s);
    s = expand("{{ not a placeholder }} {{run:/id}}", false, ST_OK);
    ck_assert_str_eq(s, "{{ not a placeholder }} r1");
    free(s);
    s = expand("{{run:/input/tags/01}}", true, ST_OK); /* no leading zero */
    ck_assert_str_eq(s, "");
    free(s);
}
END_TEST

START_TEST(alertnames)
{
    char n[64];

    notify_alertname("run.failed", n, sizeof(n));
    ck_assert_str_eq(n, "OpsrunRunFailed");
    notify_alertname("run.timed_out", n, sizeof(n));
    ck_assert_str_eq(n, "OpsrunRunTimedOut");
    notify_alertname("run.partially_succeeded", n, sizeof(n));
    ck_assert_str_eq(n, "OpsrunRunPartiallySucceeded");
    notify_alertname("run.approval_requested", n, sizeof(n));
    ck_assert_str_eq(n, "OpsrunRunApprovalRequested");
}
END_TEST

START_TEST(run_links)
{
    char *l = notify_run_link("https://opsrun.example.com", "r1.1");

    ck_assert_str_eq(l, "https://opsrun.example.com/#/runs/r1.1");
    free(l);
    l = notify_run_link("https://opsrun.example.com/ui//", "r1");
    ck_assert_str_eq(l, "https://opsrun.example.com/ui/#/runs/r1");
    free(l);
    ck_assert_ptr_null(notify_run_link(NULL, "r1"));
}
END_TEST

static struct config cfg;

static void cfg_setup(void)
{
    struct error err = {0};

    setenv("TEST_HOOK_SECRET", "s3cret", 1);
    setenv("TEST_SLACK_URL", "https://hooks.slack.example/T/B/x", 1);
    cfg_init(&cfg, &action_registry);
    ck_assert_msg(
        cfg_load_json(&cfg,
                      "{\"notifiers\": {"
                      " \"audit\": {\"kind\": \"webhook\", \"url\": \"http://127.0.0.1:9/h\","
                      "  \"headers\": {\"X-Team\": \"sre\"}, \"secret\": "
                      "\"{{env:TEST_HOOK_SECRET}}\"},"
                      " \"plain\": {\"kind\": \"webhook\", \"url\": \"http://127.0.0.1:9/p\"},"
                      " \"chat\": {\"kind\": \"slack\", \"url\": \"{{env:TEST_SLACK_URL}}\"},"
                      " \"custom\": {\"kind\": \"slack\", \"url\": \"http://127.0.0.1:9/s\","
                      "  \"text\": \"{{run:/id}} is {{run:/outcome}} ({{run:/input/pod}})\"},"
                      " \"linked\": {\"kind\": \"slack\", \"url\": \"http://127.0.0.1:9/s\","
                      "  \"text\": \"<https://runbook.example/a?b=1&c=2|runbook> "
                      "{{run:/input/pod}} {{run:/input}}\"},"
                      " \"am\": {\"kind\": \"alertmanager\", \"url\": \"http://am:9093/\","
                      "  \"labels\": {\"severity\": \"page\"}}},"
                      " \"run_types\": {\"restart-pod\": {\"action\": \"simulate\","
                      "  \"notify\": [{\"on\": [\"failed\"], \"to\": \"audit\"}],"
                      "  \"then\": [{\"on\": [\"failed\", \"timed_out\"], \"run_type\": \"demo\","
                      "   \"data\": {\"why\": \"{{run:/error/message}}\"}},"
                      "   {\"on\": [\"succeeded\"], \"run_type\": \"demo\", \"delay_s\": 60}]}}}",
                      &err) == ST_OK,
        "%s", err.message);
}

static void cfg_teardown(void)
{
    cfg_cleanup(&cfg);
}

static const char *header(const struct notify_request *rq, const char *name)
{
    size_t n = strlen(name);

    for (size_t i = 0; rq->headers[i]; i++)
        if (strncmp(rq->headers[i], name, n) == 0 && rq->headers[i][n] == ':')
            return rq->headers[i] + n + 2;
    return NULL;
}

static void build(const char *notifier, const char *event, const char *public_url,
                  struct notify_request *rq)
{
    struct error err = {0};

    ck_assert_msg(notify_request_build(cfg_notifier(&cfg, notifier), event, "d-1", RUN, public_url,
                                       1795000000, rq, &err) == ST_OK,
                  "%s", err.message);
}

/* {"event", "delivery_id", "run"}, the Opsrun-* headers, the signature over
 * the body as sent, the configured headers. */
START_TEST(webhook_request)
{
    struct notify_request rq;
    json_t *body;
    char sig[128];

    build("audit", "run.failed", NULL, &rq);
    ck_assert_str_eq(rq.url, "http://127.0.0.1:9/h");
    body = json_loads(rq.body, 0, NULL);
    ck_assert_str_eq(json_string_value(json_object_get(body, "event")), "run.failed");
    ck_assert_str_eq(json_string_value(json_object_get(body, "delivery_id")), "d-1");
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(body, "run"), "id")), "r1");
    ck_assert_uint_eq(json_object_size(body), 3);
    json_decref(body);
    ck_assert_str_eq(header(&rq, "Content-Type"), "application/json");
    ck_assert_str_eq(header(&rq, "Opsrun-Event"), "run.failed");
    ck_assert_str_eq(header(&rq, "Opsrun-Delivery"), "d-1");
    ck_assert_str_eq(header(&rq, "X-Team"), "sre");
    notify_signature("s3cret", 1795000000, rq.body, sig, sizeof(sig));
    ck_assert_str_eq(header(&rq, "Opsrun-Signature"), sig);
    notify_request_cleanup(&rq);
    build("plain", "run.started", NULL, &rq);
    ck_assert_ptr_null(header(&rq, "Opsrun-Signature"));
    notify_request_cleanup(&rq);
}
END_TEST

START_TEST(slack_request)
{
    struct notify_request rq;
    json_t *body;

    build("chat", "run.failed", "https://opsrun.example.com", &rq);
    ck_assert_str_eq(rq.url, "https://hooks.slack.example/T/B/x");
    body = json_loads(rq.body, 0, NULL);
    ck_assert_str_eq(json_string_value(json_object_get(body, "text")),
                     "Run r1 (restart-pod) failed: pod did not come back "
                     "https://opsrun.example.com/#/runs/r1");
    json_decref(body);
    notify_request_cleanup(&rq);
    build("chat", "run.timed_out", NULL, &rq);
    ck_assert_ptr_nonnull(strstr(rq.body, "\"Run r1 (restart-pod) timed out: pod did"));
    notify_request_cleanup(&rq);
    build("custom", "run.failed", NULL, &rq);
    ck_assert_str_eq(rq.body, "{\"text\":\"r1 is failed (web-1)\"}");
    notify_request_cleanup(&rq);
}
END_TEST

/* Text from the run (its input, a remote API's error message) cannot post
 * markup: "&", "<", ">" are escaped as Slack documents, in the summary and
 * in every spliced value, JSON included; the template's own markup stays. */
START_TEST(slack_escapes_run_text)
{
    const char *run = "{\"id\": \"r1\", \"type\": \"fix\", \"outcome\": \"failed\", "
                      "\"input\": {\"pod\": \"<!channel> & <https://evil.example|ok>\"}, "
                      "\"error\": {\"code\": \"x\", \"message\": \"<@U123> a>b\"}}";
    struct notify_request rq;
    struct error err = {0};
    json_t *body;

    ck_assert_int_eq(notify_request_build(cfg_notifier(&cfg, "chat"), "run.failed", "d-1", run,
                                          "https://o.example", 1795000000, &rq, &err),
                     ST_OK);
    body = json_loads(rq.body, 0, NULL);
    ck_assert_str_eq(json_string_value(json_object_get(body, "text")),
                     "Run r1 (fix) failed: &lt;@U123&gt; a&gt;b https://o.example/#/runs/r1");
    json_decref(body);
    notify_request_cleanup(&rq);
    ck_assert_int_eq(notify_request_build(cfg_notifier(&cfg, "linked"), "run.failed", "d-1", run,
                                          NULL, 1795000000, &rq, &err),
                     ST_OK);
    body = json_loads(rq.body, 0, NULL);
    ck_assert_str_eq(json_string_value(json_object_get(body, "text")),
                     "<https://runbook.example/a?b=1&c=2|runbook> &lt;!channel&gt; &amp; "
                     "&lt;https://evil.example|ok&gt; {\"pod\": \"&lt;!channel&gt; &amp; "
                     "&lt;https://evil.example|ok&gt;\"}");
    json_decref(body);
    notify_request_cleanup(&rq);
    {
        char *e = tmpl_escape_slack("a&b<c>d");
        ck_assert_str_eq(e, "a&amp;b&lt;c&gt;d");
        free(e);
    }
}
END_TEST

/* One alert: the labels of the contract and the configured ones, the error
 * message as description, the link when public_url is set. */
START_TEST(alertmanager_request)
{
    struct notify_request rq;
    json_t *body, *a, *l;

    build("am", "run.failed", "https://opsrun.example.com", &rq);
    ck_assert_str_eq(rq.url, "http://am:9093/api/v2/alerts");
    body = json_loads(rq.body, 0, NULL);
    ck_assert(json_is_array(body) && json_array_size(body) == 1);
    a = json_array_get(body, 0);
    l = json_object_get(a, "labels");
    ck_assert_str_eq(json_string_value(json_object_get(l, "alertname")), "OpsrunRunFailed");
    ck_assert_str_eq(json_string_value(json_object_get(l, "run_type")), "restart-pod");
    ck_assert_str_eq(json_string_value(json_object_get(l, "run_id")), "r1");
    ck_assert_str_eq(json_string_value(json_object_get(l, "tenant")), "acme");
    ck_assert_str_eq(json_string_value(json_object_get(l, "severity")), "page");
    ck_assert_str_eq(
        json_string_value(json_object_get(json_object_get(a, "annotations"), "description")),
        "pod did not come back");
    ck_assert_str_eq(
        json_string_value(json_object_get(json_object_get(a, "annotations"), "summary")),
        "Run r1 (restart-pod) failed");
    ck_assert_str_eq(json_string_value(json_object_get(a, "generatorURL")),
                     "https://opsrun.example.com/#/runs/r1");
    ck_assert_str_eq(json_string_value(json_object_get(a, "startsAt")),
                     "2026-11-27T10:00:00.000000Z");
    json_decref(body);
    notify_request_cleanup(&rq);
    build("am", "run.failed", NULL, &rq);
    ck_assert_ptr_null(strstr(rq.body, "generatorURL"));
    notify_request_cleanup(&rq);
}
END_TEST

START_TEST(bad_run_refused)
{
    struct notify_request rq;
    struct error err = {0};

    ck_assert_int_eq(notify_request_build(cfg_notifier(&cfg, "audit"), "run.failed", "d", "[1]",
                                          NULL, 0, &rq, &err),
                     ST_INVALID);
    ck_assert_str_eq(err.message, "the delivery's run is not a JSON object");
    /* a delivery whose run is gone is claimed with the JSON null */
    ck_assert_int_eq(notify_request_build(cfg_notifier(&cfg, "audit"), "run.failed", "d", "null",
                                          NULL, 0, &rq, &err),
                     ST_INVALID);
    ck_assert_str_eq(err.message, "the run no longer exists");
}
END_TEST

START_TEST(verdicts)
{
    ck_assert_int_eq(notify_verdict(200, 1, 8), NOTIFY_DELIVERED);
    ck_assert_int_eq(notify_verdict(204, 8, 8), NOTIFY_DELIVERED);
    ck_assert_int_eq(notify_verdict(503, 1, 8), NOTIFY_RETRY);
    ck_assert_int_eq(notify_verdict(0, 7, 8), NOTIFY_RETRY);
    ck_assert_int_eq(notify_verdict(302, 2, 8), NOTIFY_RETRY); /* redirects are not followed */
    ck_assert_int_eq(notify_verdict(503, 8, 8), NOTIFY_GIVE_UP);
    ck_assert_int_eq(notify_verdict(410, 1, 8), NOTIFY_GIVE_UP);
    ck_assert_int_eq(notify_retry_ms(1, 0), 1000);
    ck_assert_int_eq(notify_retry_ms(2, 0), 2000);
    ck_assert_int_eq(notify_retry_ms(7, 0), 64000);
    ck_assert_int_eq(notify_retry_ms(20, 0), 300000);
    ck_assert_int_eq(notify_retry_ms(1, 30), 30000);
    ck_assert_int_eq(notify_retry_ms(1, 1000000), 3600000);
}
END_TEST

/* One row per run type; then rules numbered from 1 with delay_s and data
 * filled in. */
START_TEST(rules_for_the_database)
{
    char *text = notify_rules_json(&cfg);
    json_t *rows = json_loads(text, 0, NULL), *row = NULL, *then;
    size_t i;

    json_array_foreach(rows, i, row)
    {
        if (strcmp(json_string_value(json_object_get(row, "type")), "restart-pod") == 0)
            break;
    }
    ck_assert_uint_eq(json_array_size(rows), cfg.nrun_types);
    ck_assert_int_eq(json_integer_value(json_object_get(row, "max_attempts")), 3);
    ck_assert_int_eq(json_integer_value(json_object_get(row, "timeout_s")), 900);
    ck_assert_uint_eq(json_array_size(json_object_get(row, "notify")), 1);
    then = json_object_get(row, "follow_ups");
    ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(then, 0), "k")), 1);
    ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(then, 0), "delay_s")), 0);
    ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(then, 1), "k")), 2);
    ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(then, 1), "delay_s")), 60);
    ck_assert(json_is_object(json_object_get(json_array_get(then, 1), "data")));
    json_decref(rows);
    free(text);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("notify");
    TCase *t = tcase_create("pieces"), *b = tcase_create("requests");
    SRunner *r;
    int failed;

    tcase_add_test(t, hmac_rfc4231);
    tcase_add_test(t, hmac_in_parts);
    tcase_add_test(t, signature_header);
    tcase_add_test(t, templates_checked);
    tcase_add_test(t, templates_expanded);
    tcase_add_test(t, alertnames);
    tcase_add_test(t, run_links);
    tcase_add_test(t, verdicts);
    tcase_add_checked_fixture(b, cfg_setup, cfg_teardown);
    tcase_add_test(b, webhook_request);
    tcase_add_test(b, slack_request);
    tcase_add_test(b, slack_escapes_run_text);
    tcase_add_test(b, alertmanager_request);
    tcase_add_test(b, bad_run_refused);
    tcase_add_test(b, rules_for_the_database);
    suite_add_tcase(s, t);
    suite_add_tcase(s, b);
    r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
