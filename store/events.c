/* store/events.c — the id-horizon reader of run_events (store/events.h,
 * docs/design-event-order.md). The horizon and the settle check are the SQL
 * functions of migration 003; each step is its own statement so that the
 * page read takes a snapshot after the horizon has settled. */
#include "store/events.h"

#include "store/db_internal.h"

#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const struct stmt S_HORIZON = {
    "events_horizon",
    "SELECT h, inflight::text, cardinality(inflight) FROM opsrun_event_horizon()"};
static const struct stmt S_SETTLED = {"events_settled", "SELECT opsrun_events_settled($1::text[])"};
/* A LEFT JOIN, so an event whose run is gone still comes back (run JSON
 * NULL); opsrun_run_json is not strict, hence the CASE. */
static const struct stmt S_AFTER = {
    "events_after", "SELECT e.id, e.tenant, e.run_id, e.type, opsrun_event_json(e)::text, "
                    "CASE WHEN r.id IS NULL THEN NULL ELSE opsrun_run_json(r)::text END "
                    "FROM run_events e LEFT JOIN runs r ON r.tenant = e.tenant AND r.id = e.run_id "
                    "WHERE e.id > $1::bigint AND e.id <= $2::bigint ORDER BY e.id LIMIT $3::int"};

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

enum status store_events_after(struct db *db, int64_t after_id, int64_t upto_id, int limit,
                               event_fn fn, void *arg, int *n, struct error *err)
{
    char a[24], u[24], l[16];
    const char *p[3] = {a, u, l};
    PGresult *r;
    enum status st;

    *n = 0;
    if (limit < 1 || limit > EVENTS_PAGE_MAX)
        return error_set(err, ST_INVALID, "could not read events: limit %d is not in 1..%d", limit,
                         EVENTS_PAGE_MAX);
    if (after_id < 0)
        return error_set(err, ST_INVALID, "could not read events: negative position %" PRId64,
                         after_id);
    if (upto_id <= after_id)
        return ST_OK;
    xsnprintf(a, sizeof(a), "%" PRId64, after_id);
    xsnprintf(u, sizeof(u), "%" PRId64, upto_id);
    xsnprintf(l, sizeof(l), "%d", limit);
    st = db_run(db, &S_AFTER, 3, p, &r, err);
    if (st != ST_OK)
        return st;
    for (int i = 0; i < PQntuples(r); i++)
        fn(arg, db_i64(r, i, 0), db_val(r, i, 1), db_val(r, i, 2), db_val(r, i, 3), db_val(r, i, 4),
           db_val(r, i, 5));
    *n = PQntuples(r);
    PQclear(r);
    return ST_OK;
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

static void advance_one(void *arg, int64_t id, const char *tenant, const char *run_id,
                        const char *type, const char *event_json, const char *run_json)
{
    struct advance_ctx *c = arg;

    c->last = id;
    c->fn(c->arg, id, tenant, run_id, type, event_json, run_json);
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
        st = store_events_after(db, *pos, h.h, limit, advance_one, &c, n, err);
    if (st == ST_OK && settled)
        *pos = *n < limit ? h.h : c.last;
    event_horizon_cleanup(&h);
    return st;
}
