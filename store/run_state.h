/* store/run_state.h — the run state machine's values: where a run is (its
 * status) and how it ended (its outcome), with the one table of their names.
 * The outcome is OUTCOME_PENDING until the status is RUN_COMPLETED, then one
 * of the others. store/run_state_sql.h has the same status sets and the
 * transition rules in SQL.
 *
 * In C a status or outcome is always one of these enums; the names are used
 * only where a value crosses a boundary: SQL parameters and results, JSON,
 * query strings. Everything here is pure and thread-safe; the names are
 * static strings. */
#ifndef OPSRUN_STORE_RUN_STATE_H
#define OPSRUN_STORE_RUN_STATE_H

#include <stdbool.h>

enum run_status {
    RUN_QUEUED,     /* due at run_at; a dispatcher claims it */
    RUN_RUNNING,    /* a worker executes it */
    RUN_WAITING,    /* an external job runs; the poller checks it */
    RUN_CANCELLING, /* cancel asked while running; its worker ends it */
    RUN_COMPLETED,  /* terminal; the outcome says how */
};
#define RUN_STATUS_COUNT (RUN_COMPLETED + 1)

enum run_outcome {
    OUTCOME_PENDING, /* not completed yet; in a run context: none chosen */
    OUTCOME_SUCCEEDED,
    OUTCOME_PARTIALLY_SUCCEEDED,
    OUTCOME_FAILED,
    OUTCOME_CANCELLED,
    OUTCOME_TIMED_OUT,
};
#define RUN_OUTCOME_COUNT (OUTCOME_TIMED_OUT + 1)

/* The API and database name ("queued", "timed_out", ...). s must be a
 * value of the enum. */
const char *run_status_name(enum run_status s);
const char *run_outcome_name(enum run_outcome o);
/* True and *out set when name is exactly one of the names (case matters);
 * false, *out untouched, for anything else, NULL included. */
bool run_status_parse(const char *name, enum run_status *out);
bool run_outcome_parse(const char *name, enum run_outcome *out);

/* completed: nothing moves the run any more. */
bool run_status_is_terminal(enum run_status s);
/* queued, running, waiting: the run will still do its work, so a submission
 * of the same identity joins it, and a cancel acts on it. */
bool run_status_is_joinable(enum run_status s);
/* running, cancelling: a worker holds the run (it counts against
 * max_running, is heartbeated, and its writes are fenced). */
bool run_status_is_held(enum run_status s);

/* Where a run of a run type with "approval" is with its approval
 * (migration 018). A run of any other type has none (the run object's
 * "approval" is null). APPROVAL_CANCELLED is never stored: it is what a
 * pending approval reads as once its run was cancelled. */
enum approval_state {
    APPROVAL_PENDING,   /* nobody decided yet */
    APPROVAL_APPROVED,  /* a person approved: the run was queued */
    APPROVAL_REJECTED,  /* a person rejected: the run completed cancelled */
    APPROVAL_EXPIRED,   /* nobody decided in time: on_timeout decided */
    APPROVAL_CANCELLED, /* the run was cancelled while pending */
};
#define APPROVAL_STATE_COUNT (APPROVAL_CANCELLED + 1)
const char *approval_state_name(enum approval_state a);
bool approval_state_parse(const char *name, enum approval_state *out);
/* The run awaits a decision: its approval is pending and it is waiting.
 * Only such a run may be approved, rejected or expired, and it has no
 * external job (the poller never checks it). */
bool run_awaits_approval(enum run_status s, enum approval_state a);

#endif
