/* common/backoff.h — how long to wait before trying again: exponential
 * backoff, with or without full jitter, and the jitter of periodic timers.
 * Thread-safe (random draws use a thread-local generator); a struct backoff
 * belongs to one thread at a time. */
#ifndef OPSRUN_BACKOFF_H
#define OPSRUN_BACKOFF_H

#include "common.h"

/* The pause of a retry loop: first_ms after the first failure, doubling
 * after each one that follows, never above max_ms. Set the two bounds and
 * leave failures 0:
 *     struct backoff pause = {.first_ms = RETRY_FIRST_MS, .max_ms = RETRY_MAX_MS};
 * then, after each failure, backoff_next_ms (or backoff_sleep), and after a
 * success backoff_reset. */
struct backoff {
    int64_t first_ms, max_ms;
    int failures; /* since the last reset */
};
/* Counts one more failure; returns the pause it calls for. */
int64_t backoff_next_ms(struct backoff *b);
/* backoff_next_ms, then sleeps that long. */
void backoff_sleep(struct backoff *b);
void backoff_reset(struct backoff *b);

/* The delay after failure n (n >= 1) of a schedule that starts at first_ms
 * and grows by factor per failure: min(max_ms, first_ms * factor^(n-1)).
 * 0 when first_ms or max_ms is not positive; n < 1 counts as 1; a factor
 * below 2 never grows. No overflow for any n. */
int64_t backoff_delay_ms(int64_t first_ms, int factor, int64_t max_ms, int n);

/* Retry delay before attempt (attempt >= 1 is the attempt that just failed):
 * full jitter, uniform in [0, min(cap_ms, base_ms * 2^(attempt-1))].
 * Never negative, never above cap_ms, no overflow for any attempt. */
int64_t backoff_full_jitter_ms(int64_t base_ms, int64_t cap_ms, int attempt);
/* The upper bound that backoff_full_jitter_ms draws under (for tests):
 * backoff_delay_ms with factor 2. */
int64_t backoff_ceiling_ms(int64_t base_ms, int64_t cap_ms, int attempt);
/* base ± fraction (0 <= fraction <= 1), uniform; used for poll intervals. */
int64_t jitter_ms(int64_t base_ms, double fraction);

#endif
