/* engine/scheduler.c — the scheduler thread: it takes each configured
 * schedule's slots as they come due, in the slot transaction of
 * store/schedules.h, so that every replica may try and exactly one run is
 * made per slot.
 *
 * It reads the state of every schedule and the database's clock in one
 * statement, takes what is due, and sleeps until the earliest next slot
 * (or SCHEDULER_RESYNC_MS, to follow a clock that moved): no loop per
 * schedule, nothing done while no slot is due. A replica that dies in a
 * slot transaction leaves it to the others, which are blocked on the
 * schedule's row until its connection goes and then take the slot. */
#include "engine/engine_internal.h"
#include "engine/scheduler.h"

#include "common/backoff.h"
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
    int64_t days = slot_s / 86400 - (slot_s % 86400 < 0), sod = slot_s - days * 86400;

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
                               .schedule_slot = slot_s >= 0 ? out->slot : NULL};
}

static const char *const taken_names[] = {
    [SCHEDULE_ALREADY] = "already",
    [SCHEDULE_CREATED] = "created",
    [SCHEDULE_SKIPPED_PAUSED] = "skipped_paused",
    [SCHEDULE_SKIPPED_OVERLAP] = "skipped_overlap",
};

/* Takes one slot; false on a database error (the pass ends, and is tried
 * again after a pause). */
static bool take_slot(struct engine *e, struct db *db, const struct schedule *s, int64_t slot_s)
{
    struct schedule_run sr;
    struct schedule_take t;
    enum schedule_taken res;
    struct run *run = NULL;
    struct error err = {0};
    int cancelled = 0;
    bool moved;
    enum status st;

    schedule_run_init(e->cfg, s, slot_s, NULL, NULL, &sr);
    t = (struct schedule_take){.name = s->name,
                               .tenant = sr.rn.tenant,
                               .slot_us = slot_s * 1000000,
                               .paused = s->paused,
                               .skip_if_active = s->overlap == OVERLAP_SKIP,
                               .cancel_active = s->overlap == OVERLAP_CANCEL_PREVIOUS,
                               .run = &sr.rn};
    st = store_schedules_take(db, &t, &res, &run, &cancelled, &err);
    if (st == ST_CONFLICT) {
        /* The slot's run id is taken by a run with another input (a
         * schedule removed and added again with other data): the slot
         * cannot make its run, and must not stop the ones after it. */
        LOG(LOG_WARN, "schedule slot skipped schedule=%s slot=%s: %s", s->name, sr.slot,
            err.message);
        st = store_schedules_drop(db, s->name, t.slot_us, &moved, &err);
        return st == ST_OK;
    }
    if (st != ST_OK) {
        LOG(LOG_WARN, "could not take schedule slot schedule=%s slot=%s: %s", s->name, sr.slot,
            err.message);
        return false;
    }
    if (res != SCHEDULE_ALREADY) {
        metrics_schedule_slot(e->metrics, s->name, taken_names[res], 1);
        LOG(res == SCHEDULE_CREATED ? LOG_INFO : LOG_DEBUG,
            "schedule slot %s schedule=%s slot=%s run=%s cancelled=%d", taken_names[res], s->name,
            sr.slot, sr.id, cancelled);
    }
    if (run) {
        metrics_run_submitted(e->metrics, run->type);
        e->wake_dispatcher(e);
        doorbell_ring(e, true, true);
    } else if (cancelled) {
        doorbell_ring(e, false, true);
    }
    run_free(run);
    return true;
}

/* ---- the thread ---- */

/* One pass over every schedule; returns when the next is due (ms from
 * now by the database's clock, at most SCHEDULER_RESYNC_MS), or -1 after a
 * database error. */
static int64_t scheduler_pass(struct engine *e, const char *const *names, int64_t *read_mono)
{
    const struct config *cfg = e->cfg;
    struct schedule_state *state = xcalloc(cfg->nschedules, sizeof(*state));
    struct db *db = NULL;
    struct error err = {0};
    int64_t now_us = 0, wake_s = INT64_MAX, wait_ms = -1;
    enum status st = db_pool_get(e->pool, &db, &err);

    if (st == ST_OK)
        st = store_schedules_read(db, names, cfg->nschedules, state, &now_us, &err);
    *read_mono = clock_mono_ms();
    for (size_t i = 0; st == ST_OK && i < cfg->nschedules; i++) {
        const struct schedule *s = &cfg->schedules[i];
        struct schedule_plan p;
        bool moved = false;

        schedule_plan(s, cfg->queue.schedule_grace_s, state[i].last_slot_us / 1000000,
                      now_us / 1000000, &p);
        if (p.drop_upto &&
            (st = store_schedules_drop(db, s->name, p.drop_upto * 1000000, &moved, &err)) ==
                ST_OK &&
            moved) {
            metrics_schedule_slot(e->metrics, s->name, "missed", p.missed);
            LOG(LOG_WARN, "schedule slots missed schedule=%s missed=%lld catch_up=%s", s->name,
                (long long)p.missed, cfg_catch_up_name(s->catch_up));
        }
        for (int k = 0; st == ST_OK && k < p.nfire; k++)
            if (!take_slot(e, db, s, p.fire[k]))
                st = ST_UNAVAILABLE;
        if (p.next < wake_s)
            wake_s = p.next;
    }
    if (st == ST_OK) {
        wait_ms =
            wake_s == INT64_MAX ? SCHEDULER_RESYNC_MS : (wake_s * 1000000 - now_us + 999) / 1000;
        if (wait_ms > SCHEDULER_RESYNC_MS)
            wait_ms = SCHEDULER_RESYNC_MS;
    } else if (err.message[0]) {
        LOG(LOG_WARN, "schedules: %s", err.message);
    }
    db_pool_put(e->pool, db);
    schedule_state_cleanup(state, cfg->nschedules);
    free(state);
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
