/* server/http_internal.h — what the files of the HTTP front end share, for
 * them only.
 *
 * http_mhd.c is the libmicrohttpd glue, the only file that includes
 * microhttpd.h: the daemon, its callbacks, and the calls on a connection
 * the other files need (a header, a query argument, the request as
 * handlers see it, an answer, a problem, suspend and resume, an event
 * stream's response). It calls nothing above it: what its callbacks hand
 * a request or a stream to comes as a table (struct http_calls) that
 * http.c, the front end's life cycle (http.h), gives it at start. The
 * others hold what is not the library's: http_request.c takes a request
 * from its first call to its answer (authentication, routing, the body,
 * the handler); http_park.c parks answers that wait (long-polls, deferred
 * work); http_stream.c opens event streams; http_listen.c binds the
 * address. Calls go one way:
 *   http.c -> http_request.c -> http_park.c, http_stream.c -> http_mhd.c
 *     -> http_conn.c -> http_cors.c
 *
 * A bool these functions return is libmicrohttpd's answer to a callback:
 * true goes on (MHD_YES), false closes the connection (MHD_NO). All run on
 * the connection's thread unless a comment says otherwise. */
#ifndef OPSRUN_SERVER_HTTP_INTERNAL_H
#define OPSRUN_SERVER_HTTP_INTERNAL_H

#include "common/dynbuf.h"
#include "common/log.h"
#include "handlers/auth.h"
#include "handlers/handlers.h"
#include "live/sse.h"

struct log_stream; /* live/log_stream.h */
#include "server/route.h"

#include <stdatomic.h>
#include <sys/types.h>

struct MHD_Connection;
struct MHD_Daemon;
struct http_conn;
struct http_conns;
struct http_wait; /* a parked long-poll (http_park.c) */
struct limits;

#define REQUEST_ID_HEADER "X-Request-Id"

struct http_calls;

struct http {
    struct MHD_Daemon *d;           /* NULL until http_start */
    const struct http_calls *calls; /* from http_start */
    const struct hctx *hc;          /* from http_start */
    struct http_conns *conns;       /* from http_start */
    int fd;                         /* the bound socket; the daemon's once it started */
    unsigned port;                  /* the bound port */
    char listen[256];               /* the address, for messages */
    /* Requests whose answer waits for other work (http_park_defer) and
     * is not sent yet: http_wait_deferred waits for them before stop. */
    _Atomic int deferred;
};

/* One request, from its first call to its completion (http_request_done). */
struct req_ctx {
    struct http *h;
    /* What the handlers get: h's, with the configuration held for this
     * request from its first call to its completion (config/live.h). */
    struct hctx hc;
    struct MHD_Connection *conn;
    struct http_conn *cn; /* the connection's record (server/http_conn.h) */
    const char *method, *url;
    int64_t t0, t0_us;
    enum route_result rr;
    struct route_hit m;
    struct dynbuf body; /* capped at http.max_body_bytes */
    size_t seen;
    bool too_large, responded;
    bool deferred_counted; /* counted in h->deferred until it completes */
    unsigned http_status;
    struct principal who;    /* decided before anything else is read */
    const char *cors_origin; /* an allowed Origin (server/http_cors.h), or NULL */
    char stream_tenant[65];
    char run_id[130];
    struct http_wait *wait;    /* a parked long-poll */
    struct deferred *deferred; /* parked work (handlers.h), answered once it is done */
    char request_id[LOG_REQUEST_ID_MAX + 1];
};

/* An SSE response's state: owned by the response (freed by its free
 * callback, http_stream_free, which may run after the request's
 * completion). */
struct http_stream {
    const struct http_calls *calls; /* set by http_respond_stream */
    struct MHD_Connection *conn;
    struct sse_stream *st;  /* a run's or every run's events, or ... */
    struct log_stream *log; /* ... a run's log */
    struct limits *lim;
    char tenant[65]; /* counted against limits.streams_per_tenant (names are <= 64) */
    char request_id[LOG_REQUEST_ID_MAX + 1];
    /* What its token was allowed (has_grant: it has one), asked again of
     * live's configuration at each generation after gen; revoked once a
     * reload took it away: the stream ends. */
    struct cfg_live *live;
    uint64_t gen;
    bool has_grant, revoked;
    struct auth_grant grant;
};

/* ---- http.c: the life cycle ------------------------------------------------ */

/* What the daemon's callbacks call: a request's steps (http_request.c) and
 * an event stream's reads (http_stream.c), given to the glue by http_start. */
struct http_calls {
    struct req_ctx *(*request_new)(struct http *h, struct MHD_Connection *c, struct http_conn *cn,
                                   const char *method, const char *url);
    bool (*request_begin)(struct req_ctx *rc);
    bool (*request_step)(struct req_ctx *rc, const char *data, size_t *size);
    void (*request_done)(struct req_ctx *rc, bool completed);
    enum sse_read (*stream_read)(struct http_stream *hs, char *buf, size_t max, size_t *n);
    void (*stream_free)(void *hs);
};

/* ---- http_mhd.c: the glue ------------------------------------------------ */

/* The daemon over h's bound socket, its callbacks calling h->calls; NULL
 * when libmicrohttpd would not start (its warning says why). Stopping it
 * closes every connection and the socket. */
struct MHD_Daemon *http_mhd_start(struct http *h);
void http_mhd_stop(struct http *h);

/* A request header or query argument, or NULL; borrowed from the
 * connection until the request completes. */
const char *http_header(const struct req_ctx *rc, const char *name);
const char *http_arg(const struct req_ctx *rc, const char *key);
/* struct request's query lookup; rq->query_arg is the connection. */
const char *http_query(const struct request *rq, const char *key);
/* Answers with rp (its body is taken; rp stays the caller's to clean up).
 * A 200 whose ETag the request's If-None-Match names becomes a 304. */
bool http_send(struct req_ctx *rc, struct reply *rp);
/* The request as handlers see it. */
struct request http_request_of(const struct req_ctx *rc);
/* A problem answer for st and err. */
bool http_request_problem(struct req_ctx *rc, enum status st, const struct error *err);
/* A refusal by a per-client limit: 429 with err's message and Retry-After;
 * with close, the connection is closed after it. */
bool http_request_limited(struct req_ctx *rc, const struct error *err, int retry_after_s,
                          bool close);
/* Parks and wakes the connection: resume is safe from any thread. */
void http_suspend(struct req_ctx *rc);
void http_resume(struct req_ctx *rc);
/* Answers 200 with hs as a text/event-stream, which then owns hs. */
bool http_respond_stream(struct req_ctx *rc, struct http_stream *hs);
/* A stream's hub_wake: run with the hub lock held. suspend is false when
 * the client has gone (the stream then ends). */
bool http_suspend_stream(void *hs);
void http_resume_stream(void *hs);

/* ---- http_request.c: a request ------------------------------------------- */

/* Routes the request and picks its id and CORS origin. */
struct req_ctx *http_request_new(struct http *h, struct MHD_Connection *c, struct http_conn *cn,
                                 const char *method, const char *url);
/* The first call: limits, preflight, authentication, route, headers. */
bool http_request_begin(struct req_ctx *rc);
/* Every later call: a piece of the body (*size set to 0 once taken), or,
 * with none, the end of the body or a wake-up of a parked answer. */
bool http_request_step(struct req_ctx *rc, const char *data, size_t *size);
/* The request is over (completed: its answer was sent whole): the access
 * log line, the metrics, and rc is freed. */
void http_request_done(struct req_ctx *rc, bool completed);

/* ---- http_park.c: answers that wait --------------------------------------- */

/* A handler's reply: parked as a long-poll when it asks for one (wait_ms
 * with a refresh, and a hub to wake it), else sent; a reply without a
 * status becomes a 500. */
bool http_park_or_send(struct req_ctx *rc, struct reply *rp);
/* Takes rp's deferred work, parks the connection and starts the work. */
bool http_park_defer(struct req_ctx *rc, struct reply *rp);
/* A parked request woke up: answers it (or parks it again). */
bool http_park_resumed(struct req_ctx *rc);
/* Frees what is still parked of a request that ends. */
void http_park_free(struct req_ctx *rc);

/* ---- http_stream.c: event streams ----------------------------------------- */

/* GET /runs/{id}/stream and GET /stream: the parameters, the tenant's
 * stream limit, the stream itself; a refusal or a 204 is answered here. */
bool http_stream_open(struct req_ctx *rc);
/* One read of the stream into buf, with the request's id in the log; the
 * end of the stream once a reload took its token's right to read it away. */
enum sse_read http_stream_read(struct http_stream *hs, char *buf, size_t max, size_t *n);
/* Closes the stream and gives back its count (the response's free). */
void http_stream_free(void *hs);

#endif
