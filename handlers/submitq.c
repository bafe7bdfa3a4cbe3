/* handlers/submitq.c — see submitq.h. */
#include "handlers/submitq.h"

#include "common/log.h"
#include "common/metrics.h"
#include "engine/engine.h"
#include "handlers/handlers.h"
#include "store/db.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define FLUSHERS_MAX 16

struct submitq {
    const struct hctx *hc;
    struct submitq_options o;
    pthread_mutex_t mu;
    pthread_cond_t work_cv, idle_cv;
    struct submit_batch *head, *tail;
    size_t queued; /* submissions in the list */
    size_t held;   /* batches pushed and not yet released */
    bool closing;
    int nthreads;
    pthread_t threads[FLUSHERS_MAX];
};

struct submit_batch *submit_batch_new(size_t n)
{
    struct submit_batch *b = xcalloc(1, sizeof(*b));

    b->n = n;
    b->items = xcalloc(n ? n : 1, sizeof(*b->items));
    b->out = xcalloc(n ? n : 1, sizeof(*b->out));
    return b;
}

static char *dup_or_null(const char *s)
{
    return s ? xstrdup(s) : NULL;
}

void submit_batch_set(struct submit_batch *b, size_t i, const struct run_new *rn)
{
    struct run_new *it = &b->items[i];

    *it = *rn;
    it->tenant = xstrdup(rn->tenant);
    it->id = xstrdup(rn->id);
    it->type = xstrdup(rn->type);
    it->initiator = dup_or_null(rn->initiator);
    it->run_at = dup_or_null(rn->run_at);
    it->identity_hash = xstrdup(rn->identity_hash);
    it->request_hash = xstrdup(rn->request_hash);
    it->input = json_incref((json_t *)rn->input);
}

void submit_batch_free(struct submit_batch *b)
{
    if (!b)
        return;
    for (size_t i = 0; i < b->n; i++) {
        struct run_new *it = &b->items[i];
        free((char *)it->tenant);
        free((char *)it->id);
        free((char *)it->type);
        free((char *)it->initiator);
        free((char *)it->run_at);
        free((char *)it->identity_hash);
        free((char *)it->request_hash);
        json_decref((json_t *)it->input);
    }
    run_submitted_cleanup(b->out, b->n);
    free(b->items);
    free(b->out);
    free(b);
}

/* After a commit: the new runs are counted, and one wake-up (this
 * process's dispatcher, the other replicas' doorbell) covers them all. */
static void submitted(const struct hctx *hc, const struct run_submitted *out, size_t n)
{
    bool any = false;

    for (size_t i = 0; i < n; i++) {
        if (out[i].st != ST_OK || out[i].dedup)
            continue;
        metrics_run_submitted(hc->metrics, out[i].run->type);
        any = true;
    }
    if (any && hc->engine)
        engine_submitted(hc->engine);
}

/* One statement (or a few, see store_runs_submit_batch) for n items. */
static enum status write_items(const struct hctx *hc, const struct run_new *items, size_t n,
                               struct run_submitted *out, struct error *err)
{
    struct db *db = NULL;
    enum status st = db_pool_get(hc->pool, &db, err);

    if (st == ST_OK)
        st = store_runs_submit_batch(db, items, n, out, err);
    db_pool_put(hc->pool, db);
    if (st == ST_OK)
        submitted(hc, out, n);
    return st;
}

void submit_batch_run(const struct hctx *hc, struct submit_batch *b)
{
    b->st = write_items(hc, b->items, b->n, b->out, &b->err);
}

/* Writes the batches of list together and answers each. */
static void flush(struct submitq *q, struct submit_batch *list, size_t n)
{
    struct run_new *items = xcalloc(n ? n : 1, sizeof(*items));
    struct run_submitted *out = xcalloc(n ? n : 1, sizeof(*out));
    struct submit_batch *b, *next;
    struct error err = {0};
    size_t k = 0;
    enum status st;

    for (b = list; b; b = b->next) {
        memcpy(items + k, b->items, b->n * sizeof(*items));
        k += b->n;
    }
    st = write_items(q->hc, items, n, out, &err);
    if (st != ST_OK)
        LOG(LOG_WARN, "could not write %zu submissions: %s", n, err.message);
    k = 0;
    for (b = list; b; b = next) {
        next = b->next;
        b->st = st;
        if (st == ST_OK)
            memcpy(b->out, out + k, b->n * sizeof(*out)); /* the runs move to b */
        else
            b->err = err;
        k += b->n;
        b->done(b->done_arg); /* the last touch: b may be freed from here on */
    }
    free(out);
    free(items);
}

/* Takes whole batches from the head, up to batch_max submissions (at least
 * one batch). Called with the lock held. */
static struct submit_batch *take(struct submitq *q, size_t *n)
{
    struct submit_batch *list = q->head, *last = q->head;

    *n = last->n;
    while (last->next && *n + last->next->n <= (size_t)q->o.batch_max) {
        last = last->next;
        *n += last->n;
    }
    q->head = last->next;
    if (!q->head)
        q->tail = NULL;
    last->next = NULL;
    q->queued -= *n;
    return list;
}

static void *flusher_main(void *arg)
{
    struct submitq *q = arg;
    struct submit_batch *list;
    size_t n;

    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!q->head && !q->closing)
            pthread_cond_wait(&q->work_cv, &q->mu);
        if (!q->head)
            break; /* closing, and nothing left */
        list = take(q, &n);
        pthread_mutex_unlock(&q->mu);
        flush(q, list, n);
        pthread_mutex_lock(&q->mu);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

struct submitq *submitq_new(const struct hctx *hc, const struct submitq_options *o)
{
    struct submitq *q = xcalloc(1, sizeof(*q));

    q->hc = hc;
    q->o = *o;
    if (q->o.flushers < 1)
        q->o.flushers = 1;
    if (q->o.flushers > FLUSHERS_MAX)
        q->o.flushers = FLUSHERS_MAX;
    if (q->o.batch_max < 1)
        q->o.batch_max = 1;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->work_cv, NULL);
    cond_init_monotonic(&q->idle_cv);
    return q;
}

enum status submitq_start(struct submitq *q, struct error *err)
{
    for (int i = 0; i < q->o.flushers; i++) {
        if (pthread_create(&q->threads[i], NULL, flusher_main, q) != 0)
            return error_set(err, ST_INTERNAL, "could not start a submission flusher");
        q->nthreads++;
    }
    return ST_OK;
}

void submitq_push(struct submitq *q, struct submit_batch *b, submit_done_fn done, void *arg)
{
    const char *why = NULL;

    b->next = NULL;
    b->done = done;
    b->done_arg = arg;
    pthread_mutex_lock(&q->mu);
    q->held++;
    if (q->closing)
        why = "the server is shutting down";
    else if (q->queued > 0 && q->queued + b->n > (size_t)q->o.queue_max)
        why = "too many submissions are waiting to be written";
    if (!why) {
        if (q->tail)
            q->tail->next = b;
        else
            q->head = b;
        q->tail = b;
        q->queued += b->n;
        pthread_cond_signal(&q->work_cv);
    }
    pthread_mutex_unlock(&q->mu);
    if (why) {
        b->st = error_set(&b->err, ST_BUSY, "%s; retry shortly", why);
        done(arg);
    }
}

void submitq_release(struct submitq *q)
{
    pthread_mutex_lock(&q->mu);
    if (q->held > 0 && --q->held == 0)
        pthread_cond_broadcast(&q->idle_cv);
    pthread_mutex_unlock(&q->mu);
}

bool submitq_close(struct submitq *q, int wait_ms)
{
    struct timespec until;
    bool idle;

    pthread_mutex_lock(&q->mu);
    q->closing = true;
    pthread_cond_broadcast(&q->work_cv);
    pthread_mutex_unlock(&q->mu);
    for (int i = 0; i < q->nthreads; i++)
        pthread_join(q->threads[i], NULL);
    q->nthreads = 0;
    abstime_after_ms(&until, wait_ms);
    pthread_mutex_lock(&q->mu);
    while (q->held > 0 && pthread_cond_timedwait(&q->idle_cv, &q->mu, &until) == 0)
        ;
    idle = q->held == 0;
    if (!idle)
        LOG(LOG_WARN, "submissions still unanswered after %d ms held=%zu", wait_ms, q->held);
    pthread_mutex_unlock(&q->mu);
    return idle;
}

void submitq_free(struct submitq *q)
{
    if (!q)
        return;
    pthread_cond_destroy(&q->work_cv);
    pthread_cond_destroy(&q->idle_cv);
    pthread_mutex_destroy(&q->mu);
    free(q);
}
