/* live/hub.c — the event hub's ring of frames, publishing into it, the
 * long-poll waiters, and the hub's life from hub_new to hub_free
 * (live/hub.h); the reader thread is in hub_reader.c, subscribers in
 * hub_sub.c, frames in hub_frame.c. Lock order: hub->mu, then whatever the
 * wake callbacks take (MHD's own mutexes); MHD never calls us with its lock
 * held on a path that takes hub->mu (docs/architecture.md, "Live streams"). */
#include "live/hub_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- publishing (reader thread, h->mu held) ---------------------------- */

static void ring_evict_one(struct hub *h)
{
    struct frame *f = h->ring[h->oldest % (uint64_t)h->o.ring_frames];

    h->ring[h->oldest % (uint64_t)h->o.ring_frames] = NULL;
    h->bytes -= (int64_t)f->len;
    h->oldest++;
    free(f);
}

static void ring_append(struct hub *h, struct frame *f)
{
    while (h->next - h->oldest >= (uint64_t)h->o.ring_frames ||
           (h->next > h->oldest && h->bytes + (int64_t)f->len > h->o.ring_bytes))
        ring_evict_one(h);
    h->ring[h->next % (uint64_t)h->o.ring_frames] = f;
    h->next++;
    h->bytes += (int64_t)f->len;
    h->published_total++;
}

void hub_waiter_fire(struct hub *h, struct hub_waiter *w)
{
    if (w->prev)
        w->prev->next = w->next;
    else
        h->waiters = w->next;
    if (w->next)
        w->next->prev = w->prev;
    w->prev = w->next = NULL;
    w->linked = false;
    w->fired = true;
    h->nwaiters--;
    if (w->suspended) {
        w->suspended = false;
        w->wake.resume(w->wake.arg);
    }
}

/* h->mu held: fires the waiters of f's run when f completes it. */
static void fire_waiters(struct hub *h, const struct frame *f)
{
    struct hub_waiter *w, *nx;

    if (!f->terminal)
        return;
    for (w = h->waiters; w; w = nx) {
        nx = w->next;
        if (strcmp(f->run_id, w->run_id) == 0 && strcmp(f->tenant, w->tenant) == 0)
            hub_waiter_fire(h, w);
    }
}

/* h->mu held, f just appended. A suspended subscriber has read everything
 * before f: it is marked for waking when it wants f, and otherwise moved
 * past f, so an eviction never takes a frame it wants unread. */
static void route_frame(struct hub *h, const struct frame *f)
{
    bool with_id;

    for (struct hub_sub *s = h->subs; s; s = s->next) {
        if (!s->suspended || s->wake_marked)
            continue;
        if (hub_sub_wants(s, f, &with_id))
            s->wake_marked = true;
        else
            s->seq = h->next;
    }
    fire_waiters(h, f);
}

enum hub_need hub_need(const struct hub *h)
{
    return h->nsubs > 0 ? NEED_FRAMES : h->nwaiters > 0 ? NEED_ENDED : NEED_POSITION;
}

/* Appends a page's frames and moves the position, in one critical section:
 * a subscriber registered at pos sees every later frame. The page was read
 * for need; when a stream or a long-poll came meanwhile and needs more,
 * nothing is published (false): the page must be read again. Frames read
 * for NEED_ENDED only fire waiters; they are freed here. */
bool hub_publish(struct hub *h, struct frame **frames, size_t n, int64_t new_pos,
                 enum hub_need need)
{
    pthread_mutex_lock(&h->mu);
    if (hub_need(h) > need) {
        pthread_mutex_unlock(&h->mu);
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        if (need == NEED_FRAMES) {
            ring_append(h, frames[i]);
            route_frame(h, frames[i]);
        } else {
            fire_waiters(h, frames[i]);
            free(frames[i]);
        }
    }
    if (new_pos > h->pos)
        h->pos = new_pos;
    for (struct hub_sub *s = h->subs; s && n > 0; s = s->next)
        if (s->wake_marked) {
            s->wake_marked = false;
            hub_sub_resume(s);
        }
    pthread_mutex_unlock(&h->mu);
    return true;
}

/* h->mu held. */
void hub_heartbeat_all(struct hub *h)
{
    for (struct hub_sub *s = h->subs; s; s = s->next) {
        s->hb_due = true;
        if (s->suspended)
            hub_sub_resume(s);
    }
}

/* ---- lifecycle --------------------------------------------------------- */

struct hub *hub_new(const struct hub_options *o)
{
    struct hub *h = xcalloc(1, sizeof(*h));

    h->o = *o;
    /* An array of pointers (see .clang-tidy). NOLINTNEXTLINE(bugprone-sizeof-expression) */
    h->ring = xcalloc((size_t)o->ring_frames, sizeof(*h->ring));
    pthread_mutex_init(&h->mu, NULL);
    cond_init_monotonic(&h->cv);
    h->pos = -1;
    return h;
}

void hub_doorbell(struct hub *h)
{
    if (!h)
        return;
    pthread_mutex_lock(&h->mu);
    if (!h->rang) {
        h->rang = true;
        pthread_cond_broadcast(&h->cv);
    }
    pthread_mutex_unlock(&h->mu);
}

void hub_close(struct hub *h)
{
    pthread_mutex_lock(&h->mu);
    h->closing = true;
    for (struct hub_sub *s = h->subs; s; s = s->next)
        if (s->suspended)
            hub_sub_resume(s);
    while (h->waiters)
        hub_waiter_fire(h, h->waiters);
    pthread_mutex_unlock(&h->mu);
}

bool hub_wait_empty(struct hub *h, int timeout_ms)
{
    struct timespec ts;
    bool empty;

    abstime_after_ms(&ts, timeout_ms);
    pthread_mutex_lock(&h->mu);
    while (h->nsubs + h->nheld > 0)
        if (pthread_cond_timedwait(&h->cv, &h->mu, &ts) != 0)
            break;
    empty = h->nsubs + h->nheld == 0;
    pthread_mutex_unlock(&h->mu);
    return empty;
}

void hub_free(struct hub *h)
{
    if (!h)
        return;
    pthread_mutex_lock(&h->mu);
    h->stop = true;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    if (h->started)
        pthread_join(h->thread, NULL);
    while (h->next > h->oldest)
        ring_evict_one(h);
    free(h->ring);
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    free(h);
}

void hub_stats(struct hub *h, struct hub_stats *out)
{
    pthread_mutex_lock(&h->mu);
    *out = (struct hub_stats){
        .ready = h->ready,
        .db_ok = h->db_ok,
        .pos = h->pos,
        .pending_ms = h->pending_since_ms ? clock_mono_ms() - h->pending_since_ms : 0,
        .subscribers = h->nsubs,
        .waiters = h->nwaiters,
        .ring_frames = (int64_t)(h->next - h->oldest),
        .ring_bytes = h->bytes,
        .published_total = h->published_total,
        .dropped_total = h->dropped_total,
        .refused_total = h->refused_total,
        .reconnects_total = h->reconnects_total,
    };
    pthread_mutex_unlock(&h->mu);
}

void hub_inject(struct hub *h, const struct event_row *rows, size_t n, int64_t pos)
{
    /* An array of pointers (see .clang-tidy). NOLINTNEXTLINE(bugprone-sizeof-expression) */
    struct frame **frames = xcalloc(n ? n : 1, sizeof(*frames));
    size_t k = 0;

    for (size_t i = 0; i < n; i++)
        if (rows[i].run_json && rows[i].run_type)
            frames[k++] = hub_frame_new(&rows[i]);
    pthread_mutex_lock(&h->mu);
    h->ready = true;
    if (h->pos < 0)
        h->pos = 0;
    pthread_mutex_unlock(&h->mu);
    (void)hub_publish(h, frames, k, pos, NEED_FRAMES);
    free(frames);
}

void hub_heartbeat(struct hub *h)
{
    pthread_mutex_lock(&h->mu);
    hub_heartbeat_all(h);
    pthread_mutex_unlock(&h->mu);
}

/* ---- waiters ----------------------------------------------------------- */

enum status hub_wait_add(struct hub *h, struct hub_waiter *w, struct error *err)
{
    w->fired = w->suspended = w->linked = w->held = false;
    w->prev = NULL;
    pthread_mutex_lock(&h->mu);
    if (h->closing) {
        pthread_mutex_unlock(&h->mu);
        return error_set(err, ST_BUSY, "the server is shutting down");
    }
    w->next = h->waiters;
    if (h->waiters)
        h->waiters->prev = w;
    h->waiters = w;
    w->linked = w->held = true;
    h->nwaiters++;
    h->nheld++;
    h->rang = true;                 /* the reader may have been idle: catch up now */
    pthread_cond_broadcast(&h->cv); /* and its deadline may be the next wake-up */
    pthread_mutex_unlock(&h->mu);
    return ST_OK;
}

bool hub_wait_suspend(struct hub *h, struct hub_waiter *w)
{
    bool ok;

    pthread_mutex_lock(&h->mu);
    ok = !w->fired;
    if (ok) {
        w->wake.suspend(w->wake.arg);
        w->suspended = true;
    }
    pthread_mutex_unlock(&h->mu);
    return ok;
}

void hub_wait_remove(struct hub *h, struct hub_waiter *w)
{
    pthread_mutex_lock(&h->mu);
    if (w->linked) {
        w->suspended = false; /* removed by its owner: nothing to resume */
        hub_waiter_fire(h, w);
    }
    pthread_mutex_unlock(&h->mu);
}

void hub_wait_release(struct hub *h, struct hub_waiter *w)
{
    pthread_mutex_lock(&h->mu);
    if (w->held) {
        w->held = false;
        h->nheld--;
        if (h->closing)
            pthread_cond_broadcast(&h->cv);
    }
    pthread_mutex_unlock(&h->mu);
}
