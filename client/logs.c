/* client/logs.c — see logs.h. */
#include "client/logs.h"

#include "client/call.h"
#include "client/follow.h"
#include "client/report.h"

#include <string.h>

#define WAIT_MAX_MS 1000

char *logs_page_path(const char *id, int attempt, int64_t after)
{
    char a[32] = "", b[40] = "";

    if (attempt > 0)
        xsnprintf(a, sizeof(a), "&attempt=%d", attempt);
    if (after > 0)
        xsnprintf(b, sizeof(b), "&after=%lld", (long long)after);
    return xasprintf("/runs/%s/logs?limit=%d%s%s", id, LOGS_PAGE_LINES, a, b);
}

/* ---- every page ---- */

/* One page's lines printed; *after moves to the next page's start, or to
 * -1 after the last page. -1 to go on, else an exit status. */
static int print_page(const struct watch_view *v, enum logline_form form, const json_t *page,
                      int64_t *after, long *printed)
{
    const json_t *lines = json_object_get(page, "lines"), *next, *line;
    size_t i;

    if (!json_is_array(lines)) {
        fprintf(v->err, "opsrun: the server's answer has no list of log lines\n");
        return CMD_REFUSED;
    }
    json_array_foreach(lines, i, line)
    {
        if (json_is_object(line))
            logline_print(v->out, line, form, v->color), ++*printed;
    }
    fflush(v->out);
    next = json_object_get(page, "next_after");
    if (!next || json_is_null(next)) {
        *after = -1;
        return -1;
    }
    if (!json_is_integer(next) || json_integer_value(next) <= *after) {
        fprintf(v->err, "opsrun: the server's answer has a next_after that does not move on\n");
        return CMD_REFUSED;
    }
    *after = (int64_t)json_integer_value(next);
    return -1;
}

static int logs_pages(struct api *a, const struct args *args, const struct watch_view *v,
                      enum logline_form form)
{
    int64_t after = 0;
    long printed = 0;
    int rc = -1;

    while (rc < 0 && after >= 0) {
        char *path = logs_page_path(args->id, args->attempt, after);
        struct api_resp r;
        api_resp_init(&r);
        rc = call_expect(a, v, "logs", "GET", path, NULL, &r, 200, 200);
        if (rc < 0)
            rc = print_page(v, form, r.json, &after, &printed);
        api_resp_cleanup(&r);
        free(path);
    }
    if (rc < 0 && printed == 0 && args->attempt > 0)
        fprintf(v->err, "opsrun: no log lines of attempt %d\n", args->attempt);
    else if (rc < 0 && printed == 0)
        fprintf(v->err, "opsrun: no log lines\n");
    return rc < 0 ? CMD_OK : rc;
}

/* ---- --follow ---- */

struct tail {
    const struct args *args;
    const struct watch_view *v;
    enum logline_form form;
    struct follow f;
    int64_t last_seq; /* the newest line seen */
};

static enum status on_event(void *arg, const struct evparse_event *ev, struct error *err)
{
    struct tail *t = arg;
    json_t *line;

    (void)err;
    if (strcmp(ev->type, "end") == 0) {
        follow_done(&t->f);
        return ST_OK;
    }
    line = logline_of_event(ev);
    if (!line) {
        if (strcmp(ev->type, "log") == 0)
            fprintf(t->v->err, "opsrun: skipped a log event of run %s that is not a line\n",
                    t->args->id);
        return ST_OK; /* or a kind of event this version does not know */
    }
    if (logline_seq(line) > t->last_seq) {
        t->last_seq = logline_seq(line);
        if (t->args->attempt == 0 ||
            json_integer_value(json_object_get(line, "attempt")) == t->args->attempt) {
            logline_print(t->v->out, line, t->form, t->v->color);
            fflush(t->v->out);
        }
    }
    json_decref(line);
    return ST_OK;
}

/* The log has ended: the run's outcome decides the exit status. When it
 * cannot be read yet, the stream goes on (a 204 then says it is over). */
static int outcome(struct api *a, struct tail *t, int64_t now)
{
    char why[600], line[1024];
    json_t *run = watch_read_run(a, t->args->id, why, sizeof(why));
    enum watch_exit rc;

    if (!run) {
        follow_again(&t->f, why, -1, now);
        return -1;
    }
    rc = watch_exit_of(run);
    if (rc != WATCH_SUCCEEDED) {
        watch_format_result(run, line, sizeof(line));
        fprintf(t->v->err, "opsrun: %s\n", line);
    }
    json_decref(run);
    return (int)rc;
}

static int logs_follow(struct api *a, const struct args *args, const struct watch_view *v,
                       enum logline_form form)
{
    struct tail t = {.args = args, .v = v, .form = form};
    struct api_multi *m = api_multi_new(a);
    char *path = xasprintf("/runs/%s/logs/stream", args->id);
    char *what = xasprintf("log stream of run %s", args->id);
    int rc = -1;

    follow_init(&t.f, path, what, LOGLINE_EVENT_MAX, on_event, &t, v->err);
    follow_start(&t.f);
    while (rc < 0) {
        int64_t now = clock_mono_ms();
        api_multi_wait(m, follow_wait_ms(&t.f, now, WAIT_MAX_MS));
        now = clock_mono_ms();
        switch (follow_step(&t.f, m, now)) {
        case FOLLOW_DONE:
        case FOLLOW_NO_CONTENT:
            rc = outcome(a, &t, now);
            break;
        case FOLLOW_REFUSED:
            report_answer(v->err, "logs", follow_resp(&t.f));
            rc = WATCH_OTHER;
            break;
        case FOLLOW_BROKEN:
            report_error(v->err, &t.f.err);
            rc = WATCH_LOST;
            break;
        case FOLLOW_GAVE_UP:
            rc = WATCH_LOST;
            break;
        default:
            break;
        }
    }
    follow_cleanup(&t.f);
    api_multi_free(m);
    free(path);
    free(what);
    return rc;
}

int logs_run(struct api *a, const struct args *args, const struct watch_view *v)
{
    enum logline_form form = args->json ? LOGLINE_JSON : v->tty ? LOGLINE_TERMINAL : LOGLINE_TEXT;

    return args->follow ? logs_follow(a, args, v, form) : logs_pages(a, args, v, form);
}
