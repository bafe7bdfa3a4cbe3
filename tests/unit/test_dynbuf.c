/* tests/unit/test_dynbuf.c — the Check suite for common/dynbuf.c: growth,
 * the exact cap boundary, formatted adds, take, reset, truncate and free,
 * NUL termination, and that a refused add leaves the buffer as it was.
 *
 * System headers come before dynbuf.h, ahead of common.h's poison pragma. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "common/dynbuf.h"

/* What a refused add must leave untouched. */
struct snap {
    char *p;
    size_t len, cap, max;
    char text[64];
};

static struct snap snap_of(const struct dynbuf *b)
{
    struct snap s = {b->p, b->len, b->cap, b->max, ""};

    if (b->p)
        memcpy(s.text, b->p, b->len + 1);
    return s;
}

static void assert_unchanged(const struct dynbuf *b, const struct snap *s)
{
    ck_assert_ptr_eq(b->p, s->p);
    ck_assert_uint_eq(b->len, s->len);
    ck_assert_uint_eq(b->cap, s->cap);
    ck_assert_uint_eq(b->max, s->max);
    if (b->p)
        ck_assert_mem_eq(b->p, s->text, b->len + 1);
}

START_TEST(init_is_empty)
{
    struct dynbuf b;

    dynbuf_init(&b, 100);
    ck_assert_uint_eq(dynbuf_len(&b), 0);
    ck_assert_ptr_null(dynbuf_ptr(&b));
    ck_assert_uint_eq(b.cap, 0);
    ck_assert_uint_eq(b.max, 100);
    dynbuf_free(&b);
}
END_TEST

START_TEST(add_grows_and_terminates)
{
    struct dynbuf b;
    char want[5000];

    dynbuf_init(&b, sizeof(want));
    for (size_t i = 0; i < sizeof(want); i++) {
        char c = (char)('a' + i % 26);
        want[i] = c;
        ck_assert_int_eq(dynbuf_add(&b, &c, 1), ST_OK);
        ck_assert_uint_eq(dynbuf_len(&b), i + 1);
        ck_assert_int_eq(dynbuf_ptr(&b)[i + 1], '\0');
        ck_assert_uint_ge(b.cap, i + 2);
        ck_assert_uint_le(b.cap, sizeof(want) + 1);
    }
    ck_assert_mem_eq(dynbuf_ptr(&b), want, sizeof(want));
    dynbuf_free(&b);
}
END_TEST

START_TEST(add_keeps_nul_bytes)
{
    struct dynbuf b;

    dynbuf_init(&b, 16);
    ck_assert_int_eq(dynbuf_add(&b, "a\0b", 3), ST_OK);
    ck_assert_int_eq(dynbuf_adds(&b, "cd"), ST_OK);
    ck_assert_uint_eq(dynbuf_len(&b), 5);
    ck_assert_mem_eq(dynbuf_ptr(&b), "a\0bcd", 6);
    dynbuf_free(&b);
}
END_TEST

START_TEST(add_nothing_allocates_nothing)
{
    struct dynbuf b;

    dynbuf_init(&b, 0);
    ck_assert_int_eq(dynbuf_add(&b, "", 0), ST_OK);
    ck_assert_int_eq(dynbuf_adds(&b, ""), ST_OK);
    ck_assert_int_eq(dynbuf_addf(&b, "%s", ""), ST_OK);
    ck_assert_ptr_null(dynbuf_ptr(&b));
    ck_assert_int_eq(dynbuf_add(&b, "x", 1), ST_TOO_LARGE);
    ck_assert_uint_eq(dynbuf_len(&b), 0);
    ck_assert_ptr_null(dynbuf_ptr(&b));
}
END_TEST

/* max - 1, max and max + 1 bytes, one add at a time. */
START_TEST(cap_boundary_stepwise)
{
    struct dynbuf b;
    struct snap s;

    dynbuf_init(&b, 10);
    ck_assert_int_eq(dynbuf_add(&b, "123456789", 9), ST_OK);
    ck_assert_int_eq(dynbuf_add(&b, "0", 1), ST_OK);
    ck_assert_uint_eq(dynbuf_len(&b), 10);
    ck_assert_str_eq(dynbuf_ptr(&b), "1234567890");
    ck_assert_uint_le(b.cap, 11);
    s = snap_of(&b);
    ck_assert_int_eq(dynbuf_add(&b, "x", 1), ST_TOO_LARGE);
    assert_unchanged(&b, &s);
    ck_assert_int_eq(dynbuf_adds(&b, "x"), ST_TOO_LARGE);
    assert_unchanged(&b, &s);
    ck_assert_int_eq(dynbuf_add(&b, "", 0), ST_OK); /* nothing more still fits */
    assert_unchanged(&b, &s);
    dynbuf_free(&b);
}
END_TEST

/* max - 1, max and max + 1 bytes, each in one add to an empty buffer. */
START_TEST(cap_boundary_whole)
{
    static const char text[] = "abcdefghijk"; /* 11 bytes */
    struct dynbuf b;
    struct snap s;

    dynbuf_init(&b, 10);
    s = snap_of(&b);
    ck_assert_int_eq(dynbuf_add(&b, text, 11), ST_TOO_LARGE);
    assert_unchanged(&b, &s);
    ck_assert_int_eq(dynbuf_add(&b, text, 10), ST_OK);
    ck_assert_str_eq(dynbuf_ptr(&b), "abcdefghij");
    dynbuf_free(&b);
    ck_assert_int_eq(dynbuf_add(&b, text, 9), ST_OK);
    ck_assert_str_eq(dynbuf_ptr(&b), "abcdefghi");
    ck_assert_uint_eq(dynbuf_len(&b), 9);
    dynbuf_free(&b);
}
END_TEST

/* A refused add in the middle of a growing buffer changes nothing, and a
 * smaller one that fits still goes in after it. */
START_TEST(refused_add_leaves_buffer)
{
    struct dynbuf b;
    struct snap s;

    dynbuf_init(&b, 20);
    ck_assert_int_eq(dynbuf_adds(&b, "hello, "), ST_OK);
    s = snap_of(&b);
    ck_assert_int_eq(dynbuf_adds(&b, "world, how are you?"), ST_TOO_LARGE);
    assert_unchanged(&b, &s);
    ck_assert_int_eq(dynbuf_adds(&b, "world"), ST_OK);
    ck_assert_str_eq(dynbuf_ptr(&b), "hello, world");
    dynbuf_free(&b);
}
END_TEST

/* One mebibyte in 4 KiB pieces fills a 1 MiB buffer exactly. */
START_TEST(large_fill_to_cap)
{
    struct dynbuf b;
    char chunk[4096];
    size_t n = 0;

    dynbuf_init(&b, 1024 * 1024);
    while (n < 1024 * 1024) {
        memset(chunk, 'a' + (int)(n / sizeof(chunk) % 26), sizeof(chunk));
        ck_assert_int_eq(dynbuf_add(&b, chunk, sizeof(chunk)), ST_OK);
        n += sizeof(chunk);
    }
    ck_assert_uint_eq(dynbuf_len(&b), 1024 * 1024);
    ck_assert_uint_eq(b.cap, 1024 * 1024 + 1);
    ck_assert_int_eq(dynbuf_add(&b, "z", 1), ST_TOO_LARGE);
    ck_assert_int_eq(dynbuf_ptr(&b)[0], 'a');
    ck_assert_int_eq(dynbuf_ptr(&b)[1024 * 1024 - 1], 'a' + 255 % 26);
    ck_assert_int_eq(dynbuf_ptr(&b)[1024 * 1024], '\0');
    dynbuf_free(&b);
}
END_TEST

START_TEST(addf_formats)
{
    struct dynbuf b;

    dynbuf_init(&b, 100);
    ck_assert_int_eq(dynbuf_addf(&b, "%s=%d", "n", -42), ST_OK);
    ck_assert_int_eq(dynbuf_addf(&b, " %05.1f|%-3s|%x|%zu", 3.14159, "ab", 255u, (size_t)7), ST_OK);
    ck_assert_str_eq(dynbuf_ptr(&b), "n=-42 003.1|ab |ff|7");
    ck_assert_uint_eq(dynbuf_len(&b), strlen("n=-42 003.1|ab |ff|7"));
    dynbuf_free(&b);
}
END_TEST

/* Formatted text that would pass max is refused whole, with nothing
 * appended; text that reaches max exactly fits. */
START_TEST(addf_at_cap)
{
    struct dynbuf b;
    struct snap s;

    dynbuf_init(&b, 8);
    ck_assert_int_eq(dynbuf_addf(&b, "%d", 12345), ST_OK);
    s = snap_of(&b);
    ck_assert_int_eq(dynbuf_addf(&b, "%s", "abcd"), ST_TOO_LARGE);
    assert_unchanged(&b, &s);
    ck_assert_int_eq(dynbuf_addf(&b, "%c%s", 'a', "bc"), ST_OK);
    ck_assert_str_eq(dynbuf_ptr(&b), "12345abc");
    ck_assert_uint_eq(dynbuf_len(&b), 8);
    s = snap_of(&b);
    ck_assert_int_eq(dynbuf_addf(&b, "%d", 0), ST_TOO_LARGE);
    assert_unchanged(&b, &s);
    dynbuf_free(&b);
}
END_TEST

/* Longer than the first allocation: the second formatting pass must get the
 * whole text. */
START_TEST(addf_long)
{
    struct dynbuf b;
    char want[301];

    memset(want, 'q', 300);
    want[300] = '\0';
    dynbuf_init(&b, 1000);
    ck_assert_int_eq(dynbuf_adds(&b, "<"), ST_OK);
    ck_assert_int_eq(dynbuf_addf(&b, "%s>", want), ST_OK);
    ck_assert_uint_eq(dynbuf_len(&b), 302);
    ck_assert_int_eq(dynbuf_ptr(&b)[0], '<');
    ck_assert_mem_eq(dynbuf_ptr(&b) + 1, want, 300);
    ck_assert_str_eq(dynbuf_ptr(&b) + 301, ">");
    dynbuf_free(&b);
}
END_TEST

START_TEST(take_moves_out)
{
    struct dynbuf b;
    char *s;

    dynbuf_init(&b, 32);
    ck_assert_int_eq(dynbuf_adds(&b, "taken"), ST_OK);
    s = dynbuf_take(&b);
    ck_assert_str_eq(s, "taken");
    ck_assert_uint_eq(dynbuf_len(&b), 0);
    ck_assert_ptr_null(dynbuf_ptr(&b));
    ck_assert_uint_eq(b.cap, 0);
    ck_assert_uint_eq(b.max, 32);
    ck_assert_int_eq(dynbuf_adds(&b, "again"), ST_OK);
    ck_assert_ptr_ne(dynbuf_ptr(&b), s);
    ck_assert_str_eq(dynbuf_ptr(&b), "again");
    ck_assert_str_eq(s, "taken");
    free(s);
    dynbuf_free(&b);
}
END_TEST

START_TEST(take_empty_is_empty_string)
{
    struct dynbuf b;
    char *s;

    dynbuf_init(&b, 4);
    s = dynbuf_take(&b);
    ck_assert_ptr_nonnull(s);
    ck_assert_str_eq(s, "");
    free(s);
    ck_assert_int_eq(dynbuf_adds(&b, "ab"), ST_OK);
    dynbuf_reset(&b);
    s = dynbuf_take(&b); /* reset but still holding memory */
    ck_assert_str_eq(s, "");
    ck_assert_ptr_null(dynbuf_ptr(&b));
    free(s);
}
END_TEST

START_TEST(reset_keeps_memory)
{
    struct dynbuf b;
    char *p;

    dynbuf_init(&b, 64);
    ck_assert_int_eq(dynbuf_adds(&b, "first contents"), ST_OK);
    p = dynbuf_ptr(&b);
    dynbuf_reset(&b);
    ck_assert_uint_eq(dynbuf_len(&b), 0);
    ck_assert_ptr_eq(dynbuf_ptr(&b), p);
    ck_assert_str_eq(dynbuf_ptr(&b), "");
    ck_assert_uint_eq(b.max, 64);
    ck_assert_int_eq(dynbuf_adds(&b, "second"), ST_OK);
    ck_assert_ptr_eq(dynbuf_ptr(&b), p);
    ck_assert_str_eq(dynbuf_ptr(&b), "second");
    dynbuf_free(&b);
}
END_TEST

/* After reset the whole max is available again. */
START_TEST(reset_restores_room)
{
    struct dynbuf b;

    dynbuf_init(&b, 4);
    ck_assert_int_eq(dynbuf_adds(&b, "abcd"), ST_OK);
    ck_assert_int_eq(dynbuf_adds(&b, "e"), ST_TOO_LARGE);
    dynbuf_reset(&b);
    ck_assert_int_eq(dynbuf_adds(&b, "wxyz"), ST_OK);
    ck_assert_str_eq(dynbuf_ptr(&b), "wxyz");
    dynbuf_free(&b);
}
END_TEST

START_TEST(truncate_shortens)
{
    struct dynbuf b;

    dynbuf_init(&b, 32);
    ck_assert_int_eq(dynbuf_adds(&b, "hello world"), ST_OK);
    dynbuf_truncate(&b, 5);
    ck_assert_uint_eq(dynbuf_len(&b), 5);
    ck_assert_str_eq(dynbuf_ptr(&b), "hello");
    ck_assert_int_eq(dynbuf_adds(&b, "!"), ST_OK);
    ck_assert_str_eq(dynbuf_ptr(&b), "hello!");
    dynbuf_truncate(&b, 6); /* its own length: no change */
    ck_assert_str_eq(dynbuf_ptr(&b), "hello!");
    dynbuf_free(&b);
}
END_TEST

START_TEST(free_empties_and_allows_reuse)
{
    struct dynbuf b;

    dynbuf_init(&b, 8);
    ck_assert_int_eq(dynbuf_adds(&b, "12345678"), ST_OK);
    dynbuf_free(&b);
    ck_assert_ptr_null(dynbuf_ptr(&b));
    ck_assert_uint_eq(dynbuf_len(&b), 0);
    ck_assert_uint_eq(b.cap, 0);
    ck_assert_uint_eq(b.max, 8);
    dynbuf_free(&b); /* twice: a no-op */
    ck_assert_ptr_null(dynbuf_ptr(&b));
    ck_assert_int_eq(dynbuf_adds(&b, "87654321"), ST_OK);
    ck_assert_str_eq(dynbuf_ptr(&b), "87654321");
    ck_assert_int_eq(dynbuf_adds(&b, "9"), ST_TOO_LARGE);
    dynbuf_free(&b);
}
END_TEST

/* Written out in pieces: each drain takes the next bytes; at the end the
 * buffer is empty again, its memory kept when small, given back when it
 * grew past 64 KiB. */
START_TEST(drain_in_pieces)
{
    struct dynbuf b;
    size_t off = 0;
    char out[8];
    static char big[70 * 1024];

    dynbuf_init(&b, 1024 * 1024);
    ck_assert_int_eq(dynbuf_adds(&b, "abcdefghij"), ST_OK);
    ck_assert_uint_eq(dynbuf_drain(&b, &off, out, 4), 4);
    ck_assert_int_eq(memcmp(out, "abcd", 4), 0);
    ck_assert_uint_eq(off, 4);
    ck_assert_uint_eq(dynbuf_drain(&b, &off, out, 4), 4);
    ck_assert_int_eq(memcmp(out, "efgh", 4), 0);
    ck_assert_uint_eq(dynbuf_drain(&b, &off, out, 4), 2);
    ck_assert_int_eq(memcmp(out, "ij", 2), 0);
    ck_assert_uint_eq(off, 0);
    ck_assert_uint_eq(dynbuf_len(&b), 0);
    ck_assert_ptr_nonnull(dynbuf_ptr(&b)); /* small: kept */

    memset(big, 'x', sizeof(big));
    ck_assert_int_eq(dynbuf_add(&b, big, sizeof(big)), ST_OK);
    for (size_t got = 0; got < sizeof(big);)
        got += dynbuf_drain(&b, &off, out, sizeof(out));
    ck_assert_uint_eq(off, 0);
    ck_assert_ptr_null(dynbuf_ptr(&b)); /* past 64 KiB: given back */
    dynbuf_free(&b);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("dynbuf");
    TCase *add = tcase_create("add");
    TCase *cap = tcase_create("cap");
    TCase *addf = tcase_create("addf");
    TCase *life = tcase_create("lifetime");
    SRunner *r;
    int failed;

    tcase_add_test(add, init_is_empty);
    tcase_add_test(add, add_grows_and_terminates);
    tcase_add_test(add, add_keeps_nul_bytes);
    tcase_add_test(add, add_nothing_allocates_nothing);
    tcase_add_test(cap, cap_boundary_stepwise);
    tcase_add_test(cap, cap_boundary_whole);
    tcase_add_test(cap, refused_add_leaves_buffer);
    tcase_add_test(cap, large_fill_to_cap);
    tcase_add_test(addf, addf_formats);
    tcase_add_test(addf, addf_at_cap);
    tcase_add_test(addf, addf_long);
    tcase_add_test(life, take_moves_out);
    tcase_add_test(life, take_empty_is_empty_string);
    tcase_add_test(life, reset_keeps_memory);
    tcase_add_test(life, reset_restores_room);
    tcase_add_test(life, truncate_shortens);
    tcase_add_test(life, free_empties_and_allows_reuse);
    tcase_add_test(life, drain_in_pieces);
    suite_add_tcase(s, add);
    suite_add_tcase(s, cap);
    suite_add_tcase(s, addf);
    suite_add_tcase(s, life);
    r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
