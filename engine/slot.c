/* engine/slot.c — one attempt of a run on a worker's slot: the action
 * with its progress sink and saved state, the decision its result calls
 * for, and the write that ends the attempt. A run that ends goes to the
 * completer (complete.c); a retry, a wait or a hand-back is written here,
 * fenced by the attempt, while its lease lasts. */
#include "engine/engine_internal.h"

#include "common/backoff.h"
#include "common/log.h"
#include "common/metrics.h"
#include "engine/actions/registry.h"
#include "engine/poller.h"
#include "store/db.h"
#include "store/polls.h"

#include <stdlib.h>
#include <string.h>

/* The progress sink given to actions: record only; maintenance writes. */
static void slot_progress(void *arg, int pct, const char *step)
{
    struct slot *s = arg;

    pthread_mutex_lock(&s->e->mu);
    s->pending = true;
    s->pending_pct = pct < 0 ? 0 : pct > 100 ? 100 : pct;
    xsnprintf(s->pending_step, sizeof(s->pending_step), "%s", step ? step : "");
    pthread_mutex_unlock(&s->e->mu);
}

void slot_flush_progress(struct slot *s, struct db *db)
{
    struct fence f;
    struct error err = {0};
    char step[256];
    int pct;
    enum status st;

    pthread_mutex_lock(&s->write_mu);
    pthread_mutex_lock(&s->e->mu);
    if (!s->pending || !s->run) {
        pthread_mutex_unlock(&s->e->mu);
        pthread_mutex_unlock(&s->write_mu);
        return;
    }
    f = (struct fence){s->run->tenant, s->run->id, s->e->worker_id, s->run->attempt};
    pct = s->pending_pct;
    xsnprintf(step, sizeof(step), "%s", s->pending_step);
    s->pending = false;
    s->last_write_ms = clock_mono_ms();
    pthread_mutex_unlock(&s->e->mu);
    /* s->run stays valid: the worker frees it only after its own final flush,
     * which waits for write_mu. */
    st = store_runs_progress(db, &f, pct, step[0] ? step : NULL, &err);
    if (st != ST_OK && st != ST_LOST)
        LOG(LOG_WARN, "could not write progress run=%s: %s", f.id, err.message);
    pthread_mutex_unlock(&s->write_mu);
    if (st == ST_OK)
        doorbell_ring(s->e, false, true);
}

enum status slot_flush_log(struct slot *s, struct db *db, bool final, int max_chunks)
{
    char tenant[65], id[130];
    struct runlog *l;
    enum status st = ST_OK;

    pthread_mutex_lock(&s->write_mu);
    pthread_mutex_lock(&s->e->mu);
    l = s->run ? s->log : NULL;
    if (l) {
        xsnprintf(tenant, sizeof(tenant), "%s", s->run->tenant);
        xsnprintf(id, sizeof(id), "%s", s->run->id);
    }
    pthread_mutex_unlock(&s->e->mu);
    if (l)
        st = engine_log_write(s->e, db, l, tenant, id, final, max_chunks);
    pthread_mutex_unlock(&s->write_mu);
    return st;
}

/* After the action's state was written or read (what says which): a fence
 * that matched nothing means the run is no longer ours, and the action
 * must stop; any failure is logged. Returns st. */
static enum status slot_state_done(struct slot *s, const struct fence *f, enum status st,
                                   const char *what, const struct error *err)
{
    if (st == ST_LOST)
        atomic_store(&s->stop, STOP_LOST);
    if (st != ST_OK)
        LOG(LOG_WARN, "could not %s of run=%s attempt=%d: %s", what, f->id, f->attempt,
            err->message);
    return st;
}

/* The action's state, written at once (it must be durable before the
 * action's next remote call). Serialised with the progress writes. */
static enum status slot_save_state(void *arg, const json_t *state, bool cleanup_due)
{
    struct slot *s = arg;
    const struct fence f = {s->run->tenant, s->run->id, s->e->worker_id, s->run->attempt};
    struct db *db = NULL;
    struct error err = {0};
    enum status st;

    pthread_mutex_lock(&s->write_mu);
    st = db_pool_get(s->e->pool, &db, &err);
    if (st == ST_OK)
        st = store_runs_save_state(db, &f, state, cleanup_due, &err);
    db_pool_put(s->e->pool, db);
    pthread_mutex_unlock(&s->write_mu);
    return slot_state_done(s, &f, st, "record the state", &err);
}

static enum status slot_load_state(void *arg, json_t **state)
{
    struct slot *s = arg;
    const struct fence f = {s->run->tenant, s->run->id, s->e->worker_id, s->run->attempt};
    struct db *db = NULL;
    struct error err = {0};
    enum status st = db_pool_get(s->e->pool, &db, &err);

    if (st == ST_OK)
        st = store_runs_load_state(db, &f, state, &err);
    db_pool_put(s->e->pool, db);
    return slot_state_done(s, &f, st, "read the saved state", &err);
}

/* True when this attempt may no longer write: it was found lost, or its
 * lease ran out (another replica may be rescuing it). */
static bool slot_lost(struct slot *s)
{
    return atomic_load(&s->stop) == STOP_LOST || clock_mono_ms() > atomic_load(&s->lease_ms);
}

/* What an attempt's terminal write was, for its log line and metrics. */
struct slot_end {
    enum run_outcome outcome; /* OUTCOME_PENDING: the run did not end */
    bool retried, waiting, released;
    int64_t retry_ms; /* retried: the backoff before the next attempt is due */
    char error[64];   /* the error's code, "" for none */
};

static void slot_end_error(struct slot_end *end, const json_t *error)
{
    const char *code = engine_error_code(error);

    if (code)
        xsnprintf(end->error, sizeof(end->error), "%s", code);
}

/* One line for what became of an attempt; the run's end at warn unless it
 * succeeded. A lost attempt was logged where it was found lost. */
static void slot_log_end(const struct slot *s, const struct run_ctx *rc, const struct slot_end *end)
{
    const struct run *run = s->run;
    char extra[96];

    xsnprintf(extra, sizeof(extra), " attempt=%d duration_ms=%lld", run->attempt,
              (long long)(clock_mono_ms() - s->started_ms));
    if (end->outcome != OUTCOME_PENDING)
        engine_log_finished(run, end->outcome, end->error, extra);
    else if (end->retried)
        LOG(LOG_INFO, "run attempt failed, retrying run=%s type=%s error=%s%s", run->id, run->type,
            end->error[0] ? end->error : "none", extra);
    else if (end->waiting)
        LOG(LOG_INFO, "run waiting for its external job run=%s type=%s external_id=%s%s", run->id,
            run->type, rc->external_id, extra);
    else if (end->released)
        LOG(LOG_INFO, "run handed back at shutdown run=%s type=%s%s", run->id, run->type, extra);
}

/* A hand-back (wait, release, retry) was written: the run went where
 * *flag says, unless a cancel asked meanwhile ended it cancelled, which the
 * caller then counts and logs as any other end. */
static enum status slot_handed_back(struct slot_end *end, bool *flag, bool cancelled,
                                    enum status st)
{
    if (st == ST_OK && cancelled)
        end->outcome = OUTCOME_CANCELLED;
    else
        *flag = true;
    return st;
}

/* What an attempt's end writes. */
enum settle_kind { SETTLE_FINISH, SETTLE_RETRY, SETTLE_WAIT, SETTLE_RELEASE };
struct settle {
    enum settle_kind kind;
    struct run_result res; /* SETTLE_FINISH */
    json_t *own_error;     /* an error made here (res.error), freed with the decision */
    int64_t delay_ms;      /* SETTLE_RETRY */
};

/* Decides the terminal write for what the action returned. */
static void slot_decide(const struct slot *s, const struct run_ctx *rc, enum step step,
                        struct settle *d)
{
    const struct run *run = s->run;
    const struct run_type *rt = rc->type;
    int stop = atomic_load(&s->stop);

    *d = (struct settle){.kind = SETTLE_FINISH, .res = {.outcome = OUTCOME_SUCCEEDED}};
    /* Something outside was started: the poller takes over, whatever else
     * happened meanwhile (a cancel ends it cancelled with its hooks due;
     * at shutdown it waits like any other). */
    if (step == STEP_WAIT && rc->external_id) {
        d->kind = SETTLE_WAIT;
    } else if (stop == STOP_SHUTDOWN) {
        d->kind = SETTLE_RELEASE;
    } else if (stop == STOP_CANCEL) {
        d->res.outcome = OUTCOME_CANCELLED;
        d->res.message = "cancelled while running";
    } else if (step == STEP_DONE) {
        d->res.outcome = rc_done_outcome(rc);
        d->res.result = rc->result;
        d->res.summary_counts = rc->summary_counts;
        d->res.failure_summary = rc->failure_summary;
        d->res.message = "finished";
    } else if (clock_mono_ms() >= rc->deadline_mono_ms) {
        char msg[96];
        xsnprintf(msg, sizeof(msg), "run exceeded its timeout of %lld s", (long long)rt->timeout_s);
        d->res.outcome = OUTCOME_TIMED_OUT;
        d->res.error = d->own_error = json_pack("{s:s, s:s}", "code", "timeout", "message", msg);
        d->res.message = "timed out";
    } else if (step == STEP_RETRY && run->attempt < run->max_attempts) {
        d->kind = SETTLE_RETRY;
        d->delay_ms =
            backoff_full_jitter_ms(rt->retry_backoff_ms, rt->retry_backoff_max_ms, run->attempt);
    } else {
        d->res.outcome = OUTCOME_FAILED;
        d->res.error = rc->error;
        d->res.summary_counts = rc->summary_counts;
        d->res.failure_summary = rc->failure_summary;
        d->res.message = step == STEP_RETRY ? "failed: attempts exhausted" : "failed";
        if (step == STEP_WAIT)
            d->res.error = d->own_error =
                json_pack("{s:s, s:s}", "code", "no_external_id", "message",
                          "the action asked to wait without naming the external job to wait "
                          "for");
    }
}

/* The line that says how the attempt ended, in the run's log. */
static void slot_log_decision(const struct slot *s, struct run_ctx *rc, const struct settle *d)
{
    const struct run *run = s->run;
    double secs = (double)(clock_mono_ms() - s->started_ms) / 1000.0;
    const json_t *error = d->kind == SETTLE_FINISH ? d->res.error : rc->error;
    const char *msg = json_string_value(json_object_get(error, "message"));
    const char *sep = msg ? ": " : "";

    msg = msg ? msg : "";
    switch (d->kind) {
    case SETTLE_WAIT: {
        char *job = engine_log_external_id(rc->external_id);
        rc_log(rc, "attempt %d started external job %s in %.1f s; the poller checks it from here",
               run->attempt, job, secs);
        free(job);
        return;
    }
    case SETTLE_RELEASE:
        rc_log(rc,
               "attempt %d handed back at shutdown after %.1f s: it does not count, and the "
               "run is queued again",
               run->attempt, secs);
        return;
    case SETTLE_RETRY:
        rc_log(rc, "attempt %d failed after %.1f s%s%s; attempt %d in %.1f s", run->attempt, secs,
               sep, msg, run->attempt + 1, (double)d->delay_ms / 1000.0);
        return;
    case SETTLE_FINISH:
        break;
    }
    if (d->res.outcome == OUTCOME_SUCCEEDED || d->res.outcome == OUTCOME_PARTIALLY_SUCCEEDED)
        rc_log(rc, "attempt %d %s in %.1f s", run->attempt,
               d->res.outcome == OUTCOME_SUCCEEDED ? "succeeded" : "partially succeeded", secs);
    else if (d->res.outcome == OUTCOME_CANCELLED)
        rc_log(rc, "attempt %d cancelled while running, after %.1f s", run->attempt, secs);
    else if (d->res.outcome == OUTCOME_TIMED_OUT)
        rc_log(rc, "attempt %d timed out after %.1f s%s%s", run->attempt, secs, sep, msg);
    else
        rc_log(rc, "attempt %d failed after %.1f s%s%s%s", run->attempt, secs, sep, msg,
               run->attempt >= run->max_attempts && run->max_attempts > 1 ? " (no attempts left)"
                                                                          : "");
}

/* Makes the terminal write d, and says in *end what it was. */
static enum status slot_settle(struct slot *s, struct run_ctx *rc, const struct settle *d,
                               const struct fence *f, struct db *db, struct slot_end *end,
                               struct error *err)
{
    const struct run_type *rt = rc->type;
    const struct poll_budget budget = {rt->poll.max_checks, rt->poll.max_duration_s};
    bool cancelled = false;
    enum status st;

    *end = (struct slot_end){.outcome = OUTCOME_PENDING};
    if (slot_lost(s))
        return error_set(err, ST_LOST, "run \"%s\" attempt %d was lost by this worker", f->id,
                         f->attempt);
    switch (d->kind) {
    case SETTLE_WAIT:
        st = store_runs_wait(db, f, rc->external_id, rc->poll_state,
                             rc->next_delay_ms > 0 ? rc->next_delay_ms : rt->poll.initial_delay_ms,
                             &budget, &cancelled, err);
        return slot_handed_back(end, &end->waiting, cancelled, st);
    case SETTLE_RELEASE:
        st = store_runs_release(db, f, &cancelled, err);
        return slot_handed_back(end, &end->released, cancelled, st);
    case SETTLE_RETRY:
        end->retry_ms = d->delay_ms;
        slot_end_error(end, rc->error);
        st = store_runs_retry(db, f, d->delay_ms, rc->error, &cancelled, err);
        return slot_handed_back(end, &end->retried, cancelled, st);
    case SETTLE_FINISH:
        break;
    }
    st = store_runs_finish(db, f, &d->res, err);
    end->outcome = d->res.outcome;
    slot_end_error(end, d->res.error);
    return st;
}

/* Seconds since the run first started: to this attempt's claim by the
 * database's clock (0 on a first attempt), then this attempt on ours. */
static double slot_run_seconds(const struct slot *s)
{
    double before = s->run->claim_ran_s;

    return (before > 0 ? before : 0) + (double)(clock_mono_ms() - s->started_ms) / 1000.0;
}

/* The attempt's last lines go with its end in the completer's statement;
 * what does not fit in one chunk (a log that maintenance did not keep up
 * with) is written here first. Under write_mu, so a flush of maintenance
 * in flight commits before. */
static void slot_take_last_lines(struct slot *s, struct completion *c)
{
    struct runlog *l = s->log;
    bool more = true;

    memset(&c->log, 0, sizeof(c->log));
    if (!l)
        return;
    pthread_mutex_lock(&s->write_mu);
    while (more && runlog_take(l, LOG_CHUNK_MAX, true, &c->log)) {
        struct db *db = NULL;
        struct error err = {0};
        enum status st;
        more = runlog_pending_since(l) != 0;
        if (!more)
            break; /* the last chunk: it rides with the end */
        st = db_pool_get(s->e->pool, &db, &err);
        if (st == ST_OK)
            st = engine_log_chunk_write(s->e, db, s->run->tenant, s->run->id, s->run->attempt,
                                        &c->log);
        db_pool_put(s->e->pool, db);
        if (st != ST_OK) { /* the rest rides with the end in one chunk */
            runlog_restore(l, &c->log);
            (void)runlog_take(l, SIZE_MAX, true, &c->log);
            break;
        }
        runlog_chunk_cleanup(&c->log);
    }
    pthread_mutex_unlock(&s->write_mu);
}

/* A run that ends goes to the completer (complete.c) rather than being
 * written here: the worker is free for its next run at once. Progress the
 * action left pending is written first, so the terminal event carries it. */
static void slot_hand_over(struct slot *s, struct settle *d, struct completion *c)
{
    struct engine *e = s->e;
    const struct run *run = s->run;
    const char *code = engine_error_code(d->res.error);
    bool pending;

    pthread_mutex_lock(&e->mu);
    pending = s->pending;
    pthread_mutex_unlock(&e->mu);
    if (pending) {
        struct db *db = NULL;
        struct error err = {0};
        if (db_pool_get(e->pool, &db, &err) == ST_OK)
            slot_flush_progress(s, db);
        else
            LOG(LOG_WARN, "could not write progress run=%s: %s", run->id, err.message);
        db_pool_put(e->pool, db);
    }
    slot_take_last_lines(s, c);
    *c = (struct completion){
        .log = c->log,
        .outcome = d->res.outcome,
        .message = d->res.message,
        .result = json_incref((json_t *)d->res.result),
        .summary_counts = json_incref((json_t *)d->res.summary_counts),
        .failure_summary = json_incref((json_t *)d->res.failure_summary),
        .lease_ms = atomic_load(&s->lease_ms),
        .started_ms = s->started_ms,
        .seconds = slot_run_seconds(s),
    };
    /* own_error is a new reference already: it moves over. */
    c->error = d->own_error ? d->own_error : json_incref((json_t *)d->res.error);
    d->own_error = NULL;
    xsnprintf(c->code, sizeof(c->code), "%s", code ? code : "");
    xsnprintf(c->extra, sizeof(c->extra), " attempt=%d duration_ms=%lld", run->attempt,
              (long long)(clock_mono_ms() - s->started_ms));
}

/* One last try at the lines the settle could not write, or that an attempt
 * found lost never wrote (best effort: they are history, not state). */
static void slot_last_lines(struct slot *s)
{
    struct db *db = NULL;
    struct error err = {0};

    if (!s->log || runlog_pending_since(s->log) == 0)
        return;
    if (db_pool_get(s->e->pool, &db, &err) == ST_OK)
        (void)slot_flush_log(s, db, true, -1);
    db_pool_put(s->e->pool, db);
}

/* How many orphan windows (queue.orphan_after_s) a hand-back keeps trying
 * while its write fails. A database that cannot be reached stops the
 * heartbeats too, and then the lease ends the attempts long before this;
 * the bound is for a write that keeps failing while the heartbeats pass
 * and so keep the run leased here. Past it the worker lets the run go: the
 * heartbeats stop covering it, and the orphan rescue of any replica hands
 * it back to the queue one window later. */
#define HAND_BACK_WINDOWS 2

/* Writes a terminal state that does not end the run (a retry, a wait, a
 * hand-back), retrying while the database is unreachable: a run must not be
 * dropped because of an outage. Once the lease is over the run is someone
 * else's to rescue: nothing more is written, and no database call is even
 * started. */
static enum status slot_write(struct slot *s, struct run_ctx *rc, const struct settle *d,
                              struct slot_end *end)
{
    struct engine *e = s->e;
    const struct fence f = {s->run->tenant, s->run->id, e->worker_id, s->run->attempt};
    int64_t give_up =
        clock_mono_ms() + HAND_BACK_WINDOWS * (int64_t)e->cfg->queue.orphan_after_s * 1000;
    struct backoff pause = {.first_ms = DB_RETRY_FIRST_MS, .max_ms = DB_RETRY_MAX_MS};
    enum status st;

    *end = (struct slot_end){.outcome = OUTCOME_PENDING};
    for (;;) {
        struct error err = {0};
        struct db *db = NULL;
        if (slot_lost(s)) {
            st = ST_LOST;
            engine_log_lost(s->run, s->started_ms, "worker");
            break;
        }
        st = db_pool_get(e->pool, &db, &err);
        if (st == ST_OK) {
            slot_flush_progress(s, db);
            (void)slot_flush_log(s, db, true, -1); /* its failure never holds the settle */
            st = slot_settle(s, rc, d, &f, db, end, &err);
        }
        db_pool_put(e->pool, db);
        if (st == ST_OK || st == ST_LOST || clock_mono_ms() > give_up) {
            if (st != ST_OK)
                LOG(LOG_WARN, "could not settle run=%s attempt=%d: %s", f.id, f.attempt,
                    err.message);
            break;
        }
        LOG(LOG_WARN, "could not settle run=%s attempt=%d, retrying: %s", f.id, f.attempt,
            err.message);
        backoff_sleep(&pause);
    }
    slot_last_lines(s); /* an attempt found lost still says what it did */
    return st;
}

/* What slot_write's outcome st means beyond the row: the counts, the log
 * line, the metrics and the wake-ups. Returns the delay of a retry written
 * (for the dispatcher to claim it on time, not at its next poll), or -1. */
static int64_t slot_written(struct slot *s, struct run_ctx *rc, const struct settle *d,
                            enum status st, const struct slot_end *end)
{
    struct engine *e = s->e;
    bool waiting;

    pthread_mutex_lock(&e->mu);
    s->done = true;
    if (st == ST_OK)
        e->st.finished_total++;
    else if (st == ST_LOST)
        e->st.lost_total++;
    waiting = e->backlog;
    pthread_mutex_unlock(&e->mu);
    if (st != ST_OK)
        return -1;
    slot_log_end(s, rc, end);
    if (end->outcome != OUTCOME_PENDING)
        metrics_run_completed(e->metrics, s->run->type, run_outcome_name(end->outcome),
                              slot_run_seconds(s));
    if (end->retried)
        metrics_run_retried(e->metrics, s->run->type);
    /* Wake the other replicas for a run back in the queue, and for a slot
     * freed while runs wait for one: under a shared cap they would
     * otherwise only try on their next poll, and this replica, woken
     * first, would take every freed slot. */
    doorbell_ring(e, d->kind != SETTLE_WAIT || waiting, true);
    if (d->kind == SETTLE_WAIT)
        poller_wake(e->poller);
    return end->retried ? end->retry_ms : -1;
}

/* Ends the attempt: a run that ends is handed over in *c (true), anything
 * else is written here (false, and *retry_ms as slot_execute says). */
static bool slot_finish(struct slot *s, struct run_ctx *rc, enum step step, struct completion *c,
                        int64_t *retry_ms)
{
    struct settle d;
    struct slot_end end;
    bool handed = false;

    slot_decide(s, rc, step, &d);
    slot_log_decision(s, rc, &d);
    pthread_mutex_lock(&s->e->mu);
    s->settling = true;
    pthread_mutex_unlock(&s->e->mu);
    if (d.kind == SETTLE_FINISH && !slot_lost(s)) {
        slot_hand_over(s, &d, c);
        handed = true;
    } else {
        *retry_ms = slot_written(s, rc, &d, slot_write(s, rc, &d, &end), &end);
    }
    json_decref(d.own_error);
    return handed;
}

bool slot_execute(struct slot *s, const struct engine_view *v, struct completion *c,
                  int64_t *retry_ms)
{
    const struct run *run = s->run;
    /* The attempt runs under the run type it was claimed with, whatever a
     * reload does meanwhile. */
    const struct run_type *rt = cfg_run_type(v->cfg, run->type);
    const struct action_ops *ops = rt ? action_find(rt->action) : NULL;
    int64_t left_ms = run->has_deadline ? run->deadline_left_ms : (rt ? rt->timeout_s * 1000 : 0);
    struct run_ctx rc = {
        .run = run,
        .type = rt,
        .deadline_mono_ms = clock_mono_ms() + left_ms,
        .stop = &s->stop,
        .lease_ms = &s->lease_ms,
        .progress_fn = slot_progress,
        .save_state_fn = slot_save_state,
        .load_state_fn = slot_load_state,
        .progress_arg = s,
        .log = engine_log_new(s->e, run, rt),
    };
    enum step step;
    bool handed;

    *retry_ms = -1;
    pthread_mutex_lock(&s->e->mu);
    s->log = rc.log;
    pthread_mutex_unlock(&s->e->mu);
    rc_log(&rc, "attempt %d of %d started on %s", run->attempt, run->max_attempts, s->e->worker_id);
    if (!ops) {
        rc_error(&rc, "unknown_type", "run type \"%s\" is not configured here", run->type);
        step = STEP_FAIL;
    } else if (rc_should_stop(&rc)) {
        step = STEP_FAIL; /* cancelled or out of time before it began */
    } else {
        step = ops->start(&rc);
    }
    engine_log_mask_error(rc.log, &rc);
    handed = slot_finish(s, &rc, step, c, retry_ms);
    rc_cleanup(&rc);
    return handed;
}
