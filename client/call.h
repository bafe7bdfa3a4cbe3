/* client/call.h — one HTTP call of a client command whose answer must be
 * one of the statuses it expects, and the exit statuses of the commands:
 * on anything else, what went wrong is printed on the view's stderr
 * (report.h) and the command's exit status comes back. Not thread-safe
 * (stdio). */
#ifndef OPSRUN_CLIENT_CALL_H
#define OPSRUN_CLIENT_CALL_H

#include "client/api.h"
#include "client/watch.h"

/* CMD_OK: the server did what was asked; CMD_REFUSED: it answered with an
 * error; CMD_USAGE: a usage error, or the server could not be reached. */
enum cmd_exit { CMD_OK = 0, CMD_REFUSED = 1, CMD_USAGE = 2 };

#define CMD_TIMEOUT_MS 30000L

/* method path (body: NULL for none) within timeout_ms, its answer wanted
 * as ok or ok2: -1 when it came (r holds it), else the exit status, with
 * what went wrong printed (CMD_USAGE: no answer; CMD_REFUSED: another). */
int call_expect_within(struct api *a, const struct watch_view *v, const char *what,
                       const char *method, const char *path, const char *body, struct api_resp *r,
                       long ok, long ok2, long timeout_ms);
/* call_expect_within with CMD_TIMEOUT_MS. */
int call_expect(struct api *a, const struct watch_view *v, const char *what, const char *method,
                const char *path, const char *body, struct api_resp *r, long ok, long ok2);

#endif
