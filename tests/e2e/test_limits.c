/* tests/e2e/test_limits.c — the per-client limits of the real binary over
 * real sockets: a client trickling its headers or its body (slowloris) is
 * answered 408 and cut at the request deadline while a normal client is
 * served throughout and an event stream keeps going; an idle connection
 * is closed without an answer; a flood of connections from one address is
 * answered 429, then refused at accept, while another address (127.0.0.2)
 * is served; a burst of submissions gets 429 with Retry-After, and
 * succeeds again after waiting; event streams beyond their tenant's limit
 * get 429 while the open ones keep working; and the /healthz counters
 * move with each refusal.
 *
 * Timing bounds are generous: a deadline of 2 s must cut a connection
 * between 1.5 s and 6 s. */
#include "../support/harness.h"
#include "../support/sse.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- helpers ---------------------------------------------------------- */

/* A connection to 127.0.0.1:port from the address src, non-blocking once
 * connected. */
static int raw_connect(const char *src, int port)
{
    struct sockaddr_in from = {.sin_family = AF_INET}, to = {.sin_family = AF_INET};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    ck_assert_msg(fd >= 0, "socket: %s", strerror(errno));
    inet_pton(AF_INET, src, &from.sin_addr);
    to.sin_port = htons((uint16_t)port);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_msg(bind(fd, (struct sockaddr *)&from, sizeof(from)) == 0, "bind %s: %s", src,
                  strerror(errno));
    ck_assert_msg(connect(fd, (struct sockaddr *)&to, sizeof(to)) == 0, "connect from %s: %s", src,
                  strerror(errno));
    fcntl(fd, F_SETFL, O_NONBLOCK);
    return fd;
}

static void raw_send(int fd, const char *text, size_t n)
{
    ck_assert_msg(send(fd, text, n, MSG_NOSIGNAL) == (ssize_t)n, "send: %s", strerror(errno));
}

/* What one connection has received, and whether and when it ended. */
struct peer {
    int fd;
    char got[8192];
    size_t len;
    bool eof;
    long long eof_ms;
};

/* Reads what is there without waiting; a reset counts as the end. */
static void peer_read(struct peer *c, long long t0)
{
    while (!c->eof) {
        ssize_t r = recv(c->fd, c->got + c->len, sizeof(c->got) - 1 - c->len, 0);
        if (r > 0) {
            c->len += (size_t)r;
            c->got[c->len] = '\0';
            continue;
        }
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        c->eof = true;
        c->eof_ms = th_now_ms() - t0;
    }
}

/* Reads until the connection ends or timeout_ms passes. */
static void peer_read_to_end(struct peer *c, int timeout_ms)
{
    long long t0 = th_now_ms();

    while (!c->eof && th_now_ms() - t0 < timeout_ms) {
        struct pollfd pf = {c->fd, POLLIN, 0};
        poll(&pf, 1, 100);
        peer_read(c, t0);
    }
}

/* One request on a new connection from src; the answer's status, and its
 * text in out. */
static long raw_http(const char *src, int port, const char *req, struct peer *out)
{
    long status = 0;

    memset(out, 0, sizeof(*out));
    out->fd = raw_connect(src, port);
    raw_send(out->fd, req, strlen(req));
    peer_read_to_end(out, 10000);
    close(out->fd);
    sscanf(out->got, "HTTP/1.1 %ld", &status);
    return status;
}

/* The limits object of /healthz, asked from 127.0.0.2 so that the question
 * does not count against 127.0.0.1's connections. */
static long long limits_stat(const struct th_proc *p, const char *key)
{
    static const char req[] = "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    struct peer c;
    const char *body;
    json_t *j;
    long long v;

    ck_assert_int_eq(raw_http("127.0.0.2", p->port, req, &c), 200);
    body = strstr(c.got, "\r\n\r\n");
    ck_assert_ptr_nonnull(body);
    j = json_loads(body + 4, 0, NULL);
    ck_assert_msg(j, "/healthz: %s", body);
    v = json_integer_value(json_object_get(json_object_get(j, "limits"), key));
    json_decref(j);
    return v;
}

static bool wait_limits_stat(const struct th_proc *p, const char *key, long long want,
                             int timeout_ms)
{
    for (long long until = th_now_ms() + timeout_ms; th_now_ms() < until; th_sleep_ms(50))
        if (limits_stat(p, key) == want)
            return true;
    return false;
}

/* A raw answer is a problem+json of status want, with detail_part in it. */
static void check_raw_problem(const struct peer *c, int want, const char *detail_part)
{
    char line[32];

    snprintf(line, sizeof(line), "HTTP/1.1 %d ", want);
    ck_assert_msg(strncmp(c->got, line, strlen(line)) == 0, "want %d, got: %s", want, c->got);
    ck_assert_msg(strstr(c->got, "Content-Type: application/problem+json"), "not a problem: %s",
                  c->got);
    ck_assert_msg(strstr(c->got, detail_part), "no \"%s\" in: %s", detail_part, c->got);
}

static struct th_sse *open_stream(const struct th_proc *p, const char *path)
{
    struct th_sse *s = th_sse_open(p->port, path, NULL, 0);

    ck_assert_msg(s->status == 200, "GET %s: HTTP %ld %s", path, s->status,
                  s->body_text ? s->body_text : "");
    return s;
}

/* The stream delivers the next event within 10 s: it still works. */
static void check_stream_alive(struct th_sse *s, const char *what)
{
    struct th_sse_event ev;

    ck_assert_msg(th_sse_next(s, &ev, 10000) == 1, "%s: no event within 10 s (eof=%d)", what,
                  s->eof);
    th_sse_event_free(&ev);
}

static void submit(const struct th_proc *p, const char *run_id)
{
    char body[160];

    snprintf(body, sizeof(body), "{\"alert_type\": \"demo\", \"run_id\": \"%s\"}", run_id);
    free(th_submit(p, body, 202));
}

/* ---- the request deadline ------------------------------------------------ */

/* Headers trickled one byte every 200 ms, a body trickled the same way, a
 * connection that sends nothing and a keep-alive connection left idle:
 * all four are closed at the 2 s deadline, the first two with a 408
 * problem, the others without a word. Meanwhile a normal client gets every
 * answer, and an event stream opened first outlives the deadline many
 * times over. */
START_TEST(slowloris_cut_at_deadline)
{
    static const char head[] = "GET /livez HTTP/1.1\r\nHost: x\r\nX-Padding: "
                               "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    static const char post[] = "POST /alerts HTTP/1.1\r\nHost: x\r\nContent-Type: "
                               "application/json\r\nContent-Length: 64\r\n\r\n";
    static const char live[] = "GET /livez HTTP/1.1\r\nHost: x\r\n\r\n";
    struct peer slow = {0}, body = {0}, idle = {0}, keep = {0};
    struct peer *all[] = {&slow, &body, &idle, &keep};
    struct th_proc p;
    struct th_sse *stream;
    size_t sent = 0;
    int served = 0;
    long long t0;

    th_start_fresh(&p, "e2e_limits_deadline",
                   "{\"http\": {\"request_deadline_s\": 2}, \"sse\": {\"heartbeat_ms\": 300}}");
    stream = open_stream(&p, "/stream");
    slow.fd = raw_connect("127.0.0.1", p.port);
    body.fd = raw_connect("127.0.0.1", p.port);
    idle.fd = raw_connect("127.0.0.1", p.port);
    keep.fd = raw_connect("127.0.0.1", p.port);
    raw_send(body.fd, post, strlen(post));
    raw_send(keep.fd, live, strlen(live));
    t0 = th_now_ms();
    while (th_now_ms() - t0 < 7000) {
        struct th_resp r;
        /* unchecked: the server may have closed since the last read */
        if (!slow.eof && sent < strlen(head))
            (void)send(slow.fd, head + sent, 1, MSG_NOSIGNAL);
        if (!body.eof)
            (void)send(body.fd, " ", 1, MSG_NOSIGNAL);
        sent++;
        th_get(p.url, "/livez", &r);
        ck_assert_msg(r.status == 200, "a normal request got HTTP %ld at %lld ms", r.status,
                      th_now_ms() - t0);
        th_resp_free(&r);
        served++;
        th_sleep_ms(200);
        for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
            peer_read(all[i], t0);
    }
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        ck_assert_msg(all[i]->eof, "connection %zu is still open after 7 s: %s", i, all[i]->got);
        ck_assert_msg(all[i]->eof_ms >= 1500 && all[i]->eof_ms <= 6000,
                      "connection %zu closed after %lld ms, want about 2000", i, all[i]->eof_ms);
        close(all[i]->fd);
    }
    ck_assert_msg(sent < strlen(head), "the trickled headers were complete before the deadline");
    check_raw_problem(&slow, 408, "did not arrive whole within 2 s");
    ck_assert_msg(strstr(slow.got, "\r\nConnection: close\r\n"), "408 without close: %s", slow.got);
    check_raw_problem(&body, 408, "did not arrive whole within 2 s");
    ck_assert_msg(idle.len == 0, "an idle connection was answered: %s", idle.got);
    ck_assert_msg(strncmp(keep.got, "HTTP/1.1 200 ", 13) == 0 && !strstr(keep.got, " 408 "),
                  "an idle keep-alive got more than its answer: %s", keep.got);
    ck_assert_int_ge(served, 10);
    submit(&p, "after-deadline");
    check_stream_alive(stream, "the stream opened before the deadline");
    ck_assert_msg(stream->comments >= 5, "the event stream got %d keep-alives in 7 s",
                  stream->comments);
    ck_assert_int_eq(limits_stat(&p, "requests_timed_out_total"), 2);
    th_sse_close(stream);
    th_stop_clean(&p);
}
END_TEST

/* ---- connections per address -------------------------------------------- */

/* With a limit of 4: two streams and two keep-alive connections fill it;
 * four more connections are accepted and their first request answered
 * 429 and closed; the ninth (twice the limit) is closed at accept without
 * an answer. The connections within the limit and another address are
 * served throughout, and once the flood is gone the address is served
 * again. */
START_TEST(connections_per_address)
{
    static const char live[] = "GET /livez HTTP/1.1\r\nHost: x\r\n\r\n";
    struct peer held[2] = {{0}}, over[4] = {{0}}, refused = {0}, other;
    struct th_sse *s1, *s2;
    struct th_proc p;
    struct th_resp r;

    th_start_fresh(&p, "e2e_limits_conns", "{\"http\": {\"max_connections_per_ip\": 4}}");
    s1 = open_stream(&p, "/stream");
    s2 = open_stream(&p, "/stream?type=demo");
    for (int i = 0; i < 2; i++) {
        held[i].fd = raw_connect("127.0.0.1", p.port);
        raw_send(held[i].fd, live, strlen(live));
        for (long long until = th_now_ms() + 5000;
             !strstr(held[i].got, "\r\n\r\n") && th_now_ms() < until; th_sleep_ms(20))
            peer_read(&held[i], 0);
        ck_assert_msg(strncmp(held[i].got, "HTTP/1.1 200 ", 13) == 0, "held %d: %s", i,
                      held[i].got);
        held[i].len = 0;
    }
    for (int i = 0; i < 4; i++)
        over[i].fd = raw_connect("127.0.0.1", p.port);
    /* 8 from 127.0.0.1 and the question itself from 127.0.0.2 */
    ck_assert_msg(wait_limits_stat(&p, "connections", 9, 10000), "connections: %lld",
                  limits_stat(&p, "connections"));
    refused.fd = raw_connect("127.0.0.1", p.port);
    send(refused.fd, live, strlen(live), MSG_NOSIGNAL);
    peer_read_to_end(&refused, 10000);
    ck_assert_msg(refused.eof && refused.len == 0, "past twice the limit: eof=%d, got %s",
                  refused.eof, refused.got);
    for (int i = 0; i < 4; i++) {
        raw_send(over[i].fd, live, strlen(live));
        peer_read_to_end(&over[i], 10000);
        ck_assert_msg(over[i].eof, "over %d: not closed after its 429", i);
        check_raw_problem(&over[i], 429, "too many connections from 127.0.0.1 (limit 4)");
        ck_assert_msg(strstr(over[i].got, "\r\nRetry-After: 1\r\n"), "no Retry-After: %s",
                      over[i].got);
        close(over[i].fd);
    }
    close(refused.fd);
    ck_assert_int_eq(raw_http("127.0.0.2", p.port, live, &other), 200);
    raw_send(held[0].fd, live, strlen(live));
    peer_read_to_end(&held[0], 1000);
    ck_assert_msg(strncmp(held[0].got, "HTTP/1.1 200 ", 13) == 0, "held 0 then: %s", held[0].got);
    ck_assert_int_eq(limits_stat(&p, "connections_limited_total"), 4);
    ck_assert_int_eq(limits_stat(&p, "connections_refused_total"), 1);
    for (int i = 0; i < 2; i++)
        close(held[i].fd);
    th_sse_close(s1);
    th_sse_close(s2);
    ck_assert_msg(wait_limits_stat(&p, "connections", 1, 10000), "connections left: %lld",
                  limits_stat(&p, "connections"));
    th_get(p.url, "/livez", &r);
    ck_assert_int_eq(r.status, 200);
    th_resp_free(&r);
    th_stop_clean(&p);
}
END_TEST

/* ---- submissions per caller ---------------------------------------------- */

/* At 1 per second in bursts of 3: the burst passes, then 429 with
 * Retry-After, generic and Alertmanager bodies alike; another caller is
 * not held back; after Retry-After the caller gets through again. */
START_TEST(submission_burst)
{
    char am[1024], url[128], req[1024];
    struct th_proc p;
    struct th_resp r = {0};
    struct peer other;
    long long t0, elapsed;
    int ok = 0, retry_after = 0;

    th_start_fresh(&p, "e2e_limits_submit",
                   "{\"limits\": {\"submit_rate_per_s\": 1, \"submit_burst\": 3}}");
    t0 = th_now_ms();
    for (int i = 0; i < 20 && r.status != 429; i++) {
        char body[128];
        th_resp_free(&r);
        snprintf(body, sizeof(body), "{\"alert_type\": \"demo\", \"run_id\": \"burst-%d\"}", i);
        th_post_json(p.url, "/alerts", body, &r);
        if (r.status == 202)
            ok++;
        else
            ck_assert_msg(r.status == 429, "submission %d: HTTP %ld %s", i, r.status, r.body);
    }
    elapsed = th_now_ms() - t0;
    ck_assert_msg(r.status == 429, "20 submissions at 1 per second were all accepted");
    ck_assert_msg(ok >= 3 && ok <= 3 + elapsed / 1000 + 1, "%d accepted in %lld ms", ok, elapsed);
    th_check_problem(&r, 429, "the submission past the burst");
    ck_assert_str_eq(th_js(r.json, "title"), "Too Many Requests");
    ck_assert_msg(strstr(th_js(r.json, "detail"), "too many submissions (limit 1 per second, "
                                                  "bursts of 3); retry in "),
                  "detail: %s", th_js(r.json, "detail"));
    retry_after = atoi(r.retry_after);
    ck_assert_msg(retry_after >= 1 && retry_after <= 1, "Retry-After: \"%s\"", r.retry_after);
    th_resp_free(&r);

    /* the Alertmanager webhook is the same door */
    snprintf(am, sizeof(am),
             "{\"receiver\": \"r\", \"status\": \"firing\", \"alerts\": [{\"status\": \"firing\","
             " \"labels\": {\"alertname\": \"demo\"}}], \"groupLabels\": {}, \"commonLabels\": {},"
             " \"commonAnnotations\": {}, \"externalURL\": \"http://am\", \"version\": \"4\","
             " \"groupKey\": \"{}:{}\", \"truncatedAlerts\": 0}");
    r.status = 0;
    for (int i = 0; i < 5 && r.status != 429; i++) {
        th_resp_free(&r);
        th_post_json(p.url, "/alerts", am, &r);
    }
    th_check_problem(&r, 429, "an Alertmanager notification past the burst");
    ck_assert_msg(r.retry_after[0], "no Retry-After");
    th_resp_free(&r);

    /* another caller has a bucket of its own */
    snprintf(req, sizeof(req),
             "POST /alerts HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
             strlen("{\"alert_type\": \"demo\", \"run_id\": \"other\"}"),
             "{\"alert_type\": \"demo\", \"run_id\": \"other\"}");
    ck_assert_int_eq(raw_http("127.0.0.2", p.port, req, &other), 202);

    /* and the first gets through once it waited as told */
    th_sleep_ms(retry_after * 1000 + 100);
    snprintf(url, sizeof(url), "%s/alerts", p.url);
    ck_assert(th_http("POST", url, "application/json",
                      "{\"alert_type\": \"demo\", \"run_id\": \"after-wait\"}", &r));
    ck_assert_msg(r.status == 202, "after Retry-After: HTTP %ld %s", r.status, r.body);
    th_resp_free(&r);
    ck_assert_int_ge(limits_stat(&p, "submissions_refused_total"), 2);
    ck_assert_int_ge(limits_stat(&p, "callers"), 1);
    th_stop_clean(&p);
}
END_TEST

/* ---- streams per tenant --------------------------------------------------- */

/* Two streams per tenant: the third gets 429 with Retry-After, the two
 * keep delivering, and a closed stream's place is free again. */
START_TEST(streams_per_tenant)
{
    struct th_sse *s1, *s2, *s3;
    struct th_proc p;
    bool freed = false;

    th_start_fresh(&p, "e2e_limits_streams",
                   "{\"limits\": {\"streams_per_tenant\": 2}, \"sse\": {\"heartbeat_ms\": 300}}");
    s1 = open_stream(&p, "/stream");
    s2 = open_stream(&p, "/stream?type=demo");
    s3 = th_sse_open(p.port, "/stream", NULL, 0);
    ck_assert_int_eq(s3->status, 429);
    ck_assert_str_eq(s3->retry_after, "3"); /* sse.retry_ms, 3000 */
    ck_assert_msg(strstr(s3->content_type, "application/problem+json"), "Content-Type %s",
                  s3->content_type);
    ck_assert_msg(
        strstr(s3->body_text,
               "\"detail\":\"too many event streams for tenant \\\"default\\\" (limit 2)\""),
        "429 body: %s", s3->body_text);
    th_sse_close(s3);
    ck_assert_int_eq(limits_stat(&p, "streams_refused_total"), 1);
    ck_assert_int_eq(limits_stat(&p, "tenants"), 1);
    submit(&p, "tenant-1");
    check_stream_alive(s1, "the first stream");
    check_stream_alive(s2, "the second stream");
    th_sse_close(s1);
    for (long long until = th_now_ms() + 5000; !freed && th_now_ms() < until; th_sleep_ms(100)) {
        s3 = th_sse_open(p.port, "/stream", NULL, 0);
        freed = s3->status == 200;
        th_sse_close(s3);
    }
    ck_assert_msg(freed, "a closed stream's place was not freed within 5 s");
    th_sse_close(s2);
    ck_assert_msg(wait_limits_stat(&p, "tenants", 0, 10000), "tenants left: %lld",
                  limits_stat(&p, "tenants"));
    th_stop_clean(&p);
}
END_TEST

/* A connection's buffer (14 KiB) bounds the request's headers, not the
 * size of what is sent back: headers of 12 KB are served, 20 KB get 431
 * and the server goes on; an event far larger than the buffer reaches a
 * stream whole. */
START_TEST(header_and_frame_size)
{
    const size_t big = 40000;
    char *req = malloc(24000), *body = malloc(big + 200), *pad = malloc(big + 1);
    struct peer c;
    struct th_proc p;
    struct th_resp r;
    struct th_sse *s;
    struct th_sse_event ev;

    th_start_fresh(&p, "e2e_limits_headers", NULL);
    for (size_t i = 0; i < 2; i++) {
        size_t n = i == 0 ? 12000 : 20000, len;
        len = (size_t)snprintf(req, 24000, "GET /livez HTTP/1.1\r\nHost: x\r\nX-Padding: ");
        memset(req + len, 'a', n);
        len += n;
        snprintf(req + len, 24000 - len, "\r\nConnection: close\r\n\r\n");
        ck_assert_int_eq(raw_http("127.0.0.1", p.port, req, &c), i == 0 ? 200 : 431);
    }
    memset(pad, 'x', big);
    pad[big] = '\0';
    snprintf(body, big + 200,
             "{\"alert_type\":\"demo\",\"run_id\":\"big-1\",\"data\":{\"pad\":\"%s\","
             "\"duration_ms\":0,\"steps\":0}}",
             pad);
    th_post_json(p.url, "/alerts", body, &r);
    ck_assert_int_eq(r.status, 202);
    th_resp_free(&r);
    free(th_wait_run(p.url, "big-1", 60));
    s = th_sse_open(p.port, "/runs/big-1/stream", NULL, 0);
    ck_assert_int_eq(s->status, 200);
    ck_assert_int_eq(th_sse_until(s, "snapshot", &ev, 10000), 1);
    ck_assert_msg(ev.data && strlen(ev.data) > big && strstr(ev.data, pad),
                  "the snapshot of a %zu-byte input arrived cut (%zu bytes)", big,
                  ev.data ? strlen(ev.data) : 0);
    th_sse_event_free(&ev);
    th_sse_close(s);
    th_stop_clean(&p);
    free(req);
    free(body);
    free(pad);
}
END_TEST

static Suite *limits_suite(void)
{
    Suite *s = suite_create("e2e_limits");
    const struct {
        const char *name;
        const TTest *fn;
        int timeout;
    } cases[] = {
        {"slowloris_cut_at_deadline", slowloris_cut_at_deadline, 90},
        {"connections_per_address", connections_per_address, 90},
        {"submission_burst", submission_burst, 90},
        {"streams_per_tenant", streams_per_tenant, 90},
        {"header_and_frame_size", header_and_frame_size, 90},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        TCase *tc = tcase_create(cases[i].name);
        tcase_set_timeout(tc, cases[i].timeout);
        tcase_add_test(tc, cases[i].fn);
        suite_add_tcase(s, tc);
    }
    return s;
}

int main(void)
{
    return th_run_suite(limits_suite());
}
