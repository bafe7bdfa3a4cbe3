/* engine/scheduler.c — the scheduler thread: it takes each configured
 * schedule's slots as they come due, in the slot transaction of
 * store/schedules.h, so that every replica may try and exactly one run is
 * made per slot.
 *
 * It reads the state of every schedule and the database's clock in one
 * statement, takes what is due, and sleeps until the earliest next slot
 * (or SCHEDULER_RESYNC_MS, to follow a clock that moved): no loop per
 * schedule, nothing done while no slot is due. The due slots of a pass are
 * taken SCHEDULER_TAKE_BATCH at a time, each batch one transaction whose
 * runs are inserted in one statement, so a thousand schedules due in the
 * same second cost a few statements. A schedule another replica is taking
 * at that moment is skipped, not waited for, and looked at again a second
 * later: that replica has taken its slot by then, or died, and then its
 * connection is gone and the slot is free to take. */
#include "engine/engine_internal.h"
#include "engine/scheduler.h"

#include "common/backoff.h"
#include "common/civil.h"
#include "common/ids.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/time_rfc3339.h"
#include "store/db.h"
#include "store/schedules.h"

#include <stdlib.h>
#include <string.h>

#define SCHEDULER_RESYNC_MS 60000
/* A calendar expression is walked at most this many slots per pass; an
 * outage longer than that (a schedule due every second down for days) is
 * worked off over several passes. */
#define PLAN_WALK_MAX 100000
/* Slots taken in one transaction (their runs inserted in one statement). */
#define SCHEDULER_TAKE_BATCH 256
/* A slot whose schedule another replica held is tried again this soon:
 * that replica may die before it commits. */
#define SCHEDULER_BUSY_RETRY_MS 1000
#define SCHED_RETRY_FIRST_MS 250
#define SCHED_RETRY_MAX_MS 5000

/* ---- the plan (pure) ---- */

static void plan_drop(struct schedule_plan *p, int64_t slot, int64_t n)
{
    p->drop_upto = slot;
    p->missed += n;
}

static bool plan_fire(struct schedule_plan *p, int64_t slot)
{
    p->fire[p->nfire++] = slot;
    return p->nfire < SCHEDULE_PLAN_FIRES;
}

/* @every jumps over a long outage instead of walking it: the slots before
 * the first that may still fire, less one (catch_up "one" fires it), are
 * dropped at once. */
static int64_t every_jump(const struct schedule *s, int64_t x, int64_t keep_from,
                          struct schedule_plan *p)
{
    int64_t every = s->cron.every_s, target = keep_from - every, n;

    if (every <= 0 || x >= target)
        return x;
    n = (target - x) / every;
    if (n > 0) {
        plan_drop(p, x + (n - 1) * every, n);
        x += n * every;
    }
    return x;
}

void schedule_plan(const struct schedule *s, int grace_s, int64_t last_s, int64_t now_s,
                   struct schedule_plan *p)
{
    int64_t on_time_from = now_s - grace_s, x, one = 0;
    int64_t keep_from = s->catch_up == CATCH_UP_ALL ? now_s - s->catch_up_window_s : on_time_from;
    bool room = true;

    memset(p, 0, sizeof(*p));
    p->next = INT64_MAX;
    if (keep_from > on_time_from)
        keep_from = on_time_from;
    if (!cron_next(&s->cron, s->tz, last_s, &x))
        return;
    x = every_jump(s, x, keep_from, p);
    for (int walked = 0; x <= now_s && room; walked++) {
        if (x >= keep_from) {
            if (one)
                plan_fire(p, one);
            one = 0;
            room = plan_fire(p, x);
        } else if (s->catch_up == CATCH_UP_ONE) {
            if (one)
                plan_drop(p, one, 1);
            one = x;
        } else {
            plan_drop(p, x, 1);
        }
        if (walked == PLAN_WALK_MAX && room && p->nfire == 0) {
            if (one)
                plan_drop(p, one, 1);
            one = 0;
            room = false; /* the cursor moves to x; the next pass goes on */
        }
        if (!cron_next(&s->cron, s->tz, x, &x))
            x = INT64_MAX;
    }
    if (one)
        plan_fire(p, one);
    p->next = room ? x : now_s;
}

void schedule_run_id(const char *name, int64_t slot_s, char *out, size_t cap)
{
    int64_t y;
    unsigned m, d;
    int64_t days = floor_div(slot_s, 86400), sod = slot_s - days * 86400;

    civil_from_days(days, &y, &m, &d);
    xsnprintf(out, cap, "%s-%04lld%02u%02uT%02d%02d%02dZ", name, (long long)y, m, d,
              (int)(sod / 3600), (int)(sod / 60 % 60), (int)(sod % 60));
}

/* ---- one slot ---- */

void schedule_run_init(const struct config *cfg, const struct schedule *s, int64_t slot_s,
                       const char *id, const char *initiator, struct schedule_run *out)
{
    const struct run_type *rt = cfg_run_type(cfg, s->run_type);
    const char *tenant = cfg_schedule_tenant(cfg, s);
    int64_t at_us = slot_s * 1000000;

    memset(out, 0, sizeof(*out));
    if (slot_s >= 0) {
        schedule_run_id(s->name, slot_s, out->id, sizeof(out->id));
        time_format_rfc3339(at_us, out->slot, sizeof(out->slot));
        if (s->jitter_s > 0)
            at_us += (int64_t)rand_below((uint64_t)s->jitter_s * 1000000);
        time_format_rfc3339(at_us, out->run_at, sizeof(out->run_at));
        xsnprintf(out->initiator, sizeof(out->initiator), "schedule:%s", s->name);
    } else {
        xsnprintf(out->id, sizeof(out->id), "%s", id);
        xsnprintf(out->initiator, sizeof(out->initiator), "%s", initiator);
    }
    identity_hash(tenant, rt->name, "run_id", out->id, out->identity);
    out->rn = (struct run_new){.tenant = tenant,
                               .id = out->id,
                               .type = rt->name,
                               .initiator = out->initiator,
                               .run_at = slot_s >= 0 ? out->run_at : NULL,
                               .max_attempts = rt->max_attempts,
                               .timeout_s = (int)rt->timeout_s,
                               .input = s->data,
                               .identity_hash = out->identity,
                               .request_hash = out->identity,
                               .schedule_name = s->name,
                               .schedule_slot = slot_s >= 0 ? out->slot : NULL,
                               .approval_timeout_s = rt->approval.timeout_s,
                               .approve_on_timeout = rt->approval.approve_on_timeout};
}

static const char *const taken_names[] = {
    [SCHEDULE_ALREADY] = "already",
    [SCHEDULE_CREATED] = METRICS_SLOT_CREATED,
    [SCHEDULE_SKIPPED_PAUSED] = METRICS_SLOT_SKIPPED_PAUSED,
    [SCHEDULE_SKIPPED_OVERLAP] = METRICS_SLOT_SKIPPED_OVERLAP,
    [SCHEDULE_BUSY] = "busy",
    [SCHEDULE_CONFLICT] = "conflict",
};

/* The slots one pass takes, oldest first within a schedule. */
struct fires {
    struct fire {
        const struct schedule *s;
        int64_t slot_s;
    } * v;
    size_t n, cap;
};

static void fires_add(struct fires *f, const struct schedule *s, int64_t slot_s)
{
    if (f->n == f->cap) {
        f->cap = f->cap ? f->cap * 2 : 64;
        f->v = xrealloc(f->v, f->cap * sizeof(*f->v));
    }
    f->v[f->n++] = (struct fire){s, slot_s};
}

/* What one slot's result means: metrics, a log line, wake-ups. True when
 * the slot must be tried again soon (another replica held its schedule). */
static bool slot_done(struct engine *e, const struct fire *f, const struct schedule_run *sr,
                      const struct schedule_result *r)
{
    const char *what = taken_names[r->taken];

    switch (r->taken) {
    case SCHEDULE_ALREADY:
        return false;
    case SCHEDULE_BUSY:
        return true;
    case SCHEDULE_CONFLICT:
        /* Its run id is a run with another input (a schedule removed and
         * added again with other data): the slot cannot make its run, and
         * must not stop the ones after it; it is taken without one. */
        LOG(LOG_WARN,
            "schedule slot skipped schedule=%s slot=%s: run \"%s\" exists with other "
            "input",
            f->s->name, sr->slot, sr->id);
        return false;
    default:
        break;
    }
    metrics_schedule_slot(e->metrics, f->s->name, what, 1);
    LOG(r->taken == SCHEDULE_CREATED ? LOG_DEBUG : LOG_INFO,
        "schedule slot %s schedule=%s slot=%s run=%s cancelled=%d", what, f->s->name, sr->slot,
        sr->id, r->cancelled);
    if (r->run)
        metrics_run_submitted(e->metrics, r->run->type);
    if (r->cancelled)
        doorbell_ring(e, false, true);
    return false;
}

/* Takes up to SCHEDULER_TAKE_BATCH slots of f from `from` in one
 * transaction; *retry when a slot must be tried again soon. */
static enum status take_batch(struct engine *e, struct db *db, const struct fire *f, size_t n,
                              bool *retry, struct error *err)
{
    struct schedule_run *sr = xcalloc(n, sizeof(*sr));
    struct schedule_take *t = xcalloc(n, sizeof(*t));
    struct schedule_result *r = xcalloc(n, sizeof(*r));
    bool made = false;
    enum status st;

    for (size_t i = 0; i < n; i++) {
        const struct schedule *s = f[i].s;
        schedule_run_init(e->cfg, s, f[i].slot_s, NULL, NULL, &sr[i]);
        t[i] = (struct schedule_take){.name = s->name,
                                      .tenant = sr[i].rn.tenant,
                                      .slot_us = f[i].slot_s * 1000000,
                                      .paused = s->paused,
                                      .skip_if_active = s->overlap == OVERLAP_SKIP,
                                      .cancel_active = s->overlap == OVERLAP_CANCEL_PREVIOUS,
                                      .run = &sr[i].rn};
    }
    st = store_schedules_take(db, t, n, r, err);
    for (size_t i = 0; st == ST_OK && i < n; i++) {
        *retry |= slot_done(e, &f[i], &sr[i], &r[i]);
        made |= r[i].run != NULL;
    }
    if (made) {
        e->wake_dispatcher(e);
        doorbell_ring(e, true, true);
    }
    schedule_result_cleanup(r, n);
    free(r);
    free(t);
    free(sr);
    return st;
}

/* ---- the thread ---- */

/* Plans every schedule at now_us: drops what was missed, collects what
 * fires; *wake_s gets the earliest next slot. */
static enum status plan_all(struct engine *e, struct db *db, const struct schedule_state *state,
                            int64_t now_us, struct fires *f, int64_t *wake_s, struct error *err)
{
    const struct config *cfg = e->cfg;
    enum status st = ST_OK;

    for (size_t i = 0; st == ST_OK && i < cfg->nschedules; i++) {
        const struct schedule *s = &cfg->schedules[i];
        struct schedule_plan p;
        bool moved = false;

        schedule_plan(s, cfg->queue.schedule_grace_s, state[i].last_slot_us / 1000000,
                      now_us / 1000000, &p);
        if (p.drop_upto)
            st = store_schedules_drop(db, s->name, p.drop_upto * 1000000, &moved, err);
        if (moved) {
            metrics_schedule_slot(e->metrics, s->name, METRICS_SLOT_MISSED, p.missed);
            LOG(LOG_WARN, "schedule slots missed schedule=%s missed=%lld catch_up=%s", s->name,
                (long long)p.missed, cfg_catch_up_name(s->catch_up));
        }
        for (int k = 0; k < p.nfire; k++)
            fires_add(f, s, p.fire[k]);
        if (p.next < *wake_s)
            *wake_s = p.next;
    }
    return st;
}

/* One pass over every schedule; returns when the next is due (ms from
 * now by the database's clock, at most SCHEDULER_RESYNC_MS), or -1 after a
 * database error. */
static int64_t scheduler_pass(struct engine *e, const char *const *names, int64_t *read_mono)
{
    const struct config *cfg = e->cfg;
    struct schedule_state *state = xcalloc(cfg->nschedules, sizeof(*state));
    struct fires f = {0};
    struct db *db = NULL;
    struct error err = {0};
    int64_t now_us = 0, wake_s = INT64_MAX, wait_ms = -1;
    bool retry = false;
    enum status st = db_pool_get(e->pool, &db, &err);

    if (st == ST_OK)
        st = store_schedules_read(db, names, cfg->nschedules, state, &now_us, &err);
    *read_mono = clock_mono_ms();
    if (st == ST_OK)
        st = plan_all(e, db, state, now_us, &f, &wake_s, &err);
    for (size_t i = 0; st == ST_OK && i < f.n; i += SCHEDULER_TAKE_BATCH)
        st = take_batch(e, db, &f.v[i],
                        f.n - i < SCHEDULER_TAKE_BATCH ? f.n - i : SCHEDULER_TAKE_BATCH, &retry,
                        &err);
    if (st == ST_OK) {
        wait_ms =
            wake_s == INT64_MAX ? SCHEDULER_RESYNC_MS : (wake_s * 1000000 - now_us + 999) / 1000;
        if (wait_ms > SCHEDULER_RESYNC_MS)
            wait_ms = SCHEDULER_RESYNC_MS;
        if (retry && wait_ms > SCHEDULER_BUSY_RETRY_MS)
            wait_ms = SCHEDULER_BUSY_RETRY_MS;
    } else {
        LOG(LOG_WARN, "could not take the schedules' slots: %s", err.message);
    }
    db_pool_put(e->pool, db);
    schedule_state_cleanup(state, cfg->nschedules);
    free(state);
    free(f.v);
    return wait_ms;
}

/* Waits ms (from `from`, monotonic) or until the scheduler stops; false
 * when it stops. */
static bool scheduler_wait(struct engine *e, int64_t from, int64_t ms)
{
    struct timespec ts;
    bool go;

    pthread_mutex_lock(&e->mu);
    while (!e->sched_stop && clock_mono_ms() < from + ms) {
        abstime_after_ms(&ts, from + ms - clock_mono_ms());
        pthread_cond_timedwait(&e->sched_cv, &e->mu, &ts);
    }
    go = !e->sched_stop;
    pthread_mutex_unlock(&e->mu);
    return go;
}

/* Makes the rows of the configured schedules, until it succeeds. */
static bool scheduler_sync(struct engine *e, const char *const *names)
{
    const struct config *cfg = e->cfg;
    const char **tenants = xcalloc(cfg->nschedules, sizeof(*tenants));
    struct backoff b = {.first_ms = SCHED_RETRY_FIRST_MS, .max_ms = SCHED_RETRY_MAX_MS};
    bool go = true, done = false;

    for (size_t i = 0; i < cfg->nschedules; i++)
        tenants[i] = cfg_schedule_tenant(cfg, &cfg->schedules[i]);
    while (go && !done) {
        struct db *db = NULL;
        struct error err = {0};
        enum status st = db_pool_get(e->pool, &db, &err);

        if (st == ST_OK)
            st = store_schedules_sync(db, names, tenants, cfg->nschedules, &err);
        db_pool_put(e->pool, db);
        done = st == ST_OK;
        if (!done) {
            LOG(LOG_WARN, "could not record the schedules: %s", err.message);
            go = scheduler_wait(e, clock_mono_ms(), backoff_next_ms(&b));
        }
    }
    free(tenants);
    return done;
}

static void *scheduler_main(void *arg)
{
    struct engine *e = arg;
    const struct config *cfg = e->cfg;
    const char **names = xcalloc(cfg->nschedules, sizeof(*names));
    struct backoff b = {.first_ms = SCHED_RETRY_FIRST_MS, .max_ms = SCHED_RETRY_MAX_MS};
    bool go;

    for (size_t i = 0; i < cfg->nschedules; i++)
        names[i] = cfg->schedules[i].name;
    go = scheduler_sync(e, names);
    while (go) {
        int64_t read_mono = 0, wait_ms = scheduler_pass(e, names, &read_mono);

        if (wait_ms >= 0)
            backoff_reset(&b);
        go = scheduler_wait(e, read_mono, wait_ms >= 0 ? wait_ms : backoff_next_ms(&b));
    }
    free(names);
    return NULL;
}

enum status scheduler_start(struct engine *e, struct error *err)
{
    enum status st;

    if (e->cfg->nschedules == 0)
        return ST_OK;
    st = thread_start(e, &e->scheduler, scheduler_main, e, "the scheduler", err);
    e->sched_started = st == ST_OK;
    return st;
}

void scheduler_stop(struct engine *e)
{
    if (!e->sched_started)
        return;
    pthread_mutex_lock(&e->mu);
    e->sched_stop = true;
    pthread_cond_broadcast(&e->sched_cv);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->scheduler, NULL);
    e->sched_started = false;
}
