/* server/http_park.c — answers that wait without holding a thread
 * (http_internal.h). A long-poll (?wait=S) suspends its connection until
 * its run completes or S passes; the hub resumes it (live/hub.h). A
 * handler's deferred reply (a generic submission, handlers/handlers.h)
 * suspends until its work is done: the submission queue's flusher resumes
 * it after its commit (handlers/submitq.h). Either way the connection's
 * next call (http_park_resumed) answers it. */
#include "server/http_internal.h"

#include "live/hub.h"

#include <stdlib.h>

/* A long-poll's parked answer. */
struct http_wait {
    struct reply rp;
    struct hub_waiter w;
};

/* ---- long-polls ------------------------------------------------------------ */

/* Both run with the hub lock held (live/hub.h). */
static bool wait_suspend(void *arg)
{
    http_suspend(arg);
    return true;
}

static void wait_resume(void *arg)
{
    http_resume(arg);
}

/* Answers a long-poll with its run as it is now. */
static bool wait_finish(struct req_ctx *rc, bool refresh)
{
    struct http_wait *hw = rc->wait;
    struct request rq = http_request_of(rc);
    bool ret;

    hub_wait_remove(rc->hc.hub, &hw->w);
    if (refresh)
        (void)hw->rp.refresh(&rc->hc, &rq, &hw->rp);
    ret = http_send(rc, &hw->rp);
    reply_cleanup(&hw->rp);
    return ret;
}

/* Parks the answer until the run completes or the wait ends. The run is
 * read again after the waiter is armed: a completion committed between the
 * handler's read and the arming is then seen here, and any later one
 * reaches the waiter through the hub. */
static bool wait_begin(struct req_ctx *rc, struct reply *rp)
{
    const struct hctx *hc = &rc->hc;
    struct request rq = http_request_of(rc);
    struct http_wait *hw = xcalloc(1, sizeof(*hw));
    struct error err = {0};

    hw->rp = *rp;
    reply_init(rp); /* the body moved to hw */
    rc->wait = hw;
    xsnprintf(hw->w.tenant, sizeof(hw->w.tenant), "%s", hw->rp.wait_tenant);
    xsnprintf(hw->w.run_id, sizeof(hw->w.run_id), "%s", hw->rp.wait_run_id);
    hw->w.deadline_ms = clock_mono_ms() + hw->rp.wait_ms;
    hw->w.wake = (struct hub_wake){wait_suspend, wait_resume, rc};
    if (hub_wait_add(hc->hub, &hw->w, &err) != ST_OK)
        return wait_finish(rc, false);
    (void)hw->rp.refresh(hc, &rq, &hw->rp);
    if (hw->rp.wait_ms == 0)
        return wait_finish(rc, false);
    if (!hub_wait_suspend(hc->hub, &hw->w))
        return wait_finish(rc, true);
    return true;
}

bool http_park_or_send(struct req_ctx *rc, struct reply *rp)
{
    bool ret;

    if (rp->http_status == 0)
        reply_error(rp, ST_INTERNAL, NULL);
    if (rp->wait_ms > 0 && rp->refresh && rc->hc.hub)
        return wait_begin(rc, rp);
    ret = http_send(rc, rp);
    reply_cleanup(rp);
    return ret;
}

/* ---- deferred work ----------------------------------------------------------- */

/* Called once by whoever finished the work (a submission flusher after its
 * commit), from any thread; the connection is suspended by then. */
static void defer_resume(void *arg)
{
    http_resume(arg);
}

/* Suspends first, because the work may be done (and resume it) before
 * start returns. */
bool http_park_defer(struct req_ctx *rc, struct reply *rp)
{
    rc->deferred = rp->deferred;
    rp->deferred = NULL;
    reply_cleanup(rp);
    if (!rc->deferred_counted) {
        rc->deferred_counted = true;
        atomic_fetch_add(&rc->h->deferred, 1);
    }
    http_suspend(rc);
    rc->deferred->start(rc->deferred, &rc->hc, defer_resume, rc);
    return true;
}

/* The work is done: answer it (or park it again as a long-poll). */
static bool defer_finish(struct req_ctx *rc)
{
    const struct hctx *hc = &rc->hc;
    struct request rq = http_request_of(rc);
    struct deferred *d = rc->deferred;
    struct reply rp;

    rc->deferred = NULL;
    reply_init(&rp);
    d->finish(d, hc, &rq, &rp);
    d->free(d, hc);
    return http_park_or_send(rc, &rp);
}

bool http_park_resumed(struct req_ctx *rc)
{
    if (rc->wait)
        return wait_finish(rc, true); /* the run completed or the wait ended */
    return defer_finish(rc);
}

void http_park_free(struct req_ctx *rc)
{
    const struct hctx *hc = &rc->hc;

    if (rc->wait) {
        hub_wait_remove(hc->hub, &rc->wait->w);
        hub_wait_release(hc->hub, &rc->wait->w);
        reply_cleanup(&rc->wait->rp);
        free(rc->wait);
        rc->wait = NULL;
    }
    if (rc->deferred) /* done, but its client left before the answer */
        rc->deferred->free(rc->deferred, hc);
    rc->deferred = NULL;
}
