/* tests/support/sse.h — a server-sent-events client for the end-to-end
 * suites: HTTP/1.1 over a plain socket to 127.0.0.1, chunked transfer
 * decoding, and the WHATWG event-stream parsing (id, event, data, retry,
 * comments). Reads with timeouts, one event at a time, so tests can check
 * order, seams and the end of a stream. Not thread-safe per client. */
#ifndef OPSRUN_TEST_SSE_H
#define OPSRUN_TEST_SSE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

struct th_sse {
    int fd;
    long status;
    char content_type[128], cache_control[64], accel[32], retry_after[16];
    char www_authenticate[256];
    char *body_text; /* a non-200 answer's whole body */
    char buf[65536]; /* raw bytes read, not yet decoded */
    size_t blen;
    bool chunked;
    long chunk_left; /* -1: a size line is next */
    char *text;      /* decoded body, not yet parsed into events */
    size_t tlen, tcap;
    bool eof;           /* the connection is closed */
    bool clean_end;     /* the server ended the body (last chunk) */
    int comments;       /* ": ..." lines seen (keep-alives) */
    int retry_ms;       /* the last retry: field, -1 when none */
    long long received; /* body bytes decoded */
    char path[1024];    /* the request's path and query, for the exchange record */
};

struct th_sse_event {
    bool has_id;
    long long id;
    char event[32];
    char *data;   /* heap */
    json_t *json; /* data parsed, or NULL */
};

/* Connects to 127.0.0.1:port and sends GET path, with a Last-Event-ID
 * header when last_event_id is not NULL, then reads the status and headers
 * (up to 10 s; a transport failure aborts the test). rcvbuf > 0 sets
 * SO_RCVBUF first (a slow client). */
struct th_sse *th_sse_open(int port, const char *path, const char *last_event_id, int rcvbuf);
/* As th_sse_open, with "Authorization: Bearer <token>" when token is not
 * NULL. */
struct th_sse *th_sse_open_token(int port, const char *path, const char *token,
                                 const char *last_event_id);
/* The next event: 1 with *ev filled, 0 when timeout_ms passed first, -1
 * when the stream ended (s->clean_end says whether the server finished the
 * body or the connection was cut). */
int th_sse_next(struct th_sse *s, struct th_sse_event *ev, int timeout_ms);
/* Reads events until one of the given type (NULL: any) arrives; events
 * before it are dropped. Same returns as th_sse_next. */
int th_sse_until(struct th_sse *s, const char *event, struct th_sse_event *ev, int timeout_ms);
void th_sse_event_free(struct th_sse_event *ev);
void th_sse_close(struct th_sse *s); /* NULL is a no-op */

#endif
