/* client/logs.h — a run's log on the command line (docs/cli.md): opsrun
 * logs ID [--attempt N] [--follow] [--json], and the log lines that opsrun
 * watch prints beside the run's events.
 *
 * A line of the log is the server's object {"seq", "attempt", "at",
 * "stream", "text"}; it is printed in one of four forms, always one line
 * each:
 *   LOGS_TEXT      its text as the server has it (a pipe, a file);
 *   LOGS_TERMINAL  "14:46:10 * attempt 1 of 3 started": the time of day
 *                  (UTC), "*" for opsrun's own lines (stream "opsrun"),
 *                  blank for the command's stderr, then the text; with
 *                  color, the time is dim and opsrun's lines cyan;
 *   LOGS_JSON      the object, compact (JSON Lines);
 *   LOGS_WATCH     "log       stderr  text": watch's form off a terminal,
 *                  in the columns of its event lines.
 * The terminal and watch forms clean the text of control characters
 * (report_clean; a tab stays), so a command cannot move the cursor.
 *
 * Not thread-safe (stdio). Exit statuses as cmd.h's; with --follow as
 * watch's (watch.h). */
#ifndef OPSRUN_CLIENT_LOGS_H
#define OPSRUN_CLIENT_LOGS_H

#include "client/api.h"
#include "client/args.h"
#include "client/evparse.h"
#include "client/watch.h"

#include <jansson.h>
#include <stdio.h>

#define LOGS_PAGE_LINES 5000 /* the most the server gives at once */
/* The biggest log event accepted: a line of logs.max_line_bytes (1 MiB at
 * most), each byte escaped in JSON as \u00XX at worst. */
#define LOGS_EVENT_MAX ((size_t)8 << 20)

enum logs_form { LOGS_TEXT, LOGS_TERMINAL, LOGS_JSON, LOGS_WATCH };

/* opsrun logs: every page of the run's lines (GET /runs/{id}/logs), or
 * with --follow its log stream until the run has ended. */
int logs_run(struct api *a, const struct args *args, const struct watch_view *v);

/* ---- pure parts, for unit tests (and watch) ---- */

/* One line object written to f in form, with its newline. */
void logs_print(FILE *f, const json_t *line, enum logs_form form, bool color);
/* The line of a "log" event: a new reference, or NULL when the event is
 * of another type or its data is no line object with a positive seq. */
json_t *logs_event_line(const struct evparse_event *ev);
/* The seq of a line object (from logs_event_line or a page). */
int64_t logs_seq(const json_t *line);
/* The path of the page of run id's lines after seq after (0: from the
 * first), of one attempt (0: all): heap string. */
char *logs_page_path(const char *id, int attempt, int64_t after);

#endif
