/* engine/dispatch.c — the dispatcher and the worker threads; what a worker
 * does with the run it takes is in slot.c.
 *
 * The dispatcher claims at most as many runs as there are idle workers, so a
 * claimed run never waits in this process behind another. It sleeps until a
 * wake-up (a submission here, a NOTIFY from another replica, a worker going
 * idle while a backlog is likely) or the jittered poll interval, whichever
 * comes first, and never longer than the next delayed run's run_at. */
#include "engine/engine_internal.h"

#include "common/backoff.h"
#include "common/log.h"
#include "common/metrics.h"
#include "store/db.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The caps on the running runs of the configured tenants that have one,
 * for the claim (cfg_tenant_max_running: each tenants entry's max_running,
 * else queue.tenant_max_running), and queue.tenant_max_running (0: none)
 * for every other tenant. Frees with free(t->names) and free(t->caps). */
static void dispatch_tenants(const struct config *cfg, struct claim_tenants *t)
{
    const char **names = xcalloc(cfg->ntenants ? cfg->ntenants : 1, sizeof(*names));
    int *caps = xcalloc(cfg->ntenants ? cfg->ntenants : 1, sizeof(*caps));
    size_t n = 0;

    /* Only the tenants with a cap: an entry without one (0) would make the
     * claim think some tenant is capped and leave its one-statement path. */
    for (size_t i = 0; i < cfg->ntenants; i++) {
        int cap = cfg_tenant_max_running(cfg, cfg->tenants[i].name);
        if (cap > 0) {
            names[n] = cfg->tenants[i].name;
            caps[n++] = cap;
        }
    }
    *t = (struct claim_tenants){names, caps, n, cfg->queue.tenant_max_running};
}

/* Claims up to n runs; returns how many it queued, sets *due_ms to the wait
 * before the next delayed run (-1 = unknown) and *capped when due runs were
 * left behind (a cap was full, or their type is not executed here) or are
 * held for their concurrency key. */
static size_t dispatch_claim(struct engine *e, int n, int64_t *due_ms, bool *capped)
{
    const struct engine_view *v = view_hold(e);
    const struct config *cfg = v->cfg;
    const char **types = xcalloc(cfg->nrun_types, sizeof(*types));
    int *caps = xcalloc(cfg->nrun_types, sizeof(*caps));
    struct claim_tenants tenants;
    struct run **runs = NULL;
    size_t got = 0;
    struct db *db = NULL;
    struct error err = {0};
    int64_t t0 = 0; /* when the claim began */
    enum status st;

    for (size_t i = 0; i < cfg->nrun_types; i++) {
        types[i] = cfg->run_types[i].name;
        caps[i] = cfg->run_types[i].max_running;
    }
    dispatch_tenants(cfg, &tenants);
    *due_ms = -1;
    *capped = false;
    st = db_pool_get(e->pool, &db, &err);
    if (st == ST_OK) {
        t0 = clock_mono_us();
        st = store_runs_claim_fair(db, e->worker_id, n, cfg->queue.max_running, types, caps,
                                   v->nlimits ? v->type_rates : NULL, cfg->nrun_types, &tenants,
                                   &runs, &got, &err);
        metrics_claim_latency(e->metrics, (double)(clock_mono_us() - t0) / 1e6);
    }
    for (size_t i = 0; i < got; i++)
        metrics_run_claimed(e->metrics, runs[i]->type, runs[i]->claim_due_s);
    /* The runs claimed go to the workers before any other statement: a
     * claimed run's orphan clock runs from its claim, and its lease only
     * from a worker's start, so a statement below that waits (a lock, a
     * slow database) must not hold them unstarted. */
    pthread_mutex_lock(&e->mu);
    for (size_t i = 0; i < got; i++) {
        LOG(LOG_DEBUG, "claimed run=%s attempt=%d worker=%s", runs[i]->id, runs[i]->attempt,
            e->worker_id);
        size_t at = ring_push(&e->q);
        e->queue[at] = runs[i];
        e->queue_views[at] = view_ref(v);
    }
    e->st.claimed_total += (int64_t)got;
    /* One wake-up per run, not a broadcast: a broadcast wakes every idle
     * worker for a claim of a few runs, and all but those few only queue up
     * on e->mu to find nothing. A worker that is awake takes a run before it
     * waits, so no run is left without one. */
    for (size_t i = 0; i < got; i++)
        pthread_cond_signal(&e->work_cv);
    pthread_mutex_unlock(&e->mu);
    /* A run that came due while the claim ran is claimed next, not left to
     * the poll interval (store_runs_next_due says why "while" is measured
     * from t0 to its answer). */
    if (st == ST_OK && (int)got < n)
        st = store_runs_next_due(db, t0, due_ms, capped, &err);
    /* Runs left behind may be waiting for a rate limit: claim again when
     * its next unit frees, not at the next poll. */
    if (st == ST_OK && *capped)
        rate_limits_claim_waits(e, v, db, due_ms);
    db_pool_put(e->pool, db);
    if (st != ST_OK)
        LOG(LOG_WARN, "could not claim runs: %s worker=%s", err.message, e->worker_id);

    pthread_mutex_lock(&e->mu);
    e->idle += n - (int)got;
    /* More is likely waiting: claim again as soon as a worker frees up. When
     * due runs were left behind by a cap, a local finish may free a slot. */
    e->backlog = (int)got == n || *capped;
    pthread_mutex_unlock(&e->mu);
    free(runs);
    free(types);
    free(caps);
    free((void *)tenants.names);
    free((void *)tenants.caps);
    view_release(e, v);
    return st == ST_OK ? got : 0;
}

/* When the dispatcher claims next: its own timer, or earlier when this
 * process handed a run back due sooner. Caller holds e->mu. */
static int64_t dispatch_until(const struct engine *e, int64_t next_ms)
{
    return e->due_ms < next_ms ? e->due_ms : next_ms;
}

void dispatch_due(struct engine *e, int64_t delay_ms)
{
    int64_t at = clock_mono_ms() + (delay_ms > 0 ? delay_ms : 0);

    pthread_mutex_lock(&e->mu);
    if (at < e->due_ms) {
        e->due_ms = at;
        pthread_cond_signal(&e->dispatch_cv);
    }
    pthread_mutex_unlock(&e->mu);
}

static void *dispatcher_main(void *arg)
{
    struct engine *e = arg;
    int64_t next_ms = 0; /* monotonic time of the next timed claim */

    for (;;) {
        int n;
        int64_t due = -1, poll_ms;
        bool capped = false;
        size_t got;

        pthread_mutex_lock(&e->mu);
        while (!e->stop_claims &&
               (e->idle == 0 || (!e->wake && clock_mono_ms() < dispatch_until(e, next_ms)))) {
            struct timespec ts;
            abstime_after_ms(&ts,
                             e->idle == 0 ? 1000 : dispatch_until(e, next_ms) - clock_mono_ms());
            pthread_cond_timedwait(&e->dispatch_cv, &e->mu, &ts);
        }
        if (e->stop_claims) {
            pthread_mutex_unlock(&e->mu);
            break;
        }
        e->wake = false;
        /* This claim and its next-due figure cover what was due by now. */
        if (e->due_ms <= clock_mono_ms())
            e->due_ms = INT64_MAX;
        n = e->idle < e->cfg->queue.claim_batch ? e->idle : e->cfg->queue.claim_batch;
        e->idle -= n;
        pthread_mutex_unlock(&e->mu);

        got = dispatch_claim(e, n, &due, &capped);
        poll_ms = jitter_ms(e->cfg->queue.poll_interval_ms, 0.5);
        if ((int)got == n)
            next_ms = clock_mono_ms(); /* more may be waiting: claim as workers free up */
        else
            next_ms = clock_mono_ms() + (due >= 0 && due < poll_ms ? due : poll_ms);
    }
    return NULL;
}

static void *worker_main(void *arg)
{
    struct slot *s = arg;
    struct engine *e = s->e;

    pthread_mutex_lock(&e->mu);
    for (;;) {
        struct run *run;
        struct runlog *log;
        const struct engine_view *v;
        struct completion c = {0};
        int64_t retry_ms;
        bool handed;
        size_t at;
        while (!e->stop_all && e->q.len == 0)
            pthread_cond_wait(&e->work_cv, &e->mu);
        if (e->q.len == 0)
            break;
        at = ring_pop(&e->q);
        run = e->queue[at];
        v = e->queue_views[at];
        s->run = run;
        s->started_ms = clock_mono_ms();
        atomic_store(&s->lease_ms, s->started_ms + engine_lease_ms(e));
        s->done = false;
        s->settling = false;
        s->pending = false;
        atomic_store(&s->stop, e->stop_all ? STOP_SHUTDOWN : STOP_NONE);
        e->busy++;
        pthread_mutex_unlock(&e->mu);

        handed = slot_execute(s, v, &c, &retry_ms);
        view_release(e, v);
        if (retry_ms >= 0)
            dispatch_due(e, retry_ms); /* start it on time, not at the next poll */

        pthread_mutex_lock(&s->write_mu); /* no progress flush may still use run */
        pthread_mutex_lock(&e->mu);
        s->run = NULL;
        log = s->log;
        s->log = NULL;
        pthread_mutex_unlock(&s->write_mu);
        runlog_free(log); /* its lines are written, or go with the end in c */
        if (handed) {
            c.run = run; /* no slot points at it any more: the completer may free it */
            completer_add(e, &c);
        } else {
            run_free(run);
        }
        e->busy--;
        e->idle++;
        if (e->backlog)
            e->wake = true;
        pthread_cond_signal(&e->dispatch_cv);
        pthread_cond_broadcast(&e->idle_cv);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

void dispatch_wake(struct engine *e)
{
    pthread_mutex_lock(&e->mu);
    e->wake = true;
    pthread_cond_signal(&e->dispatch_cv);
    pthread_mutex_unlock(&e->mu);
}

/* Hands back the runs claimed but not started, at shutdown. */
static void dispatch_release_queued(struct engine *e)
{
    /* An array of pointers (see .clang-tidy). NOLINTNEXTLINE(bugprone-sizeof-expression) */
    struct run **runs = xcalloc((size_t)e->nslots, sizeof(*runs));
    struct db *db = NULL;
    struct error err = {0};
    size_t n = 0;

    /* Take them out under the lock; talk to the database without it. */
    pthread_mutex_lock(&e->mu);
    while (e->q.len > 0) {
        size_t at = ring_pop(&e->q);
        runs[n++] = e->queue[at];
        view_release(e, e->queue_views[at]); /* only frees: no lock of e->mu */
    }
    pthread_mutex_unlock(&e->mu);
    if (n > 0 && db_pool_get(e->pool, &db, &err) != ST_OK)
        LOG(LOG_WARN, "could not release unstarted runs: %s", err.message);
    for (size_t i = 0; i < n; i++) {
        struct fence f = {runs[i]->tenant, runs[i]->id, e->worker_id, runs[i]->attempt};
        bool cancelled = false;
        if (db && store_runs_release(db, &f, &cancelled, &err) != ST_OK)
            LOG(LOG_WARN, "could not release run=%s: %s", runs[i]->id, err.message);
        else if (cancelled)
            metrics_run_completed(e->metrics, runs[i]->type, run_outcome_name(OUTCOME_CANCELLED),
                                  -1);
        run_free(runs[i]);
    }
    db_pool_put(e->pool, db);
    free(runs);
    if (n > 0)
        doorbell_ring(e, true, true);
}

/* Workers first, so that the dispatcher never claims for a worker that does
 * not exist; a failure stops the workers already running. */
enum status dispatch_start(struct engine *e, struct error *err)
{
    pthread_mutex_lock(&e->mu);
    e->idle = e->nslots;
    e->wake = true;
    e->st.claiming = true;
    pthread_mutex_unlock(&e->mu);
    if (completer_start(e, err) != ST_OK)
        return ST_INTERNAL;
    for (int i = 0; i < e->nslots; i++) {
        if (thread_start(e, &e->slots[i].thread, worker_main, &e->slots[i], "worker", err) != ST_OK)
            goto fail;
        e->nworkers = i + 1;
    }
    if (thread_start(e, &e->dispatcher, dispatcher_main, e, "dispatcher", err) != ST_OK)
        goto fail;
    e->dispatcher_started = true;
    return ST_OK;
fail:
    dispatch_stop_claims(e);
    dispatch_stop_workers(e);
    return ST_INTERNAL;
}

void dispatch_stop_claims(struct engine *e)
{
    pthread_mutex_lock(&e->mu);
    e->stop_claims = true;
    e->st.claiming = false;
    pthread_cond_signal(&e->dispatch_cv);
    pthread_mutex_unlock(&e->mu);
    if (e->dispatcher_started)
        pthread_join(e->dispatcher, NULL);
    e->dispatcher_started = false;
}

/* Asks every run still executing to stop and hand its run back, hands back
 * the runs not started, and joins the workers. */
void dispatch_stop_workers(struct engine *e)
{
    pthread_mutex_lock(&e->mu);
    e->stop_all = true;
    for (int i = 0; i < e->nslots; i++)
        if (e->slots[i].run)
            atomic_store(&e->slots[i].stop, STOP_SHUTDOWN);
    if (e->busy > 0)
        LOG(LOG_WARN, "grace period over, handing back runs=%d worker=%s", e->busy, e->worker_id);
    pthread_cond_broadcast(&e->work_cv);
    pthread_mutex_unlock(&e->mu);
    dispatch_release_queued(e);
    for (int i = 0; i < e->nworkers; i++)
        pthread_join(e->slots[i].thread, NULL);
    e->nworkers = 0;
    completer_stop(e); /* after the workers: it writes what they handed over */
}
