/* engine/actions/rest_job.h — what the rest_job action makes of the
 * answers of the remote jobs API, apart from the calls that fetch them, so
 * that tests and fuzz drivers can give it any answer
 * (docs/actions/rest_job.md). rc is a run of a rest_job run type; r an
 * answer as remote_call leaves it. Each function sets rc->error,
 * rc->external_id, rc->poll_state, rc->result and the summaries as the
 * action does, and returns the step. Reentrant. */
#ifndef OPSRUN_ENGINE_ACTIONS_REST_JOB_H
#define OPSRUN_ENGINE_ACTIONS_REST_JOB_H

#include "engine/actions/action.h"
#include "engine/actions/remote.h"

/* The submit answer: STEP_WAIT with the job id at id_pointer as
 * rc->external_id (and rc->poll_state an object), STEP_RETRY for a
 * transient failure, STEP_FAIL otherwise. */
enum step rest_job_submitted(struct run_ctx *rc, const struct remote_response *r);
/* A status answer (rc->poll_state an object): STEP_WAIT while the job
 * runs, STEP_DONE or STEP_FAIL once it ended (remote_job_state,
 * remote_job_gone), STEP_RETRY for a failed check. */
enum step rest_job_checked(struct run_ctx *rc, const struct remote_response *r);

#endif
