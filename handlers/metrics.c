/* handlers/metrics.c — GET /metrics in the Prometheus text format
 * (handlers/metrics.h). Every family is written once, in this order: the
 * registry's (runs, checks, HTTP), this process's engine, streams and pool
 * as they are now, then the database's figures, which one scrape at a time
 * refreshes while the others use the previous ones. */
#include "handlers/metrics.h"
#include "handlers/admin.h"
#include "handlers/schedules.h"

#include "common/limits.h"
#include "common/log.h"
#include "common/metrics.h"
#include "engine/engine.h"
#include "live/hub.h"
#include "store/db.h"
#include "store/migrations.h"
#include "store/notify.h"
#include "store/polls.h"

#include <stdatomic.h>
#include <string.h>

#define METRICS_MAX_BYTES (4 * 1024 * 1024)
/* A refresh's pool checkout; the first scrape waits as long for another's. */
#define METRICS_DB_WAIT_MS 1000
#define CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* The active statuses opsrun_runs reports. */
static const enum run_status active[] = {RUN_QUEUED, RUN_RUNNING, RUN_WAITING, RUN_CANCELLING};

/* The most concurrency groups opsrun_runs_held_by_key reports (the first
 * by name). */
#define HELD_GROUPS_MAX 64

/* What the database said at the last refresh (a plain value: the cache
 * copies it). */
struct database_figures {
    bool up;       /* every query below worked */
    bool migrated; /* every migration this binary has is applied */
    int64_t runs[ARRAY_LEN(active)];
    int64_t queue_age_ms, overdue, lag_ms;
    int64_t notify_pending;     /* deliveries owed */
    double notify_oldest_due_s; /* how long the one due longest has waited */
    /* queued runs held for their key, per group: this configuration's
     * groups and any other that has some */
    struct conc_held_count held[HELD_GROUPS_MAX];
    size_t nheld;
};
_Static_assert(sizeof(struct database_figures) <= METRICS_CACHE_MAX,
               "the database figures must fit the metrics cache");

/* One figure a module keeps: written as a family of one sample. */
struct figure {
    const char *name, *type, *help;
    double v;
};

void handle_metrics_cancelled(const struct hctx *hc, const struct run *run, bool changed)
{
    if (!changed || !run_is_terminal(run))
        return;
    metrics_run_completed(hc->metrics, run->type, run_outcome_name(run->outcome),
                          run_seconds_between(run, "started_at", "completed_at"));
}

/* ---- the database's figures --------------------------------------------- */

static enum status database_counts(struct db *db, struct database_figures *f, struct error *err)
{
    json_t *counts = NULL;
    enum status st = store_runs_counts(db, &counts, err);

    for (size_t i = 0; st == ST_OK && i < ARRAY_LEN(active); i++)
        f->runs[i] = json_integer_value(json_object_get(counts, run_status_name(active[i])));
    json_decref(counts);
    return st;
}

/* The held runs per group, for this configuration's groups (each once)
 * and any other the database has. */
static enum status database_held(const struct config *cfg, struct db *db,
                                 struct database_figures *f, struct error *err)
{
    const char *groups[HELD_GROUPS_MAX];
    size_t n = 0;

    for (size_t i = 0; cfg && i < cfg->nrun_types && n < HELD_GROUPS_MAX; i++) {
        const struct run_type *rt = &cfg->run_types[i];
        const char *g = rt->conc.group ? rt->conc.group : rt->name;
        bool seen = false;
        for (size_t k = 0; rt->conc.on && !seen && k < n; k++)
            seen = strcmp(groups[k], g) == 0;
        if (rt->conc.on && !seen)
            groups[n++] = g;
    }
    return store_runs_held_by_group(db, groups, n, f->held, HELD_GROUPS_MAX, &f->nheld, err);
}

/* One round of queries; a failure leaves f->up false (logged by the pool or
 * here, once per refresh). */
static void database_refresh(const struct hctx *hc, struct database_figures *f)
{
    struct error err = {0};
    struct db *db = NULL;
    enum status st = db_pool_get_wait(hc->pool, METRICS_DB_WAIT_MS, &db, &err);

    if (st == ST_OK)
        st = database_counts(db, f, &err);
    if (st == ST_OK)
        st = store_runs_queue_age(db, &f->queue_age_ms, &err);
    if (st == ST_OK)
        st = store_polls_lag(db, &f->overdue, &f->lag_ms, &err);
    if (st == ST_OK)
        st = store_deliveries_pending(db, &f->notify_pending, &f->notify_oldest_due_s, &err);
    if (st == ST_OK)
        st = database_held(hc->cfg, db, f, &err);
    if (st == ST_OK) {
        f->up = true;
        f->migrated = store_migrations_current(db, &err) == ST_OK;
    }
    db_pool_put(hc->pool, db);
    if (st != ST_OK)
        LOG(LOG_WARN, "could not read the database figures for /metrics: %s", err.message);
}

/* The figures, fresh enough; false when there are none yet (or no pool,
 * in tests). */
static bool database_figures(const struct hctx *hc, struct database_figures *f)
{
    if (!hc->pool)
        return false;
    switch (metrics_cache_begin(hc->metrics, METRICS_DB_MAX_AGE_MS, METRICS_DB_WAIT_MS, f,
                                sizeof(*f))) {
    case METRICS_CACHED:
        return true;
    case METRICS_NONE:
        return false;
    case METRICS_REFRESH:
        break;
    }
    *f = (struct database_figures){0};
    database_refresh(hc, f);
    metrics_cache_end(hc->metrics, f, sizeof(*f));
    return true;
}

static enum status put_db(const struct database_figures *f, struct dynbuf *out)
{
    const struct figure figs[] = {
        {"opsrun_queue_oldest_due_seconds", "gauge",
         "How long the queued run that has been due longest has waited, over the whole "
         "database (0: none is due).",
         (double)f->queue_age_ms / 1000.0},
        {"opsrun_poll_overdue_runs", "gauge",
         "Waiting runs whose check is overdue by more than a second, over the whole database.",
         (double)f->overdue},
        {"opsrun_poll_lag_seconds", "gauge", "How late the most overdue check of a waiting run is.",
         (double)f->lag_ms / 1000.0},
        {"opsrun_notifications_pending", "gauge",
         "Notifications owed and not yet delivered or given up, over the whole database.",
         (double)f->notify_pending},
        {"opsrun_notifications_oldest_due_seconds", "gauge",
         "How long the notification due longest has waited for an attempt (0: none is due).",
         f->notify_oldest_due_s},
    };
    enum status st = metrics_put_header(out, "opsrun_runs", "gauge",
                                        "Active runs in the whole database, by status (every "
                                        "replica reports the same figures).");

    for (size_t i = 0; st == ST_OK && i < ARRAY_LEN(active); i++)
        st = metrics_put_sample(out, "opsrun_runs",
                                (const char *const[]){"status", run_status_name(active[i]), NULL},
                                (double)f->runs[i]);
    for (size_t i = 0; st == ST_OK && i < ARRAY_LEN(figs); i++) {
        st = metrics_put_header(out, figs[i].name, figs[i].type, figs[i].help);
        if (st == ST_OK)
            st = metrics_put_sample(out, figs[i].name, NULL, figs[i].v);
    }
    if (st == ST_OK)
        st = metrics_put_header(out, "opsrun_runs_held_by_key", "gauge",
                                "Queued runs held back because their concurrency key has "
                                "max_running runs running, per concurrency group, over the whole "
                                "database (0 for a group this replica configures that has none).");
    for (size_t i = 0; st == ST_OK && i < f->nheld; i++)
        st = metrics_put_sample(out, "opsrun_runs_held_by_key",
                                (const char *const[]){"group", f->held[i].group, NULL},
                                (double)f->held[i].n);
    return st;
}

/* ---- what the modules keep ---------------------------------------------- */

static enum status put_figures(const struct figure *figs, size_t n, struct dynbuf *out)
{
    enum status st = ST_OK;

    for (size_t i = 0; st == ST_OK && i < n; i++) {
        st = metrics_put_header(out, figs[i].name, figs[i].type, figs[i].help);
        if (st == ST_OK)
            st = metrics_put_sample(out, figs[i].name, NULL, figs[i].v);
    }
    return st;
}

static enum status put_engine(const struct hctx *hc, struct dynbuf *out)
{
    struct engine_stats s;

    if (!hc->engine)
        return ST_OK;
    engine_stats(hc->engine, &s);
    const struct figure figs[] = {
        {"opsrun_workers", "gauge", "Worker threads of this process.", s.workers},
        {"opsrun_workers_busy", "gauge", "Worker threads executing a run now.", s.busy},
        {"opsrun_runs_lost_total", "counter",
         "Attempts this process stopped without writing them, because the run was no longer "
         "its own (rescued or ended elsewhere, or its lease ran out).",
         (double)s.lost_total},
        {"opsrun_orphans_rescued_total", "counter",
         "Runs whose worker stopped heartbeating that this process's orphan scans rescued "
         "(requeued, or ended when their attempts were spent or a cancel was pending).",
         (double)s.rescued_total},
        {"opsrun_orphan_scan_timestamp_seconds", "gauge",
         "When this process's last orphan scan ran, in seconds since the Unix epoch (0: not "
         "yet).",
         (double)s.last_orphan_scan_ms / 1000.0},
        {"opsrun_runs_pruned_total", "counter",
         "Completed runs this process deleted past queue.retention_s.", (double)s.pruned_total},
        {"opsrun_event_partitions_dropped_total", "counter",
         "Partitions of run_events this process's retention dropped, each once no run created "
         "in its span was left.",
         (double)s.partitions_dropped_total},
        {"opsrun_listener_up", "gauge",
         "1 while the LISTEN connection is up (or in poll-only mode), 0 while it reconnects.",
         s.listening || s.poll_only},
        {"opsrun_poll_checks_in_flight", "gauge", "Checks of waiting runs running now.",
         s.poller.in_flight},
    };
    return put_figures(figs, ARRAY_LEN(figs), out);
}

static enum status put_streams(const struct hctx *hc, struct dynbuf *out)
{
    struct hub_stats s;

    if (!hc->hub)
        return ST_OK;
    hub_stats(hc->hub, &s);
    const struct figure figs[] = {
        {"opsrun_sse_subscribers", "gauge", "Event streams open now.", s.subscribers},
        {"opsrun_sse_long_polls", "gauge", "Long-polls (?wait=) waiting now.", s.waiters},
        {"opsrun_sse_dropped_total", "counter",
         "Streams dropped for falling behind the event ring (their clients resume with "
         "Last-Event-ID).",
         (double)s.dropped_total},
        {"opsrun_sse_refused_total", "counter", "Streams refused at sse.max_subscribers.",
         (double)s.refused_total},
        {"opsrun_sse_events_published_total", "counter", "Events put into the ring for streams.",
         (double)s.published_total},
        {"opsrun_sse_ring_bytes", "gauge", "Bytes of event frames the ring holds now.",
         (double)s.ring_bytes},
        {"opsrun_sse_reader_up", "gauge",
         "1 while the event reader's last round reached the database.", s.db_ok},
        {"opsrun_sse_horizon_pending_seconds", "gauge",
         "How long the event reader has waited for event writers in flight; a value that "
         "keeps growing means a transaction holding run_events holds every stream back.",
         (double)s.pending_ms / 1000.0},
        {"opsrun_sse_reader_reconnects_total", "counter",
         "Event reader connections re-opened after a failure.", (double)s.reconnects_total},
    };
    return put_figures(figs, ARRAY_LEN(figs), out);
}

static enum status put_pool(const struct hctx *hc, struct dynbuf *out)
{
    struct db_pool_stats s;

    if (!hc->pool)
        return ST_OK;
    db_pool_stats(hc->pool, &s);
    const struct figure figs[] = {
        {"opsrun_db_pool_size", "gauge", "The most connections the pool opens (db.pool_size).",
         s.size},
        {"opsrun_db_pool_open_connections", "gauge", "Pooled connections opened so far.", s.open},
        {"opsrun_db_pool_in_use_connections", "gauge", "Pooled connections checked out now.",
         s.in_use},
        {"opsrun_db_pool_waits_total", "counter",
         "Checkouts that found no free connection and waited.", (double)s.waits_total},
        {"opsrun_db_pool_wait_timeouts_total", "counter",
         "Checkouts that found none free within their wait (answered 503 for a request).",
         (double)s.timeouts_total},
        {"opsrun_db_pool_wait_seconds_total", "counter",
         "Time checkouts spent waiting for a free connection.", (double)s.wait_us_total / 1e6},
    };
    return put_figures(figs, ARRAY_LEN(figs), out);
}

/* The refusals of the per-client limits (common/limits.h), by reason, and
 * what they count now. */
static enum status put_limits(const struct hctx *hc, struct dynbuf *out)
{
    static const char *const reasons[LIMITS_NEVENTS] = {
        [LIMITS_CONN_REFUSED] = "connections_refused",
        [LIMITS_CONN_ANSWERED] = "connections_per_ip",
        [LIMITS_DEADLINE] = "request_deadline",
        [LIMITS_STREAM_REFUSED] = "streams_per_tenant",
        [LIMITS_SUBMIT_REFUSED] = "submit_rate",
    };
    struct limits_stats s;
    enum status st;

    if (!hc->limits)
        return ST_OK;
    limits_stats(hc->limits, &s);
    st = metrics_put_header(
        out, "opsrun_http_refused_total", "counter",
        "Requests and connections refused by a per-client limit, by reason: connections_refused "
        "(closed at accept, no answer), connections_per_ip (429), request_deadline (408), "
        "streams_per_tenant (429), submit_rate (429).");
    for (int i = 0; st == ST_OK && i < LIMITS_NEVENTS; i++)
        st = metrics_put_sample(out, "opsrun_http_refused_total",
                                (const char *const[]){"reason", reasons[i], NULL},
                                (double)s.total[i]);
    if (st == ST_OK) {
        const struct figure figs[] = {
            {"opsrun_http_client_addresses", "gauge",
             "Client addresses with a connection open (counted for http.max_connections_per_ip).",
             s.addresses},
            {"opsrun_http_limited_connections", "gauge",
             "Open connections counted against their address's limit.", s.connections},
        };
        st = put_figures(figs, ARRAY_LEN(figs), out);
    }
    return st;
}

/* The configuration's reloads (handlers/admin.h), by result. */
static enum status put_reloads(const struct hctx *hc, struct dynbuf *out)
{
    const struct reloads *r = hc->reloads;
    enum status st;

    if (!r)
        return ST_OK;
    st = metrics_put_header(out, "opsrun_config_reloads_total", "counter",
                            "Reloads of the configuration (SIGHUP, POST /admin/reload), by "
                            "result: success, or failure (an invalid file; nothing changed).");
    if (st == ST_OK)
        st = metrics_put_sample(out, "opsrun_config_reloads_total",
                                (const char *const[]){"result", "success", NULL},
                                (double)atomic_load(&r->succeeded));
    if (st == ST_OK)
        st = metrics_put_sample(out, "opsrun_config_reloads_total",
                                (const char *const[]){"result", "failure", NULL},
                                (double)atomic_load(&r->failed));
    if (st == ST_OK) {
        const struct figure figs[] = {
            {"opsrun_config_last_reload_success_timestamp_seconds", "gauge",
             "When the configuration was last reloaded (Unix seconds); 0: not since start.",
             (double)atomic_load(&r->last_success_ms) / 1000.0},
        };
        st = put_figures(figs, ARRAY_LEN(figs), out);
    }
    return st;
}

/* Readiness as /readyz decides it, from the cached database figures. */
static enum status put_state(const struct hctx *hc, const struct database_figures *f, bool have,
                             struct dynbuf *out)
{
    bool draining = hc->draining && atomic_load(hc->draining);
    const struct figure figs[] = {
        {"opsrun_draining", "gauge", "1 from the first moment of a shutdown drain.", draining},
        {"opsrun_ready", "gauge",
         "1 when this process can take traffic as /readyz says: not draining, and at the last "
         "refresh the database answered and had every migration.",
         !draining && have && f->up && f->migrated},
        {"opsrun_database_up", "gauge",
         "1 when the last refresh of the database figures worked (at most every 5 s).",
         have && f->up},
    };
    return put_figures(figs, ARRAY_LEN(figs), out);
}

enum status handle_metrics_get(const struct hctx *hc, const struct request *rq, struct reply *rp)
{
    struct database_figures f = {0};
    struct dynbuf b;
    bool have = database_figures(hc, &f);
    enum status st;

    (void)rq;
    dynbuf_init(&b, METRICS_MAX_BYTES);
    st = metrics_render(hc->metrics, &b);
    if (st == ST_OK)
        st = put_engine(hc, &b);
    if (st == ST_OK)
        st = put_streams(hc, &b);
    if (st == ST_OK)
        st = put_pool(hc, &b);
    if (st == ST_OK)
        st = put_limits(hc, &b);
    if (st == ST_OK)
        st = put_reloads(hc, &b);
    if (st == ST_OK)
        st = put_state(hc, &f, have, &b);
    if (st == ST_OK && have && f.up)
        st = put_db(&f, &b);
    if (st == ST_OK)
        st = schedules_put_metrics(hc, &b);
    if (st != ST_OK) {
        struct error err = {0};
        dynbuf_free(&b);
        st = error_set(&err, ST_INTERNAL, "could not write the metrics: more than %d bytes",
                       METRICS_MAX_BYTES);
        reply_error(rp, st, &err);
        return st;
    }
    rp->http_status = 200;
    rp->text = dynbuf_take(&b);
    rp->text_type = CONTENT_TYPE;
    return ST_OK;
}
