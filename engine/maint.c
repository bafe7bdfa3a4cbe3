/* engine/maint.c — the maintenance thread (progress flushes, cancel checks,
 * heartbeats, orphan rescue, stale workers, retention), the doorbell thread
 * and the LISTEN thread.
 *
 * The doorbell exists because NOTIFY serialises committing transactions in
 * PostgreSQL: one NOTIFY per submission would cap submissions at the rate of
 * that lock. Instead every change is committed without NOTIFY, and this
 * thread sends at most one NOTIFY per channel per few milliseconds after the
 * commits it covers. The payload is empty: the tables are the truth. */
#include "engine/engine_internal.h"

#include "common/log.h"
#include "common/util.h"
#include "store/db.h"
#include "store/workers.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define BELL_MIN_GAP_MS 5
#define RESCUE_BATCH 500
#define RESCUE_ROUNDS 20
#define RETENTION_EVERY_MS 60000
#define RETENTION_ROUNDS 20

/* ---- doorbell ---- */

void engine_on_events(struct engine *e, void (*fn)(void *arg), void *arg)
{
    e->on_events = fn;
    e->on_events_arg = arg;
}

static void events_hint(struct engine *e)
{
    if (e->on_events)
        e->on_events(e->on_events_arg);
}

void engine_ring(struct engine *e, bool queue, bool events)
{
    if (events)
        events_hint(e); /* this process's hub need not wait for the NOTIFY */
    pthread_mutex_lock(&e->mu);
    e->ring_queue |= queue;
    e->ring_events |= events;
    pthread_cond_signal(&e->bell_cv);
    pthread_mutex_unlock(&e->mu);
}

static void *bell_main(void *arg)
{
    struct engine *e = arg;

    pthread_mutex_lock(&e->mu);
    for (;;) {
        bool q, ev;
        struct db *db = NULL;
        struct error err = {0};

        while (!e->bell_stop && !e->ring_queue && !e->ring_events)
            pthread_cond_wait(&e->bell_cv, &e->mu);
        if (!e->ring_queue && !e->ring_events)
            break;
        q = e->ring_queue;
        ev = e->ring_events;
        e->ring_queue = e->ring_events = false;
        pthread_mutex_unlock(&e->mu);
        if (db_pool_get(e->pool, &db, &err) != ST_OK || store_notify(db, q, ev, &err) != ST_OK)
            LOG(LOG_DEBUG, "could not ring the doorbell: %s", err.message);
        db_pool_put(e->pool, db);
        usleep(BELL_MIN_GAP_MS * 1000);
        pthread_mutex_lock(&e->mu);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/* ---- listener ---- */

static void on_notify(void *arg, const char *channel, const char *payload)
{
    struct engine *e = arg;
    (void)payload;
    if (strcmp(channel, "opsrun_queue") == 0)
        engine_wake_dispatcher(e);
    else if (strcmp(channel, "opsrun_events") == 0)
        events_hint(e);
}

static void set_listening(struct engine *e, bool up)
{
    pthread_mutex_lock(&e->mu);
    e->st.listening = up;
    pthread_mutex_unlock(&e->mu);
}

/* Waits on the LISTEN socket until it breaks or we stop; true = stop. */
static bool listen_loop(struct engine *e, struct db *db)
{
    for (;;) {
        struct pollfd pf[2] = {{db_socket(db), POLLIN, 0}, {e->stop_efd, POLLIN, 0}};
        struct error err = {0};
        int r = poll(pf, 2, 1000);

        if (r < 0 && errno != EINTR)
            return false;
        if (pf[1].revents)
            return true;
        if (r > 0 && db_consume_notifies(db, on_notify, e, &err) != ST_OK) {
            LOG(LOG_WARN, "listen connection lost: %s", err.message);
            return false;
        }
    }
}

static void *listener_main(void *arg)
{
    struct engine *e = arg;
    const struct db_options opt = {
        .conninfo = e->cfg->database_url,
        .connect_timeout_s = e->cfg->db.connect_timeout_s,
        .application_name = "opsrun-listen",
    };
    int64_t pause = 250;

    for (;;) {
        struct db *db = NULL;
        struct error err = {0};
        struct pollfd pf = {e->stop_efd, POLLIN, 0};
        bool stop = false;

        if (db_connect(&opt, &db, &err) == ST_OK &&
            db_exec_simple(db, "LISTEN opsrun_queue; LISTEN opsrun_events", &err) == ST_OK) {
            LOG(LOG_INFO, "listening for wake-ups channels=opsrun_queue,opsrun_events");
            set_listening(e, true);
            pause = 250;
            engine_wake_dispatcher(e); /* anything sent while we were away */
            events_hint(e);
            stop = listen_loop(e, db);
            set_listening(e, false);
        } else {
            LOG(LOG_WARN, "could not listen, retrying in %lld ms: %s", (long long)pause,
                err.message);
        }
        db_close(db);
        if (stop || poll(&pf, 1, (int)pause) > 0)
            break;
        pause = pause < 5000 ? pause * 2 : 5000;
    }
    return NULL;
}

/* ---- maintenance ---- */

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
    }
    pthread_mutex_unlock(&e->mu);
}

static void maint_progress(struct engine *e, struct db *db)
{
    int64_t now = clock_mono_ms();

    for (int i = 0; i < e->nslots; i++) {
        struct slot *s = &e->slots[i];
        bool due;
        pthread_mutex_lock(&e->mu);
        due = s->pending && now - s->last_write_ms >= e->cfg->queue.progress_interval_ms;
        pthread_mutex_unlock(&e->mu);
        if (due)
            slot_flush_progress(s, db);
    }
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
    for (size_t q = 0; q < e->qlen; q++) {
        const struct run *run = e->queue[(e->qhead + q) % (size_t)e->nslots];
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
        apply_heartbeat(e, h.held, t0);
        st = store_workers_heartbeat(db, e->worker_id, busy, held, &err);
    }
    if (st != ST_OK)
        LOG(LOG_WARN, "could not heartbeat worker=%s: %s", e->worker_id, err.message);
    free_refs(refs, nrefs);
    free(h.held);
}

/* Rescues orphans in batches; returns false on a database error. */
static bool maint_rescue(struct engine *e, struct db *db)
{
    struct error err = {0};
    int total = 0, n = 0, marked = 0;

    for (int round = 0; round < RESCUE_ROUNDS; round++) {
        if (store_runs_rescue(db, e->cfg->queue.orphan_after_s, RESCUE_BATCH, &n, &err) != ST_OK) {
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
        engine_wake_dispatcher(e);
        engine_ring(e, true, true);
    }
    return true;
}

static void maint_retention(struct engine *e, struct db *db)
{
    struct error err = {0};
    int n = 0, total = 0;

    for (int round = 0; round < RETENTION_ROUNDS; round++) {
        if (store_runs_prune(db, e->cfg->queue.retention_s, e->cfg->queue.retention_batch, &n,
                             &err) != ST_OK) {
            LOG(LOG_WARN, "retention failed: %s", err.message);
            break;
        }
        total += n;
        if (n < e->cfg->queue.retention_batch)
            break;
    }
    if (total > 0) {
        LOG(LOG_INFO, "retention deleted_runs=%d", total);
        pthread_mutex_lock(&e->mu);
        e->st.pruned_total += total;
        pthread_mutex_unlock(&e->mu);
    }
}

struct maint_clock {
    int64_t heartbeat, rescue, retention;
};

static void maint_tick(struct engine *e, struct maint_clock *due)
{
    const struct config *cfg = e->cfg;
    int64_t now = clock_mono_ms();
    struct db *db = NULL;
    struct error err = {0};
    int busy;

    if (db_pool_get(e->pool, &db, &err) != ST_OK) {
        LOG(LOG_DEBUG, "maintenance skipped: %s", err.message);
        return;
    }
    pthread_mutex_lock(&e->mu);
    busy = e->busy;
    pthread_mutex_unlock(&e->mu);
    maint_progress(e, db);
    if (busy > 0 && store_runs_cancelling(db, e->worker_id, on_cancelling, e, &err) != ST_OK)
        LOG(LOG_WARN, "cancel check failed: %s", err.message);
    if (now >= due->heartbeat) {
        maint_heartbeat(e, db);
        due->heartbeat = now + (int64_t)cfg->queue.heartbeat_interval_s * 1000;
    }
    if (now >= due->rescue) {
        maint_rescue(e, db);
        due->rescue = now + jitter_ms((int64_t)cfg->queue.orphan_scan_interval_s * 1000, 0.2);
    }
    if (now >= due->retention) {
        maint_retention(e, db);
        due->retention = now + jitter_ms(RETENTION_EVERY_MS, 0.2);
    }
    db_pool_put(e->pool, db);
}

static void *maint_main(void *arg)
{
    struct engine *e = arg;
    int64_t now = clock_mono_ms();
    struct maint_clock due = {now, now, now + 1000};
    int tick = e->cfg->queue.cancel_check_ms;

    pthread_mutex_lock(&e->mu);
    while (!e->maint_stop) {
        struct timespec ts;
        pthread_mutex_unlock(&e->mu);
        maint_tick(e, &due);
        pthread_mutex_lock(&e->mu);
        abstime_after_ms(&ts, tick);
        if (!e->maint_stop)
            pthread_cond_timedwait(&e->maint_cv, &e->mu, &ts);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

enum status maint_start(struct engine *e, struct error *err)
{
    struct db *db = NULL;
    enum status st = db_pool_get(e->pool, &db, err);

    if (st == ST_OK)
        st = store_workers_register(db, e->worker_id, e->host, (int)getpid(), OPSRUN_VERSION,
                                    e->nslots, err);
    if (st == ST_OK && !maint_rescue(e, db))
        st = error_set(err, ST_UNAVAILABLE, "the orphan scan at start-up failed");
    db_pool_put(e->pool, db);
    if (st != ST_OK)
        return st;
    e->stop_efd = eventfd(0, EFD_CLOEXEC);
    if (e->stop_efd < 0)
        return error_set(err, ST_INTERNAL, "could not create eventfd: %s", strerror(errno));
    if (pthread_create(&e->maint, NULL, maint_main, e) != 0 ||
        pthread_create(&e->bell, NULL, bell_main, e) != 0)
        abort();
    if (e->cfg->queue.listen) {
        if (pthread_create(&e->listener, NULL, listener_main, e) != 0)
            abort();
        e->listener_started = true;
    } else {
        e->st.listening = false;
    }
    return ST_OK;
}

void maint_stop(struct engine *e)
{
    struct db *db = NULL;
    struct error err = {0};

    pthread_mutex_lock(&e->mu);
    e->maint_stop = true;
    e->bell_stop = true;
    pthread_cond_signal(&e->maint_cv);
    pthread_cond_signal(&e->bell_cv);
    pthread_mutex_unlock(&e->mu);
    if (e->stop_efd >= 0)
        (void)!eventfd_write(e->stop_efd, 1);
    pthread_join(e->maint, NULL);
    pthread_join(e->bell, NULL);
    if (e->listener_started)
        pthread_join(e->listener, NULL);
    if (e->stop_efd >= 0)
        close(e->stop_efd);
    e->stop_efd = -1;
    if (db_pool_get(e->pool, &db, &err) != ST_OK ||
        store_workers_stop(db, e->worker_id, &err) != ST_OK)
        LOG(LOG_WARN, "could not mark worker stopped: %s", err.message);
    db_pool_put(e->pool, db);
}
