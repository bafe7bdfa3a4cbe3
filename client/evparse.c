/* client/evparse.c — see evparse.h. */
#include "client/evparse.h"

#include <string.h>

#define RETRY_DIGITS_MAX 9

void evparse_init(struct evparse *p, size_t max, evparse_fn fn, void *arg)
{
    memset(p, 0, sizeof(*p));
    dynbuf_init(&p->line, max);
    dynbuf_init(&p->data, max);
    dynbuf_init(&p->type, max);
    dynbuf_init(&p->id, max);
    p->retry_ms = -1;
    p->fn = fn;
    p->arg = arg;
}

void evparse_cleanup(struct evparse *p)
{
    dynbuf_free(&p->line);
    dynbuf_free(&p->data);
    dynbuf_free(&p->type);
    dynbuf_free(&p->id);
}

void evparse_reset(struct evparse *p)
{
    dynbuf_reset(&p->line);
    dynbuf_reset(&p->data);
    dynbuf_reset(&p->type);
    p->cr = false;
    p->started = false;
}

static const char *text(const struct dynbuf *b)
{
    return dynbuf_ptr(b) ? dynbuf_ptr(b) : "";
}

const char *evparse_last_id(const struct evparse *p)
{
    return text(&p->id);
}

static enum status too_large(const struct evparse *p, struct error *err)
{
    return error_set(err, ST_TOO_LARGE, "event stream line or event longer than %zu bytes",
                     p->line.max);
}

/* A blank line: the event, when it has data; then a fresh event. */
static enum status dispatch(struct evparse *p, struct error *err)
{
    size_t n = dynbuf_len(&p->data);
    enum status st = ST_OK;

    if (n > 0) {
        struct evparse_event ev;
        dynbuf_truncate(&p->data, n - 1); /* the LF after the last data line */
        ev.type = dynbuf_len(&p->type) ? text(&p->type) : "message";
        ev.data = text(&p->data);
        ev.data_len = n - 1;
        ev.id = evparse_last_id(p);
        st = p->fn(p->arg, &ev, err);
    }
    dynbuf_reset(&p->data);
    dynbuf_reset(&p->type);
    return st;
}

static bool field_is(const char *name, size_t n, const char *want)
{
    return n == strlen(want) && memcmp(name, want, n) == 0;
}

static void set_retry(struct evparse *p, const char *v, size_t n)
{
    long ms = 0;

    if (n == 0 || n > RETRY_DIGITS_MAX)
        return;
    for (size_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9')
            return;
        ms = ms * 10 + (v[i] - '0');
    }
    p->retry_ms = ms;
}

/* One field line: "name: value", "name:value" or just "name". */
static enum status field(struct evparse *p, const char *line, size_t len, struct error *err)
{
    const char *colon = memchr(line, ':', len);
    size_t nlen = colon ? (size_t)(colon - line) : len;
    const char *v = colon ? colon + 1 : "";
    size_t vlen = colon ? len - nlen - 1 : 0;

    if (vlen > 0 && *v == ' ')
        v++, vlen--;
    if (field_is(line, nlen, "event")) {
        dynbuf_reset(&p->type);
        if (dynbuf_add(&p->type, v, vlen) != ST_OK)
            return too_large(p, err);
    } else if (field_is(line, nlen, "data")) {
        if (dynbuf_add(&p->data, v, vlen) != ST_OK || dynbuf_add(&p->data, "\n", 1) != ST_OK)
            return too_large(p, err);
    } else if (field_is(line, nlen, "id") && !memchr(v, '\0', vlen)) {
        dynbuf_reset(&p->id);
        if (dynbuf_add(&p->id, v, vlen) != ST_OK)
            return too_large(p, err);
    } else if (field_is(line, nlen, "retry")) {
        set_retry(p, v, vlen);
    }
    return ST_OK;
}

static enum status line_done(struct evparse *p, struct error *err)
{
    const char *line = text(&p->line);
    size_t len = dynbuf_len(&p->line);
    enum status st = ST_OK;

    if (!p->started && len >= 3 && memcmp(line, "\xEF\xBB\xBF", 3) == 0)
        line += 3, len -= 3;
    p->started = true;
    if (len == 0)
        st = dispatch(p, err);
    else if (line[0] != ':')
        st = field(p, line, len, err);
    dynbuf_reset(&p->line);
    return st;
}

enum status evparse_feed(struct evparse *p, const char *buf, size_t n, struct error *err)
{
    size_t i = 0;

    while (i < n) {
        size_t j = i;
        enum status st;
        if (buf[i] == '\r' || buf[i] == '\n') {
            bool lf_of_crlf = p->cr && buf[i] == '\n';
            p->cr = buf[i] == '\r';
            i++;
            if (lf_of_crlf)
                continue;
            if ((st = line_done(p, err)) != ST_OK)
                return st;
            continue;
        }
        p->cr = false;
        while (j < n && buf[j] != '\r' && buf[j] != '\n')
            j++;
        if (dynbuf_add(&p->line, buf + i, j - i) != ST_OK)
            return too_large(p, err);
        i = j;
    }
    return ST_OK;
}
