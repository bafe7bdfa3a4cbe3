/* engine/actions/action.c — the run context helpers every action uses. */
#include "engine/actions/action.h"

#include "common/runlog.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

bool rc_should_stop(const struct run_ctx *rc)
{
    int64_t now = clock_mono_ms();

    return atomic_load(rc->stop) != STOP_NONE || now >= rc->deadline_mono_ms ||
           (rc->lease_ms && now > atomic_load(rc->lease_ms));
}

bool rc_sleep(const struct run_ctx *rc, int64_t ms)
{
    int64_t until = clock_mono_ms() + ms;

    for (;;) {
        int64_t left = until - clock_mono_ms();
        struct timespec ts;
        if (rc_should_stop(rc))
            return false;
        if (left <= 0)
            return true;
        if (left > 20)
            left = 20;
        ts.tv_sec = 0;
        ts.tv_nsec = (long)left * 1000000L;
        nanosleep(&ts, NULL);
    }
}

void rc_progress(struct run_ctx *rc, int pct, const char *step)
{
    if (rc->progress_fn)
        rc->progress_fn(rc->progress_arg, pct, step);
}

bool rc_save_state(struct run_ctx *rc, const json_t *state, bool cleanup_due)
{
    if (!rc->save_state_fn) {
        rc_error(rc, "internal", "this action may only save state while starting");
        return false;
    }
    if (rc->save_state_fn(rc->progress_arg, state, cleanup_due) != ST_OK) {
        rc_error(rc, "state_unsaved", "could not record the run's state in the database");
        return false;
    }
    return true;
}

bool rc_load_state(struct run_ctx *rc, json_t **state)
{
    *state = NULL;
    if (!rc->load_state_fn) {
        rc_error(rc, "internal", "this action may only load state while starting");
        return false;
    }
    if (rc->load_state_fn(rc->progress_arg, state) != ST_OK) {
        rc_error(rc, "state_unread", "could not read the run's saved state from the database");
        return false;
    }
    return true;
}

void rc_error(struct run_ctx *rc, const char *code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    utf8_scrub(msg); /* cut in a character, jansson would refuse it */
    json_decref(rc->error);
    rc->error = json_pack("{s:s, s:s}", "code", code, "message", msg);
}

void rc_log(struct run_ctx *rc, const char *fmt, ...)
{
    va_list ap;

    if (!rc->log)
        return;
    va_start(ap, fmt);
    runlog_vsay(rc->log, fmt, ap);
    va_end(ap);
}

void rc_set_external_id(struct run_ctx *rc, const char *id)
{
    free(rc->external_id);
    rc->external_id = id ? xstrdup(id) : NULL;
}

enum run_outcome rc_done_outcome(const struct run_ctx *rc)
{
    const json_t *c = rc->summary_counts;
    json_int_t ok = json_integer_value(json_object_get(c, "succeeded"));
    json_int_t bad = json_integer_value(json_object_get(c, "failed"));

    if (rc->outcome != OUTCOME_PENDING)
        return rc->outcome;
    if ((ok > 0 && bad > 0) || json_array_size(rc->failure_summary) > 0)
        return OUTCOME_PARTIALLY_SUCCEEDED;
    return OUTCOME_SUCCEEDED;
}

void rc_cleanup(struct run_ctx *rc)
{
    json_decref(rc->result);
    json_decref(rc->error);
    json_decref(rc->summary_counts);
    json_decref(rc->failure_summary);
    json_decref(rc->poll_state);
    free(rc->external_id);
    rc->result = rc->error = rc->summary_counts = rc->failure_summary = rc->poll_state = NULL;
    rc->external_id = NULL;
}
