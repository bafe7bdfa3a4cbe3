/* handlers/schedules.c — GET /schedules, GET /schedules/{name}, POST
 * /schedules/{name}/pause, /resume and /trigger, and GET /rate_limits.
 *
 * Schedules are defined by the configuration; the database holds what the
 * replicas share about them (store/schedules.h). A token sees and acts on
 * its tenant's schedules only: another tenant's is 404, exactly as one
 * that does not exist. */
#include "handlers/handlers.h"
#include "handlers/intake.h"
#include "handlers/schedules.h"

#include "common/cron.h"
#include "common/dynbuf.h"
#include "common/ids.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/time_rfc3339.h"
#include "engine/engine.h"
#include "engine/scheduler.h"
#include "store/db.h"
#include "store/rate_limits.h"
#include "store/schedules.h"

#include <stdlib.h>
#include <string.h>

/* The configured schedule rq->path_id names, if the caller may see it. */
static const struct schedule *schedule_of(const struct hctx *hc, const struct request *rq,
                                          struct error *err)
{
    const struct schedule *s = cfg_schedule(hc->cfg, rq->path_id);

    if (s && (rq->all_tenants || strcmp(cfg_schedule_tenant(hc->cfg, s), rq->tenant) == 0))
        return s;
    error_set(err, ST_NOT_FOUND, "schedule \"%s\" does not exist", rq->path_id);
    return NULL;
}

static json_t *ts_or_null(int64_t us, bool have)
{
    char ts[40];

    if (!have)
        return json_null();
    time_format_rfc3339(us, ts, sizeof(ts));
    return json_string(ts);
}

static json_t *str_or_null(const char *s)
{
    return s ? json_string(s) : json_null();
}

/* The schedule object: its definition, and its state as the database has
 * it at now_us. next_at is the next slot after now, null while paused. */
static json_t *schedule_json(const struct hctx *hc, const struct schedule *s,
                             const struct schedule_state *st, int64_t now_us)
{
    bool paused = st->has_paused ? st->paused : s->paused;
    int64_t after = st->last_slot_us > now_us ? st->last_slot_us : now_us, next = 0;
    bool has_next = !paused && cron_next(&s->cron, s->tz, after / 1000000, &next);

    return json_pack(
        "{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:i, s:i, s:b, s:o, s:o, s:o, s:o}", "name", s->name,
        "tenant", cfg_schedule_tenant(hc->cfg, s), "cron", s->cron_text, "time_zone", s->time_zone,
        "run_type", s->run_type, "overlap", cfg_overlap_name(s->overlap), "catch_up",
        cfg_catch_up_name(s->catch_up), "catch_up_window_s", s->catch_up_window_s, "jitter_s",
        s->jitter_s, "paused", paused, "next_at", ts_or_null(next * 1000000, has_next), "last_slot",
        ts_or_null(st->last_slot_us, st->slot_taken), "last_run_id", str_or_null(st->last_run_id),
        "last_outcome", str_or_null(st->last_run_id ? st->last_outcome : NULL));
}

/* The objects of the n schedules (visible to the caller) into *out. */
static enum status schedules_read(const struct hctx *hc, const struct schedule *const *list,
                                  size_t n, json_t **out, struct error *err)
{
    const char **names = xcalloc(n ? n : 1, sizeof(*names));
    struct schedule_state *state = xcalloc(n ? n : 1, sizeof(*state));
    struct db *db = NULL;
    int64_t now_us = clock_wall_ms() * 1000;
    enum status st = ST_OK;

    for (size_t i = 0; i < n; i++)
        names[i] = list[i]->name;
    *out = json_array();
    if (n > 0 && (st = db_pool_get(hc->pool, &db, err)) == ST_OK)
        st = store_schedules_read(db, names, n, state, &now_us, err);
    db_pool_put(hc->pool, db);
    for (size_t i = 0; st == ST_OK && i < n; i++)
        json_array_append_new(*out, schedule_json(hc, list[i], &state[i], now_us));
    schedule_state_cleanup(state, n);
    free(state);
    free(names);
    return st;
}

enum status handle_schedules_list(const struct hctx *hc, const struct request *rq, struct reply *rp)
{
    /* An array of pointers (see .clang-tidy). NOLINTNEXTLINE(bugprone-sizeof-expression) */
    const struct schedule **list = xcalloc(hc->cfg->nschedules + 1, sizeof(*list));
    struct error err = {0};
    json_t *arr = NULL;
    size_t n = 0;
    enum status st;

    for (size_t i = 0; i < hc->cfg->nschedules; i++) {
        const struct schedule *s = &hc->cfg->schedules[i];
        if (rq->all_tenants || strcmp(cfg_schedule_tenant(hc->cfg, s), rq->tenant) == 0)
            list[n++] = s;
    }
    st = schedules_read(hc, list, n, &arr, &err);
    free(list);
    if (st == ST_OK)
        reply_json_take(rp, 200, json_pack("{s:o}", "schedules", arr));
    else {
        json_decref(arr);
        reply_error(rp, st, &err);
    }
    return st;
}

/* The one schedule's object as the answer. */
static enum status reply_schedule(const struct hctx *hc, const struct schedule *s, struct reply *rp,
                                  struct error *err)
{
    json_t *arr = NULL;
    enum status st = schedules_read(hc, &s, 1, &arr, err);

    if (st == ST_OK)
        reply_json_take(rp, 200, json_incref(json_array_get(arr, 0)));
    json_decref(arr);
    return st;
}

enum status handle_schedules_get(const struct hctx *hc, const struct request *rq, struct reply *rp)
{
    struct error err = {0};
    const struct schedule *s = schedule_of(hc, rq, &err);
    enum status st = s ? reply_schedule(hc, s, rp, &err) : ST_NOT_FOUND;

    if (st != ST_OK)
        reply_error(rp, st, &err);
    return st;
}

/* Pause or resume: kept in the database, for every replica, and winning
 * over the file's "paused" until the next pause or resume. */
static enum status set_paused(const struct hctx *hc, const struct request *rq, struct reply *rp,
                              bool paused)
{
    struct error err = {0};
    const struct schedule *s = schedule_of(hc, rq, &err);
    struct db *db = NULL;
    enum status st = s ? db_pool_get(hc->pool, &db, &err) : ST_NOT_FOUND;

    if (st == ST_OK)
        st = store_schedules_set_paused(db, s->name, cfg_schedule_tenant(hc->cfg, s), paused,
                                        rq->initiator, &err);
    db_pool_put(hc->pool, db);
    if (st == ST_OK) {
        LOG(LOG_INFO, "schedule %s schedule=%s by=%s", paused ? "paused" : "resumed", s->name,
            rq->initiator);
        st = reply_schedule(hc, s, rp, &err);
    }
    if (st != ST_OK)
        reply_error(rp, st, &err);
    return st;
}

enum status handle_schedules_pause(const struct hctx *hc, const struct request *rq,
                                   struct reply *rp)
{
    return set_paused(hc, rq, rp, true);
}

enum status handle_schedules_resume(const struct hctx *hc, const struct request *rq,
                                    struct reply *rp)
{
    return set_paused(hc, rq, rp, false);
}

/* A run of the schedule now, whatever its overlap and pause say: someone
 * asked for it. Answered as a submission is. */
enum status handle_schedules_trigger(const struct hctx *hc, const struct request *rq,
                                     struct reply *rp)
{
    struct error err = {0};
    const struct schedule *s = schedule_of(hc, rq, &err);
    struct schedule_run sr;
    struct run *run = NULL;
    struct db *db = NULL;
    char id[27], loc[200];
    enum status st = s ? db_pool_get(hc->pool, &db, &err) : ST_NOT_FOUND;

    if (st == ST_OK) {
        run_id_new(id);
        schedule_run_init(hc->cfg, s, -1, id, rq->initiator, &sr);
        st = store_schedules_trigger(db, s->name, &sr.rn, &run, &err);
    }
    db_pool_put(hc->pool, db);
    if (st != ST_OK) {
        reply_error(rp, st, &err);
        return st;
    }
    xsnprintf(rp->run_id, sizeof(rp->run_id), "%s", run->id);
    xsnprintf(loc, sizeof(loc), "/runs/%s", run->id);
    reply_header(rp, "Location", loc);
    metrics_run_submitted(hc->metrics, run->type);
    if (hc->engine)
        engine_submitted(hc->engine);
    reply_json_take(rp, 202, intake_result(run, false));
    run_free(run);
    return ST_OK;
}

/* ---- rate limits ---- */

static json_t *limit_json(const struct hctx *hc, const struct rate_limit_cfg *l,
                          const struct rate_status *rs, int64_t now_us)
{
    json_t *types = json_array();

    for (size_t t = 0; t < hc->cfg->nrun_types; t++) {
        const struct run_type *rt = &hc->cfg->run_types[t];
        if (rt->rate_limit && strcmp(rt->rate_limit, l->name) == 0)
            json_array_append_new(types, json_string(rt->name));
    }
    return json_pack("{s:s, s:i, s:i, s:i, s:o, s:o}", "name", l->name, "limit", l->limit, "per_s",
                     l->per_s, "used", rs->used, "next_unit_at",
                     ts_or_null(now_us + rs->next_ms * 1000, rs->next_ms >= 0), "run_types", types);
}

enum status handle_rate_limits_list(const struct hctx *hc, const struct request *rq,
                                    struct reply *rp)
{
    size_t n = hc->cfg->nrate_limits;
    struct rate_limit *rl = xcalloc(n ? n : 1, sizeof(*rl));
    struct rate_status *rs = xcalloc(n ? n : 1, sizeof(*rs));
    struct error err = {0};
    struct db *db = NULL;
    json_t *arr = json_array();
    enum status st = ST_OK;

    (void)rq;
    for (size_t i = 0; i < n; i++)
        rl[i] = (struct rate_limit){hc->cfg->rate_limits[i].name, hc->cfg->rate_limits[i].limit,
                                    (int64_t)hc->cfg->rate_limits[i].per_s * 1000};
    if (n > 0 && (st = db_pool_get(hc->pool, &db, &err)) == ST_OK)
        st = store_rate_status(db, rl, n, rs, &err);
    db_pool_put(hc->pool, db);
    for (size_t i = 0; st == ST_OK && i < n; i++)
        json_array_append_new(
            arr, limit_json(hc, &hc->cfg->rate_limits[i], &rs[i], clock_wall_ms() * 1000));
    free(rl);
    free(rs);
    if (st == ST_OK) {
        reply_json_take(rp, 200, json_pack("{s:o}", "rate_limits", arr));
        return ST_OK;
    }
    json_decref(arr);
    reply_error(rp, st, &err);
    return st;
}

/* ---- the gauges of GET /metrics ---- */

#define NEXT_FIRE "opsrun_schedule_next_fire_timestamp_seconds"
#define LIMIT_USED "opsrun_rate_limit_used"

static enum status put_next_fire(const struct hctx *hc, struct dynbuf *out)
{
    const struct config *cfg = hc->cfg;
    /* An array of pointers (see .clang-tidy). NOLINTNEXTLINE(bugprone-sizeof-expression) */
    const struct schedule **list = xcalloc(cfg->nschedules + 1, sizeof(*list));
    struct error err = {0};
    json_t *arr = NULL;
    enum status st;

    for (size_t i = 0; i < cfg->nschedules; i++)
        list[i] = &cfg->schedules[i];
    if (schedules_read(hc, list, cfg->nschedules, &arr, &err) != ST_OK) {
        LOG(LOG_WARN, "could not read the schedules for /metrics: %s", err.message);
        st = ST_OK; /* the family is left out, the scrape goes on */
    } else {
        st = metrics_put_header(out, NEXT_FIRE, "gauge",
                                "When each schedule that is not paused fires next, in seconds "
                                "since the Unix epoch.");
    }
    for (size_t i = 0; st == ST_OK && i < json_array_size(arr); i++) {
        const char *next = json_string_value(json_object_get(json_array_get(arr, i), "next_at"));
        int64_t us;
        if (next && time_parse_rfc3339(next, &us))
            st = metrics_put_sample(out, NEXT_FIRE,
                                    (const char *const[]){"schedule", list[i]->name, NULL},
                                    (double)us / 1e6);
    }
    json_decref(arr);
    free(list);
    return st;
}

static enum status put_limits_used(const struct hctx *hc, struct dynbuf *out)
{
    const struct config *cfg = hc->cfg;
    struct rate_limit *rl = xcalloc(cfg->nrate_limits, sizeof(*rl));
    struct rate_status *rs = xcalloc(cfg->nrate_limits, sizeof(*rs));
    struct error err = {0};
    struct db *db = NULL;
    enum status st = db_pool_get(hc->pool, &db, &err);

    for (size_t i = 0; i < cfg->nrate_limits; i++)
        rl[i] = (struct rate_limit){cfg->rate_limits[i].name, cfg->rate_limits[i].limit,
                                    (int64_t)cfg->rate_limits[i].per_s * 1000};
    if (st == ST_OK)
        st = store_rate_status(db, rl, cfg->nrate_limits, rs, &err);
    db_pool_put(hc->pool, db);
    if (st != ST_OK) {
        LOG(LOG_WARN, "could not read the rate limits for /metrics: %s", err.message);
        st = ST_OK;
    } else {
        st = metrics_put_header(out, LIMIT_USED, "gauge",
                                "Units of each rate limit taken in its current window, by every "
                                "replica.");
        for (size_t i = 0; st == ST_OK && i < cfg->nrate_limits; i++)
            st = metrics_put_sample(out, LIMIT_USED,
                                    (const char *const[]){"limit", rl[i].name, NULL}, rs[i].used);
    }
    free(rl);
    free(rs);
    return st;
}

enum status schedules_put_metrics(const struct hctx *hc, struct dynbuf *out)
{
    enum status st = ST_OK;

    if (!hc->pool)
        return ST_OK;
    if (hc->cfg->nschedules > 0)
        st = put_next_fire(hc, out);
    if (st == ST_OK && hc->cfg->nrate_limits > 0)
        st = put_limits_used(hc, out);
    return st;
}
