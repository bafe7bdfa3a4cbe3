/* engine/actions/workflow.c — the "workflow" action: a run type whose
 * params are {"steps": {...}} (config/workflows.h). Here are its params'
 * checks; the checks across run types run in config/. Its runs are driven
 * by the database (migration 024, docs/workflows.md): a workflow waits
 * from its insert to its end and is never claimed. A run that reaches a
 * worker anyway (queued before a reload made its type a workflow) fails
 * with "workflow_claimed". */
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
    rc_error(
        rc, "workflow_claimed",
        "this run was queued before its type became a workflow; submit it again to run it as one");
    return STEP_FAIL;
}

const struct action_ops action_workflow_ops = {
    .name = "workflow",
    .params = workflow_rules,
    .start = workflow_start,
};
