/* handlers/alertmanager.h — POST /alerts with a Prometheus Alertmanager
 * webhook body (handlers/alertmanager.c). handle_alerts_create
 * (handlers/alerts.c) dispatches here by the body's shape; the pure parts
 * (am_*) are declared in handlers/handlers.h for the unit tests. Internal
 * to handlers/; reentrant. */
#ifndef OPSRUN_HANDLERS_ALERTMANAGER_H
#define OPSRUN_HANDLERS_ALERTMANAGER_H

#include "handlers/handlers.h"

/* On ST_OK rp holds the 200/202 answer; otherwise err says why and the
 * caller answers with reply_error. */
enum status alerts_alertmanager(const struct hctx *hc, const struct request *rq, struct reply *rp,
                                struct error *err) WUR;

#endif
