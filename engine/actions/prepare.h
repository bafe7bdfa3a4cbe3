/* engine/actions/prepare.h — preparation steps: remote calls a job action
 * (soap_job, rest_job, http) makes before its start call, each creating
 * something the run needs (a temporary table, a query definition), with
 * values captured from the answers and a cleanup request of its own.
 *
 * A run type's params:
 *   "prepare": [{"name": "create_query",
 *                "request": <a request description (remote.h)>,
 *                "capture": {"query_id": <an expression>},
 *                "cleanup": <a request description>}, ...]
 * Captures are XPath for soap_job and JSON pointers for the others (the
 * action's prep_kind says). They become top-level keys of the run's poll
 * state, so later steps, the start call, the status call, the REST helpers
 * and every cleanup find them as {{state:NAME}}.
 *
 * What was created is recorded in the run, in the poll state's "prepared"
 * array ({"step", "created", "cleaned"}), durably, twice per step: before
 * its call (created false: the object may exist if the process dies before
 * the answer is recorded) and after it (created true, with its captures).
 * The record sets the run's cleanup_due, so however the run ends (success,
 * failure, cancel, timeout, budget, a crash and a rescue on another replica)
 * the terminal hooks delete, last first, every step that was created, and
 * try those that may have been (when their cleanup needs no value the
 * answer would have given). Each deletion is marked cleaned once it worked,
 * so a retried cleanup never repeats one. A run sent back to the queue
 * keeps its record: its next attempt cleans up first, then prepares anew. */
#ifndef OPSRUN_ENGINE_ACTIONS_PREPARE_H
#define OPSRUN_ENGINE_ACTIONS_PREPARE_H

#include "engine/actions/action.h"
#include "engine/actions/remote.h"

#include <jansson.h>

/* What differs between the actions: how an answer is read. */
struct prep_kind {
    /* Checks one capture expression at configuration load. */
    enum status (*check_capture)(const json_t *expr, const char *path, struct error *err);
    /* Reads a step's answer (what names the step in errors): STEP_DONE with
     * each capture (NAME -> expression) stored into state, or the step to
     * take (STEP_FAIL, STEP_RETRY) with rc->error set. capture may be NULL
     * (a cleanup's answer). */
    enum step (*accept)(struct run_ctx *rc, const struct remote_response *r, const json_t *capture,
                        json_t *state, const char *what);
};

/* Captures by JSON pointer, answers classified by HTTP status (2xx
 * worked; a cleanup of something 404/410 is done): rest_job and http. */
extern const struct prep_kind prep_json;

/* Checks the steps of params.prepare, named path in errors: 1 to
 * PREPARE_MAX_STEPS of them, unique names, known keys, requests and
 * captures of kind k. */
#define PREPARE_MAX_STEPS 16
enum status prepare_check_steps(const json_t *steps, const char *path, const struct prep_kind *k,
                                struct error *err) WUR;
/* The rule (params.h) of "prepare" with prep_json's captures. */
enum status prepare_rule_json(const struct param *p, struct error *err);

/* start(), before the start call: cleans up what an earlier attempt of the
 * run left, then makes each step's call, recording it. STEP_DONE when every
 * step worked (rc->poll_state then holds the captures and the record, and
 * the start call may go on); otherwise the step start() returns, with
 * rc->error set. Without params.prepare: STEP_DONE at once and
 * rc->poll_state untouched. */
enum step prepare_run(struct run_ctx *rc, const struct prep_kind *k);

/* The action's cleanup() hook: the action's own "cleanup" request (main,
 * when the run has an external id; may be NULL), then the prepared steps'
 * cleanups, last first; each marked cleaned in rc->poll_state once it
 * worked. true when nothing is left to delete. */
bool prepare_cleanup(struct run_ctx *rc, const struct prep_kind *k,
                     bool (*main)(struct run_ctx *rc));

/* Whether name is one of the poll state's keys the actions keep for
 * themselves (the record, the phase, ...): no capture may take it. */
bool prepare_reserved(const char *name);
/* Whether params.prepare has a step that captures name. */
bool prepare_captures(const json_t *params, const char *name);

/* Removes the record's keys from an object built from the poll state (a
 * result), so it shows only the captures. */
void prepare_strip(json_t *obj);

#endif
