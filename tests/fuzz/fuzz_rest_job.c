/* tests/fuzz/fuzz_rest_job.c — what a remote jobs API answers to the
 * rest_job action: the submit answer (the job id at id_pointer) and the
 * status answers (the state at state_pointer mapped through state_map to an
 * outcome, the result, the error message, the summaries), through
 * rest_job_submitted and rest_job_checked (engine/actions/rest_job.h),
 * remote_job.c and jsonptr. The input is as fuzz_remote.h says; the run
 * type is one of four with pointers of different shapes.
 *
 * Invariants, besides fuzz_job_check's:
 *   - the step is the one docs/actions/rest_job.md gives the HTTP status:
 *     a transient status retries (a stopped transfer fails), 404 and 410
 *     at a check end as "gone" says, another refusal fails;
 *   - a submit that waits has the id the answer holds at id_pointer;
 *   - a check records the state it read in the poll state, and ends as
 *     state_map (or unknown_state) says for that state;
 *   - a succeeded job's result is the answer's value at result_pointer
 *     (or the whole answer). */
#include "tests/fuzz/fuzz_remote.h"

#include "common/jsonptr.h"
#include "engine/actions/rest_job.h"

static const char config[] =
    "{\"run_types\": {"
    /* 0: Google Cloud Dataflow, as docs/actions/rest_job.md configures it */
    " \"df\": {\"action\": \"rest_job\", \"params\": {"
    "  \"submit\": {\"method\": \"POST\", \"url\": \"https://jobs.example/v1b3/jobs:launch\","
    "             \"body\": {\"jobName\": \"opsrun-{{run_id}}\"}},"
    "  \"id_pointer\": \"/job/id\","
    "  \"status\": {\"url\": \"https://jobs.example/v1b3/jobs/{{external_id}}\"},"
    "  \"state_pointer\": \"/currentState\","
    "  \"state_map\": {\"JOB_STATE_DONE\": \"succeeded\", \"JOB_STATE_DRAINED\": \"succeeded\","
    "   \"JOB_STATE_FAILED\": \"failed\", \"JOB_STATE_CANCELLED\": \"cancelled\","
    "   \"JOB_STATE_RUNNING\": \"running\", \"JOB_STATE_PENDING\": \"running\"},"
    "  \"unknown_state\": \"running\", \"gone\": \"failed\", \"result_pointer\": \"\","
    "  \"error_pointer\": \"/currentStateMessage\"}},"
    /* 1: summaries, the whole answer as the result, unknown states fail */
    " \"counts\": {\"action\": \"rest_job\", \"params\": {"
    "  \"submit\": {\"url\": \"https://jobs.example/jobs\", \"body\": {\"in\": \"{{input}}\"}},"
    "  \"id_pointer\": \"/id\","
    "  \"status\": {\"url\": \"https://jobs.example/jobs/{{external_id}}\"},"
    "  \"state_pointer\": \"/state\","
    "  \"state_map\": {\"done\": \"succeeded\", \"failed\": \"failed\", \"running\": \"running\","
    "   \"1\": \"succeeded\", \"cancelled\": \"cancelled\"},"
    "  \"unknown_state\": \"failed\", \"gone\": \"cancelled\","
    "  \"summary_counts_pointer\": \"/counts\", \"failure_summary_pointer\": \"/failures\","
    "  \"error_pointer\": \"/error/message\"}},"
    /* 2: pointers into arrays and escaped keys; a job gone has succeeded */
    " \"deep\": {\"action\": \"rest_job\", \"params\": {"
    "  \"submit\": {\"url\": \"https://jobs.example/jobs\"},"
    "  \"id_pointer\": \"/jobs/0/a~1b\","
    "  \"status\": {\"url\": \"https://jobs.example/jobs/{{external_id}}\"},"
    "  \"state_pointer\": \"/jobs/0/status/~0s\","
    "  \"state_map\": {\"OK\": \"succeeded\", \"KO\": \"failed\", \"\": \"running\"},"
    "  \"gone\": \"succeeded\", \"result_pointer\": \"/jobs/0/output\","
    "  \"error_pointer\": \"/jobs/1\", \"summary_counts_pointer\": \"/jobs/0/counts\"}},"
    /* 3: the whole answer is the id and the state */
    " \"bare\": {\"action\": \"rest_job\", \"params\": {"
    "  \"submit\": {\"url\": \"https://jobs.example/jobs\"},"
    "  \"id_pointer\": \"\","
    "  \"status\": {\"url\": \"https://jobs.example/jobs/{{external_id}}\"},"
    "  \"state_pointer\": \"\","
    "  \"state_map\": {\"done\": \"succeeded\", \"0\": \"failed\", \"wait\": \"running\"},"
    "  \"error_pointer\": \"\", \"failure_summary_pointer\": \"\"}}"
    "}}";

static const char *const types[] = {"df", "counts", "deep", "bare"};

static const char *const submit_codes[] = {"submit_unavailable", "submit_rejected", "submit_no_id",
                                           NULL};
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

static void check_submit(const struct fuzz_job *j, enum step step)
{
    enum remote_class c = remote_classify(&j->r);
    json_t *body = remote_json(&j->r);
    char *id = jptr_text(body, param(j, "id_pointer"));

    fuzz_job_check(j, step, submit_codes);
    if (c == REMOTE_TRANSIENT)
        FUZZ_CHECK(step == (j->r.stopped ? STEP_FAIL : STEP_RETRY));
    else if (c != REMOTE_OK)
        FUZZ_CHECK(step == STEP_FAIL);
    else if (id && *id)
        FUZZ_CHECK(step == STEP_WAIT && strcmp(j->rc.external_id, id) == 0);
    else
        FUZZ_CHECK(step == STEP_FAIL && strcmp(fuzz_error_code(j), "submit_no_id") == 0);
    free(id);
    json_decref(body);
}

/* What the state map (or unknown_state) makes of state. */
static const char *mapped(const struct fuzz_job *j, const char *state)
{
    const char *m =
        json_string_value(json_object_get(json_object_get(j->rc.type->params, "state_map"), state));
    const char *unknown = param(j, "unknown_state");

    return m ? m : unknown ? unknown : "running";
}

static void check_ended(const struct fuzz_job *j, enum step step, const json_t *body,
                        const char *state)
{
    const char *m = mapped(j, state), *rp = param(j, "result_pointer");

    if (strcmp(m, "running") == 0) {
        FUZZ_CHECK(step == STEP_WAIT);
    } else if (strcmp(m, "succeeded") == 0) {
        const json_t *want = rp ? jptr_get(body, rp) : body;
        FUZZ_CHECK(step == STEP_DONE);
        FUZZ_CHECK((!want && !j->rc.result) || json_equal(want, j->rc.result));
    } else {
        FUZZ_CHECK(step == STEP_FAIL);
        FUZZ_CHECK(strcmp(m, "cancelled") == 0 ? j->rc.outcome == OUTCOME_CANCELLED
                                               : j->rc.outcome == OUTCOME_PENDING);
    }
}

static void check_status(const struct fuzz_job *j, enum step step)
{
    enum remote_class c = remote_classify(&j->r);
    json_t *body = remote_json(&j->r);
    char *state = jptr_text(body, param(j, "state_pointer"));
    const char *gone = param(j, "gone");

    fuzz_job_check(j, step, status_codes);
    if (c == REMOTE_TRANSIENT) {
        FUZZ_CHECK(step == STEP_RETRY);
    } else if (c == REMOTE_GONE) {
        FUZZ_CHECK(step == (gone && strcmp(gone, "succeeded") == 0 ? STEP_DONE : STEP_FAIL));
    } else if (c == REMOTE_REJECTED) {
        FUZZ_CHECK(step == STEP_FAIL);
    } else if (!state) {
        FUZZ_CHECK(step == STEP_RETRY);
    } else {
        const char *kept = json_string_value(json_object_get(j->rc.poll_state, "state"));
        FUZZ_CHECK(kept && strcmp(kept, state) == 0);
        check_ended(j, step, body, state);
    }
    free(state);
    json_decref(body);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fuzz_job j;
    enum step step;

    if (!fuzz_answer(&j, data, size)) {
        remote_response_cleanup(&j.r);
        return 0;
    }
    fuzz_job_init(&j, config, types[FUZZ_VARIANT(j.flags)], "job-1");
    if (j.poll) {
        step = rest_job_checked(&j.rc, &j.r);
        check_status(&j, step);
    } else {
        step = rest_job_submitted(&j.rc, &j.r);
        check_submit(&j, step);
    }
    fuzz_job_cleanup(&j);
    return 0;
}
