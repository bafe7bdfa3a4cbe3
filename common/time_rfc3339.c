/* common/time_rfc3339.c — RFC 3339 parsing and formatting
 * (common/time_rfc3339.h).
 *
 * System headers come before time_rfc3339.h, ahead of common.h's poison
 * pragma. */
#include <stdio.h>

#include "time_rfc3339.h"

#include "civil.h"

#define US_PER_SEC INT64_C(1000000)
#define SEC_PER_DAY INT64_C(86400)
/* 0000-01-01T00:00:00Z and 9999-12-31T23:59:59.999999Z: what four year
 * digits can say. */
#define RFC3339_MIN_US (INT64_C(-62167219200) * US_PER_SEC)
#define RFC3339_MAX_US (INT64_C(253402300800) * US_PER_SEC - 1)

struct rfc3339 {
    int year, month, day;
    int hour, minute, second;
    int64_t frac_us;
    int offset_s;
};

/* Reads exactly n ASCII digits. */
static bool scan_digits(const char **p, int n, int *out)
{
    int v = 0;

    for (int i = 0; i < n; i++) {
        char c = (*p)[i];

        if (c < '0' || c > '9')
            return false;
        v = v * 10 + (c - '0');
    }
    *p += n;
    *out = v;
    return true;
}

static bool scan_char(const char **p, char a, char b)
{
    if (**p != a && **p != b)
        return false;
    (*p)++;
    return true;
}

static bool scan_date(const char **p, struct rfc3339 *t)
{
    if (!scan_digits(p, 4, &t->year) || !scan_char(p, '-', '-') || !scan_digits(p, 2, &t->month) ||
        !scan_char(p, '-', '-') || !scan_digits(p, 2, &t->day))
        return false;
    return t->month >= 1 && t->month <= 12 && t->day >= 1 &&
           t->day <= (int)civil_month_days(t->year, (unsigned)t->month);
}

/* HH:MM:SS; a leap second (60) is refused. */
static bool scan_clock(const char **p, struct rfc3339 *t)
{
    if (!scan_digits(p, 2, &t->hour) || !scan_char(p, ':', ':') || !scan_digits(p, 2, &t->minute) ||
        !scan_char(p, ':', ':') || !scan_digits(p, 2, &t->second))
        return false;
    return t->hour <= 23 && t->minute <= 59 && t->second <= 59;
}

/* Optional ".d{1,9}", truncated to microseconds. */
static bool scan_fraction(const char **p, struct rfc3339 *t)
{
    int n = 0;

    t->frac_us = 0;
    if (**p != '.')
        return true;
    (*p)++;
    for (; (*p)[n] >= '0' && (*p)[n] <= '9'; n++) {
        if (n >= 9)
            return false;
        if (n < 6)
            t->frac_us = t->frac_us * 10 + ((*p)[n] - '0');
    }
    for (int i = n; i < 6; i++)
        t->frac_us *= 10;
    *p += n;
    return n > 0;
}

/* "Z", "z" or ±HH:MM; "-00:00" (offset unknown) is read as UTC. */
static bool scan_zone(const char **p, struct rfc3339 *t)
{
    char sign = **p;
    int h, m;

    t->offset_s = 0;
    if (scan_char(p, 'Z', 'z'))
        return true;
    if (!scan_char(p, '+', '-') || !scan_digits(p, 2, &h) || !scan_char(p, ':', ':') ||
        !scan_digits(p, 2, &m) || h > 23 || m > 59)
        return false;
    t->offset_s = (sign == '-' ? -1 : 1) * (h * 3600 + m * 60);
    return true;
}

bool time_parse_rfc3339(const char *s, int64_t *us_out)
{
    struct rfc3339 t;
    int64_t secs;

    if (!s || !scan_date(&s, &t) || !scan_char(&s, 'T', 't') || !scan_clock(&s, &t) ||
        !scan_fraction(&s, &t) || !scan_zone(&s, &t) || *s != '\0')
        return false;
    secs = days_from_civil(t.year, (unsigned)t.month, (unsigned)t.day) * SEC_PER_DAY +
           (int64_t)t.hour * 3600 + (int64_t)t.minute * 60 + t.second - t.offset_s;
    *us_out = secs * US_PER_SEC + t.frac_us;
    return true;
}

/* Values outside years 0000..9999 are clamped to that range, so the output
 * is always valid RFC 3339 and reads back with time_parse_rfc3339. */
void time_format_rfc3339(int64_t us, char *out, size_t cap)
{
    int64_t secs, sod, year;
    unsigned month, day;

    if (us < RFC3339_MIN_US)
        us = RFC3339_MIN_US;
    if (us > RFC3339_MAX_US)
        us = RFC3339_MAX_US;
    secs = floor_div(us, US_PER_SEC);
    sod = secs - floor_div(secs, SEC_PER_DAY) * SEC_PER_DAY;
    civil_from_days(floor_div(secs, SEC_PER_DAY), &year, &month, &day);
    xsnprintf(out, cap, "%04lld-%02u-%02uT%02lld:%02lld:%02lld.%06lldZ", (long long)year, month,
              day, (long long)(sod / 3600), (long long)(sod / 60 % 60), (long long)(sod % 60),
              (long long)(us - secs * US_PER_SEC));
}

bool time_in_range(int64_t us)
{
    return us >= INT64_C(-62135596800) * US_PER_SEC && us <= RFC3339_MAX_US;
}
