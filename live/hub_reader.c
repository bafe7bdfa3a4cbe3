/* live/hub_reader.c — the hub's reader thread: it follows run_events in
 * id order with the settled horizon of store/events.h on its own
 * connection, reads only what whoever is there needs, publishes it
 * (hub.c), and keeps the heartbeats and the long-polls' deadlines
 * (live/hub.h). */
#include "live/hub_internal.h"

#include "common/backoff.h"
#include "common/log.h"

#include <inttypes.h>
#include <stdlib.h>

/* Events read per statement. */
#define HUB_PAGE 500
/* A pending horizon is checked again after 5 ms, doubling up to 100 ms
 * while a writer stays open (an idle transaction holds it for good). */
#define SETTLE_TICK_MS 5
#define SETTLE_TICK_MAX_MS 100
/* A reader that lost the database reconnects after RECONNECT_FIRST_MS,
 * doubling up to RECONNECT_MAX_MS while it keeps failing. */
#define RECONNECT_FIRST_MS 100
#define RECONNECT_MAX_MS 2000
/* Without a stream or a long-poll, a doorbell starts a round at most this
 * often: the position stays fresh for the next stream (which has to be
 * caught up from it) at a few cheap statements a second. */
#define IDLE_ROUND_MS 100

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
        p->frames[p->n++] = hub_frame_ended(ev);
        return;
    }
    if (!ev->run_json || !ev->run_type)
        return; /* the run was pruned: nothing to show */
    p->frames[p->n++] = hub_frame_new(ev);
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
        if (hub_publish(h, frames, p.n, next, p.need))
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
    struct backoff reconnect;  /* gives retry_ms */
    struct backoff settle;     /* the settle checks' delays while pend waits */
};

static void reader_fail(struct hub *h, struct reader *r, const struct error *err)
{
    r->retry_ms = backoff_next_ms(&r->reconnect);
    LOG(LOG_WARN, "event hub could not read events, reconnecting in %lld ms: %s",
        (long long)r->retry_ms, err->message);
    db_close(r->db);
    r->db = NULL;
    event_horizon_cleanup(&r->pend);
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
    backoff_reset(&r->reconnect);
    pthread_mutex_lock(&h->mu);
    h->db_ok = true;
    pthread_mutex_unlock(&h->mu);
    return r->pend.inflight != NULL;
}

/* h->mu held: heartbeats and waiter deadlines. */
static void tick(struct hub *h, int64_t now, int64_t *next_hb)
{
    struct hub_waiter *w, *nx;

    if (now >= *next_hb) {
        hub_heartbeat_all(h);
        *next_hb = now + h->o.heartbeat_ms;
    }
    for (w = h->waiters; w; w = nx) {
        nx = w->next;
        if (now >= w->deadline_ms)
            hub_waiter_fire(h, w);
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
    struct reader r = {
        .reconnect = {.first_ms = RECONNECT_FIRST_MS, .max_ms = RECONNECT_MAX_MS},
        .settle = {.first_ms = SETTLE_TICK_MS, .max_ms = SETTLE_TICK_MAX_MS},
    };
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
        if (!pending)
            backoff_reset(&r.settle);
        next_round = now + (pending      ? backoff_next_ms(&r.settle)
                            : r.retry_ms ? r.retry_ms
                                         : h->o.poll_ms);
        pthread_mutex_lock(&h->mu);
    }
    pthread_mutex_unlock(&h->mu);
    event_horizon_cleanup(&r.pend);
    db_close(r.db);
    return NULL;
}

enum status hub_start(struct hub *h, struct error *err)
{
    if (pthread_create(&h->thread, NULL, hub_main, h) != 0)
        return error_set(err, ST_INTERNAL, "could not start the event hub thread");
    h->started = true;
    return ST_OK;
}
