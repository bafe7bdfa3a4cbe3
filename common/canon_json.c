/* common/canon_json.c — canonical JSON (common/canon_json.h).
 *
 * System headers come before canon_json.h, ahead of common.h's poison
 * pragma. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "canon_json.h"

#include "dynbuf.h"

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
