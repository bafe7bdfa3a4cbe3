/* engine/actions/simulate.c — the built-in action behind the "demo" run
 * type: sleeps for duration_ms, reports `steps` progress values spread over
 * it, then succeeds or fails as "fail" says (docs/api.md). The run's input
 * overrides the run type's params, which override the defaults. */
#include "engine/actions/simulate.h"

#include <stdlib.h>
#include <string.h>

#define KEY_MAX 256

/* ---- params ------------------------------------------------------------ */

static void sim_path(char *buf, size_t n, const char *prefix, const char *key)
{
    if (prefix && *prefix)
        xsnprintf(buf, n, "%s.%s", prefix, key);
    else
        xsnprintf(buf, n, "%s", key);
}

static enum status sim_int(const json_t *obj, const char *prefix, const char *key, int64_t max,
                           int64_t *out, struct error *err)
{
    const json_t *v = json_object_get(obj, key);
    char path[KEY_MAX];
    json_int_t i;

    if (!v)
        return ST_OK;
    sim_path(path, sizeof(path), prefix, key);
    if (!json_is_integer(v))
        return error_set(err, ST_INVALID, "invalid \"%s\": expected an integer", path);
    i = json_integer_value(v);
    if (i < 0 || i > max)
        return error_set(err, ST_INVALID, "invalid \"%s\": must be between 0 and %lld", path,
                         (long long)max);
    *out = (int64_t)i;
    return ST_OK;
}

static enum status sim_fail_parse(const json_t *obj, const char *prefix, enum sim_fail *fail,
                                  int *first_n, struct error *err)
{
    static const char *const names[] = {"never", "permanent", "transient"};
    const json_t *v = json_object_get(obj, "fail");
    char path[KEY_MAX], *end;
    const char *s;
    long n;

    if (!v)
        return ST_OK;
    sim_path(path, sizeof(path), prefix, "fail");
    if (!json_is_string(v))
        return error_set(err, ST_INVALID, "invalid \"%s\": expected a string", path);
    s = json_string_value(v);
    for (size_t i = 0; i < ARRAY_LEN(names); i++) {
        if (strcmp(s, names[i]) == 0) {
            *fail = (enum sim_fail)i;
            return ST_OK;
        }
    }
    if (strncmp(s, "first:", 6) != 0 || s[6] < '0' || s[6] > '9')
        return error_set(err, ST_INVALID,
                         "invalid \"%s\": expected \"never\", \"permanent\", \"transient\" or "
                         "\"first:N\"",
                         path);
    n = strtol(s + 6, &end, 10);
    if (*end != '\0')
        return error_set(err, ST_INVALID, "invalid \"%s\": expected \"first:N\" with N an integer",
                         path);
    if (n > 100)
        return error_set(err, ST_INVALID,
                         "invalid \"%s\": N of \"first:N\" must be between 0 and 100", path);
    *fail = SIM_FAIL_FIRST;
    *first_n = (int)n;
    return ST_OK;
}

enum status simulate_params(const json_t *obj, const char *key_prefix, int64_t *duration_ms,
                            int *steps, enum sim_fail *fail, int *fail_first_n, struct error *err)
{
    int64_t d = *duration_ms, s = *steps;
    enum sim_fail f = *fail;
    int n = *fail_first_n;
    enum status st;

    if (!obj)
        return ST_OK;
    if (!json_is_object(obj) && key_prefix && *key_prefix)
        return error_set(err, ST_INVALID, "invalid \"%s\": expected an object", key_prefix);
    if (!json_is_object(obj))
        return error_set(err, ST_INVALID, "invalid parameters: expected an object");
    if ((st = sim_int(obj, key_prefix, "duration_ms", 86400000, &d, err)) != ST_OK ||
        (st = sim_int(obj, key_prefix, "steps", 1000, &s, err)) != ST_OK ||
        (st = sim_fail_parse(obj, key_prefix, &f, &n, err)) != ST_OK)
        return st;
    *duration_ms = d;
    *steps = (int)s;
    *fail = f;
    *fail_first_n = n;
    return ST_OK;
}

/* At load, unlike on a run's input, keys other than the three are mistakes. */
static enum status simulate_check_params(const json_t *params, const char *path, struct error *err)
{
    int64_t d = 0;
    int steps = 0, n = 0;
    enum sim_fail f = SIM_FAIL_NEVER;
    const char *key;
    json_t *v;

    json_object_foreach((json_t *)params, key, v)
    {
        if (!STR_IN(key, "duration_ms", "steps", "fail"))
            return error_set(err, ST_INVALID, "unknown key \"%s.%s\"", path, key);
    }
    return simulate_params(params, path, &d, &steps, &f, &n, err);
}

/* ---- the action ------------------------------------------------------- */

static enum step simulate_start(struct run_ctx *rc)
{
    int64_t duration_ms = 100;
    int steps = 4, first_n = 0;
    enum sim_fail fail = SIM_FAIL_NEVER;
    struct error err = {0};
    const json_t *input = run_input(rc->run);

    if (simulate_params(rc->type->params, "params", &duration_ms, &steps, &fail, &first_n, &err) !=
            ST_OK ||
        (json_is_object(input) &&
         simulate_params(input, "input", &duration_ms, &steps, &fail, &first_n, &err) != ST_OK)) {
        rc_error(rc, "invalid_input", "%s", err.message);
        return STEP_FAIL;
    }
    for (int i = 1; i <= steps; i++) {
        char text[48];
        if (!rc_sleep(rc, duration_ms / steps))
            return STEP_FAIL; /* the worker turns a stop into cancelled/timed_out */
        xsnprintf(text, sizeof(text), "step %d of %d", i, steps);
        rc_progress(rc, i * 100 / steps, text);
    }
    if (steps == 0 && !rc_sleep(rc, duration_ms))
        return STEP_FAIL;
    switch (fail) {
    case SIM_FAIL_PERMANENT:
        rc_error(rc, "simulated_failure", "permanent failure requested by \"fail\"");
        return STEP_FAIL;
    case SIM_FAIL_TRANSIENT:
        rc_error(rc, "simulated_transient", "transient failure on attempt %d", rc->run->attempt);
        return STEP_RETRY;
    case SIM_FAIL_FIRST:
        if (rc->run->attempt <= first_n) {
            rc_error(rc, "simulated_transient", "transient failure on attempt %d of the first %d",
                     rc->run->attempt, first_n);
            return STEP_RETRY;
        }
        break;
    case SIM_FAIL_NEVER:
        break;
    }
    rc->result = json_pack("{s:b, s:I, s:i, s:i}", "simulated", 1, "duration_ms",
                           (json_int_t)duration_ms, "steps", steps, "attempt", rc->run->attempt);
    return STEP_DONE;
}

const struct action_ops action_simulate_ops = {
    .name = "simulate",
    .check_params = simulate_check_params,
    .start = simulate_start,
};
