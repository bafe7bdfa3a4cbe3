/* tests/fuzz/fuzz_notify.c — a notification's request over a run: the
 * input is the run's JSON as the outbox holds it, and notify_request_build
 * (engine/notify_body.h) makes the request of every kind of notifier (a signed
 * webhook with a header, Slack's default text, Alertmanager with labels)
 * for every event a run type may notify, with and without
 * http.public_url. The notifiers are loaded from a configuration, as the
 * server loads them.
 *
 * Invariants:
 *   - a run that is not a JSON object is ST_INVALID with a UTF-8 message
 *     and no request; any object makes a request;
 *   - the URL is the notifier's (Alertmanager's alerts endpoint under it);
 *   - every header is one "Name: value" line: nothing from the run adds a
 *     line; the webhook's signature is the HMAC of the body it sends;
 *   - the body is JSON: the webhook's holds the run unchanged; Slack's is
 *     {"text"} alone, a text that tells the run; Alertmanager's one alert
 *     whose labels are all strings, its own among them. */
#include "tests/fuzz/fuzz.h"

#include "engine/notify_body.h"

#define SECRET "whsec-fuzz-0123456789"
#define PUBLIC_URL "https://opsrun.example.com/"

static const char config[] =
    "{\"notifiers\": {"
    " \"hook\": {\"kind\": \"webhook\", \"url\": \"https://hooks.example/opsrun?x=1\","
    "  \"headers\": {\"X-Team\": \"sre\"}, \"secret\": \"{{env:FUZZ_NOTIFY_SECRET}}\"},"
    " \"chat\": {\"kind\": \"slack\", \"url\": \"https://hooks.slack.example/T0/B0/x\"},"
    " \"am\": {\"kind\": \"alertmanager\", \"url\": \"http://alertmanager:9093//\","
    "  \"labels\": {\"team\": \"sre\", \"severity\": \"page\"}}}}";

/* Every transition a run type's "notify" may name (config/notify.c). */
static const char *const events[] = {"run.started",
                                     "run.retrying",
                                     "run.approval_requested",
                                     "run.succeeded",
                                     "run.partially_succeeded",
                                     "run.failed",
                                     "run.cancelled",
                                     "run.timed_out",
                                     NULL};

static void check_headers(const struct notify_request *rq, const struct notifier *n,
                          const char *event)
{
    char sig[128], want[160];
    size_t i;
    bool signed_ = false;

    FUZZ_CHECK(rq->headers != NULL);
    for (i = 0; rq->headers[i]; i++) {
        const char *h = rq->headers[i], *colon = strchr(h, ':');
        FUZZ_CHECK(!strpbrk(h, "\r\n") && colon && colon > h && colon[1] == ' ');
        FUZZ_CHECK(!memchr(h, ' ', (size_t)(colon - h)));
        if (strncmp(h, "Opsrun-Signature: ", 18) == 0) {
            notify_signature(SECRET, 1700000000, rq->body, sig, sizeof(sig));
            xsnprintf(want, sizeof(want), "Opsrun-Signature: %s", sig);
            FUZZ_CHECK(strcmp(h, want) == 0);
            signed_ = true;
        }
    }
    FUZZ_CHECK(strcmp(rq->headers[0], "Content-Type: application/json") == 0);
    FUZZ_CHECK(signed_ == (n->kind == NOTIFIER_WEBHOOK));
    xsnprintf(want, sizeof(want), "Opsrun-Event: %s", event);
    FUZZ_CHECK(strcmp(rq->headers[1], want) == 0);
}

static void check_alert(const json_t *body, const json_t *run, bool linked)
{
    const json_t *alert = json_array_get(body, 0), *labels = json_object_get(alert, "labels");
    const char *key;
    json_t *v;

    FUZZ_CHECK(json_array_size(body) == 1 && json_is_object(labels));
    json_object_foreach((json_t *)labels, key, v)
    {
        FUZZ_CHECK(json_is_string(v));
    }
    FUZZ_CHECK(strncmp(json_string_value(json_object_get(labels, "alertname")), "OpsrunRun", 9) ==
               0);
    FUZZ_CHECK(json_is_string(json_object_get(labels, "team")));
    if (json_is_string(json_object_get(run, "id")))
        FUZZ_CHECK(json_equal(json_object_get(labels, "run_id"), json_object_get(run, "id")));
    FUZZ_CHECK(json_is_string(json_object_get(json_object_get(alert, "annotations"), "summary")));
    FUZZ_CHECK(json_is_string(json_object_get(alert, "startsAt")));
    FUZZ_CHECK(linked == (json_object_get(alert, "generatorURL") != NULL));
}

static void check_body(const struct notify_request *rq, const struct notifier *n, const json_t *run,
                       const char *event, bool linked)
{
    json_t *body = json_loads(rq->body, JSON_DECODE_ANY, NULL);
    const char *text;

    FUZZ_CHECK(body != NULL);
    if (n->kind == NOTIFIER_WEBHOOK) {
        FUZZ_CHECK(json_equal(json_object_get(body, "run"), run));
        FUZZ_CHECK(strcmp(json_string_value(json_object_get(body, "event")), event) == 0);
        FUZZ_CHECK(strcmp(json_string_value(json_object_get(body, "delivery_id")), "dlv-1") == 0);
    } else if (n->kind == NOTIFIER_SLACK) {
        text = json_string_value(json_object_get(body, "text"));
        FUZZ_CHECK(json_object_size(body) == 1 && text && strncmp(text, "Run ", 4) == 0);
        if (linked)
            FUZZ_CHECK(strstr(text, "https://opsrun.example.com/#/runs/") != NULL);
    } else {
        check_alert(body, run, linked);
    }
    json_decref(body);
}

static void check_url(const struct notify_request *rq, const struct notifier *n)
{
    if (n->kind == NOTIFIER_ALERTMANAGER)
        FUZZ_CHECK(strcmp(rq->url, "http://alertmanager:9093/api/v2/alerts") == 0);
    else
        FUZZ_CHECK(strcmp(rq->url, n->url) == 0);
}

static void build(const struct notifier *n, const char *run_json, const json_t *run)
{
    for (size_t i = 0; events[i]; i++)
        for (int linked = 0; linked < 2; linked++) {
            struct notify_request rq;
            struct error err = {0};
            enum status st = notify_request_build(
                n, events[i], "dlv-1", run_json, linked ? PUBLIC_URL : NULL, 1700000000, &rq, &err);
            if (!json_is_object(run)) {
                FUZZ_CHECK(st == ST_INVALID && fuzz_utf8(err.message) && rq.url == NULL);
                return;
            }
            FUZZ_CHECK(st == ST_OK && rq.url && rq.body);
            check_url(&rq, n);
            check_headers(&rq, n, events[i]);
            check_body(&rq, n, run, events[i], linked);
            notify_request_cleanup(&rq);
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *run_json = fuzz_cstr(data, size);
    json_t *run = json_loads(run_json, 0, NULL);
    struct config cfg;
    struct error err = {0};

    setenv("FUZZ_NOTIFY_SECRET", SECRET, 1);
    cfg_init(&cfg, &action_registry);
    if (cfg_load_json(&cfg, config, &err) != ST_OK || cfg_validate(&cfg, &err) != ST_OK) {
        fprintf(stderr, "fuzz: notifiers: %s\n", err.message);
        abort();
    }
    for (size_t i = 0; i < cfg.nnotifiers; i++)
        build(&cfg.notifiers[i], run_json, run);
    cfg_cleanup(&cfg);
    json_decref(run);
    free(run_json);
    return 0;
}
