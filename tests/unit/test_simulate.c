/* tests/unit/test_simulate.c — the simulate action's parameters: layering
 * input over params over defaults, errors that name the key and change
 * nothing, and every "fail" value. */
#include "engine/actions/simulate.h"

#include <check.h>
#include <stdlib.h>

START_TEST(test_sim_params_layering)
{
    int64_t duration = 100;
    int steps = 4, first_n = 0;
    enum sim_fail fail = SIM_FAIL_NEVER;
    json_t *params = json_loads("{\"steps\": 2, \"fail\": \"transient\"}", 0, NULL);
    json_t *input = json_loads("{\"fail\": \"first:3\", \"labels\": {\"a\": \"b\"}}", 0, NULL);
    struct error err = {0};

    ck_assert_int_eq(simulate_params(NULL, "params", &duration, &steps, &fail, &first_n, &err),
                     ST_OK);
    ck_assert_int_eq(simulate_params(params, "params", &duration, &steps, &fail, &first_n, &err),
                     ST_OK);
    ck_assert_int_eq(duration, 100);
    ck_assert_int_eq(steps, 2);
    ck_assert_int_eq(fail, SIM_FAIL_TRANSIENT);
    /* An input's other keys are its own business. */
    ck_assert_int_eq(simulate_params(input, "input", &duration, &steps, &fail, &first_n, &err),
                     ST_OK);
    ck_assert_int_eq(steps, 2);
    ck_assert_int_eq(fail, SIM_FAIL_FIRST);
    ck_assert_int_eq(first_n, 3);
    json_decref(params);
    json_decref(input);
}
END_TEST

START_TEST(test_sim_params_errors_touch_nothing)
{
    int64_t duration = 100;
    int steps = 4, first_n = 0;
    enum sim_fail fail = SIM_FAIL_NEVER;
    json_t *input =
        json_loads("{\"duration_ms\": 5, \"fail\": \"never\", \"steps\": \"x\"}", 0, NULL);
    json_t *arr = json_array();
    struct error err = {0};

    ck_assert_int_eq(simulate_params(input, "input", &duration, &steps, &fail, &first_n, &err),
                     ST_INVALID);
    ck_assert_str_eq(err.message, "invalid \"input.steps\": expected an integer");
    ck_assert_int_eq(duration, 100);
    ck_assert_int_eq(steps, 4);
    ck_assert_int_eq(simulate_params(arr, "input", &duration, &steps, &fail, &first_n, &err),
                     ST_INVALID);
    ck_assert_str_eq(err.message, "invalid \"input\": expected an object");
    ck_assert_int_eq(simulate_params(input, NULL, &duration, &steps, &fail, &first_n, &err),
                     ST_INVALID);
    ck_assert_str_eq(err.message, "invalid \"steps\": expected an integer");
    json_decref(input);
    json_decref(arr);
}
END_TEST

START_TEST(test_sim_params_fail_values)
{
    static const struct {
        const char *fail;
        enum sim_fail want;
        int n;
    } cases[] = {{"never", SIM_FAIL_NEVER, -1},
                 {"permanent", SIM_FAIL_PERMANENT, -1},
                 {"transient", SIM_FAIL_TRANSIENT, -1},
                 {"first:0", SIM_FAIL_FIRST, 0},
                 {"first:100", SIM_FAIL_FIRST, 100}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int64_t duration = 0;
        int steps = 0, first_n = -1;
        enum sim_fail fail = SIM_FAIL_PERMANENT;
        json_t *obj = json_pack("{s:s}", "fail", cases[i].fail);
        struct error err = {0};
        ck_assert_int_eq(simulate_params(obj, "p", &duration, &steps, &fail, &first_n, &err),
                         ST_OK);
        ck_assert_int_eq(fail, cases[i].want);
        ck_assert_int_eq(first_n, cases[i].n);
        json_decref(obj);
    }
}
END_TEST

static Suite *simulate_suite(void)
{
    Suite *s = suite_create("simulate");
    TCase *tc = tcase_create("params");

    tcase_add_test(tc, test_sim_params_layering);
    tcase_add_test(tc, test_sim_params_errors_touch_nothing);
    tcase_add_test(tc, test_sim_params_fail_values);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(simulate_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
