/* tests/unit/test_common.c — the Check suite for common/common.c: string
 * sets (str_in and STR_IN).
 *
 * System headers come before common.h, ahead of its poison pragma. */
#include <check.h>
#include <stdlib.h>

#include "common/common.h"

static const char *const methods[] = {"GET", "POST", "PUT", NULL};

START_TEST(str_in_finds_every_member)
{
    ck_assert(str_in("GET", methods));
    ck_assert(str_in("POST", methods));
    ck_assert(str_in("PUT", methods));
}
END_TEST

/* Whole, case-sensitive matches only. */
START_TEST(str_in_rejects_near_misses)
{
    ck_assert(!str_in("get", methods));
    ck_assert(!str_in("GE", methods));
    ck_assert(!str_in("GETS", methods));
    ck_assert(!str_in("PUT ", methods));
    ck_assert(!str_in("", methods));
    ck_assert(!str_in("DELETE", methods));
}
END_TEST

START_TEST(str_in_null_and_empty_set)
{
    static const char *const none[] = {NULL};
    static const char *const blank[] = {"", NULL};

    ck_assert(!str_in(NULL, methods));
    ck_assert(!str_in("GET", none));
    ck_assert(!str_in("", none));
    ck_assert(str_in("", blank));
    ck_assert(!str_in("x", blank));
    ck_assert(!str_in(NULL, blank));
}
END_TEST

/* The set ends at its first NULL: what follows is not looked at. */
START_TEST(str_in_stops_at_null)
{
    static const char *const cut[] = {"a", NULL, "b", NULL};

    ck_assert(str_in("a", cut));
    ck_assert(!str_in("b", cut));
}
END_TEST

START_TEST(str_in_macro)
{
    const char *outcome = "timed_out";

    ck_assert(STR_IN(outcome, "cancelled", "timed_out"));
    ck_assert(!STR_IN(outcome, "cancelled", "failed"));
    ck_assert(STR_IN("one", "one"));
    ck_assert(!STR_IN("one", "on"));
    ck_assert(!STR_IN(NULL, "x"));
    /* the argument is evaluated once */
    {
        const char *names[] = {"x", "y"};
        int i = 0;
        ck_assert(STR_IN(names[i++], "x"));
        ck_assert_int_eq(i, 1);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("common");
    TCase *t = tcase_create("str_in");
    SRunner *r;
    int failed;

    tcase_add_test(t, str_in_finds_every_member);
    tcase_add_test(t, str_in_rejects_near_misses);
    tcase_add_test(t, str_in_null_and_empty_set);
    tcase_add_test(t, str_in_stops_at_null);
    tcase_add_test(t, str_in_macro);
    suite_add_tcase(s, t);
    r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
