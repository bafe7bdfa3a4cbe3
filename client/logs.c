/* client/logs.c — see logs.h. */
#include "client/logs.h"

#include "client/cmd.h"
#include "client/follow.h"
#include "client/report.h"

#include <string.h>

#define WAIT_MAX_MS 1000
#define DIM "\033[2m"
#define CYAN "\033[36m"
#define RESET "\033[0m"

static const char *jstr(const json_t *o, const char *k, const char *dflt)
{
    const char *v = json_string_value(json_object_get(o, k));
    return v ? v : dflt;
}

/* "2026-12-06T14:46:10.864845Z" as "14:46:10" (UTC, as the server gives
 * it), or "--:--:--". */
static void time_of_day(const json_t *line, char out[9])
{
    const char *at = jstr(line, "at", "");

    if (strlen(at) >= 19 && at[10] == 'T' && strspn(at + 11, "0123456789:") >= 8)
        memcpy(out, at + 11, 8), out[8] = '\0';
    else
        memcpy(out, "--:--:--", 9);
}

static void print_terminal(FILE *f, const json_t *line, const char *text, size_t n, bool color)
{
    bool own = strcmp(jstr(line, "stream", ""), "opsrun") == 0;
    char hms[9];

    time_of_day(line, hms);
    fprintf(f, "%s%s%s %s", color ? DIM : "", hms, color ? RESET : "",
            own ? (color ? CYAN "* " : "* ") : "  ");
    report_put_clean(f, text, n, true);
    fputs(own && color ? RESET "\n" : "\n", f);
}

void logs_print(FILE *f, const json_t *line, enum logs_form form, bool color)
{
    const json_t *t = json_object_get(line, "text");
    const char *text = json_is_string(t) ? json_string_value(t) : "";
    size_t n = json_is_string(t) ? json_string_length(t) : 0;
    char stream[32];

    switch (form) {
    case LOGS_JSON:
        json_dumpf(line, f, JSON_COMPACT);
        fputc('\n', f);
        break;
    case LOGS_TEXT:
        fwrite(text, 1, n, f);
        fputc('\n', f);
        break;
    case LOGS_WATCH:
        report_clean(jstr(line, "stream", "?"), stream, sizeof(stream), 16);
        fprintf(f, "%-8s  %-6s  ", "log", stream);
        report_put_clean(f, text, n, true);
        fputc('\n', f);
        break;
    case LOGS_TERMINAL:
        print_terminal(f, line, text, n, color);
        break;
    }
}

int64_t logs_seq(const json_t *line)
{
    const json_t *seq = json_object_get(line, "seq");

    return json_is_integer(seq) ? (int64_t)json_integer_value(seq) : 0;
}

json_t *logs_event_line(const struct evparse_event *ev)
{
    json_t *line;

    if (strcmp(ev->type, "log") != 0)
        return NULL;
    line = json_loadb(ev->data, ev->data_len, JSON_ALLOW_NUL, NULL);
    if (json_is_object(line) && logs_seq(line) > 0)
        return line;
    json_decref(line);
    return NULL;
}

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
static int print_page(const struct watch_view *v, enum logs_form form, const json_t *page,
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
            logs_print(v->out, line, form, v->color), ++*printed;
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
                      enum logs_form form)
{
    int64_t after = 0;
    long printed = 0;
    int rc = -1;

    while (rc < 0 && after >= 0) {
        char *path = logs_page_path(args->id, args->attempt, after);
        struct api_resp r;
        api_resp_init(&r);
        rc = cmd_expect(a, v, "logs", "GET", path, &r, 200);
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
    enum logs_form form;
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
    line = logs_event_line(ev);
    if (!line) {
        if (strcmp(ev->type, "log") == 0)
            fprintf(t->v->err, "opsrun: skipped a log event of run %s that is not a line\n",
                    t->args->id);
        return ST_OK; /* or a kind of event this version does not know */
    }
    if (logs_seq(line) > t->last_seq) {
        t->last_seq = logs_seq(line);
        if (t->args->attempt == 0 ||
            json_integer_value(json_object_get(line, "attempt")) == t->args->attempt) {
            logs_print(t->v->out, line, t->form, t->v->color);
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
                       enum logs_form form)
{
    struct tail t = {.args = args, .v = v, .form = form};
    struct api_multi *m = api_multi_new(a);
    char *path = xasprintf("/runs/%s/logs/stream", args->id);
    char *what = xasprintf("log stream of run %s", args->id);
    int rc = -1;

    follow_init(&t.f, path, what, LOGS_EVENT_MAX, on_event, &t, v->err);
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
    enum logs_form form = args->json ? LOGS_JSON : v->tty ? LOGS_TERMINAL : LOGS_TEXT;

    return args->follow ? logs_follow(a, args, v, form) : logs_pages(a, args, v, form);
}
