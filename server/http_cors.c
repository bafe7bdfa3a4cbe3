/* server/http_cors.c — see http_cors.h. */
#include "server/http_cors.h"

#include <microhttpd.h>
#include <string.h>

/* How long a browser may reuse a preflight's answer: 10 minutes (Chromium
 * caps any value at 2 hours); a changed http.cors_origins reaches pages
 * within that. */
#define CORS_MAX_AGE_S "600"

const char *http_cors_origin(const struct config *cfg, struct MHD_Connection *c)
{
    const char *origin;

    if (cfg->http.ncors_origins == 0)
        return NULL;
    origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    return cfg_cors_allowed(cfg, origin) ? origin : NULL;
}

bool http_cors_is_preflight(struct MHD_Connection *c, const char *method)
{
    return strcmp(method, "OPTIONS") == 0 &&
           MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Method");
}

/* Location (a new run's address) and Retry-After (limits, 503s) are what
 * a page needs to read beyond the CORS-safelisted headers. */
#define CORS_EXPOSE "Location, Retry-After, X-Request-Id"

void http_cors_headers(struct MHD_Response *r, const char *origin)
{
    if (!origin)
        return;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", origin);
    MHD_add_response_header(r, "Vary", "Origin");
    MHD_add_response_header(r, "Access-Control-Expose-Headers", CORS_EXPOSE);
}

void http_cors_lines(const char *origin, char *buf, size_t cap)
{
    xsnprintf(buf, cap,
              "Access-Control-Allow-Origin: %s\r\nVary: Origin\r\n"
              "Access-Control-Expose-Headers: " CORS_EXPOSE "\r\n",
              origin);
}

void http_cors_preflight(struct reply *rp, const char *allow)
{
    rp->http_status = 204;
    reply_header(rp, "Access-Control-Allow-Methods", allow);
    reply_header(rp, "Access-Control-Allow-Headers", "Authorization, Content-Type, Last-Event-ID");
    reply_header(rp, "Access-Control-Max-Age", CORS_MAX_AGE_S);
}
