/* engine/actions/rest_job.c — a job on a remote REST jobs API (designed
 * for Google Cloud Dataflow, generalised; docs/actions/rest_job.md).
 *
 * start: the submit request; the job's id is read from its answer at
 * id_pointer, and the run waits. poll: the status request; the remote state
 * at state_pointer is mapped through state_map to running, succeeded,
 * failed or cancelled. A job the remote no longer knows (404, 410) ends as
 * "gone" says (failed by default). cancel and cleanup: optional requests.
 * Network errors, 408, 429 and 5xx are transient: a retry at submit, a
 * failed check (counted against the poll budget) afterwards. */
#include "engine/actions/action.h"
#include "engine/actions/params.h"
#include "engine/actions/prepare.h"
#include "engine/actions/remote_job.h"
#include "engine/actions/rest_job.h"

#include "common/jsonptr.h"

#include <stdlib.h>
#include <string.h>

/* ---- params ------------------------------------------------------------ */

static const struct param_rule rest_job_rules[] = {
    {"submit", remote_rule_request, .need = PARAM_REQUIRED},
    {"id_pointer", remote_rule_pointer, .need = PARAM_REQUIRED},
    {"status", remote_rule_request, .need = PARAM_REQUIRED},
    {"prepare", prepare_rule_json, .need = PARAM_OPTIONAL},
    REMOTE_JOB_RULES(PARAM_REQUIRED, remote_rule_request),
    {0},
};

/* ---- the action -------------------------------------------------------- */

enum step rest_job_submitted(struct run_ctx *rc, const struct remote_response *r)
{
    json_t *body = NULL;
    char *id = NULL;
    enum step step = STEP_FAIL;

    switch (remote_classify(r)) {
    case REMOTE_TRANSIENT:
        remote_error(rc, "submit_unavailable", "could not submit the job", r);
        step = r->stopped ? STEP_FAIL : STEP_RETRY;
        break;
    case REMOTE_GONE:
    case REMOTE_REJECTED:
        remote_error(rc, "submit_rejected", "the jobs API refused the job", r);
        break;
    case REMOTE_OK:
        body = remote_json(r);
        id = jptr_text(body, remote_param(rc, "id_pointer", ""));
        if (!id || !*id) {
            rc_error(rc, "submit_no_id", "the submit answer has no job id at \"%s\"",
                     remote_param(rc, "id_pointer", ""));
            break;
        }
        rc_set_external_id(rc, id);
        if (!rc->poll_state)
            rc->poll_state = json_object();
        step = STEP_WAIT;
        break;
    }
    free(id);
    json_decref(body);
    return step;
}

static enum step rest_job_start(struct run_ctx *rc)
{
    struct remote_response r;
    enum step step = prepare_run(rc, &prep_json);

    if (step != STEP_DONE)
        return step;
    if (!remote_call_run(rc, json_object_get(rc->type->params, "submit"), NULL,
                         "the submit request", &r))
        return STEP_FAIL;
    step = rest_job_submitted(rc, &r);
    remote_response_cleanup(&r);
    return step;
}

enum step rest_job_checked(struct run_ctx *rc, const struct remote_response *r)
{
    json_t *body = NULL;
    enum step step = STEP_RETRY;

    switch (remote_classify(r)) {
    case REMOTE_TRANSIENT:
        remote_error(rc, "status_unavailable", "could not check the job", r);
        break;
    case REMOTE_GONE:
        step = remote_job_gone(rc, r);
        break;
    case REMOTE_REJECTED:
        remote_error(rc, "status_rejected", "the jobs API refused the status check", r);
        step = STEP_FAIL;
        break;
    case REMOTE_OK:
        body = remote_json(r);
        if (!body)
            remote_error(rc, "status_malformed", "the status answer is not JSON", r);
        else
            step = remote_job_state(rc, body);
        break;
    }
    json_decref(body);
    return step;
}

static enum step rest_job_poll(struct run_ctx *rc)
{
    struct remote_response r;
    enum step step;

    if (!remote_call_run(rc, json_object_get(rc->type->params, "status"), NULL,
                         "the status request", &r))
        return STEP_FAIL;
    step = rest_job_checked(rc, &r);
    remote_response_cleanup(&r);
    return step;
}

static bool rest_job_cleanup(struct run_ctx *rc)
{
    return prepare_cleanup(rc, &prep_json, remote_cleanup_hook);
}

const struct action_ops action_rest_job_ops = {
    .name = "rest_job",
    .params = rest_job_rules,
    .start = rest_job_start,
    .poll = rest_job_poll,
    .cancel = remote_cancel_hook,
    .cleanup = rest_job_cleanup,
};
