/* tests/support/sse.c — see sse.h. */
#include "sse.h"

#include "harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

/* Reads once (waiting up to timeout_ms); false on timeout. Sets eof. */
static bool read_some(struct th_sse *s, int timeout_ms)
{
    struct pollfd pf = {s->fd, POLLIN, 0};
    ssize_t n;

    if (s->eof)
        return false;
    if (s->blen == sizeof(s->buf))
        ck_abort_msg("sse client: buffer full (a line longer than %zu bytes?)", sizeof(s->buf));
    if (poll(&pf, 1, timeout_ms < 0 ? 0 : timeout_ms) <= 0)
        return false;
    n = recv(s->fd, s->buf + s->blen, sizeof(s->buf) - s->blen, 0);
    if (n <= 0) {
        s->eof = true;
        return true;
    }
    s->blen += (size_t)n;
    return true;
}

static void consume(struct th_sse *s, size_t n)
{
    memmove(s->buf, s->buf + n, s->blen - n);
    s->blen -= n;
}

static void text_append(struct th_sse *s, const char *p, size_t n)
{
    if (s->tlen + n + 1 > s->tcap) {
        s->tcap = (s->tlen + n + 1) * 2;
        s->text = realloc(s->text, s->tcap);
    }
    memcpy(s->text + s->tlen, p, n);
    s->tlen += n;
    s->text[s->tlen] = '\0';
    s->received += (long long)n;
}

/* Moves decoded body bytes from buf to text. */
static void decode(struct th_sse *s)
{
    while (s->blen > 0 && !s->clean_end) {
        if (!s->chunked) {
            text_append(s, s->buf, s->blen);
            consume(s, s->blen);
            return;
        }
        if (s->chunk_left < 0) {
            char *crlf = memmem(s->buf, s->blen, "\r\n", 2);
            if (!crlf)
                return;
            s->chunk_left = strtol(s->buf, NULL, 16);
            consume(s, (size_t)(crlf - s->buf) + 2);
            if (s->chunk_left == 0)
                s->clean_end = true;
            continue;
        }
        if (s->chunk_left > 0) {
            size_t k = s->blen < (size_t)s->chunk_left ? s->blen : (size_t)s->chunk_left;
            text_append(s, s->buf, k);
            consume(s, k);
            s->chunk_left -= (long)k;
            continue;
        }
        if (s->blen < 2)
            return;
        consume(s, 2); /* the CRLF after a chunk */
        s->chunk_left = -1;
    }
}

static void header_value(const char *hdrs, const char *name, char *out, size_t cap)
{
    size_t n = strlen(name);

    out[0] = '\0';
    for (const char *p = hdrs; p && *p; p = strstr(p, "\r\n"), p = p ? p + 2 : NULL) {
        if (strncasecmp(p, name, n) == 0 && p[n] == ':') {
            const char *v = p + n + 1, *e = strstr(v, "\r\n");
            while (*v == ' ')
                v++;
            snprintf(out, cap, "%.*s", (int)(e ? e - v : (long)strlen(v)), v);
            return;
        }
    }
}

/* Reads the status line and headers; leaves body bytes in buf. */
static void read_head(struct th_sse *s)
{
    long long until = th_now_ms() + 10000;
    char *end;
    char hdrs[8192], te[64], cl[32];

    while (!(end = memmem(s->buf, s->blen, "\r\n\r\n", 4))) {
        if (s->eof || th_now_ms() > until)
            ck_abort_msg("sse client: no response head (eof=%d)", s->eof);
        read_some(s, 100);
    }
    snprintf(hdrs, sizeof(hdrs), "%.*s", (int)(end - s->buf + 2), s->buf);
    consume(s, (size_t)(end - s->buf) + 4);
    s->status = strtol(hdrs + 9, NULL, 10);
    header_value(hdrs, "content-type", s->content_type, sizeof(s->content_type));
    header_value(hdrs, "cache-control", s->cache_control, sizeof(s->cache_control));
    header_value(hdrs, "x-accel-buffering", s->accel, sizeof(s->accel));
    header_value(hdrs, "retry-after", s->retry_after, sizeof(s->retry_after));
    header_value(hdrs, "www-authenticate", s->www_authenticate, sizeof(s->www_authenticate));
    header_value(hdrs, "transfer-encoding", te, sizeof(te));
    header_value(hdrs, "content-length", cl, sizeof(cl));
    s->chunked = strcasecmp(te, "chunked") == 0;
    if (s->status != 200) { /* a problem: read the whole (small) body */
        long want = s->status == 204 ? 0 : cl[0] ? atol(cl) : -1; /* 204: never a body */
        while (!s->clean_end && !s->eof && th_now_ms() < until &&
               (want < 0 || (long)(s->tlen + s->blen) < want)) {
            decode(s);
            read_some(s, 100);
        }
        decode(s);
        s->body_text = strdup(s->text ? s->text : "");
        th_record_exchange("GET", s->path, s->status, s->content_type, s->body_text,
                           strlen(s->body_text), NULL);
    } else {
        th_record_exchange("GET", s->path, s->status, s->content_type, NULL, 0, NULL);
    }
}

static struct th_sse *sse_open(int port, const char *path, const char *last_event_id,
                               const char *token, int rcvbuf)
{
    struct th_sse *s = calloc(1, sizeof(*s));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    char req[2048];
    int n;

    s->chunk_left = -1;
    s->retry_ms = -1;
    snprintf(s->path, sizeof(s->path), "%s", path);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    s->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (rcvbuf > 0)
        setsockopt(s->fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    if (s->fd < 0 || connect(s->fd, (struct sockaddr *)&a, sizeof(a)) != 0)
        ck_abort_msg("sse client: could not connect to port %d: %s", port, strerror(errno));
    n = snprintf(req, sizeof(req),
                 "GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nAccept: text/event-stream\r\n"
                 "%s%s%s%s%s%s\r\n",
                 path, port, last_event_id ? "Last-Event-ID: " : "",
                 last_event_id ? last_event_id : "", last_event_id ? "\r\n" : "",
                 token ? "Authorization: Bearer " : "", token ? token : "", token ? "\r\n" : "");
    if (n < 0 || (size_t)n >= sizeof(req) || send(s->fd, req, (size_t)n, MSG_NOSIGNAL) != n)
        ck_abort_msg("sse client: could not send the request");
    read_head(s);
    return s;
}

struct th_sse *th_sse_open(int port, const char *path, const char *last_event_id, int rcvbuf)
{
    return sse_open(port, path, last_event_id, NULL, rcvbuf);
}

struct th_sse *th_sse_open_token(int port, const char *path, const char *token,
                                 const char *last_event_id)
{
    return sse_open(port, path, last_event_id, token, 0);
}

/* Parses one complete event block out of text, if there is one. */
static bool parse_event(struct th_sse *s, struct th_sse_event *ev)
{
    for (;;) {
        char *end = s->text ? strstr(s->text, "\n\n") : NULL;
        char *line, *next;
        bool any = false;
        if (!end)
            return false;
        memset(ev, 0, sizeof(*ev));
        *end = '\0';
        for (line = s->text; line; line = next) {
            char *nl = strchr(line, '\n');
            next = nl ? nl + 1 : NULL;
            if (nl)
                *nl = '\0';
            if (line[0] == ':') {
                s->comments++;
            } else if (strncmp(line, "id: ", 4) == 0) {
                ev->has_id = true;
                ev->id = atoll(line + 4);
                any = true;
            } else if (strncmp(line, "event: ", 7) == 0) {
                snprintf(ev->event, sizeof(ev->event), "%s", line + 7);
            } else if (strncmp(line, "retry: ", 7) == 0) {
                s->retry_ms = atoi(line + 7);
            } else if (strncmp(line, "data: ", 6) == 0) {
                size_t old = ev->data ? strlen(ev->data) : 0, add = strlen(line + 6);
                ev->data = realloc(ev->data, old + add + 2);
                if (old)
                    ev->data[old++] = '\n';
                memcpy(ev->data + old, line + 6, add + 1);
                any = true;
            }
        }
        s->tlen -= (size_t)(end + 2 - s->text);
        memmove(s->text, end + 2, s->tlen + 1);
        if (any) {
            if (ev->data)
                ev->json = json_loads(ev->data, 0, NULL);
            return true;
        }
        free(ev->data);
    }
}

int th_sse_next(struct th_sse *s, struct th_sse_event *ev, int timeout_ms)
{
    long long until = th_now_ms() + timeout_ms;

    for (;;) {
        decode(s);
        if (parse_event(s, ev)) {
            if (ev->data)
                th_record_exchange("GET", s->path, s->status, s->content_type, ev->data,
                                   strlen(ev->data), ev->event[0] ? ev->event : "message");
            return 1;
        }
        if (s->clean_end || (s->eof && s->blen == 0))
            return -1;
        if (th_now_ms() >= until)
            return 0;
        read_some(s, (int)(until - th_now_ms()));
    }
}

int th_sse_until(struct th_sse *s, const char *event, struct th_sse_event *ev, int timeout_ms)
{
    long long until = th_now_ms() + timeout_ms;
    int r;

    while ((r = th_sse_next(s, ev, (int)(until - th_now_ms()))) == 1) {
        if (!event || strcmp(ev->event, event) == 0)
            return 1;
        th_sse_event_free(ev);
    }
    return r;
}

void th_sse_event_free(struct th_sse_event *ev)
{
    free(ev->data);
    json_decref(ev->json);
    memset(ev, 0, sizeof(*ev));
}

void th_sse_close(struct th_sse *s)
{
    if (!s)
        return;
    close(s->fd);
    free(s->text);
    free(s->body_text);
    free(s);
}
