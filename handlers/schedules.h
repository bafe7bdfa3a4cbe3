/* handlers/schedules.h — what handlers/schedules.c gives GET /metrics
 * (handlers/metrics.c) besides its routes, which are in handlers.h.
 * Reentrant. */
#ifndef OPSRUN_HANDLERS_SCHEDULES_H
#define OPSRUN_HANDLERS_SCHEDULES_H

#include "handlers/handlers.h"

/* The schedules' next fire and the rate limits' use (handlers/schedules.c),
 * read from the database at each scrape when any are configured. */
struct dynbuf;
enum status schedules_put_metrics(const struct hctx *hc, struct dynbuf *out) WUR;

#endif
