/* engine/actions/workflow.c — the "workflow" action: a run type whose
 * params are {"steps": {...}} (config/workflows.h). Only its configuration
 * is built so far: its params are checked at load, and the checks across
 * run types run in config/. Nothing runs a workflow yet: the runs, their
 * steps and their end are to come from the database (migration 024,
 * docs/design/workflows.md), and a workflow is never claimed; should one
 * reach a worker, start() fails it with "workflow_claimed". */
#include "config/workflows.h"
#include "engine/actions/action.h"
#include "engine/actions/params.h"

static enum status check_steps(const struct param *p, struct error *err)
{
    return cfg_wf_check_steps(p->v, p->path, err);
}

static const struct param_rule workflow_rules[] = {
    {"steps", check_steps, .need = PARAM_REQUIRED},
    {0},
};

static enum step workflow_start(struct run_ctx *rc)
{
    rc_error(rc, "workflow_claimed",
             "a workflow run is never claimed: its steps are runs of their own");
    return STEP_FAIL;
}

const struct action_ops action_workflow_ops = {
    .name = "workflow",
    .params = workflow_rules,
    .start = workflow_start,
};
