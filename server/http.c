/* server/http.c — libmicrohttpd glue. Per request, one req_ctx holds the
 * route, the capped body and the reply; it is freed in the completion
 * callback, which also writes the access-log line. Per connection, a record
 * of server/http_conn.h holds the client's address and the request
 * deadline.
 *
 * The per-client limits (common/limits.h) are applied here: connections per
 * address at accept and at a connection's requests, event streams per
 * tenant when a stream opens, and submissions per caller before their body
 * is parsed. Every refusal is a problem+json with Retry-After.
 *
 * Three kinds of answer park their connection instead of holding a thread:
 * an SSE stream suspends whenever it has nothing to send, and a long-poll
 * (?wait=S) suspends until its run completes or S passes; the hub resumes
 * both (live/hub.h). A handler's deferred reply (a generic submission,
 * handlers/handlers.h) suspends until its work is done: the submission
 * queue's flusher resumes it after its commit (handlers/submitq.h).
 *
 * Every request has an id (its X-Request-Id when valid, else its
 * traceparent's trace id, else a new one), answered in X-Request-Id and set
 * as the thread's log request id (common/log.h) around each callback that
 * works for it, so every line it causes here carries request_id=. */
#include "server/http.h"

#include "common/dynbuf.h"
#include "common/limits.h"
#include "common/log.h"
#include "common/metrics.h"
#include "live/hub.h"
#include "server/http_conn.h"
#include "server/http_cors.h"
#include "server/route.h"
#include "live/sse.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#define REQUEST_ID_HEADER "X-Request-Id"

/* A chunked body past the cap is read and dropped up to this many times the
 * cap so the client gets its 413; past that the connection is closed. */
#define DISCARD_FACTOR 4

struct http {
    struct MHD_Daemon *d;
    const struct hctx *hc;
    struct http_conns *conns;
    unsigned port;
};

/* A long-poll's parked answer. */
struct http_wait {
    struct reply rp;
    struct hub_waiter w;
};

/* An SSE response's state: owned by the response (freed by its free
 * callback, which may run after the request's completion callback). */
struct http_stream {
    struct MHD_Connection *conn;
    struct sse_stream *st;
    struct limits *lim;
    char tenant[65]; /* counted against limits.streams_per_tenant (names are <= 64) */
    char request_id[LOG_REQUEST_ID_MAX + 1];
};

struct req_ctx {
    struct http *h;
    struct MHD_Connection *conn;
    struct http_conn *cn; /* the connection's record (server/http_conn.h) */
    const char *method, *url;
    int64_t t0, t0_us;
    enum route_result rr;
    struct route_hit m;
    struct dynbuf body; /* capped at http.max_body_bytes */
    size_t seen;
    bool too_large, responded;
    unsigned http_status;
    struct principal who;    /* decided before anything else is read */
    const char *cors_origin; /* an allowed Origin (server/http_cors.h), or NULL */
    char stream_tenant[65];
    char run_id[130];
    struct http_wait *wait;    /* a parked long-poll */
    struct deferred *deferred; /* parked work (handlers.h), answered once it is done */
    char request_id[LOG_REQUEST_ID_MAX + 1];
};

static void http_log(void *cls, const char *fmt, va_list ap) PRINTF_LIKE(2, 0);

/* libmicrohttpd's messages are warnings, but for those it writes when a
 * client went away, one per normal disconnect: debug. They start with
 * expected[]: a stream that ends because its client left (the final chunk
 * cannot be sent) or is dropped for lagging (sse.c logs that itself; only
 * streams are chunked, so these name only them), and a request cut short
 * by its client or at its deadline (http_conn.c logs that itself). Or they
 * end with a peer_gone[] cause: a send to a client that closed (EPIPE) or
 * reset (ECONNRESET) its connection. */
static void http_log(void *cls, const char *fmt, va_list ap)
{
    static const char *const expected[] = {
        "Closing connection (application error generating response)",
        "Failed to send the footers",
        "Connection socket is closed when reading request",
        "Socket has been disconnected when reading request",
        "Connection was closed by remote side",
    };
    static const char *const peer_gone[] = {
        "The socket is no longer available for sending",
        "The connection was forcibly closed by remote peer",
    };
    enum log_level lvl = LOG_WARN;
    char msg[512];

    (void)cls;
    vsnprintf(msg, sizeof(msg), fmt, ap);
    for (size_t i = 0; i < ARRAY_LEN(expected); i++)
        if (strncmp(msg, expected[i], strlen(expected[i])) == 0)
            lvl = LOG_DEBUG;
    for (size_t i = 0; i < ARRAY_LEN(peer_gone); i++)
        if (strstr(msg, peer_gone[i]))
            lvl = LOG_DEBUG;
    LOG(lvl, "libmicrohttpd: %s", msg);
}

/* A 200 with an ETag that the request's If-None-Match names (weak
 * comparison, RFC 9110 13.1.2) becomes a 304 without a body. */
static void http_not_modified(const struct req_ctx *rc, struct reply *rp)
{
    const char *etag = reply_header_get(rp, "ETag");
    const char *inm;

    if (rp->http_status != 200 || !etag)
        return;
    inm = MHD_lookup_connection_value(rc->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_NONE_MATCH);
    if (!inm || (strcmp(inm, "*") != 0 && !strstr(inm, etag)))
        return;
    rp->http_status = MHD_HTTP_NOT_MODIFIED;
    free(rp->text);
    rp->text = NULL;
    json_decref(rp->body);
    rp->body = NULL;
}

static enum MHD_Result http_send(struct req_ctx *rc, struct reply *rp)
{
    char *text = NULL;
    const char *type = "application/json";
    struct MHD_Response *r;
    enum MHD_Result ret;

    if (rc->cn && !http_conn_received(rc->h->conns, rc->cn))
        return MHD_NO; /* answered 408 at its deadline already */
    http_not_modified(rc, rp);
    if (rp->text) {
        text = rp->text;
        rp->text = NULL;
        type = rp->text_type ? rp->text_type : "text/plain; charset=utf-8";
    } else if (rp->body) {
        text = json_dumps(rp->body, JSON_COMPACT);
        type = rp->problem ? "application/problem+json" : "application/json";
    }
    r = MHD_create_response_from_buffer(text ? strlen(text) : 0, text ? text : (void *)"",
                                        text ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    if (text)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (!reply_header_get(rp, MHD_HTTP_HEADER_CACHE_CONTROL))
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    http_cors_headers(r, rc->cors_origin);
    MHD_add_response_header(r, REQUEST_ID_HEADER, rc->request_id);
    for (unsigned i = 0; i < rp->nheaders; i++)
        MHD_add_response_header(r, rp->headers[i].name, rp->headers[i].value);
    ret = MHD_queue_response(rc->conn, rp->http_status, r);
    MHD_destroy_response(r);
    rc->responded = true;
    rc->http_status = rp->http_status;
    if (rp->run_id[0])
        xsnprintf(rc->run_id, sizeof(rc->run_id), "%s", rp->run_id);
    return ret;
}

static enum MHD_Result http_send_error(struct req_ctx *rc, enum status st, const char *fmt, ...)
    PRINTF_LIKE(3, 4);

static enum MHD_Result http_send_error(struct req_ctx *rc, enum status st, const char *fmt, ...)
{
    struct error err = {0};
    struct reply rp;
    enum MHD_Result ret;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(err.message, sizeof(err.message), fmt, ap);
    va_end(ap);
    utf8_scrub(err.message); /* jansson's parse errors can cut a character */
    reply_init(&rp);
    reply_error(&rp, st, &err);
    if (st == ST_METHOD)
        reply_header(&rp, "Allow", rc->m.allow);
    ret = http_send(rc, &rp);
    reply_cleanup(&rp);
    return ret;
}

static enum MHD_Result http_send_problem(struct req_ctx *rc, enum status st,
                                         const struct error *err)
{
    struct reply rp;
    enum MHD_Result ret;

    reply_init(&rp);
    reply_error(&rp, st, err);
    ret = http_send(rc, &rp);
    reply_cleanup(&rp);
    return ret;
}

/* A refusal by a per-client limit: 429 with err's message and Retry-After;
 * with close, the connection is closed after it. */
static enum MHD_Result http_send_limited(struct req_ctx *rc, const struct error *err,
                                         int retry_after_s, bool close)
{
    struct reply rp;
    enum MHD_Result ret;
    char secs[16];

    xsnprintf(secs, sizeof(secs), "%d", retry_after_s > 0 ? retry_after_s : 1);
    reply_init(&rp);
    reply_error(&rp, ST_LIMITED, err);
    reply_header(&rp, "Retry-After", secs);
    if (close)
        reply_header(&rp, MHD_HTTP_HEADER_CONNECTION, "close");
    ret = http_send(rc, &rp);
    reply_cleanup(&rp);
    return ret;
}

/* A connection opened over its address's limit answers its first request
 * 429 and closes. */
static enum MHD_Result http_send_over_limit(struct req_ctx *rc)
{
    struct limits *lim = rc->h->hc->limits;
    struct error err = {0};

    limits_note(lim, LIMITS_CONN_ANSWERED);
    error_set(&err, ST_LIMITED,
              "too many connections from %s (limit %d); reuse or close the others",
              http_conn_addr(rc->cn), rc->h->hc->cfg->http.max_connections_per_ip);
    return http_send_limited(rc, &err, 1, true);
}

static bool content_type_json(const char *ct)
{
    size_t n;

    if (!ct)
        return false;
    n = strcspn(ct, ";");
    while (n > 0 && (ct[n - 1] == ' ' || ct[n - 1] == '\t'))
        n--;
    if (n == 16 && strncasecmp(ct, "application/json", 16) == 0)
        return true;
    return n > 5 && strncasecmp(ct + n - 5, "+json", 5) == 0 &&
           strncasecmp(ct, "application/", 12) == 0;
}

static const char *http_arg(const struct req_ctx *rc, const char *key)
{
    return MHD_lookup_connection_value(rc->conn, MHD_GET_ARGUMENT_KIND, key);
}

/* Who the request is, decided before anything else about it (even
 * whether its path exists) is told; a failure is answered here. */
static enum MHD_Result http_auth(struct req_ctx *rc, bool *ok)
{
    const bool found = rc->rr == ROUTE_FOUND;
    const struct auth_request ar = {
        .need = found ? rc->m.entry->need : NEED_TOKEN,
        .authorization =
            MHD_lookup_connection_value(rc->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION),
        .access_token = http_arg(rc, "access_token"),
        .stream = found && rc->m.entry->stream,
        .tenant = http_arg(rc, "tenant"),
    };
    struct error err = {0};
    struct reply rp;
    enum MHD_Result ret;
    enum status st = auth_decide(rc->h->hc->cfg, &ar, &rc->who, &err);

    *ok = st == ST_OK;
    if (*ok)
        return MHD_YES;
    reply_init(&rp);
    reply_error(&rp, st, &err);
    if (rc->who.challenge)
        reply_header(&rp, "WWW-Authenticate", rc->who.challenge);
    ret = http_send(rc, &rp);
    reply_cleanup(&rp);
    return ret;
}

/* A browser's preflight carries no credentials, so an allowed origin's is
 * answered before authentication; any other OPTIONS goes on as usual. */
static enum MHD_Result http_preflight(struct req_ctx *rc)
{
    struct reply rp;
    enum MHD_Result ret;

    reply_init(&rp);
    http_cors_preflight(&rp, rc->m.allow);
    ret = http_send(rc, &rp);
    reply_cleanup(&rp);
    return ret;
}

/* The first call for a request: route it and check the headers early. */
static enum MHD_Result http_begin(struct req_ctx *rc)
{
    const struct config *cfg = rc->h->hc->cfg;
    const char *len, *ct;
    bool ok;
    enum MHD_Result ret = http_auth(rc, &ok);

    if (!ok)
        return ret;
    if (rc->rr == ROUTE_NOT_FOUND)
        return http_send_error(rc, ST_NOT_FOUND, "no resource at \"%.200s\"", rc->url);
    if (rc->rr == ROUTE_METHOD)
        return http_send_error(rc, ST_METHOD, "method %.16s is not allowed on \"%.200s\"",
                               rc->method, rc->url);
    if (!rc->m.entry->json_body)
        return MHD_YES;
    len = MHD_lookup_connection_value(rc->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (len && strtoull(len, NULL, 10) > (unsigned long long)cfg->http.max_body_bytes)
        return http_send_error(rc, ST_TOO_LARGE, "request body exceeds %lld bytes",
                               (long long)cfg->http.max_body_bytes);
    ct = MHD_lookup_connection_value(rc->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    if (!content_type_json(ct))
        return http_send_error(rc, ST_UNSUPPORTED,
                               "content type must be application/json, not "
                               "\"%.100s\"",
                               ct ? ct : "(none)");
    return MHD_YES;
}

static enum MHD_Result http_body(struct req_ctx *rc, const char *data, size_t *size)
{
    size_t cap = (size_t)rc->h->hc->cfg->http.max_body_bytes;
    size_t n = *size;

    *size = 0;
    rc->seen += n;
    if (rc->responded || !rc->m.entry || !rc->m.entry->json_body)
        return MHD_YES; /* not wanted: dropped */
    if (rc->too_large || dynbuf_add(&rc->body, data, n) != ST_OK) {
        rc->too_large = true;
        dynbuf_free(&rc->body);
        return rc->seen > cap * DISCARD_FACTOR ? MHD_NO : MHD_YES;
    }
    return MHD_YES;
}

static const char *http_query(const struct request *rq, const char *key)
{
    return MHD_lookup_connection_value(rq->query_arg, MHD_GET_ARGUMENT_KIND, key);
}

static struct request http_request(const struct req_ctx *rc)
{
    return (struct request){
        .method = rc->method,
        .path = rc->url,
        .path_id = rc->m.id[0] ? rc->m.id : NULL,
        .tenant = rc->who.tenant,
        .all_tenants = rc->who.all_tenants,
        .initiator = rc->who.name,
        .query = http_query,
        .query_arg = rc->conn,
    };
}

/* ---- long-polls --------------------------------------------------------- */

/* Both run with the hub lock held (server/hub.h). */
static bool http_wait_suspend(void *arg)
{
    struct req_ctx *rc = arg;

    MHD_suspend_connection(rc->conn);
    return true;
}

static void http_wait_resume(void *arg)
{
    struct req_ctx *rc = arg;

    MHD_resume_connection(rc->conn);
}

/* Answers a long-poll with its run as it is now. */
static enum MHD_Result http_wait_finish(struct req_ctx *rc, bool refresh)
{
    struct http_wait *hw = rc->wait;
    struct request rq = http_request(rc);
    enum MHD_Result ret;

    hub_wait_remove(rc->h->hc->hub, &hw->w);
    if (refresh)
        (void)hw->rp.refresh(rc->h->hc, &rq, &hw->rp);
    ret = http_send(rc, &hw->rp);
    reply_cleanup(&hw->rp);
    return ret;
}

/* Parks the answer until the run completes or the wait ends. The run is
 * read again after the waiter is armed: a completion committed between the
 * handler's read and the arming is then seen here, and any later one
 * reaches the waiter through the hub. */
static enum MHD_Result http_wait_begin(struct req_ctx *rc, struct reply *rp)
{
    const struct hctx *hc = rc->h->hc;
    struct request rq = http_request(rc);
    struct http_wait *hw = xcalloc(1, sizeof(*hw));
    struct error err = {0};

    hw->rp = *rp;
    reply_init(rp); /* the body moved to hw */
    rc->wait = hw;
    xsnprintf(hw->w.tenant, sizeof(hw->w.tenant), "%s", hw->rp.wait_tenant);
    xsnprintf(hw->w.run_id, sizeof(hw->w.run_id), "%s", hw->rp.wait_run_id);
    hw->w.deadline_ms = clock_mono_ms() + hw->rp.wait_ms;
    hw->w.wake = (struct hub_wake){http_wait_suspend, http_wait_resume, rc};
    if (hub_wait_add(hc->hub, &hw->w, &err) != ST_OK)
        return http_wait_finish(rc, false);
    (void)hw->rp.refresh(hc, &rq, &hw->rp);
    if (hw->rp.wait_ms == 0)
        return http_wait_finish(rc, false);
    if (!hub_wait_suspend(hc->hub, &hw->w))
        return http_wait_finish(rc, true);
    return MHD_YES;
}

/* ---- deferred work ------------------------------------------------------ */

/* Called once by whoever finished the work (a submission flusher after its
 * commit), from any thread; the connection is suspended by then. */
static void http_defer_resume(void *arg)
{
    struct req_ctx *rc = arg;

    MHD_resume_connection(rc->conn);
}

/* Parks the connection, then starts the work: suspending first, because the
 * work may be done (and resume it) before start returns. */
static enum MHD_Result http_defer_begin(struct req_ctx *rc, struct reply *rp)
{
    rc->deferred = rp->deferred;
    rp->deferred = NULL;
    reply_cleanup(rp);
    MHD_suspend_connection(rc->conn);
    rc->deferred->start(rc->deferred, rc->h->hc, http_defer_resume, rc);
    return MHD_YES;
}

/* Resumed: the work is done; answer it (or park it again as a long-poll). */
static enum MHD_Result http_defer_finish(struct req_ctx *rc)
{
    const struct hctx *hc = rc->h->hc;
    struct request rq = http_request(rc);
    struct deferred *d = rc->deferred;
    struct reply rp;
    enum MHD_Result ret;

    rc->deferred = NULL;
    reply_init(&rp);
    d->finish(d, hc, &rq, &rp);
    d->free(d, hc);
    if (rp.http_status == 0)
        reply_error(&rp, ST_INTERNAL, NULL);
    if (rp.wait_ms > 0 && rp.refresh && hc->hub)
        return http_wait_begin(rc, &rp);
    ret = http_send(rc, &rp);
    reply_cleanup(&rp);
    return ret;
}

/* ---- streams ------------------------------------------------------------ */

/* Runs with the hub lock held, on the connection's thread. A peer that
 * closed is noticed here: MHD does not read a suspended connection, and the
 * first write to a closed peer still succeeds, so without this peek a gone
 * client would hold its connection until a second write (measured:
 * docs/streams.md, "Noticing a client that left"). */
static bool http_stream_suspend(void *arg)
{
    struct http_stream *hs = arg;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(hs->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    char b;

    if (ci) {
        ssize_t r = recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            return false;
    }
    MHD_suspend_connection(hs->conn);
    return true;
}

static void http_stream_resume(void *arg)
{
    struct http_stream *hs = arg;

    MHD_resume_connection(hs->conn);
}

static ssize_t http_stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct http_stream *hs = cls;
    size_t n = 0;
    ssize_t ret = MHD_CONTENT_READER_END_WITH_ERROR;

    (void)pos;
    log_request_id_set(hs->request_id);
    switch (sse_read(hs->st, buf, max, &n)) {
    case SSE_DATA:
        ret = (ssize_t)n;
        break;
    case SSE_SUSPENDED:
        ret = 0;
        break;
    case SSE_END:
        ret = MHD_CONTENT_READER_END_OF_STREAM;
        break;
    case SSE_ABORT:
        break;
    }
    log_request_id_set(NULL);
    return ret;
}

/* Runs inside the request's callbacks too (a refused or finished stream),
 * whose lines after it keep their id. */
static void http_stream_free(void *cls)
{
    struct http_stream *hs = cls;
    char prev[LOG_REQUEST_ID_MAX + 1];

    xsnprintf(prev, sizeof(prev), "%s", log_request_id() ? log_request_id() : "");
    log_request_id_set(hs->request_id);
    sse_close(hs->st);
    if (hs->lim)
        limits_stream_close(hs->lim, hs->tenant);
    free(hs);
    log_request_id_set(prev[0] ? prev : NULL);
}

/* The request's SSE parameters; a problem goes to err->fields. */
static enum status http_stream_params(struct req_ctx *rc, struct sse_request *q, struct error *err)
{
    const struct config *cfg = rc->h->hc->cfg;
    const char *lid = MHD_lookup_connection_value(rc->conn, MHD_HEADER_KIND, "Last-Event-ID");
    const char *field = "Last-Event-ID";

    /* NULL: every tenant (an admin's GET /stream) */
    *q = (struct sse_request){.tenant = rc->who.all_tenants ? NULL : rc->who.tenant,
                              .retry_ms = cfg->sse.retry_ms};
    if (rc->m.id[0])
        q->run_id = rc->m.id;
    if (!lid || !*lid)
        lid = MHD_lookup_connection_value(rc->conn, MHD_GET_ARGUMENT_KIND, "last_event_id"),
        field = "last_event_id";
    if (lid && *lid) {
        q->has_last_id = true;
        if (!sse_parse_last_id(lid, &q->last_id))
            error_field(err, ST_INVALID, field, "must be an event id (a decimal integer)");
    }
    if (!q->run_id) {
        struct request rq = http_request(rc);
        if (stream_parse_filter(&rq, &q->run_type, &q->has_status, &q->status, err) != ST_OK)
            return ST_INVALID; /* err has every field, Last-Event-ID's too */
    }
    if (err->nfields)
        return ST_INVALID;
    if (q->run_id && !q->tenant) { /* the one tenant that has this run */
        struct request rq = http_request(rc);
        enum status st = handle_runs_locate(rc->h->hc, &rq, q->run_id, rc->stream_tenant, err);
        if (st != ST_OK)
            return st;
        q->tenant = rc->stream_tenant;
    }
    return ST_OK;
}

/* A stream's own limits: the kernel would otherwise let a stalled client's
 * socket buffer grow to tcp_wmem's maximum (4 MiB by default) before the
 * send timeout can start counting. */
static void http_stream_socket(struct MHD_Connection *c, const struct config *cfg)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    int sndbuf = cfg->sse.send_buffer_bytes;

    if (ci && setsockopt(ci->connect_fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)) != 0)
        LOG(LOG_DEBUG, "could not set SO_SNDBUF on a stream: %s", strerror(errno));
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT,
                              (unsigned int)cfg->sse.send_timeout_s);
}

/* Counts the stream against its tenant's limit; the count is given back
 * in http_stream_free. */
static enum status http_stream_limit(struct req_ctx *rc, struct http_stream *hs, const char *tenant,
                                     struct error *err)
{
    struct limits *lim = rc->h->hc->limits;
    enum status st;

    if (!lim)
        return ST_OK;
    st = limits_stream_open(lim, tenant, err);
    if (st == ST_OK) {
        hs->lim = lim;
        xsnprintf(hs->tenant, sizeof(hs->tenant), "%s", tenant);
    }
    return st;
}

/* A stream refused by its tenant's limit may try again after about as long
 * as a browser waits before it reconnects. */
static int http_stream_retry_after(const struct config *cfg)
{
    return cfg->sse.retry_ms > 1000 ? (cfg->sse.retry_ms + 999) / 1000 : 1;
}

/* A completed run's stream resumed at or past its end: 204, no stream. */
static enum MHD_Result http_stream_finished(struct req_ctx *rc, struct http_stream *hs,
                                            const char *run_id)
{
    struct reply rp;
    enum MHD_Result ret;

    http_stream_free(hs); /* the stream's count against its tenant too */
    reply_init(&rp);
    rp.http_status = MHD_HTTP_NO_CONTENT;
    xsnprintf(rp.run_id, sizeof(rp.run_id), "%s", run_id);
    ret = http_send(rc, &rp);
    reply_cleanup(&rp);
    return ret;
}

static enum MHD_Result http_stream(struct req_ctx *rc)
{
    const struct hctx *hc = rc->h->hc;
    struct http_stream *hs = xcalloc(1, sizeof(*hs));
    struct error err = {0};
    struct sse_request q;
    struct MHD_Response *r = NULL;
    enum MHD_Result ret;
    enum status st = http_stream_params(rc, &q, &err);

    hs->conn = rc->conn;
    xsnprintf(hs->request_id, sizeof(hs->request_id), "%s", rc->request_id);
    if (st == ST_OK && !hc->hub)
        st = error_set(&err, ST_BUSY, "streams are not enabled");
    if (st == ST_OK)
        /* the run's tenant (an admin's stream of one run is found in it);
         * an admin's all-tenant GET /stream counts against its own */
        st = http_stream_limit(rc, hs, q.tenant ? q.tenant : rc->who.tenant, &err);
    if (st == ST_OK)
        st = sse_open(hc->hub, hc->pool, &q,
                      &(struct hub_wake){http_stream_suspend, http_stream_resume, hs}, &hs->st,
                      &err);
    if (st == ST_OK && sse_finished(hs->st))
        return http_stream_finished(rc, hs, q.run_id);
    /* A chunked answer's reader writes straight into the connection's own
     * buffer; the response's block (allocated and touched per stream) is
     * used only for an HTTP/1.0 client, so it is kept small. */
    if (st == ST_OK)
        r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 1024, http_stream_read, hs,
                                              http_stream_free);
    if (!r) {
        http_stream_free(hs);
        if (st == ST_OK)
            return MHD_NO;
        if (st == ST_LIMITED)
            return http_send_limited(rc, &err, http_stream_retry_after(hc->cfg), false);
        return http_send_problem(rc, st, &err);
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    http_cors_headers(r, rc->cors_origin);
    MHD_add_response_header(r, REQUEST_ID_HEADER, rc->request_id);
    http_stream_socket(rc->conn, hc->cfg);
    ret = MHD_queue_response(rc->conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    rc->responded = true;
    rc->http_status = MHD_HTTP_OK;
    if (q.run_id)
        xsnprintf(rc->run_id, sizeof(rc->run_id), "%s", q.run_id);
    return ret;
}

/* ---- dispatch ----------------------------------------------------------- */

/* Who a submission is counted against: its token, or without one the
 * client's address. */
static void http_caller(const struct req_ctx *rc, char *buf, size_t cap)
{
    if (rc->who.token)
        xsnprintf(buf, cap, "token:%s", rc->who.token->name);
    else
        xsnprintf(buf, cap, "addr:%s", rc->cn ? http_conn_addr(rc->cn) : "unknown");
}

/* Submissions (POST /alerts, generic or Alertmanager) and retries, which
 * also create runs, take a token of their caller's bucket before their body
 * is parsed. */
static enum status http_submit_limit(struct req_ctx *rc, int *retry_after_s, struct error *err)
{
    char caller[160];

    if (!rc->h->hc->limits ||
        (rc->m.entry->fn != handle_alerts_create && rc->m.entry->fn != handle_runs_retry))
        return ST_OK;
    http_caller(rc, caller, sizeof(caller));
    return limits_submit(rc->h->hc->limits, caller, retry_after_s, err);
}

/* The last call: parse, run the handler, answer. */
static enum MHD_Result http_dispatch(struct req_ctx *rc)
{
    const struct hctx *hc = rc->h->hc;
    struct request rq = http_request(rc);
    struct error err = {0};
    int retry_after_s = 0;
    json_error_t jerr;
    struct reply rp;
    enum MHD_Result ret;

    if (rc->too_large)
        return http_send_error(rc, ST_TOO_LARGE, "request body exceeds %lld bytes",
                               (long long)hc->cfg->http.max_body_bytes);
    if (http_submit_limit(rc, &retry_after_s, &err) != ST_OK)
        return http_send_limited(rc, &err, retry_after_s, false);
    if (rc->m.entry->json_body) {
        if (dynbuf_len(&rc->body) == 0)
            return http_send_error(rc, ST_INVALID,
                                   "request body is empty; a JSON object is "
                                   "expected");
        rq.body =
            json_loadb(dynbuf_ptr(&rc->body), dynbuf_len(&rc->body), JSON_REJECT_DUPLICATES, &jerr);
        if (!rq.body)
            return http_send_error(rc, ST_INVALID,
                                   "could not parse the body as JSON: %s at "
                                   "line %d column %d",
                                   jerr.text, jerr.line, jerr.column);
    }
    if (rc->m.entry->stream)
        return http_stream(rc);
    reply_init(&rp);
    (void)rc->m.entry->fn(hc, &rq, &rp);
    json_decref(rq.body);
    if (rp.deferred)
        return http_defer_begin(rc, &rp);
    if (rp.http_status == 0)
        reply_error(&rp, ST_INTERNAL, NULL);
    if (rp.wait_ms > 0 && rp.refresh && hc->hub)
        return http_wait_begin(rc, &rp);
    ret = http_send(rc, &rp);
    reply_cleanup(&rp);
    return ret;
}

/* The connection's record, made when it was accepted (http_notify). */
static struct http_conn *http_conn_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

    return ci ? ci->socket_context : NULL;
}

static struct req_ctx *http_req_new(struct http *h, struct MHD_Connection *c, const char *url,
                                    const char *method)
{
    struct req_ctx *rc = xcalloc(1, sizeof(*rc));

    rc->h = h;
    rc->conn = c;
    rc->cn = http_conn_of(c);
    rc->method = method;
    rc->url = url;
    rc->t0 = clock_mono_ms();
    rc->t0_us = clock_mono_us();
    dynbuf_init(&rc->body, (size_t)h->hc->cfg->http.max_body_bytes);
    rc->rr = route_find(method, url, &rc->m);
    rc->cors_origin = http_cors_origin(h->hc->cfg, c);
    if (rc->cn && rc->cors_origin)
        http_conn_set_origin(h->conns, rc->cn, rc->cors_origin);
    log_request_id_pick(MHD_lookup_connection_value(c, MHD_HEADER_KIND, REQUEST_ID_HEADER),
                        MHD_lookup_connection_value(c, MHD_HEADER_KIND, "traceparent"),
                        rc->request_id);
    return rc;
}

static enum MHD_Result http_access_step(struct req_ctx *rc, const char *upload_data,
                                        size_t *upload_size)
{
    if (*upload_size > 0)
        return http_body(rc, upload_data, upload_size);
    if (rc->responded)
        return MHD_YES;
    if (rc->wait)
        return http_wait_finish(rc, true); /* resumed: the run completed or the wait ended */
    if (rc->deferred)
        return http_defer_finish(rc); /* resumed: the work is done */
    if (rc->cn && !http_conn_received(rc->h->conns, rc->cn))
        return MHD_NO; /* answered 408 at its deadline already */
    return http_dispatch(rc);
}

/* Every call for a request runs with its id set for the log. */
static enum MHD_Result http_access(void *cls, struct MHD_Connection *c, const char *url,
                                   const char *method, const char *version, const char *upload_data,
                                   size_t *upload_size, void **con_cls)
{
    struct req_ctx *rc = *con_cls;
    enum MHD_Result ret;

    (void)version;
    if (!rc) {
        rc = http_req_new(cls, c, url, method);
        *con_cls = rc;
        log_request_id_set(rc->request_id);
        if (rc->cn && http_conn_over_limit(rc->cn))
            ret = http_send_over_limit(rc);
        else if (rc->cors_origin && rc->rr == ROUTE_METHOD && http_cors_is_preflight(c, method))
            ret = http_preflight(rc);
        else
            ret = http_begin(rc);
    } else {
        log_request_id_set(rc->request_id);
        ret = http_access_step(rc, upload_data, upload_size);
    }
    log_request_id_set(NULL);
    return ret;
}

static void http_done(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode toe)
{
    struct http *h = cls;
    struct req_ctx *rc = *con_cls;
    struct http_conn *cn = http_conn_of(c);

    if (cn)
        http_conn_next(h->conns, cn);
    if (!rc)
        return;
    log_request_id_set(rc->request_id);
    LOG(LOG_INFO, "request method=%s path=%s status=%u duration_ms=%lld%s%s%s%s%s", rc->method,
        rc->url, rc->http_status, (long long)(clock_mono_ms() - rc->t0),
        rc->run_id[0] ? " run=" : "", rc->run_id, rc->who.token ? " token=" : "",
        rc->who.token ? rc->who.token->name : "",
        toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " aborted=true");
    if (rc->http_status)
        metrics_http_request(rc->h->hc->metrics, rc->m.entry ? rc->m.entry->pattern : NULL,
                             rc->http_status, (double)(clock_mono_us() - rc->t0_us) / 1e6);
    if (rc->wait) {
        hub_wait_remove(rc->h->hc->hub, &rc->wait->w);
        hub_wait_release(rc->h->hc->hub, &rc->wait->w);
        reply_cleanup(&rc->wait->rp);
        free(rc->wait);
    }
    if (rc->deferred) /* done, but its client left before the answer */
        rc->deferred->free(rc->deferred, rc->h->hc);
    dynbuf_free(&rc->body);
    free(rc);
    *con_cls = NULL;
    log_request_id_set(NULL);
}

/* Before libmicrohttpd takes a connection: one from an address that has
 * LIMITS_ADDR_HARD_FACTOR times its limit open is closed without an answer
 * (one below that is answered 429 instead, http_send_over_limit). */
static enum MHD_Result http_admit(void *cls, const struct sockaddr *addr, socklen_t len)
{
    struct http *h = cls;
    char text[INET6_ADDRSTRLEN];

    (void)len;
    if (!h->hc->limits)
        return MHD_YES;
    http_conn_addr_text(addr, text, sizeof(text));
    if (limits_conn_admit(h->hc->limits, text))
        return MHD_YES;
    LOG(LOG_DEBUG, "refused a connection peer=%s: too many open", text);
    return MHD_NO;
}

/* A connection's record lives from its accept to its close; libmicrohttpd
 * closes the socket after this notification (measured in 0.9.75). */
static void http_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                        enum MHD_ConnectionNotificationCode code)
{
    struct http *h = cls;
    const union MHD_ConnectionInfo *fd, *addr;
    char text[INET6_ADDRSTRLEN];

    if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        http_conn_close(h->conns, *socket_context);
        *socket_context = NULL;
        return;
    }
    fd = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    addr = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!fd)
        return;
    http_conn_addr_text(addr ? addr->client_addr : NULL, text, sizeof(text));
    *socket_context = http_conn_open(h->conns, fd->connect_fd, text);
}

/* Resolves "host:port" / "[v6]:port". *addr and *port are set on ST_OK
 * only. */
static enum status http_resolve(const char *listen, struct sockaddr_storage *addr, unsigned *port,
                                struct error *err)
{
    char host[256];
    const char *colon = strrchr(listen, ':');
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
    size_t hlen;
    int rv;

    if (!colon)
        return error_set(err, ST_INVALID, "invalid \"listen\": expected HOST:PORT");
    hlen = (size_t)(colon - listen);
    if (hlen >= 2 && listen[0] == '[' && listen[hlen - 1] == ']')
        xsnprintf(host, sizeof(host), "%.*s", (int)(hlen - 2), listen + 1);
    else
        xsnprintf(host, sizeof(host), "%.*s", (int)hlen, listen);
    rv = getaddrinfo(host, colon + 1, &hints, &ai);
    if (rv != 0)
        return error_set(err, ST_INVALID, "could not resolve \"listen\" %s: %s", listen,
                         gai_strerror(rv));
    memcpy(addr, ai->ai_addr, ai->ai_addrlen);
    *port = (unsigned)strtoul(colon + 1, NULL, 10);
    freeaddrinfo(ai);
    return ST_OK;
}

/* libmicrohttpd's options; every value is cast to the type it reads.
 *
 * A connection's memory pool holds its request headers and its write
 * buffer, and all of it is touched: it is most of what an idle stream costs
 * (measured: 32 KiB gave 31.6 KiB per stream). 14 KiB keeps a stream near
 * 14 KiB and still takes request headers of about 13 KB (more gets 431);
 * bodies and large answers do not live in it. */
#define HTTP_CONN_POOL (14 * 1024)
static struct MHD_Daemon *http_daemon(struct http *h, unsigned flags, unsigned port,
                                      struct sockaddr_storage *addr)
{
    const struct config *cfg = h->hc->cfg;

    return MHD_start_daemon(
        flags, (uint16_t)port, &http_admit, h, &http_access, h, MHD_OPTION_EXTERNAL_LOGGER,
        http_log, NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)addr, MHD_OPTION_THREAD_POOL_SIZE,
        (unsigned int)cfg->http.threads, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned int)cfg->http.connection_limit, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned int)cfg->http.connection_timeout_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        (size_t)HTTP_CONN_POOL, MHD_OPTION_NOTIFY_COMPLETED, &http_done, h,
        MHD_OPTION_NOTIFY_CONNECTION, &http_notify, h, MHD_OPTION_END);
}

enum status http_start(const struct hctx *hc, struct http **out, struct error *err)
{
    struct http *h = xcalloc(1, sizeof(*h));
    struct sockaddr_storage addr = {0};
    const union MHD_DaemonInfo *info;
    unsigned port = 0;
    unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    enum status st = http_resolve(hc->cfg->listen, &addr, &port, err);

    *out = NULL;
    if (st != ST_OK) {
        free(h);
        return st;
    }
    h->hc = hc;
    h->conns = http_conns_new(hc->limits, hc->cfg->http.request_deadline_s);
    st = http_conns_start(h->conns, err);
    if (st != ST_OK)
        goto fail;
    if (addr.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    h->d = http_daemon(h, flags, port, &addr);
    if (!h->d) {
        st = error_set(err, ST_UNAVAILABLE, "could not listen on %s", hc->cfg->listen);
        goto fail;
    }
    info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    h->port = info ? info->port : port;
    *out = h;
    return ST_OK;
fail:
    http_conns_free(h->conns);
    free(h);
    return st;
}

unsigned http_port(const struct http *h)
{
    return h->port;
}

void http_stop(struct http *h)
{
    if (!h)
        return;
    MHD_stop_daemon(h->d); /* closes every connection, and so their records */
    http_conns_free(h->conns);
    free(h);
}
