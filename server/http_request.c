/* server/http_request.c — a request from its first call to its answer
 * (http_internal.h). Per request, one req_ctx holds the route, the capped
 * body and the reply; it is freed when the request completes, which also
 * writes the access-log line.
 *
 * The per-client limits (common/limits.h) are applied here: connections per
 * address at a connection's requests, and submissions per caller before
 * their body is parsed (event streams per tenant: http_stream.c). Every
 * refusal is a problem+json with Retry-After.
 *
 * Every request has an id (its X-Request-Id when valid, else its
 * traceparent's trace id, else a new one), answered in X-Request-Id and set
 * as the thread's log request id (common/log.h) around each callback that
 * works for it (http_mhd.c), so every line it causes carries request_id=. */
#include "server/http_internal.h"

#include "common/limits.h"
#include "config/live.h"
#include "common/metrics.h"
#include "server/http_conn.h"
#include "server/http_cors.h"
#include "server/http_headers.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* A body past the cap (chunked, or announced by Content-Length) is read
 * and dropped up to this many times the cap so the client gets its 413;
 * past that the connection is closed. */
#define DISCARD_FACTOR 4

struct req_ctx *http_request_new(struct http *h, struct MHD_Connection *c, struct http_conn *cn,
                                 const char *method, const char *url)
{
    struct req_ctx *rc = xcalloc(1, sizeof(*rc));

    rc->h = h;
    rc->hc = *h->hc;
    if (h->hc->live)
        rc->hc.cfg = cfg_live_hold(h->hc->live);
    rc->conn = c;
    rc->cn = cn;
    rc->method = method;
    rc->url = url;
    rc->t0 = clock_mono_ms();
    rc->t0_us = clock_mono_us();
    dynbuf_init(&rc->body, (size_t)rc->hc.cfg->http.max_body_bytes);
    rc->rr = route_find(method, url, &rc->m);
    rc->cors_origin = http_cors_origin(rc->hc.cfg, http_header(rc, "Origin"));
    if (rc->cn && rc->cors_origin)
        http_conn_set_origin(h->conns, rc->cn, rc->cors_origin);
    log_request_id_pick(http_header(rc, REQUEST_ID_HEADER), http_header(rc, "traceparent"),
                        rc->request_id);
    return rc;
}

/* ---- error answers --------------------------------------------------------- */

static bool request_error(struct req_ctx *rc, enum status st, const char *fmt, ...)
    PRINTF_LIKE(3, 4);

static bool request_error(struct req_ctx *rc, enum status st, const char *fmt, ...)
{
    struct error err = {0};
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(err.message, sizeof(err.message), fmt, ap);
    va_end(ap);
    utf8_scrub(err.message); /* jansson's parse errors can cut a character */
    return http_request_problem(rc, st, &err);
}

/* A connection opened over its address's limit answers its first request
 * 429 and closes. */
static bool request_over_limit(struct req_ctx *rc)
{
    struct limits *lim = rc->hc.limits;
    struct error err = {0};

    limits_note(lim, LIMITS_CONN_ANSWERED);
    error_set(&err, ST_LIMITED,
              "too many connections from %s (limit %d); reuse or close the others",
              http_conn_addr(rc->cn), rc->hc.cfg->http.max_connections_per_ip);
    return http_request_limited(rc, &err, 1, true);
}

/* ---- the first call ---------------------------------------------------------- */

/* Who the request is, decided before anything else about it (even
 * whether its path exists) is told; a failure is answered here. */
static bool request_auth(struct req_ctx *rc, bool *ok)
{
    const bool found = rc->rr == ROUTE_FOUND;
    const struct auth_request ar = {
        .need = found ? rc->m.entry->need : NEED_TOKEN,
        .authorization = http_header(rc, "Authorization"),
        .access_token = http_arg(rc, "access_token"),
        .stream = found && rc->m.entry->stream,
        .tenant = http_arg(rc, "tenant"),
    };
    struct error err = {0};
    struct reply rp;
    bool ret;
    enum status st = auth_decide(rc->hc.cfg, &ar, &rc->who, &err);

    *ok = st == ST_OK;
    if (*ok)
        return true;
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
static bool request_preflight(struct req_ctx *rc)
{
    struct reply rp;
    bool ret;

    reply_init(&rp);
    http_cors_preflight(&rp, rc->m.allow);
    ret = http_send(rc, &rp);
    reply_cleanup(&rp);
    return ret;
}

/* Route the request and check its headers early. */
static bool request_check(struct req_ctx *rc)
{
    const struct config *cfg = rc->hc.cfg;
    const char *len, *ct;
    bool ok;
    bool ret = request_auth(rc, &ok);

    if (!ok)
        return ret;
    if (rc->rr == ROUTE_NOT_FOUND)
        return request_error(rc, ST_NOT_FOUND, "no resource at \"%.200s\"", rc->url);
    if (rc->rr == ROUTE_METHOD)
        return request_error(rc, ST_METHOD, "method %.16s is not allowed on \"%.200s\"", rc->method,
                             rc->url);
    if (!rc->m.entry->json_body)
        return true;
    len = http_header(rc, "Content-Length");
    if (rc->m.entry->json_body == BODY_JSON_OPTIONAL &&
        (len ? strcmp(len, "0") == 0 : !http_header(rc, "Transfer-Encoding")))
        return true; /* no body */
    if (len && strtoull(len, NULL, 10) > (unsigned long long)cfg->http.max_body_bytes) {
        /* Answered before the body arrives, the 413 is followed by a close
         * with the body unread, and the client's reset can beat the answer
         * to it. A body up to DISCARD_FACTOR times the cap is read and
         * dropped instead, and answered 413 at its end; a larger one is
         * answered now. */
        if (strtoull(len, NULL, 10) / DISCARD_FACTOR > (unsigned long long)cfg->http.max_body_bytes)
            return request_error(rc, ST_TOO_LARGE, "request body exceeds %lld bytes",
                                 (long long)cfg->http.max_body_bytes);
        rc->too_large = true;
        return true;
    }
    ct = http_header(rc, "Content-Type");
    if (!http_content_type_json(ct))
        return request_error(rc, ST_UNSUPPORTED,
                             "content type must be application/json, not \"%.100s\"",
                             ct ? ct : "(none)");
    return true;
}

bool http_request_begin(struct req_ctx *rc)
{
    if (rc->cn && http_conn_over_limit(rc->cn))
        return request_over_limit(rc);
    if (rc->cors_origin && rc->rr == ROUTE_METHOD &&
        http_cors_is_preflight(rc->method, http_header(rc, "Access-Control-Request-Method")))
        return request_preflight(rc);
    return request_check(rc);
}

/* ---- the body and the handler ------------------------------------------------ */

static bool request_body(struct req_ctx *rc, const char *data, size_t *size)
{
    size_t cap = (size_t)rc->hc.cfg->http.max_body_bytes;
    size_t n = *size;

    *size = 0;
    rc->seen += n;
    if (rc->responded || !rc->m.entry || !rc->m.entry->json_body)
        return true; /* not wanted: dropped */
    if (rc->too_large || dynbuf_add(&rc->body, data, n) != ST_OK) {
        rc->too_large = true;
        dynbuf_free(&rc->body);
        return rc->seen <= cap * DISCARD_FACTOR;
    }
    return true;
}

/* Who a submission is counted against: its token, or without one the
 * client's address. */
static void request_caller(const struct req_ctx *rc, char *buf, size_t cap)
{
    if (rc->who.token)
        xsnprintf(buf, cap, "token:%s", rc->who.token->name);
    else
        xsnprintf(buf, cap, "addr:%s", rc->cn ? http_conn_addr(rc->cn) : "unknown");
}

/* Submissions (POST /alerts, generic or Alertmanager) and retries, which
 * also create runs, take a token of their caller's bucket before their body
 * is parsed. */
static enum status request_submit_limit(struct req_ctx *rc, int *retry_after_s, struct error *err)
{
    char caller[160];

    if (!rc->hc.limits ||
        (rc->m.entry->fn != handle_alerts_create && rc->m.entry->fn != handle_runs_retry))
        return ST_OK;
    request_caller(rc, caller, sizeof(caller));
    return limits_submit(rc->hc.limits, caller, retry_after_s, err);
}

/* The last call: parse, run the handler, answer. */
static bool request_dispatch(struct req_ctx *rc)
{
    const struct hctx *hc = &rc->hc;
    struct request rq = http_request_of(rc);
    struct error err = {0};
    int retry_after_s = 0;
    json_error_t jerr;
    struct reply rp;

    if (rc->too_large)
        return request_error(rc, ST_TOO_LARGE, "request body exceeds %lld bytes",
                             (long long)hc->cfg->http.max_body_bytes);
    if (request_submit_limit(rc, &retry_after_s, &err) != ST_OK)
        return http_request_limited(rc, &err, retry_after_s, false);
    if (rc->m.entry->json_body &&
        !(rc->m.entry->json_body == BODY_JSON_OPTIONAL && dynbuf_len(&rc->body) == 0)) {
        if (dynbuf_len(&rc->body) == 0)
            return request_error(rc, ST_INVALID,
                                 "request body is empty; a JSON object is expected");
        rq.body =
            json_loadb(dynbuf_ptr(&rc->body), dynbuf_len(&rc->body), JSON_REJECT_DUPLICATES, &jerr);
        if (!rq.body)
            return request_error(rc, ST_INVALID,
                                 "could not parse the body as JSON: %s at line %d column %d",
                                 jerr.text, jerr.line, jerr.column);
    }
    if (rc->m.entry->stream)
        return http_stream_open(rc);
    reply_init(&rp);
    (void)rc->m.entry->fn(hc, &rq, &rp);
    json_decref(rq.body);
    if (rp.deferred)
        return http_park_defer(rc, &rp);
    return http_park_or_send(rc, &rp);
}

bool http_request_step(struct req_ctx *rc, const char *data, size_t *size)
{
    if (*size > 0)
        return request_body(rc, data, size);
    if (rc->responded)
        return true;
    if (rc->wait || rc->deferred)
        return http_park_resumed(rc);
    if (rc->cn && !http_conn_received(rc->h->conns, rc->cn))
        return false; /* answered 408 at its deadline already */
    return request_dispatch(rc);
}

void http_request_done(struct req_ctx *rc, bool completed)
{
    const struct hctx *hc = &rc->hc;

    LOG(LOG_INFO, "request method=%s path=%s status=%u duration_ms=%lld%s%s%s%s%s", rc->method,
        rc->url, rc->http_status, (long long)(clock_mono_ms() - rc->t0),
        rc->run_id[0] ? " run=" : "", rc->run_id, rc->who.token ? " token=" : "",
        rc->who.token ? rc->who.token->name : "", completed ? "" : " aborted=true");
    if (rc->http_status)
        metrics_http_request(hc->metrics, rc->m.entry ? rc->m.entry->pattern : NULL,
                             rc->http_status, (double)(clock_mono_us() - rc->t0_us) / 1e6);
    http_park_free(rc);
    if (rc->deferred_counted)
        atomic_fetch_sub(&rc->h->deferred, 1);
    dynbuf_free(&rc->body);
    if (rc->h->hc->live)
        cfg_live_release(rc->h->hc->live, rc->hc.cfg);
    free(rc);
}
