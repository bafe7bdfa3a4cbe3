/* engine/poller_writer.c — the poll writer thread: the checkers hand it
 * the next check of each run that goes on, and it writes them many per
 * statement (engine/poller_internal.h). */
#include "engine/poller_internal.h"

#include "common/backoff.h"
#include "common/log.h"
#include "store/db.h"

#include <stdlib.h>

/* Next-check writes per statement, at most, and tries of a statement. With
 * fewer than AGAIN_GATHER to write, the writer waits up to AGAIN_GATHER_MS
 * for more: checks end a few at a time, and a statement per few checks
 * would cost the database more than the checks. */
#define AGAIN_BATCH 256
#define AGAIN_TRIES 3
/* The pause before a statement's second try; doubled before the third. */
#define AGAIN_RETRY_FIRST_MS 50
#define AGAIN_RETRY_MAX_MS 1000
#define AGAIN_GATHER 16
#define AGAIN_GATHER_MS 2

/* Queues a next check for the writer; under p->mu. */
void poller_writer_add(struct poller *p, struct again *a)
{
    size_t n = handoff_add(&p->againq, a);

    if (n == 1 || n == AGAIN_GATHER)
        pthread_cond_signal(&p->again_cv);
}

void poller_again_free(struct again *a)
{
    free(a->tenant);
    free(a->id);
    free(a->owner);
    json_decref(a->poll_state);
}

/* Writes a[0..n) in one statement, trying again a few times: a batch that
 * updates many rows can be chosen as a deadlock's victim, where one row at a
 * time could only wait. */
static void again_write(struct poller *p, struct again *a, size_t n, struct poll_again *w)
{
    struct engine *e = p->e;
    struct backoff pause = {.first_ms = AGAIN_RETRY_FIRST_MS, .max_ms = AGAIN_RETRY_MAX_MS};

    for (int i = 0; i < (int)n; i++)
        w[i] = (struct poll_again){a[i].tenant,     a[i].id,       a[i].owner, a[i].poll_count,
                                   a[i].poll_state, a[i].delay_ms, false,      a[i].given_back};
    for (int tries = 1;; tries++) {
        struct db *db = NULL;
        struct error err = {0};
        int64_t t0 = clock_mono_us();
        enum status st = db_pool_get(e->pool, &db, &err);
        if (st == ST_OK)
            st = store_polls_again_batch(db, w, n, &err);
        db_pool_put(e->pool, db);
        atomic_fetch_add(&p->db_us, clock_mono_us() - t0);
        if (st == ST_OK)
            return;
        if (tries == AGAIN_TRIES) {
            LOG(LOG_WARN, "could not schedule the next checks runs=%zu: %s", n, err.message);
            return;
        }
        LOG(LOG_WARN, "could not schedule the next checks runs=%zu, retrying: %s", n, err.message);
        backoff_sleep(&pause);
    }
}

/* Writes the next checks handed to it since its last write, as soon as that
 * write committed and AGAIN_GATHER are waiting or the first of them waited
 * AGAIN_GATHER_MS: one statement, one commit, for up to AGAIN_BATCH checks. */
static void *writer_main(void *arg)
{
    struct poller *p = arg;
    struct again *batch = xcalloc(AGAIN_BATCH, sizeof(*batch));
    struct poll_again *w = xcalloc(AGAIN_BATCH, sizeof(*w));

    pthread_mutex_lock(&p->mu);
    for (;;) {
        size_t n;
        struct timespec ts;
        while (!p->writer_stop && p->againq.n == 0)
            pthread_cond_wait(&p->again_cv, &p->mu);
        if (p->againq.n == 0)
            break;
        abstime_after_ms(&ts, AGAIN_GATHER_MS);
        while (!p->writer_stop && p->againq.n < AGAIN_GATHER &&
               pthread_cond_timedwait(&p->again_cv, &p->mu, &ts) == 0)
            ;
        n = handoff_take(&p->againq, batch, AGAIN_BATCH);
        pthread_mutex_unlock(&p->mu);
        again_write(p, batch, n, w);
        for (size_t i = 0; i < n; i++)
            poller_again_free(&batch[i]);
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    free(batch);
    free(w);
    return NULL;
}

enum status poller_writer_start(struct poller *p, struct error *err)
{
    if (thread_start(p->e, &p->writer, writer_main, p, "poll writer", err) != ST_OK)
        return ST_INTERNAL;
    p->writer_started = true;
    return ST_OK;
}

void poller_writer_stop(struct poller *p)
{
    pthread_mutex_lock(&p->mu);
    p->writer_stop = true;
    pthread_cond_signal(&p->again_cv);
    pthread_mutex_unlock(&p->mu);
    if (p->writer_started)
        pthread_join(p->writer, NULL);
    p->writer_started = false;
}
