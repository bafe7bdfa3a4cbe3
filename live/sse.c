/* live/sse.c — SSE streams: the database prelude, then the hub's live
 * frames (live/sse.h). */
#include "live/sse.h"

#include "common/dynbuf.h"
#include "common/log.h"
#include "store/db.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* Events or snapshots per database page. A page's frames are all the
 * memory a stream holds besides its few fixed bytes. */
#define SSE_PAGE 64
/* How often a stream that lags before going live may rejoin the ring. */
#define REJOIN_MAX 8
/* The pool wait of a page read: a stream's connection thread blocks for at
 * most this long on a busy pool. */
#define POOL_WAIT_MS 1000
/* The most a page's frames may take: 1 GiB. At the default limits (1 MiB
 * inputs, 1 MiB of stdout, 4 MiB remote answers) a run's JSON is a few MiB,
 * so a page of SSE_PAGE frames stays well below it; only runs near the
 * configurable maxima (64 MiB) can reach it, and the stream then ends,
 * logged, rather than hold gigabytes. */
#define SSE_OUT_MAX ((size_t)1 << 30)

enum phase { PH_REPLAY, PH_SNAPSHOTS, PH_LIVE };

struct sse_stream {
    struct hub_sub *sub;
    struct db_pool *pool;
    struct event_filter f; /* strings owned */
    enum phase phase;
    int64_t cursor, upto;            /* PH_REPLAY: (cursor, upto] is still to send */
    int64_t covered;                 /* everything selected up to here is sent */
    struct active_cursor run_cursor; /* PH_SNAPSHOTS: the last run sent */
    int rejoins;
    struct dynbuf out; /* bytes to send before anything else, from off */
    size_t off;
    bool too_large; /* out refused a frame: the stream must end */
    bool finished;  /* the client has the run's terminal event already */
    bool ended;     /* a run's stream sent its terminal event: nothing follows */
};

bool sse_parse_last_id(const char *text, int64_t *out)
{
    char *end;
    unsigned long long v;
    size_t n = text ? strlen(text) : 0;

    if (n == 0 || n > 19 || strspn(text, "0123456789") != n)
        return false;
    errno = 0;
    v = strtoull(text, &end, 10);
    if (errno || *end || v > (unsigned long long)INT64_MAX)
        return false;
    *out = (int64_t)v;
    return true;
}

static void out_frame(struct sse_stream *s, int64_t id, const char *event, const char *json)
{
    char *compact = hub_json_compact(json);
    const char *data = compact ? compact : json;
    size_t n = hub_frame_len(id, event, data);
    char *frame = xmalloc(n + 1);

    hub_frame_write(frame, id, event, data, NULL);
    if (!s->too_large && dynbuf_add(&s->out, frame, n) != ST_OK)
        s->too_large = true;
    free(frame);
    free(compact);
}

static void out_text(struct sse_stream *s, const char *text)
{
    if (!s->too_large && dynbuf_adds(&s->out, text) != ST_OK)
        s->too_large = true;
}

/* Frames past SSE_OUT_MAX end the stream: none of them may be skipped. */
static enum status out_check(const struct sse_stream *s, struct error *err)
{
    if (!s->too_large)
        return ST_OK;
    return error_set(err, ST_INTERNAL, "the frames to send exceed %zu MiB", SSE_OUT_MAX >> 20);
}

/* A replayed event: through the same skip rules as live frames. */
static void on_replayed(void *arg, const struct event_row *ev)
{
    struct sse_stream *s = arg;
    bool with_id;

    if (s->ended)
        return; /* the notifications and follow-ups of the end, in the same page */
    s->cursor = ev->id;
    if (!hub_sub_gate(s->sub, ev->id, ev->tenant, ev->run_id, &with_id))
        return;
    out_frame(s, with_id ? ev->id : 0, ev->kind, ev->run_json);
    if (s->f.run_id && run_status_is_terminal(ev->status)) {
        hub_sub_mark_ended(s->sub);
        s->ended = true;
        s->cursor = s->upto; /* nothing after the terminal event */
    }
}

static void on_snapshot(void *arg, const struct event_row *ev)
{
    struct sse_stream *s = arg;

    out_frame(s, 0, "snapshot", ev->run_json);
    hub_sub_skip_run(s->sub, ev->tenant, ev->run_id, ev->id);
}

/* Reads the next page of the prelude into s->out. */
static enum status fetch_page(struct sse_stream *s, struct error *err)
{
    struct db *db = NULL;
    int n = 0;
    enum status st = db_pool_get_wait(s->pool, POOL_WAIT_MS, &db, err);

    if (st == ST_OK && s->phase == PH_REPLAY)
        st = store_events_replay(db, &s->f, s->cursor, s->upto, SSE_PAGE, on_replayed, s, &n, err);
    else if (st == ST_OK)
        st = store_events_active(db, &s->f, &s->run_cursor, SSE_PAGE, on_snapshot, s, &n, err);
    db_pool_put(s->pool, db);
    if (st == ST_OK)
        st = out_check(s, err);
    if (st == ST_OK && (n < SSE_PAGE || (s->phase == PH_REPLAY && s->cursor >= s->upto))) {
        s->phase = PH_LIVE;
        s->covered = s->upto > s->covered ? s->upto : s->covered;
    }
    return st;
}

static void stream_free(struct sse_stream *s)
{
    hub_sub_free(s->sub);
    free((char *)s->f.tenant);
    free((char *)s->f.run_id);
    free((char *)s->f.run_type);
    free((char *)s->f.parent_id);
    active_cursor_cleanup(&s->run_cursor);
    dynbuf_free(&s->out);
    free(s);
}

static char *dup_or_null(const char *v)
{
    return v ? xstrdup(v) : NULL;
}

/* GET /runs/{id}/stream: a snapshot, or a replay when Last-Event-ID is one
 * of the run's events. */
static enum status open_run(struct sse_stream *s, struct db *db, const struct sse_request *rq,
                            int64_t pos, struct error *err)
{
    struct run_snapshot snap;
    int64_t probe = rq->has_last_id ? rq->last_id : 0;
    enum status st = store_events_run_snapshot(db, rq->tenant, rq->run_id, probe, &snap, err);

    if (st != ST_OK)
        return st;
    /* At or past the terminal event: the client has everything (and an id
     * past it is not one of the run's, so it would get the snapshot). The
     * notifications and follow-ups the end set off come after it, and are
     * not part of the run's stream. */
    s->finished = snap.terminal && rq->has_last_id && rq->last_id >= snap.terminal_id;
    if (snap.probe_found) {
        hub_sub_skip_upto(s->sub, rq->last_id);
        s->cursor = rq->last_id;
        s->phase = PH_REPLAY;
        if (snap.terminal && rq->last_id >= snap.terminal_id)
            hub_sub_mark_ended(s->sub), s->phase = PH_LIVE; /* it has everything */
    } else {
        out_frame(s, snap.last_id, "snapshot", snap.run_json);
        hub_sub_skip_upto(s->sub, snap.last_id);
        s->covered = snap.last_id > pos ? snap.last_id : pos;
        s->phase = PH_LIVE;
        if (snap.terminal)
            hub_sub_mark_ended(s->sub);
    }
    run_snapshot_cleanup(&snap);
    return ST_OK;
}

/* GET /stream: a replay from Last-Event-ID when nothing after it can be
 * gone, else snapshots of the active runs (after a reset event when the
 * client asked to resume). */
static enum status open_all(struct sse_stream *s, struct db *db, const struct sse_request *rq,
                            struct error *err)
{
    int64_t last = 0, pruned = 0;
    enum status st = ST_OK;
    char data[160];

    if (!rq->has_last_id) {
        s->phase = PH_SNAPSHOTS;
        return ST_OK;
    }
    st = store_events_bounds(db, &last, &pruned, err);
    if (st != ST_OK)
        return st;
    if (rq->last_id <= last && rq->last_id >= pruned) {
        hub_sub_skip_upto(s->sub, rq->last_id);
        s->cursor = rq->last_id;
        s->phase = PH_REPLAY;
        return ST_OK;
    }
    xsnprintf(data, sizeof(data), "{\"reason\":\"%s\",\"last_event_id\":%" PRId64 "}",
              rq->last_id > last ? "unknown_event_id" : "past_retention", rq->last_id);
    out_frame(s, 0, "reset", data);
    s->phase = PH_SNAPSHOTS;
    return ST_OK;
}

enum status sse_open(struct hub *h, struct db_pool *pool, const struct sse_request *rq,
                     const struct hub_wake *w, struct sse_stream **out, struct error *err)
{
    struct sse_stream *s = xcalloc(1, sizeof(*s));
    struct db *db = NULL;
    char retry[48];
    int64_t pos = 0;
    enum status st;

    *out = NULL;
    if (rq->run_id && !rq->tenant) {
        free(s);
        return error_set(err, ST_INVALID, "a run's stream needs its tenant");
    }
    dynbuf_init(&s->out, SSE_OUT_MAX);
    s->pool = pool;
    s->f = (struct event_filter){dup_or_null(rq->tenant),
                                 dup_or_null(rq->run_id),
                                 dup_or_null(rq->run_type),
                                 rq->has_status,
                                 rq->status,
                                 dup_or_null(rq->parent_id)};
    st = hub_sub_new(h, &s->f, w, &s->sub, &pos, err);
    if (st == ST_OK)
        st = db_pool_get_wait(pool, POOL_WAIT_MS, &db, err);
    if (st != ST_OK) {
        stream_free(s);
        return st;
    }
    s->upto = s->covered = pos;
    xsnprintf(retry, sizeof(retry), "retry: %d\n\n", rq->retry_ms);
    out_text(s, retry);
    st = rq->run_id ? open_run(s, db, rq, pos, err) : open_all(s, db, rq, err);
    db_pool_put(pool, db);
    if (st == ST_OK)
        st = out_check(s, err);
    if (st != ST_OK) {
        stream_free(s);
        return st;
    }
    *out = s;
    return ST_OK;
}

bool sse_finished(const struct sse_stream *s)
{
    return s->finished;
}

void sse_close(struct sse_stream *s)
{
    if (s)
        stream_free(s);
}

/* The ring moved past a stream: before any live frame went out it rejoins
 * at the head and replays the gap from the database; after, it is dropped. */
static enum sse_read lagged(struct sse_stream *s)
{
    int64_t pos;

    if (hub_sub_live(s->sub) || s->rejoins >= REJOIN_MAX) {
        LOG(LOG_WARN, "dropping a lagging stream run=%s: the client fell behind the event ring",
            s->f.run_id ? s->f.run_id : "*");
        return SSE_ABORT;
    }
    s->rejoins++;
    hub_sub_rejoin(s->sub, &pos);
    s->cursor = s->covered;
    s->upto = pos;
    s->phase = PH_REPLAY;
    return SSE_DATA;
}

enum sse_read sse_read(struct sse_stream *s, char *buf, size_t max, size_t *n)
{
    *n = 0;
    for (;;) {
        struct error err = {0};
        if (s->off < dynbuf_len(&s->out)) {
            *n = dynbuf_drain(&s->out, &s->off, buf, max);
            return SSE_DATA;
        }
        if (s->phase != PH_LIVE) {
            if (fetch_page(s, &err) != ST_OK) {
                LOG(LOG_WARN, "ending a stream run=%s: %s", s->f.run_id ? s->f.run_id : "*",
                    err.message);
                return SSE_ABORT;
            }
            continue;
        }
        switch (hub_sub_read(s->sub, buf, max, n)) {
        case HUB_DATA:
            return SSE_DATA;
        case HUB_SUSPENDED:
            return SSE_SUSPENDED;
        case HUB_END:
            return SSE_END;
        case HUB_WOKEN: /* *n is 0: the owner checks what it must, then reads again */
            return SSE_DATA;
        case HUB_GONE:
            /* The client left: ending cleanly lets libmicrohttpd notice the
             * closed socket on its normal path and free the connection at
             * once; an abort left it until the thread next woke. */
            return SSE_END;
        case HUB_LAGGED:
            if (lagged(s) == SSE_ABORT)
                return SSE_ABORT;
            break;
        }
    }
}
