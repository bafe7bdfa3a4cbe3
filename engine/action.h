/* engine/action.h — how a run does its work. A run type names an action; an
 * action is a table of functions. start() runs on a worker thread and must
 * return promptly once rc_should_stop() is true (cancel, deadline or
 * shutdown); it reports progress with rc_progress() (throttled by the
 * worker) and leaves its result, error and summaries in the context, which
 * the worker then owns and writes. poll/cancel/cleanup serve the external-job
 * poller and may be NULL for actions that never wait. */
#ifndef OPSRUN_ENGINE_ACTION_H
#define OPSRUN_ENGINE_ACTION_H

#include "common/common.h"
#include "server/cfg.h"
#include "store/runs.h"

#include <jansson.h>

enum step { STEP_DONE, STEP_FAIL, STEP_RETRY, STEP_WAIT };

/* Why a run must stop: cancelled by a user; process shutting down (hand it
 * back); lost (this attempt is no longer ours: rescued or ended elsewhere,
 * so nothing may be written). */
enum stop_reason { STOP_NONE = 0, STOP_CANCEL, STOP_SHUTDOWN, STOP_LOST };

struct run_ctx {
    const struct run *run;
    const struct run_type *type;
    int64_t deadline_mono_ms;        /* monotonic clock; the run's timeout */
    const _Atomic int *stop;         /* enum stop_reason, set by other threads */
    const _Atomic int64_t *lease_ms; /* monotonic; past it the run may be rescued */
    /* Set by the action: */
    const char *outcome; /* STEP_DONE: "succeeded" (default) or "partially_succeeded" */
    json_t *result, *error, *summary_counts, *failure_summary; /* owned by the context */
    /* The worker's progress sink. */
    void (*progress_fn)(void *arg, int pct, const char *step);
    void *progress_arg;
};

struct action_ops {
    const char *name;
    enum step (*start)(struct run_ctx *rc);
    enum step (*poll)(struct run_ctx *rc);
    void (*cancel)(struct run_ctx *rc);
    void (*cleanup)(struct run_ctx *rc);
};

/* The built-in actions by name; NULL when unknown. */
const struct action_ops *action_find(const char *name);

/* True once the run should stop: cancel requested, shutdown, deadline, or
 * the end of its lease (another replica may be rescuing it). */
bool rc_should_stop(const struct run_ctx *rc);
/* Sleeps up to ms, in short slices, returning false early when it should stop. */
bool rc_sleep(const struct run_ctx *rc, int64_t ms);
void rc_progress(struct run_ctx *rc, int pct, const char *step);
/* Sets rc->error to {"code": code, "message": ...}, replacing any earlier. */
void rc_error(struct run_ctx *rc, const char *code, const char *fmt, ...) PRINTF_LIKE(3, 4);
void rc_cleanup(struct run_ctx *rc); /* frees what the action left */

#endif
