/* client/watch.h — following one run to its end over GET /runs/{id}/stream
 * (opsrun watch, and submit, retry and schedule trigger with --watch), with
 * its log lines from GET /runs/{id}/logs/stream beside the events.
 *
 * On a terminal it draws one line in place: a progress bar, the status and
 * the step text; the run's log lines scroll above it, and the bar stays
 * the last line. Otherwise it prints one line per event and one per log
 * line (logs.h, LOGLINE_WATCH), as they come. Either way it ends with a line
 * saying how the run ended. The first event line is the run as it was
 * when watch connected; the log is followed from then on, from its first
 * line, and a terminal event waits for the log's end (at most
 * WATCH_LOG_WAIT_S without a line), so the run's last lines come before
 * its last state and the result.
 *
 * Both streams run side by side on one thread (client/follow.h): neither
 * waits for the other, and each reconnects with Last-Event-ID after a
 * break, so no event and no line is missed or shown twice. The run's
 * stream decides: its reconnects are reported on the err stream, and it
 * gives up after WATCH_TRIES failed connections in a row. The log is
 * secondary: it reconnects quietly, and a server without it (404), or a
 * log stream that breaks for good, leaves the run's events alone (with a
 * note for the latter). A 204 answer means the run is over: its outcome is
 * then read with GET /runs/{id}.
 *
 * Server text (the step, log lines, error messages) is cleaned of control
 * characters before it reaches the terminal. One watch runs on one
 * thread. */
#ifndef OPSRUN_CLIENT_WATCH_H
#define OPSRUN_CLIENT_WATCH_H

#include "client/api.h"
#include "client/follow.h"

#include <jansson.h>
#include <stdio.h>

#define WATCH_IDLE_S FOLLOW_IDLE_S
#define WATCH_TRIES FOLLOW_TRIES
#define WATCH_LOG_WAIT_S 10

/* The exit statuses of watch (and of submit --watch, retry --watch). */
enum watch_exit { WATCH_SUCCEEDED = 0, WATCH_OTHER = 1, WATCH_LOST = 2 };

struct watch_view {
    FILE *out;   /* the events and the result */
    FILE *err;   /* reconnects and failures */
    bool tty;    /* redraw one line in place */
    bool color;  /* tty, and NO_COLOR is not set: log lines in color */
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
/* The steps of workflow run whose state differs from prev's (prev NULL:
 * those that are not pending), a line each, in the workflow's order:
 * "step      clean_tmp  running". The lines (each ending in a newline) go
 * to out, cut at cap; "" for a run that is not a workflow. */
void watch_format_steps(const json_t *prev, const json_t *run, char *out, size_t cap);
/* How far on a step's state is: pending 0, queued or waiting 1, running 2,
 * cancelling 3, an outcome or skipped 4 (watch never shows a step go
 * back). */
int watch_step_rank(const char *state);
/* The last line: "run ID succeeded", or "run ID failed (code): message". */
void watch_format_result(const json_t *run, char *out, size_t cap);
/* WATCH_SUCCEEDED for a run that succeeded, else WATCH_OTHER. */
enum watch_exit watch_exit_of(const json_t *run);

/* GET /runs/{id}: the run when it is completed (new reference), else NULL
 * with why it is not known yet in why (no answer, another answer, not
 * completed). */
json_t *watch_read_run(struct api *a, const char *id, char *why, size_t cap);

#endif
