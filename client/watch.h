/* client/watch.h — following one run to its end over GET /runs/{id}/stream
 * (opsrun watch, and submit or retry with --watch).
 *
 * On a terminal it draws one line in place: a progress bar, the status and
 * the step text. Otherwise it prints one line per event, for logs. Either
 * way it ends with a line saying how the run ended. When the stream breaks
 * before the run's terminal event (the server restarts, a proxy drops it,
 * nothing comes for WATCH_IDLE_S) it reconnects with Last-Event-ID, after
 * a backoff, and so misses nothing and repeats nothing; it gives up after
 * WATCH_TRIES failed connections in a row. A 204 answer means the run is
 * over: its outcome is then read with GET /runs/{id}.
 *
 * Server text (the step, error messages) is cleaned of control characters
 * before it reaches the terminal. One watch runs on one thread. */
#ifndef OPSRUN_CLIENT_WATCH_H
#define OPSRUN_CLIENT_WATCH_H

#include "client/api.h"

#include <jansson.h>
#include <stdio.h>

#define WATCH_IDLE_S 45 /* three missed keep-alives */
#define WATCH_TRIES 10

/* The exit statuses of watch (and of submit --watch, retry --watch). */
enum watch_exit { WATCH_SUCCEEDED = 0, WATCH_OTHER = 1, WATCH_LOST = 2 };

struct watch_view {
    FILE *out;   /* the events and the result */
    FILE *err;   /* reconnects and failures */
    bool tty;    /* redraw one line in place */
    int columns; /* the terminal's width, when tty */
};

/* Follows run id (a valid run id) until it completes, or until the server
 * refuses it (an unknown run: WATCH_OTHER) or cannot be reached for good
 * (WATCH_LOST). */
enum watch_exit watch_run(struct api *a, const char *id, const struct watch_view *v);

/* ---- pure parts, for unit tests ---- */

/* The line for one event of run:
 * "progress  running    pending     50%  step 2 of 4". */
void watch_format_line(const char *event, const json_t *run, char *out, size_t cap);
/* The terminal line: "[#########---------]  50%  running  step 2 of 4",
 * no wider than columns - 1. */
void watch_format_bar(const json_t *run, int columns, char *out, size_t cap);
/* The last line: "run ID succeeded", or "run ID failed (code): message". */
void watch_format_result(const json_t *run, char *out, size_t cap);
/* WATCH_SUCCEEDED for a run that succeeded, else WATCH_OTHER. */
enum watch_exit watch_exit_of(const json_t *run);

#endif
