/* tests/unit/test_live.c — the running configuration (config/live.h): the
 * version of a configuration, what a reload changes and what it gives back
 * for a restart, and the holder's swap with its holders. */
#include "config/config.h"
#include "config/live.h"
#include "engine/actions/registry.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

/* A configuration from text over the defaults (heap); NULL text: defaults. */
static struct config *made(const char *text)
{
    struct config *c = calloc(1, sizeof(*c));
    struct error err = {0};

    ck_assert_ptr_nonnull(c);
    cfg_init(c, &action_registry);
    if (text)
        ck_assert_msg(cfg_load_json(c, text, &err) == ST_OK, "%s", err.message);
    return c;
}

static void dropped(struct config *c)
{
    cfg_cleanup(c);
    free(c);
}

static char *version_of(const char *text)
{
    struct config *c = made(text);
    char *v = calloc(1, CFG_VERSION_LEN + 1);

    ck_assert_ptr_nonnull(v);
    cfg_version(c, v);
    dropped(c);
    return v;
}

static bool has(const json_t *keys, const char *key)
{
    size_t i;
    json_t *k;

    json_array_foreach(keys, i, k) if (strcmp(json_string_value(k), key) == 0) return true;
    return false;
}

START_TEST(version_is_the_settings)
{
    char *a = version_of("{\"queue\": {\"workers\": 4}}");
    char *b = version_of("{\"queue\": {\"workers\": 4}, \"listen\": \"127.0.0.1:9999\"}");
    char *c = version_of("{\"queue\": {\"workers\": 5}}");
    char *d = version_of("{\"queue\": {\"workers\": 4}, \"run_types\": {\"x\": "
                         "{\"action\": \"simulate\"}}}");

    ck_assert_uint_eq(strlen(a), CFG_VERSION_LEN);
    ck_assert_uint_eq(strspn(a, "0123456789abcdef"), CFG_VERSION_LEN);
    ck_assert_str_eq(a, b); /* the listen address tells replicas apart: not counted */
    ck_assert_str_ne(a, c);
    ck_assert_str_ne(a, d);
    free(a);
    free(b);
    free(c);
    free(d);
}
END_TEST

START_TEST(diff_names_keys_and_restores_restart_only_ones)
{
    struct config *cur = made("{\"queue\": {\"workers\": 4}, \"log\": {\"level\": \"info\"}, "
                              "\"run_types\": {\"a\": {\"action\": \"simulate\"}}}");
    struct config *next = made("{\"queue\": {\"workers\": 9}, \"log\": {\"level\": \"debug\"}, "
                               "\"run_types\": {\"a\": {\"action\": \"simulate\", "
                               "\"max_attempts\": 1}, \"b\": {\"action\": \"simulate\"}}}");
    json_t *changed, *restart;

    cfg_reload_diff(cur, next, &changed, &restart);
    ck_assert(has(changed, "queue.workers"));
    ck_assert(has(changed, "log.level"));
    ck_assert(has(changed, "run_types.a"));
    ck_assert(has(changed, "run_types.b"));
    ck_assert_uint_eq(json_array_size(changed), 4);
    ck_assert(has(restart, "queue.workers"));
    ck_assert_uint_eq(json_array_size(restart), 1);
    ck_assert_int_eq(next->queue.workers, 4); /* the running value, until a restart */
    ck_assert_int_eq(next->log_level, LOG_DEBUG);
    json_decref(changed);
    json_decref(restart);
    dropped(cur);
    dropped(next);
}
END_TEST

/* database_url is printed with its password masked: a change of the
 * password alone is still a change, and needs a restart. */
START_TEST(diff_sees_a_secret_change)
{
    struct config *cur = made("{\"database_url\": \"postgresql://u:one@db/x\"}");
    struct config *next = made("{\"database_url\": \"postgresql://u:two@db/x\"}");
    json_t *changed, *restart;

    cfg_reload_diff(cur, next, &changed, &restart);
    ck_assert(has(changed, "database_url"));
    ck_assert(has(restart, "database_url"));
    ck_assert_uint_eq(json_array_size(changed), 1);
    ck_assert_str_eq(next->database_url, "postgresql://u:one@db/x");
    json_decref(changed);
    json_decref(restart);
    dropped(cur);
    dropped(next);
}
END_TEST

START_TEST(diff_of_the_same_is_empty)
{
    const char *text =
        "{\"run_types\": {\"a\": {\"action\": \"simulate\"}}, \"routes\": [{\"match\": "
        "{\"alert_type\": \"x\"}, \"run_type\": \"a\"}]}";
    struct config *cur = made(text), *next = made(text);
    json_t *changed, *restart;

    cfg_reload_diff(cur, next, &changed, &restart);
    ck_assert_uint_eq(json_array_size(changed), 0);
    ck_assert_uint_eq(json_array_size(restart), 0);
    json_decref(changed);
    json_decref(restart);
    dropped(cur);
    dropped(next);
}
END_TEST

/* A holder of the configuration before a swap keeps reading it whole; the
 * next hold gets the new one; the generation moves at each swap. */
START_TEST(swap_keeps_what_is_held)
{
    struct cfg_live *l = cfg_live_new(made("{\"queue\": {\"workers\": 3}}"));
    const struct config *old = cfg_live_hold(l), *now;
    uint64_t g0 = cfg_live_generation(l);
    char v0[CFG_VERSION_LEN + 1], v1[CFG_VERSION_LEN + 1];
    int64_t at0 = 0, at1 = 0;

    cfg_live_version(l, v0, &at0);
    ck_assert_int_gt(at0, 0);
    cfg_live_swap(l, made("{\"queue\": {\"workers\": 7}}"));
    ck_assert_uint_eq(cfg_live_generation(l), g0 + 1);
    ck_assert_int_eq(old->queue.workers, 3); /* still whole (ASan would see a free) */
    now = cfg_live_hold(l);
    ck_assert_int_eq(now->queue.workers, 7);
    cfg_live_version(l, v1, &at1);
    ck_assert_str_ne(v0, v1);
    ck_assert_int_ge(at1, at0);
    cfg_live_release(l, old);
    cfg_live_release(l, now);
    ck_assert_ptr_null(cfg_live_hold(NULL));
    cfg_live_free(l);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("live");
    TCase *tc = tcase_create("live");
    SRunner *sr;
    int failed;

    tcase_add_test(tc, version_is_the_settings);
    tcase_add_test(tc, diff_names_keys_and_restores_restart_only_ones);
    tcase_add_test(tc, diff_sees_a_secret_change);
    tcase_add_test(tc, diff_of_the_same_is_empty);
    tcase_add_test(tc, swap_keeps_what_is_held);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
