/* store/events.c — the id-horizon reader of run_events (store/events.h,
 * docs/design-event-order.md). The horizon and the settle check are the SQL
 * functions of migration 003; each step is its own statement so that the
 * page read takes a snapshot after the horizon has settled. */
#include "store/events.h"

#include "store/db_internal.h"
#include "store/events_internal.h"

#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const struct stmt S_HORIZON = {
    "events_horizon",
    "SELECT h, inflight::text, cardinality(inflight) FROM opsrun_event_horizon()"};
static const struct stmt S_SETTLED = {"events_settled", "SELECT opsrun_events_settled($1::text[])"};
/* The columns every event reader returns, in struct event_row's order. */
#define EVENT_COLS                                                                                 \
    "e.id, e.tenant, e.run_id, e.type, e.status, r.type, "                                         \
    "CASE WHEN r.id IS NULL THEN NULL ELSE opsrun_run_json_at(r, e)::text END"
/* A LEFT JOIN, so an event whose run is gone still comes back (run JSON
 * NULL) and the position can move past it. A run's representation is built
 * once, on the first of its events in the page (i = fi, the row numbers
 * from 0), and set as of each event in C (deliver_runs): building it cost
 * more than everything else the reader does. Columns: EVENT_COLS's, then
 * the event's outcome, progress and step, then fi, then the run's
 * parent_id (GET /stream?parent_id=). */
static const struct stmt S_AFTER = {
    "events_after",
    "WITH e AS (SELECT id, tenant, run_id, run_created_at, type, status, outcome, progress, step "
    "FROM run_events WHERE id > $1::bigint AND id <= $2::bigint ORDER BY id LIMIT $3::int), "
    "k AS (SELECT e.*, row_number() OVER (ORDER BY e.id) - 1 AS i FROM e), "
    "f AS (SELECT k.*, first_value(k.i) OVER (PARTITION BY k.tenant, k.run_id, k.run_created_at "
    "ORDER BY k.id) "
    "AS fi FROM k) "
    "SELECT e.id, e.tenant, e.run_id, e.type, e.status, r.type, "
    "CASE WHEN r.id IS NOT NULL AND e.i = e.fi THEN opsrun_run_json(r)::text END, "
    "e.outcome, e.progress, e.step, e.fi, r.parent_id "
    "FROM f e LEFT JOIN runs r ON " EVENT_OF_RUN " ORDER BY e.id"};
/* The events that complete a run, for long-polls: no run, no join. */
static const struct stmt S_ENDED = {
    "events_ended", "SELECT id, tenant, run_id, type, status, NULL::text, NULL::text "
                    "FROM run_events WHERE id > $1::bigint AND id <= $2::bigint "
                    "AND status = 'completed' ORDER BY id LIMIT $3::int"};
/* One event's run as of the event, built by PostgreSQL: for a run whose
 * representation jansson cannot hold (deliver_runs). */
static const struct stmt S_RUN_AT = {
    "events_run_at", "SELECT opsrun_run_json_at(r, e)::text FROM run_events e JOIN runs r "
                     "ON " EVENT_OF_RUN " WHERE e.id = $1::bigint"};
/* One run's events: the run_events_run index. */
static const struct stmt S_REPLAY_RUN = {
    "events_replay_run",
    "SELECT " EVENT_COLS " FROM run_events e JOIN runs r ON " EVENT_OF_RUN " "
    "WHERE e.tenant = $1 AND e.run_id = $2 AND e.id > $3::bigint AND e.id <= $4::bigint "
    "ORDER BY e.id LIMIT $5::int"};
/* Every run's events of a tenant: the primary key's id range. */
static const struct stmt S_REPLAY_ALL = {
    "events_replay_all",
    "SELECT " EVENT_COLS " FROM run_events e JOIN runs r ON " EVENT_OF_RUN " "
    "WHERE e.id > $1::bigint AND e.id <= $2::bigint AND ($3::text IS NULL OR "
    "e.tenant = $3) "
    "AND ($4::text IS NULL OR r.type = $4) AND ($5::text IS NULL OR e.status = $5) "
    "AND ($7::text IS NULL OR r.parent_id = $7) ORDER BY e.id LIMIT $6::int"};
/* One statement, so the run and its newest event id agree: every writer
 * locks the run row before it inserts the event (design-event-order.md). */
static const struct stmt S_RUN_SNAPSHOT = {
    "events_run_snapshot",
    "SELECT opsrun_run_json(r)::text, r.status = 'completed', "
    "(SELECT max(e.id) FROM run_events e WHERE " EVENT_OF_RUN "), "
    "EXISTS (SELECT 1 FROM run_events e WHERE " EVENT_OF_RUN " AND e.id = $3::bigint), "
    "(SELECT min(e.id) FROM run_events e WHERE " EVENT_OF_RUN " AND e.type = 'status' AND "
    "e.status = 'completed') FROM runs r WHERE r.tenant = $1 AND r.id = $2"};
/* The active runs of one tenant in id order (the runs_active index), or of
 * every tenant in (id, tenant) order, after the cursor ($1, $2). */
#define ACTIVE_SQL(cond, order)                                                                    \
    "SELECT (SELECT coalesce(max(e.id), 0) FROM run_events e WHERE " EVENT_OF_RUN "), "            \
    "r.tenant, r.id, 'snapshot', r.status, r.type, "                                               \
    "opsrun_run_json(r)::text FROM runs r WHERE r.status <> 'completed' AND " cond " "             \
    "AND ($3::text IS NULL OR r.type = $3) AND ($4::text IS NULL OR r.status = $4) "               \
    "AND ($6::text IS NULL OR r.parent_id = $6) ORDER BY " order " LIMIT $5::int"
static const struct stmt S_ACTIVE = {"events_active",
                                     ACTIVE_SQL("r.tenant = $1 AND r.id > $2", "r.id")};
static const struct stmt S_ACTIVE_ALL = {
    "events_active_all", ACTIVE_SQL("(r.id, r.tenant) > ($2, $1)", "r.id, r.tenant")};
static const struct stmt S_BOUNDS = {
    "events_bounds", "SELECT CASE WHEN s.is_called THEN s.last_value ELSE 0 END, "
                     "(SELECT upto FROM run_events_pruned) FROM run_events_id_seq s"};

#define SETTLE_POLL_MS 2

void event_horizon_cleanup(struct event_horizon *h)
{
    if (!h)
        return;
    free(h->inflight);
    h->inflight = NULL;
    h->ninflight = 0;
}

enum status store_events_horizon(struct db *db, struct event_horizon *h, struct error *err)
{
    PGresult *r;
    enum status st = db_run(db, &S_HORIZON, 0, NULL, &r, err);

    h->h = 0;
    h->ninflight = 0;
    h->inflight = NULL;
    if (st != ST_OK)
        return st;
    if (PQntuples(r) != 1 || !db_val(r, 0, 0) || !db_val(r, 0, 1)) {
        PQclear(r);
        return error_set(err, ST_DB, "%s failed: unexpected result", S_HORIZON.name);
    }
    h->h = db_i64(r, 0, 0);
    h->ninflight = (int)db_i64(r, 0, 2);
    h->inflight = xstrdup(db_val(r, 0, 1));
    PQclear(r);
    return ST_OK;
}

enum status store_events_settled(struct db *db, const struct event_horizon *h, bool *settled,
                                 struct error *err)
{
    const char *p[1] = {h->inflight};
    PGresult *r;
    enum status st;

    *settled = false;
    if (!h->inflight)
        return error_set(err, ST_INVALID, "could not check the event horizon: none taken");
    if (h->ninflight == 0) {
        *settled = true;
        return ST_OK;
    }
    st = db_run(db, &S_SETTLED, 1, p, &r, err);
    if (st != ST_OK)
        return st;
    if (PQntuples(r) != 1 || !db_val(r, 0, 0)) {
        PQclear(r);
        return error_set(err, ST_DB, "%s failed: unexpected result", S_SETTLED.name);
    }
    *settled = strcmp(db_val(r, 0, 0), "t") == 0;
    PQclear(r);
    return ST_OK;
}

/* Fails with ST_INTERNAL when a row's status is outside the names table
 * (the schema and this binary disagree), before any row is passed on. */
static enum status check_statuses(const PGresult *r, struct error *err)
{
    enum run_status status;

    for (int i = 0; i < PQntuples(r); i++)
        if (!run_status_parse(db_val(r, i, 4), &status))
            return error_set(err, ST_INTERNAL, "could not parse event %s: unknown status \"%s\"",
                             db_val(r, i, 0), db_val(r, i, 4));
    return ST_OK;
}

/* Row i of an EVENT_COLS result, with run_json as given. */
static struct event_row event_of(const PGresult *r, int i, const char *run_json)
{
    struct event_row ev = {
        .id = db_i64(r, i, 0),
        .tenant = db_val(r, i, 1),
        .run_id = db_val(r, i, 2),
        .kind = db_val(r, i, 3),
        .run_type = db_val(r, i, 5),
        .run_json = run_json,
    };

    (void)run_status_parse(db_val(r, i, 4), &ev.status);
    return ev;
}

/* Passes each row of an EVENT_COLS result to fn; *n gets the row count. */
static enum status deliver(const PGresult *r, event_fn fn, void *arg, int *n, struct error *err)
{
    enum status st = check_statuses(r, err);

    if (st != ST_OK)
        return st;
    for (int i = 0; i < PQntuples(r); i++) {
        struct event_row ev = event_of(r, i, db_val(r, i, 6));
        fn(arg, &ev);
    }
    *n = PQntuples(r);
    return ST_OK;
}

/* Sets run (a run's representation) as of row i of S_AFTER: the event's
 * status, outcome, progress and step, as opsrun_run_json_at does. jansson
 * keeps each member where it is. False when a value cannot be held. */
static bool run_as_of(json_t *run, const PGresult *r, int i)
{
    const char *step = db_val(r, i, 9);

    return json_object_set_new(run, "status", json_string(db_val(r, i, 4))) == 0 &&
           json_object_set_new(run, "outcome", json_string(db_val(r, i, 7))) == 0 &&
           json_object_set_new(run, "progress", json_integer(db_i64(r, i, 8))) == 0 &&
           json_object_set_new(run, "step", step ? json_string(step) : json_null()) == 0;
}

/* The run of event id as of the event, from PostgreSQL (heap; NULL in
 * *text when the run is gone by now). */
static enum status run_at_event(struct db *db, const char *id, char **text, struct error *err)
{
    PGresult *r;
    enum status st = db_run(db, &S_RUN_AT, 1, &id, &r, err);

    *text = NULL;
    if (st != ST_OK)
        return st;
    if (PQntuples(r) == 1 && db_val(r, 0, 0))
        *text = xstrdup(db_val(r, 0, 0));
    PQclear(r);
    return ST_OK;
}

/* Row i of S_AFTER with its run as of the event. runs[fi] holds the run's
 * representation parsed from the first of its rows (NULL when jansson
 * could not parse it: then PostgreSQL builds it for this event). */
static enum status deliver_run_row(struct db *db, const PGresult *r, int i, json_t **runs,
                                   event_fn fn, void *arg, struct error *err)
{
    int fi = (int)db_i64(r, i, 10);
    char *text = NULL;
    struct event_row ev = event_of(r, i, NULL);
    enum status st = ST_OK;

    ev.parent_id = db_val(r, i, 11);

    if (fi == i && db_val(r, i, 6))
        runs[i] = json_loads(db_val(r, i, 6), 0, NULL);
    if (ev.run_type && runs[fi] && run_as_of(runs[fi], r, i)) {
        text = json_dumps(runs[fi], JSON_COMPACT);
        ev.run_json_compact = text != NULL;
    }
    if (ev.run_type && !text) {
        st = run_at_event(db, db_val(r, i, 0), &text, err);
        if (!text)
            ev.run_type = NULL; /* gone meanwhile */
    }
    ev.run_json = text;
    if (st == ST_OK)
        fn(arg, &ev);
    free(text);
    return st;
}

/* deliver for S_AFTER. */
static enum status deliver_runs(struct db *db, const PGresult *r, event_fn fn, void *arg, int *n,
                                struct error *err)
{
    int rows = PQntuples(r);
    json_t **runs;
    enum status st = check_statuses(r, err);

    if (st != ST_OK)
        return st;
    /* An array of pointers (see .clang-tidy). NOLINTNEXTLINE(bugprone-sizeof-expression) */
    runs = xcalloc((size_t)rows + 1, sizeof(*runs));
    for (int i = 0; i < rows && st == ST_OK; i++)
        st = deliver_run_row(db, r, i, runs, fn, arg, err);
    for (int i = 0; i < rows; i++)
        json_decref(runs[i]);
    free(runs);
    *n = st == ST_OK ? rows : 0;
    return st;
}

/* The filter's status as a statement parameter: NULL for any. */
static const char *status_param(const struct event_filter *f)
{
    return f->has_status ? run_status_name(f->status) : NULL;
}

static enum status check_page(int64_t after_id, int limit, struct error *err)
{
    if (limit < 1 || limit > EVENTS_PAGE_MAX)
        return error_set(err, ST_INVALID, "could not read events: limit %d is not in 1..%d", limit,
                         EVENTS_PAGE_MAX);
    if (after_id < 0)
        return error_set(err, ST_INVALID, "could not read events: negative position %" PRId64,
                         after_id);
    return ST_OK;
}

enum status store_events_after(struct db *db, int64_t after_id, int64_t upto_id, int limit,
                               enum events_read what, event_fn fn, void *arg, int *n,
                               struct error *err)
{
    char a[24], u[24], l[16];
    const char *p[3] = {a, u, l};
    PGresult *r;
    enum status st;

    *n = 0;
    st = check_page(after_id, limit, err);
    if (st != ST_OK || upto_id <= after_id)
        return st;
    xsnprintf(a, sizeof(a), "%" PRId64, after_id);
    xsnprintf(u, sizeof(u), "%" PRId64, upto_id);
    xsnprintf(l, sizeof(l), "%d", limit);
    st = db_run(db, what == EVENTS_RUNS ? &S_AFTER : &S_ENDED, 3, p, &r, err);
    if (st != ST_OK)
        return st;
    st = what == EVENTS_RUNS ? deliver_runs(db, r, fn, arg, n, err) : deliver(r, fn, arg, n, err);
    PQclear(r);
    return st;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* Polls step 2 for up to wait_ms. */
static enum status wait_settled(struct db *db, const struct event_horizon *h, int wait_ms,
                                bool *settled, struct error *err)
{
    int64_t until = clock_mono_ms() + (wait_ms > 0 ? wait_ms : 0);
    enum status st;

    for (;;) {
        st = store_events_settled(db, h, settled, err);
        if (st != ST_OK || *settled || clock_mono_ms() >= until)
            return st;
        sleep_ms(SETTLE_POLL_MS);
    }
}

/* Counts and remembers the last id while passing events on. */
struct advance_ctx {
    event_fn fn;
    void *arg;
    int64_t last;
};

static void advance_one(void *arg, const struct event_row *ev)
{
    struct advance_ctx *c = arg;

    c->last = ev->id;
    c->fn(c->arg, ev);
}

enum status store_events_advance(struct db *db, int64_t *pos, int wait_ms, int limit, event_fn fn,
                                 void *arg, int *n, struct error *err)
{
    struct event_horizon h;
    struct advance_ctx c = {fn, arg, *pos};
    bool settled = false;
    enum status st;

    *n = 0;
    if (limit < 1 || limit > EVENTS_PAGE_MAX)
        return error_set(err, ST_INVALID, "could not read events: limit %d is not in 1..%d", limit,
                         EVENTS_PAGE_MAX);
    st = store_events_horizon(db, &h, err);
    if (st != ST_OK)
        return st;
    if (h.h > *pos)
        st = wait_settled(db, &h, wait_ms, &settled, err);
    if (st == ST_OK && settled)
        st = store_events_after(db, *pos, h.h, limit, EVENTS_RUNS, advance_one, &c, n, err);
    if (st == ST_OK && settled)
        *pos = *n < limit ? h.h : c.last;
    event_horizon_cleanup(&h);
    return st;
}

enum status store_events_replay(struct db *db, const struct event_filter *f, int64_t after_id,
                                int64_t upto_id, int limit, event_fn fn, void *arg, int *n,
                                struct error *err)
{
    char a[24], u[24], l[16];
    PGresult *r;
    enum status st;

    *n = 0;
    st = check_page(after_id, limit, err);
    if (st != ST_OK || upto_id <= after_id)
        return st;
    xsnprintf(a, sizeof(a), "%" PRId64, after_id);
    xsnprintf(u, sizeof(u), "%" PRId64, upto_id);
    xsnprintf(l, sizeof(l), "%d", limit);
    if (f->run_id) {
        const char *p[5] = {f->tenant, f->run_id, a, u, l};
        st = db_run(db, &S_REPLAY_RUN, 5, p, &r, err);
    } else {
        const char *p[7] = {a, u, f->tenant, f->run_type, status_param(f), l, f->parent_id};
        st = db_run(db, &S_REPLAY_ALL, 7, p, &r, err);
    }
    if (st != ST_OK)
        return st;
    st = deliver(r, fn, arg, n, err);
    PQclear(r);
    return st;
}

void run_snapshot_cleanup(struct run_snapshot *s)
{
    if (!s)
        return;
    free(s->run_json);
    s->run_json = NULL;
}

enum status store_events_run_snapshot(struct db *db, const char *tenant, const char *run_id,
                                      int64_t probe_id, struct run_snapshot *out, struct error *err)
{
    char probe[24];
    const char *p[3] = {tenant, run_id, probe};
    PGresult *r;
    enum status st;

    memset(out, 0, sizeof(*out));
    xsnprintf(probe, sizeof(probe), "%" PRId64, probe_id);
    st = db_run(db, &S_RUN_SNAPSHOT, 3, p, &r, err);
    if (st != ST_OK)
        return st;
    if (PQntuples(r) == 0) {
        PQclear(r);
        return error_set(err, ST_NOT_FOUND, "run \"%s\" not found", run_id);
    }
    out->run_json = xstrdup(db_val(r, 0, 0));
    out->terminal = strcmp(db_val(r, 0, 1), "t") == 0;
    out->last_id = db_i64(r, 0, 2);
    out->probe_found = probe_id > 0 && strcmp(db_val(r, 0, 3), "t") == 0;
    out->terminal_id = out->terminal ? db_i64(r, 0, 4) : 0;
    PQclear(r);
    return ST_OK;
}

void active_cursor_cleanup(struct active_cursor *c)
{
    if (!c)
        return;
    free(c->tenant);
    free(c->run_id);
    c->tenant = c->run_id = NULL;
}

enum status store_events_active(struct db *db, const struct event_filter *f,
                                struct active_cursor *after, int limit, event_fn fn, void *arg,
                                int *n, struct error *err)
{
    char l[16];
    const char *p[6] = {f->tenant ? f->tenant : (after->tenant ? after->tenant : ""),
                        after->run_id ? after->run_id : "",
                        f->run_type,
                        status_param(f),
                        l,
                        f->parent_id};
    PGresult *r;
    enum status st = check_page(0, limit, err);

    *n = 0;
    if (st != ST_OK)
        return st;
    xsnprintf(l, sizeof(l), "%d", limit);
    st = db_run(db, f->tenant ? &S_ACTIVE : &S_ACTIVE_ALL, 6, p, &r, err);
    if (st != ST_OK)
        return st;
    st = deliver(r, fn, arg, n, err);
    if (st == ST_OK && *n > 0) {
        active_cursor_cleanup(after);
        after->tenant = xstrdup(db_val(r, *n - 1, 1));
        after->run_id = xstrdup(db_val(r, *n - 1, 2));
    }
    PQclear(r);
    return st;
}

enum status store_events_bounds(struct db *db, int64_t *last_id, int64_t *pruned_upto,
                                struct error *err)
{
    PGresult *r;
    enum status st = db_run(db, &S_BOUNDS, 0, NULL, &r, err);

    *last_id = *pruned_upto = 0;
    if (st != ST_OK)
        return st;
    if (PQntuples(r) != 1) {
        PQclear(r);
        return error_set(err, ST_DB, "%s failed: unexpected result", S_BOUNDS.name);
    }
    *last_id = db_i64(r, 0, 0);
    *pruned_upto = db_i64(r, 0, 1);
    PQclear(r);
    return ST_OK;
}
