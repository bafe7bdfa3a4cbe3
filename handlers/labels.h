/* handlers/labels.h — an alert's labels as both bodies of POST /alerts
 * take them (the generic one, handlers/alerts.c, and the Alertmanager
 * webhook's, handlers/alertmanager.c): an object of strings. Internal to
 * handlers/; reentrant. */
#ifndef OPSRUN_HANDLERS_LABELS_H
#define OPSRUN_HANDLERS_LABELS_H

#include "common/common.h"

#include <jansson.h>

/* labels when it is an object of strings; otherwise NULL, with the problem
 * added to err under field. NULL (absent) gives NULL and no problem. */
const json_t *labels_check(const json_t *labels, const char *field, struct error *err);

#endif
