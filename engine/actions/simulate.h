/* engine/actions/simulate.h — the simulate action's parameters, which a run
 * type's params and, over them, a run's input may set. Reentrant. */
#ifndef OPSRUN_ENGINE_ACTIONS_SIMULATE_H
#define OPSRUN_ENGINE_ACTIONS_SIMULATE_H

#include "engine/actions/action.h"

enum sim_fail { SIM_FAIL_NEVER, SIM_FAIL_PERMANENT, SIM_FAIL_TRANSIENT, SIM_FAIL_FIRST };

/* The parameters in obj (run type params, or a run's input):
 * "duration_ms" 0..86400000, "steps" 0..1000, "fail" "never" | "permanent" |
 * "transient" | "first:N" (N 0..100). Outputs are left untouched for absent
 * keys, and all of them on error, so callers layer input over params over
 * defaults. Other keys are ignored here (an alert's input holds much else);
 * the params check at load rejects them. Errors name key_prefix.key.
 * obj NULL is a no-op. */
enum status simulate_params(const json_t *obj, const char *key_prefix, int64_t *duration_ms,
                            int *steps, enum sim_fail *fail, int *fail_first_n,
                            struct error *err) WUR;

#endif
