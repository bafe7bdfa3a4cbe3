/* engine/poller_internal.h — the poller's shared state, for its three
 * files only: poller.c (the scheduler and checker threads, start and
 * stop), poller_check.c (one check or one run of the terminal hooks, and
 * what its result writes) and poller_writer.c (the thread that writes the
 * next checks many per statement). Calls go one way:
 *   poller.c -> poller_check.c, poller_writer.c
 * Everything in struct poller below mu is guarded by it unless atomic. */
#ifndef OPSRUN_ENGINE_POLLER_INTERNAL_H
#define OPSRUN_ENGINE_POLLER_INTERNAL_H

#include "engine/actions/remote.h"
#include "engine/engine_internal.h"
#include "engine/poller.h"
#include "store/polls.h"

/* Hooks are tried this often, this far apart, then given up (logged). */
#define HOOKS_MAX_ATTEMPTS 3
#define HOOKS_RETRY_MS 30000
/* A claim's lease beyond the time its work may take. */
#define LEASE_MARGIN_MS 5000

struct job {
    struct poll_claim c;
    bool hooks;           /* the terminal hooks, not a check */
    int64_t claimed_mono; /* when it was claimed (monotonic ms) */
    /* the view it was claimed under (view_ref): its run type's check time
     * limit is the one the claim's lease was made for */
    const struct engine_view *v;
};

/* A check whose run goes on: its next check, for the writer to schedule. */
struct again {
    char *tenant, *id, *owner; /* owner: the claim's */
    int poll_count;
    json_t *poll_state; /* owned copy */
    int64_t delay_ms;
    bool given_back; /* a claim given back unchecked (give_back) */
};

struct poller {
    struct engine *e;
    /* The scheduler thread's own: the run types whose action can poll, of
     * the view tview (held; rebuilt when a reload swapped it). */
    const char **types;
    size_t ntypes;
    const struct engine_view *tview;
    /* The scheduler thread's own: the types a claim takes (open_types), and
     * per rate limit of the engine the monotonic time until which it is
     * known to have no unit left. */
    const char **open;
    int64_t *limit_until;
    uint64_t limit_generation; /* of the view limit_until was made for */
    int n;                     /* checker threads */
    /* covers a check, or both hooks, of any of those types (the checkers
     * read it for the next lease) */
    _Atomic int64_t lease_ms;

    pthread_mutex_t mu;
    pthread_cond_t work_cv, sched_cv;
    struct job *queue; /* claimed, not yet started: a ring of q.cap */
    struct ring q;
    int room;      /* claims the scheduler may add: q.cap - queued - in flight */
    int claim_min; /* the least room worth a claim: 1, or n / 2 while behind */
    bool stop, wake, started, sched_started;
    int nstarted;     /* checker threads running */
    _Atomic int halt; /* enum stop_reason for the checks in flight */
    pthread_t sched, *checkers;
    struct poller_stats st; /* running, concurrency, in_flight (under mu) */
    _Atomic int64_t checks, check_failures, finished, timed_out, hooks, hook_failures;
    _Atomic int64_t db_us; /* time spent in claims and writes (wall clock) */
    _Atomic int64_t yielded_ms, given_back;
    int64_t win_us, win_db; /* the previous claim's start, and db_us then */
    uint64_t claims;        /* claim statements made: each names its owner (scheduler) */
    /* the writer: next checks to schedule, many per statement */
    pthread_cond_t again_cv;
    struct handoff againq; /* of struct again */
    bool writer_stop, writer_started;
    pthread_t writer;
};

/* poller_check.c */
/* One check of a claimed run; *next (id NULL when none) is its next check
 * if the run goes on, for the writer. Takes c's external id and poll state. */
void poller_check_run(struct poller *p, struct poll_claim *c, const struct engine_view *v,
                      struct remote_conn *conn, struct again *next);
/* The terminal hooks of a claimed run (cancelled, timed out, or hooks that
 * failed or whose owner died before). */
void poller_check_hooks(struct poller *p, struct poll_claim *c, const struct engine_view *v,
                        struct remote_conn *conn);
/* The delay before the check after check n (n >= 1): min(initial *
 * multiplier^(n-1), max), then ± jitter_pct. Pure but for the jitter's
 * random draw; exposed for tests. */
int64_t poller_backoff_ms(const struct poll_policy *pp, int n);

/* poller_writer.c */
enum status poller_writer_start(struct poller *p, struct error *err) WUR;
/* Writes what was handed over, then joins the thread; safe when not started. */
void poller_writer_stop(struct poller *p);
/* Takes over *a for the writer to schedule; caller holds p->mu. */
void poller_writer_add(struct poller *p, struct again *a);
void poller_again_free(struct again *a);

#endif
