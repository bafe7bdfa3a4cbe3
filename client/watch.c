/* client/watch.c — see watch.h. */
#include "client/watch.h"

#include "client/evparse.h"
#include "client/report.h"
#include "common/backoff.h"

#include <time.h>

/* The biggest event accepted: a run's JSON with its input and result. */
#define EVENT_MAX ((size_t)64 << 20)
#define BAR_WIDTH 24
#define BACKOFF_BASE_MS 500
#define BACKOFF_CAP_MS 5000
#define BACKOFF_MIN_MS 100
#define RETRY_AFTER_MAX_MS 10000
#define GET_TIMEOUT_MS 30000

struct watch {
    struct api *api;
    const char *id;
    const struct watch_view *v;
    struct evparse ep;
    json_t *last;  /* the newest state of the run seen */
    bool done;     /* the terminal event came */
    bool advanced; /* this connection brought an event */
    bool bar;      /* a bar is on the terminal, without its newline */
    bool broken;   /* the stream could not be parsed: err says why */
    struct error err;
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

static void show(struct watch *w, const char *event, const json_t *run)
{
    char line[1024];

    if (w->v->tty) {
        watch_format_bar(run, w->v->columns, line, sizeof(line));
        fprintf(w->v->out, "\r\033[K%s", line);
        w->bar = true;
    } else {
        watch_format_line(event, run, line, sizeof(line));
        fprintf(w->v->out, "%s\n", line);
    }
    fflush(w->v->out);
}

/* The end: the last state stays on the terminal, then how the run ended. */
static enum watch_exit finish(struct watch *w, const json_t *run)
{
    char line[1024];

    if (w->bar) {
        watch_format_bar(run, w->v->columns, line, sizeof(line));
        fprintf(w->v->out, "\r\033[K%s\n", line);
        w->bar = false;
    }
    watch_format_result(run, line, sizeof(line));
    fprintf(w->v->out, "%s\n", line);
    fflush(w->v->out);
    return watch_exit_of(run);
}

static enum status on_event(void *arg, const struct evparse_event *ev, struct error *err)
{
    struct watch *w = arg;
    json_error_t jerr;
    json_t *run;

    (void)err;
    if (!STR_IN(ev->type, "snapshot", "status", "progress"))
        return ST_OK; /* a kind of event this version does not know */
    run = json_loadb(ev->data, ev->data_len, 0, &jerr);
    if (!json_is_object(run)) {
        json_decref(run);
        bar_clear(w);
        fprintf(w->v->err, "opsrun: skipped an event of run %s that is not a run: %s\n", w->id,
                jerr.text);
        return ST_OK;
    }
    show(w, ev->type, run);
    json_decref(w->last);
    w->last = run;
    w->advanced = true;
    w->done = strcmp(jstr(run, "status", ""), "completed") == 0;
    return ST_OK;
}

static bool on_data(void *arg, const char *buf, size_t n)
{
    struct watch *w = arg;

    if (evparse_feed(&w->ep, buf, n, &w->err) != ST_OK) {
        w->broken = true;
        return false;
    }
    return !w->done;
}

/* After a 204: the run is over; its outcome from GET /runs/{id}. */
static int read_final(struct watch *w)
{
    struct api_resp r;
    struct error err = {0};
    char *path = xasprintf("/runs/%s", w->id);
    enum status st;
    int rc = -1;

    api_resp_init(&r);
    st = api_call(w->api, "GET", path, NULL, GET_TIMEOUT_MS, &r, &err);
    if (st == ST_OK && r.status == 200 && json_is_object(r.json) &&
        strcmp(jstr(r.json, "status", ""), "completed") == 0)
        rc = (int)finish(w, r.json);
    api_resp_cleanup(&r);
    free(path);
    return rc; /* -1: not known yet, reconnect */
}

static void sleep_ms(int64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* A broken or refused stream: wait and go again, or give up. */
static int reconnect(struct watch *w, const char *why, long retry_after_s, int *tries)
{
    int64_t ms = backoff_full_jitter_ms(BACKOFF_BASE_MS, BACKOFF_CAP_MS, *tries);

    if (ms < BACKOFF_MIN_MS)
        ms = BACKOFF_MIN_MS;
    if (retry_after_s > 0 && retry_after_s * 1000 > ms)
        ms = retry_after_s * 1000 < RETRY_AFTER_MAX_MS ? retry_after_s * 1000 : RETRY_AFTER_MAX_MS;
    bar_clear(w);
    if (*tries >= WATCH_TRIES) {
        fprintf(w->v->err, "opsrun: gave up on the stream of run %s after %d tries: %s\n", w->id,
                *tries, why);
        return WATCH_LOST;
    }
    fprintf(w->v->err,
            "opsrun: stream of run %s lost (%s); reconnecting in %.1f s (try %d of %d)\n", w->id,
            why, (double)ms / 1000, *tries + 1, WATCH_TRIES);
    sleep_ms(ms);
    return -1;
}

/* What one connection's end means: an exit status, or -1 to go again. */
static int after_stream(struct watch *w, enum status st, const struct api_resp *r,
                        const struct error *err, int *tries)
{
    char why[600];

    if (w->done)
        return (int)finish(w, w->last);
    if (w->broken) {
        bar_clear(w);
        report_error(w->v->err, &w->err);
        return WATCH_LOST;
    }
    if (st == ST_OK && r->status == 204) {
        int rc = read_final(w);
        if (rc >= 0)
            return rc;
    }
    if (st == ST_OK && r->status >= 400 && r->status < 500 && r->status != 408 &&
        r->status != 429) {
        bar_clear(w);
        report_answer(w->v->err, "watch", r);
        return WATCH_OTHER;
    }
    *tries = w->advanced ? 1 : *tries + 1;
    if (st != ST_OK)
        xsnprintf(why, sizeof(why), "%s", err->message);
    else if (r->status == 200 || r->status == 204)
        xsnprintf(why, sizeof(why), "the stream ended before the run did");
    else
        report_reason(r, why, sizeof(why));
    return reconnect(w, why, r->retry_after_s, tries);
}

enum watch_exit watch_run(struct api *a, const char *id, const struct watch_view *v)
{
    struct watch w = {.api = a, .id = id, .v = v};
    char *path = xasprintf("/runs/%s/stream", id);
    int rc = -1, tries = 0;

    evparse_init(&w.ep, EVENT_MAX, on_event, &w);
    while (rc < 0) {
        struct api_resp r;
        struct error err = {0};
        enum status st;
        api_resp_init(&r);
        evparse_reset(&w.ep);
        w.advanced = false;
        st = api_stream(a, path, evparse_last_id(&w.ep), WATCH_IDLE_S, on_data, &w, &r, &err);
        rc = after_stream(&w, st, &r, &err, &tries);
        api_resp_cleanup(&r);
    }
    evparse_cleanup(&w.ep);
    json_decref(w.last);
    free(path);
    return (enum watch_exit)rc;
}
