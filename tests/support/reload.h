/* tests/support/reload.h — reloading a running opsrun's configuration
 * from an end-to-end test: the file rewritten in place, then POST
 * /admin/reload or SIGHUP, waited for until the new configuration runs.
 * Failures abort the test with a message. Thread-safe as harness.h is. */
#ifndef OPSRUN_TEST_RELOAD_H
#define OPSRUN_TEST_RELOAD_H

#include "harness.h"

/* Writes json to path (a file th_config_file made), replacing it. */
void th_config_rewrite(const char *path, const char *json);
/* The version of the configuration p runs (GET /healthz "config"), into
 * out (at least 32 bytes). */
void th_config_version(const struct th_proc *p, char *out, size_t cap);
/* POST /admin/reload (token may be NULL), asserting 200 and that key
 * (NULL: none) is among the "changed" keys of the answer. */
void th_reload(const struct th_proc *p, const char *token, const char *key);
/* SIGHUP to p, then waits up to 10 s until p runs a configuration of
 * another version than before. */
void th_reload_signal(const struct th_proc *p);

#endif
