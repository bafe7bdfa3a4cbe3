/* engine/actions/soap_job.h — what the soap_job action makes of the
 * answers to its start and status envelopes, apart from the calls that
 * fetch them, so that tests and fuzz drivers can give it any answer
 * (docs/actions/soap_job.md). rc is a run of a soap_job run type; r an
 * answer as remote_call leaves it. Each function sets rc->error,
 * rc->outcome, rc->external_id, rc->poll_state and rc->result as the action
 * does, and returns the step. The readiness check, row probe and
 * is-running gate, when the run type has them, still make their own calls.
 * Reentrant. */
#ifndef OPSRUN_ENGINE_ACTIONS_SOAP_JOB_H
#define OPSRUN_ENGINE_ACTIONS_SOAP_JOB_H

#include "engine/actions/action.h"
#include "engine/actions/remote.h"

/* The start answer: STEP_WAIT with the task id at task_id_xpath as
 * rc->external_id and the captures in rc->poll_state; a failure as
 * soap_xml_read says, or STEP_FAIL without a task id. */
enum step soap_job_started(struct run_ctx *rc, const struct remote_response *r);
/* A status answer (rc->poll_state an object), steps 2 to 7 of the decision
 * tree in soap_job.c: STEP_WAIT while the task runs, STEP_DONE or STEP_WAIT
 * (readiness) once it completed, STEP_FAIL once it failed or was cancelled
 * (rc->outcome OUTCOME_CANCELLED), STEP_RETRY for a failed call. */
enum step soap_job_checked(struct run_ctx *rc, const struct remote_response *r);

#endif
