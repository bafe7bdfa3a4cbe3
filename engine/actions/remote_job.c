/* engine/actions/remote_job.c — what the job actions (http, rest_job,
 * soap_job) share (engine/actions/remote_job.h): a job's remote state
 * mapped to an outcome, its result and summaries read from the answer,
 * the cancel and cleanup hooks, and the params they read alike. */
#include "engine/actions/remote_job.h"

#include "common/jsonptr.h"
#include "common/log.h"

#include <stdlib.h>
#include <string.h>

const char *remote_param(const struct run_ctx *rc, const char *key, const char *def)
{
    const char *v = json_string_value(json_object_get(rc->type->params, key));
    return v ? v : def;
}

/* A pointer's value copied, NULL when the pointer is not configured or
 * finds nothing of the expected kind (is_kind NULL: any). */
static json_t *take(const struct run_ctx *rc, const json_t *body, const char *key,
                    int (*is_kind)(const json_t *))
{
    const char *ptr = remote_param(rc, key, NULL);
    const json_t *v = ptr ? jptr_get(body, ptr) : NULL;

    return v && (!is_kind || is_kind(v)) ? json_deep_copy(v) : NULL;
}

static int is_object(const json_t *v)
{
    return json_is_object(v);
}

static int is_array(const json_t *v)
{
    return json_is_array(v);
}

/* The outcome a state_map value or the "gone" param names: "succeeded",
 * "failed" or "cancelled" (checked at configuration load). */
static enum run_outcome mapped_outcome(const char *mapped)
{
    enum run_outcome o;

    return run_outcome_parse(mapped, &o) ? o : OUTCOME_FAILED;
}

enum step remote_job_ended(struct run_ctx *rc, const json_t *body, const char *mapped,
                           const char *state)
{
    char *msg = NULL;
    const char *eptr = remote_param(rc, "error_pointer", NULL);
    enum run_outcome outcome = mapped_outcome(mapped);

    rc->summary_counts = take(rc, body, "summary_counts_pointer", is_object);
    rc->failure_summary = take(rc, body, "failure_summary_pointer", is_array);
    if (outcome == OUTCOME_SUCCEEDED) {
        rc->result = remote_param(rc, "result_pointer", NULL)
                         ? take(rc, body, "result_pointer", NULL)
                         : json_deep_copy(body);
        return STEP_DONE;
    }
    msg = eptr ? jptr_text(body, eptr) : NULL;
    if (outcome == OUTCOME_CANCELLED)
        rc->outcome = OUTCOME_CANCELLED;
    rc_error(rc, outcome == OUTCOME_CANCELLED ? "remote_cancelled" : "remote_failed",
             "job %s ended in state \"%s\"%s%s", rc->external_id, state, msg ? ": " : "",
             msg ? msg : "");
    free(msg);
    return STEP_FAIL;
}

enum step remote_job_gone(struct run_ctx *rc, const struct remote_response *r)
{
    enum run_outcome as = mapped_outcome(remote_param(rc, "gone", "failed"));

    if (as == OUTCOME_SUCCEEDED)
        return STEP_DONE;
    if (as == OUTCOME_CANCELLED)
        rc->outcome = OUTCOME_CANCELLED;
    rc_error(rc, "job_gone", "the remote system no longer knows job %s (HTTP %ld)", rc->external_id,
             r->status);
    return STEP_FAIL;
}

enum step remote_job_state(struct run_ctx *rc, const json_t *body)
{
    char *state = jptr_text(body, remote_param(rc, "state_pointer", ""));
    const char *mapped;
    enum step step;

    if (!state) {
        rc_error(rc, "status_malformed", "the status answer has no state at \"%s\"",
                 remote_param(rc, "state_pointer", ""));
        return STEP_RETRY;
    }
    mapped =
        json_string_value(json_object_get(json_object_get(rc->type->params, "state_map"), state));
    if (!mapped) {
        mapped = remote_param(rc, "unknown_state", "running");
        LOG(LOG_DEBUG, "unmapped remote state run=%s state=%s treated_as=%s", rc->run->id, state,
            mapped);
    }
    json_object_set_new(rc->poll_state, "state", json_string(state));
    step = strcmp(mapped, "running") == 0 ? STEP_WAIT : remote_job_ended(rc, body, mapped, state);
    free(state);
    return step;
}

bool remote_hook(struct run_ctx *rc, const char *key)
{
    const json_t *req = json_object_get(rc->type->params, key);
    const struct remote_vars v = remote_vars_of(rc);
    struct remote_response r;
    struct error err = {0};
    enum remote_class c;
    enum status st;

    if (!req)
        return true;
    /* without a URL of its own, the request goes to the job's external id
     * (http: the status URL) */
    st = remote_call(req, &v, json_object_get(req, "url") ? NULL : rc->external_id, rc, &r, &err);
    if (st == ST_INVALID || st == ST_UNPROCESSABLE) {
        LOG(LOG_WARN, "could not build the %s request run=%s: %s", key, rc->run->id, err.message);
        return false;
    }
    c = remote_classify(&r);
    if (c != REMOTE_OK && c != REMOTE_GONE)
        LOG(LOG_WARN, "%s request failed run=%s: %s%s HTTP %ld", key, rc->run->id, r.error,
            r.transport_error ? "" : " answered", r.status);
    remote_response_cleanup(&r);
    return c == REMOTE_OK || c == REMOTE_GONE;
}

bool remote_cancel_hook(struct run_ctx *rc)
{
    return remote_hook(rc, "cancel");
}

bool remote_cleanup_hook(struct run_ctx *rc)
{
    return remote_hook(rc, "cleanup");
}

/* ---- params every job action reads ----------------------------------------- */

enum status remote_rule_pointer(const struct param *p, struct error *err)
{
    if (!json_is_string(p->v) || !jptr_valid(json_string_value(p->v)))
        return error_set(err, ST_INVALID,
                         "invalid \"%s\": expected a JSON pointer such as \"/job/id\"", p->path);
    return ST_OK;
}

enum status remote_rule_state_map(const struct param *p, struct error *err)
{
    const char *key;
    json_t *v;

    if (!p->v && !json_object_get(p->in, "state_pointer"))
        return ST_OK;
    if (!json_is_object(p->v) || json_object_size(p->v) == 0)
        return error_set(err, ST_INVALID,
                         "invalid \"%s\": expected an object mapping remote states to "
                         "running, succeeded, failed or cancelled",
                         p->path);
    json_object_foreach((json_t *)p->v, key, v)
    {
        if (!STR_IN(json_string_value(v), "running", "succeeded", "failed", "cancelled"))
            return error_set(err, ST_INVALID,
                             "invalid \"%s.%s\": expected running, succeeded, failed "
                             "or cancelled",
                             p->path, key);
    }
    return ST_OK;
}
