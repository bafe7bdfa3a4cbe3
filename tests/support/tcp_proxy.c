/* tests/support/tcp_proxy.c — see tcp_proxy.h. One thread polls the
 * listening socket and both ends of every connection; each direction of a
 * connection moves through one buffer, read only when it is empty, so a
 * side that stops reading stops the other (as TCP would). */
#include "tcp_proxy.h"

#include "harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define PROXY_PAIRS 256
#define PROXY_BUF 65536

/* One forwarded connection: fd[0] the client's, fd[1] the server's;
 * buf[d] holds what was read from fd[d] and is not yet written to the
 * other. */
struct pair {
    int fd[2];
    char buf[2][PROXY_BUF];
    size_t len[2], off[2];
};

struct tcp_proxy {
    pthread_t thread;
    pthread_mutex_t mu;
    bool hole, stop;
    int accepted;
    int lfd, wake[2], port;
    char host[256];
    int server_port;
    struct pair *pairs[PROXY_PAIRS];
};

static void proxy_die(const char *what)
{
    fprintf(stderr, "tcp_proxy: %s: %s\n", what, strerror(errno));
    abort();
}

void th_pg_host_port(char *host, size_t cap, int *port)
{
    const char *url = getenv("OPSRUN_TEST_DATABASE_URL");
    char *errmsg = NULL;
    PQconninfoOption *opts = url ? PQconninfoParse(url, &errmsg) : NULL;

    if (!opts) {
        fprintf(stderr, "tcp_proxy: bad OPSRUN_TEST_DATABASE_URL: %s\n",
                errmsg ? errmsg : "not set");
        abort();
    }
    snprintf(host, cap, "/tmp");
    *port = 5432;
    for (PQconninfoOption *o = opts; o->keyword; o++) {
        if (o->val && strcmp(o->keyword, "host") == 0)
            snprintf(host, cap, "%s", o->val);
        else if (o->val && strcmp(o->keyword, "port") == 0)
            *port = atoi(o->val);
    }
    PQconninfoFree(opts);
}

/* A connection to the server, nonblocking once made; -1 on failure. */
static int connect_server(const struct tcp_proxy *p)
{
    int fd;

    if (p->host[0] == '/') {
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        int n =
            snprintf(a.sun_path, sizeof(a.sun_path), "%.80s/.s.PGSQL.%d", p->host, p->server_port);
        if (n < 0 || (size_t)n >= sizeof(a.sun_path))
            return -1;
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
            close(fd);
            fd = -1;
        }
    } else {
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)p->server_port)};
        inet_pton(AF_INET, p->host, &a.sin_addr);
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
            close(fd);
            fd = -1;
        }
    }
    if (fd >= 0)
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    return fd;
}

static void pair_close(struct tcp_proxy *p, int i)
{
    close(p->pairs[i]->fd[0]);
    close(p->pairs[i]->fd[1]);
    free(p->pairs[i]);
    p->pairs[i] = NULL;
}

static void proxy_accept(struct tcp_proxy *p)
{
    int cfd = accept4(p->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    int sfd, i;

    if (cfd < 0)
        return;
    sfd = connect_server(p);
    for (i = 0; i < PROXY_PAIRS && p->pairs[i]; i++)
        ;
    if (sfd < 0 || i == PROXY_PAIRS) {
        close(cfd);
        if (sfd >= 0)
            close(sfd);
        return;
    }
    p->pairs[i] = calloc(1, sizeof(struct pair));
    p->pairs[i]->fd[0] = cfd;
    p->pairs[i]->fd[1] = sfd;
    pthread_mutex_lock(&p->mu);
    p->accepted++;
    pthread_mutex_unlock(&p->mu);
}

/* Moves what it can in both directions; false when the connection ended. */
static bool pair_move(struct pair *c, const short *revents)
{
    for (int d = 0; d < 2; d++) {
        if (c->len[d] == 0 && (revents[d] & (POLLIN | POLLHUP | POLLERR))) {
            ssize_t n = read(c->fd[d], c->buf[d], PROXY_BUF);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
                return false;
            if (n > 0) {
                c->len[d] = (size_t)n;
                c->off[d] = 0;
            }
        }
        if (c->len[d] > 0) {
            ssize_t n = write(c->fd[1 - d], c->buf[d] + c->off[d], c->len[d]);
            if (n < 0 && errno != EAGAIN && errno != EINTR)
                return false;
            if (n > 0) {
                c->off[d] += (size_t)n;
                c->len[d] -= (size_t)n;
            }
        }
    }
    return true;
}

/* The poll set: the wake pipe, the listener, and each pair's two ends
 * (index 2 + 2 * i + side). */
static int proxy_fill(struct tcp_proxy *p, struct pollfd *pf)
{
    pf[0] = (struct pollfd){p->wake[0], POLLIN, 0};
    pf[1] = (struct pollfd){p->lfd, POLLIN, 0};
    for (int i = 0; i < PROXY_PAIRS; i++) {
        struct pair *c = p->pairs[i];
        for (int side = 0; side < 2; side++) {
            struct pollfd *f = &pf[2 + 2 * i + side];
            *f = (struct pollfd){-1, 0, 0};
            if (!c)
                continue;
            f->fd = c->fd[side];
            f->events =
                (short)((c->len[side] == 0 ? POLLIN : 0) | (c->len[1 - side] > 0 ? POLLOUT : 0));
        }
    }
    return 2 + 2 * PROXY_PAIRS;
}

static void *proxy_main(void *arg)
{
    struct tcp_proxy *p = arg;
    struct pollfd pf[2 + 2 * PROXY_PAIRS];

    for (;;) {
        bool hole, stop;
        char b[16];
        int n;

        pthread_mutex_lock(&p->mu);
        hole = p->hole;
        stop = p->stop;
        pthread_mutex_unlock(&p->mu);
        if (stop)
            break;
        n = hole ? 1 : proxy_fill(p, pf);
        if (hole)
            pf[0] = (struct pollfd){p->wake[0], POLLIN, 0};
        if (poll(pf, (nfds_t)n, 1000) <= 0)
            continue;
        if (pf[0].revents)
            (void)!read(p->wake[0], b, sizeof(b));
        pthread_mutex_lock(&p->mu);
        hole = p->hole;
        pthread_mutex_unlock(&p->mu);
        if (hole)
            continue;
        for (int i = 0; i < PROXY_PAIRS; i++) {
            short rev[2] = {pf[2 + 2 * i].revents, pf[3 + 2 * i].revents};
            if (p->pairs[i] && (rev[0] || rev[1]) && !pair_move(p->pairs[i], rev))
                pair_close(p, i);
        }
        if (pf[1].revents & POLLIN)
            proxy_accept(p);
    }
    return NULL;
}

struct tcp_proxy *tcp_proxy_start(const char *host, int port)
{
    struct tcp_proxy *p = calloc(1, sizeof(*p));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};

    snprintf(p->host, sizeof(p->host), "%s", host);
    p->server_port = port;
    p->port = th_free_port();
    a.sin_port = htons((uint16_t)p->port);
    p->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (p->lfd < 0 || bind(p->lfd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        listen(p->lfd, 128) != 0)
        proxy_die("could not listen");
    if (pipe2(p->wake, O_CLOEXEC | O_NONBLOCK) != 0)
        proxy_die("could not make a pipe");
    pthread_mutex_init(&p->mu, NULL);
    if (pthread_create(&p->thread, NULL, proxy_main, p) != 0)
        proxy_die("could not start its thread");
    return p;
}

int tcp_proxy_port(const struct tcp_proxy *p)
{
    return p->port;
}

void tcp_proxy_blackhole(struct tcp_proxy *p, bool on)
{
    pthread_mutex_lock(&p->mu);
    p->hole = on;
    pthread_mutex_unlock(&p->mu);
    (void)!write(p->wake[1], "x", 1);
}

int tcp_proxy_accepted(struct tcp_proxy *p)
{
    int n;

    pthread_mutex_lock(&p->mu);
    n = p->accepted;
    pthread_mutex_unlock(&p->mu);
    return n;
}

void tcp_proxy_stop(struct tcp_proxy *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_mutex_unlock(&p->mu);
    (void)!write(p->wake[1], "x", 1);
    pthread_join(p->thread, NULL);
    for (int i = 0; i < PROXY_PAIRS; i++)
        if (p->pairs[i])
            pair_close(p, i);
    close(p->lfd);
    close(p->wake[0]);
    close(p->wake[1]);
    pthread_mutex_destroy(&p->mu);
    free(p);
}
