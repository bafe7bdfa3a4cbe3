/* tests/support/tcp_proxy.h — a TCP proxy for the end-to-end suites: it
 * listens on a free loopback port and forwards every connection to a
 * PostgreSQL server (a unix socket directory, as the test clusters have,
 * or a TCP host), in one thread of the test process. Told to black-hole,
 * it stops moving bytes and accepting connections without closing
 * anything: what either side sends stays in the proxy's socket buffers, as
 * packets would on a network path that silently drops them, and moves
 * again when the path is restored (as TCP retransmits it would). Its kernel
 * still acknowledges what arrives, so the client's TCP never sees a loss:
 * only a wait for an answer with a bound of its own notices. Thread-safe:
 * any thread may black-hole or restore it. */
#ifndef OPSRUN_TEST_TCP_PROXY_H
#define OPSRUN_TEST_TCP_PROXY_H

#include <stdbool.h>
#include <stddef.h>

struct tcp_proxy;

/* Starts a proxy to host (a directory: the unix socket host/.s.PGSQL.port;
 * else an IPv4 address) and port; aborts the test when it cannot. */
struct tcp_proxy *tcp_proxy_start(const char *host, int port);
/* The loopback port it listens on. */
int tcp_proxy_port(const struct tcp_proxy *p);
/* true: from now on nothing moves; false: everything moves again. */
void tcp_proxy_blackhole(struct tcp_proxy *p, bool on);
/* Connections it has accepted so far. */
int tcp_proxy_accepted(struct tcp_proxy *p);
/* Stops the thread and closes every connection (NULL is a no-op). */
void tcp_proxy_stop(struct tcp_proxy *p);

/* The host (socket directory) and port of the test cluster, from
 * OPSRUN_TEST_DATABASE_URL, into host (cap bytes) and *port. */
void th_pg_host_port(char *host, size_t cap, int *port);

#endif
