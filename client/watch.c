/* client/watch.c — see watch.h. */
#include "client/watch.h"

#include "client/logline.h"
#include "client/report.h"

#include <stdlib.h>
#include <string.h>

/* The biggest event accepted: a run's JSON with its input and result. */
#define EVENT_MAX ((size_t)64 << 20)
#define BAR_WIDTH 24
#define GET_TIMEOUT_MS 30000
#define WAIT_MAX_MS 1000

struct watch {
    struct api *api;
    const char *id;
    const struct watch_view *v;
    struct follow run, log;
    /* a workflow's steps (GET /stream?parent_id=), started once the run
     * shows it is one; steps_seen holds the states printed, in the shape of
     * a run's "workflow" member */
    struct follow steps;
    json_t *steps_seen;
    json_t *last;     /* the newest state of the run seen */
    bool shown;       /* an event was shown */
    char held[16];    /* the type of the terminal event not shown yet, or "" */
    bool done;        /* the run is completed: last is how it ended */
    int64_t done_ms;  /* when it was, or when the log last brought a line since */
    bool log_over;    /* the log ended, or is not followed any more */
    int64_t last_seq; /* the newest log line shown */
    bool bar;         /* a bar is on the terminal, without its newline */
};

static const char *jstr(const json_t *o, const char *k, const char *dflt)
{
    const char *v = json_string_value(json_object_get(o, k));
    return v ? v : dflt;
}

void watch_format_line(const char *event, const json_t *run, char *out, size_t cap)
{
    char step[256];

    report_clean(jstr(run, "step", ""), step, sizeof(step), 200);
    xsnprintf(out, cap, "%-8s  %-10s %-9s %3d%%%s%s", event, jstr(run, "status", "?"),
              jstr(run, "outcome", "?"), (int)json_integer_value(json_object_get(run, "progress")),
              step[0] ? "  " : "", step);
}

void watch_format_bar(const json_t *run, int columns, char *out, size_t cap)
{
    long pct = (long)json_integer_value(json_object_get(run, "progress"));
    int fill = (int)((pct < 0 ? 0 : pct > 100 ? 100 : pct) * BAR_WIDTH / 100);
    const char *status = jstr(run, "status", "?");
    char bar[BAR_WIDTH + 1], head[96];
    int room;
    size_t n;

    for (int i = 0; i < BAR_WIDTH; i++)
        bar[i] = i < fill ? '#' : '-';
    bar[BAR_WIDTH] = '\0';
    if (strcmp(status, "completed") == 0)
        status = jstr(run, "outcome", "?");
    n = xsnprintf(head, sizeof(head), "[%s] %3ld%%  %s", bar, pct, status);
    room = columns - 1 - (int)n - 2;
    if (room < 0 || n >= cap) {
        report_clean(head, out, cap, columns > 1 ? columns - 1 : 0);
        return;
    }
    memcpy(out, head, n + 1);
    if (jstr(run, "step", NULL) && room > 0 && n + 3 < cap) {
        memcpy(out + n, "  ", 3);
        report_clean(jstr(run, "step", ""), out + n + 2, cap - n - 2, room);
    }
}

void watch_format_steps(const json_t *prev, const json_t *run, char *out, size_t cap)
{
    const json_t *steps = json_object_get(json_object_get(run, "workflow"), "steps");
    const json_t *before = json_object_get(json_object_get(prev, "workflow"), "steps");
    const char *name;
    const json_t *s;
    size_t n = 0;

    if (cap)
        out[0] = '\0';
    json_object_foreach((json_t *)steps, name, s)
    {
        const char *state = jstr(s, "state", "?");
        const char *was = jstr(json_object_get(before, name), "state", prev ? "" : "pending");
        char clean[160], st[32];

        if (strcmp(state, was) == 0 || n + 1 >= cap)
            continue;
        report_clean(name, clean, sizeof(clean), 64);
        report_clean(state, st, sizeof(st), 24);
        n += (size_t)xsnprintf(out + n, cap - n, "%-8s  %s  %s\n", "step", clean, st);
        if (n >= cap)
            n = cap - 1;
    }
}

int watch_step_rank(const char *state)
{
    if (!state || !*state || strcmp(state, "pending") == 0)
        return 0;
    if (strcmp(state, "queued") == 0 || strcmp(state, "waiting") == 0)
        return 1;
    if (strcmp(state, "running") == 0)
        return 2;
    if (strcmp(state, "cancelling") == 0)
        return 3;
    return 4; /* an outcome, or skipped */
}

void watch_format_result(const json_t *run, char *out, size_t cap)
{
    const json_t *error = json_object_get(run, "error");
    const char *outcome = jstr(run, "outcome", "?");
    char id[160], code[96], msg[512];

    report_clean(jstr(run, "id", "?"), id, sizeof(id), -1);
    if (strcmp(outcome, "succeeded") == 0 || !json_is_object(error)) {
        xsnprintf(out, cap, "run %s %s", id, outcome);
        return;
    }
    report_clean(jstr(error, "code", "error"), code, sizeof(code), -1);
    report_clean(jstr(error, "message", ""), msg, sizeof(msg), -1);
    xsnprintf(out, cap, "run %s %s (%s): %s", id, outcome, code, msg);
}

enum watch_exit watch_exit_of(const json_t *run)
{
    return strcmp(jstr(run, "outcome", ""), "succeeded") == 0 ? WATCH_SUCCEEDED : WATCH_OTHER;
}

/* Takes the bar off the terminal, so that a message can be written. */
static void bar_clear(struct watch *w)
{
    if (!w->bar)
        return;
    fputs("\r\033[K", w->v->out);
    fflush(w->v->out);
    w->bar = false;
}

static void bar_clear_cb(void *arg)
{
    bar_clear(arg);
}

static void bar_draw(struct watch *w, const json_t *run)
{
    char line[1024];

    watch_format_bar(run, w->v->columns, line, sizeof(line));
    fprintf(w->v->out, "\r\033[K%s", line);
    w->bar = true;
}

static void show(struct watch *w, const char *event, const json_t *run)
{
    char line[1024];

    if (w->v->tty) {
        bar_draw(w, run);
    } else {
        watch_format_line(event, run, line, sizeof(line));
        fprintf(w->v->out, "%s\n", line);
    }
    fflush(w->v->out);
}

/* A log line: above the bar on a terminal (which is drawn again under
 * it), else a line of its own among the events. */
static void show_log(struct watch *w, const json_t *line)
{
    if (w->v->tty) {
        bar_clear(w);
        logline_print(w->v->out, line, LOGLINE_TERMINAL, w->v->color);
        if (w->last)
            bar_draw(w, w->last);
    } else {
        logline_print(w->v->out, line, LOGLINE_WATCH, false);
    }
    fflush(w->v->out);
}

/* The states of a workflow's steps in run (a run object, or one made of a
 * step's frame) that differ from those printed: lines of their own, above
 * the bar on a terminal; then they are the ones printed. */
static void show_steps(struct watch *w, const json_t *run)
{
    const json_t *steps = json_object_get(json_object_get(run, "workflow"), "steps");
    json_t *seen, *fresh;
    const char *name;
    const json_t *s;
    char lines[8192];

    if (!json_is_object(steps))
        return;
    if (!w->steps_seen && !(w->steps_seen = json_pack("{s:{s:{}}}", "workflow", "steps")))
        abort(); /* jansson fails only when it cannot allocate */
    seen = json_object_get(json_object_get(w->steps_seen, "workflow"), "steps");
    /* The two streams disagree for a moment (a step's own events may come
     * after the workflow's member showed it further on): a state is never
     * taken back. */
    if (!(fresh = json_pack("{s:{s:{}}}", "workflow", "steps")))
        abort();
    json_object_foreach((json_t *)steps, name, s)
    {
        const char *state = jstr(s, "state", "?");
        if (watch_step_rank(state) <
            watch_step_rank(jstr(json_object_get(seen, name), "state", "")))
            continue;
        json_object_set(json_object_get(json_object_get(fresh, "workflow"), "steps"), name,
                        (json_t *)s);
    }
    watch_format_steps(json_object_size(seen) ? w->steps_seen : NULL, fresh, lines, sizeof(lines));
    json_object_foreach(json_object_get(json_object_get(fresh, "workflow"), "steps"), name, s)
        json_object_set_new(seen, name, json_pack("{s:s}", "state", jstr(s, "state", "?")));
    json_decref(fresh);
    if (!lines[0])
        return;
    bar_clear(w);
    fputs(lines, w->v->out);
    if (w->v->tty && w->last)
        bar_draw(w, w->last);
    fflush(w->v->out);
}

/* An event of one of the workflow's steps (its own run's status): the
 * step's state as the workflow's member would show it. Follow-ups of the
 * workflow (parent_id too, no workflow_step) are not steps. */
static enum status on_step_event(void *arg, const struct evparse_event *ev, struct error *err)
{
    struct watch *w = arg;
    json_t *run, *one;
    const char *name, *status;

    (void)err;
    if (!STR_IN(ev->type, "snapshot", "status", "progress"))
        return ST_OK;
    run = json_loadb(ev->data, ev->data_len, 0, NULL);
    name = jstr(run, "workflow_step", NULL);
    status = jstr(run, "status", NULL);
    if (name && status) {
        one = json_pack("{s:{s:{s:{s:s}}}}", "workflow", "steps", name, "state",
                        strcmp(status, "completed") == 0 ? jstr(run, "outcome", "?") : status);
        if (!one)
            abort(); /* jansson fails only when it cannot allocate */
        show_steps(w, one);
        json_decref(one);
    }
    json_decref(run);
    return ST_OK;
}

/* The end: the terminal event held back, the last state staying on the
 * terminal, then how the run ended. */
static enum watch_exit finish(struct watch *w)
{
    char line[1024];

    if (w->held[0] && !w->v->tty)
        show(w, w->held, w->last);
    if (w->bar) {
        watch_format_bar(w->last, w->v->columns, line, sizeof(line));
        fprintf(w->v->out, "\r\033[K%s\n", line);
        w->bar = false;
    }
    watch_format_result(w->last, line, sizeof(line));
    fprintf(w->v->out, "%s\n", line);
    fflush(w->v->out);
    return watch_exit_of(w->last);
}

/* The run is completed; the log is waited for from now on. */
static void run_done(struct watch *w, int64_t now)
{
    w->done = true;
    w->done_ms = now;
    follow_done(&w->run);
    follow_done(&w->steps);
    follow_start(&w->log); /* if the run ended before any event was shown */
}

static enum status on_run_event(void *arg, const struct evparse_event *ev, struct error *err)
{
    struct watch *w = arg;
    bool completed;
    json_error_t jerr;
    json_t *run;

    (void)err;
    if (!STR_IN(ev->type, "snapshot", "status", "progress", "step"))
        return ST_OK; /* a kind of event this version does not know */
    run = json_loadb(ev->data, ev->data_len, 0, &jerr);
    if (!json_is_object(run)) {
        json_decref(run);
        bar_clear(w);
        fprintf(w->v->err, "opsrun: skipped an event of run %s that is not a run: %s\n", w->id,
                jerr.text);
        return ST_OK;
    }
    show_steps(w, run);
    if (json_is_object(json_object_get(run, "workflow")) && w->steps.state == FOLLOW_IDLE)
        follow_start(&w->steps); /* a workflow: its steps' own events too */
    json_decref(w->last);
    w->last = run;
    completed = strcmp(jstr(run, "status", ""), "completed") == 0;
    if (!w->shown || !completed)
        show(w, ev->type, run);
    else
        xsnprintf(w->held, sizeof(w->held), "%s", ev->type);
    w->shown = true;
    follow_start(&w->log); /* from the first event on */
    if (completed)
        run_done(w, clock_mono_ms());
    return ST_OK;
}

static enum status on_log_event(void *arg, const struct evparse_event *ev, struct error *err)
{
    struct watch *w = arg;
    json_t *line;

    (void)err;
    if (strcmp(ev->type, "end") == 0) {
        follow_done(&w->log);
        return ST_OK;
    }
    line = logline_of_event(ev);
    if (line && logline_seq(line) > w->last_seq) {
        w->last_seq = logline_seq(line);
        show_log(w, line);
        if (w->done)
            w->done_ms = clock_mono_ms();
    }
    json_decref(line); /* another kind of event, or not a line: skipped */
    return ST_OK;
}

json_t *watch_read_run(struct api *a, const char *id, char *why, size_t cap)
{
    struct api_resp r;
    struct error err = {0};
    char *path = xasprintf("/runs/%s", id);
    json_t *run = NULL;

    api_resp_init(&r);
    if (api_call(a, "GET", path, NULL, GET_TIMEOUT_MS, &r, &err) != ST_OK)
        xsnprintf(why, cap, "%s", err.message);
    else if (r.status != 200)
        report_reason(&r, why, cap);
    else if (!json_is_object(r.json) || strcmp(jstr(r.json, "status", ""), "completed") != 0)
        xsnprintf(why, cap, "the stream ended before the run did");
    else
        run = json_incref(r.json);
    api_resp_cleanup(&r);
    free(path);
    return run;
}

/* The run's stream after a step: an exit status, or -1 to go on. */
static int step_run(struct watch *w, struct api_multi *m, int64_t now)
{
    char why[600];
    json_t *run;

    switch (follow_step(&w->run, m, now)) {
    case FOLLOW_NO_CONTENT: /* over, and every event seen: how did it end? */
        run = watch_read_run(w->api, w->id, why, sizeof(why));
        if (!run) {
            follow_again(&w->run, why, -1, now);
            return -1;
        }
        json_decref(w->last);
        w->last = run;
        run_done(w, now);
        return -1;
    case FOLLOW_REFUSED:
        bar_clear(w);
        report_answer(w->v->err, "watch", follow_resp(&w->run));
        return WATCH_OTHER;
    case FOLLOW_BROKEN:
        bar_clear(w);
        report_error(w->v->err, &w->run.err);
        return WATCH_LOST;
    case FOLLOW_GAVE_UP:
        return WATCH_LOST;
    default:
        return -1;
    }
}

/* The log's stream after a step: over when it ended, when the server has
 * none (an older server: 404), or when it breaks for good. */
static void step_log(struct watch *w, struct api_multi *m, int64_t now)
{
    enum follow_state st = follow_step(&w->log, m, now);

    if (st == FOLLOW_BROKEN || st == FOLLOW_GAVE_UP) {
        bar_clear(w);
        fprintf(w->v->err, "opsrun: stopped following the log of run %s: %s\n", w->id,
                w->log.err.message);
    }
    w->log_over = st == FOLLOW_DONE || st == FOLLOW_NO_CONTENT || st == FOLLOW_REFUSED ||
                  st == FOLLOW_BROKEN || st == FOLLOW_GAVE_UP;
}

/* Once the run is done: whether to stop waiting for the log. */
static bool log_settled(struct watch *w, int64_t now)
{
    if (w->log_over)
        return true;
    if (now - w->done_ms < WATCH_LOG_WAIT_S * 1000)
        return false;
    bar_clear(w);
    fprintf(w->v->err,
            "opsrun: the log of run %s did not end within %d s of the run; its last lines may "
            "be missing\n",
            w->id, WATCH_LOG_WAIT_S);
    return true;
}

static int64_t wait_ms(const struct watch *w, int64_t now)
{
    int64_t ms = follow_wait_ms(&w->run, now, WAIT_MAX_MS);

    ms = follow_wait_ms(&w->log, now, ms);
    ms = follow_wait_ms(&w->steps, now, ms);
    if (w->done && !w->log_over) {
        int64_t left = w->done_ms + WATCH_LOG_WAIT_S * 1000 - now;
        ms = left < 0 ? 0 : left < ms ? left : ms;
    }
    return ms;
}

enum watch_exit watch_run(struct api *a, const char *id, const struct watch_view *v)
{
    struct watch w = {.api = a, .id = id, .v = v};
    struct api_multi *m = api_multi_new(a);
    char *run_path = xasprintf("/runs/%s/stream", id),
         *log_path = xasprintf("/runs/%s/logs/stream", id);
    char *run_what = xasprintf("stream of run %s", id),
         *log_what = xasprintf("log stream of run %s", id);
    char *steps_path = xasprintf("/stream?parent_id=%s", id),
         *steps_what = xasprintf("stream of the steps of run %s", id);
    int rc = -1;

    follow_init(&w.run, run_path, run_what, EVENT_MAX, on_run_event, &w, v->err);
    follow_init(&w.log, log_path, log_what, LOGLINE_EVENT_MAX, on_log_event, &w, v->err);
    follow_init(&w.steps, steps_path, steps_what, EVENT_MAX, on_step_event, &w, v->err);
    w.run.before_note = bar_clear_cb, w.run.note_arg = &w;
    w.log.quiet = true;
    w.steps.quiet = true; /* the workflow's own events say how its steps end */
    follow_start(&w.run);
    while (rc < 0) {
        int64_t now = clock_mono_ms();
        api_multi_wait(m, (long)wait_ms(&w, now));
        now = clock_mono_ms();
        rc = step_run(&w, m, now);
        if (rc < 0 && !w.log_over)
            step_log(&w, m, now);
        if (rc < 0 && (w.steps.state == FOLLOW_OPEN || w.steps.state == FOLLOW_WAITING))
            (void)follow_step(&w.steps, m, now); /* secondary: errors left to the run's */
        if (rc < 0 && w.done && log_settled(&w, now))
            rc = (int)finish(&w);
    }
    follow_cleanup(&w.run);
    follow_cleanup(&w.log);
    follow_cleanup(&w.steps);
    api_multi_free(m);
    json_decref(w.last);
    json_decref(w.steps_seen);
    free(run_path);
    free(log_path);
    free(steps_path);
    free(steps_what);
    free(run_what);
    free(log_what);
    return (enum watch_exit)rc;
}
