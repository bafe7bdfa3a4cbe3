/* store/runs.c — the run lifecycle in SQL. Each statement that changes a
 * run's status, outcome or progress inserts the matching run_events row in
 * the same statement (data-modifying CTEs), so history cannot drift. */
#include "store/runs.h"

#include "common/cursor.h"
#include "common/ids.h"
#include "common/time_rfc3339.h"
#include "store/events_internal.h"
#include "store/runs_internal.h"

#include <stdlib.h>
#include <string.h>

/* The run's approval, when its type has one: $14 its timeout, $15 on_timeout. */
#define INSERT_APPROVAL APPROVAL_INSERT_VALUES("$14::int", "$15", "$5::timestamptz")
/* clang-format off */
static const struct stmt S_INSERT = {
    "runs_insert",
    "WITH upd AS (INSERT INTO runs AS r (tenant, id, type, priority, run_at, max_attempts, "
    "timeout_s, input, identity_hash, request_hash, initiator, schedule_name, schedule_slot, "
    "reacts, " APPROVAL_INSERT_COLS ") "
    "VALUES ($1, $2, $3, $4::int, coalesce($5::timestamptz, now()), $6::int, $7::int, $8::jsonb, "
    "$9, $10, coalesce($11, 'system'), $12, $13::timestamptz, " REACTS_OF("$3") ", "
    INSERT_APPROVAL ") "
    "ON CONFLICT DO NOTHING RETURNING " RUN_RET ", r.created_at, r.approval_state, "
    "r.approval_expires_at), " EVENT_SUBMITTED " SELECT " RUN_OUT " FROM upd"};
/* clang-format on */
static const struct stmt S_BY_ID = {
    "runs_by_id",
    "SELECT " RUN_COLS ", r.request_hash FROM runs r WHERE r.tenant = $1 AND r.id = $2"};
/* The run as its detail shows it (store_runs_get_detail): the run, then
 * why it waits, if it is queued and waits for its key or its tenant's cap
 * ($3, NULL for none), and the other runs that hold its key (k, a key's
 * running and cancelling runs through runs_key_held; a tenant's, when it
 * has a cap, through runs_held).
 * Each lateral part reads nothing for a run it does not concern. */
static const struct stmt S_DETAIL = {
    "runs_detail",
    "SELECT " RUN_COLS ", CASE WHEN r.status <> 'queued' THEN NULL "
    "WHEN r.conc_key IS NOT NULL AND (r.conc_held OR (r.run_at <= now() AND k.n >= r.conc_max)) "
    "THEN json_build_object('reason', 'concurrency_key', 'running', k.n, 'max_running', "
    "r.conc_max) "
    "WHEN r.run_at <= now() AND t.n >= $3::int "
    "THEN json_build_object('reason', 'tenant_cap', 'running', t.n, 'max_running', $3::int) "
    "END::text, "
    "CASE WHEN r.conc_group IS NOT NULL THEN to_json(coalesce(k.ids, '{}'::text[]))::text END "
    "FROM runs r "
    "LEFT JOIN LATERAL (SELECT count(*) AS n, (array_agg(a.id ORDER BY a.started_at, a.id))[1:10] "
    "AS ids FROM runs a WHERE r.status <> 'completed' AND a.tenant = r.tenant "
    "AND a.conc_group = r.conc_group AND a.conc_key = r.conc_key "
    "AND a.status IN ('running', 'cancelling') AND a.status <> 'completed' AND a.id <> r.id) k "
    "ON true "
    "LEFT JOIN LATERAL (SELECT count(*) AS n FROM (SELECT 1 FROM runs a "
    "WHERE $3::int IS NOT NULL AND r.status = 'queued' AND r.run_at <= now() "
    "AND a.tenant = r.tenant AND a.status IN ('running', 'cancelling') LIMIT $3::int) x) t ON true "
    "WHERE r.tenant = $1 AND r.id = $2"};
static const struct stmt S_BY_IDENTITY = {
    "runs_by_identity", "SELECT " RUN_COLS " FROM runs r WHERE r.tenant = $1 AND "
                        "r.identity_hash = $2 AND r.status IN " JOINABLE_STATUSES};
/* The list's filters and cursor, on a runs row "r". */
#define LIST_FILTERS                                                                               \
    "($2::text IS NULL OR r.status = $2) AND ($3::text IS NULL OR r.outcome = $3) "                \
    "AND ($4::text IS NULL OR r.type = $4) AND ($5::text IS NULL OR r.external_id = $5) "          \
    "AND ($9::text IS NULL OR r.initiator = $9) "                                                  \
    "AND ($10::text IS NULL OR r.schedule_name = $10) "                                            \
    "AND ($11::text IS NULL OR r.parent_id = $11) "                                                \
    "AND ($12::text IS NULL OR r.conc_key = $12) AND ($13::text IS NULL OR r.conc_group = $13) "   \
    "AND ($6::bigint IS NULL OR (r.created_at, r.id) < "                                           \
    "(timestamptz 'epoch' + $6::bigint * interval '1 microsecond', $7::text)) "
#define LIST_ORDER "ORDER BY r.created_at DESC, r.id DESC LIMIT $8::int"
/* One tenant's runs, newest first (the runs_list index). */
static const struct stmt S_LIST = {"runs_list",
                                   "SELECT " RUN_COLS
                                   " FROM runs r WHERE r.tenant = $1 AND " LIST_FILTERS LIST_ORDER};
/* One tenant's runs awaiting approval, newest first (runs_approval_list,
 * migration 018), and every tenant's ($1 NULL): few, all in that index. */
#define PENDING AWAITING_APPROVAL("r.")
static const struct stmt S_LIST_PENDING = {
    "runs_list_pending", "SELECT " RUN_COLS " FROM runs r WHERE r.tenant = $1 AND " PENDING
                         " AND " LIST_FILTERS LIST_ORDER};
static const struct stmt S_LIST_ALL_PENDING = {
    "runs_list_all_pending", "SELECT " RUN_COLS " FROM runs r WHERE $1::text IS NULL AND " PENDING
                             " AND " LIST_FILTERS LIST_ORDER};
/* Every tenant's, for an admin ($1 is NULL): the tenants found by a skip
 * scan of runs_list's first column (one step each), each tenant's first
 * $8 from runs_list as in runs_list, and the newest $8 of those, read in
 * full only then (migration 014). which: a condition on "r" that picks
 * the index of each tenant's part. */
#define LIST_ALL(which)                                                                            \
    "WITH RECURSIVE t(tenant) AS (SELECT min(tenant) FROM runs WHERE $1::text IS NULL "            \
    "UNION ALL SELECT (SELECT min(u.tenant) FROM runs u WHERE u.tenant > t.tenant) FROM t "        \
    "WHERE t.tenant IS NOT NULL), "                                                                \
    "k AS (SELECT f.* FROM t CROSS JOIN LATERAL (SELECT r.tenant, r.id, r.created_at FROM runs r " \
    "WHERE r.tenant = t.tenant AND " which LIST_FILTERS LIST_ORDER ") f "                          \
    "ORDER BY f.created_at DESC, f.id DESC LIMIT $8::int) "                                        \
    "SELECT " RUN_COLS " FROM k JOIN runs r ON r.id = k.id AND r.tenant = k.tenant "               \
    "ORDER BY k.created_at DESC, k.id DESC"
static const struct stmt S_LIST_ALL = {"runs_list_all", LIST_ALL("")};
/* A concurrency key's runs ($12), newest first: runs_conc_list (migration
 * 022), of one tenant or (S_LIST_ALL_KEY) of each in turn. */
#define KEY_IS "r.conc_key = $12 AND "
static const struct stmt S_LIST_KEY = {
    "runs_list_key",
    "SELECT " RUN_COLS " FROM runs r WHERE r.tenant = $1 AND " KEY_IS LIST_FILTERS LIST_ORDER};
static const struct stmt S_LIST_ALL_KEY = {"runs_list_all_key", LIST_ALL(KEY_IS)};
/* Which tenants have a run with this id (the primary key (id, tenant),
 * migration 014): two are enough to know it is ambiguous. */
static const struct stmt S_LOCATE = {
    "runs_locate", "SELECT tenant FROM runs WHERE id = $1 ORDER BY tenant LIMIT 2"};
/* cur locks the run and carries its newest version: a cancel that waited
 * behind a finish must answer with the finished run (409), not the version
 * its statement started with. A waiting run ends at once and owes its
 * action's remote cancel and cleanup (unless it awaited approval):
 * hooks_at makes the poller run them. */
static const struct stmt S_CANCEL = {
    "runs_cancel",
    "WITH cur AS (SELECT r AS cr, r.tenant, r.id, r.status FROM runs r "
    "WHERE r.tenant = $1 AND r.id = $2 FOR UPDATE), "
    "upd AS (UPDATE runs r SET " SET_CANCEL SET_CANCEL_HOOKS "next_poll_at = NULL, "
    "updated_at = now() FROM cur "
    "WHERE r.tenant = cur.tenant AND r.id = cur.id AND cur.status IN " JOINABLE_STATUSES
    " RETURNING " RUN_RET ", r.created_at), " EVENT_FROM_UPD(
        "'status'",
        "'cancel requested'") " SELECT " RUN_OUT ", true FROM upd UNION ALL "
                              "SELECT opsrun_run_json(c.cr)::text, (c.cr).tenant, (c.cr).id, "
                              "(c.cr).type, (c.cr).status, "
                              "(c.cr).outcome, (c.cr).attempt, (c.cr).max_attempts, "
                              "(extract(epoch FROM (c.cr).deadline_at - now()) * 1000)::bigint, "
                              "(extract(epoch FROM (c.cr).created_at) * 1000000)::bigint, false "
                              "FROM cur c WHERE NOT EXISTS (SELECT 1 FROM upd)"};
/* Completions per second and outcome over the last $2 seconds, for a
 * tenant ($1) or every one (NULL), through runs_completed. */
static const struct stmt S_COMPLETIONS = {
    "runs_completions",
    "SELECT json_build_object('end', opsrun_ts(now()), 'seconds', $2::int, 'counts', "
    "coalesce(json_agg(json_build_object('at', opsrun_ts(x.s), 'outcome', x.o, 'n', x.n) "
    "ORDER BY x.s, x.o), '[]'))::text FROM (SELECT date_trunc('second', r.completed_at) AS s, "
    "r.outcome AS o, count(*) AS n FROM runs r WHERE r.status = 'completed' AND r.completed_at > "
    "now() - make_interval(secs => $2::int) AND ($1::text IS NULL OR r.tenant = $1) "
    "GROUP BY 1, 2) x"};
/* The queued runs held back by their concurrency key, over all tenants
 * (the partial index runs_conc_held holds exactly them, migration 022). */
static const struct stmt S_HELD_TOTAL = {
    "runs_held_total", "SELECT count(*) FROM runs WHERE conc_held AND status = 'queued'"};
/* The run's events; none when the run is gone, as its events may still be
 * in their partition (migration 013). */
static const struct stmt S_EVENTS = {
    "events_list",
    "SELECT (SELECT count(*) FROM runs WHERE tenant = $1 AND id = $2), "
    "coalesce((SELECT json_agg(opsrun_event_json(e) ORDER BY e.id) FROM runs r JOIN run_events e "
    "ON " EVENT_OF_RUN " WHERE r.tenant = $1 AND r.id = $2), '[]')::text"};

void run_free(struct run *run)
{
    if (!run)
        return;
    free(run->tenant);
    free(run->id);
    free(run->type);
    json_decref(run->json);
    json_decref(run->input);
    free(run);
}

double run_seconds_between(const struct run *run, const char *from, const char *to)
{
    const json_t *a = json_object_get(run->json, from), *b = json_object_get(run->json, to);
    int64_t a_us, b_us;

    if (!json_is_string(a) || !json_is_string(b) ||
        !time_parse_rfc3339(json_string_value(a), &a_us) ||
        !time_parse_rfc3339(json_string_value(b), &b_us))
        return -1;
    return (double)(b_us - a_us) / 1e6;
}

bool run_is_terminal(const struct run *run)
{
    return run_status_is_terminal(run->status);
}

const json_t *run_input(const struct run *run)
{
    return run->json ? json_object_get(run->json, "input") : run->input;
}

/* The status and outcome columns of row; a value outside the names tables
 * means the schema and this binary disagree. */
static enum status run_state_from_row(const PGresult *r, int row, struct run *run,
                                      struct error *err)
{
    if (!run_status_parse(db_val(r, row, 4), &run->status))
        return error_set(err, ST_INTERNAL, "could not parse run \"%s\": unknown status \"%s\"",
                         db_val(r, row, 2), db_val(r, row, 4));
    if (!run_outcome_parse(db_val(r, row, 5), &run->outcome))
        return error_set(err, ST_INTERNAL, "could not parse run \"%s\": unknown outcome \"%s\"",
                         db_val(r, row, 2), db_val(r, row, 5));
    return ST_OK;
}

enum status run_from_row(const PGresult *r, int row, struct run **out, struct error *err)
{
    json_error_t jerr;
    struct run *run;
    json_t *j = json_loads(db_val(r, row, 0), 0, &jerr);

    *out = NULL;
    if (!j)
        return error_set(err, ST_INTERNAL, "could not parse run JSON: %s", jerr.text);
    run = xcalloc(1, sizeof(*run));
    run->json = j;
    run->tenant = xstrdup(db_val(r, row, 1));
    run->id = xstrdup(db_val(r, row, 2));
    run->type = xstrdup(db_val(r, row, 3));
    run->attempt = (int)db_i64(r, row, 6);
    run->max_attempts = (int)db_i64(r, row, 7);
    run->has_deadline = db_val(r, row, 8) != NULL;
    run->deadline_left_ms = db_i64(r, row, 8);
    run->created_us = db_i64(r, row, 9);
    if (run_state_from_row(r, row, run, err) != ST_OK) {
        run_free(run);
        return ST_INTERNAL;
    }
    *out = run;
    return ST_OK;
}

enum status run_query_one(struct db *db, const struct stmt *st, int n, const char *const *params,
                          struct run **out, PGresult **keep, struct error *err)
{
    PGresult *r;
    enum status s = db_run(db, st, n, params, &r, err);

    *out = NULL;
    if (s != ST_OK)
        return s;
    if (PQntuples(r) > 0)
        s = run_from_row(r, 0, out, err);
    if (keep && s == ST_OK && *out)
        *keep = r;
    else
        PQclear(r);
    return s;
}

static char *json_text(const json_t *v)
{
    return v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
}

/* Finds what a submission that inserted nothing collided with. */
static enum status submit_existing(struct db *db, const struct run_new *rn, struct run **out,
                                   struct error *err)
{
    const char *p[2] = {rn->tenant, rn->id};
    PGresult *keep = NULL;
    enum status st = run_query_one(db, &S_BY_ID, 2, p, out, &keep, err);

    if (st != ST_OK)
        return st;
    if (*out) {
        bool same = strcmp(db_val(keep, 0, RUN_NCOLS), rn->request_hash) == 0;
        PQclear(keep);
        if (same)
            return ST_OK;
        run_free(*out);
        *out = NULL;
        return error_set(err, ST_CONFLICT,
                         "run \"%s\" already exists with a different request body", rn->id);
    }
    p[1] = rn->identity_hash;
    return run_query_one(db, &S_BY_IDENTITY, 2, p, out, NULL, err);
}

enum status store_runs_submit(struct db *db, const struct run_new *rn, struct run **out,
                              bool *dedup, struct error *err)
{
    char prio[16], maxa[16], tmo[16], atmo[16];
    char *input = json_text(rn->input);
    const char *p[15] = {rn->tenant,
                         rn->id,
                         rn->type,
                         prio,
                         rn->run_at,
                         maxa,
                         tmo,
                         input,
                         rn->identity_hash,
                         rn->request_hash,
                         rn->initiator,
                         rn->schedule_name,
                         rn->schedule_slot,
                         rn->approval_timeout_s > 0 ? atmo : NULL,
                         rn->approve_on_timeout ? "approve" : "reject"};
    enum status st = ST_OK;

    xsnprintf(atmo, sizeof(atmo), "%d", rn->approval_timeout_s);
    xsnprintf(prio, sizeof(prio), "%d", rn->priority);
    xsnprintf(maxa, sizeof(maxa), "%d", rn->max_attempts);
    xsnprintf(tmo, sizeof(tmo), "%d", rn->timeout_s);
    *out = NULL;
    /* A collision with a run that completes between our insert and our
     * lookup finds nothing; the retry then inserts. Three rounds bound it. */
    for (int round = 0; round < 3 && st == ST_OK && !*out; round++) {
        st = run_query_one(db, &S_INSERT, 15, p, out, NULL, err);
        *dedup = false;
        if (st == ST_OK && !*out) {
            st = submit_existing(db, rn, out, err);
            *dedup = true;
        }
    }
    free(input);
    if (st == ST_OK && !*out)
        st = error_set(err, ST_UNAVAILABLE, "could not settle the identity of run \"%s\"", rn->id);
    return st;
}

enum status store_runs_get(struct db *db, const char *tenant, const char *id, struct run **out,
                           struct error *err)
{
    const char *p[2] = {tenant, id};
    enum status st = run_query_one(db, &S_BY_ID, 2, p, out, NULL, err);

    if (st == ST_OK && !*out)
        st = error_set(err, ST_NOT_FOUND, "run \"%s\" does not exist", id);
    return st;
}

/* Sets member name of obj to the JSON text v (SQL NULL: no member). */
static enum status set_json_text(json_t *obj, const char *name, const char *v, struct error *err)
{
    json_error_t jerr;
    json_t *j;

    if (!v)
        return ST_OK;
    if (!(j = json_loads(v, JSON_DECODE_ANY, &jerr)))
        return error_set(err, ST_INTERNAL, "could not parse the run's %s: %s", name, jerr.text);
    json_object_set_new(obj, name, j);
    return ST_OK;
}

enum status store_runs_get_detail(struct db *db, const char *tenant, const char *id, int tenant_cap,
                                  struct run **out, struct error *err)
{
    char cap[16];
    const char *p[3] = {tenant, id, tenant_cap > 0 ? cap : NULL};
    PGresult *keep = NULL;
    json_t *conc;
    enum status st;

    xsnprintf(cap, sizeof(cap), "%d", tenant_cap);
    st = run_query_one(db, &S_DETAIL, 3, p, out, &keep, err);
    if (st == ST_OK && !*out)
        return error_set(err, ST_NOT_FOUND, "run \"%s\" does not exist", id);
    if (st != ST_OK)
        return st;
    json_object_set_new((*out)->json, "waiting_for", json_null());
    st = set_json_text((*out)->json, "waiting_for", db_val(keep, 0, RUN_NCOLS), err);
    conc = json_object_get((*out)->json, "concurrency");
    if (st == ST_OK && json_is_object(conc))
        st = set_json_text(conc, "holders", db_val(keep, 0, RUN_NCOLS + 1), err);
    PQclear(keep);
    if (st != ST_OK) {
        run_free(*out);
        *out = NULL;
    }
    return st;
}

enum status store_runs_get_active(struct db *db, const char *tenant, const char *identity_hash,
                                  struct run **out, struct error *err)
{
    const char *p[2] = {tenant, identity_hash};
    enum status st = run_query_one(db, &S_BY_IDENTITY, 2, p, out, NULL, err);

    if (st == ST_OK && !*out)
        st = error_set(err, ST_NOT_FOUND, "no active run with this identity");
    return st;
}

enum status store_runs_list(struct db *db, const char *tenant, const struct run_filter *f,
                            json_t **runs, char **next_cursor, struct error *err)
{
    char cus[24], lim[16];
    const char *p[13] = {tenant,
                         f->has_status ? run_status_name(f->status) : NULL,
                         f->has_outcome ? run_outcome_name(f->outcome) : NULL,
                         f->type,
                         f->external_id,
                         f->has_cursor ? cus : NULL,
                         f->has_cursor ? f->cursor_id : NULL,
                         lim,
                         f->initiator,
                         f->schedule,
                         f->parent_id,
                         f->conc_key,
                         f->conc_group};
    PGresult *r;
    enum status st;
    int n;

    xsnprintf(cus, sizeof(cus), "%lld", (long long)f->cursor_us);
    xsnprintf(lim, sizeof(lim), "%d", f->limit + 1);
    *runs = NULL;
    *next_cursor = NULL;
    if (f->approval_pending)
        st = db_run(db, tenant ? &S_LIST_PENDING : &S_LIST_ALL_PENDING, 13, p, &r, err);
    else if (f->conc_key)
        st = db_run(db, tenant ? &S_LIST_KEY : &S_LIST_ALL_KEY, 13, p, &r, err);
    else
        st = db_run(db, tenant ? &S_LIST : &S_LIST_ALL, 13, p, &r, err);
    if (st != ST_OK)
        return st;
    n = PQntuples(r);
    *runs = json_array();
    for (int i = 0; i < n && i < f->limit && st == ST_OK; i++) {
        struct run *run;
        st = run_from_row(r, i, &run, err);
        if (st != ST_OK)
            break;
        json_array_append(*runs, run->json);
        if (i == f->limit - 1 && n > f->limit)
            *next_cursor = cursor_encode(run->created_us, run->id);
        run_free(run);
    }
    PQclear(r);
    if (st != ST_OK) {
        json_decref(*runs);
        *runs = NULL;
        free(*next_cursor);
        *next_cursor = NULL;
    }
    return st;
}

enum status store_runs_locate(struct db *db, const char *id, char tenant[65], struct error *err)
{
    const char *p[1] = {id};
    PGresult *r;
    enum status st = db_run(db, &S_LOCATE, 1, p, &r, err);

    tenant[0] = '\0';
    if (st != ST_OK)
        return st;
    if (PQntuples(r) == 0)
        st = error_set(err, ST_NOT_FOUND, "run \"%s\" does not exist", id);
    else if (PQntuples(r) > 1)
        st = error_set(err, ST_CONFLICT,
                       "run \"%s\" exists in several tenants; choose one with ?tenant=", id);
    else if (strlen(db_val(r, 0, 0)) >= 65)
        st = error_set(err, ST_INTERNAL, "run \"%s\" has a tenant name over 64 characters", id);
    else
        xsnprintf(tenant, 65, "%s", db_val(r, 0, 0));
    PQclear(r);
    return st;
}

enum status store_runs_cancel(struct db *db, const char *tenant, const char *id, struct run **out,
                              bool *changed, struct error *err)
{
    const char *p[2] = {tenant, id};
    PGresult *keep = NULL;
    enum status st = run_query_one(db, &S_CANCEL, 2, p, out, &keep, err);

    if (st != ST_OK)
        return st;
    if (!*out)
        return error_set(err, ST_NOT_FOUND, "run \"%s\" does not exist", id);
    *changed = strcmp(db_val(keep, 0, RUN_NCOLS), "t") == 0;
    PQclear(keep);
    return ST_OK;
}

enum status store_events_list(struct db *db, const char *tenant, const char *run_id,
                              json_t **events, struct error *err)
{
    const char *p[2] = {tenant, run_id};
    json_error_t jerr;
    PGresult *r;
    enum status st = db_run(db, &S_EVENTS, 2, p, &r, err);

    *events = NULL;
    if (st != ST_OK)
        return st;
    if (db_i64(r, 0, 0) == 0)
        st = error_set(err, ST_NOT_FOUND, "run \"%s\" does not exist", run_id);
    else if (!(*events = json_loads(db_val(r, 0, 1), 0, &jerr)))
        st = error_set(err, ST_INTERNAL, "could not parse events JSON: %s", jerr.text);
    PQclear(r);
    return st;
}

enum status store_runs_completions(struct db *db, const char *tenant, int seconds, json_t **out,
                                   struct error *err)
{
    char secs[16];
    const char *p[2] = {tenant, secs};
    json_error_t jerr;
    PGresult *r;
    enum status st;

    xsnprintf(secs, sizeof(secs), "%d", seconds);
    *out = NULL;
    if ((st = db_run(db, &S_COMPLETIONS, 2, p, &r, err)) != ST_OK)
        return st;
    *out = json_loads(db_val(r, 0, 0), 0, &jerr);
    PQclear(r);
    if (!*out)
        return error_set(err, ST_INTERNAL, "could not parse the completions: %s", jerr.text);
    return ST_OK;
}

enum status store_runs_held_total(struct db *db, int64_t *n, struct error *err)
{
    PGresult *r;
    enum status st = db_run(db, &S_HELD_TOTAL, 0, NULL, &r, err);

    *n = 0;
    if (st != ST_OK)
        return st;
    *n = db_i64(r, 0, 0);
    PQclear(r);
    return ST_OK;
}
