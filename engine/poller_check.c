/* engine/poller_check.c — one check of a waiting run, or one run of its
 * terminal hooks, on a checker thread (engine/poller_internal.h), and what
 * the result writes: the run's end (then its hooks), a timed-out budget,
 * or the next check for the writer. No lock is held here. */
#include "engine/poller_internal.h"

#include "common/backoff.h"
#include "common/log.h"
#include "common/metrics.h"
#include "engine/actions/registry.h"
#include "store/db.h"

#include <stdlib.h>
#include <string.h>

int64_t poller_backoff_ms(const struct poll_policy *pp, int n)
{
    int64_t d = backoff_delay_ms(pp->initial_delay_ms, pp->multiplier, pp->max_delay_ms, n);

    return jitter_ms(d, pp->jitter_pct / 100.0);
}

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
        char *job = engine_log_external_id(rc->external_id);
        rc_log(rc, "remote cancel of external job %s: %s", job, ok ? "sent" : "failed");
        free(job);
    }
    if (ops->cleanup) {
        bool cleaned;
        calls++;
        cleaned = ops->cleanup(rc);
        if (!cleaned) {
            ok = false;
            LOG(LOG_WARN, "cleanup failed run=%s external_id=%s", rc->run->id,
                rc->external_id ? rc->external_id : "");
        }
        rc_log(rc, "cleanup: %s", cleaned ? "done" : "failed, tried again later");
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

    /* The check's lines before the end: a follower of the log reads its
     * last lines when it sees the run's end. */
    if (st == ST_OK && rc->log)
        (void)engine_log_write(e, db, rc->log, f->tenant, f->id, true, -1);
    if (st == ST_OK)
        st = store_polls_finish(db, f, made, res, rc->poll_state, atomic_load(&p->lease_ms), &err);
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
    char msg[640], *job = engine_log_external_id(rc->external_id);
    struct run_result res = {.outcome = OUTCOME_TIMED_OUT, .message = "timed out"};

    if (strcmp(which, "poll.max_checks") == 0)
        xsnprintf(msg, sizeof(msg), "gave up on external job %s after %d checks (%s %d)", job, made,
                  which, b.max_checks);
    else
        xsnprintf(msg, sizeof(msg), "gave up on external job %s after waiting %lld s (%s %lld)",
                  job, (long long)(rc->waited_ms / 1000), which, (long long)b.max_duration_s);
    free(job);
    if (json_is_string(last))
        xsnprintf(msg + strlen(msg), sizeof(msg) - strlen(msg), "; last error: %s",
                  json_string_value(last));
    rc_log(rc, "timed out: %s", msg);
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
    int64_t delay_ms;

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
        rc_log(rc, "check %d: the external job ended: %s", f->poll_count,
               run_outcome_name(res.outcome));
        finish(p, ops, rc, f, f->poll_count, &res);
        return;
    }
    if (step == STEP_RETRY) {
        check_failed(p, rc, f);
        rc_log(rc, "check %d failed: %s", f->poll_count,
               json_string_value(json_object_get(rc->poll_state, "last_error")));
    }
    budget = out_of_budget(&b, rc, f->poll_count);
    if (budget) {
        time_out(p, ops, rc, f, budget, f->poll_count);
        return;
    }
    delay_ms =
        rc->next_delay_ms > 0 ? rc->next_delay_ms : poller_backoff_ms(&rt->poll, f->poll_count);
    if (step != STEP_RETRY)
        rc_log(rc, "check %d: the external job is still running", f->poll_count);
    rc_log(rc, "next check in %.1f s", (double)delay_ms / 1000.0);
    again(next, rc, f, delay_ms);
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

/* What a check left in its log (a run that ended wrote it before its end). */
static void check_log_write(struct poller *p, struct run_ctx *rc, const struct poll_fence *f)
{
    struct db *db = NULL;
    struct error err = {0};

    if (!runlog_pending_since(rc->log))
        return;
    if (db_pool_get(p->e->pool, &db, &err) == ST_OK)
        (void)engine_log_write(p->e, db, rc->log, f->tenant, f->id, true, -1);
    else
        LOG(LOG_WARN, "could not write the log lines of a check run=%s: %s", f->id, err.message);
    db_pool_put(p->e->pool, db);
}

static void check_run(struct poller *p, struct poll_claim *c, const struct run_type *rt,
                      struct remote_conn *conn, struct again *next);

/* A reload removed the run type of a claimed check, or made it an action
 * that cannot poll: the check goes back unmade, due again later, and the
 * run waits for its type to come back (or to be cancelled). */
#define TYPE_GONE_DELAY_MS 60000
static const struct run_type *check_type(const struct engine_view *v, const struct poll_claim *c,
                                         struct again *next)
{
    const struct run_type *rt = cfg_run_type(v->cfg, c->run->type);
    const struct action_ops *ops = rt ? action_find(rt->action) : NULL;

    if (ops && ops->poll)
        return rt;
    LOG(LOG_WARN, "run type %s of waiting run=%s is not configured to poll; checking again in %d s",
        c->run->type, c->run->id, TYPE_GONE_DELAY_MS / 1000);
    if (next)
        *next = (struct again){xstrdup(c->run->tenant),
                               xstrdup(c->run->id),
                               xstrdup(c->owner),
                               c->poll_count,
                               c->poll_state ? json_deep_copy(c->poll_state) : NULL,
                               TYPE_GONE_DELAY_MS,
                               true};
    return NULL;
}

/* One check, under the configuration of its start; *next (id NULL when
 * none) is its next check if the run goes on. */
void poller_check_run(struct poller *p, struct poll_claim *c, const struct engine_view *v,
                      struct remote_conn *conn, struct again *next)
{
    const struct run_type *rt = check_type(v, c, next);

    if (rt)
        check_run(p, c, rt, conn, next);
}

static void check_run(struct poller *p, struct poll_claim *c, const struct run_type *rt,
                      struct remote_conn *conn, struct again *next)
{
    struct engine *e = p->e;
    const struct action_ops *ops = action_find(rt->action);
    const struct poll_fence f = {c->run->tenant, c->run->id, c->owner, c->poll_count};
    struct run_ctx rc = claim_ctx(p, c, rt, conn);
    const struct poll_budget b = budget_of(&rc);
    const char *budget = out_of_budget(&b, &rc, c->poll_count - 1);
    enum step step;

    rc.log = engine_log_new(e, c->run, rt);
    if (budget) {
        time_out(p, ops, &rc, &f, budget, c->poll_count - 1);
    } else {
        atomic_fetch_add(&p->checks, 1);
        step = ops->poll(&rc);
        engine_log_mask_error(rc.log, &rc);
        metrics_poll_check(e->metrics, c->run->type, check_result(p, step));
        if (atomic_load(&p->halt) != STOP_NONE && step != STEP_DONE && step != STEP_FAIL)
            again(next, &rc, &f, 0); /* shutting down: another replica checks it now */
        else
            settle_check(p, ops, &rc, &f, step, next);
    }
    check_log_write(p, &rc, &f);
    runlog_free(rc.log);
    rc_cleanup(&rc);
}

/* Hooks claimed from the schedule: a waiting run cancelled through the API
 * (the remote job may still run), or hooks whose owner died or failed
 * before. A remote cancel that may repeat one already made is harmless:
 * the job is gone or cancelled either way. */
void poller_check_hooks(struct poller *p, struct poll_claim *c, const struct engine_view *v,
                        struct remote_conn *conn)
{
    const struct run_type *rt = check_type(v, c, NULL);
    const struct action_ops *ops = rt ? action_find(rt->action) : NULL;
    struct run_ctx rc;
    struct poll_fence f = {c->run->tenant, c->run->id, c->owner, c->poll_count};

    if (!rt) /* the claim's lease runs out; hooks are tried again then */
        return;
    rc = claim_ctx(p, c, rt, conn);
    rc.log = engine_log_new(p->e, c->run, rt);
    LOG(LOG_INFO, "running hooks run=%s outcome=%s try=%d", c->run->id,
        run_outcome_name(c->run->outcome), c->hooks_attempts);
    run_hooks(p, ops, &rc, c->owner,
              c->run->outcome == OUTCOME_CANCELLED || c->run->outcome == OUTCOME_TIMED_OUT);
    check_log_write(p, &rc, &f);
    runlog_free(rc.log);
    rc_cleanup(&rc);
}
