/* server/http_cors.h — CORS for pages of another origin (docs/api.md,
 * "Browsers: CORS"): which requests come from an allowed origin, the
 * headers every answer to them carries, and the preflight's own. Stateless
 * and thread-safe; the allowed origins are http.cors_origins. */
#ifndef OPSRUN_SERVER_HTTP_CORS_H
#define OPSRUN_SERVER_HTTP_CORS_H

#include "config/config.h"
#include "handlers/handlers.h"

struct MHD_Connection;
struct MHD_Response;

/* The request's Origin when http.cors_origins allows it, else NULL.
 * Borrowed from the connection: valid until the request completes. */
const char *http_cors_origin(const struct config *cfg, struct MHD_Connection *c);
/* Whether the request is a preflight: OPTIONS with
 * Access-Control-Request-Method. */
bool http_cors_is_preflight(struct MHD_Connection *c, const char *method);
/* Adds what every answer to an allowed origin carries; origin NULL adds
 * nothing. */
void http_cors_headers(struct MHD_Response *r, const char *origin);
/* The same headers as raw "Name: value\r\n" lines into buf (cap bytes),
 * for an answer written to the socket directly (the 408). */
void http_cors_lines(const char *origin, char *buf, size_t cap);
/* A preflight's answer: 204 with the methods of the path (allow, "GET,
 * POST"), the request headers a page may send, and how long a browser may
 * cache it. */
void http_cors_preflight(struct reply *rp, const char *allow);

#endif
