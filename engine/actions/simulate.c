/* engine/actions/simulate.c — the built-in action behind the "demo" run
 * type: sleeps for duration_ms, reports `steps` progress values spread over
 * it, then succeeds or fails as "fail" says (docs/api.md). The run's input
 * overrides the run type's params, which override the defaults. */
#include "engine/actions/simulate.h"

#include "engine/actions/params.h"

#include <stdlib.h>
#include <string.h>

#define KEY_MAX 256

/* ---- params ------------------------------------------------------------ */

#define SIM_DURATION_MAX 86400000
#define SIM_STEPS_MAX 1000

/* obj's value at key (NULL when absent), and its name for errors in path. */
static const json_t *sim_get(const json_t *obj, const char *prefix, const char *key,
                             char path[KEY_MAX])
{
    if (prefix && *prefix)
        xsnprintf(path, KEY_MAX, "%s.%s", prefix, key);
    else
        xsnprintf(path, KEY_MAX, "%s", key);
    return json_object_get(obj, key);
}

static enum status sim_int(const json_t *v, const char *path, int64_t max, int64_t *out,
                           struct error *err)
{
    json_int_t i;

    if (!json_is_integer(v))
        return error_set(err, ST_INVALID, "invalid \"%s\": expected an integer", path);
    i = json_integer_value(v);
    if (i < 0 || i > max)
        return error_set(err, ST_INVALID, "invalid \"%s\": must be between 0 and %lld", path,
                         (long long)max);
    *out = (int64_t)i;
    return ST_OK;
}

static enum status sim_fail_parse(const json_t *v, const char *path, enum sim_fail *fail,
                                  int *first_n, struct error *err)
{
    static const char *const names[] = {"never", "permanent", "transient"};
    char *end;
    const char *s;
    long n;

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
    enum status st = ST_OK;
    const json_t *v;
    char path[KEY_MAX];

    if (!obj)
        return ST_OK;
    if (!json_is_object(obj) && key_prefix && *key_prefix)
        return error_set(err, ST_INVALID, "invalid \"%s\": expected an object", key_prefix);
    if (!json_is_object(obj))
        return error_set(err, ST_INVALID, "invalid parameters: expected an object");
    if ((v = sim_get(obj, key_prefix, "duration_ms", path)))
        st = sim_int(v, path, SIM_DURATION_MAX, &d, err);
    if (st == ST_OK && (v = sim_get(obj, key_prefix, "steps", path)))
        st = sim_int(v, path, SIM_STEPS_MAX, &s, err);
    if (st == ST_OK && (v = sim_get(obj, key_prefix, "fail", path)))
        st = sim_fail_parse(v, path, &f, &n, err);
    if (st != ST_OK)
        return st;
    *duration_ms = d;
    *steps = (int)s;
    *fail = f;
    *fail_first_n = n;
    return ST_OK;
}

static enum status check_int(const struct param *p, struct error *err)
{
    int64_t x;

    return sim_int(p->v, p->path, p->rule->max, &x, err);
}

static enum status check_fail(const struct param *p, struct error *err)
{
    enum sim_fail f;
    int n;

    return sim_fail_parse(p->v, p->path, &f, &n, err);
}

/* At load, unlike on a run's input, keys other than the three are mistakes. */
static const struct param_rule simulate_rules[] = {
    {"duration_ms", check_int, .max = SIM_DURATION_MAX},
    {"steps", check_int, .max = SIM_STEPS_MAX},
    {"fail", check_fail, .need = PARAM_OPTIONAL},
    {0},
};

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
        rc_log(rc, "%s", text);
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
    .params = simulate_rules,
    .start = simulate_start,
};
