/* server/http.h — the libmicrohttpd front end: a thread pool on epoll
 * (no thread per idle connection), routing, capped JSON bodies, problem+json
 * for every error, one access-log line per request. Handlers run on the
 * pool's threads; their database waits are bounded by the pool checkout
 * wait and the statement timeout. These are its life cycle (server/http.c);
 * only server/http_mhd.c includes microhttpd.h; server/http_internal.h
 * says how the front end's files divide the work. */
#ifndef OPSRUN_SERVER_HTTP_H
#define OPSRUN_SERVER_HTTP_H

#include "handlers/handlers.h"

struct http;

/* Binds listen ("HOST:PORT") now, before anything else of the process
 * starts, so that a taken port ends start-up at once with its reason:
 * `could not listen on 127.0.0.1:8080: Address already in use`. Nothing is
 * served until http_start; connections wait in the backlog meanwhile. */
enum status http_bind(const char *listen, struct http **out, struct error *err) WUR;
/* Serves on the bound address; hc must outlive the server. */
enum status http_start(struct http *h, const struct hctx *hc, struct error *err) WUR;
/* The bound port (useful with port 0). */
unsigned http_port(const struct http *h);
/* Stops serving and closes the socket, whether or not h was started;
 * NULL is a no-op. */
/* Waits up to timeout_ms until every request whose answer waited for other
 * work (a submission's batch, a bulk action) has been answered and sent:
 * stopping the daemon before that would close its connection unanswered.
 * False when some were still in flight. */
bool http_wait_deferred(struct http *h, int timeout_ms);
void http_stop(struct http *h);

#endif
