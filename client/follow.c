/* client/follow.c — see follow.h. */
#include "client/follow.h"

#include "client/report.h"
#include "common/backoff.h"

#include <stdarg.h>

#define BACKOFF_BASE_MS 500
#define BACKOFF_CAP_MS 5000
#define BACKOFF_MIN_MS 100
#define RETRY_AFTER_MAX_MS 10000

/* Every event counts as progress, then goes to the owner. */
static enum status on_event(void *arg, const struct evparse_event *ev, struct error *err)
{
    struct follow *f = arg;

    f->advanced = true;
    return f->on_event(f->arg, ev, err);
}

static bool on_data(void *arg, const char *buf, size_t n)
{
    struct follow *f = arg;

    if (evparse_feed(&f->ep, buf, n, &f->err) != ST_OK) {
        f->broken = true; /* err says why; the step reads it */
        return false;
    }
    return !f->done;
}

void follow_init(struct follow *f, const char *path, const char *what, size_t event_max,
                 evparse_fn on_event_fn, void *arg, FILE *out)
{
    memset(f, 0, sizeof(*f));
    f->path = xstrdup(path);
    f->what = xstrdup(what);
    f->out = out;
    f->on_event = on_event_fn;
    f->arg = arg;
    evparse_init(&f->ep, event_max, on_event, f);
}

void follow_cleanup(struct follow *f)
{
    api_stream_free(f->s);
    f->s = NULL;
    evparse_cleanup(&f->ep);
    free(f->path);
    free(f->what);
}

void follow_start(struct follow *f)
{
    if (f->state == FOLLOW_IDLE)
        f->state = FOLLOW_WAITING, f->next_ms = 0;
}

void follow_done(struct follow *f)
{
    f->done = true;
    if (f->state != FOLLOW_OPEN) {
        api_stream_free(f->s);
        f->s = NULL;
        f->state = FOLLOW_DONE;
    }
}

static void note(const struct follow *f, const char *fmt, ...) PRINTF_LIKE(2, 3);
static void note(const struct follow *f, const char *fmt, ...)
{
    va_list ap;

    if (f->quiet)
        return;
    if (f->before_note)
        f->before_note(f->note_arg);
    va_start(ap, fmt);
    vfprintf(f->out, fmt, ap);
    va_end(ap);
    fflush(f->out);
}

void follow_again(struct follow *f, const char *why, long retry_after_s, int64_t now_ms)
{
    int64_t ms;

    f->done = false;
    f->tries = f->advanced ? 1 : f->tries + 1;
    f->advanced = false;
    if (f->tries >= FOLLOW_TRIES) {
        error_set(&f->err, ST_UNAVAILABLE, "%s", why);
        f->state = FOLLOW_GAVE_UP;
        note(f, "opsrun: gave up on the %s after %d tries: %s\n", f->what, f->tries, why);
        return;
    }
    ms = backoff_full_jitter_ms(BACKOFF_BASE_MS, BACKOFF_CAP_MS, f->tries);
    if (ms < BACKOFF_MIN_MS)
        ms = BACKOFF_MIN_MS;
    if (retry_after_s > 0 && retry_after_s * 1000 > ms)
        ms = retry_after_s * 1000 < RETRY_AFTER_MAX_MS ? retry_after_s * 1000 : RETRY_AFTER_MAX_MS;
    note(f, "opsrun: %s lost (%s); reconnecting in %.1f s (try %d of %d)\n", f->what, why,
         (double)ms / 1000, f->tries + 1, FOLLOW_TRIES);
    f->state = FOLLOW_WAITING;
    f->next_ms = now_ms + ms;
}

/* What the end of a connection means. */
static void ended(struct follow *f, enum status st, const struct error *err, int64_t now_ms)
{
    const struct api_resp *r = api_stream_resp(f->s);
    char why[600];

    if (f->done) {
        f->state = FOLLOW_DONE;
        return;
    }
    if (f->broken) {
        f->state = FOLLOW_BROKEN;
        return;
    }
    if (st == ST_OK && r->status == 204) {
        f->state = FOLLOW_NO_CONTENT;
        return;
    }
    if (st == ST_OK && r->status >= 400 && r->status < 500 && r->status != 408 &&
        r->status != 429) {
        f->state = FOLLOW_REFUSED;
        return;
    }
    if (st != ST_OK)
        xsnprintf(why, sizeof(why), "%s", err->message);
    else if (r->status == 200)
        xsnprintf(why, sizeof(why), "the stream ended before the run did");
    else
        report_reason(r, why, sizeof(why));
    follow_again(f, why, r->retry_after_s, now_ms);
}

enum follow_state follow_step(struct follow *f, struct api_multi *m, int64_t now_ms)
{
    struct error err = {0};
    enum status st;

    if (f->state == FOLLOW_WAITING && now_ms >= f->next_ms) {
        api_stream_free(f->s);
        evparse_reset(&f->ep);
        f->advanced = false;
        f->s = api_stream_start(m, f->path, evparse_last_id(&f->ep), FOLLOW_IDLE_S, on_data, f);
        f->state = FOLLOW_OPEN;
    }
    if (f->state == FOLLOW_OPEN && api_stream_over(f->s, &st, &err))
        ended(f, st, &err, now_ms);
    if (f->done && f->state == FOLLOW_OPEN) {
        api_stream_free(f->s); /* what is still coming is not wanted */
        f->s = NULL;
        f->state = FOLLOW_DONE;
    }
    return f->state;
}

int64_t follow_wait_ms(const struct follow *f, int64_t now_ms, int64_t limit)
{
    if (f->state != FOLLOW_WAITING)
        return limit;
    return f->next_ms <= now_ms ? 0 : f->next_ms - now_ms < limit ? f->next_ms - now_ms : limit;
}

const struct api_resp *follow_resp(const struct follow *f)
{
    static const struct api_resp none = {.retry_after_s = -1};

    return f->s ? api_stream_resp(f->s) : &none;
}

const char *follow_last_id(const struct follow *f)
{
    return evparse_last_id(&f->ep);
}
