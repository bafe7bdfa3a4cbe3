/* server/http.c — libmicrohttpd glue. Per request, one req_ctx holds the
 * route, the capped body and the reply; it is freed in the completion
 * callback, which also writes the access-log line.
 *
 * Two kinds of answer park their connection instead of holding a thread:
 * an SSE stream suspends whenever it has nothing to send, and a long-poll
 * (?wait=S) suspends until its run completes or S passes. The hub resumes
 * both (server/hub.h). */
#include "server/http.h"

#include "common/dynbuf.h"
#include "common/log.h"
#include "live/hub.h"
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

/* A chunked body past the cap is read and dropped up to this many times the
 * cap so the client gets its 413; past that the connection is closed. */
#define DISCARD_FACTOR 4

struct http {
    struct MHD_Daemon *d;
    const struct hctx *hc;
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
};

struct req_ctx {
    struct http *h;
    struct MHD_Connection *conn;
    const char *method, *url;
    int64_t t0;
    enum route_result rr;
    struct route_hit m;
    struct dynbuf body; /* capped at http.max_body_bytes */
    size_t seen;
    bool too_large, responded;
    unsigned http_status;
    char run_id[130];
    struct http_wait *wait; /* a parked long-poll */
};

static void http_log(void *cls, const char *fmt, va_list ap) PRINTF_LIKE(2, 0);

/* libmicrohttpd's messages are warnings, but for those it writes when a
 * stream ends because its client went away (the final chunk cannot be
 * sent), or is dropped for lagging (sse.c logs that itself): one per
 * normal disconnect. Only streams are chunked, so these name only them. */
static void http_log(void *cls, const char *fmt, va_list ap)
{
    static const char *const expected[] = {
        "Closing connection (application error generating response)",
        "Failed to send the footers",
    };
    enum log_level lvl = LOG_WARN;
    char msg[512];

    (void)cls;
    vsnprintf(msg, sizeof(msg), fmt, ap);
    for (size_t i = 0; i < ARRAY_LEN(expected); i++)
        if (strncmp(msg, expected[i], strlen(expected[i])) == 0)
            lvl = LOG_DEBUG;
    LOG(lvl, "libmicrohttpd: %s", msg);
}

static enum MHD_Result http_send(struct req_ctx *rc, struct reply *rp)
{
    char *text = NULL;
    const char *type = "application/json";
    struct MHD_Response *r;
    enum MHD_Result ret;

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
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
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

/* The first call for a request: route it and check the headers early. */
static enum MHD_Result http_begin(struct req_ctx *rc)
{
    const struct config *cfg = rc->h->hc->cfg;
    const char *len, *ct;

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
        .tenant = rc->h->hc->cfg->tenant_default,
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
    xsnprintf(hw->w.tenant, sizeof(hw->w.tenant), "%s", rq.tenant);
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

    (void)pos;
    switch (sse_read(hs->st, buf, max, &n)) {
    case SSE_DATA:
        return (ssize_t)n;
    case SSE_SUSPENDED:
        return 0;
    case SSE_END:
        return MHD_CONTENT_READER_END_OF_STREAM;
    case SSE_ABORT:
        break;
    }
    return MHD_CONTENT_READER_END_WITH_ERROR;
}

static void http_stream_free(void *cls)
{
    struct http_stream *hs = cls;

    sse_close(hs->st);
    free(hs);
}

/* The request's SSE parameters; a problem goes to err->fields. */
static enum status http_stream_params(struct req_ctx *rc, struct sse_request *q, struct error *err)
{
    const struct config *cfg = rc->h->hc->cfg;
    const char *lid = MHD_lookup_connection_value(rc->conn, MHD_HEADER_KIND, "Last-Event-ID");
    const char *field = "Last-Event-ID";

    *q = (struct sse_request){.tenant = cfg->tenant_default, .retry_ms = cfg->sse.retry_ms};
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
    return err->nfields ? ST_INVALID : ST_OK;
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

/* A completed run's stream resumed at or past its end: 204, no stream. */
static enum MHD_Result http_stream_finished(struct req_ctx *rc, struct http_stream *hs,
                                            const char *run_id)
{
    struct reply rp;
    enum MHD_Result ret;

    sse_close(hs->st);
    free(hs);
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
    if (st == ST_OK && !hc->hub)
        st = error_set(&err, ST_BUSY, "streams are not enabled");
    if (st == ST_OK)
        st = sse_open(hc->hub, hc->pool, &q,
                      &(struct hub_wake){http_stream_suspend, http_stream_resume, hs}, &hs->st,
                      &err);
    if (st == ST_OK && sse_finished(hs->st))
        return http_stream_finished(rc, hs, q.run_id);

    if (st == ST_OK)
        r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, http_stream_read, hs,
                                              http_stream_free);
    if (!r) {
        sse_close(hs->st);
        free(hs);
        if (st == ST_OK)
            return MHD_NO;
        return http_send_problem(rc, st, &err);
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
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

/* The last call: parse, run the handler, answer. */
static enum MHD_Result http_dispatch(struct req_ctx *rc)
{
    const struct hctx *hc = rc->h->hc;
    struct request rq = http_request(rc);
    json_error_t jerr;
    struct reply rp;
    enum MHD_Result ret;

    if (rc->too_large)
        return http_send_error(rc, ST_TOO_LARGE, "request body exceeds %lld bytes",
                               (long long)hc->cfg->http.max_body_bytes);
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
    if (rp.http_status == 0)
        reply_error(&rp, ST_INTERNAL, NULL);
    if (rp.wait_ms > 0 && rp.refresh && hc->hub)
        return http_wait_begin(rc, &rp);
    ret = http_send(rc, &rp);
    reply_cleanup(&rp);
    return ret;
}

static enum MHD_Result http_access(void *cls, struct MHD_Connection *c, const char *url,
                                   const char *method, const char *version, const char *upload_data,
                                   size_t *upload_size, void **con_cls)
{
    struct req_ctx *rc = *con_cls;

    (void)version;
    if (!rc) {
        rc = xcalloc(1, sizeof(*rc));
        rc->h = cls;
        rc->conn = c;
        rc->method = method;
        rc->url = url;
        rc->t0 = clock_mono_ms();
        dynbuf_init(&rc->body, (size_t)rc->h->hc->cfg->http.max_body_bytes);
        rc->rr = route_find(method, url, &rc->m);
        *con_cls = rc;
        return http_begin(rc);
    }
    if (*upload_size > 0)
        return http_body(rc, upload_data, upload_size);
    if (rc->responded)
        return MHD_YES;
    if (rc->wait)
        return http_wait_finish(rc, true); /* resumed: the run completed or the wait ended */
    return http_dispatch(rc);
}

static void http_done(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode toe)
{
    struct req_ctx *rc = *con_cls;

    (void)cls;
    (void)c;
    if (!rc)
        return;
    LOG(LOG_INFO, "request method=%s path=%s status=%u duration_ms=%lld%s%s%s", rc->method, rc->url,
        rc->http_status, (long long)(clock_mono_ms() - rc->t0), rc->run_id[0] ? " run=" : "",
        rc->run_id, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " aborted=true");
    if (rc->wait) {
        hub_wait_remove(rc->h->hc->hub, &rc->wait->w);
        hub_wait_release(rc->h->hc->hub, &rc->wait->w);
        reply_cleanup(&rc->wait->rp);
        free(rc->wait);
    }
    dynbuf_free(&rc->body);
    free(rc);
    *con_cls = NULL;
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

enum status http_start(const struct hctx *hc, struct http **out, struct error *err)
{
    struct http *h = xcalloc(1, sizeof(*h));
    struct sockaddr_storage addr;
    const union MHD_DaemonInfo *info;
    unsigned port = 0;
    unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    enum status st = http_resolve(hc->cfg->listen, &addr, &port, err);

    *out = NULL;
    if (st != ST_OK) {
        free(h);
        return st;
    }
    if (addr.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    h->hc = hc;
    h->d = MHD_start_daemon(
        flags, (uint16_t)port, NULL, NULL, &http_access, h, MHD_OPTION_EXTERNAL_LOGGER, http_log,
        NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr, MHD_OPTION_THREAD_POOL_SIZE,
        (unsigned int)hc->cfg->http.threads, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned int)hc->cfg->http.connection_limit, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned int)hc->cfg->http.connection_timeout_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        (size_t)(32 * 1024), MHD_OPTION_NOTIFY_COMPLETED, &http_done, h, MHD_OPTION_END);
    if (!h->d) {
        free(h);
        return error_set(err, ST_UNAVAILABLE, "could not listen on %s", hc->cfg->listen);
    }
    info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    h->port = info ? info->port : port;
    *out = h;
    return ST_OK;
}

unsigned http_port(const struct http *h)
{
    return h->port;
}

void http_stop(struct http *h)
{
    if (!h)
        return;
    MHD_stop_daemon(h->d);
    free(h);
}
