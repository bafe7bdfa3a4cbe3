/* store/polls.c — the poll schedule of waiting runs (store/polls.h). */
#include "store/polls.h"

#include "store/runs_internal.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define INTERVAL_MS(p) "make_interval(secs => " p "::bigint / 1000.0)"
/* What a claim returns after RUN_RET: columns 12..16. */
#define CLAIM_COLS                                                                                 \
    "r.external_id, coalesce(r.poll_state, '{}')::text AS state, r.poll_count, "                   \
    "coalesce((extract(epoch FROM now() - r.poll_started_at) * 1000)::bigint, 0) AS waited_ms, "   \
    "r.hooks_attempts"
#define CLAIM_FIRST 12
/* RUN_RET for a claimed check: the same columns, but the run's JSON holds
 * only what a check, its action and its log read (the input, the
 * timestamps of waited_ms, the budget stored on the run), not the API's
 * whole run, which costs a claim more to build and the poller more to
 * parse than the rest of the check. */
#define CHECK_RUN_RET                                                                              \
    "json_build_object('id', r.id, 'tenant', r.tenant, 'type', r.type, 'status', r.status, "       \
    "'outcome', r.outcome, 'attempt', r.attempt, 'input', r.input, "                               \
    "'external_id', r.external_id, 'started_at', opsrun_ts(r.started_at), "                        \
    "'updated_at', opsrun_ts(r.updated_at), 'poll', json_build_object('max_checks', "              \
    "r.poll_max_checks, 'max_duration_s', r.poll_max_duration_s))::text AS j, r.tenant, r.id, "    \
    "r.type, r.status, "                                                                           \
    "r.outcome, r.attempt, r.max_attempts, "                                                       \
    "(extract(epoch FROM r.deadline_at - now()) * 1000)::bigint AS dl, "                           \
    "(extract(epoch FROM r.created_at) * 1000000)::bigint AS cus, r.progress, r.step"
/* The event message of the hand-over to waiting. */
#define WAIT_MESSAGE                                                                               \
    HAND_BACK_MESSAGE("'cancelled while starting external job ' || $5",                            \
                      "'waiting for external job ' || $5")

/* The hand-over to waiting; the run's row in run_polls comes from the
 * trigger of migration 012, in the same transaction. */
static const struct stmt S_WAIT = {
    "runs_wait",
    "WITH upd AS (UPDATE runs r SET " SET_WAIT "hooks_at = CASE WHEN " CANCEL_ASKED
    " THEN now() END, hooks_attempts = 0, "
    "external_id = $5, poll_state = $6::jsonb, poll_count = 0, poll_max_checks = $8::int, "
    "poll_max_duration_s = $9::int, poll_started_at = CASE WHEN " CANCEL_ASKED " THEN NULL "
    "ELSE now() END, poll_owner = NULL, next_poll_at = CASE WHEN " CANCEL_ASKED " THEN NULL "
    "ELSE now() + " INTERVAL_MS(
        "$7") " END, "
              "heartbeat_at = NULL, deadline_at = NULL, updated_at = now() WHERE " FENCE
              " RETURNING r.tenant, r.id, r.status, r.outcome, r.progress, "
              "r.step, r.created_at), " EVENT_FROM_UPD("'status'",
                                                       WAIT_MESSAGE) " SELECT count(*), count(*) "
                                                                     "FILTER (WHERE status = "
                                                                     "'completed') FROM upd"};
/* Due checks from the narrow schedule, oldest first: the schedule row takes
 * the lease, the owner and the check's number, and the run row the number
 * and the owner (the run object's poll.checks and "a check in flight"), a
 * HOT update. A due row whose run no longer waits (cancelled, gone) is
 * deleted instead. Locks: the schedule rows, then the runs, as every
 * statement that writes both. The runs are reached through the claimed
 * ids as an array (the primary key, id first): joined to the claimed rows
 * only, a small runs table was planned as a scan of all of it. The
 * schedule rows are reached by joins on their key, from a side the planner
 * sees as small: plain index scans, which also mark the dead versions of
 * these busy rows (a bitmap scan of them read every version). The rows to
 * delete are reached by the position the claim locked them at (ctid): joined
 * on their key, they were planned as a scan of the whole schedule in every
 * claim, even with none to delete. A row that a concurrent write moved
 * before this claim locked it is not found there; it stays due, and the
 * next claim that reaches it deletes it. */
static const struct stmt S_POLL_CLAIM = {
    "polls_claim",
    "WITH due AS (SELECT p.ctid AS pos, p.tenant, p.run_id, p.poll_count FROM run_polls p "
    "WHERE p.next_poll_at <= now() AND p.type = ANY ($4::text[]) ORDER BY p.next_poll_at "
    "LIMIT $2::int FOR UPDATE SKIP LOCKED), "
    "r AS (UPDATE runs r SET poll_count = due.poll_count + 1, poll_owner = $1 FROM due "
    "WHERE r.id = ANY (ARRAY(SELECT run_id FROM due)) AND r.tenant = due.tenant AND "
    "r.id = due.run_id AND r.status = 'waiting' "
    "RETURNING " CHECK_RUN_RET ", " CLAIM_COLS "), "
    "o AS (SELECT d.pos FROM due d WHERE NOT EXISTS (SELECT 1 FROM r "
    "WHERE r.tenant = d.tenant AND r.id = d.run_id)), "
    "gone AS (DELETE FROM run_polls p WHERE p.ctid = ANY (ARRAY(SELECT pos FROM o))), "
    "c AS (UPDATE run_polls p SET next_poll_at = now() + " INTERVAL_MS(
        "$3") ", poll_owner = $1, poll_count = p.poll_count + 1 FROM r WHERE "
              "p.tenant = r.tenant AND p.run_id = r.id) "
              "SELECT * FROM r"};
static const struct stmt S_HOOKS_CLAIM = {
    "hooks_claim",
    "WITH due AS (SELECT tenant, id FROM runs WHERE hooks_at <= now() AND type = ANY ($4::text[]) "
    "ORDER BY hooks_at LIMIT $2::int FOR UPDATE SKIP LOCKED) "
    "UPDATE runs r SET hooks_at = now() + " INTERVAL_MS(
        "$3") ", poll_owner = $1, hooks_attempts = r.hooks_attempts + 1 FROM due WHERE "
              "r.tenant = due.tenant AND r.id = due.id RETURNING " RUN_RET ", " CLAIM_COLS};
/* NULL when nothing is scheduled (greatest() would turn that into 0, "due
 * now", and the scheduler would claim in a loop on an idle server). */
static const struct stmt S_NEXT_DUE = {
    "polls_next_due",
    "SELECT CASE WHEN t IS NULL THEN NULL ELSE greatest(0, (extract(epoch FROM t - now()) * "
    "1000)::bigint) END FROM (SELECT least("
    "(SELECT min(next_poll_at) FROM run_polls WHERE type = ANY ($1::text[])), "
    "(SELECT min(hooks_at) FROM runs WHERE hooks_at IS NOT NULL AND type = ANY ($1::text[]))) "
    "AS t) x"};
static const struct stmt S_LAG = {
    "polls_lag",
    "SELECT count(*), coalesce((extract(epoch FROM now() - min(p.next_poll_at)) * 1000)::bigint, "
    "0) FROM run_polls p JOIN runs r ON r.tenant = p.tenant AND r.id = p.run_id "
    "WHERE r.status = 'waiting' AND p.next_poll_at < now() - interval '1 second'"};
/* The next checks of many runs ($1..$7: arrays of owner, tenant, id,
 * poll_count, poll_state, delay_ms, given_back), each fenced on its own
 * claim (owner and count) in run_polls (a late answer for a cancelled run releases its
 * schedule row, for the claim that deletes it, and leaves the run row
 * alone), never scheduled past the end of the run's wait (least() skips the
 * NULL of a run with no budget stored), a claim given back unchecked taking
 * its count back; then the result in the runs row, whose columns written
 * here are not indexed (a HOT update). Each entry is numbered (n), and the
 * runs row takes the entry whose fence held, so that a stale entry for the
 * same run in the same batch is never the one written; the numbers written
 * are returned. Arrays rather than JSON rows, so that the planner knows how
 * many rows come; the runs are reached through the ids' array (id = ANY,
 * the primary key, id first) however small the table looks to the
 * planner, the schedule rows by their key. The waiting runs' budgets (w)
 * are read by that array alone, before any join: joined to the schedule
 * rows, a table without statistics yet (a new database, until autovacuum's
 * first ANALYZE) was reached through runs_list (tenant first), which reads
 * every run of the tenant per entry: 44 ms instead of 9 for 256 entries
 * beside 5,000 waiting runs, and the poller at a third of its rate. */
static const struct stmt S_AGAIN_BATCH = {
    "polls_again_batch",
    "WITH b AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::jsonb[], "
    "$6::bigint[], $7::bool[]) WITH ORDINALITY "
    "AS b(owner, tenant, id, poll_count, poll_state, delay_ms, given_back, n)), "
    "w AS MATERIALIZED (SELECT tenant, id, poll_started_at, poll_max_duration_s FROM runs "
    "WHERE id = ANY ($3::text[])), "
    "p AS (UPDATE run_polls p SET poll_owner = NULL, "
    "poll_count = p.poll_count - CASE WHEN b.given_back THEN 1 ELSE 0 END, "
    "next_poll_at = least(now() + make_interval(secs => greatest(b.delay_ms, 0) / 1000.0), "
    "w.poll_started_at + make_interval(secs => w.poll_max_duration_s)) "
    "FROM b JOIN w ON w.tenant = b.tenant AND w.id = b.id "
    "WHERE p.tenant = b.tenant AND p.run_id = b.id AND p.poll_owner = b.owner "
    "AND p.poll_count = b.poll_count RETURNING p.tenant, p.run_id, p.poll_count, "
    "p.next_poll_at, b.n) "
    "UPDATE runs r SET poll_state = b.poll_state, poll_count = p.poll_count, poll_owner = NULL, "
    "next_poll_at = p.next_poll_at FROM p JOIN b ON b.tenant = p.tenant AND b.id = p.run_id "
    "AND b.n = p.n "
    "WHERE r.tenant = p.tenant AND r.id = p.run_id AND r.id = ANY ($3::text[]) "
    "AND r.status = 'waiting' RETURNING p.n"};
/* The check ended the run after $13 checks: its schedule row goes
 * (fenced), and the run ends with its event, the hooks due and still owned
 * by $3. */
static const struct stmt S_FINISH = {
    "polls_finish",
    "WITH f AS (DELETE FROM run_polls p WHERE p.tenant = $1 AND p.run_id = $2 AND "
    "p.poll_owner = $3 AND p.poll_count = $4::int RETURNING p.tenant, p.run_id), "
    "upd AS (UPDATE runs r SET status = 'completed', outcome = $5, result = $6::jsonb, "
    "error = $7::jsonb, summary_counts = $8::jsonb, failure_summary = $9::jsonb, "
    "poll_state = $11::jsonb, next_poll_at = NULL, poll_count = $13::int, poll_owner = $3, "
    "progress = CASE WHEN $5 IN ('succeeded', 'partially_succeeded') THEN 100 "
    "ELSE r.progress END, completed_at = now(), updated_at = now(), "
    "hooks_at = now() + " INTERVAL_MS("$12") ", hooks_attempts = 1 FROM f WHERE r.tenant = "
                                             "f.tenant AND r.id = f.run_id AND r.status = "
                                             "'waiting' RETURNING r.tenant, r.id, r.status, "
                                             "r.outcome, r.progress, r.step, r.created_at), "
                                             "" EVENT_FROM_UPD("'status'",
                                                               "$10") " SELECT count(*) FROM upd"};
static const struct stmt S_HOOKS_DONE = {
    "hooks_done", "UPDATE runs r SET poll_state = coalesce($7::jsonb, r.poll_state), "
                  "hooks_at = CASE WHEN $4::bool OR r.hooks_attempts >= $5::int THEN NULL "
                  "ELSE now() + " INTERVAL_MS("$6") " END WHERE r.tenant = $1 AND r.id = $2 AND "
                                                    "r.poll_owner = $3 AND r.hooks_at IS NOT NULL"};

static const struct stmt S_HOOKS_GIVE_BACK = {
    "hooks_give_back",
    "WITH upd AS (UPDATE runs r SET hooks_at = now(), hooks_attempts = r.hooks_attempts - 1, "
    "poll_owner = NULL FROM unnest($1::text[], $2::text[], $3::text[], $4::int[]) "
    "AS b(owner, tenant, id, attempts) "
    "WHERE r.id = ANY ($3::text[]) AND r.tenant = b.tenant AND r.id = b.id AND "
    "r.poll_owner = b.owner AND r.hooks_attempts = b.attempts AND r.hooks_at IS NOT NULL "
    "RETURNING 1) "
    "SELECT count(*) FROM upd"};

static char *json_text(const json_t *v)
{
    return v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
}

/* Runs a fenced statement whose result is one count; 0 = ST_LOST. */
static enum status fenced(struct db *db, const struct stmt *s, int n, const char **p,
                          const char *what, const char *id, struct error *err)
{
    PGresult *r;
    enum status st = db_run(db, s, n, p, &r, err);

    if (st != ST_OK)
        return st;
    if (db_i64(r, 0, 0) == 0)
        st = error_set(err, ST_LOST, "run \"%s\": %s no longer applies", id, what);
    PQclear(r);
    return st;
}

enum status store_runs_wait(struct db *db, const struct fence *f, const char *external_id,
                            const json_t *poll_state, int64_t delay_ms,
                            const struct poll_budget *budget, bool *cancelled, struct error *err)
{
    char att[16], delay[24], checks[16], secs[24];
    char *state = json_text(poll_state);
    const char *p[9] = {f->tenant, f->id,  f->worker_id, att, external_id, state ? state : "{}",
                        delay,     checks, secs};
    PGresult *r;
    enum status st;

    xsnprintf(att, sizeof(att), "%d", f->attempt);
    xsnprintf(delay, sizeof(delay), "%" PRId64, delay_ms);
    xsnprintf(checks, sizeof(checks), "%d", budget->max_checks);
    xsnprintf(secs, sizeof(secs), "%" PRId64, budget->max_duration_s);
    if (cancelled)
        *cancelled = false;
    st = db_run(db, &S_WAIT, 9, p, &r, err);
    free(state);
    if (st != ST_OK)
        return st;
    if (db_i64(r, 0, 0) == 0)
        st = error_set(err, ST_LOST, "run \"%s\": %s no longer applies", f->id,
                       "the hand-over to waiting");
    else if (cancelled)
        *cancelled = db_i64(r, 0, 1) > 0;
    PQclear(r);
    return st;
}

bool run_poll_budget(const struct run *run, struct poll_budget *out)
{
    const json_t *poll = json_object_get(run->json, "poll");
    const json_t *checks = json_object_get(poll, "max_checks");
    const json_t *secs = json_object_get(poll, "max_duration_s");

    if (!json_is_integer(checks) || !json_is_integer(secs))
        return false;
    out->max_checks = (int)json_integer_value(checks);
    out->max_duration_s = (int64_t)json_integer_value(secs);
    return true;
}

void poll_claims_free(struct poll_claim *c, size_t n)
{
    for (size_t i = 0; c && i < n; i++) {
        run_free(c[i].run);
        free(c[i].external_id);
        json_decref(c[i].poll_state);
    }
    free(c);
}

static enum status claims_from(PGresult *r, const char *owner, struct poll_claim **out, size_t *n,
                               struct error *err)
{
    size_t rows = (size_t)PQntuples(r);
    struct poll_claim *c = xcalloc(rows ? rows : 1, sizeof(*c));
    enum status st = ST_OK;

    for (size_t i = 0; i < rows && st == ST_OK; i++) {
        const char *ext = db_val(r, (int)i, CLAIM_FIRST);
        st = run_from_row(r, (int)i, &c[i].run, err);
        c[i].external_id = ext ? xstrdup(ext) : NULL;
        c[i].poll_state = json_loads(db_val(r, (int)i, CLAIM_FIRST + 1), 0, NULL);
        if (!json_is_object(c[i].poll_state)) {
            json_decref(c[i].poll_state);
            c[i].poll_state = json_object();
        }
        c[i].poll_count = (int)db_i64(r, (int)i, CLAIM_FIRST + 2);
        c[i].waited_ms = db_i64(r, (int)i, CLAIM_FIRST + 3);
        c[i].hooks_attempts = (int)db_i64(r, (int)i, CLAIM_FIRST + 4);
        xsnprintf(c[i].owner, sizeof(c[i].owner), "%s", owner);
    }
    if (st != ST_OK) {
        poll_claims_free(c, rows);
        return st;
    }
    *out = c;
    *n = rows;
    return ST_OK;
}

static enum status claim(struct db *db, const struct stmt *s, const char *owner, int limit,
                         int64_t lease_ms, const char *const *types, size_t ntypes,
                         struct poll_claim **out, size_t *n, struct error *err)
{
    char lim[16], lease[24];
    char *arr = db_text_array(types, ntypes);
    const char *p[4] = {owner, lim, lease, arr};
    PGresult *r;
    enum status st;

    *out = NULL;
    *n = 0;
    if (strlen(owner) >= POLL_OWNER_MAX) {
        free(arr);
        return error_set(err, ST_INVALID, "poll claim owner of %zu bytes (at most %d)",
                         strlen(owner), POLL_OWNER_MAX - 1);
    }
    xsnprintf(lim, sizeof(lim), "%d", limit);
    xsnprintf(lease, sizeof(lease), "%" PRId64, lease_ms);
    st = db_run(db, s, 4, p, &r, err);
    free(arr);
    if (st != ST_OK)
        return st;
    st = claims_from(r, owner, out, n, err);
    PQclear(r);
    return st;
}

enum status store_polls_claim(struct db *db, const char *owner, int limit, int64_t lease_ms,
                              const char *const *types, size_t ntypes, struct poll_claim **out,
                              size_t *n, struct error *err)
{
    return claim(db, &S_POLL_CLAIM, owner, limit, lease_ms, types, ntypes, out, n, err);
}

enum status store_hooks_claim(struct db *db, const char *owner, int limit, int64_t lease_ms,
                              const char *const *types, size_t ntypes, struct poll_claim **out,
                              size_t *n, struct error *err)
{
    return claim(db, &S_HOOKS_CLAIM, owner, limit, lease_ms, types, ntypes, out, n, err);
}

enum status store_polls_next_due(struct db *db, const char *const *types, size_t ntypes,
                                 int64_t *ms, struct error *err)
{
    char *arr = db_text_array(types, ntypes);
    const char *p[1] = {arr};
    PGresult *r;
    enum status st = db_run(db, &S_NEXT_DUE, 1, p, &r, err);

    free(arr);
    *ms = -1;
    if (st != ST_OK)
        return st;
    if (db_val(r, 0, 0))
        *ms = db_i64(r, 0, 0);
    PQclear(r);
    return ST_OK;
}

/* The parameters of S_AGAIN_BATCH for a[0..n): seven array literals, in
 * p[0..6] (heap; the caller frees them). */
static void again_arrays(const struct poll_again *a, size_t n, char *p[7])
{
    const char **v = xcalloc(n ? n : 1, sizeof(*v));
    char **text = xcalloc(n ? n : 1, sizeof(*text));
    char(*num)[24] = xcalloc(n ? n : 1, sizeof(*num));

    for (size_t i = 0; i < n; i++)
        v[i] = a[i].owner;
    p[0] = db_text_array(v, n);
    for (size_t i = 0; i < n; i++)
        v[i] = a[i].tenant;
    p[1] = db_text_array(v, n);
    for (size_t i = 0; i < n; i++)
        v[i] = a[i].id;
    p[2] = db_text_array(v, n);
    for (size_t i = 0; i < n; i++) {
        xsnprintf(num[i], sizeof(num[i]), "%d", a[i].poll_count);
        v[i] = num[i];
    }
    p[3] = db_text_array(v, n);
    for (size_t i = 0; i < n; i++) {
        text[i] = a[i].poll_state ? json_text(a[i].poll_state) : NULL;
        v[i] = text[i] ? text[i] : "{}";
    }
    p[4] = db_text_array(v, n);
    for (size_t i = 0; i < n; i++) {
        free(text[i]);
        xsnprintf(num[i], sizeof(num[i]), "%" PRId64, a[i].delay_ms < 0 ? 0 : a[i].delay_ms);
        v[i] = num[i];
    }
    p[5] = db_text_array(v, n);
    for (size_t i = 0; i < n; i++)
        v[i] = a[i].given_back ? "t" : "f";
    p[6] = db_text_array(v, n);
    free(v);
    free(text);
    free(num);
}

enum status store_polls_again_batch(struct db *db, struct poll_again *a, size_t n,
                                    struct error *err)
{
    char *p[7] = {NULL};
    PGresult *r;
    enum status st;

    for (size_t k = 0; k < n; k++)
        a[k].written = false;
    again_arrays(a, n, p);
    st = db_run(db, &S_AGAIN_BATCH, 7, (const char *const *)p, &r, err);
    for (int i = 0; i < 7; i++)
        free(p[i]);
    if (st != ST_OK)
        return st;
    for (int i = 0; i < PQntuples(r); i++) {
        int64_t k = db_i64(r, i, 0); /* the entry's number, from 1 */
        if (k >= 1 && (size_t)k <= n)
            a[k - 1].written = true;
    }
    PQclear(r);
    return ST_OK;
}

enum status store_polls_finish(struct db *db, const struct poll_fence *f, int checks,
                               const struct run_result *res, const json_t *poll_state,
                               int64_t hooks_lease_ms, struct error *err)
{
    char cnt[16], lease[24], made[16];
    char *j[5] = {json_text(res->result), json_text(res->error), json_text(res->summary_counts),
                  json_text(res->failure_summary), json_text(poll_state)};
    const char *outcome = run_outcome_name(res->outcome);
    const char *p[13] = {
        f->tenant, f->id,        f->owner,           cnt,   outcome, j[0], j[1], j[2],
        j[3],      res->message, j[4] ? j[4] : "{}", lease, made};
    enum status st;

    xsnprintf(cnt, sizeof(cnt), "%d", f->poll_count);
    xsnprintf(lease, sizeof(lease), "%" PRId64, hooks_lease_ms);
    xsnprintf(made, sizeof(made), "%d", checks);
    st = fenced(db, &S_FINISH, 13, p, "this check", f->id, err);
    for (size_t i = 0; i < ARRAY_LEN(j); i++)
        free(j[i]);
    return st;
}

enum status store_hooks_done(struct db *db, const char *tenant, const char *id, const char *owner,
                             bool ok, const json_t *poll_state, int max_attempts, int64_t retry_ms,
                             struct error *err)
{
    char att[16], retry[24], *state = json_text(poll_state);
    const char *p[7] = {tenant, id, owner, ok ? "true" : "false", att, retry, state};
    PGresult *r;
    enum status st;

    xsnprintf(att, sizeof(att), "%d", max_attempts);
    xsnprintf(retry, sizeof(retry), "%" PRId64, retry_ms);
    st = db_run(db, &S_HOOKS_DONE, 7, p, &r, err);
    if (st == ST_OK)
        PQclear(r);
    free(state);
    return st;
}

enum status store_hooks_give_back(struct db *db, const struct run_ref *refs,
                                  const char *const *owners, size_t n, int *given,
                                  struct error *err)
{
    char *o = db_text_array(owners, n), *t, *i, *a;
    const char *p[4];
    PGresult *r;
    enum status st;

    *given = 0;
    run_refs_arrays(refs, n, &t, &i, &a);
    p[0] = o, p[1] = t, p[2] = i, p[3] = a;
    st = db_run(db, &S_HOOKS_GIVE_BACK, 4, p, &r, err);
    if (st == ST_OK) {
        *given = (int)db_i64(r, 0, 0);
        PQclear(r);
    }
    free(o);
    free(t);
    free(i);
    free(a);
    return st;
}

enum status store_polls_lag(struct db *db, int64_t *overdue, int64_t *lag_ms, struct error *err)
{
    PGresult *r;
    enum status st = db_run(db, &S_LAG, 0, NULL, &r, err);

    *overdue = *lag_ms = 0;
    if (st != ST_OK)
        return st;
    *overdue = db_i64(r, 0, 0);
    *lag_ms = db_i64(r, 0, 1);
    PQclear(r);
    return ST_OK;
}
