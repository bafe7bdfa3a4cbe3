/* engine/actions/soap_job.c — a SOAP asynchronous task, followed by the
 * poller without holding a worker (docs/actions/soap_job.md).
 *
 * start: the start envelope; the task id (and any "capture" values, kept in
 * the poll state for later templates as {{state:NAME}}) read by XPath.
 * poll, one check, the decision tree of docs/actions/soap_job.md:
 *   1. in the readiness phase: one readiness check (bounded retries);
 *   2. the status envelope; status = trim + lower-case of status_xpath;
 *   3. status in complete_values -> readiness (when configured), else done;
 *   4. status in cancelled_values -> cancelled; status in error_values, or
 *      a non-empty error_xpath -> failed at once;
 *   5. row probe (optional): rows seen -> readiness/done (the fast path);
 *   6. is-running gate (optional, REST): once the task reported a completed
 *      date (after after_completed_date_s) or looks stuck (stuck_after_s):
 *      true -> keep waiting; false confirmed `confirmations` times at least
 *      min_gap_s apart -> readiness/done; a REST failure is only logged;
 *   7. otherwise wait (the backoff).
 * SOAP faults: Client/Sender faults fail the run, Server/Receiver faults
 * are transient. cleanup (and cancel) are optional requests. Answers are
 * read with libxml2 in soap_xml.c, without network access or entity
 * expansion. */
#include "engine/actions/action.h"
#include "engine/actions/params.h"
#include "engine/actions/prepare.h"
#include "engine/actions/remote_job.h"
#include "engine/actions/soap_job.h"
#include "engine/actions/soap_xml_internal.h"

#include "common/jsonptr.h"
#include "common/log.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- params ------------------------------------------------------------ */

static const struct prep_kind prep_soap;

static enum status check_xpath(const struct param *p, struct error *err)
{
    return soap_xml_check_xpath(p->v, p->path, err);
}

static enum status check_namespaces(const struct param *p, struct error *err)
{
    const char *key;
    json_t *v;

    if (!json_is_object(p->v))
        return error_set(err, ST_INVALID, "invalid \"%s\": expected an object", p->path);
    json_object_foreach((json_t *)p->v, key, v)
    {
        if (!*key || !json_is_string(v))
            return error_set(err, ST_INVALID, "invalid \"%s.%s\": expected a prefix and a URI",
                             p->path, key);
    }
    return ST_OK;
}

/* The start answer's captures share the poll state with the preparation
 * steps' captures and the action's own keys: a name may mean one thing. */
static enum status check_capture(const struct param *p, struct error *err)
{
    const char *key;
    json_t *v;
    char sub[200];

    if (!json_is_object(p->v))
        return error_set(err, ST_INVALID, "invalid \"%s\": expected an object", p->path);
    json_object_foreach((json_t *)p->v, key, v)
    {
        xsnprintf(sub, sizeof(sub), "%s.%s", p->path, key);
        if (prepare_reserved(key) || prepare_captures(p->in, key))
            return error_set(err, ST_INVALID,
                             "invalid \"%s\": the name is one of the action's own state keys "
                             "or a preparation step's capture",
                             sub);
        if (soap_xml_check_xpath(v, sub, err) != ST_OK)
            return ST_INVALID;
    }
    return ST_OK;
}

static enum status check_prepare(const struct param *p, struct error *err)
{
    return prepare_check_steps(p->v, p->path, &prep_soap, err);
}

/* The REST helpers: {"request": ..., "pointer": ..., numbers...}. */
/* clang-format off */
#define REST_HELPER_RULES                                        \
    {"request", remote_rule_request, .need = PARAM_REQUIRED},    \
    {"pointer", params_pointer, .need = PARAM_ALWAYS}
#define REST_NUMBER(key) {key, params_int, .min = 0, .max = 86400000}
/* clang-format on */

static const struct param_rule is_running_rules[] = {
    REST_HELPER_RULES,
    REST_NUMBER("confirmations"),
    REST_NUMBER("min_gap_s"),
    REST_NUMBER("after_completed_date_s"),
    REST_NUMBER("stuck_after_s"),
    {0},
};

static const struct param_rule row_probe_rules[] = {
    REST_HELPER_RULES,
    REST_NUMBER("min_runtime_s"),
    REST_NUMBER("min_interval_s"),
    {0},
};

static const struct param_rule readiness_rules[] = {
    REST_HELPER_RULES,
    REST_NUMBER("max_attempts"),
    REST_NUMBER("initial_delay_ms"),
    REST_NUMBER("max_delay_ms"),
    {0},
};

static const struct param_rule soap_job_rules[] = {
    {"start", remote_rule_request, .need = PARAM_REQUIRED},
    {"status", remote_rule_request, .need = PARAM_REQUIRED},
    {"cancel", remote_rule_request, .need = PARAM_OPTIONAL},
    {"cleanup", remote_rule_request, .need = PARAM_OPTIONAL},
    {"namespaces", check_namespaces, .need = PARAM_OPTIONAL},
    {"capture", check_capture, .need = PARAM_OPTIONAL},
    {"task_id_xpath", check_xpath, .need = PARAM_REQUIRED},
    {"status_xpath", check_xpath, .need = PARAM_REQUIRED},
    {"error_xpath", check_xpath, .need = PARAM_OPTIONAL},
    {"completed_date_xpath", check_xpath, .need = PARAM_OPTIONAL},
    {"complete_values", params_strings, .need = PARAM_OPTIONAL},
    {"error_values", params_strings, .need = PARAM_OPTIONAL},
    {"cancelled_values", params_strings, .need = PARAM_OPTIONAL},
    {"prepare", check_prepare, .need = PARAM_OPTIONAL},
    {"is_running", params_object, .members = is_running_rules},
    {"row_probe", params_object, .members = row_probe_rules},
    {"readiness", params_object, .members = readiness_rules},
    {0},
};

/* ---- the action -------------------------------------------------------- */

static const json_t *ns_of(const struct run_ctx *rc)
{
    return json_object_get(rc->type->params, "namespaces");
}

static json_int_t num(const json_t *obj, const char *key, json_int_t def)
{
    const json_t *v = json_object_get(obj, key);
    return json_is_integer(v) ? json_integer_value(v) : def;
}

/* Sends the SOAP call of params[key]; false (rc->error set) when it could
 * not be built. On true, r wants remote_response_cleanup. */
static bool soap_send(struct run_ctx *rc, const char *key, struct remote_response *r)
{
    char what_built[64];

    xsnprintf(what_built, sizeof(what_built), "the %s envelope", key);
    return remote_call_run(rc, json_object_get(rc->type->params, key), NULL, what_built, r);
}

/* Stores the value of each capture (NAME -> XPath) of doc in state; false
 * (rc->error set) when one finds nothing. */
static bool capture_values(struct run_ctx *rc, struct soap_xml *doc, const json_t *capture,
                           json_t *state, const char *what)
{
    const char *key;
    json_t *x;

    json_object_foreach((json_t *)capture, key, x)
    {
        char *val = soap_xml_text(doc, ns_of(rc), json_string_value(x));
        if (!val) {
            rc_error(rc, "soap_no_capture", "%s: the answer has no %s at %s", what, key,
                     json_string_value(x));
            return false;
        }
        if (json_object_set_new(state, key, json_string(val)) != 0) {
            rc_error(rc, "soap_no_capture", "%s: the %s at %s is not UTF-8", what, key,
                     json_string_value(x));
            free(val);
            return false;
        }
        free(val);
    }
    return true;
}

/* ---- preparation steps (engine/actions/prepare.h) ----------------------- */

static enum status prep_check_capture(const json_t *expr, const char *path, struct error *err)
{
    return soap_xml_check_xpath(expr, path, err);
}

static enum step prep_accept(struct run_ctx *rc, const struct remote_response *r,
                             const json_t *capture, json_t *state, const char *what)
{
    enum step fail;
    struct soap_xml *doc;
    bool ok;

    if (!capture && !state && remote_classify(r) == REMOTE_GONE)
        return STEP_DONE; /* a cleanup of something already gone */
    if (!(doc = soap_xml_read(rc, r, what, &fail)))
        return fail;
    ok = !capture || capture_values(rc, doc, capture, state, what);
    soap_xml_free(doc);
    return ok ? STEP_DONE : STEP_FAIL;
}

static const struct prep_kind prep_soap = {prep_check_capture, prep_accept};

/* A REST helper's JSON answer value at its pointer (NULL: no answer). */
static json_t *rest_value(struct run_ctx *rc, const json_t *helper, const char *what)
{
    const struct remote_vars v = remote_vars_of(rc);
    struct remote_response r;
    struct error err = {0};
    json_t *body = NULL, *val = NULL;
    enum status st = remote_call(json_object_get(helper, "request"), &v, NULL, rc, &r, &err);

    if (st == ST_INVALID || st == ST_UNPROCESSABLE) {
        LOG(LOG_WARN, "could not build the %s request run=%s: %s", what, rc->run->id, err.message);
        return NULL;
    }
    if (remote_classify(&r) == REMOTE_OK && (body = remote_json(&r))) {
        const json_t *x = jptr_get(body, json_string_value(json_object_get(helper, "pointer")));
        val = x ? json_incref((json_t *)x) : json_null();
    } else if (r.transport_error) {
        LOG(LOG_INFO, "%s check failed run=%s: %s", what, rc->run->id, r.error);
    } else {
        LOG(LOG_INFO, "%s check failed run=%s: HTTP %ld%s", what, rc->run->id, r.status,
            remote_classify(&r) == REMOTE_OK ? ", the answer is not JSON" : "");
    }
    json_decref(body);
    remote_response_cleanup(&r);
    return val;
}

static bool truthy(const json_t *v)
{
    return json_is_true(v) || (json_is_integer(v) && json_integer_value(v) > 0) ||
           (json_is_real(v) && json_real_value(v) > 0) ||
           (json_is_string(v) && *json_string_value(v));
}

/* The task is finished: done, with the captured values as the result. */
static enum step done(struct run_ctx *rc, json_t *readiness)
{
    rc->result = json_deep_copy(rc->poll_state);
    json_object_del(rc->result, "phase");
    json_object_del(rc->result, "readiness_attempts");
    json_object_del(rc->result, "not_running");
    json_object_del(rc->result, "not_running_at_ms");
    json_object_del(rc->result, "probe_at_ms");
    json_object_del(rc->result, "last_error");
    prepare_strip(rc->result);
    json_object_set_new(rc->result, "task_id", json_string(rc->external_id));
    if (readiness)
        json_object_set_new(rc->result, "readiness", readiness);
    return STEP_DONE;
}

/* One readiness check (bounded retries with their own backoff). */
static enum step readiness_check(struct run_ctx *rc)
{
    const json_t *rd = json_object_get(rc->type->params, "readiness");
    json_int_t attempt = num(rc->poll_state, "readiness_attempts", 0) + 1;
    json_int_t max = num(rd, "max_attempts", 6), d = num(rd, "initial_delay_ms", 1500);
    json_t *v;

    if (!rd)
        return done(rc, NULL);
    json_object_set_new(rc->poll_state, "phase", json_string("readiness"));
    json_object_set_new(rc->poll_state, "readiness_attempts", json_integer(attempt));
    v = rest_value(rc, rd, "readiness");
    if (truthy(v))
        return done(rc, v);
    json_decref(v);
    if (attempt >= max) {
        rc_error(rc, "not_ready", "the results of task %s were not ready after %lld checks",
                 rc->external_id, (long long)attempt);
        return STEP_FAIL;
    }
    for (json_int_t i = 1; i < attempt && d < num(rd, "max_delay_ms", 8000); i++)
        d *= 2;
    rc->next_delay_ms = d < num(rd, "max_delay_ms", 8000) ? d : num(rd, "max_delay_ms", 8000);
    return STEP_WAIT;
}

/* s (lower-cased) in list, compared without case; def: the default list,
 * NULL-terminated, when there is none. */
static bool in_list(const json_t *list, const char *const *def, const char *s)
{
    size_t i;
    json_t *x;

    if (!list)
        return str_in(s, def);
    json_array_foreach(list, i, x)
    {
        if (strcasecmp(json_string_value(x), s) == 0)
            return true;
    }
    return false;
}

/* The row probe's fast path: rows already there mean the task finished. */
static bool probe_sees_rows(struct run_ctx *rc)
{
    const json_t *p = json_object_get(rc->type->params, "row_probe");
    json_int_t last = num(rc->poll_state, "probe_at_ms", -1);
    json_t *v;
    bool rows;

    if (!p || rc->waited_ms < num(p, "min_runtime_s", 5) * 1000 ||
        (last >= 0 && rc->waited_ms - last < num(p, "min_interval_s", 15) * 1000))
        return false;
    json_object_set_new(rc->poll_state, "probe_at_ms", json_integer(rc->waited_ms));
    v = rest_value(rc, p, "row probe");
    rows = truthy(v);
    json_decref(v);
    return rows;
}

/* The completion gate: true once "not running" was confirmed enough times,
 * far enough apart. A REST failure changes nothing. */
static bool confirmed_not_running(struct run_ctx *rc, bool completed_date)
{
    const json_t *g = json_object_get(rc->type->params, "is_running");
    json_int_t n = num(rc->poll_state, "not_running", 0);
    json_int_t at = num(rc->poll_state, "not_running_at_ms", 0);
    json_int_t gap = num(g, "min_gap_s", 15) * 1000;
    json_t *v;

    if (!g || !(completed_date ? rc->waited_ms >= num(g, "after_completed_date_s", 5) * 1000
                               : rc->waited_ms >= num(g, "stuck_after_s", 180) * 1000))
        return false;
    if (n > 0 && rc->waited_ms - at < gap) {
        rc->next_delay_ms = gap - (rc->waited_ms - at);
        return false; /* the next confirmation must wait */
    }
    v = rest_value(rc, g, "is-running");
    if (json_is_boolean(v)) {
        n = json_is_true(v) ? 0 : n + 1;
        json_object_set_new(rc->poll_state, "not_running", json_integer(n));
        json_object_set_new(rc->poll_state, "not_running_at_ms", json_integer(rc->waited_ms));
        if (n > 0 && n < num(g, "confirmations", 2))
            rc->next_delay_ms = gap;
    }
    json_decref(v);
    return n >= num(g, "confirmations", 2);
}

enum step soap_job_started(struct run_ctx *rc, const struct remote_response *r)
{
    const json_t *cap = json_object_get(rc->type->params, "capture");
    enum step fail;
    struct soap_xml *doc;
    char *id;
    const char *key;
    json_t *x;

    if (!(doc = soap_xml_read(rc, r, "the start call failed", &fail)))
        return fail;
    id = soap_xml_text(doc, ns_of(rc),
                       json_string_value(json_object_get(rc->type->params, "task_id_xpath")));
    if (!id) {
        rc_error(rc, "start_no_task_id", "the start answer has no task id at %s",
                 json_string_value(json_object_get(rc->type->params, "task_id_xpath")));
        soap_xml_free(doc);
        return STEP_FAIL;
    }
    rc_set_external_id(rc, id);
    if (!rc->poll_state)
        rc->poll_state = json_object();
    /* a missing start capture is not fatal: it is only needed by the
     * optional helpers, which then fail like any helper call */
    json_object_foreach((json_t *)cap, key, x)
    {
        char *val = soap_xml_text(doc, ns_of(rc), json_string_value(x));
        if (val)
            json_object_set_new(rc->poll_state, key, json_string(val));
        free(val);
    }
    free(id);
    soap_xml_free(doc);
    return STEP_WAIT;
}

static enum step soap_start(struct run_ctx *rc)
{
    struct remote_response r;
    enum step step = prepare_run(rc, &prep_soap);

    if (step != STEP_DONE)
        return step;
    if (!soap_send(rc, "start", &r))
        return STEP_FAIL;
    step = soap_job_started(rc, &r);
    remote_response_cleanup(&r);
    return step;
}

static void lower(char *s)
{
    for (; s && *s; s++)
        *s = (char)tolower((unsigned char)*s);
}

/* A status answer that says neither finished nor failed is a normal check
 * (STEP_WAIT), not a failure: only a failed status call is STEP_RETRY. */
enum step soap_job_checked(struct run_ctx *rc, const struct remote_response *r)
{
    static const char *const complete_def[] = {"complete", NULL};
    static const char *const error_def[] = {"error", NULL};
    static const char *const cancelled_def[] = {"canceled", "cancelled", NULL};
    const json_t *params = rc->type->params, *cd = json_object_get(params, "completed_date_xpath");
    const json_t *ex = json_object_get(params, "error_xpath");
    enum step step, fail;
    char *status, *errmsg, *date = NULL;
    struct soap_xml *doc;

    if (!(doc = soap_xml_read(rc, r, "the status call failed", &fail)))
        return fail;
    status =
        soap_xml_text(doc, ns_of(rc), json_string_value(json_object_get(params, "status_xpath")));
    errmsg = ex ? soap_xml_text(doc, ns_of(rc), json_string_value(ex)) : NULL;
    date = cd ? soap_xml_text(doc, ns_of(rc), json_string_value(cd)) : NULL;
    soap_xml_free(doc);
    lower(status);
    json_object_set_new(rc->poll_state, "status", status ? json_string(status) : json_null());
    if (status && in_list(json_object_get(params, "complete_values"), complete_def, status)) {
        step = readiness_check(rc);
    } else if (status &&
               in_list(json_object_get(params, "cancelled_values"), cancelled_def, status)) {
        rc->outcome = OUTCOME_CANCELLED;
        rc_error(rc, "remote_cancelled", "task %s was cancelled on the remote system%s%s",
                 rc->external_id, errmsg ? ": " : "", errmsg ? errmsg : "");
        step = STEP_FAIL;
    } else if ((status && in_list(json_object_get(params, "error_values"), error_def, status)) ||
               errmsg) {
        rc_error(rc, "remote_failed", "task %s failed%s%s", rc->external_id, errmsg ? ": " : "",
                 errmsg ? errmsg : status);
        step = STEP_FAIL;
    } else if (probe_sees_rows(rc) || confirmed_not_running(rc, date != NULL)) {
        step = readiness_check(rc);
    } else {
        step = STEP_WAIT; /* still running: check again after the backoff */
    }
    free(status);
    free(errmsg);
    free(date);
    return step;
}

/* One check: a readiness check in the readiness phase, else the status
 * call. */
static enum step soap_poll(struct run_ctx *rc)
{
    const char *phase = json_string_value(json_object_get(rc->poll_state, "phase"));
    struct remote_response r;
    enum step step;

    if (phase && strcmp(phase, "readiness") == 0)
        return readiness_check(rc);
    if (!soap_send(rc, "status", &r))
        return STEP_FAIL;
    step = soap_job_checked(rc, &r);
    remote_response_cleanup(&r);
    return step;
}

static bool soap_cleanup(struct run_ctx *rc)
{
    return prepare_cleanup(rc, &prep_soap, remote_cleanup_hook);
}

const struct action_ops action_soap_job_ops = {
    .name = "soap_job",
    .params = soap_job_rules,
    .start = soap_start,
    .poll = soap_poll,
    .cancel = remote_cancel_hook,
    .cleanup = soap_cleanup,
};
