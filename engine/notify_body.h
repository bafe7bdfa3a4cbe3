/* engine/notify_body.h — notifications (docs/notifications.md): what one
 * attempt of a delivery sends and what its answer calls for (notify_body.c:
 * pure functions, unit-tested), for the notifier thread that claims due
 * deliveries from the outbox, sends them with libcurl and writes what came
 * of them (notify.c, declared in engine_internal.h, started by the engine
 * when notifiers are configured).
 *
 * The run types' rules are written to the database at the engine's start
 * (notify_rules_json); the deliveries and follow-up runs they call for are
 * created by the database, in the transaction of each transition. */
#ifndef OPSRUN_ENGINE_NOTIFY_BODY_H
#define OPSRUN_ENGINE_NOTIFY_BODY_H

#include "common/common.h"
#include "config/config.h"

#include <jansson.h>

/* The run_type_rules rows of cfg (store_rules_sync): one per run type, its
 * then rules numbered from 1 ("k") with delay_s and data filled in, its
 * approval (approval_timeout_s null for none), which its follow-ups wait
 * for as every new run of it does, and its concurrency (conc_group,
 * conc_parts, conc_max, conc_strategy; left out for none), which the
 * database applies to every new run of it, and a workflow type's compiled
 * steps ("workflow", config/workflows.h; left out for other types). A new
 * string (free). */
char *notify_rules_json(const struct config *cfg);

/* One attempt's request. */
struct notify_request {
    char *url;      /* heap; may hold secrets (from the environment): never log it */
    char *body;     /* heap */
    char **headers; /* heap "Name: value" lines, NULL-terminated */
};
void notify_request_cleanup(struct notify_request *rq);

/* The request of one delivery of event ("run.failed") of run (the run
 * object) to n, delivery_id the same on every attempt, now_s the time the
 * signature names. public_url (NULL: none) is http.public_url. ST_INVALID
 * when run is not a run object. */
enum status notify_request_build(const struct notifier *n, const char *event,
                                 const char *delivery_id, const char *run_json,
                                 const char *public_url, int64_t now_s, struct notify_request *out,
                                 struct error *err) WUR;

/* "OpsrunRunFailed" for "run.failed" (alertmanager's alertname), into out. */
void notify_alertname(const char *event, char *out, size_t n);
/* The dashboard's link to a run: "<public_url>/#/runs/<id>" (heap), or
 * NULL without a public_url. */
char *notify_run_link(const char *public_url, const char *run_id);
/* The Opsrun-Signature value of body signed with secret at t: "t=<t>,v1=<hex
 * HMAC-SHA256 of secret over "<t>.<body>">", into out (at least 80 bytes). */
void notify_signature(const char *secret, int64_t t, const char *body, char *out, size_t n);

/* What an attempt's answer calls for. */
enum notify_verdict {
    NOTIFY_DELIVERED, /* a 2xx */
    NOTIFY_RETRY,     /* anything else, or no answer: again after a pause */
    NOTIFY_GIVE_UP,   /* 410, or the last attempt failed */
};
/* status 0: no answer. attempt counts from 1. */
enum notify_verdict notify_verdict(long status, int attempt, int max_attempts);
/* The pause before the attempt after `attempt` (which failed): 1 s
 * doubling, at most 5 minutes, at least retry_after_s when the receiver
 * asked for it (Retry-After, as libcurl reads it: seconds or an HTTP date;
 * at most an hour). */
int64_t notify_retry_ms(int attempt, int64_t retry_after_s);

#endif
