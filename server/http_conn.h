/* server/http_conn.h — what the HTTP server keeps per TCP connection, from
 * accept to close: the client's address, counted against the per-address
 * limit (common/limits.h), and the request deadline.
 *
 * The deadline. A connection must deliver each request whole, headers and
 * body, within deadline_ms: of its accept for its first request, of the
 * end of the previous answer for the next. libmicrohttpd's own timeout
 * measures idleness and every byte resets it, so a client that trickles its
 * request (slowloris) would hold its connection for ever. At the deadline a
 * connection that has received part of a request is answered 408 (a
 * problem+json written to the socket directly: libmicrohttpd writes nothing
 * while it reads a request) and shut down; one that has received nothing
 * since it began to wait (an idle keep-alive) is shut down without an
 * answer. Either way libmicrohttpd then reads the end of its input and
 * closes the connection. Once a request has arrived whole, the deadline no
 * longer applies: handlers, long-polls and event streams take as long as
 * they take.
 *
 * The connections waiting for a request are kept in one list in deadline
 * order (every deadline is "now + deadline_ms", so appending keeps it
 * sorted), and one thread sleeps until the first of them.
 *
 * Thread-safety: every function is thread-safe. A connection's record is
 * created and freed on its libmicrohttpd thread; the deadline thread uses
 * its socket only between http_conn_open and http_conn_close, and
 * libmicrohttpd 0.9.75 closes a socket only after its close notification
 * (measured), so the descriptor is never one that was reused. */
#ifndef OPSRUN_SERVER_HTTP_CONN_H
#define OPSRUN_SERVER_HTTP_CONN_H

#include "common/common.h"

#include <sys/socket.h>

struct limits;
struct http_conns;
struct http_conn;

/* A client address as text, an IPv4-mapped IPv6 address as IPv4; at least
 * 46 bytes (INET6_ADDRSTRLEN). "unknown" for other families. */
void http_conn_addr_text(const struct sockaddr *sa, char *buf, size_t cap);

/* lim may be NULL (no per-address limit, no counters); it must outlive the
 * registry. */
struct http_conns *http_conns_new(struct limits *lim, int deadline_ms);
/* Starts the deadline thread. */
enum status http_conns_start(struct http_conns *cs, struct error *err) WUR;
/* Stops the thread and frees the registry, after libmicrohttpd has closed
 * every connection. NULL is a no-op. */
void http_conns_free(struct http_conns *cs);

/* A connection from addr was accepted on fd; its first request's deadline
 * starts now. Never NULL. */
struct http_conn *http_conn_open(struct http_conns *cs, int fd, const char *addr);
void http_conn_close(struct http_conns *cs, struct http_conn *c); /* NULL is a no-op */
/* Whether the connection was over the per-address limit when it opened:
 * its requests are then refused. */
bool http_conn_over_limit(const struct http_conn *c);
const char *http_conn_addr(const struct http_conn *c); /* lives with c */
/* The current request has arrived whole, or is answered before it has:
 * its deadline no longer applies. false when the deadline passed first:
 * the client was answered 408 and the connection is being closed, so
 * nothing more may be sent on it. Idempotent. */
bool http_conn_received(struct http_conns *cs, struct http_conn *c) WUR;
/* The current request comes from an allowed origin (server/http_cors.h;
 * NULL: none): a 408 for it carries CORS headers. Until the next request. */
void http_conn_set_origin(struct http_conns *cs, struct http_conn *c, const char *origin);
/* The current request's answer is over; the next request's deadline starts
 * now. */
void http_conn_next(struct http_conns *cs, struct http_conn *c);

#endif
