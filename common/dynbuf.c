/* common/dynbuf.c — the capped growable buffer (common/dynbuf.h). */
#include <assert.h>
#include <stdarg.h>

#include "dynbuf.h"

/* The first allocation: small adds then need no reallocation at all. */
#define DYNBUF_FIRST 64

void dynbuf_init(struct dynbuf *b, size_t max)
{
    assert(max < SIZE_MAX); /* max + 1 must count the NUL */
    *b = (struct dynbuf){.max = max};
}

/* Makes room for need bytes, the NUL included (need <= max + 1): doubling,
 * but never past max + 1, the most the buffer can ever use. */
static void dynbuf_grow(struct dynbuf *b, size_t need)
{
    size_t cap = b->cap ? b->cap : DYNBUF_FIRST;

    if (need <= b->cap)
        return;
    while (cap < need)
        cap = cap > (b->max + 1) / 2 ? b->max + 1 : cap * 2;
    if (cap > b->max + 1)
        cap = b->max + 1;
    b->p = xrealloc(b->p, cap);
    b->cap = cap;
}

enum status dynbuf_add(struct dynbuf *b, const void *ptr, size_t n)
{
    if (n > b->max - b->len)
        return ST_TOO_LARGE;
    if (n == 0)
        return ST_OK;
    dynbuf_grow(b, b->len + n + 1);
    memcpy(b->p + b->len, ptr, n);
    b->len += n;
    b->p[b->len] = '\0';
    return ST_OK;
}

enum status dynbuf_adds(struct dynbuf *b, const char *s)
{
    return dynbuf_add(b, s, strlen(s));
}

enum status dynbuf_vaddf(struct dynbuf *b, const char *fmt, va_list ap)
{
    va_list aq;
    size_t n;
    int r;

    va_copy(aq, ap);
    r = vsnprintf(NULL, 0, fmt, aq);
    va_end(aq);
    if (r < 0)
        abort(); /* an invalid format or conversion: a bug, as in xsnprintf */
    n = (size_t)r;
    if (n > b->max - b->len)
        return ST_TOO_LARGE;
    if (n == 0)
        return ST_OK;
    dynbuf_grow(b, b->len + n + 1);
    vsnprintf(b->p + b->len, n + 1, fmt, ap);
    b->len += n;
    return ST_OK;
}

enum status dynbuf_addf(struct dynbuf *b, const char *fmt, ...)
{
    va_list ap;
    enum status st;

    va_start(ap, fmt);
    st = dynbuf_vaddf(b, fmt, ap);
    va_end(ap);
    return st;
}

void dynbuf_truncate(struct dynbuf *b, size_t len)
{
    assert(len <= b->len);
    b->len = len;
    if (b->p)
        b->p[len] = '\0';
}

void dynbuf_reset(struct dynbuf *b)
{
    dynbuf_truncate(b, 0);
}

size_t dynbuf_drain(struct dynbuf *b, size_t *off, char *buf, size_t max)
{
    size_t len = dynbuf_len(b);
    size_t k = len - *off < max ? len - *off : max;

    if (k)
        memcpy(buf, dynbuf_ptr(b) + *off, k);
    *off += k;
    if (*off == len) {
        *off = 0;
        if (b->cap > 64 * 1024)
            dynbuf_free(b);
        else
            dynbuf_reset(b);
    }
    return k;
}

char *dynbuf_take(struct dynbuf *b)
{
    char *s = b->p ? b->p : xstrdup("");

    dynbuf_init(b, b->max);
    return s;
}

void dynbuf_free(struct dynbuf *b)
{
    free(b->p);
    dynbuf_init(b, b->max);
}

size_t dynbuf_len(const struct dynbuf *b)
{
    return b->len;
}

char *dynbuf_ptr(const struct dynbuf *b)
{
    return b->p;
}
