/* client/call.c — see call.h. */
#include "client/call.h"

#include "client/report.h"

int call_expect_within(struct api *a, const struct watch_view *v, const char *what,
                       const char *method, const char *path, const char *body, struct api_resp *r,
                       long ok, long ok2, long timeout_ms)
{
    struct error err = {0};
    enum status st = api_call(a, method, path, body, timeout_ms, r, &err);

    if (st != ST_OK) {
        report_error(v->err, &err);
        return CMD_USAGE;
    }
    if (r->status != ok && r->status != ok2) {
        report_answer(v->err, what, r);
        return CMD_REFUSED;
    }
    return -1;
}

int call_expect(struct api *a, const struct watch_view *v, const char *what, const char *method,
                const char *path, const char *body, struct api_resp *r, long ok, long ok2)
{
    return call_expect_within(a, v, what, method, path, body, r, ok, ok2, CMD_TIMEOUT_MS);
}
