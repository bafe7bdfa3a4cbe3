/* server/http.h — the libmicrohttpd front end: a thread pool on epoll
 * (no thread per idle connection), routing, capped JSON bodies, problem+json
 * for every error, one access-log line per request. Handlers run on the
 * pool's threads; their database waits are bounded by the pool checkout
 * wait and the statement timeout. Only server/http.c includes
 * microhttpd.h; server/http_internal.h says how the front end's files
 * divide the work. */
#ifndef OPSRUN_SERVER_HTTP_H
#define OPSRUN_SERVER_HTTP_H

#include "handlers/handlers.h"

struct http;

/* hc must outlive the server. */
enum status http_start(const struct hctx *hc, struct http **out, struct error *err) WUR;
/* The bound port (useful with port 0). */
unsigned http_port(const struct http *h);
void http_stop(struct http *h); /* NULL is a no-op */

#endif
