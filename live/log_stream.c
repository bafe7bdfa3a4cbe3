/* live/log_stream.c — one run's log as a stream (live/log_stream.h). */
#include "live/log_stream.h"

#include "common/dynbuf.h"
#include "common/log.h"
#include "store/db.h"
#include "store/logs.h"

#include <stdlib.h>
#include <string.h>

/* Lines per database page, at most. */
#define PAGE_LINES 500
/* The most bytes of frames a page may hold: a page stops before the line
 * that would pass it (and the next page starts there). */
#define PAGE_BYTES (4 * 1024 * 1024)
/* The pool wait of a page read: a stream's connection thread blocks for at
 * most this long on a busy pool. */
#define POOL_WAIT_MS 1000

struct log_stream {
    struct hub_sub *sub;
    struct db_pool *pool;
    char tenant[65], run_id[130];
    int64_t cursor;    /* the last seq sent (or the client had) */
    struct dynbuf out; /* bytes to send before anything else, from off */
    size_t off;
    bool dirty;     /* there may be lines past cursor */
    bool final;     /* the run's end went by: one more read, then the end */
    bool end_sent;  /* "event: end" is in out: nothing follows */
    bool finished;  /* the client has everything already (204) */
    bool page_full; /* the page stopped at PAGE_BYTES */
    int64_t lines_sent;
    int page_lines; /* lines per database page */
};

static void add_frame(struct log_stream *s, int64_t id, const char *event, const char *data)
{
    size_t n = hub_frame_len(id, event, data);
    char *frame = xmalloc(n + 1);

    hub_frame_write(frame, id, event, data, NULL);
    if (dynbuf_len(&s->out) + n > PAGE_BYTES && dynbuf_len(&s->out) > 0)
        s->page_full = true;
    else if (dynbuf_add(&s->out, frame, n) != ST_OK)
        s->page_full = true;
    free(frame);
}

static void on_line(void *arg, const struct log_line *l)
{
    struct log_stream *s = arg;
    json_t *j;
    char *data;

    if (s->page_full)
        return;
    j = log_line_json(l);
    data = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!data)
        abort(); /* a valid object: only allocation fails */
    add_frame(s, l->seq, "log", data);
    if (!s->page_full) {
        s->cursor = l->seq;
        s->lines_sent++;
    }
    free(data);
}

/* Reads the lines after the cursor into out; the end once the run is
 * completed and its last line is out. */
static enum status fetch(struct log_stream *s, struct error *err)
{
    const struct log_query q = {s->tenant, s->run_id, 0, s->cursor, s->page_lines};
    struct log_page page;
    struct db *db = NULL;
    enum status st = db_pool_get_wait(s->pool, POOL_WAIT_MS, &db, err);

    s->page_full = false;
    if (st == ST_OK)
        st = store_logs_read(db, &q, on_line, s, &page, err);
    db_pool_put(s->pool, db);
    if (st != ST_OK)
        return st;
    s->dirty = s->page_full || page.nlines == s->page_lines;
    if (!s->dirty && page.status == RUN_COMPLETED && s->cursor >= page.last_seq) {
        char data[48];
        xsnprintf(data, sizeof(data), "{\"last_seq\":%lld}", (long long)page.last_seq);
        /* With the last seq as its id: a client that reconnects after
         * the end is told 204, there is nothing more. */
        add_frame(s, page.last_seq, "end", data);
        s->end_sent = true;
    }
    return ST_OK;
}

static void stream_free(struct log_stream *s)
{
    hub_sub_free(s->sub);
    dynbuf_free(&s->out);
    free(s);
}

enum status log_stream_open(struct hub *h, struct db_pool *pool,
                            const struct log_stream_request *rq, const struct hub_wake *w,
                            struct log_stream **out, struct error *err)
{
    struct log_stream *s = xcalloc(1, sizeof(*s));
    const struct event_filter f = {.tenant = rq->tenant, .run_id = rq->run_id};
    char retry[48];
    int64_t pos;
    enum status st;

    *out = NULL;
    dynbuf_init(&s->out, PAGE_BYTES * 2);
    s->pool = pool;
    xsnprintf(s->tenant, sizeof(s->tenant), "%s", rq->tenant);
    xsnprintf(s->run_id, sizeof(s->run_id), "%s", rq->run_id);
    s->cursor = rq->after;
    s->page_lines = logs_page_lines(rq->max_line_bytes);
    if (s->page_lines > PAGE_LINES)
        s->page_lines = PAGE_LINES;
    /* The hub first: a line committed after this reaches the stream as a
     * poke, and the read below sees every line committed before it. */
    st = hub_sub_new(h, &f, w, &s->sub, &pos, err);
    if (st == ST_OK) {
        hub_sub_set_quiet(s->sub);
        xsnprintf(retry, sizeof(retry), "retry: %d\n\n", rq->retry_ms);
        if (dynbuf_adds(&s->out, retry) != ST_OK)
            abort(); /* a few bytes into an empty buffer */
        st = fetch(s, err);
    }
    if (st != ST_OK) {
        stream_free(s);
        return st;
    }
    /* Resumed at or past the completed run's last line: nothing to send. */
    s->finished = s->end_sent && rq->resumed && s->lines_sent == 0;
    *out = s;
    return ST_OK;
}

bool log_stream_finished(const struct log_stream *s)
{
    return s->finished;
}

void log_stream_close(struct log_stream *s)
{
    if (s)
        stream_free(s);
}

enum sse_read log_stream_read(struct log_stream *s, char *buf, size_t max, size_t *n)
{
    *n = 0;
    for (;;) {
        struct error err = {0};
        if (s->off < dynbuf_len(&s->out)) {
            *n = dynbuf_drain(&s->out, &s->off, buf, max);
            return SSE_DATA;
        }
        if (s->end_sent)
            return SSE_END;
        if (s->dirty) {
            if (fetch(s, &err) != ST_OK) {
                LOG(LOG_WARN, "ending a log stream run=%s: %s", s->run_id, err.message);
                return SSE_ABORT;
            }
            continue;
        }
        switch (hub_sub_read(s->sub, buf, max, n)) {
        case HUB_DATA:       /* a heartbeat, or a wake-up: look for lines */
            s->dirty = true; /* a heartbeat too: a poke may have missed */
            if (*n > 0)
                return SSE_DATA;
            break;
        case HUB_SUSPENDED:
            return SSE_SUSPENDED;
        case HUB_END: /* the run's end went by (or the hub closes): one last look */
            if (s->final)
                return SSE_END;
            s->final = s->dirty = true;
            break;
        case HUB_LAGGED: /* a quiet subscriber moves on by itself; look anyway */
            s->dirty = true;
            break;
        case HUB_WOKEN: /* *n is 0: the owner checks what it must, then reads again */
            return SSE_DATA;
        case HUB_GONE:
            return SSE_END;
        }
    }
}
