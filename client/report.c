/* client/report.c — see report.h. */
#include "client/report.h"

#include <jansson.h>

/* The length of the UTF-8 sequence that starts with byte c (1 for a byte
 * that cannot start one: it is shown as '?'). */
static size_t seq_len(unsigned char c)
{
    if (c >= 0xf0 && c <= 0xf4)
        return 4;
    if (c >= 0xe0)
        return c <= 0xef ? 3 : 1;
    if (c >= 0xc2)
        return 2;
    return 1;
}

int report_clean(const char *in, char *out, size_t cap, int max_cols)
{
    const unsigned char *p = (const unsigned char *)in;
    size_t o = 0;
    int cols = 0;

    while (*p && (max_cols < 0 || cols < max_cols)) {
        size_t n = seq_len(*p), k = 1;
        bool ok = n > 1 || (*p >= 0x20 && *p != 0x7f && *p < 0x80);
        while (ok && k < n && (p[k] & 0xc0) == 0x80)
            k++;
        ok = ok && k == n && !(n == 2 && p[0] == 0xc2 && p[1] < 0xa0); /* C1 controls */
        if (o + (ok ? n : 1) + 1 > cap)
            break;
        if (ok)
            memcpy(out + o, p, n), o += n, p += n;
        else
            out[o++] = '?', p += k;
        cols++;
    }
    if (cap > 0)
        out[o] = '\0';
    return cols;
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
