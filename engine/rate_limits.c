/* engine/rate_limits.c — the waits and wake-up of a claim that left runs
 * behind for their rate limits (the limits themselves are the view's,
 * view.c; the claim of runs takes each type's; the units are taken in the
 * database, store/rate_limits.h). Calls nothing else in engine/. */
#include "engine/engine_internal.h"

#include "common/log.h"
#include "common/metrics.h"

#include <stdlib.h>
#include <string.h>

void rate_limits_claim_waits(struct engine *e, const struct engine_view *v, struct db *db,
                             int64_t *due_ms)
{
    struct rate_status *rs;
    struct error err = {0};

    if (v->nlimits == 0)
        return;
    rs = xcalloc(v->nlimits, sizeof(*rs));
    if (store_rate_status(db, v->limits, v->nlimits, rs, &err) != ST_OK) {
        LOG(LOG_WARN, "could not read the rate limits: %s", err.message);
        free(rs);
        return;
    }
    for (size_t i = 0; i < v->nlimits; i++) {
        if (rs[i].next_ms < 0)
            continue;
        metrics_rate_limit_wait(e->metrics, v->limits[i].name, 1);
        if (*due_ms < 0 || rs[i].next_ms < *due_ms)
            *due_ms = rs[i].next_ms;
    }
    free(rs);
}
