/* server/http_mhd.c — the libmicrohttpd glue, and the only file that includes
 * microhttpd.h (http_internal.h): the daemon and its options, its
 * callbacks, which hand each request and event stream to what http.c gave
 * it (struct http_calls: http_request.c's steps, http_stream.c's reads),
 * and the calls on a connection the other files of the front end make. It
 * calls nothing above it in the front end. Per connection, a
 * record of server/http_conn.h holds the client's address and the request
 * deadline; connections over their address's hard limit are refused at
 * accept.
 *
 * Three kinds of answer park their connection instead of holding a thread
 * (http_park.c, http_stream.c): an SSE stream suspends whenever it has
 * nothing to send, a long-poll until its run completes, a deferred reply
 * until its work is done. libmicrohttpd aborts when it is stopped with a
 * connection still suspended, so the caller ends them first. */
#include "server/http_internal.h"

#include "common/limits.h"
#include "server/http_conn.h"
#include "server/http_cors.h"
#include "server/http_headers.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

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

static enum MHD_Result mhd_result(bool go_on)
{
    return go_on ? MHD_YES : MHD_NO;
}

/* ---- calls on a connection (http_internal.h) ------------------------------ */

const char *http_header(const struct req_ctx *rc, const char *name)
{
    return MHD_lookup_connection_value(rc->conn, MHD_HEADER_KIND, name);
}

const char *http_arg(const struct req_ctx *rc, const char *key)
{
    return MHD_lookup_connection_value(rc->conn, MHD_GET_ARGUMENT_KIND, key);
}

const char *http_query(const struct request *rq, const char *key)
{
    return MHD_lookup_connection_value(rq->query_arg, MHD_GET_ARGUMENT_KIND, key);
}

void http_suspend(struct req_ctx *rc)
{
    MHD_suspend_connection(rc->conn);
}

void http_resume(struct req_ctx *rc)
{
    MHD_resume_connection(rc->conn);
}

/* What every answer carries: CORS for an allowed origin, the request id. */
static void http_common_headers(struct MHD_Response *r, const struct req_ctx *rc)
{
    struct http_cors_header cors[HTTP_CORS_HEADERS];

    if (rc->cors_origin) {
        http_cors_headers(rc->cors_origin, cors);
        for (size_t i = 0; i < HTTP_CORS_HEADERS; i++)
            MHD_add_response_header(r, cors[i].name, cors[i].value);
    }
    MHD_add_response_header(r, REQUEST_ID_HEADER, rc->request_id);
}

/* A 200 with an ETag that the request's If-None-Match names (weak
 * comparison, RFC 9110 13.1.2) becomes a 304 without a body. */
static void http_not_modified(const struct req_ctx *rc, struct reply *rp)
{
    const char *etag = reply_header_get(rp, "ETag");
    const char *inm;

    if (rp->http_status != 200 || !etag)
        return;
    inm = http_header(rc, MHD_HTTP_HEADER_IF_NONE_MATCH);
    if (!http_etag_matches(inm, etag))
        return;
    rp->http_status = MHD_HTTP_NOT_MODIFIED;
    free(rp->text);
    rp->text = NULL;
    json_decref(rp->body);
    rp->body = NULL;
}

bool http_send(struct req_ctx *rc, struct reply *rp)
{
    char *text = NULL;
    const char *type = "application/json";
    struct MHD_Response *r;
    enum MHD_Result ret;

    if (rc->cn && !http_conn_received(rc->h->conns, rc->cn))
        return false; /* answered 408 at its deadline already */
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
        return false;
    }
    if (text)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (!reply_header_get(rp, MHD_HTTP_HEADER_CACHE_CONTROL))
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    http_common_headers(r, rc);
    for (unsigned i = 0; i < rp->nheaders; i++)
        MHD_add_response_header(r, rp->headers[i].name, rp->headers[i].value);
    ret = MHD_queue_response(rc->conn, rp->http_status, r);
    MHD_destroy_response(r);
    rc->responded = true;
    rc->http_status = rp->http_status;
    if (rp->run_id[0])
        xsnprintf(rc->run_id, sizeof(rc->run_id), "%s", rp->run_id);
    return ret == MHD_YES;
}

/* ---- the request as handlers see it, and the answers any step may give ---- */

struct request http_request_of(const struct req_ctx *rc)
{
    return (struct request){
        .method = rc->method,
        .path = rc->url,
        .path_id = rc->m.id[0] ? rc->m.id : NULL,
        .tenant = rc->who.tenant,
        .all_tenants = rc->who.all_tenants,
        .initiator = rc->who.name,
        .accept = http_header(rc, "Accept"),
        .query = http_query,
        .query_arg = rc->conn,
    };
}

bool http_request_problem(struct req_ctx *rc, enum status st, const struct error *err)
{
    struct reply rp;
    bool ret;

    reply_init(&rp);
    reply_error(&rp, st, err);
    if (st == ST_METHOD)
        reply_header(&rp, "Allow", rc->m.allow);
    ret = http_send(rc, &rp);
    reply_cleanup(&rp);
    return ret;
}

bool http_request_limited(struct req_ctx *rc, const struct error *err, int retry_after_s,
                          bool close)
{
    struct reply rp;
    char secs[16];
    bool ret;

    xsnprintf(secs, sizeof(secs), "%d", retry_after_s > 0 ? retry_after_s : 1);
    reply_init(&rp);
    reply_error(&rp, ST_LIMITED, err);
    reply_header(&rp, "Retry-After", secs);
    if (close)
        reply_header(&rp, "Connection", "close");
    ret = http_send(rc, &rp);
    reply_cleanup(&rp);
    return ret;
}

/* ---- event streams ---------------------------------------------------------- */

/* Runs with the hub lock held, on the connection's thread. A peer that
 * closed is noticed here: MHD does not read a suspended connection, and the
 * first write to a closed peer still succeeds, so without this peek a gone
 * client would hold its connection until a second write (measured:
 * docs/streams.md, "Noticing a client that left"). */
bool http_suspend_stream(void *arg)
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

void http_resume_stream(void *arg)
{
    struct http_stream *hs = arg;

    MHD_resume_connection(hs->conn);
}

static ssize_t http_stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct http_stream *hs = cls;
    size_t n = 0;

    (void)pos;
    switch (hs->calls->stream_read(hs, buf, max, &n)) {
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

/* A chunked answer's reader writes straight into the connection's own
 * buffer; the response's block (allocated and touched per stream) is used
 * only for an HTTP/1.0 client, so it is kept small. */
bool http_respond_stream(struct req_ctx *rc, struct http_stream *hs)
{
    const struct http_calls *calls = rc->h->calls;
    struct MHD_Response *r;
    enum MHD_Result ret;

    hs->calls = calls;
    r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 1024, http_stream_reader, hs,
                                          calls->stream_free);
    if (!r) {
        calls->stream_free(hs);
        return false;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    http_common_headers(r, rc);
    http_stream_socket(rc->conn, rc->hc.cfg);
    ret = MHD_queue_response(rc->conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    rc->responded = true;
    rc->http_status = MHD_HTTP_OK;
    return ret == MHD_YES;
}

/* ---- the daemon's callbacks --------------------------------------------------- */

/* The connection's record, made when it was accepted (http_notify). */
static struct http_conn *http_conn_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

    return ci ? ci->socket_context : NULL;
}

/* Every call for a request runs with its id set for the log. */
static enum MHD_Result http_access(void *cls, struct MHD_Connection *c, const char *url,
                                   const char *method, const char *version, const char *upload_data,
                                   size_t *upload_size, void **con_cls)
{
    struct http *h = cls;
    struct req_ctx *rc = *con_cls;
    bool go_on;

    (void)version;
    if (!rc) {
        rc = h->calls->request_new(h, c, http_conn_of(c), method, url);
        *con_cls = rc;
        log_request_id_set(rc->request_id);
        go_on = h->calls->request_begin(rc);
    } else {
        log_request_id_set(rc->request_id);
        go_on = h->calls->request_step(rc, upload_data, upload_size);
    }
    log_request_id_set(NULL);
    return mhd_result(go_on);
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
    h->calls->request_done(rc, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK);
    *con_cls = NULL;
    log_request_id_set(NULL);
}

/* Before libmicrohttpd takes a connection: one from an address that has
 * LIMITS_ADDR_HARD_FACTOR times its limit open is closed without an answer
 * (one below that is answered 429 instead, http_request.c). */
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

/* ---- the daemon ----------------------------------------------------------------- */

/* libmicrohttpd's options; every value is cast to the type it reads. The
 * socket is bound already (http_bind): the daemon takes it over.
 *
 * A connection's memory pool holds its request headers and its write
 * buffer, and all of it is touched: it is most of what an idle stream costs
 * (measured: 32 KiB gave 31.6 KiB per stream). 14 KiB keeps a stream near
 * 14 KiB and still takes request headers of about 13 KB (more gets 431);
 * bodies and large answers do not live in it. */
#define HTTP_CONN_POOL (14 * 1024)
struct MHD_Daemon *http_mhd_start(struct http *h)
{
    const struct config *cfg = h->hc->cfg;
    const unsigned flags =
        MHD_USE_AUTO_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;

    return MHD_start_daemon(
        flags, 0, &http_admit, h, &http_access, h, MHD_OPTION_EXTERNAL_LOGGER, http_log, NULL,
        MHD_OPTION_LISTEN_SOCKET, h->fd, MHD_OPTION_THREAD_POOL_SIZE,
        (unsigned int)cfg->http.threads, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned int)cfg->http.connection_limit, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned int)cfg->http.connection_timeout_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        (size_t)HTTP_CONN_POOL, MHD_OPTION_NOTIFY_COMPLETED, &http_done, h,
        MHD_OPTION_NOTIFY_CONNECTION, &http_notify, h, MHD_OPTION_END);
}

void http_mhd_stop(struct http *h)
{
    MHD_stop_daemon(h->d);
}
