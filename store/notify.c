/* store/notify.c — the rules and the outbox of deliveries (store/notify.h). */
#include "store/notify.h"

#include "store/db_internal.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* A rules row is rewritten only when it changes, so that replicas that
 * start with the same configuration write nothing. The runs that follow a
 * change are found by a scan of runs, once per change of a type's rules.
 * A type's concurrency (migration 022) applies to the runs inserted after
 * it changed: a run keeps the key it was made with, but not its key's
 * max_running: S_CONC_MAX gives the unfinished runs of a group the one
 * its types now have, so that a raised max_running releases held runs
 * (the maintenance sweep) and a lowered one holds the next. */
/* clang-format off */
static const struct stmt S_RULES_SYNC = {
    "rules_sync",
    "WITH i AS (SELECT * FROM jsonb_to_recordset($1::jsonb) AS i(type text, max_attempts int, "
        "timeout_s int, notify jsonb, follow_ups jsonb, approval_timeout_s int, "
        "approval_on_timeout text, conc_group text, conc_parts jsonb, conc_max int, "
        "conc_strategy text, workflow jsonb)), "
    "up AS (INSERT INTO run_type_rules AS t (type, max_attempts, timeout_s, notify, follow_ups, "
        "max_chain_depth, approval_timeout_s, approval_on_timeout, conc_group, conc_parts, "
        "conc_max, conc_strategy, workflow) SELECT type, max_attempts, timeout_s, notify, "
        "follow_ups, $2::int, approval_timeout_s, approval_on_timeout, conc_group, conc_parts, "
        "conc_max, conc_strategy, workflow FROM i "
        "ON CONFLICT (type) DO UPDATE SET max_attempts = EXCLUDED.max_attempts, timeout_s = "
        "EXCLUDED.timeout_s, notify = EXCLUDED.notify, follow_ups = EXCLUDED.follow_ups, "
        "max_chain_depth = EXCLUDED.max_chain_depth, approval_timeout_s = "
        "EXCLUDED.approval_timeout_s, approval_on_timeout = EXCLUDED.approval_on_timeout, "
        "conc_group = EXCLUDED.conc_group, conc_parts = EXCLUDED.conc_parts, "
        "conc_max = EXCLUDED.conc_max, conc_strategy = EXCLUDED.conc_strategy, "
        "workflow = EXCLUDED.workflow, updated_at = now() WHERE (t.max_attempts, t.timeout_s, t.notify, t.follow_ups, "
        "t.max_chain_depth, t.approval_timeout_s, t.approval_on_timeout, t.conc_group, "
        "t.conc_parts, t.conc_max, t.conc_strategy, t.workflow) IS DISTINCT FROM "
        "(EXCLUDED.max_attempts, EXCLUDED.timeout_s, EXCLUDED.notify, EXCLUDED.follow_ups, "
        "EXCLUDED.max_chain_depth, EXCLUDED.approval_timeout_s, EXCLUDED.approval_on_timeout, "
        "EXCLUDED.conc_group, EXCLUDED.conc_parts, EXCLUDED.conc_max, EXCLUDED.conc_strategy, "
        "EXCLUDED.workflow) "
        "RETURNING t.type, t.reacts), "
    "flip AS (UPDATE runs r SET reacts = up.reacts FROM up WHERE r.type = up.type AND r.status "
        "<> 'completed' AND r.reacts <> up.reacts RETURNING 1) "
    "SELECT (SELECT count(*) FROM up), (SELECT count(*) FROM flip)"};
/* clang-format on */

/* The groups' max_running, after a change of rules: the runs of a group
 * share it (the configuration refuses types of one group that disagree).
 * The rows are locked in id order, as a submission's supersede locks the
 * runs of a key, so that the two never wait for each other in a cycle. */
static const struct stmt S_CONC_MAX = {
    "rules_conc_max",
    "WITH g AS (SELECT conc_group, max(conc_max) AS conc_max FROM run_type_rules "
    "WHERE conc_group IS NOT NULL GROUP BY conc_group), "
    "x AS (SELECT r.tenant, r.id, g.conc_max FROM runs r JOIN g ON r.conc_group = g.conc_group "
    "WHERE r.status <> 'completed' AND r.conc_key IS NOT NULL AND r.conc_max <> g.conc_max "
    "ORDER BY r.id FOR UPDATE OF r) "
    "UPDATE runs r SET conc_max = x.conc_max FROM x WHERE r.tenant = x.tenant AND r.id = x.id"};

/* The due deliveries of each notifier with room, oldest first; a candidate
 * whose run has an earlier delivery to the same notifier still owed waits
 * for it. The statements are PL/pgSQL functions (migration 030), so that
 * their plans are made once per connection and stay index lookups on an
 * outbox without statistics. */
static const struct stmt S_CLAIM = {
    "deliveries_claim",
    "SELECT * FROM opsrun_deliveries_claim($1, $2::text[], $3::int[], $4::int)"};

/* Each result an attempt's event on its run; a settled delivery deleted, a
 * retried one due again (opsrun_deliveries_settle, migration 030). */
static const struct stmt S_SETTLE = {"deliveries_settle",
                                     "SELECT opsrun_deliveries_settle($1, $2::jsonb)"};

static const struct stmt S_GIVE_BACK = {
    "deliveries_give_back",
    "UPDATE notifications SET owner = NULL, next_at = now(), attempts = attempts - 1 "
    "WHERE id = ANY ($2::bigint[]) AND owner = $1"};

static const struct stmt S_PENDING = {
    "deliveries_pending",
    "SELECT count(*), coalesce(extract(epoch FROM now() - min(next_at) FILTER (WHERE owner IS "
    "NULL AND next_at <= now())), 0)::float8 FROM notifications"};

enum status store_rules_sync(struct db *db, const char *rules, int max_chain_depth, int *types,
                             int64_t *runs, struct error *err)
{
    char depth[16];
    const char *p[2] = {rules, depth};
    PGresult *r;
    enum status st;
    int changed;

    xsnprintf(depth, sizeof(depth), "%d", max_chain_depth);
    if ((st = db_run(db, &S_RULES_SYNC, 2, p, &r, err)) != ST_OK)
        return st;
    changed = (int)db_i64(r, 0, 0);
    if (types)
        *types = changed;
    if (runs)
        *runs = db_i64(r, 0, 1);
    PQclear(r);
    if (changed > 0 && (st = db_exec_count(db, &S_CONC_MAX, 0, NULL, NULL, err)) != ST_OK)
        return st;
    return ST_OK;
}

void delivery_cleanup(struct delivery *d, size_t n)
{
    for (size_t i = 0; d && i < n; i++) {
        free(d[i].tenant);
        free(d[i].run_id);
        free(d[i].notifier);
        free(d[i].event);
        free(d[i].run_json);
    }
}

/* An int[] literal of v[0..n). */
static char *int_array(const int *v, size_t n)
{
    size_t cap = 3 + n * 12, len = 0;
    char *s = xmalloc(cap);

    len += xsnprintf(s, cap, "{");
    for (size_t i = 0; i < n; i++)
        len += xsnprintf(s + len, cap - len, "%s%d", i ? "," : "", v[i]);
    xsnprintf(s + len, cap - len, "}");
    return s;
}

enum status store_deliveries_claim(struct db *db, const char *owner, const char *const *notifiers,
                                   const int *rooms, size_t n, int lease_ms, struct delivery **out,
                                   size_t *n_out, struct error *err)
{
    char lease[16], *names = db_text_array(notifiers, n), *room = int_array(rooms, n);
    const char *p[4] = {owner, names, room, lease};
    PGresult *r;
    enum status st;
    int rows;

    *out = NULL;
    *n_out = 0;
    xsnprintf(lease, sizeof(lease), "%d", lease_ms);
    st = db_run(db, &S_CLAIM, 4, p, &r, err);
    free(names);
    free(room);
    if (st != ST_OK)
        return st;
    rows = PQntuples(r);
    *out = xcalloc(rows ? (size_t)rows : 1, sizeof(**out));
    for (int i = 0; i < rows; i++) {
        struct delivery *d = &(*out)[i];
        d->id = db_i64(r, i, 0);
        xsnprintf(d->delivery_id, sizeof(d->delivery_id), "%s", db_val(r, i, 1));
        d->tenant = xstrdup(db_val(r, i, 2));
        d->run_id = xstrdup(db_val(r, i, 3));
        d->notifier = xstrdup(db_val(r, i, 4));
        d->event = xstrdup(db_val(r, i, 5));
        /* never NULL from migration 036's claim; "null" is refused later */
        d->run_json = xstrdup(db_val(r, i, 6) ? db_val(r, i, 6) : "null");
        d->attempts = (int)db_i64(r, i, 7);
        d->age_ms = db_i64(r, i, 8);
    }
    *n_out = (size_t)rows;
    PQclear(r);
    return ST_OK;
}

enum status store_deliveries_settle(struct db *db, const char *owner,
                                    const struct delivery_result *results, size_t n, int *written,
                                    struct error *err)
{
    json_t *arr = json_array();
    const char *p[2] = {owner, NULL};
    char *text;
    PGresult *r;
    enum status st;

    for (size_t i = 0; i < n; i++)
        json_array_append_new(
            arr, json_pack("{s:I, s:i, s:I, s:s}", "id", (json_int_t)results[i].id, "attempts",
                           results[i].attempts, "retry_ms", (json_int_t)results[i].retry_ms,
                           "message", results[i].message));
    text = json_dumps(arr, JSON_COMPACT);
    json_decref(arr);
    if (!text)
        return error_set(err, ST_INTERNAL, "could not encode the results of %zu deliveries", n);
    p[1] = text;
    st = db_run(db, &S_SETTLE, 2, p, &r, err);
    free(text);
    if (st != ST_OK)
        return st;
    if (written)
        *written = (int)db_i64(r, 0, 0);
    PQclear(r);
    return ST_OK;
}

enum status store_deliveries_give_back(struct db *db, const char *owner, const int64_t *ids,
                                       size_t n, struct error *err)
{
    size_t cap = 3 + n * 22, len = 0;
    char *arr = xmalloc(cap);
    const char *p[2] = {owner, arr};
    enum status st;

    len += xsnprintf(arr, cap, "{");
    for (size_t i = 0; i < n; i++)
        len += xsnprintf(arr + len, cap - len, "%s%lld", i ? "," : "", (long long)ids[i]);
    xsnprintf(arr + len, cap - len, "}");
    st = db_exec_count(db, &S_GIVE_BACK, 2, p, NULL, err);
    free(arr);
    return st;
}

enum status store_deliveries_pending(struct db *db, int64_t *pending, double *oldest_due_s,
                                     struct error *err)
{
    PGresult *r;
    enum status st = db_run(db, &S_PENDING, 0, NULL, &r, err);

    if (st != ST_OK)
        return st;
    *pending = db_i64(r, 0, 0);
    *oldest_due_s = strtod(db_val(r, 0, 1), NULL);
    PQclear(r);
    return ST_OK;
}
