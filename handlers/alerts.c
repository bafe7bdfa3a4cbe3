/* handlers/alerts.c — POST /alerts: validate, route to a run type, settle the
 * identity, insert or join a run. The intake dispatches on the body's shape
 * so the Alertmanager webhook body can sit beside the generic one; what the
 * two share is in intake.c. */
#include "handlers/handlers.h"
#include "handlers/alertmanager.h"
#include "handlers/intake.h"
#include "handlers/metrics.h"

#include "common/log.h"
#include "common/metrics.h"
#include "common/util.h"
#include "engine/engine.h"
#include "store/db.h"
#include "store/runs.h"

#include <stdlib.h>
#include <string.h>

#define ALERT_TYPE_MAX 128
#define DEDUPE_KEY_MAX 512
#define PRIORITY_MIN (-1000)
#define PRIORITY_MAX 1000

static const char *const generic_fields[] = {"alert_type", "data",   "run_id", "dedupe_key",
                                             "priority",   "run_at", "labels", NULL};

static void parse_strings(const json_t *body, struct submission *s, struct error *err)
{
    const json_t *v;

    v = json_object_get(body, "alert_type");
    if (!v)
        error_field(err, ST_INVALID, "alert_type", "is required");
    else if (!json_is_string(v) || json_string_length(v) == 0 ||
             json_string_length(v) > ALERT_TYPE_MAX)
        error_field(err, ST_INVALID, "alert_type", "must be a string of 1 to %d characters",
                    ALERT_TYPE_MAX);
    else
        s->alert_type = json_string_value(v);

    v = json_object_get(body, "run_id");
    if (v && !(json_is_string(v) && run_id_valid(json_string_value(v))))
        error_field(err, ST_INVALID, "run_id", "must match [A-Za-z0-9._:-]{1,128}");
    else if (v)
        s->run_id = json_string_value(v);

    v = json_object_get(body, "dedupe_key");
    if (v && !(json_is_string(v) && json_string_length(v) > 0 &&
               json_string_length(v) <= DEDUPE_KEY_MAX))
        error_field(err, ST_INVALID, "dedupe_key", "must be a string of 1 to %d characters",
                    DEDUPE_KEY_MAX);
    else if (v)
        s->dedupe_key = json_string_value(v);
}

static void parse_labels(const json_t *v, struct submission *s, struct error *err)
{
    const char *key;
    const json_t *val;

    if (!v)
        return;
    if (!json_is_object(v)) {
        error_field(err, ST_INVALID, "labels", "must be an object of strings");
        return;
    }
    json_object_foreach((json_t *)v, key, val)
    {
        if (!json_is_string(val)) {
            error_field(err, ST_INVALID, "labels", "label \"%.64s\" must be a string", key);
            return;
        }
    }
    s->labels = v;
}

static void parse_others(const json_t *body, struct submission *s, struct error *err)
{
    const json_t *v;

    v = json_object_get(body, "data");
    if (v && !json_is_object(v))
        error_field(err, ST_INVALID, "data", "must be an object");
    else
        s->data = v;

    v = json_object_get(body, "priority");
    if (v && !(json_is_integer(v) && json_integer_value(v) >= PRIORITY_MIN &&
               json_integer_value(v) <= PRIORITY_MAX))
        error_field(err, ST_INVALID, "priority", "must be an integer from %d to %d", PRIORITY_MIN,
                    PRIORITY_MAX);
    else if (v)
        s->priority = (int)json_integer_value(v);

    v = json_object_get(body, "run_at");
    if (v && !(json_is_string(v) && time_parse_rfc3339(json_string_value(v), &s->run_at_us)))
        error_field(err, ST_INVALID, "run_at", "must be an RFC 3339 timestamp");
    else if (v && !time_in_range(s->run_at_us))
        error_field(err, ST_INVALID, "run_at", "must be between years 0001 and 9999 in UTC");
    else if (v)
        s->has_run_at = true;

    parse_labels(json_object_get(body, "labels"), s, err);
}

enum status alerts_parse_generic(const json_t *body, struct submission *out, struct error *err)
{
    const char *key;
    const json_t *val;

    memset(out, 0, sizeof(*out));
    if (!json_is_object(body))
        return error_field(err, ST_INVALID, "body", "must be a JSON object");
    parse_strings(body, out, err);
    parse_others(body, out, err);
    json_object_foreach((json_t *)body, key, val)
    {
        if (!str_in(key, generic_fields))
            error_field(err, ST_INVALID, key, "is not a known field");
    }
    return err && err->nfields > 0 ? ST_INVALID : ST_OK;
}

/* Fills the identity and request hashes of a submission; ST_INTERNAL when
 * a canonical JSON text cannot be built (jansson could not allocate). */
static enum status submission_hashes(const char *tenant, const struct run_type *rt,
                                     const struct submission *s, const json_t *body,
                                     char identity[65], char request[65], struct error *err)
{
    enum status st = intake_request_hash(body, request, err);
    char *canon;

    if (st != ST_OK)
        return st;
    if (s->dedupe_key) {
        identity_hash(tenant, rt->name, "dedupe_key", s->dedupe_key, identity);
    } else if (s->run_id) {
        identity_hash(tenant, rt->name, "run_id", s->run_id, identity);
    } else {
        canon = canon_json(s->data);
        if (!canon)
            return error_set(err, ST_INTERNAL, "could not build the canonical JSON of \"data\"");
        identity_hash(tenant, rt->name, "data", canon, identity);
        free(canon);
    }
    return ST_OK;
}

/* The long-poll's refresh: the run's status and outcome as they are now,
 * in the answer the submission got. */
static enum status alerts_refresh(const struct hctx *hc, const struct request *rq, struct reply *rp)
{
    struct error err = {0};
    struct run *run = NULL;
    struct db *db = NULL;
    enum status st = db_pool_get(hc->pool, &db, &err);

    (void)rq; /* the run's tenant was noted in rp when the wait began */

    if (st == ST_OK)
        st = store_runs_get(db, rp->wait_tenant, rp->wait_run_id, &run, &err);
    db_pool_put(hc->pool, db);
    if (st == ST_OK) {
        json_object_set_new(rp->body, "status", json_string(run_status_name(run->status)));
        json_object_set_new(rp->body, "outcome", json_string(run_outcome_name(run->outcome)));
    } else {
        LOG(LOG_WARN, "could not refresh run=%s for a long-poll: %s", rp->wait_run_id, err.message);
    }
    if (st != ST_OK || run_is_terminal(run))
        rp->wait_ms = 0;
    run_free(run);
    return st;
}

static enum status alerts_generic(const struct hctx *hc, const struct request *rq, struct reply *rp,
                                  struct error *err)
{
    struct submission s;
    const struct run_type *rt;
    char identity[65], request[65], run_at[40];
    json_t *empty = json_object();
    struct run *run = NULL;
    struct db *db = NULL;
    bool dedup = false;
    int64_t wait_ms = 0;
    enum status st = alerts_parse_generic(rq->body, &s, err);

    if (st == ST_OK)
        st = parse_wait(rq, &wait_ms, err);
    if (st != ST_OK)
        goto out;
    rt = cfg_route(hc->cfg, s.alert_type, s.labels, NULL);
    if (!rt) {
        st = error_field(err, ST_UNPROCESSABLE, "alert_type", "no route or run type matches \"%s\"",
                         s.alert_type);
        goto out;
    }
    if (!s.data)
        s.data = empty;
    st = submission_hashes(rq->tenant, rt, &s, rq->body, identity, request, err);
    if (st != ST_OK)
        goto out;
    if (s.has_run_at)
        time_format_rfc3339(s.run_at_us, run_at, sizeof(run_at));
    st = db_pool_get(hc->pool, &db, err);
    if (st == ST_OK) {
        const struct intake_run in = {
            .type = rt,
            .id = s.run_id,
            .input = s.data,
            .priority = s.priority,
            .run_at = s.has_run_at ? run_at : NULL,
            .identity_hash = identity,
            .request_hash = request,
            .initiator = rq->initiator,
        };
        st = intake_submit(db, rq->tenant, &in, &run, &dedup, err);
    }
    db_pool_put(hc->pool, db);
    if (st != ST_OK)
        goto out;
    xsnprintf(rp->run_id, sizeof(rp->run_id), "%s", run->id);
    if (!dedup) {
        char loc[200];
        xsnprintf(loc, sizeof(loc), "/runs/%s", run->id);
        reply_header(rp, "Location", loc);
        metrics_run_submitted(hc->metrics, run->type);
        if (hc->engine)
            engine_submitted(hc->engine);
    }
    reply_json_take(rp, dedup ? 200 : 202, intake_result(run, dedup));
    if (wait_ms > 0 && !run_is_terminal(run)) {
        rp->wait_ms = wait_ms;
        xsnprintf(rp->wait_tenant, sizeof(rp->wait_tenant), "%s", run->tenant);
        xsnprintf(rp->wait_run_id, sizeof(rp->wait_run_id), "%s", run->id);
        rp->refresh = alerts_refresh;
    }
out:
    run_free(run);
    json_decref(empty);
    return st;
}

static bool is_alertmanager(const json_t *body)
{
    return json_is_object(body) && json_object_get(body, "alerts") &&
           json_object_get(body, "version") && !json_object_get(body, "alert_type");
}

enum status handle_alerts_create(const struct hctx *hc, const struct request *rq, struct reply *rp)
{
    struct error err = {0};
    enum status st;

    if (is_alertmanager(rq->body))
        st = alerts_alertmanager(hc, rq, rp, &err);
    else
        st = alerts_generic(hc, rq, rp, &err);
    if (st != ST_OK)
        reply_error(rp, st, &err);
    return st;
}
