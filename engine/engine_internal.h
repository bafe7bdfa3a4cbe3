/* engine/engine_internal.h — the engine's shared state, for the engine/ sources only.
 * Everything below mu is guarded by it unless marked atomic. */
#ifndef OPSRUN_ENGINE_INTERNAL_H
#define OPSRUN_ENGINE_INTERNAL_H

#include "engine/actions/action.h"
#include "engine/engine.h"
#include "store/runs.h"

#include <pthread.h>
#include <stdatomic.h>

struct slot {
    struct engine *e;
    pthread_t thread;
    struct run *run;    /* the run executing here, NULL when idle */
    _Atomic int stop;   /* enum stop_reason for the current run */
    int64_t started_ms; /* monotonic: when the run was taken */
    /* Monotonic time until which no other replica may rescue this run: the
     * last heartbeat that covered it (or the claim) plus orphan_after_s less
     * one heartbeat interval. Past it the action stops and nothing is
     * written, even when the maintenance thread is stuck. */
    _Atomic int64_t lease_ms;
    bool done;     /* the terminal write is made; the heartbeat skips it */
    bool settling; /* the terminal write has begun: a heartbeat that misses the
                      run may have missed it because that write committed */
    /* Throttled progress: the action records, maintenance and the worker's
     * final flush write; write_mu keeps those writes in order. */
    pthread_mutex_t write_mu;
    bool pending;
    int pending_pct;
    char pending_step[256];
    int64_t last_write_ms;
};

struct engine {
    const struct config *cfg;
    struct db_pool *pool;
    char worker_id[64];
    char host[128];

    pthread_mutex_t mu;
    pthread_cond_t dispatch_cv; /* dispatcher: wake-ups, idle workers */
    pthread_cond_t work_cv;     /* workers: runs in the local queue */
    pthread_cond_t idle_cv;     /* drain: a worker went idle */
    bool wake, backlog, stop_claims, stop_all, started, hurry;
    int idle; /* idle workers not yet promised a run */
    int busy;
    struct run **queue; /* claimed, not yet started (at most workers) */
    size_t qhead, qlen;
    struct slot *slots;
    int nslots;
    pthread_t dispatcher;

    /* maintenance, doorbell, listener (engine/maint.c) */
    pthread_t maint, bell, listener;
    bool maint_stop, bell_stop, ring_queue, ring_events, listener_started;
    pthread_cond_t maint_cv, bell_cv;
    int stop_efd;
    struct poller *poller; /* engine/poller.c */
    void (*on_events)(void *arg);
    void *on_events_arg;

    /* stats (under mu) */
    struct engine_stats st;
};

/* engine/maint.c */
enum status maint_start(struct engine *e, struct error *err) WUR;
void maint_stop(struct engine *e);
void engine_ring(struct engine *e, bool queue, bool events);
void engine_wake_dispatcher(struct engine *e);
/* How long a claim or a heartbeat protects a run from rescue, less a margin
 * of one heartbeat interval. */
int64_t engine_lease_ms(const struct engine *e);
/* Writes a slot's pending progress (fenced); caller holds no engine lock. */
void slot_flush_progress(struct slot *s, struct db *db);

#endif
