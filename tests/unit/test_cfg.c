/* tests/unit/test_cfg.c — the configuration: defaults, the JSON file, the
 * environment, flags, validation messages (asserted exactly), routing and
 * --print-config output. */
#include "common/tz.h"
#include "config/config.h"
#include "engine/actions/action.h"
#include "engine/actions/registry.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct config cfg;

static void setup(void)
{
    cfg_init(&cfg, &action_registry);
}

static void teardown(void)
{
    cfg_cleanup(&cfg);
}

#define ck_load_ok(text)                                                                           \
    do {                                                                                           \
        struct error e_ = {0};                                                                     \
        enum status st_ = cfg_load_json(&cfg, (text), &e_);                                        \
        ck_assert_msg(st_ == ST_OK, "load failed: %s", e_.message);                                \
    } while (0)

#define ck_load_fails(text, msg)                                                                   \
    do {                                                                                           \
        struct error e_ = {0};                                                                     \
        ck_assert_int_eq(cfg_load_json(&cfg, (text), &e_), ST_INVALID);                            \
        ck_assert_str_eq(e_.message, (msg));                                                       \
    } while (0)

/* A fake environment: name, value pairs ending with NULL. */
static const char *const *fake_env;

static const char *fake_getenv(const char *name)
{
    for (const char *const *p = fake_env; p && p[0]; p += 2)
        if (strcmp(p[0], name) == 0)
            return p[1];
    return NULL;
}

static const char *source_of(const char *key)
{
    static char buf[32];
    json_t *j = cfg_to_json(&cfg);
    const char *s;

    ck_assert_ptr_nonnull(j);
    s = json_string_value(json_object_get(json_object_get(j, "sources"), key));
    ck_assert_msg(s != NULL, "no source for %s", key);
    snprintf(buf, sizeof(buf), "%s", s);
    json_decref(j);
    return buf;
}

/* ---- defaults ---- */

START_TEST(test_defaults)
{
    const struct run_type *demo;
    struct error err = {0};

    ck_assert_str_eq(cfg.listen, "127.0.0.1:8080");
    ck_assert_ptr_null(cfg.database_url);
    ck_assert_ptr_null(cfg.config_path);
    ck_assert_str_eq(cfg.tenant_default, "default");
    ck_assert_int_eq(cfg.log_level, LOG_INFO);
    ck_assert(!cfg.log_json);
    ck_assert_int_eq(cfg.http.threads, 4);
    ck_assert_int_eq(cfg.http.connection_limit, 10000);
    ck_assert_int_eq(cfg.http.connection_timeout_s, 60);
    ck_assert_int_eq(cfg.http.max_body_bytes, 1048576);
    ck_assert_int_eq(cfg.db.pool_size, 0);
    ck_assert_int_eq(cfg.db.pool_wait_ms, 2000);
    ck_assert_int_eq(cfg.db.connect_timeout_s, 3);
    ck_assert_int_eq(cfg.db.statement_timeout_ms, 10000);
    ck_assert_int_eq(cfg.db.tcp_user_timeout_ms, 0);
    ck_assert_int_eq(cfg.db.keepalive_idle_s, 30);
    ck_assert_int_eq(cfg.db.keepalive_interval_s, 10);
    ck_assert(cfg.db.prepared_statements);
    ck_assert_int_eq(cfg.queue.workers, 8);
    ck_assert_int_eq(cfg.queue.max_running, 64);
    ck_assert_int_eq(cfg.queue.claim_batch, 16);
    ck_assert_int_eq(cfg.queue.poll_interval_ms, 1000);
    ck_assert_int_eq(cfg.queue.heartbeat_interval_s, 5);
    ck_assert_int_eq(cfg.queue.orphan_after_s, 30);
    ck_assert_int_eq(cfg.queue.orphan_scan_interval_s, 5);
    ck_assert_int_eq(cfg.queue.shutdown_grace_s, 900);
    ck_assert_int_eq(cfg.queue.progress_interval_ms, 250);
    ck_assert_int_eq(cfg.queue.cancel_check_ms, 250);
    ck_assert(cfg.queue.listen);
    ck_assert_int_eq(cfg.queue.retention_s, 604800);
    ck_assert_int_eq(cfg.queue.retention_batch, 500);
    ck_assert_int_eq(cfg.queue.event_partition_s, 86400);
    ck_assert_int_eq(cfg.sse.max_subscribers, 5000);
    ck_assert_int_eq(cfg.sse.heartbeat_ms, 15000);
    ck_assert_int_eq(cfg.sse.retry_ms, 3000);
    ck_assert_int_eq(cfg.sse.ring_frames, 4096);
    ck_assert_int_eq(cfg.sse.ring_bytes, 16777216);
    ck_assert_int_eq(cfg.sse.poll_interval_ms, 250);
    ck_assert_int_eq(cfg.sse.send_timeout_s, 60);
    ck_assert_int_eq(cfg.sse.send_buffer_bytes, 262144);
    ck_assert_uint_eq(cfg.nroutes, 0);
    ck_assert_ptr_null(cfg.default_route);

    ck_assert_uint_eq(cfg.nrun_types, 1);
    demo = cfg_run_type(&cfg, "demo");
    ck_assert_ptr_nonnull(demo);
    ck_assert_str_eq(demo->action, "simulate");
    ck_assert(json_is_object(demo->params) && json_object_size(demo->params) == 0);
    ck_assert_int_eq(demo->max_attempts, 3);
    ck_assert_int_eq(demo->retry_backoff_ms, 200);
    ck_assert_int_eq(demo->retry_backoff_max_ms, 60000);
    ck_assert_int_eq(demo->timeout_s, 900);
    ck_assert_int_eq(demo->max_running, 0);
    ck_assert_ptr_null(cfg_run_type(&cfg, "nope"));
    ck_assert_ptr_null(cfg_run_type(&cfg, NULL));

    ck_assert_int_eq(demo->poll.initial_delay_ms, 2000);
    ck_assert_int_eq(demo->poll.multiplier, 2);
    ck_assert_int_eq(demo->poll.max_delay_ms, 30000);
    ck_assert_int_eq(demo->poll.jitter_pct, 20);
    ck_assert_int_eq(demo->poll.max_checks, 120);
    ck_assert_int_eq(demo->poll.max_duration_s, 1740);
    ck_assert_int_eq(demo->poll.check_timeout_s, 60);
    ck_assert_int_eq(cfg.poller.concurrency, 16);
    ck_assert_int_eq(cfg.poller.interval_ms, 1000);
    ck_assert_int_eq(cfg.submit.flushers, 1);
    ck_assert_int_eq(cfg.submit.batch_max, 1000);
    ck_assert_int_eq(cfg.submit.queue_max, 20000);
    ck_assert_int_eq(cfg_pool_size(&cfg), 8 + 4 + 1 + 4 + 16 / 4);
    ck_assert_int_eq(cfg_validate(&cfg, &err), ST_OK);
    ck_assert_str_eq(source_of("listen"), "default");
    ck_assert_str_eq(source_of("queue.workers"), "default");
}
END_TEST

/* Whether every byte of cfg is zero: cfg_cleanup leaves no field set. */
static bool cfg_is_zero(const struct config *c)
{
    static const struct config zero;

    return memcmp(c, &zero, sizeof(zero)) == 0;
}

/* cfg_cleanup frees everything a configuration owns (strings, run types,
 * routes, tokens, origins: a leak fails the test under LeakSanitizer) and
 * resets every field, so that a second cleanup frees nothing twice (a
 * double free or a use after free fails it under AddressSanitizer) and
 * finds nothing to free: the struct is all zeros after each call. */
START_TEST(test_cleanup_twice)
{
    ck_load_ok("{\"listen\": \"0.0.0.0:9090\", \"database_url\": \"postgresql://db/opsrun\","
               " \"http\": {\"cors_origins\": [\"https://ops.example.com\"]},"
               " \"auth\": {\"tokens\": [{\"name\": \"ci\", \"tenant\": \"acme\","
               "  \"scopes\": [\"read\"], \"sha256\": "
               "  \"0000000000000000000000000000000000000000000000000000000000000001\"}]},"
               " \"run_types\": {\"restart\": {\"action\": \"simulate\"}},"
               " \"routes\": [{\"match\": {\"alertname\": \"X\"}, \"run_type\": \"restart\"}]}");
    ck_assert_ptr_nonnull(cfg.listen);
    ck_assert_ptr_nonnull(cfg.database_url);
    ck_assert_uint_eq(cfg.http.ncors_origins, 1);
    ck_assert_uint_eq(cfg.auth.ntokens, 1);
    ck_assert_uint_eq(cfg.nrun_types, 2);
    ck_assert_uint_eq(cfg.nroutes, 1);
    ck_assert(!cfg_is_zero(&cfg));

    cfg_cleanup(&cfg);
    ck_assert_msg(cfg_is_zero(&cfg), "cfg_cleanup left a field set");
    cfg_cleanup(&cfg);
    ck_assert_msg(cfg_is_zero(&cfg), "a second cfg_cleanup changed the configuration");
    cfg_init(&cfg, &action_registry); /* for teardown */
}
END_TEST

/* ---- a full valid file ---- */

static const char full_file[] =
    "{"
    " \"listen\": \"0.0.0.0:9090\","
    " \"database_url\": \"postgresql://u:pw@db/opsrun\","
    " \"tenant_default\": \"acme\","
    " \"log\": {\"level\": \"debug\", \"json\": true},"
    " \"http\": {\"threads\": 8, \"connection_limit\": 500, \"connection_timeout_s\": 30,"
    "           \"max_body_bytes\": 2048},"
    " \"db\": {\"pool_size\": 40, \"pool_wait_ms\": 500, \"connect_timeout_s\": 5,"
    "         \"statement_timeout_ms\": 20000},"
    " \"queue\": {\"workers\": 16, \"max_running\": 128, \"claim_batch\": 4,"
    "            \"poll_interval_ms\": 500, \"heartbeat_interval_s\": 2, \"orphan_after_s\": 10,"
    "            \"orphan_scan_interval_s\": 3, \"shutdown_grace_s\": 60,"
    "            \"progress_interval_ms\": 100, \"cancel_check_ms\": 50, \"listen\": false,"
    "            \"retention_s\": 86400, \"retention_batch\": 100, \"event_partition_s\": 3600,"
    "            \"tenant_max_running\": 20},"
    " \"tenants\": {\"acme\": {\"max_running\": 5}, \"beta\": {\"max_running\": null}},"
    " \"routes\": ["
    "   {\"match\": {\"alertname\": \"HighLatency\", \"severity\": \"~crit|page\"},"
    "    \"run_type\": \"restart\", \"on_resolved\": \"cancel\"},"
    "   {\"match\": {}, \"run_type\": \"demo\", \"on_resolved\": \"ignore\"}"
    " ],"
    " \"run_types\": {"
    "   \"restart\": {\"action\": \"simulate\","
    "                 \"params\": {\"duration_ms\": 10, \"steps\": 2, \"fail\": \"first:1\"},"
    "                 \"max_attempts\": 5, \"retry_backoff_ms\": 100,"
    "                 \"retry_backoff_max_ms\": 1000, \"timeout_s\": 60, \"max_running\": 2,"
    "                 \"concurrency\": {\"group\": \"host\", \"key\": \"{{input:/host}}\","
    "                                 \"max_running\": 2, \"strategy\": \"keep_newest\"}},"
    "   \"quiet.v2\": {\"action\": \"simulate\", \"max_running\": null,"
    "                  \"approval\": {\"timeout_s\": 600, \"on_timeout\": \"approve\"}}"
    " },"
    " \"default_route\": \"quiet.v2\""
    "}";

START_TEST(test_full_file)
{
    const struct run_type *rt;
    struct error err = {0};

    ck_load_ok(full_file);
    ck_assert_int_eq(cfg_validate(&cfg, &err), ST_OK);
    ck_assert_str_eq(cfg.listen, "0.0.0.0:9090");
    ck_assert_str_eq(cfg.database_url, "postgresql://u:pw@db/opsrun");
    ck_assert_str_eq(cfg.tenant_default, "acme");
    ck_assert_int_eq(cfg.log_level, LOG_DEBUG);
    ck_assert(cfg.log_json);
    ck_assert_int_eq(cfg.http.threads, 8);
    ck_assert_int_eq(cfg.http.connection_limit, 500);
    ck_assert_int_eq(cfg.http.connection_timeout_s, 30);
    ck_assert_int_eq(cfg.http.max_body_bytes, 2048);
    ck_assert_int_eq(cfg.db.pool_size, 40);
    ck_assert_int_eq(cfg.db.pool_wait_ms, 500);
    ck_assert_int_eq(cfg.db.connect_timeout_s, 5);
    ck_assert_int_eq(cfg.db.statement_timeout_ms, 20000);
    ck_assert_int_eq(cfg.queue.workers, 16);
    ck_assert_int_eq(cfg.queue.max_running, 128);
    ck_assert_int_eq(cfg.queue.claim_batch, 4);
    ck_assert_int_eq(cfg.queue.poll_interval_ms, 500);
    ck_assert_int_eq(cfg.queue.heartbeat_interval_s, 2);
    ck_assert_int_eq(cfg.queue.orphan_after_s, 10);
    ck_assert_int_eq(cfg.queue.orphan_scan_interval_s, 3);
    ck_assert_int_eq(cfg.queue.shutdown_grace_s, 60);
    ck_assert_int_eq(cfg.queue.progress_interval_ms, 100);
    ck_assert_int_eq(cfg.queue.cancel_check_ms, 50);
    ck_assert(!cfg.queue.listen);
    ck_assert_int_eq(cfg.queue.retention_s, 86400);
    ck_assert_int_eq(cfg.queue.retention_batch, 100);
    ck_assert_int_eq(cfg.queue.event_partition_s, 3600);
    ck_assert_int_eq(cfg_pool_size(&cfg), 40);

    /* The built-in demo stays; the file's types are added. */
    ck_assert_uint_eq(cfg.nrun_types, 3);
    ck_assert_ptr_nonnull(cfg_run_type(&cfg, "demo"));
    rt = cfg_run_type(&cfg, "restart");
    ck_assert_ptr_nonnull(rt);
    ck_assert_str_eq(rt->action, "simulate");
    ck_assert_int_eq(json_integer_value(json_object_get(rt->params, "steps")), 2);
    ck_assert_int_eq(rt->max_attempts, 5);
    ck_assert_int_eq(rt->retry_backoff_ms, 100);
    ck_assert_int_eq(rt->retry_backoff_max_ms, 1000);
    ck_assert_int_eq(rt->timeout_s, 60);
    ck_assert_int_eq(rt->max_running, 2);
    rt = cfg_run_type(&cfg, "quiet.v2");
    ck_assert_ptr_nonnull(rt);
    ck_assert_int_eq(rt->max_attempts, 3);
    ck_assert_int_eq(rt->max_running, 0);
    ck_assert_uint_eq(json_object_size(rt->params), 0);

    /* Routes come after run types whatever their order in the file. */
    ck_assert_uint_eq(cfg.nroutes, 2);
    ck_assert_str_eq(cfg.routes[0].run_type, "restart");
    ck_assert(cfg.routes[0].on_resolved_cancel);
    ck_assert_uint_eq(cfg.routes[0].nmatches, 2);
    ck_assert_str_eq(cfg.routes[0].matches[0].key, "alertname");
    ck_assert(!cfg.routes[0].matches[0].is_regex);
    ck_assert_str_eq(cfg.routes[0].matches[1].value, "crit|page");
    ck_assert(cfg.routes[0].matches[1].is_regex);
    ck_assert(!cfg.routes[1].on_resolved_cancel);
    ck_assert_uint_eq(cfg.routes[1].nmatches, 0);
    ck_assert_str_eq(cfg.default_route, "quiet.v2");

    ck_assert_str_eq(source_of("listen"), "file");
    ck_assert_str_eq(source_of("queue.listen"), "file");
    ck_assert_str_eq(source_of("config_path"), "default");
}
END_TEST

START_TEST(test_empty_file_keeps_defaults)
{
    ck_load_ok("{}");
    ck_assert_str_eq(cfg.listen, "127.0.0.1:8080");
    ck_assert_uint_eq(cfg.nrun_types, 1);
    ck_assert_str_eq(source_of("listen"), "default");
}
END_TEST

START_TEST(test_null_clears_nullable)
{
    ck_load_ok("{\"database_url\": \"host=x\", \"default_route\": \"demo\"}");
    ck_assert_str_eq(cfg.database_url, "host=x");
    ck_load_ok("{\"database_url\": null, \"default_route\": null}");
    ck_assert_ptr_null(cfg.database_url);
    ck_assert_ptr_null(cfg.default_route);
}
END_TEST

START_TEST(test_demo_redefined_field_by_field)
{
    const struct run_type *demo;

    ck_load_ok("{\"run_types\": {\"demo\": {\"max_attempts\": 5, \"params\": {\"steps\": 1}}}}");
    ck_assert_uint_eq(cfg.nrun_types, 1);
    demo = cfg_run_type(&cfg, "demo");
    ck_assert_str_eq(demo->action, "simulate");
    ck_assert_int_eq(demo->max_attempts, 5);
    ck_assert_int_eq(demo->retry_backoff_ms, 200);
    ck_assert_int_eq(json_integer_value(json_object_get(demo->params, "steps")), 1);
}
END_TEST

/* ---- concurrency keys and tenants ---- */

/* "concurrency": none by default; an object over the defaults (the
 * type's name as group, max_running 1, strategy queue) with its key
 * compiled; replaced as a whole, kept when the type is redefined without
 * it, removed by null; --print-config shows it with its group. */
START_TEST(test_concurrency_load)
{
    const struct run_type *rt;
    json_t *j, *c, *want;

    ck_assert(!cfg_run_type(&cfg, "demo")->conc.on);
    ck_load_ok("{\"run_types\": {\"restart-host\": {\"action\": \"simulate\", \"concurrency\": "
               "{\"key\": \"{{tenant}}/{{input:/labels/instance}}\"}},"
               " \"patch-host\": {\"action\": \"simulate\", \"concurrency\": {\"group\": "
               "\"restart-host\", \"key\": \"{{input:/host}}\", \"max_running\": 1, "
               "\"strategy\": \"queue\"}},"
               " \"deploy\": {\"action\": \"simulate\", \"concurrency\": {\"key\": \"all\", "
               "\"max_running\": 100000, \"strategy\": \"cancel_in_progress\"}},"
               " \"probe\": {\"action\": \"simulate\", \"concurrency\": null}}}");
    rt = cfg_run_type(&cfg, "restart-host");
    ck_assert(rt->conc.on);
    ck_assert_str_eq(rt->conc.group, "restart-host");
    ck_assert_str_eq(rt->conc.key, "{{tenant}}/{{input:/labels/instance}}");
    ck_assert_int_eq(rt->conc.max_running, 1);
    ck_assert_int_eq(rt->conc.strategy, CONC_QUEUE);
    want =
        json_loads("[[\"tenant\"], [\"text\", \"/\"], [\"input\", \"/labels/instance\"]]", 0, NULL);
    ck_assert(json_equal(rt->conc.parts, want));
    json_decref(want);
    ck_assert_str_eq(cfg_run_type(&cfg, "patch-host")->conc.group, "restart-host");
    rt = cfg_run_type(&cfg, "deploy");
    ck_assert_int_eq(rt->conc.max_running, 100000);
    ck_assert_int_eq(rt->conc.strategy, CONC_CANCEL_IN_PROGRESS);
    ck_assert(!cfg_run_type(&cfg, "probe")->conc.on);
    ck_assert_str_eq(cfg_conc_strategy_name(CONC_CANCEL_NEWEST), "cancel_newest");
    ck_assert_str_eq(cfg_conc_strategy_name(CONC_KEEP_NEWEST), "keep_newest");

    j = cfg_to_json(&cfg);
    c = json_object_get(json_object_get(json_object_get(j, "run_types"), "restart-host"),
                        "concurrency");
    want =
        json_pack("{s:s, s:s, s:i, s:s}", "group", "restart-host", "key",
                  "{{tenant}}/{{input:/labels/instance}}", "max_running", 1, "strategy", "queue");
    ck_assert(json_equal(c, want));
    json_decref(want);
    ck_assert(json_is_null(
        json_object_get(json_object_get(json_object_get(j, "run_types"), "demo"), "concurrency")));
    json_decref(j);

    /* a type redefined field by field keeps it; a new object replaces it
     * whole; null removes it */
    ck_load_ok("{\"run_types\": {\"deploy\": {\"max_attempts\": 1}}}");
    ck_assert_str_eq(cfg_run_type(&cfg, "deploy")->conc.key, "all");
    ck_load_ok("{\"run_types\": {\"deploy\": {\"concurrency\": {\"key\": \"{{tenant}}\"}}}}");
    rt = cfg_run_type(&cfg, "deploy");
    ck_assert_int_eq(rt->conc.max_running, 1);
    ck_assert_int_eq(rt->conc.strategy, CONC_QUEUE);
    ck_load_ok("{\"run_types\": {\"deploy\": {\"concurrency\": null}}}");
    ck_assert(!cfg_run_type(&cfg, "deploy")->conc.on);
    ck_assert_ptr_null(cfg_run_type(&cfg, "deploy")->conc.parts);
}
END_TEST

/* A load on a fresh configuration fails with exactly msg. */
#define ck_fresh_load_fails(text, msg)                                                             \
    do {                                                                                           \
        cfg_cleanup(&cfg);                                                                         \
        cfg_init(&cfg, &action_registry);                                                          \
        ck_load_fails((text), (msg));                                                              \
    } while (0)

/* Each key of "concurrency" checked and named; a failed definition leaves
 * the type as it was. */
START_TEST(test_concurrency_errors_named)
{
    ck_fresh_load_fails(
        "{\"run_types\": {\"a\": {\"action\": \"simulate\", \"concurrency\": {\"key\": \"x\", "
        "\"max_runing\": 2, \"stratgy\": \"queue\"}},"
        " \"b\": {\"action\": \"simulate\", \"concurrency\": {\"key\": \"x\", \"max_running\": "
        "0, \"strategy\": \"cancel\"}}}}",
        "unknown key \"run_types.a.concurrency.max_runing\"; did you mean \"max_running\"?\n"
        "unknown key \"run_types.a.concurrency.stratgy\"; did you mean \"strategy\"?\n"
        "invalid \"run_types.b.concurrency.max_running\": must be between 1 and 100000\n"
        "invalid \"run_types.b.concurrency.strategy\": expected \"queue\", "
        "\"cancel_in_progress\", \"cancel_newest\" or \"keep_newest\"");
    ck_fresh_load_fails(
        "{\"run_types\": {\"c\": {\"action\": \"simulate\", \"concurrency\": {\"group\": \"a b\", "
        "\"key\": \"x\", \"max_running\": 100001}},"
        " \"d\": {\"action\": \"simulate\", \"concurrency\": {\"max_running\": 2}},"
        " \"e\": {\"action\": \"simulate\", \"concurrency\": {\"key\": \"{{input:host}}\"}}}}",
        "invalid \"run_types.c.concurrency.group\": must be 1 to 64 characters of A-Z, a-z, "
        "0-9, \"_\", \".\" or \"-\"\n"
        "invalid \"run_types.c.concurrency.max_running\": must be between 1 and 100000\n"
        "missing \"run_types.d.concurrency.key\"\n"
        "invalid \"run_types.e.concurrency.key\": \"{{input:host}}\": \"host\" is not a JSON "
        "pointer (RFC 6901), such as \"/labels/instance\"");
    ck_fresh_load_fails(
        "{\"run_types\": {\"f\": {\"action\": \"simulate\", \"concurrency\": \"{{input:/host}}\"},"
        " \"g\": {\"action\": \"simulate\", \"concurrency\": {\"key\": null, \"group\": 7}},"
        " \"h\": {\"action\": \"simulate\", \"concurency\": {}}}}",
        "invalid \"run_types.f.concurrency\": expected an object or null\n"
        "invalid \"run_types.g.concurrency.key\": expected a string\n"
        "invalid \"run_types.g.concurrency.group\": expected a string\n"
        "unknown key \"run_types.h.concurency\"; did you mean \"concurrency\"?");
    ck_assert_uint_eq(cfg.nrun_types, 1);
    ck_load_ok("{\"run_types\": {\"demo\": {\"concurrency\": {\"key\": \"one\"}}}}");
    ck_load_fails("{\"run_types\": {\"demo\": {\"concurrency\": {\"key\": \"{{run:/id}}\"}}}}",
                  "invalid \"run_types.demo.concurrency.key\": unknown placeholder "
                  "\"{{run:/id}}\": a key takes {{input:/json/pointer}} and {{tenant}}");
    ck_load_fails("{\"run_types\": {\"demo\": {\"concurrency\": {\"key\": \"\"}}}}",
                  "invalid \"run_types.demo.concurrency.key\": the template is empty");
    ck_assert_str_eq(cfg_run_type(&cfg, "demo")->conc.key, "one");
}
END_TEST

/* A key template whose literal text alone is longer than a key (512
 * bytes) could make no key: refused at load, naming the key; 512 bytes
 * of it load. */
START_TEST(test_concurrency_literal_text_bound)
{
    char text[1200], want[200];
    int n = snprintf(text, sizeof(text),
                     "{\"run_types\": {\"big\": {\"action\": \"simulate\", \"concurrency\": "
                     "{\"key\": \"{{input:/host}}");

    memset(text + n, 'k', 512);
    snprintf(text + n + 512, sizeof(text) - (size_t)n - 512, "\"}}}}");
    ck_load_ok(text);
    memset(text + n, 'k', 513);
    snprintf(text + n + 513, sizeof(text) - (size_t)n - 513, "\"}}}}");
    snprintf(want, sizeof(want),
             "invalid \"run_types.big.concurrency.key\": the template's literal text is 513 "
             "bytes, more than the 512 of a key: it could make no key");
    ck_load_fails(text, want);
}
END_TEST

/* The run types of a group share its keys: they must agree on
 * max_running and strategy, and an error names both types. */
START_TEST(test_concurrency_group_agrees)
{
    struct error err = {0};

    ck_load_fails(
        "{\"run_types\": {\"restart-host\": {\"action\": \"simulate\", \"concurrency\": "
        "{\"group\": \"host\", \"key\": \"{{input:/host}}\", \"max_running\": 2}},"
        " \"patch-host\": {\"action\": \"simulate\", \"concurrency\": {\"group\": \"host\", "
        "\"key\": \"{{input:/host}}\", \"strategy\": \"cancel_newest\"}},"
        " \"reboot-host\": {\"action\": \"simulate\", \"concurrency\": {\"group\": \"host\", "
        "\"key\": \"{{input:/name}}\", \"max_running\": 2}}}}",
        "invalid \"run_types.patch-host.concurrency.max_running\": 1, but run type "
        "\"restart-host\" of the same group \"host\" has 2; the run types of a group share its "
        "max_running\n"
        "invalid \"run_types.patch-host.concurrency.strategy\": \"cancel_newest\", but run type "
        "\"restart-host\" of the same group \"host\" has \"queue\"; the run types of a group "
        "share its strategy");
    /* the group of a type named by default is its name, shared alike */
    cfg_cleanup(&cfg);
    cfg_init(&cfg, &action_registry);
    ck_load_fails("{\"run_types\": {\"host\": {\"action\": \"simulate\", \"concurrency\": "
                  "{\"key\": \"k\"}}, \"other\": {\"action\": \"simulate\", \"concurrency\": "
                  "{\"group\": \"host\", \"key\": \"k\", \"strategy\": \"keep_newest\"}}}}",
                  "invalid \"run_types.other.concurrency.strategy\": \"keep_newest\", but run "
                  "type \"host\" of the same group \"host\" has \"queue\"; the run types of a "
                  "group share its strategy");
    cfg_cleanup(&cfg);
    cfg_init(&cfg, &action_registry);
    ck_load_ok("{\"run_types\": {\"a\": {\"action\": \"simulate\", \"concurrency\": "
               "{\"group\": \"g\", \"key\": \"{{input:/x}}\", \"max_running\": 3, \"strategy\": "
               "\"keep_newest\"}}, \"b\": {\"action\": \"simulate\", \"concurrency\": "
               "{\"group\": \"g\", \"key\": \"{{tenant}}\", \"max_running\": 3, \"strategy\": "
               "\"keep_newest\"}}, \"c\": {\"action\": \"simulate\", \"concurrency\": "
               "{\"group\": \"h\", \"key\": \"k\", \"max_running\": 9}}}}");
    ck_assert_int_eq(cfg_validate(&cfg, &err), ST_OK);
}
END_TEST

/* The runs opsrun makes itself from fixed data (a schedule's, a
 * follow-up's without placeholders) have no caller to answer 400: the
 * data must hold each value the key takes, checked at start-up, each
 * error naming the data and the pointer. A follow-up whose data has
 * placeholders is left to the database. */
static const char keyed_type[] =
    "\"restart-host\": {\"action\": \"simulate\", \"concurrency\": "
    "{\"key\": \"{{tenant}}:{{input:/labels/instance}}:{{input:/port}}\"}}";

START_TEST(test_concurrency_schedule_data)
{
    char text[2048];
    struct error err = {0};

    snprintf(text, sizeof(text),
             "{\"run_types\": {%s}, \"schedules\": {"
             "\"nightly\": {\"cron\": \"@daily\", \"run_type\": \"restart-host\"},"
             " \"weekly\": {\"cron\": \"@weekly\", \"run_type\": \"restart-host\", "
             "\"data\": {\"labels\": {\"instance\": \"db-1\"}, \"port\": 9100}},"
             " \"plain\": {\"cron\": \"@weekly\", \"run_type\": \"demo\"}}}",
             keyed_type);
    ck_fresh_load_fails(text, "invalid \"schedules.nightly.data\": "
                              "run_types.restart-host.concurrency: the input has no value at "
                              "\"/labels/instance\"\n"
                              "invalid \"schedules.nightly.data\": "
                              "run_types.restart-host.concurrency: the input has no value at "
                              "\"/port\"");
    snprintf(text, sizeof(text),
             "{\"run_types\": {%s}, \"schedules\": {"
             "\"hourly\": {\"cron\": \"@hourly\", \"run_type\": \"restart-host\", "
             "\"data\": {\"labels\": {\"instance\": {\"a\": 1}}, \"port\": 1.5}}}}",
             keyed_type);
    ck_fresh_load_fails(text, "invalid \"schedules.hourly.data\": "
                              "run_types.restart-host.concurrency: the value at "
                              "\"/labels/instance\" is an object, not a string, a whole number or "
                              "a boolean\n"
                              "invalid \"schedules.hourly.data\": "
                              "run_types.restart-host.concurrency: the value at \"/port\" is a "
                              "number with a decimal point or an exponent, not a string, a whole "
                              "number or a boolean");
    /* a key too long for the schedule's tenant; 512 bytes are a key */
    for (int len = 509; len >= 508; len--) {
        snprintf(text, sizeof(text),
                 "{\"run_types\": {\"t\": {\"action\": \"simulate\", \"concurrency\": "
                 "{\"key\": \"{{tenant}}{{input:/v}}\"}}}, \"schedules\": {\"s\": {\"cron\": "
                 "\"@daily\", \"run_type\": \"t\", \"tenant\": \"acme\", \"data\": {\"v\": "
                 "\"%0*d\"}}}}",
                 len, 0);
        if (len == 509) {
            ck_fresh_load_fails(text, "invalid \"schedules.s.data\": run_types.t.concurrency: the "
                                      "concurrency key would be 513 bytes, more than 512");
            continue;
        }
        cfg_cleanup(&cfg);
        cfg_init(&cfg, &action_registry);
        ck_load_ok(text);
        ck_assert_int_eq(cfg_validate(&cfg, &err), ST_OK);
    }
}
END_TEST

START_TEST(test_concurrency_then_data)
{
    char text[2048];
    struct error err = {0};

    snprintf(text, sizeof(text),
             "{\"run_types\": {%s, \"check\": {\"action\": \"simulate\", \"then\": ["
             "{\"on\": [\"failed\"], \"run_type\": \"restart-host\"},"
             "{\"on\": [\"failed\"], \"run_type\": \"restart-host\", \"data\": {\"port\": 1}},"
             "{\"on\": [\"failed\"], \"run_type\": \"restart-host\", \"data\": "
             "{\"labels\": \"{{run:/input/labels}}\"}},"
             "{\"on\": [\"failed\"], \"run_type\": \"restart-host\", \"data\": "
             "{\"labels\": {\"instance\": \"db-1\"}, \"port\": 9100}},"
             "{\"on\": [\"failed\"], \"run_type\": \"demo\"}]}}}",
             keyed_type);
    ck_fresh_load_fails(text, "invalid \"run_types.check.then[0].data\": "
                              "run_types.restart-host.concurrency: the input has no value at "
                              "\"/labels/instance\"\n"
                              "invalid \"run_types.check.then[0].data\": "
                              "run_types.restart-host.concurrency: the input has no value at "
                              "\"/port\"\n"
                              "invalid \"run_types.check.then[1].data\": "
                              "run_types.restart-host.concurrency: the input has no value at "
                              "\"/labels/instance\"");
    /* placeholders anywhere in the data: the database decides */
    ck_load_ok("{\"run_types\": {\"check\": {\"then\": ["
               "{\"on\": [\"failed\"], \"run_type\": \"restart-host\", \"data\": "
               "{\"labels\": {\"instance\": \"db-1\"}, \"port\": 9100, "
               "\"why\": [\"{{run:/error/message}}\"]}}]}}}");
    ck_assert_int_eq(cfg_validate(&cfg, &err), ST_OK);
}
END_TEST

/* "tenants" and queue.tenant_max_running: no cap by default; a tenant's
 * own max_running wins, null falls back to the queue's; merged by name,
 * null removes one; names and values checked. */
START_TEST(test_tenants)
{
    json_t *j;

    ck_assert_int_eq(cfg.queue.tenant_max_running, 0);
    ck_assert_uint_eq(cfg.ntenants, 0);
    ck_assert_int_eq(cfg_tenant_max_running(&cfg, "acme"), 0);
    ck_load_ok("{\"tenants\": {\"acme\": {\"max_running\": 10}, \"beta\": {}, "
               "\"gamma.eu-1\": {\"max_running\": null}}}");
    ck_assert_uint_eq(cfg.ntenants, 3);
    ck_assert_int_eq(cfg_tenant_max_running(&cfg, "acme"), 10);
    ck_assert_int_eq(cfg_tenant_max_running(&cfg, "beta"), 0);
    ck_assert_int_eq(cfg_tenant_max_running(&cfg, "other"), 0);
    ck_load_ok("{\"queue\": {\"tenant_max_running\": 4}, \"tenants\": {\"beta\": null, "
               "\"acme\": {\"max_running\": 100000}}}");
    ck_assert_uint_eq(cfg.ntenants, 2);
    ck_assert_int_eq(cfg_tenant_max_running(&cfg, "acme"), 100000);
    ck_assert_int_eq(cfg_tenant_max_running(&cfg, "beta"), 4);
    ck_assert_int_eq(cfg_tenant_max_running(&cfg, "gamma.eu-1"), 4);
    ck_assert_int_eq(cfg_tenant_max_running(&cfg, NULL), 4);

    j = cfg_to_json(&cfg);
    ck_assert_int_eq(
        json_integer_value(json_object_get(json_object_get(j, "queue"), "tenant_max_running")), 4);
    ck_assert_int_eq(json_integer_value(json_object_get(
                         json_object_get(json_object_get(j, "tenants"), "acme"), "max_running")),
                     100000);
    ck_assert(json_is_null(json_object_get(
        json_object_get(json_object_get(j, "tenants"), "gamma.eu-1"), "max_running")));
    json_decref(j);
    ck_load_ok("{\"queue\": {\"tenant_max_running\": null}}");
    ck_assert_int_eq(cfg_tenant_max_running(&cfg, "gamma.eu-1"), 0);

    ck_load_fails("{\"tenants\": {\"a b\": {}, \"acme\": {\"max_runing\": 1}, "
                  "\"x\": {\"max_running\": 0}, \"y\": 5}, "
                  "\"queue\": {\"tenant_max_running\": 100001}}",
                  "invalid \"tenants.a b\": must be 1 to 64 characters of A-Z, a-z, 0-9, \"_\", "
                  "\".\" or \"-\"\n"
                  "unknown key \"tenants.acme.max_runing\"; did you mean \"max_running\"?\n"
                  "invalid \"tenants.x.max_running\": must be null or between 1 and 100000\n"
                  "invalid \"tenants.y\": expected an object\n"
                  "invalid \"queue.tenant_max_running\": must be null or between 1 and 100000");
    ck_load_fails("{\"tenants\": []}", "invalid \"tenants\": expected an object");
    ck_load_fails("{\"tenant\": {}}", "unknown key \"tenant\"; did you mean \"tenants\"?");
    /* a failed entry changes nothing */
    ck_assert_int_eq(cfg_tenant_max_running(&cfg, "acme"), 100000);
    ck_assert_uint_eq(cfg.ntenants, 2);
}
END_TEST

START_TEST(test_failed_run_type_changes_nothing)
{
    ck_load_fails("{\"run_types\": {\"demo\": {\"max_attempts\": 5, \"timeout_s\": 0}}}",
                  "invalid \"run_types.demo.timeout_s\": must be between 1 and 604800");
    ck_assert_int_eq(cfg_run_type(&cfg, "demo")->max_attempts, 3);
    ck_assert_int_eq(cfg_run_type(&cfg, "demo")->timeout_s, 900);
}
END_TEST

START_TEST(test_demo_removed_by_null)
{
    struct error err = {0};

    ck_load_ok("{\"run_types\": {\"demo\": null, \"x\": {\"action\": \"simulate\"}}}");
    ck_assert_uint_eq(cfg.nrun_types, 1);
    ck_assert_ptr_null(cfg_run_type(&cfg, "demo"));
    ck_assert_ptr_nonnull(cfg_run_type(&cfg, "x"));
    ck_assert_int_eq(cfg_validate(&cfg, &err), ST_OK);
}
END_TEST

START_TEST(test_removed_type_still_routed)
{
    struct error err = {0};

    ck_load_ok("{\"routes\": [{\"run_type\": \"demo\"}]}");
    ck_load_fails("{\"run_types\": {\"demo\": null}}",
                  "invalid \"routes[0].run_type\": unknown run type \"demo\"");
    ck_assert_int_eq(cfg_validate(&cfg, &err), ST_INVALID);
    ck_assert_str_eq(err.message, "invalid \"routes[0].run_type\": unknown run type \"demo\"");
}
END_TEST

START_TEST(test_good_listen)
{
    static const char *const ok[] = {"0.0.0.0:80", "localhost:8080",  "[::]:8080",
                                     "[::1]:1",    "127.0.0.1:65535", "10.1.2.3:08080"};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        struct error err = {0};
        ck_assert_msg(cfg_set(&cfg, "listen", ok[i], CFG_SRC_FLAG, &err) == ST_OK, "%s: %s", ok[i],
                      err.message);
        ck_assert_str_eq(cfg.listen, ok[i]);
    }
}
END_TEST

/* ---- every kind of invalid file, with the exact message ---- */

static const struct {
    const char *json;
    const char *message;
} bad_files[] = {
    /* unknown keys */
    {"{\"lisen\": \"127.0.0.1:1\"}", "unknown key \"lisen\"; did you mean \"listen\"?"},
    {"{\"queue\": {\"wokers\": 4}}",
     "unknown key \"queue.wokers\"; did you mean \"queue.workers\"?"},
    {"{\"http\": {\"threads\": 4, \"x\": {\"y\": 1}}}", "unknown key \"http.x\""},
    {"{\"queue.workers\": 4}", "unknown key \"queue.workers\""},
    {"{\"queue\": {\"workers.x\": 4}}",
     "unknown key \"queue.workers.x\"; did you mean \"queue.workers\"?"},
    {"{\"workers\": 4}", "unknown key \"workers\"; did you mean \"queue.workers\"?"},
    {"{\"config_path\": \"/etc/opsrun.json\"}", "unknown key \"config_path\""},
    {"{\"run_types\": {\"x\": {\"action\": \"simulate\", \"retries\": 2}}}",
     "unknown key \"run_types.x.retries\""},
    {"{\"run_types\": {\"demo\": {\"params\": {\"speed\": 1}}}}",
     "unknown key \"run_types.demo.params.speed\""},
    {"{\"routes\": [{\"run_type\": \"demo\", \"priority\": 1}]}",
     "unknown key \"routes[0].priority\""},
    /* wrong types */
    {"{\"queue\": {\"workers\": \"8\"}}", "invalid \"queue.workers\": expected an integer"},
    {"{\"queue\": {\"workers\": 8.0}}", "invalid \"queue.workers\": expected an integer"},
    {"{\"queue\": {\"workers\": null}}", "invalid \"queue.workers\": expected an integer"},
    {"{\"queue\": []}", "invalid \"queue\": expected an object"},
    {"{\"listen\": 8080}", "invalid \"listen\": expected a string"},
    {"{\"listen\": null}", "invalid \"listen\": expected a string"},
    {"{\"log\": {\"json\": \"true\"}}", "invalid \"log.json\": expected a boolean"},
    {"{\"log\": {\"format\": \"JSON\"}}",
     "invalid \"log.format\": expected \"json\" or \"text\", got \"JSON\""},
    {"{\"queue\": {\"listen\": 1}}", "invalid \"queue.listen\": expected a boolean"},
    {"{\"log\": {\"level\": 1}}", "invalid \"log.level\": expected a string"},
    {"{\"log\": {\"level\": \"verbose\"}}",
     "invalid \"log.level\": expected \"debug\", \"info\", \"warn\" or \"error\""},
    {"{\"run_types\": []}", "invalid \"run_types\": expected an object"},
    {"{\"run_types\": {\"x\": 1}}", "invalid \"run_types.x\": expected an object"},
    {"{\"run_types\": {\"x\": {\"action\": 7}}}",
     "invalid \"run_types.x.action\": expected a string"},
    {"{\"run_types\": {\"x\": {\"action\": \"simulate\", \"params\": []}}}",
     "invalid \"run_types.x.params\": expected an object"},
    {"{\"run_types\": {\"x\": {\"action\": \"simulate\", \"max_running\": \"2\"}}}",
     "invalid \"run_types.x.max_running\": expected an integer"},
    {"{\"routes\": {}}", "invalid \"routes\": expected an array"},
    {"{\"routes\": [\"demo\"]}", "invalid \"routes[0]\": expected an object"},
    {"{\"routes\": [{\"run_type\": 1}]}", "invalid \"routes[0].run_type\": expected a string"},
    {"{\"routes\": [{\"run_type\": \"demo\", \"match\": []}]}",
     "invalid \"routes[0].match\": expected an object"},
    {"{\"routes\": [{\"run_type\": \"demo\", \"match\": {\"severity\": 1}}]}",
     "invalid \"routes[0].match.severity\": expected a string"},
    /* bounds */
    {"{\"queue\": {\"workers\": 0}}", "invalid \"queue.workers\": must be between 1 and 1024"},
    {"{\"queue\": {\"workers\": 1025}}", "invalid \"queue.workers\": must be between 1 and 1024"},
    {"{\"queue\": {\"workers\": 9223372036854775807}}",
     "invalid \"queue.workers\": must be between 1 and 1024"},
    {"{\"queue\": {\"max_running\": 0}}",
     "invalid \"queue.max_running\": must be between 1 and 100000"},
    {"{\"queue\": {\"claim_batch\": 1001}}",
     "invalid \"queue.claim_batch\": must be between 1 and 1000"},
    {"{\"queue\": {\"poll_interval_ms\": 49}}",
     "invalid \"queue.poll_interval_ms\": must be between 50 and 600000"},
    {"{\"queue\": {\"heartbeat_interval_s\": 0}}",
     "invalid \"queue.heartbeat_interval_s\": must be between 1 and 3600"},
    {"{\"queue\": {\"shutdown_grace_s\": 86401}}",
     "invalid \"queue.shutdown_grace_s\": must be between 0 and 86400"},
    {"{\"queue\": {\"retention_s\": 59}}",
     "invalid \"queue.retention_s\": must be between 60 and 31536000"},
    {"{\"queue\": {\"retention_s\": 31536001}}",
     "invalid \"queue.retention_s\": must be between 60 and 31536000"},
    {"{\"queue\": {\"event_partition_s\": 59}}",
     "invalid \"queue.event_partition_s\": must be between 60 and 2592000"},
    {"{\"queue\": {\"event_partition_s\": 2592001}}",
     "invalid \"queue.event_partition_s\": must be between 60 and 2592000"},
    {"{\"http\": {\"threads\": 1}}", "invalid \"http.threads\": must be between 2 and 64"},
    {"{\"http\": {\"threads\": 65}}", "invalid \"http.threads\": must be between 2 and 64"},
    {"{\"http\": {\"max_body_bytes\": 1023}}",
     "invalid \"http.max_body_bytes\": must be between 1024 and 67108864"},
    {"{\"db\": {\"pool_size\": 1}}", "invalid \"db.pool_size\": must be 0 or between 2 and 1000"},
    {"{\"db\": {\"pool_size\": 1001}}",
     "invalid \"db.pool_size\": must be 0 or between 2 and 1000"},
    {"{\"db\": {\"pool_size\": -1}}", "invalid \"db.pool_size\": must be 0 or between 2 and 1000"},
    {"{\"run_types\": {\"x\": {\"action\": \"simulate\", \"max_attempts\": 0}}}",
     "invalid \"run_types.x.max_attempts\": must be between 1 and 100"},
    {"{\"run_types\": {\"x\": {\"action\": \"simulate\", \"max_attempts\": 101}}}",
     "invalid \"run_types.x.max_attempts\": must be between 1 and 100"},
    {"{\"run_types\": {\"x\": {\"action\": \"simulate\", \"retry_backoff_ms\": -1}}}",
     "invalid \"run_types.x.retry_backoff_ms\": must be between 0 and 3600000"},
    {"{\"run_types\": {\"x\": {\"action\": \"simulate\", \"retry_backoff_ms\": 3600001}}}",
     "invalid \"run_types.x.retry_backoff_ms\": must be between 0 and 3600000"},
    {"{\"run_types\": {\"x\": {\"action\": \"simulate\", \"retry_backoff_ms\": 1000,"
     " \"retry_backoff_max_ms\": 999}}}",
     "invalid \"run_types.x.retry_backoff_max_ms\": must be at least retry_backoff_ms (1000)"},
    {"{\"run_types\": {\"x\": {\"action\": \"simulate\", \"timeout_s\": 0}}}",
     "invalid \"run_types.x.timeout_s\": must be between 1 and 604800"},
    {"{\"run_types\": {\"x\": {\"action\": \"simulate\", \"timeout_s\": 604801}}}",
     "invalid \"run_types.x.timeout_s\": must be between 1 and 604800"},
    {"{\"run_types\": {\"x\": {\"action\": \"simulate\", \"max_running\": 0}}}",
     "invalid \"run_types.x.max_running\": must be null or between 1 and 100000"},
    {"{\"run_types\": {\"x\": {\"action\": \"simulate\", \"max_running\": 100001}}}",
     "invalid \"run_types.x.max_running\": must be null or between 1 and 100000"},
    /* names */
    {"{\"run_types\": {\"bad name\": {\"action\": \"simulate\"}}}",
     "invalid \"run_types.bad name\": must be 1 to 64 characters of A-Z, a-z, 0-9, \"_\", \".\" "
     "or \"-\""},
    {"{\"run_types\": {\"\": {\"action\": \"simulate\"}}}",
     "invalid \"run_types.\": must be 1 to 64 characters of A-Z, a-z, 0-9, \"_\", \".\" or \"-\""},
    {"{\"run_types\": {\"a12345678901234567890123456789012345678901234567890123456789012345\":"
     " {\"action\": \"simulate\"}}}",
     "invalid \"run_types.a12345678901234567890123456789012345678901234567890123456789012345\": "
     "must be 1 to 64 characters of A-Z, a-z, 0-9, \"_\", \".\" or \"-\""},
    {"{\"tenant_default\": \"a/b\"}",
     "invalid \"tenant_default\": must be 1 to 64 characters of A-Z, a-z, 0-9, \"_\", \".\" or "
     "\"-\""},
    /* actions */
    {"{\"run_types\": {\"x\": {}}}", "missing \"run_types.x.action\""},
    {"{\"run_types\": {\"x\": {\"action\": \"foo\"}}}",
     "invalid \"run_types.x.action\": unknown action \"foo\""},
    {"{\"run_types\": {\"demo\": {\"action\": \"ftp_job\"}}}",
     "invalid \"run_types.demo.action\": unknown action \"ftp_job\""},
    /* simulate params */
    {"{\"run_types\": {\"x\": {\"action\": \"simulate\", \"params\": {\"duration_ms\": -1}}}}",
     "invalid \"run_types.x.params.duration_ms\": must be between 0 and 86400000"},
    {"{\"run_types\": {\"x\": {\"action\": \"simulate\","
     " \"params\": {\"duration_ms\": 86400001}}}}",
     "invalid \"run_types.x.params.duration_ms\": must be between 0 and 86400000"},
    {"{\"run_types\": {\"x\": {\"action\": \"simulate\", \"params\": {\"duration_ms\": \"1s\"}}}}",
     "invalid \"run_types.x.params.duration_ms\": expected an integer"},
    {"{\"run_types\": {\"x\": {\"action\": \"simulate\", \"params\": {\"steps\": 1001}}}}",
     "invalid \"run_types.x.params.steps\": must be between 0 and 1000"},
    {"{\"run_types\": {\"demo\": {\"params\": {\"fail\": \"sometimes\"}}}}",
     "invalid \"run_types.demo.params.fail\": expected \"never\", \"permanent\", \"transient\" or "
     "\"first:N\""},
    {"{\"run_types\": {\"demo\": {\"params\": {\"fail\": \"first:\"}}}}",
     "invalid \"run_types.demo.params.fail\": expected \"never\", \"permanent\", \"transient\" or "
     "\"first:N\""},
    {"{\"run_types\": {\"demo\": {\"params\": {\"fail\": \"first:101\"}}}}",
     "invalid \"run_types.demo.params.fail\": N of \"first:N\" must be between 0 and 100"},
    {"{\"run_types\": {\"demo\": {\"params\": {\"fail\": \"first:2x\"}}}}",
     "invalid \"run_types.demo.params.fail\": expected \"first:N\" with N an integer"},
    {"{\"run_types\": {\"demo\": {\"params\": {\"fail\": true}}}}",
     "invalid \"run_types.demo.params.fail\": expected a string"},
    /* routes */
    {"{\"routes\": [{\"match\": {\"a\": \"b\"}}]}", "missing \"routes[0].run_type\""},
    {"{\"routes\": [{\"run_type\": \"nope\"}]}",
     "invalid \"routes[0].run_type\": unknown run type \"nope\""},
    {"{\"routes\": [{\"run_type\": \"demo\", \"on_resolved\": \"delete\"}]}",
     "invalid \"routes[0].on_resolved\": expected \"ignore\" or \"cancel\""},
    {"{\"routes\": [{\"match\": {\"a\": \"x\"}, \"run_type\": \"demo\"},"
     " {\"run_type\": \"demo\"},"
     " {\"match\": {\"alertname\": \"~.*\", \"severity\": \"~(crit\"}, \"run_type\": \"demo\"}]}",
     "invalid \"routes[2].match.severity\": bad regular expression: Unmatched ( or \\("},
    {"{\"routes\": [{\"match\": {\"n\": \"~a{2,1}\"}, \"run_type\": \"demo\"}]}",
     "invalid \"routes[0].match.n\": bad regular expression: Invalid content of \\{\\}"},
    /* repetitions of repetitions, which glibc takes minutes or gigabytes to compile */
    {"{\"routes\": [{\"match\": {\"n\": \"~a++\"}, \"run_type\": \"demo\"}]}",
     "invalid \"routes[0].match.n\": the regular expression is too costly: it has a repetition "
     "right after another"},
    {"{\"routes\": [{\"match\": {\"n\": \"~(((a*){0,2})*){0,9}\"}, \"run_type\": \"demo\"}]}",
     "invalid \"routes[0].match.n\": the regular expression is too costly: it repeats something "
     "that can match the empty string and holds such a repetition itself"},
    {"{\"routes\": [{\"match\": {\"n\": \"~(((((a+)b)+c)+d)+e)+\"}, \"run_type\": \"demo\"}]}",
     "invalid \"routes[0].match.n\": the regular expression is too costly: its repetitions are "
     "nested more than 4 deep"},
    {"{\"routes\": [{\"match\": {\"n\": \"~((x{10}){10}){101}\"}, \"run_type\": \"demo\"}]}",
     "invalid \"routes[0].match.n\": the regular expression is too costly: it would compile to "
     "more than 10000 parts once its repetitions are spelled out"},
    {"{\"routes\": [{\"match\": {\"n\": \"~(a?){0,200}\"}, \"run_type\": \"demo\"}]}",
     "invalid \"routes[0].match.n\": the regular expression is too costly: a repetition in it "
     "spells out more than 100 parts of something that can match the empty string"},
    {"{\"default_route\": \"nope\"}", "invalid \"default_route\": unknown run type \"nope\""},
    /* listen */
    {"{\"listen\": \"8080\"}", "invalid \"listen\": expected HOST:PORT, got \"8080\""},
    {"{\"listen\": \"localhost\"}", "invalid \"listen\": expected HOST:PORT, got \"localhost\""},
    {"{\"listen\": \"[::1]8080\"}", "invalid \"listen\": expected HOST:PORT, got \"[::1]8080\""},
    {"{\"listen\": \"127.0.0.1:0\"}", "invalid \"listen\": port must be between 1 and 65535"},
    {"{\"listen\": \"127.0.0.1:65536\"}", "invalid \"listen\": port must be between 1 and 65535"},
    {"{\"listen\": \"127.0.0.1:\"}", "invalid \"listen\": port must be between 1 and 65535"},
    {"{\"listen\": \"127.0.0.1:80a\"}", "invalid \"listen\": port must be between 1 and 65535"},
    {"{\"listen\": \"[::1]:x\"}", "invalid \"listen\": port must be between 1 and 65535"},
    {"{\"listen\": \"example.com:80\"}",
     "invalid \"listen\": host must be an IPv4 address, localhost or [IPv6 address]"},
    {"{\"listen\": \"::1:80\"}",
     "invalid \"listen\": host must be an IPv4 address, localhost or [IPv6 address]"},
    {"{\"listen\": \"[zz]:80\"}",
     "invalid \"listen\": host must be an IPv4 address, localhost or [IPv6 address]"},
    {"{\"listen\": \":80\"}",
     "invalid \"listen\": host must be an IPv4 address, localhost or [IPv6 address]"},
    {"{\"listen\": \"256.0.0.1:80\"}",
     "invalid \"listen\": host must be an IPv4 address, localhost or [IPv6 address]"},
    /* the document itself */
    {"{", "could not parse configuration: string or '}' expected near end of file (line 1, "
          "column 1)"},
    {"[1]", "could not load configuration: expected a JSON object"},
    {"{\"listen\": \"127.0.0.1:1\", \"listen\": \"127.0.0.1:2\"}",
     "could not parse configuration: duplicate object key near '\"listen\"' (line 1, column 34)"},
};

START_TEST(test_bad_file)
{
    ck_load_fails(bad_files[_i].json, bad_files[_i].message);
}
END_TEST

/* ---- cross-field validation ---- */

START_TEST(test_orphan_after_heartbeat)
{
    struct error err = {0};

    ck_load_ok("{\"queue\": {\"heartbeat_interval_s\": 30, \"orphan_after_s\": 30}}");
    ck_assert_int_eq(cfg_validate(&cfg, &err), ST_INVALID);
    ck_assert_str_eq(err.message, "invalid \"queue.orphan_after_s\": must be greater than "
                                  "queue.heartbeat_interval_s (30)");
    memset(&err, 0, sizeof(err));
    ck_load_ok("{\"queue\": {\"orphan_after_s\": 20}}");
    ck_assert_int_eq(cfg_validate(&cfg, &err), ST_INVALID);
    ck_load_ok("{\"queue\": {\"orphan_after_s\": 31}}");
    ck_assert_int_eq(cfg_validate(&cfg, &err), ST_OK);
}
END_TEST

/* A run type's "approval": none by default or with null; an object over
 * the defaults (3600 s, reject); each key checked, unknown keys named;
 * --print-config shows it as the file has it. */
START_TEST(test_approval)
{
    const struct run_type *rt;
    json_t *j, *a;

    ck_assert_int_eq(cfg_run_type(&cfg, "demo")->approval.timeout_s, 0);
    ck_load_ok("{\"run_types\": {\"gate\": {\"action\": \"simulate\", \"approval\": {}},"
               " \"gate2\": {\"action\": \"simulate\", \"approval\": {\"timeout_s\": 60, "
               "\"on_timeout\": \"approve\"}}}}");
    rt = cfg_run_type(&cfg, "gate");
    ck_assert_int_eq(rt->approval.timeout_s, 3600);
    ck_assert(!rt->approval.approve_on_timeout);
    rt = cfg_run_type(&cfg, "gate2");
    ck_assert_int_eq(rt->approval.timeout_s, 60);
    ck_assert(rt->approval.approve_on_timeout);
    j = cfg_to_json(&cfg);
    a = json_object_get(json_object_get(json_object_get(j, "run_types"), "gate2"), "approval");
    ck_assert_int_eq(json_integer_value(json_object_get(a, "timeout_s")), 60);
    ck_assert_str_eq(json_string_value(json_object_get(a, "on_timeout")), "approve");
    ck_assert(json_is_null(
        json_object_get(json_object_get(json_object_get(j, "run_types"), "demo"), "approval")));
    json_decref(j);
    /* merged field by field like the rest of a type; null removes it */
    ck_load_ok("{\"run_types\": {\"gate2\": {\"max_attempts\": 1}}}");
    ck_assert_int_eq(cfg_run_type(&cfg, "gate2")->approval.timeout_s, 60);
    ck_load_ok("{\"run_types\": {\"gate2\": {\"approval\": null}}}");
    ck_assert_int_eq(cfg_run_type(&cfg, "gate2")->approval.timeout_s, 0);

    ck_load_fails("{\"run_types\": {\"demo\": {\"approval\": {\"timeout_s\": 0}}}}",
                  "invalid \"run_types.demo.approval.timeout_s\": must be an integer from 1 to "
                  "2592000");
    ck_load_fails("{\"run_types\": {\"demo\": {\"approval\": {\"on_timeout\": \"cancel\"}}}}",
                  "invalid \"run_types.demo.approval.on_timeout\": expected \"reject\" or "
                  "\"approve\"");
    ck_load_fails("{\"run_types\": {\"demo\": {\"approval\": {\"timeout\": 5}}}}",
                  "unknown key \"run_types.demo.approval.timeout\"; did you mean \"timeout_s\"?");
    ck_load_fails("{\"run_types\": {\"demo\": {\"approval\": true}}}",
                  "invalid \"run_types.demo.approval\": expected an object or null");
    ck_load_fails("{\"run_types\": {\"demo\": {\"aproval\": {}}}}",
                  "unknown key \"run_types.demo.aproval\"; did you mean \"approval\"?");
    /* a failed definition leaves the type as it was */
    ck_assert_int_eq(cfg_run_type(&cfg, "demo")->approval.timeout_s, 0);
}
END_TEST

/* A call may wait a whole statement timeout for its answer, so the silence
 * that ends a connection must be longer. */
START_TEST(test_tcp_user_timeout_past_statement_timeout)
{
    struct error err = {0};

    ck_load_ok("{\"db\": {\"statement_timeout_ms\": 2000, \"tcp_user_timeout_ms\": 2000}}");
    ck_assert_int_eq(cfg_validate(&cfg, &err), ST_INVALID);
    ck_assert_str_eq(err.message, "invalid \"db.tcp_user_timeout_ms\": must be greater than "
                                  "db.statement_timeout_ms (2000), or a statement that runs its "
                                  "full time is taken for a dead connection");
    ck_load_ok("{\"db\": {\"statement_timeout_ms\": 2000, \"tcp_user_timeout_ms\": 2001, "
               "\"prepared_statements\": false}}");
    ck_assert_int_eq(cfg_validate(&cfg, &err), ST_OK);
    ck_assert(!cfg.db.prepared_statements);
    ck_load_ok("{\"db\": {\"tcp_user_timeout_ms\": 0}}");
    ck_assert_int_eq(cfg_validate(&cfg, &err), ST_OK);
}
END_TEST

/* A run type's "poll" object: each key bounded, unknown keys named, the
 * cap at least the first delay; rest_job params checked by the action. */
START_TEST(test_poll_policy_and_rest_job)
{
    struct error err = {0};
    const struct run_type *rt;

    ck_load_ok("{\"run_types\": {\"demo\": {\"poll\": {\"initial_delay_ms\": 500, "
               "\"multiplier\": 3, \"max_checks\": 7}}}}");
    rt = cfg_run_type(&cfg, "demo");
    ck_assert_int_eq(rt->poll.initial_delay_ms, 500);
    ck_assert_int_eq(rt->poll.multiplier, 3);
    ck_assert_int_eq(rt->poll.max_checks, 7);
    ck_assert_int_eq(rt->poll.max_delay_ms, 30000);
    ck_load_fails("{\"run_types\": {\"demo\": {\"poll\": {\"every\": 1}}}}",
                  "unknown key \"run_types.demo.poll.every\"");
    ck_load_fails("{\"run_types\": {\"demo\": {\"poll\": {\"multiplier\": 11}}}}",
                  "invalid \"run_types.demo.poll.multiplier\": must be between 1 and 10");
    ck_load_fails("{\"run_types\": {\"demo\": {\"poll.multiplier\": 2}}}",
                  "unknown key \"run_types.demo.poll.multiplier\"");
    ck_load_fails("{\"run_types\": {\"demo\": {\"poll\": {\"initial_delay_ms\": 5000, "
                  "\"max_delay_ms\": 1000}}}}",
                  "invalid \"run_types.demo.poll.max_delay_ms\": must be at least "
                  "poll.initial_delay_ms (5000)");
    ck_load_fails("{\"run_types\": {\"j\": {\"action\": \"rest_job\", \"params\": {}}}}",
                  "missing \"run_types.j.params.submit\"");
    ck_load_fails("{\"run_types\": {\"j\": {\"action\": \"rest_job\", \"params\": {"
                  "\"submit\": {\"url\": \"ftp://x\"}}}}}",
                  "invalid \"run_types.j.params.submit.url\": expected an http:// or https:// URL");
    ck_load_fails("{\"run_types\": {\"j\": {\"action\": \"rest_job\", \"params\": {"
                  "\"submit\": {\"url\": \"http://x/{{env:OPSRUN_TEST_SURELY_UNSET}}\"}}}}}",
                  "invalid \"run_types.j.params.submit.url\": environment variable "
                  "OPSRUN_TEST_SURELY_UNSET is not set");
    ck_load_fails("{\"run_types\": {\"j\": {\"action\": \"rest_job\", \"params\": {"
                  "\"submit\": {\"url\": \"http://x/\"}, \"id_pointer\": \"id\"}}}}",
                  "invalid \"run_types.j.params.id_pointer\": expected a JSON pointer such as "
                  "\"/job/id\"");
    ck_load_ok("{\"run_types\": {\"j\": {\"action\": \"rest_job\", \"params\": {"
               "\"submit\": {\"url\": \"http://x/jobs\", \"body\": {\"in\": \"{{input}}\"}}, "
               "\"id_pointer\": \"/id\", \"status\": {\"url\": \"http://x/jobs/{{external_id}}\"}, "
               "\"state_pointer\": \"/state\", \"state_map\": {\"DONE\": \"succeeded\"}}}}}");
    ck_load_fails("{\"run_types\": {\"j\": {\"params\": {\"submit\": {\"url\": \"http://x/\"}, "
                  "\"id_pointer\": \"/id\", \"status\": {\"url\": \"http://x/\"}, "
                  "\"state_pointer\": \"/s\", \"state_map\": {\"X\": \"done\"}}}}}",
                  "invalid \"run_types.j.params.state_map.X\": expected running, succeeded, "
                  "failed or cancelled");
    ck_assert_int_eq(cfg_validate(&cfg, &err), ST_OK);
}
END_TEST

START_TEST(test_soap_params)
{
    const char *ok =
        "\"start\": {\"url\": \"http://s/\", \"body_text\": \"<a/>\"}, "
        "\"status\": {\"url\": \"http://s/\", \"body_text\": \"<b>{{external_id}}</b>\"}, "
        "\"task_id_xpath\": \"//t:ID\", \"status_xpath\": \"//t:S\", "
        "\"namespaces\": {\"t\": \"urn:t\"}";
    char buf[1024];

    snprintf(buf, sizeof(buf),
             "{\"run_types\": {\"s\": {\"action\": \"soap_job\", \"params\": "
             "{%s, \"cleanup\": {\"url\": \"http://s/\", \"body_text\": "
             "\"{{state:qid}}\"}}}}}",
             ok);
    ck_load_ok(buf);
    snprintf(buf, sizeof(buf),
             "{\"run_types\": {\"s\": {\"action\": \"soap_job\", \"params\": "
             "{%s, \"error_xpath\": \"//[\"}}}}",
             ok);
    ck_load_fails(buf, "invalid \"run_types.s.params.error_xpath\": expected an XPath expression");
    snprintf(buf, sizeof(buf),
             "{\"run_types\": {\"s\": {\"action\": \"soap_job\", \"params\": "
             "{%s, \"is_running\": {\"request\": {\"url\": \"http://r/\"}, "
             "\"pointer\": \"/isRunning\", \"min_gap\": 1}}}}}",
             ok);
    ck_load_fails(buf, "unknown key \"run_types.s.params.is_running.min_gap\"");
    snprintf(buf, sizeof(buf),
             "{\"run_types\": {\"s\": {\"action\": \"soap_job\", \"params\": "
             "{%s, \"readiness\": {\"request\": {\"url\": \"http://r/\"}}}}}}",
             ok);
    ck_load_fails(buf, "invalid \"run_types.s.params.readiness.pointer\": expected a JSON pointer");
    ck_load_fails("{\"run_types\": {\"s\": {\"action\": \"soap_job\", \"params\": {}}}}",
                  "missing \"run_types.s.params.start\"");
}
END_TEST

/* Preparation steps: their shape, unique names, captures of the action's
 * kind (XPath for soap_job, JSON pointers for rest_job) under names that do
 * not clash with the action's own state. */
START_TEST(test_prepare_params)
{
    static const struct {
        const char *steps, *want; /* want NULL: loads */
    } soap[] = {
        {"[{\"name\": \"mk\", \"request\": {\"url\": \"http://s/\", \"body_text\": \"<c/>\"}, "
         "\"capture\": {\"qid\": \"//t:NewObjectID\"}, \"cleanup\": {\"url\": \"http://s/\", "
         "\"body_text\": \"<d>{{state:qid}}</d>\"}}]",
         NULL},
        {"[]", "invalid \"run_types.s.params.prepare\": expected an array of 1 to 16 steps"},
        {"[{\"name\": \"mk\"}]", "missing \"run_types.s.params.prepare[0].request\""},
        {"[{\"name\": \"a b\", \"request\": {\"url\": \"http://s/\"}}]",
         "invalid \"run_types.s.params.prepare[0].name\": expected a name of letters, digits, _ "
         "and -"},
        {"[{\"name\": \"mk\", \"request\": {\"url\": \"http://s/\"}}, {\"name\": \"mk\", "
         "\"request\": {\"url\": \"http://s/\"}}]",
         "invalid \"run_types.s.params.prepare[1].name\": \"mk\" is used twice"},
        {"[{\"name\": \"mk\", \"request\": {\"url\": \"http://s/\"}, \"undo\": {}}]",
         "unknown key \"run_types.s.params.prepare[0].undo\""},
        {"[{\"name\": \"mk\", \"request\": {\"url\": \"http://s/\"}, "
         "\"capture\": {\"q\": \"//[\"}}]",
         "invalid \"run_types.s.params.prepare[0].capture.q\": expected an XPath expression"},
        {"[{\"name\": \"mk\", \"request\": {\"url\": \"http://s/\"}, "
         "\"capture\": {\"prepared\": \"//x\"}}]",
         "invalid \"run_types.s.params.prepare[0].capture.prepared\": a capture name is letters, "
         "digits, _ and - and none of the action's own state keys"},
        {"[{\"name\": \"mk\", \"request\": {\"url\": \"http://s/\"}, "
         "\"cleanup\": {\"body_text\": \"x\"}}]",
         "missing \"run_types.s.params.prepare[0].cleanup.url\""},
    };
    const char *ok = "\"start\": {\"url\": \"http://s/\", \"body_text\": \"<a/>\"}, "
                     "\"status\": {\"url\": \"http://s/\", \"body_text\": \"<b/>\"}, "
                     "\"task_id_xpath\": \"//t:ID\", \"status_xpath\": \"//t:S\", "
                     "\"namespaces\": {\"t\": \"urn:t\"}";
    char buf[2048];

    for (size_t i = 0; i < sizeof(soap) / sizeof(soap[0]); i++) {
        snprintf(buf, sizeof(buf),
                 "{\"run_types\": {\"s\": {\"action\": \"soap_job\", \"params\": "
                 "{%s, \"prepare\": %s}}}}",
                 ok, soap[i].steps);
        if (soap[i].want)
            ck_load_fails(buf, soap[i].want);
        else
            ck_load_ok(buf);
    }
    /* the start answer's captures may not take a step's or the record's name */
    snprintf(buf, sizeof(buf),
             "{\"run_types\": {\"s\": {\"action\": \"soap_job\", \"params\": {%s, \"prepare\": "
             "%s, \"capture\": {\"qid\": \"//t:Other\"}}}}}",
             ok, soap[0].steps);
    ck_load_fails(buf, "invalid \"run_types.s.params.capture.qid\": the name is one of the "
                       "action's own state keys or a preparation step's capture");
    snprintf(buf, sizeof(buf),
             "{\"run_types\": {\"s\": {\"action\": \"soap_job\", \"params\": {%s, "
             "\"capture\": {\"prepared\": \"//t:X\"}}}}}",
             ok);
    ck_load_fails(buf, "invalid \"run_types.s.params.capture.prepared\": the name is one of the "
                       "action's own state keys or a preparation step's capture");
    ck_load_ok("{\"run_types\": {\"j\": {\"action\": \"rest_job\", \"params\": {"
               "\"prepare\": [{\"name\": \"res\", \"request\": {\"url\": \"http://x/r\"}, "
               "\"capture\": {\"rid\": \"/id\"}}], "
               "\"submit\": {\"url\": \"http://x/jobs/{{state:rid}}\"}, \"id_pointer\": \"/id\", "
               "\"status\": {\"url\": \"http://x/jobs/{{external_id}}\"}, "
               "\"state_pointer\": \"/state\", \"state_map\": {\"DONE\": \"succeeded\"}}}}}");
    ck_load_fails("{\"run_types\": {\"j\": {\"action\": \"rest_job\", \"params\": {"
                  "\"prepare\": [{\"name\": \"res\", \"request\": {\"url\": \"http://x/r\"}, "
                  "\"capture\": {\"rid\": \"id\"}}], "
                  "\"submit\": {\"url\": \"http://x/jobs\"}, \"id_pointer\": \"/id\", "
                  "\"status\": {\"url\": \"http://x/jobs/{{external_id}}\"}, "
                  "\"state_pointer\": \"/state\", \"state_map\": {\"DONE\": \"succeeded\"}}}}}",
                  "invalid \"run_types.j.params.prepare[0].capture.rid\": expected a JSON pointer");
}
END_TEST

START_TEST(test_exec_params)
{
    ck_load_ok("{\"run_types\": {\"x\": {\"action\": \"exec\", \"params\": {\"argv\": "
               "[\"/bin/true\", \"{{run_id}}\"], \"env\": {\"A\": \"b\"}, \"grace_ms\": 0}}}}");
    ck_load_fails("{\"run_types\": {\"x\": {\"action\": \"exec\", \"params\": {}}}}",
                  "missing \"run_types.x.params.argv\": a non-empty array of strings");
    ck_load_fails("{\"run_types\": {\"x\": {\"action\": \"exec\", \"params\": {\"argv\": "
                  "[\"true\"]}}}}",
                  "invalid \"run_types.x.params.argv[0]\": expected an absolute path (no search "
                  "in PATH)");
    ck_load_fails("{\"run_types\": {\"x\": {\"action\": \"exec\", \"params\": {\"argv\": "
                  "[\"/bin/true\", 1]}}}}",
                  "invalid \"run_types.x.params.argv[1]\": expected a string");
    ck_load_fails("{\"run_types\": {\"x\": {\"action\": \"exec\", \"params\": {\"argv\": "
                  "[\"/bin/true\"], \"shell\": true}}}}",
                  "unknown key \"run_types.x.params.shell\"");
    ck_load_fails("{\"run_types\": {\"x\": {\"action\": \"exec\", \"params\": {\"argv\": "
                  "[\"/bin/true\"], \"env\": {\"A=B\": \"c\"}}}}}",
                  "invalid \"run_types.x.params.env.A=B\": expected a name and a string");
    ck_load_fails("{\"run_types\": {\"x\": {\"action\": \"exec\", \"params\": {\"argv\": "
                  "[\"/bin/true\"], \"grace_ms\": -1}}}}",
                  "invalid \"run_types.x.params.grace_ms\": must be between 0 and 600000");
}
END_TEST

/* A keep-alive must come before the send timeout closes an idle stream. */
START_TEST(test_heartbeat_under_send_timeout)
{
    struct error err = {0};

    ck_load_ok("{\"sse\": {\"heartbeat_ms\": 30000, \"send_timeout_s\": 30}}");
    ck_assert_int_eq(cfg_validate(&cfg, &err), ST_INVALID);
    ck_assert_str_eq(err.message, "invalid \"sse.heartbeat_ms\": must be less than "
                                  "sse.send_timeout_s (30 s), or idle streams are closed");
    ck_load_ok("{\"sse\": {\"heartbeat_ms\": 29999}}");
    ck_assert_int_eq(cfg_validate(&cfg, &err), ST_OK);
    ck_load_fails("{\"sse\": {\"heartbeat_ms\": 99}}",
                  "invalid \"sse.heartbeat_ms\": must be between 100 and 600000");
}
END_TEST

START_TEST(test_validate_default_route_from_flag)
{
    struct error err = {0};

    ck_assert_int_eq(cfg_set(&cfg, "default_route", "nope", CFG_SRC_FLAG, &err), ST_OK);
    ck_assert_int_eq(cfg_validate(&cfg, &err), ST_INVALID);
    ck_assert_str_eq(err.message, "invalid \"default_route\": unknown run type \"nope\"");
}
END_TEST

/* Repetitions as routes use them load: intervals of bracket expressions,
 * a repeated group of repetitions, alternatives that can be empty,
 * repeated once, up to ten thousand parts. */
START_TEST(test_route_repetitions_load)
{
    ck_load_ok(
        "{\"routes\": [{\"run_type\": \"demo\", \"match\": {"
        "\"a\": \"~[[:alpha:]]{1,255}\", \"b\": \"~([0-9]{1,3}[.]){3}[0-9]{1,3}\", "
        "\"c\": \"~((x{10}){10}){99}\", \"d\": \"~(a+|b*)+c?\", \"e\": \"~([a-z]+-)*[a-z]+\"}}]}");
    ck_assert_uint_eq(cfg.routes[0].nmatches, 5);
}
END_TEST

START_TEST(test_failed_routes_keep_old)
{
    ck_load_ok("{\"routes\": [{\"run_type\": \"demo\", \"match\": {\"a\": \"~b+\"}}]}");
    ck_load_fails("{\"routes\": [{\"run_type\": \"demo\", \"match\": {\"a\": \"~(\"}}]}",
                  "invalid \"routes[0].match.a\": bad regular expression: Unmatched ( or \\(");
    ck_assert_uint_eq(cfg.nroutes, 1);
    ck_assert_str_eq(cfg.routes[0].matches[0].value, "b+");
}
END_TEST

/* ---- schedules and rate limits ---- */

START_TEST(test_schedules_load)
{
    const struct schedule *s;
    const struct rate_limit_cfg *rl;
    json_t *j;

    ck_load_ok(
        "{\"rate_limits\": {\"api\": {\"limit\": 20, \"per_s\": 1}},"
        " \"run_types\": {\"q\": {\"action\": \"simulate\", \"rate_limit\": \"api\"}},"
        " \"schedules\": {\"nightly\": {\"cron\": \"30 2 * * *\", \"time_zone\": "
        "\"Europe/Berlin\", \"run_type\": \"q\", \"data\": {\"x\": 1}, \"tenant\": \"acme\", "
        "\"overlap\": \"cancel_previous\", \"catch_up\": \"all\", \"catch_up_window_s\": 60, "
        "\"jitter_s\": 5, \"paused\": true},"
        " \"tick\": {\"cron\": \"@every 30s\", \"run_type\": \"demo\"}}}");
    ck_assert_int_eq(cfg_validate(&cfg, NULL), ST_OK);
    ck_assert_uint_eq(cfg.nschedules, 2);
    s = cfg_schedule(&cfg, "nightly");
    ck_assert_ptr_nonnull(s);
    ck_assert_str_eq(s->cron_text, "30 2 * * *");
    ck_assert_uint_eq(s->cron.hour, 1u << 2);
    ck_assert_str_eq(tz_name(s->tz), "Europe/Berlin");
    ck_assert_str_eq(cfg_schedule_tenant(&cfg, s), "acme");
    ck_assert_int_eq(s->overlap, OVERLAP_CANCEL_PREVIOUS);
    ck_assert_int_eq(s->catch_up, CATCH_UP_ALL);
    ck_assert_int_eq(s->catch_up_window_s, 60);
    ck_assert_int_eq(s->jitter_s, 5);
    ck_assert(s->paused);
    ck_assert_int_eq(json_integer_value(json_object_get(s->data, "x")), 1);
    s = cfg_schedule(&cfg, "tick");
    ck_assert_int_eq(s->cron.every_s, 30);
    ck_assert_str_eq(tz_name(s->tz), "UTC");
    ck_assert_str_eq(cfg_schedule_tenant(&cfg, s), "default");
    ck_assert_int_eq(s->overlap, OVERLAP_SKIP);
    ck_assert_int_eq(s->catch_up, CATCH_UP_ONE);
    ck_assert_int_eq(s->catch_up_window_s, 3600);
    ck_assert(!s->paused);
    rl = cfg_rate_limit(&cfg, "api");
    ck_assert(rl && rl->limit == 20 && rl->per_s == 1);
    ck_assert_str_eq(cfg_run_type(&cfg, "q")->rate_limit, "api");
    ck_assert_ptr_null(cfg_run_type(&cfg, "demo")->rate_limit);
    ck_assert_int_eq(cfg.queue.schedule_grace_s, 10);
    /* --print-config shows them as the file has them. */
    j = cfg_to_json(&cfg);
    ck_assert_str_eq(json_string_value(json_object_get(
                         json_object_get(json_object_get(j, "schedules"), "nightly"), "overlap")),
                     "cancel_previous");
    ck_assert_int_eq(json_integer_value(json_object_get(
                         json_object_get(json_object_get(j, "rate_limits"), "api"), "limit")),
                     20);
    ck_assert_str_eq(json_string_value(json_object_get(
                         json_object_get(json_object_get(j, "run_types"), "q"), "rate_limit")),
                     "api");
    json_decref(j);
    /* A later source replaces a schedule as a whole, and null removes one. */
    ck_load_ok("{\"schedules\": {\"nightly\": {\"cron\": \"@hourly\", \"run_type\": \"q\"},"
               " \"tick\": null}, \"rate_limits\": {\"api\": {\"limit\": 5, \"per_s\": 60}}}");
    ck_assert_uint_eq(cfg.nschedules, 1);
    s = cfg_schedule(&cfg, "nightly");
    ck_assert(!s->paused && s->overlap == OVERLAP_SKIP);
    ck_assert_str_eq(tz_name(s->tz), "UTC");
    ck_assert_int_eq(cfg_rate_limit(&cfg, "api")->per_s, 60);
}
END_TEST

START_TEST(test_schedule_errors_named)
{
    ck_load_fails("{\"schedules\": {\"a\": {\"cron\": \"61 * * * *\", \"time_zone\": "
                  "\"Mars/Olympus\", \"run_type\": \"demo\"},"
                  " \"b\": {\"cron\": \"0 0 30 2 *\", \"run_type\": \"demo\"}}}",
                  "invalid \"schedules.a.cron\": minute \"61\" is out of range 0-59\n"
                  "invalid \"schedules.a.time_zone\": unknown time zone \"Mars/Olympus\" (no file "
                  "/usr/share/zoneinfo/Mars/Olympus)\n"
                  "invalid \"schedules.b.cron\": \"0 0 30 2 *\" matches no date in ten years");
    ck_load_fails("{\"schedules\": {\"c\": {\"run_type\": \"demo\", \"overlp\": \"skip\", "
                  "\"overlap\": \"never\"}, \"d\": {\"cron\": \"@daily\"}}}",
                  "unknown key \"schedules.c.overlp\"; did you mean \"overlap\"?\n"
                  "invalid \"schedules.c.overlap\": expected one of \"skip\", \"allow\", "
                  "\"cancel_previous\"\n"
                  "missing \"schedules.d.run_type\"");
    ck_load_fails("{\"schedules\": {\"e f\": {}, \"g\": {\"cron\": \"@daily\", \"run_type\": "
                  "\"demo\", \"jitter_s\": -1, \"catch_up\": 1}, \"h\": {\"run_type\": \"demo\"}}}",
                  "invalid \"schedules.e f\": must be 1 to 64 characters of A-Z, a-z, 0-9, \"_\", "
                  "\".\" or \"-\"\n"
                  "invalid \"schedules.g.jitter_s\": must be between 0 and 86400\n"
                  "invalid \"schedules.g.catch_up\": expected one of \"skip\", \"one\", \"all\"\n"
                  "missing \"schedules.h.cron\"");
    ck_load_fails("{\"rate_limits\": {\"r\": {\"limit\": 0}, \"s\": {\"per_s\": 1}, "
                  "\"t\": {\"limit\": 1, \"per_s\": 1, \"burst\": 2}}}",
                  "invalid \"rate_limits.r.limit\": must be between 1 and 1000000\n"
                  "missing \"rate_limits.s.limit\"\n"
                  "unknown key \"rate_limits.t.burst\"");
    ck_assert_uint_eq(cfg.nschedules, 0);
    ck_assert_uint_eq(cfg.nrate_limits, 0);
    /* References, once the rest is valid. */
    ck_load_fails("{\"schedules\": {\"a\": {\"cron\": \"@daily\", \"run_type\": \"dmeo\"}},"
                  " \"run_types\": {\"q\": {\"action\": \"simulate\", \"rate_limit\": \"ap\"}},"
                  " \"rate_limits\": {\"api\": {\"limit\": 1, \"per_s\": 1}}}",
                  "invalid \"schedules.a.run_type\": unknown run type \"dmeo\"; did you mean "
                  "\"demo\"?\n"
                  "invalid \"run_types.q.rate_limit\": unknown rate limit \"ap\"; did you mean "
                  "\"api\"?");
}
END_TEST

/* ---- notifiers, notify and then ---- */

START_TEST(test_notifiers_load)
{
    const struct notifier *n;
    const struct run_type *rt;
    json_t *j, *nj;
    char *text;
    struct config again;
    struct error err = {0};

    setenv("CFG_TEST_SECRET", "very-secret", 1);
    setenv("CFG_TEST_HOST", "hooks.example", 1);
    ck_load_ok("{\"notifiers\": {"
               " \"audit\": {\"kind\": \"webhook\", \"url\": \"https://{{env:CFG_TEST_HOST}}/o\","
               "  \"headers\": {\"X-Team\": \"sre-{{env:CFG_TEST_HOST}}\"},"
               "  \"secret\": \"{{env:CFG_TEST_SECRET}}\", \"max_attempts\": 3},"
               " \"chat\": {\"kind\": \"slack\", \"url\": \"http://127.0.0.1:9/s\","
               "  \"text\": \"{{run:/id}} {{run:/outcome}}\", \"timeout_ms\": 2000},"
               " \"am\": {\"kind\": \"alertmanager\", \"url\": \"http://am:9093\","
               "  \"labels\": {\"severity\": \"page\"}, \"max_in_flight\": 2}},"
               " \"http\": {\"public_url\": \"https://opsrun.example.com\"},"
               " \"queue\": {\"max_chain_depth\": 4},"
               " \"run_types\": {\"fix\": {\"action\": \"simulate\","
               "  \"notify\": [{\"on\": [\"failed\", \"timed_out\"], \"to\": \"chat\"},"
               "   {\"on\": [\"*\", \"started\"], \"to\": \"audit\"}],"
               "  \"then\": [{\"on\": [\"failed\"], \"run_type\": \"demo\","
               "   \"data\": {\"why\": \"{{run:/error/message}}\"}},"
               "   {\"on\": [\"*\"], \"run_type\": \"fix\", \"delay_s\": 60}]}}}");
    ck_assert_int_eq(cfg_validate(&cfg, NULL), ST_OK);
    ck_assert_uint_eq(cfg.nnotifiers, 3);
    n = cfg_notifier(&cfg, "audit");
    ck_assert_int_eq(n->kind, NOTIFIER_WEBHOOK);
    ck_assert_str_eq(n->url, "https://hooks.example/o");
    ck_assert_str_eq(n->secret, "very-secret");
    ck_assert_str_eq(json_string_value(json_object_get(n->header_values, "X-Team")),
                     "sre-hooks.example");
    ck_assert_int_eq(n->max_attempts, 3);
    ck_assert_int_eq(n->max_in_flight, 4);
    ck_assert_int_eq(n->timeout_ms, 10000);
    n = cfg_notifier(&cfg, "chat");
    ck_assert_int_eq(n->kind, NOTIFIER_SLACK);
    ck_assert_str_eq(n->text, "{{run:/id}} {{run:/outcome}}");
    ck_assert_int_eq(n->timeout_ms, 2000);
    n = cfg_notifier(&cfg, "am");
    ck_assert_int_eq(n->kind, NOTIFIER_ALERTMANAGER);
    ck_assert_int_eq(n->max_in_flight, 2);
    ck_assert_ptr_null(cfg_notifier(&cfg, "nope"));
    ck_assert_str_eq(cfg.http.public_url, "https://opsrun.example.com");
    ck_assert_int_eq(cfg.queue.max_chain_depth, 4);
    rt = cfg_run_type(&cfg, "fix");
    ck_assert(cfg_run_type_reacts(rt));
    ck_assert(!cfg_run_type_reacts(cfg_run_type(&cfg, "demo")));
    ck_assert_uint_eq(json_array_size(rt->notify), 2);
    ck_assert_uint_eq(json_array_size(rt->then), 2);
    /* --print-config shows the templates, never what they expand to. */
    j = cfg_to_json(&cfg);
    nj = json_object_get(json_object_get(j, "notifiers"), "audit");
    ck_assert_str_eq(json_string_value(json_object_get(nj, "secret")), "{{env:CFG_TEST_SECRET}}");
    ck_assert_str_eq(json_string_value(json_object_get(nj, "url")),
                     "https://{{env:CFG_TEST_HOST}}/o");
    text = json_dumps(j, 0);
    ck_assert_ptr_null(strstr(text, "very-secret"));
    ck_assert_uint_eq(json_array_size(json_object_get(
                          json_object_get(json_object_get(j, "run_types"), "fix"), "then")),
                      2);
    /* ... and loads back as the same configuration. */
    json_object_del(j, "sources");
    json_object_del(j, "config_path");
    free(text);
    text = json_dumps(j, 0);
    cfg_init(&again, &action_registry);
    ck_assert_msg(cfg_load_json(&again, text, &err) == ST_OK, "%s", err.message);
    nj = cfg_to_json(&again);
    json_object_del(nj, "sources");
    json_object_del(nj, "config_path");
    ck_assert(json_equal(j, nj));
    json_decref(nj);
    cfg_cleanup(&again);
    free(text);
    json_decref(j);
    /* null removes a notifier. */
    ck_load_ok("{\"notifiers\": {\"am\": null}}");
    ck_assert_uint_eq(cfg.nnotifiers, 2);
}
END_TEST

START_TEST(test_notifier_errors_named)
{
    unsetenv("CFG_TEST_UNSET");
    ck_load_fails("{\"notifiers\": {\"a\": {\"kind\": \"webhok\", \"url\": \"ftp://x\"},"
                  " \"b\": {\"kind\": \"slack\", \"url\": \"http://x/{{run:/id}}\", \"txt\": 1},"
                  " \"c\": {\"kind\": \"webhook\", \"url\": \"http://x\","
                  "  \"secret\": \"{{env:CFG_TEST_UNSET}}\"}}}",
                  "invalid \"notifiers.a.kind\": expected one of \"webhook\", \"slack\", "
                  "\"alertmanager\"\n"
                  "invalid \"notifiers.a.url\": expected an http:// or https:// URL\n"
                  "invalid \"notifiers.b.url\": only {{env:NAME}} placeholders are allowed here\n"
                  "unknown key \"notifiers.b.txt\"; did you mean \"text\"?\n"
                  "invalid \"notifiers.c.secret\": environment variable CFG_TEST_UNSET is not set");
    ck_load_fails("{\"notifiers\": {\"d\": {\"kind\": \"webhook\", \"url\": \"http://x\","
                  "  \"secret\": \"abc\", \"headers\": {\"Opsrun-Event\": \"x\"}},"
                  " \"e\": {\"url\": \"http://x\"}, \"f\": {\"kind\": \"slack\"},"
                  " \"g\": {\"kind\": \"slack\", \"url\": \"http://x\", \"secret\": "
                  "\"{{env:HOME}}\", \"labels\": {}}}}",
                  "invalid \"notifiers.d.secret\": expected \"{{env:NAME}}\" (a secret is read "
                  "from the environment, never written in the file)\n"
                  "invalid \"notifiers.d.headers.Opsrun-Event\": not a header name opsrun leaves "
                  "to the configuration\n"
                  "missing \"notifiers.e.kind\"\n"
                  "missing \"notifiers.f.url\"\n"
                  "invalid \"notifiers.g.secret\": only a webhook signs its body\n"
                  "invalid \"notifiers.g.labels\": only an alertmanager notifier takes labels");
    ck_load_fails("{\"notifiers\": {\"h\": {\"kind\": \"slack\", \"url\": \"http://x\", "
                  "\"text\": \"{{input:/x}}\"}, \"i\": {\"kind\": \"alertmanager\", "
                  "\"url\": \"http://x\", \"labels\": {\"alertname\": \"x\"}}},"
                  " \"http\": {\"public_url\": \"opsrun.example.com\"}}",
                  "invalid \"notifiers.h.text\": \"{{input:/x}}\" is not a placeholder "
                  "{{run:/json/pointer}}\n"
                  "invalid \"notifiers.i.labels.alertname\": not a label name opsrun leaves to "
                  "the configuration\n"
                  "invalid \"http.public_url\": expected an http:// or https:// URL");
    ck_assert_uint_eq(cfg.nnotifiers, 0);
}
END_TEST

START_TEST(test_rules_errors_named)
{
    ck_load_fails("{\"run_types\": {\"a\": {\"action\": \"simulate\", "
                  "\"notify\": [{\"on\": [\"failled\"], \"to\": \"x\"}]},"
                  " \"b\": {\"action\": \"simulate\", \"notify\": [{\"on\": [], \"to\": \"x\"}]},"
                  " \"c\": {\"action\": \"simulate\", \"then\": [{\"on\": [\"started\"], "
                  "\"run_type\": \"demo\"}]}}}",
                  "invalid \"run_types.a.notify[0].on[0]\": expected \"started\", \"retrying\", "
                  "\"approval_requested\", an outcome or \"*\"\n"
                  "invalid \"run_types.b.notify[0].on\": expected a non-empty array\n"
                  "invalid \"run_types.c.then[0].on[0]\": expected an outcome or \"*\"");
    ck_load_fails("{\"run_types\": {\"d\": {\"action\": \"simulate\", \"then\": [{\"on\": "
                  "[\"failed\"], \"run_type\": \"demo\", \"delay_s\": -1}]},"
                  " \"e\": {\"action\": \"simulate\", \"then\": [{\"on\": [\"failed\"], "
                  "\"run_type\": \"demo\", \"data\": {\"x\": [\"{{run:oops}}\"]}}]},"
                  " \"f\": {\"action\": \"simulate\", \"then\": [{\"on\": [\"failed\"]}], "
                  "\"notify\": [{\"on\": [\"failed\"], \"to\": \"x\", \"when\": 1}]}}}",
                  "invalid \"run_types.d.then[0].delay_s\": must be between 0 and 2592000\n"
                  "invalid \"run_types.e.then[0].data\": \"{{run:oops}}\" is not a placeholder "
                  "{{run:/json/pointer}}\n"
                  "missing \"run_types.f.then[0].run_type\"\n"
                  "unknown key \"run_types.f.notify[0].when\"");
    /* References, once the rest is valid. */
    ck_load_fails("{\"notifiers\": {\"chat\": {\"kind\": \"slack\", \"url\": \"http://x\"}},"
                  " \"run_types\": {\"a\": {\"action\": \"simulate\", "
                  "\"notify\": [{\"on\": [\"failed\"], \"to\": \"chta\"}],"
                  " \"then\": [{\"on\": [\"failed\"], \"run_type\": \"dmeo\"}]}}}",
                  "invalid \"run_types.a.notify[0].to\": unknown notifier \"chta\"; did you mean "
                  "\"chat\"?\n"
                  "invalid \"run_types.a.then[0].run_type\": unknown run type \"dmeo\"; did you "
                  "mean \"demo\"?");
}
END_TEST

/* ---- every error at once ---- */

/* A file with several mistakes names each, one line each, in the file's
 * order; nothing of a definition with an error is applied. */
START_TEST(test_every_error_named)
{
    ck_load_fails("{\"queue\": {\"wokers\": 4, \"max_running\": 0}, \"lisen\": \"x\", "
                  "\"http\": {\"threads\": 1}}",
                  "unknown key \"queue.wokers\"; did you mean \"queue.workers\"?\n"
                  "invalid \"queue.max_running\": must be between 1 and 100000\n"
                  "unknown key \"lisen\"; did you mean \"listen\"?\n"
                  "invalid \"http.threads\": must be between 2 and 64");
    ck_load_fails("{\"qeue\": {}, \"run_type\": {}, \"threads\": 4}",
                  "unknown key \"qeue\"; did you mean \"queue\"?\n"
                  "unknown key \"run_type\"; did you mean \"run_types\"?\n"
                  "unknown key \"threads\"; did you mean \"http.threads\"?");
}
END_TEST

/* A run type's keys and its poll's, each named; a route that names the
 * type that failed gets no error of its own, one naming an unknown type
 * gets the nearest. */
START_TEST(test_every_run_type_error_named)
{
    ck_load_fails("{\"run_types\": {\"etl\": {\"action\": \"simulate\", \"timeout\": 5, "
                  "\"max_attempts\": 0, \"poll\": {\"max_check\": 1, \"multiplier\": 0}}, "
                  "\"ok\": {\"action\": \"simulate\"}}, "
                  "\"routes\": [{\"run_type\": \"etl\"}, {\"run_type\": \"dmeo\", "
                  "\"on_resolve\": \"cancel\"}]}",
                  "unknown key \"run_types.etl.timeout\"; did you mean \"timeout_s\"?\n"
                  "invalid \"run_types.etl.max_attempts\": must be between 1 and 100\n"
                  "unknown key \"run_types.etl.poll.max_check\"; did you mean \"max_checks\"?\n"
                  "invalid \"run_types.etl.poll.multiplier\": must be between 1 and 10\n"
                  "unknown key \"routes[1].on_resolve\"; did you mean \"on_resolved\"?\n"
                  "invalid \"routes[1].run_type\": unknown run type \"dmeo\"; did you mean "
                  "\"demo\"?");
    ck_assert_ptr_null(cfg_run_type(&cfg, "etl"));
    ck_assert_ptr_nonnull(cfg_run_type(&cfg, "ok"));
    ck_assert_uint_eq(cfg.nroutes, 0);
}
END_TEST

/* As many errors as the message holds, then how many more there were. */
START_TEST(test_errors_past_the_message)
{
    char text[2048];
    size_t len = 0;
    struct error e = {0};

    len += (size_t)snprintf(text + len, sizeof(text) - len, "{\"queue\": {");
    for (int i = 0; i < 20; i++)
        len += (size_t)snprintf(text + len, sizeof(text) - len, "%s\"unknown_%02d\": 1",
                                i ? ", " : "", i);
    snprintf(text + len, sizeof(text) - len, "}}");
    ck_assert_int_eq(cfg_load_json(&cfg, text, &e), ST_INVALID);
    ck_assert_msg(strncmp(e.message,
                          "unknown key \"queue.unknown_00\"\nunknown key "
                          "\"queue.unknown_01\"\n",
                          62) == 0,
                  "%s", e.message);
    ck_assert_msg(
        strstr(e.message, "\nunknown key \"queue.unknown_14\"\n5 more errors not shown") &&
            e.message[strlen(e.message) - 1] == 'n',
        "%s", e.message);
}
END_TEST

START_TEST(test_every_env_error_named)
{
    static const char *const env[] = {
        "OPSRUN_WORKERS", "0", "OPSRUN_LOG_LEVEL", "loud", "OPSRUN_LISTEN", "127.0.0.1:2", NULL};
    struct error err = {0};

    fake_env = env;
    ck_assert_int_eq(cfg_load_env(&cfg, fake_getenv, &err), ST_INVALID);
    ck_assert_str_eq(
        err.message,
        "invalid OPSRUN_LOG_LEVEL: expected \"debug\", \"info\", \"warn\" or \"error\"\n"
        "invalid OPSRUN_WORKERS: must be between 1 and 1024");
    ck_assert_str_eq(cfg.listen, "127.0.0.1:2");
}
END_TEST

START_TEST(test_every_validation_error_named)
{
    struct error err = {0};

    ck_load_ok("{\"queue\": {\"orphan_after_s\": 5}, \"sse\": {\"send_timeout_s\": 1}}");
    ck_assert_int_eq(cfg_set(&cfg, "default_route", "dem", CFG_SRC_FLAG, &err), ST_OK);
    ck_assert_int_eq(cfg_validate(&cfg, &err), ST_INVALID);
    ck_assert_str_eq(err.message,
                     "invalid \"queue.orphan_after_s\": must be greater than "
                     "queue.heartbeat_interval_s (5)\n"
                     "invalid \"sse.heartbeat_ms\": must be less than sse.send_timeout_s (1 s), "
                     "or idle streams are closed\n"
                     "invalid \"default_route\": unknown run type \"dem\"; did you mean \"demo\"?");
}
END_TEST

/* ---- the environment and flags ---- */

START_TEST(test_env_applies)
{
    static const char *const env[] = {"OPSRUN_LISTEN",    "0.0.0.0:9000",   "OPSRUN_DATABASE_URL",
                                      "host=db",          "OPSRUN_WORKERS", "3",
                                      "OPSRUN_LOG_LEVEL", "warn",           NULL};
    struct error err = {0};

    ck_load_ok("{\"queue\": {\"workers\": 5}, \"listen\": \"127.0.0.1:1\"}");
    fake_env = env;
    ck_assert_int_eq(cfg_load_env(&cfg, fake_getenv, &err), ST_OK);
    ck_assert_str_eq(cfg.listen, "0.0.0.0:9000");
    ck_assert_str_eq(cfg.database_url, "host=db");
    ck_assert_int_eq(cfg.queue.workers, 3);
    ck_assert_int_eq(cfg.log_level, LOG_WARN);
    ck_assert_str_eq(source_of("listen"), "env");
    ck_assert_str_eq(source_of("queue.workers"), "env");
    ck_assert_str_eq(source_of("log.level"), "env");
    ck_assert_str_eq(source_of("http.threads"), "default");
}
END_TEST

START_TEST(test_env_empty_is_unset)
{
    static const char *const env[] = {"OPSRUN_WORKERS", "", "OPSRUN_LISTEN", "", NULL};
    struct error err = {0};

    fake_env = env;
    ck_assert_int_eq(cfg_load_env(&cfg, fake_getenv, &err), ST_OK);
    ck_assert_int_eq(cfg.queue.workers, 8);
    ck_assert_str_eq(cfg.listen, "127.0.0.1:8080");
    ck_assert_str_eq(source_of("queue.workers"), "default");
}
END_TEST

static const struct {
    const char *var, *value, *message;
} bad_env[] = {
    {"OPSRUN_WORKERS", "0", "invalid OPSRUN_WORKERS: must be between 1 and 1024"},
    {"OPSRUN_WORKERS", "2000", "invalid OPSRUN_WORKERS: must be between 1 and 1024"},
    {"OPSRUN_WORKERS", "99999999999999999999",
     "invalid OPSRUN_WORKERS: must be between 1 and 1024"},
    {"OPSRUN_WORKERS", "eight", "invalid OPSRUN_WORKERS: expected an integer"},
    {"OPSRUN_WORKERS", "8 ", "invalid OPSRUN_WORKERS: expected an integer"},
    {"OPSRUN_WORKERS", " 8", "invalid OPSRUN_WORKERS: expected an integer"},
    {"OPSRUN_WORKERS", "-", "invalid OPSRUN_WORKERS: expected an integer"},
    {"OPSRUN_LISTEN", "nohost", "invalid OPSRUN_LISTEN: expected HOST:PORT, got \"nohost\""},
    {"OPSRUN_LISTEN", "127.0.0.1:99999", "invalid OPSRUN_LISTEN: port must be between 1 and 65535"},
    {"OPSRUN_LOG_LEVEL", "trace",
     "invalid OPSRUN_LOG_LEVEL: expected \"debug\", \"info\", \"warn\" or \"error\""},
};

START_TEST(test_bad_env)
{
    const char *env[] = {bad_env[_i].var, bad_env[_i].value, NULL};
    struct error err = {0};

    fake_env = env;
    ck_assert_int_eq(cfg_load_env(&cfg, fake_getenv, &err), ST_INVALID);
    ck_assert_str_eq(err.message, bad_env[_i].message);
}
END_TEST

/* log.format, when set from anywhere, wins over the older log.json. */
START_TEST(test_log_format)
{
    static const char *const env[] = {"OPSRUN_LOG_FORMAT", "json", NULL};
    struct error err = {0};

    ck_assert(!cfg_log_json(&cfg));
    ck_load_ok("{\"log\": {\"json\": true}}");
    ck_assert(cfg_log_json(&cfg));
    ck_assert_int_eq(cfg_set(&cfg, "log-format", "text", CFG_SRC_FLAG, &err), ST_OK);
    ck_assert(!cfg_log_json(&cfg));
    ck_assert_str_eq(source_of("log.format"), "flag");
    ck_assert_int_eq(cfg_set(&cfg, "log.format", NULL, CFG_SRC_FLAG, &err), ST_OK);
    ck_assert(cfg_log_json(&cfg));
    ck_load_ok("{\"log\": {\"json\": false, \"format\": \"text\"}}");
    fake_env = env;
    ck_assert_int_eq(cfg_load_env(&cfg, fake_getenv, &err), ST_OK);
    ck_assert_str_eq(cfg.log_format, "json");
    ck_assert_str_eq(source_of("log.format"), "env");
    ck_assert(cfg_log_json(&cfg));
}
END_TEST

START_TEST(test_flags)
{
    struct error err = {0};

    ck_assert_int_eq(cfg_set(&cfg, "workers", "3", CFG_SRC_FLAG, &err), ST_OK);
    ck_assert_int_eq(cfg.queue.workers, 3);
    ck_assert_str_eq(source_of("queue.workers"), "flag");
    ck_assert_int_eq(cfg_set(&cfg, "database-url", "host=a", CFG_SRC_FLAG, &err), ST_OK);
    ck_assert_str_eq(cfg.database_url, "host=a");
    ck_assert_int_eq(cfg_set(&cfg, "database_url", NULL, CFG_SRC_FLAG, &err), ST_OK);
    ck_assert_ptr_null(cfg.database_url);
    ck_assert_int_eq(cfg_set(&cfg, "log.json", "yes", CFG_SRC_FLAG, &err), ST_OK);
    ck_assert(cfg.log_json);
    ck_assert_int_eq(cfg_set(&cfg, "queue.listen", "off", CFG_SRC_FLAG, &err), ST_OK);
    ck_assert(!cfg.queue.listen);
    ck_assert_int_eq(cfg_set(&cfg, "http.max_body_bytes", "4096", CFG_SRC_FLAG, &err), ST_OK);
    ck_assert_int_eq(cfg.http.max_body_bytes, 4096);
    ck_assert_int_eq(cfg_set(&cfg, "db.pool_size", "0", CFG_SRC_FLAG, &err), ST_OK);
}
END_TEST

static const struct {
    const char *key, *value, *message;
} bad_flags[] = {
    {"workers", "0", "invalid --workers: must be between 1 and 1024"},
    {"queue.workers", "x", "invalid --workers: expected an integer"},
    {"listen", "x", "invalid --listen: expected HOST:PORT, got \"x\""},
    {"listen", NULL, "invalid --listen: expected a value"},
    {"queue.max_running", "0", "invalid \"queue.max_running\": must be between 1 and 100000"},
    {"log.json", "maybe", "invalid \"log.json\": expected true or false"},
    {"log.level", "loud",
     "invalid --log-level: expected \"debug\", \"info\", \"warn\" or \"error\""},
    {"log-level", "loud",
     "invalid --log-level: expected \"debug\", \"info\", \"warn\" or \"error\""},
    {"log.level", NULL, "invalid --log-level: expected a value"},
    {"log-format", "yaml", "invalid --log-format: expected \"json\" or \"text\", got \"yaml\""},
    {"nope", "1", "unknown key \"nope\""},
    {"queue", "1", "unknown key \"queue\""},
    {"config", "/x.json", "invalid \"config_path\": set by loading the file"},
};

START_TEST(test_bad_flag)
{
    struct error err = {0};

    ck_assert_int_eq(cfg_set(&cfg, bad_flags[_i].key, bad_flags[_i].value, CFG_SRC_FLAG, &err),
                     ST_INVALID);
    ck_assert_str_eq(err.message, bad_flags[_i].message);
}
END_TEST

/* ---- the file on disk ---- */

static char *write_temp(const char *text)
{
    char *path = strdup("/tmp/test_cfg_XXXXXX");
    int fd = mkstemp(path);

    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path;
}

START_TEST(test_load_file)
{
    static const char *env[] = {"OPSRUN_CONFIG", NULL, NULL};
    char *path = write_temp("{\"queue\": {\"workers\": 2}}");
    struct error err = {0};

    ck_assert_int_eq(cfg_load_file(&cfg, path, &err), ST_OK);
    ck_assert_int_eq(cfg.queue.workers, 2);
    ck_assert_str_eq(cfg.config_path, path);
    ck_assert_str_eq(source_of("config_path"), "flag");
    env[1] = "/elsewhere.json";
    fake_env = env;
    ck_assert_int_eq(cfg_load_env(&cfg, fake_getenv, &err), ST_OK);
    ck_assert_str_eq(source_of("config_path"), "flag");
    env[1] = path;
    fake_env = env;
    ck_assert_int_eq(cfg_load_env(&cfg, fake_getenv, &err), ST_OK);
    ck_assert_str_eq(source_of("config_path"), "env");
    cfg_mark_source(&cfg, "config", CFG_SRC_FLAG);
    ck_assert_str_eq(source_of("config_path"), "flag");
    cfg_mark_source(&cfg, "queue.workers", CFG_SRC_ENV);
    ck_assert_str_eq(source_of("queue.workers"), "env");
    unlink(path);
    free(path);
}
END_TEST

START_TEST(test_load_file_errors)
{
    char *path = write_temp("{\"queue\": {\"workers\": }");
    char want[512];
    struct error err = {0};

    ck_assert_int_eq(cfg_load_file(&cfg, "/nonexistent/opsrun.json", &err), ST_INVALID);
    ck_assert_str_eq(err.message, "could not open config file \"/nonexistent/opsrun.json\": No "
                                  "such file or directory");
    ck_assert_int_eq(cfg_load_file(&cfg, path, &err), ST_INVALID);
    snprintf(want, sizeof(want),
             "could not parse config file \"%s\": unexpected token near '}' (line 1, column 23)",
             path);
    ck_assert_str_eq(err.message, want);
    ck_assert_ptr_null(cfg.config_path);
    unlink(path);
    free(path);
}
END_TEST

/* A document padded with spaces to exactly size bytes (heap). */
static char *padded(const char *doc, size_t size)
{
    char *text = malloc(size + 1);

    ck_assert_ptr_nonnull(text);
    memset(text, ' ', size);
    memcpy(text, doc, strlen(doc));
    text[size] = '\0';
    return text;
}

/* The file may be 4 MiB; one byte more is refused whole, naming the limit. */
START_TEST(test_load_file_too_large)
{
    const size_t max = (size_t)4 << 20;
    char *text = padded("{\"queue\": {\"workers\": 2}}", max + 1), *path = write_temp(text);
    char want[512];
    struct error err = {0};

    ck_assert_int_eq(cfg_load_file(&cfg, path, &err), ST_INVALID);
    snprintf(want, sizeof(want), "could not read config file \"%s\": larger than 4 MiB", path);
    ck_assert_str_eq(err.message, want);
    ck_assert_int_eq(cfg.queue.workers, 8);
    ck_assert_ptr_null(cfg.config_path);
    unlink(path);
    free(path);
    free(text);

    text = padded("{\"queue\": {\"workers\": 3}}", max);
    path = write_temp(text);
    ck_assert_int_eq(cfg_load_file(&cfg, path, &err), ST_OK);
    ck_assert_int_eq(cfg.queue.workers, 3);
    unlink(path);
    free(path);
    free(text);
}
END_TEST

/* ---- routing ---- */

static const char routing_file[] =
    "{\"run_types\": {\"latency\": {\"action\": \"simulate\"},"
    "                 \"disk\": {\"action\": \"simulate\"},"
    "                 \"fallback\": {\"action\": \"simulate\"}},"
    " \"routes\": ["
    "   {\"match\": {\"alertname\": \"~High.*\", \"severity\": \"critical\"},"
    "    \"run_type\": \"latency\", \"on_resolved\": \"cancel\"},"
    "   {\"match\": {\"alertname\": \"~High.*\"}, \"run_type\": \"disk\"},"
    "   {\"match\": {\"alert_type\": \"disk_full\"}, \"run_type\": \"disk\"}"
    " ]}";

static const char *route_name(const char *alert_type, const char *labels_json,
                              const struct route **route_out)
{
    json_t *labels = labels_json ? json_loads(labels_json, 0, NULL) : NULL;
    const struct run_type *rt = cfg_route(&cfg, alert_type, labels, route_out);

    json_decref(labels);
    return rt ? rt->name : "(none)";
}

START_TEST(test_route_first_match_wins)
{
    const struct route *r = NULL;

    ck_load_ok(routing_file);
    ck_assert_str_eq(
        route_name(NULL, "{\"alertname\": \"HighLatency\", \"severity\": \"critical\"}", &r),
        "latency");
    ck_assert_ptr_eq(r, &cfg.routes[0]);
    ck_assert(r->on_resolved_cancel);
    ck_assert_str_eq(
        route_name(NULL, "{\"alertname\": \"HighLatency\", \"severity\": \"warning\"}", &r),
        "disk");
    ck_assert_ptr_eq(r, &cfg.routes[1]);
    ck_assert(!r->on_resolved_cancel);
    /* A route beats an alert_type naming another type. */
    ck_assert_str_eq(route_name("fallback", "{\"alertname\": \"HighCPU\"}", NULL), "disk");
    ck_assert_str_eq(route_name("disk_full", NULL, &r), "disk");
    ck_assert_ptr_eq(r, &cfg.routes[2]);
}
END_TEST

START_TEST(test_route_regex_anchored)
{
    ck_load_ok("{\"routes\": [{\"match\": {\"alertname\": \"~High.*\"}, \"run_type\": \"demo\"},"
               "             {\"match\": {\"alertname\": \"~igh\"}, \"run_type\": \"demo\"}]}");
    ck_assert_str_eq(route_name(NULL, "{\"alertname\": \"HighLatency\"}", NULL), "demo");
    ck_assert_str_eq(route_name(NULL, "{\"alertname\": \"High\"}", NULL), "demo");
    ck_assert_str_eq(route_name(NULL, "{\"alertname\": \"XHighLatency\"}", NULL), "(none)");
    ck_assert_str_eq(route_name(NULL, "{\"alertname\": \"igh\"}", NULL), "demo");
    ck_load_ok("{\"routes\": [{\"match\": {\"alertname\": \"~igh\"}, \"run_type\": \"demo\"}]}");
    ck_assert_str_eq(route_name(NULL, "{\"alertname\": \"High\"}", NULL), "(none)");
    ck_assert_str_eq(route_name(NULL, "{\"alertname\": \"highs\"}", NULL), "(none)");
}
END_TEST

START_TEST(test_route_exact_is_not_regex)
{
    ck_load_ok("{\"routes\": [{\"match\": {\"alertname\": \"High.*\"}, \"run_type\": \"demo\"}]}");
    ck_assert_str_eq(route_name(NULL, "{\"alertname\": \"HighLatency\"}", NULL), "(none)");
    ck_assert_str_eq(route_name(NULL, "{\"alertname\": \"High.*\"}", NULL), "demo");
}
END_TEST

START_TEST(test_route_alert_type_fallback)
{
    const struct route *r = (const struct route *)&cfg;

    ck_load_ok(routing_file);
    ck_assert_str_eq(route_name("fallback", "{\"alertname\": \"DiskFull\"}", &r), "fallback");
    ck_assert_ptr_null(r);
    ck_assert_str_eq(route_name("demo", NULL, NULL), "demo");
}
END_TEST

START_TEST(test_route_missing_labels)
{
    ck_load_ok(routing_file);
    /* labels NULL, a missing label, or a non-string value: that key does not match. */
    ck_assert_str_eq(route_name(NULL, NULL, NULL), "(none)");
    ck_assert_str_eq(route_name(NULL, "{\"severity\": \"critical\"}", NULL), "(none)");
    ck_assert_str_eq(route_name(NULL, "{\"alertname\": 5}", NULL), "(none)");
    ck_assert_str_eq(route_name(NULL, "[\"HighLatency\"]", NULL), "(none)");
}
END_TEST

START_TEST(test_route_default_and_none)
{
    const struct route *r = (const struct route *)&cfg;

    ck_load_ok(routing_file);
    ck_assert_str_eq(route_name("unknown", "{\"alertname\": \"DiskFull\"}", &r), "(none)");
    ck_assert_ptr_null(r);
    ck_load_ok("{\"default_route\": \"fallback\"}");
    ck_assert_str_eq(route_name("unknown", "{\"alertname\": \"DiskFull\"}", &r), "fallback");
    ck_assert_ptr_null(r);
    ck_assert_str_eq(route_name(NULL, NULL, NULL), "fallback");
    /* The alert_type naming a type still comes before the default route. */
    ck_assert_str_eq(route_name("demo", NULL, NULL), "demo");
}
END_TEST

START_TEST(test_route_empty_match_matches_all)
{
    ck_load_ok("{\"run_types\": {\"x\": {\"action\": \"simulate\"}},"
               " \"routes\": [{\"match\": {}, \"run_type\": \"x\"}]}");
    ck_assert_str_eq(route_name("demo", NULL, NULL), "x");
    ck_assert_str_eq(route_name(NULL, NULL, NULL), "x");
    ck_load_ok("{\"routes\": [{\"run_type\": \"x\"}]}");
    ck_assert_str_eq(route_name("demo", "{}", NULL), "x");
}
END_TEST

/* ---- --print-config ---- */

static const struct {
    const char *url, *masked;
} masks[] = {
    {"postgresql://app:s3cret@db.example:5432/opsrun?sslmode=require",
     "postgresql://app:****@db.example:5432/opsrun?sslmode=require"},
    {"postgres://app:p%40ss@db/x?password=other&sslpassword=k&application_name=o",
     "postgres://app:****@db/x?password=****&sslpassword=****&application_name=o"},
    {"postgresql://app@db/x", "postgresql://app@db/x"},
    {"postgresql://db/x?user=a", "postgresql://db/x?user=a"},
    {"postgresql:///x?host=/run/pg", "postgresql:///x?host=/run/pg"},
    {"host=db user=app password=s3cret dbname=opsrun",
     "host=db user=app password=**** dbname=opsrun"},
    {"host=db password='a b\\' c' dbname=x", "host=db password=**** dbname=x"},
    {"password = pw host=h", "password = **** host=h"},
    {"dbname=x", "dbname=x"},
    {"", ""},
};

START_TEST(test_to_json_masks_password)
{
    struct error err = {0};
    json_t *j;

    ck_assert_int_eq(cfg_set(&cfg, "database_url", masks[_i].url, CFG_SRC_ENV, &err), ST_OK);
    j = cfg_to_json(&cfg);
    ck_assert_ptr_nonnull(j);
    ck_assert_str_eq(json_string_value(json_object_get(j, "database_url")), masks[_i].masked);
    ck_assert_str_eq(
        json_string_value(json_object_get(json_object_get(j, "sources"), "database_url")), "env");
    json_decref(j);
    /* The configuration itself keeps the secret. */
    ck_assert_str_eq(cfg.database_url, masks[_i].url);
}
END_TEST

START_TEST(test_to_json_shape)
{
    json_t *j, *rt, *route;
    struct error err = {0};

    ck_load_ok(full_file);
    ck_assert_int_eq(cfg_set(&cfg, "workers", "12", CFG_SRC_FLAG, &err), ST_OK);
    j = cfg_to_json(&cfg);
    ck_assert_ptr_nonnull(j);
    ck_assert_str_eq(json_string_value(json_object_get(j, "listen")), "0.0.0.0:9090");
    ck_assert_str_eq(json_string_value(json_object_get(j, "database_url")),
                     "postgresql://u:****@db/opsrun");
    ck_assert(json_is_null(json_object_get(j, "config_path")));
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "log"), "level")),
                     "debug");
    ck_assert(json_is_true(json_object_get(json_object_get(j, "log"), "json")));
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(j, "queue"), "workers")),
                     12);
    ck_assert(json_is_false(json_object_get(json_object_get(j, "queue"), "listen")));
    ck_assert_int_eq(
        json_integer_value(json_object_get(json_object_get(j, "http"), "max_body_bytes")), 2048);
    ck_assert_str_eq(json_string_value(json_object_get(j, "default_route")), "quiet.v2");

    rt = json_object_get(json_object_get(j, "run_types"), "restart");
    ck_assert_str_eq(json_string_value(json_object_get(rt, "action")), "simulate");
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(rt, "params"), "fail")),
                     "first:1");
    ck_assert_int_eq(json_integer_value(json_object_get(rt, "max_running")), 2);
    rt = json_object_get(json_object_get(j, "run_types"), "demo");
    ck_assert(json_is_null(json_object_get(rt, "max_running")));
    ck_assert_int_eq(json_integer_value(json_object_get(rt, "retry_backoff_max_ms")), 60000);

    route = json_array_get(json_object_get(j, "routes"), 0);
    ck_assert_str_eq(
        json_string_value(json_object_get(json_object_get(route, "match"), "severity")),
        "~crit|page");
    ck_assert_str_eq(json_string_value(json_object_get(route, "on_resolved")), "cancel");

    ck_assert_str_eq(
        json_string_value(json_object_get(json_object_get(j, "sources"), "queue.workers")), "flag");
    ck_assert_str_eq(
        json_string_value(json_object_get(json_object_get(j, "sources"), "http.threads")), "file");
    ck_assert_str_eq(
        json_string_value(json_object_get(json_object_get(j, "sources"), "queue.claim_batch")),
        "file");
    json_decref(j);
}
END_TEST

/* What --print-config shows, minus the bookkeeping, loads back to the same. */
START_TEST(test_to_json_round_trip)
{
    struct config again;
    json_t *a, *b;
    char *text;
    struct error err = {0};

    ck_load_ok(full_file);
    a = cfg_to_json(&cfg);
    ck_assert_ptr_nonnull(a);
    json_object_del(a, "sources");
    json_object_del(a, "config_path");
    text = json_dumps(a, 0);
    cfg_init(&again, &action_registry);
    ck_assert_msg(cfg_load_json(&again, text, &err) == ST_OK, "%s", err.message);
    b = cfg_to_json(&again);
    json_object_del(b, "sources");
    json_object_del(b, "config_path");
    ck_assert(json_equal(a, b));
    json_decref(a);
    json_decref(b);
    free(text);
    cfg_cleanup(&again);
}
END_TEST

/* The per-client limits: their defaults, 0 switching each off, and bounds. */
START_TEST(test_limits_keys)
{
    ck_assert_int_eq(cfg.http.max_connections_per_ip, 256);
    ck_assert_int_eq(cfg.http.request_deadline_s, 30);
    ck_assert_int_eq(cfg.limits.streams_per_tenant, 1000);
    ck_assert_int_eq(cfg.limits.submit_rate_per_s, 20);
    ck_assert_int_eq(cfg.limits.submit_burst, 200);
    ck_load_ok("{\"http\": {\"max_connections_per_ip\": 0, \"request_deadline_s\": 5},"
               " \"limits\": {\"streams_per_tenant\": 0, \"submit_rate_per_s\": 0,"
               " \"submit_burst\": 1}}");
    ck_assert_int_eq(cfg.http.max_connections_per_ip, 0);
    ck_assert_int_eq(cfg.http.request_deadline_s, 5);
    ck_assert_int_eq(cfg.limits.streams_per_tenant, 0);
    ck_assert_int_eq(cfg.limits.submit_rate_per_s, 0);
    ck_assert_int_eq(cfg.limits.submit_burst, 1);
    ck_load_fails("{\"http\": {\"request_deadline_s\": 0}}",
                  "invalid \"http.request_deadline_s\": must be between 1 and 3600");
    ck_load_fails("{\"limits\": {\"submit_rate_per_s\": -1}}",
                  "invalid \"limits.submit_rate_per_s\": must be 0 or between 1 and 1000000");
    ck_load_fails("{\"limits\": {\"submit_burst\": 0}}",
                  "invalid \"limits.submit_burst\": must be between 1 and 1000000");
    ck_load_fails("{\"limits\": {\"per_ip\": 1}}", "unknown key \"limits.per_ip\"");
}
END_TEST

/* ---- http.cors_origins ---- */

START_TEST(test_cors_default_same_origin_only)
{
    ck_assert_uint_eq(cfg.http.ncors_origins, 0);
    ck_assert(!cfg_cors_allowed(&cfg, "http://127.0.0.1:8080"));
    ck_assert(!cfg_cors_allowed(&cfg, NULL));
}
END_TEST

START_TEST(test_cors_exact_origins)
{
    ck_load_ok("{\"http\": {\"cors_origins\": [\"https://ops.example.com\", "
               "\"http://127.0.0.1:3000\", \"http://[::1]:3000\"]}}");
    ck_assert_uint_eq(cfg.http.ncors_origins, 3);
    ck_assert(cfg_cors_allowed(&cfg, "https://ops.example.com"));
    ck_assert(cfg_cors_allowed(&cfg, "HTTPS://OPS.example.com")); /* case of scheme and host */
    ck_assert(cfg_cors_allowed(&cfg, "http://127.0.0.1:3000"));
    ck_assert(cfg_cors_allowed(&cfg, "http://[::1]:3000"));
    ck_assert(!cfg_cors_allowed(&cfg, "http://ops.example.com"));       /* scheme */
    ck_assert(!cfg_cors_allowed(&cfg, "https://ops.example.com:8443")); /* port */
    ck_assert(!cfg_cors_allowed(&cfg, "https://ops.example.com.evil")); /* no prefix match */
    ck_assert(!cfg_cors_allowed(&cfg, "https://evil.ops.example.com")); /* no suffix match */
    ck_assert(!cfg_cors_allowed(&cfg, "http://127.0.0.1:30000"));
    ck_assert(!cfg_cors_allowed(&cfg, "null"));
    ck_assert(!cfg_cors_allowed(&cfg, ""));
    ck_assert(!cfg_cors_allowed(&cfg, NULL));
    ck_load_ok("{\"http\": {\"cors_origins\": []}}"); /* replaces the list */
    ck_assert_uint_eq(cfg.http.ncors_origins, 0);
    ck_assert(!cfg_cors_allowed(&cfg, "https://ops.example.com"));
}
END_TEST

/* "*" allows any origin, but only what is shaped like one: the value is
 * echoed in Access-Control-Allow-Origin. */
START_TEST(test_cors_star)
{
    ck_load_ok("{\"http\": {\"cors_origins\": [\"*\"]}}");
    ck_assert(cfg_cors_allowed(&cfg, "https://anything.example"));
    ck_assert(cfg_cors_allowed(&cfg, "http://10.0.0.1:8000"));
    ck_assert(!cfg_cors_allowed(&cfg, "null"));
    ck_assert(!cfg_cors_allowed(&cfg, "*"));
    ck_assert(!cfg_cors_allowed(&cfg, "https://a.example/path"));
    ck_assert(!cfg_cors_allowed(&cfg, "https://a.example\r\nSet-Cookie: x=1"));
    ck_assert(!cfg_cors_allowed(&cfg, "file://"));
}
END_TEST

START_TEST(test_cors_bad_values)
{
    ck_load_fails("{\"http\": {\"cors_origins\": \"*\"}}",
                  "invalid \"http.cors_origins\": expected an array of origins");
    ck_load_fails("{\"http\": {\"cors_origins\": [\"https://a.example\", 3]}}",
                  "invalid \"http.cors_origins[1]\": expected a string");
    ck_load_fails("{\"http\": {\"cors_origins\": [\"https://a.example/\"]}}",
                  "invalid \"http.cors_origins[0]\": \"https://a.example/\" is not an origin "
                  "(expected http[s]://HOST[:PORT], no path)");
    ck_load_fails("{\"http\": {\"cors_origins\": [\"a.example\"]}}",
                  "invalid \"http.cors_origins[0]\": \"a.example\" is not an origin (expected "
                  "\"*\" or http[s]://HOST[:PORT])");
    ck_load_fails("{\"http\": {\"cors_origins\": [\"http://a.example:123456\"]}}",
                  "invalid \"http.cors_origins[0]\": \"http://a.example:123456\" is not an "
                  "origin (expected http[s]://HOST[:PORT], no path)");
    ck_load_fails("{\"http\": {\"cors_origins\": [\"http://\"]}}",
                  "invalid \"http.cors_origins[0]\": \"http://\" is not an origin (expected "
                  "http[s]://HOST[:PORT], no path)");
    ck_assert_uint_eq(cfg.http.ncors_origins, 0); /* nothing of a bad list is kept */
}
END_TEST

START_TEST(test_cors_printed)
{
    json_t *j;

    ck_load_ok("{\"http\": {\"cors_origins\": [\"https://a.example\", \"*\"]}}");
    j = cfg_to_json(&cfg);
    ck_assert_ptr_nonnull(j);
    {
        json_t *a = json_object_get(json_object_get(j, "http"), "cors_origins");
        ck_assert_uint_eq(json_array_size(a), 2);
        ck_assert_str_eq(json_string_value(json_array_get(a, 0)), "https://a.example");
        ck_assert_str_eq(json_string_value(json_array_get(a, 1)), "*");
    }
    json_decref(j);
}
END_TEST

static Suite *cfg_suite(void)
{
    Suite *s = suite_create("cfg");
    TCase *tc = tcase_create("load");
    TCase *tr = tcase_create("route");
    TCase *to = tcase_create("output");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_cleanup_twice);
    tcase_add_test(tc, test_schedules_load);
    tcase_add_test(tc, test_schedule_errors_named);
    tcase_add_test(tc, test_notifiers_load);
    tcase_add_test(tc, test_notifier_errors_named);
    tcase_add_test(tc, test_rules_errors_named);
    tcase_add_test(tc, test_full_file);
    tcase_add_test(tc, test_empty_file_keeps_defaults);
    tcase_add_test(tc, test_null_clears_nullable);
    tcase_add_test(tc, test_demo_redefined_field_by_field);
    tcase_add_test(tc, test_concurrency_load);
    tcase_add_test(tc, test_concurrency_errors_named);
    tcase_add_test(tc, test_concurrency_literal_text_bound);
    tcase_add_test(tc, test_concurrency_group_agrees);
    tcase_add_test(tc, test_concurrency_schedule_data);
    tcase_add_test(tc, test_concurrency_then_data);
    tcase_add_test(tc, test_tenants);
    tcase_add_test(tc, test_failed_run_type_changes_nothing);
    tcase_add_test(tc, test_demo_removed_by_null);
    tcase_add_test(tc, test_removed_type_still_routed);
    tcase_add_test(tc, test_good_listen);
    tcase_add_loop_test(tc, test_bad_file, 0, (int)(sizeof(bad_files) / sizeof(bad_files[0])));
    tcase_add_test(tc, test_orphan_after_heartbeat);
    tcase_add_test(tc, test_tcp_user_timeout_past_statement_timeout);
    tcase_add_test(tc, test_heartbeat_under_send_timeout);
    tcase_add_test(tc, test_poll_policy_and_rest_job);
    tcase_add_test(tc, test_approval);
    tcase_add_test(tc, test_exec_params);
    tcase_add_test(tc, test_soap_params);
    tcase_add_test(tc, test_prepare_params);
    tcase_add_test(tc, test_validate_default_route_from_flag);
    tcase_add_test(tc, test_route_repetitions_load);
    tcase_add_test(tc, test_failed_routes_keep_old);
    tcase_add_test(tc, test_every_error_named);
    tcase_add_test(tc, test_every_run_type_error_named);
    tcase_add_test(tc, test_errors_past_the_message);
    tcase_add_test(tc, test_every_env_error_named);
    tcase_add_test(tc, test_every_validation_error_named);
    tcase_add_test(tc, test_env_applies);
    tcase_add_test(tc, test_env_empty_is_unset);
    tcase_add_loop_test(tc, test_bad_env, 0, (int)(sizeof(bad_env) / sizeof(bad_env[0])));
    tcase_add_test(tc, test_flags);
    tcase_add_test(tc, test_log_format);
    tcase_add_loop_test(tc, test_bad_flag, 0, (int)(sizeof(bad_flags) / sizeof(bad_flags[0])));
    tcase_add_test(tc, test_load_file);
    tcase_add_test(tc, test_load_file_errors);
    tcase_add_test(tc, test_load_file_too_large);
    tcase_add_test(tc, test_limits_keys);
    tcase_add_test(tc, test_cors_default_same_origin_only);
    tcase_add_test(tc, test_cors_exact_origins);
    tcase_add_test(tc, test_cors_star);
    tcase_add_test(tc, test_cors_bad_values);
    tcase_add_test(tc, test_cors_printed);
    suite_add_tcase(s, tc);

    tcase_add_checked_fixture(tr, setup, teardown);
    tcase_add_test(tr, test_route_first_match_wins);
    tcase_add_test(tr, test_route_regex_anchored);
    tcase_add_test(tr, test_route_exact_is_not_regex);
    tcase_add_test(tr, test_route_alert_type_fallback);
    tcase_add_test(tr, test_route_missing_labels);
    tcase_add_test(tr, test_route_default_and_none);
    tcase_add_test(tr, test_route_empty_match_matches_all);
    suite_add_tcase(s, tr);

    tcase_add_checked_fixture(to, setup, teardown);
    tcase_add_loop_test(to, test_to_json_masks_password, 0,
                        (int)(sizeof(masks) / sizeof(masks[0])));
    tcase_add_test(to, test_to_json_shape);
    tcase_add_test(to, test_to_json_round_trip);
    suite_add_tcase(s, to);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(cfg_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
