/* store/runs_batch.c — many submissions in one statement (store_runs_submit_batch).
 *
 * One round is one statement: every item of the round goes through
 * INSERT ... SELECT FROM json_to_recordset(...) ON CONFLICT DO NOTHING, and
 * each item that inserted nothing is matched, in the same statement, with
 * the run that has its id, or else the active run with its identity, as
 * they were before the statement (store_runs_submit's two lookups).
 *
 * The items must behave as if submitted one after another, in order. Two
 * items of one statement only interact through a key they share (the id,
 * or the identity): when the earlier one inserts that key, the later one
 * sees nothing before the statement and would have to look again, and by
 * then a still later item may have inserted its other key. So an item that
 * shares a key with an earlier unsettled item waits for a later round,
 * unless that key already has its row (an id that a result named, an
 * identity whose run a result found active): then neither can insert it and
 * both find that row. An item that found nothing (a run inserted by a
 * concurrent transaction that committed after the statement's snapshot, or
 * one that completed between the insert and the lookup) is tried again, at
 * most SUBMIT_TRIES times, as store_runs_submit does.
 *
 * Two statements that insert the same keys in opposite orders deadlock
 * (each waits for the other's uncommitted key). The rows are inserted in
 * identity order, so batches that share identities (the usual repeat) take
 * them in one order; a statement that still loses a deadlock was rolled
 * back whole and is run again. The runs of a type with a concurrency key
 * come first, in the order of the items: cancel_newest's insert trigger
 * counts the runs inserted before, and the later item is the newer. */
#include "store/runs.h"

#include "common/ids.h"
#include "common/log.h"
#include "store/runs_internal.h"

#include <stdlib.h>
#include <string.h>

#define SUBMIT_TRIES 3

/* The run's scalar columns as RUN_COLS reads them, but '{}' for its JSON:
 * a submission's answer needs only the scalars, and building and parsing
 * the whole run object was a large part of the statement's cost. */
#define SCALARS(r)                                                                                 \
    "'{}', " r ".tenant, " r ".id, " r ".type, " r ".status, " r ".outcome, " r ".attempt, " r     \
    ".max_attempts, (extract(epoch FROM " r ".deadline_at - now()) * 1000)::bigint, "              \
    "(extract(epoch FROM " r ".created_at) * 1000000)::bigint"
/* The run (RUN_NCOLS columns), then the item's position, then kind: 'n'
 * inserted now, 'i' the run with this id, 'd' the active run with this
 * identity; then the found run's request_hash. With unnamed statements,
 * opsrun_submit_batch (migration 027), the same statement in PL/pgSQL:
 * planning it cost more than running it. */
/* Each item's approval, when its type has one. */
#define BATCH_APPROVAL                                                                             \
    APPROVAL_INSERT_VALUES("i.approval_timeout_s", "i.approval_on_timeout", "i.run_at")
/* clang-format off */
static const struct stmt S_BATCH = {
    "runs_submit_batch",
    "WITH i AS MATERIALIZED (SELECT j.*, " REACTS_OF("j.type") " AS reacts "
        "FROM json_to_recordset($1::json) AS j(ord int, tenant text, "
        "id text, type text, priority int, run_at timestamptz, max_attempts int, timeout_s int, "
        "input jsonb, identity_hash text, request_hash text, initiator text, schedule_name text, "
        "schedule_slot timestamptz, approval_timeout_s int, approval_on_timeout text)), "
    "upd AS (INSERT INTO runs AS r (tenant, id, type, priority, run_at, max_attempts, timeout_s, "
        "input, identity_hash, request_hash, initiator, schedule_name, schedule_slot, reacts, "
        APPROVAL_INSERT_COLS ") "
        "SELECT tenant, id, type, priority, coalesce(run_at, now()), max_attempts, timeout_s, "
        "input, identity_hash, request_hash, coalesce(initiator, 'system'), schedule_name, "
        "schedule_slot, i.reacts, " BATCH_APPROVAL " "
        "FROM i ORDER BY tenant, CASE WHEN i.reacts & 256 <> 0 THEN ord END, identity_hash, ord "
        "ON CONFLICT DO NOTHING RETURNING r.*), "
    EVENT_SUBMITTED " "
    "SELECT " SCALARS("u") ", i.ord, 'n', NULL FROM i JOIN upd u "
        "ON u.tenant = i.tenant AND u.id = i.id "
    "UNION ALL SELECT " SCALARS("r") ", i.ord, 'i', r.request_hash FROM i JOIN runs r "
        "ON r.tenant = i.tenant AND r.id = i.id "
        "WHERE NOT EXISTS (SELECT 1 FROM upd u WHERE u.tenant = i.tenant AND u.id = i.id) "
    "UNION ALL SELECT " SCALARS("r") ", i.ord, 'd', NULL FROM i JOIN runs r "
        "ON r.tenant = i.tenant AND r.identity_hash = i.identity_hash "
        "AND r.status IN " JOINABLE_STATUSES " "
        "WHERE NOT EXISTS (SELECT 1 FROM upd u WHERE u.tenant = i.tenant AND u.id = i.id) "
        "AND NOT EXISTS (SELECT 1 FROM runs x WHERE x.tenant = i.tenant AND x.id = i.id)"};
/* clang-format on */
static const struct stmt S_BATCH_FN = {"runs_submit_batch_fn",
                                       "SELECT * FROM opsrun_submit_batch($1::json)"};
#define COL_ORD RUN_NCOLS
#define COL_KIND (RUN_NCOLS + 1)
#define COL_HASH (RUN_NCOLS + 2)

/* What the rounds know about one item. */
struct item_state {
    bool settled;
    int tries;
};

/* A set of (tenant, key) pairs: open addressing over a power of two, at
 * most half full. */
struct keyset {
    char **slot;
    size_t cap, n;
};

static uint64_t key_hash(const char *tenant, const char *key)
{
    uint64_t h = 1469598103934665603ull;

    for (const char *p = tenant; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    h = (h ^ 0x1f) * 1099511628211ull;
    for (const char *p = key; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    return h;
}

static bool key_equal(const char *entry, const char *tenant, const char *key)
{
    size_t tl = strlen(tenant);

    return strncmp(entry, tenant, tl) == 0 && entry[tl] == '\x1f' &&
           strcmp(entry + tl + 1, key) == 0;
}

/* The slot of (tenant, key), or the empty slot where it would go. */
static char **keyset_slot(const struct keyset *ks, const char *tenant, const char *key)
{
    size_t i = (size_t)key_hash(tenant, key) & (ks->cap - 1);

    while (ks->slot[i] && !key_equal(ks->slot[i], tenant, key))
        i = (i + 1) & (ks->cap - 1);
    return &ks->slot[i];
}

static void keyset_init(struct keyset *ks, size_t n)
{
    ks->cap = 16;
    while (ks->cap < 2 * n + 2)
        ks->cap *= 2;
    ks->slot = xcalloc(ks->cap, sizeof(*ks->slot));
    ks->n = 0;
}

static bool keyset_has(const struct keyset *ks, const char *tenant, const char *key)
{
    return *keyset_slot(ks, tenant, key) != NULL;
}

/* The set is sized for every key it will hold (keyset_init). */
static void keyset_add(struct keyset *ks, const char *tenant, const char *key)
{
    char **s = keyset_slot(ks, tenant, key);
    size_t len = strlen(tenant) + strlen(key) + 2;

    if (*s || 2 * (ks->n + 1) > ks->cap)
        return;
    *s = xmalloc(len);
    xsnprintf(*s, len, "%s\x1f%s", tenant, key);
    ks->n++;
}

static void keyset_cleanup(struct keyset *ks)
{
    for (size_t i = 0; i < ks->cap; i++)
        free(ks->slot[i]);
    free(ks->slot);
    ks->slot = NULL;
}

/* The rows known to exist after the rounds so far: ids a result named, and
 * identities whose run a result found active. */
struct known {
    struct keyset ids, identities;
};

/* Picks the round's items (sel[i] true): every unsettled item that shares
 * no key, whose row is not known, with an earlier unsettled one. Returns
 * how many. */
static size_t round_pick(const struct run_new *items, const struct item_state *is, size_t n,
                         const struct known *k, bool *sel)
{
    struct keyset ids, identities;
    size_t picked = 0;

    keyset_init(&ids, n);
    keyset_init(&identities, n);
    for (size_t j = 0; j < n; j++) {
        const struct run_new *rn = &items[j];

        sel[j] = false;
        if (is[j].settled)
            continue;
        sel[j] =
            !(keyset_has(&ids, rn->tenant, rn->id) && !keyset_has(&k->ids, rn->tenant, rn->id)) &&
            !(keyset_has(&identities, rn->tenant, rn->identity_hash) &&
              !keyset_has(&k->identities, rn->tenant, rn->identity_hash));
        keyset_add(&ids, rn->tenant, rn->id);
        keyset_add(&identities, rn->tenant, rn->identity_hash);
        picked += sel[j];
    }
    keyset_cleanup(&ids);
    keyset_cleanup(&identities);
    return picked;
}

/* The round's items as the statement's JSON parameter. */
static char *round_param(const struct run_new *items, const bool *sel, size_t n)
{
    json_t *a = json_array();
    char *text;

    for (size_t i = 0; i < n; i++) {
        const struct run_new *rn = &items[i];
        json_t *o;

        if (!sel[i])
            continue;
        o = json_pack("{s:I, s:s, s:s, s:s, s:i, s:s?, s:i, s:i, s:O, s:s, s:s, s:s?, s:s?, s:s?}",
                      "ord", (json_int_t)i, "tenant", rn->tenant, "id", rn->id, "type", rn->type,
                      "priority", rn->priority, "run_at", rn->run_at, "max_attempts",
                      rn->max_attempts, "timeout_s", rn->timeout_s, "input", (json_t *)rn->input,
                      "identity_hash", rn->identity_hash, "request_hash", rn->request_hash,
                      "initiator", rn->initiator, "schedule_name", rn->schedule_name,
                      "schedule_slot", rn->schedule_slot);
        if (o && rn->approval_timeout_s > 0 &&
            (json_object_set_new(o, "approval_timeout_s", json_integer(rn->approval_timeout_s)) ||
             json_object_set_new(o, "approval_on_timeout",
                                 json_string(rn->approve_on_timeout ? "approve" : "reject")))) {
            json_decref(o);
            o = NULL;
        }
        if (!o || json_array_append_new(a, o) != 0) {
            json_decref(a);
            return NULL;
        }
    }
    text = json_dumps(a, JSON_COMPACT);
    json_decref(a);
    return text;
}

/* Settles item `ord` from one row of the round's result. */
static enum status round_row(const PGresult *r, int row, size_t ord, const struct run_new *items,
                             struct run_submitted *out, struct known *k, struct error *err)
{
    char kind = db_val(r, row, COL_KIND)[0];
    struct run_submitted *o = &out[ord];
    const struct run_new *rn = &items[ord];
    struct run *run = NULL;
    enum status st = run_from_row(r, row, &run, err);

    if (st != ST_OK)
        return st;
    keyset_add(&k->ids, run->tenant, run->id);
    o->dedup = kind != 'n';
    if (kind == 'i' && strcmp(db_val(r, row, COL_HASH), rn->request_hash) != 0) {
        run_free(run);
        o->st = ST_CONFLICT;
        xsnprintf(o->message, sizeof(o->message),
                  "run \"%s\" already exists with a different request body", rn->id);
        return ST_OK;
    }
    if (kind != 'i' && run_status_is_joinable(run->status))
        keyset_add(&k->identities, rn->tenant, rn->identity_hash);
    o->st = ST_OK;
    o->run = run;
    return ST_OK;
}

/* Whether the statement failed as a deadlock's victim (SQLSTATE 40P01,
 * which db_run reports as ST_UNAVAILABLE with PostgreSQL's message). With
 * a server that logs in another language this is never true, and the
 * batch is answered 503 instead of being retried. */
static bool lost_deadlock(const struct error *err)
{
    return err && strstr(err->message, "deadlock detected") != NULL;
}

/* One statement for the picked items; settles those it found a run for. */
static enum status round_run(struct db *db, const struct run_new *items, struct item_state *is,
                             const bool *sel, size_t n, struct run_submitted *out, struct known *k,
                             struct error *err)
{
    char *param = round_param(items, sel, n);
    const char *p[1] = {param};
    const struct stmt *batch = db_stmt_for(db, &S_BATCH, &S_BATCH_FN);
    PGresult *r = NULL;
    enum status st;

    if (!param)
        return error_set(err, ST_INTERNAL, "could not build the batch of submissions");
    st = db_run(db, batch, 1, p, &r, err);
    for (int again = 1; st == ST_UNAVAILABLE && again < SUBMIT_TRIES && lost_deadlock(err);
         again++) {
        LOG(LOG_WARN, "retrying a batch of submissions: %s", err->message);
        st = db_run(db, batch, 1, p, &r, err);
    }
    free(param);
    for (int row = 0; st == ST_OK && row < PQntuples(r); row++) {
        size_t ord = (size_t)db_i64(r, row, COL_ORD);
        if (ord >= n || !sel[ord] || is[ord].settled)
            st = error_set(err, ST_INTERNAL, "the batch statement answered item %zu twice", ord);
        else
            st = round_row(r, row, ord, items, out, k, err);
        if (st == ST_OK)
            is[ord].settled = true;
    }
    PQclear(r);
    return st;
}

/* An item that found nothing SUBMIT_TRIES times gives up, as
 * store_runs_submit does. */
static void round_tries(const struct run_new *items, struct item_state *is, const bool *sel,
                        size_t n, struct run_submitted *out)
{
    for (size_t i = 0; i < n; i++) {
        if (!sel[i] || is[i].settled || ++is[i].tries < SUBMIT_TRIES)
            continue;
        is[i].settled = true;
        out[i].st = ST_UNAVAILABLE;
        xsnprintf(out[i].message, sizeof(out[i].message),
                  "could not settle the identity of run \"%s\"", items[i].id);
    }
}

enum status store_runs_submit_batch(struct db *db, const struct run_new *items, size_t n,
                                    struct run_submitted *out, struct error *err)
{
    struct item_state *is = xcalloc(n ? n : 1, sizeof(*is));
    bool *sel = xcalloc(n ? n : 1, sizeof(*sel));
    struct known k;
    enum status st = ST_OK;

    keyset_init(&k.ids, n);
    keyset_init(&k.identities, n);
    memset(out, 0, n * sizeof(*out));
    while (st == ST_OK && round_pick(items, is, n, &k, sel) > 0) {
        st = round_run(db, items, is, sel, n, out, &k, err);
        round_tries(items, is, sel, n, out);
    }
    if (st != ST_OK)
        run_submitted_cleanup(out, n);
    keyset_cleanup(&k.ids);
    keyset_cleanup(&k.identities);
    free(sel);
    free(is);
    return st;
}

void run_submitted_cleanup(struct run_submitted *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        run_free(out[i].run);
        out[i].run = NULL;
    }
}
