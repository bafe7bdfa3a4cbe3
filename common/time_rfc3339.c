/* common/time_rfc3339.c — RFC 3339 parsing and formatting
 * (common/time_rfc3339.h).
 *
 * System headers come before time_rfc3339.h, ahead of common.h's poison
 * pragma. */
#include <stdio.h>

#include "time_rfc3339.h"

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

/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
 * days_from_civil); no time zone database involved. */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
    int64_t era;
    unsigned yoe, doy, doe;

    y -= m <= 2;
    era = (y >= 0 ? y : y - 399) / 400;
    yoe = (unsigned)(y - era * 400);
    doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

/* The inverse of days_from_civil. */
static void civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d)
{
    int64_t era;
    unsigned doe, yoe, doy, mp;

    z += 719468;
    era = (z >= 0 ? z : z - 146096) / 146097;
    doe = (unsigned)(z - era * 146097);
    yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    mp = (5 * doy + 2) / 153;
    *d = doy - (153 * mp + 2) / 5 + 1;
    *m = mp < 10 ? mp + 3 : mp - 9;
    *y = (int64_t)yoe + era * 400 + (*m <= 2);
}

static int days_in_month(int y, int m)
{
    static const int mdays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;

    return m == 2 && leap ? 29 : mdays[m - 1];
}

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
           t->day <= days_in_month(t->year, t->month);
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

static int64_t floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;

    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
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
