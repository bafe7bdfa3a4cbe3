/* handlers/runs_retry.c — POST /runs/{id}/retry: a completed run that did
 * not succeed starts again as a new run, with a new id, in the same tenant,
 * with the same type, input and priority, and retry_of naming it. The run
 * type's limits are today's (max_attempts, timeout_s), as for a new
 * submission.
 *
 * The new run keeps the identity of the run it repeats, so the rule of
 * POST /alerts holds for retries too: while a run with that identity is
 * active, a retry joins it (200, "deduplicated": true) instead of starting
 * a second one. A double-clicked retry button starts one run. */
#include "handlers/handlers.h"
#include "handlers/intake.h"

#include "common/ids.h"
#include "common/metrics.h"
#include "engine/engine.h"
#include "store/db.h"
#include "store/runs.h"

static enum status retry_allowed(const struct run *run, struct error *err)
{
    if (!run_is_terminal(run))
        return error_set(err, ST_CONFLICT,
                         "run \"%s\" is not completed (%s); only a completed run can be retried",
                         run->id, run_status_name(run->status));
    if (run->outcome == OUTCOME_SUCCEEDED)
        return error_set(err, ST_CONFLICT,
                         "run \"%s\" succeeded; only a run that did not succeed can be retried",
                         run->id);
    return ST_OK;
}

/* The run's input was checked against its type's concurrency key when it
 * was submitted, but the type may have gained a key since, or changed it:
 * a retry whose key cannot be made is refused (422), as one whose type is
 * gone. */
static enum status retry_conc_check(const struct run_type *rt, const struct run *of,
                                    struct error *err)
{
    struct error one = {0};

    if (intake_conc_check(rt, of->tenant, run_input(of), &one) != ST_OK)
        return error_set(err, ST_UNPROCESSABLE, "run \"%s\" cannot be retried: %s", of->id,
                         one.message);
    return ST_OK;
}

/* Reads the run, checks it may be retried and starts (or joins) its retry. */
static enum status retry_start(const struct hctx *hc, struct db *db, const struct request *rq,
                               struct run **out, bool *dedup, struct error *err)
{
    const struct run_type *rt;
    struct run *of = NULL;
    char id[27], tenant[65];
    enum status st = ST_OK;

    /* an admin's request reaches the one tenant that has the run */
    if (rq->all_tenants)
        st = store_runs_locate(db, rq->path_id, tenant, err);
    else
        xsnprintf(tenant, sizeof(tenant), "%s", rq->tenant);
    if (st == ST_OK)
        st = store_runs_get(db, tenant, rq->path_id, &of, err);

    if (st == ST_OK)
        st = retry_allowed(of, err);
    if (st == ST_OK && !(rt = cfg_run_type(hc->cfg, of->type)))
        st = error_set(err, ST_UNPROCESSABLE,
                       "run \"%s\" cannot be retried: its run type \"%s\" is not configured",
                       of->id, of->type);
    if (st == ST_OK)
        st = retry_conc_check(rt, of, err);
    if (st == ST_OK) {
        run_id_new(id);
        st = store_runs_resubmit(
            db,
            &(struct run_resubmit){.tenant = of->tenant,
                                   .of = of->id,
                                   .id = id,
                                   .initiator = rq->initiator,
                                   .max_attempts = rt->max_attempts,
                                   .timeout_s = (int)rt->timeout_s,
                                   .approval_timeout_s = rt->approval.timeout_s,
                                   .approve_on_timeout = rt->approval.approve_on_timeout},
            out, dedup, err);
    }
    run_free(of);
    return st;
}

/* The submission result of POST /alerts, plus the run's retry_of. */
static void retry_reply(const struct hctx *hc, struct reply *rp, const struct run *run, bool dedup)
{
    json_t *body = intake_result(run, dedup);

    json_object_set(body, "retry_of", json_object_get(run->json, "retry_of"));
    xsnprintf(rp->run_id, sizeof(rp->run_id), "%s", run->id);
    if (!dedup) {
        char loc[200];
        xsnprintf(loc, sizeof(loc), "/runs/%s", run->id);
        reply_header(rp, "Location", loc);
        metrics_run_submitted(hc->metrics, run->type);
        if (hc->engine)
            engine_submitted(hc->engine);
    }
    reply_json_take(rp, dedup ? 200 : 202, body);
}

enum status handle_runs_retry(const struct hctx *hc, const struct request *rq, struct reply *rp)
{
    struct error err = {0};
    struct run *run = NULL;
    struct db *db = NULL;
    bool dedup = false;
    enum status st = db_pool_get(hc->pool, &db, &err);

    if (st == ST_OK)
        st = retry_start(hc, db, rq, &run, &dedup, &err);
    db_pool_put(hc->pool, db);
    if (st == ST_OK) {
        retry_reply(hc, rp, run, dedup);
    } else {
        xsnprintf(rp->run_id, sizeof(rp->run_id), "%s", rq->path_id);
        reply_error(rp, st, &err);
    }
    run_free(run);
    return st;
}
