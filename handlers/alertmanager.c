/* handlers/alertmanager.c — POST /alerts with a Prometheus Alertmanager
 * webhook body (version 4). Each alert becomes its own run, or joins the
 * active run of the same alert (same fingerprint), so repeated
 * notifications of a firing alert never start a second run while one is
 * active. Alertmanager retries only on 5xx and drops a notification on 4xx,
 * so one bad or unroutable alert never fails the batch: a valid envelope is
 * answered 2xx with one result per alert, and only a failure on our side
 * (the database) is a 503, which makes Alertmanager send the whole batch
 * again — harmless, because the alerts it already delivered join their
 * runs. Unknown fields are ignored: newer Alertmanagers add some. */
#include "handlers/handlers.h"
#include "handlers/alertmanager.h"
#include "handlers/intake.h"
#include "handlers/labels.h"
#include "handlers/metrics.h"

#include "common/canon_json.h"
#include "common/ids.h"
#include "common/log.h"
#include "common/metrics.h"
#include "engine/engine.h"
#include "store/db.h"
#include "store/runs.h"

#include <stdlib.h>
#include <string.h>

#define FINGERPRINT_MAX 128

/* An optional member of the given JSON type; reports a wrong type. */
static const json_t *member(const json_t *obj, const char *key, json_type type, const char *prefix,
                            struct error *err)
{
    const json_t *v = json_object_get(obj, key);
    static const char *const names[] = {
        [JSON_OBJECT] = "an object",   [JSON_ARRAY] = "an array", [JSON_STRING] = "a string",
        [JSON_INTEGER] = "an integer", [JSON_REAL] = "a number",  [JSON_TRUE] = "a boolean",
        [JSON_FALSE] = "a boolean",    [JSON_NULL] = "null"};
    char field[64];

    if (!v || json_typeof(v) == type)
        return v;
    xsnprintf(field, sizeof(field), "%s%s", prefix, key);
    error_field(err, ST_INVALID, field, "must be %s", names[type]);
    return NULL;
}

static const char *member_str(const json_t *obj, const char *key, const char *prefix,
                              struct error *err)
{
    return json_string_value(member(obj, key, JSON_STRING, prefix, err));
}

enum status am_parse_envelope(const json_t *body, struct am_envelope *out, struct error *err)
{
    const json_t *t;

    memset(out, 0, sizeof(*out));
    out->version = member_str(body, "version", "", err);
    out->receiver = member_str(body, "receiver", "", err);
    out->status = member_str(body, "status", "", err);
    out->external_url = member_str(body, "externalURL", "", err);
    out->group_key = member_str(body, "groupKey", "", err);
    out->alerts = member(body, "alerts", JSON_ARRAY, "", err);
    (void)member(body, "groupLabels", JSON_OBJECT, "", err);
    (void)member(body, "commonLabels", JSON_OBJECT, "", err);
    (void)member(body, "commonAnnotations", JSON_OBJECT, "", err);
    t = member(body, "truncatedAlerts", JSON_INTEGER, "", err);
    if (t && json_integer_value(t) < 0)
        error_field(err, ST_INVALID, "truncatedAlerts", "must not be negative");
    else if (t)
        out->truncated = json_integer_value(t);
    if (!json_object_get(body, "alerts"))
        error_field(err, ST_INVALID, "alerts", "is required");
    return err && err->nfields > 0 ? ST_INVALID : ST_OK;
}

enum status am_parse_alert(const json_t *alert, size_t index, struct am_alert *out,
                           struct error *err)
{
    char prefix[32], field[48];
    const char *status;
    unsigned before = err ? err->nfields : 0;

    memset(out, 0, sizeof(*out));
    xsnprintf(prefix, sizeof(prefix), "alerts[%zu].", index);
    if (!json_is_object(alert)) {
        xsnprintf(field, sizeof(field), "alerts[%zu]", index);
        return error_field(err, ST_INVALID, field, "must be an object");
    }
    status = member_str(alert, "status", prefix, err);
    xsnprintf(field, sizeof(field), "%sstatus", prefix);
    if (status ? !STR_IN(status, "firing", "resolved") : !json_object_get(alert, "status"))
        error_field(err, ST_INVALID, field, "must be \"firing\" or \"resolved\"");
    else if (status)
        out->resolved = strcmp(status, "resolved") == 0;
    xsnprintf(field, sizeof(field), "%slabels", prefix);
    if (!json_object_get(alert, "labels"))
        error_field(err, ST_INVALID, field, "is required");
    /* member reports labels of the wrong type (and gives NULL for them) */
    out->labels = labels_check(member(alert, "labels", JSON_OBJECT, prefix, err), field, err);
    if (out->labels) {
        const char *name = json_string_value(json_object_get(out->labels, "alertname"));
        out->alertname = name ? name : "";
    }
    out->fingerprint = member_str(alert, "fingerprint", prefix, err);
    if (out->fingerprint && (!*out->fingerprint || strlen(out->fingerprint) > FINGERPRINT_MAX)) {
        xsnprintf(field, sizeof(field), "%sfingerprint", prefix);
        error_field(err, ST_INVALID, field, "must be 1 to %d characters", FINGERPRINT_MAX);
    }
    (void)member(alert, "annotations", JSON_OBJECT, prefix, err);
    (void)member(alert, "startsAt", JSON_STRING, prefix, err);
    (void)member(alert, "endsAt", JSON_STRING, prefix, err);
    (void)member(alert, "generatorURL", JSON_STRING, prefix, err);
    return err && err->nfields > before ? ST_INVALID : ST_OK;
}

enum status am_alert_identity(const char *tenant, const char *type, const struct am_alert *a,
                              char out[65], struct error *err)
{
    char *canon;

    if (a->fingerprint) {
        identity_hash(tenant, type, "fingerprint", a->fingerprint, out);
        return ST_OK;
    }
    canon = canon_json(a->labels);
    if (!canon)
        return error_set(err, ST_INTERNAL, "could not build the canonical JSON of the labels");
    identity_hash(tenant, type, "labels", canon, out);
    free(canon);
    return ST_OK;
}

json_t *am_alert_input(const struct am_envelope *env, const json_t *alert)
{
    json_t *in = json_deep_copy(alert);

    if (env->receiver)
        json_object_set_new(in, "receiver", json_string(env->receiver));
    if (env->external_url)
        json_object_set_new(in, "externalURL", json_string(env->external_url));
    if (env->group_key)
        json_object_set_new(in, "groupKey", json_string(env->group_key));
    return in;
}

/* ---- the batch ---- */

struct am_batch {
    const struct hctx *hc;
    const struct request *rq;
    struct db *db;
    const struct am_envelope *env;
    json_t *results;
    int created, joined, cancelled, ignored, unrouted, invalid;
};

static json_t *alert_error(size_t index, const struct am_alert *a, unsigned http,
                           const struct error *err)
{
    json_t *e = json_pack("{s:i, s:s}", "status", (int)http, "detail", err->message);

    json_object_set_new(e, "errors", reply_error_fields(err));
    return json_pack("{s:I, s:o, s:o}", "index", (json_int_t)index, "fingerprint",
                     a->fingerprint ? json_string(a->fingerprint) : json_null(), "error", e);
}

/* A resolved alert: cancel the active run of the same alert when its route
 * says so; otherwise leave it alone. */
static enum status alert_resolved(struct am_batch *b, const struct route *route,
                                  const char *identity, json_t **result, struct error *err)
{
    struct run *run = NULL;
    bool changed = false;
    enum status st;

    if (!route || !route->on_resolved_cancel) {
        b->ignored++;
        *result = json_pack("{s:s}", "action", "ignored");
        return ST_OK;
    }
    st = store_runs_get_active(b->db, b->rq->tenant, identity, &run, err);
    if (st == ST_OK) {
        char id[130];
        xsnprintf(id, sizeof(id), "%s", run->id);
        run_free(run);
        run = NULL;
        st = store_runs_cancel(b->db, b->rq->tenant, id, &run, &changed, err);
    }
    if (st == ST_NOT_FOUND) {
        *result = json_pack("{s:s}", "action", "none");
        return ST_OK;
    }
    if (st == ST_OK) {
        b->cancelled += changed;
        handle_metrics_cancelled(b->hc, run, changed);
        *result = intake_result(run, true);
        json_object_set_new(*result, "action", json_string(changed ? "cancelled" : "none"));
    }
    run_free(run);
    return st;
}

/* A firing alert whose input cannot make its run type's concurrency key
 * is invalid (400, naming the alert and the pointer), like an alert that
 * fails to parse; false then, with its error item in *result. */
static bool alert_key_ok(struct am_batch *b, size_t index, const struct am_alert *a,
                         const struct run_type *rt, const json_t *input, json_t **result)
{
    struct error one = {0}, err = {0};
    char field[32];

    if (intake_conc_check(rt, b->rq->tenant, input, &one) == ST_OK)
        return true;
    xsnprintf(field, sizeof(field), "alerts[%zu]", index);
    error_field(&err, ST_INVALID, field, "%s", one.message);
    b->invalid++;
    *result = alert_error(index, a, 400, &err);
    return false;
}

static enum status alert_firing(struct am_batch *b, size_t index, const struct am_alert *a,
                                const struct run_type *rt, const json_t *alert,
                                const char *identity, json_t **result, struct error *err)
{
    json_t *input = am_alert_input(b->env, alert);
    char request[65];
    struct run *run = NULL;
    bool dedup = false;
    const struct intake_run in = {.type = rt,
                                  .input = input,
                                  .identity_hash = identity,
                                  .request_hash = request,
                                  .initiator = b->rq->initiator};
    enum status st;

    if (!alert_key_ok(b, index, a, rt, input, result)) {
        json_decref(input);
        return ST_OK;
    }
    st = intake_request_hash(input, request, err);
    if (st == ST_OK)
        st = intake_submit(b->db, b->rq->tenant, &in, &run, &dedup, err);
    if (st == ST_OK && !dedup)
        metrics_run_submitted(b->hc->metrics, run->type);
    if (st == ST_OK) {
        dedup ? b->joined++ : b->created++;
        *result = intake_result(run, dedup);
        json_object_set_new(*result, "action", json_string(dedup ? "joined" : "created"));
    }
    run_free(run);
    json_decref(input);
    return st;
}

/* One alert. A failure of the database (anything but a per-alert problem)
 * is returned, and fails the whole batch with a 5xx. */
static enum status alert_one(struct am_batch *b, size_t index, const json_t *alert)
{
    struct error err = {0};
    struct am_alert a;
    const struct route *route = NULL;
    const struct run_type *rt;
    json_t *result = NULL;
    char identity[65];
    enum status st = am_parse_alert(alert, index, &a, &err);

    if (st != ST_OK) {
        b->invalid++;
        json_array_append_new(b->results, alert_error(index, &a, 400, &err));
        return ST_OK;
    }
    rt = cfg_route(b->hc->cfg, a.alertname, a.labels, &route);
    if (!rt) {
        b->unrouted++;
        error_set(&err, ST_UNPROCESSABLE, "no route matches alert \"%s\"", a.alertname);
        json_array_append_new(b->results, alert_error(index, &a, 422, &err));
        return ST_OK;
    }
    st = am_alert_identity(b->rq->tenant, rt->name, &a, identity, &err);
    if (st == ST_OK)
        st = a.resolved ? alert_resolved(b, route, identity, &result, &err)
                        : alert_firing(b, index, &a, rt, alert, identity, &result, &err);
    if (st != ST_OK) {
        LOG(LOG_WARN, "alertmanager alert %zu failed: %s", index, err.message);
        return st;
    }
    json_object_set_new(result, "index", json_integer((json_int_t)index));
    json_object_set_new(result, "fingerprint",
                        a.fingerprint ? json_string(a.fingerprint) : json_null());
    json_array_append_new(b->results, result);
    return ST_OK;
}

/* The receiver name for a log value in quotes: at most 100 bytes, quotes,
 * backslashes and control characters replaced, so it cannot fake fields. */
static void am_log_value(const char *in, char out[101])
{
    size_t n = 0;

    for (; in && in[n] && n < 100; n++)
        out[n] = (in[n] == '"' || in[n] == '\\' || (unsigned char)in[n] < 0x20) ? '?' : in[n];
    out[n] = '\0';
}

enum status alerts_alertmanager(const struct hctx *hc, const struct request *rq, struct reply *rp,
                                struct error *err)
{
    char receiver[101];
    struct am_envelope env;
    struct am_batch b = {.hc = hc, .rq = rq, .env = &env};
    enum status st = am_parse_envelope(rq->body, &env, err);
    size_t i;
    const json_t *alert;

    if (st != ST_OK)
        return st;
    st = db_pool_get(hc->pool, &b.db, err);
    if (st != ST_OK)
        return st;
    b.results = json_array();
    json_array_foreach(env.alerts, i, alert)
    {
        st = alert_one(&b, i, alert);
        if (st != ST_OK)
            break;
    }
    db_pool_put(hc->pool, b.db);
    am_log_value(env.receiver, receiver);
    LOG(LOG_INFO,
        "alertmanager notification receiver=\"%s\" alerts=%zu created=%d joined=%d "
        "cancelled=%d "
        "ignored=%d unrouted=%d invalid=%d truncated=%lld%s",
        receiver, json_array_size(env.alerts), b.created, b.joined, b.cancelled, b.ignored,
        b.unrouted, b.invalid, env.truncated, st == ST_OK ? "" : " failed=true");
    if (st != ST_OK) {
        json_decref(b.results);
        /* Only a failure on our side is left here: ask Alertmanager to retry. */
        return st == ST_DB || st == ST_INTERNAL ? st : ST_UNAVAILABLE;
    }
    if (b.created && hc->engine)
        engine_submitted(hc->engine);
    if (b.cancelled && hc->engine)
        engine_events_written(hc->engine);
    reply_json_take(
        rp, b.created ? 202 : 200,
        json_pack("{s:o, s:I}", "runs", b.results, "truncated_alerts", (json_int_t)env.truncated));
    return ST_OK;
}
