/* tests/unit/test_log.c — the Check suite for common/log.c: credentials are
 * redacted from every line (log_redact, which log_write applies), and a
 * line written through LOG never shows them; a JSON line is one valid
 * object with a key per field; request ids.
 *
 * System headers come before log.h, ahead of common.h's poison pragma. */
#include <check.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"

static void assert_redacted(const char *in, const char *want)
{
    char buf[256];

    snprintf(buf, sizeof(buf), "%s", in);
    log_redact(buf, sizeof(buf));
    ck_assert_str_eq(buf, want);
}

START_TEST(redact_query_token)
{
    assert_redacted("request path=/stream?access_token=opsrun_abc&type=demo",
                    "request path=/stream?access_token=[redacted]&type=demo");
    assert_redacted("GET /runs/x/stream?last_event_id=4&access_token=s3cr3t HTTP/1.1",
                    "GET /runs/x/stream?last_event_id=4&access_token=[redacted] HTTP/1.1");
    assert_redacted("url=\"https://h/p?ACCESS_TOKEN=abc\"",
                    "url=\"https://h/p?ACCESS_TOKEN=[redacted]\"");
    assert_redacted("a access_token=1 b access_token=22 c",
                    "a access_token=[redacted] b access_token=[redacted] c");
}
END_TEST

START_TEST(redact_bearer)
{
    assert_redacted("header Authorization: Bearer opsrun_0123456789abcdef end",
                    "header Authorization: Bearer [redacted] end");
    assert_redacted("authorization: bearer abcdefgh", "authorization: bearer [redacted]");
}
END_TEST

/* Words are not credentials, and lines without a marker stay as they are. */
START_TEST(redact_leaves_text)
{
    assert_redacted("a bearer token is needed", "a bearer token is needed");
    assert_redacted("access_token= empty", "access_token= empty");
    assert_redacted("request method=GET path=/runs status=200",
                    "request method=GET path=/runs status=200");
    assert_redacted("", "");
}
END_TEST

/* A line cut by the buffer's size stays a string. */
START_TEST(redact_fits_the_buffer)
{
    char buf[24] = "x access_token=abcdefgh";

    log_redact(buf, sizeof(buf));
    ck_assert_str_eq(buf, "x access_token=[redacte");
}
END_TEST

/* Through LOG, into a file in place of standard error. */
START_TEST(log_line_never_shows_the_token)
{
    char path[] = "/tmp/opsrun-test-log-XXXXXX", line[512] = "";
    int fd = mkstemp(path), saved = dup(STDERR_FILENO);
    FILE *f;

    ck_assert_int_ge(fd, 0);
    dup2(fd, STDERR_FILENO);
    log_init(LOG_INFO, false);
    LOG(LOG_INFO, "request path=%s", "/stream?access_token=opsrun_SECRET123");
    log_init(LOG_INFO, true);
    LOG(LOG_INFO, "auth=%s", "Bearer opsrun_SECRET123");
    dup2(saved, STDERR_FILENO);
    close(saved);
    f = fdopen(fd, "r");
    ck_assert_ptr_nonnull(f);
    rewind(f);
    while (fgets(line, sizeof(line), f)) {
        ck_assert_msg(strstr(line, "SECRET") == NULL, "token in the log: %s", line);
        ck_assert_msg(strstr(line, "[redacted]") != NULL, "not redacted: %s", line);
    }
    fclose(f);
    unlink(path);
}
END_TEST

/* A JSON line parsed back; it must end in one newline. */
static json_t *json_of(const char *msg)
{
    char line[LOG_LINE_MAX];
    size_t n = log_json_line(line, sizeof(line), "2024-01-02T03:04:05.678Z", LOG_WARN, msg);
    json_error_t jerr;
    json_t *j;

    ck_assert_uint_eq(n, strlen(line));
    ck_assert_ptr_eq(strchr(line, '\n'), line + n - 1);
    j = json_loads(line, 0, &jerr);
    ck_assert_msg(j != NULL, "not JSON (%s): %s", jerr.text, line);
    ck_assert(json_is_object(j));
    return j;
}

static void assert_key(const json_t *j, const char *key, const char *want)
{
    const json_t *v = json_object_get(j, key);

    ck_assert_msg(json_is_string(v), "no string \"%s\"", key);
    ck_assert_str_eq(json_string_value(v), want);
}

START_TEST(json_every_field_a_key)
{
    json_t *j = json_of("claimed run=01HX attempt=2 worker=w-1 duration_ms=12");
    const char *key;
    json_t *v;
    size_t i = 0;
    static const char *const order[] = {"ts",      "level",  "msg",        "run_id",
                                        "attempt", "worker", "duration_ms"};

    assert_key(j, "ts", "2024-01-02T03:04:05.678Z");
    assert_key(j, "level", "warn");
    assert_key(j, "msg", "claimed");
    assert_key(j, "run_id", "01HX");
    assert_key(j, "attempt", "2");
    assert_key(j, "worker", "w-1");
    assert_key(j, "duration_ms", "12");
    ck_assert_uint_eq(json_object_size(j), 7);
    json_decref(j);
    /* The keys in the order of the line (jansson keeps insertion order). */
    j = json_of("claimed run=01HX attempt=2 worker=w-1 duration_ms=12");
    json_object_foreach(j, key, v)
    {
        (void)v;
        ck_assert_uint_lt(i, ARRAY_LEN(order));
        ck_assert_str_eq(key, order[i++]);
    }
    json_decref(j);
}
END_TEST

/* The words of the message stay one sentence around the fields. */
START_TEST(json_message_text)
{
    json_t *j = json_of("check failed run=abc check=3: could not connect: refused");

    assert_key(j, "msg", "check failed: could not connect: refused");
    assert_key(j, "run_id", "abc");
    assert_key(j, "check", "3");
    json_decref(j);
    j = json_of("could not claim runs: timeout expired worker=w1");
    assert_key(j, "msg", "could not claim runs: timeout expired");
    assert_key(j, "worker", "w1");
    json_decref(j);
    j = json_of("stopped");
    assert_key(j, "msg", "stopped");
    ck_assert_uint_eq(json_object_size(j), 3);
    json_decref(j);
    j = json_of("");
    assert_key(j, "msg", "");
    json_decref(j);
}
END_TEST

START_TEST(json_quoted_values)
{
    json_t *j =
        json_of("alertmanager notification receiver=\"team a\" note=\"say \\\"hi\\\" \\\\o/\" "
                "empty= open=\"no end");

    assert_key(j, "msg", "alertmanager notification");
    assert_key(j, "receiver", "team a");
    assert_key(j, "note", "say \"hi\" \\o/");
    assert_key(j, "empty", "");
    assert_key(j, "open", "no end");
    json_decref(j);
}
END_TEST

/* A key seen before, or one of the line's own, stays in the text. */
START_TEST(json_taken_keys)
{
    json_t *j = json_of("database error stmt=claim level=x x=1 x=2 msg=\"oh no\" ts=now");

    assert_key(j, "msg", "database error level=x x=2 msg=\"oh no\" ts=now");
    assert_key(j, "level", "warn");
    assert_key(j, "ts", "2024-01-02T03:04:05.678Z");
    assert_key(j, "stmt", "claim");
    assert_key(j, "x", "1");
    ck_assert_uint_eq(json_object_size(j), 5);
    json_decref(j);
    /* Not keys: upper case, a leading digit, no name. */
    j = json_of("a B=1 1x=2 =3 url=https://h/p?q=1&r=2");
    assert_key(j, "msg", "a B=1 1x=2 =3");
    assert_key(j, "url", "https://h/p?q=1&r=2");
    json_decref(j);
}
END_TEST

START_TEST(json_escaping)
{
    json_t *j = json_of("text \"quoted\" back\\slash tab\there ctl\x01\x1f v=\"a\tb\x02\"");

    assert_key(j, "msg", "text \"quoted\" back\\slash tab\there ctl\x01\x1f");
    assert_key(j, "v", "a\tb\x02");
    json_decref(j);
    /* Bytes that are not UTF-8 become '?'; UTF-8 stays as it is. */
    j = json_of("caf\xc3\xa9 bad=\xff\xfe cut=\xe2\x82");
    assert_key(j, "msg", "caf\xc3\xa9");
    assert_key(j, "bad", "??");
    assert_key(j, "cut", "??");
    json_decref(j);
}
END_TEST

/* Past the buffer, fields are dropped whole and the line stays JSON. */
START_TEST(json_too_long)
{
    char msg[LOG_MSG_MAX], line[256];
    size_t n = 0;
    json_t *j;

    n += xsnprintf(msg, sizeof(msg), "long");
    for (int i = 0; i < 30; i++)
        n += xsnprintf(msg + n, sizeof(msg) - n, " k%d=\"%s\"", i, "\x01\x01\x01\x01\x01\x01");
    ck_assert_uint_lt(log_json_line(line, sizeof(line), "t", LOG_INFO, msg), sizeof(line));
    j = json_loads(line, 0, NULL);
    ck_assert_msg(j != NULL, "%s", line);
    assert_key(j, "msg", "long");
    ck_assert_uint_lt(json_object_size(j), 33);
    json_decref(j);
    /* All of it in a line of LOG_LINE_MAX. */
    j = json_of(msg);
    ck_assert_uint_eq(json_object_size(j), 33);
    json_decref(j);
}
END_TEST

/* Lines written through LOG into a file; returns how many were read. */
static int read_lines(int fd, char lines[][LOG_LINE_MAX], int max)
{
    FILE *f = fdopen(fd, "r");
    int n = 0;

    ck_assert_ptr_nonnull(f);
    rewind(f);
    while (n < max && fgets(lines[n], LOG_LINE_MAX, f))
        n++;
    fclose(f);
    return n;
}

START_TEST(json_through_log)
{
    static char lines[4][LOG_LINE_MAX];
    char path[] = "/tmp/opsrun-test-log-XXXXXX";
    int fd = mkstemp(path), saved = dup(STDERR_FILENO), n;
    json_t *j;

    ck_assert_int_ge(fd, 0);
    dup2(fd, STDERR_FILENO);
    log_init(LOG_INFO, true);
    LOG(LOG_INFO, "request path=%s status=%d", "/s?access_token=opsrun_SECRET1&x=1", 200);
    LOG(LOG_ERROR, "header auth=\"%s\" text=%s", "Bearer opsrun_SECRET2", "two\nlines");
    log_init(LOG_INFO, false);
    dup2(saved, STDERR_FILENO);
    close(saved);
    n = read_lines(fd, lines, 4);
    unlink(path);
    ck_assert_int_eq(n, 2);
    j = json_loads(lines[0], 0, NULL);
    ck_assert_msg(j != NULL, "%s", lines[0]);
    assert_key(j, "level", "info");
    assert_key(j, "path", "/s?access_token=[redacted]&x=1");
    assert_key(j, "status", "200");
    json_decref(j);
    j = json_loads(lines[1], 0, NULL);
    ck_assert_msg(j != NULL, "%s", lines[1]);
    assert_key(j, "level", "error");
    assert_key(j, "auth", "Bearer [redacted]");
    assert_key(j, "text", "two");
    assert_key(j, "msg", "header lines");
    json_decref(j);
}
END_TEST

START_TEST(request_id_on_every_line)
{
    static char lines[4][LOG_LINE_MAX];
    char path[] = "/tmp/opsrun-test-log-XXXXXX";
    int fd = mkstemp(path), saved = dup(STDERR_FILENO), n;
    json_t *j;

    ck_assert_int_ge(fd, 0);
    dup2(fd, STDERR_FILENO);
    log_init(LOG_INFO, false);
    log_request_id_set("req-1");
    LOG(LOG_INFO, "request method=GET");
    log_init(LOG_INFO, true);
    LOG(LOG_WARN, "could not parse");
    log_request_id_set(NULL);
    LOG(LOG_INFO, "no request");
    log_init(LOG_INFO, false);
    dup2(saved, STDERR_FILENO);
    close(saved);
    n = read_lines(fd, lines, 4);
    unlink(path);
    ck_assert_int_eq(n, 3);
    ck_assert_msg(strstr(lines[0], " info  request method=GET request_id=req-1\n"), "%s", lines[0]);
    j = json_loads(lines[1], 0, NULL);
    ck_assert_msg(j != NULL, "%s", lines[1]);
    assert_key(j, "msg", "could not parse");
    assert_key(j, "request_id", "req-1");
    json_decref(j);
    ck_assert_ptr_null(strstr(lines[2], "request_id"));
    ck_assert_ptr_null(log_request_id());
}
END_TEST

START_TEST(request_id_pick)
{
    char id[LOG_REQUEST_ID_MAX + 1], big[LOG_REQUEST_ID_MAX + 2];
    const char *tp = "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01";

    log_request_id_pick("abc-123:x/y", tp, id);
    ck_assert_str_eq(id, "abc-123:x/y");
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    ck_assert(!log_request_id_valid(big));
    big[LOG_REQUEST_ID_MAX] = '\0';
    ck_assert(log_request_id_valid(big));
    ck_assert(!log_request_id_valid(""));
    ck_assert(!log_request_id_valid("a b"));
    ck_assert(!log_request_id_valid("a\"b"));
    ck_assert(!log_request_id_valid("a\\b"));
    ck_assert(!log_request_id_valid("caf\xc3\xa9"));
    ck_assert(!log_request_id_valid("a\tb"));
    /* An invalid X-Request-Id falls back to the traceparent's trace id. */
    log_request_id_pick("bad id", tp, id);
    ck_assert_str_eq(id, "4bf92f3577b34da6a3ce929d0e0e4736");
    log_request_id_pick(NULL, tp, id);
    ck_assert_str_eq(id, "4bf92f3577b34da6a3ce929d0e0e4736");
    /* Else a new one: 32 hex digits, different each time. */
    static const char *const bad_tp[] = {
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
        "",
    };
    for (size_t i = 0; i < ARRAY_LEN(bad_tp); i++) {
        char other[LOG_REQUEST_ID_MAX + 1];
        log_request_id_pick(NULL, bad_tp[i], id);
        ck_assert_uint_eq(strlen(id), 32);
        ck_assert_uint_eq(strspn(id, "0123456789abcdef"), 32);
        log_request_id_pick(NULL, NULL, other);
        ck_assert_str_ne(id, other);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("log");
    TCase *t = tcase_create("redact");
    SRunner *sr;
    int failed;

    tcase_add_test(t, redact_query_token);
    tcase_add_test(t, redact_bearer);
    tcase_add_test(t, redact_leaves_text);
    tcase_add_test(t, redact_fits_the_buffer);
    tcase_add_test(t, log_line_never_shows_the_token);
    suite_add_tcase(s, t);
    t = tcase_create("json");
    tcase_add_test(t, json_every_field_a_key);
    tcase_add_test(t, json_message_text);
    tcase_add_test(t, json_quoted_values);
    tcase_add_test(t, json_taken_keys);
    tcase_add_test(t, json_escaping);
    tcase_add_test(t, json_too_long);
    tcase_add_test(t, json_through_log);
    suite_add_tcase(s, t);
    t = tcase_create("request_id");
    tcase_add_test(t, request_id_on_every_line);
    tcase_add_test(t, request_id_pick);
    suite_add_tcase(s, t);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
