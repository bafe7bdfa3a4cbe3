/* server/http_cors.h — CORS for pages of another origin (docs/api.md,
 * "Browsers: CORS"): which requests come from an allowed origin, the
 * headers every answer to them carries, and the preflight's own. Stateless
 * and thread-safe; the allowed origins are http.cors_origins. */
#ifndef OPSRUN_SERVER_HTTP_CORS_H
#define OPSRUN_SERVER_HTTP_CORS_H

#include "config/config.h"
#include "handlers/handlers.h"

/* The request's Origin (origin: the header's value, NULL when absent) when
 * http.cors_origins allows it, else NULL. Borrowed: lives as long as
 * origin. */
const char *http_cors_origin(const struct config *cfg, const char *origin);
/* Whether the request is a preflight: OPTIONS with
 * Access-Control-Request-Method (request_method: that header's value, NULL
 * when absent). */
bool http_cors_is_preflight(const char *method, const char *request_method);
/* What every answer to an allowed origin carries: HTTP_CORS_HEADERS
 * name/value pairs into out (the values borrow origin). */
#define HTTP_CORS_HEADERS 3
struct http_cors_header {
    const char *name, *value;
};
void http_cors_headers(const char *origin, struct http_cors_header out[HTTP_CORS_HEADERS]);
/* The same headers as raw "Name: value\r\n" lines into buf (cap bytes),
 * for an answer written to the socket directly (the 408). */
void http_cors_lines(const char *origin, char *buf, size_t cap);
/* A preflight's answer: 204 with the methods of the path (allow, "GET,
 * POST"), the request headers a page may send, and how long a browser may
 * cache it. */
void http_cors_preflight(struct reply *rp, const char *allow);

#endif
