/* engine/actions/prepare.c — preparation steps and their cleanup
 * (engine/actions/prepare.h). */
#include "engine/actions/prepare.h"

#include "engine/actions/params.h"

#include "common/jsonptr.h"
#include "common/log.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* Keys of the poll state the actions use themselves: no capture may take
 * them. */
static const char *const reserved[] = {"prepared",
                                       "cleanup_done",
                                       "phase",
                                       "status",
                                       "state",
                                       "last_error",
                                       "readiness_attempts",
                                       "not_running",
                                       "not_running_at_ms",
                                       "probe_at_ms",
                                       "status_url",
                                       NULL};

/* ---- params ------------------------------------------------------------ */

static bool name_ok(const char *s)
{
    size_t n = s ? strlen(s) : 0;

    if (n == 0 || n > 64)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-')
            return false;
    return true;
}

static enum status check_capture(const json_t *cap, const char *path, const struct prep_kind *k,
                                 struct error *err)
{
    const char *key;
    json_t *v;
    char sub[256];

    if (!cap)
        return ST_OK;
    if (!json_is_object(cap))
        return error_set(err, ST_INVALID, "invalid \"%s\": expected an object", path);
    json_object_foreach((json_t *)cap, key, v)
    {
        xsnprintf(sub, sizeof(sub), "%s.%s", path, key);
        if (!name_ok(key) || str_in(key, reserved))
            return error_set(err, ST_INVALID,
                             "invalid \"%s\": a capture name is letters, digits, _ and - and "
                             "none of the action's own state keys",
                             sub);
        if (k->check_capture(v, sub, err) != ST_OK)
            return ST_INVALID;
    }
    return ST_OK;
}

static enum status check_name(const struct param *p, struct error *err)
{
    if (!name_ok(json_string_value(p->v)))
        return error_set(err, ST_INVALID,
                         "invalid \"%s\": expected a name of letters, digits, _ and -", p->path);
    return ST_OK;
}

/* A step; its captures are the action's kind's, checked apart. */
static const struct param_rule step_rules[] = {
    {"name", check_name, .need = PARAM_ALWAYS},
    {"request", remote_rule_request, .need = PARAM_REQUIRED},
    {"cleanup", remote_rule_request, .need = PARAM_OPTIONAL},
    {"capture", NULL, .need = PARAM_OPTIONAL},
    {0},
};

static enum status check_step(const json_t *st, const char *path, const struct prep_kind *k,
                              struct error *err)
{
    char sub[256];

    if (!json_is_object(st))
        return error_set(err, ST_INVALID, "invalid \"%s\": expected an object", path);
    if (params_check(st, step_rules, path, err) != ST_OK)
        return ST_INVALID;
    xsnprintf(sub, sizeof(sub), "%s.capture", path);
    return check_capture(json_object_get(st, "capture"), sub, k, err);
}

enum status prepare_check_steps(const json_t *steps, const char *path, const struct prep_kind *k,
                                struct error *err)
{
    size_t i;
    json_t *st;
    char sub[256];

    if (!json_is_array(steps) || json_array_size(steps) == 0 ||
        json_array_size(steps) > PREPARE_MAX_STEPS)
        return error_set(err, ST_INVALID, "invalid \"%s\": expected an array of 1 to %d steps",
                         path, PREPARE_MAX_STEPS);
    json_array_foreach(steps, i, st)
    {
        xsnprintf(sub, sizeof(sub), "%s[%zu]", path, i);
        if (check_step(st, sub, k, err) != ST_OK)
            return ST_INVALID;
        for (size_t j = 0; j < i; j++) {
            const char *a = json_string_value(json_object_get(st, "name"));
            const char *b = json_string_value(json_object_get(json_array_get(steps, j), "name"));
            if (strcmp(a, b) == 0)
                return error_set(err, ST_INVALID, "invalid \"%s.name\": \"%s\" is used twice", sub,
                                 a);
        }
    }
    return ST_OK;
}

/* ---- cleanup ------------------------------------------------------------ */

static const json_t *find_step(const struct run_ctx *rc, const char *name)
{
    const json_t *steps = json_object_get(rc->type->params, "prepare");
    size_t i;
    json_t *st;

    json_array_foreach(steps, i, st)
    {
        if (name && strcmp(json_string_value(json_object_get(st, "name")), name) == 0)
            return st;
    }
    return NULL;
}

/* One step's cleanup: true when it is done (or there was nothing to do). A
 * step that may not have been created counts as done whatever the answer:
 * nothing known is left behind. */
static bool clean_step(struct run_ctx *rc, const struct prep_kind *k, json_t *entry)
{
    const char *name = json_string_value(json_object_get(entry, "step"));
    const json_t *st = find_step(rc, name), *req = json_object_get(st, "cleanup");
    bool created = json_is_true(json_object_get(entry, "created"));
    const struct remote_vars v = remote_vars_of(rc);
    struct remote_response r;
    struct error err = {0};
    enum status st_call;
    char what[128];
    bool ok;

    if (!st) {
        LOG(LOG_WARN, "cannot clean up step %s of run=%s: the run type has no such step any more",
            name ? name : "?", rc->run->id);
        return false;
    }
    if (!req)
        return true;
    st_call = remote_call(req, &v, NULL, rc, &r, &err);
    if (st_call == ST_INVALID || st_call == ST_UNPROCESSABLE) {
        if (created)
            LOG(LOG_WARN, "could not build the cleanup of step %s run=%s: %s", name, rc->run->id,
                err.message);
        else
            LOG(LOG_INFO, "no cleanup of step %s run=%s: it was never confirmed (%s)", name,
                rc->run->id, err.message);
        return !created;
    }
    xsnprintf(what, sizeof(what), "the cleanup of step %s failed", name);
    ok = k->accept(rc, &r, NULL, NULL, what) == STEP_DONE;
    remote_response_cleanup(&r);
    if (!ok && created)
        LOG(LOG_WARN, "cleanup failed run=%s step=%s: %s", rc->run->id, name,
            json_string_value(json_object_get(rc->error, "message")));
    else if (!ok)
        LOG(LOG_INFO, "cleanup of a step that was never confirmed did not work run=%s step=%s",
            rc->run->id, name);
    else
        LOG(LOG_INFO, "cleaned up run=%s step=%s", rc->run->id, name);
    return ok || !created;
}

bool prepare_cleanup(struct run_ctx *rc, const struct prep_kind *k,
                     bool (*main)(struct run_ctx *rc))
{
    json_t *rec = json_object_get(rc->poll_state, "prepared");
    bool ok = true;

    /* (a NULL poll state records nothing: the set is then a no-op) */
    if (main && rc->external_id && !json_is_true(json_object_get(rc->poll_state, "cleanup_done"))) {
        if (main(rc))
            json_object_set_new(rc->poll_state, "cleanup_done", json_true());
        else
            ok = false;
    }
    for (size_t i = json_array_size(rec); i-- > 0;) {
        json_t *entry = json_array_get(rec, i);
        if (json_is_true(json_object_get(entry, "cleaned")))
            continue;
        if (clean_step(rc, k, entry))
            json_object_set_new(entry, "cleaned", json_true());
        else
            ok = false;
    }
    return ok;
}

bool prepare_reserved(const char *name)
{
    return str_in(name, reserved);
}

bool prepare_captures(const json_t *params, const char *name)
{
    size_t i;
    json_t *st;

    json_array_foreach(json_object_get(params, "prepare"), i, st)
    {
        if (json_object_get(json_object_get(st, "capture"), name))
            return true;
    }
    return false;
}

void prepare_strip(json_t *obj)
{
    json_object_del(obj, "prepared");
    json_object_del(obj, "cleanup_done");
}

/* ---- the steps ---------------------------------------------------------- */

/* What an earlier attempt created and left: deleted before this attempt
 * prepares again, and the record of that saved. */
static enum step clean_leftovers(struct run_ctx *rc, const struct prep_kind *k, json_t *old)
{
    bool ok;

    json_decref(rc->poll_state);
    rc->poll_state = old;
    LOG(LOG_INFO, "cleaning up what an earlier attempt prepared run=%s attempt=%d", rc->run->id,
        rc->run->attempt);
    ok = prepare_cleanup(rc, k, NULL);
    if (!rc_save_state(rc, rc->poll_state, !ok))
        return STEP_RETRY;
    if (!ok) {
        rc_error(rc, "cleanup_failed",
                 "could not clean up what an earlier attempt of the run prepared");
        return STEP_RETRY;
    }
    return STEP_DONE;
}

static enum step prepare_step(struct run_ctx *rc, const struct prep_kind *k, const json_t *st,
                              json_t *rec)
{
    const char *name = json_string_value(json_object_get(st, "name"));
    json_t *entry = json_pack("{s:s, s:b}", "step", name, "created", 0);
    struct remote_response r;
    char what[128];
    enum step step;

    if (rc_should_stop(rc)) {
        json_decref(entry);
        rc_error(rc, "stopped", "stopped before the %s step", name);
        return STEP_FAIL;
    }
    rc_progress(rc, 0, name);
    json_array_append_new(rec, entry);
    if (!rc_save_state(rc, rc->poll_state, true))
        return STEP_RETRY;
    xsnprintf(what, sizeof(what), "the request of the %s step", name);
    if (!remote_call_run(rc, json_object_get(st, "request"), NULL, what, &r))
        return STEP_FAIL;
    xsnprintf(what, sizeof(what), "the %s step failed", name);
    step = k->accept(rc, &r, json_object_get(st, "capture"), rc->poll_state, what);
    if (r.stopped && step != STEP_DONE)
        step = STEP_FAIL;
    remote_response_cleanup(&r);
    if (step != STEP_DONE)
        return step;
    json_object_set_new(entry, "created", json_true());
    return rc_save_state(rc, rc->poll_state, true) ? STEP_DONE : STEP_RETRY;
}

enum step prepare_run(struct run_ctx *rc, const struct prep_kind *k)
{
    const json_t *steps = json_object_get(rc->type->params, "prepare");
    json_t *old = NULL, *rec, *st;
    enum step step;
    size_t i;

    if (!steps)
        return STEP_DONE;
    if (!rc_load_state(rc, &old))
        return STEP_RETRY;
    if (old && (step = clean_leftovers(rc, k, old)) != STEP_DONE)
        return step;
    json_decref(rc->poll_state);
    rc->poll_state = json_object();
    rec = json_array();
    json_object_set_new(rc->poll_state, "prepared", rec);
    json_array_foreach(steps, i, st)
    {
        if ((step = prepare_step(rc, k, st, rec)) != STEP_DONE)
            return step;
    }
    return STEP_DONE;
}

/* ---- JSON answers (rest_job, http) ---------------------------------------- */

static enum status json_check_capture(const json_t *expr, const char *path, struct error *err)
{
    if (!json_is_string(expr) || !jptr_valid(json_string_value(expr)))
        return error_set(err, ST_INVALID, "invalid \"%s\": expected a JSON pointer", path);
    return ST_OK;
}

static enum step json_accept(struct run_ctx *rc, const struct remote_response *r,
                             const json_t *capture, json_t *state, const char *what)
{
    const char *key;
    json_t *body, *x;
    enum step step = STEP_DONE;

    switch (remote_classify(r)) {
    case REMOTE_TRANSIENT:
        remote_error(rc, "prepare_unavailable", what, r);
        return STEP_RETRY;
    case REMOTE_GONE:
        if (!capture && !state)
            return STEP_DONE; /* a cleanup of something already gone */
        /* fall through */
    case REMOTE_REJECTED:
        remote_error(rc, "prepare_rejected", what, r);
        return STEP_FAIL;
    case REMOTE_OK:
        break;
    }
    if (!capture || json_object_size(capture) == 0)
        return STEP_DONE;
    body = remote_json(r);
    json_object_foreach((json_t *)capture, key, x)
    {
        char *val = jptr_text(body, json_string_value(x));
        if (!val) {
            rc_error(rc, "prepare_no_capture", "%s: the answer has no value at \"%s\" for %s", what,
                     json_string_value(x), key);
            step = STEP_FAIL;
            break;
        }
        if (json_object_set_new(state, key, json_string(val)) != 0) {
            rc_error(rc, "prepare_no_capture", "%s: the value at \"%s\" for %s is not UTF-8", what,
                     json_string_value(x), key);
            free(val);
            step = STEP_FAIL;
            break;
        }
        free(val);
    }
    json_decref(body);
    return step;
}

const struct prep_kind prep_json = {json_check_capture, json_accept};

enum status prepare_rule_json(const struct param *p, struct error *err)
{
    return prepare_check_steps(p->v, p->path, &prep_json, err);
}
