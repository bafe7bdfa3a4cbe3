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

/* Logs how requests are checked (tokens or none, and on what address):
 * at start-up, and after each reload that changed auth.tokens. */
void reload_log_auth(const struct config *cfg);

/* Gives each line of msg (a configuration error message: one line per
 * error) to line(arg, text), without its newline. */
void reload_each_line(const char *msg, void (*line)(void *arg, const char *text), void *arg);

struct reloader;

/* r->reloads is what hctx.reloads points to. live must outlive it. */
struct reloader *reloader_new(struct cfg_live *live, reload_build_fn build, const void *build_arg);
struct reloads *reloader_reloads(struct reloader *r);

/* What the server does around a swap, for the parts that cannot wait for
 * the generation to change: before, with the configuration about to be
 * put in place (the metrics learn its new label values, so that nothing it
 * starts is dropped); after (the event streams are woken, so that one whose
 * token the reload removed ends at once). Either may be NULL; both run
 * within one reload, one reload at a time. Set before the first reload. */
struct reload_hooks {
    void (*before_swap)(void *arg, const struct config *next);
    void (*after_swap)(void *arg);
    void *arg;
};
void reloader_set_hooks(struct reloader *r, const struct reload_hooks *hooks);
void reloader_free(struct reloader *r);

#endif
