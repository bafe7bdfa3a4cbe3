/* server/http_stream.c — opening an event stream (http_internal.h): its
 * parameters (Last-Event-ID, the filters of GET /stream, the tenant of a
 * run), its tenant's stream limit (common/limits.h), and the stream of
 * live/sse.h, or of live/log_stream.h for a run's log. The stream then suspends its connection
 * whenever it has nothing to send, and the hub resumes it (live/hub.h); no thread waits for it. */
#include "server/http_internal.h"

#include "common/limits.h"
#include "config/live.h"
#include "live/log_stream.h"

#include <stdlib.h>
#include <string.h>

/* A reload may remove the stream's token, or change what it may read, or
 * give tokens to a server that had none: at each new configuration the
 * stream asks again, and ends when the request that opened it would now be
 * refused (one without a token, as soon as there are tokens). A reload
 * wakes every stream (hub_wake_all), so that happens at once, not at the
 * next event. */
static bool stream_allowed(struct http_stream *hs)
{
    const struct config *cfg;
    uint64_t gen;

    if (hs->revoked)
        return false;
    if (!hs->live)
        return true;
    gen = cfg_live_generation(hs->live);
    if (gen == hs->gen)
        return true;
    cfg = cfg_live_hold(hs->live);
    hs->revoked = hs->has_grant ? !auth_grant_holds(cfg, &hs->grant) : cfg->auth.ntokens > 0;
    cfg_live_release(hs->live, cfg);
    hs->gen = gen;
    if (hs->revoked && hs->has_grant)
        LOG(LOG_INFO,
            "ending a stream of token \"%s\": the reloaded configuration no longer lets it "
            "read this stream",
            hs->grant.name);
    else if (hs->revoked)
        LOG(LOG_INFO, "ending a stream opened without a token: the reloaded configuration has "
                      "auth.tokens");
    return !hs->revoked;
}

/* A read of 0 bytes is a wake-up (hub_wake_all): ask again, read again. */
enum sse_read http_stream_read(struct http_stream *hs, char *buf, size_t max, size_t *n)
{
    enum sse_read r;

    *n = 0;
    log_request_id_set(hs->request_id);
    do
        r = !stream_allowed(hs) ? SSE_END
            : hs->log           ? log_stream_read(hs->log, buf, max, n)
                                : sse_read(hs->st, buf, max, n);
    while (r == SSE_DATA && *n == 0 && max > 0);
    log_request_id_set(NULL);
    return r;
}

/* Runs inside the request's callbacks too (a refused or finished stream),
 * whose lines after it keep their id. */
void http_stream_free(void *arg)
{
    struct http_stream *hs = arg;
    char prev[LOG_REQUEST_ID_MAX + 1];

    xsnprintf(prev, sizeof(prev), "%s", log_request_id() ? log_request_id() : "");
    log_request_id_set(hs->request_id);
    sse_close(hs->st);
    log_stream_close(hs->log);
    if (hs->lim)
        limits_stream_close(hs->lim, hs->tenant);
    free(hs);
    log_request_id_set(prev[0] ? prev : NULL);
}

/* The request's SSE parameters; a problem goes to err->fields. */
static enum status stream_params(struct req_ctx *rc, struct sse_request *q, struct error *err)
{
    const struct config *cfg = rc->hc.cfg;
    const char *lid = http_header(rc, "Last-Event-ID");
    const char *field = "Last-Event-ID";
    struct request rq = http_request_of(rc);

    /* NULL: every tenant (an admin's GET /stream) */
    *q = (struct sse_request){.tenant = rc->who.all_tenants ? NULL : rc->who.tenant,
                              .retry_ms = cfg->sse.retry_ms};
    if (rc->m.id[0])
        q->run_id = rc->m.id;
    if (!lid || !*lid)
        lid = http_arg(rc, "last_event_id"), field = "last_event_id";
    if (lid && *lid) {
        q->has_last_id = true;
        if (!sse_parse_last_id(lid, &q->last_id))
            error_field(err, ST_INVALID, field, "must be an event id (a decimal integer)");
    }
    if (!q->run_id && stream_parse_filter(&rq, &q->run_type, &q->parent_id, &q->has_status,
                                          &q->status, err) != ST_OK)
        return ST_INVALID; /* err has every field, Last-Event-ID's too */
    if (err->nfields)
        return ST_INVALID;
    if (q->run_id && !q->tenant) { /* the one tenant that has this run */
        enum status st = handle_runs_locate(&rc->hc, &rq, q->run_id, rc->stream_tenant, err);
        if (st != ST_OK)
            return st;
        q->tenant = rc->stream_tenant;
    }
    return ST_OK;
}

/* Counts the stream against its tenant's limit; the count is given back
 * in http_stream_free. */
static enum status stream_limit(struct req_ctx *rc, struct http_stream *hs, const char *tenant,
                                struct error *err)
{
    struct limits *lim = rc->hc.limits;
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
static int stream_retry_after(const struct config *cfg)
{
    return cfg->sse.retry_ms > 1000 ? (cfg->sse.retry_ms + 999) / 1000 : 1;
}

/* A completed run's stream resumed at or past its end: 204, no stream. */
static bool stream_finished(struct req_ctx *rc, struct http_stream *hs, const char *run_id)
{
    struct reply rp;
    bool ret;

    http_stream_free(hs); /* the stream's count against its tenant too */
    reply_init(&rp);
    rp.http_status = 204;
    xsnprintf(rp.run_id, sizeof(rp.run_id), "%s", run_id);
    ret = http_send(rc, &rp);
    reply_cleanup(&rp);
    return ret;
}

/* GET /runs/{id}/logs/stream: Last-Event-ID is the last line's seq the
 * client has. */
static enum status log_stream_start(struct req_ctx *rc, const struct sse_request *q,
                                    struct http_stream *hs, struct error *err)
{
    const struct log_stream_request lq = {
        .tenant = q->tenant,
        .run_id = q->run_id,
        .after = q->has_last_id ? q->last_id : 0,
        .resumed = q->has_last_id,
        .retry_ms = q->retry_ms,
        .max_line_bytes = rc->hc.cfg->logs.max_line_bytes,
    };

    return log_stream_open(rc->hc.hub, rc->hc.pool, &lq,
                           &(struct hub_wake){http_suspend_stream, http_resume_stream, hs},
                           &hs->log, err);
}

static bool is_log_stream(const struct req_ctx *rc)
{
    return strcmp(rc->m.entry->pattern, "/runs/{id}/logs/stream") == 0;
}

bool http_stream_open(struct req_ctx *rc)
{
    const struct hctx *hc = &rc->hc;
    struct http_stream *hs = xcalloc(1, sizeof(*hs));
    struct error err = {0};
    struct sse_request q;
    enum status st = stream_params(rc, &q, &err);

    hs->conn = rc->conn;
    xsnprintf(hs->request_id, sizeof(hs->request_id), "%s", rc->request_id);
    /* gen 0 comes before every generation: the first read asks, which
     * covers a reload between the request's start and now */
    hs->live = hc->live;
    hs->has_grant = auth_grant_of(&rc->who, &hs->grant);
    if (st == ST_OK && !hc->hub)
        st = error_set(&err, ST_BUSY, "streams are not enabled");
    if (st == ST_OK)
        /* the run's tenant (an admin's stream of one run is found in it);
         * an admin's all-tenant GET /stream counts against its own */
        st = stream_limit(rc, hs, q.tenant ? q.tenant : rc->who.tenant, &err);
    if (st == ST_OK && is_log_stream(rc))
        st = log_stream_start(rc, &q, hs, &err);
    else if (st == ST_OK)
        st = sse_open(hc->hub, hc->pool, &q,
                      &(struct hub_wake){http_suspend_stream, http_resume_stream, hs}, &hs->st,
                      &err);
    if (st == ST_OK && (hs->log ? log_stream_finished(hs->log) : sse_finished(hs->st)))
        return stream_finished(rc, hs, q.run_id);
    if (st != ST_OK) {
        http_stream_free(hs);
        if (st == ST_LIMITED)
            return http_request_limited(rc, &err, stream_retry_after(hc->cfg), false);
        return http_request_problem(rc, st, &err);
    }
    if (q.run_id)
        xsnprintf(rc->run_id, sizeof(rc->run_id), "%s", q.run_id);
    return http_respond_stream(rc, hs);
}
