/* server/reload.h — reloading the configuration in place, on SIGHUP and
 * POST /admin/reload (handlers/admin.h): the file is read and checked as
 * at start-up, aside; an invalid one changes nothing; a valid one is put
 * in place whole (config/live.h), what only a restart applies keeping its
 * running value. The parts of the process that derive state from the
 * configuration (the engine's claims, schedules, notifiers, rate limits)
 * see the swap by its generation and catch up on their own.
 *
 * Thread-safe: one reload runs at a time; the others wait for it. */
#ifndef OPSRUN_SERVER_RELOAD_H
#define OPSRUN_SERVER_RELOAD_H

#include "config/config.h"
#include "config/live.h"
#include "handlers/admin.h"

/* Builds a configuration from every source as serve did at start (defaults,
 * the file, the environment, the flags) and validates it: 0, or non-zero
 * after giving each error line to line(arg, text). */
typedef int (*reload_build_fn)(const void *build_arg, struct config *cfg,
                               void (*line)(void *arg, const char *text), void *arg);

struct reloader;

/* r->reloads is what hctx.reloads points to. live must outlive it. */
struct reloader *reloader_new(struct cfg_live *live, reload_build_fn build, const void *build_arg);
struct reloads *reloader_reloads(struct reloader *r);
void reloader_free(struct reloader *r);

#endif
