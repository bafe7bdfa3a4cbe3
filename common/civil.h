/* common/civil.h — the proleptic Gregorian calendar on days since
 * 1970-01-01, for any year an int64 holds: no time zone involved. Pure and
 * thread-safe.
 *
 * Ours, not libc's: timegm and gmtime_r do this arithmetic only through a
 * struct tm (an int year, a normalising pass per call), and give a month's
 * length or a weekday only as a side effect of one; cron and the tz rules
 * walk the calendar day by day, and these are exact for every year. */
#ifndef OPSRUN_CIVIL_H
#define OPSRUN_CIVIL_H

#include "common.h"

int64_t days_from_civil(int64_t y, unsigned m, unsigned d);
void civil_from_days(int64_t days, int64_t *y, unsigned *m, unsigned *d);
bool civil_is_leap(int64_t y);
unsigned civil_month_days(int64_t y, unsigned m); /* m in 1..12 */
/* The weekday of a day, Sunday 0. */
unsigned civil_weekday(int64_t days);
/* Floor division, for days of a negative instant. */
int64_t floor_div(int64_t a, int64_t b);

#endif
