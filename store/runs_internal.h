/* store/runs_internal.h — SQL fragments and row parsing shared by
 * store/runs.c and store/runs_engine.c (run_refs_arrays). */
#ifndef OPSRUN_STORE_RUNS_INTERNAL_H
#define OPSRUN_STORE_RUNS_INTERNAL_H

#include "store/db_internal.h"
#include "store/run_state_sql.h"
#include "store/runs.h"

/* RETURNING list of a statement that writes runs AS r, and the matching
 * select list over a CTE of it; RUN_COLS reads a runs row "r" the same way. */
#define RUN_RET                                                                                    \
    "opsrun_run_json(r)::text AS j, r.tenant, r.id, r.type, r.status, r.outcome, r.attempt, "      \
    "r.max_attempts, (extract(epoch FROM r.deadline_at - now()) * 1000)::bigint AS dl, "           \
    "(extract(epoch FROM r.created_at) * 1000000)::bigint AS cus, r.progress, r.step"
#define RUN_OUT "j, tenant, id, type, status, outcome, attempt, max_attempts, dl, cus"
#define RUN_COLS                                                                                   \
    "opsrun_run_json(r)::text, r.tenant, r.id, r.type, r.status, r.outcome, r.attempt, "           \
    "r.max_attempts, (extract(epoch FROM r.deadline_at - now()) * 1000)::bigint, "                 \
    "(extract(epoch FROM r.created_at) * 1000000)::bigint"
#define RUN_NCOLS 10
/* The worker's fence ($1..$4): this run, this worker, this attempt, still
 * held. */
#define FENCE                                                                                      \
    "r.tenant = $1 AND r.id = $2 AND r.worker_id = $3 AND r.attempt = $4::int "                    \
    "AND r.status IN " HELD_STATUSES
/* The event row for each run in CTE "upd" (type and message as SQL); upd
 * returns the run's created_at, the partition key of run_events (migration
 * 013). */
#define EVENT_FROM_UPD(type, message)                                                              \
    "ev AS (INSERT INTO run_events (tenant, run_id, type, status, outcome, progress, step, "       \
    "message, run_created_at) SELECT tenant, id, " type                                            \
    ", status, outcome, progress, step, " message ", created_at FROM upd)"

/* One line of opsrun's own in the log of each run of the CTE "upd"
 * (migration 021), which took its seq (log_seq = r.log_seq + 1) and
 * returns tenant, id, created_at, attempt and log_seq; text is SQL over
 * upd's columns. Written after the event, as every writer of both does. */
#define LOG_LINE_FROM_UPD(text)                                                                    \
    "lg AS (INSERT INTO run_logs (tenant, run_id, run_created_at, attempt, first_seq, last_seq, "  \
    "lines) SELECT tenant, id, created_at, attempt, log_seq, log_seq, jsonb_build_array("          \
    "jsonb_build_array((extract(epoch FROM clock_timestamp()) * 1000000)::bigint, 'opsrun', " text \
    ")) FROM upd)"

/* The "submitted" event of each run a statement inserted (CTE "upd", its
 * rows with their approval columns): every insert of a run writes it. */
#define EVENT_SUBMITTED EVENT_FROM_UPD("'status'", SUBMITTED_MESSAGE)
/* runs.reacts of a new run of the given type (SQL): the transitions its
 * type's rules name (migration 017). */
#define REACTS_OF(type)                                                                            \
    "coalesce((SELECT t.reacts FROM run_type_rules t WHERE t.type = " type "), 0)"

/* Builds a run from the first RUN_NCOLS columns of row. On ST_OK *out is a
 * new run (run_free); on failure it is NULL and err says why. */
enum status run_from_row(const PGresult *r, int row, struct run **out, struct error *err) WUR;
/* Runs st and, when it returned a row, builds *out from it (else NULL).
 * With keep, the result of a row that became *out is handed over (PQclear)
 * for its further columns. */
enum status run_query_one(struct db *db, const struct stmt *st, int n, const char *const *params,
                          struct run **out, PGresult **keep, struct error *err) WUR;
/* The tenants, ids and attempts of refs as three PostgreSQL array
 * literals ({} when n is 0), each a new string (free). */
void run_refs_arrays(const struct run_ref *refs, size_t n, char **tenants, char **ids,
                     char **attempts);

#endif
