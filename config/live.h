/* config/live.h — the running configuration, replaced whole on a reload.
 *
 * A reload builds a new struct config aside, checks it, and puts it in
 * place with one pointer swap (cfg_live_swap): a reader sees the old
 * configuration or the new one, never half of each. Readers hold the
 * configuration they use for as long as they use it (a request, a claim,
 * an attempt, a poll check) and release it after: cfg_live_hold takes a
 * reference under a lock held for a pointer's copy and a count, so a
 * reader never waits for a reload's reading and checking of the file, and
 * an old configuration is freed when its last holder lets it go.
 *
 * Each configuration has a version: the first 12 hex digits of the SHA-256
 * of its effective settings but the listen address (cfg_version), the same
 * on every replica that runs the same settings, so replicas that disagree show on /healthz.
 *
 * Thread-safe: every function may be called from any thread. */
#ifndef OPSRUN_CONFIG_LIVE_H
#define OPSRUN_CONFIG_LIVE_H

#include "config/config.h"

#include <jansson.h>

struct cfg_live;

#define CFG_VERSION_LEN 12

/* The version of cfg's effective settings, CFG_VERSION_LEN hex digits, in
 * out (CFG_VERSION_LEN + 1 bytes). Where each setting came from (file,
 * environment, flag), the file's path and the listen address (which tell
 * replicas apart) do not count; token hashes and templates do. */
void cfg_version(const struct config *cfg, char *out);

/* A holder whose current configuration is first (heap, initialised with
 * cfg_init; taken: freed with cfg_cleanup once nobody holds it). */
struct cfg_live *cfg_live_new(struct config *first);
/* Frees the holder and its current configuration. Every held one must
 * have been released. NULL is fine. */
void cfg_live_free(struct cfg_live *l);

/* The current configuration, held until cfg_live_release. l NULL: NULL. */
const struct config *cfg_live_hold(struct cfg_live *l);
void cfg_live_release(struct cfg_live *l, const struct config *cfg);

/* Puts next (heap, taken) in place; the one before is freed once its last
 * holder releases it. Its version and loaded_at are set here. */
void cfg_live_swap(struct cfg_live *l, struct config *next);

/* The current configuration's version and when it was put in place (wall
 * clock, ms), without holding it. */
void cfg_live_version(struct cfg_live *l, char *out, int64_t *loaded_at_ms);
/* A number that changes at every swap: a reader that cached something
 * derived from the configuration compares it to know it is stale. */
uint64_t cfg_live_generation(struct cfg_live *l);

/* What a reload of next over cur would change. The keys that differ go
 * into *changed (new array, dotted paths: "queue.workers",
 * "run_types.etl", "auth.tokens"); those only a restart applies (the
 * listen address, the database, pool and thread sizes ...) go also into
 * *restart_required, and get back in next the value they have in cur, so
 * that a reloaded configuration never differs from the running one in
 * what it cannot apply. */
void cfg_reload_diff(const struct config *cur, struct config *next, json_t **changed,
                     json_t **restart_required);
/* Whether key is one of keys (an array of strings, as cfg_reload_diff's). */
bool cfg_keys_listed(const json_t *keys, const char *key);

#endif
