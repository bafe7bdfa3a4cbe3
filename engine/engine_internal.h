/* engine/engine_internal.h — the engine's shared state, for the engine/
 * sources only. Everything below mu is guarded by it unless marked atomic.
 *
 * The files call each other in one direction only, each only files to its
 * right:
 *   engine.c (lifecycle) -> maint.c -> dispatch.c -> slot.c, complete.c
 *     -> poller.c -> poller_check.c, poller_writer.c -> scheduler.c,
 *     approvals.c -> notify.c -> logs.c (the runs' log lines) -> doorbell.c
 *     -> thread.c, queue.c, shared.c, rate_limits.c -> view.c (the
 *     configuration as the engine uses it, reloaded in place)
 * The listener (doorbell.c), the completer, the scheduler and the
 * approvals thread wake the dispatcher through e->wake_dispatcher, set by
 * engine.c, and the events hint (doorbell.c) wakes the notifier through
 * e->wake_notifier, so none of them needs anything to its left. */
#ifndef OPSRUN_ENGINE_INTERNAL_H
#define OPSRUN_ENGINE_INTERNAL_H

#include "common/dynbuf.h"
#include "engine/actions/action.h"
#include "common/runlog.h"
#include "engine/engine.h"
#include "store/rate_limits.h"
#include "store/runs.h"

#include <pthread.h>
#include <stdatomic.h>

/* queue.c: the positions of a fixed-capacity FIFO whose items the owner
 * keeps in an array of cap (the claimed runs waiting for a worker, the
 * claimed checks waiting for a checker). The owner's lock guards it. */
struct ring {
    size_t head, len, cap;
};
size_t ring_at(const struct ring *r, size_t i); /* the i-th from the front (i < len) */
size_t ring_push(struct ring *r);               /* a new back item (len < cap): its index */
size_t ring_pop(struct ring *r);                /* takes the front (len > 0): its index */

/* queue.c: a growable FIFO of items of one size that threads hand to one
 * writer thread, which takes them in batches (the completer's finished
 * runs, the poll writer's next checks). The owner's lock guards it. */
struct handoff {
    char *items;
    size_t n, cap, size; /* items held, allocated, and the bytes of one */
};
void handoff_init(struct handoff *q, size_t item_size);
/* Appends a copy of *item; returns how many are held now. */
size_t handoff_add(struct handoff *q, const void *item);
/* Moves up to max items from the front into out; returns how many. */
size_t handoff_take(struct handoff *q, void *out, size_t max);
void handoff_cleanup(struct handoff *q); /* frees the memory; q stays usable */

/* A write the engine must not drop (a run's end, a hand-back) is tried
 * again while the database turns it away: DB_RETRY_FIRST_MS after the first
 * failure, doubling up to DB_RETRY_MAX_MS (common/backoff.h), for as long
 * as the run's lease lasts. */
#define DB_RETRY_FIRST_MS 100
#define DB_RETRY_MAX_MS 2000

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
    /* The attempt's log (docs/logs.md): the action writes, maintenance and
     * the attempt's end take; written under write_mu like progress. Set
     * and cleared with run. */
    struct runlog *log;
};

/* A finished attempt handed to the completer (complete.c), which owns it. */
struct completion {
    struct run *run; /* owned */
    enum run_outcome outcome;
    const char *message;                                       /* static, for the event */
    json_t *result, *error, *summary_counts, *failure_summary; /* owned references */
    int64_t lease_ms;        /* monotonic: past it, nothing may be written */
    int64_t started_ms;      /* monotonic: when the attempt was taken */
    double seconds;          /* the run's duration, for metrics */
    char code[64];           /* the error's code, "" for none */
    char extra[96];          /* the rest of the "run finished" line */
    struct runlog_chunk log; /* the attempt's last lines, written with the end */
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
    /* Monotonic time at which a run this process handed back (a retry after
     * its backoff) is due; INT64_MAX = none. The dispatcher claims then. */
    int64_t due_ms;
    int idle; /* idle workers not yet promised a run */
    int busy;
    struct run **queue; /* claimed, not yet started: a ring of nslots */
    /* the view each was claimed under (view_ref), by the same index: its
     * attempt runs under it, so a reload between the claim and the start
     * cannot take its run type away */
    const struct engine_view **queue_views;
    struct ring q;
    struct slot *slots;
    int nslots;
    int nworkers; /* worker threads running (joined by dispatch_stop_workers) */
    pthread_t dispatcher;
    bool dispatcher_started;

    /* the completer (complete.c): attempts handed over, not yet written */
    pthread_t completer;
    bool completer_started, completer_stop;
    pthread_cond_t complete_cv;
    struct handoff done; /* of struct completion */

    /* maintenance (maint.c), doorbell and listener (doorbell.c) */
    pthread_t maint, bell, listener;
    bool maint_stop, bell_stop, ring_queue, ring_events;
    /* the runs whose log lines were written here since the last NOTIFY on
     * opsrun_logs: their ids, space-separated; ring_logs_all when they no
     * longer fit in one payload (every follower looks) */
    struct dynbuf ring_logs;
    bool ring_logs_all;
    bool maint_started, bell_started, listener_started;
    pthread_cond_t maint_cv, bell_cv;
    int stop_efd;
    struct poller *poller; /* engine/poller.c */
    /* the scheduler (scheduler.c), when schedules are configured or the
     * configuration is reloadable */
    pthread_t scheduler;
    bool sched_started, sched_stop;
    /* the approvals thread (approvals.c), on every replica */
    bool approvals_started, approvals_stop;
    pthread_t approvals;
    pthread_cond_t sched_cv, approvals_cv;
    /* the notifier (notify.c), when notifiers are configured or the
     * configuration is reloadable; wake_notifier
     * (notify_wake, set before any thread starts) is how the events hint
     * makes it look for due deliveries. */
    struct notify *notify;
    void (*wake_notifier)(struct engine *e);
    /* dispatch_wake, set by engine.c: how a NOTIFY on opsrun_queue (the
     * listener) and a batch that freed capped slots (the completer) make
     * the dispatcher claim now. */
    void (*wake_dispatcher)(struct engine *e);
    void (*on_events)(void *arg);
    void *on_events_arg;
    /* engine_on_logs: lines of run_id (NULL: of any run) were committed */
    void (*on_logs)(void *arg, const char *run_id);
    void *on_logs_arg;
    struct metrics *metrics; /* NULL: nothing recorded */
    /* The running configuration when it can be reloaded (engine_set_live;
     * NULL: cfg is fixed), and the engine's view of it (view.c) under
     * view_mu. */
    struct cfg_live *live;
    pthread_mutex_t view_mu;
    struct engine_view *view;
    /* The generation of the view whose rules the database has (maint.c). */
    uint64_t rules_generation;
    char fixed_version[16]; /* cfg's version (config/live.h), without live */
    /* Starts a thread as pthread_create does (NULL = pthread_create); tests
     * set it to make a start fail. */
    int (*spawn)(pthread_t *t, void *(*fn)(void *), void *arg);

    /* stats (under mu) */
    struct engine_stats st;
};

/* thread.c: starts a thread; on failure ST_INTERNAL naming what and why.
 * The caller stops what it started before. */
enum status thread_start(struct engine *e, pthread_t *t, void *(*fn)(void *), void *arg,
                         const char *what, struct error *err) WUR;

/* notify.c: the notifier thread (when notifiers are configured, or always
 * with a reloadable configuration). init in engine_new and again in
 * engine_set_live (it makes the notifier once), free in engine_free; start
 * and stop are safe without it. */
void notify_init(struct engine *e);
enum status notify_start(struct engine *e, struct error *err) WUR;
void notify_stop(struct engine *e); /* gives back the deliveries in flight */
void notify_free(struct engine *e);

/* scheduler.c: the scheduler thread (when schedules are configured, or
 * always with a reloadable configuration: it follows each reload). */
enum status scheduler_start(struct engine *e, struct error *err) WUR;
void scheduler_stop(struct engine *e); /* safe when not started */

/* approvals.c: the thread that decides expired approvals (on every
 * replica, whatever its configuration). */
enum status approvals_start(struct engine *e, struct error *err) WUR;
void approvals_stop(struct engine *e); /* safe when not started */

/* doorbell.c: the doorbell and the LISTEN thread (when queue.listen). */
enum status doorbell_start(struct engine *e, struct error *err) WUR;
void doorbell_stop(struct engine *e); /* safe after a partial start */
/* Asks for a NOTIFY on opsrun_queue and/or opsrun_events, coalesced. */
void doorbell_ring(struct engine *e, bool queue, bool events);
/* Tells this process's hub that events may have been committed. */
void events_hint(struct engine *e);
/* The longest payload of a NOTIFY on opsrun_logs (PostgreSQL takes less
 * than 8000 bytes). */
#define LOGS_NOTIFY_MAX 7900
/* Lines of run_id's log were committed: this process's followers look at
 * once, the other replicas' after a NOTIFY on opsrun_logs, coalesced. */
void doorbell_ring_logs(struct engine *e, const char *run_id);

/* dispatch.c: the dispatcher and the workers. */
enum status dispatch_start(struct engine *e, struct error *err) WUR;
void dispatch_wake(struct engine *e);                  /* claim now */
void dispatch_due(struct engine *e, int64_t delay_ms); /* claim in delay_ms at the latest */
void dispatch_stop_claims(struct engine *e);           /* joins the dispatcher */
void dispatch_stop_workers(struct engine *e);          /* hands runs back, joins the workers */
/* slot.c: one attempt on a worker's slot. */
/* Runs the action of s->run (taken by the worker) under v, the view it was
 * claimed under (the caller's, held). True when the run ended and *c holds
 * it for the completer; false when its end was written here, with
 * *retry_ms the delay before a retry it wrote is due (-1: none). */
bool slot_execute(struct slot *s, const struct engine_view *v, struct completion *c,
                  int64_t *retry_ms);
/* The most bytes of lines one statement writes for one run; maintenance
 * writes at most LOG_FLUSH_CHUNKS of them per run and round, so a chatty
 * run cannot hold the heartbeats and the other runs' lines back. */
#define LOG_CHUNK_MAX (256 * 1024)
#define LOG_FLUSH_CHUNKS 4
/* logs.c. A new log for an attempt of run: the configured bounds, and the
 * {{env:...}} values of rt's params as its secrets. */
struct runlog *engine_log_new(const struct engine *e, const struct run *run,
                              const struct run_type *rt);
/* Writes what l holds for run_id (final: the attempt is over), chunk by
 * chunk, at most max_chunks (-1: every one); a chunk that cannot be
 * written goes back to l. Rings the logs doorbell, counts the lines.
 * Caller holds no engine lock. */
enum status engine_log_write(struct engine *e, struct db *db, struct runlog *l, const char *tenant,
                             const char *run_id, bool final, int max_chunks);
/* An external job's id as a line of the log shows it: a URL without its
 * user, password, query and fragment. A new string (free). */
char *engine_log_external_id(const char *id);
/* rc->error's message with the secrets of l masked (it may quote what the
 * command printed). */
void engine_log_mask_error(struct runlog *l, struct run_ctx *rc);
/* Writes one chunk taken from a log of attempt of run_id. */
enum status engine_log_chunk_write(struct engine *e, struct db *db, const char *tenant,
                                   const char *run_id, int attempt, const struct runlog_chunk *c);
/* Writes a slot's pending log lines, at most max_chunks (-1: all)
 * (unfenced: an attempt's lines are history, even one found lost); caller
 * holds no engine lock. */
enum status slot_flush_log(struct slot *s, struct db *db, bool final, int max_chunks);
/* Writes a slot's pending progress (fenced); caller holds no engine lock. */
void slot_flush_progress(struct slot *s, struct db *db);

/* complete.c: the completer thread, which writes finished runs in batches. */
enum status completer_start(struct engine *e, struct error *err) WUR;
/* Writes everything handed over (while leases last), joins the thread. */
void completer_stop(struct engine *e);
/* Takes over *c (its run and references); *c is zeroed. Caller holds mu. */
void completer_add(struct engine *e, struct completion *c);

/* view.c: the configuration as the engine uses it. The engine holds a
 * view for each unit of work (a claim, an attempt, a round of checks,
 * a round of maintenance) and releases it after: what the unit reads of
 * the configuration (run types, tenants, rate limits) is one
 * configuration's from its start to its end, and a reload applies from
 * the next unit on. Without a reloadable configuration the view is one,
 * of e->cfg, for the engine's life. Thread-safe. */
struct engine_view {
    const struct config *cfg; /* held while the view lives */
    /* the configured rate limits, and each run type's (by its index in
     * cfg->run_types; NULL for none) */
    struct rate_limit *limits;
    size_t nlimits;
    const struct rate_limit **type_rates;
    bool workflows;        /* a run type is a workflow (the sweep runs) */
    uint64_t generation;   /* of the configuration (cfg_live_generation) */
    struct cfg_live *live; /* cfg is held from it; NULL: cfg is e->cfg */
    atomic_long refs;
};
void view_init(struct engine *e);                            /* in engine_new */
void view_set_live(struct engine *e, struct cfg_live *live); /* engine_set_live */
void view_cleanup(struct engine *e); /* in engine_free, after every thread */
const struct engine_view *view_hold(struct engine *e);
void view_release(struct engine *e, const struct engine_view *v);
/* Another hold of v, which the caller holds (released with view_release):
 * for work that outlives the unit that took v (a notification in flight). */
const struct engine_view *view_ref(const struct engine_view *v);
/* Writes the run types' rules as the current view has them, for the
 * trigger that creates deliveries and follow-ups (store/notify.h), and
 * records the view's generation in e->rules_generation. At start, and by
 * maintenance after a reload. */
enum status view_rules_sync(struct engine *e, struct db *db, struct error *err) WUR;
/* The version of the configuration running now (CFG_VERSION_LEN + 1
 * bytes, config/live.h), for the worker row. */
void view_version(struct engine *e, char *out);
/* The limit of run type `type` (NULL for none). */
const struct rate_limit *view_rate_limit_of(const struct engine_view *v, const char *type);

/* rate_limits.c: after a claim of runs left due runs behind, each of v's
 * limits with no unit left counts a wait; *due_ms becomes the wait for the
 * first of them to free a unit when that is sooner. */
void rate_limits_claim_waits(struct engine *e, const struct engine_view *v, struct db *db,
                             int64_t *due_ms);

/* shared.c: helpers every engine file may call; it calls none of them. */
/* How long a claim or a heartbeat protects a run from rescue, less a margin
 * of one heartbeat interval. */
int64_t engine_lease_ms(const struct engine *e);
/* The line that ends a run, the same from a worker and from the poller:
 * "run finished run= type= outcome= error=<code>" then extra (more
 * " key=value" fields, or ""), at warn unless it succeeded. code is the
 * error's code, or NULL or "" for none. */
void engine_log_finished(const struct run *run, enum run_outcome outcome, const char *code,
                         const char *extra);
/* The line of an attempt that ends without a write because its lease ran
 * out (another replica may be rescuing the run); started_ms is when the
 * attempt was taken (monotonic). */
void engine_log_lost(const struct run *run, int64_t started_ms, const char *by);
/* The "code" of a run's error object; NULL when error or its code is
 * missing. Borrowed from error. */
const char *engine_error_code(const json_t *error);

/* maint.c: the maintenance thread. */
enum status maint_start(struct engine *e, struct error *err) WUR;
void maint_stop(struct engine *e); /* safe when not started */
/* One orphan scan (and stale workers), as at start-up; false on a database error. */
bool maint_rescue(struct engine *e, struct db *db);

#endif
