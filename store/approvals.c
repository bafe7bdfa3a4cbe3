/* store/approvals.c — decisions on runs awaiting approval
 * (store/approvals.h). The transitions are the state machine's
 * (store/run_state_sql.h: AWAITING_APPROVAL, SET_APPROVED, SET_REJECTED,
 * SET_EXPIRED); each statement writes the run and its status event
 * together, as every transition does. */
#include "store/approvals.h"

#include "store/runs_internal.h"

#include <string.h>

/* The decision's event message: who, and the comment when there is one. */
#define DECIDED_BY(what) "'" what " by ' || $3 || coalesce(': ' || $4, '')"

/* clang-format off */
/* A decision (set: the SET arms of the transition, comma-terminated; what:
 * "approved" or "rejected") fenced on the run still awaiting approval and
 * not yet expired (past expires_at, on_timeout decides, even before the
 * approvals thread's pass comes), with its status event. */
#define DECIDE(set, what)                                                                          \
    "WITH upd AS (UPDATE runs r SET " set "approval_comment = $4 "                                 \
    "WHERE r.tenant = $1 AND r.id = $2 AND " AWAITING_APPROVAL("r.") " "                           \
    "AND (r.approval_expires_at IS NULL OR r.approval_expires_at > now()) "                        \
    "RETURNING " RUN_RET ", r.created_at), " EVENT_FROM_UPD("'status'", DECIDED_BY(what))          \
    " SELECT " RUN_OUT " FROM upd"
static const struct stmt S_APPROVE = {
    "approvals_approve", DECIDE(SET_APPROVED("'approved'", "$3"), "approved")};
static const struct stmt S_REJECT = {
    "approvals_reject",
    DECIDE(SET_REJECTED("'rejected'", "$3", "jsonb_build_object('code', 'rejected', "
                                            "'message', " DECIDED_BY("rejected") ")"),
           "rejected")};
/* The due ones in the order they expired, those another transaction holds
 * (a decision under way) skipped; per run type and new status, how many. */
static const struct stmt S_EXPIRE = {
    "approvals_expire",
    "WITH due AS (SELECT r.tenant, r.id FROM runs r "
        "WHERE " AWAITING_APPROVAL("r.") " AND r.approval_expires_at <= now() "
        "ORDER BY r.approval_expires_at LIMIT $1::int FOR UPDATE SKIP LOCKED), "
    "upd AS (UPDATE runs r SET "
        SET_EXPIRED("jsonb_build_object('code', 'approval_expired', "
                    "'message', 'no decision by ' || opsrun_ts(r.approval_expires_at))")
        "approval_comment = NULL FROM due WHERE r.tenant = due.tenant AND r.id = due.id "
        "RETURNING r.tenant, r.id, r.type, r.status, r.outcome, r.progress, r.step, "
        "r.created_at), "
    EVENT_FROM_UPD("'status'", "CASE WHEN status = 'queued' "
                               "THEN 'approval expired: approved on timeout' "
                               "ELSE 'approval expired: rejected on timeout' END") " "
    "SELECT type, status, count(*) FROM upd GROUP BY 1, 2"};
static const struct stmt S_NEXT = {
    "approvals_next",
    "SELECT CASE WHEN t IS NULL THEN -1 "
        "ELSE greatest(0, ceil(extract(epoch FROM t - now()) * 1000))::bigint END "
    "FROM (SELECT min(r.approval_expires_at) AS t FROM runs r "
        "WHERE " AWAITING_APPROVAL("r.") ") x"};
/* clang-format on */

/* Nothing was decided: the run is gone, it does not await approval, or its
 * approval expired and on_timeout decides it. */
static enum status decide_refused(struct db *db, const struct approval_decision *d,
                                  struct error *err)
{
    struct run *run = NULL;
    enum status st = store_runs_get(db, d->tenant, d->id, &run, err);
    const json_t *a;
    const char *state, *expires, *on_timeout;

    if (st != ST_OK)
        return st;
    a = json_object_get(run->json, "approval");
    state = json_string_value(json_object_get(a, "state"));
    expires = json_string_value(json_object_get(a, "expires_at"));
    on_timeout = json_string_value(json_object_get(a, "on_timeout"));
    if (!json_is_object(a))
        st = error_set(err, ST_CONFLICT,
                       "run \"%s\" is not awaiting approval: its run type asks for none", d->id);
    else if (run->status == RUN_WAITING && state && strcmp(state, "pending") == 0)
        st = error_set(err, ST_CONFLICT,
                       "run \"%s\" is not awaiting approval: its approval expired at %s, and "
                       "on_timeout (%s) decides it",
                       d->id, expires ? expires : "?", on_timeout ? on_timeout : "reject");
    else
        st = error_set(err, ST_CONFLICT, "run \"%s\" is not awaiting approval: it is %s (%s)",
                       d->id, run_status_name(run->status), state ? state : "?");
    run_free(run);
    return st;
}

enum status store_approvals_decide(struct db *db, const struct approval_decision *d,
                                   struct run **out, struct error *err)
{
    const char *p[4] = {d->tenant, d->id, d->by, d->comment};
    enum status st = run_query_one(db, d->approve ? &S_APPROVE : &S_REJECT, 4, p, out, NULL, err);

    if (st == ST_OK && !*out)
        st = decide_refused(db, d, err);
    return st;
}

enum status store_approvals_expire(struct db *db, int batch, int *approved, int *rejected,
                                   run_ended_fn fn, void *arg, struct error *err)
{
    char lim[16];
    const char *p[1] = {lim};
    PGresult *r;
    enum status st;

    xsnprintf(lim, sizeof(lim), "%d", batch);
    *approved = *rejected = 0;
    if ((st = db_run(db, &S_EXPIRE, 1, p, &r, err)) != ST_OK)
        return st;
    for (int i = 0; i < PQntuples(r); i++) {
        int n = (int)db_i64(r, i, 2);
        if (strcmp(db_val(r, i, 1), "queued") == 0) {
            *approved += n;
            continue;
        }
        *rejected += n;
        if (fn)
            fn(arg, db_val(r, i, 0), OUTCOME_CANCELLED, n);
    }
    PQclear(r);
    return ST_OK;
}

enum status store_approvals_next(struct db *db, int64_t *ms, struct error *err)
{
    PGresult *r;
    enum status st = db_run(db, &S_NEXT, 0, NULL, &r, err);

    if (st != ST_OK)
        return st;
    *ms = db_i64(r, 0, 0);
    PQclear(r);
    return ST_OK;
}
