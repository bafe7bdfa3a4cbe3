/* tests/unit/test_runlog.c — the Check suite for one attempt's log lines
 * (common/runlog.h): a command's bytes split into lines however
 * they were written, secrets masked also when split across writes and when
 * a line is cut, the cut marker, the attempt's cap with the dropped count
 * and its closing line, takes bounded by size, and a failed write put back
 * in order.
 *
 * System headers come before the opsrun headers, ahead of common.h's poison
 * pragma. */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/runlog.h"

static const struct runlog_limits LIM = {.max_line_bytes = 300, .max_bytes = 1000};

/* Every line of l, taken at once: a JSON array of [stream, text]. */
static json_t *take_all(struct runlog *l, bool final, int64_t *dropped)
{
    struct runlog_chunk c;
    json_t *out = json_array();

    while (runlog_take(l, 1 << 20, final, &c)) {
        json_t *a = json_loads(c.lines_json, 0, NULL);
        size_t i;
        json_t *v;
        ck_assert_msg(a && json_is_array(a), "not an array: %s", c.lines_json);
        ck_assert_int_eq((int)json_array_size(a), c.nlines);
        json_array_foreach(a, i, v)
        {
            ck_assert(json_integer_value(json_array_get(v, 0)) > 1700000000000000LL);
            json_array_append_new(out,
                                  json_pack("[O O]", json_array_get(v, 1), json_array_get(v, 2)));
        }
        if (dropped)
            *dropped += c.dropped;
        json_decref(a);
        runlog_chunk_cleanup(&c);
        final = false;
    }
    return out;
}

static const char *text_at(const json_t *lines, size_t i)
{
    return json_string_value(json_array_get(json_array_get(lines, i), 1));
}

static const char *stream_at(const json_t *lines, size_t i)
{
    return json_string_value(json_array_get(json_array_get(lines, i), 0));
}

/* Lines end at "\n" whatever the writes (a "\r" before it goes); the last
 * one without "\n" is a line at the end of the output. One of opsrun's is
 * one line whatever it quotes. */
START_TEST(lines_from_any_writes)
{
    struct runlog *l = runlog_new(&LIM, 1, NULL, 0);
    const char *text = "first line\r\nsecond\n\nfourth, unterminated";
    json_t *lines;

    for (size_t i = 0; text[i]; i++)
        runlog_write(l, text + i, 1);
    runlog_say(l, "step %d of %d", 1, 4);
    runlog_say(l, "failed: %s", "first\nsecond\r\n");
    runlog_end_output(l);
    lines = take_all(l, true, NULL);
    ck_assert_int_eq(json_array_size(lines), 6);
    ck_assert_str_eq(text_at(lines, 0), "first line");
    ck_assert_str_eq(text_at(lines, 1), "second");
    ck_assert_str_eq(text_at(lines, 2), "");
    ck_assert_str_eq(text_at(lines, 3), "step 1 of 4");
    ck_assert_str_eq(stream_at(lines, 3), "opsrun");
    ck_assert_str_eq(text_at(lines, 4), "failed: first second  "); /* an opsrun line is one line */
    ck_assert_str_eq(text_at(lines, 5), "fourth, unterminated");
    ck_assert_str_eq(stream_at(lines, 5), "stderr");
    ck_assert(!runlog_take(l, 1 << 20, true, &(struct runlog_chunk){0}));
    json_decref(lines);
    runlog_free(l);
}
END_TEST

/* A secret is masked in a command's lines when split across writes, in
 * opsrun's lines, and when a line is cut right through it; values shorter
 * than RUNLOG_SECRET_MIN are no secrets. */
START_TEST(secrets_masked)
{
    const char *secrets[] = {"hunter2-token", "xy"};
    struct runlog *l = runlog_new(&LIM, 1, secrets, 2);
    char long_line[400];
    json_t *lines;

    runlog_write(l, "token=hunt", 10);
    runlog_write(l, "er2-tok", 7);
    runlog_write(l, "en and hunter2-token again, xy\n", 31);
    runlog_say(l, "GET https://api/%s/jobs", "hunter2-token");
    memset(long_line, 'a', sizeof(long_line));
    memcpy(long_line + 295, "hunter2-token", 13); /* across the cut at 300 */
    long_line[sizeof(long_line) - 1] = '\n';
    runlog_write(l, long_line, sizeof(long_line));
    lines = take_all(l, true, NULL);
    ck_assert_int_eq(json_array_size(lines), 3);
    ck_assert_str_eq(text_at(lines, 0), "token=*** and *** again, xy");
    ck_assert_str_eq(text_at(lines, 1), "GET https://api/***/jobs");
    ck_assert_msg(!strstr(text_at(lines, 2), "hunt"), "%s", text_at(lines, 2));
    ck_assert_msg(strstr(text_at(lines, 2), "aaa***") && strstr(text_at(lines, 2), " bytes cut]"),
                  "%s", text_at(lines, 2));
    json_decref(lines);
    runlog_free(l);
}
END_TEST

/* A line longer than max_line_bytes is cut with a marker naming the bytes
 * that went; its dropped bytes are counted. */
START_TEST(long_line_cut)
{
    struct runlog *l = runlog_new(&LIM, 1, NULL, 0);
    char buf[1000];
    int64_t dropped = 0;
    json_t *lines;

    memset(buf, 'z', sizeof(buf));
    runlog_write(l, buf, sizeof(buf)); /* 1000 bytes, no newline yet */
    runlog_write(l, "tail\n", 5);
    lines = take_all(l, false, &dropped);
    ck_assert_int_eq(json_array_size(lines), 1);
    ck_assert_uint_eq(strlen(text_at(lines, 0)), 300 + strlen(" [704 bytes cut]"));
    ck_assert_msg(strstr(text_at(lines, 0), "z [704 bytes cut]"), "%s", text_at(lines, 0));
    ck_assert_int_eq(dropped, 704);
    json_decref(lines);
    runlog_free(l);
}
END_TEST

/* Past max_bytes a command's lines are dropped (all of them: no holes),
 * counted, and the final take says how many bytes; opsrun's lines stay.
 * A line costs what it takes stored (its JSON: about 130 bytes for 99 of
 * text), so seven of them fit in 1000. */
START_TEST(cap_drops_and_says_so)
{
    struct runlog *l = runlog_new(&LIM, 2, NULL, 0);
    int64_t dropped = 0, nlines, ndropped;
    json_t *lines;
    char line[101];

    memset(line, 'q', 99);
    line[99] = '\n';
    line[100] = '\0';
    for (int i = 0; i < 20; i++)
        runlog_write(l, line, 100);
    runlog_write(l, "short\n", 6);
    runlog_say(l, "attempt 2 ended: failed");
    lines = take_all(l, true, &dropped);
    ck_assert_int_eq(json_array_size(lines), 9);
    ck_assert_str_eq(text_at(lines, 7), "attempt 2 ended: failed");
    ck_assert_str_eq(text_at(lines, 8), "1306 bytes of output dropped: the attempt wrote more "
                                        "than logs.max_bytes_per_attempt (1000 bytes)");
    ck_assert_str_eq(stream_at(lines, 8), "opsrun");
    ck_assert_int_eq(dropped, 1306);
    runlog_counts(l, &nlines, &ndropped);
    ck_assert_int_eq(nlines, 9);
    ck_assert_int_eq(ndropped, 1306);
    json_decref(lines);
    runlog_free(l);
}
END_TEST

/* A flood of empty lines is bounded as much as long ones: what the log
 * holds stays under the cap whatever the lines. */
START_TEST(empty_lines_count)
{
    struct runlog *l = runlog_new(&LIM, 1, NULL, 0);
    struct runlog_chunk c;
    char nl[1000];
    int64_t lines = 0, dropped = 0;

    memset(nl, '\n', sizeof(nl));
    for (int i = 0; i < 1000; i++)
        runlog_write(l, nl, sizeof(nl)); /* a million empty lines */
    ck_assert(runlog_take(l, SIZE_MAX, false, &c));
    ck_assert_uint_le(strlen(c.lines_json), LIM.max_bytes + 2);
    ck_assert_int_lt(c.nlines, 40);
    runlog_chunk_cleanup(&c);
    runlog_counts(l, &lines, &dropped);
    ck_assert_int_eq(dropped, 1000000 - lines);
    runlog_free(l);
}
END_TEST

/* A secret of several lines is masked line by line; of two secrets, one
 * holding the other, the longer is masked whole; runlog_mask masks any
 * text the same way. */
START_TEST(secrets_nested_and_multiline)
{
    const char *secrets[] = {"hunter2x", "hunter2x-and-more-secret",
                             "-----BEGIN KEY-----\nMIIEpQIBAAKCAQEA\n"};
    struct runlog *l = runlog_new(&LIM, 1, secrets, 3);
    json_t *lines;
    char *m;

    runlog_write(l, "token=hunter2x-and-more-secret and hunter2x\n", 44);
    runlog_write(l, "-----BEGIN KEY-----\nMIIEpQIBAAKCAQEA\n", 37);
    lines = take_all(l, false, NULL);
    ck_assert_str_eq(text_at(lines, 0), "token=*** and ***");
    ck_assert_str_eq(text_at(lines, 1), "***");
    ck_assert_str_eq(text_at(lines, 2), "***");
    json_decref(lines);
    m = runlog_mask(l, "exit 3: hunter2x-and-more-secret");
    ck_assert_str_eq(m, "exit 3: ***");
    free(m);
    m = runlog_mask(l, "more-secret and the rest"); /* cut out of a longer text */
    ck_assert_str_eq(m, "*** and the rest");
    free(m);
    runlog_free(l);
}
END_TEST

/* A cut never shows what began past max_line_bytes, even when masking an
 * earlier secret makes the line shorter. */
START_TEST(cut_after_a_masked_secret)
{
    char secret[101], line[500];
    const char *secrets[1] = {secret};
    struct runlog *l;
    json_t *lines;

    for (int i = 0; i < 100; i++)
        secret[i] = (char)('A' + i % 26);
    secret[100] = '\0';
    l = runlog_new(&(struct runlog_limits){256, 1 << 20}, 1, secrets, 1);
    memset(line, '.', sizeof(line));
    memcpy(line, secret, 100);
    memcpy(line + 300, secret, 100);
    line[sizeof(line) - 1] = '\n';
    runlog_write(l, line, sizeof(line));
    lines = take_all(l, false, NULL);
    ck_assert_msg(!strstr(text_at(lines, 0), "ABCDEFGHIJ"), "%s", text_at(lines, 0));
    ck_assert_msg(strncmp(text_at(lines, 0), "***....", 7) == 0, "%s", text_at(lines, 0));
    ck_assert_msg(strstr(text_at(lines, 0), " [243 bytes cut]"), "%s", text_at(lines, 0));
    json_decref(lines);
    runlog_free(l);
}
END_TEST

/* A take holds at most max_bytes (but one line always); a chunk whose
 * write failed goes back before the lines written after it. */
START_TEST(takes_bounded_and_restored)
{
    struct runlog *l = runlog_new(&(struct runlog_limits){300, 1 << 20}, 1, NULL, 0);
    struct runlog_chunk a, b;
    json_t *lines;
    char text[32];

    for (int i = 0; i < 10; i++) {
        snprintf(text, sizeof(text), "line \"%d\", [x]\n", i);
        runlog_write(l, text, strlen(text));
    }
    ck_assert(runlog_pending_since(l) > 0);
    ck_assert(runlog_take(l, 100, false, &a));
    ck_assert(a.nlines >= 1 && a.nlines < 10);
    ck_assert(runlog_take(l, 1, false, &b));
    ck_assert_int_eq(b.nlines, 1);
    runlog_say(l, "later");
    runlog_restore(l, &b);
    runlog_restore(l, &a);
    lines = take_all(l, false, NULL);
    ck_assert_int_eq(json_array_size(lines), 11);
    for (int i = 0; i < 10; i++) {
        snprintf(text, sizeof(text), "line \"%d\", [x]", i);
        ck_assert_str_eq(text_at(lines, (size_t)i), text);
    }
    ck_assert_str_eq(text_at(lines, 10), "later");
    ck_assert_int_eq(runlog_pending_since(l), 0);
    json_decref(lines);
    runlog_free(l);
}
END_TEST

/* Bytes that are not UTF-8, and NULs (which jsonb refuses), are replaced. */
START_TEST(bytes_made_text)
{
    struct runlog *l = runlog_new(&LIM, 1, NULL, 0);
    json_t *lines;

    runlog_write(l, "a\0b\xff\xfe c \xc3\xa9\n", 11);
    lines = take_all(l, false, NULL);
    ck_assert_str_eq(text_at(lines, 0), "a b?? c \xc3\xa9");
    json_decref(lines);
    runlog_free(l);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("runlog");
    TCase *tc = tcase_create("runlog");
    SRunner *sr;
    int failed;

    tcase_add_test(tc, lines_from_any_writes);
    tcase_add_test(tc, secrets_masked);
    tcase_add_test(tc, long_line_cut);
    tcase_add_test(tc, cap_drops_and_says_so);
    tcase_add_test(tc, empty_lines_count);
    tcase_add_test(tc, secrets_nested_and_multiline);
    tcase_add_test(tc, cut_after_a_masked_secret);
    tcase_add_test(tc, takes_bounded_and_restored);
    tcase_add_test(tc, bytes_made_text);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
