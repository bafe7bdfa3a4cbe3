/* engine/poller.c — the scheduler and checker threads that drive waiting
 * runs (engine/poller.h). Lock order: p->mu only; no database call or
 * action runs under it. */
#include "engine/poller.h"

#include "common/backoff.h"
#include "common/log.h"
#include "common/metrics.h"
#include "engine/actions/remote.h"
#include "engine/engine_internal.h"
#include "store/db.h"
#include "store/polls.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* Hooks are tried this often, this far apart, then given up (logged). */
#define HOOKS_MAX_ATTEMPTS 3
#define HOOKS_RETRY_MS 30000
/* A claim's lease beyond the time its work may take. */
#define LEASE_MARGIN_MS 5000
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
/* Claims held at once (running and queued), per checker thread: a checker
 * that ends a check takes the next claimed one without waiting for the
 * scheduler, which claims again once half the checkers' worth of room is
 * free. A claim that waited in the queue longer than QUEUE_WAIT_MAX_MS
 * (checkers held up by slow checks) is given back instead of run, so that
 * what runs always ends within its lease. */
#define QUEUE_PER_CHECKER 2
#define QUEUE_WAIT_MAX_MS (LEASE_MARGIN_MS / 2)
/* Checks yield to runs: while this process has more runs due than idle
 * workers (its dispatcher's backlog), a poller that is behind claims again
 * only once its statements (claims and writes) took at most
 * 1 / RUNS_FIRST_FACTOR of the time since its previous claim began. */
#define RUNS_FIRST_FACTOR 4

struct job {
    struct poll_claim c;
    bool hooks;           /* the terminal hooks, not a check */
    int64_t claimed_mono; /* when it was claimed (monotonic ms) */
};

/* A check whose run goes on: its next check, for the writer to schedule. */
struct again {
    char *tenant, *id, *owner; /* owner: the claim's */
    int poll_count;
    json_t *poll_state; /* owned copy */
    int64_t delay_ms;
    bool given_back; /* a claim given back unchecked (give_back) */
};

struct poller {
    struct engine *e;
    const char **types; /* run types whose action can poll */
    size_t ntypes;
    int n;            /* checker threads */
    int64_t lease_ms; /* covers a check, or both hooks, of any of those types */

    pthread_mutex_t mu;
    pthread_cond_t work_cv, sched_cv;
    struct job *queue; /* claimed, not yet started: a ring of q.cap */
    struct ring q;
    int room;      /* claims the scheduler may add: q.cap - queued - in flight */
    int claim_min; /* the least room worth a claim: 1, or n / 2 while behind */
    bool stop, wake, started, sched_started;
    int nstarted;     /* checker threads running */
    _Atomic int halt; /* enum stop_reason for the checks in flight */
    pthread_t sched, *checkers;
    struct poller_stats st; /* running, concurrency, in_flight (under mu) */
    _Atomic int64_t checks, check_failures, finished, timed_out, hooks, hook_failures;
    _Atomic int64_t db_us; /* time spent in claims and writes (wall clock) */
    _Atomic int64_t yielded_ms, given_back;
    int64_t win_us, win_db; /* the previous claim's start, and db_us then */
    uint64_t claims;        /* claim statements made: each names its owner (scheduler) */
    /* the writer: next checks to schedule, many per statement */
    pthread_cond_t again_cv;
    struct handoff againq; /* of struct again */
    bool writer_stop, writer_started;
    pthread_t writer;
};

int64_t poller_backoff_ms(const struct poll_policy *pp, int n)
{
    int64_t d = backoff_delay_ms(pp->initial_delay_ms, pp->multiplier, pp->max_delay_ms, n);

    return jitter_ms(d, pp->jitter_pct / 100.0);
}

/* ---- results ---------------------------------------------------------- */

/* The action's hooks for a run that ended: the remote cancel when opsrun
 * ended it while the remote job may still run (cancel), then cleanup; then
 * the record that they ran. They get a check's time limit of their own
 * (the claim's lease covers a check and both hooks), not what a slow
 * check left of its. */
static void run_hooks(struct poller *p, const struct action_ops *ops, struct run_ctx *rc,
                      const char *owner, bool cancel)
{
    struct engine *e = p->e;
    struct db *db = NULL;
    struct error err = {0};
    bool ok = true;
    int calls = 0;

    rc->deadline_mono_ms = clock_mono_ms() + (int64_t)rc->type->poll.check_timeout_s * 1000;
    if (cancel && ops->cancel && rc->external_id) {
        calls++;
        if (!ops->cancel(rc)) {
            ok = false;
            LOG(LOG_WARN, "remote cancel failed run=%s external_id=%s", rc->run->id,
                rc->external_id);
        }
    }
    if (ops->cleanup) {
        calls++;
        if (!ops->cleanup(rc)) {
            ok = false;
            LOG(LOG_WARN, "cleanup failed run=%s external_id=%s", rc->run->id,
                rc->external_id ? rc->external_id : "");
        }
    }
    atomic_fetch_add(&p->hooks, calls);
    atomic_fetch_add(&p->hook_failures, !ok);
    if (calls > 0)
        metrics_poll_hooks(e->metrics, rc->run->type, !ok);
    if (db_pool_get(e->pool, &db, &err) != ST_OK ||
        store_hooks_done(db, rc->run->tenant, rc->run->id, owner, ok, rc->poll_state,
                         HOOKS_MAX_ATTEMPTS, HOOKS_RETRY_MS, &err) != ST_OK)
        LOG(LOG_WARN, "could not record the hooks of run=%s: %s", rc->run->id, err.message);
    db_pool_put(e->pool, db);
}

/* Seconds from the run's first start to the claim of the check that ended
 * it, by the database's clock: the wait began at its updated_at (nothing
 * else writes a waiting run), and the claim measured the wait since. */
static double waited_run_seconds(const struct run_ctx *rc)
{
    double before = run_seconds_between(rc->run, "started_at", "updated_at");

    return (before > 0 ? before : 0) + (double)rc->waited_ms / 1000.0;
}

/* Whether res is the end of a spent poll budget (time_out). */
static bool budget_spent(const struct run_result *res)
{
    const json_t *code = json_object_get(res->error, "code");

    return res->outcome == OUTCOME_TIMED_OUT && json_is_string(code) &&
           strcmp(json_string_value(code), "poll_budget") == 0;
}

/* Writes the end of a run after `made` checks, then runs its hooks. */
static void finish(struct poller *p, const struct action_ops *ops, struct run_ctx *rc,
                   const struct poll_fence *f, int made, const struct run_result *res)
{
    struct engine *e = p->e;
    struct db *db = NULL;
    struct error err = {0};
    char extra[200];
    enum status st = db_pool_get(e->pool, &db, &err);

    if (st == ST_OK)
        st = store_polls_finish(db, f, made, res, rc->poll_state, p->lease_ms, &err);
    db_pool_put(e->pool, db);
    if (st != ST_OK) {
        /* The lease runs out and the check is made again: at least once. */
        if (st != ST_LOST)
            LOG(LOG_WARN, "could not end run=%s after a check: %s", f->id, err.message);
        return;
    }
    xsnprintf(extra, sizeof(extra), " checks=%d external_id=%s", made,
              rc->external_id ? rc->external_id : "");
    engine_log_finished(rc->run, res->outcome, engine_error_code(res->error), extra);
    atomic_fetch_add(&p->finished, 1);
    if (res->outcome == OUTCOME_TIMED_OUT)
        atomic_fetch_add(&p->timed_out, 1);
    metrics_run_completed(e->metrics, rc->run->type, run_outcome_name(res->outcome),
                          waited_run_seconds(rc));
    if (budget_spent(res))
        metrics_poll_budget_exhausted(e->metrics, rc->run->type);
    doorbell_ring(e, false, true);
    run_hooks(p, ops, rc, f->owner, res->outcome == OUTCOME_TIMED_OUT);
}

/* The run goes on: its next check, for the checker to hand to the writer
 * (hand_over), so the checker is free for the next claim at once. A write
 * that fails, or finds the fence spent, is only logged: the claim's lease
 * runs out and the check is made again (at least once). */
static void again(struct again *next, const struct run_ctx *rc, const struct poll_fence *f,
                  int64_t delay_ms)
{
    *next = (struct again){xstrdup(f->tenant),
                           xstrdup(f->id),
                           xstrdup(f->owner),
                           f->poll_count,
                           rc->poll_state ? json_deep_copy(rc->poll_state) : NULL,
                           delay_ms,
                           false};
}

/* Queues a next check for the writer; under p->mu. */
static void hand_over(struct poller *p, struct again *a)
{
    size_t n = handoff_add(&p->againq, a);

    if (n == 1 || n == AGAIN_GATHER)
        pthread_cond_signal(&p->again_cv);
}

static void again_free(struct again *a)
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
            again_free(&batch[i]);
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    free(batch);
    free(w);
    return NULL;
}

/* The budget the run is held to: the one stored on it when it began
 * waiting, which the run object reports ("poll"); its type's configuration
 * for a run that began waiting before that was stored (migration 010). */
static struct poll_budget budget_of(const struct run_ctx *rc)
{
    struct poll_budget b = {rc->type->poll.max_checks, rc->type->poll.max_duration_s};

    run_poll_budget(rc->run, &b);
    return b;
}

/* Whether another check is allowed after `made` checks: NULL when it is,
 * else the budget that ran out. */
static const char *out_of_budget(const struct poll_budget *b, const struct run_ctx *rc, int made)
{
    if (made >= b->max_checks)
        return "poll.max_checks";
    if (rc->waited_ms >= b->max_duration_s * 1000)
        return "poll.max_duration_s";
    return NULL;
}

static void time_out(struct poller *p, const struct action_ops *ops, struct run_ctx *rc,
                     const struct poll_fence *f, const char *which, int made)
{
    const json_t *last = json_object_get(rc->poll_state, "last_error");
    const struct poll_budget b = budget_of(rc);
    char msg[640];
    struct run_result res = {.outcome = OUTCOME_TIMED_OUT, .message = "timed out"};

    if (strcmp(which, "poll.max_checks") == 0)
        xsnprintf(msg, sizeof(msg), "gave up on external job %s after %d checks (%s %d)",
                  rc->external_id ? rc->external_id : "", made, which, b.max_checks);
    else
        xsnprintf(msg, sizeof(msg), "gave up on external job %s after waiting %lld s (%s %lld)",
                  rc->external_id ? rc->external_id : "", (long long)(rc->waited_ms / 1000), which,
                  (long long)b.max_duration_s);
    if (json_is_string(last))
        xsnprintf(msg + strlen(msg), sizeof(msg) - strlen(msg), "; last error: %s",
                  json_string_value(last));
    res.error = json_pack("{s:s, s:s}", "code", "poll_budget", "message", msg);
    finish(p, ops, rc, f, made, &res);
    json_decref((json_t *)res.error);
}

/* A failed check: counted, logged with what failed, and kept in the poll
 * state as the last error (a timed-out run's error quotes it). An action
 * must say why a check failed (rc->error); one that does not has a bug, and
 * the log names the action and the run type so it can be found. */
static void check_failed(struct poller *p, const struct run_ctx *rc, const struct poll_fence *f)
{
    const json_t *msg = json_object_get(rc->error, "message");
    char why[256];

    atomic_fetch_add(&p->check_failures, 1);
    if (json_is_string(msg)) {
        LOG(LOG_WARN, "check failed run=%s check=%d: %s", f->id, f->poll_count,
            json_string_value(msg));
        json_object_set(rc->poll_state, "last_error", (json_t *)msg);
        return;
    }
    xsnprintf(why, sizeof(why), "action %s reported a transient failure without saying what failed",
              rc->type->action);
    LOG(LOG_WARN, "check failed run=%s check=%d type=%s action=%s: %s (a bug in the action)", f->id,
        f->poll_count, rc->run->type, rc->type->action, why);
    json_object_set_new(rc->poll_state, "last_error", json_string(why));
}

/* What the check said, written; or in *next the next check, when the run
 * goes on. */
static void settle_check(struct poller *p, const struct action_ops *ops, struct run_ctx *rc,
                         const struct poll_fence *f, enum step step, struct again *next)
{
    const struct run_type *rt = rc->type;
    const struct poll_budget b = budget_of(rc);
    struct run_result res = {0};
    const char *budget;

    if (step == STEP_DONE || step == STEP_FAIL) {
        res.outcome = step == STEP_DONE                ? rc_done_outcome(rc)
                      : rc->outcome != OUTCOME_PENDING ? rc->outcome
                                                       : OUTCOME_FAILED;
        res.result = rc->result;
        res.error = step == STEP_FAIL ? rc->error : NULL;
        res.summary_counts = rc->summary_counts;
        res.failure_summary = rc->failure_summary;
        res.message = step == STEP_DONE ? "finished" : "failed";
        if (res.outcome == OUTCOME_CANCELLED)
            res.message = "cancelled by the remote system";
        finish(p, ops, rc, f, f->poll_count, &res);
        return;
    }
    if (step == STEP_RETRY)
        check_failed(p, rc, f);
    budget = out_of_budget(&b, rc, f->poll_count);
    if (budget) {
        time_out(p, ops, rc, f, budget, f->poll_count);
        return;
    }
    again(next, rc, f,
          rc->next_delay_ms > 0 ? rc->next_delay_ms : poller_backoff_ms(&rt->poll, f->poll_count));
}

/* The context of a claimed check or hooks run: it takes the claim's
 * external id and poll state, stops at the check time limit, and calls the
 * remote over the checker's kept connections. */
static struct run_ctx claim_ctx(struct poller *p, struct poll_claim *c, const struct run_type *rt,
                                struct remote_conn *conn)
{
    struct run_ctx rc = {
        .run = c->run,
        .type = rt,
        .deadline_mono_ms = clock_mono_ms() + (int64_t)rt->poll.check_timeout_s * 1000,
        .stop = &p->halt,
        .external_id = c->external_id,
        .poll_state = c->poll_state,
        .poll_count = c->poll_count,
        .waited_ms = c->waited_ms,
        .conn = conn,
    };

    c->external_id = NULL;
    c->poll_state = NULL;
    return rc;
}

/* What a check found, as opsrun_poll_checks_total counts it. */
static const char *check_result(struct poller *p, enum step step)
{
    if (step == STEP_DONE || step == STEP_FAIL)
        return METRICS_CHECK_ENDED;
    if (atomic_load(&p->halt) != STOP_NONE)
        return METRICS_CHECK_ABORTED;
    return step == STEP_RETRY ? METRICS_CHECK_ERROR : METRICS_CHECK_RUNNING;
}

/* One check; *next (id NULL when none) is its next check if the run goes on. */
static void run_check(struct poller *p, struct poll_claim *c, struct remote_conn *conn,
                      struct again *next)
{
    struct engine *e = p->e;
    const struct run_type *rt = cfg_run_type(e->cfg, c->run->type);
    const struct action_ops *ops = action_find(rt->action);
    const struct poll_fence f = {c->run->tenant, c->run->id, c->owner, c->poll_count};
    struct run_ctx rc = claim_ctx(p, c, rt, conn);
    const struct poll_budget b = budget_of(&rc);
    const char *budget = out_of_budget(&b, &rc, c->poll_count - 1);
    enum step step;

    if (budget) {
        time_out(p, ops, &rc, &f, budget, c->poll_count - 1);
    } else {
        atomic_fetch_add(&p->checks, 1);
        step = ops->poll(&rc);
        metrics_poll_check(e->metrics, c->run->type, check_result(p, step));
        if (atomic_load(&p->halt) != STOP_NONE && step != STEP_DONE && step != STEP_FAIL)
            again(next, &rc, &f, 0); /* shutting down: another replica checks it now */
        else
            settle_check(p, ops, &rc, &f, step, next);
    }
    rc_cleanup(&rc);
}

/* Hooks claimed from the schedule: a waiting run cancelled through the API
 * (the remote job may still run), or hooks whose owner died or failed
 * before. A remote cancel that may repeat one already made is harmless:
 * the job is gone or cancelled either way. */
static void run_claimed_hooks(struct poller *p, struct poll_claim *c, struct remote_conn *conn)
{
    const struct run_type *rt = cfg_run_type(p->e->cfg, c->run->type);
    const struct action_ops *ops = action_find(rt->action);
    struct run_ctx rc = claim_ctx(p, c, rt, conn);

    LOG(LOG_INFO, "running hooks run=%s outcome=%s try=%d", c->run->id,
        run_outcome_name(c->run->outcome), c->hooks_attempts);
    run_hooks(p, ops, &rc, c->owner,
              c->run->outcome == OUTCOME_CANCELLED || c->run->outcome == OUTCOME_TIMED_OUT);
    rc_cleanup(&rc);
}

/* ---- threads ---------------------------------------------------------- */

/* claimed_ms: when the claim's statement began, so that the time a claim
 * may wait in the queue counts all of its lease that has gone. */
static void enqueue(struct poller *p, struct poll_claim *c, size_t n, bool hooks,
                    int64_t claimed_ms)
{
    for (size_t i = 0; i < n; i++) {
        struct job *j = &p->queue[ring_push(&p->q)];
        j->c = c[i];
        j->hooks = hooks;
        j->claimed_mono = claimed_ms;
    }
}

/* Gives back n hooks claims that ran no hook, in one statement. */
static void give_back_hooks(struct poller *p, const struct run_ref *refs, const char *const *owners,
                            size_t n)
{
    struct db *db = NULL;
    struct error err = {0};
    int given = 0;

    if (n == 0)
        return;
    if (db_pool_get(p->e->pool, &db, &err) != ST_OK ||
        store_hooks_give_back(db, refs, owners, n, &given, &err) != ST_OK)
        LOG(LOG_WARN, "could not give back claimed hooks runs=%zu: %s", n, err.message);
    db_pool_put(p->e->pool, db);
}

/* A claim that waited too long in the queue: a check is due again at once
 * with its count taken back (it made none), through the writer (*next);
 * hooks likewise, with their try taken back, in a statement of their own. */
static void give_back(struct poller *p, struct job *j, struct again *next)
{
    LOG(LOG_DEBUG, "giving back a claim run=%s hooks=%d waited_ms=%lld", j->c.run->id, j->hooks,
        (long long)(clock_mono_ms() - j->claimed_mono));
    atomic_fetch_add(&p->given_back, 1);
    if (j->hooks) {
        const struct run_ref ref = {j->c.run->tenant, j->c.run->id, j->c.hooks_attempts};
        const char *owner = j->c.owner;
        give_back_hooks(p, &ref, &owner, 1);
        return;
    }
    *next = (struct again){xstrdup(j->c.run->tenant),
                           xstrdup(j->c.run->id),
                           xstrdup(j->c.owner),
                           j->c.poll_count,
                           j->c.poll_state,
                           0,
                           true};
    j->c.poll_state = NULL;
}

/* A checker keeps its connections to the remotes open between checks
 * (remote_conn): a check of a fast endpoint then costs a request, not a
 * TCP connection set up and torn down on both sides. It takes the next
 * claimed check as soon as it is done with one; it wakes the scheduler only
 * when a claim's worth of room is free, and waits only when nothing is
 * queued. */
static void *checker_main(void *arg)
{
    struct poller *p = arg;
    struct remote_conn *conn = remote_conn_new();

    pthread_mutex_lock(&p->mu);
    for (;;) {
        struct job j;
        struct again next = {0};
        while (!p->stop && p->q.len == 0)
            pthread_cond_wait(&p->work_cv, &p->mu);
        if (p->stop)
            break;
        j = p->queue[ring_pop(&p->q)];
        p->st.in_flight++;
        pthread_mutex_unlock(&p->mu);
        if (clock_mono_ms() - j.claimed_mono > QUEUE_WAIT_MAX_MS)
            give_back(p, &j, &next);
        else if (j.hooks)
            run_claimed_hooks(p, &j.c, conn);
        else
            run_check(p, &j.c, conn, &next);
        run_free(j.c.run);
        free(j.c.external_id);
        json_decref(j.c.poll_state);
        pthread_mutex_lock(&p->mu);
        if (next.id)
            hand_over(p, &next);
        p->st.in_flight--;
        if (++p->room == p->claim_min)
            pthread_cond_signal(&p->sched_cv);
    }
    pthread_mutex_unlock(&p->mu);
    remote_conn_free(conn);
    return NULL;
}

/* Claims up to n checks (then hooks) into the queue, in one statement each,
 * begun at t0 (monotonic microseconds); returns how many, and in *due_ms
 * the wait before the next one (-1: none scheduled). */
static size_t claim(struct poller *p, int n, int64_t t0, int64_t *due_ms)
{
    struct engine *e = p->e;
    struct poll_claim *checks = NULL, *hooks = NULL;
    size_t nc = 0, nh = 0;
    struct db *db = NULL;
    struct error err = {0};
    enum status st = db_pool_get(e->pool, &db, &err);
    char owner[POLL_OWNER_MAX];

    /* never the same owner twice (store/polls.h) */
    xsnprintf(owner, sizeof(owner), "%s/%" PRIu64, e->worker_id, ++p->claims);
    *due_ms = -1;
    if (st == ST_OK)
        st = store_polls_claim(db, owner, n, p->lease_ms, p->types, p->ntypes, &checks, &nc, &err);
    if (st == ST_OK && (int)nc < n)
        st = store_hooks_claim(db, owner, n - (int)nc, p->lease_ms, p->types, p->ntypes, &hooks,
                               &nh, &err);
    if (st == ST_OK && (int)(nc + nh) < n)
        st = store_polls_next_due(db, p->types, p->ntypes, due_ms, &err);
    db_pool_put(e->pool, db);
    atomic_fetch_add(&p->db_us, clock_mono_us() - t0);
    if (st != ST_OK)
        LOG(LOG_WARN, "could not claim checks: %s", err.message);
    pthread_mutex_lock(&p->mu);
    enqueue(p, checks, nc, false, t0 / 1000);
    enqueue(p, hooks, nh, true, t0 / 1000);
    p->room += n - (int)(nc + nh);
    pthread_mutex_unlock(&p->mu);
    /* one waiting checker per claim, woken after the unlock so that it
     * does not wake only to wait for the lock */
    for (size_t i = 0; i < nc + nh; i++)
        pthread_cond_signal(&p->work_cv);
    free(checks); /* the claims' contents moved to the queue */
    free(hooks);
    return nc + nh;
}

/* Whether this process's workers are at their capacity: its dispatcher's
 * last claim found more runs due than it had idle workers. */
static bool runs_backlog(struct poller *p)
{
    struct engine *e = p->e;
    bool backlog;

    pthread_mutex_lock(&e->mu);
    backlog = e->backlog;
    pthread_mutex_unlock(&e->mu);
    return backlog;
}

/* When a poller that is behind (its last claim was full) may claim again:
 * at once, or, while runs wait for this process's workers, once its
 * statements since the previous claim began took at most
 * 1 / RUNS_FIRST_FACTOR of the time since then, and never later than one
 * poller.interval_ms from now (the writer's statements overlap the
 * claims', so their sum can outgrow the wall clock). A poller at capacity
 * takes the CPU and the database that runs need; with this, demo runs
 * beside 5,000 checks due every 50 ms keep most of their throughput
 * (bench/README.md), while the checks fall behind, visibly (/healthz
 * polls). Runs that do not fill the workers do not hold it back. t0 and
 * db0: this claim's start, and db_us then; every claim, full or not,
 * starts the next window. */
static int64_t next_claim_ms(struct poller *p, int64_t t0, int64_t db0, bool full)
{
    int64_t now = clock_mono_ms(), until, cap = now + p->e->cfg->poller.interval_ms;
    int64_t win_us = p->win_us, win_db = p->win_db;

    p->win_us = t0, p->win_db = db0;
    if (!full || win_us == 0 || !runs_backlog(p))
        return now;
    until = (win_us + (atomic_load(&p->db_us) - win_db) * RUNS_FIRST_FACTOR) / 1000;
    if (until > cap)
        until = cap;
    if (until <= now)
        return now;
    atomic_fetch_add(&p->yielded_ms, until - now);
    return until;
}

static void *sched_main(void *arg)
{
    struct poller *p = arg;
    int64_t next_ms = 0, yield_ms = 0; /* yield_ms: a wake does not end a yield */

    for (;;) {
        int n;
        int64_t due = -1, interval = p->e->cfg->poller.interval_ms, t0, db0;
        size_t got;

        pthread_mutex_lock(&p->mu);
        for (;;) {
            /* room for a claim, no yield left, and due (or woken) */
            int64_t now = clock_mono_ms();
            int64_t until = p->wake || next_ms < yield_ms ? yield_ms : next_ms;
            struct timespec ts;
            if (p->stop || (p->room >= p->claim_min && now >= until))
                break;
            abstime_after_ms(&ts, p->room < p->claim_min ? 1000 : until - now);
            pthread_cond_timedwait(&p->sched_cv, &p->mu, &ts);
        }
        if (p->stop) {
            pthread_mutex_unlock(&p->mu);
            break;
        }
        p->wake = false;
        n = p->room;
        p->room = 0;
        pthread_mutex_unlock(&p->mu);

        t0 = clock_mono_us();
        db0 = atomic_load(&p->db_us);
        got = claim(p, n, t0, &due);
        next_ms = next_claim_ms(p, t0, db0, (int)got == n);
        yield_ms = next_ms;
        pthread_mutex_lock(&p->mu);
        if ((int)got == n) {
            /* more may be due: claim again once half the checkers' worth
             * of room is free, in one statement */
            p->claim_min = p->n / 2 > 1 ? p->n / 2 : 1;
        } else {
            next_ms =
                clock_mono_ms() + (due >= 0 && due < interval ? due : jitter_ms(interval, 0.2));
            p->claim_min = 1;
        }
        pthread_mutex_unlock(&p->mu);
    }
    return NULL;
}

/* ---- lifecycle -------------------------------------------------------- */

struct poller *poller_new(struct engine *e)
{
    const struct config *cfg = e->cfg;
    struct poller *p = xcalloc(1, sizeof(*p));
    int64_t longest = 0;

    p->e = e;
    p->n = cfg->poller.concurrency;
    p->types = xcalloc(cfg->nrun_types ? cfg->nrun_types : 1, sizeof(*p->types));
    for (size_t i = 0; i < cfg->nrun_types; i++) {
        const struct run_type *rt = &cfg->run_types[i];
        const struct action_ops *ops = action_find(rt->action);
        if (!ops || !ops->poll)
            continue;
        p->types[p->ntypes++] = rt->name;
        if (rt->poll.check_timeout_s > longest)
            longest = rt->poll.check_timeout_s;
    }
    /* A check, or a cancel and a cleanup, each bounded by the check time. */
    p->lease_ms = 2 * longest * 1000 + LEASE_MARGIN_MS;
    p->q.cap = (size_t)p->n * QUEUE_PER_CHECKER;
    p->queue = xcalloc(p->q.cap, sizeof(*p->queue));
    handoff_init(&p->againq, sizeof(struct again));
    p->checkers = xcalloc((size_t)p->n, sizeof(*p->checkers));
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work_cv, NULL);
    cond_init_monotonic(&p->again_cv);
    cond_init_monotonic(&p->sched_cv);
    p->st.concurrency = p->n;
    return p;
}

enum status poller_start(struct poller *p, struct error *err)
{
    if (p->ntypes == 0)
        return ST_OK; /* nothing here can wait: no threads */
    p->room = (int)p->q.cap;
    p->claim_min = 1;
    p->wake = true;
    p->st.running = true;
    p->started = true; /* from here poller_stop undoes a partial start */
    if (thread_start(p->e, &p->writer, writer_main, p, "poll writer", err) != ST_OK)
        goto fail;
    p->writer_started = true;
    for (int i = 0; i < p->n; i++) {
        if (thread_start(p->e, &p->checkers[i], checker_main, p, "poll checker", err) != ST_OK)
            goto fail;
        p->nstarted = i + 1;
    }
    if (thread_start(p->e, &p->sched, sched_main, p, "poll scheduler", err) != ST_OK)
        goto fail;
    p->sched_started = true;
    LOG(LOG_INFO, "poller started concurrency=%d types=%zu lease_ms=%lld", p->n, p->ntypes,
        (long long)p->lease_ms);
    return ST_OK;
fail:
    poller_stop(p);
    return ST_INTERNAL;
}

void poller_wake(struct poller *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->wake = true;
    pthread_cond_signal(&p->sched_cv);
    pthread_mutex_unlock(&p->mu);
}

/* Claimed checks and hooks no checker started: given back, due again now,
 * for anyone, their counts and tries taken back (they made no check and ran
 * no hook), in one statement each. */
static void release_queued(struct poller *p)
{
    struct engine *e = p->e;
    struct db *db = NULL;
    struct error err = {0};
    struct poll_again *w = xcalloc(p->q.len ? p->q.len : 1, sizeof(*w));
    struct run_ref *h = xcalloc(p->q.len ? p->q.len : 1, sizeof(*h));
    const char **ho = xcalloc(p->q.len ? p->q.len : 1, sizeof(*ho));
    size_t nw = 0, nh = 0;

    for (size_t i = 0; i < p->q.len; i++) {
        const struct job *j = &p->queue[ring_at(&p->q, i)];
        if (j->hooks) {
            ho[nh] = j->c.owner;
            h[nh++] = (struct run_ref){j->c.run->tenant, j->c.run->id, j->c.hooks_attempts};
        } else {
            w[nw++] = (struct poll_again){j->c.run->tenant,
                                          j->c.run->id,
                                          j->c.owner,
                                          j->c.poll_count,
                                          j->c.poll_state,
                                          0,
                                          false,
                                          true};
        }
    }
    give_back_hooks(p, h, ho, nh);
    free(h);
    free(ho);
    if (nw > 0 && (db_pool_get(e->pool, &db, &err) != ST_OK ||
                   store_polls_again_batch(db, w, nw, &err) != ST_OK))
        LOG(LOG_WARN, "could not give back claimed checks runs=%zu: %s", nw, err.message);
    db_pool_put(e->pool, db);
    free(w);
    while (p->q.len > 0) {
        struct job *j = &p->queue[ring_pop(&p->q)];
        run_free(j->c.run);
        free(j->c.external_id);
        json_decref(j->c.poll_state);
    }
}

void poller_stop(struct poller *p)
{
    if (!p || !p->started)
        return;
    atomic_store(&p->halt, STOP_SHUTDOWN);
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->work_cv);
    pthread_cond_broadcast(&p->sched_cv);
    pthread_mutex_unlock(&p->mu);
    if (p->sched_started)
        pthread_join(p->sched, NULL);
    for (int i = 0; i < p->nstarted; i++)
        pthread_join(p->checkers[i], NULL);
    /* after the checkers: it writes the next checks they handed over */
    pthread_mutex_lock(&p->mu);
    p->writer_stop = true;
    pthread_cond_signal(&p->again_cv);
    pthread_mutex_unlock(&p->mu);
    if (p->writer_started)
        pthread_join(p->writer, NULL);
    p->writer_started = false;
    release_queued(p);
    p->sched_started = false;
    p->nstarted = 0;
    p->started = false;
}

void poller_free(struct poller *p)
{
    struct again a;

    if (!p)
        return;
    pthread_cond_destroy(&p->work_cv);
    pthread_cond_destroy(&p->again_cv);
    pthread_cond_destroy(&p->sched_cv);
    while (handoff_take(&p->againq, &a, 1) == 1) /* none but after a failed start */
        again_free(&a);
    handoff_cleanup(&p->againq);
    pthread_mutex_destroy(&p->mu);
    free(p->queue);
    free(p->checkers);
    free(p->types);
    free(p);
}

void poller_stats(struct poller *p, struct poller_stats *out)
{
    if (!p) {
        memset(out, 0, sizeof(*out));
        return;
    }
    pthread_mutex_lock(&p->mu);
    *out = p->st;
    pthread_mutex_unlock(&p->mu);
    out->checks_total = atomic_load(&p->checks);
    out->check_failures_total = atomic_load(&p->check_failures);
    out->finished_total = atomic_load(&p->finished);
    out->timed_out_total = atomic_load(&p->timed_out);
    out->hooks_total = atomic_load(&p->hooks);
    out->hook_failures_total = atomic_load(&p->hook_failures);
    out->yielded_ms_total = atomic_load(&p->yielded_ms);
    out->given_back_total = atomic_load(&p->given_back);
}
