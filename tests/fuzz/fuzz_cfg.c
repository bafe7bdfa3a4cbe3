/* tests/fuzz/fuzz_cfg.c — the configuration file: cfg_load_json over the
 * defaults, cfg_validate, then what a valid configuration is used for:
 * --print-config (cfg_to_json, which masks database_url), routing, the
 * simulate parameters and the pool size. Applying the same file twice must
 * give the same configuration (run types merge, routes replace), and a
 * file loads in under a second of CPU and holds a bounded amount of memory
 * once loaded (in the sanitizer builds, which count it). Operators write these files; they are
 * still input. */
#include "tests/fuzz/fuzz.h"
#include "engine/actions/simulate.h"

#include <time.h>

static void use(const struct config *cfg)
{
    static const char *const label_sets[] = {
        "{\"alertname\": \"DiskFull\", \"severity\": \"critical\"}",
        "{\"alertname\": \"ServiceDown\", \"team\": \"web\", \"instance\": \"a:9100\"}",
        "{}",
    };
    const struct route *route;

    FUZZ_CHECK(cfg_pool_size(cfg) > 0);
    for (size_t i = 0; i < ARRAY_LEN(label_sets); i++) {
        json_t *labels = json_loads(label_sets[i], 0, NULL);
        const char *name = json_string_value(json_object_get(labels, "alertname"));
        const struct run_type *rt = cfg_route(cfg, name ? name : "demo", labels, &route);
        FUZZ_CHECK(!route || rt != NULL);
        json_decref(labels);
    }
    for (size_t i = 0; i < cfg->nrun_types; i++) {
        const struct run_type *rt = &cfg->run_types[i];
        int64_t duration = 0;
        int steps = 0, first_n = 0;
        enum sim_fail fail = SIM_FAIL_NEVER;
        struct error err = {0};
        FUZZ_CHECK(cfg_run_type(cfg, rt->name) == rt);
        FUZZ_CHECK(simulate_params(rt->params, "params", &duration, &steps, &fail, &first_n,
                                   &err) == ST_OK);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_cstr(data, size);
    struct config cfg;
    struct error err = {0};
    json_t *once, *twice;
    size_t heap = fuzz_heap_bytes();
    clock_t t0 = clock();

    cfg_init(&cfg, &action_registry);
    if (cfg_load_json(&cfg, text, &err) != ST_OK || cfg_validate(&cfg, &err) != ST_OK) {
        FUZZ_CHECK(err.message[0] != '\0');
        goto out;
    }
    /* a file of a few KiB loads in well under a second and holds a few MiB
     * at most (a route's regular expression can take minutes and
     * gigabytes to compile) */
    FUZZ_CHECK(clock() - t0 < CLOCKS_PER_SEC);
    FUZZ_CHECK(fuzz_heap_bytes() < heap + size * 64 + 64 * 1024 * 1024);
    use(&cfg);
    once = cfg_to_json(&cfg);
    FUZZ_CHECK(once != NULL);
    FUZZ_CHECK(cfg_load_json(&cfg, text, &err) == ST_OK && cfg_validate(&cfg, &err) == ST_OK);
    twice = cfg_to_json(&cfg);
    FUZZ_CHECK(twice != NULL && json_equal(once, twice));
    json_decref(once);
    json_decref(twice);
out:
    cfg_cleanup(&cfg);
    free(text);
    return 0;
}
