/* tests/unit/test_cron.c — the Check suite for common/tz.c and
 * common/cron.c: the civil calendar, zone offsets against the C library's
 * reading of the same tz database (before 2037, where the files list every
 * change, and after, where the POSIX rule takes over), local times in
 * daylight-saving gaps and repeats, damaged and hostile zone files, cron
 * parsing with its exact messages, and the next slot against a brute-force
 * search, in UTC and across daylight-saving changes.
 *
 * System headers come before cron.h, ahead of common.h's poison pragma. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/civil.h"
#include "common/cron.h"
#include "common/tz.h"

static int64_t utc(int y, int mo, int d, int h, int mi, int s)
{
    return days_from_civil(y, (unsigned)mo, (unsigned)d) * 86400 + h * 3600 + mi * 60 + s;
}

static struct tz *zone(const char *name)
{
    struct tz *tz = NULL;
    struct error err = {0};

    ck_assert_msg(tz_load(name, &tz, &err) == ST_OK, "%s: %s", name, err.message);
    return tz;
}

static struct cron parse(const char *expr)
{
    struct cron c;
    struct error err = {0};

    ck_assert_msg(cron_parse(expr, &c, &err) == ST_OK, "\"%s\": %s", expr, err.message);
    return c;
}

static int64_t next(const char *expr, const struct tz *tz, int64_t after)
{
    struct cron c = parse(expr);
    int64_t out = 0;

    ck_assert_msg(cron_next(&c, tz, after, &out), "\"%s\" has no next slot", expr);
    return out;
}

static void assert_parse_error(const char *expr, const char *want)
{
    struct cron c;
    struct error err = {0};

    ck_assert_int_eq(cron_parse(expr, &c, &err), ST_INVALID);
    ck_assert_str_eq(err.message, want);
}

/* ---- the calendar ---------------------------------------------------- */

START_TEST(civil_days_round_trip)
{
    int64_t y;
    unsigned m, d;

    ck_assert_int_eq(days_from_civil(1970, 1, 1), 0);
    ck_assert_int_eq(days_from_civil(2000, 3, 1), 11017);
    ck_assert_int_eq(days_from_civil(1969, 12, 31), -1);
    for (int64_t days = -800000; days < 800000; days += 13) {
        civil_from_days(days, &y, &m, &d);
        if (days_from_civil(y, m, d) != days || m < 1 || m > 12 || d < 1 || d > 31)
            ck_abort_msg("day %lld: %lld-%u-%u", (long long)days, (long long)y, m, d);
    }
}
END_TEST

/* ---- zones against the C library ------------------------------------ */

/* The C library's zone is set once per test (each runs in its own
 * process): localtime_r reads TZ as it was at the last tzset. */
static void libc_zone(const char *name)
{
    char tzenv[128];

    snprintf(tzenv, sizeof(tzenv), ":%s", name);
    setenv("TZ", tzenv, 1);
    tzset();
}

static long libc_offset(int64_t t)
{
    time_t tt = (time_t)t;
    struct tm tm;

    if (!localtime_r(&tt, &tm))
        ck_abort_msg("localtime_r(%lld) failed", (long long)t);
    return tm.tm_gmtoff;
}

static const char *const zones[] = {
    "Europe/Berlin",    "America/New_York",  "Australia/Sydney", "Australia/Lord_Howe",
    "Europe/Dublin",    "Asia/Kolkata",      "Pacific/Chatham",  "America/St_Johns",
    "America/Santiago", "Africa/Casablanca", "Asia/Tehran",      "America/Sao_Paulo",
    "Pacific/Apia",     "America/Godthab",   "Europe/London",    "Etc/GMT+5",
};

START_TEST(offsets_match_libc)
{
    const char *name = zones[_i];
    struct tz *tz = zone(name);

    /* Every 5 days plus a few hours from 1901 to 2199: past the files'
     * explicit changes (up to 2037) into the expanded rule. */
    libc_zone(name);
    for (int64_t t = utc(1901, 12, 14, 0, 0, 0); t < utc(2199, 12, 1, 0, 0, 0);
         t += 5 * 86400 + 3 * 3600 + 7 * 60)
        if (tz_offset(tz, t) != libc_offset(t))
            ck_abort_msg("%s at %lld: %d, libc %ld", name, (long long)t, tz_offset(tz, t),
                         libc_offset(t));
    tz_free(tz);
}
END_TEST

/* Around each change libc sees in 2026 and 2150, to the second. */
START_TEST(offsets_match_libc_at_changes)
{
    const char *name = zones[_i];
    struct tz *tz = zone(name);
    int64_t years[] = {utc(2026, 1, 1, 0, 0, 0), utc(2150, 1, 1, 0, 0, 0)};

    libc_zone(name);
    for (size_t y = 0; y < 2; y++) {
        int64_t t = years[y], end = t + 366 * 86400;
        long prev = libc_offset(t);

        for (; t < end; t += 900) {
            long now = libc_offset(t);

            if (now == prev)
                continue;
            for (int64_t s = t - 900; s <= t; s++)
                ck_assert_msg(tz_offset(tz, s) == libc_offset(s), "%s at %lld", name, (long long)s);
            prev = now;
        }
    }
    tz_free(tz);
}
END_TEST

START_TEST(berlin_gap_and_repeat)
{
    struct tz *tz = zone("Europe/Berlin");
    int64_t at[2];

    /* 2026-03-29: 02:00 CET becomes 03:00 CEST at 01:00 UTC. */
    ck_assert_int_eq(tz_offset(tz, utc(2026, 3, 29, 0, 59, 59)), 3600);
    ck_assert_int_eq(tz_offset(tz, utc(2026, 3, 29, 1, 0, 0)), 7200);
    ck_assert_int_eq(tz_from_local(tz, utc(2026, 3, 29, 2, 30, 0), at), 0);
    ck_assert_int_eq(at[0], utc(2026, 3, 29, 1, 0, 0));
    ck_assert_int_eq(tz_from_local(tz, utc(2026, 3, 29, 1, 59, 59), at), 1);
    ck_assert_int_eq(at[0], utc(2026, 3, 29, 0, 59, 59));
    ck_assert_int_eq(tz_from_local(tz, utc(2026, 3, 29, 3, 0, 0), at), 1);
    ck_assert_int_eq(at[0], utc(2026, 3, 29, 1, 0, 0));
    /* 2026-10-25: 03:00 CEST becomes 02:00 CET at 01:00 UTC. */
    ck_assert_int_eq(tz_from_local(tz, utc(2026, 10, 25, 2, 30, 0), at), 2);
    ck_assert_int_eq(at[0], utc(2026, 10, 25, 0, 30, 0));
    ck_assert_int_eq(at[1], utc(2026, 10, 25, 1, 30, 0));
    ck_assert_int_eq(tz_from_local(tz, utc(2026, 10, 25, 3, 0, 0), at), 1);
    ck_assert_int_eq(at[0], utc(2026, 10, 25, 2, 0, 0));
    /* The same rule in 2100, from the POSIX footer. */
    ck_assert_int_eq(tz_from_local(tz, utc(2100, 3, 28, 2, 30, 0), at), 0);
    ck_assert_int_eq(at[0], utc(2100, 3, 28, 1, 0, 0));
    ck_assert_int_eq(tz_from_local(tz, utc(2100, 10, 31, 2, 30, 0), at), 2);
    tz_free(tz);
}
END_TEST

START_TEST(utc_needs_no_file)
{
    struct tz *tz = NULL;
    struct error err = {0};
    int64_t at[2];

    setenv("TZDIR", "/nonexistent", 1);
    ck_assert_int_eq(tz_load("UTC", &tz, &err), ST_OK);
    ck_assert_str_eq(tz_name(tz), "UTC");
    ck_assert_int_eq(tz_offset(tz, utc(2026, 6, 1, 0, 0, 0)), 0);
    ck_assert_int_eq(tz_from_local(tz, 12345, at), 1);
    ck_assert_int_eq(at[0], 12345);
    tz_free(tz);
    ck_assert_int_eq(tz_load("Europe/Berlin", &tz, &err), ST_NOT_FOUND);
    ck_assert_str_eq(err.message,
                     "unknown time zone \"Europe/Berlin\" (no file /nonexistent/Europe/Berlin)");
    unsetenv("TZDIR");
}
END_TEST

START_TEST(bad_names)
{
    static const char *const bad[] = {
        "",        "/etc/passwd",    "../etc/passwd",    "Europe/../../etc",
        "Europe/", "Europe//Berlin", "Europe/Berlin;rm", ".hidden"};
    struct tz *tz = NULL;
    struct error err = {0};

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ck_assert_int_eq(tz_load(bad[i], &tz, &err), ST_INVALID);
        ck_assert_ptr_null(tz);
    }
    ck_assert_str_eq(err.message, "\".hidden\" is not a time zone name");
    ck_assert_int_eq(tz_load("Mars/Olympus_Mons", &tz, &err), ST_NOT_FOUND);
    ck_assert_int_eq(tz_load("Europe", &tz, &err), ST_NOT_FOUND);
    ck_assert_int_eq(tz_load("zone.tab", &tz, &err), ST_INVALID);
    ck_assert_str_eq(err.message, "time zone \"zone.tab\" is not a TZif file");
    ck_assert_ptr_null(tz);
}
END_TEST

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    unsigned char *buf = malloc(1 << 16);

    ck_assert_ptr_nonnull(f);
    *n = fread(buf, 1, 1 << 16, f);
    fclose(f);
    return buf;
}

/* Every prefix of a real file, and every single-byte change of its header
 * and counts, is refused or read without touching memory it does not own
 * (the sanitizers watch). */
START_TEST(damaged_files)
{
    size_t n;
    unsigned char *data = slurp("/usr/share/zoneinfo/Europe/Berlin", &n);
    struct tz *tz = NULL;
    struct error err = {0};

    ck_assert_int_eq(tz_parse("x", data, n, &tz, &err), ST_OK);
    tz_free(tz);
    for (size_t len = 0; len < n - 1; len++) {
        tz = NULL;
        if (tz_parse("x", data, len, &tz, &err) == ST_OK || tz)
            ck_abort_msg("prefix %zu accepted", len);
    }
    for (size_t i = 4; i < 44; i++) {
        unsigned char keep = data[i];

        for (int v = 0; v < 256; v += 17) {
            data[i] = (unsigned char)v;
            tz = NULL;
            if (tz_parse("x", data, n, &tz, &err) == ST_OK)
                tz_free(tz);
        }
        data[i] = keep;
    }
    free(data);
}
END_TEST

/* ---- cron parsing ------------------------------------------------------ */

START_TEST(parse_fields)
{
    struct cron c = parse("*/15 9-17 * JAN,jul mon-FRI");

    ck_assert_uint_eq(c.sec, 1);
    ck_assert_uint_eq(c.min, 1ull << 0 | 1ull << 15 | 1ull << 30 | 1ull << 45);
    ck_assert_uint_eq(c.hour, 0x3fe00);
    ck_assert_uint_eq(c.dom, 0xfffffffe);
    ck_assert_uint_eq(c.month, 1u << 1 | 1u << 7);
    ck_assert_uint_eq(c.dow, 0x3e);
    ck_assert(c.dom_any);
    ck_assert(!c.dow_any);
    c = parse("30 */10 1 1 1 7");
    ck_assert_uint_eq(c.sec, 1ull << 30);
    ck_assert_uint_eq(c.min,
                      1ull << 0 | 1ull << 10 | 1ull << 20 | 1ull << 30 | 1ull << 40 | 1ull << 50);
    ck_assert_uint_eq(c.dow, 1); /* 7 is Sunday */
    ck_assert(!c.dom_any);
    c = parse("  5/20 0 1-31/10 * *  ");
    ck_assert_uint_eq(c.min, 1ull << 5 | 1ull << 25 | 1ull << 45);
    ck_assert_uint_eq(c.dom, 1u << 1 | 1u << 11 | 1u << 21 | 1u << 31);
    c = parse("@every 1h30m");
    ck_assert_int_eq(c.every_s, 5400);
    ck_assert_int_eq(parse("@every 1s").every_s, 1);
    ck_assert_int_eq(parse("@every 2d").every_s, 172800);
    ck_assert_uint_eq(parse("@hourly").min, 1);
    ck_assert_uint_eq(parse("@daily").hour, 1);
    ck_assert_uint_eq(parse("@weekly").dow, 1);
    ck_assert_uint_eq(parse("@monthly").dom, 2);
    ck_assert_uint_eq(parse("@yearly").month, 2);
}
END_TEST

START_TEST(parse_errors)
{
    assert_parse_error("* * * *", "expected 5 fields (minute hour day-of-month month day-of-week) "
                                  "or 6 (seconds first), got 4");
    assert_parse_error("* * * * * * * *", "expected 5 fields (minute hour day-of-month month "
                                          "day-of-week) or 6 (seconds first), got more than 7");
    assert_parse_error("", "expected 5 fields (minute hour day-of-month month day-of-week) or 6 "
                           "(seconds first), got 0");
    assert_parse_error("60 * * * *", "minute \"60\" is out of range 0-59");
    assert_parse_error("0 25 * * *", "hour \"25\" is out of range 0-23");
    assert_parse_error("0 0 0 * *", "day of month \"0\" is out of range 1-31");
    assert_parse_error("0 0 * 13 *", "month \"13\" is out of range 1-12");
    assert_parse_error("0 0 * * 8", "day of week \"8\" is out of range 0-7");
    assert_parse_error("61 * * * * *", "second \"61\" is out of range 0-59");
    assert_parse_error("0 0 * FOO *", "month \"FOO\" is not a value, a range or a step");
    assert_parse_error("0 0 * * MONDAY",
                       "day of week \"MONDAY\" is not a value, a range or a step");
    assert_parse_error("0 0 * * SUN-", "day of week \"SUN-\" has a range without an end");
    assert_parse_error("*/0 * * * *", "minute \"*/0\" needs a step of 1 or more");
    assert_parse_error("*/x * * * *", "minute \"*/x\" needs a step of 1 or more");
    assert_parse_error("10-5 * * * *", "minute \"10-5\" is a range that ends before it starts");
    assert_parse_error("1,,2 * * * *", "minute \"1,,2\" has an empty or overlong list item");
    assert_parse_error("1, * * * *", "minute \"1,\" has an empty or overlong list item");
    assert_parse_error("JAN * * * *", "minute \"JAN\" is not a value, a range or a step");
    assert_parse_error("@every", "\"@every\" is not one of @yearly, @monthly, @weekly, @daily, "
                                 "@hourly or @every <duration>");
    assert_parse_error("@every 0s", "@every needs one duration of at least 1s and at most 366d, "
                                    "such as 30s, 5m or 1h30m");
    assert_parse_error("@every 5", "@every needs one duration of at least 1s and at most 366d, "
                                   "such as 30s, 5m or 1h30m");
    assert_parse_error("@every 367d", "@every needs one duration of at least 1s and at most 366d, "
                                      "such as 30s, 5m or 1h30m");
    assert_parse_error("@every 5m 3s", "@every needs one duration of at least 1s and at most "
                                       "366d, such as 30s, 5m or 1h30m");
    assert_parse_error("@daily 5", "\"@daily 5\" is not one of @yearly, @monthly, @weekly, "
                                   "@daily, @hourly or @every <duration>");
    assert_parse_error("@reboot", "\"@reboot\" is not one of @yearly, @monthly, @weekly, @daily, "
                                  "@hourly or @every <duration>");
}
END_TEST

/* ---- the next slot ---------------------------------------------------- */

START_TEST(next_in_utc)
{
    struct tz *tz = zone("UTC");
    int64_t t0 = utc(2026, 11, 27, 10, 15, 30), out;
    struct cron never = parse("0 0 30 2 *");

    ck_assert_int_eq(next("* * * * *", tz, t0), utc(2026, 11, 27, 10, 16, 0));
    ck_assert_int_eq(next("* * * * * *", tz, t0), t0 + 1);
    ck_assert_int_eq(next("0 0 * * *", tz, t0), utc(2026, 11, 28, 0, 0, 0));
    ck_assert_int_eq(next("@monthly", tz, t0), utc(2026, 12, 1, 0, 0, 0));
    ck_assert_int_eq(next("@yearly", tz, t0), utc(2027, 1, 1, 0, 0, 0));
    ck_assert_int_eq(next("@weekly", tz, t0), utc(2026, 11, 29, 0, 0, 0)); /* a Sunday */
    ck_assert_int_eq(next("0 12 29 2 *", tz, t0), utc(2028, 2, 29, 12, 0, 0));
    /* Both day fields restricted: the 13th or a Friday. */
    ck_assert_int_eq(next("0 0 13 * FRI", tz, t0), utc(2026, 12, 4, 0, 0, 0));
    ck_assert_int_eq(next("0 0 13 * FRI", tz, utc(2026, 12, 12, 0, 0, 0)),
                     utc(2026, 12, 13, 0, 0, 0));
    /* "*" in one of them: the other alone decides. */
    ck_assert_int_eq(next("0 0 */30 * FRI", tz, t0), utc(2027, 1, 1, 0, 0, 0));
    ck_assert_int_eq(next("@every 1s", tz, t0), t0 + 1);
    ck_assert_int_eq(next("@every 7s", tz, 14), 21);
    ck_assert_int_eq(next("@every 7s", tz, 13), 14);
    ck_assert_int_eq(next("@every 7s", tz, -1), 0);
    ck_assert_int_eq(next("@every 1h", tz, t0), utc(2026, 11, 27, 11, 0, 0));
    ck_assert(!cron_next(&never, tz, t0, &out));
    tz_free(tz);
}
END_TEST

/* Random expressions against a plain search over gmtime, day by day and
 * then through every second of a matching day: the fields, the day rule
 * and the carries agree. */
static bool brute_day(const struct cron *c, int64_t day_start)
{
    time_t tt = (time_t)day_start;
    struct tm tm;
    bool dom, dow;

    gmtime_r(&tt, &tm);
    if (!(c->month >> (tm.tm_mon + 1) & 1))
        return false;
    dom = c->dom >> tm.tm_mday & 1;
    dow = c->dow >> tm.tm_wday & 1;
    return c->dom_any || c->dow_any ? dom && dow : dom || dow;
}

static bool brute_time(const struct cron *c, int64_t t)
{
    int64_t sod = t % 86400;

    return brute_day(c, t - sod) && (c->hour >> (sod / 3600) & 1) &&
           (c->min >> (sod / 60 % 60) & 1) && (c->sec >> (sod % 60) & 1);
}

/* The first matching second after `after`, or -1 within two years. */
static int64_t brute_next(const struct cron *c, int64_t after)
{
    int64_t t = after + 1, day = t - t % 86400;

    for (int i = 0; i < 731; i++, day += 86400, t = day) {
        if (!brute_day(c, day))
            continue;
        for (; t < day + 86400; t++) {
            if (!(c->hour >> (t % 86400 / 3600) & 1)) {
                t = t - t % 3600 + 3599;
                continue;
            }
            if (brute_time(c, t))
                return t;
        }
    }
    return -1;
}

static void random_field(char *out, size_t cap, int lo, int hi, int density)
{
    size_t len = 0;

    if (rand() % 4 == 0) {
        snprintf(out, cap, "*");
        return;
    }
    for (int v = lo; v <= hi; v++)
        if (rand() % 100 < density)
            len += (size_t)snprintf(out + len, cap - len, "%s%d", len ? "," : "", v);
    if (len == 0)
        snprintf(out, cap, "%d", lo + rand() % (hi - lo + 1));
}

START_TEST(next_matches_brute_force)
{
    struct tz *tz = zone("UTC");
    char f[6][256], expr[1600];

    srand(7);
    for (int i = 0; i < 300; i++) {
        bool secs = i % 3 == 0;
        struct cron c;
        struct error err = {0};
        int64_t after = utc(2026, 1, 1, 0, 0, 0) + rand() % (400 * 86400), got, want;

        random_field(f[0], sizeof(f[0]), 0, 59, 30);
        random_field(f[1], sizeof(f[1]), 0, 59, 30);
        random_field(f[2], sizeof(f[2]), 0, 23, 40);
        random_field(f[3], sizeof(f[3]), 1, 31, 40);
        random_field(f[4], sizeof(f[4]), 1, 12, 50);
        random_field(f[5], sizeof(f[5]), 0, 6, 50);
        snprintf(expr, sizeof(expr), "%s%s%s %s %s %s %s", secs ? f[0] : "", secs ? " " : "", f[1],
                 f[2], f[3], f[4], f[5]);
        ck_assert_msg(cron_parse(expr, &c, &err) == ST_OK, "%s: %s", expr, err.message);
        want = brute_next(&c, after);
        if (want < 0) {
            ck_assert_msg(!cron_next(&c, tz, after, &got) || got > after + 731 * 86400, "%s", expr);
            continue;
        }
        ck_assert_msg(cron_next(&c, tz, after, &got), "%s", expr);
        ck_assert_msg(got == want && brute_time(&c, got), "%s after %lld: %lld, want %lld", expr,
                      (long long)after, (long long)got, (long long)want);
    }
    tz_free(tz);
}
END_TEST

/* The daylight-saving rules of the contract, in Europe/Berlin. */
START_TEST(next_across_dst)
{
    struct tz *tz = zone("Europe/Berlin");

    /* 02:30 does not exist on 2026-03-29: due once at 03:00 CEST (01:00Z). */
    ck_assert_int_eq(next("30 2 * * *", tz, utc(2026, 3, 28, 1, 0, 0)), utc(2026, 3, 28, 1, 30, 0));
    ck_assert_int_eq(next("30 2 * * *", tz, utc(2026, 3, 28, 1, 30, 0)), utc(2026, 3, 29, 1, 0, 0));
    ck_assert_int_eq(next("30 2 * * *", tz, utc(2026, 3, 29, 1, 0, 0)), utc(2026, 3, 30, 0, 30, 0));
    /* Every quarter hour: the skipped hour's four slots are one. */
    ck_assert_int_eq(next("*/15 * * * *", tz, utc(2026, 3, 29, 0, 45, 0)),
                     utc(2026, 3, 29, 1, 0, 0));
    ck_assert_int_eq(next("*/15 * * * *", tz, utc(2026, 3, 29, 1, 0, 0)),
                     utc(2026, 3, 29, 1, 15, 0));
    /* 02:30 happens twice on 2026-10-25: due at the first (00:30Z) only. */
    ck_assert_int_eq(next("30 2 * * *", tz, utc(2026, 10, 24, 0, 30, 0)),
                     utc(2026, 10, 25, 0, 30, 0));
    ck_assert_int_eq(next("30 2 * * *", tz, utc(2026, 10, 25, 0, 30, 0)),
                     utc(2026, 10, 26, 1, 30, 0));
    ck_assert_int_eq(next("30 2 * * *", tz, utc(2026, 10, 25, 1, 15, 0)),
                     utc(2026, 10, 26, 1, 30, 0));
    /* Every quarter hour: the repeated hour is not run again. */
    ck_assert_int_eq(next("*/15 * * * *", tz, utc(2026, 10, 25, 0, 45, 0)),
                     utc(2026, 10, 25, 2, 0, 0));
    ck_assert_int_eq(next("0 3 * * *", tz, utc(2026, 10, 24, 23, 0, 0)),
                     utc(2026, 10, 25, 2, 0, 0));
    /* @every ignores the zone. */
    ck_assert_int_eq(next("@every 1h", tz, utc(2026, 10, 25, 0, 30, 0)),
                     utc(2026, 10, 25, 1, 0, 0));
    /* Southern hemisphere and half-hour zones. */
    tz_free(tz);
    tz = zone("Australia/Sydney"); /* 2026-10-04 02:00 AEST -> 03:00 AEDT */
    ck_assert_int_eq(next("30 2 * * *", tz, utc(2026, 10, 3, 12, 0, 0)),
                     utc(2026, 10, 3, 16, 0, 0));
    tz_free(tz);
    tz = zone("Asia/Kolkata");
    ck_assert_int_eq(next("@hourly", tz, utc(2026, 1, 1, 0, 0, 0)), utc(2026, 1, 1, 0, 30, 0));
    tz_free(tz);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cron");
    TCase *t = tcase_create("tz");
    TCase *c = tcase_create("cron");
    SRunner *r;
    int failed;

    tcase_set_timeout(t, 120);
    tcase_add_test(t, civil_days_round_trip);
    tcase_add_loop_test(t, offsets_match_libc, 0, (int)(sizeof(zones) / sizeof(zones[0])));
    tcase_add_loop_test(t, offsets_match_libc_at_changes, 0,
                        (int)(sizeof(zones) / sizeof(zones[0])));
    tcase_add_test(t, berlin_gap_and_repeat);
    tcase_add_test(t, utc_needs_no_file);
    tcase_add_test(t, bad_names);
    tcase_add_test(t, damaged_files);
    suite_add_tcase(s, t);
    tcase_set_timeout(c, 60);
    tcase_add_test(c, parse_fields);
    tcase_add_test(c, parse_errors);
    tcase_add_test(c, next_in_utc);
    tcase_add_test(c, next_matches_brute_force);
    tcase_add_test(c, next_across_dst);
    suite_add_tcase(s, c);
    r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
