/* handlers/approvals.c — POST /runs/{id}/approve and POST /runs/{id}/reject:
 * a person's decision on a run awaiting approval, with an optional
 * {"comment": "..."}. The decider is the request's initiator (the token's
 * name, or "anonymous"). 200 with the run as decided; 409 when the run
 * does not await approval (any more: of two decisions, the second);
 * 404 when it does not exist in the request's tenant. */
#include "handlers/handlers.h"
#include "handlers/metrics.h"

#include "common/log.h"
#include "engine/engine.h"
#include "store/approvals.h"
#include "store/db.h"

#include <string.h>

#define COMMENT_MAX_CHARS 1000

/* The characters (code points) of a UTF-8 string. */
static size_t utf8_chars(const char *s)
{
    size_t n = 0;

    for (; *s; s++)
        n += ((unsigned char)*s & 0xc0) != 0x80;
    return n;
}

/* The body: none, or {"comment": string} of at most COMMENT_MAX_CHARS; an
 * empty comment is none. */
enum status approvals_parse_body(const json_t *body, const char **comment, struct error *err)
{
    const char *key;
    json_t *v;

    *comment = NULL;
    if (!body)
        return ST_OK;
    if (!json_is_object(body))
        return error_field(err, ST_INVALID, "body", "must be a JSON object");
    json_object_foreach((json_t *)body, key, v)
    {
        if (strcmp(key, "comment") != 0)
            error_field(err, ST_INVALID, key, "is not a known field; expected \"comment\"");
        else if (!json_is_string(v))
            error_field(err, ST_INVALID, "comment", "must be a string");
        else if (utf8_chars(json_string_value(v)) > COMMENT_MAX_CHARS)
            error_field(err, ST_INVALID, "comment", "must be at most %d characters",
                        COMMENT_MAX_CHARS);
        else if (*json_string_value(v))
            *comment = json_string_value(v);
    }
    return err && err->nfields > 0 ? ST_INVALID : ST_OK;
}

/* Decides on a pooled connection, in the tenant that holds the run (into
 * tenant, which d->tenant points at). */
static enum status decide(const struct hctx *hc, const struct request *rq,
                          struct approval_decision *d, char tenant[65], struct run **out,
                          struct error *err)
{
    struct db *db = NULL;
    enum status st = db_pool_get(hc->pool, &db, err);

    if (st == ST_OK && rq->all_tenants)
        st = store_runs_locate(db, rq->path_id, tenant, err);
    else
        xsnprintf(tenant, 65, "%s", rq->tenant);
    d->tenant = tenant;
    if (st == ST_OK)
        st = store_approvals_decide(db, d, out, err);
    db_pool_put(hc->pool, db);
    return st;
}

/* An approved run is queued: this process's dispatcher and the other
 * replicas are told, as for a submission. A rejected one completed. */
static void decided(const struct hctx *hc, const struct run *run, bool approve, const char *by)
{
    LOG(LOG_INFO, "run %s run=%s type=%s by=%s", approve ? "approved" : "rejected", run->id,
        run->type, by);
    handle_metrics_cancelled(hc, run, true);
    if (!hc->engine)
        return;
    if (approve)
        engine_submitted(hc->engine);
    else
        engine_events_written(hc->engine);
}

static enum status handle_decision(const struct hctx *hc, const struct request *rq,
                                   struct reply *rp, bool approve)
{
    struct approval_decision d = {.id = rq->path_id, .approve = approve, .by = rq->initiator};
    struct error err = {0};
    struct run *run = NULL;
    char tenant[65];
    enum status st = approvals_parse_body(rq->body, &d.comment, &err);

    xsnprintf(rp->run_id, sizeof(rp->run_id), "%s", rq->path_id);
    if (st == ST_OK)
        st = decide(hc, rq, &d, tenant, &run, &err);
    if (st == ST_OK) {
        decided(hc, run, approve, d.by);
        reply_json_take(rp, 200, json_incref(run->json));
    } else {
        reply_error(rp, st, &err);
    }
    run_free(run);
    return st;
}

enum status handle_runs_approve(const struct hctx *hc, const struct request *rq, struct reply *rp)
{
    return handle_decision(hc, rq, rp, true);
}

enum status handle_runs_reject(const struct hctx *hc, const struct request *rq, struct reply *rp)
{
    return handle_decision(hc, rq, rp, false);
}
