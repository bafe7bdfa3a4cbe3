/* engine/actions/http.c — one HTTP call per run, with the asynchronous
 * request-reply pattern (docs/actions/http.md).
 *
 * start: the configured request. 2xx: succeeded, the JSON answer the
 * result. 202 with a status URL (the Location header, or the answer's
 * status_url_pointer): the run waits, external_id the status URL, and the
 * poller GETs it: 202 (or a state mapped to running) keeps waiting, honouring
 * Retry-After; another 2xx ends it (through state_map when state_pointer
 * is set). Timeouts, connection errors, 408, 429 and 5xx are transient (a
 * retry at the start, a failed check afterwards); 404 and 410 while polling
 * are "gone"; other 4xx fail. */
#include "engine/actions/action.h"
#include "engine/actions/http.h"
#include "engine/actions/params.h"
#include "engine/actions/prepare.h"
#include "engine/actions/remote_job.h"

#include "common/jsonptr.h"

#include <stdlib.h>
#include <string.h>

/* ---- params ------------------------------------------------------------ */

/* Without "url" the status, cancel and cleanup requests go to the status
 * URL of the 202 answer; state_pointer is optional (without it any 2xx
 * but 202 ends the run). */
static const struct param_rule action_http_rules[] = {
    {"request", remote_rule_request, .need = PARAM_REQUIRED},
    {"status", remote_rule_job_request, .need = PARAM_OPTIONAL},
    {"status_any_host", params_bool, .need = PARAM_OPTIONAL},
    {"prepare", prepare_rule_json, .need = PARAM_OPTIONAL},
    REMOTE_JOB_RULES(PARAM_OPTIONAL, remote_rule_job_request),
    {"status_url_pointer", NULL, .need = PARAM_OPTIONAL}, /* not checked at load */
    {0},
};

/* ---- the action -------------------------------------------------------- */

/* The text of an answer that is not JSON, as a JSON string that the
 * run's result (jsonb) can hold: a NUL byte, which jsonb refuses, and a
 * byte that is not UTF-8, which JSON cannot hold, become '?'. */
static json_t *answer_text(const struct remote_response *r)
{
    char *s = xmalloc(r->len + 1);
    json_t *text;

    for (size_t i = 0; i < r->len; i++)
        s[i] = r->body[i] ? r->body[i] : '?';
    s[r->len] = '\0';
    utf8_scrub(s);
    text = json_string(s);
    free(s);
    return text;
}

/* The answer's JSON as the result (non-JSON: its text). */
static json_t *answer_result(const struct run_ctx *rc, const struct remote_response *r)
{
    json_t *body = remote_json(r), *res;

    if (!body)
        return r->len ? json_pack("{s:i, s:o}", "status", (int)r->status, "body", answer_text(r))
                      : json_null();
    if (remote_param(rc, "result_pointer", NULL)) {
        const json_t *x = jptr_get(body, remote_param(rc, "result_pointer", ""));
        res = x ? json_deep_copy(x) : json_null();
        json_decref(body);
        return res;
    }
    return body;
}

/* A finished answer (2xx but 202): ended through the state map when one is
 * configured, else succeeded. */
static enum step finished(struct run_ctx *rc, const struct remote_response *r)
{
    json_t *body;
    enum step step;

    if (!remote_param(rc, "state_pointer", NULL)) {
        rc->result = answer_result(rc, r);
        return STEP_DONE;
    }
    body = remote_json(r);
    if (!body) {
        remote_error(rc, "status_malformed", "the answer is not JSON", r);
        return STEP_RETRY;
    }
    step = remote_job_state(rc, body);
    json_decref(body);
    return step;
}

/* url with every byte a URL may not hold as it is (a control character, a
 * space, DEL, a byte outside ASCII) percent-encoded: a status URL becomes
 * the run's external id, which PostgreSQL stores as UTF-8 text. Heap. */
static char *url_encoded(const char *url)
{
    char *out = xmalloc(strlen(url) * 3 + 1);
    size_t n = 0;

    for (const unsigned char *p = (const unsigned char *)url; *p; p++)
        if (*p <= 0x20 || *p >= 0x7f)
            n += xsnprintf(out + n, 4, "%%%02X", *p);
        else
            out[n++] = (char)*p;
    out[n] = '\0';
    return out;
}

/* 202: where to look next, from the status URL pointer or Location,
 * resolved against the URL called; NULL with *bad set when the answer names
 * one that is not an http or https URL. */
static char *status_url(const struct run_ctx *rc, const struct remote_response *r,
                        const char *request_url, bool *bad)
{
    const char *ptr = remote_param(rc, "status_url_pointer", NULL);
    char *found = NULL, *abs;

    if (ptr) {
        json_t *body = remote_json(r);
        found = jptr_text(body, ptr);
        json_decref(body);
    } else if (r->location[0]) {
        found = xstrdup(r->location);
    }
    abs = found ? remote_url_resolve(request_url, found) : NULL;
    *bad = found && !abs;
    free(found);
    found = abs ? url_encoded(abs) : NULL;
    free(abs);
    return found;
}

/* Retry-After in seconds, as the next check's delay. */
static void retry_after(struct run_ctx *rc, const struct remote_response *r)
{
    if (r->retry_after_s > 0)
        rc->next_delay_ms = (int64_t)r->retry_after_s * 1000;
}

enum step action_http_started(struct run_ctx *rc, const struct remote_response *r)
{
    enum step step = STEP_FAIL;
    bool bad = false;
    char *url;

    switch (remote_classify(r)) {
    case REMOTE_TRANSIENT:
        remote_error(rc, "unavailable", "the call failed", r);
        step = r->stopped ? STEP_FAIL : STEP_RETRY;
        break;
    case REMOTE_GONE:
    case REMOTE_REJECTED:
        remote_error(rc, "rejected", "the call was refused", r);
        break;
    case REMOTE_OK:
        url = r->status == 202 ? status_url(rc, r, r->effective_url, &bad) : NULL;
        if (bad) {
            rc_error(rc, "unsafe_status_url",
                     "the 202 answer names a status URL that is not an http or https URL");
            break;
        }
        /* the status, cancel and cleanup requests carry the configured
         * headers (credentials too): only to the host that was called,
         * unless the run type says otherwise */
        if (url && !json_is_true(json_object_get(rc->type->params, "status_any_host")) &&
            !remote_same_authority(r->effective_url, url)) {
            rc_error(rc, "unsafe_status_url",
                     "the 202 answer names a status URL on another host; set "
                     "\"status_any_host\": true in the run type to follow it");
            free(url);
            url = NULL;
            step = STEP_FAIL;
            break;
        }
        if (url) {
            rc_set_external_id(rc, url);
            if (!rc->poll_state)
                rc->poll_state = json_object();
            json_object_set_new(rc->poll_state, "status_url", json_string(url));
            retry_after(rc, r);
            step = STEP_WAIT;
        } else if ((step = finished(rc, r)) == STEP_WAIT) {
            /* a state mapped to running, and nothing to check it at */
            rc_error(rc, "no_status_url",
                     "the answer's state says the job is still running, but the answer is no "
                     "202 with a status URL to check it at");
            step = STEP_FAIL;
        }
        free(url);
        break;
    }
    return step;
}

static enum step action_http_start(struct run_ctx *rc)
{
    const json_t *req = json_object_get(rc->type->params, "request");
    struct remote_response r;
    enum step step = prepare_run(rc, &prep_json);

    if (step != STEP_DONE)
        return step;
    if (!remote_call_run(rc, req, NULL, "the request", &r))
        return STEP_FAIL;
    step = action_http_started(rc, &r);
    remote_response_cleanup(&r);
    return step;
}

enum step action_http_checked(struct run_ctx *rc, const struct remote_response *r)
{
    enum step step = STEP_RETRY;

    switch (remote_classify(r)) {
    case REMOTE_TRANSIENT:
        remote_error(rc, "status_unavailable", "could not check the status", r);
        break;
    case REMOTE_GONE:
        step = remote_job_gone(rc, r);
        break;
    case REMOTE_REJECTED:
        remote_error(rc, "status_rejected", "the status check was refused", r);
        step = STEP_FAIL;
        break;
    case REMOTE_OK:
        if (r->status == 202) {
            retry_after(rc, r);
            step = STEP_WAIT;
        } else {
            step = finished(rc, r);
        }
        break;
    }
    return step;
}

static enum step action_http_poll(struct run_ctx *rc)
{
    const json_t *req = json_object_get(rc->type->params, "status");
    json_t *get = req ? NULL : json_object(); /* no "status": a plain GET */
    struct remote_response r;
    enum step step;
    bool sent = remote_call_run(rc, req ? req : get, rc->external_id, "the status request", &r);

    json_decref(get);
    if (!sent)
        return STEP_FAIL;
    step = action_http_checked(rc, &r);
    remote_response_cleanup(&r);
    return step;
}

static bool action_http_cleanup(struct run_ctx *rc)
{
    return prepare_cleanup(rc, &prep_json, remote_cleanup_hook);
}

const struct action_ops action_http_ops = {
    .name = "http",
    .params = action_http_rules,
    .start = action_http_start,
    .poll = action_http_poll,
    .cancel = remote_cancel_hook,
    .cleanup = action_http_cleanup,
};
