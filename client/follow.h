/* client/follow.h — one event stream of the server followed until its
 * owner has what it wants, across broken connections (opsrun watch follows
 * a run's stream and its log stream side by side; opsrun logs --follow the
 * log stream alone).
 *
 * When a connection ends before the owner is done (the server restarts, a
 * proxy cuts it, nothing comes for the idle time, a 5xx, 408 or 429), the
 * next one resumes with Last-Event-ID, after a backoff with full jitter
 * (0.1 s to 5 s; longer when the server says so with Retry-After, up to
 * 10 s), so nothing is missed and nothing repeated. FOLLOW_TRIES failed
 * connections in a row give up; a connection that brings an event starts
 * the count again. Waits are timers, not sleeps: several follows share one
 * api_multi and one thread, and none holds another up.
 *
 * The owner gives each event to its callback, says when it has what it
 * wants (follow_done, from the callback), and calls follow_step after each
 * api_multi_wait. Reconnect messages ("opsrun: <what> lost (...);
 * reconnecting in ...") and the last one ("opsrun: gave up on the <what>
 * after N tries: ...") go to the err stream unless the follow is quiet.
 * One thread; errors come back as the follow's state and its err. */
#ifndef OPSRUN_CLIENT_FOLLOW_H
#define OPSRUN_CLIENT_FOLLOW_H

#include "client/api.h"
#include "client/evparse.h"

#include <stdio.h>

#define FOLLOW_TRIES 10
#define FOLLOW_IDLE_S 45 /* three missed keep-alives */

enum follow_state {
    FOLLOW_IDLE,       /* not started */
    FOLLOW_WAITING,    /* to connect at next_ms */
    FOLLOW_OPEN,       /* connecting or connected */
    FOLLOW_DONE,       /* the owner has what it wanted; the connection is closed */
    FOLLOW_NO_CONTENT, /* the server answered 204: nothing more will come */
    FOLLOW_REFUSED,    /* a final answer (a 4xx but 408 and 429): follow_resp */
    FOLLOW_BROKEN,     /* the body is no event stream, or passed the caps: err */
    FOLLOW_GAVE_UP     /* FOLLOW_TRIES connections in a row failed: err */
};

struct follow {
    char *path; /* "/runs/ID/stream" */
    char *what; /* "stream of run ID", for messages */
    FILE *out;  /* where messages go */
    bool quiet; /* no message for a reconnect, nor for giving up */
    /* Called before a message is written (watch takes its bar off). */
    void (*before_note)(void *arg);
    void *note_arg;
    evparse_fn on_event; /* the owner's, with its arg */
    void *arg;

    enum follow_state state;
    struct evparse ep;
    struct api_stream *s;
    int tries;        /* failed connections in a row */
    int64_t next_ms;  /* FOLLOW_WAITING: when to connect */
    bool advanced;    /* this connection brought an event */
    bool done;        /* follow_done was called */
    bool broken;      /* the body could not be parsed */
    struct error err; /* FOLLOW_BROKEN, FOLLOW_GAVE_UP: why */
};

/* path and what are copied; events of at most event_max bytes go to
 * on_event(arg, ...). The follow starts FOLLOW_IDLE. */
void follow_init(struct follow *f, const char *path, const char *what, size_t event_max,
                 evparse_fn on_event, void *arg, FILE *out);
void follow_cleanup(struct follow *f);

/* From FOLLOW_IDLE: connect at the next follow_step. */
void follow_start(struct follow *f);
/* The owner has what it wants: the connection is closed at the next
 * follow_step (or at once when it is not open), and the state becomes
 * FOLLOW_DONE. May be called from on_event. */
void follow_done(struct follow *f);
/* Connects when it is time, and reads a connection that ended; returns the
 * state. A FOLLOW_OPEN or FOLLOW_WAITING follow needs more steps. */
enum follow_state follow_step(struct follow *f, struct api_multi *m, int64_t now_ms);
/* The answer so far is not the end after all (the run's outcome could not
 * be read yet): connect again after a backoff, or give up, as after a
 * broken connection; why goes into the message. */
void follow_again(struct follow *f, const char *why, long retry_after_s, int64_t now_ms);
/* How long until the follow needs a step (0: now); limit when it waits for
 * nothing but its connection. */
int64_t follow_wait_ms(const struct follow *f, int64_t now_ms, int64_t limit);
/* The answer of FOLLOW_REFUSED (and of FOLLOW_NO_CONTENT). */
const struct api_resp *follow_resp(const struct follow *f);
/* The last event id seen ("" when none). */
const char *follow_last_id(const struct follow *f);

#endif
