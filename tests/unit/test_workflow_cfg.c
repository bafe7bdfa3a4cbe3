/* tests/unit/test_workflow_cfg.c — the configuration of workflow run types
 * (config/workflows.h): the disk-full example accepted, every message of
 * the checks within a type and across types (asserted exactly), the keys
 * a workflow type refuses, and the compiled form's order. */
#include "config/config.h"
#include "config/workflows.h"
#include "engine/actions/registry.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct config cfg;

static void setup(void)
{
    cfg_init(&cfg, &action_registry);
}

static void teardown(void)
{
    cfg_cleanup(&cfg);
}

/* The step types of the example, and a notifier and a limit for the keys
 * a workflow type refuses. */
#define STEP_TYPES                                                                                 \
    "\"diagnose\": {\"action\": \"simulate\"}, \"clean_tmp\": {\"action\": \"simulate\"},"         \
    "\"rotate_logs\": {\"action\": \"simulate\"}, \"verify\": {\"action\": \"simulate\"},"         \
    "\"page\": {\"action\": \"simulate\"}, \"keyed\": {\"action\": \"simulate\","                  \
    " \"concurrency\": {\"key\": \"{{input:/host}}\"}}"

/* The disk-full example: diagnose, then clean_tmp and rotate_logs, then
 * verify, and page only when verify failed. */
#define DISK_FULL_STEPS                                                                            \
    "{\"diagnose\": {\"run_type\": \"diagnose\", \"data\": {\"host\": \"{{input:/host}}\"}},"      \
    " \"clean_tmp\": {\"run_type\": \"clean_tmp\", \"needs\": [\"diagnose\"],"                     \
    "   \"data\": {\"dirs\": \"{{steps.diagnose:/result/top_dirs}}\"}},"                           \
    " \"rotate_logs\": {\"run_type\": \"rotate_logs\", \"needs\": [\"diagnose\"]},"                \
    " \"verify\": {\"run_type\": \"verify\", \"needs\": [\"rotate_logs\", \"clean_tmp\"],"         \
    "   \"data\": {\"before\": \"{{steps.diagnose:/result/used_pct}}\"}},"                         \
    " \"page\": {\"run_type\": \"page\", \"needs\": [\"verify\"], \"when\": \"failed\","           \
    "   \"data\": {\"text\": \"still full on {{input:/host}}: "                                    \
    "{{steps.verify:/error/message}}\"}}}"

/* A configuration with the step types and a "disk-full" workflow type
 * whose steps are steps, with more keys of the type (", ..." or "") and
 * more of the file (", ..." or ""). */
static enum status load_wf(const char *steps, const char *more_type, const char *more_file,
                           struct error *err)
{
    size_t n = strlen(steps) + strlen(more_type) + strlen(more_file) + 1024;
    char *text = malloc(n);
    enum status st;

    snprintf(text, n,
             "{\"notifiers\": {\"ops\": {\"kind\": \"webhook\", \"url\": \"http://x\"}},"
             " \"rate_limits\": {\"api\": {\"limit\": 10, \"per_s\": 1}},"
             " \"run_types\": {" STEP_TYPES ","
             " \"disk-full\": {\"action\": \"workflow\", \"params\": {\"steps\": %s}%s}}%s}",
             steps, more_type, more_file);
    st = cfg_load_json(&cfg, text, err);
    free(text);
    return st;
}

#define ck_wf_fails(steps, more_type, more_file, msg)                                              \
    do {                                                                                           \
        struct error e_ = {0};                                                                     \
        ck_assert_int_eq(load_wf((steps), (more_type), (more_file), &e_), ST_INVALID);             \
        ck_assert_str_eq(e_.message, (msg));                                                       \
    } while (0)

#define P "invalid \"run_types.disk-full.params.steps"

START_TEST(test_disk_full_accepted)
{
    struct error e = {0};
    const struct run_type *rt;

    ck_assert_msg(load_wf(DISK_FULL_STEPS, "", "", &e) == ST_OK, "%s", e.message);
    rt = cfg_run_type(&cfg, "disk-full");
    ck_assert_ptr_nonnull(rt);
    ck_assert_str_eq(rt->action, "workflow");
    ck_assert(cfg_run_type_is_workflow(&cfg, rt));
    ck_assert(!cfg_run_type_is_workflow(&cfg, cfg_run_type(&cfg, "verify")));
    ck_assert_int_eq(cfg_validate(&cfg, &e), ST_OK);
}
END_TEST

/* Each broken "steps" and the one message it gets. */
static const struct {
    const char *steps, *msg;
} bad_steps[] = {
    {"{}", P "\": expected at least one step"},
    {"[]", P "\": expected an object of steps"},
    {"{\"a.b\": {\"run_type\": \"verify\"}}",
     P ".a.b\": a step's name is 1 to 64 of A-Z, a-z, 0-9, \"_\" and \"-\", not all digits "
       "(those name a run's follow-ups)"},
    {"{\"12\": {\"run_type\": \"verify\"}}",
     P ".12\": a step's name is 1 to 64 of A-Z, a-z, 0-9, \"_\" and \"-\", not all digits "
       "(those name a run's follow-ups)"},
    {"{\"a\": 1}", P ".a\": expected an object"},
    {"{\"a\": {\"run_type\": \"verify\", \"need\": []}}",
     "unknown key \"run_types.disk-full.params.steps.a.need\"; did you mean \"needs\"?"},
    {"{\"a\": {\"needs\": []}}", "missing \"run_types.disk-full.params.steps.a.run_type\""},
    {"{\"a\": {\"run_type\": 3}}", P ".a.run_type\": expected a run type's name"},
    {"{\"a\": {\"run_type\": \"verify\", \"needs\": \"b\"}}",
     P ".a.needs\": expected an array of step names"},
    {"{\"a\": {\"run_type\": \"verify\", \"needs\": [1]}}",
     P ".a.needs[0]\": expected a step's name"},
    {"{\"verify\": {\"run_type\": \"verify\"}, \"page\": {\"run_type\": \"page\","
     " \"needs\": [\"verifyy\"]}}",
     P ".page.needs\": unknown step \"verifyy\"; did you mean \"verify\"?"},
    {"{\"a\": {\"run_type\": \"verify\", \"needs\": [\"a\"]}}",
     P ".a.needs\": a step cannot need itself"},
    {"{\"a\": {\"run_type\": \"verify\"}, \"b\": {\"run_type\": \"verify\","
     " \"needs\": [\"a\", \"a\"]}}",
     P ".b.needs\": step \"a\" is named twice"},
    {"{\"a\": {\"run_type\": \"verify\"}, \"b\": {\"run_type\": \"verify\", \"needs\": [\"a\"],"
     " \"when\": \"sometimes\"}}",
     P ".b.when\": expected \"succeeded\", \"failed\" or \"always\""},
    {"{\"a\": {\"run_type\": \"verify\", \"when\": \"failed\"}}",
     P ".a.when\": a step without needs starts with the workflow; \"when\" goes with \"needs\""},
    {"{\"a\": {\"run_type\": \"verify\", \"data\": []}}", P ".a.data\": expected an object"},
    {"{\"a\": {\"run_type\": \"verify\", \"data\": {\"x\": \"{{run:/id}}\"}}}",
     P ".a.data\": \"{{run:/id}}\" is not a placeholder {{input:/json/pointer}} or "
       "{{steps.NAME:/json/pointer}}"},
    {"{\"a\": {\"run_type\": \"verify\", \"data\": {\"x\": [\"{{steps.a.b:/x}}\"]}}}",
     P ".a.data\": \"{{steps.a.b:/x}}\" is not a placeholder {{input:/json/pointer}} or "
       "{{steps.NAME:/json/pointer}}"},
    {"{\"diagnose\": {\"run_type\": \"diagnose\"}, \"clean_tmp\": {\"run_type\": \"clean_tmp\","
     " \"needs\": [\"diagnose\", \"verify\"]}, \"verify\": {\"run_type\": \"verify\","
     " \"needs\": [\"clean_tmp\"]}}",
     P "\": the needs form a cycle: clean_tmp -> verify -> clean_tmp"},
    {"{\"a\": {\"run_type\": \"verify\", \"needs\": [\"c\"]}, \"b\": {\"run_type\": \"verify\","
     " \"needs\": [\"a\"]}, \"c\": {\"run_type\": \"verify\", \"needs\": [\"b\"]}}",
     P "\": the needs form a cycle: a -> c -> b -> a"},
    {"{\"diagnose\": {\"run_type\": \"diagnose\"}, \"clean_tmp\": {\"run_type\": \"clean_tmp\","
     " \"needs\": [\"diagnose\"], \"data\": {\"d\": \"{{steps.diagnoze:/result}}\"}}}",
     P ".clean_tmp.data\": unknown step \"diagnoze\"; did you mean \"diagnose\"?"},
    {"{\"diagnose\": {\"run_type\": \"diagnose\"}, \"clean_tmp\": {\"run_type\": \"clean_tmp\","
     " \"needs\": [\"diagnose\"]}, \"rotate_logs\": {\"run_type\": \"rotate_logs\","
     " \"needs\": [\"diagnose\"], \"data\": {\"d\": \"after {{steps.clean_tmp:/result}}\"}}}",
     P ".rotate_logs.data\": step \"clean_tmp\" is not among its needs, directly or through "
       "other steps"},
    {"{\"a\": {\"run_type\": \"verify\", \"data\": {\"d\": \"{{steps.a:/result}}\"}}}",
     P ".a.data\": step \"a\" is not among its needs, directly or through other steps"},
    {"{\"diagnose\": {\"run_type\": \"diagnoze\"}}",
     P ".diagnose.run_type\": unknown run type \"diagnoze\"; did you mean \"diagnose\"?"},
};

START_TEST(test_bad_steps)
{
    ck_wf_fails(bad_steps[_i].steps, "", "", bad_steps[_i].msg);
}
END_TEST

START_TEST(test_missing_steps)
{
    static const char *const texts[] = {
        "{\"run_types\": {\"w\": {\"action\": \"workflow\"}}}",
        "{\"run_types\": {\"w\": {\"action\": \"workflow\", \"params\": {}}}}",
    };
    struct error e = {0};

    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
        ck_assert_int_eq(cfg_load_json(&cfg, texts[i], &e), ST_INVALID);
        ck_assert_str_eq(e.message, "missing \"run_types.w.params.steps\"");
    }
    ck_assert_int_eq(cfg_load_json(&cfg,
                                   "{\"run_types\": {\"w\": {\"action\": \"workflow\","
                                   " \"params\": {\"steps\": {\"a\": {\"run_type\": \"demo\"}},"
                                   " \"stesp\": 1}}}}",
                                   &e),
                     ST_INVALID);
    ck_assert_str_eq(e.message, "unknown key \"run_types.w.params.stesp\"");
}
END_TEST

/* 100 steps are fine, 101 are not. */
START_TEST(test_step_count)
{
    size_t cap = 101 * 64 + 16, len = 0;
    char *steps = malloc(cap);
    struct error e = {0};

    len += (size_t)snprintf(steps, cap, "{");
    for (int i = 0; i < 100; i++)
        len += (size_t)snprintf(steps + len, cap - len, "%s\"s%d\": {\"run_type\": \"verify\"}",
                                i ? ", " : "", i);
    snprintf(steps + len, cap - len, "}");
    ck_assert_msg(load_wf(steps, "", "", &e) == ST_OK, "%s", e.message);
    snprintf(steps + len, cap - len, ", \"s100\": {\"run_type\": \"verify\"}}");
    ck_wf_fails(steps, "", "", P "\": 101 steps, more than the 100 allowed");
    free(steps);
}
END_TEST

/* A step name of 64 characters is fine, and one of 65 is not. */
START_TEST(test_step_name_length)
{
    char steps[256], name[66];
    struct error e = {0};

    memset(name, 'x', 65);
    name[64] = '\0';
    snprintf(steps, sizeof(steps), "{\"%s\": {\"run_type\": \"verify\"}}", name);
    ck_assert_msg(load_wf(steps, "", "", &e) == ST_OK, "%s", e.message);
    name[64] = 'x';
    name[65] = '\0';
    snprintf(steps, sizeof(steps), "{\"%s\": {\"run_type\": \"verify\"}}", name);
    ck_assert_int_eq(load_wf(steps, "", "", &e), ST_INVALID);
    ck_assert(strstr(e.message, "a step's name is 1 to 64 of") != NULL);
}
END_TEST

#define W(key) "invalid \"run_types.disk-full." key "\": not for a workflow type: "
#define NOT_ATTEMPTED "a workflow is not attempted; each step's run type has its own"

/* The keys that mean nothing for a workflow, each refused with why. */
static const struct {
    const char *more, *msg;
} refused[] = {
    {", \"max_attempts\": 5", W("max_attempts") NOT_ATTEMPTED},
    {", \"retry_backoff_ms\": 10", W("retry_backoff_ms") NOT_ATTEMPTED},
    {", \"retry_backoff_max_ms\": 70000", W("retry_backoff_max_ms") NOT_ATTEMPTED},
    {", \"timeout_s\": 60",
     W("timeout_s") "a workflow has no deadline of its own; each step's run type has its own"},
    {", \"max_running\": 2",
     W("max_running") "a workflow never runs on a worker; each step's run type may cap its own"},
    {", \"poll\": {\"max_checks\": 3}",
     W("poll.max_checks") "a workflow is never polled; each step's run type has its own"},
    {", \"rate_limit\": \"api\"",
     W("rate_limit") "a workflow makes no calls; each step's run type may name one"},
    {", \"concurrency\": {\"key\": \"{{input:/host}}\"}",
     W("concurrency") "a workflow holds no key; each step's run type may have one"},
    {", \"notify\": [{\"on\": [\"succeeded\", \"retrying\"], \"to\": \"ops\"}]",
     W("notify[0].on[1]") "a workflow is never retried by itself"},
};

START_TEST(test_refused_keys)
{
    ck_wf_fails(DISK_FULL_STEPS, refused[_i].more, "", refused[_i].msg);
}
END_TEST

/* What a workflow type may have: approval, notify and then. */
START_TEST(test_allowed_keys)
{
    struct error e = {0};

    ck_assert_msg(load_wf(DISK_FULL_STEPS,
                          ", \"approval\": {\"timeout_s\": 60}, \"notify\": [{\"on\": [\"*\"], "
                          "\"to\": \"ops\"}], \"then\": [{\"on\": [\"failed\"], \"run_type\": "
                          "\"page\"}]",
                          "", &e) == ST_OK,
                  "%s", e.message);
}
END_TEST

/* A step's data without placeholders is the whole input of its run: it
 * must hold what the step type's concurrency key takes. */
START_TEST(test_step_data_and_key)
{
    ck_wf_fails("{\"a\": {\"run_type\": \"keyed\", \"data\": {\"hots\": \"web-1\"}},"
                " \"b\": {\"run_type\": \"keyed\"},"
                " \"c\": {\"run_type\": \"keyed\", \"data\": {\"host\": \"web-1\"}},"
                " \"d\": {\"run_type\": \"keyed\", \"data\": {\"host\": \"{{input:/host}}\"}}}",
                "", "",
                P ".a.data\": run_types.keyed.concurrency: the input has no value at \"/host\"\n" P
                  ".b.data\": run_types.keyed.concurrency: the input has no value at \"/host\"");
}
END_TEST

/* Workflow types that nest: in a cycle, or deeper than
 * queue.max_chain_depth. */
START_TEST(test_nesting)
{
    struct error e = {0};

    ck_assert_int_eq(
        cfg_load_json(&cfg,
                      "{\"run_types\": {"
                      "\"a\": {\"action\": \"workflow\", \"params\": {\"steps\": "
                      "{\"s\": {\"run_type\": \"demo\"}, \"x\": {\"run_type\": \"b\"}}}},"
                      "\"b\": {\"action\": \"workflow\", \"params\": {\"steps\": "
                      "{\"y\": {\"run_type\": \"a\"}}}}}}",
                      &e),
        ST_INVALID);
    ck_assert_str_eq(e.message, "invalid \"run_types.a.params.steps.x.run_type\": workflows nest "
                                "in a cycle: a -> b -> a");
    cfg_cleanup(&cfg);
    cfg_init(&cfg, &action_registry);
    ck_assert_int_eq(cfg_load_json(&cfg,
                                   "{\"run_types\": {\"a\": {\"action\": \"workflow\", \"params\": "
                                   "{\"steps\": {\"me\": {\"run_type\": \"a\"}}}}}}",
                                   &e),
                     ST_INVALID);
    ck_assert_str_eq(e.message, "invalid \"run_types.a.params.steps.me.run_type\": workflows nest "
                                "in a cycle: a -> a");
}
END_TEST

static const char nested[] =
    "{\"queue\": {\"max_chain_depth\": %d}, \"run_types\": {"
    "\"outer\": {\"action\": \"workflow\", \"params\": {\"steps\": "
    "{\"first\": {\"run_type\": \"demo\"}, \"m\": {\"run_type\": \"mid\", \"needs\": [\"first\"]},"
    " \"i\": {\"run_type\": \"inner\"}}}},"
    "\"mid\": {\"action\": \"workflow\", \"params\": {\"steps\": {\"i\": {\"run_type\": "
    "\"inner\"}}}},"
    "\"inner\": {\"action\": \"workflow\", \"params\": {\"steps\": {\"d\": {\"run_type\": "
    "\"demo\"}}}}}}";

START_TEST(test_nesting_depth)
{
    struct error e = {0};
    char text[1024];

    snprintf(text, sizeof(text), nested, 3);
    ck_assert_msg(cfg_load_json(&cfg, text, &e) == ST_OK, "%s", e.message);
    cfg_cleanup(&cfg);
    cfg_init(&cfg, &action_registry);
    snprintf(text, sizeof(text), nested, 2);
    ck_assert_int_eq(cfg_load_json(&cfg, text, &e), ST_INVALID);
    ck_assert_str_eq(e.message, "invalid \"run_types.outer.params.steps\": its steps nest 3 deep "
                                "(outer -> mid -> inner), more than queue.max_chain_depth (2) "
                                "allows");
    /* The depth is checked again once flags and variables are in. */
    cfg_cleanup(&cfg);
    cfg_init(&cfg, &action_registry);
    snprintf(text, sizeof(text), nested, 3);
    ck_assert_int_eq(cfg_load_json(&cfg, text, &e), ST_OK);
    ck_assert_int_eq(cfg_set(&cfg, "queue.max_chain_depth", "0", CFG_SRC_FLAG, &e), ST_OK);
    ck_assert_int_eq(cfg_validate(&cfg, &e), ST_INVALID);
    ck_assert_str_eq(e.message,
                     "invalid \"run_types.outer.params.steps\": its steps nest 3 deep (outer -> "
                     "mid -> inner), more than queue.max_chain_depth (0) allows\n"
                     "invalid \"run_types.mid.params.steps\": its steps nest 2 deep (mid -> "
                     "inner), more than queue.max_chain_depth (0) allows\n"
                     "invalid \"run_types.inner.params.steps\": its steps nest 1 deep (inner), "
                     "more than queue.max_chain_depth (0) allows");
}
END_TEST

/* The compiled form: topological, by name among steps free to go, the
 * same whatever the order of the file. */
static const char compiled[] =
    "[{\"name\": \"diagnose\", \"run_type\": \"diagnose\", \"needs\": [], \"when\": \"succeeded\","
    "  \"data\": {\"host\": \"{{input:/host}}\"}, \"refs\": []},"
    " {\"name\": \"clean_tmp\", \"run_type\": \"clean_tmp\", \"needs\": [\"diagnose\"],"
    "  \"when\": \"succeeded\", \"data\": {\"dirs\": \"{{steps.diagnose:/result/top_dirs}}\"},"
    "  \"refs\": [\"diagnose\"]},"
    " {\"name\": \"rotate_logs\", \"run_type\": \"rotate_logs\", \"needs\": [\"diagnose\"],"
    "  \"when\": \"succeeded\", \"data\": {}, \"refs\": []},"
    " {\"name\": \"verify\", \"run_type\": \"verify\", \"needs\": [\"clean_tmp\", \"rotate_logs\"],"
    "  \"when\": \"succeeded\", \"data\": {\"before\": \"{{steps.diagnose:/result/used_pct}}\"},"
    "  \"refs\": [\"diagnose\"]},"
    " {\"name\": \"page\", \"run_type\": \"page\", \"needs\": [\"verify\"], \"when\": \"failed\","
    "  \"data\": {\"text\": \"still full on {{input:/host}}: {{steps.verify:/error/message}}\"},"
    "  \"refs\": [\"verify\"]}]";

static void ck_compiled(const char *steps)
{
    struct error e = {0};
    json_t *want = json_loads(compiled, 0, NULL), *got;
    char *text;

    ck_assert_ptr_nonnull(want);
    ck_assert_msg(load_wf(steps, "", "", &e) == ST_OK, "%s", e.message);
    got = cfg_wf_compile(cfg_run_type(&cfg, "disk-full"));
    ck_assert_ptr_nonnull(got);
    text = json_dumps(got, JSON_COMPACT);
    ck_assert_msg(json_equal(got, want), "compiled: %s", text);
    free(text);
    json_decref(got);
    json_decref(want);
}

START_TEST(test_compiled_order)
{
    ck_compiled(DISK_FULL_STEPS);
}
END_TEST

START_TEST(test_compiled_order_any_file_order)
{
    ck_compiled(
        "{\"page\": {\"run_type\": \"page\", \"needs\": [\"verify\"], \"when\": \"failed\","
        "   \"data\": {\"text\": \"still full on {{input:/host}}: "
        "{{steps.verify:/error/message}}\"}},"
        " \"verify\": {\"run_type\": \"verify\", \"needs\": [\"clean_tmp\", \"rotate_logs\"],"
        "   \"data\": {\"before\": \"{{steps.diagnose:/result/used_pct}}\"}},"
        " \"rotate_logs\": {\"run_type\": \"rotate_logs\", \"needs\": [\"diagnose\"]},"
        " \"clean_tmp\": {\"run_type\": \"clean_tmp\", \"needs\": [\"diagnose\"],"
        "   \"data\": {\"dirs\": \"{{steps.diagnose:/result/top_dirs}}\"}},"
        " \"diagnose\": {\"run_type\": \"diagnose\", \"data\": {\"host\": \"{{input:/host}}\"}}}");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("workflow_cfg");
    TCase *tc = tcase_create("workflow_cfg");
    SRunner *sr;
    int failed;

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_disk_full_accepted);
    tcase_add_loop_test(tc, test_bad_steps, 0, (int)(sizeof(bad_steps) / sizeof(bad_steps[0])));
    tcase_add_test(tc, test_missing_steps);
    tcase_add_test(tc, test_step_count);
    tcase_add_test(tc, test_step_name_length);
    tcase_add_loop_test(tc, test_refused_keys, 0, (int)(sizeof(refused) / sizeof(refused[0])));
    tcase_add_test(tc, test_allowed_keys);
    tcase_add_test(tc, test_step_data_and_key);
    tcase_add_test(tc, test_nesting);
    tcase_add_test(tc, test_nesting_depth);
    tcase_add_test(tc, test_compiled_order);
    tcase_add_test(tc, test_compiled_order_any_file_order);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
