/* live/hub_sub.c — one subscriber of the hub (an SSE stream): which
 * frames its filter selects, the events it skips because it sent them from
 * the database, and what it reads from the ring (live/hub.h). */
#include "live/hub_internal.h"

#include <stdlib.h>
#include <string.h>

/* The most runs a GET /stream snapshot may skip one by one. */
#define RUN_SKIPS_MAX 4096
/* The keep-alive comment. */
#define HEARTBEAT_TEXT ": hb\n\n"

/* ---- matching ---------------------------------------------------------- */

/* Whether the filter selects f (the skip rules aside). */
static bool sub_selects(const struct hub_sub *s, const struct frame *f)
{
    if (s->tenant && strcmp(f->tenant, s->tenant) != 0)
        return false;
    if (s->run_id)
        return f->run_hash == s->run_hash && strcmp(f->run_id, s->run_id) == 0;
    if (s->run_type && strcmp(f->run_type, s->run_type) != 0)
        return false;
    if (s->parent_id && strcmp(f->parent_id, s->parent_id) != 0)
        return false;
    return !s->has_status || f->status == s->status;
}

bool hub_sub_gate(const struct hub_sub *s, int64_t id, const char *tenant, const char *run_id,
                  bool *with_id)
{
    *with_id = true;
    if (id <= s->skip_upto)
        return false;
    if (s->nskips == 0)
        return true;
    if (id <= s->skips_max)
        *with_id = false;
    for (size_t i = 0; i < s->nskips; i++)
        if (id <= s->skips[i].upto && strcmp(s->skips[i].run_id, run_id) == 0 &&
            strcmp(s->skips[i].tenant, tenant) == 0)
            return false;
    return true;
}

bool hub_sub_wants(const struct hub_sub *s, const struct frame *f, bool *with_id)
{
    return sub_selects(s, f) && hub_sub_gate(s, f->id, f->tenant, f->run_id, with_id);
}

static void sub_drop_skips(struct hub_sub *s)
{
    for (size_t i = 0; i < s->nskips; i++) {
        free(s->skips[i].tenant);
        free(s->skips[i].run_id);
    }
    free(s->skips);
    s->skips = NULL;
    s->nskips = 0;
    s->skips_max = 0;
}

void hub_sub_skip_upto(struct hub_sub *s, int64_t upto)
{
    if (upto > s->skip_upto)
        s->skip_upto = upto;
}

void hub_sub_skip_run(struct hub_sub *s, const char *tenant, const char *run_id, int64_t upto)
{
    if (upto <= s->skip_upto || s->nskips >= RUN_SKIPS_MAX)
        return; /* past the cap the stream sends those runs' older events again */
    s->skips = xrealloc(s->skips, (s->nskips + 1) * sizeof(*s->skips));
    s->skips[s->nskips].tenant = xstrdup(tenant);
    s->skips[s->nskips].run_id = xstrdup(run_id);
    s->skips[s->nskips].upto = upto;
    s->nskips++;
    if (upto > s->skips_max)
        s->skips_max = upto;
}

void hub_sub_mark_ended(struct hub_sub *s)
{
    s->ended = true;
}

void hub_sub_set_quiet(struct hub_sub *s)
{
    pthread_mutex_lock(&s->h->mu);
    s->quiet = true;
    pthread_mutex_unlock(&s->h->mu);
}

void hub_poke(struct hub *h, const char *run_id)
{
    uint64_t hash = run_id ? hub_run_hash(run_id) : 0;

    pthread_mutex_lock(&h->mu);
    for (struct hub_sub *s = h->subs; s; s = s->next) {
        if (!s->quiet || (run_id && (s->run_hash != hash || strcmp(s->run_id, run_id) != 0)))
            continue;
        s->poked = true;
        if (s->suspended)
            hub_sub_resume(s);
    }
    pthread_mutex_unlock(&h->mu);
}

void hub_wake_all(struct hub *h)
{
    pthread_mutex_lock(&h->mu);
    for (struct hub_sub *s = h->subs; s; s = s->next) {
        s->woken = true;
        if (s->suspended)
            hub_sub_resume(s);
    }
    pthread_mutex_unlock(&h->mu);
}

bool hub_sub_live(const struct hub_sub *s)
{
    return s->live;
}

void hub_sub_resume(struct hub_sub *s)
{
    s->suspended = false;
    s->wake.resume(s->wake.arg);
}

/* ---- registering and reading ------------------------------------------- */

static char *dup_or_null(const char *s)
{
    return s ? xstrdup(s) : NULL;
}

/* h->mu held. */
static enum status sub_admit(struct hub *h, struct error *err)
{
    if (h->closing)
        return error_set(err, ST_BUSY, "the server is shutting down");
    if (!h->ready)
        return error_set(err, ST_BUSY, "the event stream is not ready yet");
    if (h->nsubs >= h->o.max_subscribers) {
        h->refused_total++;
        return error_set(err, ST_BUSY, "too many stream subscribers (limit %d)",
                         h->o.max_subscribers);
    }
    return ST_OK;
}

enum status hub_sub_new(struct hub *h, const struct event_filter *f, const struct hub_wake *w,
                        struct hub_sub **out, int64_t *pos, struct error *err)
{
    struct hub_sub *s;
    enum status st;

    *out = NULL;
    pthread_mutex_lock(&h->mu);
    st = sub_admit(h, err);
    if (st != ST_OK) {
        pthread_mutex_unlock(&h->mu);
        return st;
    }
    s = xcalloc(1, sizeof(*s));
    s->h = h;
    s->tenant = dup_or_null(f->tenant);
    s->run_id = dup_or_null(f->run_id);
    s->run_type = dup_or_null(f->run_type);
    s->parent_id = dup_or_null(f->parent_id);
    s->has_status = f->has_status;
    s->status = f->status;
    s->run_hash = f->run_id ? hub_run_hash(f->run_id) : 0;
    s->wake = *w;
    s->seq = h->next;
    *pos = h->pos;
    s->next = h->subs;
    if (h->subs)
        h->subs->prev = s;
    h->subs = s;
    h->nsubs++;
    h->rang = true; /* the reader may have been idle: catch up now */
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    *out = s;
    return ST_OK;
}

void hub_sub_free(struct hub_sub *s)
{
    struct hub *h;

    if (!s)
        return;
    h = s->h;
    pthread_mutex_lock(&h->mu);
    if (s->prev)
        s->prev->next = s->next;
    else
        h->subs = s->next;
    if (s->next)
        s->next->prev = s->prev;
    h->nsubs--;
    if (h->closing)
        pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    sub_drop_skips(s);
    free(s->tenant);
    free(s->run_id);
    free(s->run_type);
    free(s->parent_id);
    free(s);
}

void hub_sub_rejoin(struct hub_sub *s, int64_t *pos)
{
    pthread_mutex_lock(&s->h->mu);
    s->seq = s->h->next;
    s->frame_off = 0;
    *pos = s->h->pos;
    pthread_mutex_unlock(&s->h->mu);
}

static size_t copy_out(char *buf, size_t max, const char *src, size_t len, size_t *off)
{
    size_t k = len - *off < max ? len - *off : max;

    memcpy(buf, src + *off, k);
    *off += k;
    return k;
}

/* h->mu held: copies ring frames the subscriber wants into buf. */
static size_t sub_copy_frames(struct hub_sub *s, char *buf, size_t max)
{
    struct hub *h = s->h;
    size_t n = 0;

    while (n < max && s->seq < h->next && !s->ended) {
        const struct frame *f = h->ring[s->seq % (uint64_t)h->o.ring_frames];
        bool with_id = true;
        if (s->frame_off == 0) {
            if (!hub_sub_wants(s, f, &with_id)) {
                s->seq++;
                continue;
            }
            if (s->quiet) { /* a wake-up, not a frame to send */
                s->poked = true;
                s->ended |= s->run_id && f->terminal;
                s->seq++;
                continue;
            }
            s->frame_off = with_id ? 0 : f->id_len;
            s->live = true;
        }
        n += copy_out(buf + n, max - n, f->text, f->len, &s->frame_off);
        if (s->frame_off < f->len)
            break;
        s->frame_off = 0;
        s->seq++;
        if (s->nskips && f->id > s->skips_max)
            sub_drop_skips(s);
        if (s->run_id && f->terminal)
            s->ended = true;
    }
    return n;
}

enum hub_read hub_sub_read(struct hub_sub *s, char *buf, size_t max, size_t *n)
{
    struct hub *h = s->h;
    enum hub_read r = HUB_DATA;

    *n = 0;
    pthread_mutex_lock(&h->mu);
    if (s->seq < h->oldest && s->quiet) { /* it sends nothing from the ring: catch up */
        s->seq = h->next;
        s->poked = true;
    }
    if (s->seq < h->oldest) {
        h->dropped_total += s->live;
        pthread_mutex_unlock(&h->mu);
        return HUB_LAGGED;
    }
    /* A keep-alive goes out between frames only; a frame cut short is
     * finished first, and a keep-alive cut short before the next frame. */
    if (s->hb_due && s->frame_off == 0) {
        *n = copy_out(buf, max, HEARTBEAT_TEXT, strlen(HEARTBEAT_TEXT), &s->hb_off);
        if (s->hb_off == strlen(HEARTBEAT_TEXT))
            s->hb_due = false, s->hb_off = 0;
    }
    if (s->hb_off == 0 && (!h->closing || s->frame_off > 0))
        *n += sub_copy_frames(s, buf + *n, max - *n);
    if (s->quiet && s->poked && !h->closing) {
        s->poked = false; /* *n may be 0: the caller looks again */
        pthread_mutex_unlock(&h->mu);
        return HUB_DATA;
    }
    if (*n == 0) {
        if (s->ended || h->closing)
            r = HUB_END;
        else if (s->woken)
            s->woken = false, r = HUB_WOKEN;
        else if (!s->wake.suspend(s->wake.arg))
            r = HUB_GONE;
        else
            s->suspended = true, r = HUB_SUSPENDED;
    }
    pthread_mutex_unlock(&h->mu);
    return r;
}
