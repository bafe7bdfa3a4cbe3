/* engine/complete.c — the completer: the thread that writes the ends of
 * finished runs, many per statement.
 *
 * A worker whose action ended the run hands the attempt over here and takes
 * its next run at once, instead of waiting for its own commit. The completer
 * writes everything handed over since its last write in one statement (at
 * most COMPLETE_BATCH runs): one commit, one NOTIFY, for the whole batch,
 * so the commits per run fall as the load rises. A batch is written as soon
 * as the previous one has committed; nothing waits for a timer or for a
 * batch to fill, so a lone run is written the moment it is handed over and
 * batching costs an idle service no latency.
 *
 * Each run stays fenced on its own (its worker, its attempt, still held),
 * and a run counts as finished (logs, metrics, stats, API, streams) only
 * once its batch has committed. A run handed over is no longer heartbeated:
 * its lease, taken over from the slot, still bounds when it may be written,
 * so a batch that cannot reach the database writes nothing once another
 * replica may have rescued the run. */
#include "engine/engine_internal.h"

#include "common/backoff.h"
#include "common/log.h"
#include "common/metrics.h"
#include "store/db.h"

#include <stdlib.h>
#include <string.h>

#define COMPLETE_BATCH 256

static void completion_cleanup(struct completion *c)
{
    runlog_chunk_cleanup(&c->log);
    run_free(c->run);
    json_decref(c->result);
    json_decref(c->error);
    json_decref(c->summary_counts);
    json_decref(c->failure_summary);
    memset(c, 0, sizeof(*c));
}

void completer_add(struct engine *e, struct completion *c)
{
    handoff_add(&e->done, c);
    pthread_cond_signal(&e->complete_cv);
    memset(c, 0, sizeof(*c));
}

/* The lines of a completion that will not be settled here, kept if the
 * database takes them at once: what the attempt printed stays true even
 * when another replica settles the run. */
static void complete_keep_lines(struct engine *e, const struct completion *c)
{
    struct db *db = NULL;
    struct error err = {0};

    if (c->log.nlines == 0)
        return;
    if (db_pool_get(e->pool, &db, &err) == ST_OK)
        (void)engine_log_chunk_write(e, db, c->run->tenant, c->run->id, c->run->attempt, &c->log);
    else
        LOG(LOG_WARN, "could not write log lines run=%s lines=%d: %s", c->run->id, c->log.nlines,
            err.message);
    db_pool_put(e->pool, db);
}

/* Drops the runs whose lease is over: another replica may be rescuing
 * them. Returns how many are left, compacted to the front. */
static size_t complete_drop_lost(struct engine *e, struct completion *c, size_t n)
{
    size_t kept = 0;
    int lost = 0;

    for (size_t i = 0; i < n; i++) {
        if (clock_mono_ms() <= c[i].lease_ms) {
            c[kept++] = c[i];
            continue;
        }
        engine_log_lost(c[i].run, c[i].started_ms, "completer");
        complete_keep_lines(e, &c[i]);
        completion_cleanup(&c[i]);
        lost++;
    }
    if (lost) {
        pthread_mutex_lock(&e->mu);
        e->st.lost_total += lost;
        pthread_mutex_unlock(&e->mu);
    }
    return kept;
}

/* Writes c[0..n) in one statement, retrying while the database cannot be
 * reached and the leases last. fin gets which were written. Returns how many
 * of c are left (those dropped as lost are cleaned up). */
static size_t complete_write(struct engine *e, struct completion *c, size_t n,
                             struct run_finish *fin)
{
    struct backoff pause = {.first_ms = DB_RETRY_FIRST_MS, .max_ms = DB_RETRY_MAX_MS};

    for (;;) {
        struct db *db = NULL;
        struct error err = {0};
        enum status st;

        n = complete_drop_lost(e, c, n);
        if (n == 0)
            return 0;
        for (size_t i = 0; i < n; i++)
            fin[i] = (struct run_finish){
                .tenant = c[i].run->tenant,
                .id = c[i].run->id,
                .attempt = c[i].run->attempt,
                .res = {.outcome = c[i].outcome,
                        .result = c[i].result,
                        .error = c[i].error,
                        .summary_counts = c[i].summary_counts,
                        .failure_summary = c[i].failure_summary,
                        .message = c[i].message},
                .log_lines_json = c[i].log.lines_json,
                .log_nlines = c[i].log.nlines,
                .log_dropped = c[i].log.dropped,
            };
        st = db_pool_get(e->pool, &db, &err);
        if (st == ST_OK)
            st = store_runs_finish_batch(db, e->worker_id, fin, n, &err);
        db_pool_put(e->pool, db);
        if (st == ST_OK)
            return n;
        LOG(LOG_WARN, "could not complete runs=%zu, retrying: %s", n, err.message);
        backoff_sleep(&pause);
    }
}

/* After a batch committed: what each run became, in logs, stats and
 * metrics, and one wake-up for streams, waiters and claims. */
static void complete_report(struct engine *e, struct completion *c, size_t n,
                            const struct run_finish *fin)
{
    int64_t ok = 0, lost = 0;
    bool backlog;

    for (size_t i = 0; i < n; i++) {
        if (fin[i].written) {
            ok++;
            metrics_log_lines(e->metrics, c[i].log.nlines, c[i].log.dropped);
            engine_log_finished(c[i].run, c[i].outcome, c[i].code, c[i].extra);
            metrics_run_completed(e->metrics, c[i].run->type, run_outcome_name(c[i].outcome),
                                  c[i].seconds);
        } else {
            lost++;
            complete_keep_lines(e, &c[i]);
            LOG(LOG_WARN,
                "could not settle run=%s attempt=%d: run \"%s\" attempt %d is no longer "
                "held by %s",
                c[i].run->id, c[i].run->attempt, c[i].run->id, c[i].run->attempt, e->worker_id);
        }
    }
    pthread_mutex_lock(&e->mu);
    e->st.finished_total += ok;
    e->st.lost_total += lost;
    backlog = e->backlog;
    pthread_mutex_unlock(&e->mu);
    /* The runs no longer count against the caps: due runs left behind by a
     * cap may be claimed now, here and by the other replicas. */
    if (backlog)
        e->wake_dispatcher(e);
    if (ok)
        doorbell_ring(e, backlog, true);
}

static void *completer_main(void *arg)
{
    struct engine *e = arg;
    struct completion *batch = xcalloc(COMPLETE_BATCH, sizeof(*batch));
    struct run_finish *fin = xcalloc(COMPLETE_BATCH, sizeof(*fin));

    pthread_mutex_lock(&e->mu);
    for (;;) {
        size_t n;
        while (!e->completer_stop && e->done.n == 0)
            pthread_cond_wait(&e->complete_cv, &e->mu);
        n = handoff_take(&e->done, batch, COMPLETE_BATCH);
        if (n == 0)
            break;
        pthread_mutex_unlock(&e->mu);

        n = complete_write(e, batch, n, fin);
        complete_report(e, batch, n, fin);
        for (size_t i = 0; i < n; i++)
            completion_cleanup(&batch[i]);

        pthread_mutex_lock(&e->mu);
    }
    pthread_mutex_unlock(&e->mu);
    free(batch);
    free(fin);
    return NULL;
}

enum status completer_start(struct engine *e, struct error *err)
{
    if (thread_start(e, &e->completer, completer_main, e, "completer", err) != ST_OK)
        return ST_INTERNAL;
    e->completer_started = true;
    return ST_OK;
}

void completer_stop(struct engine *e)
{
    struct completion c;

    pthread_mutex_lock(&e->mu);
    e->completer_stop = true;
    pthread_cond_signal(&e->complete_cv);
    pthread_mutex_unlock(&e->mu);
    if (e->completer_started)
        pthread_join(e->completer, NULL);
    e->completer_started = false;
    while (handoff_take(&e->done, &c, 1) == 1) /* only after a failed start */
        completion_cleanup(&c);
}
