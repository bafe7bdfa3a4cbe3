/* server/http_cors.c — see http_cors.h. */
#include "server/http_cors.h"

#include <string.h>

/* How long a browser may reuse a preflight's answer: 10 minutes (Chromium
 * caps any value at 2 hours); a changed http.cors_origins reaches pages
 * within that. */
#define CORS_MAX_AGE_S "600"

const char *http_cors_origin(const struct config *cfg, const char *origin)
{
    if (cfg->http.ncors_origins == 0)
        return NULL;
    return cfg_cors_allowed(cfg, origin) ? origin : NULL;
}

bool http_cors_is_preflight(const char *method, const char *request_method)
{
    return strcmp(method, "OPTIONS") == 0 && request_method;
}

/* Location (a new run's address) and Retry-After (limits, 503s) are what
 * a page needs to read beyond the CORS-safelisted headers. */
#define CORS_EXPOSE "Location, Retry-After, X-Request-Id"

void http_cors_headers(const char *origin, struct http_cors_header out[HTTP_CORS_HEADERS])
{
    out[0] = (struct http_cors_header){"Access-Control-Allow-Origin", origin};
    out[1] = (struct http_cors_header){"Vary", "Origin"};
    out[2] = (struct http_cors_header){"Access-Control-Expose-Headers", CORS_EXPOSE};
}

void http_cors_lines(const char *origin, char *buf, size_t cap)
{
    struct http_cors_header h[HTTP_CORS_HEADERS];
    size_t len = 0;

    http_cors_headers(origin, h);
    buf[0] = '\0';
    for (size_t i = 0; i < HTTP_CORS_HEADERS && len < cap; i++)
        len += xsnprintf(buf + len, cap - len, "%s: %s\r\n", h[i].name, h[i].value);
}

void http_cors_preflight(struct reply *rp, const char *allow)
{
    rp->http_status = 204;
    reply_header(rp, "Access-Control-Allow-Methods", allow);
    reply_header(rp, "Access-Control-Allow-Headers", "Authorization, Content-Type, Last-Event-ID");
    reply_header(rp, "Access-Control-Max-Age", CORS_MAX_AGE_S);
}
