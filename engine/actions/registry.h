/* engine/actions/registry.h — every action, by name (registry.c): for the
 * engine, which runs a run type's action, and for main, which hands the
 * registry to the configuration. Constant tables; thread-safe. */
#ifndef OPSRUN_ENGINE_ACTIONS_REGISTRY_H
#define OPSRUN_ENGINE_ACTIONS_REGISTRY_H

#include "config/config.h"
#include "engine/actions/action.h"

/* The built-in actions by name (registry.c); NULL when unknown. */
const struct action_ops *action_find(const char *name);
/* The same registry as configuration sees it: cfg_init takes it, so that a
 * run type's action must exist and its params pass the action's check. */
extern const struct cfg_actions action_registry;

#endif
