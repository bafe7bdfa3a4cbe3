/* live/sse.h — one server-sent-events stream (GET /runs/{id}/stream,
 * GET /stream): what it sends first from the database, then the live
 * frames of the hub.
 *
 * A stream registers with the hub at position H before it reads anything,
 * so every event after H reaches it through the ring; what it sends from the
 * database covers everything up to H, and the seam has neither gap nor
 * duplicate:
 *   - run stream, no usable Last-Event-ID: "event: snapshot", id: the run's
 *     newest event id s, then live events after s (a completed run: the
 *     snapshot, then the end);
 *   - run stream, Last-Event-ID X one of the run's events: the run's events
 *     in (X, H], then live events after X; the stream ends after the
 *     terminal event;
 *   - GET /stream, no Last-Event-ID: a snapshot (without id:) per active
 *     run, then live events, skipping each run's events already in its
 *     snapshot;
 *   - GET /stream, X known and not older than retention: every event in
 *     (X, H], then live; X unknown or past retention: "event: reset", then
 *     the snapshots.
 * The database pages are read lazily, one small page at a time as the client
 * reads, so memory per stream stays bounded. A stream that lags behind the
 * ring before it sent any live frame rejoins at the ring's head and replays
 * the gap; one that lags after is dropped (its client resumes with
 * Last-Event-ID).
 *
 * Thread-safety: a stream is used by one thread at a time (its
 * connection's). */
#ifndef OPSRUN_LIVE_SSE_H
#define OPSRUN_LIVE_SSE_H

#include "live/hub.h"

struct db_pool;
struct sse_stream;

struct sse_request {
    const char *tenant;   /* NULL: every tenant (GET /stream only) */
    const char *run_id;   /* NULL: GET /stream */
    const char *run_type; /* GET /stream filters, NULL = any */
    const char *parent_id;
    bool has_status; /* false = any */
    enum run_status status;
    bool has_last_id;
    int64_t last_id;
    int retry_ms; /* the retry: hint */
};

/* Registers with the hub and reads what must come first: ST_NOT_FOUND for
 * an unknown run (or one of another tenant), ST_INVALID for a run stream
 * without a tenant, ST_BUSY when the hub refuses (closing, at its subscriber
 * limit), ST_UNAVAILABLE when the database is unreachable. pool and h must outlive
 * the stream. */
enum status sse_open(struct hub *h, struct db_pool *pool, const struct sse_request *rq,
                     const struct hub_wake *w, struct sse_stream **out, struct error *err) WUR;
void sse_close(struct sse_stream *s); /* NULL is a no-op */
/* A run stream resumed at or past its completed run's terminal event: the
 * client has every event already, and is answered 204 No Content instead
 * of a stream (which tells EventSource to stop reconnecting). */
bool sse_finished(const struct sse_stream *s);

enum sse_read {
    SSE_DATA,      /* *n bytes written; 0 after hub_wake_all: check, then read again */
    SSE_SUSPENDED, /* nothing now; the connection was suspended */
    SSE_END,       /* finished cleanly (or the client is gone already) */
    SSE_ABORT,     /* drop the connection: lagging, database error */
};
enum sse_read sse_read(struct sse_stream *s, char *buf, size_t max, size_t *n);

/* Parses a Last-Event-ID: a decimal event id, 1 to 19 digits, nothing else. */
bool sse_parse_last_id(const char *text, int64_t *out);

#endif
