/* handlers/metrics.h — GET /metrics (handlers/metrics.c): the registry of
 * common/metrics.h, the figures the engine, the event hub and the pool
 * keep, and the database's own figures, cached for every scrape; and the
 * one completion the other handlers make (a cancel that ends a run at
 * once). Reentrant; the cache is the registry's. */
#ifndef OPSRUN_HANDLERS_METRICS_H
#define OPSRUN_HANDLERS_METRICS_H

#include "handlers/handlers.h"

/* The database figures are read at most this often, for every scrape. */
#define METRICS_DB_MAX_AGE_MS 5000

enum status handle_metrics_get(const struct hctx *hc, const struct request *rq, struct reply *rp);

/* After store_runs_cancel: a run it ended at once (queued or waiting, now
 * completed and cancelled) is a completion of this process. */
void handle_metrics_cancelled(const struct hctx *hc, const struct run *run, bool changed);

#endif
