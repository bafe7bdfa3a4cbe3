/* engine/actions/registry.c — every action, by name. Adding an action is
 * one new file, engine/actions/NAME.c defining
 * `const struct action_ops action_NAME_ops`, plus its line in ACTIONS. */
#include "engine/actions/action.h"
#include "engine/actions/params.h"
#include "engine/actions/registry.h"

#include <string.h>

/* clang-format off */
#define ACTIONS(X) \
    X(simulate)    \
    X(http)        \
    X(rest_job)    \
    X(soap_job)    \
    X(exec)        \
    X(workflow)
/* clang-format on */

#define DECLARE(name) extern const struct action_ops action_##name##_ops;
#define ENTRY(name) &action_##name##_ops,

ACTIONS(DECLARE)

static const struct action_ops *const actions[] = {ACTIONS(ENTRY)};

const struct action_ops *action_find(const char *name)
{
    for (size_t i = 0; i < ARRAY_LEN(actions); i++)
        if (strcmp(actions[i]->name, name) == 0)
            return actions[i];
    return NULL;
}

static bool registry_exists(const char *name)
{
    return action_find(name) != NULL;
}

static enum status registry_check_params(const char *name, const json_t *params, const char *path,
                                         struct error *err)
{
    const struct action_ops *ops = action_find(name);

    if (!ops)
        return error_set(err, ST_INVALID, "invalid \"%s\": unknown action \"%s\"", path, name);
    return params_check(params, ops->params, path, err);
}

static bool registry_is_workflow(const char *name)
{
    return action_find(name) == &action_workflow_ops;
}

const struct cfg_actions action_registry = {
    .exists = registry_exists,
    .check_params = registry_check_params,
    .is_workflow = registry_is_workflow,
};
