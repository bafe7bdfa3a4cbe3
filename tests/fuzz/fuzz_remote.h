/* tests/fuzz/fuzz_remote.h — what the drivers of the remote actions'
 * answers share (fuzz_rest_job, fuzz_soap_job, fuzz_http_answer): the
 * input read as an answer, a run of a run type loaded from a configuration,
 * and the invariants every answer must keep whatever the action.
 *
 * The input is "S F BODY...": S picks the HTTP status from a table (one of
 * them "no answer"), F is flags: bit 0 the phase (0: the start call's
 * answer, 1: a status check's), bits 1-2 the run type (one of up to four
 * of the driver's configuration), bit 3 a transfer stopped by the run's
 * stop flag, bits 4-7 the driver's own; the rest is the body, exactly as
 * received (NULs and all). Static functions only, a fresh configuration and
 * run per input. */
#ifndef OPSRUN_TESTS_FUZZ_REMOTE_H
#define OPSRUN_TESTS_FUZZ_REMOTE_H

#include "tests/fuzz/fuzz.h"

#include "engine/actions/remote.h"

#include <stdatomic.h>

#define FUZZ_PHASE_POLL 0x01u
#define FUZZ_VARIANT(flags) (((flags) >> 1) & 3u)
#define FUZZ_STOPPED 0x08u
#define FUZZ_OWN(flags) (((flags) >> 4) & 15u)

/* 0: no HTTP answer (a transport error). */
static const long fuzz_statuses[] = {200, 201, 202, 204, 0,   404, 410, 408, 429,
                                     500, 503, 400, 401, 302, 299, 199, 600, 100};

/* The URL the answer came from (effective_url). */
#define FUZZ_CALLED_URL "https://jobs.example:8443/api/v1/jobs?tenant=acme"

struct fuzz_job {
    struct config cfg;
    struct run run;
    struct run_ctx rc;
    _Atomic int stop;
    struct remote_response r;
    unsigned flags;
    bool poll;
};

/* The answer of data[2..size) with the status and flags of data[0..2);
 * false when the input is too short to say. */
static inline bool fuzz_answer(struct fuzz_job *j, const uint8_t *data, size_t size)
{
    struct remote_response *r = &j->r;

    memset(r, 0, sizeof(*r));
    if (size < 2)
        return false;
    j->flags = data[1];
    j->poll = (data[1] & FUZZ_PHASE_POLL) != 0;
    r->status = fuzz_statuses[data[0] % ARRAY_LEN(fuzz_statuses)];
    xsnprintf(r->effective_url, sizeof(r->effective_url), "%s", FUZZ_CALLED_URL);
    if (r->status == 0) {
        r->transport_error = true;
        r->stopped = (data[1] & FUZZ_STOPPED) != 0;
        r->timed_out = !r->stopped && (data[0] & 0x80) != 0;
        xsnprintf(r->error, sizeof(r->error), "GET https://jobs.example/{{external_id}}: %s",
                  r->stopped ? "Callback aborted" : "Timeout was reached");
    }
    /* as remote_call leaves it: heap, NUL-terminated, NULs possible inside */
    r->len = size - 2;
    r->body = xmalloc(r->len + 1);
    if (r->len)
        memcpy(r->body, data + 2, r->len);
    r->body[r->len] = '\0';
    return true;
}

/* A run of run type `type` of the configuration text, as the worker
 * (start) or the poller (a check: external id `job` and a poll state)
 * hands it to the action. */
static inline void fuzz_job_init(struct fuzz_job *j, const char *config, const char *type,
                                 const char *job)
{
    struct error err = {0};

    cfg_init(&j->cfg, &action_registry);
    if (cfg_load_json(&j->cfg, config, &err) != ST_OK || cfg_validate(&j->cfg, &err) != ST_OK) {
        fprintf(stderr, "fuzz: configuration: %s\n", err.message);
        abort();
    }
    memset(&j->run, 0, sizeof(j->run));
    j->run.tenant = "acme";
    j->run.id = "run-1";
    j->run.type = (char *)type;
    j->run.status = j->poll ? RUN_WAITING : RUN_RUNNING;
    j->run.attempt = 1;
    j->run.max_attempts = 3;
    j->run.input = json_pack("{s:s, s:i}", "table", "sales", "day", 22);
    atomic_store(&j->stop, STOP_NONE);
    memset(&j->rc, 0, sizeof(j->rc));
    j->rc.run = &j->run;
    j->rc.type = cfg_run_type(&j->cfg, type);
    FUZZ_CHECK(j->rc.type != NULL);
    j->rc.deadline_mono_ms = INT64_MAX;
    j->rc.stop = &j->stop;
    if (j->poll) {
        rc_set_external_id(&j->rc, job);
        j->rc.poll_state = json_object();
        j->rc.poll_count = 3;
        j->rc.waited_ms = 60000;
    }
}

static inline void fuzz_job_cleanup(struct fuzz_job *j)
{
    rc_cleanup(&j->rc);
    remote_response_cleanup(&j->r);
    json_decref(j->run.input);
    cfg_cleanup(&j->cfg);
}

/* The run's error code, or NULL. */
static inline const char *fuzz_error_code(const struct fuzz_job *j)
{
    return json_string_value(json_object_get(j->rc.error, "code"));
}

/* What every action must leave after an answer, for the worker or the
 * poller to write (codes: the error codes it may set, NULL-terminated):
 *   - a known step; an outcome only where the step allows one;
 *   - a failure (STEP_FAIL, STEP_RETRY) always has an error, {"code",
 *     "message"} with a documented code and a message under 512 bytes,
 *     never lost to an encoding problem; a success or a wait has none;
 *   - a start that waits names the job (external id) and has a poll state;
 *   - an external id is UTF-8 text (a text column, a URL placeholder);
 *   - everything written as JSON (result, error, summaries, poll state)
 *     serialises, parses back and fits jsonb; summaries have their kind. */
static inline void fuzz_job_check(const struct fuzz_job *j, enum step step,
                                  const char *const *codes)
{
    const struct run_ctx *rc = &j->rc;
    const char *msg = json_string_value(json_object_get(rc->error, "message"));

    FUZZ_CHECK(step == STEP_DONE || step == STEP_FAIL || step == STEP_RETRY || step == STEP_WAIT);
    if (step == STEP_FAIL || step == STEP_RETRY) {
        FUZZ_CHECK(json_is_object(rc->error) && msg != NULL && strlen(msg) < 512);
        if (!str_in(fuzz_error_code(j), codes))
            fprintf(stderr, "fuzz: unexpected error code \"%s\"\n", fuzz_error_code(j));
        FUZZ_CHECK(str_in(fuzz_error_code(j), codes));
    } else {
        FUZZ_CHECK(rc->error == NULL);
    }
    if (step == STEP_DONE)
        FUZZ_CHECK(rc->outcome == OUTCOME_PENDING || rc->outcome == OUTCOME_PARTIALLY_SUCCEEDED);
    else if (step == STEP_FAIL)
        FUZZ_CHECK(rc->outcome == OUTCOME_PENDING || rc->outcome == OUTCOME_CANCELLED);
    else
        FUZZ_CHECK(rc->outcome == OUTCOME_PENDING);
    if (step == STEP_WAIT)
        FUZZ_CHECK(rc->external_id && rc->external_id[0] && json_is_object(rc->poll_state));
    if (rc->external_id)
        FUZZ_CHECK(fuzz_utf8(rc->external_id));
    FUZZ_CHECK(!rc->summary_counts || json_is_object(rc->summary_counts));
    FUZZ_CHECK(!rc->failure_summary || json_is_array(rc->failure_summary));
    FUZZ_CHECK(!rc->poll_state || json_is_object(rc->poll_state));
    fuzz_check_emitted(rc->result);
    fuzz_check_emitted(rc->error);
    fuzz_check_emitted(rc->summary_counts);
    fuzz_check_emitted(rc->failure_summary);
    fuzz_check_emitted(rc->poll_state);
}

#endif
