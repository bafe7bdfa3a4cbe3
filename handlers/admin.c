/* handlers/admin.c — POST /admin/reload (handlers/admin.h). */
#include "handlers/admin.h"
#include "handlers/handlers.h"

/* An HTTP thread waits at most this long for another reload to end (one
 * takes milliseconds; a file that cannot be read may hold one longer). */
#define RELOAD_WAIT_MS 5000

enum status handle_admin_reload(const struct hctx *hc, const struct request *rq, struct reply *rp)
{
    json_t *answer = NULL, *errors = NULL;
    enum status st;
    struct error err = {0};

    (void)rq;
    if (!hc->reloads || !hc->reloads->run) {
        error_set(&err, ST_UNAVAILABLE, "this process cannot reload its configuration");
        reply_error(rp, ST_UNAVAILABLE, &err);
        return ST_OK;
    }
    st = hc->reloads->run(hc->reloads->arg, "POST /admin/reload", RELOAD_WAIT_MS, &answer, &errors);
    if (st == ST_OK) {
        reply_json_take(rp, 200, answer);
        return ST_OK;
    }
    if (st == ST_CONFLICT) {
        error_set(&err, ST_CONFLICT,
                  "another reload of the configuration is still running; "
                  "retry once it has ended");
        reply_error(rp, ST_CONFLICT, &err);
        return ST_OK;
    }
    reply_problem_take(rp, ST_INVALID,
                       "the configuration file is not valid; the running configuration stays",
                       json_pack("{s:o}", "errors", errors ? errors : json_array()));
    return ST_OK;
}
