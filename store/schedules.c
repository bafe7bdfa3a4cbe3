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
static const struct stmt S_READ = {
    "schedules_read",
    "SELECT u.n, " TS_TO_US("s.last_slot") ", s.paused, s.last_run_id, r.status, "
                                           "r.outcome, " TS_TO_US(
                                               "now()") " FROM unnest($1::text[]) WITH ORDINALITY "
                                                        "AS u(n, i) "
                                                        "LEFT JOIN schedules s ON s.name = u.n "
                                                        "LEFT JOIN runs r ON r.tenant = s.tenant "
                                                        "AND r.id = s.last_run_id ORDER BY u.i"};
static const struct stmt S_LOCK = {
    "schedules_lock",
    "SELECT " TS_TO_US("last_slot") ", paused FROM schedules WHERE name = $1 FOR UPDATE"};
/* The schedule's active runs (the runs_schedule_active index), for its
 * overlap policy; a bounded number is enough to cancel them all over the
 * slots to come. */
static const struct stmt S_ACTIVE = {
    "schedules_active", "SELECT r.id FROM runs r WHERE r.schedule_name = $1 AND r.tenant = $2 "
                        "AND r.status <> 'completed' ORDER BY r.created_at LIMIT 100"};
static const struct stmt S_ADVANCE = {
    "schedules_advance", "UPDATE schedules SET last_slot = " US_TO_TS(
                             "$2") ", last_run_id = coalesce($3, last_run_id), updated_at = now() "
                                   "WHERE name = $1"};
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

static enum status exec_count(struct db *db, const struct stmt *s, int n, const char *const *p,
                              int *affected, struct error *err)
{
    PGresult *r;
    enum status st = db_run(db, s, n, p, &r, err);

    if (st != ST_OK)
        return st;
    if (affected)
        *affected = atoi(PQcmdTuples(r));
    PQclear(r);
    return ST_OK;
}

enum status store_schedules_sync(struct db *db, const char *const *names,
                                 const char *const *tenants, size_t n, struct error *err)
{
    char *a = db_text_array(names, n), *b = db_text_array(tenants, n);
    const char *p[2] = {a, b};
    enum status st = exec_count(db, &S_SYNC, 2, p, NULL, err);

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
        PQclear(r);
        return error_set(err, ST_INTERNAL, "schedules_read returned %d rows for %zu names",
                         PQntuples(r), n);
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

static enum status advance(struct db *db, const char *name, int64_t slot_us, const char *run_id,
                           struct error *err)
{
    char slot[24];
    const char *p[3] = {name, slot, run_id};

    xsnprintf(slot, sizeof(slot), "%lld", (long long)slot_us);
    return exec_count(db, &S_ADVANCE, 3, p, NULL, err);
}

/* The schedule's active runs: whether there are any, and with cancel, each
 * cancelled as POST /runs/{id}/cancel would (queued and waiting end now,
 * running ones are asked to). */
static enum status overlap(struct db *db, const struct schedule_take *t, bool cancel, int *active,
                           int *cancelled, struct error *err)
{
    const char *p[2] = {t->name, t->tenant};
    PGresult *r;
    enum status st = db_run(db, &S_ACTIVE, 2, p, &r, err);

    if (st != ST_OK)
        return st;
    *active = PQntuples(r);
    for (int i = 0; cancel && i < *active && st == ST_OK; i++) {
        struct run *run = NULL;
        bool changed = false;

        st = store_runs_cancel(db, t->tenant, db_val(r, i, 0), &run, &changed, err);
        *cancelled += changed;
        run_free(run);
    }
    PQclear(r);
    return st;
}

/* The body of store_schedules_take, inside its transaction. */
static enum status take(struct db *db, const struct schedule_take *t, enum schedule_taken *out,
                        struct run **run, int *cancelled, struct error *err)
{
    const char *p[1] = {t->name};
    PGresult *r;
    int64_t last;
    bool paused, dedup;
    int active = 0;
    enum status st = db_run(db, &S_LOCK, 1, p, &r, err);

    if (st != ST_OK)
        return st;
    if (PQntuples(r) == 0) {
        PQclear(r);
        return error_set(err, ST_NOT_FOUND, "schedule \"%s\" has no row", t->name);
    }
    last = db_i64(r, 0, 0);
    paused = db_val(r, 0, 1) ? db_val(r, 0, 1)[0] == 't' : t->paused;
    PQclear(r);
    if (last >= t->slot_us) {
        *out = SCHEDULE_ALREADY;
        return ST_OK;
    }
    if (!paused && (t->skip_if_active || t->cancel_active))
        st = overlap(db, t, t->cancel_active, &active, cancelled, err);
    if (st != ST_OK)
        return st;
    if (paused || (t->skip_if_active && active > 0)) {
        *out = paused ? SCHEDULE_SKIPPED_PAUSED : SCHEDULE_SKIPPED_OVERLAP;
        return advance(db, t->name, t->slot_us, NULL, err);
    }
    st = store_runs_submit(db, t->run, run, &dedup, err);
    if (st == ST_OK)
        st = advance(db, t->name, t->slot_us, t->run->id, err);
    *out = SCHEDULE_CREATED;
    return st;
}

enum status store_schedules_take(struct db *db, const struct schedule_take *t,
                                 enum schedule_taken *out, struct run **run, int *cancelled,
                                 struct error *err)
{
    enum status st = db_begin(db, err);

    *run = NULL;
    *cancelled = 0;
    if (st == ST_OK)
        st = db_end(db, take(db, t, out, run, cancelled, err), err);
    if (st != ST_OK) {
        run_free(*run);
        *run = NULL;
        *cancelled = 0;
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
    st = exec_count(db, &S_DROP, 2, p, &n, err);
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
            st = exec_count(db, &S_TRIGGERED, 3, p, NULL, err);
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

    return exec_count(db, &S_PAUSE, 4, p, NULL, err);
}
