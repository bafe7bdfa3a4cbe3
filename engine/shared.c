/* engine/shared.c — what the engine's threads share and none of them owns:
 * how long a claim or a heartbeat protects a run, and the log lines of a
 * run's end, written alike by a worker, the completer and the poller. It
 * calls nothing else in engine/, so every engine file may call it. */
#include "engine/engine_internal.h"

#include "common/log.h"

int64_t engine_lease_ms(const struct engine *e)
{
    return ((int64_t)e->cfg->queue.orphan_after_s - e->cfg->queue.heartbeat_interval_s) * 1000;
}

const char *engine_error_code(const json_t *error)
{
    const json_t *code = error ? json_object_get(error, "code") : NULL;

    return json_is_string(code) ? json_string_value(code) : NULL;
}

void engine_log_finished(const struct run *run, enum run_outcome outcome, const char *code,
                         const char *extra)
{
    bool has_code = code && *code;

    LOG(outcome == OUTCOME_SUCCEEDED ? LOG_INFO : LOG_WARN,
        "run finished run=%s type=%s outcome=%s%s%s%s", run->id, run->type,
        run_outcome_name(outcome), has_code ? " error=" : "", has_code ? code : "", extra);
}

void engine_log_lost(const struct run *run, int64_t started_ms, const char *by)
{
    LOG(LOG_WARN, "not settling run=%s attempt=%d duration_ms=%lld by=%s: this worker lost it",
        run->id, run->attempt, (long long)(clock_mono_ms() - started_ms), by);
}
