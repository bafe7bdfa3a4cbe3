/* engine/actions/action.h — how a run does its work. A run type names an action; an
 * action is a table of functions.
 *
 * start() runs on a worker thread and must return promptly once
 * rc_should_stop() is true (cancel, deadline or shutdown); it reports
 * progress with rc_progress() (throttled by the worker) and leaves its
 * result, error and summaries in the context, which the worker then owns
 * and writes. It returns STEP_DONE, STEP_FAIL, STEP_RETRY (a transient
 * failure: the run is retried while attempts are left), or STEP_WAIT after
 * it started something outside: rc->external_id and rc->poll_state then say
 * what, and the worker slot is freed while the poller takes over.
 *
 * poll() runs on a poller thread, one short check of a waiting run, within
 * the run type's poll.check_timeout_s (rc_should_stop() turns true at it):
 * STEP_DONE and STEP_FAIL end the run (rc->outcome may say
 * OUTCOME_PARTIALLY_SUCCEEDED, or OUTCOME_CANCELLED when the remote job was
 * cancelled), STEP_WAIT checks again later, STEP_RETRY records a transient
 * failure (network, 5xx) that counts against the poll budget and checks
 * again later.
 * It may change rc->poll_state, which the next check gets.
 *
 * cancel() (the remote cancel) runs when a waiting run is cancelled or
 * times out; cleanup() after every terminal transition of a run that waited
 * or ran a remote action. Both are best effort: failures are logged and
 * counted, and never change the run's outcome. poll/cancel/cleanup may be
 * NULL. params (required) is the table of rules a run type's params are
 * checked against when the configuration is loaded (params.h). */
#ifndef OPSRUN_ENGINE_ACTIONS_ACTION_H
#define OPSRUN_ENGINE_ACTIONS_ACTION_H

#include "common/common.h"
#include "config/config.h"
#include "store/runs.h"

#include <jansson.h>

enum step { STEP_DONE, STEP_FAIL, STEP_RETRY, STEP_WAIT };

/* Why a run must stop: cancelled by a user; process shutting down (hand it
 * back); lost (this attempt is no longer ours: rescued or ended elsewhere,
 * so nothing may be written). */
enum stop_reason { STOP_NONE = 0, STOP_CANCEL, STOP_SHUTDOWN, STOP_LOST };

struct param_rule;  /* engine/actions/params.h */
struct remote_conn; /* engine/actions/remote.h */
struct runlog;      /* common/runlog.h */

struct run_ctx {
    const struct run *run;
    const struct run_type *type;
    int64_t deadline_mono_ms;        /* monotonic clock; the run's timeout */
    const _Atomic int *stop;         /* enum stop_reason, set by other threads */
    const _Atomic int64_t *lease_ms; /* monotonic; past it the run may be rescued */
    /* Set by the action. outcome, left OUTCOME_PENDING for the default:
     * STEP_DONE: succeeded (the default) or OUTCOME_PARTIALLY_SUCCEEDED;
     * STEP_FAIL from poll(): failed (the default) or OUTCOME_CANCELLED. */
    enum run_outcome outcome;
    json_t *result, *error, *summary_counts, *failure_summary; /* owned by the context */
    /* The external job: set by start() before STEP_WAIT, given to poll(),
     * cancel() and cleanup(). Owned by the context. */
    char *external_id;
    json_t *poll_state;    /* what the action keeps between checks (an object) */
    int64_t next_delay_ms; /* STEP_WAIT/STEP_RETRY: the next check's delay; 0 = the schedule */
    /* For poll(): */
    int poll_count;    /* this check's number, from 1 */
    int64_t waited_ms; /* since the run began waiting */
    /* The worker's progress sink, and its durable store of the action's
     * state while the run is held (NULL on the poller). */
    void (*progress_fn)(void *arg, int pct, const char *step);
    enum status (*save_state_fn)(void *arg, const json_t *state, bool cleanup_due);
    enum status (*load_state_fn)(void *arg, json_t **state);
    void *progress_arg;
    /* The calling thread's connections to reuse for remote calls (a
     * poller checker's); NULL: a new connection per call. */
    struct remote_conn *conn;
    /* The attempt's log (docs/logs.md): rc_log writes opsrun's lines, an
     * exec command's stderr goes to runlog_write. NULL: not kept (tests). */
    struct runlog *log;
};

struct action_ops {
    const char *name;
    const struct param_rule *params;
    enum step (*start)(struct run_ctx *rc);
    enum step (*poll)(struct run_ctx *rc);
    bool (*cancel)(struct run_ctx *rc);  /* true when it worked */
    bool (*cleanup)(struct run_ctx *rc); /* true when it worked */
};

/* True once the run should stop: cancel requested, shutdown, deadline, or
 * the end of its lease (another replica may be rescuing it). */
bool rc_should_stop(const struct run_ctx *rc);
/* Sleeps up to ms, in short slices, returning false early when it should stop. */
bool rc_sleep(const struct run_ctx *rc, int64_t ms);
void rc_progress(struct run_ctx *rc, int pct, const char *step);
/* start() only. Records state in the run (its poll_state) before start()
 * returns, durably, for later attempts and for the terminal hooks:
 * cleanup_due says something was created remotely that cleanup() must
 * delete, whichever way the run ends, even when this process dies first.
 * false when it could not be written (rc->error says why); the run may then
 * be lost, and start() should stop. */
bool rc_save_state(struct run_ctx *rc, const json_t *state, bool cleanup_due);
/* start() only: in *state the state an earlier attempt saved with
 * cleanup_due (its leftovers; a new reference), or NULL when there is none.
 * false when it could not be read (rc->error says why): start() must not go
 * on then, or it would record new state over the leftovers. */
bool rc_load_state(struct run_ctx *rc, json_t **state);
/* One line in the run's log (stream "opsrun"): what opsrun did for the run
 * that a person would look for. A no-op without a log. */
void rc_log(struct run_ctx *rc, const char *fmt, ...) PRINTF_LIKE(2, 3);
/* Sets rc->error to {"code": code, "message": ...}, replacing any earlier. */
void rc_error(struct run_ctx *rc, const char *code, const char *fmt, ...) PRINTF_LIKE(3, 4);
/* Sets rc->external_id (copied). */
void rc_set_external_id(struct run_ctx *rc, const char *id);
/* An outcome that fits what the action reported: rc->outcome when it set
 * one, else OUTCOME_SUCCEEDED, or OUTCOME_PARTIALLY_SUCCEEDED when
 * summary_counts has a positive "failed" next to a positive "succeeded", or
 * failure_summary is a non-empty array. */
enum run_outcome rc_done_outcome(const struct run_ctx *rc);
void rc_cleanup(struct run_ctx *rc); /* frees what the action left */

#endif
