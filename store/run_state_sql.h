/* store/run_state_sql.h — the run state machine in SQL, for the statements
 * of store/ only: the status sets, and the SET arms of every transition that
 * more than a plain assignment decides, each written once and composed into
 * the statements. Pure macros that expand to string literals; the runs row
 * being changed is "r".
 *
 * The sets are spelled exactly as the partial indexes of migrations/ spell
 * their predicates (runs_held: HELD_STATUSES; runs_active_identity:
 * JOINABLE_STATUSES), because PostgreSQL uses such an index only for a
 * query whose WHERE clause implies its predicate. Each set lists, in enum
 * order, the statuses a predicate of store/run_state.h holds for
 * (tests/unit/test_run_state.c checks that). opsrun_claim (migrations/002)
 * is PL/pgSQL and spells its sets itself, and so do the statements that
 * migration 027 made functions (opsrun_submit_batch: APPROVAL_INSERT_VALUES,
 * SUBMITTED_MESSAGE, JOINABLE_STATUSES; opsrun_finish_batch: SET_END_ERROR,
 * SET_CLEANUP_IF, HELD_STATUSES): a change here is a new migration there.
 *
 * An ended run is final: no statement changes a column its object shows
 * (opsrun_run_json) once it is completed. The notifier builds the object
 * of an outcome's delivery when it takes it (migration 036; a workflow's,
 * which shows its steps' runs, is still built at its end), and counts on
 * that to send what the end left. */
#ifndef OPSRUN_STORE_RUN_STATE_SQL_H
#define OPSRUN_STORE_RUN_STATE_SQL_H

/* run_status_is_held: a worker holds the run, fences its writes and
 * heartbeats it; it counts against max_running. */
#define HELD_STATUSES "('running', 'cancelling')"
/* run_status_is_joinable: the run will still do its work; a submission of
 * its identity joins it, and a cancel acts on it. */
#define JOINABLE_STATUSES "('queued', 'running', 'waiting')"
/* Joinable and not held: a cancel ends the run at once. A held run is
 * asked instead: it becomes cancelling, and its holder ends it. */
#define CANCEL_AT_ONCE_STATUSES "('queued', 'waiting')"

/* The SET arms that end a run cancelled (completed/cancelled, completed_at
 * now) where cond holds, and otherwise give it status, outcome and
 * completed_at: the one way a run ends cancelled. */
#define SET_CANCELLED_IF(cond, status, outcome, completed_at)                                      \
    "status = CASE WHEN " cond " THEN 'completed' ELSE " status " END, "                           \
    "outcome = CASE WHEN " cond " THEN 'cancelled' ELSE " outcome " END, "                         \
    "completed_at = CASE WHEN " cond " THEN now() ELSE " completed_at " END, "

/* A run a retry may repeat (POST /runs/{id}/retry), over a runs row whose
 * columns are prefixed p ("o.", "r."): completed, and not successfully. */
#define RETRYABLE_RUN(p) p "status = 'completed' AND " p "outcome <> 'succeeded'"

/* A held run whose cancel was asked for. */
#define CANCEL_ASKED "r.status = 'cancelling'"
/* The holder lets go of a held run: a run that was asked to cancel ends
 * cancelled instead of going where the holder meant to send it. */
#define SET_HAND_BACK(status, outcome, completed_at)                                               \
    SET_CANCELLED_IF(CANCEL_ASKED, status, outcome, completed_at)
/* The event message of a hand-back, over the CTE of the updated rows: it
 * says so when the run ended cancelled, not what the holder meant to do. */
#define HAND_BACK_MESSAGE(cancelled, otherwise)                                                    \
    "CASE WHEN outcome = 'cancelled' THEN " cancelled " ELSE " otherwise " END"

/* ---- the transitions, as the statements use them ---- */

/* POST /runs/{id}/cancel (runs_cancel), over its locking CTE "cur": queued
 * and waiting end cancelled at once; running becomes cancelling. */
#define SET_CANCEL                                                                                 \
    SET_CANCELLED_IF("cur.status IN " CANCEL_AT_ONCE_STATUSES, "'cancelling'", "r.outcome", "NULL")
/* A cancel that ends a run at once owes its action's remote cancel and
 * cleanup (the terminal hooks, for the poller): a waiting run's, unless it
 * awaited approval (nothing was started), and a queued run's that recorded
 * remote preparation. Over the locking CTE "cur", as SET_CANCEL. */
#define CANCEL_OWES_HOOKS                                                                          \
    "(cur.status = 'waiting' AND r.approval_state IS DISTINCT FROM 'pending') OR "                 \
    "(cur.status = 'queued' AND r.cleanup_due)"
#define SET_CANCEL_HOOKS                                                                           \
    "hooks_at = CASE WHEN " CANCEL_OWES_HOOKS " THEN now() ELSE r.hooks_at END, "                  \
    "hooks_attempts = CASE WHEN " CANCEL_OWES_HOOKS " THEN 0 ELSE r.hooks_attempts END, "
/* Retry and release at shutdown (runs_retry, runs_release): back to queued
 * and pending. */
#define SET_REQUEUE SET_HAND_BACK("'queued'", "'pending'", "NULL")
/* The hand-over of an action that started an external job (runs_wait):
 * to waiting; the outcome stays pending. */
#define SET_WAIT SET_HAND_BACK("'waiting'", "r.outcome", "NULL")
/* The orphan's attempt was its last. */
#define EXHAUSTED "r.attempt >= r.max_attempts"
/* Orphan rescue (runs_rescue): back to queued, or completed/failed when
 * its attempts are spent. */
#define SET_RESCUE                                                                                 \
    SET_HAND_BACK("CASE WHEN " EXHAUSTED " THEN 'completed' ELSE 'queued' END",                    \
                  "CASE WHEN " EXHAUSTED " THEN 'failed' ELSE 'pending' END",                      \
                  "CASE WHEN " EXHAUSTED " THEN now() END")

/* ---- approvals (migration 018) ---- */

/* run_awaits_approval, over a runs row whose columns are prefixed p ("r.";
 * "" is the predicate of migration 018's partial indexes). */
#define AWAITING_APPROVAL(p) p "approval_state = 'pending' AND " p "status = 'waiting'"
/* The columns of a new run (submission, retry) that approval decides, and
 * their values: timeout_s (SQL text, an integer) NULL for a run type
 * without approval, whose runs are queued; otherwise the run waits,
 * pending, until timeout_s after it is due (due: SQL text, the run's
 * run_at, NULL for now), and then on_timeout decides. Migration 020's
 * opsrun_follow_ups writes the same for a follow-up. */
#define APPROVAL_INSERT_COLS "status, approval_state, approval_expires_at, approval_on_timeout"
#define APPROVAL_INSERT_VALUES(timeout_s, on_timeout, due)                                         \
    "CASE WHEN " timeout_s " IS NULL THEN 'queued' ELSE 'waiting' END, "                           \
    "CASE WHEN " timeout_s " IS NOT NULL THEN 'pending' END, "                                     \
    "greatest(now(), " due ") + make_interval(secs => " timeout_s "), "                            \
    "CASE WHEN " timeout_s " IS NOT NULL THEN " on_timeout " END"
/* The "submitted" event of a new run, over the CTE of the inserted rows:
 * one awaiting approval says so, and until when. (The notifications of an
 * approval request belong in the statement that writes this event.) */
#define SUBMITTED_MESSAGE                                                                          \
    "CASE WHEN approval_state = 'pending' THEN 'submitted; awaiting approval until ' || "          \
    "opsrun_ts(approval_expires_at) ELSE 'submitted' END"
/* The decision reached a run awaiting approval: by (SQL text) decided,
 * approved ends in queued, due now (or at its run_at when later): it then
 * starts as any queued run. */
#define SET_APPROVED(state, by)                                                                    \
    "status = 'queued', approval_state = " state ", approval_decided_by = " by ", "                \
    "approval_decided_at = now(), run_at = greatest(r.run_at, now()), updated_at = now(), "
/* Rejected ends the run completed/cancelled, with error (SQL text). */
#define SET_REJECTED(state, by, error)                                                             \
    "status = 'completed', outcome = 'cancelled', completed_at = now(), error = " error ", "       \
    "approval_state = " state ", approval_decided_by = " by ", approval_decided_at = now(), "      \
    "updated_at = now(), "
/* The approval expired: the run's own approval_on_timeout decides. */
#define ON_TIMEOUT_APPROVE "r.approval_on_timeout = 'approve'"
#define SET_EXPIRED(error)                                                                         \
    "status = CASE WHEN " ON_TIMEOUT_APPROVE " THEN 'queued' ELSE 'completed' END, "               \
    "outcome = CASE WHEN " ON_TIMEOUT_APPROVE " THEN r.outcome ELSE 'cancelled' END, "             \
    "completed_at = CASE WHEN " ON_TIMEOUT_APPROVE " THEN NULL ELSE now() END, "                   \
    "run_at = CASE WHEN " ON_TIMEOUT_APPROVE " THEN greatest(r.run_at, now()) ELSE r.run_at END, " \
    "error = CASE WHEN " ON_TIMEOUT_APPROVE " THEN r.error ELSE " error " END, "                   \
    "approval_state = 'expired', approval_decided_by = 'system', approval_decided_at = now(), "    \
    "updated_at = now(), "

/* ---- concurrency keys (migration 022) ---- */

/* The error of a held run that ends (error: SQL text, the holder's, maybe
 * NULL) with outcome (SQL text): one that ends cancelled without an error
 * of its own keeps the one it has, the "superseded" a newer run of its key
 * wrote while it ran. */
#define SET_END_ERROR(outcome, error)                                                              \
    "error = CASE WHEN " outcome " = 'cancelled' AND " error " IS NULL THEN r.error ELSE " error   \
    " END, "
/* The same for a hand-back (retry): a run asked to cancel ends cancelled,
 * and keeps the error it has, if any. */
#define SET_HAND_BACK_ERROR(error)                                                                 \
    "error = CASE WHEN " CANCEL_ASKED " THEN coalesce(r.error, " error ") ELSE " error " END, "

/* The terminal hooks of a run that recorded remote preparation
 * (cleanup_due, migration 006) become due now where ends holds: the one way
 * a run that ends anywhere but in the poller gets its cleanup. */
#define SET_CLEANUP_IF(ends)                                                                       \
    "hooks_at = CASE WHEN r.cleanup_due AND (" ends ") THEN now() ELSE r.hooks_at END, "           \
    "hooks_attempts = CASE WHEN r.cleanup_due AND (" ends ") THEN 0 ELSE r.hooks_attempts END, "

#endif
