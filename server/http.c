/* server/http.c — libmicrohttpd glue. Per request, one req_ctx holds the
 * route, the capped body and the reply; it is freed in the completion
 * callback, which also writes the access-log line. */
#include "server/http.h"

#include "common/log.h"
#include "server/route.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* A chunked body past the cap is read and dropped up to this many times the
 * cap so the client gets its 413; past that the connection is closed. */
#define DISCARD_FACTOR 4

struct http {
    struct MHD_Daemon *d;
    const struct hctx *hc;
    unsigned port;
};

struct req_ctx {
    struct http *h;
    struct MHD_Connection *conn;
    const char *method, *url;
    int64_t t0;
    enum route_result rr;
    struct route_hit m;
    char *body;
    size_t len, seen;
    bool too_large, responded;
    unsigned http_status;
    char run_id[130];
};

static void http_log(void *cls, const char *fmt, va_list ap) PRINTF_LIKE(2, 0);

static void http_log(void *cls, const char *fmt, va_list ap)
{
    char msg[512];
    (void)cls;
    vsnprintf(msg, sizeof(msg), fmt, ap);
    LOG(LOG_WARN, "libmicrohttpd: %s", msg);
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
    if (rc->too_large || rc->len + n > cap) {
        rc->too_large = true;
        free(rc->body);
        rc->body = NULL;
        return rc->seen > cap * DISCARD_FACTOR ? MHD_NO : MHD_YES;
    }
    rc->body = xrealloc(rc->body, rc->len + n + 1);
    memcpy(rc->body + rc->len, data, n);
    rc->len += n;
    rc->body[rc->len] = '\0';
    return MHD_YES;
}

static const char *http_query(const struct request *rq, const char *key)
{
    return MHD_lookup_connection_value(rq->query_arg, MHD_GET_ARGUMENT_KIND, key);
}

/* The last call: parse, run the handler, answer. */
static enum MHD_Result http_dispatch(struct req_ctx *rc)
{
    const struct hctx *hc = rc->h->hc;
    struct request rq = {
        .method = rc->method,
        .path = rc->url,
        .path_id = rc->m.id[0] ? rc->m.id : NULL,
        .tenant = hc->cfg->tenant_default,
        .query = http_query,
        .query_arg = rc->conn,
    };
    json_error_t jerr;
    struct reply rp;
    enum MHD_Result ret;

    if (rc->too_large)
        return http_send_error(rc, ST_TOO_LARGE, "request body exceeds %lld bytes",
                               (long long)hc->cfg->http.max_body_bytes);
    if (rc->m.entry->json_body) {
        if (!rc->body)
            return http_send_error(rc, ST_INVALID,
                                   "request body is empty; a JSON object is "
                                   "expected");
        rq.body = json_loadb(rc->body, rc->len, JSON_REJECT_DUPLICATES, &jerr);
        if (!rq.body)
            return http_send_error(rc, ST_INVALID,
                                   "could not parse the body as JSON: %s at "
                                   "line %d column %d",
                                   jerr.text, jerr.line, jerr.column);
    }
    reply_init(&rp);
    (void)rc->m.entry->fn(hc, &rq, &rp);
    if (rp.http_status == 0)
        reply_error(&rp, ST_INTERNAL, NULL);
    ret = http_send(rc, &rp);
    reply_cleanup(&rp);
    json_decref(rq.body);
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
        rc->rr = route_find(method, url, &rc->m);
        *con_cls = rc;
        return http_begin(rc);
    }
    if (*upload_size > 0)
        return http_body(rc, upload_data, upload_size);
    if (rc->responded)
        return MHD_YES;
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
    free(rc->body);
    free(rc);
    *con_cls = NULL;
}

/* Resolves "host:port" / "[v6]:port" into addr. */
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
