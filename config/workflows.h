/* config/workflows.h — the steps of a workflow run type (a run type whose
 * action is "workflow"; docs/design/workflows.md): their check within the
 * type, which the workflow action's params check calls; and their
 * compiled form, in topological order, which run_type_rules.workflow is
 * to hold. config/workflows.c also holds the checks across run types that
 * the configuration runs once every type is loaded (check_wf_refs,
 * config_internal.h).
 *
 * A workflow type's params are {"steps": {NAME: {"run_type", "needs"?,
 * "when"?, "data"?}}}. Pure and reentrant; errors come back in
 * struct error, naming the key under the given path. */
#ifndef OPSRUN_CONFIG_WORKFLOWS_H
#define OPSRUN_CONFIG_WORKFLOWS_H

#include "config/config.h"

#include <jansson.h>

/* The most steps one workflow type has. */
#define WF_STEPS_MAX 100
/* The longest step name. */
#define WF_STEP_NAME_MAX 64

/* The checks of a workflow type's "steps" (at path, such as
 * "run_types.disk-full.params.steps") that need no other run type: 1 to
 * WF_STEPS_MAX steps, each named with 1 to 64 of [A-Za-z0-9_-], not all
 * digits (a step's run id is "<run id>.<name>", a follow-up's
 * "<run id>.<number>"); each has a "run_type" name, and perhaps
 * "needs" (known steps, each once, never itself, no cycle), "when"
 * ("succeeded", the default, "failed" or "always", only with needs) and
 * "data" (an object whose placeholders are {{input:/ptr}} or
 * {{steps.NAME:/ptr}}, NAME being among the step's needs, directly or
 * not). The first error found comes back. */
enum status cfg_wf_check_steps(const json_t *steps, const char *path, struct error *err) WUR;

/* Whether rt is a workflow type (its action says so, through the actions
 * cfg_init was given). */
bool cfg_run_type_is_workflow(const struct config *cfg, const struct run_type *rt);

/* A checked workflow type's steps, compiled: an array with one object per
 * step, {"name", "run_type", "needs", "when", "data", "refs"}, in
 * topological order (a step after every step it needs; among steps free
 * to go, by name), so that one pass in that order can decide every step.
 * "needs" and "refs" (the steps "data" names) are sorted by name, "when"
 * is written out ("succeeded" when absent), "data" is {} when absent. The
 * same configuration always gives the same JSON, whatever the order of
 * its file. New reference; NULL when jansson fails. */
json_t *cfg_wf_compile(const struct run_type *rt);

#endif
