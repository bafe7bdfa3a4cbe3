/* live/hub.c — the event ring, its reader thread, subscribers and
 * long-poll waiters (server/hub.h). Lock order: hub->mu, then whatever the
 * wake callbacks take (MHD's own mutexes); MHD never calls us with its lock
 * held on a path that takes hub->mu (docs/architecture.md, "Live streams"). */
#include "live/hub.h"

#include "common/log.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define HUB_PAGE 500
/* A pending horizon is checked again after 5 ms, doubling up to 100 ms
 * while a writer stays open (an idle transaction holds it for good). */
#define SETTLE_TICK_MS 5
#define SETTLE_TICK_MAX_MS 100
#define RETRY_MAX_MS 2000
#define HEARTBEAT_TEXT ": hb\n\n"
#define RUN_SKIPS_MAX 4096
/* Without a stream or a long-poll, a doorbell starts a round at most this
 * often: the position stays fresh for the next stream (which has to be
 * caught up from it) at a few cheap statements a second. */
#define IDLE_ROUND_MS 100

/* One SSE frame: text is "id: N\nevent: K\ndata: J\n\n"; the strings
 * after it in the same allocation. */
struct frame {
    int64_t id;
    uint64_t run_hash;
    const char *tenant, *run_id, *run_type;
    enum run_status status;
    bool terminal;
    size_t id_len; /* of the "id: N\n" line */
    size_t len;
    char text[];
};

struct run_skip {
    char *tenant, *run_id;
    int64_t upto;
};

struct hub_sub {
    struct hub *h;
    struct hub_sub *prev, *next;
    /* the filter, immutable once registered; tenant NULL: every tenant */
    char *tenant, *run_id, *run_type;
    bool has_status;
    enum run_status status;
    uint64_t run_hash;
    struct hub_wake wake;
    /* under h->mu */
    uint64_t seq;     /* next ring slot to look at */
    size_t frame_off; /* bytes of ring[seq] already sent (0 = none) */
    bool suspended, wake_marked, hb_due;
    size_t hb_off; /* of a heartbeat cut short */
    /* the reader's own */
    int64_t skip_upto;
    struct run_skip *skips;
    size_t nskips;
    int64_t skips_max;
    bool ended, live;
};

struct hub {
    struct hub_options o;
    pthread_t thread;
    bool started;

    pthread_mutex_t mu;
    pthread_cond_t cv; /* the reader: doorbell, stop; the drain: subscribers gone */
    bool rang, stop, closing, ready, db_ok;
    int64_t pos;
    struct frame **ring;
    uint64_t oldest, next; /* ring sequence numbers: [oldest, next) are held */
    int64_t bytes;
    struct hub_sub *subs;
    int nsubs;
    struct hub_waiter *waiters;
    int nwaiters;             /* armed */
    int nheld;                /* added and not released: their answers may be unsent */
    int64_t pending_since_ms; /* 0 = no horizon waiting */
    int64_t published_total, dropped_total, refused_total, reconnects_total;
};

/* FNV-1a: a cheap pre-check before strcmp when matching runs. */
static uint64_t run_hash(const char *s)
{
    uint64_t x = 1469598103934665603ULL;

    for (; *s; s++)
        x = (x ^ (unsigned char)*s) * 1099511628211ULL;
    return x;
}

/* ---- frames ---------------------------------------------------------- */

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

static struct frame *frame_new(const struct event_row *ev)
{
    char *compact = ev->run_json_compact ? NULL : hub_json_compact(ev->run_json);
    const char *data = compact ? compact : ev->run_json;
    size_t len = hub_frame_len(ev->id, ev->kind, data);
    size_t tl = strlen(ev->tenant) + 1, rl = strlen(ev->run_id) + 1, yl = strlen(ev->run_type) + 1;
    struct frame *f = xmalloc(sizeof(*f) + len + 1 + tl + rl + yl);
    char *p = f->text + len + 1;

    f->len = hub_frame_write(f->text, ev->id, ev->kind, data, &f->id_len);
    free(compact);
    f->id = ev->id;
    f->tenant = memcpy(p, ev->tenant, tl);
    f->run_id = memcpy(p + tl, ev->run_id, rl);
    f->run_type = memcpy(p + tl + rl, ev->run_type, yl);
    f->run_hash = run_hash(ev->run_id);
    f->status = ev->status;
    f->terminal = run_status_is_terminal(ev->status);
    return f;
}

/* What a long-poll needs of an event that completes a run: no text, never
 * put into the ring. */
static struct frame *frame_ended(const struct event_row *ev)
{
    size_t tl = strlen(ev->tenant) + 1, rl = strlen(ev->run_id) + 1;
    struct frame *f = xcalloc(1, sizeof(*f) + 1 + tl + rl);
    char *p = f->text + 1;

    f->id = ev->id;
    f->tenant = memcpy(p, ev->tenant, tl);
    f->run_id = memcpy(p + tl, ev->run_id, rl);
    f->run_type = "";
    f->run_hash = run_hash(ev->run_id);
    f->status = ev->status;
    f->terminal = true;
    return f;
}

/* ---- subscriber matching ---------------------------------------------- */

/* Whether the filter selects f (the skip rules aside). */
static bool sub_selects(const struct hub_sub *s, const struct frame *f)
{
    if (s->tenant && strcmp(f->tenant, s->tenant) != 0)
        return false;
    if (s->run_id)
        return f->run_hash == s->run_hash && strcmp(f->run_id, s->run_id) == 0;
    if (s->run_type && strcmp(f->run_type, s->run_type) != 0)
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

static bool sub_wants(const struct hub_sub *s, const struct frame *f, bool *with_id)
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

bool hub_sub_live(const struct hub_sub *s)
{
    return s->live;
}

/* ---- publishing (reader thread, h->mu held) --------------------------- */

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

static void sub_resume(struct hub_sub *s)
{
    s->suspended = false;
    s->wake.resume(s->wake.arg);
}

static void waiter_fire(struct hub *h, struct hub_waiter *w)
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
            waiter_fire(h, w);
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
        if (sub_wants(s, f, &with_id))
            s->wake_marked = true;
        else
            s->seq = h->next;
    }
    fire_waiters(h, f);
}

/* What the reader must read for whoever is there (h->mu held): frames for
 * streams, the completions for long-polls, or only the position. */
enum hub_need {
    NEED_POSITION,
    NEED_ENDED,
    NEED_FRAMES,
};

static enum hub_need hub_need(const struct hub *h)
{
    return h->nsubs > 0 ? NEED_FRAMES : h->nwaiters > 0 ? NEED_ENDED : NEED_POSITION;
}

/* Appends a page's frames and moves the position, in one critical section:
 * a subscriber registered at pos sees every later frame. The page was read
 * for need; when a stream or a long-poll came meanwhile and needs more,
 * nothing is published (false): the page must be read again. Frames read
 * for NEED_ENDED only fire waiters; they are freed here. */
static bool publish(struct hub *h, struct frame **frames, size_t n, int64_t new_pos,
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
            sub_resume(s);
        }
    pthread_mutex_unlock(&h->mu);
    return true;
}

/* ---- the reader ------------------------------------------------------- */

struct page {
    struct frame **frames;
    size_t n;
    int64_t last;
    enum hub_need need;
};

static void page_add(void *arg, const struct event_row *ev)
{
    struct page *p = arg;

    p->last = ev->id;
    if (p->need == NEED_ENDED) {
        p->frames[p->n++] = frame_ended(ev);
        return;
    }
    if (!ev->run_json || !ev->run_type)
        return; /* the run was pruned: nothing to show */
    p->frames[p->n++] = frame_new(ev);
}

static void page_free(struct page *p)
{
    for (size_t i = 0; i < p->n; i++)
        free(p->frames[i]);
    p->n = 0;
}

/* Reads (pos, upto] page by page into the ring: with the runs when a
 * stream is there, only the completions for long-polls, nothing when
 * neither is (the position moves to upto at once). */
static enum status read_upto(struct hub *h, struct db *db, int64_t pos, int64_t upto,
                             struct error *err)
{
    struct frame *frames[HUB_PAGE];

    while (pos < upto) {
        struct page p = {frames, 0, pos, NEED_POSITION};
        int n = 0;
        int64_t next = upto;
        enum status st = ST_OK;
        pthread_mutex_lock(&h->mu);
        p.need = hub_need(h);
        pthread_mutex_unlock(&h->mu);
        if (p.need != NEED_POSITION)
            st = store_events_after(db, pos, upto, HUB_PAGE,
                                    p.need == NEED_FRAMES ? EVENTS_RUNS : EVENTS_ENDED, page_add,
                                    &p, &n, err);
        if (st != ST_OK) {
            page_free(&p);
            return st;
        }
        if (n == HUB_PAGE)
            next = p.last;
        if (publish(h, frames, p.n, next, p.need))
            pos = next;
        else
            page_free(&p);
    }
    return ST_OK;
}

/* The reader's state between rounds. */
struct reader {
    struct db *db;
    struct event_horizon pend; /* pend.inflight != NULL: a horizon waiting to settle */
    int64_t retry_ms;          /* after a failure; 0 when healthy */
    int64_t settle_ms;         /* the next settle check's delay while pend waits */
};

static void reader_fail(struct hub *h, struct reader *r, const struct error *err)
{
    LOG(LOG_WARN, "event hub could not read events, reconnecting in %lld ms: %s",
        (long long)(r->retry_ms ? r->retry_ms : 100), err->message);
    db_close(r->db);
    r->db = NULL;
    event_horizon_cleanup(&r->pend);
    r->retry_ms =
        r->retry_ms ? (r->retry_ms * 2 < RETRY_MAX_MS ? r->retry_ms * 2 : RETRY_MAX_MS) : 100;
    pthread_mutex_lock(&h->mu);
    h->db_ok = false;
    h->pending_since_ms = 0;
    pthread_mutex_unlock(&h->mu);
}

static int64_t hub_pos(struct hub *h)
{
    int64_t pos;

    pthread_mutex_lock(&h->mu);
    pos = h->ready ? h->pos : -1;
    pthread_mutex_unlock(&h->mu);
    return pos;
}

/* A settled horizon: read up to it (or, the first time, start there). */
static enum status reader_settled(struct hub *h, struct reader *r, struct error *err)
{
    int64_t pos = hub_pos(h), upto = r->pend.h;
    enum status st = ST_OK;

    event_horizon_cleanup(&r->pend);
    if (pos < 0) {
        pthread_mutex_lock(&h->mu);
        h->pos = upto;
        h->ready = true;
        pthread_mutex_unlock(&h->mu);
        LOG(LOG_INFO, "event hub ready pos=%" PRId64, upto);
    } else if (upto > pos) {
        st = read_upto(h, r->db, pos, upto, err);
    }
    pthread_mutex_lock(&h->mu);
    h->pending_since_ms = 0;
    pthread_mutex_unlock(&h->mu);
    return st;
}

/* One round: settle a pending horizon, or take a new one. Returns true when
 * a horizon is still pending (come back in SETTLE_TICK_MS). */
static bool reader_round(struct hub *h, struct reader *r)
{
    struct error err = {0};
    bool settled = false;
    enum status st = ST_OK;

    if (!r->db) {
        st = db_connect(&h->o.db, &r->db, &err);
        if (st != ST_OK) {
            reader_fail(h, r, &err);
            return false;
        }
        if (r->retry_ms) {
            pthread_mutex_lock(&h->mu);
            h->reconnects_total++;
            pthread_mutex_unlock(&h->mu);
            LOG(LOG_INFO, "event hub reconnected; catching up from pos=%" PRId64, hub_pos(h));
        }
    }
    for (int i = 0; i < 2 && st == ST_OK; i++) {
        if (!r->pend.inflight) {
            int64_t pos = hub_pos(h);
            st = store_events_horizon(r->db, &r->pend, &err);
            if (st != ST_OK)
                break;
            if (pos >= 0 && r->pend.h <= pos) {
                event_horizon_cleanup(&r->pend);
                break;
            }
            pthread_mutex_lock(&h->mu);
            if (!h->pending_since_ms)
                h->pending_since_ms = clock_mono_ms();
            pthread_mutex_unlock(&h->mu);
        }
        st = store_events_settled(r->db, &r->pend, &settled, &err);
        if (st != ST_OK || !settled)
            break;
        st = reader_settled(h, r, &err);
    }
    if (st != ST_OK) {
        reader_fail(h, r, &err);
        return false;
    }
    r->retry_ms = 0;
    pthread_mutex_lock(&h->mu);
    h->db_ok = true;
    pthread_mutex_unlock(&h->mu);
    return r->pend.inflight != NULL;
}

/* h->mu held. */
static void heartbeat_all(struct hub *h)
{
    for (struct hub_sub *s = h->subs; s; s = s->next) {
        s->hb_due = true;
        if (s->suspended)
            sub_resume(s);
    }
}

/* h->mu held: heartbeats and waiter deadlines. */
static void tick(struct hub *h, int64_t now, int64_t *next_hb)
{
    struct hub_waiter *w, *nx;

    if (now >= *next_hb) {
        heartbeat_all(h);
        *next_hb = now + h->o.heartbeat_ms;
    }
    for (w = h->waiters; w; w = nx) {
        nx = w->next;
        if (now >= w->deadline_ms)
            waiter_fire(h, w);
    }
}

/* h->mu held: when the reader must next wake, at the latest. */
static int64_t next_wake(const struct hub *h, int64_t next_round, int64_t next_hb)
{
    int64_t t = next_round < next_hb ? next_round : next_hb;

    for (const struct hub_waiter *w = h->waiters; w; w = w->next)
        if (w->deadline_ms < t)
            t = w->deadline_ms;
    return t;
}

/* h->mu held: when the next round is due. The doorbell makes it due at
 * once, or, with no stream and no long-poll to read for, IDLE_ROUND_MS
 * after the last one began; else the timer (next_round) says. */
static int64_t round_due(const struct hub *h, int64_t next_round, int64_t last_round)
{
    int64_t idle_at = last_round + IDLE_ROUND_MS;

    if (!h->rang)
        return next_round;
    if (hub_need(h) != NEED_POSITION)
        return 0;
    return idle_at < next_round ? idle_at : next_round;
}

static void *hub_main(void *arg)
{
    struct hub *h = arg;
    struct reader r = {0};
    int64_t now = clock_mono_ms(), next_round = now, next_hb = now + h->o.heartbeat_ms;
    int64_t last_round = 0;

    pthread_mutex_lock(&h->mu);
    while (!h->stop) {
        struct timespec ts;
        bool pending;
        int64_t wake = next_wake(h, round_due(h, next_round, last_round), next_hb);
        if (wake > clock_mono_ms()) {
            abstime_after_ms(&ts, wake - clock_mono_ms());
            pthread_cond_timedwait(&h->cv, &h->mu, &ts);
        }
        now = clock_mono_ms();
        tick(h, now, &next_hb);
        if (h->stop || now < round_due(h, next_round, last_round))
            continue;
        h->rang = false;
        last_round = now;
        pthread_mutex_unlock(&h->mu);
        pending = reader_round(h, &r);
        now = clock_mono_ms();
        if (pending)
            r.settle_ms = r.settle_ms ? (r.settle_ms * 2 < SETTLE_TICK_MAX_MS ? r.settle_ms * 2
                                                                              : SETTLE_TICK_MAX_MS)
                                      : SETTLE_TICK_MS;
        else
            r.settle_ms = 0;
        next_round = now + (pending ? r.settle_ms : r.retry_ms ? r.retry_ms : h->o.poll_ms);
        pthread_mutex_lock(&h->mu);
    }
    pthread_mutex_unlock(&h->mu);
    event_horizon_cleanup(&r.pend);
    db_close(r.db);
    return NULL;
}

/* ---- lifecycle -------------------------------------------------------- */

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

enum status hub_start(struct hub *h, struct error *err)
{
    if (pthread_create(&h->thread, NULL, hub_main, h) != 0)
        return error_set(err, ST_INTERNAL, "could not start the event hub thread");
    h->started = true;
    return ST_OK;
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
            sub_resume(s);
    while (h->waiters)
        waiter_fire(h, h->waiters);
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
            frames[k++] = frame_new(&rows[i]);
    pthread_mutex_lock(&h->mu);
    h->ready = true;
    if (h->pos < 0)
        h->pos = 0;
    pthread_mutex_unlock(&h->mu);
    (void)publish(h, frames, k, pos, NEED_FRAMES);
    free(frames);
}

void hub_heartbeat(struct hub *h)
{
    pthread_mutex_lock(&h->mu);
    heartbeat_all(h);
    pthread_mutex_unlock(&h->mu);
}

/* ---- subscribers ------------------------------------------------------ */

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
    s->has_status = f->has_status;
    s->status = f->status;
    s->run_hash = f->run_id ? run_hash(f->run_id) : 0;
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
            if (!sub_wants(s, f, &with_id)) {
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
    if (*n == 0) {
        if (s->ended || h->closing)
            r = HUB_END;
        else if (!s->wake.suspend(s->wake.arg))
            r = HUB_GONE;
        else
            s->suspended = true, r = HUB_SUSPENDED;
    }
    pthread_mutex_unlock(&h->mu);
    return r;
}

/* ---- waiters ---------------------------------------------------------- */

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
        waiter_fire(h, w);
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
