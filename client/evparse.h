/* client/evparse.h — a parser of text/event-stream bodies (the WHATWG HTML
 * standard, "Server-sent events", section "Interpreting an event stream"),
 * fed the body in pieces of any size as they arrive: lines end in CRLF, LF
 * or CR (also when a CRLF is split between two pieces), a leading BOM is
 * dropped, comments (":...") are skipped, "data" lines are joined with LF,
 * and an event is dispatched at each blank line. "id" sets the last event
 * id, which lasts across events (and across connections, if the caller
 * keeps the parser); "retry" sets the reconnection time. What is left
 * unterminated when the body ends is never dispatched.
 *
 * Every buffer has a cap (max bytes per line and per event): a body that
 * passes it is refused with ST_TOO_LARGE, so no server can make the client
 * grow without bound. One parser is used by one thread at a time. */
#ifndef OPSRUN_CLIENT_EVPARSE_H
#define OPSRUN_CLIENT_EVPARSE_H

#include "common/common.h"
#include "common/dynbuf.h"

/* One dispatched event; the strings live until the callback returns. */
struct evparse_event {
    const char *type; /* the "event" field, "message" when there was none */
    const char *data; /* the data lines joined with LF, without the last LF */
    size_t data_len;
    const char *id; /* the last event id so far ("" when none) */
};

/* Called for each event. Anything but ST_OK stops the parse and is what
 * evparse_feed returns (with err as the callback filled it). */
typedef enum status (*evparse_fn)(void *arg, const struct evparse_event *ev, struct error *err);

struct evparse {
    struct dynbuf line, data, type, id;
    long retry_ms; /* the last valid "retry" field; -1 when none */
    bool cr;       /* the last byte fed was a CR: an LF right after it is part of it */
    bool started;  /* a first line was seen (the BOM is only looked for before it) */
    evparse_fn fn;
    void *arg;
};

/* max: the most bytes a line, or an event's data, may take. */
void evparse_init(struct evparse *p, size_t max, evparse_fn fn, void *arg);
void evparse_cleanup(struct evparse *p);
/* Forgets what was not dispatched (for a new connection); keeps the last
 * event id and the retry time. */
void evparse_reset(struct evparse *p);
/* Feeds n bytes of the body. */
enum status evparse_feed(struct evparse *p, const char *buf, size_t n, struct error *err) WUR;
/* The last event id ("" when none); valid until the next feed. */
const char *evparse_last_id(const struct evparse *p);

#endif
