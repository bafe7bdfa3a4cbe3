/* engine/approvals.c — the approvals thread: it decides the runs whose
 * approval expired, each as its run type's on_timeout said when the run was
 * made (approve: the run is queued; reject: it completes cancelled with
 * error code "approval_expired"), in store_approvals_expire's statement,
 * which any replica may run: runs another replica is deciding are skipped.
 *
 * It asks the database when the next approval expires and sleeps until
 * then, by the database's clock: no loop per run, nothing done while none
 * is due. It sleeps at most APPROVALS_RESYNC_MS, which is no longer than
 * the shortest approval timeout (1 s), so a run made since (here or on
 * another replica, with or without LISTEN) is seen before it can expire,
 * and every approval is decided within milliseconds of its expiry on
 * whichever replicas are up. Every replica runs it, whatever its
 * configuration: a run keeps its own expiry, and one made under a run type
 * that has since lost its approval (or by a replica configured otherwise)
 * must still expire, or it would wait for ever and hold its identity. While
 * nothing awaits approval a pass is one read of a small partial index a
 * second. */
#include "engine/engine_internal.h"

#include "common/backoff.h"
#include "common/log.h"
#include "common/metrics.h"
#include "store/approvals.h"
#include "store/db.h"

#define APPROVALS_RESYNC_MS 1000
/* Runs decided in one statement; a fuller batch is followed by another. */
#define APPROVALS_BATCH 256
/* A due run that a pass could not decide is held by another transaction (a
 * decision, a cancel, another replica's pass): look again after this, not
 * at once. */
#define APPROVALS_HELD_MS 50
#define APPROVALS_RETRY_FIRST_MS 200
#define APPROVALS_RETRY_MAX_MS 5000

static void expired_rejected(void *arg, const char *type, enum run_outcome outcome, int n)
{
    struct engine *e = arg;

    for (int i = 0; i < n; i++)
        metrics_run_completed(e->metrics, type, run_outcome_name(outcome), -1);
}

/* Decides every expired approval, a batch at a time, adding to *decided;
 * false on a database error. */
static bool approvals_expire_all(struct engine *e, struct db *db, int *decided, struct error *err)
{
    int approved = 0, rejected = 0;

    do {
        if (store_approvals_expire(db, APPROVALS_BATCH, &approved, &rejected, expired_rejected, e,
                                   err) != ST_OK)
            return false;
        *decided += approved + rejected;
        if (approved + rejected > 0)
            LOG(LOG_INFO, "approvals expired approved=%d rejected=%d", approved, rejected);
        if (approved > 0)
            e->wake_dispatcher(e);
        if (approved + rejected > 0)
            doorbell_ring(e, approved > 0, true);
    } while (approved + rejected == APPROVALS_BATCH);
    return true;
}

/* One pass; returns how long to sleep (ms), or -1 after a database error. */
static int64_t approvals_pass(struct engine *e)
{
    struct db *db = NULL;
    struct error err = {0};
    int64_t next_ms = -1;
    int decided = 0;
    enum status st = db_pool_get(e->pool, &db, &err);

    if (st == ST_OK && !approvals_expire_all(e, db, &decided, &err))
        st = ST_UNAVAILABLE;
    if (st == ST_OK)
        st = store_approvals_next(db, &next_ms, &err);
    db_pool_put(e->pool, db);
    if (st != ST_OK) {
        LOG(LOG_WARN, "could not decide the expired approvals: %s", err.message);
        return -1;
    }
    if (next_ms == 0 && decided == 0)
        return APPROVALS_HELD_MS;
    return next_ms < 0 || next_ms > APPROVALS_RESYNC_MS ? APPROVALS_RESYNC_MS : next_ms;
}

/* Waits ms from `from` (monotonic) or until the thread stops; false when
 * it stops. */
static bool approvals_wait(struct engine *e, int64_t from, int64_t ms)
{
    struct timespec ts;
    bool go;

    pthread_mutex_lock(&e->mu);
    while (!e->approvals_stop && clock_mono_ms() < from + ms) {
        abstime_after_ms(&ts, from + ms - clock_mono_ms());
        pthread_cond_timedwait(&e->approvals_cv, &e->mu, &ts);
    }
    go = !e->approvals_stop;
    pthread_mutex_unlock(&e->mu);
    return go;
}

static void *approvals_main(void *arg)
{
    struct engine *e = arg;
    struct backoff b = {.first_ms = APPROVALS_RETRY_FIRST_MS, .max_ms = APPROVALS_RETRY_MAX_MS};
    bool go = true;

    while (go) {
        int64_t wait_ms = approvals_pass(e);

        if (wait_ms >= 0)
            backoff_reset(&b);
        go = approvals_wait(e, clock_mono_ms(), wait_ms >= 0 ? wait_ms : backoff_next_ms(&b));
    }
    return NULL;
}

enum status approvals_start(struct engine *e, struct error *err)
{
    enum status st;

    st = thread_start(e, &e->approvals, approvals_main, e, "approvals", err);
    e->approvals_started = st == ST_OK;
    return st;
}

void approvals_stop(struct engine *e)
{
    if (!e->approvals_started)
        return;
    pthread_mutex_lock(&e->mu);
    e->approvals_stop = true;
    pthread_cond_broadcast(&e->approvals_cv);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->approvals, NULL);
    e->approvals_started = false;
}
