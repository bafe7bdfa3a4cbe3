/* engine/actions/remote_job.h — what the job actions (http, rest_job,
 * soap_job) share on top of their requests (remote.h): the params they read
 * alike, a job's remote state mapped to the run's outcome, and the remote
 * cancel and cleanup hooks. A job action keeps its job's id in
 * rc->external_id and what it learnt in rc->poll_state.
 *
 * Thread-safety: every function is reentrant. */
#ifndef OPSRUN_ENGINE_ACTIONS_REMOTE_JOB_H
#define OPSRUN_ENGINE_ACTIONS_REMOTE_JOB_H

#include "engine/actions/action.h"
#include "engine/actions/params.h"
#include "engine/actions/remote.h"

#include <jansson.h>

/* The rules (params.h) of the params every job action reads the same way,
 * for the end of its table: state_pointer (as state_need says) with
 * state_map (required with it), unknown_state, gone, result_pointer,
 * error_pointer, summary_counts_pointer, failure_summary_pointer, and the
 * cancel and cleanup requests (checked by hook_check). */
/* clang-format off */
#define REMOTE_JOB_RULES(state_need, hook_check)                                   \
    {"state_pointer", remote_rule_pointer, .need = (state_need)},                  \
    {"state_map", remote_rule_state_map, .need = PARAM_ALWAYS},                    \
    {"unknown_state", params_choice,                                               \
     .choices = (const char *const[]){"running", "failed", NULL}},                 \
    {"gone", params_choice,                                                        \
     .choices = (const char *const[]){"failed", "succeeded", "cancelled", NULL}},  \
    {"result_pointer", remote_rule_pointer, .need = PARAM_OPTIONAL},               \
    {"error_pointer", remote_rule_pointer, .need = PARAM_OPTIONAL},                \
    {"summary_counts_pointer", remote_rule_pointer, .need = PARAM_OPTIONAL},       \
    {"failure_summary_pointer", remote_rule_pointer, .need = PARAM_OPTIONAL},      \
    {"cancel", hook_check, .need = PARAM_OPTIONAL},                                \
    {"cleanup", hook_check, .need = PARAM_OPTIONAL}
/* clang-format on */
/* A JSON pointer into a job's answers ("such as /job/id"). */
enum status remote_rule_pointer(const struct param *p, struct error *err);
/* state_map: remote states to running, succeeded, failed or cancelled. */
enum status remote_rule_state_map(const struct param *p, struct error *err);
/* A string param of the run type, or def. */
const char *remote_param(const struct run_ctx *rc, const char *key, const char *def);
/* A job ended as mapped ("succeeded", "failed", "cancelled") in remote
 * state `state`: the result (result_pointer, or the whole body), the
 * summaries (summary_counts_pointer, failure_summary_pointer), and for a
 * failure an error with the message at error_pointer. */
enum step remote_job_ended(struct run_ctx *rc, const json_t *body, const char *mapped,
                           const char *state);
/* A job the remote no longer knows (404, 410): as params "gone" says. */
enum step remote_job_gone(struct run_ctx *rc, const struct remote_response *r);
/* The state at state_pointer through state_map (unknown_state for others):
 * STEP_WAIT while running, else as remote_job_ended; STEP_RETRY when the
 * body has no state. Records the state in rc->poll_state. */
enum step remote_job_state(struct run_ctx *rc, const json_t *body);
/* The optional request params[key] (cancel, cleanup): true when done or
 * not configured; a job the remote does not know counts as done. A request
 * without "url" goes to the external id (the http action's status URL). */
bool remote_hook(struct run_ctx *rc, const char *key);
/* The action hooks of a job action: remote_hook of "cancel", "cleanup". */
bool remote_cancel_hook(struct run_ctx *rc);
bool remote_cleanup_hook(struct run_ctx *rc);

#endif
