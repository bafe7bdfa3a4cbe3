/* tests/support/receiver.c — see receiver.h. */
#include "receiver.h"

#include "harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* After the system headers: common.h poisons names some of them declare. */
#include "common/digest.h"
#include "common/dynbuf.h"
#include "common/encoding.h"

/* The longest request body kept: far above any notification opsrun sends. */
#define BODY_MAX ((size_t)1 << 20)
#define MAX_RECORDS 20000
#define MAX_STEPS 16

struct receiver {
    struct MHD_Daemon *daemon;
    int port;
    pthread_mutex_t mu;  /* everything below */
    pthread_cond_t cond; /* broadcast at the stop: delayed answers end */
    bool stopping;
    struct rcv_request *records[MAX_RECORDS];
    int nrecords;
};

/* One request's context: its body so far. */
struct conn {
    struct dynbuf body;
    bool started;
};

/* What to answer: a status, after a delay. */
struct answer {
    unsigned status;
    long delay_ms;
};

/* The step of a /codes/ path for its k-th request (from 1). */
static struct answer codes_step(const char *steps, int k)
{
    struct answer a = {200, 0};
    const char *p = steps;

    for (int i = 1; p && *p && *p != '/'; i++) {
        char *end;
        a.status = (unsigned)strtoul(p, &end, 10);
        a.delay_ms = *end == '@' ? strtol(end + 1, &end, 10) : 0;
        if (i == k || *end != ',')
            break;
        p = end + 1;
    }
    return a;
}

/* The answer the path calls for; k: the requests to this exact path so far,
 * this one included. */
static struct answer answer_for(const char *path, int k)
{
    struct answer a = {200, 0};

    if (strncmp(path, "/codes/", 7) == 0)
        return codes_step(path + 7, k);
    if (strncmp(path, "/sleep/", 7) == 0)
        a.delay_ms = strtol(path + 7, NULL, 10);
    else if (strncmp(path, "/gone/", 6) == 0)
        a.status = 410;
    return a;
}

static void header_copy(struct MHD_Connection *c, const char *name, char *out, size_t cap)
{
    const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);

    snprintf(out, cap, "%s", v ? v : "");
}

/* Records a request that has just arrived (rv->mu held); its number among
 * those to the same path into *k. NULL when the record is full. */
static struct rcv_request *record(struct receiver *rv, struct MHD_Connection *c, const char *url,
                                  const char *method, struct conn *cn, int *k)
{
    struct rcv_request *r;

    *k = 1;
    for (int i = 0; i < rv->nrecords; i++)
        *k += strcmp(rv->records[i]->path, url) == 0;
    if (rv->nrecords == MAX_RECORDS)
        return NULL;
    r = calloc(1, sizeof(*r));
    snprintf(r->method, sizeof(r->method), "%s", method);
    snprintf(r->path, sizeof(r->path), "%s", url);
    header_copy(c, "Opsrun-Event", r->event, sizeof(r->event));
    header_copy(c, "Opsrun-Delivery", r->delivery, sizeof(r->delivery));
    header_copy(c, "Opsrun-Signature", r->signature, sizeof(r->signature));
    header_copy(c, "Content-Type", r->content_type, sizeof(r->content_type));
    r->body = dynbuf_take(&cn->body);
    r->at_ms = th_now_ms();
    rv->records[rv->nrecords++] = r;
    return r;
}

/* Waits until delay_ms have passed or the receiver stops (rv->mu held). */
static void delay(struct receiver *rv, long delay_ms)
{
    struct timespec until;

    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += delay_ms / 1000;
    until.tv_nsec += (delay_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    while (!rv->stopping && pthread_cond_timedwait(&rv->cond, &rv->mu, &until) != ETIMEDOUT)
        ;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *data,
                                  size_t *size, void **con_cls)
{
    struct receiver *rv = cls;
    struct conn *cn = *con_cls;
    struct rcv_request *r;
    struct answer a;
    struct MHD_Response *resp;
    enum MHD_Result ret;
    int k;

    (void)version;
    if (!cn->started) {
        cn->started = true;
        return MHD_YES;
    }
    if (*size) {
        if (dynbuf_add(&cn->body, data, *size) != ST_OK)
            return MHD_NO; /* past BODY_MAX: drop the connection */
        *size = 0;
        return MHD_YES;
    }
    pthread_mutex_lock(&rv->mu);
    r = record(rv, c, url, method, cn, &k);
    a = answer_for(url, k);
    if (a.delay_ms > 0)
        delay(rv, a.delay_ms);
    pthread_mutex_unlock(&rv->mu);
    resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    ret = MHD_queue_response(c, a.status, resp);
    MHD_destroy_response(resp);
    pthread_mutex_lock(&rv->mu);
    if (r) {
        r->status = a.status;
        r->answered_ms = th_now_ms();
    }
    pthread_mutex_unlock(&rv->mu);
    return ret;
}

static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
    struct conn *cn = calloc(1, sizeof(*cn));

    (void)cls, (void)uri, (void)c;
    dynbuf_init(&cn->body, BODY_MAX);
    return cn;
}

static void on_done(void *cls, struct MHD_Connection *c, void **con_cls,
                    enum MHD_RequestTerminationCode toe)
{
    struct conn *cn = *con_cls;

    (void)cls, (void)c, (void)toe;
    if (cn) {
        dynbuf_free(&cn->body);
        free(cn);
    }
    *con_cls = NULL;
}

static struct MHD_Daemon *listen_on(struct receiver *rv, int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG,
        (uint16_t)port, NULL, NULL, on_request, rv, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
        MHD_OPTION_NOTIFY_COMPLETED, on_done, NULL, MHD_OPTION_URI_LOG_CALLBACK, on_uri, NULL,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned int)1000, MHD_OPTION_END);
}

struct receiver *receiver_start(void)
{
    struct receiver *rv = calloc(1, sizeof(*rv));
    pthread_condattr_t ca;

    pthread_mutex_init(&rv->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&rv->cond, &ca);
    pthread_condattr_destroy(&ca);
    /* The port is free when chosen, but a process of another checkout may
     * take it before the bind: then another. */
    for (int tries = 0; tries < 5 && !rv->daemon; tries++) {
        rv->port = th_free_port();
        rv->daemon = listen_on(rv, rv->port);
    }
    ck_assert_msg(rv->daemon != NULL, "could not start the notification receiver");
    return rv;
}

void receiver_stop(struct receiver *rv)
{
    if (!rv)
        return;
    pthread_mutex_lock(&rv->mu);
    rv->stopping = true;
    pthread_cond_broadcast(&rv->cond);
    pthread_mutex_unlock(&rv->mu);
    MHD_stop_daemon(rv->daemon);
    for (int i = 0; i < rv->nrecords; i++) {
        free(rv->records[i]->body);
        free(rv->records[i]);
    }
    pthread_cond_destroy(&rv->cond);
    pthread_mutex_destroy(&rv->mu);
    free(rv);
}

int receiver_port(const struct receiver *rv)
{
    return rv->port;
}

void receiver_url(const struct receiver *rv, const char *path, char *out, size_t cap)
{
    snprintf(out, cap, "http://127.0.0.1:%d%s", rv->port, path);
}

int receiver_requests(struct receiver *rv, const char *path, struct rcv_request *out, int max)
{
    int n = 0;

    pthread_mutex_lock(&rv->mu);
    for (int i = 0; i < rv->nrecords; i++) {
        if (path && strcmp(rv->records[i]->path, path) != 0)
            continue;
        if (n < max) {
            out[n] = *rv->records[i];
            out[n].body = strdup(rv->records[i]->body);
        }
        n++;
    }
    pthread_mutex_unlock(&rv->mu);
    return n;
}

void rcv_requests_free(struct rcv_request *r, int n)
{
    for (int i = 0; r && i < n; i++) {
        free(r[i].body);
        r[i].body = NULL;
    }
}

int receiver_count(struct receiver *rv, const char *path, int *in_flight)
{
    int n = 0, open = 0;

    pthread_mutex_lock(&rv->mu);
    for (int i = 0; i < rv->nrecords; i++) {
        if (path && strcmp(rv->records[i]->path, path) != 0)
            continue;
        n++;
        open += rv->records[i]->status == 0;
    }
    pthread_mutex_unlock(&rv->mu);
    if (in_flight)
        *in_flight = open;
    return n;
}

int receiver_wait(struct receiver *rv, const char *path, int n, int timeout_ms)
{
    long long until = th_now_ms() + timeout_ms;
    int got;

    while ((got = receiver_count(rv, path, NULL)) < n && th_now_ms() < until)
        th_sleep_ms(20);
    return got;
}

void receiver_sign(const char *secret, long long t, const char *body, char *out, size_t cap)
{
    struct hmac_sha256 h;
    unsigned char mac[32];
    char ts[32], hex[65];

    snprintf(ts, sizeof(ts), "%lld.", t);
    hmac_sha256_init(&h, secret, strlen(secret));
    hmac_sha256_update(&h, ts, strlen(ts));
    hmac_sha256_update(&h, body, strlen(body));
    hmac_sha256_final(&h, mac);
    hex_encode(mac, sizeof(mac), hex);
    snprintf(out, cap, "t=%lld,v1=%s", t, hex);
}

bool receiver_signature_ok(const char *secret, const char *header, const char *body, long long *t)
{
    char want[128], *end;
    long long when;

    if (strncmp(header, "t=", 2) != 0)
        return false;
    when = strtoll(header + 2, &end, 10);
    if (end == header + 2 || strncmp(end, ",v1=", 4) != 0)
        return false;
    if (t)
        *t = when;
    receiver_sign(secret, when, body, want, sizeof(want));
    return strcmp(header, want) == 0;
}
