/* tests/fuzz/fuzz_http_answer.c — what a server answers to the http
 * action: the answer to its request (the result, or a 202 with a status
 * URL from the Location header or the body) and the answers to its status
 * checks (202 keeps waiting, a state mapped to an outcome), through
 * action_http_started and action_http_checked (engine/actions/http.h). The
 * input is as fuzz_remote.h says; flag bit 4 gives the answer a Location
 * header: then the body starts with it, up to the first NUL (the header
 * line as libcurl hands it, so no line break in it). The run type is one
 * of four: a plain call, a state map with a status URL in the body,
 * status_any_host, and a Location without a state map.
 *
 * Invariants, besides fuzz_job_check's:
 *   - a start that waits names an absolute http(s) URL, kept as the poll
 *     state's status_url, on the host called unless status_any_host: the
 *     credentials of the status request never go to another host;
 *   - a 2xx without a state map succeeds with the answer as the result:
 *     its JSON, or {"status", "body"} with the body's text (never lost);
 *   - a state map ends the run as it says, as in fuzz_rest_job;
 *   - a check answered 202 waits; 404 and 410 end as "gone" says. */
#include "tests/fuzz/fuzz_remote.h"

#include "common/jsonptr.h"
#include "engine/actions/http.h"

#define FUZZ_LOCATION 0x1u
/* A waiting run's status URL, its external id. */
#define STATUS_URL "https://jobs.example:8443/api/v1/jobs/7/status"

static const char config[] =
    "{\"run_types\": {"
    /* 0: one call; its answer is the result */
    " \"call\": {\"action\": \"http\", \"params\": {"
    "  \"request\": {\"method\": \"POST\", \"url\": \"https://jobs.example:8443/api/v1/jobs\","
    "              \"body\": {\"run\": \"{{run_id}}\"}}}},"
    /* 1: the status URL in the body, a state map, a result inside */
    " \"mapped\": {\"action\": \"http\", \"params\": {"
    "  \"request\": {\"url\": \"https://jobs.example:8443/api/v1/jobs\"},"
    "  \"status_url_pointer\": \"/links/status\","
    "  \"state_pointer\": \"/status\","
    "  \"state_map\": {\"done\": \"succeeded\", \"error\": \"failed\", \"busy\": \"running\","
    "                \"stopped\": \"cancelled\"},"
    "  \"result_pointer\": \"/result\", \"error_pointer\": \"/error/message\","
    "  \"summary_counts_pointer\": \"/counts\", \"failure_summary_pointer\": \"/failures\"}},"
    /* 2: a status URL on any host; a job gone has succeeded */
    " \"anyhost\": {\"action\": \"http\", \"params\": {"
    "  \"request\": {\"url\": \"https://jobs.example:8443/api/v1/jobs\"},"
    "  \"status_any_host\": true, \"gone\": \"succeeded\","
    "  \"status\": {\"headers\": {\"Accept\": \"application/json\"}}}},"
    /* 3: Location only, a part of the answer as the result */
    " \"located\": {\"action\": \"http\", \"params\": {"
    "  \"request\": {\"url\": \"https://jobs.example:8443/api/v1/jobs\"},"
    "  \"result_pointer\": \"/data\", \"gone\": \"cancelled\"}}"
    "}}";

static const char *const types[] = {"call", "mapped", "anyhost", "located"};

static const char *const start_codes[] = {
    "unavailable",      "rejected",      "unsafe_status_url", "no_status_url",
    "status_malformed", "remote_failed", "remote_cancelled",  NULL};
static const char *const status_codes[] = {"status_unavailable",
                                           "status_rejected",
                                           "status_malformed",
                                           "job_gone",
                                           "remote_failed",
                                           "remote_cancelled",
                                           NULL};

static const char *param(const struct fuzz_job *j, const char *key)
{
    return json_string_value(json_object_get(j->rc.type->params, key));
}

/* The Location header out of the body's start, as fuzz_http_answer's
 * header says. */
static void take_location(struct fuzz_job *j)
{
    struct remote_response *r = &j->r;
    size_t n = strnlen(r->body, r->len);

    if (!(FUZZ_OWN(j->flags) & FUZZ_LOCATION))
        return;
    xsnprintf(r->location, sizeof(r->location), "%.*s", (int)n, r->body);
    for (char *p = r->location; *p; p++)
        if (*p == '\r' || *p == '\n')
            *p = ' ';
    n = n < r->len ? n + 1 : n;
    memmove(r->body, r->body + n, r->len - n + 1);
    r->len -= n;
}

/* The status URL waits on: absolute, and where the request went unless
 * the run type allows any host. */
static void check_waiting(const struct fuzz_job *j)
{
    const char *url = j->rc.external_id;
    const char *kept = json_string_value(json_object_get(j->rc.poll_state, "status_url"));

    FUZZ_CHECK(strncmp(url, "http://", 7) == 0 || strncmp(url, "https://", 8) == 0);
    FUZZ_CHECK(kept && strcmp(kept, url) == 0);
    if (!json_is_true(json_object_get(j->rc.type->params, "status_any_host")))
        FUZZ_CHECK(remote_same_authority(FUZZ_CALLED_URL, url));
}

/* A finished answer without a state map: the result is the answer. */
static void check_result(const struct fuzz_job *j)
{
    json_t *body = remote_json(&j->r);
    const char *rp = param(j, "result_pointer");
    const json_t *res = j->rc.result;

    FUZZ_CHECK(res != NULL);
    if (body && rp) {
        const json_t *want = jptr_get(body, rp);
        FUZZ_CHECK(want ? json_equal(want, res) : json_is_null(res));
    } else if (body) {
        FUZZ_CHECK(json_equal(body, res));
    } else if (j->r.len) {
        FUZZ_CHECK(json_integer_value(json_object_get(res, "status")) == j->r.status);
        FUZZ_CHECK(json_is_string(json_object_get(res, "body")));
    } else {
        FUZZ_CHECK(json_is_null(res));
    }
    json_decref(body);
}

static void check_finished(const struct fuzz_job *j, enum step step)
{
    if (!param(j, "state_pointer")) {
        FUZZ_CHECK(step == STEP_DONE);
        check_result(j);
    } else if (step == STEP_RETRY) {
        FUZZ_CHECK(strcmp(fuzz_error_code(j), "status_malformed") == 0);
    }
}

static void check_start(const struct fuzz_job *j, enum step step)
{
    enum remote_class c = remote_classify(&j->r);

    fuzz_job_check(j, step, start_codes);
    if (c == REMOTE_TRANSIENT)
        FUZZ_CHECK(step == (j->r.stopped ? STEP_FAIL : STEP_RETRY));
    else if (c != REMOTE_OK)
        FUZZ_CHECK(step == STEP_FAIL && strcmp(fuzz_error_code(j), "rejected") == 0);
    else if (step == STEP_WAIT)
        check_waiting(j);
    else if (!fuzz_error_code(j) || strcmp(fuzz_error_code(j), "unsafe_status_url") != 0)
        check_finished(j, step);
}

static void check_status(const struct fuzz_job *j, enum step step)
{
    enum remote_class c = remote_classify(&j->r);
    const char *gone = param(j, "gone");

    fuzz_job_check(j, step, status_codes);
    if (c == REMOTE_TRANSIENT)
        FUZZ_CHECK(step == STEP_RETRY);
    else if (c == REMOTE_GONE)
        FUZZ_CHECK(step == (gone && strcmp(gone, "succeeded") == 0 ? STEP_DONE : STEP_FAIL));
    else if (c == REMOTE_REJECTED)
        FUZZ_CHECK(step == STEP_FAIL);
    else if (j->r.status == 202)
        FUZZ_CHECK(step == STEP_WAIT && strcmp(j->rc.external_id, STATUS_URL) == 0);
    else
        check_finished(j, step);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fuzz_job j;
    enum step step;

    if (!fuzz_answer(&j, data, size)) {
        remote_response_cleanup(&j.r);
        return 0;
    }
    take_location(&j);
    fuzz_job_init(&j, config, types[FUZZ_VARIANT(j.flags)], STATUS_URL);
    if (j.poll) {
        step = action_http_checked(&j.rc, &j.r);
        check_status(&j, step);
    } else {
        step = action_http_started(&j.rc, &j.r);
        check_start(&j, step);
    }
    fuzz_job_cleanup(&j);
    return 0;
}
