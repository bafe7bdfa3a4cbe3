/* handlers/admin.h — reloading the configuration as the handlers see it:
 * POST /admin/reload, and the figures of every reload for GET /metrics and
 * GET /healthz. The server fills struct reloads (server/reload.h) and runs
 * the reload itself on SIGHUP too; run is called from any thread, and one
 * reload at a time goes through it. */
#ifndef OPSRUN_HANDLERS_ADMIN_H
#define OPSRUN_HANDLERS_ADMIN_H

#include "common/common.h"

#include <jansson.h>
#include <stdatomic.h>

struct reloads {
    /* Reads the configuration again and applies it: ST_OK and *answer
     * ({"config_version", "changed", "restart_required"}, new), or
     * ST_INVALID and *errors (the lines a start-up would print, new) when
     * nothing changed because the file is not valid, or ST_CONFLICT when
     * another reload still ran after wait_ms (-1: wait for it). why names
     * the cause in the log ("POST /admin/reload", "SIGHUP"). */
    enum status (*run)(void *arg, const char *why, int wait_ms, json_t **answer, json_t **errors);
    void *arg;
    atomic_uint_least64_t succeeded, failed;
    _Atomic int64_t last_success_ms; /* wall clock; 0: none since start */
};

#endif
