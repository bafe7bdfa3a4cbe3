/* live/hub.h — the in-process fan-out of run events to SSE streams and
 * long-polls.
 *
 * One reader thread follows run_events in id order with the settled horizon
 * of store/events.h, on its own database connection: it reads when the
 * LISTEN doorbell rings (hub_doorbell), and on a timer as the safety net and
 * in poll-only mode. Each event becomes one preformatted SSE frame
 * ("id: N\nevent: status|progress\ndata: <run as of the event>\n\n") in one
 * shared ring of bounded frames and bytes; the hub's position is the id up to
 * which every event is in the ring (or behind it). A lost connection is
 * re-opened and reading resumes from that position, so nothing is skipped.
 * It reads only what is needed: the runs while a subscriber is there, the
 * completions while only waiters are, else nothing (the position moves to
 * the horizon, on a doorbell at most every 100 ms); a page read for less
 * than a newcomer needs is read again before it is published.
 *
 * Subscribers (one per SSE stream) keep only a ring position and a partial
 * frame offset: publishing costs O(1) memory whatever their number. A
 * subscriber with nothing to send suspends (through its wake callbacks, which
 * the HTTP layer maps to MHD_suspend_connection/MHD_resume_connection) and is
 * resumed only when a frame it wants arrives, at each heartbeat, or at close.
 * One that falls behind the ring's oldest frame is lagging: the stream is
 * dropped and the client resumes from the database with Last-Event-ID. No
 * subscriber can ever make the hub or another subscriber wait.
 *
 * Waiters (long-polls) are fired once when a terminal event of their run is
 * published, at their deadline, or at close.
 *
 * Thread-safety: every function is thread-safe except where noted. The wake
 * callbacks and a waiter's fire callback run with the hub lock held, so they
 * must not call back into the hub. A hub_sub is read by one thread at a
 * time (its connection's).
 *
 * One header for the hub's four files (hub_internal.h says how they share
 * the work): hub.c the hub's life, the ring and the waiters; hub_reader.c
 * the reader thread (hub_start); hub_sub.c the subscribers (hub_sub_*);
 * hub_frame.c the frames (hub_frame_*, hub_json_compact). */
#ifndef OPSRUN_LIVE_HUB_H
#define OPSRUN_LIVE_HUB_H

#include "common/common.h"
#include "store/db.h"
#include "store/events.h"

struct hub;
struct hub_sub;

struct hub_options {
    struct db_options db; /* the reader's own connection */
    int ring_frames;      /* frames kept for live subscribers */
    int64_t ring_bytes;   /* and at most this many bytes of them */
    int max_subscribers;
    int heartbeat_ms; /* keep-alive comment at least this often */
    int poll_ms;      /* read at least this often without a doorbell */
    int retry_ms;     /* the retry: hint sent first on every stream */
};

struct hub_stats {
    bool ready;         /* the reader has a position */
    bool db_ok;         /* its last round reached the database */
    int64_t pos;        /* every event id <= pos is in the ring or behind it */
    int64_t pending_ms; /* how long a horizon has waited to settle, 0 = none */
    int subscribers, waiters;
    int64_t ring_frames, ring_bytes; /* held now */
    int64_t published_total;         /* frames put into the ring */
    int64_t dropped_total;           /* streams dropped for lagging behind the ring */
    int64_t refused_total;           /* streams refused at max_subscribers */
    int64_t reconnects_total;        /* reader connections re-opened after a failure */
};

/* o is copied (db.conninfo and application_name must outlive the hub). */
struct hub *hub_new(const struct hub_options *o);
/* Starts the reader thread. */
enum status hub_start(struct hub *h, struct error *err) WUR;
/* Events may have been committed: read soon. Cheap; any thread. */
void hub_doorbell(struct hub *h);
/* Ends every stream after the frame it is writing, fires every waiter, and
 * refuses new ones with ST_BUSY. */
void hub_close(struct hub *h);
/* After hub_close: waits up to timeout_ms until every subscriber is freed
 * and every waiter released; false on timeout. */
bool hub_wait_empty(struct hub *h, int timeout_ms);
/* Stops the reader thread and frees the hub; every subscriber and waiter
 * must be gone. NULL is a no-op. */
void hub_free(struct hub *h);
void hub_stats(struct hub *h, struct hub_stats *out);

/* What the reader thread does, for tests of a hub that was not started:
 * hub_inject publishes a page of events (rows whose run is gone are
 * skipped) and moves the position to pos, making the hub ready;
 * hub_heartbeat is one keep-alive round. */
void hub_inject(struct hub *h, const struct event_row *rows, size_t n, int64_t pos);
void hub_heartbeat(struct hub *h);

/* The SSE frame "id: N\nevent: K\ndata: D\n\n" (no id: line when id is 0;
 * a newline inside D continues it on another data: line). hub_frame_len is
 * its length; hub_frame_write writes it and a NUL to dst (hub_frame_len + 1
 * bytes) and returns the length, with the id: line's length in *id_len
 * (optional). */
size_t hub_frame_len(int64_t id, const char *event, const char *data);
/* data as compact JSON, the form every REST answer has (PostgreSQL's
 * json_build_object puts spaces around colons); heap, or NULL when data
 * does not parse (then send it as it is). */
char *hub_json_compact(const char *data);
size_t hub_frame_write(char *dst, int64_t id, const char *event, const char *data, size_t *id_len);

/* ---- subscribers ---- */

/* How the hub parks and wakes a subscriber's connection. suspend returns
 * false when the peer is known to be gone (the stream then ends). Both run
 * with the hub lock held; resume may run on any thread. */
struct hub_wake {
    bool (*suspend)(void *arg);
    void (*resume)(void *arg);
    void *arg;
};

/* Registers a subscriber of the events f selects (copied) at the hub's
 * position, returned in *pos: every event with a larger id will reach the
 * subscriber through the ring, and the caller sends what came before it from
 * the database. ST_BUSY when the hub is closing, not ready yet, or at
 * max_subscribers (err says which). */
enum status hub_sub_new(struct hub *h, const struct event_filter *f, const struct hub_wake *w,
                        struct hub_sub **out, int64_t *pos, struct error *err) WUR;
void hub_sub_free(struct hub_sub *s); /* unregisters; NULL is a no-op */

/* What a stream skips, set by its owner before it reads live frames:
 * events with id <= upto (already sent as a snapshot or a replay), and,
 * for GET /stream snapshots, events of run_id with id <= upto. While any
 * such run skip is pending, frames go out without their id: line, so a
 * client that disconnects in that window gets fresh snapshots rather than a
 * replay that would move those runs backwards. */
void hub_sub_skip_upto(struct hub_sub *s, int64_t upto);
void hub_sub_skip_run(struct hub_sub *s, const char *tenant, const char *run_id, int64_t upto);
/* The skip rules for an event sent from the database (a replay): whether it
 * is wanted, and whether with its id: line. */
bool hub_sub_gate(const struct hub_sub *s, int64_t id, const char *tenant, const char *run_id,
                  bool *with_id);
/* A run stream ends after the terminal event of its run. */
void hub_sub_mark_ended(struct hub_sub *s);
/* A quiet subscriber sends nothing from the ring: each frame it wants is
 * only a wake-up (hub_sub_read then returns HUB_DATA, maybe with *n 0, the
 * caller looking again at what it follows), and its run's terminal event
 * still ends it (HUB_END once nothing else is due). It cannot lag: fallen
 * behind the ring, it moves to the head and is woken. For a run's log
 * stream, which reads its lines from the database. */
void hub_sub_set_quiet(struct hub_sub *s);
/* Wakes the quiet subscribers of run_id (NULL: every quiet subscriber), as
 * a frame they want would: lines of its log were committed. Any thread. */
void hub_poke(struct hub *h, const char *run_id);
/* Wakes every subscriber once, whatever it follows: something its owner
 * checks outside the hub may have changed (a reload may have removed the
 * stream's token). A suspended one is resumed; one that is not gets
 * HUB_WOKEN from its next read that would have suspended, so a wake that
 * comes between its owner's check and its suspension is not lost. Any
 * thread. */
void hub_wake_all(struct hub *h);

enum hub_read {
    HUB_DATA,      /* *n bytes were written */
    HUB_SUSPENDED, /* nothing to send; the connection was suspended */
    HUB_END,       /* the stream is over: terminal event sent, or closing */
    HUB_LAGGED,    /* the ring moved past this subscriber: drop or rejoin */
    HUB_GONE,      /* the peer went away */
    HUB_WOKEN,     /* nothing to send, but hub_wake_all came: the caller
                    * looks again at what it checks, then reads again */
};
/* Copies what is due into buf (at most max bytes): a heartbeat comment when
 * one is due, then the wanted frames from the ring, a frame possibly cut
 * across calls. Suspends when there is nothing; never blocks. */
enum hub_read hub_sub_read(struct hub_sub *s, char *buf, size_t max, size_t *n);
/* Whether any live frame was sent yet (a lagging stream that has sent none
 * may rejoin instead of being dropped). */
bool hub_sub_live(const struct hub_sub *s);
/* Moves a lagging subscriber to the head of the ring; *pos is the new
 * position, and the caller sends what lies between from the database. */
void hub_sub_rejoin(struct hub_sub *s, int64_t *pos);

/* ---- long-poll waiters ---- */

/* Caller's storage; the fields below the line are the hub's. */
struct hub_waiter {
    char tenant[65];
    char run_id[130];
    int64_t deadline_ms; /* monotonic */
    struct hub_wake wake;
    /* --- */
    bool linked, fired, suspended, held;
    struct hub_waiter *prev, *next;
};
/* Arms w; ST_BUSY when the hub is closing. */
enum status hub_wait_add(struct hub *h, struct hub_waiter *w, struct error *err) WUR;
/* Suspends w's connection unless it has fired already (then false). */
bool hub_wait_suspend(struct hub *h, struct hub_waiter *w);
/* Disarms w if it is still armed; safe after it fired. */
void hub_wait_remove(struct hub *h, struct hub_waiter *w);
/* The request of w is over (its answer sent or the connection gone):
 * hub_wait_empty stops counting it. Idempotent. */
void hub_wait_release(struct hub *h, struct hub_waiter *w);

#endif
