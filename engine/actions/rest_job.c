/* engine/actions/rest_job.c — a job on a remote REST jobs API (the
 * Dataflow seed, generalised; docs/actions/rest_job.md).
 *
 * start: the submit request; the job's id is read from its answer at
 * id_pointer, and the run waits. poll: the status request; the remote state
 * at state_pointer is mapped through state_map to running, succeeded,
 * failed or cancelled. A job the remote no longer knows (404, 410) ends as
 * "gone" says (failed by default). cancel and cleanup: optional requests.
 * Network errors, 408, 429 and 5xx are transient: a retry at submit, a
 * failed check (counted against the poll budget) afterwards. */
#include "engine/action.h"
#include "engine/actions/actions.h"
#include "engine/actions/remote.h"

#include "common/log.h"

#include <stdlib.h>
#include <string.h>

static const char *const mapped_states[] = {"running", "succeeded", "failed", "cancelled"};

static bool one_of(const char *s, const char *const *set, size_t n)
{
    for (size_t i = 0; s && i < n; i++)
        if (strcmp(s, set[i]) == 0)
            return true;
    return false;
}

/* ---- params ------------------------------------------------------------ */

static enum status check_pointer(const json_t *params, const char *key, bool need, const char *path,
                                 struct error *err)
{
    const json_t *v = json_object_get(params, key);

    if (!v)
        return need ? error_set(err, ST_INVALID, "missing \"%s.%s\"", path, key) : ST_OK;
    if (!json_is_string(v) || !json_pointer_valid(json_string_value(v)))
        return error_set(err, ST_INVALID,
                         "invalid \"%s.%s\": expected a JSON pointer such as \"/job/id\"", path,
                         key);
    return ST_OK;
}

static enum status check_request(const json_t *params, const char *key, bool need, const char *path,
                                 struct error *err)
{
    const json_t *v = json_object_get(params, key);
    char sub[200];

    if (!v)
        return need ? error_set(err, ST_INVALID, "missing \"%s.%s\"", path, key) : ST_OK;
    xsnprintf(sub, sizeof(sub), "%s.%s", path, key);
    return remote_check_request(v, sub, true, err);
}

static enum status check_state_map(const json_t *map, const char *path, struct error *err)
{
    const char *key;
    json_t *v;

    if (!json_is_object(map) || json_object_size(map) == 0)
        return error_set(err, ST_INVALID,
                         "invalid \"%s.state_map\": expected an object mapping remote states to "
                         "running, succeeded, failed or cancelled",
                         path);
    json_object_foreach((json_t *)map, key, v)
    {
        if (!one_of(json_string_value(v), mapped_states, ARRAY_LEN(mapped_states)))
            return error_set(err, ST_INVALID,
                             "invalid \"%s.state_map.%s\": expected running, succeeded, failed "
                             "or cancelled",
                             path, key);
    }
    return ST_OK;
}

static enum status check_choice(const json_t *params, const char *key, const char *const *set,
                                size_t n, const char *path, struct error *err)
{
    const json_t *v = json_object_get(params, key);

    if (v && !one_of(json_string_value(v), set, n))
        return error_set(err, ST_INVALID, "invalid \"%s.%s\": expected one of %s, %s%s%s", path,
                         key, set[0], set[1], n > 2 ? ", " : "", n > 2 ? set[2] : "");
    return ST_OK;
}

enum status action_rest_job_check(const json_t *params, const char *path, struct error *err)
{
    static const char *const keys[] = {"submit",
                                       "id_pointer",
                                       "status",
                                       "state_pointer",
                                       "state_map",
                                       "unknown_state",
                                       "gone",
                                       "result_pointer",
                                       "error_pointer",
                                       "summary_counts_pointer",
                                       "failure_summary_pointer",
                                       "cancel",
                                       "cleanup"};
    static const char *const unknown[] = {"running", "failed"};
    static const char *const gone[] = {"failed", "succeeded", "cancelled"};
    const char *key;
    json_t *v;

    json_object_foreach((json_t *)params, key, v)
    {
        if (!one_of(key, keys, ARRAY_LEN(keys)))
            return error_set(err, ST_INVALID, "unknown key \"%s.%s\"", path, key);
    }
    if (check_request(params, "submit", true, path, err) != ST_OK ||
        check_pointer(params, "id_pointer", true, path, err) != ST_OK ||
        check_request(params, "status", true, path, err) != ST_OK ||
        check_pointer(params, "state_pointer", true, path, err) != ST_OK ||
        check_state_map(json_object_get(params, "state_map"), path, err) != ST_OK ||
        check_choice(params, "unknown_state", unknown, 2, path, err) != ST_OK ||
        check_choice(params, "gone", gone, 3, path, err) != ST_OK ||
        check_pointer(params, "result_pointer", false, path, err) != ST_OK ||
        check_pointer(params, "error_pointer", false, path, err) != ST_OK ||
        check_pointer(params, "summary_counts_pointer", false, path, err) != ST_OK ||
        check_pointer(params, "failure_summary_pointer", false, path, err) != ST_OK ||
        check_request(params, "cancel", false, path, err) != ST_OK ||
        check_request(params, "cleanup", false, path, err) != ST_OK)
        return ST_INVALID;
    return ST_OK;
}

/* ---- the action -------------------------------------------------------- */

static const char *param(const struct run_ctx *rc, const char *key, const char *def)
{
    const char *v = json_string_value(json_object_get(rc->type->params, key));
    return v ? v : def;
}

static struct remote_vars vars_of(const struct run_ctx *rc)
{
    return (struct remote_vars){
        .run_id = rc->run->id,
        .tenant = rc->run->tenant,
        .external_id = rc->external_id,
        .attempt = rc->run->attempt,
        .input = run_input(rc->run),
    };
}

static enum step rest_job_start(struct run_ctx *rc)
{
    const struct remote_vars v = vars_of(rc);
    struct remote_response r;
    struct error err = {0};
    json_t *body = NULL;
    char *id = NULL;
    enum step step = STEP_FAIL;

    if (remote_call(json_object_get(rc->type->params, "submit"), &v, NULL, rc, &r, &err) ==
        ST_INVALID) {
        rc_error(rc, "invalid_request", "could not build the submit request: %s", err.message);
        return STEP_FAIL;
    }
    switch (remote_classify(&r)) {
    case REMOTE_TRANSIENT:
        remote_error(rc, "submit_unavailable", "could not submit the job", &r);
        step = r.stopped ? STEP_FAIL : STEP_RETRY;
        break;
    case REMOTE_GONE:
    case REMOTE_REJECTED:
        remote_error(rc, "submit_rejected", "the jobs API refused the job", &r);
        break;
    case REMOTE_OK:
        body = remote_json(&r);
        id = json_pointer_text(body, param(rc, "id_pointer", ""));
        if (!id || !*id) {
            rc_error(rc, "submit_no_id", "the submit answer has no job id at \"%s\"",
                     param(rc, "id_pointer", ""));
            break;
        }
        rc_set_external_id(rc, id);
        rc->poll_state = json_object();
        step = STEP_WAIT;
        break;
    }
    free(id);
    json_decref(body);
    remote_response_cleanup(&r);
    return step;
}

/* A pointer's value copied, NULL when the pointer is not configured or
 * finds nothing of the expected kind. */
static json_t *take(const struct run_ctx *rc, const json_t *body, const char *key,
                    bool (*is_kind)(const json_t *))
{
    const char *ptr = param(rc, key, NULL);
    const json_t *v = ptr ? json_pointer_get(body, ptr) : NULL;

    return v && (!is_kind || is_kind(v)) ? json_deep_copy(v) : NULL;
}

static bool is_object(const json_t *v)
{
    return json_is_object(v);
}

static bool is_array(const json_t *v)
{
    return json_is_array(v);
}

/* A terminal state: result, summaries, and for failures an error. */
static enum step ended(struct run_ctx *rc, const json_t *body, const char *mapped,
                       const char *state)
{
    char *msg = NULL;
    const char *eptr = param(rc, "error_pointer", NULL);

    rc->summary_counts = take(rc, body, "summary_counts_pointer", is_object);
    rc->failure_summary = take(rc, body, "failure_summary_pointer", is_array);
    if (strcmp(mapped, "succeeded") == 0) {
        rc->result = param(rc, "result_pointer", NULL) ? take(rc, body, "result_pointer", NULL)
                                                       : json_deep_copy(body);
        return STEP_DONE;
    }
    msg = eptr ? json_pointer_text(body, eptr) : NULL;
    if (strcmp(mapped, "cancelled") == 0)
        rc->outcome = "cancelled";
    rc_error(rc, strcmp(mapped, "cancelled") == 0 ? "remote_cancelled" : "remote_failed",
             "job %s ended in state \"%s\"%s%s", rc->external_id, state, msg ? ": " : "",
             msg ? msg : "");
    free(msg);
    return STEP_FAIL;
}

/* The job is unknown to the remote: as "gone" says. */
static enum step gone(struct run_ctx *rc, const struct remote_response *r)
{
    const char *as = param(rc, "gone", "failed");

    if (strcmp(as, "succeeded") == 0)
        return STEP_DONE;
    if (strcmp(as, "cancelled") == 0)
        rc->outcome = "cancelled";
    rc_error(rc, "job_gone", "the remote system no longer knows job %s (HTTP %ld)", rc->external_id,
             r->status);
    return STEP_FAIL;
}

static enum step from_state(struct run_ctx *rc, const json_t *body)
{
    char *state = json_pointer_text(body, param(rc, "state_pointer", ""));
    const char *mapped;
    enum step step;

    if (!state) {
        rc_error(rc, "status_malformed", "the status answer has no state at \"%s\"",
                 param(rc, "state_pointer", ""));
        return STEP_RETRY;
    }
    mapped =
        json_string_value(json_object_get(json_object_get(rc->type->params, "state_map"), state));
    if (!mapped) {
        mapped = param(rc, "unknown_state", "running");
        LOG(LOG_DEBUG, "unmapped remote state run=%s state=%s treated_as=%s", rc->run->id, state,
            mapped);
    }
    json_object_set_new(rc->poll_state, "state", json_string(state));
    step = strcmp(mapped, "running") == 0 ? STEP_WAIT : ended(rc, body, mapped, state);
    free(state);
    return step;
}

static enum step rest_job_poll(struct run_ctx *rc)
{
    const struct remote_vars v = vars_of(rc);
    struct remote_response r;
    struct error err = {0};
    json_t *body = NULL;
    enum step step = STEP_RETRY;

    if (remote_call(json_object_get(rc->type->params, "status"), &v, NULL, rc, &r, &err) ==
        ST_INVALID) {
        rc_error(rc, "invalid_request", "could not build the status request: %s", err.message);
        return STEP_FAIL;
    }
    switch (remote_classify(&r)) {
    case REMOTE_TRANSIENT:
        remote_error(rc, "status_unavailable", "could not check the job", &r);
        break;
    case REMOTE_GONE:
        step = gone(rc, &r);
        break;
    case REMOTE_REJECTED:
        remote_error(rc, "status_rejected", "the jobs API refused the status check", &r);
        step = STEP_FAIL;
        break;
    case REMOTE_OK:
        body = remote_json(&r);
        if (!body)
            remote_error(rc, "status_malformed", "the status answer is not JSON", &r);
        else
            step = from_state(rc, body);
        break;
    }
    json_decref(body);
    remote_response_cleanup(&r);
    return step;
}

/* An optional request at the end; a job the remote does not know needs no
 * cancel or cleanup, so 404 counts as done. */
static bool hook(struct run_ctx *rc, const char *key)
{
    const json_t *req = json_object_get(rc->type->params, key);
    const struct remote_vars v = vars_of(rc);
    struct remote_response r;
    struct error err = {0};
    enum remote_class c;

    if (!req)
        return true;
    if (remote_call(req, &v, NULL, rc, &r, &err) == ST_INVALID) {
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

static bool rest_job_cancel(struct run_ctx *rc)
{
    return hook(rc, "cancel");
}

static bool rest_job_cleanup(struct run_ctx *rc)
{
    return hook(rc, "cleanup");
}

const struct action_ops action_rest_job_ops = {
    .name = "rest_job",
    .check_params = action_rest_job_check,
    .start = rest_job_start,
    .poll = rest_job_poll,
    .cancel = rest_job_cancel,
    .cleanup = rest_job_cleanup,
};
