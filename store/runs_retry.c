/* store/runs_retry.c — a retry: a new run repeating a completed run that
 * did not succeed (store_runs_resubmit). The new row is built from the old
 * one by one INSERT ... SELECT, so the input is copied by the database and
 * the new run's "submitted" event is written in the same statement, as for
 * every other insert (store/runs.c). */
#include "store/runs.h"

#include "common/ids.h"
#include "store/runs_internal.h"

#include <string.h>

/* The run `of` ("o") may be retried. */
#define RETRYABLE "o.tenant = $1 AND o.id = $2 AND " RETRYABLE_RUN("o.")

/* Inserts nothing when an active run holds the identity (the unique index
 * runs_active_identity), or when `of` is gone or may not be retried. */
/* The new run's approval, when its type has one: $7 its timeout, $8
 * on_timeout. */
#define RESUBMIT_APPROVAL APPROVAL_INSERT_VALUES("$7::int", "$8", "NULL")
/* clang-format off */
static const struct stmt S_RESUBMIT = {
    "runs_resubmit",
    "WITH upd AS (INSERT INTO runs AS r (tenant, id, type, priority, max_attempts, timeout_s, "
    "input, identity_hash, request_hash, retry_of, initiator, reacts, " APPROVAL_INSERT_COLS ") "
    "SELECT o.tenant, $3::text, o.type, o.priority, $4::int, $5::int, o.input, o.identity_hash, "
    "o.request_hash, o.id, $6, " REACTS_OF("o.type") ", " RESUBMIT_APPROVAL " FROM runs o "
    "WHERE " RETRYABLE " ON CONFLICT DO NOTHING RETURNING " RUN_RET ", r.created_at, "
    "r.approval_state, r.approval_expires_at), " EVENT_SUBMITTED " SELECT " RUN_OUT " FROM upd"};
/* clang-format on */
/* The active run that holds the identity of `of`. */
static const struct stmt S_HOLDER = {
    "runs_resubmit_holder",
    "SELECT " RUN_COLS " FROM runs o JOIN runs r ON r.tenant = o.tenant "
    "AND r.identity_hash = o.identity_hash AND r.status IN " JOINABLE_STATUSES " WHERE " RETRYABLE};

/* Nothing was inserted and nothing holds the identity: say why. */
static enum status resubmit_refused(struct db *db, const struct run_resubmit *rs, struct error *err)
{
    struct run *o = NULL;
    enum status st = store_runs_get(db, rs->tenant, rs->of, &o, err);

    if (st != ST_OK)
        return st;
    if (!run_is_terminal(o) || o->outcome == OUTCOME_SUCCEEDED)
        st = error_set(err, ST_CONFLICT, "run \"%s\" cannot be retried: it is %s (%s)", o->id,
                       run_status_name(o->status), run_outcome_name(o->outcome));
    else
        st = error_set(err, ST_UNAVAILABLE, "could not settle the identity of run \"%s\"", rs->of);
    run_free(o);
    return st;
}

enum status store_runs_resubmit(struct db *db, const struct run_resubmit *rs, struct run **out,
                                bool *dedup, struct error *err)
{
    char maxa[16], tmo[16], atmo[16];
    const char *p[8] = {rs->tenant,
                        rs->of,
                        rs->id,
                        maxa,
                        tmo,
                        rs->initiator ? rs->initiator : "system",
                        rs->approval_timeout_s > 0 ? atmo : NULL,
                        rs->approve_on_timeout ? "approve" : "reject"};
    enum status st = ST_OK;

    xsnprintf(atmo, sizeof(atmo), "%d", rs->approval_timeout_s);
    xsnprintf(maxa, sizeof(maxa), "%d", rs->max_attempts);
    xsnprintf(tmo, sizeof(tmo), "%d", rs->timeout_s);
    *out = NULL;
    *dedup = false;
    /* The holder can complete between our insert and our lookup; the next
     * round then inserts. Three rounds bound it, as in store_runs_submit. */
    for (int round = 0; round < 3 && st == ST_OK && !*out; round++) {
        st = run_query_one(db, &S_RESUBMIT, 8, p, out, NULL, err);
        *dedup = false;
        if (st == ST_OK && !*out) {
            st = run_query_one(db, &S_HOLDER, 2, p, out, NULL, err);
            *dedup = true;
        }
    }
    if (st == ST_OK && !*out)
        st = resubmit_refused(db, rs, err);
    return st;
}
