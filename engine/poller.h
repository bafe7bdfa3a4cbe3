/* engine/poller.h — drives runs in 'waiting' to a terminal state without
 * holding a worker slot (for the engine/ sources only).
 *
 * One scheduler thread claims due checks (store/polls.h) for idle checker
 * threads, at most poller.concurrency of them, and sleeps until the next
 * check is due, a local run begins waiting, or poller.interval_ms passes
 * (checks that other replicas scheduled). A checker runs the action's
 * poll() once, within the run type's poll.check_timeout_s, then writes the
 * result: the run ends, or its next check is scheduled with exponential
 * backoff and jitter, never past the end of its wait; past its budget
 * (poll.max_checks or poll.max_duration_s, as stored on the run when it
 * began waiting) it ends timed_out. After every terminal transition
 * of a run that waited, the action's cancel (cancelled or timed out) and
 * cleanup hooks run, best effort.
 *
 * A slow or hanging endpoint holds only its own checker, up to the check's
 * time limit. Nothing is started when no run type has a pollable action.
 * Thread-safe. */
#ifndef OPSRUN_ENGINE_POLLER_H
#define OPSRUN_ENGINE_POLLER_H

#include "engine/engine.h"

struct engine;
struct poller;

/* e must outlive the poller. */
struct poller *poller_new(struct engine *e);
enum status poller_start(struct poller *p, struct error *err) WUR;
/* A run of this process began waiting: look at the schedule again. */
void poller_wake(struct poller *p); /* NULL is a no-op */
/* Stops claiming, aborts the checks in flight (their runs are released to
 * be due at once, for another replica) and joins the threads. */
void poller_stop(struct poller *p);
void poller_free(struct poller *p); /* after poller_stop; NULL is a no-op */
void poller_stats(struct poller *p, struct poller_stats *out);

#endif
