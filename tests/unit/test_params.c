/* tests/unit/test_params.c — an action's params checked against a table of
 * rules: unknown keys before anything else, rules in table order, what
 * absence means for each need, nested objects named by their path, and the
 * exact message of each common check. */
#include "engine/actions/params.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

static json_t *parse(const char *text)
{
    json_t *j = json_loads(text, 0, NULL);

    ck_assert_ptr_nonnull(j);
    return j;
}

/* Records what a rule's check was given. */
static char seen_path[256], seen_in_path[256];
static const json_t *seen_v, *seen_in;
static int seen_calls;

static enum status record(const struct param *p, struct error *err)
{
    (void)err;
    seen_calls++;
    seen_v = p->v;
    seen_in = p->in;
    xsnprintf(seen_path, sizeof(seen_path), "%s", p->path);
    xsnprintf(seen_in_path, sizeof(seen_in_path), "%s", p->in_path);
    return ST_OK;
}

static const struct param_rule inner_rules[] = {
    {"n", params_int, .min = 1, .max = 5},
    {0},
};

static const struct param_rule rules[] = {
    {"need", params_string, .need = PARAM_REQUIRED},
    {"flag", params_bool, .need = PARAM_OPTIONAL},
    {"pick", params_choice, .choices = (const char *const[]){"a", "b", "c", NULL}},
    {"list", params_strings, .need = PARAM_OPTIONAL},
    {"ptr", params_pointer, .need = PARAM_ALWAYS},
    {"obj", params_object, .members = inner_rules},
    {"any", NULL, .need = PARAM_OPTIONAL},
    {0},
};

static void fails(const char *text, const char *want)
{
    json_t *j = parse(text);
    struct error err = {0};

    ck_assert_int_eq(params_check(j, rules, "p", &err), ST_INVALID);
    ck_assert_str_eq(err.message, want);
    json_decref(j);
}

START_TEST(test_params_messages)
{
    json_t *ok = parse("{\"need\": \"x\", \"flag\": true, \"pick\": \"b\", \"list\": [\"s\"], "
                       "\"ptr\": \"/a/b\", \"obj\": {\"n\": 5}, \"any\": [1, {}]}");
    struct error err = {0};

    ck_assert_int_eq(params_check(ok, rules, "p", &err), ST_OK);
    json_decref(ok);
    /* an unknown key is reported before a missing one */
    fails("{\"nope\": 1}", "unknown key \"p.nope\"");
    fails("{\"ptr\": \"/a\"}", "missing \"p.need\"");
    fails("{\"need\": 1, \"ptr\": \"/a\"}", "invalid \"p.need\": expected a string");
    fails("{\"need\": \"x\", \"flag\": 1, \"ptr\": \"/a\"}",
          "invalid \"p.flag\": expected true or false");
    fails("{\"need\": \"x\", \"pick\": \"d\", \"ptr\": \"/a\"}",
          "invalid \"p.pick\": expected one of a, b, c");
    fails("{\"need\": \"x\", \"list\": [], \"ptr\": \"/a\"}",
          "invalid \"p.list\": expected an array of strings");
    fails("{\"need\": \"x\", \"list\": [\"a\", 1], \"ptr\": \"/a\"}",
          "invalid \"p.list\": expected an array of strings");
    /* PARAM_ALWAYS: the check itself says what absence means */
    fails("{\"need\": \"x\"}", "invalid \"p.ptr\": expected a JSON pointer");
    fails("{\"need\": \"x\", \"ptr\": \"a\"}", "invalid \"p.ptr\": expected a JSON pointer");
    fails("{\"need\": \"x\", \"ptr\": \"/a\", \"obj\": []}",
          "invalid \"p.obj\": expected an object");
    fails("{\"need\": \"x\", \"ptr\": \"/a\", \"obj\": {\"m\": 1}}", "unknown key \"p.obj.m\"");
    fails("{\"need\": \"x\", \"ptr\": \"/a\", \"obj\": {\"n\": 6}}",
          "invalid \"p.obj.n\": must be between 1 and 5");
    /* the rules in table order: the first failing one is reported */
    fails("{\"need\": 1, \"flag\": 1, \"ptr\": 1}", "invalid \"p.need\": expected a string");
}
END_TEST

START_TEST(test_params_check_sees)
{
    static const struct param_rule rec[] = {
        {"a", record, .need = PARAM_OPTIONAL},
        {"b", record, .need = PARAM_ALWAYS},
        {0},
    };
    json_t *j = parse("{\"a\": 7}");
    struct error err = {0};

    seen_calls = 0;
    ck_assert_int_eq(params_check(j, rec, "x.params", &err), ST_OK);
    /* "a" once, then "b" although absent */
    ck_assert_int_eq(seen_calls, 2);
    ck_assert_ptr_null(seen_v);
    ck_assert_ptr_eq(seen_in, j);
    ck_assert_str_eq(seen_path, "x.params.b");
    ck_assert_str_eq(seen_in_path, "x.params");
    json_decref(j);
    /* no params at all: only the PARAM_ALWAYS rule runs */
    seen_calls = 0;
    ck_assert_int_eq(params_check(NULL, rec, "x.params", &err), ST_OK);
    ck_assert_int_eq(seen_calls, 1);
}
END_TEST

static Suite *params_suite(void)
{
    Suite *s = suite_create("params");
    TCase *tc = tcase_create("rules");

    tcase_add_test(tc, test_params_messages);
    tcase_add_test(tc, test_params_check_sees);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(params_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
