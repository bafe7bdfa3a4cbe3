/* common/util.c — SHA-256 (FIPS 180-4), canonical JSON, run ids, RFC 3339
 * time, list cursors and retry backoff. No state; every function is
 * thread-safe.
 *
 * System headers come before util.h, ahead of common.h's poison pragma. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "util.h"

#include "dynbuf.h"

/* ---- SHA-256 ---------------------------------------------------------- */

static const uint32_t sha256_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t ror32(uint32_t x, unsigned n)
{
    return (x >> n) | (x << (32 - n));
}

static uint32_t load_be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static void store_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* The message schedule of FIPS 180-4 section 6.2.2 step 1. */
static void sha256_schedule(uint32_t w[64], const unsigned char block[64])
{
    for (size_t i = 0; i < 16; i++)
        w[i] = load_be32(block + 4 * i);
    for (unsigned i = 16; i < 64; i++) {
        uint32_t s0 = ror32(w[i - 15], 7) ^ ror32(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ror32(w[i - 2], 17) ^ ror32(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
}

/* One compression; v[] holds the working variables a..h in order. */
static void sha256_block(uint32_t h[8], const unsigned char block[64])
{
    uint32_t w[64], v[8];

    sha256_schedule(w, block);
    memcpy(v, h, sizeof(v));
    for (unsigned i = 0; i < 64; i++) {
        uint32_t s1 = ror32(v[4], 6) ^ ror32(v[4], 11) ^ ror32(v[4], 25);
        uint32_t ch = (v[4] & v[5]) ^ (~v[4] & v[6]);
        uint32_t t1 = v[7] + s1 + ch + sha256_k[i] + w[i];
        uint32_t s0 = ror32(v[0], 2) ^ ror32(v[0], 13) ^ ror32(v[0], 22);
        uint32_t maj = (v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]);

        memmove(v + 1, v, 7 * sizeof(v[0]));
        v[4] += t1;
        v[0] = t1 + s0 + maj;
    }
    for (unsigned i = 0; i < 8; i++)
        h[i] += v[i];
}

void sha256_init(struct sha256 *s)
{
    static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

    memcpy(s->h, iv, sizeof(iv));
    s->len = 0;
    s->fill = 0;
}

/* s->len counts bytes; sha256_final turns it into the bit length. */
void sha256_update(struct sha256 *s, const void *data, size_t n)
{
    const unsigned char *p = data;

    if (n == 0)
        return;
    s->len += n;
    if (s->fill > 0) {
        size_t take = n < 64 - s->fill ? n : 64 - s->fill;

        memcpy(s->buf + s->fill, p, take);
        s->fill += take;
        p += take;
        n -= take;
        if (s->fill < 64)
            return;
        sha256_block(s->h, s->buf);
        s->fill = 0;
    }
    for (; n >= 64; p += 64, n -= 64)
        sha256_block(s->h, p);
    memcpy(s->buf, p, n);
    s->fill = n;
}

void sha256_final(struct sha256 *s, unsigned char out[32])
{
    uint64_t bits = s->len * 8;

    s->buf[s->fill++] = 0x80;
    if (s->fill > 56) {
        memset(s->buf + s->fill, 0, 64 - s->fill);
        sha256_block(s->h, s->buf);
        s->fill = 0;
    }
    memset(s->buf + s->fill, 0, 56 - s->fill);
    store_be32(s->buf + 56, (uint32_t)(bits >> 32));
    store_be32(s->buf + 60, (uint32_t)bits);
    sha256_block(s->h, s->buf);
    for (size_t i = 0; i < 8; i++)
        store_be32(out + 4 * i, s->h[i]);
    s->fill = 0;
}

static void hex_lower(const unsigned char *in, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";

    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * n] = '\0';
}

void sha256_hex(const void *data, size_t n, char out[65])
{
    struct sha256 s;
    unsigned char md[32];

    sha256_init(&s);
    sha256_update(&s, data, n);
    sha256_final(&s, md);
    hex_lower(md, sizeof(md), out);
}

/* The OR of every byte's difference, so the loop never ends early; the
 * volatile accumulator keeps the compiler from turning it into memcmp. */
bool ct_equal(const void *a, const void *b, size_t n)
{
    const volatile unsigned char *x = a, *y = b;
    volatile unsigned char acc = 0;

    for (size_t i = 0; i < n; i++)
        acc = (unsigned char)(acc | (x[i] ^ y[i]));
    return acc == 0;
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

bool hex_decode(const char *hex, unsigned char *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int hi = hex_value(hex[2 * i]), lo = hi < 0 ? -1 : hex_value(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        out[i] = (unsigned char)(hi << 4 | lo);
    }
    return hex[2 * n] == '\0';
}

/* ---- canonical JSON --------------------------------------------------- */

/* Containers nested deeper than jansson's own parser allows render as null,
 * so a hand-built (or cyclic) json_t cannot exhaust the stack. The count
 * matches jansson's: the top-level value is depth 1. */
#define CANON_MAX_DEPTH 2048

/* The longest canonical text: 1 GiB. A document parsed from a request body
 * (at most 64 MiB, the bound of http.max_body_bytes) prints at most about
 * five times as long ("0.1" becomes "0.10000000000000001"), so only a
 * hand-built document can reach it; canon_json then returns NULL rather than
 * grow without bound. */
#define CANON_MAX ((size_t)1 << 30)

struct cbuf {
    struct dynbuf d;
    bool too_large; /* an add was refused: the result is NULL */
};

static void cbuf_add(struct cbuf *b, const char *s, size_t n)
{
    if (b->too_large || dynbuf_add(&b->d, s, n) != ST_OK)
        b->too_large = true;
}

static void cbuf_puts(struct cbuf *b, const char *s)
{
    cbuf_add(b, s, strlen(s));
}

static int cbuf_dump_cb(const char *buffer, size_t size, void *data)
{
    struct cbuf *b = data;

    cbuf_add(b, buffer, size);
    return b->too_large ? -1 : 0;
}

/* Jansson does the escaping so strings match what it would print; it fails
 * only on invalid UTF-8 (a string made with a *_nocheck constructor). */
static bool canon_string(struct cbuf *b, const json_t *str)
{
    size_t mark = dynbuf_len(&b->d);

    if (json_dump_callback(str, cbuf_dump_cb, b, JSON_ENCODE_ANY) == 0)
        return true;
    dynbuf_truncate(&b->d, mark);
    return false;
}

static bool canon_key(struct cbuf *b, const char *key, size_t len)
{
    json_t *str = json_stringn_nocheck(key, len);
    bool ok = str && canon_string(b, str);

    json_decref(str);
    return ok;
}

/* "%.17g" round-trips every double. Like jansson, a result with neither a
 * dot nor an exponent gets ".0", so the real 1.0 stays "1.0" and never
 * reads back as the integer 1. A locale's decimal comma is undone. */
static void canon_real(struct cbuf *b, double d)
{
    char tmp[48];

    if (!isfinite(d)) {
        cbuf_puts(b, "null");
        return;
    }
    xsnprintf(tmp, sizeof(tmp), "%.17g", d);
    for (char *c = tmp; *c; c++)
        if (*c == ',')
            *c = '.';
    cbuf_puts(b, tmp);
    if (!strpbrk(tmp, ".eE"))
        cbuf_puts(b, ".0");
}

static bool canon_value(struct cbuf *b, const json_t *v, int depth);

struct canon_member {
    const char *key;
    size_t len;
    const json_t *value;
};

/* Bytewise order, shorter first on a common prefix: strcmp's order, also
 * for keys with embedded NUL bytes. */
static int canon_member_cmp(const void *pa, const void *pb)
{
    const struct canon_member *a = pa, *b = pb;
    int c = memcmp(a->key, b->key, a->len < b->len ? a->len : b->len);

    if (c != 0)
        return c;
    return (a->len > b->len) - (a->len < b->len);
}

static size_t canon_key_len(const char *key)
{
#if JANSSON_VERSION_HEX >= 0x020e00
    return json_object_iter_key_len(json_object_key_to_iter(key));
#else
    return strlen(key);
#endif
}

/* Jansson's iterators take a non-const object but do not modify it. */
static struct canon_member *canon_members(const json_t *obj, size_t *n_out)
{
    json_t *o = (json_t *)obj;
    struct canon_member *m = xcalloc(json_object_size(o), sizeof(*m));
    size_t n = 0;
    const char *key;
    json_t *value;

    json_object_foreach(o, key, value)
    {
        m[n].key = key;
        m[n].len = canon_key_len(key);
        m[n].value = value;
        n++;
    }
    qsort(m, n, sizeof(*m), canon_member_cmp);
    *n_out = n;
    return m;
}

static bool canon_object(struct cbuf *b, const json_t *obj, int depth)
{
    size_t n;
    struct canon_member *m = canon_members(obj, &n);
    bool ok = true;

    cbuf_puts(b, "{");
    for (size_t i = 0; ok && i < n; i++) {
        if (i > 0)
            cbuf_puts(b, ",");
        ok = canon_key(b, m[i].key, m[i].len);
        cbuf_puts(b, ":");
        ok = ok && canon_value(b, m[i].value, depth + 1);
    }
    cbuf_puts(b, "}");
    free(m);
    return ok;
}

static bool canon_array(struct cbuf *b, const json_t *arr, int depth)
{
    size_t n = json_array_size(arr);
    bool ok = true;

    cbuf_puts(b, "[");
    for (size_t i = 0; ok && i < n; i++) {
        if (i > 0)
            cbuf_puts(b, ",");
        ok = canon_value(b, json_array_get(arr, i), depth + 1);
    }
    cbuf_puts(b, "]");
    return ok;
}

static bool canon_value(struct cbuf *b, const json_t *v, int depth)
{
    char tmp[32];

    if (depth > CANON_MAX_DEPTH) {
        cbuf_puts(b, "null");
        return true;
    }
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return canon_object(b, v, depth);
    case JSON_ARRAY:
        return canon_array(b, v, depth);
    case JSON_STRING:
        return canon_string(b, v);
    case JSON_INTEGER:
        xsnprintf(tmp, sizeof(tmp), "%lld", (long long)json_integer_value(v));
        cbuf_puts(b, tmp);
        return true;
    case JSON_REAL:
        canon_real(b, json_real_value(v));
        return true;
    case JSON_TRUE:
        cbuf_puts(b, "true");
        return true;
    case JSON_FALSE:
        cbuf_puts(b, "false");
        return true;
    case JSON_NULL:
        cbuf_puts(b, "null");
        return true;
    }
    return false;
}

/* NULL only for a NULL v, a string that is not valid UTF-8 (possible only
 * through jansson's *_nocheck constructors), a failed jansson allocation or
 * a result longer than CANON_MAX. */
char *canon_json(const json_t *v)
{
    struct cbuf b = {.too_large = false};

    if (!v)
        return NULL;
    dynbuf_init(&b.d, CANON_MAX);
    if (!canon_value(&b, v, 1) || b.too_large) {
        dynbuf_free(&b.d);
        return NULL;
    }
    return dynbuf_take(&b.d);
}

/* ---- identity hash ---------------------------------------------------- */

static void sha256_update_part(struct sha256 *s, const char *part)
{
    sha256_update(s, part, strlen(part) + 1);
}

void identity_hash(const char *tenant, const char *type, const char *kind, const char *value,
                   char out[65])
{
    struct sha256 s;
    unsigned char md[32];

    sha256_init(&s);
    sha256_update_part(&s, tenant);
    sha256_update_part(&s, type);
    sha256_update_part(&s, kind);
    sha256_update_part(&s, value);
    sha256_final(&s, md);
    hex_lower(md, sizeof(md), out);
}

/* ---- run ids ---------------------------------------------------------- */

#define RUN_ID_MAX 128

/* Writes the low 5 * nchars bits of v as Crockford base32, most significant
 * first. */
static void base32_put(char *out, uint64_t v, int nchars)
{
    static const char alphabet[] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

    for (int i = nchars - 1; i >= 0; i--) {
        out[i] = alphabet[v & 31];
        v >>= 5;
    }
}

static uint64_t load_be40(const unsigned char *p)
{
    return (uint64_t)p[0] << 32 | (uint64_t)load_be32(p + 1);
}

/* A wall clock before 1970 counts as 0; the 48-bit field lasts until 10889. */
void run_id_new(char out[27])
{
    unsigned char r[10];
    int64_t now = clock_wall_ms();
    uint64_t ms = now < 0 ? 0 : (uint64_t)now & 0xFFFFFFFFFFFFu;

    rand_bytes(r, sizeof(r));
    base32_put(out, ms, 10);
    base32_put(out + 10, load_be40(r), 8);
    base32_put(out + 18, load_be40(r + 5), 8);
    out[26] = '\0';
}

static bool id_char_ok(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == ':' || c == '-';
}

static bool id_valid_n(const char *s, size_t n)
{
    if (n == 0 || n > RUN_ID_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!id_char_ok(s[i]))
            return false;
    return true;
}

bool run_id_valid(const char *s)
{
    return s && id_valid_n(s, strnlen(s, RUN_ID_MAX + 1));
}

/* ---- RFC 3339 time ---------------------------------------------------- */

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

/* ---- list cursors ----------------------------------------------------- */

/* "v1:" + 20 characters of int64 + ":" + a 128-character id, and its
 * base64url length (no padding). */
#define CURSOR_PLAIN_MAX (3 + 20 + 1 + RUN_ID_MAX)
#define CURSOR_TOKEN_MAX ((CURSOR_PLAIN_MAX * 4 + 2) / 3)

static const char b64url_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* out holds (n * 4 + 2) / 3 + 1 bytes. */
static void b64url_encode(const unsigned char *in, size_t n, char *out)
{
    uint32_t acc = 0;
    unsigned bits = 0;

    for (size_t i = 0; i < n; i++) {
        acc = (acc << 8 | in[i]) & 0xFFFF;
        bits += 8;
        while (bits >= 6) {
            bits -= 6;
            *out++ = b64url_alphabet[(acc >> bits) & 63];
        }
    }
    if (bits > 0)
        *out++ = b64url_alphabet[(acc << (6 - bits)) & 63];
    *out = '\0';
}

static int b64url_value(char c)
{
    const char *hit = c ? strchr(b64url_alphabet, c) : NULL;

    return hit ? (int)(hit - b64url_alphabet) : -1;
}

/* Strict: only the alphabet, no padding, and the unused low bits of the
 * last character must be zero, so every byte string has one encoding. */
static bool b64url_decode(const char *in, size_t n, unsigned char *out, size_t cap, size_t *len_out)
{
    uint32_t acc = 0;
    unsigned bits = 0;
    size_t len = 0;

    for (size_t i = 0; i < n; i++) {
        int v = b64url_value(in[i]);

        if (v < 0)
            return false;
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (len == cap)
                return false;
            out[len++] = (unsigned char)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    if (bits >= 6 || acc != 0)
        return false;
    *len_out = len;
    return true;
}

void base64url_encode(const void *in, size_t n, char *out)
{
    b64url_encode(in, n, out);
}

char *cursor_encode(int64_t created_us, const char *id)
{
    char *plain = xasprintf("v1:%lld:%s", (long long)created_us, id);
    size_t n = strlen(plain);
    char *token = xmalloc((n * 4 + 2) / 3 + 1);

    b64url_encode((const unsigned char *)plain, n, token);
    free(plain);
    return token;
}

/* The number must be written exactly as "%lld" writes it: no sign but '-',
 * no leading zeros, no overflow. */
static bool parse_us(const char *s, size_t n, int64_t *out)
{
    char back[24];
    char *end;
    long long v;

    if (n == 0 || n >= sizeof(back) || (s[0] != '-' && (s[0] < '0' || s[0] > '9')))
        return false;
    v = strtoll(s, &end, 10);
    if (end != s + n || xsnprintf(back, sizeof(back), "%lld", v) != n || memcmp(back, s, n) != 0)
        return false;
    *out = (int64_t)v;
    return true;
}

bool time_in_range(int64_t us)
{
    return us >= INT64_C(-62135596800) * US_PER_SEC && us <= RFC3339_MAX_US;
}

/* plain is NUL-terminated, n bytes long, with no NUL inside. */
static bool cursor_split(const char *plain, size_t n, int64_t *us_out, char id_out[129])
{
    const char *us, *colon, *id;
    int64_t v;

    if (n < 3 || memcmp(plain, "v1:", 3) != 0)
        return false;
    us = plain + 3;
    colon = strchr(us, ':');
    if (!colon || !parse_us(us, (size_t)(colon - us), &v) || !time_in_range(v))
        return false;
    id = colon + 1;
    if (!id_valid_n(id, n - (size_t)(id - plain)))
        return false;
    *us_out = v;
    memcpy(id_out, id, n - (size_t)(id - plain) + 1);
    return true;
}

bool cursor_decode(const char *token, int64_t *created_us_out, char id_out[129])
{
    unsigned char plain[CURSOR_PLAIN_MAX + 1];
    size_t tlen, n;

    if (!token)
        return false;
    tlen = strnlen(token, CURSOR_TOKEN_MAX + 1);
    if (tlen > CURSOR_TOKEN_MAX || !b64url_decode(token, tlen, plain, CURSOR_PLAIN_MAX, &n))
        return false;
    if (memchr(plain, '\0', n))
        return false;
    plain[n] = '\0';
    return cursor_split((const char *)plain, n, created_us_out, id_out);
}

/* ---- backoff ---------------------------------------------------------- */

/* Doubling stops once the cap is reached, so the loop runs at most 63 times
 * whatever the attempt, and never overflows. */
int64_t backoff_ceiling_ms(int64_t base_ms, int64_t cap_ms, int attempt)
{
    int64_t c = base_ms;

    if (base_ms <= 0 || cap_ms <= 0)
        return 0;
    for (int i = 1; i < attempt && c < cap_ms; i++)
        c = c > cap_ms / 2 ? cap_ms : c * 2;
    return c < cap_ms ? c : cap_ms;
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
