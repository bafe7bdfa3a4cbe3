/* store/events.h — the global, id-ordered reader of run_events for the SSE
 * hub, poll-only mode and GET /stream replay (docs/design-event-order.md,
 * approach (d'), migration 003).
 *
 * Event ids are taken at insert and become visible at commit, so a plain
 * "id > last" reader skips events. The reader therefore moves only up to a
 * horizon whose ids are all final:
 *   1. store_events_horizon: h = the highest id handed out, then the writer
 *      transactions that may still hold an id <= h;
 *   2. store_events_settled, in a later statement (poll it, e.g. every
 *      5-10 ms): true once those transactions have all ended;
 *   3. store_events_after(pos, h, ...), in a later statement still, pages
 *      through (pos, h]; every id <= h is then final (committed or never
 *      will be), so pos may move to h once a page comes back short.
 * Each step must run in its own statement in autocommit or READ COMMITTED:
 * never inside one REPEATABLE READ/SERIALIZABLE transaction, whose snapshot
 * would predate the settling. Read from the primary only.
 *
 * Thread-safety: a db handle is used by one thread at a time; a struct
 * event_horizon belongs to its caller. Functions return ST_OK or a failure
 * with *err filled: ST_INVALID for bad arguments, ST_UNAVAILABLE when the
 * connection is lost or a statement timed out, ST_DB for other database
 * errors. */
#ifndef OPSRUN_STORE_EVENTS_H
#define OPSRUN_STORE_EVENTS_H

#include "common/common.h"
#include "store/run_state.h"

struct db;

#define EVENTS_PAGE_MAX 1000

/* Step 1's result. inflight is the PostgreSQL text[] literal of the writers'
 * virtual transaction ids (heap, owned; "{}" when none). */
struct event_horizon {
    int64_t h;     /* highest id handed out so far; 0 when none yet */
    int ninflight; /* 0: already settled, step 2 may be skipped */
    char *inflight;
};
void event_horizon_cleanup(struct event_horizon *h); /* frees inflight; idempotent */

/* Step 1. *h is overwritten (clean it up first when reusing it); on failure
 * it holds nothing to free. */
enum status store_events_horizon(struct db *db, struct event_horizon *h, struct error *err) WUR;
/* Step 2: *settled true once every transaction recorded in h has ended. */
enum status store_events_settled(struct db *db, const struct event_horizon *h, bool *settled,
                                 struct error *err) WUR;

/* One event as the SSE frames need it; every string is borrowed for the
 * duration of the callback. run_json is the run as of the event
 * (opsrun_run_json_at: the run's current representation with the event's
 * status, outcome, progress and step); it and run_type are NULL when the
 * run no longer exists. */
struct event_row {
    int64_t id;
    const char *tenant, *run_id;
    const char *kind;       /* "status" or "progress" */
    enum run_status status; /* the run's status as of the event */
    const char *run_type;
    const char *run_json;
    bool run_json_compact; /* run_json is in jansson's compact form already */
    const char *parent_id; /* the run's parent_id (store_events_after only; NULL: none) */
};
typedef void (*event_fn)(void *arg, const struct event_row *ev);

/* What store_events_after reads. */
enum events_read {
    EVENTS_RUNS,  /* every event, with its run as of the event */
    EVENTS_ENDED, /* only the events that complete a run (status "completed"),
                   * without the run: run_type and run_json are NULL */
};

/* Step 3: the events with after_id < id <= upto_id in id order that what
 * selects, at most limit (1..EVENTS_PAGE_MAX) of them, each passed to fn;
 * *n is how many. upto_id must be a settled horizon for the page to be
 * complete. With EVENTS_RUNS each run's representation is built once per
 * page and set as of each of its events here (in compact form). */
enum status store_events_after(struct db *db, int64_t after_id, int64_t upto_id, int limit,
                               enum events_read what, event_fn fn, void *arg, int *n,
                               struct error *err) WUR;

/* The three steps for a caller that may block: takes a horizon, polls
 * step 2 every 2 ms for up to wait_ms, then reads one page of at most limit
 * events after *pos and advances *pos (to the last id delivered, or to the
 * horizon when the page came back short). When the horizon is not above
 * *pos, or does not settle within wait_ms, it delivers nothing (*n = 0) and
 * leaves *pos alone. Every event is delivered exactly once and in strictly
 * increasing id order across calls that pass the same *pos. wait_ms should
 * exceed a writer statement's duration (tens of ms): each call takes a fresh
 * horizon, so too short a wait under constant writes may never settle. The
 * hub, which must not block, drives the steps itself and keeps a pending
 * horizon across rounds instead. */
enum status store_events_advance(struct db *db, int64_t *pos, int wait_ms, int limit, event_fn fn,
                                 void *arg, int *n, struct error *err) WUR;

/* ---- what the SSE streams read when a client connects ---- */

/* Which events a stream carries: one tenant (or, without run_id, every
 * tenant: an admin's GET /stream), and either one run or all runs,
 * optionally of one run type and one status (the event's). */
struct event_filter {
    const char *tenant;   /* NULL: every tenant (only without run_id) */
    const char *run_id;   /* NULL: every run */
    const char *run_type; /* NULL: any (only without run_id) */
    bool has_status;      /* false: any (only without run_id) */
    enum run_status status;
    const char
        *parent_id; /* NULL: any; else the runs whose parent_id it is (only without run_id) */
};

/* Like store_events_after, restricted to the filter; events of runs that
 * no longer exist are left out. upto_id must be settled (the hub's
 * position) for the page to be complete. */
enum status store_events_replay(struct db *db, const struct event_filter *f, int64_t after_id,
                                int64_t upto_id, int limit, event_fn fn, void *arg, int *n,
                                struct error *err) WUR;

/* A run's snapshot for its stream, read in one statement: its current JSON
 * (heap, *run_json), its newest event id, whether it is completed, and
 * whether probe_id (0: none) is one of its events, i.e. a Last-Event-ID this
 * run's stream can resume from. ST_NOT_FOUND when the run does not exist. */
struct run_snapshot {
    char *run_json;
    int64_t last_id;
    bool terminal;
    /* The event that completed the run (0 when it is not completed): the
     * notifications and follow-ups it set off come after it. */
    int64_t terminal_id;
    bool probe_found;
};
enum status store_events_run_snapshot(struct db *db, const char *tenant, const char *run_id,
                                      int64_t probe_id, struct run_snapshot *out,
                                      struct error *err) WUR;
void run_snapshot_cleanup(struct run_snapshot *s); /* idempotent */

/* Where the next page of store_events_active starts: after this run (heap
 * strings, NULL for the first page; replaced by each page). */
struct active_cursor {
    char *tenant, *run_id;
};
void active_cursor_cleanup(struct active_cursor *c); /* idempotent */

/* One page of the runs that are not completed, of f's tenant in id order
 * (of every tenant in (id, tenant) order when f->tenant is NULL), after
 * *after, filtered by f's run_type and status (f->run_id is ignored): fn
 * gets each run's JSON in row->run_json and its newest event id in row->id
 * (kind "snapshot"). *after moves to the last run delivered. */
enum status store_events_active(struct db *db, const struct event_filter *f,
                                struct active_cursor *after, int limit, event_fn fn, void *arg,
                                int *n, struct error *err) WUR;

/* The highest event id handed out so far (0 when none), and the highest id
 * retention ever deleted: a global Last-Event-ID above the first is unknown,
 * one below the second may have lost events. */
enum status store_events_bounds(struct db *db, int64_t *last_id, int64_t *pruned_upto,
                                struct error *err) WUR;

#endif
