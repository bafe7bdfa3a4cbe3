/* engine/notify_body.c — what one attempt of a delivery sends, for each
 * kind of notifier, and what its answer calls for (engine/notify_body.h). */
#include "engine/notify_body.h"

#include "config/workflows.h"

#include "common/backoff.h"
#include "common/digest.h"
#include "common/encoding.h"
#include "common/template.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#define RETRY_FIRST_MS 1000
#define RETRY_MAX_MS (5 * 60 * 1000)
#define RETRY_AFTER_MAX_S 3600

/* ---- the rules the database applies ---- */

/* A type's concurrency into its rules row (migration 022): the key as
 * compiled (conc_parts), which the database evaluates for each new run. */
static void rules_concurrency(json_t *row, const struct run_type *rt)
{
    const struct concurrency *c = &rt->conc;

    json_object_set_new(row, "conc_group", json_string(c->group ? c->group : rt->name));
    json_object_set(row, "conc_parts", c->parts ? c->parts : json_null());
    json_object_set_new(row, "conc_max", json_integer(c->max_running));
    json_object_set_new(row, "conc_strategy", json_string(cfg_conc_strategy_name(c->strategy)));
}

char *notify_rules_json(const struct config *cfg)
{
    json_t *all = json_array();
    char *text;

    for (size_t i = 0; i < cfg->nrun_types; i++) {
        const struct run_type *rt = &cfg->run_types[i];
        json_t *then = json_array(), *rule, *row;
        size_t k;

        json_array_foreach(rt->then, k, rule)
        {
            json_t *data = json_object_get(rule, "data");
            json_array_append_new(
                then, json_pack("{s:I, s:O, s:s, s:I, s:o}", "k", (json_int_t)k + 1, "on",
                                json_object_get(rule, "on"), "run_type",
                                json_string_value(json_object_get(rule, "run_type")), "delay_s",
                                json_integer_value(json_object_get(rule, "delay_s")), "data",
                                data ? json_incref((json_t *)data) : json_object()));
        }
        row = json_pack("{s:s, s:i, s:I, s:O, s:o, s:o, s:s?}", "type", rt->name, "max_attempts",
                        rt->max_attempts, "timeout_s", (json_int_t)rt->timeout_s, "notify",
                        rt->notify, "follow_ups", then, "approval_timeout_s",
                        rt->approval.timeout_s ? json_integer(rt->approval.timeout_s) : json_null(),
                        "approval_on_timeout",
                        !rt->approval.timeout_s           ? NULL
                        : rt->approval.approve_on_timeout ? "approve"
                                                          : "reject");
        if (row && rt->conc.on)
            rules_concurrency(row, rt);
        if (row && cfg_run_type_is_workflow(cfg, rt)) {
            json_t *wf = cfg_wf_compile(rt);
            if (!wf)
                abort(); /* a checked type compiles; jansson fails only when it cannot allocate */
            json_object_set_new(row, "workflow", wf);
        }
        json_array_append_new(all, row);
    }
    text = json_dumps(all, JSON_COMPACT);
    json_decref(all);
    if (!text)
        abort(); /* jansson fails only when it cannot allocate */
    return text;
}

/* ---- pieces ---- */

void notify_alertname(const char *event, char *out, size_t n)
{
    const char *s = strncmp(event, "run.", 4) == 0 ? event + 4 : event;
    size_t len = (size_t)xsnprintf(out, n, "OpsrunRun");
    bool up = true;

    for (; *s && len + 1 < n; s++) {
        if (*s == '_') {
            up = true;
            continue;
        }
        out[len++] = up ? (char)toupper((unsigned char)*s) : *s;
        up = false;
    }
    out[len] = '\0';
}

char *notify_run_link(const char *public_url, const char *run_id)
{
    size_t n;

    if (!public_url)
        return NULL;
    n = strlen(public_url);
    while (n > 0 && public_url[n - 1] == '/')
        n--;
    return xasprintf("%.*s/#/runs/%s", (int)n, public_url, run_id);
}

void notify_signature(const char *secret, int64_t t, const char *body, char *out, size_t n)
{
    struct hmac_sha256 h;
    unsigned char mac[32];
    char ts[24], hex[65];

    xsnprintf(ts, sizeof(ts), "%lld.", (long long)t);
    hmac_sha256_init(&h, secret, strlen(secret));
    hmac_sha256_update(&h, ts, strlen(ts));
    hmac_sha256_update(&h, body, strlen(body));
    hmac_sha256_final(&h, mac);
    hex_encode(mac, sizeof(mac), hex);
    xsnprintf(out, n, "t=%lld,v1=%s", (long long)t, hex);
}

/* What happened, in words: "failed", "timed out", "started", "is
 * retrying". */
static void event_words(const char *event, char *out, size_t n)
{
    const char *s = strncmp(event, "run.", 4) == 0 ? event + 4 : event;

    if (strcmp(s, "retrying") == 0)
        s = "is retrying";
    else if (strcmp(s, "approval_requested") == 0)
        s = "waits for approval";
    xsnprintf(out, n, "%s", s);
    for (char *p = out; *p; p++)
        if (*p == '_')
            *p = ' ';
}

static const char *jstr(const json_t *run, const char *key)
{
    const char *v = json_string_value(json_object_get(run, key));
    return v ? v : "";
}

static const char *run_error_message(const json_t *run)
{
    return json_string_value(json_object_get(json_object_get(run, "error"), "message"));
}

/* "Run <id> (<type>) failed: <message>". */
static char *summary(const json_t *run, const char *event, bool with_error)
{
    const char *msg = with_error ? run_error_message(run) : NULL;
    char words[48];

    event_words(event, words, sizeof(words));
    return xasprintf("Run %s (%s) %s%s%s", jstr(run, "id"), jstr(run, "type"), words,
                     msg ? ": " : "", msg ? msg : "");
}

/* ---- the bodies ---- */

static json_t *webhook_body(const char *event, const char *delivery_id, json_t *run)
{
    return json_pack("{s:s, s:s, s:O}", "event", event, "delivery_id", delivery_id, "run", run);
}

/* The message's text: the notifier's template, or the summary and the link.
 * Whatever came from the run (its input, a remote API's error message) is
 * escaped for Slack; the template's own markup is the operator's. */
static enum status slack_body(const struct notifier *n, const char *event, json_t *run,
                              const char *link, json_t **out, struct error *err)
{
    char *text = NULL, *line;
    enum status st = ST_OK;

    if (n->text) {
        st = tmpl_expand_text(n->text, run, true, TMPL_SLACK, &text, err);
    } else {
        char *sum = summary(run, event, true);
        line = link ? xasprintf("%s %s", sum, link) : xstrdup(sum);
        text = tmpl_escape_slack(line);
        free(line);
        free(sum);
    }
    if (st == ST_OK)
        *out = json_pack("{s:s}", "text", text);
    free(text);
    return st;
}

static json_t *alertmanager_body(const struct notifier *n, const char *event, json_t *run,
                                 const char *link)
{
    char name[64], *sum = summary(run, event, false);
    const char *msg = run_error_message(run), *at = jstr(run, "completed_at");
    json_t *labels, *alert;

    notify_alertname(event, name, sizeof(name));
    labels = n->labels ? json_deep_copy(n->labels) : json_object();
    json_object_set_new(labels, "alertname", json_string(name));
    json_object_set_new(labels, "run_type", json_string(jstr(run, "type")));
    json_object_set_new(labels, "run_id", json_string(jstr(run, "id")));
    json_object_set_new(labels, "tenant", json_string(jstr(run, "tenant")));
    alert =
        json_pack("{s:o, s:{s:s, s:s}, s:s}", "labels", labels, "annotations", "summary", sum,
                  "description", msg ? msg : sum, "startsAt", *at ? at : jstr(run, "updated_at"));
    if (alert && link)
        json_object_set_new(alert, "generatorURL", json_string(link));
    free(sum);
    return json_pack("[o]", alert);
}

/* ---- the request ---- */

void notify_request_cleanup(struct notify_request *rq)
{
    if (!rq)
        return;
    free(rq->url);
    free(rq->body);
    for (size_t i = 0; rq->headers && rq->headers[i]; i++)
        free(rq->headers[i]);
    free(rq->headers);
    memset(rq, 0, sizeof(*rq));
}

static void header_add(struct notify_request *rq, size_t *n, char *line)
{
    rq->headers = xrealloc(rq->headers, (*n + 2) * sizeof(*rq->headers));
    rq->headers[(*n)++] = line;
    rq->headers[*n] = NULL;
}

static char *endpoint(const struct notifier *n)
{
    size_t len = strlen(n->url);

    if (n->kind != NOTIFIER_ALERTMANAGER)
        return xstrdup(n->url);
    while (len > 0 && n->url[len - 1] == '/')
        len--;
    return xasprintf("%.*s/api/v2/alerts", (int)len, n->url);
}

enum status notify_request_build(const struct notifier *n, const char *event,
                                 const char *delivery_id, const char *run_json,
                                 const char *public_url, int64_t now_s, struct notify_request *out,
                                 struct error *err)
{
    json_t *run = json_loads(run_json, 0, NULL), *body = NULL, *v;
    char *link = NULL, sig[128];
    const char *key;
    enum status st = ST_OK;
    size_t nh = 0;

    memset(out, 0, sizeof(*out));
    if (!json_is_object(run)) {
        json_decref(run);
        /* null: the run is gone (a row made outside opsrun, migration 036) */
        return error_set(err, ST_INVALID, "%s",
                         run_json && strcmp(run_json, "null") == 0
                             ? "the run no longer exists"
                             : "the delivery's run is not a JSON object");
    }
    link = notify_run_link(public_url, jstr(run, "id"));
    if (n->kind == NOTIFIER_WEBHOOK)
        body = webhook_body(event, delivery_id, run);
    else if (n->kind == NOTIFIER_SLACK)
        st = slack_body(n, event, run, link, &body, err);
    else
        body = alertmanager_body(n, event, run, link);
    if (st == ST_OK && !(out->body = json_dumps(body, JSON_COMPACT)))
        abort(); /* jansson fails only when it cannot allocate */
    json_decref(body);
    json_decref(run);
    free(link);
    if (st != ST_OK)
        return st;
    out->url = endpoint(n);
    header_add(out, &nh, xstrdup("Content-Type: application/json"));
    header_add(out, &nh, xasprintf("Opsrun-Event: %s", event));
    header_add(out, &nh, xasprintf("Opsrun-Delivery: %s", delivery_id));
    if (n->secret) {
        notify_signature(n->secret, now_s, out->body, sig, sizeof(sig));
        header_add(out, &nh, xasprintf("Opsrun-Signature: %s", sig));
    }
    json_object_foreach(n->header_values, key, v)
    {
        header_add(out, &nh, xasprintf("%s: %s", key, json_string_value(v)));
    }
    return ST_OK;
}

/* ---- the answer ---- */

enum notify_verdict notify_verdict(long status, int attempt, int max_attempts)
{
    if (status >= 200 && status < 300)
        return NOTIFY_DELIVERED;
    if (status == 410 || attempt >= max_attempts)
        return NOTIFY_GIVE_UP;
    return NOTIFY_RETRY;
}

int64_t notify_retry_ms(int attempt, int64_t retry_after_s)
{
    int64_t ms = backoff_delay_ms(RETRY_FIRST_MS, 2, RETRY_MAX_MS, attempt);

    if (retry_after_s > RETRY_AFTER_MAX_S)
        retry_after_s = RETRY_AFTER_MAX_S;
    if (retry_after_s * 1000 > ms)
        ms = retry_after_s * 1000;
    return ms;
}
