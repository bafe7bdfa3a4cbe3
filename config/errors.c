/* config/errors.c — every error of one load (config_internal.h): one line
 * each in the caller's message, as many as it holds, then how many more
 * there were, and every one to the sink when main set one; and the "did
 * you mean" of an unknown key. */
#include "config/config_internal.h"

#include "common/suggest.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Room kept at the end of the message for its last line. */
#define TAIL_ROOM 40

/* Where every error line also goes (cfg_errors_sink); NULL: nowhere. */
static void (*sink_fn)(void *arg, const char *line);
static void *sink_arg;

void cfg_errors_sink(void (*fn)(void *arg, const char *line), void *arg)
{
    sink_fn = fn;
    sink_arg = arg;
}

void cfg_errors_init(struct cfg_errors *e, struct error *out)
{
    *e = (struct cfg_errors){.out = out};
    if (out)
        out->message[0] = '\0';
}

enum status cfg_errors_addf(struct cfg_errors *e, const char *fmt, ...)
{
    char line[sizeof(e->out->message)];
    size_t len, add;
    va_list ap;

    e->n++;
    if (!e->out && !sink_fn)
        return ST_INVALID;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    utf8_scrub(line);
    if (sink_fn)
        sink_fn(sink_arg, line);
    if (!e->out)
        return ST_INVALID;
    len = strlen(e->out->message);
    add = strlen(line);
    if (e->n == 1)
        memcpy(e->out->message, line, add + 1);
    else if (len + 1 + add + TAIL_ROOM < sizeof(e->out->message))
        xsnprintf(e->out->message + len, sizeof(e->out->message) - len, "\n%s", line);
    else
        e->dropped++;
    return ST_INVALID;
}

enum status cfg_errors_add(struct cfg_errors *e, const struct error *one)
{
    return cfg_errors_addf(e, "%s", one->message);
}

enum status cfg_errors_note(struct cfg_errors *e, enum status st, const struct error *one)
{
    return st == ST_OK ? ST_OK : cfg_errors_add(e, one);
}

enum status cfg_errors_end(struct cfg_errors *e)
{
    struct error *out = e->out;
    size_t len;

    if (e->n == 0)
        return ST_OK;
    if (!out || e->dropped == 0)
        return ST_INVALID;
    len = strlen(out->message);
    if (len + TAIL_ROOM > sizeof(out->message)) { /* only a very long first line gets here */
        len = sizeof(out->message) - TAIL_ROOM;
        out->message[len] = '\0';
        utf8_scrub(out->message);
    }
    xsnprintf(out->message + len, sizeof(out->message) - len, "\n%u more error%s not shown",
              e->dropped, e->dropped == 1 ? "" : "s");
    return ST_INVALID;
}

enum status cfg_unknown_key(struct cfg_errors *e, const char *path, const struct suggest *s)
{
    char hint[KEY_MAX + 24];

    return cfg_errors_addf(e, "unknown key \"%s\"%s", path, suggest_hint(s, hint, sizeof(hint)));
}
