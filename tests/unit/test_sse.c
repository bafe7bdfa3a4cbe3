/* tests/unit/test_sse.c — the pure parts of the streams: Last-Event-ID
 * parsing, SSE frame formatting (with and without the id: line, data with
 * newlines), and the JSON compaction applied to every frame. */
#include "live/hub.h"
#include "live/sse.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

START_TEST(last_id_parse)
{
    static const char *const bad[] = {"",
                                      "-1",
                                      "+1",
                                      " 1",
                                      "1 ",
                                      "0x10",
                                      "1e3",
                                      "1.0",
                                      "abc",
                                      "9223372036854775808",
                                      "12345678901234567890"};
    int64_t v = -1;

    ck_assert(sse_parse_last_id("0", &v));
    ck_assert_int_eq(v, 0);
    ck_assert(sse_parse_last_id("42", &v));
    ck_assert_int_eq(v, 42);
    ck_assert(sse_parse_last_id("007", &v));
    ck_assert_int_eq(v, 7);
    ck_assert(sse_parse_last_id("9223372036854775807", &v));
    ck_assert_int_eq(v, INT64_MAX);
    ck_assert(!sse_parse_last_id(NULL, &v));
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(!sse_parse_last_id(bad[i], &v), "\"%s\" accepted", bad[i]);
}
END_TEST

static char *frame(int64_t id, const char *event, const char *data, size_t *id_len)
{
    size_t len = hub_frame_len(id, event, data);
    char *buf = malloc(len + 1);

    memset(buf, '#', len + 1);
    ck_assert_uint_eq(hub_frame_write(buf, id, event, data, id_len), len);
    ck_assert_int_eq(buf[len], '\0');
    return buf;
}

START_TEST(frame_format)
{
    size_t il = 99;
    char *f = frame(17, "status", "{\"a\":1}", &il);

    ck_assert_str_eq(f, "id: 17\nevent: status\ndata: {\"a\":1}\n\n");
    ck_assert_uint_eq(il, strlen("id: 17\n"));
    free(f);
    f = frame(0, "snapshot", "{}", &il);
    ck_assert_str_eq(f, "event: snapshot\ndata: {}\n\n");
    ck_assert_uint_eq(il, 0);
    free(f);
    /* A newline in data continues on another data: line (joined with \n by
     * the client), so no data can end an event early. */
    f = frame(9223372036854775807LL, "reset", "{\n\"a\": 1\n}", NULL);
    ck_assert_str_eq(f,
                     "id: 9223372036854775807\nevent: reset\ndata: {\ndata: \"a\": 1\ndata: }\n\n");
    free(f);
}
END_TEST

START_TEST(json_compact)
{
    char *s = hub_json_compact(
        "{\"id\" : \"r1\", \"n\" : 1, \"o\" : {\"x\" : [1, 2]}, \"s\" : \"a : b\"}");

    ck_assert_str_eq(s, "{\"id\":\"r1\",\"n\":1,\"o\":{\"x\":[1,2]},\"s\":\"a : b\"}");
    free(s);
    ck_assert_ptr_null(hub_json_compact("{not json"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sse");
    TCase *t = tcase_create("pure");
    SRunner *r;
    int failed;

    tcase_add_test(t, last_id_parse);
    tcase_add_test(t, frame_format);
    tcase_add_test(t, json_compact);
    suite_add_tcase(s, t);
    r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed == 0 ? 0 : 1;
}
