/* client/cmd.h — the client commands, each one or two HTTP calls and what
 * they print: a run id on stdout for submit, retry and schedule trigger
 * (then the watch with --watch), a table or the server's JSON for runs and
 * schedules, the new state for cancel, approve, reject and schedule
 * pause|resume, how many runs were matched and acted on for cancel and
 * retry by a filter, nothing but its exit status and a word for health.
 *
 * Exit statuses (call.h): CMD_OK when the server did what was asked;
 * CMD_REFUSED when it answered with an error (printed from its
 * problem+json); CMD_USAGE for a usage error or when the server could not
 * be reached. health, for
 * container health checks, exits CMD_REFUSED for every failure (Docker
 * reserves 2). With --watch, the watch's exit status (watch.h).
 * Not thread-safe (stdio). */
#ifndef OPSRUN_CLIENT_CMD_H
#define OPSRUN_CLIENT_CMD_H

#include "client/api.h"
#include "client/args.h"
#include "client/call.h"
#include "client/watch.h"

#include <jansson.h>

#define CMD_BULK_TIMEOUT_MS 600000L /* cancel and retry by a filter: up to 100,000 runs */
#define CMD_HEALTH_TIMEOUT_MS 3000L

/* Runs the parsed command against a. */
int cmd_run(struct api *a, const struct args *args, const struct watch_view *v);

/* ---- pure parts, for unit tests ---- */

/* The body of POST /alerts for submit: {"alert_type", "data", "run_id"?};
 * new reference, NULL when data is not a JSON object. */
json_t *cmd_submit_body(const struct args *args);
/* The body of POST /runs/cancel or /runs/retry for cancel or retry by a
 * filter: {"filter": {...}, "dry_run", "limit"?}, --since as
 * created_after, that long before now_us (microseconds since the epoch).
 * New reference. */
json_t *cmd_bulk_body(const struct args *args, int64_t now_us);
/* The body of POST /runs/{id}/approve or /reject: {"comment"} or NULL
 * (new reference). */
json_t *cmd_decision_body(const struct args *args);
/* The path of GET /runs with the filters of args; heap string. */
char *cmd_runs_path(const struct args *args);
/* The table of runs (an array of run objects) written to f, one line per
 * run under a header line: ID, TYPE, STATUS, OUTCOME, PROGRESS, CREATED. */
void cmd_runs_table(FILE *f, const json_t *runs);
/* The table of schedules (GET /schedules' array): NAME, RUN TYPE, CRON,
 * TIME ZONE, PAUSED, NEXT (UTC), LAST OUTCOME. */
void cmd_schedules_table(FILE *f, const json_t *schedules);

#endif
