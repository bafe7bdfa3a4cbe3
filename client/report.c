/* client/report.c — see report.h. */
#include "client/report.h"

#include <jansson.h>

static bool cont(unsigned char c, unsigned char lo, unsigned char hi)
{
    return c >= lo && c <= hi;
}

/* The length of the well-formed UTF-8 sequence at p (RFC 3629: no
 * overlong forms, no surrogates, nothing past U+10FFFF), 0 when there is
 * none. The NUL at the end is never a continuation byte. */
static size_t utf8_len(const unsigned char *p)
{
    unsigned char lo = 0x80, hi = 0xbf;

    if (p[0] < 0x80)
        return 1;
    if (p[0] >= 0xc2 && p[0] <= 0xdf)
        return cont(p[1], lo, hi) ? 2 : 0;
    if (p[0] >= 0xe0 && p[0] <= 0xef) {
        lo = p[0] == 0xe0 ? 0xa0 : 0x80;
        hi = p[0] == 0xed ? 0x9f : 0xbf;
        return cont(p[1], lo, hi) && cont(p[2], 0x80, 0xbf) ? 3 : 0;
    }
    if (p[0] >= 0xf0 && p[0] <= 0xf4) {
        lo = p[0] == 0xf0 ? 0x90 : 0x80;
        hi = p[0] == 0xf4 ? 0x8f : 0xbf;
        return cont(p[1], lo, hi) && cont(p[2], 0x80, 0xbf) && cont(p[3], 0x80, 0xbf) ? 4 : 0;
    }
    return 0;
}

int report_clean(const char *in, char *out, size_t cap, int max_cols)
{
    const unsigned char *p = (const unsigned char *)in;
    size_t o = 0;
    int cols = 0;

    while (*p && (max_cols < 0 || cols < max_cols)) {
        size_t n = utf8_len(p);
        /* C0 controls, DEL and the C1 controls (U+0080..U+009F) */
        bool ok = n > 1 ? !(p[0] == 0xc2 && p[1] < 0xa0) : n == 1 && *p >= 0x20 && *p != 0x7f;
        if (o + (ok ? n : 1) + 1 > cap)
            break;
        if (ok)
            memcpy(out + o, p, n), o += n, p += n;
        else
            out[o++] = '?', p += n ? n : 1;
        cols++;
    }
    if (cap > 0)
        out[o] = '\0';
    return cols;
}

/* utf8_len of the sequence at p, which has n bytes left (maybe no NUL). */
static size_t utf8_len_n(const unsigned char *p, size_t n)
{
    unsigned char tmp[5] = {0};

    memcpy(tmp, p, n < 4 ? n : 4);
    return utf8_len(tmp);
}

void report_put_clean(FILE *f, const char *s, size_t n, bool tabs)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, run = 0; /* a run of good bytes from i - run, written at once */

    while (i < n) {
        size_t k = utf8_len_n(p + i, n - i);
        bool ok = k > 1 ? !(p[i] == 0xc2 && p[i + 1] < 0xa0)
                        : k == 1 && ((p[i] >= 0x20 && p[i] != 0x7f) || (tabs && p[i] == '\t'));
        if (ok) {
            i += k, run += k;
            continue;
        }
        fwrite(p + i - run, 1, run, f);
        fputc('?', f);
        run = 0;
        i += k ? k : 1;
    }
    fwrite(p + i - run, 1, run, f);
}

void report_reason(const struct api_resp *r, char *out, size_t cap)
{
    const char *detail = r->json ? json_string_value(json_object_get(r->json, "detail")) : NULL;
    char clean[512];

    if (detail) {
        report_clean(detail, clean, sizeof(clean), -1);
        xsnprintf(out, cap, "%s", clean);
    } else {
        xsnprintf(out, cap, "HTTP %ld", r->status);
    }
}

/* errors[] past the first entry, which the detail repeats. */
static void report_fields(FILE *f, const json_t *errors)
{
    size_t i;
    const json_t *e;

    json_array_foreach(errors, i, e)
    {
        const char *field = json_string_value(json_object_get(e, "field"));
        const char *msg = json_string_value(json_object_get(e, "message"));
        char cf[128], cm[512];
        if (i == 0 || !field || !msg)
            continue;
        report_clean(field, cf, sizeof(cf), -1);
        report_clean(msg, cm, sizeof(cm), -1);
        fprintf(f, "opsrun:   invalid \"%s\": %s\n", cf, cm);
    }
}

void report_answer(FILE *f, const char *what, const struct api_resp *r)
{
    const char *title = r->json ? json_string_value(json_object_get(r->json, "title")) : NULL;
    char ct[128], reason[512];

    report_reason(r, reason, sizeof(reason));
    if (title) {
        report_clean(title, ct, sizeof(ct), -1);
        fprintf(f, "opsrun: %s: %s: %s\n", what, ct, reason);
        report_fields(f, json_object_get(r->json, "errors"));
    } else {
        fprintf(f, "opsrun: %s: the server answered HTTP %ld\n", what, r->status);
    }
}

void report_error(FILE *f, const struct error *err)
{
    fprintf(f, "opsrun: %s\n", err->message);
}
