/* engine/rate_limits.c — the configured rate limits as the engine uses
 * them: built once from the configuration, named by the claim of runs
 * (store_runs_claim takes each type's limit), and the waits and wake-up of
 * a claim that left runs behind for them. The units themselves are taken
 * in the database (store/rate_limits.h). Calls nothing else in engine/. */
#include "engine/engine_internal.h"

#include "common/log.h"
#include "common/metrics.h"

#include <stdlib.h>
#include <string.h>

void rate_limits_init(struct engine *e)
{
    const struct config *cfg = e->cfg;

    e->nlimits = cfg->nrate_limits;
    e->limits = xcalloc(e->nlimits ? e->nlimits : 1, sizeof(*e->limits));
    for (size_t i = 0; i < e->nlimits; i++)
        e->limits[i] = (struct rate_limit){cfg->rate_limits[i].name, cfg->rate_limits[i].limit,
                                           (int64_t)cfg->rate_limits[i].per_s * 1000};
    /* An array of pointers (see .clang-tidy). NOLINTNEXTLINE(bugprone-sizeof-expression) */
    e->type_rates = xcalloc(cfg->nrun_types ? cfg->nrun_types : 1, sizeof(*e->type_rates));
    for (size_t t = 0; t < cfg->nrun_types; t++)
        for (size_t i = 0; i < e->nlimits && cfg->run_types[t].rate_limit; i++)
            if (strcmp(e->limits[i].name, cfg->run_types[t].rate_limit) == 0)
                e->type_rates[t] = &e->limits[i];
}

void rate_limits_cleanup(struct engine *e)
{
    free(e->limits);
    free(e->type_rates);
    e->limits = NULL;
    e->type_rates = NULL;
    e->nlimits = 0;
}

const struct rate_limit *rate_limit_of(const struct engine *e, const char *type)
{
    for (size_t t = 0; e->nlimits && t < e->cfg->nrun_types; t++)
        if (strcmp(e->cfg->run_types[t].name, type) == 0)
            return e->type_rates[t];
    return NULL;
}

void rate_limits_claim_waits(struct engine *e, struct db *db, int64_t *due_ms)
{
    struct rate_status *rs;
    struct error err = {0};

    if (e->nlimits == 0)
        return;
    rs = xcalloc(e->nlimits, sizeof(*rs));
    if (store_rate_status(db, e->limits, e->nlimits, rs, &err) != ST_OK) {
        LOG(LOG_WARN, "could not read the rate limits: %s", err.message);
        free(rs);
        return;
    }
    for (size_t i = 0; i < e->nlimits; i++) {
        if (rs[i].next_ms < 0)
            continue;
        metrics_rate_limit_wait(e->metrics, e->limits[i].name, 1);
        if (*due_ms < 0 || rs[i].next_ms < *due_ms)
            *due_ms = rs[i].next_ms;
    }
    free(rs);
}
