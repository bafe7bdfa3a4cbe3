/* handlers/admin.c — POST /admin/reload (handlers/admin.h). */
#include "handlers/admin.h"
#include "handlers/handlers.h"

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
    st = hc->reloads->run(hc->reloads->arg, "POST /admin/reload", &answer, &errors);
    if (st == ST_OK) {
        reply_json_take(rp, 200, answer);
        return ST_OK;
    }
    reply_problem_take(rp, ST_INVALID,
                       "the configuration file is not valid; the running configuration stays",
                       json_pack("{s:o}", "errors", errors ? errors : json_array()));
    return ST_OK;
}
