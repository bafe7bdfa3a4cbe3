/* engine/maint.c — the maintenance thread: throttled progress writes,
 * cancel checks, heartbeats (one statement for every run this process
 * holds), orphan rescue, stale workers, the sweep of runs held for their
 * concurrency key and retention, each on its own clock, all on one
 * thread. */
#include "engine/engine_internal.h"

#include "config/live.h"

#include "common/backoff.h"
#include "common/log.h"
#include "common/metrics.h"
#include "store/db.h"
#include "store/partitions.h"
#include "store/workers.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RESCUE_BATCH 500
#define RESCUE_ROUNDS 20
#define RETENTION_EVERY_MS 60000
#define RETENTION_ROUNDS 20
/* A pass that stopped at RETENTION_ROUNDS left more behind: the next comes
 * this soon, so retention keeps up with any rate it can delete at. */
#define RETENTION_AGAIN_MS 1000
/* A partition step that gave way to a lock is tried again this soon, then
 * twice as long each time it gives way again, up to RETENTION_EVERY_MS:
 * the session in its way is usually one statement in flight, and each try
 * holds event writers up for at most about twice PARTITION_LOCK_TIMEOUT_MS
 * (the drop waits for run_events, then for run_logs). */
#define RETENTION_GAVE_WAY_MS 2000
/* How often the runs held for their concurrency key are looked at for a
 * key with room that no claim released (store_runs_conc_sweep). */
#define CONC_SWEEP_EVERY_MS 5000
/* The most workflows one sweep advances (each in the sweep's transaction). */
#define WF_SWEEP_BATCH 100

/* The slot executing this attempt, or -1; caller holds e->mu. */
static int slot_index(const struct engine *e, const char *tenant, const char *id, int attempt)
{
    for (int i = 0; i < e->nslots; i++) {
        const struct run *run = e->slots[i].run;
        if (run && run->attempt == attempt && strcmp(run->id, id) == 0 &&
            strcmp(run->tenant, tenant) == 0)
            return i;
    }
    return -1;
}

static void on_cancelling(void *arg, const char *tenant, const char *id, int attempt)
{
    struct engine *e = arg;
    int i;

    pthread_mutex_lock(&e->mu);
    i = slot_index(e, tenant, id, attempt);
    if (i >= 0 && atomic_load(&e->slots[i].stop) == STOP_NONE) {
        atomic_store(&e->slots[i].stop, STOP_CANCEL);
        LOG(LOG_INFO, "cancel requested run=%s attempt=%d worker=%s", id, attempt, e->worker_id);
        runlog_say(e->slots[i].log, "cancel requested: stopping attempt %d", attempt);
    }
    pthread_mutex_unlock(&e->mu);
}

/* Progress and log lines that waited long enough; returns when the next
 * that waits will have (monotonic ms; INT64_MAX: none waits). */
static int64_t maint_progress(struct engine *e, struct db *db)
{
    int64_t now = clock_mono_ms(), next = INT64_MAX;

    for (int i = 0; i < e->nslots; i++) {
        struct slot *s = &e->slots[i];
        int64_t p_due = INT64_MAX, l_due = INT64_MAX, since;
        pthread_mutex_lock(&e->mu);
        if (s->pending)
            p_due = s->last_write_ms + e->cfg->queue.progress_interval_ms;
        since = s->log && s->run && !s->done ? runlog_pending_since(s->log) : 0;
        if (since)
            l_due = since + e->cfg->logs.flush_ms;
        pthread_mutex_unlock(&e->mu);
        if (p_due <= now)
            slot_flush_progress(s, db);
        else if (p_due < next)
            next = p_due;
        if (l_due <= now)
            (void)slot_flush_log(s, db, false, LOG_FLUSH_CHUNKS);
        else if (l_due < next)
            next = l_due;
    }
    return next;
}

struct held_scan {
    struct engine *e;
    bool *held; /* per slot: its run is still ours */
};

static void on_held(void *arg, const char *tenant, const char *id, int attempt)
{
    struct held_scan *h = arg;
    int i;

    pthread_mutex_lock(&h->e->mu);
    i = slot_index(h->e, tenant, id, attempt);
    if (i >= 0)
        h->held[i] = true;
    pthread_mutex_unlock(&h->e->mu);
}

/* The runs this process is executing or about to: busy slots whose terminal
 * write is not made yet, and the local queue. Copies (free_refs). */
static struct run_ref *held_refs(struct engine *e, size_t *n, int *busy)
{
    struct run_ref *refs = xcalloc((size_t)e->nslots * 2, sizeof(*refs));

    *n = 0;
    pthread_mutex_lock(&e->mu);
    *busy = e->busy;
    for (int i = 0; i < e->nslots; i++) {
        const struct run *run = e->slots[i].run;
        if (run && !e->slots[i].done)
            refs[(*n)++] = (struct run_ref){xstrdup(run->tenant), xstrdup(run->id), run->attempt};
    }
    for (size_t q = 0; q < e->q.len; q++) {
        const struct run *run = e->queue[ring_at(&e->q, q)];
        refs[(*n)++] = (struct run_ref){xstrdup(run->tenant), xstrdup(run->id), run->attempt};
    }
    pthread_mutex_unlock(&e->mu);
    return refs;
}

static void free_refs(struct run_ref *refs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free((char *)refs[i].tenant);
        free((char *)refs[i].id);
    }
    free(refs);
}

/* After a heartbeat at t0: a run it covered is leased anew; a run taken
 * before t0 that it did not find was rescued, re-claimed or ended elsewhere
 * (this process was frozen or cut off), so its action must stop before it
 * becomes a second live execution, and write nothing. A slot already
 * settling is left alone: its own final write may be why the heartbeat did
 * not find the run, and its lease still ends any write if it was truly
 * taken over. */
static void apply_heartbeat(struct engine *e, const bool *held, int64_t t0)
{
    pthread_mutex_lock(&e->mu);
    for (int i = 0; i < e->nslots; i++) {
        struct slot *s = &e->slots[i];
        if (!s->run || s->done)
            continue;
        if (held[i]) {
            atomic_store(&s->lease_ms, t0 + engine_lease_ms(e));
        } else if (!s->settling && s->started_ms < t0 && atomic_load(&s->stop) != STOP_LOST) {
            atomic_store(&s->stop, STOP_LOST);
            LOG(LOG_WARN, "stopping run=%s attempt=%d worker=%s: no longer held by this worker",
                s->run->id, s->run->attempt, e->worker_id);
        }
    }
    pthread_mutex_unlock(&e->mu);
}

static void maint_heartbeat(struct engine *e, struct db *db)
{
    struct error err = {0};
    struct held_scan h = {e, xcalloc((size_t)e->nslots, sizeof(bool))};
    int64_t t0 = clock_mono_ms();
    size_t nrefs;
    int held = 0, busy;
    struct run_ref *refs = held_refs(e, &nrefs, &busy);
    enum status st = store_runs_heartbeat(db, e->worker_id, refs, nrefs, &held, on_held, &h, &err);

    if (st == ST_OK) {
        char version[CFG_VERSION_LEN + 1];
        apply_heartbeat(e, h.held, t0);
        view_version(e, version);
        st = store_workers_heartbeat(db, e->worker_id, busy, held, version, &err);
    }
    if (st != ST_OK)
        LOG(LOG_WARN, "could not heartbeat worker=%s: %s", e->worker_id, err.message);
    free_refs(refs, nrefs);
    free(h.held);
}

/* Rescued runs that ended (attempts spent, or a cancel pending) are
 * completions of this process. */
static void rescue_ended(void *arg, const char *type, enum run_outcome outcome, int n)
{
    struct engine *e = arg;

    for (int i = 0; i < n; i++)
        metrics_run_completed(e->metrics, type, run_outcome_name(outcome), -1);
}

/* Rescues orphans in batches; returns false on a database error. */
bool maint_rescue(struct engine *e, struct db *db)
{
    struct error err = {0};
    int total = 0, n = 0, marked = 0;

    for (int round = 0; round < RESCUE_ROUNDS; round++) {
        if (store_runs_rescue_each(db, e->cfg->queue.orphan_after_s, RESCUE_BATCH, &n, rescue_ended,
                                   e, &err) != ST_OK) {
            LOG(LOG_WARN, "orphan scan failed: %s", err.message);
            return false;
        }
        total += n;
        if (n < RESCUE_BATCH)
            break;
    }
    if (store_workers_mark_stale(db, e->cfg->queue.orphan_after_s, &marked, &err) != ST_OK)
        LOG(LOG_WARN, "stale worker scan failed: %s", err.message);
    if (total > 0 || marked > 0)
        LOG(LOG_WARN, "orphan scan rescued=%d stale_workers=%d worker=%s", total, marked,
            e->worker_id);
    pthread_mutex_lock(&e->mu);
    e->st.rescued_total += total;
    e->st.last_orphan_scan_ms = clock_wall_ms();
    pthread_mutex_unlock(&e->mu);
    if (total > 0) {
        dispatch_wake(e);
        doorbell_ring(e, true, true);
    }
    return true;
}

static void on_partition_created(void *arg, const char *name)
{
    (void)arg;
    LOG(LOG_INFO, "retention created partition=%s", name);
}

static void on_partition_dropped(void *arg, const char *name)
{
    (void)arg;
    LOG(LOG_INFO, "retention dropped partition=%s", name);
}

/* Logged when a partition step did not get its table lock in time: once
 * is nothing, every pass means a session holds run_events for long. */
static void gave_way(const char *what, int64_t again_ms)
{
    LOG(LOG_INFO,
        "retention could not %s partitions now: a lock on run_events was not granted "
        "within %d ms; trying again within %" PRId64 " s",
        what, PARTITION_LOCK_TIMEOUT_MS, (again_ms + 999) / 1000);
}

/* The spans of run_events ahead (migration 013), before the deletes of a
 * pass; a failure here stops nothing else. Returns whether it gave way to
 * a lock. */
static bool maint_partitions_ahead(struct engine *e, struct db *db, int64_t again_ms)
{
    struct error err = {0};
    struct partition_step step;

    if (store_partitions_ensure(db, e->cfg->queue.event_partition_s, on_partition_created, NULL,
                                &step, &err) != ST_OK) {
        LOG(LOG_WARN, "could not create partitions ahead: %s", err.message);
        return false;
    }
    if (step.gave_way)
        gave_way("create", again_ms);
    return step.gave_way;
}

/* The spans whose runs are all gone, after the deletes of a pass, so that
 * the pass that deletes a span's last runs drops it too. Returns whether
 * it gave way to a lock. */
static bool maint_partitions_drop(struct engine *e, struct db *db, int64_t again_ms)
{
    struct error err = {0};
    struct partition_step step;

    if (store_partitions_drop(db, on_partition_dropped, NULL, &step, &err) != ST_OK) {
        LOG(LOG_WARN, "could not drop partitions: %s", err.message);
        return false;
    }
    if (step.gave_way)
        gave_way("drop", again_ms);
    if (step.n > 0) {
        pthread_mutex_lock(&e->mu);
        e->st.partitions_dropped_total += step.n;
        pthread_mutex_unlock(&e->mu);
    }
    return step.gave_way;
}

struct maint_clock {
    int64_t cancel, heartbeat, rescue, retention, conc_sweep;
    /* When retention's partition steps are next due (0: at every pass),
     * and how long they wait after the next try that gives way to a
     * lock. */
    int64_t partitions, gave_way_ms;
};

/* One retention pass at now; returns when the next is due, in ms from now:
 * soon when it stopped with more to delete, when the partition steps are
 * due again after one of them gave way to a lock, else about a minute. The
 * passes that come soon to delete more leave the partition steps alone
 * until they are due: each step that gives way has held up event writers
 * while it waited. */
static int64_t maint_retention(struct engine *e, struct db *db, int64_t now,
                               struct maint_clock *due)
{
    struct error err = {0};
    int n = 0, total = 0;
    bool more = true, steps = now >= due->partitions, waited = false;
    int64_t again = due->gave_way_ms, next;

    if (steps)
        waited = maint_partitions_ahead(e, db, again);
    for (int round = 0; round < RETENTION_ROUNDS && more; round++) {
        if (store_runs_prune(db, e->cfg->queue.retention_s, e->cfg->queue.retention_batch, &n,
                             &err) != ST_OK) {
            LOG(LOG_WARN, "retention failed: %s", err.message);
            more = false;
            break;
        }
        total += n;
        more = n == e->cfg->queue.retention_batch;
    }
    if (steps)
        waited = maint_partitions_drop(e, db, again) || waited;
    if (total > 0) {
        LOG(LOG_INFO, "retention deleted_runs=%d", total);
        pthread_mutex_lock(&e->mu);
        e->st.pruned_total += total;
        pthread_mutex_unlock(&e->mu);
    }
    if (steps && waited) {
        due->partitions = now + again;
        due->gave_way_ms = again * 2 < RETENTION_EVERY_MS ? again * 2 : RETENTION_EVERY_MS;
    } else if (steps) {
        due->partitions = 0;
        due->gave_way_ms = RETENTION_GAVE_WAY_MS;
    }
    if (more)
        return RETENTION_AGAIN_MS;
    next = jitter_ms(RETENTION_EVERY_MS, 0.2);
    return due->partitions > now && due->partitions - now < next ? due->partitions - now : next;
}

/* Held runs whose key has room and that no claim released: claims wake
 * to start them. Normally the claim after a key frees releases its held
 * runs; this is the net under that. */
static void maint_conc_sweep(struct engine *e, struct db *db)
{
    struct error err = {0};
    int n = 0;

    if (store_runs_conc_sweep(db, &n, &err) != ST_OK) {
        LOG(LOG_WARN, "concurrency sweep failed: %s", err.message);
        return;
    }
    if (n > 0) {
        LOG(LOG_INFO, "concurrency sweep released runs=%d", n);
        dispatch_wake(e);
        doorbell_ring(e, true, false);
    }
}

/* Workflows whose row a step's end found locked: advanced here, every
 * cancel check by a replica whose configuration has a workflow type, and
 * with the concurrency sweep (every 5 s) by every replica, whatever its
 * configuration (always true), so that markers left when a reload removed
 * the last workflow type are swept too. Their steps may start: claims
 * wake. */
static void maint_wf_sweep(struct engine *e, struct db *db, bool always)
{
    const struct engine_view *v = view_hold(e);
    struct error err = {0};
    int n = 0;

    if (always || v->workflows) {
        if (store_runs_wf_sweep(db, WF_SWEEP_BATCH, &n, &err) != ST_OK)
            LOG(LOG_WARN, "workflow sweep failed: %s", err.message);
        else if (n > 0) {
            LOG(LOG_DEBUG, "workflow sweep advanced workflows=%d", n);
            dispatch_wake(e);
            doorbell_ring(e, true, true);
        }
    }
    view_release(e, v);
}

/* One round of every clock that is due; returns when progress or log
 * lines waiting now, or retention's next pass, will be due (monotonic ms;
 * INT64_MAX: none). */
static int64_t maint_tick(struct engine *e, struct maint_clock *due)
{
    const struct config *cfg = e->cfg;
    int64_t now = clock_mono_ms();
    struct db *db = NULL;
    struct error err = {0};
    int busy;
    int64_t next;

    if (db_pool_get(e->pool, &db, &err) != ST_OK) {
        LOG(LOG_DEBUG, "maintenance skipped: %s", err.message);
        return INT64_MAX;
    }
    pthread_mutex_lock(&e->mu);
    busy = e->busy;
    pthread_mutex_unlock(&e->mu);
    /* The heartbeat first: leases must not wait behind a slow flush. */
    if (now >= due->heartbeat) {
        maint_heartbeat(e, db);
        due->heartbeat = now + (int64_t)cfg->queue.heartbeat_interval_s * 1000;
    }
    next = maint_progress(e, db);
    /* A reload changed the configuration: the rules the database applies
     * at every transition follow it (again next round if this fails). */
    if (e->live && cfg_live_generation(e->live) != e->rules_generation &&
        view_rules_sync(e, db, &err) != ST_OK)
        LOG(LOG_WARN, "could not write the reloaded run type rules: %s", err.message);
    if (now >= due->cancel) {
        if (busy > 0 && store_runs_cancelling(db, e->worker_id, on_cancelling, e, &err) != ST_OK)
            LOG(LOG_WARN, "cancel check failed: %s", err.message);
        maint_wf_sweep(e, db, false);
        due->cancel = now + cfg->queue.cancel_check_ms;
    }
    if (now >= due->rescue) {
        maint_rescue(e, db);
        due->rescue = now + jitter_ms((int64_t)cfg->queue.orphan_scan_interval_s * 1000, 0.2);
    }
    if (now >= due->conc_sweep) {
        maint_conc_sweep(e, db);
        maint_wf_sweep(e, db, true);
        due->conc_sweep = now + jitter_ms(CONC_SWEEP_EVERY_MS, 0.2);
    }
    if (now >= due->retention)
        due->retention = now + maint_retention(e, db, now, due);
    db_pool_put(e->pool, db);
    /* Retention's next pass may come sooner than the tick (after a step
     * that gave way, or with more to delete). */
    return due->retention < next ? due->retention : next;
}

static void *maint_main(void *arg)
{
    struct engine *e = arg;
    int64_t now = clock_mono_ms();
    struct maint_clock due = {
        now, now, now, now + 1000, now + CONC_SWEEP_EVERY_MS, 0, RETENTION_GAVE_WAY_MS};
    /* Lines written since the last round wait at most logs.flush_ms for
     * the next; progress and lines already waiting are written when due. */
    int64_t tick = e->cfg->queue.cancel_check_ms < e->cfg->logs.flush_ms
                       ? e->cfg->queue.cancel_check_ms
                       : e->cfg->logs.flush_ms;

    pthread_mutex_lock(&e->mu);
    while (!e->maint_stop) {
        struct timespec ts;
        int64_t next, wait;
        pthread_mutex_unlock(&e->mu);
        next = maint_tick(e, &due);
        wait = next == INT64_MAX ? tick : next - clock_mono_ms();
        wait = wait < 1 ? 1 : wait > tick ? tick : wait;
        pthread_mutex_lock(&e->mu);
        abstime_after_ms(&ts, wait);
        if (!e->maint_stop)
            pthread_cond_timedwait(&e->maint_cv, &e->mu, &ts);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

enum status maint_start(struct engine *e, struct error *err)
{
    if (thread_start(e, &e->maint, maint_main, e, "maintenance", err) != ST_OK)
        return ST_INTERNAL;
    e->maint_started = true;
    return ST_OK;
}

void maint_stop(struct engine *e)
{
    if (!e->maint_started)
        return;
    pthread_mutex_lock(&e->mu);
    e->maint_stop = true;
    pthread_cond_signal(&e->maint_cv);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->maint, NULL);
    e->maint_started = false;
}
