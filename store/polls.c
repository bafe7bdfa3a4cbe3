/* store/polls.c — the poll schedule of waiting runs (store/polls.h). */
#include "store/polls.h"

#include "store/runs_internal.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* A check's fence, $1..$4. */
#define PFENCE                                                                                     \
    "r.tenant = $1 AND r.id = $2 AND r.status = 'waiting' AND r.poll_owner = $3 "                  \
    "AND r.poll_count = $4::int"
#define INTERVAL_MS(p) "make_interval(secs => " p "::bigint / 1000.0)"
/* What a claim returns after RUN_RET: columns 12..16. */
#define CLAIM_COLS                                                                                 \
    "r.external_id, coalesce(r.poll_state, '{}')::text, r.poll_count, "                            \
    "coalesce((extract(epoch FROM now() - r.poll_started_at) * 1000)::bigint, 0), "                \
    "r.hooks_attempts"
#define CLAIM_FIRST 12
/* The event message of the hand-over to waiting. */
#define WAIT_MESSAGE                                                                               \
    HAND_BACK_MESSAGE("'cancelled while starting external job ' || $5",                            \
                      "'waiting for external job ' || $5")

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
static const struct stmt S_POLL_CLAIM = {
    "polls_claim",
    "WITH due AS (SELECT tenant, id FROM runs WHERE status = 'waiting' AND next_poll_at <= now() "
    "AND type = ANY ($4::text[]) ORDER BY next_poll_at LIMIT $2::int FOR UPDATE SKIP LOCKED) "
    "UPDATE runs r SET next_poll_at = now() + " INTERVAL_MS(
        "$3") ", poll_owner = $1, poll_count = r.poll_count + 1 FROM due WHERE r.tenant = "
              "due.tenant AND r.id = due.id RETURNING " RUN_RET ", " CLAIM_COLS};
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
    "(SELECT min(next_poll_at) FROM runs WHERE status = 'waiting' AND type = ANY ($1::text[])), "
    "(SELECT min(hooks_at) FROM runs WHERE hooks_at IS NOT NULL AND type = ANY ($1::text[]))) "
    "AS t) x"};
static const struct stmt S_LAG = {
    "polls_lag",
    "SELECT count(*), coalesce((extract(epoch FROM now() - min(next_poll_at)) * 1000)::bigint, 0) "
    "FROM runs WHERE status = 'waiting' AND next_poll_at < now() - interval '1 second'"};
static const struct stmt S_AGAIN = {
    "polls_again",
    "WITH upd AS (UPDATE runs r SET poll_state = $5::jsonb, poll_owner = NULL, "
    "next_poll_at = now() + " INTERVAL_MS("$6") " WHERE " PFENCE
                                                " RETURNING 1) SELECT count(*) FROM upd"};
/* S_AGAIN for many checks: $2 is a JSON array of {tenant, id, poll_count,
 * poll_state, delay_ms}, each row fenced on its own ($1 the owner). No
 * check is scheduled past the end of the run's wait (least() skips the
 * NULL of a run with no budget stored). */
static const struct stmt S_AGAIN_BATCH = {
    "polls_again_batch",
    "WITH b AS (SELECT * FROM jsonb_to_recordset($2::jsonb) AS b(tenant text, id text, "
    "poll_count int, poll_state jsonb, delay_ms bigint)) "
    "UPDATE runs r SET poll_state = coalesce(b.poll_state, '{}'), poll_owner = NULL, "
    "next_poll_at = least(now() + make_interval(secs => greatest(b.delay_ms, 0) / 1000.0), "
    "r.poll_started_at + make_interval(secs => r.poll_max_duration_s)) FROM b "
    "WHERE r.tenant = b.tenant AND r.id = b.id AND r.status = 'waiting' AND r.poll_owner = $1 "
    "AND r.poll_count = b.poll_count RETURNING r.tenant, r.id"};
static const struct stmt S_FINISH = {
    "polls_finish",
    "WITH upd AS (UPDATE runs r SET status = 'completed', outcome = $5, result = $6::jsonb, "
    "error = $7::jsonb, summary_counts = $8::jsonb, failure_summary = $9::jsonb, "
    "poll_state = $11::jsonb, next_poll_at = NULL, poll_count = $13::int, "
    "progress = CASE WHEN $5 IN ('succeeded', 'partially_succeeded') THEN 100 "
    "ELSE r.progress END, completed_at = now(), updated_at = now(), "
    "hooks_at = now() + " INTERVAL_MS("$12") ", hooks_attempts = 1 WHERE " PFENCE
                                             " RETURNING r.tenant, r.id, r.status, r.outcome, "
                                             "r.progress, r.step, r.created_at), " EVENT_FROM_UPD(
                                                 "'status'", "$10") " SELECT count(*) FROM upd"};
static const struct stmt S_HOOKS_DONE = {
    "hooks_done", "UPDATE runs r SET poll_state = coalesce($7::jsonb, r.poll_state), "
                  "hooks_at = CASE WHEN $4::bool OR r.hooks_attempts >= $5::int THEN NULL "
                  "ELSE now() + " INTERVAL_MS("$6") " END WHERE r.tenant = $1 AND r.id = $2 AND "
                                                    "r.poll_owner = $3 AND r.hooks_at IS NOT NULL"};

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

static enum status claims_from(PGresult *r, struct poll_claim **out, size_t *n, struct error *err)
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
    xsnprintf(lim, sizeof(lim), "%d", limit);
    xsnprintf(lease, sizeof(lease), "%" PRId64, lease_ms);
    st = db_run(db, s, 4, p, &r, err);
    free(arr);
    if (st != ST_OK)
        return st;
    st = claims_from(r, out, n, err);
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

enum status store_polls_again(struct db *db, const struct poll_fence *f, const json_t *poll_state,
                              int64_t delay_ms, struct error *err)
{
    char cnt[16], delay[24];
    char *state = json_text(poll_state);
    const char *p[6] = {f->tenant, f->id, f->owner, cnt, state ? state : "{}", delay};
    enum status st;

    xsnprintf(cnt, sizeof(cnt), "%d", f->poll_count);
    xsnprintf(delay, sizeof(delay), "%" PRId64, delay_ms < 0 ? 0 : delay_ms);
    st = fenced(db, &S_AGAIN, 6, p, "this check", f->id, err);
    free(state);
    return st;
}

enum status store_polls_again_batch(struct db *db, const char *owner, struct poll_again *a,
                                    size_t n, struct error *err)
{
    json_t *rows = json_array();
    const char *p[2];
    char *text;
    PGresult *r;
    enum status st;

    for (size_t k = 0; k < n; k++) {
        json_t *o = json_pack("{s:s, s:s, s:i, s:I}", "tenant", a[k].tenant, "id", a[k].id,
                              "poll_count", a[k].poll_count, "delay_ms", (json_int_t)a[k].delay_ms);
        if (!o)
            abort(); /* only on allocation failure */
        if (a[k].poll_state)
            json_object_set(o, "poll_state", (json_t *)a[k].poll_state);
        json_array_append_new(rows, o);
        a[k].written = false;
    }
    text = json_dumps(rows, JSON_COMPACT);
    json_decref(rows);
    if (!text)
        return error_set(err, ST_INTERNAL, "could not encode %zu checks", n);
    p[0] = owner;
    p[1] = text;
    st = db_run(db, &S_AGAIN_BATCH, 2, p, &r, err);
    free(text);
    if (st != ST_OK)
        return st;
    for (int i = 0; i < PQntuples(r); i++)
        for (size_t k = 0; k < n; k++)
            if (!a[k].written && strcmp(a[k].id, db_val(r, i, 1)) == 0 &&
                strcmp(a[k].tenant, db_val(r, i, 0)) == 0) {
                a[k].written = true;
                break;
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
