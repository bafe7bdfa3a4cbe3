/* engine/actions/simulate.c — the built-in action behind the "demo" run
 * type: sleeps for duration_ms, reports `steps` progress values spread over
 * it, then succeeds or fails as "fail" says (docs/api.md). The run's input
 * overrides the run type's params, which override the defaults. */
#include "engine/action.h"

static enum step simulate_start(struct run_ctx *rc)
{
    int64_t duration_ms = 100;
    int steps = 4, first_n = 0;
    enum sim_fail fail = SIM_FAIL_NEVER;
    struct error err = {0};
    const json_t *input = run_input(rc->run);

    if (cfg_sim_params(rc->type->params, "params", &duration_ms, &steps, &fail, &first_n, &err) !=
            ST_OK ||
        (json_is_object(input) &&
         cfg_sim_params(input, "input", &duration_ms, &steps, &fail, &first_n, &err) != ST_OK)) {
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
    .start = simulate_start,
};
