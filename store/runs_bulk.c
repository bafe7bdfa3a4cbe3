/* store/runs_bulk.c — a filter's runs and the batches of a bulk cancel or
 * retry (store/runs_bulk.h). A batch names its runs by id and applies the
 * filter and the action's own condition again, under the rows' locks, so
 * that a run that moved on since the match (completed, retried, no longer
 * of a status asked for) is left alone. The transitions are those of the
 * single actions: SET_CANCEL and SET_CANCEL_HOOKS of runs_cancel, and the
 * insert of runs_resubmit with its identity rule. */
#include "store/runs_bulk.h"

#include "common/log.h"
#include "store/runs_internal.h"

#include <stdlib.h>
#include <string.h>

/* The filter, on a runs row "r": $3 statuses, $4 outcomes (text[]), $5
 * type, $6 created at or after, $7 created before, $8 schedule, $9 parent
 * (a follow-up's parent_id, migration 017); NULL for a criterion not
 * given. */
#define BULK_FILTER                                                                                \
    "($3::text[] IS NULL OR r.status = ANY ($3::text[])) AND "                                     \
    "($4::text[] IS NULL OR r.outcome = ANY ($4::text[])) AND ($5::text IS NULL OR r.type = $5) "  \
    "AND ($6::timestamptz IS NULL OR r.created_at >= $6::timestamptz) AND "                        \
    "($7::timestamptz IS NULL OR r.created_at < $7::timestamptz) AND "                             \
    "($8::text IS NULL OR r.schedule_name = $8) AND ($9::text IS NULL OR r.parent_id = $9)"
#define FILTER_PARAMS 7
/* A run no retry was made of (runs_retried, migration 020): a bulk retry
 * sent again acts on the rest, not on the runs it retried the first time. */
#define NOT_RETRIED                                                                                \
    "NOT EXISTS (SELECT FROM runs x WHERE x.tenant = r.tenant AND x.retry_of = r.id)"
/* A run a cancel acts on (runs_active covers status <> 'completed'). */
#define CANCELLABLE "r.status <> 'completed' AND r.status IN " JOINABLE_STATUSES

/* clang-format off */
/* $1 tenant, $2 how many. */
static const struct stmt S_MATCH_CANCEL = {
    "bulk_match_cancel",
    "SELECT r.id, r.type FROM runs r WHERE r.tenant = $1 AND " CANCELLABLE " AND " BULK_FILTER " "
    "ORDER BY r.created_at, r.id LIMIT $2::int"};
static const struct stmt S_MATCH_RETRY = {
    "bulk_match_retry",
    "SELECT r.id, r.type FROM runs r "
    "WHERE r.tenant = $1 AND " RETRYABLE_RUN("r.") " AND " NOT_RETRIED " AND r.step_name IS NULL AND " BULK_FILTER " "
    "ORDER BY r.created_at, r.id LIMIT $2::int"};
/* $2 the ids. The rows are locked in id order, so that two batches over
 * the same runs wait for each other rather than deadlock. */
static const struct stmt S_CANCEL_MANY = {
    "bulk_cancel",
    "WITH cur AS (SELECT r.tenant, r.id, r.status FROM runs r "
        "WHERE r.tenant = $1 AND r.id = ANY ($2::text[]) AND " CANCELLABLE " AND " BULK_FILTER " "
        "ORDER BY r.id FOR UPDATE), "
    "upd AS (UPDATE runs r SET " SET_CANCEL SET_CANCEL_HOOKS "next_poll_at = NULL, "
        "updated_at = now() FROM cur WHERE r.tenant = cur.tenant AND r.id = cur.id "
        "RETURNING r.tenant, r.id, r.type, r.status, r.outcome, r.progress, r.step, "
        "r.created_at), "
    EVENT_FROM_UPD("'status'", "'cancel requested'") " "
    "SELECT id, type, status FROM upd ORDER BY array_position($2::text[], id)"};
/* $2 the runs to retry, $10 the new ids, $11..$14 each one's max_attempts,
 * timeout_s, approval timeout (NULL: none) and on_timeout, $15 who asks.
 * Each item gets its new run, or the run holding its identity: one
 * inserted by an earlier item of this statement, or one active before it;
 * NULL when neither (one that committed or completed meanwhile: the
 * caller tries such an item again). */
static const struct stmt S_RETRY_MANY = {
    "bulk_retry",
    "WITH b AS (SELECT * FROM unnest($2::text[], $10::text[], $11::int[], $12::int[], "
        "$13::int[], $14::text[]) WITH ORDINALITY "
        "AS b(of, id, max_attempts, timeout_s, atmo, aon, n)), "
    "o AS MATERIALIZED (SELECT b.*, r.type, r.priority, r.input, r.identity_hash, "
        "r.request_hash FROM b JOIN runs r ON r.tenant = $1 AND r.id = b.of "
        "WHERE " RETRYABLE_RUN("r.") " AND " NOT_RETRIED " AND " BULK_FILTER "), "
    "upd AS (INSERT INTO runs AS r (tenant, id, type, priority, max_attempts, timeout_s, "
        "input, identity_hash, request_hash, retry_of, initiator, reacts, "
        APPROVAL_INSERT_COLS ") "
        "SELECT $1, o.id, o.type, o.priority, o.max_attempts, o.timeout_s, o.input, "
        "o.identity_hash, o.request_hash, o.of, coalesce($15, 'system'), " REACTS_OF("o.type") ", "
        APPROVAL_INSERT_VALUES("o.atmo", "o.aon", "NULL") " "
        "FROM o ORDER BY o.identity_hash, o.n ON CONFLICT DO NOTHING RETURNING r.*), "
    EVENT_FROM_UPD("'status'", SUBMITTED_MESSAGE) " "
    "SELECT o.n, o.of, o.type, coalesce(u.id, "
        "(SELECT x.id FROM upd x WHERE x.identity_hash = o.identity_hash LIMIT 1), "
        "(SELECT h.id FROM runs h WHERE h.tenant = $1 AND h.identity_hash = o.identity_hash "
        "AND h.status IN " JOINABLE_STATUSES " LIMIT 1)), u.id IS NULL "
    "FROM o LEFT JOIN upd u ON u.id = o.id ORDER BY o.n"};
/* $2 runs' ids: the input of each that exists, with its place in $2. */
static const struct stmt S_INPUTS = {
    "bulk_inputs",
    "SELECT b.n, r.input FROM unnest($2::text[]) WITH ORDINALITY AS b(id, n) "
    "JOIN runs r ON r.tenant = $1 AND r.id = b.id"};
/* clang-format on */

/* An item whose identity could not be settled is tried this many times. */
#define RETRY_TRIES 3
/* A batch that lost a deadlock (it rolled back whole) runs again. */
#define DEADLOCK_TRIES 3

void bulk_match_cleanup(struct bulk_match *m)
{
    for (size_t i = 0; i < m->n; i++) {
        free(m->ids[i]);
        free(m->types[i]);
    }
    free(m->ids);
    free(m->types);
    memset(m, 0, sizeof(*m));
}

void bulk_result_cleanup(struct bulk_result *r)
{
    for (size_t i = 0; i < r->n; i++) {
        free(r->v[i].id);
        free(r->v[i].type);
        free(r->v[i].new_id);
    }
    free(r->v);
    memset(r, 0, sizeof(*r));
}

static struct bulk_acted *result_add(struct bulk_result *r)
{
    r->v = xrealloc(r->v, (r->n + 1) * sizeof(*r->v));
    memset(&r->v[r->n], 0, sizeof(r->v[r->n]));
    return &r->v[r->n++];
}

/* The names of the bits of set as a text[] literal (heap), or NULL when
 * set is 0 (any). */
static char *names_array(unsigned set, int count, const char *(*name)(int))
{
    const char *v[16];
    size_t n = 0;

    for (int i = 0; i < count && n < ARRAY_LEN(v); i++)
        if (set & (1u << i))
            v[n++] = name(i);
    return n ? db_text_array(v, n) : NULL;
}

static const char *status_name_at(int i)
{
    return run_status_name((enum run_status)i);
}

static const char *outcome_name_at(int i)
{
    return run_outcome_name((enum run_outcome)i);
}

/* The filter's parameters ($3..$9) into p[2..8]; the two arrays are heap
 * strings in *st and *oc (free). */
static void filter_params(const struct bulk_filter *f, const char **p, char **st, char **oc)
{
    *st = names_array(f->statuses, RUN_STATUS_COUNT, status_name_at);
    *oc = names_array(f->outcomes, RUN_OUTCOME_COUNT, outcome_name_at);
    p[2] = *st;
    p[3] = *oc;
    p[4] = f->type;
    p[5] = f->created_after;
    p[6] = f->created_before;
    p[7] = f->schedule;
    p[8] = f->parent_id;
}

/* Whether the statement failed as a deadlock's victim (SQLSTATE 40P01). */
static bool lost_deadlock(enum status st, const struct error *err)
{
    return st == ST_UNAVAILABLE && err && strstr(err->message, "deadlock detected") != NULL;
}

/* db_run, again while it loses a deadlock. */
static enum status run_batch(struct db *db, const struct stmt *s, int n, const char *const *p,
                             PGresult **r, struct error *err)
{
    enum status st = db_run(db, s, n, p, r, err);

    for (int again = 1; again < DEADLOCK_TRIES && lost_deadlock(st, err); again++) {
        LOG(LOG_WARN, "retrying a batch of a bulk action: %s", err->message);
        st = db_run(db, s, n, p, r, err);
    }
    return st;
}

enum status store_bulk_match(struct db *db, const char *tenant, enum bulk_action action,
                             const struct bulk_filter *f, int max, struct bulk_match *out,
                             struct error *err)
{
    char lim[16], *st_arr, *oc_arr;
    const char *p[2 + FILTER_PARAMS] = {tenant, lim};
    PGresult *r;
    enum status st;

    memset(out, 0, sizeof(*out));
    xsnprintf(lim, sizeof(lim), "%d", max);
    filter_params(f, p, &st_arr, &oc_arr);
    st = db_run(db, action == BULK_CANCEL ? &S_MATCH_CANCEL : &S_MATCH_RETRY, 2 + FILTER_PARAMS, p,
                &r, err);
    free(st_arr);
    free(oc_arr);
    if (st != ST_OK)
        return st;
    out->n = (size_t)PQntuples(r);
    out->ids = xcalloc(out->n ? out->n : 1, sizeof(*out->ids));
    out->types = xcalloc(out->n ? out->n : 1, sizeof(*out->types));
    for (size_t i = 0; i < out->n; i++) {
        out->ids[i] = xstrdup(db_val(r, (int)i, 0));
        out->types[i] = xstrdup(db_val(r, (int)i, 1));
    }
    PQclear(r);
    return ST_OK;
}

enum status store_bulk_cancel(struct db *db, const char *tenant, const struct bulk_filter *f,
                              const char *const *ids, size_t n, struct bulk_result *out,
                              struct error *err)
{
    char *idv = db_text_array(ids, n), *st_arr, *oc_arr;
    const char *p[2 + FILTER_PARAMS] = {tenant, idv};
    PGresult *r;
    enum status st;

    filter_params(f, p, &st_arr, &oc_arr);
    st = run_batch(db, &S_CANCEL_MANY, 2 + FILTER_PARAMS, p, &r, err);
    free(idv);
    free(st_arr);
    free(oc_arr);
    if (st != ST_OK)
        return st;
    for (int i = 0; i < PQntuples(r); i++) {
        struct bulk_acted *a = result_add(out);
        a->id = xstrdup(db_val(r, i, 0));
        a->type = xstrdup(db_val(r, i, 1));
        a->ended = strcmp(db_val(r, i, 2), "completed") == 0;
    }
    PQclear(r);
    return ST_OK;
}

/* The per-item parameters of S_RETRY_MANY ($2, $10..$14) as array literals
 * (heap, free each): numbers as text, which PostgreSQL casts. */
struct retry_arrays {
    char *of, *id, *maxa, *tmo, *atmo, *aon;
};

static void retry_arrays_make(const struct bulk_retry_item *items, const size_t *which, size_t n,
                              struct retry_arrays *a)
{
    const char **v = xcalloc(6 * (n ? n : 1), sizeof(*v));
    char(*num)[3][16] = xcalloc(n ? n : 1, sizeof(*num));

    for (size_t k = 0; k < n; k++) {
        const struct bulk_retry_item *it = &items[which[k]];
        xsnprintf(num[k][0], sizeof(num[k][0]), "%d", it->max_attempts);
        xsnprintf(num[k][1], sizeof(num[k][1]), "%d", it->timeout_s);
        xsnprintf(num[k][2], sizeof(num[k][2]), "%d", it->approval_timeout_s);
        v[k] = it->of;
        v[n + k] = it->id;
        v[2 * n + k] = num[k][0];
        v[3 * n + k] = num[k][1];
        v[4 * n + k] = it->approval_timeout_s > 0 ? num[k][2] : NULL;
        v[5 * n + k] = it->approve_on_timeout ? "approve" : "reject";
    }
    a->of = db_text_array(v, n);
    a->id = db_text_array(v + n, n);
    a->maxa = db_text_array(v + 2 * n, n);
    a->tmo = db_text_array(v + 3 * n, n);
    a->atmo = db_text_array(v + 4 * n, n);
    a->aon = db_text_array(v + 5 * n, n);
    free(num);
    free(v);
}

static void retry_arrays_free(struct retry_arrays *a)
{
    free(a->of);
    free(a->id);
    free(a->maxa);
    free(a->tmo);
    free(a->atmo);
    free(a->aon);
}

/* One statement over items[which[0..*n)]; the items it settled are
 * appended to out, and which keeps the unsettled ones (*n of them). */
static enum status retry_round(struct db *db, const char *tenant, const char *initiator,
                               const struct bulk_filter *f, const struct bulk_retry_item *items,
                               size_t *which, size_t *n, struct bulk_result *out, struct error *err)
{
    struct retry_arrays a;
    char *st_arr, *oc_arr;
    const char *p[15] = {tenant};
    size_t left = 0;
    PGresult *r;
    enum status st;

    retry_arrays_make(items, which, *n, &a);
    filter_params(f, p, &st_arr, &oc_arr);
    p[1] = a.of, p[9] = a.id, p[10] = a.maxa, p[11] = a.tmo, p[12] = a.atmo, p[13] = a.aon;
    p[14] = initiator;
    st = run_batch(db, &S_RETRY_MANY, 15, p, &r, err);
    retry_arrays_free(&a);
    free(st_arr);
    free(oc_arr);
    if (st != ST_OK)
        return st;
    /* rows in item order (n from 1), so which is compacted in place */
    for (int i = 0; i < PQntuples(r); i++) {
        size_t k = (size_t)db_i64(r, i, 0) - 1;
        struct bulk_acted *ac;
        if (k >= *n)
            continue;
        if (!db_val(r, i, 3)) { /* not settled: tried again */
            which[left++] = which[k];
            continue;
        }
        ac = result_add(out);
        ac->id = xstrdup(db_val(r, i, 1));
        ac->type = xstrdup(db_val(r, i, 2));
        ac->new_id = xstrdup(db_val(r, i, 3));
        ac->joined = strcmp(db_val(r, i, 4), "t") == 0;
    }
    PQclear(r);
    *n = left;
    return ST_OK;
}

enum status store_bulk_retry(struct db *db, const char *tenant, const char *initiator,
                             const struct bulk_filter *f, const struct bulk_retry_item *items,
                             size_t n, struct bulk_result *out, struct error *err)
{
    size_t *which = xcalloc(n ? n : 1, sizeof(*which)), left = n;
    enum status st = ST_OK;

    for (size_t i = 0; i < n; i++)
        which[i] = i;
    for (int round = 0; st == ST_OK && left > 0 && round < RETRY_TRIES; round++)
        st = retry_round(db, tenant, initiator, f, items, which, &left, out, err);
    if (st == ST_OK && left > 0)
        LOG(LOG_WARN, "bulk retry left %zu runs: their identity could not be settled", left);
    free(which);
    return st;
}

/* Rows in any order, each with its place in ids (from 1). */
enum status store_bulk_inputs(struct db *db, const char *tenant, const char *const *ids, size_t n,
                              json_t **inputs, struct error *err)
{
    char *idv = db_text_array(ids, n);
    const char *p[2] = {tenant, idv};
    PGresult *r;
    json_error_t jerr;
    enum status st = db_run(db, &S_INPUTS, 2, p, &r, err);

    free(idv);
    for (size_t i = 0; i < n; i++)
        inputs[i] = NULL;
    if (st != ST_OK)
        return st;
    for (int i = 0; st == ST_OK && i < PQntuples(r); i++) {
        size_t k = (size_t)db_i64(r, i, 0) - 1;
        json_t *in = json_loads(db_val(r, i, 1), JSON_DECODE_ANY, &jerr);
        if (!in)
            st = error_set(err, ST_INTERNAL, "could not read the input of run \"%s\": %s",
                           k < n ? ids[k] : "?", jerr.text);
        else if (k >= n || inputs[k])
            json_decref(in);
        else
            inputs[k] = in;
    }
    PQclear(r);
    for (size_t i = 0; st != ST_OK && i < n; i++) {
        json_decref(inputs[i]);
        inputs[i] = NULL;
    }
    return st;
}
