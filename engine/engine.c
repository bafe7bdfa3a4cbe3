/* engine/engine.c — the engine's lifecycle (engine/engine.h): it creates
 * the shared state, writes the run types' rules to the database, starts
 * every thread in order (doorbell and listener, maintenance, poller,
 * workers, dispatcher, scheduler, approvals, notifier), and stops them in
 * the reverse order, on a drain and on a start that failed half-way. The
 * threads themselves live in doorbell.c, maint.c, poller.c, dispatch.c,
 * scheduler.c, approvals.c and notify.c. */
#include "engine/engine_internal.h"

#include "common/ids.h"
#include "common/log.h"
#include "engine/notify_body.h"
#include "engine/poller.h"
#include "store/db.h"
#include "store/notify.h"
#include "store/workers.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct engine *engine_new(const struct config *cfg, struct db_pool *pool)
{
    struct engine *e = xcalloc(1, sizeof(*e));
    char rid[27];

    e->cfg = cfg;
    e->pool = pool;
    run_id_new(rid);
    if (gethostname(e->host, sizeof(e->host)) != 0)
        xsnprintf(e->host, sizeof(e->host), "unknown");
    e->host[sizeof(e->host) - 1] = '\0';
    xsnprintf(e->worker_id, sizeof(e->worker_id), "w-%s", rid);
    pthread_mutex_init(&e->mu, NULL);
    cond_init_monotonic(&e->dispatch_cv);
    cond_init_monotonic(&e->work_cv);
    cond_init_monotonic(&e->idle_cv);
    cond_init_monotonic(&e->maint_cv);
    cond_init_monotonic(&e->bell_cv);
    cond_init_monotonic(&e->complete_cv);
    cond_init_monotonic(&e->sched_cv);
    cond_init_monotonic(&e->approvals_cv);
    e->nslots = cfg->queue.workers;
    e->slots = xcalloc((size_t)e->nslots, sizeof(*e->slots));
    /* An array of pointers (see .clang-tidy). NOLINTNEXTLINE(bugprone-sizeof-expression) */
    e->queue = xcalloc((size_t)e->nslots, sizeof(*e->queue));
    /* An array of pointers (see .clang-tidy). NOLINTNEXTLINE(bugprone-sizeof-expression) */
    e->queue_views = xcalloc((size_t)e->nslots, sizeof(*e->queue_views));
    e->q.cap = (size_t)e->nslots;
    handoff_init(&e->done, sizeof(struct completion));
    dynbuf_init(&e->ring_logs, LOGS_NOTIFY_MAX);
    e->stop_efd = -1;
    e->wake_dispatcher = dispatch_wake;
    view_init(e);
    e->due_ms = INT64_MAX;
    for (int i = 0; i < e->nslots; i++) {
        e->slots[i].e = e;
        pthread_mutex_init(&e->slots[i].write_mu, NULL);
    }
    xsnprintf(e->st.worker_id, sizeof(e->st.worker_id), "%s", e->worker_id);
    e->st.workers = e->nslots;
    e->st.poll_only = !cfg->queue.listen;
    notify_init(e);
    return e;
}

void engine_on_events(struct engine *e, void (*fn)(void *arg), void *arg)
{
    e->on_events = fn;
    e->on_events_arg = arg;
}

void engine_on_logs(struct engine *e, void (*fn)(void *arg, const char *run_id), void *arg)
{
    e->on_logs = fn;
    e->on_logs_arg = arg;
}

void engine_set_metrics(struct engine *e, struct metrics *m)
{
    e->metrics = m;
}

void engine_set_live(struct engine *e, struct cfg_live *live)
{
    view_set_live(e, live);
    notify_init(e); /* a reload may add notifiers: the notifier runs from the start */
}

/* The rules, the worker row, and the orphans a dead process left, before
 * any thread. */
static enum status engine_register(struct engine *e, struct error *err)
{
    struct db *db = NULL;
    enum status st = db_pool_get(e->pool, &db, err);

    if (st == ST_OK)
        st = view_rules_sync(e, db, err);
    if (st == ST_OK)
        st = store_workers_register(db, e->worker_id, e->host, (int)getpid(), OPSRUN_VERSION,
                                    e->nslots, err);
    if (st == ST_OK && !maint_rescue(e, db))
        st = error_set(err, ST_UNAVAILABLE, "the orphan scan at start-up failed");
    db_pool_put(e->pool, db);
    return st;
}

static void engine_unregister(struct engine *e)
{
    struct db *db = NULL;
    struct error err = {0};

    if (db_pool_get(e->pool, &db, &err) != ST_OK ||
        store_workers_stop(db, e->worker_id, &err) != ST_OK)
        LOG(LOG_WARN, "could not mark worker stopped: %s", err.message);
    db_pool_put(e->pool, db);
}

enum status engine_start(struct engine *e, struct error *err)
{
    enum status st = engine_register(e, err);

    if (st != ST_OK)
        return st;
    if ((st = doorbell_start(e, err)) != ST_OK)
        goto unregister;
    if ((st = maint_start(e, err)) != ST_OK)
        goto doorbell;
    e->poller = poller_new(e);
    if ((st = poller_start(e->poller, err)) != ST_OK)
        goto maint;
    if ((st = dispatch_start(e, err)) != ST_OK)
        goto poller;
    if ((st = scheduler_start(e, err)) != ST_OK)
        goto dispatch;
    if ((st = approvals_start(e, err)) != ST_OK)
        goto scheduler;
    if ((st = notify_start(e, err)) != ST_OK)
        goto approvals;
    e->started = true;
    LOG(LOG_INFO, "engine started worker=%s workers=%d max_running=%d listen=%s", e->worker_id,
        e->nslots, e->cfg->queue.max_running, e->cfg->queue.listen ? "on" : "off");
    return ST_OK;
approvals:
    approvals_stop(e);
scheduler:
    scheduler_stop(e);
dispatch:
    dispatch_stop_claims(e);
    dispatch_stop_workers(e);
poller:
    poller_stop(e->poller);
maint:
    maint_stop(e);
doorbell:
    doorbell_stop(e);
unregister:
    engine_unregister(e);
    return st;
}

void engine_submitted(struct engine *e)
{
    dispatch_wake(e);
    doorbell_ring(e, true, true);
}

void engine_events_written(struct engine *e)
{
    doorbell_ring(e, false, true);
}

/* A drain that waits on runs says so at once and then this often: the
 * grace may be long (shutdown_grace_s up to a day), and an operator
 * watching a stop must see what it waits for. At most DRAIN_REPORT_IDS run
 * ids are listed. */
#define DRAIN_REPORT_MS 5000
#define DRAIN_REPORT_IDS 10

/* What a drain waits for, copied under e->mu to be logged without it. */
struct drain_report {
    int running;
    size_t queued;
    char ids[DRAIN_REPORT_IDS * (RUN_ID_MAX + 1) + sizeof(",...")];
};

/* e->mu held. */
static void drain_report_take(const struct engine *e, struct drain_report *r)
{
    size_t n = 0;
    int listed = 0;

    r->running = e->busy;
    r->queued = e->q.len;
    xsnprintf(r->ids, sizeof(r->ids), "-");
    for (int i = 0; i < e->nslots; i++) {
        const struct run *run = e->slots[i].run;
        if (!run)
            continue;
        if (listed++ == DRAIN_REPORT_IDS) {
            xsnprintf(r->ids + n, sizeof(r->ids) - n, ",...");
            break;
        }
        n += xsnprintf(r->ids + n, sizeof(r->ids) - n, "%s%.*s", n ? "," : "", RUN_ID_MAX, run->id);
    }
}

/* Waits, for at most grace_s, until no run is running or queued here or
 * engine_hurry is called; logs what it waits for every DRAIN_REPORT_MS. */
static void drain_wait(struct engine *e, int grace_s)
{
    int64_t end = clock_mono_ms() + (int64_t)grace_s * 1000, report = clock_mono_ms();
    struct drain_report r;

    pthread_mutex_lock(&e->mu);
    for (;;) {
        int64_t now = clock_mono_ms();
        struct timespec ts;
        if ((e->busy == 0 && e->q.len == 0) || e->hurry || now >= end)
            break;
        if (now >= report) {
            drain_report_take(e, &r);
            pthread_mutex_unlock(&e->mu);
            LOG(LOG_INFO,
                "draining, waiting for runs=%d queued=%zu grace_left_s=%lld worker=%s run_ids=%s",
                r.running, r.queued, (long long)((end - now + 999) / 1000), e->worker_id, r.ids);
            report = now + DRAIN_REPORT_MS;
            pthread_mutex_lock(&e->mu);
            continue;
        }
        abstime_after_ms(&ts, (report < end ? report : end) - now);
        pthread_cond_timedwait(&e->idle_cv, &e->mu, &ts);
    }
    pthread_mutex_unlock(&e->mu);
}

void engine_stop_claims(struct engine *e)
{
    if (!e->started)
        return;
    scheduler_stop(e); /* no new runs from here on */
    approvals_stop(e); /* nor new queued ones */
    dispatch_stop_claims(e);
}

void engine_drain(struct engine *e, int grace_s)
{
    if (!e->started)
        return;
    engine_stop_claims(e);
    poller_stop(e->poller); /* its checks are due again at once, for other replicas */

    LOG(LOG_INFO, "draining worker=%s grace_s=%d", e->worker_id, grace_s);
    drain_wait(e, grace_s);
    dispatch_stop_workers(e);
    notify_stop(e); /* after the workers: deliveries of their last runs may go out */
    maint_stop(e);
    doorbell_stop(e); /* after the workers: their last writes ring it */
    engine_unregister(e);
    e->started = false;
}

void engine_hurry(struct engine *e)
{
    pthread_mutex_lock(&e->mu);
    e->hurry = true;
    pthread_cond_broadcast(&e->idle_cv);
    pthread_mutex_unlock(&e->mu);
}

void engine_free(struct engine *e)
{
    if (!e)
        return;
    poller_free(e->poller);
    notify_free(e);
    for (int i = 0; i < e->nslots; i++)
        pthread_mutex_destroy(&e->slots[i].write_mu);
    pthread_cond_destroy(&e->dispatch_cv);
    pthread_cond_destroy(&e->work_cv);
    pthread_cond_destroy(&e->idle_cv);
    pthread_cond_destroy(&e->maint_cv);
    pthread_cond_destroy(&e->bell_cv);
    pthread_cond_destroy(&e->complete_cv);
    pthread_cond_destroy(&e->sched_cv);
    pthread_cond_destroy(&e->approvals_cv);
    pthread_mutex_destroy(&e->mu);
    free(e->slots);
    free(e->queue);
    free(e->queue_views);
    view_cleanup(e);
    handoff_cleanup(&e->done);
    dynbuf_free(&e->ring_logs);
    free(e);
}

void engine_stats(struct engine *e, struct engine_stats *out)
{
    pthread_mutex_lock(&e->mu);
    *out = e->st;
    out->busy = e->busy;
    pthread_mutex_unlock(&e->mu);
    poller_stats(e->poller, &out->poller);
}
