/* handlers/health.c — /healthz (details), /livez (process only), /readyz
 * (can take traffic). */
#include "handlers/handlers.h"

#include "common/limits.h"
#include "config/live.h"
#include "common/time_rfc3339.h"
#include "engine/engine.h"
#include "live/hub.h"
#include "store/db.h"
#include "store/migrations.h"
#include "store/polls.h"
#include "store/runs.h"
#include "store/workers.h"

#define HEALTH_DB_TIMEOUT_MS 1000

/* A connection and a ping within HEALTH_DB_TIMEOUT_MS. */
static enum status health_db(const struct hctx *hc, struct db **db, struct error *err)
{
    enum status st = db_pool_get_wait(hc->pool, HEALTH_DB_TIMEOUT_MS, db, err);
    if (st == ST_OK)
        st = db_ping(*db, HEALTH_DB_TIMEOUT_MS, err);
    return st;
}

/* The poller: checks of waiting runs and the hooks after them. */
static json_t *health_poller_json(const struct poller_stats *p)
{
    return json_pack(
        "{s:b, s:i, s:i, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "running", p->running,
        "concurrency", p->concurrency, "in_flight", p->in_flight, "checks_total",
        (json_int_t)p->checks_total, "check_failures_total", (json_int_t)p->check_failures_total,
        "finished_total", (json_int_t)p->finished_total, "timed_out_total",
        (json_int_t)p->timed_out_total, "hooks_total", (json_int_t)p->hooks_total,
        "hook_failures_total", (json_int_t)p->hook_failures_total, "yielded_ms_total",
        (json_int_t)p->yielded_ms_total, "given_back_total", (json_int_t)p->given_back_total);
}

static json_t *health_engine_json(const struct hctx *hc)
{
    struct engine_stats s;
    char ts[40] = "";
    json_t *j;

    if (!hc->engine)
        return json_null();
    engine_stats(hc->engine, &s);
    if (s.last_orphan_scan_ms)
        time_format_rfc3339(s.last_orphan_scan_ms * 1000, ts, sizeof(ts));
    j = json_pack("{s:s, s:i, s:i, s:i, s:b, s:s, s:I, s:I, s:I, s:{s:o, s:I}}", "worker_id",
                  s.worker_id, "workers", s.workers, "busy", s.busy, "idle", s.workers - s.busy,
                  "claiming", s.claiming, "wakeups",
                  s.poll_only   ? "poll"
                  : s.listening ? "listen"
                                : "listen-reconnecting",
                  "claimed_total", (json_int_t)s.claimed_total, "finished_total",
                  (json_int_t)s.finished_total, "lost_total", (json_int_t)s.lost_total, "orphans",
                  "last_scan_at", ts[0] ? json_string(ts) : json_null(), "rescued_total",
                  (json_int_t)s.rescued_total);
    json_object_set_new(j, "poller", health_poller_json(&s.poller));
    return j;
}

/* The event hub: streams, long-polls, and how far it has read. A positive
 * pending_ms that keeps growing means a transaction holding run_events
 * (an open psql session that wrote an event, a long retention delete)
 * holds every stream back. */
static json_t *health_streams_json(const struct hctx *hc)
{
    struct hub_stats s;

    if (!hc->hub)
        return json_null();
    hub_stats(hc->hub, &s);
    return json_pack("{s:b, s:b, s:I, s:I, s:i, s:i, s:I, s:I, s:I, s:I, s:I, s:I}", "ready",
                     s.ready, "reading", s.db_ok, "position", (json_int_t)s.pos,
                     "horizon_pending_ms", (json_int_t)s.pending_ms, "subscribers", s.subscribers,
                     "long_polls", s.waiters, "ring_frames", (json_int_t)s.ring_frames,
                     "ring_bytes", (json_int_t)s.ring_bytes, "published_total",
                     (json_int_t)s.published_total, "dropped_total", (json_int_t)s.dropped_total,
                     "refused_total", (json_int_t)s.refused_total, "reconnects_total",
                     (json_int_t)s.reconnects_total);
}

/* The per-client limits: refusals by kind since start, and the
 * connections, addresses, tenants and callers they count now. */
static json_t *health_limits_json(const struct hctx *hc)
{
    struct limits_stats s;
    json_t *j;

    if (!hc->limits)
        return json_null();
    limits_stats(hc->limits, &s);
    j = json_pack("{s:i, s:i, s:i, s:i}", "connections", s.connections, "addresses", s.addresses,
                  "tenants", s.tenants, "callers", s.callers);
    for (int i = 0; i < LIMITS_NEVENTS; i++)
        json_object_set_new(j, limits_event_name((enum limits_event)i),
                            json_integer((json_int_t)s.total[i]));
    return j;
}

/* The configuration this process runs: its version (config/live.h) and
 * when it was put in place (loaded_at: at start, or the last reload that
 * changed something). */
static json_t *health_config_json(const struct hctx *hc)
{
    char version[CFG_VERSION_LEN + 1], at[40];
    int64_t loaded_ms = 0;

    if (hc->live) {
        cfg_live_version(hc->live, version, &loaded_ms);
    } else {
        cfg_version(hc->cfg, version);
        loaded_ms = 0;
    }
    if (loaded_ms <= 0)
        return json_pack("{s:s, s:n}", "version", version, "loaded_at");
    time_format_rfc3339(loaded_ms * 1000, at, sizeof(at));
    return json_pack("{s:s, s:s}", "version", version, "loaded_at", at);
}

/* A 503 problem that says why (probes are for operators, so the reason is
 * given in full, as detail and as "reason"), with the members of extra
 * after it (taken; NULL for none). */
static void health_unavailable(struct reply *rp, const char *reason, json_t *extra)
{
    json_t *members = json_pack("{s:s}", "reason", reason);

    if (extra)
        json_object_update(members, extra);
    json_decref(extra);
    reply_problem_take(rp, ST_UNAVAILABLE, reason, members);
}

enum status handle_health_healthz(const struct hctx *hc, const struct request *rq, struct reply *rp)
{
    struct error err = {0};
    struct db *db = NULL;
    json_t *counts = NULL, *workers = NULL;
    int64_t overdue = 0, lag_ms = 0, held = 0;
    enum status st = health_db(hc, &db, &err);

    (void)rq;
    if (st == ST_OK)
        st = store_runs_counts(db, &counts, &err);
    if (st == ST_OK)
        st = store_runs_held_total(db, &held, &err);
    if (st == ST_OK)
        json_object_set_new(counts, "held", json_integer((json_int_t)held));
    if (st == ST_OK)
        st = store_polls_lag(db, &overdue, &lag_ms, &err);
    if (st == ST_OK)
        st = store_workers_list(db, &workers, &err);
    db_pool_put(hc->pool, db);
    if (st != ST_OK) {
        health_unavailable(rp, err.message,
                           json_pack("{s:o, s:o}", "engine", health_engine_json(hc), "limits",
                                     health_limits_json(hc)));
        json_decref(counts);
        return ST_OK;
    }
    reply_json_take(rp, 200,
                    json_pack("{s:s, s:b, s:s, s:o, s:o, s:o, s:o, s:o, s:{s:I, s:I}, s:o}",
                              "status", "ok", "draining", hc->draining && atomic_load(hc->draining),
                              "database", "ok", "config", health_config_json(hc), "engine",
                              health_engine_json(hc), "streams", health_streams_json(hc), "limits",
                              health_limits_json(hc), "runs", counts, "polls", "overdue",
                              (json_int_t)overdue, "lag_ms", (json_int_t)lag_ms, "workers",
                              workers));
    return ST_OK;
}

enum status handle_health_livez(const struct hctx *hc, const struct request *rq, struct reply *rp)
{
    (void)hc;
    (void)rq;
    reply_json_take(rp, 200, json_pack("{s:s}", "status", "ok"));
    return ST_OK;
}

enum status handle_health_readyz(const struct hctx *hc, const struct request *rq, struct reply *rp)
{
    struct error err = {0};
    struct db *db = NULL;
    enum status st = ST_OK;

    (void)rq;
    if (hc->draining && atomic_load(hc->draining))
        st = error_set(&err, ST_UNAVAILABLE, "shutting down");
    if (st == ST_OK)
        st = health_db(hc, &db, &err);
    if (st == ST_OK)
        st = store_migrations_current(db, &err);
    db_pool_put(hc->pool, db);
    if (st == ST_OK)
        reply_json_take(rp, 200, json_pack("{s:s}", "status", "ready"));
    else
        health_unavailable(rp, err.message, NULL);
    return ST_OK;
}
