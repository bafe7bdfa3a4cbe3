/* server/http_listen.h — the address the HTTP server listens on: "listen"
 * ("HOST:PORT", "[v6]:PORT") resolved for the socket. No libmicrohttpd;
 * reentrant. */
#ifndef OPSRUN_SERVER_HTTP_LISTEN_H
#define OPSRUN_SERVER_HTTP_LISTEN_H

#include "common/common.h"

#include <sys/socket.h>

/* *addr and *port are set on ST_OK only; ST_INVALID names "listen". */
enum status http_listen_resolve(const char *listen, struct sockaddr_storage *addr, unsigned *port,
                                struct error *err) WUR;

#endif
