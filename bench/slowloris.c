/* bench/slowloris.c — how a running opsrun treats clients that trickle
 * their request (the slowloris attack), for docs/operations.md:
 *
 *   opsrun_slowloris PORT CONNS SECONDS [SOURCES]
 *
 * Opens CONNS connections to 127.0.0.1:PORT, spread round-robin over the
 * source addresses 127.0.0.1 .. 127.0.0.SOURCES (default 1), and sends on
 * each a request whose header never ends ("GET /livez HTTP/1.1", "Host",
 * then "X-Padding: aaaa..."), one byte every 200 ms, for SECONDS seconds.
 * Connections are opened 64 at a time between the trickling rounds. Once a
 * second it prints how many connections the server still holds, how many
 * it closed with a 408, without an answer, or refused at accept (closed
 * without an answer within a second of the connect), and the latency of a
 * normal GET /livez made from 127.0.0.250 (outside the trickling
 * addresses) on a fresh connection (-1: no answer within 5 s). Times count
 * from the first connect. The last line sums it up.
 * Raise the file limit first (ulimit -n); the client raises its own soft
 * limit to the hard one. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum state { OPEN, CLOSED_408, CLOSED_SILENT, REFUSED };

struct conn {
    int fd;
    enum state st;
    long long opened_ms, closed_ms;
    size_t sent;
    bool answered;
};

static long long now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int connect_from(const char *src, int port)
{
    struct sockaddr_in from = {.sin_family = AF_INET}, to = {.sin_family = AF_INET};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0)
        return -1;
    inet_pton(AF_INET, src, &from.sin_addr);
    to.sin_port = htons((uint16_t)port);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&from, sizeof(from)) != 0 ||
        connect(fd, (struct sockaddr *)&to, sizeof(to)) != 0) {
        close(fd);
        return -1;
    }
    fcntl(fd, F_SETFL, O_NONBLOCK);
    return fd;
}

/* The byte at offset i of a header that never ends. */
static char trickle_byte(size_t i)
{
    static const char head[] = "GET /livez HTTP/1.1\r\nHost: x\r\nX-Padding: ";

    return i < sizeof(head) - 1 ? head[i] : 'a';
}

/* One normal request from 127.0.0.250; its latency in ms, -1 on failure. */
static long long probe(int port)
{
    static const char req[] = "GET /livez HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    long long t0 = now_ms();
    char buf[512];
    int fd = connect_from("127.0.0.250", port);
    struct pollfd pf;
    ssize_t n;

    if (fd < 0)
        return -1;
    fcntl(fd, F_SETFL, 0);
    if (send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL) != (ssize_t)(sizeof(req) - 1)) {
        close(fd);
        return -1;
    }
    pf = (struct pollfd){fd, POLLIN, 0};
    n = poll(&pf, 1, 5000) == 1 ? recv(fd, buf, sizeof(buf) - 1, 0) : -1;
    close(fd);
    if (n < 12 || strncmp(buf, "HTTP/1.1 200", 12) != 0)
        return -1;
    return now_ms() - t0;
}

/* Reads what the server sent; notes how the connection ended. */
static void conn_read(struct conn *c, long long now)
{
    char buf[4096];
    ssize_t n;

    while ((n = recv(c->fd, buf, sizeof(buf), 0)) > 0)
        if (n >= 12 && strncmp(buf, "HTTP/1.1 408", 12) == 0)
            c->answered = true;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return;
    close(c->fd);
    c->fd = -1;
    c->closed_ms = now;
    if (c->answered)
        c->st = CLOSED_408;
    else
        c->st = now - c->opened_ms < 1000 ? REFUSED : CLOSED_SILENT;
}

static void count(const struct conn *cs, int n, int out[4])
{
    memset(out, 0, 4 * sizeof(int));
    for (int i = 0; i < n; i++)
        out[cs[i].st]++;
}

static void open_some(struct conn *cs, int *opened, int n, int sources, int port)
{
    for (int k = 0; k < 64 && *opened < n; k++, (*opened)++) {
        struct conn *c = &cs[*opened];
        char src[32];
        snprintf(src, sizeof(src), "127.0.0.%d", 1 + *opened % sources);
        c->fd = connect_from(src, port);
        c->opened_ms = now_ms();
        if (c->fd < 0)
            c->st = REFUSED;
    }
}

/* Every 200 ms, one more byte on every connection still open. */
static void trickle(struct conn *cs, int opened)
{
    for (int i = 0; i < opened; i++)
        if (cs[i].st == OPEN) {
            char b = trickle_byte(cs[i].sent);
            if (send(cs[i].fd, &b, 1, MSG_NOSIGNAL) == 1)
                cs[i].sent++;
        }
}

int main(int argc, char **argv)
{
    struct rlimit rl;
    struct conn *cs;
    struct pollfd *pf;
    int port, n, seconds, sources = 1, opened = 0, by[4], held_max = 0, probes_ok = 0,
                          probes_failed = 0;
    long long t0, next_tick, next_print, probe_max = 0, last_close = 0, open_ms = -1;

    if (argc < 4) {
        fprintf(stderr, "usage: %s PORT CONNS SECONDS [SOURCES]\n", argv[0]);
        return 2;
    }
    port = atoi(argv[1]);
    n = atoi(argv[2]);
    seconds = atoi(argv[3]);
    if (argc > 4)
        sources = atoi(argv[4]);
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    cs = calloc((size_t)n, sizeof(*cs));
    pf = calloc((size_t)n, sizeof(*pf));
    t0 = now_ms();
    next_tick = t0;
    next_print = t0 + 1000;
    while (now_ms() - t0 < (long long)seconds * 1000) {
        long long now;
        if (opened < n) {
            open_some(cs, &opened, n, sources, port);
            if (opened == n)
                open_ms = now_ms() - t0;
        }
        if (now_ms() >= next_tick) {
            trickle(cs, opened);
            next_tick += 200;
        }
        for (int i = 0; i < opened; i++)
            pf[i] = (struct pollfd){cs[i].st == OPEN ? cs[i].fd : -1, POLLIN, 0};
        poll(pf, (nfds_t)opened, opened < n ? 0 : 50);
        now = now_ms();
        for (int i = 0; i < opened; i++)
            if (cs[i].st == OPEN && (pf[i].revents & (POLLIN | POLLHUP | POLLERR))) {
                conn_read(&cs[i], now);
                if (cs[i].st != OPEN && cs[i].st != REFUSED)
                    last_close = now - t0;
            }
        if (now >= next_print) {
            long long lat = probe(port);
            count(cs, opened, by);
            if (by[OPEN] > held_max)
                held_max = by[OPEN];
            if (lat < 0)
                probes_failed++;
            else
                probes_ok++;
            if (lat > probe_max)
                probe_max = lat;
            printf("t=%llds opened=%d held=%d closed_408=%d closed_silent=%d refused=%d "
                   "probe_ms=%lld\n",
                   (now - t0) / 1000, opened, by[OPEN], by[CLOSED_408], by[CLOSED_SILENT],
                   by[REFUSED], lat);
            fflush(stdout);
            next_print += 1000;
        }
    }
    count(cs, opened, by);
    printf("summary conns=%d sources=%d seconds=%d open_all_ms=%lld held_max=%d held_at_end=%d "
           "closed_408=%d closed_silent=%d refused=%d last_close_s=%.1f probes_ok=%d "
           "probes_failed=%d probe_max_ms=%lld\n",
           n, sources, seconds, open_ms, held_max, by[OPEN], by[CLOSED_408], by[CLOSED_SILENT],
           by[REFUSED], (double)last_close / 1000, probes_ok, probes_failed, probe_max);
    for (int i = 0; i < opened; i++)
        if (cs[i].fd >= 0)
            close(cs[i].fd);
    free(cs);
    free(pf);
    return 0;
}
