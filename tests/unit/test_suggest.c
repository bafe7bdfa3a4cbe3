/* tests/unit/test_suggest.c — the Check suite for common/suggest.c: the
 * edit distance (swaps count once, case is ignored, the length cap), the
 * nearest candidate, how near is near enough, and the hint's exact text.
 *
 * System headers come before suggest.h, ahead of common.h's poison pragma. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/suggest.h"

static size_t dist(const char *a, const char *b)
{
    return suggest_distance(a, strlen(a), b, strlen(b));
}

START_TEST(distance_counts_each_edit)
{
    ck_assert_uint_eq(dist("", ""), 0);
    ck_assert_uint_eq(dist("", "abc"), 3);
    ck_assert_uint_eq(dist("abc", ""), 3);
    ck_assert_uint_eq(dist("submit", "submit"), 0);
    ck_assert_uint_eq(dist("sumbit", "submit"), 1); /* a swap of neighbours */
    ck_assert_uint_eq(dist("lisen", "listen"), 1);  /* an insertion */
    ck_assert_uint_eq(dist("listen", "lisen"), 1);  /* a deletion */
    ck_assert_uint_eq(dist("demo", "dema"), 1);     /* a substitution */
    ck_assert_uint_eq(dist("kitten", "sitting"), 3);
    ck_assert_uint_eq(dist("queue.wokers", "queue.workers"), 1);
    ck_assert_uint_eq(dist("ca", "abc"), 3); /* no edit of a swapped pair */
}
END_TEST

START_TEST(distance_ignores_case)
{
    ck_assert_uint_eq(dist("Demo", "demo"), 0);
    ck_assert_uint_eq(dist("SUBMIT", "sumbit"), 1);
}
END_TEST

START_TEST(distance_caps_the_length)
{
    char longer[SUGGEST_LEN_MAX + 2];

    memset(longer, 'a', sizeof(longer) - 1);
    longer[sizeof(longer) - 1] = '\0';
    ck_assert_uint_eq(dist(longer, "a"), SIZE_MAX);
    ck_assert_uint_eq(dist("a", longer), SIZE_MAX);
    longer[SUGGEST_LEN_MAX] = '\0';
    ck_assert_uint_eq(dist(longer, longer), 0);
}
END_TEST

START_TEST(nearest_wins_first_of_equals)
{
    struct suggest s;
    char buf[64];

    suggest_init(&s, "wach");
    suggest_add(&s, "submit");
    suggest_add(&s, "watch");
    suggest_add(&s, "each"); /* as near as "watch", but later */
    suggest_add(&s, NULL);
    ck_assert(suggest_found(&s));
    ck_assert_str_eq(suggest_hint(&s, buf, sizeof(buf)), "; did you mean \"watch\"?");
}
END_TEST

START_TEST(the_word_itself_is_no_suggestion)
{
    struct suggest s;
    char buf[64];

    suggest_init(&s, "demo");
    suggest_add(&s, "demo");
    ck_assert(!suggest_found(&s));
    suggest_add(&s, "Demo"); /* the same but for case: meant */
    ck_assert_str_eq(suggest_hint(&s, buf, sizeof(buf)), "; did you mean \"Demo\"?");
}
END_TEST

START_TEST(part_of_a_string)
{
    static const char key[] = "queue.workers";
    struct suggest s;
    char buf[64];

    suggest_init(&s, "qeue");
    suggest_add_len(&s, key, 5);
    ck_assert_str_eq(suggest_hint(&s, buf, sizeof(buf)), "; did you mean \"queue\"?");
}
END_TEST

START_TEST(known_by_another_name)
{
    static const char key[] = "queue.workers";
    struct suggest s;
    char buf[64];

    suggest_init(&s, "workers");
    suggest_add(&s, "listen");
    suggest_add_as(&s, key, strlen(key), key + 6, strlen(key + 6));
    ck_assert_uint_eq(s.best_dist, 0);
    ck_assert_str_eq(suggest_hint(&s, buf, sizeof(buf)), "; did you mean \"queue.workers\"?");
}
END_TEST

/* A third of the word's length, at least 1 and at most 3 edits. */
START_TEST(near_enough_scales_with_the_word)
{
    static const struct {
        const char *word, *cand;
        bool found;
    } cases[] = {
        {"x", "y", true},
        {"ab", "cd", false},
        {"demp", "demo", true},
        {"sumbit", "submit", true},
        {"sbmt", "submit", false},
        {"subm", "submit", false},
        {"abcdef", "abxyef", true},
        {"queue.wkrs", "queue.workers", true},
        {"nosuch", "demo", false},
        {"a_long_name_here", "a_lung_nome_hare", true},
        {"a_long_name_here", "b_lung_nome_hare", false},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct suggest s;
        suggest_init(&s, cases[i].word);
        suggest_add(&s, cases[i].cand);
        ck_assert_msg(suggest_found(&s) == cases[i].found, "%s / %s", cases[i].word, cases[i].cand);
    }
}
END_TEST

START_TEST(no_candidate_no_hint)
{
    struct suggest s;
    char buf[8] = "junk";

    suggest_init(&s, "anything");
    ck_assert(!suggest_found(&s));
    ck_assert_str_eq(suggest_hint(&s, buf, sizeof(buf)), "");
}
END_TEST

START_TEST(hint_is_cut_to_its_buffer)
{
    struct suggest s;
    char buf[16];

    suggest_init(&s, "watc");
    suggest_add(&s, "watch");
    ck_assert_str_eq(suggest_hint(&s, buf, sizeof(buf)), "; did you mean ");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("suggest");
    TCase *d = tcase_create("distance"), *n = tcase_create("nearest");
    SRunner *r;
    int failed;

    tcase_add_test(d, distance_counts_each_edit);
    tcase_add_test(d, distance_ignores_case);
    tcase_add_test(d, distance_caps_the_length);
    tcase_add_test(n, nearest_wins_first_of_equals);
    tcase_add_test(n, the_word_itself_is_no_suggestion);
    tcase_add_test(n, part_of_a_string);
    tcase_add_test(n, known_by_another_name);
    tcase_add_test(n, near_enough_scales_with_the_word);
    tcase_add_test(n, no_candidate_no_hint);
    tcase_add_test(n, hint_is_cut_to_its_buffer);
    suite_add_tcase(s, d);
    suite_add_tcase(s, n);
    r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
