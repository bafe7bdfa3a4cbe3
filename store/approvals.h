/* store/approvals.h — runs awaiting a person's approval (migration 018):
 * the decision of a person (approve, reject), and the decision at expiry
 * that the run's on_timeout makes. Each is one statement, fenced on the
 * run still awaiting approval, that writes the run and its event together,
 * so of two decisions on one run exactly one is written. On the caller's
 * db handle (one thread at a time). Functions return ST_OK or a failure
 * with *err filled. */
#ifndef OPSRUN_STORE_APPROVALS_H
#define OPSRUN_STORE_APPROVALS_H

#include "common/common.h"
#include "store/runs.h"

struct db;

/* A person's decision on run id of tenant. */
struct approval_decision {
    const char *tenant, *id;
    bool approve;        /* approve; false: reject */
    const char *by;      /* who decides: a token's name, or "anonymous" */
    const char *comment; /* NULL: none */
};
/* Writes the decision: approved, the run is queued (due now, or at its
 * run_at when later); rejected, it completes cancelled with error code
 * "rejected". On ST_OK *out is the run as written (run_free).
 * ST_NOT_FOUND when the run does not exist; ST_CONFLICT when it does not
 * await approval (any more), with err naming its status and approval. */
enum status store_approvals_decide(struct db *db, const struct approval_decision *d,
                                   struct run **out, struct error *err) WUR;

/* Decides up to batch runs whose approval expired (approval_expires_at
 * passed, by the database's clock), each as its on_timeout says: approved
 * ones are queued, rejected ones complete cancelled with error code
 * "approval_expired". One statement; runs another transaction holds are
 * left for the next call. *approved and *rejected get how many; fn
 * (optional) is called per run type with the rejected ones (outcome
 * cancelled). */
enum status store_approvals_expire(struct db *db, int batch, int *approved, int *rejected,
                                   run_ended_fn fn, void *arg, struct error *err) WUR;
/* Milliseconds until the next run awaiting approval expires, by the
 * database's clock: 0 when one is due, -1 when no run awaits approval. */
enum status store_approvals_next(struct db *db, int64_t *ms, struct error *err) WUR;

#endif
