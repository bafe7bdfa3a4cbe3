/* handlers/runs.c — GET /runs, GET /runs/{id}, GET /runs/{id}/events,
 * POST /runs/{id}/cancel. Each works in the request's tenant; an admin
 * token without ?tenant= reaches every tenant: its lists show every
 * tenant's runs, and a run id finds the one tenant that has it. A run of
 * another tenant is answered exactly as one that does not exist. */
#include "handlers/handlers.h"
#include "handlers/metrics.h"

#include "common/conc_key.h"
#include "common/cursor.h"
#include "common/ids.h"
#include "config/config.h"
#include "engine/engine.h"
#include "store/db.h"
#include "store/runs.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define LIST_DEFAULT 50
#define LIST_MAX 500
/* A concurrency group's longest name (a run type's, by default). */
#define CONC_GROUP_MAX 64

static void parse_limit(const char *v, struct run_filter *f, struct error *err)
{
    char *end;
    long n;

    f->limit = LIST_DEFAULT;
    if (!v)
        return;
    errno = 0;
    n = strtol(v, &end, 10);
    if (errno || end == v || *end || n < 1 || n > LIST_MAX)
        error_field(err, ST_INVALID, "limit", "must be an integer from 1 to %d", LIST_MAX);
    else
        f->limit = (int)n;
}

static void parse_text(const char *v, const char *name, size_t max, const char **out,
                       struct error *err)
{
    if (!v)
        return;
    if (*v == '\0' || strlen(v) > max)
        error_field(err, ST_INVALID, name, "must be 1 to %zu characters", max);
    else
        *out = v;
}

enum status parse_wait(const struct request *rq, int64_t *wait_ms, struct error *err)
{
    const char *v = rq->query(rq, "wait");
    char *end;
    long n;

    *wait_ms = 0;
    if (!v)
        return ST_OK;
    errno = 0;
    n = strtol(v, &end, 10);
    if (errno || end == v || *end || strspn(v, "0123456789") != strlen(v) || n > WAIT_MAX_S)
        return error_field(err, ST_INVALID, "wait", "must be whole seconds from 0 to %d",
                           WAIT_MAX_S);
    *wait_ms = n * 1000;
    return ST_OK;
}

static void parse_status(const char *v, bool *has, enum run_status *out, struct error *err)
{
    *has = v && run_status_parse(v, out);
    if (v && !*has)
        error_field(err, ST_INVALID, "status",
                    "must be one of queued, running, waiting, cancelling, completed");
}

static void parse_outcome(const char *v, bool *has, enum run_outcome *out, struct error *err)
{
    *has = v && run_outcome_parse(v, out);
    if (v && !*has)
        error_field(err, ST_INVALID, "outcome",
                    "must be one of pending, succeeded, partially_succeeded, failed, "
                    "cancelled, timed_out");
}

/* approval=pending: the runs awaiting a decision (the one value there is). */
static void parse_approval(const char *v, struct run_filter *f, struct error *err)
{
    f->approval_pending = v && strcmp(v, "pending") == 0;
    if (v && !f->approval_pending)
        error_field(err, ST_INVALID, "approval", "must be pending");
}

enum status stream_parse_filter(const struct request *rq, const char **type, const char **parent_id,
                                bool *has_status, enum run_status *status, struct error *err)
{
    *type = NULL;
    *parent_id = NULL;
    parse_status(rq->query(rq, "status"), has_status, status, err);
    parse_text(rq->query(rq, "type"), "type", 64, type, err);
    parse_text(rq->query(rq, "parent_id"), "parent_id", RUN_ID_MAX, parent_id, err);
    return err && err->nfields > 0 ? ST_INVALID : ST_OK;
}

enum status runs_parse_filter(const struct request *rq, struct run_filter *f, struct error *err)
{
    const char *cursor = rq->query(rq, "cursor");

    memset(f, 0, sizeof(*f));
    parse_status(rq->query(rq, "status"), &f->has_status, &f->status, err);
    parse_outcome(rq->query(rq, "outcome"), &f->has_outcome, &f->outcome, err);
    parse_text(rq->query(rq, "type"), "type", 64, &f->type, err);
    parse_text(rq->query(rq, "external_id"), "external_id", 512, &f->external_id, err);
    parse_text(rq->query(rq, "initiator"), "initiator", 64, &f->initiator, err);
    parse_text(rq->query(rq, "schedule"), "schedule", 64, &f->schedule, err);
    parse_approval(rq->query(rq, "approval"), f, err);
    parse_text(rq->query(rq, "parent_id"), "parent_id", RUN_ID_MAX, &f->parent_id, err);
    parse_text(rq->query(rq, "concurrency_key"), "concurrency_key", CONC_KEY_MAX, &f->conc_key,
               err);
    parse_text(rq->query(rq, "concurrency_group"), "concurrency_group", CONC_GROUP_MAX,
               &f->conc_group, err);
    parse_limit(rq->query(rq, "limit"), f, err);
    if (cursor) {
        f->has_cursor = cursor_decode(cursor, &f->cursor_us, f->cursor_id);
        if (!f->has_cursor)
            error_field(err, ST_INVALID, "cursor", "is not a cursor this service issued");
    }
    return err && err->nfields > 0 ? ST_INVALID : ST_OK;
}

/* Borrows a pooled connection for one store call. */
#define WITH_DB(hc, st, err, call)                                                                 \
    do {                                                                                           \
        struct db *db_ = NULL;                                                                     \
        (st) = db_pool_get((hc)->pool, &db_, (err));                                               \
        if ((st) == ST_OK)                                                                         \
            (st) = call;                                                                           \
        db_pool_put((hc)->pool, db_);                                                              \
    } while (0)

/* The tenant that holds run id for this request, on the caller's connection. */
static enum status run_tenant(struct db *db, const struct request *rq, const char *id, char out[65],
                              struct error *err)
{
    if (rq->all_tenants)
        return store_runs_locate(db, id, out, err);
    xsnprintf(out, 65, "%s", rq->tenant);
    return ST_OK;
}

/* Borrows a pooled connection for one store call on run id, in the tenant
 * that holds it (tenant_, a char[65] the call may use). */
#define WITH_RUN(hc, rq, id, st, err, call)                                                        \
    do {                                                                                           \
        struct db *db_ = NULL;                                                                     \
        char tenant_[65];                                                                          \
        (st) = db_pool_get((hc)->pool, &db_, (err));                                               \
        if ((st) == ST_OK)                                                                         \
            (st) = run_tenant(db_, (rq), (id), tenant_, (err));                                    \
        if ((st) == ST_OK)                                                                         \
            (st) = call;                                                                           \
        db_pool_put((hc)->pool, db_);                                                              \
    } while (0)

enum status handle_runs_locate(const struct hctx *hc, const struct request *rq, const char *id,
                               char out[65], struct error *err)
{
    enum status st;

    WITH_DB(hc, st, err, run_tenant(db_, rq, id, out, err));
    return st;
}

/* The long-poll's refresh: the run as it is now. */
static enum status runs_get_refresh(const struct hctx *hc, const struct request *rq,
                                    struct reply *rp)
{
    struct error err = {0};
    struct run *run = NULL;
    enum status st;

    (void)rq; /* the run's tenant was noted in rp when the wait began */
    WITH_DB(hc, st, &err,
            store_runs_get_detail(db_, rp->wait_tenant, rp->wait_run_id,
                                  cfg_tenant_max_running(hc->cfg, rp->wait_tenant), &run, &err));
    if (st == ST_OK)
        reply_json_take(rp, 200, json_incref(run->json));
    else
        reply_error(rp, st, &err);
    if (st != ST_OK || run_is_terminal(run))
        rp->wait_ms = 0;
    run_free(run);
    return st;
}

enum status handle_runs_get(const struct hctx *hc, const struct request *rq, struct reply *rp)
{
    struct error err = {0};
    struct run *run = NULL;
    int64_t wait_ms = 0;
    enum status st = parse_wait(rq, &wait_ms, &err);

    if (st == ST_OK)
        WITH_RUN(hc, rq, rq->path_id, st, &err,
                 store_runs_get_detail(db_, tenant_, rq->path_id,
                                       cfg_tenant_max_running(hc->cfg, tenant_), &run, &err));
    if (st == ST_OK) {
        xsnprintf(rp->run_id, sizeof(rp->run_id), "%s", run->id);
        reply_json_take(rp, 200, json_incref(run->json));
        if (wait_ms > 0 && !run_is_terminal(run)) {
            rp->wait_ms = wait_ms;
            xsnprintf(rp->wait_tenant, sizeof(rp->wait_tenant), "%s", run->tenant);
            xsnprintf(rp->wait_run_id, sizeof(rp->wait_run_id), "%s", run->id);
            rp->refresh = runs_get_refresh;
        }
    } else {
        reply_error(rp, st, &err);
    }
    run_free(run);
    return st;
}

enum status handle_runs_list(const struct hctx *hc, const struct request *rq, struct reply *rp)
{
    struct error err = {0};
    struct run_filter f;
    json_t *runs = NULL;
    char *next = NULL;
    enum status st = runs_parse_filter(rq, &f, &err);

    if (st == ST_OK)
        WITH_DB(hc, st, &err,
                store_runs_list(db_, rq->all_tenants ? NULL : rq->tenant, &f, &runs, &next, &err));
    if (st == ST_OK)
        reply_json_take(rp, 200,
                        json_pack("{s:o, s:o}", "runs", runs, "next_cursor",
                                  next ? json_string(next) : json_null()));
    else
        reply_error(rp, st, &err);
    free(next);
    return st;
}

/* GET /stats/completions?seconds=N (1 to 3600, default 60). */
enum status handle_runs_completions(const struct hctx *hc, const struct request *rq,
                                    struct reply *rp)
{
    const char *v = rq->query(rq, "seconds");
    struct error err = {0};
    json_t *out = NULL;
    char *end = NULL;
    long n = v ? strtol(v, &end, 10) : 60;
    enum status st = ST_OK;

    if (v && (!*v || *end || n < 1 || n > 3600))
        st = error_field(&err, ST_INVALID, "seconds", "must be an integer from 1 to 3600");
    if (st == ST_OK)
        WITH_DB(
            hc, st, &err,
            store_runs_completions(db_, rq->all_tenants ? NULL : rq->tenant, (int)n, &out, &err));
    if (st == ST_OK)
        reply_json_take(rp, 200, out);
    else
        reply_error(rp, st, &err);
    return st;
}

enum status handle_runs_events(const struct hctx *hc, const struct request *rq, struct reply *rp)
{
    struct error err = {0};
    json_t *events = NULL;
    enum status st;

    WITH_RUN(hc, rq, rq->path_id, st, &err,
             store_events_list(db_, tenant_, rq->path_id, &events, &err));
    xsnprintf(rp->run_id, sizeof(rp->run_id), "%s", rq->path_id);
    if (st == ST_OK)
        reply_json_take(rp, 200, json_pack("{s:o}", "events", events));
    else
        reply_error(rp, st, &err);
    return st;
}

enum status handle_runs_cancel(const struct hctx *hc, const struct request *rq, struct reply *rp)
{
    struct error err = {0};
    struct run *run = NULL;
    bool changed = false;
    enum status st;

    WITH_RUN(hc, rq, rq->path_id, st, &err,
             store_runs_cancel(db_, tenant_, rq->path_id, &run, &changed, &err));
    xsnprintf(rp->run_id, sizeof(rp->run_id), "%s", rq->path_id);
    if (st == ST_OK && !changed && run_is_terminal(run))
        st = error_set(&err, ST_CONFLICT, "run \"%s\" is already completed (%s)", run->id,
                       run_outcome_name(run->outcome));
    if (st == ST_OK) {
        handle_metrics_cancelled(hc, run, changed);
        if (changed && hc->engine)
            engine_events_written(hc->engine);
        reply_json_take(rp, run_is_terminal(run) ? 200 : 202, json_incref(run->json));
    } else {
        reply_error(rp, st, &err);
    }
    run_free(run);
    return st;
}
