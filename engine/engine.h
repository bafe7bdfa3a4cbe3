/* engine/engine.h — the run engine of one process: a dispatcher that claims
 * batches for idle worker threads, the workers that execute actions, the
 * maintenance thread (heartbeats, cancel checks, orphan rescue, stale
 * workers, retention), the doorbell thread that coalesces NOTIFYs, and the
 * LISTEN thread that wakes the dispatcher when another replica submits.
 * engine_* functions are thread-safe unless noted. */
#ifndef OPSRUN_ENGINE_H
#define OPSRUN_ENGINE_H

#include "common/common.h"
#include "config/config.h"

struct db_pool;
struct engine;
struct metrics;

/* The poller's figures (engine/poller.h). */
struct poller_stats {
    bool running;                             /* some run type here can be polled */
    int concurrency, in_flight;               /* checker threads, checks running now */
    int64_t checks_total;                     /* checks made */
    int64_t check_failures_total;             /* network errors, 5xx, malformed answers */
    int64_t finished_total;                   /* runs the poller ended (timed_out included) */
    int64_t timed_out_total;                  /* of those, past their poll budget */
    int64_t hooks_total, hook_failures_total; /* cancel and cleanup hooks */
    int64_t yielded_ms_total;                 /* claims held back while this process ran runs */
    int64_t given_back_total; /* claims given back after waiting too long for a checker */
};

struct engine_stats {
    char worker_id[64];
    int workers, busy;
    bool claiming;  /* false once draining */
    bool listening; /* LISTEN connection up (or poll-only mode) */
    bool poll_only;
    int64_t claimed_total, finished_total, lost_total;
    int64_t rescued_total;       /* by this process's orphan scans */
    int64_t last_orphan_scan_ms; /* wall clock, 0 = not yet */
    int64_t pruned_total;
    int64_t partitions_dropped_total; /* run_events partitions retention dropped */
    struct poller_stats poller;
};

/* cfg and pool must outlive the engine. */
struct engine *engine_new(const struct config *cfg, struct db_pool *pool);
/* fn(arg) is called, on any engine thread, whenever run events may have
 * been committed: a NOTIFY on opsrun_events from any replica (this process's
 * LISTEN connection carries both channels), this process's own event
 * writes, and each (re)connection of the LISTEN connection. Set it before
 * engine_start; fn must be cheap and must not block. */
void engine_on_events(struct engine *e, void (*fn)(void *arg), void *arg);
/* fn(arg, run_id) is called when lines of run_id's log (docs/logs.md) may
 * have been committed, by this process or (through NOTIFY on opsrun_logs)
 * another; run_id NULL: of any run (the payload did not say, or the LISTEN
 * connection came back). Set it before engine_start; fn must be cheap and
 * must not block. */
void engine_on_logs(struct engine *e, void (*fn)(void *arg, const char *run_id), void *arg);
/* The registry the engine records runs, claims and checks into
 * (common/metrics.h); m must outlive the engine. Set it before
 * engine_start; without it nothing is recorded. */
void engine_set_metrics(struct engine *e, struct metrics *m);
/* The running configuration, reloaded in place (config/live.h), which the
 * engine then reads for what a reload may change: run types, tenants, rate
 * limits, their rules. cfg (engine_new) stays what gives the rest. live
 * must outlive the engine. Set it before engine_start. */
struct cfg_live;
void engine_set_live(struct engine *e, struct cfg_live *live);
/* Registers the worker row, rescues orphans once, starts the threads. */
enum status engine_start(struct engine *e, struct error *err) WUR;
/* A run was submitted by this process: wake a worker here at once and ring
 * the doorbell for the other replicas. */
void engine_submitted(struct engine *e);
/* Something changed a run's events outside the engine (cancel): ring the
 * events doorbell. */
void engine_events_written(struct engine *e);
/* Stops claiming runs, and the scheduler, now: the first step of a drain,
 * which the process takes before it says it is draining, so that no run is
 * claimed here after /readyz answered 503. It waits for a claim under way
 * (one statement). Idempotent; from the thread that later calls
 * engine_drain. */
void engine_stop_claims(struct engine *e);
/* Stops claiming (engine_stop_claims) and the poller, waits up to grace_s for running runs to
 * finish (logging, at once and every 5 s, the runs it waits for and the grace left), then asks the
 * rest to stop and hands them back to the queue; joins every thread. */
void engine_drain(struct engine *e, int grace_s);
/* Ends a drain's grace period now (a second signal); any thread. */
void engine_hurry(struct engine *e);
void engine_free(struct engine *e); /* after engine_drain; NULL is a no-op */
void engine_stats(struct engine *e, struct engine_stats *out);

#endif
