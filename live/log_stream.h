/* live/log_stream.h — the stream of one run's log (GET
 * /runs/{id}/logs/stream, docs/logs.md): every line so far, then each line
 * as it is written, then "event: end" once the run has completed and its
 * last line is sent.
 *
 * Lines are read from the database, a page at a time, whenever something
 * says there may be new ones: the stream is a quiet subscriber of the hub
 * for its run (live/hub.h), woken by hub_poke when lines of the run were
 * committed (on this replica, or on another through NOTIFY opsrun_logs)
 * and by the run's own events, the last of which (the run's end) was
 * committed with its last lines. A line is frame "id: <seq>\nevent:
 * log\ndata: <the line's JSON>\n\n", so Last-Event-ID resumes after it.
 * The seqs of a run's lines are committed in order (migration 021), so
 * reading "after the last seq sent" never skips one.
 *
 * Thread-safety: a stream is used by one thread at a time (its
 * connection's). */
#ifndef OPSRUN_LIVE_LOG_STREAM_H
#define OPSRUN_LIVE_LOG_STREAM_H

#include "live/hub.h"
#include "live/sse.h"

struct db_pool;
struct log_stream;

struct log_stream_request {
    const char *tenant, *run_id;
    int64_t after;      /* Last-Event-ID: the last seq the client has, 0: none */
    bool resumed;       /* the client sent Last-Event-ID */
    int retry_ms;       /* the retry: hint */
    int max_line_bytes; /* logs.max_line_bytes: long lines, short pages */
};

/* Registers with the hub and reads the first page: ST_NOT_FOUND for an
 * unknown run (or one of another tenant), ST_BUSY when the hub refuses,
 * ST_UNAVAILABLE when the database is unreachable. pool and h must
 * outlive the stream. */
enum status log_stream_open(struct hub *h, struct db_pool *pool,
                            const struct log_stream_request *rq, const struct hub_wake *w,
                            struct log_stream **out, struct error *err) WUR;
void log_stream_close(struct log_stream *s); /* NULL is a no-op */
/* The run is completed and the client has its last line already: answer
 * 204 instead of a stream. */
bool log_stream_finished(const struct log_stream *s);
/* As sse_read: the next bytes to send, or why there are none. */
enum sse_read log_stream_read(struct log_stream *s, char *buf, size_t max, size_t *n);

#endif
