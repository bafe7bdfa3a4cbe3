/* live/hub_frame.c — the SSE frames the hub keeps and sends: their text
 * ("id: N\nevent: K\ndata: D\n\n") and the run fields that subscribers
 * match on, in one allocation (live/hub_internal.h). Pure; thread-safe. */
#include "live/hub_internal.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* FNV-1a: a cheap pre-check before strcmp when matching runs. */
uint64_t hub_run_hash(const char *s)
{
    uint64_t x = 1469598103934665603ULL;

    for (; *s; s++)
        x = (x ^ (unsigned char)*s) * 1099511628211ULL;
    return x;
}

static size_t id_line_len(int64_t id)
{
    char head[32];

    return id > 0 ? xsnprintf(head, sizeof(head), "id: %" PRId64 "\n", id) : 0;
}

size_t hub_frame_len(int64_t id, const char *event, const char *data)
{
    size_t n = id_line_len(id) + strlen("event: \ndata: \n\n") + strlen(event) + strlen(data);

    for (const char *p = strchr(data, '\n'); p; p = strchr(p + 1, '\n'))
        n += strlen("data: ");
    return n;
}

static size_t put(char *dst, const char *s)
{
    size_t n = strlen(s);

    memcpy(dst, s, n);
    return n;
}

size_t hub_frame_write(char *dst, int64_t id, const char *event, const char *data, size_t *id_len)
{
    size_t n = 0, il = 0;

    if (id > 0)
        n = il = xsnprintf(dst, id_line_len(id) + 1, "id: %" PRId64 "\n", id);
    n += put(dst + n, "event: ");
    n += put(dst + n, event);
    n += put(dst + n, "\ndata: ");
    for (const char *p = data; *p; p++) {
        dst[n++] = *p;
        if (*p == '\n')
            n += put(dst + n, "data: ");
    }
    memcpy(dst + n, "\n\n", 3);
    if (id_len)
        *id_len = il;
    return n + 2;
}

char *hub_json_compact(const char *data)
{
    json_t *j = json_loads(data, JSON_DECODE_ANY, NULL);
    char *s = j ? json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;

    json_decref(j);
    return s;
}

struct frame *hub_frame_new(const struct event_row *ev)
{
    char *compact = ev->run_json_compact ? NULL : hub_json_compact(ev->run_json);
    const char *data = compact ? compact : ev->run_json;
    size_t len = hub_frame_len(ev->id, ev->kind, data);
    const char *parent = ev->parent_id ? ev->parent_id : "";
    size_t tl = strlen(ev->tenant) + 1, rl = strlen(ev->run_id) + 1, yl = strlen(ev->run_type) + 1;
    size_t pl = strlen(parent) + 1;
    struct frame *f = xmalloc(sizeof(*f) + len + 1 + tl + rl + yl + pl);
    char *p = f->text + len + 1;

    f->len = hub_frame_write(f->text, ev->id, ev->kind, data, &f->id_len);
    free(compact);
    f->id = ev->id;
    f->tenant = memcpy(p, ev->tenant, tl);
    f->run_id = memcpy(p + tl, ev->run_id, rl);
    f->run_type = memcpy(p + tl + rl, ev->run_type, yl);
    f->parent_id = memcpy(p + tl + rl + yl, parent, pl);
    f->run_hash = hub_run_hash(ev->run_id);
    f->status = ev->status;
    f->terminal = run_status_is_terminal(ev->status);
    return f;
}

/* What a long-poll needs of an event that completes a run: no text, never
 * put into the ring. */
struct frame *hub_frame_ended(const struct event_row *ev)
{
    size_t tl = strlen(ev->tenant) + 1, rl = strlen(ev->run_id) + 1;
    struct frame *f = xcalloc(1, sizeof(*f) + 1 + tl + rl);
    char *p = f->text + 1;

    f->id = ev->id;
    f->tenant = memcpy(p, ev->tenant, tl);
    f->run_id = memcpy(p + tl, ev->run_id, rl);
    f->run_type = "";
    f->parent_id = "";
    f->run_hash = hub_run_hash(ev->run_id);
    f->status = ev->status;
    f->terminal = true;
    return f;
}
