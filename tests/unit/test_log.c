/* tests/unit/test_log.c — the Check suite for common/log.c: credentials are
 * redacted from every line (log_redact, which log_write applies), and a
 * line written through LOG never shows them.
 *
 * System headers come before log.h, ahead of common.h's poison pragma. */
#include <check.h>
#include <fcntl.h>
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
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
