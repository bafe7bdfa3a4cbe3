/* bench/hooksink.c — the webhook receiver of bench/notifications.sh, cheap
 * enough that it takes little of the machine opsrun and PostgreSQL share:
 *
 *   hooksink PORT OUT
 *       serves 127.0.0.1:PORT (libmicrohttpd, a thread per connection,
 *       keep-alive) until SIGTERM: every POST is answered 204, and one line
 *       "<lateness ms> <Opsrun-Delivery>" is appended to OUT, the lateness
 *       being the arrival minus the run's completed_at in the body (both
 *       this machine's clock: PostgreSQL runs here too). A POST to
 *       /sleep/<ms>/... is answered after <ms>, and not recorded.
 *
 * Output lines are written whole (one write each, O_APPEND). */
#include <arpa/inet.h>
#include <fcntl.h>
#include <jansson.h>
#include <microhttpd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BODY_MAX (1024 * 1024)

static int out_fd = -1;

struct req {
    char *body;
    size_t len;
    double arrived;
};

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* "2026-11-27T10:00:00.123456Z" as Unix seconds; -1 when malformed. */
static double parse_ts(const char *s)
{
    struct tm tm = {0};
    double frac = 0;
    const char *p;

    if (!s || !(p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm)))
        return -1;
    if (*p == '.')
        frac = strtod(p, NULL);
    return (double)timegm(&tm) + frac;
}

static void record(const struct req *r, struct MHD_Connection *c)
{
    json_t *doc = json_loadb(r->body ? r->body : "", r->len, 0, NULL);
    double done =
        parse_ts(json_string_value(json_object_get(json_object_get(doc, "run"), "completed_at")));
    const char *id = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Opsrun-Delivery");
    char line[160];
    int n;

    if (done > 0) {
        n = snprintf(line, sizeof(line), "%.3f %s\n", (r->arrived - done) * 1000.0, id ? id : "-");
        if (n > 0 && write(out_fd, line, (size_t)n) != n)
            perror("hooksink: write");
    }
    json_decref(doc);
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *data,
                              size_t *size, void **state)
{
    struct req *r = *state;
    struct MHD_Response *resp;
    enum MHD_Result ret;

    (void)cls, (void)version;
    if (!r) {
        r = calloc(1, sizeof(*r));
        if (!r)
            return MHD_NO;
        r->arrived = now_s();
        *state = r;
        return MHD_YES;
    }
    if (*size) {
        if (r->len + *size <= BODY_MAX) {
            char *b = realloc(r->body, r->len + *size + 1);
            if (!b)
                return MHD_NO;
            memcpy(b + r->len, data, *size);
            r->body = b;
            r->len += *size;
            r->body[r->len] = '\0';
        }
        *size = 0;
        return MHD_YES;
    }
    if (strncmp(url, "/sleep/", 7) == 0)
        usleep((useconds_t)atoi(url + 7) * 1000u);
    else if (strcmp(method, "POST") == 0)
        record(r, c);
    resp = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
    ret = MHD_queue_response(c, MHD_HTTP_NO_CONTENT, resp);
    MHD_destroy_response(resp);
    return ret;
}

static void done(void *cls, struct MHD_Connection *c, void **state,
                 enum MHD_RequestTerminationCode code)
{
    struct req *r = *state;

    (void)cls, (void)c, (void)code;
    if (r) {
        free(r->body);
        free(r);
    }
    *state = NULL;
}

int main(int argc, char **argv)
{
    struct MHD_Daemon *d;
    struct sockaddr_in addr = {.sin_family = AF_INET};
    sigset_t set;
    int sig;

    if (argc != 3) {
        fprintf(stderr, "usage: hooksink PORT OUT\n");
        return 2;
    }
    out_fd = open(argv[2], O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (out_fd < 0) {
        perror(argv[2]);
        return 1;
    }
    addr.sin_port = htons((uint16_t)atoi(argv[1]));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                             MHD_USE_POLL,
                         (uint16_t)atoi(argv[1]), NULL, NULL, answer, NULL, MHD_OPTION_SOCK_ADDR,
                         (struct sockaddr *)&addr, MHD_OPTION_NOTIFY_COMPLETED, done, NULL,
                         MHD_OPTION_CONNECTION_TIMEOUT, 120u, MHD_OPTION_LISTENING_ADDRESS_REUSE,
                         1u, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "hooksink: could not listen on port %s\n", argv[1]);
        return 1;
    }
    sigwait(&set, &sig);
    MHD_stop_daemon(d);
    close(out_fd);
    return 0;
}
