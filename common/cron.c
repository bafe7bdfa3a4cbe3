/* common/cron.c — cron expressions: parsing into bit sets, and the search
 * for the next matching local time, resolved to an instant through the
 * schedule's time zone. */
#include "cron.h"

#include "civil.h"

#include <ctype.h>

#define CRON_SEARCH_DAYS (366 * 10)
/* A local time is tried at most this often before we give up: the clock set
 * back an hour with a schedule due every second needs 3,600. */
#define CRON_SEARCH_TRIES 100000

struct field_spec {
    const char *name;
    int lo, hi;
    const char *const *names; /* names of lo, lo+1, ...; NULL when none */
};

static const char *const month_names[] = {"JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL",
                                          "AUG", "SEP", "OCT", "NOV", "DEC", NULL};
static const char *const dow_names[] = {"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT", NULL};

static const struct field_spec fields[6] = {
    {"second", 0, 59, NULL},       {"minute", 0, 59, NULL},       {"hour", 0, 23, NULL},
    {"day of month", 1, 31, NULL}, {"month", 1, 12, month_names}, {"day of week", 0, 7, dow_names},
};

/* A number or a name of the field at *p; advances *p. */
static bool field_value(const struct field_spec *f, const char **p, int *out)
{
    const char *s = *p;
    int v = 0;

    if (isdigit((unsigned char)*s)) {
        for (; isdigit((unsigned char)*s) && v < 1000; s++)
            v = v * 10 + (*s - '0');
        *p = s;
        *out = v;
        return true;
    }
    for (int i = 0; f->names && f->names[i]; i++) {
        if (strncasecmp(s, f->names[i], 3) == 0 && !isalpha((unsigned char)s[3])) {
            *p = s + 3;
            *out = f->lo + i;
            return true;
        }
    }
    return false;
}

static enum status field_bad(const struct field_spec *f, const char *text, const char *why,
                             struct error *err)
{
    return error_set(err, ST_INVALID, "%s \"%.40s\" %s", f->name, text, why);
}

/* One item of a list: "*", "a", "a-b", each optionally "/step". */
static enum status field_item(const struct field_spec *f, const char *item, uint64_t *bits,
                              struct error *err)
{
    const char *p = item;
    int a = f->lo, b = f->hi, step = 1;
    bool single = false;

    if (*p == '*') {
        p++;
    } else {
        if (!field_value(f, &p, &a))
            return field_bad(f, item, "is not a value, a range or a step", err);
        b = a;
        single = true;
        if (*p == '-') {
            p++;
            if (!field_value(f, &p, &b))
                return field_bad(f, item, "has a range without an end", err);
            single = false;
        }
    }
    if (*p == '/') {
        p++;
        if (!isdigit((unsigned char)*p) || !field_value(f, &p, &step) || step == 0)
            return field_bad(f, item, "needs a step of 1 or more", err);
        if (single)
            b = f->hi;
    }
    if (*p != '\0')
        return field_bad(f, item, "is not a value, a range or a step", err);
    if (a < f->lo || a > f->hi || b < f->lo || b > f->hi)
        return error_set(err, ST_INVALID, "%s \"%.40s\" is out of range %d-%d", f->name, item,
                         f->lo, f->hi);
    if (a > b)
        return field_bad(f, item, "is a range that ends before it starts", err);
    for (int v = a; v <= b; v += step)
        *bits |= (uint64_t)1 << v;
    return ST_OK;
}

static enum status field_parse(const struct field_spec *f, const char *text, uint64_t *bits,
                               struct error *err)
{
    char item[64];
    const char *s = text, *comma;
    size_t len;
    enum status st;

    *bits = 0;
    do {
        comma = strchr(s, ',');
        len = comma ? (size_t)(comma - s) : strlen(s);
        if (len == 0 || len >= sizeof(item))
            return field_bad(f, text, "has an empty or overlong list item", err);
        memcpy(item, s, len);
        item[len] = '\0';
        if ((st = field_item(f, item, bits, err)) != ST_OK)
            return st;
        s = comma ? comma + 1 : NULL;
    } while (s);
    return ST_OK;
}

/* "1h30m", "45s", "2d": a sum of numbers with units. */
static bool duration_parse(const char *s, int64_t *out)
{
    int64_t total = 0, v;

    if (*s == '\0')
        return false;
    while (*s) {
        if (!isdigit((unsigned char)*s))
            return false;
        for (v = 0; isdigit((unsigned char)*s); s++) {
            v = v * 10 + (*s - '0');
            if (v > CRON_EVERY_MAX_S)
                return false;
        }
        switch (*s++) {
        case 's':
            total += v;
            break;
        case 'm':
            total += v * 60;
            break;
        case 'h':
            total += v * 3600;
            break;
        case 'd':
            total += v * 86400;
            break;
        default:
            return false;
        }
        if (total > CRON_EVERY_MAX_S)
            return false;
    }
    *out = total;
    return true;
}

static enum status shorthand(const char *expr, struct cron *out, struct error *err);

/* Splits expr into at most 7 whitespace-separated fields of buf. */
static int split_fields(const char *expr, char *buf, size_t cap, char *parts[7])
{
    int n = 0;
    char *s = buf;

    xsnprintf(buf, cap, "%s", expr);
    while (*s) {
        while (isspace((unsigned char)*s))
            *s++ = '\0';
        if (!*s)
            break;
        if (n == 7)
            return 8;
        parts[n++] = s;
        while (*s && !isspace((unsigned char)*s))
            s++;
    }
    return n;
}

enum status cron_parse(const char *expr, struct cron *out, struct error *err)
{
    char buf[256], *parts[7];
    uint64_t bits[6];
    int n, first;
    enum status st;

    memset(out, 0, sizeof(*out));
    if (strlen(expr) >= sizeof(buf))
        return error_set(err, ST_INVALID, "longer than %zu characters", sizeof(buf) - 1);
    while (isspace((unsigned char)*expr))
        expr++;
    if (*expr == '@')
        return shorthand(expr, out, err);
    n = split_fields(expr, buf, sizeof(buf), parts);
    if (n != 5 && n != 6)
        return error_set(err, ST_INVALID,
                         "expected 5 fields (minute hour day-of-month month day-of-week) or 6 "
                         "(seconds first), got %s%d",
                         n > 7 ? "more than " : "", n > 7 ? 7 : n);
    first = n == 5 ? 1 : 0;
    bits[0] = 1; /* five fields: at second 0 */
    for (int i = first; i < 6; i++)
        if ((st = field_parse(&fields[i], parts[i - first], &bits[i], err)) != ST_OK)
            return st;
    out->sec = bits[0];
    out->min = bits[1];
    out->hour = (uint32_t)bits[2];
    out->dom = (uint32_t)bits[3];
    out->month = (uint16_t)bits[4];
    out->dow = (uint8_t)((bits[5] | bits[5] >> 7) & 0x7f); /* 7 is Sunday too */
    out->dom_any = parts[3 - first][0] == '*';
    out->dow_any = parts[5 - first][0] == '*';
    return ST_OK;
}

static enum status shorthand(const char *expr, struct cron *out, struct error *err)
{
    static const struct {
        const char *name, *fields;
    } names[] = {
        {"@yearly", "0 0 1 1 *"}, {"@annually", "0 0 1 1 *"}, {"@monthly", "0 0 1 * *"},
        {"@weekly", "0 0 * * 0"}, {"@daily", "0 0 * * *"},    {"@midnight", "0 0 * * *"},
        {"@hourly", "0 * * * *"},
    };
    char buf[64], *parts[7];

    if (strncmp(expr, "@every", 6) == 0 && isspace((unsigned char)expr[6])) {
        if (split_fields(expr + 6, buf, sizeof(buf), parts) != 1 ||
            !duration_parse(parts[0], &out->every_s) || out->every_s < 1)
            return error_set(err, ST_INVALID,
                             "@every needs one duration of at least 1s and at most 366d, such "
                             "as 30s, 5m or 1h30m");
        return ST_OK;
    }
    for (size_t i = 0; i < ARRAY_LEN(names); i++) {
        size_t len = strlen(names[i].name);

        if (strncmp(expr, names[i].name, len) == 0 &&
            (expr[len] == '\0' || isspace((unsigned char)expr[len])) &&
            split_fields(expr + len, buf, sizeof(buf), parts) == 0)
            return cron_parse(names[i].fields, out, err);
    }
    return error_set(err, ST_INVALID,
                     "\"%.40s\" is not one of @yearly, @monthly, @weekly, @daily, @hourly "
                     "or @every <duration>",
                     expr);
}

/* ---- the next slot ---------------------------------------------------- */

static int next_bit(uint64_t mask, int from, int limit)
{
    for (int i = from; i < limit; i++)
        if (mask >> i & 1)
            return i;
    return -1;
}

static bool day_matches(const struct cron *c, int64_t days)
{
    int64_t y;
    unsigned m, d, wd = civil_weekday(days);
    bool dom_ok, dow_ok;

    civil_from_days(days, &y, &m, &d);
    if (!(c->month >> m & 1))
        return false;
    dom_ok = c->dom >> d & 1;
    dow_ok = c->dow >> wd & 1;
    if (c->dom_any || c->dow_any)
        return dom_ok && dow_ok;
    return dom_ok || dow_ok;
}

/* The first local time at or after `from` that the fields match. When a
 * field moves forward, the fields below it start again from their lowest. */
static bool next_local(const struct cron *c, int64_t from, int64_t *out)
{
    int64_t days = floor_div(from, 86400), sod = from - days * 86400;
    int64_t last = days + CRON_SEARCH_DAYS;
    int h = (int)(sod / 3600), mi = (int)(sod / 60 % 60), s = (int)(sod % 60), nh, nmi;

    for (; days <= last; days++, h = mi = s = 0) {
        if (!day_matches(c, days))
            continue;
        for (; (nh = next_bit(c->hour, h, 24)) >= 0; h = nh + 1, mi = s = 0) {
            if (nh != h)
                mi = s = 0;
            for (; (nmi = next_bit(c->min, mi, 60)) >= 0; mi = nmi + 1, s = 0) {
                if (nmi != mi)
                    s = 0;
                if ((s = next_bit(c->sec, s, 60)) >= 0) {
                    *out = days * 86400 + nh * 3600 + nmi * 60 + s;
                    return true;
                }
            }
        }
    }
    return false;
}

bool cron_next(const struct cron *c, const struct tz *tz, int64_t after, int64_t *out)
{
    int64_t local, at[2];

    if (c->every_s > 0) {
        *out = (floor_div(after, c->every_s) + 1) * c->every_s;
        return true;
    }
    local = after + tz_offset(tz, after) + 1;
    for (int i = 0; i < CRON_SEARCH_TRIES; i++) {
        if (!next_local(c, local, &local))
            return false;
        tz_from_local(tz, local, at); /* a gap gives the instant after it */
        if (at[0] > after) {
            *out = at[0];
            return true;
        }
        local++;
    }
    return false;
}
