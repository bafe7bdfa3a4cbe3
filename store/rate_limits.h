/* store/rate_limits.h — shared rate limits (migrations/016_rate_limits.sql):
 * at most `limit` units in any window of per_ms milliseconds, across every
 * replica sharing the database. The claim of runs takes its units itself
 * (store_runs_claim with rates); the poller takes one per check here. On
 * the caller's db handle (one thread at a time). Functions return ST_OK or
 * a failure with *err filled. */
#ifndef OPSRUN_STORE_RATE_LIMITS_H
#define OPSRUN_STORE_RATE_LIMITS_H

#include "common/common.h"

struct db;

/* One configured limit (borrowed strings). */
struct rate_limit {
    const char *name;
    int limit;
    int64_t per_ms;
};

/* Takes up to want units of rl now: *taken of them; when fewer than want,
 * *next_ms is how long until the next one frees (else 0). */
enum status store_rate_take(struct db *db, const struct rate_limit *rl, int want, int *taken,
                            int64_t *next_ms, struct error *err) WUR;

/* A limit now: the units taken in its window, and when none is left, how
 * long until the next one frees (-1 while some are left). */
struct rate_status {
    int used;
    int64_t next_ms;
};
/* The status of rl[0..n) into out[0..n); reads only, takes no lock. */
enum status store_rate_status(struct db *db, const struct rate_limit *rl, size_t n,
                              struct rate_status *out, struct error *err) WUR;

#endif
