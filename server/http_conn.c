/* server/http_conn.c — per-connection records: the per-address count and
 * the request deadline, enforced by one thread that sleeps until the
 * first deadline (server/http_conn.h). */
#include "server/http_conn.h"
#include "server/http_cors.h"

#include "common/limits.h"
#include "common/log.h"
#include "handlers/handlers.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/tcp.h> /* struct tcp_info with tcpi_bytes_received (Linux 4.1) */
#include <netinet/in.h>

enum conn_state {
    CONN_WAITING,   /* for a request, in the list */
    CONN_ANSWERING, /* the request arrived; no deadline */
    CONN_EXPIRED,   /* shut down at its deadline */
};

struct http_conn {
    struct http_conn *prev, *next; /* the list, while waiting */
    int fd;
    enum conn_state state;
    bool over_limit;
    bool rx_known; /* rx holds the bytes received when the wait began */
    uint64_t rx;
    int64_t deadline_ms; /* monotonic */
    char addr[INET6_ADDRSTRLEN];
    char origin[256]; /* the current request's allowed Origin, or "" */
};

struct http_conns {
    struct limits *lim;
    int deadline_s;
    char *timeout_body; /* the 408's problem+json */
    char *timeout_text; /* the whole 408 response */
    size_t timeout_len;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct http_conn *head, *tail; /* waiting, by deadline */
    bool stop, started;
    pthread_t th;
};

void http_conn_addr_text(const struct sockaddr *sa, char *buf, size_t cap)
{
    const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;

    xsnprintf(buf, cap, "unknown");
    if (!sa)
        return;
    if (sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, buf, (socklen_t)cap);
    else if (sa->sa_family == AF_INET6 && IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr))
        inet_ntop(AF_INET, &s6->sin6_addr.s6_addr[12], buf, (socklen_t)cap);
    else if (sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &s6->sin6_addr, buf, (socklen_t)cap);
}

/* The body of the 408 every late request gets, built once with the one
 * problem builder. */
static char *timeout_body(int deadline_s)
{
    struct reply rp;
    char detail[128], *body;

    xsnprintf(detail, sizeof(detail),
              "the request did not arrive whole within %d s of the connection being ready for it",
              deadline_s);
    reply_init(&rp);
    reply_problem_take(&rp, ST_TIMEOUT, detail, NULL);
    body = json_dumps(rp.body, JSON_COMPACT);
    if (!body)
        abort();
    reply_cleanup(&rp);
    return body;
}

/* The whole 408, with extra header lines (each ending in CRLF). */
static char *timeout_text(const char *body, const char *extra)
{
    return xasprintf("HTTP/1.1 408 Request Timeout\r\n"
                     "Content-Type: application/problem+json\r\n"
                     "Content-Length: %zu\r\n"
                     "Cache-Control: no-store\r\n"
                     "%s"
                     "Connection: close\r\n\r\n%s",
                     strlen(body), extra, body);
}

/* A late request of an allowed origin gets its 408 with CORS headers, so
 * its page can read it; rare enough to build each time. */
static void send_timeout(struct http_conns *cs, struct http_conn *c)
{
    char lines[512], *text;

    if (!c->origin[0]) {
        (void)send(c->fd, cs->timeout_text, cs->timeout_len, MSG_DONTWAIT | MSG_NOSIGNAL);
        return;
    }
    http_cors_lines(c->origin, lines, sizeof(lines));
    text = timeout_text(cs->timeout_body, lines);
    (void)send(c->fd, text, strlen(text), MSG_DONTWAIT | MSG_NOSIGNAL);
    free(text);
}

/* ---- the waiting list (lock held) ----------------------------------------- */

static void list_append(struct http_conns *cs, struct http_conn *c)
{
    c->next = NULL;
    c->prev = cs->tail;
    if (cs->tail)
        cs->tail->next = c;
    else
        cs->head = c;
    cs->tail = c;
}

static void list_unlink(struct http_conns *cs, struct http_conn *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        cs->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        cs->tail = c->prev;
    c->prev = c->next = NULL;
}

/* The bytes the kernel has received on fd, those libmicrohttpd has not read
 * yet included. libmicrohttpd reads whatever arrives at once, so this is
 * the only way to tell a connection that sent nothing from one that sent
 * part of a request. */
static bool conn_rx(int fd, uint64_t *out)
{
    struct tcp_info ti;
    socklen_t len = sizeof(ti);

    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
        len < offsetof(struct tcp_info, tcpi_bytes_received) + sizeof(ti.tcpi_bytes_received))
        return false;
    *out = ti.tcpi_bytes_received;
    return true;
}

/* rx_known and rx: conn_rx of the connection, taken before the lock when
 * an answer is over. (Bytes of a pipelined next request that arrived before
 * then make that request look idle if it stalls: it is closed without its
 * 408.) */
static void wait_begin(struct http_conns *cs, struct http_conn *c, bool rx_known, uint64_t rx)
{
    bool was_empty = cs->head == NULL;

    c->state = CONN_WAITING;
    c->origin[0] = '\0';
    c->rx_known = rx_known;
    c->rx = rx;
    c->deadline_ms = clock_mono_ms() + (int64_t)cs->deadline_s * 1000;
    list_append(cs, c);
    if (was_empty)
        pthread_cond_signal(&cs->cv);
}

/* ---- the deadline thread -------------------------------------------------- */

/* Past its deadline: a connection that received part of a request gets
 * its 408, an idle one (nothing received since its wait began) nothing;
 * then the socket is shut down both ways, and libmicrohttpd closes the
 * connection when it reads the end. Never blocks. */
static void conn_expire(struct http_conns *cs, struct http_conn *c)
{
    uint64_t rx = 0;
    bool idle = c->rx_known && conn_rx(c->fd, &rx) && rx == c->rx;

    list_unlink(cs, c);
    c->state = CONN_EXPIRED;
    if (idle) {
        LOG(LOG_DEBUG, "closing an idle connection peer=%s idle_s=%d", c->addr, cs->deadline_s);
    } else {
        send_timeout(cs, c);
        if (cs->lim)
            limits_note(cs->lim, LIMITS_DEADLINE);
        LOG(LOG_INFO, "request timed out peer=%s deadline_s=%d", c->addr, cs->deadline_s);
    }
    if (shutdown(c->fd, SHUT_RDWR) != 0)
        LOG(LOG_DEBUG, "could not shut down a late connection: %s", strerror(errno));
}

static void *conns_main(void *arg)
{
    struct http_conns *cs = arg;
    struct timespec ts;

    pthread_mutex_lock(&cs->mu);
    while (!cs->stop) {
        int64_t now = clock_mono_ms();
        while (cs->head && cs->head->deadline_ms <= now)
            conn_expire(cs, cs->head);
        if (cs->head) {
            abstime_after_ms(&ts, cs->head->deadline_ms - now);
            pthread_cond_timedwait(&cs->cv, &cs->mu, &ts);
        } else {
            pthread_cond_wait(&cs->cv, &cs->mu);
        }
    }
    pthread_mutex_unlock(&cs->mu);
    return NULL;
}

/* ---- the registry ---------------------------------------------------------- */

struct http_conns *http_conns_new(struct limits *lim, int deadline_s)
{
    struct http_conns *cs = xcalloc(1, sizeof(*cs));

    cs->lim = lim;
    cs->deadline_s = deadline_s;
    cs->timeout_body = timeout_body(deadline_s);
    cs->timeout_text = timeout_text(cs->timeout_body, "");
    cs->timeout_len = strlen(cs->timeout_text);
    pthread_mutex_init(&cs->mu, NULL);
    cond_init_monotonic(&cs->cv);
    return cs;
}

enum status http_conns_start(struct http_conns *cs, struct error *err)
{
    int rc = pthread_create(&cs->th, NULL, conns_main, cs);

    if (rc != 0)
        return error_set(err, ST_INTERNAL, "could not start the request deadline thread: %s",
                         strerror(rc));
    cs->started = true;
    return ST_OK;
}

void http_conns_free(struct http_conns *cs)
{
    if (!cs)
        return;
    pthread_mutex_lock(&cs->mu);
    cs->stop = true;
    pthread_cond_signal(&cs->cv);
    pthread_mutex_unlock(&cs->mu);
    if (cs->started)
        pthread_join(cs->th, NULL);
    for (struct http_conn *c = cs->head, *next; c; c = next) {
        next = c->next; /* only if libmicrohttpd did not report a close */
        free(c);
    }
    pthread_cond_destroy(&cs->cv);
    pthread_mutex_destroy(&cs->mu);
    free(cs->timeout_text);
    free(cs->timeout_body);
    free(cs);
}

struct http_conn *http_conn_open(struct http_conns *cs, int fd, const char *addr)
{
    struct http_conn *c = xcalloc(1, sizeof(*c));

    c->fd = fd;
    xsnprintf(c->addr, sizeof(c->addr), "%s", addr);
    c->over_limit = cs->lim && !limits_conn_open(cs->lim, c->addr);
    pthread_mutex_lock(&cs->mu);
    wait_begin(cs, c, true, 0); /* idle at its deadline only if it never sent a byte */
    pthread_mutex_unlock(&cs->mu);
    return c;
}

void http_conn_close(struct http_conns *cs, struct http_conn *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&cs->mu);
    if (c->state == CONN_WAITING)
        list_unlink(cs, c);
    pthread_mutex_unlock(&cs->mu);
    if (cs->lim)
        limits_conn_close(cs->lim, c->addr);
    free(c);
}

bool http_conn_over_limit(const struct http_conn *c)
{
    return c->over_limit;
}

const char *http_conn_addr(const struct http_conn *c)
{
    return c->addr;
}

bool http_conn_received(struct http_conns *cs, struct http_conn *c)
{
    bool ok;

    pthread_mutex_lock(&cs->mu);
    if (c->state == CONN_WAITING) {
        list_unlink(cs, c);
        c->state = CONN_ANSWERING;
    }
    ok = c->state == CONN_ANSWERING;
    pthread_mutex_unlock(&cs->mu);
    return ok;
}

void http_conn_set_origin(struct http_conns *cs, struct http_conn *c, const char *origin)
{
    pthread_mutex_lock(&cs->mu);
    xsnprintf(c->origin, sizeof(c->origin), "%s", origin ? origin : "");
    pthread_mutex_unlock(&cs->mu);
}

void http_conn_next(struct http_conns *cs, struct http_conn *c)
{
    uint64_t rx = 0;
    bool rx_known = conn_rx(c->fd, &rx);

    pthread_mutex_lock(&cs->mu);
    if (c->state == CONN_ANSWERING)
        wait_begin(cs, c, rx_known, rx);
    pthread_mutex_unlock(&cs->mu);
}
