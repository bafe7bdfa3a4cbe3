/* store/runs_engine.c — the statements the engine runs: claim, fenced
 * writes by the owning attempt, heartbeats, orphan rescue, retention. */
#include "store/runs.h"

#include "store/runs_internal.h"

#include <stdlib.h>
#include <string.h>

/* The result of a hand-back: the rows written, and how many of them ended
 * (a run asked to cancel meanwhile ends cancelled instead of going back). */
#define COUNT_ENDED "count(*), count(*) FILTER (WHERE status = 'completed')"
/* The event message of a retry or release (a hand-back). */
#define CANCELLED_OR(message) HAND_BACK_MESSAGE("'cancelled while running'", message)

/* Only what executing a run needs (claim_row), not its API representation:
 * building that cost more than the claim itself. The claim of migration
 * 022: rate limits (migration 016) and tenant caps as arrays, NULL for
 * none. */
static const struct stmt S_CLAIM = {
    "runs_claim_fair",
    "SELECT r.tenant, r.id, r.type, r.status, r.outcome, r.attempt, r.max_attempts, "
    "(extract(epoch FROM r.deadline_at - now()) * 1000)::bigint, "
    "(extract(epoch FROM r.created_at) * 1000000)::bigint, r.input::text, "
    "extract(epoch FROM r.updated_at - r.run_at)::float8, "
    "extract(epoch FROM r.updated_at - r.started_at)::float8 "
    "FROM opsrun_claim($1, $2::int, $3::int, $4::text[], $5::int[], $6::text[], $7::int[], "
    "$8::bigint[], $9::text[], $10::int[], $11::int) AS r"};
/* The next delayed run (ms ahead), the newest and the oldest due run (ms
 * ago); store_runs_next_due compares their ages with how long the claim
 * before it took. The first two are one step each on runs_queued_at (the
 * newest due run may be one held for its key: a claim again at most); so
 * is the oldest due run while no run is held, else it is the earliest of
 * each tenant's that is not held (opsrun_ready_tenants, a step per tenant
 * and priority on runs_ready, migration 022). Then whether a run is held
 * for its key (one step on runs_conc_held). With unnamed statements,
 * opsrun_next_due (migration 027): planning this cost twenty times
 * running it. */
static const struct stmt S_NEXT_DUE = {
    "runs_next_due",
    "SELECT ceil(extract(epoch FROM (SELECT min(run_at) FROM runs WHERE status = 'queued' AND "
    "run_at > now()) - now()) * 1000)::bigint, floor(extract(epoch FROM now() - "
    "(SELECT max(run_at) FROM runs WHERE status = 'queued' AND run_at <= now())) * 1000)::bigint, "
    "floor(extract(epoch FROM now() - CASE WHEN EXISTS (SELECT 1 FROM runs WHERE conc_held AND "
    "status = 'queued') THEN (SELECT min(t.run_at) FROM opsrun_ready_tenants() t WHERE t.run_at "
    "<= now()) ELSE (SELECT min(run_at) FROM runs WHERE status = 'queued' AND run_at <= now()) "
    "END) * 1000)::bigint, EXISTS (SELECT 1 FROM runs WHERE conc_held AND status = 'queued')"};
static const struct stmt S_NEXT_DUE_FN = {"runs_next_due_fn", "SELECT * FROM opsrun_next_due()"};
static const struct stmt S_CONC_SWEEP = {"runs_conc_sweep", "SELECT opsrun_conc_sweep()"};
/* Looks at the markers first, so that a sweep with none takes no lock. */
static const struct stmt S_WF_SWEEP = {
    "runs_wf_sweep",
    "SELECT CASE WHEN EXISTS (SELECT 1 FROM wf_due) THEN opsrun_wf_sweep($1::int) ELSE 0 END"};
static const struct stmt S_PROGRESS = {
    "runs_progress",
    "WITH upd AS (UPDATE runs r SET progress = $5::smallint, step = $6, updated_at = now() "
    "WHERE " FENCE " RETURNING r.tenant, r.id, r.status, r.outcome, r.progress, r.step, "
    "r.created_at), " EVENT_FROM_UPD("'progress'", "NULL") " SELECT count(*) FROM upd"};
/* clang-format off */
static const struct stmt S_FINISH = {
    "runs_finish",
    "WITH upd AS (UPDATE runs r SET status = 'completed', outcome = $5, result = $6::jsonb, "
    SET_END_ERROR("$5", "$7::jsonb") "summary_counts = $8::jsonb, failure_summary = $9::jsonb, "
    "progress = CASE WHEN $5 = 'succeeded' THEN 100 ELSE r.progress END, "
    "completed_at = now(), updated_at = now(), heartbeat_at = NULL, deadline_at = NULL, "
    SET_CLEANUP_IF("true") "cleanup_due = false WHERE " FENCE " "
    "RETURNING r.tenant, r.id, r.status, r.outcome, r.progress, r.step, r.created_at), "
    EVENT_FROM_UPD("'status'", "$10") " SELECT count(*) FROM upd"};
/* clang-format on */
/* store_runs_finish for many runs in one statement: $2 is a JSON array of
 * {tenant, id, attempt, outcome, result, error, summary_counts,
 * failure_summary, message}; each row is fenced on its own ($1 the worker),
 * and gets its terminal event after its row is locked, as in runs_finish. */
/* The end of each run of $2, with its last log lines (migration 021): $3
 * holds each row's lines (its "i"-th element, NULL for none) as the engine
 * wrote them, so they are checked as json, never parsed into jsonb; the
 * UPDATE takes their seqs, and lg writes their chunk after the event (the
 * order of the tables in the text is the order of their locks, which the
 * partition drop takes the same way). lg takes a row's lines by subscript:
 * joined to $2's rows, the array was read again for every row and the
 * UPDATE copied each joined row whole for its rechecks, 7 % of what the
 * backend spent on a batch (migration 032). With unnamed statements,
 * opsrun_finish_batch (migrations 027 and 032), the same statement in
 * PL/pgSQL. */
/* clang-format off */
static const struct stmt S_FINISH_BATCH = {
    "runs_finish_batch",
    "WITH b AS (SELECT * FROM jsonb_to_recordset($2::jsonb) AS b(tenant text, id text, "
        "attempt int, outcome text, result jsonb, error jsonb, summary_counts jsonb, "
        "failure_summary jsonb, message text, log_n int, log_dropped bigint, i int)), "
    "upd AS (UPDATE runs r SET status = 'completed', outcome = b.outcome, result = b.result, "
        SET_END_ERROR("b.outcome", "b.error") "summary_counts = b.summary_counts, "
        "failure_summary = b.failure_summary, "
        "progress = CASE WHEN b.outcome = 'succeeded' THEN 100 ELSE r.progress END, "
        "completed_at = now(), updated_at = now(), heartbeat_at = NULL, deadline_at = NULL, "
        "log_seq = r.log_seq + coalesce(b.log_n, 0), "
        SET_CLEANUP_IF("true") "cleanup_due = false FROM b WHERE r.tenant = b.tenant AND "
        "r.id = b.id AND r.worker_id = $1 AND r.attempt = b.attempt AND r.status IN "
        HELD_STATUSES " RETURNING r.tenant, r.id, r.status, r.outcome, r.progress, r.step, "
        "r.created_at, b.message, r.log_seq, b.attempt, b.i, b.log_n, b.log_dropped), "
    EVENT_FROM_UPD("'status'", "message") ", "
    "lg AS (INSERT INTO run_logs (tenant, run_id, run_created_at, attempt, first_seq, "
        "last_seq, dropped, lines) SELECT tenant, id, created_at, attempt, "
        "log_seq - log_n + 1, log_seq, coalesce(log_dropped, 0), ($3::text[])[i]::json FROM upd "
        "WHERE log_n > 0) "
    "SELECT tenant, id FROM upd"};
static const struct stmt S_FINISH_BATCH_FN = {
    "runs_finish_batch_fn", "SELECT * FROM opsrun_finish_batch($1, $2::jsonb, $3::text[])"};
/* A run asked to cancel meanwhile ends cancelled (SET_REQUEUE), and keeps
 * the error it has (SET_HAND_BACK_ERROR). */
static const struct stmt S_RETRY = {
    "runs_retry",
    "WITH upd AS (UPDATE runs r SET " SET_REQUEUE SET_CLEANUP_IF(CANCEL_ASKED)
        "run_at = now() + make_interval(secs => $5::bigint / 1000.0), "
        SET_HAND_BACK_ERROR("$6::jsonb")
        "worker_id = CASE WHEN " CANCEL_ASKED " THEN r.worker_id END, "
        "heartbeat_at = NULL, deadline_at = NULL, updated_at = now() "
        "WHERE " FENCE " RETURNING r.tenant, r.id, r.status, r.outcome, r.progress, "
        "r.step, r.created_at), "
    EVENT_FROM_UPD("'status'", CANCELLED_OR("$7")) " SELECT " COUNT_ENDED " FROM upd"};
/* clang-format on */
static const struct stmt S_RELEASE = {
    "runs_release",
    "WITH upd AS (UPDATE runs r SET " SET_REQUEUE SET_CLEANUP_IF(
        CANCEL_ASKED) "attempt = CASE WHEN " CANCEL_ASKED " THEN r.attempt ELSE r.attempt - 1 END, "
                      "worker_id = NULL, run_at = now(), heartbeat_at = NULL, deadline_at = NULL, "
                      "updated_at = now() WHERE " FENCE
                      " RETURNING r.tenant, r.id, r.status, r.outcome, r.progress, "
                      "r.step, r.created_at), " EVENT_FROM_UPD(
                          "'status'", CANCELLED_OR("format('released by %s at shutdown', "
                                                   "$3::text)")) " SELECT " COUNT_ENDED
                                                                 " FROM upd"};
static const struct stmt S_SAVE_STATE = {
    "runs_save_state",
    "WITH upd AS (UPDATE runs r SET poll_state = $5::jsonb, cleanup_due = $6::bool "
    "WHERE " FENCE " RETURNING 1) SELECT count(*) FROM upd"};
static const struct stmt S_LOAD_STATE = {
    "runs_load_state",
    "SELECT r.cleanup_due, coalesce(r.poll_state, '{}')::text FROM runs r WHERE " FENCE};
/* Only heartbeat_at changes, which no index covers: a HOT update. */
static const struct stmt S_HEARTBEAT = {
    "runs_heartbeat",
    "UPDATE runs r SET heartbeat_at = now() FROM unnest($2::text[], $3::text[], $4::int[]) "
    "AS h(tenant, id, attempt) WHERE r.worker_id = $1 AND r.tenant = h.tenant AND r.id = h.id "
    "AND r.attempt = h.attempt AND r.status IN " HELD_STATUSES " "
    "RETURNING r.tenant, r.id, r.attempt"};
static const struct stmt S_CANCELLING = {
    "runs_cancelling", "SELECT tenant, id, attempt FROM runs WHERE worker_id = $1 AND "
                       "status = 'cancelling'"};
/* The held runs are read through runs_held, all of them (at most
 * queue.max_running), and sorted by heartbeat (migration 014). */
/* clang-format off */
static const struct stmt S_RESCUE = {
    "runs_rescue",
    "WITH o AS (SELECT tenant, id, worker_id FROM runs WHERE status IN " HELD_STATUSES " AND "
        "heartbeat_at < now() - make_interval(secs => $1::int) ORDER BY heartbeat_at "
        "LIMIT $2::int FOR UPDATE SKIP LOCKED), "
    "upd AS (UPDATE runs r SET " SET_RESCUE SET_CLEANUP_IF(CANCEL_ASKED " OR " EXHAUSTED)
        "error = CASE WHEN " CANCEL_ASKED " THEN r.error ELSE jsonb_build_object('code', "
        "'orphaned', 'message', format('worker %s stopped heartbeating during attempt %s', "
        "r.worker_id, r.attempt)) END, "
        "worker_id = CASE WHEN " CANCEL_ASKED " OR " EXHAUSTED " THEN r.worker_id END, "
        "run_at = now(), heartbeat_at = NULL, deadline_at = NULL, updated_at = now(), "
        "log_seq = r.log_seq + 1 "
        "FROM o WHERE r.tenant = o.tenant AND r.id = o.id "
        "RETURNING r.tenant, r.id, r.type, r.status, r.outcome, r.progress, r.step, "
        "r.created_at, r.attempt, r.log_seq, o.worker_id AS lost_worker), "
    EVENT_FROM_UPD("'status'", "'orphan rescued: heartbeat went stale'") ", "
    LOG_LINE_FROM_UPD("format('attempt %s lost: worker %s stopped heartbeating; %s', attempt, "
        "lost_worker, CASE WHEN status = 'queued' THEN 'the run is queued for another attempt' "
        "WHEN outcome = 'cancelled' THEN 'it was being cancelled: the run ended cancelled' "
        "ELSE 'no attempts left: the run ended failed' END)") " "
    "SELECT type, status, outcome, count(*) FROM upd GROUP BY 1, 2, 3"};
/* clang-format on */
/* Deletes a batch of expired runs. Their events stay in their partition of
 * run_events until retention drops it (migration 013), except those in
 * run_events_unknown (written without the run's creation time) and in
 * run_events_default, which no partition drop would reach: u and x delete
 * them with their run, as y does their log lines in run_logs_default
 * (migration 021). m raises the pruned-events mark (migration 004) to
 * the highest event id of the batch, one index probe per run in the
 * partition of its creation time; its subquery sees the events as they were
 * before the statement. p deletes the runs' rows in run_polls: a waiting
 * run cancelled leaves its row for the next claim of its type, which never
 * comes when no replica polls that type any more. A completed run never
 * waits again, so no trigger can want the row back; no claim waits for the
 * runs rows locked here (its UPDATE of runs matches waiting runs only).
 * Only runs that waited (they have an external id) can have a row, and
 * they are looked up by key, whatever the plan thinks of d's size: joined
 * as a whole, a run_polls of 100,000 rows was hashed for every batch. */
static const struct stmt S_PRUNE = {
    "runs_prune",
    "WITH d AS (SELECT tenant, id, created_at, external_id IS NOT NULL AS waited FROM runs "
    "WHERE status = 'completed' AND "
    "completed_at < now() - make_interval(secs => $1::bigint) ORDER BY completed_at "
    "LIMIT $2::int FOR UPDATE SKIP LOCKED), "
    "m AS (UPDATE run_events_pruned SET upto = greatest(upto, (SELECT max((SELECT max(e.id) "
    "FROM run_events e WHERE e.tenant = d.tenant AND e.run_id = d.id AND e.run_created_at IN "
    "(d.created_at, 'infinity'))) FROM d)) WHERE EXISTS (SELECT 1 FROM d)), "
    "u AS (DELETE FROM run_events e USING d WHERE e.tenant = d.tenant AND e.run_id = d.id "
    "AND e.run_created_at = 'infinity'), "
    "x AS (DELETE FROM run_events_default e USING d WHERE e.tenant = d.tenant AND "
    "e.run_id = d.id), "
    "y AS (DELETE FROM run_logs_default l USING d WHERE l.tenant = d.tenant AND "
    "l.run_id = d.id AND l.run_created_at = d.created_at), "
    "p AS (DELETE FROM run_polls p USING d WHERE d.waited AND p.tenant = ANY (ARRAY(SELECT "
    "DISTINCT tenant FROM d WHERE waited)) AND p.run_id = ANY (ARRAY(SELECT id FROM d WHERE "
    "waited)) AND p.tenant = d.tenant AND p.run_id = d.id) "
    "DELETE FROM runs r USING d WHERE r.tenant = d.tenant AND r.id = d.id"};
static const struct stmt S_QUEUE_AGE = {
    "runs_queue_age",
    "SELECT coalesce((extract(epoch FROM now() - min(run_at)) * 1000)::bigint, 0) FROM runs "
    "WHERE status = 'queued' AND run_at <= now()"};
static const struct stmt S_COUNTS = {
    "runs_counts",
    "SELECT s, coalesce(c.n, 0) FROM unnest(ARRAY['queued', 'running', 'waiting', 'cancelling']) "
    "AS s LEFT JOIN (SELECT status, count(*) AS n FROM runs WHERE status <> 'completed' "
    "GROUP BY status) c ON c.status = s"};
/* The queued runs held for their key, per group (runs_conc_held holds
 * exactly them), with a 0 for each group of $1 that has none; at most $2
 * groups, by name. */
static const struct stmt S_HELD = {
    "runs_held_by_group",
    "WITH h AS (SELECT conc_group AS g, count(*) AS n FROM runs "
    "WHERE conc_held AND status = 'queued' GROUP BY conc_group) "
    "SELECT a.g, coalesce(h.n, 0) FROM (SELECT unnest($1::text[]) AS g UNION SELECT g FROM h) a "
    "LEFT JOIN h ON h.g = a.g ORDER BY a.g LIMIT $2::int"};
static const struct stmt S_NOTIFY = {
    "runs_notify", "SELECT CASE WHEN $1::bool THEN pg_notify('opsrun_queue', '') END, "
                   "CASE WHEN $2::bool THEN pg_notify('opsrun_events', '') END, "
                   "CASE WHEN $3::text IS NOT NULL THEN pg_notify('opsrun_logs', $3) END"};

/* A Postgres array literal of text values; names are [A-Za-z0-9_.-]. */
static char *pg_cap_array(const int *caps, size_t n)
{
    size_t cap = 3 + n * 12, len = 0;
    char *s = xmalloc(cap);

    s[len++] = '{';
    for (size_t i = 0; i < n; i++) {
        if (caps[i] > 0)
            len += xsnprintf(s + len, cap - len, "%s%d", i ? "," : "", caps[i]);
        else
            len += xsnprintf(s + len, cap - len, "%sNULL", i ? "," : "");
    }
    xsnprintf(s + len, cap - len, "}");
    return s;
}

/* The limits of the n types as three arrays (name, limit, window; NULLs
 * for a type without one), into p[0..3). */
static void rate_arrays(const struct rate_limit *const *rates, size_t n, char *p[3])
{
    const char **names = xcalloc(n ? n : 1, sizeof(*names));
    size_t cap = 3 + n * 22, ll = 0, pl = 0;

    p[1] = xmalloc(cap);
    p[2] = xmalloc(cap);
    ll = pl = xsnprintf(p[1], cap, "{");
    xsnprintf(p[2], cap, "{");
    for (size_t i = 0; i < n; i++) {
        names[i] = rates[i] ? rates[i]->name : NULL;
        if (rates[i]) {
            ll += xsnprintf(p[1] + ll, cap - ll, "%s%d", i ? "," : "", rates[i]->limit);
            pl +=
                xsnprintf(p[2] + pl, cap - pl, "%s%lld", i ? "," : "", (long long)rates[i]->per_ms);
        } else {
            ll += xsnprintf(p[1] + ll, cap - ll, "%sNULL", i ? "," : "");
            pl += xsnprintf(p[2] + pl, cap - pl, "%sNULL", i ? "," : "");
        }
    }
    xsnprintf(p[1] + ll, cap - ll, "}");
    xsnprintf(p[2] + pl, cap - pl, "}");
    p[0] = db_text_array(names, n);
    free(names);
}

/* A claimed run from a row of S_CLAIM. */
static enum status claim_row(const PGresult *r, int row, struct run **out, struct error *err)
{
    json_error_t jerr;
    json_t *input = json_loads(db_val(r, row, 9), JSON_DECODE_ANY, &jerr);
    struct run *run;

    *out = NULL;
    if (!input)
        return error_set(err, ST_INTERNAL, "could not parse the input of run \"%s\": %s",
                         db_val(r, row, 1), jerr.text);
    run = xcalloc(1, sizeof(*run));
    run->input = input;
    run->tenant = xstrdup(db_val(r, row, 0));
    run->id = xstrdup(db_val(r, row, 1));
    run->type = xstrdup(db_val(r, row, 2));
    run->attempt = (int)db_i64(r, row, 5);
    run->max_attempts = (int)db_i64(r, row, 6);
    run->has_deadline = db_val(r, row, 7) != NULL;
    run->deadline_left_ms = db_i64(r, row, 7);
    run->created_us = db_i64(r, row, 8);
    run->claim_due_s = atof(db_val(r, row, 10));
    run->claim_ran_s = atof(db_val(r, row, 11));
    if (!run_status_parse(db_val(r, row, 3), &run->status) ||
        !run_outcome_parse(db_val(r, row, 4), &run->outcome)) {
        error_set(err, ST_INTERNAL,
                  "could not parse run \"%s\": unknown status \"%s\" or outcome \"%s\"", run->id,
                  db_val(r, row, 3), db_val(r, row, 4));
        run_free(run);
        return ST_INTERNAL;
    }
    *out = run;
    return ST_OK;
}

/* An int[] literal of v[0..n), 0 included as it is. */
static char *pg_int_array(const int *v, size_t n)
{
    size_t cap = 3 + n * 12, len = 0;
    char *s = xmalloc(cap);

    len += xsnprintf(s, cap, "{");
    for (size_t i = 0; i < n; i++)
        len += xsnprintf(s + len, cap - len, "%s%d", i ? "," : "", v[i]);
    xsnprintf(s + len, cap - len, "}");
    return s;
}

/* The claim's rows as runs, into *out (a heap array) and *n. */
static enum status claim_rows(PGresult *r, struct run ***out, size_t *n, struct error *err)
{
    enum status st = ST_OK;

    /* An array of pointers (see .clang-tidy). NOLINTNEXTLINE(bugprone-sizeof-expression) */
    *out = xcalloc((size_t)PQntuples(r) + 1, sizeof(**out));
    for (int i = 0; i < PQntuples(r); i++) {
        struct run *run;
        st = claim_row(r, i, &run, err);
        if (st != ST_OK)
            break;
        (*out)[(*n)++] = run;
    }
    PQclear(r);
    return st;
}

enum status store_runs_claim_fair(struct db *db, const char *worker_id, int limit, int max_running,
                                  const char *const *types, const int *caps,
                                  const struct rate_limit *const *rates, size_t ntypes,
                                  const struct claim_tenants *tenants, struct run ***out, size_t *n,
                                  struct error *err)
{
    char lim[16], maxr[16], tcap[16], *ra[3] = {NULL, NULL, NULL}, *tn = NULL, *tc = NULL;
    char *tarr = db_text_array(types, ntypes), *carr = pg_cap_array(caps, ntypes);
    const char *p[11] = {worker_id, lim, maxr, tarr, carr};
    bool rated = false;
    PGresult *r;
    enum status st;

    for (size_t i = 0; rates && i < ntypes; i++)
        rated |= rates[i] != NULL;
    if (rated) {
        rate_arrays(rates, ntypes, ra);
        p[5] = ra[0], p[6] = ra[1], p[7] = ra[2];
    }
    if (tenants && tenants->n > 0) {
        p[8] = tn = db_text_array(tenants->names, tenants->n);
        p[9] = tc = pg_int_array(tenants->caps, tenants->n);
    }
    if (tenants && tenants->default_cap > 0)
        p[10] = tcap;
    xsnprintf(lim, sizeof(lim), "%d", limit);
    xsnprintf(maxr, sizeof(maxr), "%d", max_running);
    xsnprintf(tcap, sizeof(tcap), "%d", tenants ? tenants->default_cap : 0);
    *out = NULL;
    *n = 0;
    st = db_run(db, &S_CLAIM, 11, p, &r, err);
    free(tarr);
    free(carr);
    free(tn);
    free(tc);
    for (size_t i = 0; i < 3; i++)
        free(ra[i]);
    if (st != ST_OK)
        return st;
    return claim_rows(r, out, n, err);
}

enum status store_runs_claim(struct db *db, const char *worker_id, int limit, int max_running,
                             const char *const *types, const int *caps,
                             const struct rate_limit *const *rates, size_t ntypes,
                             struct run ***out, size_t *n, struct error *err)
{
    return store_runs_claim_fair(db, worker_id, limit, max_running, types, caps, rates, ntypes,
                                 NULL, out, n, err);
}

enum status store_runs_conc_sweep(struct db *db, int *released, struct error *err)
{
    PGresult *r;
    enum status st = db_run(db, &S_CONC_SWEEP, 0, NULL, &r, err);

    if (st != ST_OK)
        return st;
    if (released)
        *released = (int)db_i64(r, 0, 0);
    PQclear(r);
    return ST_OK;
}

enum status store_runs_wf_sweep(struct db *db, int limit, int *taken, struct error *err)
{
    char lim[16];
    const char *p[1] = {lim};
    PGresult *r;
    enum status st;

    xsnprintf(lim, sizeof(lim), "%d", limit);
    if ((st = db_run(db, &S_WF_SWEEP, 1, p, &r, err)) != ST_OK)
        return st;
    if (taken)
        *taken = (int)db_i64(r, 0, 0);
    PQclear(r);
    return ST_OK;
}

enum status store_runs_next_due(struct db *db, int64_t claim_began_us, int64_t *ms, bool *due_now,
                                struct error *err)
{
    PGresult *r;
    int64_t took_ms;
    enum status st = db_run(db, db_stmt_for(db, &S_NEXT_DUE, &S_NEXT_DUE_FN), 0, NULL, &r, err);

    if (st != ST_OK)
        return st;
    /* How long ago the claim began, measured now that the answer is here:
     * at least the time from the claim's start on the database to this
     * statement's now(), however late either reached the server. Measured
     * before the statement was sent, it fell short by that lateness (a few
     * ms on a loaded machine), and a run that came due just after the
     * claim's now() was taken as left behind: a retry, whose claim is timed
     * in whole milliseconds and may begin a hair before its run_at, then
     * waited for the poll, its wake-up spent on that claim. */
    took_ms = (clock_mono_us() - claim_began_us + 999) / 1000;
    *ms = db_val(r, 0, 0) ? db_i64(r, 0, 0) : -1;
    if (db_val(r, 0, 0) && *ms < 0)
        *ms = 0;
    if (db_val(r, 0, 1) && db_i64(r, 0, 1) <= took_ms)
        *ms = 0; /* due since the claim began, or maybe: claim again at once */
    *due_now = db_val(r, 0, 2) && db_i64(r, 0, 2) > took_ms;
    if (db_val(r, 0, 3)[0] == 't')
        *due_now = true; /* held for a key: a finish here may free it */
    PQclear(r);
    return ST_OK;
}

/* Runs a fenced statement whose result is one count; 0 rows = ST_LOST. */
static enum status run_fenced_ended(struct db *db, const struct stmt *s, int n, const char **p,
                                    const struct fence *f, bool *ended, struct error *err)
{
    char att[16];
    PGresult *r;
    enum status st;

    xsnprintf(att, sizeof(att), "%d", f->attempt);
    p[0] = f->tenant, p[1] = f->id, p[2] = f->worker_id, p[3] = att;
    if (ended)
        *ended = false;
    st = db_run(db, s, n, p, &r, err);
    if (st != ST_OK)
        return st;
    if (db_i64(r, 0, 0) == 0)
        st = error_set(err, ST_LOST, "run \"%s\" attempt %d is no longer held by %s", f->id,
                       f->attempt, f->worker_id);
    else if (ended)
        *ended = db_i64(r, 0, 1) > 0;
    PQclear(r);
    return st;
}

static enum status run_fenced(struct db *db, const struct stmt *s, int n, const char **p,
                              const struct fence *f, struct error *err)
{
    return run_fenced_ended(db, s, n, p, f, NULL, err);
}

enum status store_runs_progress(struct db *db, const struct fence *f, int progress,
                                const char *step, struct error *err)
{
    char pct[8];
    const char *p[6] = {0};

    xsnprintf(pct, sizeof(pct), "%d", progress < 0 ? 0 : progress > 100 ? 100 : progress);
    p[4] = pct;
    p[5] = step;
    return run_fenced(db, &S_PROGRESS, 6, p, f, err);
}

enum status store_runs_save_state(struct db *db, const struct fence *f, const json_t *state,
                                  bool cleanup_due, struct error *err)
{
    char *text = json_dumps(state, JSON_COMPACT);
    const char *p[6] = {0};
    enum status st;

    if (!text)
        return error_set(err, ST_INTERNAL, "could not encode the state of run \"%s\"", f->id);
    p[4] = text;
    p[5] = cleanup_due ? "true" : "false";
    st = run_fenced(db, &S_SAVE_STATE, 6, p, f, err);
    free(text);
    return st;
}

enum status store_runs_load_state(struct db *db, const struct fence *f, json_t **state,
                                  struct error *err)
{
    char att[16];
    const char *p[4] = {f->tenant, f->id, f->worker_id, att};
    PGresult *r;
    enum status st;

    *state = NULL;
    xsnprintf(att, sizeof(att), "%d", f->attempt);
    st = db_run(db, &S_LOAD_STATE, 4, p, &r, err);
    if (st != ST_OK)
        return st;
    if (PQntuples(r) == 0)
        st = error_set(err, ST_LOST, "run \"%s\" attempt %d is no longer held by %s", f->id,
                       f->attempt, f->worker_id);
    else if (db_val(r, 0, 0)[0] == 't')
        *state = json_loads(db_val(r, 0, 1), 0, NULL);
    PQclear(r);
    if (st == ST_OK && *state && !json_is_object(*state)) {
        json_decref(*state);
        *state = NULL;
    }
    return st;
}

enum status store_runs_finish(struct db *db, const struct fence *f, const struct run_result *res,
                              struct error *err)
{
    char *j[4] = {
        res->result ? json_dumps(res->result, JSON_COMPACT | JSON_ENCODE_ANY) : NULL,
        res->error ? json_dumps(res->error, JSON_COMPACT | JSON_ENCODE_ANY) : NULL,
        res->summary_counts ? json_dumps(res->summary_counts, JSON_COMPACT | JSON_ENCODE_ANY)
                            : NULL,
        res->failure_summary ? json_dumps(res->failure_summary, JSON_COMPACT | JSON_ENCODE_ANY)
                             : NULL,
    };
    const char *p[10] = {NULL, NULL, NULL, NULL, run_outcome_name(res->outcome),
                         j[0], j[1], j[2], j[3], res->message};
    enum status st = run_fenced(db, &S_FINISH, 10, p, f, err);

    for (size_t i = 0; i < ARRAY_LEN(j); i++)
        free(j[i]);
    return st;
}

/* The JSON row of one finish for S_FINISH_BATCH; absent members are NULL. */
static json_t *finish_row(const struct run_finish *f)
{
    json_t *o = json_pack("{s:s, s:s, s:i, s:s, s:s?}", "tenant", f->tenant, "id", f->id, "attempt",
                          f->attempt, "outcome", run_outcome_name(f->res.outcome), "message",
                          f->res.message);
    const struct {
        const char *key;
        const json_t *v;
    } js[] = {{"result", f->res.result},
              {"error", f->res.error},
              {"summary_counts", f->res.summary_counts},
              {"failure_summary", f->res.failure_summary}};

    if (!o)
        abort(); /* only on allocation failure: every member is a valid string */
    for (size_t i = 0; i < ARRAY_LEN(js); i++)
        if (js[i].v)
            json_object_set(o, js[i].key, (json_t *)js[i].v);
    if (f->log_nlines > 0) { /* the lines themselves go in $3, as they are */
        json_object_set_new(o, "log_n", json_integer(f->log_nlines));
        json_object_set_new(o, "log_dropped", json_integer(f->log_dropped));
    }
    return o;
}

/* Marks fin[k].written for the (tenant, id) pairs of r. */
static void finish_mark(PGresult *r, struct run_finish *fin, size_t n)
{
    for (int i = 0; i < PQntuples(r); i++)
        for (size_t k = 0; k < n; k++)
            if (!fin[k].written && strcmp(fin[k].id, db_val(r, i, 1)) == 0 &&
                strcmp(fin[k].tenant, db_val(r, i, 0)) == 0) {
                fin[k].written = true;
                break;
            }
}

enum status store_runs_finish_batch(struct db *db, const char *worker_id, struct run_finish *fin,
                                    size_t n, struct error *err)
{
    json_t *rows = json_array();
    const char **logs = xcalloc(n ? n : 1, sizeof(*logs));
    char *text, *logs_array;
    const char *p[3];
    PGresult *r;
    enum status st;

    for (size_t k = 0; k < n; k++) {
        fin[k].written = false;
        json_array_append_new(rows, finish_row(&fin[k]));
        json_object_set_new(json_array_get(rows, k), "i", json_integer((json_int_t)k + 1));
        logs[k] = fin[k].log_nlines > 0 ? fin[k].log_lines_json : NULL;
    }
    text = json_dumps(rows, JSON_COMPACT);
    json_decref(rows);
    logs_array = db_text_array(logs, n);
    free(logs);
    if (!text) {
        free(logs_array);
        return error_set(err, ST_INTERNAL, "could not encode %zu finished runs", n);
    }
    p[0] = worker_id;
    p[1] = text;
    p[2] = logs_array;
    st = db_run(db, db_stmt_for(db, &S_FINISH_BATCH, &S_FINISH_BATCH_FN), 3, p, &r, err);
    free(text);
    free(logs_array);
    if (st != ST_OK)
        return st;
    finish_mark(r, fin, n);
    PQclear(r);
    return ST_OK;
}

enum status store_runs_retry(struct db *db, const struct fence *f, int64_t delay_ms,
                             const json_t *error, bool *cancelled, struct error *err)
{
    char delay[24];
    char *e = error ? json_dumps(error, JSON_COMPACT) : NULL;
    const json_t *msg = error ? json_object_get(error, "message") : NULL;
    char *text = xasprintf("attempt %d failed, retrying in %lld ms: %s", f->attempt,
                           (long long)delay_ms, json_is_string(msg) ? json_string_value(msg) : "");
    const char *p[7] = {NULL, NULL, NULL, NULL, delay, e, text};
    enum status st;

    xsnprintf(delay, sizeof(delay), "%lld", (long long)delay_ms);
    st = run_fenced_ended(db, &S_RETRY, 7, p, f, cancelled, err);
    free(e);
    free(text);
    return st;
}

enum status store_runs_release(struct db *db, const struct fence *f, bool *cancelled,
                               struct error *err)
{
    const char *p[4];
    return run_fenced_ended(db, &S_RELEASE, 4, p, f, cancelled, err);
}

/* Calls fn for each (tenant, id, attempt) row of r; *n gets their number. */
static void run_refs(PGresult *r, int *n, run_ref_fn fn, void *arg)
{
    for (int i = 0; fn && i < PQntuples(r); i++)
        fn(arg, db_val(r, i, 0), db_val(r, i, 1), (int)db_i64(r, i, 2));
    if (n)
        *n = PQntuples(r);
    PQclear(r);
}

void run_refs_arrays(const struct run_ref *refs, size_t n, char **tenants, char **ids,
                     char **attempts)
{
    const char **t = xcalloc(n + 1, sizeof(*t));
    const char **i = xcalloc(n + 1, sizeof(*i));
    size_t cap = 3 + n * 12, len = 0;
    char *a = xmalloc(cap);

    a[len++] = '{';
    for (size_t k = 0; k < n; k++) {
        t[k] = refs[k].tenant;
        i[k] = refs[k].id;
        len += xsnprintf(a + len, cap - len, "%s%d", k ? "," : "", refs[k].attempt);
    }
    xsnprintf(a + len, cap - len, "}");
    *tenants = db_text_array(t, n);
    *ids = db_text_array(i, n);
    *attempts = a;
    free(t);
    free(i);
}

enum status store_runs_heartbeat(struct db *db, const char *worker_id, const struct run_ref *refs,
                                 size_t nrefs, int *held, run_ref_fn fn, void *arg,
                                 struct error *err)
{
    char *t, *i, *a;
    const char *p[4];
    PGresult *r = NULL;
    enum status st;

    run_refs_arrays(refs, nrefs, &t, &i, &a);
    p[0] = worker_id, p[1] = t, p[2] = i, p[3] = a;
    st = db_run(db, &S_HEARTBEAT, 4, p, &r, err);
    if (st == ST_OK)
        run_refs(r, held, fn, arg);
    free(t);
    free(i);
    free(a);
    return st;
}

enum status store_runs_cancelling(struct db *db, const char *worker_id, run_ref_fn fn, void *arg,
                                  struct error *err)
{
    PGresult *r;
    enum status st = db_run(db, &S_CANCELLING, 1, &worker_id, &r, err);

    if (st == ST_OK)
        run_refs(r, NULL, fn, arg);
    return st;
}

/* Runs s with two parameters; *count gets the rows it changed. */
static enum status run_count2(struct db *db, const struct stmt *s, const char *a, const char *b,
                              int *count, struct error *err)
{
    const char *p[2] = {a, b};

    return db_exec_count(db, s, 2, p, count, err);
}

enum status store_runs_rescue_each(struct db *db, int orphan_after_s, int batch, int *rescued,
                                   run_ended_fn fn, void *arg, struct error *err)
{
    char a[16], b[16];
    const char *p[2] = {a, b};
    PGresult *r;
    enum status st;

    xsnprintf(a, sizeof(a), "%d", orphan_after_s);
    xsnprintf(b, sizeof(b), "%d", batch);
    *rescued = 0;
    st = db_run(db, &S_RESCUE, 2, p, &r, err);
    if (st != ST_OK)
        return st;
    for (int i = 0; i < PQntuples(r); i++) {
        enum run_outcome o = OUTCOME_PENDING;
        int n = (int)db_i64(r, i, 3);
        *rescued += n;
        if (fn && strcmp(db_val(r, i, 1), "completed") == 0 &&
            run_outcome_parse(db_val(r, i, 2), &o))
            fn(arg, db_val(r, i, 0), o, n);
    }
    PQclear(r);
    return ST_OK;
}

enum status store_runs_rescue(struct db *db, int orphan_after_s, int batch, int *rescued,
                              struct error *err)
{
    return store_runs_rescue_each(db, orphan_after_s, batch, rescued, NULL, NULL, err);
}

enum status store_runs_prune(struct db *db, int64_t age_s, int batch, int *deleted,
                             struct error *err)
{
    char a[24], b[16];
    xsnprintf(a, sizeof(a), "%lld", (long long)age_s);
    xsnprintf(b, sizeof(b), "%d", batch);
    return run_count2(db, &S_PRUNE, a, b, deleted, err);
}

enum status store_runs_queue_age(struct db *db, int64_t *age_ms, struct error *err)
{
    PGresult *r;
    enum status st = db_run(db, &S_QUEUE_AGE, 0, NULL, &r, err);

    *age_ms = 0;
    if (st != ST_OK)
        return st;
    *age_ms = db_i64(r, 0, 0);
    PQclear(r);
    return ST_OK;
}

enum status store_runs_counts(struct db *db, json_t **out, struct error *err)
{
    PGresult *r;
    enum status st = db_run(db, &S_COUNTS, 0, NULL, &r, err);

    *out = NULL;
    if (st != ST_OK)
        return st;
    *out = json_object();
    for (int i = 0; i < PQntuples(r); i++)
        json_object_set_new(*out, db_val(r, i, 0), json_integer(db_i64(r, i, 1)));
    PQclear(r);
    return ST_OK;
}

enum status store_runs_held_by_group(struct db *db, const char *const *groups, size_t ngroups,
                                     struct conc_held_count *out, size_t max, size_t *n,
                                     struct error *err)
{
    char lim[16], *arr = db_text_array(groups, ngroups);
    const char *p[2] = {arr, lim};
    PGresult *r;
    enum status st;

    xsnprintf(lim, sizeof(lim), "%zu", max);
    *n = 0;
    st = db_run(db, &S_HELD, 2, p, &r, err);
    free(arr);
    if (st != ST_OK)
        return st;
    for (int i = 0; i < PQntuples(r) && *n < max; i++) {
        xsnprintf(out[*n].group, sizeof(out[*n].group), "%s", db_val(r, i, 0));
        out[(*n)++].n = db_i64(r, i, 1);
    }
    PQclear(r);
    return ST_OK;
}

enum status store_notify(struct db *db, bool queue, bool events, const char *logs,
                         struct error *err)
{
    const char *p[3] = {queue ? "t" : "f", events ? "t" : "f", logs};
    PGresult *r;
    enum status st = db_run(db, &S_NOTIFY, 3, p, &r, err);

    if (st == ST_OK)
        PQclear(r);
    return st;
}
