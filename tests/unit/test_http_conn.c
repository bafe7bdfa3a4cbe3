/* tests/unit/test_http_conn.c — the Check suite for server/http_conn.c
 * without libmicrohttpd: client addresses as text, and the deadline thread
 * on real loopback TCP pairs (the server side stands in for
 * libmicrohttpd's socket). A connection that sent part of a request is
 * answered 408 and shut down at its deadline; one that sent nothing is shut
 * down without an answer; one whose request arrived is left alone; and the
 * per-address limit marks the connections over it.
 *
 * System headers come before the project's, ahead of common.h's poison
 * pragma. */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/limits.h"
#include "common/log.h"
#include "server/http_conn.h"

/* A connected loopback pair: *client and *server. */
static void tcp_pair(int *client, int *server)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t len = sizeof(a);
    int l = socket(AF_INET, SOCK_STREAM, 0);

    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(l, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_eq(listen(l, 4), 0);
    ck_assert_int_eq(getsockname(l, (struct sockaddr *)&a, &len), 0);
    *client = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_eq(connect(*client, (struct sockaddr *)&a, sizeof(a)), 0);
    *server = accept(l, NULL, NULL);
    ck_assert_int_ge(*server, 0);
    close(l);
}

/* What the client side reads until the server's end, within timeout_ms;
 * -1 when it did not end. */
static ssize_t read_to_end(int fd, char *buf, size_t cap, int timeout_ms)
{
    size_t n = 0;

    for (;;) {
        struct pollfd pf = {fd, POLLIN, 0};
        ssize_t r;
        if (poll(&pf, 1, timeout_ms) != 1)
            return -1;
        r = recv(fd, buf + n, cap - 1 - n, 0);
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    buf[n] = '\0';
    return (ssize_t)n;
}

START_TEST(addresses_as_text)
{
    struct sockaddr_in v4 = {.sin_family = AF_INET};
    struct sockaddr_in6 v6 = {.sin6_family = AF_INET6};
    char buf[64];

    inet_pton(AF_INET, "10.1.2.3", &v4.sin_addr);
    http_conn_addr_text((struct sockaddr *)&v4, buf, sizeof(buf));
    ck_assert_str_eq(buf, "10.1.2.3");
    inet_pton(AF_INET6, "::ffff:10.1.2.3", &v6.sin6_addr);
    http_conn_addr_text((struct sockaddr *)&v6, buf, sizeof(buf));
    ck_assert_str_eq(buf, "10.1.2.3"); /* one address, one count, on a dual-stack socket */
    inet_pton(AF_INET6, "2001:db8::1", &v6.sin6_addr);
    http_conn_addr_text((struct sockaddr *)&v6, buf, sizeof(buf));
    ck_assert_str_eq(buf, "2001:db8::1");
    http_conn_addr_text(NULL, buf, sizeof(buf));
    ck_assert_str_eq(buf, "unknown");
}
END_TEST

START_TEST(deadline_answers_a_started_request)
{
    struct limits *lim = limits_new(&(struct limits_options){0});
    struct http_conns *cs = http_conns_new(lim, 1);
    struct http_conn *c;
    struct limits_stats st;
    int client, server;
    char buf[2048];

    ck_assert_int_eq(http_conns_start(cs, NULL), ST_OK);
    tcp_pair(&client, &server);
    c = http_conn_open(cs, server, "127.0.0.1");
    ck_assert_int_eq(send(client, "GET / HTTP/1.1\r\nHo", 18, 0), 18);
    ck_assert_int_ge(read_to_end(client, buf, sizeof(buf), 5000), 0);
    ck_assert_msg(strncmp(buf, "HTTP/1.1 408 Request Timeout\r\n", 30) == 0, "got: %s", buf);
    ck_assert_msg(strstr(buf, "\r\nConnection: close\r\n"), "got: %s", buf);
    ck_assert_msg(strstr(buf, "\"status\":408,\"detail\":\"the request did not arrive whole "
                              "within 1 s of the connection being ready for it\"}"),
                  "got: %s", buf);
    ck_assert(!http_conn_received(cs, c)); /* nothing more may be sent */
    limits_stats(lim, &st);
    ck_assert_int_eq(st.total[LIMITS_DEADLINE], 1);
    http_conn_close(cs, c);
    close(server);
    close(client);
    http_conns_free(cs);
    limits_free(lim);
}
END_TEST

START_TEST(deadline_closes_an_idle_connection_silently)
{
    struct limits *lim = limits_new(&(struct limits_options){0});
    struct http_conns *cs = http_conns_new(lim, 1);
    struct http_conn *c;
    struct limits_stats st;
    int client, server;
    char buf[2048];

    ck_assert_int_eq(http_conns_start(cs, NULL), ST_OK);
    tcp_pair(&client, &server);
    c = http_conn_open(cs, server, "127.0.0.1");
    ck_assert_int_eq(read_to_end(client, buf, sizeof(buf), 5000), 0);
    limits_stats(lim, &st);
    ck_assert_int_eq(st.total[LIMITS_DEADLINE], 0);
    http_conn_close(cs, c);
    close(server);
    close(client);
    http_conns_free(cs);
    limits_free(lim);
}
END_TEST

/* A request that arrived has no deadline; after its answer, the next one
 * has, and an idle keep-alive is closed without a word. */
START_TEST(deadline_spares_a_request_that_arrived)
{
    struct http_conns *cs = http_conns_new(NULL, 1);
    struct http_conn *c;
    int client, server;
    char buf[2048];

    ck_assert_int_eq(http_conns_start(cs, NULL), ST_OK);
    tcp_pair(&client, &server);
    c = http_conn_open(cs, server, "127.0.0.1");
    ck_assert_int_eq(send(client, "GET / HTTP/1.1\r\n\r\n", 18, 0), 18);
    ck_assert(http_conn_received(cs, c));
    ck_assert_int_eq(read_to_end(client, buf, sizeof(buf), 2500), -1); /* still open */
    ck_assert(http_conn_received(cs, c));
    http_conn_next(cs, c);
    ck_assert_int_eq(read_to_end(client, buf, sizeof(buf), 5000), 0);
    http_conn_close(cs, c);
    close(server);
    close(client);
    http_conns_free(cs);
}
END_TEST

START_TEST(over_the_address_limit)
{
    struct limits *lim = limits_new(&(struct limits_options){.conns_per_addr = 1});
    struct http_conns *cs = http_conns_new(lim, 30);
    struct http_conn *a = http_conn_open(cs, -1, "10.0.0.1");
    struct http_conn *b = http_conn_open(cs, -1, "10.0.0.1");
    struct http_conn *c = http_conn_open(cs, -1, "10.0.0.2");

    ck_assert(!http_conn_over_limit(a));
    ck_assert(http_conn_over_limit(b));
    ck_assert(!http_conn_over_limit(c));
    ck_assert_str_eq(http_conn_addr(b), "10.0.0.1");
    http_conn_close(cs, a);
    http_conn_close(cs, b);
    http_conn_close(cs, c);
    http_conn_close(cs, NULL);
    http_conns_free(cs); /* never started */
    limits_free(lim);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("http_conn");
    TCase *tc = tcase_create("core");
    SRunner *sr;
    int failed;

    log_init(LOG_WARN, false); /* no "request timed out" lines among the results */
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, addresses_as_text);
    tcase_add_test(tc, deadline_answers_a_started_request);
    tcase_add_test(tc, deadline_closes_an_idle_connection_silently);
    tcase_add_test(tc, deadline_spares_a_request_that_arrived);
    tcase_add_test(tc, over_the_address_limit);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
