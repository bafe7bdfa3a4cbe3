/* handlers/alertmanager.h — POST /alerts with a Prometheus Alertmanager
 * webhook body (handlers/alertmanager.c). handle_alerts_create
 * (handlers/alerts.c) dispatches here by the body's shape; the pure parts
 * (am_*) are exposed for the unit tests. Internal to handlers/;
 * reentrant. */
#ifndef OPSRUN_HANDLERS_ALERTMANAGER_H
#define OPSRUN_HANDLERS_ALERTMANAGER_H

#include "handlers/handlers.h"

/* On ST_OK rp holds the 200/202 answer; otherwise err says why and the
 * caller answers with reply_error. */
enum status alerts_alertmanager(const struct hctx *hc, const struct request *rq, struct reply *rp,
                                struct error *err) WUR;

/* ---- the Alertmanager webhook body (pure parts) ---- */

struct am_envelope {
    const char *version, *receiver, *status, *external_url, *group_key;
    const json_t *alerts; /* array */
    long long truncated;  /* truncatedAlerts, 0 when absent */
};
/* Validates the envelope; a malformed one is ST_INVALID with the fields. */
enum status am_parse_envelope(const json_t *body, struct am_envelope *out, struct error *err) WUR;

struct am_alert {
    bool resolved;
    const json_t *labels;    /* object of strings */
    const char *alertname;   /* labels.alertname, or "" */
    const char *fingerprint; /* NULL when the sender gave none */
};
/* Validates alerts[index]; field names in err are "alerts[N].labels" etc. */
enum status am_parse_alert(const json_t *alert, size_t index, struct am_alert *out,
                           struct error *err) WUR;
/* The alert's identity: its fingerprint when present, otherwise a hash of
 * its labels (canonical JSON), within tenant and run type. ST_INTERNAL when
 * the labels' canonical JSON cannot be built (jansson could not allocate). */
enum status am_alert_identity(const char *tenant, const char *type, const struct am_alert *a,
                              char out[65], struct error *err) WUR;
/* The run's input: the whole alert, plus the group's receiver, externalURL
 * and groupKey. New reference. */
json_t *am_alert_input(const struct am_envelope *env, const json_t *alert);

#endif
