/* tests/e2e/test_logs.c — the server's log as operators read it
 * (docs/operations.md, "Logs"): request ids taken from X-Request-Id or
 * traceparent, answered and on the request's lines; --log-format json with
 * one key per field; the line that ends a failed run. */
#include "../support/harness.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

/* The X-Request-Id header of a response, into the buffer at arg. */
static size_t on_header(char *buf, size_t size, size_t n, void *arg)
{
    char *out = arg;
    size_t len = size * n;
    const char *name = "X-Request-Id:";

    if (len > strlen(name) && strncasecmp(buf, name, strlen(name)) == 0) {
        const char *v = buf + strlen(name);
        size_t vlen = len - strlen(name);
        while (vlen > 0 && (*v == ' ' || *v == '\t'))
            v++, vlen--;
        while (vlen > 0 && (v[vlen - 1] == '\r' || v[vlen - 1] == '\n' || v[vlen - 1] == ' '))
            vlen--;
        snprintf(out, 256, "%.*s", (int)vlen, v);
    }
    return len;
}

static size_t on_body(char *buf, size_t size, size_t n, void *arg)
{
    (void)buf, (void)arg;
    return size * n;
}

/* GET path with one extra header (may be NULL); the answered X-Request-Id
 * into id (256 bytes, "" when none); returns the HTTP status. */
static long get_with(const struct th_proc *p, const char *path, const char *header, char *id)
{
    CURL *c = curl_easy_init();
    struct curl_slist *h = header ? curl_slist_append(NULL, header) : NULL;
    char url[512];
    long status = 0;

    ck_assert_ptr_nonnull(c);
    id[0] = '\0';
    snprintf(url, sizeof(url), "%s%s", p->url, path);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, id);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    ck_assert_int_eq(curl_easy_perform(c), CURLE_OK);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    {
        char *ct = NULL;
        curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ct);
        th_record_exchange("GET", url, status, ct, NULL, 0, NULL); /* the body is dropped */
    }
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return status;
}

/* Polls the log up to 5 s for a line holding needle (the access line is
 * written after the response). */
static bool log_wait(const struct th_proc *p, const char *needle, char *line, size_t cap)
{
    for (long long t0 = th_now_ms(); th_now_ms() - t0 < 5000; th_sleep_ms(20))
        if (th_log_find(p->log, needle, line, cap))
            return true;
    return false;
}

START_TEST(request_id_echoed_and_logged)
{
    struct th_proc p;
    char id[256], line[2048], big[200];

    th_start_fresh(&p, "e2e_logs_request_id", NULL);

    /* A client's id comes back and is on the access line. */
    ck_assert_int_eq(get_with(&p, "/runs/missing-1", "X-Request-Id: e2e-req-42", id), 404);
    ck_assert_str_eq(id, "e2e-req-42");
    ck_assert_msg(log_wait(&p, "request_id=e2e-req-42", line, sizeof(line)), "log %s", p.log);
    ck_assert_msg(strstr(line, "info  request method=GET path=/runs/missing-1 status=404 "), "%s",
                  line);

    /* A traceparent's trace id, when there is no X-Request-Id. */
    ck_assert_int_eq(
        get_with(&p, "/runs/missing-2",
                 "traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", id),
        404);
    ck_assert_str_eq(id, "0af7651916cd43dd8448eb211c80319c");
    ck_assert(log_wait(&p, "request_id=0af7651916cd43dd8448eb211c80319c", line, sizeof(line)));
    ck_assert_msg(strstr(line, "path=/runs/missing-2 "), "%s", line);

    /* Otherwise a new one: for no header, and for an id too long. */
    ck_assert_int_eq(get_with(&p, "/livez", NULL, id), 200);
    ck_assert_uint_eq(strlen(id), 32);
    ck_assert_uint_eq(strspn(id, "0123456789abcdef"), 32);
    memset(big, 'x', sizeof(big));
    memcpy(big, "X-Request-Id: ", 14);
    big[14 + 129] = '\0';
    ck_assert_int_eq(get_with(&p, "/livez", big, id), 200);
    ck_assert_uint_eq(strlen(id), 32);
    ck_assert(log_wait(&p, id, line, sizeof(line)));
    ck_assert_msg(strstr(line, "path=/livez "), "%s", line);
    th_stop_clean(&p);
}
END_TEST

/* --log-format json: every line is an object; the access line's fields
 * are keys. */
START_TEST(json_format)
{
    char *ci = th_db_create("e2e_logs_json");
    const char *args[] = {"--log-format", "json", NULL};
    struct th_proc p;
    char id[256], line[4096];
    json_t *j;
    FILE *f;

    th_start(&p, ci, args, NULL);
    ck_assert_int_eq(get_with(&p, "/runs/nope", "X-Request-Id: json-1", id), 404);
    ck_assert(log_wait(&p, "\"request_id\":\"json-1\"", line, sizeof(line)));
    j = json_loads(line, 0, NULL);
    ck_assert_msg(j != NULL, "not JSON: %s", line);
    ck_assert_str_eq(th_js(j, "level"), "info");
    ck_assert_str_eq(th_js(j, "msg"), "request");
    ck_assert_str_eq(th_js(j, "method"), "GET");
    ck_assert_str_eq(th_js(j, "path"), "/runs/nope");
    ck_assert_str_eq(th_js(j, "status"), "404");
    ck_assert_ptr_nonnull(th_js(j, "ts"));
    ck_assert_ptr_nonnull(th_js(j, "duration_ms"));
    json_decref(j);
    th_stop_clean(&p);

    /* Every line the process wrote, start to stop. */
    f = fopen(p.log, "r");
    ck_assert_ptr_nonnull(f);
    while (fgets(line, sizeof(line), f)) {
        if (line[0] != '{')
            continue; /* a sanitizer's or libpq's own text */
        j = json_loads(line, 0, NULL);
        ck_assert_msg(j && th_js(j, "ts") && th_js(j, "level") && th_js(j, "msg"), "%s", line);
        json_decref(j);
    }
    fclose(f);
    free(ci);
}
END_TEST

/* A run that fails ends with one warn line naming its outcome and error
 * code, without the worker's internal step numbers. */
START_TEST(failed_run_logged)
{
    struct th_proc p;
    char want[256], line[2048];
    char *id;

    th_start_fresh(&p, "e2e_logs_failed", NULL);
    id = th_submit(
        &p, "{\"alert_type\":\"demo\",\"data\":{\"duration_ms\":0,\"fail\":\"permanent\"}}", 202);
    th_expect_outcome(&p, id, "failed", 20);
    snprintf(want, sizeof(want),
             "warn  run finished run=%s type=demo outcome=failed error=simulated_failure "
             "attempt=1 duration_ms=",
             id);
    ck_assert_msg(log_wait(&p, want, line, sizeof(line)), "no \"%s\" in %s", want, p.log);
    ck_assert_msg(!strstr(line, "step=") && !strstr(line, "stop="), "%s", line);
    free(id);

    id = th_submit(&p, "{\"alert_type\":\"demo\",\"data\":{\"duration_ms\":0}}", 202);
    th_expect_outcome(&p, id, "succeeded", 20);
    snprintf(want, sizeof(want), "info  run finished run=%s type=demo outcome=succeeded attempt=1 ",
             id);
    ck_assert_msg(log_wait(&p, want, line, sizeof(line)), "no \"%s\" in %s", want, p.log);
    free(id);
    th_stop_clean(&p);
}
END_TEST

/* A raw connection to p; sends text (may be NULL), reads the answer when
 * read_answer, and closes with a reset when reset, else with a FIN. */
static void raw_client(const struct th_proc *p, const char *text, bool read_answer, bool reset)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)p->port)};
    struct linger lg = {1, 0};
    char buf[4096];
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    ck_assert_int_ge(fd, 0);
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    if (text)
        ck_assert_int_eq(send(fd, text, strlen(text), 0), (ssize_t)strlen(text));
    if (read_answer)
        ck_assert_int_gt(recv(fd, buf, sizeof(buf), 0), 0);
    th_sleep_ms(50);
    if (reset)
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    close(fd);
}

/* Clients that go away, idle or mid-request, by FIN or reset, are normal:
 * libmicrohttpd's lines about them are debug, never warn. */
START_TEST(peer_close_is_not_a_warning)
{
    char *ci = th_db_create("e2e_logs_peer");
    const char *args[] = {"--log-level", "debug", NULL};
    const char *get = "GET /livez HTTP/1.1\r\nHost: t\r\n\r\n";
    struct th_proc p;
    char line[2048];

    th_start(&p, ci, args, NULL);
    raw_client(&p, NULL, false, false);
    raw_client(&p, NULL, false, true);
    raw_client(&p, get, true, false);
    raw_client(&p, get, true, true);
    raw_client(&p, "GET /livez HTTP/1.1\r\nHost: t\r\n", false, false);
    raw_client(&p, "GET /livez HTTP/1.1\r\nHost: t\r\n", false, true);
    raw_client(&p, "POST /alerts HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n{", false, true);
    ck_assert(log_wait(&p, "status=200", line, sizeof(line)));
    th_sleep_ms(300);
    th_stop_clean(&p);
    ck_assert_msg(!th_log_find(p.log, "warn  libmicrohttpd", line, sizeof(line)), "%s (log %s)",
                  line, p.log);
    ck_assert_msg(th_log_find(p.log, "debug libmicrohttpd", line, sizeof(line)),
                  "libmicrohttpd said nothing: the cases above test nothing (log %s)", p.log);
    free(ci);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("e2e_logs");
    const struct {
        const char *name;
        const TTest *fn;
    } cases[] = {
        {"request_id", request_id_echoed_and_logged},
        {"json_format", json_format},
        {"failed_run", failed_run_logged},
        {"peer_close", peer_close_is_not_a_warning},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        TCase *tc = tcase_create(cases[i].name);
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, cases[i].fn);
        suite_add_tcase(s, tc);
    }
    return th_run_suite(s);
}
