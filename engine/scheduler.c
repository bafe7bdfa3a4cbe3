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
#include "config/live.h"
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
static enum status take_batch(struct engine *e, const struct config *cfg, struct db *db,
                              const struct fire *f, size_t n, bool *retry, struct error *err)
{
    struct schedule_run *sr = xcalloc(n, sizeof(*sr));
    struct schedule_take *t = xcalloc(n, sizeof(*t));
    struct schedule_result *r = xcalloc(n, sizeof(*r));
    bool made = false;
    enum status st;

    for (size_t i = 0; i < n; i++) {
        const struct schedule *s = f[i].s;
        schedule_run_init(cfg, s, f[i].slot_s, NULL, NULL, &sr[i]);
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

/* With a reloadable configuration the scheduler looks this often whether
 * a reload swapped it (no statement: a counter's read), so that a reload
 * applies to the schedules within this time however far the next slot is. */
#define SCHEDULER_RELOAD_CHECK_MS 1000

/* The thread's own copy of what it derives from the configuration: the
 * view it plans with (held until the next reload's is taken) and the
 * names of its schedules, in its order. A schedule whose timing a reload
 * changed (its cron or time zone), or which a reload added, counts its
 * slots from the moment this replica saw it: since_s[i] (seconds, by the
 * database's clock; 0 for none, -1 until the next read of the clock). A
 * slot of its new timing at or before that moment never fires, as none of
 * a schedule before it existed does, so a changed cron neither fires the
 * slots it would have had before the change nor reports them missed. */
struct sched_view {
    const struct engine_view *v;
    const char **names;
    int64_t *since_s;
    size_t n;
    bool synced; /* the rows of names are made (store_schedules_sync) */
};

/* Where the new configuration's schedule s counts its slots from, given
 * the view before (old, NULL at start). */
static int64_t since_of(const struct sched_view *sv, const struct config *old,
                        const struct schedule *s)
{
    for (size_t j = 0; old && j < old->nschedules; j++) {
        const struct schedule *o = &old->schedules[j];
        if (strcmp(o->name, s->name) != 0)
            continue;
        if (strcmp(o->cron_text, s->cron_text) != 0 || strcmp(o->time_zone, s->time_zone) != 0)
            return -1;
        return sv->since_s[j];
    }
    return old ? -1 : 0;
}

/* Takes the current view when a reload swapped the configuration since the
 * one sv has (or sv has none yet). */
static void sched_view_refresh(struct engine *e, struct sched_view *sv)
{
    const struct engine_view *v = view_hold(e);
    const struct config *cfg = v->cfg, *old = sv->v ? sv->v->cfg : NULL;
    size_t n = cfg->nschedules, retimed = 0;
    const char **names;
    int64_t *since;

    if (sv->v && sv->v->generation == v->generation) {
        view_release(e, v);
        return;
    }
    names = xcalloc(n ? n : 1, sizeof(*names));
    since = xcalloc(n ? n : 1, sizeof(*since));
    for (size_t i = 0; i < n; i++) {
        names[i] = cfg->schedules[i].name;
        since[i] = since_of(sv, old, &cfg->schedules[i]);
        retimed += since[i] < 0;
    }
    if (old)
        LOG(LOG_INFO, "schedules follow the reloaded configuration schedules=%zu retimed=%zu", n,
            retimed);
    free(sv->names);
    free(sv->since_s);
    if (sv->v)
        view_release(e, sv->v);
    *sv = (struct sched_view){v, names, since, n, n == 0};
}

static void sched_view_drop(struct engine *e, struct sched_view *sv)
{
    free(sv->names);
    free(sv->since_s);
    if (sv->v)
        view_release(e, sv->v);
    memset(sv, 0, sizeof(*sv));
}

/* Plans every schedule at now_us: drops what was missed, collects what
 * fires; *wake_s gets the earliest next slot. */
static enum status plan_all(struct engine *e, struct sched_view *sv, struct db *db,
                            const struct schedule_state *state, int64_t now_us, struct fires *f,
                            int64_t *wake_s, struct error *err)
{
    const struct config *cfg = sv->v->cfg;
    enum status st = ST_OK;

    for (size_t i = 0; st == ST_OK && i < sv->n; i++) {
        const struct schedule *s = &cfg->schedules[i];
        int64_t last_s = state[i].last_slot_us / 1000000;
        struct schedule_plan p;
        bool moved = false;

        if (sv->since_s[i] < 0)
            sv->since_s[i] = now_us / 1000000;
        if (sv->since_s[i] > last_s)
            last_s = sv->since_s[i];
        schedule_plan(s, cfg->queue.schedule_grace_s, last_s, now_us / 1000000, &p);
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

/* One pass over every schedule of sv; returns when the next is due (ms from
 * now by the database's clock, at most SCHEDULER_RESYNC_MS), or -1 after a
 * database error. */
static int64_t scheduler_pass(struct engine *e, struct sched_view *sv, int64_t *read_mono)
{
    struct schedule_state *state = xcalloc(sv->n, sizeof(*state));
    struct fires f = {0};
    struct db *db = NULL;
    struct error err = {0};
    int64_t now_us = 0, wake_s = INT64_MAX, wait_ms = -1;
    bool retry = false;
    enum status st = db_pool_get(e->pool, &db, &err);

    if (st == ST_OK)
        st = store_schedules_read(db, sv->names, sv->n, state, &now_us, &err);
    *read_mono = clock_mono_ms();
    if (st == ST_OK)
        st = plan_all(e, sv, db, state, now_us, &f, &wake_s, &err);
    for (size_t i = 0; st == ST_OK && i < f.n; i += SCHEDULER_TAKE_BATCH)
        st = take_batch(e, sv->v->cfg, db, &f.v[i],
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
    schedule_state_cleanup(state, sv->n);
    free(state);
    free(f.v);
    return wait_ms;
}

/* Whether the scheduler must stop waiting: it stops, or a reload swapped
 * the configuration since generation gen. Caller holds e->mu. */
static bool scheduler_interrupted(struct engine *e, uint64_t gen)
{
    return e->sched_stop || (e->live && cfg_live_generation(e->live) != gen);
}

/* Waits ms (from `from`, monotonic), until the scheduler stops, or until a
 * reload swapped the configuration of generation gen; false when it stops. */
static bool scheduler_wait(struct engine *e, int64_t from, int64_t ms, uint64_t gen)
{
    struct timespec ts;
    bool go;

    pthread_mutex_lock(&e->mu);
    while (!scheduler_interrupted(e, gen) && clock_mono_ms() < from + ms) {
        int64_t left = from + ms - clock_mono_ms();
        if (e->live && left > SCHEDULER_RELOAD_CHECK_MS)
            left = SCHEDULER_RELOAD_CHECK_MS;
        abstime_after_ms(&ts, left);
        pthread_cond_timedwait(&e->sched_cv, &e->mu, &ts);
    }
    go = !e->sched_stop;
    pthread_mutex_unlock(&e->mu);
    return go;
}

/* Makes the rows of sv's schedules (one try; false after a failure, logged). */
static bool scheduler_sync(struct engine *e, const struct sched_view *sv)
{
    const struct config *cfg = sv->v->cfg;
    const char **tenants = xcalloc(sv->n ? sv->n : 1, sizeof(*tenants));
    struct db *db = NULL;
    struct error err = {0};
    enum status st;

    for (size_t i = 0; i < sv->n; i++)
        tenants[i] = cfg_schedule_tenant(cfg, &cfg->schedules[i]);
    st = db_pool_get(e->pool, &db, &err);
    if (st == ST_OK)
        st = store_schedules_sync(db, sv->names, tenants, sv->n, &err);
    db_pool_put(e->pool, db);
    if (st != ST_OK)
        LOG(LOG_WARN, "could not record the schedules: %s", err.message);
    free(tenants);
    return st == ST_OK;
}

/* Each turn follows a reload first: the rows of the schedules it brought
 * are made before any of their slots is planned. While no schedule is
 * configured a turn makes no statement. */
static void *scheduler_main(void *arg)
{
    struct engine *e = arg;
    struct sched_view sv = {0};
    struct backoff b = {.first_ms = SCHED_RETRY_FIRST_MS, .max_ms = SCHED_RETRY_MAX_MS};
    bool go = true;

    while (go) {
        int64_t from = clock_mono_ms(), wait_ms = -1;

        sched_view_refresh(e, &sv);
        if (!sv.synced)
            sv.synced = scheduler_sync(e, &sv);
        if (sv.synced)
            wait_ms = sv.n ? scheduler_pass(e, &sv, &from) : SCHEDULER_RESYNC_MS;
        if (wait_ms >= 0)
            backoff_reset(&b);
        go =
            scheduler_wait(e, from, wait_ms >= 0 ? wait_ms : backoff_next_ms(&b), sv.v->generation);
    }
    sched_view_drop(e, &sv);
    return NULL;
}

/* Without a reloadable configuration the thread runs only when schedules
 * are configured; with one it always runs, as a reload may add some. */
enum status scheduler_start(struct engine *e, struct error *err)
{
    enum status st;

    if (e->cfg->nschedules == 0 && !e->live)
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
