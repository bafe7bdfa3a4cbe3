/* bench/pollbench.c — a fake remote jobs API for bench/poller.sh:
 *
 *   pollbench fake PORT [THREADS]
 *       serves on 127.0.0.1:PORT with libmicrohttpd (epoll, a pool of
 *       THREADS threads, default 2) until SIGINT or SIGTERM:
 *         GET  /jobs/<id>  200 {"state":"RUNNING"}, counted (a check)
 *         POST /jobs       201 {"id":"job-N"}, counted (a submit)
 *         GET  /stats      200 {"checks": N, "submits": M}
 *       Every answer is application/json. The check answer is one shared,
 *       prebuilt response, so a check costs the fake an accept, a parse and a
 *       write. On exit it prints checks=N and submits=M.
 *   pollbench hammer PORT SECONDS THREADS
 *       the fake's own capacity on this machine: THREADS client threads each
 *       open a new connection per request (as opsrun's checks do), send
 *       GET /jobs/hammer and read the answer to the end, for SECONDS.
 *       Prints hammer_requests, hammer_per_s and hammer_failures. The client
 *       shares the cores with the fake, so this is a lower bound.
 *
 * Output is one "key=value" line per figure. */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CONNECTION_LIMIT 4000
#define CONNECTION_TIMEOUT_S 30
#define BACKLOG 1024
#define MAX_HAMMER_THREADS 64

static atomic_llong checks, submits;
static struct MHD_Response *running_resp, *not_found_resp;
static const char RUNNING[] = "{\"state\":\"RUNNING\"}";
static const char NOT_FOUND[] = "{\"error\":\"not found\"}";

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- the fake ------------------------------------------------------------ */

static enum MHD_Result reply_copy(struct MHD_Connection *conn, unsigned code, const char *body)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
    enum MHD_Result rv;

    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    rv = MHD_queue_response(conn, code, r);
    MHD_destroy_response(r);
    return rv;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **req)
{
    static int first_call;
    char body[128];

    (void)cls;
    (void)version;
    (void)upload;
    if (*req == NULL) { /* headers read; the body (if any) comes next */
        *req = &first_call;
        return MHD_YES;
    }
    if (*upload_size) { /* a submit's body: not needed */
        *upload_size = 0;
        return MHD_YES;
    }
    if (strcmp(method, "GET") == 0 && strncmp(url, "/jobs/", 6) == 0 && url[6]) {
        atomic_fetch_add_explicit(&checks, 1, memory_order_relaxed);
        return MHD_queue_response(conn, MHD_HTTP_OK, running_resp);
    }
    if (strcmp(method, "POST") == 0 && strcmp(url, "/jobs") == 0) {
        long long n = atomic_fetch_add_explicit(&submits, 1, memory_order_relaxed) + 1;
        snprintf(body, sizeof(body), "{\"id\":\"job-%lld\"}", n);
        return reply_copy(conn, MHD_HTTP_CREATED, body);
    }
    if (strcmp(method, "GET") == 0 && strcmp(url, "/stats") == 0) {
        snprintf(body, sizeof(body), "{\"checks\": %lld, \"submits\": %lld}",
                 (long long)atomic_load(&checks), (long long)atomic_load(&submits));
        return reply_copy(conn, MHD_HTTP_OK, body);
    }
    return MHD_queue_response(conn, MHD_HTTP_NOT_FOUND, not_found_resp);
}

static struct MHD_Response *shared_response(const char *body)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_PERSISTENT);
    if (r)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    return r;
}

static int fake(int port, int threads)
{
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    struct MHD_Daemon *d;
    sigset_t set;
    int sig = 0;

    /* Block the stop signals in every thread; the main thread waits for them. */
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    running_resp = shared_response(RUNNING);
    not_found_resp = shared_response(NOT_FOUND);
    if (!running_resp || !not_found_resp) {
        fprintf(stderr, "pollbench: could not build the responses\n");
        return 1;
    }
    d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG,
                         (uint16_t)port, NULL, NULL, &handle, NULL, MHD_OPTION_SOCK_ADDR,
                         (struct sockaddr *)&addr, MHD_OPTION_THREAD_POOL_SIZE,
                         (unsigned int)threads, MHD_OPTION_CONNECTION_LIMIT,
                         (unsigned int)CONNECTION_LIMIT, MHD_OPTION_CONNECTION_TIMEOUT,
                         (unsigned int)CONNECTION_TIMEOUT_S, MHD_OPTION_LISTEN_BACKLOG_SIZE,
                         (unsigned int)BACKLOG, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "pollbench: could not listen on 127.0.0.1:%d\n", port);
        MHD_destroy_response(running_resp);
        MHD_destroy_response(not_found_resp);
        return 1;
    }
    fprintf(stderr, "pollbench: serving on 127.0.0.1:%d with %d threads\n", port, threads);
    sigwait(&set, &sig);
    MHD_stop_daemon(d);
    MHD_destroy_response(running_resp);
    MHD_destroy_response(not_found_resp);
    printf("checks=%lld\nsubmits=%lld\n", (long long)atomic_load(&checks),
           (long long)atomic_load(&submits));
    return 0;
}

/* ---- the hammer ---------------------------------------------------------- */

struct hammer {
    int port;
    double until;
    long ok, failed;
};

/* One request on a new connection; 1 when the answer was a 200. */
static int hammer_one(int port)
{
    static const char req[] = "GET /jobs/hammer HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                              "Connection: close\r\n\r\n";
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    char buf[1024];
    size_t got = 0;
    ssize_t n;
    int fd = socket(AF_INET, SOCK_STREAM, 0), ok = 0;

    if (fd < 0)
        return 0;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0 &&
        write(fd, req, sizeof(req) - 1) == (ssize_t)(sizeof(req) - 1)) {
        while ((n = read(fd, buf + got, sizeof(buf) - 1 - got)) > 0) {
            got += (size_t)n;
            if (got == sizeof(buf) - 1)
                break;
        }
        buf[got] = '\0';
        ok = strncmp(buf, "HTTP/1.1 200", 12) == 0 && strstr(buf, RUNNING) != NULL;
    }
    close(fd);
    return ok;
}

static void *hammer_main(void *arg)
{
    struct hammer *h = arg;

    while (now_s() < h->until) {
        if (hammer_one(h->port))
            h->ok++;
        else
            h->failed++;
    }
    return NULL;
}

static int hammer(int port, double seconds, int threads)
{
    pthread_t th[MAX_HAMMER_THREADS];
    struct hammer h[MAX_HAMMER_THREADS];
    long ok = 0, failed = 0;
    double t0 = now_s(), t1;

    for (int i = 0; i < threads; i++) {
        h[i] = (struct hammer){.port = port, .until = t0 + seconds};
        pthread_create(&th[i], NULL, hammer_main, &h[i]);
    }
    for (int i = 0; i < threads; i++) {
        pthread_join(th[i], NULL);
        ok += h[i].ok;
        failed += h[i].failed;
    }
    t1 = now_s();
    printf("hammer_threads=%d\nhammer_s=%.1f\nhammer_requests=%ld\nhammer_per_s=%.0f\n"
           "hammer_failures=%ld\n",
           threads, t1 - t0, ok, ok / (t1 - t0), failed);
    return failed ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "fake") == 0) {
        int threads = argc >= 4 ? atoi(argv[3]) : 2;
        return fake(atoi(argv[2]), threads < 1 ? 1 : threads > 64 ? 64 : threads);
    }
    if (argc >= 5 && strcmp(argv[1], "hammer") == 0) {
        int threads = atoi(argv[4]);
        return hammer(atoi(argv[2]), atof(argv[3]),
                      threads < 1                    ? 1
                      : threads > MAX_HAMMER_THREADS ? MAX_HAMMER_THREADS
                                                     : threads);
    }
    fprintf(stderr, "usage: pollbench fake PORT [THREADS] | hammer PORT SECONDS THREADS\n");
    return 2;
}
