/* store/schedules.c — the schedules table (migration 015) and the
 * transaction that takes a slot. Instants cross the boundary as
 * microseconds since the epoch, exact both ways. */
#include "store/schedules.h"

#include "store/db_internal.h"

#include <stdlib.h>
#include <string.h>

#define US_TO_TS(p) "(timestamptz 'epoch' + " p "::bigint * interval '1 microsecond')"
#define TS_TO_US(c) "(extract(epoch FROM " c ") * 1000000)::bigint"

static const struct stmt S_SYNC = {
    "schedules_sync",
    "INSERT INTO schedules AS s (name, tenant, last_slot) "
    "SELECT n, t, now() FROM unnest($1::text[], $2::text[]) AS u(n, t) "
    "ON CONFLICT (name) DO UPDATE SET tenant = EXCLUDED.tenant, updated_at = now() "
    "WHERE s.tenant <> EXCLUDED.tenant"};
/* Each name's row (all NULL for a name without one): its last slot, the
 * pause, its last run's status and outcome, the database's clock, and
 * whether a slot came due since the row was made (the row starts at the
 * moment it was made, which is no slot). */
static const struct stmt S_READ = {
    "schedules_read",
    "SELECT u.n, " TS_TO_US("s.last_slot") ", s.paused, s.last_run_id, r.status, "
                                           "r.outcome, " TS_TO_US(
                                               "now()") ", s.last_slot > s.created_at "
                                                        "FROM unnest($1::text[]) WITH ORDINALITY "
                                                        "AS u(n, i) "
                                                        "LEFT JOIN schedules s ON s.name = u.n "
                                                        "LEFT JOIN runs r ON r.tenant = s.tenant "
                                                        "AND r.id = s.last_run_id ORDER BY u.i"};
/* The schedules of a batch that no other transaction holds, locked. */
static const struct stmt S_LOCK = {
    "schedules_lock",
    "SELECT name, " TS_TO_US(
        "last_slot") ", paused FROM schedules "
                     "WHERE name = ANY ($1::text[]) ORDER BY name FOR UPDATE SKIP LOCKED"};
/* How many runs of each of them are active (runs_schedule_active). */
static const struct stmt S_ACTIVE_COUNT = {"schedules_active_count",
                                           "SELECT r.schedule_name, count(*) FROM runs r "
                                           "WHERE r.schedule_name = ANY ($1::text[]) "
                                           "AND r.status <> 'completed' GROUP BY 1"};
/* A schedule's active runs (the runs_schedule_active index), for
 * cancel_previous; a bounded number is enough to cancel them all over the
 * slots to come. */
static const struct stmt S_ACTIVE = {
    "schedules_active", "SELECT r.id FROM runs r WHERE r.schedule_name = $1 AND r.tenant = $2 "
                        "AND r.status <> 'completed' ORDER BY r.created_at LIMIT 100"};
/* Every schedule of a batch moved to its last slot taken (and its last
 * run, when a slot made one). */
static const struct stmt S_ADVANCE = {
    "schedules_advance",
    "UPDATE schedules s SET last_slot = timestamptz 'epoch' + u.us * interval '1 microsecond', "
    "last_run_id = coalesce(u.run, s.last_run_id), updated_at = now() "
    "FROM unnest($1::text[], $2::bigint[], $3::text[]) AS u(n, us, run) WHERE s.name = u.n"};
static const struct stmt S_DROP = {
    "schedules_drop",
    "UPDATE schedules SET last_slot = " US_TO_TS(
        "$2") ", updated_at = now() WHERE name = $1 AND last_slot < " US_TO_TS("$2")};
/* The API's writes: the row may not exist yet when a replica answers before
 * its scheduler has synced, so they make it as the sync would. */
static const struct stmt S_PAUSE = {
    "schedules_pause",
    "INSERT INTO schedules AS s (name, tenant, last_slot, paused, paused_by, paused_at) "
    "VALUES ($1, $2, now(), $3::bool, $4, now()) ON CONFLICT (name) DO UPDATE SET "
    "paused = $3::bool, paused_by = $4, paused_at = now(), updated_at = now()"};
static const struct stmt S_TRIGGERED = {
    "schedules_triggered",
    "INSERT INTO schedules AS s (name, tenant, last_slot, last_run_id) "
    "VALUES ($1, $2, now(), $3) ON CONFLICT (name) DO UPDATE SET last_run_id = $3, "
    "updated_at = now()"};

void schedule_state_cleanup(struct schedule_state *s, size_t n)
{
    for (size_t i = 0; s && i < n; i++) {
        free(s[i].name);
        free(s[i].last_run_id);
        free(s[i].last_status);
        free(s[i].last_outcome);
        memset(&s[i], 0, sizeof(s[i]));
    }
}

static char *dup_or_null(const char *s)
{
    return s ? xstrdup(s) : NULL;
}

enum status store_schedules_sync(struct db *db, const char *const *names,
                                 const char *const *tenants, size_t n, struct error *err)
{
    char *a = db_text_array(names, n), *b = db_text_array(tenants, n);
    const char *p[2] = {a, b};
    enum status st = db_exec_count(db, &S_SYNC, 2, p, NULL, err);

    free(a);
    free(b);
    return st;
}

enum status store_schedules_read(struct db *db, const char *const *names, size_t n,
                                 struct schedule_state *out, int64_t *now_us, struct error *err)
{
    char *a = db_text_array(names, n);
    const char *p[1] = {a};
    PGresult *r;
    enum status st = db_run(db, &S_READ, 1, p, &r, err);

    free(a);
    memset(out, 0, n * sizeof(*out));
    if (st != ST_OK)
        return st;
    if ((size_t)PQntuples(r) != n) {
        int got = PQntuples(r);
        PQclear(r);
        return error_set(err, ST_INTERNAL, "schedules_read returned %d rows for %zu names", got, n);
    }
    for (size_t i = 0; i < n; i++) {
        const char *paused = db_val(r, (int)i, 2);

        out[i].name = xstrdup(db_val(r, (int)i, 0));
        out[i].last_slot_us = db_i64(r, (int)i, 1);
        out[i].has_paused = paused != NULL;
        out[i].paused = paused && paused[0] == 't';
        out[i].last_run_id = dup_or_null(db_val(r, (int)i, 3));
        out[i].last_status = dup_or_null(db_val(r, (int)i, 4));
        out[i].last_outcome = dup_or_null(db_val(r, (int)i, 5));
        out[i].slot_taken = db_val(r, (int)i, 7) && db_val(r, (int)i, 7)[0] == 't';
    }
    *now_us = n ? db_i64(r, 0, 6) : 0;
    PQclear(r);
    return ST_OK;
}

void schedule_result_cleanup(struct schedule_result *r, size_t n)
{
    for (size_t i = 0; r && i < n; i++) {
        run_free(r[i].run);
        r[i].run = NULL;
    }
}

/* What a batch knows of one schedule it names: locked or not, its state as
 * the slots so far leave it. */
struct sched_row {
    const char *name, *tenant;
    bool locked, has_paused, paused;
    int64_t last_us;
    int64_t active;       /* its active runs, as the slots so far leave them */
    const char *last_run; /* the run of its last slot in the batch that made one */
    bool changed;
};

static int row_cmp(const void *a, const void *b)
{
    return strcmp(((const struct sched_row *)a)->name, ((const struct sched_row *)b)->name);
}

static struct sched_row *row_find(struct sched_row *rows, size_t n, const char *name)
{
    struct sched_row key = {.name = name};

    return bsearch(&key, rows, n, sizeof(*rows), row_cmp);
}

/* The distinct schedules of t[0..n), sorted by name. */
static struct sched_row *rows_of(const struct schedule_take *t, size_t n, size_t *nrows)
{
    struct sched_row *rows = xcalloc(n ? n : 1, sizeof(*rows));
    size_t k = 0;

    for (size_t i = 0; i < n; i++)
        rows[k++] = (struct sched_row){.name = t[i].name, .tenant = t[i].tenant};
    qsort(rows, k, sizeof(*rows), row_cmp);
    *nrows = 0;
    for (size_t i = 0; i < k; i++)
        if (*nrows == 0 || strcmp(rows[*nrows - 1].name, rows[i].name) != 0)
            rows[(*nrows)++] = rows[i];
    return rows;
}

static char *names_array(const struct sched_row *rows, size_t n)
{
    const char **v = xcalloc(n ? n : 1, sizeof(*v));
    char *a;

    for (size_t i = 0; i < n; i++)
        v[i] = rows[i].name;
    a = db_text_array(v, n);
    free(v);
    return a;
}

/* Locks the rows no one else holds, and counts their active runs. */
static enum status rows_lock(struct db *db, struct sched_row *rows, size_t n, struct error *err)
{
    char *names = names_array(rows, n);
    const char *p[1] = {names};
    PGresult *r;
    enum status st = db_run(db, &S_LOCK, 1, p, &r, err);

    for (int i = 0; st == ST_OK && i < PQntuples(r); i++) {
        struct sched_row *row = row_find(rows, n, db_val(r, i, 0));
        const char *paused = db_val(r, i, 2);
        if (!row)
            continue;
        row->locked = true;
        row->last_us = db_i64(r, i, 1);
        row->has_paused = paused != NULL;
        row->paused = paused && paused[0] == 't';
    }
    if (st == ST_OK) {
        PQclear(r);
        st = db_run(db, &S_ACTIVE_COUNT, 1, p, &r, err);
    }
    for (int i = 0; st == ST_OK && i < PQntuples(r); i++) {
        struct sched_row *row = row_find(rows, n, db_val(r, i, 0));
        if (row)
            row->active = db_i64(r, i, 1);
    }
    if (st == ST_OK)
        PQclear(r);
    free(names);
    return st;
}

/* cancel_previous: the schedule's active runs cancelled, as POST
 * /runs/{id}/cancel would (queued and waiting end now, running ones are
 * asked to). */
static enum status cancel_active(struct db *db, struct sched_row *row, int *cancelled,
                                 struct error *err)
{
    const char *p[2] = {row->name, row->tenant};
    PGresult *r;
    enum status st = db_run(db, &S_ACTIVE, 2, p, &r, err);

    for (int i = 0; st == ST_OK && i < PQntuples(r); i++) {
        struct run *run = NULL;
        bool changed = false;

        st = store_runs_cancel(db, row->tenant, db_val(r, i, 0), &run, &changed, err);
        *cancelled += changed;
        run_free(run);
    }
    PQclear(r); /* NULL when the query failed */
    if (st == ST_OK)
        row->active = 0;
    return st;
}

/* Decides slot t against its schedule's row: a run to make (true), or its
 * result without one. A run made earlier in the batch is inserted only at
 * its end, so cancel_previous cannot cancel it yet: a second slot of such a
 * schedule waits for the next batch (SCHEDULE_BUSY). */
static enum status decide(struct db *db, const struct schedule_take *t, struct sched_row *row,
                          struct schedule_result *out, bool *make, struct error *err)
{
    bool paused = row && (row->has_paused ? row->paused : t->paused);

    *make = false;
    if (!row || !row->locked || (t->cancel_active && row->last_run)) {
        out->taken = SCHEDULE_BUSY;
        return ST_OK;
    }
    if (row->last_us >= t->slot_us) {
        out->taken = SCHEDULE_ALREADY;
        return ST_OK;
    }
    row->last_us = t->slot_us;
    row->changed = true;
    if (paused || (t->skip_if_active && row->active > 0)) {
        out->taken = paused ? SCHEDULE_SKIPPED_PAUSED : SCHEDULE_SKIPPED_OVERLAP;
        return ST_OK;
    }
    if (t->cancel_active && row->active > 0) {
        enum status st = cancel_active(db, row, &out->cancelled, err);
        if (st != ST_OK)
            return st;
    }
    out->taken = SCHEDULE_CREATED;
    *make = true;
    row->active++;
    row->last_run = t->run->id;
    return ST_OK;
}

/* The runs the slots make, in one statement. */
static enum status make_runs(struct db *db, const struct schedule_take *t, const size_t *which,
                             size_t n, struct schedule_result *out, struct error *err)
{
    struct run_new *items = xcalloc(n ? n : 1, sizeof(*items));
    struct run_submitted *sub = xcalloc(n ? n : 1, sizeof(*sub));
    enum status st;

    for (size_t k = 0; k < n; k++)
        items[k] = *t[which[k]].run;
    st = n ? store_runs_submit_batch(db, items, n, sub, err) : ST_OK;
    for (size_t k = 0; st == ST_OK && k < n; k++) {
        struct schedule_result *o = &out[which[k]];
        if (sub[k].st == ST_CONFLICT) {
            o->taken = SCHEDULE_CONFLICT;
        } else if (sub[k].st != ST_OK) {
            st = error_set(err, sub[k].st, "%s", sub[k].message);
        } else {
            o->run = sub[k].run;
            sub[k].run = NULL;
        }
    }
    run_submitted_cleanup(sub, n);
    free(sub);
    free(items);
    return st;
}

static enum status rows_advance(struct db *db, const struct sched_row *rows, size_t n,
                                struct error *err)
{
    const char **names = xcalloc(n ? n : 1, sizeof(*names)),
               **runs = xcalloc(n ? n : 1, sizeof(*runs));
    size_t cap = 3 + n * 22, len = 1, k = 0;
    char *us = xmalloc(cap), *a, *c;
    const char *p[3];
    enum status st;

    us[0] = '{';
    for (size_t i = 0; i < n; i++) {
        if (!rows[i].changed)
            continue;
        names[k] = rows[i].name;
        runs[k] = rows[i].last_run;
        len += xsnprintf(us + len, cap - len, "%s%lld", k ? "," : "", (long long)rows[i].last_us);
        k++;
    }
    xsnprintf(us + len, cap - len, "}");
    a = db_text_array(names, k);
    c = db_text_array(runs, k);
    p[0] = a, p[1] = us, p[2] = c;
    st = k ? db_exec_count(db, &S_ADVANCE, 3, p, NULL, err) : ST_OK;
    free(a);
    free(c);
    free(us);
    free(names);
    free(runs);
    return st;
}

/* The body of store_schedules_take, inside its transaction. */
static enum status take(struct db *db, const struct schedule_take *t, size_t n,
                        struct schedule_result *out, struct error *err)
{
    size_t nrows = 0, nmake = 0, *which = xcalloc(n ? n : 1, sizeof(*which));
    struct sched_row *rows = rows_of(t, n, &nrows);
    enum status st = rows_lock(db, rows, nrows, err);

    for (size_t i = 0; st == ST_OK && i < n; i++) {
        bool make = false;
        st = decide(db, &t[i], row_find(rows, nrows, t[i].name), &out[i], &make, err);
        if (make)
            which[nmake++] = i;
    }
    if (st == ST_OK)
        st = make_runs(db, t, which, nmake, out, err);
    if (st == ST_OK)
        st = rows_advance(db, rows, nrows, err);
    free(rows);
    free(which);
    return st;
}

enum status store_schedules_take(struct db *db, const struct schedule_take *t, size_t n,
                                 struct schedule_result *out, struct error *err)
{
    enum status st = db_begin(db, err);

    memset(out, 0, n * sizeof(*out));
    if (st == ST_OK)
        st = db_end(db, take(db, t, n, out, err), err);
    if (st != ST_OK) {
        schedule_result_cleanup(out, n);
        memset(out, 0, n * sizeof(*out));
    }
    return st;
}

enum status store_schedules_drop(struct db *db, const char *name, int64_t upto_us, bool *moved,
                                 struct error *err)
{
    char slot[24];
    const char *p[2] = {name, slot};
    int n = 0;
    enum status st;

    xsnprintf(slot, sizeof(slot), "%lld", (long long)upto_us);
    st = db_exec_count(db, &S_DROP, 2, p, &n, err);
    *moved = n > 0;
    return st;
}

enum status store_schedules_trigger(struct db *db, const char *name, const struct run_new *run,
                                    struct run **out, struct error *err)
{
    const char *p[3] = {name, run->tenant, run->id};
    bool dedup;
    enum status st = db_begin(db, err);

    *out = NULL;
    if (st == ST_OK) {
        st = store_runs_submit(db, run, out, &dedup, err);
        if (st == ST_OK)
            st = db_exec_count(db, &S_TRIGGERED, 3, p, NULL, err);
        st = db_end(db, st, err);
    }
    if (st != ST_OK) {
        run_free(*out);
        *out = NULL;
    }
    return st;
}

enum status store_schedules_set_paused(struct db *db, const char *name, const char *tenant,
                                       bool paused, const char *by, struct error *err)
{
    const char *p[4] = {name, tenant, paused ? "true" : "false", by};

    return db_exec_count(db, &S_PAUSE, 4, p, NULL, err);
}
