/* bench/ssebench.c — figures for the server-sent-event streams of a running
 * opsrun (GET /stream), for bench/streams.sh:
 *
 *   ssebench latency URL DBCONNINFO SUBSCRIBERS EVENTS INTERVAL_MS
 *       opens SUBSCRIBERS raw GET /stream connections, waits until /healthz
 *       counts them all, then writes WARMUP + EVENTS progress events to one
 *       run of its own, one every INTERVAL_MS, from a writer thread (one
 *       autocommit statement per event: update the run, insert the event,
 *       pg_notify). t0 of an event is taken when that statement returns, i.e.
 *       once it has committed. The main thread polls every stream, decodes the
 *       chunked encoding and the SSE "id: N" lines, and stamps each (stream,
 *       event) on arrival: latency = arrival - t0, p50/p99/max over all pairs
 *       of the EVENTS measured events (the WARMUP first ones are not counted),
 *       and per event the latency of its first and of its last stream.
 *       Baseline, same process, same loop: a libpq connection that LISTENs on
 *       opsrun_events stamps each notification the writer's backend sends;
 *       the k-th one belongs to the k-th commit. That is PostgreSQL's own
 *       commit-to-client delivery, the floor of any LISTEN-based design.
 *   ssebench loglatency URL DBCONNINFO RUN_ID SUBSCRIBERS
 *       opens SUBSCRIBERS GET /runs/RUN_ID/logs/stream connections to a run
 *       that is queued but not due yet (bench/logs.sh submits it with a
 *       run_at a few seconds ahead), waits until /healthz counts them, then
 *       reads every stream until the server ends it (the run's end). Each
 *       line's arrival is stamped on the wall clock; after the end its
 *       write time is read from the database (the "at" opsrun stamps when
 *       it reads the command's output): latency = arrival - at, p50/p99/max
 *       over every (stream, line) pair of the command's lines, and whether
 *       every stream got every line, once and in order.
 *   ssebench rss URL SERVER_PID SUBSCRIBERS
 *       VmRSS and Threads of the server process (SERVER_PID) with no stream,
 *       then 2 s after SUBSCRIBERS / 2 and again 2 s after SUBSCRIBERS idle
 *       GET /stream connections are registered, and once they are closed.
 *
 * URL is http://HOST:PORT. Output is one "key=value" line per figure. */
#include <errno.h>
#include <fcntl.h>
#include <libpq-fe.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define WARMUP 10
#define HEAD_MAX 2048
#define LINE_MAX_KEPT 40
#define DRAIN_TIMEOUT_S 10.0
#define REGISTER_TIMEOUT_S 120.0
#define REAP_TIMEOUT_S 30.0

static const char *host = "127.0.0.1";
static char host_buf[256];
static char port[16] = "80";
static char stream_path[256] = "/stream"; /* what sub_open asks for */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* "http://HOST:PORT" or "HOST:PORT" */
static int parse_url(const char *url)
{
    const char *p = strncmp(url, "http://", 7) == 0 ? url + 7 : url;
    const char *colon = strrchr(p, ':');
    size_t hl;

    if (!colon || colon == p || strlen(colon + 1) == 0 || strlen(colon + 1) >= sizeof(port))
        return -1;
    hl = (size_t)(colon - p);
    if (hl >= sizeof(host_buf))
        return -1;
    memcpy(host_buf, p, hl);
    host_buf[hl] = '\0';
    host = host_buf;
    snprintf(port, sizeof(port), "%s", colon + 1);
    port[strcspn(port, "/")] = '\0';
    return 0;
}

/* A blocking TCP connection to the server, or -1. */
static int tcp_connect(void)
{
    struct addrinfo hints = {0}, *ai = NULL;
    int fd = -1;

    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, port, &hints, &ai) != 0)
        return -1;
    for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(ai);
    return fd;
}

static int send_all(int fd, const char *s, size_t n)
{
    while (n > 0) {
        ssize_t k = send(fd, s, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        s += k;
        n -= (size_t)k;
    }
    return 0;
}

/* streams.subscribers from GET /healthz, or -1. */
static long healthz_subscribers(void)
{
    char req[512], buf[65536];
    size_t len = 0;
    long v = -1;
    struct timeval tv = {5, 0};
    int fd = tcp_connect();
    const char *p;

    if (fd < 0)
        return -1;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    snprintf(req, sizeof(req), "GET /healthz HTTP/1.1\r\nHost: %s:%s\r\nConnection: close\r\n\r\n",
             host, port);
    if (send_all(fd, req, strlen(req)) == 0) {
        for (;;) {
            ssize_t k = recv(fd, buf + len, sizeof(buf) - 1 - len, 0);
            if (k < 0 && errno == EINTR)
                continue;
            if (k <= 0)
                break;
            len += (size_t)k;
            if (len == sizeof(buf) - 1)
                break;
        }
    }
    close(fd);
    buf[len] = '\0';
    p = strstr(buf, "\"streams\"");
    p = p ? strstr(p, "\"subscribers\"") : NULL;
    if (p) {
        p += strlen("\"subscribers\"");
        p += strspn(p, " \t\r\n:");
        v = strtol(p, NULL, 10);
    }
    return v;
}

/* ---- one GET /stream connection ---------------------------------------- */

struct arrival {
    int64_t id;
    double t;
};

enum sub_state { S_HEAD, S_SIZE, S_DATA, S_DATA_END, S_RAW, S_DONE };

struct sub {
    int fd;
    enum sub_state st;
    int status; /* HTTP status; 0 until the head is in */
    bool ended; /* EOF, error, or the last chunk */
    char *head; /* until the head is in */
    size_t head_len;
    char size_line[32];
    size_t size_len;
    uint64_t chunk_left;
    char line[LINE_MAX_KEPT]; /* the start of the current SSE line */
    size_t line_len;
    struct arrival *got;
    size_t ngot, cap, overflow;
};

static void sub_line(struct sub *s, double t)
{
    char tmp[LINE_MAX_KEPT + 1];
    char *end;
    long long id;

    if (s->line_len < 5 || memcmp(s->line, "id: ", 4) != 0)
        return;
    memcpy(tmp, s->line + 4, s->line_len - 4);
    tmp[s->line_len - 4] = '\0';
    id = strtoll(tmp, &end, 10);
    if (end == tmp || *end != '\0')
        return;
    if (s->ngot == s->cap) {
        s->overflow++;
        return;
    }
    s->got[s->ngot].id = id;
    s->got[s->ngot].t = t;
    s->ngot++;
}

/* SSE body bytes: only the "id: N" lines matter. */
static void sse_feed(struct sub *s, const char *p, size_t n, double t)
{
    while (n > 0) {
        const char *nl = memchr(p, '\n', n);
        size_t k = nl ? (size_t)(nl - p) : n;
        size_t room = sizeof(s->line) - s->line_len;
        size_t c = k < room ? k : room;

        memcpy(s->line + s->line_len, p, c);
        s->line_len += c;
        if (!nl)
            return;
        sub_line(s, t);
        s->line_len = 0;
        p += k + 1;
        n -= k + 1;
    }
}

/* Body bytes: chunked transfer decoding (or none). */
static void body_feed(struct sub *s, const char *p, size_t n, double t)
{
    while (n > 0 && s->st != S_DONE) {
        if (s->st == S_RAW) {
            sse_feed(s, p, n, t);
            return;
        }
        if (s->st == S_DATA) {
            size_t k = s->chunk_left < n ? (size_t)s->chunk_left : n;
            sse_feed(s, p, k, t);
            s->chunk_left -= k;
            p += k;
            n -= k;
            if (s->chunk_left == 0)
                s->st = S_DATA_END;
            continue;
        }
        /* S_SIZE or S_DATA_END: a line ending in CRLF */
        {
            char c = *p++;
            n--;
            if (c != '\n') {
                if (s->st == S_SIZE && s->size_len < sizeof(s->size_line) - 1)
                    s->size_line[s->size_len++] = c;
                continue;
            }
            if (s->st == S_DATA_END) {
                s->st = S_SIZE;
                continue;
            }
            s->size_line[s->size_len] = '\0';
            s->size_len = 0;
            s->chunk_left = strtoull(s->size_line, NULL, 16);
            if (s->chunk_left == 0) {
                s->st = S_DONE; /* the last chunk: the server ended the stream */
                s->ended = true;
            } else {
                s->st = S_DATA;
            }
        }
    }
}

static void sub_feed(struct sub *s, const char *p, size_t n, double t)
{
    if (s->st == S_HEAD) {
        size_t room = HEAD_MAX - 1 - s->head_len, k = n < room ? n : room;
        char *end;
        size_t used;

        memcpy(s->head + s->head_len, p, k);
        s->head_len += k;
        s->head[s->head_len] = '\0';
        end = strstr(s->head, "\r\n\r\n");
        if (!end) {
            if (s->head_len == HEAD_MAX - 1)
                s->st = S_DONE, s->ended = true;
            return;
        }
        if (sscanf(s->head, "HTTP/1.%*d %d", &s->status) != 1)
            s->status = -1;
        s->st = strcasestr(s->head, "\r\ntransfer-encoding: chunked") ? S_SIZE : S_RAW;
        used = (size_t)(end + 4 - s->head) - (s->head_len - k);
        free(s->head);
        s->head = NULL;
        p += used;
        n -= used;
    }
    body_feed(s, p, n, t);
}

static int sub_open(struct sub *s, size_t cap)
{
    char req[512];
    int fd = tcp_connect();

    memset(s, 0, sizeof(*s));
    s->fd = -1;
    s->ended = true;
    if (fd < 0)
        return -1;
    snprintf(req, sizeof(req),
             "GET %s HTTP/1.1\r\nHost: %s:%s\r\nAccept: text/event-stream\r\n\r\n", stream_path,
             host, port);
    if (send_all(fd, req, strlen(req)) != 0 || fcntl(fd, F_SETFL, O_NONBLOCK) != 0) {
        close(fd);
        return -1;
    }
    s->fd = fd;
    s->ended = false;
    s->head = calloc(1, HEAD_MAX);
    s->cap = cap;
    s->got = cap ? calloc(cap, sizeof(*s->got)) : NULL;
    return s->head && (!cap || s->got) ? 0 : -1;
}

static void sub_close(struct sub *s)
{
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
    free(s->head);
    free(s->got);
    s->head = NULL;
    s->got = NULL;
}

/* Reads whatever is there; the arrival time is stamped per recv. */
static void sub_read(struct sub *s, char *buf, size_t size)
{
    for (;;) {
        ssize_t k = recv(s->fd, buf, size, 0);
        if (k > 0) {
            sub_feed(s, buf, (size_t)k, now_s());
            continue;
        }
        if (k < 0 && errno == EINTR)
            continue;
        if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
            s->ended = true;
        return;
    }
}

/* The baseline: a LISTEN connection that stamps the notifications sent by
 * the writer's backend (the k-th one is the k-th commit). */
struct listener {
    PGconn *db;
    int writer_pid;
    double *t;
    int cap, n, other;
};

static void listener_read(struct listener *l)
{
    double now = now_s();
    PGnotify *nf;

    PQconsumeInput(l->db);
    while ((nf = PQnotifies(l->db)) != NULL) {
        if (nf->be_pid != l->writer_pid)
            l->other++;
        else if (l->n < l->cap)
            l->t[l->n++] = now;
        PQfreemem(nf);
    }
}

struct subs {
    struct sub *v;
    struct pollfd *pfd; /* pfd[0] is the LISTEN connection (or unused), pfd[1 + i] stream i */
    int n, opened;
    char *buf;
    size_t buf_size;
};

static int subs_init(struct subs *ss, int n)
{
    ss->n = n;
    ss->opened = 0;
    ss->v = calloc((size_t)n, sizeof(*ss->v));
    ss->pfd = calloc((size_t)n + 1, sizeof(*ss->pfd));
    ss->buf_size = 64 * 1024;
    ss->buf = malloc(ss->buf_size);
    if (!ss->v || !ss->pfd || !ss->buf)
        return -1;
    for (int i = 0; i <= n; i++)
        ss->pfd[i].fd = -1;
    return 0;
}

/* Opens streams [from, to); cap: how many arrivals each one keeps. */
static int subs_open(struct subs *ss, int from, int to, size_t cap)
{
    for (int i = from; i < to; i++) {
        if (sub_open(&ss->v[i], cap) == 0)
            ss->opened++;
        ss->pfd[1 + i].fd = ss->v[i].fd;
        ss->pfd[1 + i].events = POLLIN;
    }
    return ss->opened == to ? 0 : -1;
}

static void subs_free(struct subs *ss)
{
    for (int i = 0; ss->v && i < ss->n; i++)
        sub_close(&ss->v[i]);
    free(ss->v);
    free(ss->pfd);
    free(ss->buf);
    memset(ss, 0, sizeof(*ss));
}

/* Polls for at most timeout_ms, then reads the LISTEN connection (first, so
 * the baseline does not wait for the streams) and every stream with data. */
static void subs_poll(struct subs *ss, struct listener *l, int timeout_ms)
{
    int r = poll(ss->pfd, (nfds_t)ss->n + 1, timeout_ms);

    if (r <= 0)
        return;
    if (l && ss->pfd[0].revents)
        listener_read(l);
    for (int i = 0; i < ss->n; i++) {
        struct pollfd *p = &ss->pfd[1 + i];
        if (p->fd < 0 || !p->revents)
            continue;
        sub_read(&ss->v[i], ss->buf, ss->buf_size);
        if (ss->v[i].ended)
            p->fd = -1; /* poll ignores it from now on */
    }
}

static int subs_ok(const struct subs *ss)
{
    int ok = 0;

    for (int i = 0; i < ss->n; i++)
        ok += ss->v[i].status == 200 && !ss->v[i].ended;
    return ok;
}

/* Waits until /healthz counts want subscribers, reading the streams
 * meanwhile. Returns the last count seen. */
static long wait_registered(struct subs *ss, long want, double *took)
{
    double t0 = now_s(), next = 0;
    long seen = -1;

    for (;;) {
        subs_poll(ss, NULL, 50);
        if (now_s() < next)
            continue;
        seen = healthz_subscribers();
        if ((seen == want && subs_ok(ss) == ss->opened) || now_s() - t0 > REGISTER_TIMEOUT_S)
            break;
        next = now_s() + 0.2;
    }
    *took = now_s() - t0;
    return seen;
}

/* Waits (at most REAP_TIMEOUT_S) until /healthz counts want subscribers. */
static long wait_count(long want, double *took)
{
    double t0 = now_s();
    long seen;

    while ((seen = healthz_subscribers()) != want && now_s() - t0 < REAP_TIMEOUT_S)
        sleep_s(0.2);
    *took = now_s() - t0;
    return seen;
}

/* Prints how many streams /healthz counts beyond base; 0 when all are in. */
static int report_registered(const struct subs *ss, long base, long seen, double took)
{
    printf("registered=%ld\nstreams_ok=%d\nregister_s=%.2f\n", seen - base, subs_ok(ss), took);
    if (seen == base + ss->opened && subs_ok(ss) == ss->opened)
        return 0;
    fprintf(stderr, "ssebench: /healthz counts %ld of %d streams, %d answered 200\n", seen - base,
            ss->opened, subs_ok(ss));
    return -1;
}

static void raise_nofile(void)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* v sorted. */
static double pct(const double *v, size_t n, double p)
{
    return n ? v[(size_t)(p * (double)(n - 1))] : -1;
}

static void print_dist(const char *key, double *v, size_t n)
{
    size_t neg = 0;

    qsort(v, n, sizeof(*v), cmp_double);
    for (size_t i = 0; i < n; i++)
        neg += v[i] < 0;
    printf("%s_p50_ms=%.3f\n%s_p99_ms=%.3f\n%s_max_ms=%.3f\n%s_samples=%zu\n", key,
           pct(v, n, 0.5) * 1000, key, pct(v, n, 0.99) * 1000, key, n ? v[n - 1] * 1000 : -1, key,
           n);
    /* arrivals stamped before the writer thread saw its commit return:
     * PostgreSQL signals listeners at commit, before it answers the writer,
     * and on a busy machine the writer thread may run late */
    printf("%s_before_t0=%zu\n", key, neg);
}

/* ---- latency ----------------------------------------------------------- */

struct writer {
    PGconn *db;
    const char *run_id;
    int total, interval_ms;
    int64_t *ids;
    double *t0, *rtt;
    atomic_bool finished;
    int failed;
};

static const char *SQL_EVENT =
    "WITH upd AS (UPDATE runs r SET progress = $1::int % 101, step = 'b', updated_at = now() "
    "WHERE r.tenant = 'default' AND r.id = $2 "
    "RETURNING r.tenant, r.id, r.status, r.outcome, r.progress, r.step), "
    "ev AS (INSERT INTO run_events (tenant, run_id, type, status, outcome, progress, step, "
    "message) SELECT tenant, id, 'progress', status, outcome, progress, step, NULL FROM upd "
    "RETURNING id) "
    "SELECT id, pg_notify('opsrun_events', '') FROM ev";

static const char *SQL_COMPLETE =
    "WITH upd AS (UPDATE runs r SET status = 'completed', outcome = 'succeeded', progress = 100, "
    "step = NULL, completed_at = now(), updated_at = now() "
    "WHERE r.tenant = 'default' AND r.id = $1 "
    "RETURNING r.tenant, r.id, r.status, r.outcome, r.progress, r.step), "
    "ev AS (INSERT INTO run_events (tenant, run_id, type, status, outcome, progress, step, "
    "message) SELECT tenant, id, 'status', status, outcome, progress, step, 'bench done' FROM upd "
    "RETURNING id) "
    "SELECT id, pg_notify('opsrun_events', '') FROM ev";

static void *writer_main(void *arg)
{
    struct writer *w = arg;
    struct timespec next;

    clock_gettime(CLOCK_MONOTONIC, &next);
    for (int k = 0; k < w->total; k++) {
        char num[16];
        const char *params[2] = {num, w->run_id};
        PGresult *r;
        double t;
        struct timespec cur;

        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
        snprintf(num, sizeof(num), "%d", k);
        t = now_s();
        r = PQexecParams(w->db, SQL_EVENT, 2, NULL, params, NULL, NULL, 0);
        w->t0[k] = now_s();
        w->rtt[k] = w->t0[k] - t;
        if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
            fprintf(stderr, "ssebench: event write failed: %s", PQerrorMessage(w->db));
            PQclear(r);
            w->failed = 1;
            break;
        }
        w->ids[k] = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
        PQclear(r);
        /* the next slot; no catch-up burst after a slow commit */
        next.tv_nsec += (long)w->interval_ms * 1000000L;
        while (next.tv_nsec >= 1000000000L)
            next.tv_nsec -= 1000000000L, next.tv_sec++;
        clock_gettime(CLOCK_MONOTONIC, &cur);
        if (cur.tv_sec > next.tv_sec || (cur.tv_sec == next.tv_sec && cur.tv_nsec > next.tv_nsec))
            next = cur;
    }
    atomic_store_explicit(&w->finished, true, memory_order_release);
    return NULL;
}

static int64_t find_id(const int64_t *ids, int n, int64_t id)
{
    int lo = 0, hi = n - 1;

    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        if (ids[mid] == id)
            return mid;
        if (ids[mid] < id)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

static PGconn *db_open(const char *conninfo)
{
    PGconn *db = PQconnectdb(conninfo);

    if (PQstatus(db) != CONNECTION_OK) {
        fprintf(stderr, "ssebench: %s", PQerrorMessage(db));
        PQfinish(db);
        return NULL;
    }
    return db;
}

static int exec_ok(PGconn *db, const char *sql, int nparams, const char *const *params)
{
    PGresult *r = PQexecParams(db, sql, nparams, NULL, params, NULL, NULL, 0);
    ExecStatusType st = PQresultStatus(r);
    int ok = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;

    if (!ok)
        fprintf(stderr, "ssebench: %s", PQerrorMessage(db));
    PQclear(r);
    return ok ? 0 : -1;
}

static int latency(const char *conninfo, int nsubs, int events, int interval_ms)
{
    int total = WARMUP + events, rc = 1, failed_subs = 0, ended_subs = 0;
    struct writer w = {0};
    struct listener l = {0};
    struct subs ss = {0};
    pthread_t th;
    bool started = false, opened;
    char run_id[64], ident[64];
    double took, t_end = 0, *lat = NULL, *nlat = NULL, *first = NULL, *last = NULL;
    bool *seen_k = NULL;
    long base, seen;
    size_t pairs = 0, unexpected = 0, out_of_order = 0, overflow = 0, nn = 0, nfirst = 0;

    snprintf(run_id, sizeof(run_id), "bench-%d-%d", (int)getpid(), nsubs);
    snprintf(ident, sizeof(ident), "bench-ident-%d-%d", (int)getpid(), nsubs);
    w.run_id = run_id;
    w.total = total;
    w.interval_ms = interval_ms;
    w.ids = calloc((size_t)total, sizeof(*w.ids));
    w.t0 = calloc((size_t)total, sizeof(*w.t0));
    w.rtt = calloc((size_t)total, sizeof(*w.rtt));
    l.cap = total;
    l.t = calloc((size_t)total, sizeof(*l.t));
    if (!w.ids || !w.t0 || !w.rtt || !l.t)
        goto out;
    w.db = db_open(conninfo);
    l.db = w.db ? db_open(conninfo) : NULL;
    if (!l.db || exec_ok(l.db, "LISTEN opsrun_events", 0, NULL) != 0)
        goto out;
    l.writer_pid = PQbackendPID(w.db);

    /* start from no subscribers, so the count below is ours alone */
    base = wait_count(0, &took);
    printf("subscribers=%d\nevents=%d\nwarmup=%d\ninterval_ms=%d\n", nsubs, events, WARMUP,
           interval_ms);
    printf("stale_subscribers_at_start=%ld\n", base);
    if (base < 0) {
        fprintf(stderr, "ssebench: GET /healthz failed\n");
        goto out;
    }
    if (subs_init(&ss, nsubs) != 0 || subs_open(&ss, 0, nsubs, (size_t)total + 16) != 0) {
        fprintf(stderr, "ssebench: opened %d of %d streams\n", ss.opened, nsubs);
        goto out;
    }
    seen = wait_registered(&ss, base + nsubs, &took);
    if (report_registered(&ss, base, seen, took) != 0)
        goto out;

    /* the run the events belong to, created after the streams opened: they
     * get no snapshot of it, every event of it is live */
    {
        const char *p[2] = {run_id, ident};
        if (exec_ok(w.db,
                    "INSERT INTO runs (tenant, id, type, status, attempt, max_attempts, "
                    "timeout_s, worker_id, input, identity_hash, request_hash) VALUES "
                    "('default', $1, 'demo', 'running', 1, 3, 300, 'bench', '{}', $2, 'req')",
                    2, p) != 0)
            goto out;
    }

    ss.pfd[0].fd = PQsocket(l.db);
    ss.pfd[0].events = POLLIN;
    if (pthread_create(&th, NULL, writer_main, &w) != 0)
        goto out;
    started = true;
    for (;;) {
        int64_t last_id;
        bool all;
        subs_poll(&ss, &l, 20);
        if (!atomic_load_explicit(&w.finished, memory_order_acquire))
            continue;
        if (t_end == 0)
            t_end = now_s();
        listener_read(&l); /* anything libpq has buffered */
        if (w.failed || now_s() - t_end > DRAIN_TIMEOUT_S)
            break;
        last_id = w.ids[total - 1];
        all = l.n >= total;
        for (int i = 0; i < nsubs && all; i++)
            all = ss.v[i].ngot > 0 && ss.v[i].got[ss.v[i].ngot - 1].id >= last_id;
        if (all)
            break;
    }
    pthread_join(th, NULL);
    started = false;
    if (w.failed)
        goto out;

    /* commit -> stream arrival, per (stream, measured event) */
    lat = malloc(((size_t)nsubs * (size_t)events + 1) * sizeof(*lat));
    nlat = malloc(((size_t)total + 1) * sizeof(*nlat));
    first = calloc((size_t)events, sizeof(*first));
    last = calloc((size_t)events, sizeof(*last));
    seen_k = calloc((size_t)total, sizeof(*seen_k));
    if (!lat || !nlat || !first || !last || !seen_k)
        goto out;
    for (int i = 0; i < nsubs; i++) {
        struct sub *s = &ss.v[i];
        int64_t prev = 0;
        failed_subs += s->status != 200;
        ended_subs += s->ended;
        overflow += s->overflow;
        for (size_t j = 0; j < s->ngot; j++) {
            int64_t k = find_id(w.ids, total, s->got[j].id);
            out_of_order += s->got[j].id <= prev;
            prev = s->got[j].id;
            if (k < 0)
                unexpected++;
            else if (k >= WARMUP) {
                double d = s->got[j].t - w.t0[k];
                lat[pairs++] = d;
                if (!seen_k[k] || d < first[k - WARMUP])
                    first[k - WARMUP] = d;
                if (!seen_k[k] || d > last[k - WARMUP])
                    last[k - WARMUP] = d;
                seen_k[k] = true;
            }
        }
    }
    for (int k = WARMUP; k < l.n; k++)
        nlat[nn++] = l.t[k] - w.t0[k];

    print_dist("sse", lat, pairs);
    printf("sse_missing=%zu\n", (size_t)nsubs * (size_t)events - pairs);
    printf("sse_unexpected_ids=%zu\nsse_out_of_order=%zu\nsse_overflow=%zu\n", unexpected,
           out_of_order, overflow);
    printf("sse_failed_streams=%d\nsse_ended_streams=%d\n", failed_subs, ended_subs);
    for (int k = WARMUP; k < total; k++)
        nfirst += seen_k[k];
    /* per event: its first and its last stream (the spread is the fan-out) */
    print_dist("sse_first", first, nfirst);
    print_dist("sse_last", last, nfirst);
    print_dist("notify", nlat, nn);
    printf("notify_missing=%d\nnotify_other=%d\n", total - l.n, l.other);
    {
        double p50 = pct(lat, pairs, 0.5), p99 = pct(lat, pairs, 0.99);
        double n50 = pct(nlat, nn, 0.5), n99 = pct(nlat, nn, 0.99);
        printf("ratio_p50=%.2f\nratio_p99=%.2f\n", n50 > 0 ? p50 / n50 : -1,
               n99 > 0 ? p99 / n99 : -1);
        printf("sse_minus_notify_p50_ms=%.3f\n", (p50 - n50) * 1000);
    }
    qsort(w.rtt + WARMUP, (size_t)events, sizeof(double), cmp_double);
    printf("commit_rtt_p50_ms=%.3f\ncommit_rtt_p99_ms=%.3f\n",
           pct(w.rtt + WARMUP, (size_t)events, 0.5) * 1000,
           pct(w.rtt + WARMUP, (size_t)events, 0.99) * 1000);
    rc = pairs == (size_t)nsubs * (size_t)events && nn == (size_t)events && !failed_subs ? 0 : 1;

out:
    if (started)
        pthread_join(th, NULL);
    opened = ss.opened > 0;
    subs_free(&ss);
    if (w.db && l.db) {
        const char *p[1] = {run_id};
        exec_ok(w.db, SQL_COMPLETE, 1, p); /* leave no active bench run behind */
    }
    if (opened) {
        seen = wait_count(0, &took);
        printf("subscribers_after_close=%ld\nreap_s=%.2f\n", seen, took);
    }
    PQfinish(w.db);
    PQfinish(l.db);
    free(w.ids);
    free(w.t0);
    free(w.rtt);
    free(l.t);
    free(lat);
    free(nlat);
    free(first);
    free(last);
    free(seen_k);
    return rc;
}

/* ---- loglatency ---------------------------------------------------------- */

/* The wall clock minus the monotonic one, in seconds: arrivals are stamped
 * on the monotonic clock, lines' write times on the wall clock. Read many
 * times, keeping the reading whose wall clock was taken in the shortest
 * window between two monotonic ones: a preemption between two reads would
 * shift every latency by its length. */
static double wall_minus_mono(void)
{
    double best = 1e9, offset = 0;

    for (int i = 0; i < 200; i++) {
        struct timespec w;
        double m1 = now_s(), m2;
        clock_gettime(CLOCK_REALTIME, &w);
        m2 = now_s();
        if (m2 - m1 < best) {
            best = m2 - m1;
            offset = (double)w.tv_sec + (double)w.tv_nsec / 1e9 - (m1 + m2) / 2;
        }
    }
    return offset;
}

/* seq -> when opsrun read the line (wall clock, s), for the command's
 * lines (stream stderr); 0 for the others. */
static double *line_times(PGconn *db, const char *run_id, int64_t *nseq)
{
    const char *p[1] = {run_id};
    PGresult *r = PQexecParams(db,
                               "SELECT l.first_seq + x.i - 1, (x.v->>0)::bigint, x.v->>1 FROM "
                               "run_logs l, json_array_elements(l.lines) WITH ORDINALITY "
                               "AS x(v, i) WHERE l.run_id = $1 ORDER BY 1",
                               1, NULL, p, NULL, NULL, 0);
    double *at = NULL;

    *nseq = 0;
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0) {
        *nseq = strtoll(PQgetvalue(r, PQntuples(r) - 1, 0), NULL, 10);
        at = calloc((size_t)*nseq + 1, sizeof(*at));
        for (int i = 0; at && i < PQntuples(r); i++)
            if (strcmp(PQgetvalue(r, i, 2), "stderr") == 0)
                at[strtoll(PQgetvalue(r, i, 0), NULL, 10)] =
                    (double)strtoll(PQgetvalue(r, i, 1), NULL, 10) / 1e6;
    }
    PQclear(r);
    return at;
}

static int loglatency(const char *conninfo, const char *run_id, int nsubs)
{
    struct subs ss = {0};
    PGconn *db = db_open(conninfo);
    double took, offset = wall_minus_mono(), *at = NULL, *lat = NULL, t0;
    long base, seen;
    int64_t nseq = 0, lines = 0;
    size_t pairs = 0, out_of_order = 0, missing = 0;
    int rc = 1, ended = 0;

    snprintf(stream_path, sizeof(stream_path), "/runs/%s/logs/stream", run_id);
    base = wait_count(0, &took);
    printf("subscribers=%d\n", nsubs);
    if (!db || base < 0 || subs_init(&ss, nsubs) != 0 || subs_open(&ss, 0, nsubs, 8192) != 0) {
        fprintf(stderr, "ssebench: could not open the streams\n");
        goto out;
    }
    seen = wait_registered(&ss, base + nsubs, &took);
    if (report_registered(&ss, base, seen, took) != 0)
        goto out;
    for (t0 = now_s(); now_s() - t0 < 300 && ended < nsubs;) {
        subs_poll(&ss, NULL, 50);
        ended = 0;
        for (int i = 0; i < nsubs; i++)
            ended += ss.v[i].ended;
    }
    at = line_times(db, run_id, &nseq);
    lat = malloc(((size_t)nsubs * (size_t)(nseq + 1) + 1) * sizeof(*lat));
    if (!at || !lat)
        goto out;
    for (int64_t k = 1; k <= nseq; k++)
        lines += at[k] > 0;
    for (int i = 0; i < nsubs; i++) {
        struct sub *s = &ss.v[i];
        int64_t prev = 0, got = 0;
        for (size_t j = 0; j < s->ngot; j++) {
            int64_t k = s->got[j].id;
            /* The end frame carries the last line's id (so that a resume
             * after it gets nothing): not a line, and not out of order. */
            if (j == s->ngot - 1 && j > 0 && k == prev)
                break;
            out_of_order += k <= prev;
            prev = k;
            if (k < 1 || k > nseq || at[k] == 0)
                continue;
            lat[pairs++] = s->got[j].t + offset - at[k];
            got++;
        }
        missing += (size_t)(lines - got);
    }
    printf("lines=%lld\nstreams_ended=%d\n", (long long)lines, ended);
    print_dist("line", lat, pairs);
    printf("line_missing=%zu\nline_out_of_order=%zu\n", missing, out_of_order);
    rc = ended == nsubs && missing == 0 && out_of_order == 0 && lines > 0 ? 0 : 1;
out:
    subs_free(&ss);
    PQfinish(db);
    free(at);
    free(lat);
    return rc;
}

/* ---- rss --------------------------------------------------------------- */

static int proc_status(int pid, long *rss_kib, long *threads)
{
    char path[64], line[256];
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    f = fopen(path, "r");
    if (!f)
        return -1;
    *rss_kib = *threads = -1;
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "VmRSS:", 6) == 0)
            *rss_kib = strtol(line + 6, NULL, 10);
        else if (strncmp(line, "Threads:", 8) == 0)
            *threads = strtol(line + 8, NULL, 10);
    }
    fclose(f);
    return *rss_kib >= 0 && *threads >= 0 ? 0 : -1;
}

/* Opens streams [from, to), waits until they are all registered and 2 s
 * more, then reads the server's VmRSS and Threads. */
static int rss_step(struct subs *ss, int from, int to, long base, int pid, long *rss_kib,
                    long *threads)
{
    double took, until;
    long seen;

    if (subs_open(ss, from, to, 0) != 0) {
        fprintf(stderr, "ssebench: opened %d of %d streams\n", ss->opened, to);
        return -1;
    }
    seen = wait_registered(ss, base + to, &took);
    if (report_registered(ss, base, seen, took) != 0)
        return -1;
    until = now_s() + 2;
    while (now_s() < until)
        subs_poll(ss, NULL, 100);
    return proc_status(pid, rss_kib, threads);
}

static int rss(int pid, int nsubs)
{
    struct subs ss = {0};
    long base, seen, rss0, thr0, rss_half, thr_half, rss1, thr1, rss2, thr2;
    double took;
    int rc = 1, half = nsubs / 2;

    base = wait_count(0, &took);
    printf("subscribers=%d\nstale_subscribers_at_start=%ld\n", nsubs, base);
    if (base < 0 || proc_status(pid, &rss0, &thr0) != 0) {
        fprintf(stderr, "ssebench: GET /healthz or /proc/%d/status failed\n", pid);
        return 1;
    }
    /* half, then all: the second half's growth is the cost of a stream
     * without the one-off costs the first streams pay (pool connections,
     * per-thread malloc arenas) */
    if (subs_init(&ss, nsubs) != 0 ||
        (half > 0 && rss_step(&ss, 0, half, base, pid, &rss_half, &thr_half) != 0) ||
        rss_step(&ss, half, nsubs, base, pid, &rss1, &thr1) != 0)
        goto out;
    printf("rss_before_kib=%ld\nrss_after_kib=%ld\n", rss0, rss1);
    printf("rss_per_subscriber_kib=%.1f\n", (double)(rss1 - rss0) / nsubs);
    if (half > 0)
        printf("rss_half_kib=%ld\nrss_marginal_per_subscriber_kib=%.1f\n", rss_half,
               (double)(rss1 - rss_half) / (nsubs - half));
    printf("threads_before=%ld\nthreads_after=%ld\n", thr0, thr1);
    printf("streams_ok_after=%d\n", subs_ok(&ss));
    rc = subs_ok(&ss) == nsubs ? 0 : 1;
    subs_free(&ss);
    seen = wait_count(base, &took);
    if (proc_status(pid, &rss2, &thr2) == 0)
        printf("subscribers_after_close=%ld\nreap_s=%.2f\nrss_after_close_kib=%ld\n"
               "threads_after_close=%ld\n",
               seen, took, rss2, thr2);
out:
    subs_free(&ss);
    return rc;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    raise_nofile();
    if (argc >= 7 && strcmp(argv[1], "latency") == 0 && parse_url(argv[2]) == 0) {
        int n = atoi(argv[4]), e = atoi(argv[5]), iv = atoi(argv[6]);
        if (n >= 1 && e >= 1 && iv >= 0)
            return latency(argv[3], n, e, iv);
    } else if (argc >= 6 && strcmp(argv[1], "loglatency") == 0 && parse_url(argv[2]) == 0) {
        int n = atoi(argv[5]);
        if (n >= 1)
            return loglatency(argv[3], argv[4], n);
    } else if (argc >= 5 && strcmp(argv[1], "rss") == 0 && parse_url(argv[2]) == 0) {
        int pid = atoi(argv[3]), n = atoi(argv[4]);
        if (pid > 0 && n >= 1)
            return rss(pid, n);
    }
    fprintf(stderr, "usage: ssebench latency URL DBCONNINFO SUBSCRIBERS EVENTS INTERVAL_MS\n"
                    "       ssebench loglatency URL DBCONNINFO RUN_ID SUBSCRIBERS\n"
                    "       ssebench rss URL SERVER_PID SUBSCRIBERS\n");
    return 2;
}
