/* handlers/reply.c — replies, and every problem+json body: the status →
 * problem mapping and the one function that builds them. */
#include "handlers/handlers.h"

#include "common/log.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void reply_init(struct reply *rp)
{
    memset(rp, 0, sizeof(*rp));
}

void reply_cleanup(struct reply *rp)
{
    json_decref(rp->body);
    free(rp->text);
    rp->body = NULL;
    rp->text = NULL;
    if (rp->deferred)
        rp->deferred->free(rp->deferred, rp->deferred_hc);
    rp->deferred = NULL;
}

void reply_header(struct reply *rp, const char *name, const char *value)
{
    for (unsigned i = 0; i < rp->nheaders; i++) {
        if (strcasecmp(rp->headers[i].name, name) == 0) {
            xsnprintf(rp->headers[i].value, sizeof(rp->headers[0].value), "%s", value);
            return;
        }
    }
    if (rp->nheaders >= REPLY_HEADERS_MAX)
        return;
    xsnprintf(rp->headers[rp->nheaders].name, sizeof(rp->headers[0].name), "%s", name);
    xsnprintf(rp->headers[rp->nheaders].value, sizeof(rp->headers[0].value), "%s", value);
    rp->nheaders++;
}

const char *reply_header_get(const struct reply *rp, const char *name)
{
    for (unsigned i = 0; i < rp->nheaders; i++)
        if (strcasecmp(rp->headers[i].name, name) == 0)
            return rp->headers[i].value;
    return NULL;
}

void reply_json_take(struct reply *rp, unsigned http_status, json_t *body)
{
    json_decref(rp->body);
    rp->http_status = http_status;
    rp->body = body;
    rp->problem = false;
}

static const struct {
    enum status st;
    unsigned http;
    const char *title;
} problems[] = {
    {ST_INVALID, 400, "Bad Request"},
    {ST_UNAUTHORIZED, 401, "Unauthorized"},
    {ST_FORBIDDEN, 403, "Forbidden"},
    {ST_NOT_FOUND, 404, "Not Found"},
    {ST_METHOD, 405, "Method Not Allowed"},
    {ST_TIMEOUT, 408, "Request Timeout"},
    {ST_CONFLICT, 409, "Conflict"},
    {ST_TOO_LARGE, 413, "Content Too Large"},
    {ST_UNSUPPORTED, 415, "Unsupported Media Type"},
    {ST_UNPROCESSABLE, 422, "Unprocessable Content"},
    {ST_LIMITED, 429, "Too Many Requests"},
    {ST_UNAVAILABLE, 503, "Service Unavailable"},
    {ST_BUSY, 503, "Service Unavailable"},
};

unsigned status_http(enum status st)
{
    for (size_t i = 0; i < ARRAY_LEN(problems); i++)
        if (problems[i].st == st)
            return problems[i].http;
    return st == ST_OK ? 200 : 500;
}

static const char *status_title(enum status st)
{
    for (size_t i = 0; i < ARRAY_LEN(problems); i++)
        if (problems[i].st == st)
            return problems[i].title;
    return "Internal Server Error";
}

void reply_problem_take(struct reply *rp, enum status st, const char *detail, json_t *extra)
{
    unsigned http = status_http(st);
    json_t *body = json_pack("{s:s, s:s, s:i, s:s}", "type", "about:blank", "title",
                             status_title(st), "status", (int)http, "detail", detail);

    assert(http >= 400);
    if (extra)
        json_object_update_missing(body, extra);
    json_decref(extra);
    if (http == 503)
        reply_header(rp, "Retry-After", "1");
    if (http == 401) /* RFC 9110: a 401 names the scheme it wants */
        reply_header(rp, "WWW-Authenticate", AUTH_CHALLENGE);
    reply_json_take(rp, http, body);
    rp->problem = true;
}

json_t *reply_error_fields(const struct error *err)
{
    json_t *fields = json_array();

    for (unsigned i = 0; i < err->nfields; i++)
        json_array_append_new(fields, json_pack("{s:s, s:s}", "field", err->fields[i].field,
                                                "message", err->fields[i].message));
    return fields;
}

void reply_error(struct reply *rp, enum status st, const struct error *err)
{
    const char *title = status_title(st), *detail;
    unsigned http = status_http(st);
    bool told = err && err->message[0];
    const char *reason = http == 503 && st != ST_BUSY && err ? err->reason : NULL;
    char why[160];
    json_t *extra = NULL;

    /* Internal details (database errors, socket paths) stay in the log; a
     * state of the database a client may know of (read-only, full) is
     * named in the detail and as "reason". */
    if (http >= 500)
        LOG(LOG_WARN, "answering %u: %s", http, told ? err->message : title);
    if (http == 500) {
        detail = "internal error; see the server log";
    } else if (reason) {
        xsnprintf(why, sizeof(why), "temporarily unavailable: %s; retry later", reason);
        detail = why;
        extra = json_pack("{s:s}", "reason", reason);
    } else if (http == 503 && !(st == ST_BUSY && told)) {
        detail = "temporarily unavailable (database unreachable or busy); retry later";
    } else {
        detail = told ? err->message : title;
    }
    if (err && err->nfields > 0) {
        json_decref(extra);
        extra = json_pack("{s:o}", "errors", reply_error_fields(err));
    }
    reply_problem_take(rp, st, detail, extra);
}
