/* client/logs.h — a run's log on the command line (docs/cli.md): opsrun
 * logs ID [--attempt N] [--follow] [--json], and the log lines that opsrun
 * watch prints beside the run's events.
 *
 * How a line is printed is logline.h's.
 *
 * Not thread-safe (stdio). Exit statuses as cmd.h's; with --follow as
 * watch's (watch.h). */
#ifndef OPSRUN_CLIENT_LOGS_H
#define OPSRUN_CLIENT_LOGS_H

#include "client/api.h"
#include "client/args.h"
#include "client/logline.h"
#include "client/watch.h"

#include <jansson.h>
#include <stdio.h>

#define LOGS_PAGE_LINES 5000 /* the most the server gives at once */

/* opsrun logs: every page of the run's lines (GET /runs/{id}/logs), or
 * with --follow its log stream until the run has ended. */
int logs_run(struct api *a, const struct args *args, const struct watch_view *v);

/* ---- pure parts, for unit tests ---- */

/* The path of the page of run id's lines after seq after (0: from the
 * first), of one attempt (0: all): heap string. */
char *logs_page_path(const char *id, int attempt, int64_t after);

#endif
