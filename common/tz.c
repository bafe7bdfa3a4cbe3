/* common/tz.c — TZif files (RFC 8536) and their POSIX TZ rules, reduced to
 * one sorted list of the instants where a zone's UTC offset changes. Only
 * the offset matters to us: changes of abbreviation or of the DST flag alone
 * are dropped, so every listed change moves the clock. */
#include "tz.h"

#include "civil.h"

#include <errno.h>

#define TZ_DEFAULT_DIR "/usr/share/zoneinfo"
#define TZ_FILE_MAX (1 << 20)  /* the largest zone file is about 4 KiB */
#define TZ_NAME_MAX 255        /* a path under the database */
#define TZ_TIMES_MAX 100000    /* transitions in a file; real ones have < 2,000 */
#define TZ_RULE_LAST_YEAR 2200 /* the POSIX rule is expanded up to here */
#define TZ_OFFSET_MAX (26 * 3600)
#define TZ_SPAN (TZ_OFFSET_MAX + 3600) /* local - instant, with room */

struct tz_change {
    int64_t at;  /* the instant the offset changes */
    int32_t off; /* the offset from then on */
};

struct tz {
    char *name;
    int32_t first_off; /* before the first change */
    size_t n, cap;
    struct tz_change *changes;
};

/* ---- the list of changes ----------------------------------------------- */

static int32_t off_before(const struct tz *tz)
{
    return tz->n ? tz->changes[tz->n - 1].off : tz->first_off;
}

/* Appends a change after every listed one; a change at the instant of the
 * last one replaces it, and one that keeps the offset is dropped. */
static void add_change(struct tz *tz, int64_t at, int32_t off)
{
    if (tz->n && at < tz->changes[tz->n - 1].at)
        return;
    if (tz->n && at == tz->changes[tz->n - 1].at)
        tz->n--;
    if (off == off_before(tz))
        return;
    if (tz->n == tz->cap) {
        tz->cap = tz->cap ? tz->cap * 2 : 64;
        tz->changes = xrealloc(tz->changes, tz->cap * sizeof(*tz->changes));
    }
    tz->changes[tz->n].at = at;
    tz->changes[tz->n].off = off;
    tz->n++;
}

/* ---- POSIX TZ rules (the footer of a TZif file) ------------------------- */

enum rdate_kind { RDATE_JULIAN, RDATE_ZERO, RDATE_MONTH };

struct rdate {
    enum rdate_kind kind;
    int day; /* Jn: 1..365; n: 0..365; Mm.w.d: d */
    int month, week;
    int32_t secs; /* local time of day of the change, -167h..167h */
};

struct rule {
    int32_t std_off, dst_off; /* east of UTC */
    bool has_dst;
    struct rdate start, end;
};

static bool rule_num(const char **p, int lo, int hi, int *out)
{
    int v = 0, digits = 0;

    while (**p >= '0' && **p <= '9' && digits < 4) {
        v = v * 10 + (**p - '0');
        (*p)++;
        digits++;
    }
    *out = v;
    return digits > 0 && v >= lo && v <= hi;
}

/* [+-]hh[:mm[:ss]] with hh up to max_h. */
static bool rule_time(const char **p, int max_h, int32_t *out)
{
    int sign = 1, h, m = 0, s = 0;

    if (**p == '+' || **p == '-')
        sign = *(*p)++ == '-' ? -1 : 1;
    if (!rule_num(p, 0, max_h, &h))
        return false;
    if (**p == ':' && (++*p, !rule_num(p, 0, 59, &m)))
        return false;
    if (**p == ':' && (++*p, !rule_num(p, 0, 59, &s)))
        return false;
    *out = sign * (h * 3600 + m * 60 + s);
    return true;
}

static bool rule_name(const char **p)
{
    const char *s = *p;

    if (*s == '<') {
        for (s++; (*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') ||
                  (*s >= '0' && *s <= '9') || *s == '+' || *s == '-';
             s++)
            ;
        if (*s != '>' || s - *p < 4)
            return false;
        *p = s + 1;
        return true;
    }
    while ((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z'))
        s++;
    if (s - *p < 3)
        return false;
    *p = s;
    return true;
}

static bool rule_date(const char **p, struct rdate *rd)
{
    rd->secs = 2 * 3600;
    if (**p == 'M') {
        (*p)++;
        rd->kind = RDATE_MONTH;
        if (!rule_num(p, 1, 12, &rd->month) || *(*p)++ != '.' || !rule_num(p, 1, 5, &rd->week) ||
            *(*p)++ != '.' || !rule_num(p, 0, 6, &rd->day))
            return false;
    } else if (**p == 'J') {
        (*p)++;
        rd->kind = RDATE_JULIAN;
        if (!rule_num(p, 1, 365, &rd->day))
            return false;
    } else {
        rd->kind = RDATE_ZERO;
        if (!rule_num(p, 0, 365, &rd->day))
            return false;
    }
    if (**p == '/') {
        (*p)++;
        return rule_time(p, 167, &rd->secs);
    }
    return true;
}

/* std offset [dst [offset] [,start[/time],end[/time]]]; POSIX offsets count
 * west of UTC, ours east. Without dates, the dates POSIX implementations
 * default to (the US rules since 2007). */
static bool rule_parse(const char *s, struct rule *r)
{
    int32_t off;

    memset(r, 0, sizeof(*r));
    if (!rule_name(&s) || !rule_time(&s, 24, &off))
        return false;
    r->std_off = -off;
    if (*s == '\0')
        return true;
    if (!rule_name(&s))
        return false;
    r->has_dst = true;
    r->dst_off = r->std_off + 3600;
    if (*s != ',' && *s != '\0') {
        if (!rule_time(&s, 24, &off))
            return false;
        r->dst_off = -off;
    }
    if (*s == '\0') {
        r->start = (struct rdate){RDATE_MONTH, 0, 3, 2, 2 * 3600};
        r->end = (struct rdate){RDATE_MONTH, 0, 11, 1, 2 * 3600};
        return true;
    }
    return *s++ == ',' && rule_date(&s, &r->start) && *s++ == ',' && rule_date(&s, &r->end) &&
           *s == '\0';
}

/* The local instant (seconds) of rd in year y. */
static int64_t rdate_local(const struct rdate *rd, int64_t y)
{
    int64_t days = days_from_civil(y, 1, 1);
    unsigned first_wd, md;
    int day;

    switch (rd->kind) {
    case RDATE_JULIAN:
        days += rd->day - 1 + (civil_is_leap(y) && rd->day >= 60);
        break;
    case RDATE_ZERO:
        days += rd->day;
        break;
    case RDATE_MONTH:
        days = days_from_civil(y, (unsigned)rd->month, 1);
        first_wd = civil_weekday(days);
        md = civil_month_days(y, (unsigned)rd->month);
        day = 1 + (rd->day - (int)first_wd + 7) % 7 + (rd->week - 1) * 7;
        while (day > (int)md)
            day -= 7;
        days += day - 1;
        break;
    }
    return days * 86400 + rd->secs;
}

static void rule_expand(struct tz *tz, const struct rule *r)
{
    int64_t from, y, start, end;
    unsigned m, d;

    if (!r->has_dst) {
        if (tz->n == 0)
            tz->first_off = r->std_off;
        return;
    }
    from = tz->n ? tz->changes[tz->n - 1].at : 0;
    civil_from_days(floor_div(from, 86400), &y, &m, &d);
    for (; y <= TZ_RULE_LAST_YEAR; y++) {
        /* The start is read on standard time, the end on daylight time. */
        start = rdate_local(&r->start, y) - r->std_off;
        end = rdate_local(&r->end, y) - r->dst_off;
        if (start < end) {
            add_change(tz, start, r->dst_off);
            add_change(tz, end, r->std_off);
        } else {
            add_change(tz, end, r->std_off);
            add_change(tz, start, r->dst_off);
        }
    }
}

/* ---- TZif -------------------------------------------------------------- */

struct tzif_counts {
    uint32_t isut, isstd, leap, time, type, chars;
};

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int64_t be64(const unsigned char *p)
{
    return (int64_t)((uint64_t)be32(p) << 32 | be32(p + 4));
}

static bool tzif_header(const unsigned char *p, size_t n, char *version, struct tzif_counts *c)
{
    if (n < 44 || memcmp(p, "TZif", 4) != 0)
        return false;
    *version = (char)p[4];
    c->isut = be32(p + 20);
    c->isstd = be32(p + 24);
    c->leap = be32(p + 28);
    c->time = be32(p + 32);
    c->type = be32(p + 36);
    c->chars = be32(p + 40);
    return c->type >= 1 && c->type <= 256 && c->time <= TZ_TIMES_MAX && c->chars <= 65536 &&
           c->leap <= TZ_TIMES_MAX && c->isut <= 256 && c->isstd <= 256;
}

static size_t tzif_block_size(const struct tzif_counts *c, size_t tsize)
{
    return c->time * tsize + c->time + c->type * 6 + c->chars + c->leap * (tsize + 4) + c->isstd +
           c->isut;
}

/* The data block at p (times of tsize bytes): the changes into tz. */
static enum status tzif_block(struct tz *tz, const unsigned char *p, const struct tzif_counts *c,
                              size_t tsize, struct error *err)
{
    const unsigned char *idx = p + c->time * tsize, *types = idx + c->time;
    int64_t at, prev = INT64_MIN;
    int32_t off;

    if (c->leap)
        return error_set(err, ST_INVALID, "time zone \"%s\" counts leap seconds", tz->name);
    for (uint32_t i = 0; i < c->type; i++) {
        off = (int32_t)be32(types + i * 6);
        if (off < -TZ_OFFSET_MAX || off > TZ_OFFSET_MAX)
            return error_set(err, ST_INVALID, "time zone \"%s\" has an offset out of range",
                             tz->name);
    }
    tz->first_off = (int32_t)be32(types);
    for (uint32_t i = 0; i < c->time; i++) {
        at = tsize == 8 ? be64(p + i * 8) : (int32_t)be32(p + i * 4);
        if (idx[i] >= c->type || at <= prev)
            return error_set(err, ST_INVALID, "time zone \"%s\" has a malformed transition",
                             tz->name);
        prev = at;
        add_change(tz, at, (int32_t)be32(types + idx[i] * 6));
    }
    return ST_OK;
}

/* The footer of a version 2+ file: "\n<rule>\n". An empty rule says the
 * last offset holds for ever. */
static enum status tzif_footer(struct tz *tz, const unsigned char *p, size_t n, struct error *err)
{
    const unsigned char *nl;
    char text[128];
    struct rule r;

    if (n < 2 || p[0] != '\n' || !(nl = memchr(p + 1, '\n', n - 1)))
        return error_set(err, ST_INVALID, "time zone \"%s\" has no rule footer", tz->name);
    if (nl == p + 1)
        return ST_OK;
    if ((size_t)(nl - p - 1) >= sizeof(text))
        return error_set(err, ST_INVALID, "time zone \"%s\" has a rule too long", tz->name);
    memcpy(text, p + 1, (size_t)(nl - p - 1));
    text[nl - p - 1] = '\0';
    if (!rule_parse(text, &r))
        return error_set(err, ST_INVALID, "time zone \"%s\" has a rule we cannot read: \"%s\"",
                         tz->name, text);
    rule_expand(tz, &r);
    return ST_OK;
}

static enum status tzif_parse(struct tz *tz, const unsigned char *p, size_t n, struct error *err)
{
    struct tzif_counts c;
    char version;
    size_t size;
    enum status st;

    if (!tzif_header(p, n, &version, &c))
        return error_set(err, ST_INVALID, "time zone \"%s\" is not a TZif file", tz->name);
    size = tzif_block_size(&c, 4);
    if (n - 44 < size)
        return error_set(err, ST_INVALID, "time zone \"%s\" is cut short", tz->name);
    if (version == '\0')
        return tzif_block(tz, p + 44, &c, 4, err);
    p += 44 + size;
    n -= 44 + size;
    if (!tzif_header(p, n, &version, &c) || n - 44 < (size = tzif_block_size(&c, 8)))
        return error_set(err, ST_INVALID, "time zone \"%s\" is cut short", tz->name);
    if ((st = tzif_block(tz, p + 44, &c, 8, err)) != ST_OK)
        return st;
    return tzif_footer(tz, p + 44 + size, n - 44 - size, err);
}

enum status tz_parse(const char *name, const unsigned char *data, size_t n, struct tz **out,
                     struct error *err)
{
    struct tz *tz = xcalloc(1, sizeof(*tz));
    enum status st;

    tz->name = xstrdup(name);
    if ((st = tzif_parse(tz, data, n, err)) != ST_OK) {
        tz_free(tz);
        return st;
    }
    *out = tz;
    return ST_OK;
}

/* A name of the database: letters, digits, "_+-" and "/" between parts
 * that do not start with a dot, so it cannot leave the directory. */
static bool tz_name_ok(const char *name)
{
    size_t len = strlen(name);
    bool part_start = true;

    if (len == 0 || len > TZ_NAME_MAX)
        return false;
    for (const char *s = name; *s; s++) {
        if (part_start && (*s == '.' || *s == '/'))
            return false;
        part_start = *s == '/';
        if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') ||
              strchr("_+-/.", *s)))
            return false;
    }
    return !part_start;
}

static enum status read_file(const char *path, unsigned char **out, size_t *n)
{
    FILE *f = fopen(path, "rb");
    unsigned char *buf;
    size_t got;

    if (!f)
        return errno == ENOENT || errno == ENOTDIR ? ST_NOT_FOUND : ST_INVALID;
    buf = xmalloc(TZ_FILE_MAX);
    got = fread(buf, 1, TZ_FILE_MAX, f);
    if (ferror(f) || got == TZ_FILE_MAX) {
        fclose(f);
        free(buf);
        return errno == EISDIR ? ST_NOT_FOUND : ST_INVALID;
    }
    fclose(f);
    *out = buf;
    *n = got;
    return ST_OK;
}

enum status tz_load(const char *name, struct tz **out, struct error *err)
{
    const char *dir = getenv("TZDIR");
    unsigned char *data = NULL;
    char path[512];
    size_t n = 0;
    enum status st;

    if (strcmp(name, "UTC") == 0) {
        *out = xcalloc(1, sizeof(**out));
        (*out)->name = xstrdup(name);
        return ST_OK;
    }
    if (!tz_name_ok(name))
        return error_set(err, ST_INVALID, "\"%.64s\" is not a time zone name", name);
    xsnprintf(path, sizeof(path), "%s/%s", dir && *dir ? dir : TZ_DEFAULT_DIR, name);
    if ((st = read_file(path, &data, &n)) == ST_NOT_FOUND)
        return error_set(err, st, "unknown time zone \"%s\" (no file %s)", name, path);
    if (st != ST_OK)
        return error_set(err, st, "could not read time zone \"%s\" from %s", name, path);
    st = tz_parse(name, data, n, out, err);
    free(data);
    return st;
}

void tz_free(struct tz *tz)
{
    if (!tz)
        return;
    free(tz->changes);
    free(tz->name);
    free(tz);
}

const char *tz_name(const struct tz *tz)
{
    return tz->name;
}

/* The number of changes at or before t: the segment t is in. */
static size_t segment_of(const struct tz *tz, int64_t t)
{
    size_t lo = 0, hi = tz->n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (tz->changes[mid].at <= t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int32_t segment_off(const struct tz *tz, size_t k)
{
    return k == 0 ? tz->first_off : tz->changes[k - 1].off;
}

int32_t tz_offset(const struct tz *tz, int64_t t)
{
    return segment_off(tz, segment_of(tz, t));
}

/* Segment k runs from changes[k-1].at (or the beginning of time) to
 * changes[k].at (or its end). Only segments within a day or so of local
 * can hold an instant with that local time. */
int tz_from_local(const struct tz *tz, int64_t local, int64_t out[2])
{
    int count = 0;

    for (size_t k = segment_of(tz, local - TZ_SPAN); k <= tz->n; k++) {
        int64_t start = k == 0 ? INT64_MIN : tz->changes[k - 1].at;
        int64_t t = local - segment_off(tz, k);

        if (k > 0 && start > local + TZ_SPAN)
            break;
        if (t >= start && (k == tz->n || t < tz->changes[k].at)) {
            if (count < 2)
                out[count] = t;
            count++;
        } else if (count == 0 && k > 0 && start + segment_off(tz, k - 1) <= local &&
                   local < start + segment_off(tz, k)) {
            out[0] = start; /* the clock jumped over local at this change */
        }
    }
    return count > 2 ? 2 : count;
}
