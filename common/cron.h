/* common/cron.h — schedule expressions and their next due instant.
 *
 * An expression is five cron fields (minute hour day-of-month month
 * day-of-week), or six with a seconds field first; each field is "*", a
 * value, a range "a-b", a step "*\/n", "a-b/n" or "a/n", or a list of those
 * separated by commas; months and weekdays also by name (JAN, MON). Day of
 * week 0 and 7 are Sunday. When both day fields are restricted (neither
 * starts with "*"), a day matches either, as in Vixie cron. Shorthands:
 * @yearly (@annually), @monthly, @weekly, @daily (@midnight), @hourly, and
 * @every <duration> ("30s", "5m", "1h30m", "1d"; at least 1 s).
 *
 * A parsed expression is a plain value: copy it, share it between threads. */
#ifndef OPSRUN_CRON_H
#define OPSRUN_CRON_H

#include "common.h"
#include "tz.h"

#define CRON_EVERY_MAX_S (366 * 86400)

struct cron {
    uint64_t sec, min; /* bit i: second (minute) i */
    uint32_t hour;     /* bit i: hour i */
    uint32_t dom;      /* bit d: day of month d, 1..31 */
    uint16_t month;    /* bit m: month m, 1..12 */
    uint8_t dow;       /* bit d: weekday d, Sunday 0 */
    bool dom_any;      /* the day-of-month field starts with "*" */
    bool dow_any;      /* the day-of-week field starts with "*" */
    int64_t every_s;   /* @every: the period in seconds; 0 otherwise */
};

/* ST_INVALID with a message naming the field and the bad text, e.g.
 * `hour "25" is out of range 0-23`. */
enum status cron_parse(const char *expr, struct cron *out, struct error *err) WUR;

/* The first slot strictly after the instant `after` (seconds since the
 * epoch) into *out. @every slots are the multiples of the period counted
 * from the epoch, so every replica computes the same ones. Calendar
 * expressions are read as local times of tz: a local time the clock skips
 * (spring forward) is due once, at the first instant after the jump; one
 * that happens twice (fall back) is due once, at its first occurrence.
 * False when the fields match no date within ten years (30 February). */
bool cron_next(const struct cron *c, const struct tz *tz, int64_t after, int64_t *out);

#endif
