/* server/http.c — the HTTP front end's life cycle (server/http.h): the
 * listening socket, bound at start-up (http_listen.c); the connection
 * records (http_conn.c); the daemon, started over the socket with what its
 * callbacks call (below) and stopped. Every libmicrohttpd call is in
 * http_mhd.c, which calls nothing above it: this file hands it the steps
 * of a request (http_request.c) and the reads of an event stream
 * (http_stream.c) as a table. */
#include "server/http.h"

#include "server/http_conn.h"
#include "server/http_internal.h"
#include "server/http_listen.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static const struct http_calls http_calls = {
    .request_new = http_request_new,
    .request_begin = http_request_begin,
    .request_step = http_request_step,
    .request_done = http_request_done,
    .stream_read = http_stream_read,
    .stream_free = http_stream_free,
};

enum status http_bind(const char *listen, struct http **out, struct error *err)
{
    struct http *h = xcalloc(1, sizeof(*h));
    enum status st = http_listen_open(listen, &h->fd, &h->port, err);

    *out = NULL;
    if (st != ST_OK) {
        free(h);
        return st;
    }
    xsnprintf(h->listen, sizeof(h->listen), "%s", listen);
    *out = h;
    return ST_OK;
}

enum status http_start(struct http *h, const struct hctx *hc, struct error *err)
{
    enum status st;

    h->hc = hc;
    h->calls = &http_calls;
    h->conns = http_conns_new(hc->limits, hc->cfg->http.request_deadline_s);
    st = http_conns_start(h->conns, err);
    if (st != ST_OK)
        return st;
    h->d = http_mhd_start(h);
    if (!h->d) {
        /* The daemon may have closed the socket as it failed; it is not
         * closed again, since another thread may have its number by now. */
        h->fd = -1;
        return error_set(err, ST_UNAVAILABLE,
                         "could not serve on %s: libmicrohttpd did not start (its warning "
                         "above says why)",
                         h->listen);
    }
    return ST_OK;
}

unsigned http_port(const struct http *h)
{
    return h->port;
}

bool http_wait_deferred(struct http *h, int timeout_ms)
{
    int64_t until = clock_mono_ms() + timeout_ms;

    while (h && atomic_load(&h->deferred) > 0) {
        if (clock_mono_ms() >= until)
            return false;
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return true;
}

void http_stop(struct http *h)
{
    if (!h)
        return;
    if (h->d)
        http_mhd_stop(h); /* closes every connection, and so their records, and the socket */
    else if (h->fd >= 0)
        close(h->fd);
    http_conns_free(h->conns);
    free(h);
}
