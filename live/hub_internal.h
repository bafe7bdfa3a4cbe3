/* live/hub_internal.h — the event hub's shared state, for its four files
 * only: hub_reader.c (the reader thread: what it reads and when),
 * hub.c (the ring, publishing, waiters, the hub's life), hub_sub.c (one
 * SSE subscriber: its filter, its skips, what it reads from the ring) and
 * hub_frame.c (the frames themselves). Calls go one way:
 *   hub_reader.c -> hub.c -> hub_sub.c -> hub_frame.c
 * Everything in struct hub below mu is guarded by it; functions marked
 * "h->mu held" expect the caller to hold it. */
#ifndef OPSRUN_LIVE_HUB_INTERNAL_H
#define OPSRUN_LIVE_HUB_INTERNAL_H

#include "live/hub.h"

/* One SSE frame: text is "id: N\nevent: K\ndata: J\n\n"; the strings
 * after it in the same allocation. */
struct frame {
    int64_t id;
    uint64_t run_hash;
    const char *tenant, *run_id, *run_type;
    const char *parent_id; /* "" for none */
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
    char *tenant, *run_id, *run_type, *parent_id;
    bool has_status;
    enum run_status status;
    uint64_t run_hash;
    struct hub_wake wake;
    /* under h->mu */
    uint64_t seq;     /* next ring slot to look at */
    size_t frame_off; /* bytes of ring[seq] already sent (0 = none) */
    bool suspended, wake_marked, hb_due;
    bool quiet, poked; /* quiet: frames are wake-ups; poked: one came, or hub_poke */
    bool woken;        /* hub_wake_all came since its last suspension */
    size_t hb_off;     /* of a heartbeat cut short */
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

/* What the reader must read for whoever is there (h->mu held): frames for
 * streams, the completions for long-polls, or only the position. */
enum hub_need {
    NEED_POSITION,
    NEED_ENDED,
    NEED_FRAMES,
};

/* hub.c */
enum hub_need hub_need(const struct hub *h); /* h->mu held */
/* Appends a page's frames and moves the position (takes h->mu); false when
 * the page must be read again for a greater need (see hub.c). */
bool hub_publish(struct hub *h, struct frame **frames, size_t n, int64_t new_pos,
                 enum hub_need need);
void hub_waiter_fire(struct hub *h, struct hub_waiter *w); /* h->mu held */
void hub_heartbeat_all(struct hub *h);                     /* h->mu held */

/* hub_sub.c */
/* Whether s wants f, and whether with its id: line. */
bool hub_sub_wants(const struct hub_sub *s, const struct frame *f, bool *with_id);
void hub_sub_resume(struct hub_sub *s); /* h->mu held */

/* hub_frame.c */
/* FNV-1a of s: a cheap pre-check before strcmp when matching runs. */
uint64_t hub_run_hash(const char *s);
/* The frame of an event row with its run (the run's JSON compacted). */
struct frame *hub_frame_new(const struct event_row *ev);
/* What a long-poll needs of an event that completes a run: no text, never
 * put into the ring. */
struct frame *hub_frame_ended(const struct event_row *ev);

#endif
