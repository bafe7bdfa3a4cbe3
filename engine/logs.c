/* engine/logs.c — runs' log lines as the engine writes them (docs/logs.md):
 * the log of an attempt or a check, with the run type's secrets, and its
 * chunks written, counted and rung (engine_internal.h). */
#include "engine/engine_internal.h"

#include "common/log.h"
#include "common/metrics.h"
#include "engine/actions/remote.h"
#include "store/logs.h"

#include <stdlib.h>
#include <string.h>

/* The log of an attempt of run on this process (secrets: the {{env:...}}
 * values of its type's params). */
struct runlog *engine_log_new(const struct engine *e, const struct run *run,
                              const struct run_type *rt)
{
    const struct runlog_limits lim = {(size_t)e->cfg->logs.max_line_bytes,
                                      (size_t)e->cfg->logs.max_bytes_per_attempt};
    char **secrets = NULL;
    size_t n = rt ? remote_env_values(rt->params, &secrets) : 0;
    struct runlog *l = runlog_new(&lim, run->attempt, (const char *const *)secrets, n);

    for (size_t i = 0; i < n; i++)
        free(secrets[i]);
    free(secrets);
    return l;
}

enum status engine_log_chunk_write(struct engine *e, struct db *db, const char *tenant,
                                   const char *run_id, int attempt, const struct runlog_chunk *c)
{
    const struct log_chunk chunk = {tenant, run_id, attempt, c->nlines, c->dropped, c->lines_json};
    struct error err = {0};
    enum status st = store_logs_append(db, &chunk, NULL, &err);

    if (st == ST_NOT_FOUND)
        return ST_OK; /* the run is gone: so are its lines */
    if (st != ST_OK) {
        LOG(LOG_WARN, "could not write log lines run=%s lines=%d: %s", run_id, c->nlines,
            err.message);
        return st;
    }
    metrics_log_lines(e->metrics, c->nlines, c->dropped);
    doorbell_ring_logs(e, run_id);
    return ST_OK;
}

enum status engine_log_write(struct engine *e, struct db *db, struct runlog *l, const char *tenant,
                             const char *run_id, bool final, int max_chunks)
{
    struct runlog_chunk c;
    enum status st = ST_OK;

    while (st == ST_OK && max_chunks-- != 0 && runlog_take(l, LOG_CHUNK_MAX, final, &c)) {
        st = engine_log_chunk_write(e, db, tenant, run_id, runlog_attempt(l), &c);
        if (st != ST_OK)
            runlog_restore(l, &c);
        runlog_chunk_cleanup(&c);
        final = false;
    }
    return st;
}

char *engine_log_external_id(const char *id)
{
    return id && strstr(id, "://") ? remote_url_for_log(id) : xstrdup(id ? id : "");
}

void engine_log_mask_error(struct runlog *l, struct run_ctx *rc)
{
    const char *msg = json_string_value(json_object_get(rc->error, "message"));
    char *masked;

    if (!l || !msg)
        return;
    masked = runlog_mask(l, msg);
    if (strcmp(masked, msg) != 0)
        json_object_set_new(rc->error, "message", json_string(masked));
    free(masked);
}
