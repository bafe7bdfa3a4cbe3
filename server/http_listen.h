/* server/http_listen.h — the socket the HTTP server listens on, made before
 * the server starts so that a taken or unusable address ends start-up at
 * once, with its reason. No libmicrohttpd; reentrant. */
#ifndef OPSRUN_SERVER_HTTP_LISTEN_H
#define OPSRUN_SERVER_HTTP_LISTEN_H

#include "common/common.h"

/* A socket bound to addr ("HOST:PORT" or "[v6]:PORT") and listening, set
 * up as libmicrohttpd sets up its own: close-on-exec, non-blocking (its
 * thread pool needs that), SO_REUSEADDR (a restart does not wait out the
 * old connections' TIME_WAIT) and, for IPv6, IPV6_V6ONLY. On ST_OK *fd is
 * the caller's and *port the bound port. The error names the address and
 * the reason: `could not listen on 127.0.0.1:8080: Address already in use`
 * (ST_UNAVAILABLE), or an address that does not resolve (ST_INVALID). */
enum status http_listen_open(const char *addr, int *fd, unsigned *port, struct error *err) WUR;

#endif
