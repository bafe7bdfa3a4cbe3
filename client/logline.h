/* client/logline.h — one line of a run's log as the command line prints
 * it (opsrun logs, and opsrun watch beside the run's events).
 *
 * A line of the log is the server's object {"seq", "attempt", "at",
 * "stream", "text"}; it is printed in one of four forms, always one line
 * each:
 *   LOGLINE_TEXT   its text as the server has it (a pipe, a file);
 *   LOGLINE_TERMINAL  "14:46:10 * attempt 1 of 3 started": the time of day
 *                  (UTC), "*" for opsrun's own lines (stream "opsrun"),
 *                  blank for the command's stderr, then the text; with
 *                  color, the time is dim and opsrun's lines cyan;
 *   LOGLINE_JSON   the object, compact (JSON Lines);
 *   LOGLINE_WATCH  "log       stderr  text": watch's form off a terminal,
 *                  in the columns of its event lines.
 * The terminal and watch forms clean the text of control characters
 * (report_clean; a tab stays), so a command cannot move the cursor.
 *
 * Not thread-safe (stdio). */
#ifndef OPSRUN_CLIENT_LOGLINE_H
#define OPSRUN_CLIENT_LOGLINE_H

#include "client/evparse.h"

#include <jansson.h>
#include <stdio.h>

/* The biggest log event accepted: a line of logs.max_line_bytes (1 MiB at
 * most), each byte escaped in JSON as \u00XX at worst. */
#define LOGLINE_EVENT_MAX ((size_t)8 << 20)

enum logline_form { LOGLINE_TEXT, LOGLINE_TERMINAL, LOGLINE_JSON, LOGLINE_WATCH };

/* One line object written to f in form, with its newline. */
void logline_print(FILE *f, const json_t *line, enum logline_form form, bool color);
/* The line of a "log" event: a new reference, or NULL when the event is
 * of another type or its data is no line object with a positive seq. */
json_t *logline_of_event(const struct evparse_event *ev);
/* The seq of a line object (from logline_of_event or a page). */
int64_t logline_seq(const json_t *line);

#endif
