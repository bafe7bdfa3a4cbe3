/* common/backoff.c — retry pauses and timer jitter (common/backoff.h). */
#include "backoff.h"

#include <limits.h>
#include <unistd.h>

int64_t backoff_next_ms(struct backoff *b)
{
    if (b->failures < INT_MAX)
        b->failures++;
    return backoff_delay_ms(b->first_ms, 2, b->max_ms, b->failures);
}

void backoff_sleep(struct backoff *b)
{
    usleep((useconds_t)(backoff_next_ms(b) * 1000));
}

void backoff_reset(struct backoff *b)
{
    b->failures = 0;
}

/* Growth stops once the cap is reached, so the loop runs at most 63 times
 * for a factor of 2 whatever n, and never overflows. */
int64_t backoff_delay_ms(int64_t first_ms, int factor, int64_t max_ms, int n)
{
    int64_t c = first_ms;

    if (first_ms <= 0 || max_ms <= 0)
        return 0;
    for (int i = 1; factor > 1 && i < n && c < max_ms; i++)
        c = c > max_ms / factor ? max_ms : c * factor;
    return c < max_ms ? c : max_ms;
}

int64_t backoff_ceiling_ms(int64_t base_ms, int64_t cap_ms, int attempt)
{
    return backoff_delay_ms(base_ms, 2, cap_ms, attempt);
}

int64_t backoff_full_jitter_ms(int64_t base_ms, int64_t cap_ms, int attempt)
{
    int64_t c = backoff_ceiling_ms(base_ms, cap_ms, attempt);

    return (int64_t)rand_below((uint64_t)c + 1);
}

/* The spread is floor(base * fraction), at most base, so the low end is
 * never negative; the high end saturates at INT64_MAX. A fraction outside
 * [0, 1] (or NaN) is clamped. */
int64_t jitter_ms(int64_t base_ms, double fraction)
{
    double f = fraction > 0 ? (fraction < 1 ? fraction : 1) : 0;
    double s;
    int64_t spread, lo, hi;

    if (base_ms <= 0)
        return 0;
    s = (double)base_ms * f;
    spread = s >= (double)base_ms ? base_ms : (int64_t)s;
    lo = base_ms - spread;
    hi = spread > INT64_MAX - base_ms ? INT64_MAX : base_ms + spread;
    return lo + (int64_t)rand_below((uint64_t)(hi - lo) + 1);
}
