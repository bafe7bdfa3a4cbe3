/* tests/unit/test_jsonptr.c — the Check suite for common/jsonptr.c: JSON
 * pointers (RFC 6901, its own examples), escapes, array indexes, the token
 * length limit, and values as text.
 *
 * System headers come before jsonptr.h, ahead of common.h's poison pragma. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/jsonptr.h"

static json_t *parse(const char *text)
{
    json_t *j = json_loads(text, JSON_DECODE_ANY, NULL);

    ck_assert_ptr_nonnull(j);
    return j;
}

/* RFC 6901 section 5. */
START_TEST(pointer_rfc_examples)
{
    json_t *doc = parse("{\"foo\": [\"bar\", \"baz\"], \"\": 0, \"a/b\": 1, \"c%d\": 2, "
                        "\"e^f\": 3, \"g|h\": 4, \"i\\\\j\": 5, \"k\\\"l\": 6, \" \": 7, "
                        "\"m~n\": 8}");
    static const struct {
        const char *ptr;
        long long want;
    } ints[] = {{"/", 0},     {"/a~1b", 1}, {"/c%d", 2}, {"/e^f", 3}, {"/g|h", 4},
                {"/i\\j", 5}, {"/k\"l", 6}, {"/ ", 7},   {"/m~0n", 8}};

    ck_assert_ptr_eq(jptr_get(doc, ""), doc);
    ck_assert_str_eq(json_string_value(jptr_get(doc, "/foo/0")), "bar");
    ck_assert(json_is_array(jptr_get(doc, "/foo")));
    for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++)
        ck_assert_msg(json_integer_value(jptr_get(doc, ints[i].ptr)) == ints[i].want, "%s",
                      ints[i].ptr);
    ck_assert_ptr_null(jptr_get(doc, "/foo/2"));
    ck_assert_ptr_null(jptr_get(doc, "/foo/01"));
    ck_assert_ptr_null(jptr_get(doc, "/foo/-"));
    ck_assert_ptr_null(jptr_get(doc, "foo"));
    ck_assert_ptr_null(jptr_get(doc, "/m~2n"));
    ck_assert(!jptr_valid("x"));
    ck_assert(!jptr_valid("/a~"));
    ck_assert(jptr_valid(""));
    json_decref(doc);
}
END_TEST

START_TEST(pointer_text)
{
    json_t *doc = parse("{\"s\": \"abc\", \"i\": 42, \"r\": 1.5, \"o\": {}, \"n\": null}");
    char *t;

    t = jptr_text(doc, "/s");
    ck_assert_str_eq(t, "abc");
    free(t);
    t = jptr_text(doc, "/i");
    ck_assert_str_eq(t, "42");
    free(t);
    t = jptr_text(doc, "/r");
    ck_assert_str_eq(t, "1.5");
    free(t);
    ck_assert_ptr_null(jptr_text(doc, "/o"));
    ck_assert_ptr_null(jptr_text(doc, "/n"));
    ck_assert_ptr_null(jptr_text(doc, "/missing"));
    json_decref(doc);
}
END_TEST

/* "~01" is a literal "~1": "~0" is unescaped first, never into "/". */
START_TEST(pointer_escape_order)
{
    json_t *doc = parse("{\"~1\": \"tilde-one\", \"/\": \"slash\", \"~\": \"tilde\"}");

    ck_assert_str_eq(json_string_value(jptr_get(doc, "/~01")), "tilde-one");
    ck_assert_str_eq(json_string_value(jptr_get(doc, "/~1")), "slash");
    ck_assert_str_eq(json_string_value(jptr_get(doc, "/~0")), "tilde");
    json_decref(doc);
}
END_TEST

START_TEST(pointer_validity)
{
    ck_assert(jptr_valid(""));
    ck_assert(jptr_valid("/"));
    ck_assert(jptr_valid("/a/~0/~1/b"));
    ck_assert(!jptr_valid(NULL));
    ck_assert(!jptr_valid("a/b"));
    ck_assert(!jptr_valid("~0"));
    ck_assert(!jptr_valid("/a~2"));
    ck_assert(!jptr_valid("/a~"));
}
END_TEST

START_TEST(pointer_nested_and_indexes)
{
    json_t *doc = parse("{\"a\": [{\"b\": \"x\"}, [10, 20]], \"s\": \"str\"}");

    ck_assert_str_eq(json_string_value(jptr_get(doc, "/a/0/b")), "x");
    ck_assert_int_eq(json_integer_value(jptr_get(doc, "/a/1/1")), 20);
    ck_assert_ptr_null(jptr_get(doc, "/a/1/2"));
    ck_assert_ptr_null(jptr_get(doc, "/a/0/b/c")); /* into a string */
    ck_assert_ptr_null(jptr_get(doc, "/s/0"));
    ck_assert_ptr_null(jptr_get(doc, "/a/b"));                    /* a name into an array */
    ck_assert_ptr_null(jptr_get(doc, "/a/-1"));                   /* no sign */
    ck_assert_ptr_null(jptr_get(doc, "/a/"));                     /* empty index */
    ck_assert_ptr_null(jptr_get(doc, "/a/18446744073709551616")); /* overflows */
    ck_assert_ptr_null(jptr_get(NULL, "/a"));
    ck_assert_ptr_null(jptr_get(NULL, ""));
    ck_assert_ptr_null(jptr_get(doc, "a"));
    json_decref(doc);
}
END_TEST

/* A reference token of up to 511 bytes is looked up; a longer one finds
 * nothing, even when the document has that key. */
START_TEST(pointer_token_limit)
{
    char key[513], ptr[515];
    json_t *doc = json_object();

    memset(key, 'k', 512);
    key[512] = '\0';
    json_object_set_new(doc, key, json_integer(512));
    key[511] = '\0';
    json_object_set_new(doc, key, json_integer(511));
    ptr[0] = '/';
    memset(ptr + 1, 'k', 511);
    ptr[512] = '\0';
    ck_assert_int_eq(json_integer_value(jptr_get(doc, ptr)), 511);
    ptr[512] = 'k';
    ptr[513] = '\0';
    ck_assert_ptr_null(jptr_get(doc, ptr));
    /* an escape counts once, after unescaping: 510 bytes and "~1" is 511 */
    memset(key, 'k', 510);
    key[510] = '/';
    key[511] = '\0';
    json_object_set_new(doc, key, json_integer(-1));
    memcpy(ptr + 511, "~1", 3);
    ck_assert_int_eq(json_integer_value(jptr_get(doc, ptr)), -1);
    json_decref(doc);
}
END_TEST

START_TEST(pointer_text_kinds)
{
    json_t *doc = parse("{\"neg\": -7, \"tenth\": 0.1, \"t\": true, \"a\": [1], \"e\": \"\"}");
    json_t *str = parse("\"whole\"");
    char *t;

    t = jptr_text(doc, "/neg");
    ck_assert_str_eq(t, "-7");
    free(t);
    t = jptr_text(doc, "/tenth");
    ck_assert_str_eq(t, "0.10000000000000001");
    free(t);
    t = jptr_text(doc, "/e");
    ck_assert_str_eq(t, "");
    free(t);
    t = jptr_text(str, "");
    ck_assert_str_eq(t, "whole");
    free(t);
    ck_assert_ptr_null(jptr_text(doc, "/t"));
    ck_assert_ptr_null(jptr_text(doc, "/a"));
    ck_assert_ptr_null(jptr_text(doc, ""));
    ck_assert_ptr_null(jptr_text(doc, "bad"));
    json_decref(doc);
    json_decref(str);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("jsonptr");
    TCase *t = tcase_create("jptr");
    SRunner *r;
    int failed;

    tcase_add_test(t, pointer_rfc_examples);
    tcase_add_test(t, pointer_text);
    tcase_add_test(t, pointer_escape_order);
    tcase_add_test(t, pointer_validity);
    tcase_add_test(t, pointer_nested_and_indexes);
    tcase_add_test(t, pointer_token_limit);
    tcase_add_test(t, pointer_text_kinds);
    suite_add_tcase(s, t);
    r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
