/* engine/actions/http.h — what the http action makes of the answers to its
 * request and to its status checks, apart from the calls that fetch them,
 * so that tests and fuzz drivers can give it any answer
 * (docs/actions/http.md). rc is a run of an http run type; r an answer as
 * remote_call leaves it (effective_url the URL called, location its
 * Location header). Each function sets rc->error, rc->outcome,
 * rc->external_id, rc->poll_state, rc->result, the summaries and
 * rc->next_delay_ms as the action does, and returns the step. Reentrant. */
#ifndef OPSRUN_ENGINE_ACTIONS_HTTP_H
#define OPSRUN_ENGINE_ACTIONS_HTTP_H

#include "engine/actions/action.h"
#include "engine/actions/remote.h"

/* The request's answer: STEP_DONE with the result, or STEP_WAIT after a
 * 202 with a status URL on the host called (or any host with
 * status_any_host) as rc->external_id; STEP_RETRY for a transient failure,
 * STEP_FAIL otherwise; with state_pointer, a finished answer goes through
 * the state map (remote_job_state). */
enum step action_http_started(struct run_ctx *rc, const struct remote_response *r);
/* A status check's answer (rc->poll_state an object): STEP_WAIT on 202,
 * else as action_http_started's finished answer; 404 and 410 as "gone"
 * says; STEP_RETRY for a failed check. */
enum step action_http_checked(struct run_ctx *rc, const struct remote_response *r);

#endif
