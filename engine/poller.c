/* engine/poller.c — the scheduler and checker threads that drive waiting
 * runs (engine/poller.h), and the poller's start and stop; a check itself
 * is in poller_check.c, the writer of next checks in poller_writer.c. Lock
 * order: p->mu only; no database call or action runs under it. */
#include "engine/poller_internal.h"

#include "common/backoff.h"
#include "common/log.h"
#include "common/metrics.h"
#include "engine/actions/registry.h"
#include "store/db.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

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

/* ---- threads ---------------------------------------------------------- */

/* claimed_ms: when the claim's statement began, so that the time a claim
 * may wait in the queue counts all of its lease that has gone. */
static void enqueue(struct poller *p, struct poll_claim *c, size_t n, bool hooks,
                    int64_t claimed_ms, const struct engine_view *v)
{
    for (size_t i = 0; i < n; i++) {
        struct job *j = &p->queue[ring_push(&p->q)];
        j->c = c[i];
        j->hooks = hooks;
        j->claimed_mono = claimed_ms;
        j->v = view_ref(v);
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
            poller_check_hooks(p, &j.c, j.v, conn);
        else
            poller_check_run(p, &j.c, j.v, conn, &next);
        view_release(p->e, j.v);
        run_free(j.c.run);
        free(j.c.external_id);
        json_decref(j.c.poll_state);
        pthread_mutex_lock(&p->mu);
        if (next.id)
            poller_writer_add(p, &next);
        p->st.in_flight--;
        if (++p->room == p->claim_min)
            pthread_cond_signal(&p->sched_cv);
    }
    pthread_mutex_unlock(&p->mu);
    remote_conn_free(conn);
    return NULL;
}

/* Checks of a rate-limited type take a unit each, in claim order; a check
 * left without one goes back to the schedule unchecked (its count taken
 * back, through the writer), due when the limit's next unit frees, and is
 * counted as a wait, not as a failure. Keeps the rest in checks[0..*n);
 * the given-back ones go to back[] (*nback of them). On a database error
 * no unit is taken and every limited check waits a second. */
#define RATE_ERROR_WAIT_MS 1000
static void rate_limit_checks(struct poller *p, const struct engine_view *v, struct db *db,
                              struct poll_claim *checks, size_t *n, struct again *back,
                              size_t *nback)
{
    struct engine *e = p->e;
    size_t keep = 0;

    *nback = 0;
    for (size_t l = 0; l < v->nlimits; l++) {
        const struct rate_limit *rl = &v->limits[l];
        struct error err = {0};
        int want = 0, taken = 0;
        int64_t next_ms = RATE_ERROR_WAIT_MS;

        for (size_t i = 0; i < *n; i++)
            want += checks[i].run && view_rate_limit_of(v, checks[i].run->type) == rl;
        if (want == 0)
            continue;
        if (store_rate_take(db, rl, want, &taken, &next_ms, &err) != ST_OK)
            LOG(LOG_WARN, "could not take units of rate limit %s: %s", rl->name, err.message);
        metrics_rate_limit_wait(e->metrics, rl->name, want - taken);
        if (taken < want)
            p->limit_until[l] = clock_mono_ms() + next_ms;
        for (size_t i = 0; i < *n && want > taken; i++) {
            struct poll_claim *c = &checks[i];
            if (!c->run || view_rate_limit_of(v, c->run->type) != rl || taken-- > 0)
                continue; /* another limit's (given back, or kept), or kept */
            back[(*nback)++] = (struct again){xstrdup(c->run->tenant),
                                              xstrdup(c->run->id),
                                              xstrdup(c->owner),
                                              c->poll_count,
                                              c->poll_state,
                                              next_ms,
                                              true};
            c->poll_state = NULL;
            run_free(c->run);
            free(c->external_id);
            c->run = NULL;
        }
    }
    for (size_t i = 0; i < *n; i++)
        if (checks[i].run)
            checks[keep++] = checks[i];
    *n = keep;
}

/* The pollable types whose rate limit is not known to be spent (a limit
 * that gave a check no unit is, until its next unit frees): the checks of
 * the others are not claimed meanwhile, so that a spent limit costs no
 * claims. *wait_ms: until the first spent limit frees (-1: none spent). */
static size_t open_types(struct poller *p, const struct engine_view *v, const char **out,
                         int64_t *wait_ms)
{
    int64_t now = clock_mono_ms();
    size_t n = 0;

    /* A reload changed the limits: what was known of the old ones is
     * forgotten (a spent one is found again by its next check). */
    if (p->limit_generation != v->generation) {
        free(p->limit_until);
        p->limit_until = xcalloc(v->nlimits ? v->nlimits : 1, sizeof(*p->limit_until));
        p->limit_generation = v->generation;
    }
    *wait_ms = -1;
    for (size_t i = 0; i < p->ntypes; i++) {
        const struct rate_limit *rl = view_rate_limit_of(v, p->types[i]);
        int64_t until = rl ? p->limit_until[rl - v->limits] : 0;
        if (until <= now) {
            out[n++] = p->types[i];
        } else if (*wait_ms < 0 || until - now < *wait_ms) {
            *wait_ms = until - now;
        }
    }
    return n;
}

/* The types of v whose action can poll, and the lease that covers a check
 * (or a cancel and a cleanup) of any of them, when v is not the view they
 * were made for: at the first claim, and at the first after a reload. */
static void poll_types(struct poller *p, const struct engine_view *v)
{
    const struct config *cfg = v->cfg;
    int64_t longest = 0;

    if (p->tview && p->tview->generation == v->generation)
        return;
    if (p->tview)
        view_release(p->e, p->tview);
    p->tview = view_ref(v);
    free(p->types);
    free(p->open);
    p->types = xcalloc(cfg->nrun_types + 1, sizeof(*p->types));
    p->open = xcalloc(cfg->nrun_types + 1, sizeof(*p->open));
    p->ntypes = 0;
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
    atomic_store(&p->lease_ms, 2 * longest * 1000 + LEASE_MARGIN_MS);
}

/* Claims up to n checks (then hooks) into the queue, in one statement each,
 * begun at t0 (monotonic microseconds); returns how many, and in *due_ms
 * the wait before the next one (-1: none scheduled). */
static size_t claim(struct poller *p, int n, int64_t t0, int64_t *due_ms)
{
    struct engine *e = p->e;
    struct poll_claim *checks = NULL, *hooks = NULL;
    struct again *back = NULL;
    size_t nc = 0, nh = 0, nback = 0, claimed, nopen;
    struct db *db = NULL;
    struct error err = {0};
    enum status st;
    char owner[POLL_OWNER_MAX];
    int64_t spent_ms, lease;
    const struct engine_view *v = view_hold(e);

    poll_types(p, v);
    *due_ms = -1;
    if (p->ntypes == 0) { /* nothing can wait: no connection, no statement */
        view_release(e, v);
        pthread_mutex_lock(&p->mu);
        p->room += n;
        pthread_mutex_unlock(&p->mu);
        return 0;
    }
    st = db_pool_get(e->pool, &db, &err);
    lease = atomic_load(&p->lease_ms);
    /* never the same owner twice (store/polls.h) */
    xsnprintf(owner, sizeof(owner), "%s/%" PRIu64, e->worker_id, ++p->claims);
    nopen = open_types(p, v, p->open, &spent_ms);
    if (st == ST_OK && nopen > 0)
        st = store_polls_claim(db, owner, n, lease, p->open, nopen, &checks, &nc, &err);
    claimed = nc;
    if (st == ST_OK && nc > 0 && v->nlimits > 0) {
        back = xcalloc(nc, sizeof(*back));
        rate_limit_checks(p, v, db, checks, &nc, back, &nback);
    }
    if (st == ST_OK && (int)claimed < n && p->ntypes > 0)
        st = store_hooks_claim(db, owner, n - (int)nc, lease, p->types, p->ntypes, &hooks, &nh,
                               &err);
    if (st == ST_OK && (int)(claimed + nh) < n && nopen > 0)
        st = store_polls_next_due(db, p->open, nopen, due_ms, &err);
    if (spent_ms >= 0 && (*due_ms < 0 || spent_ms < *due_ms))
        *due_ms = spent_ms;
    db_pool_put(e->pool, db);
    atomic_fetch_add(&p->db_us, clock_mono_us() - t0);
    if (st != ST_OK)
        LOG(LOG_WARN, "could not claim checks: %s", err.message);
    pthread_mutex_lock(&p->mu);
    enqueue(p, checks, nc, false, t0 / 1000, v);
    enqueue(p, hooks, nh, true, t0 / 1000, v);
    for (size_t i = 0; i < nback; i++)
        poller_writer_add(p, &back[i]);
    p->room += n - (int)(nc + nh);
    pthread_mutex_unlock(&p->mu);
    view_release(e, v);
    /* one waiting checker per claim, woken after the unlock so that it
     * does not wake only to wait for the lock */
    for (size_t i = 0; i < nc + nh; i++)
        pthread_cond_signal(&p->work_cv);
    free(checks); /* the claims' contents moved to the queue */
    free(hooks);
    free(back); /* its contents moved to the writer */
    return claimed + nh;
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
 * would take the CPU and the database that runs need; with this, runs keep
 * most of their throughput beside more checks than the poller can make
 * (bench/README.md measures it), and it is the checks that fall behind,
 * visibly (/healthz polls). Runs that do not fill the workers do not hold
 * it back. t0 and
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
    const struct engine_view *v = view_hold(e);

    p->e = e;
    p->n = cfg->poller.concurrency;
    p->limit_until = xcalloc(1, sizeof(*p->limit_until));
    p->limit_generation = UINT64_MAX; /* sized by the first claim's view */
    poll_types(p, v);                 /* the first claim's view makes them again after a reload */
    view_release(e, v);
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

/* Without a reloadable configuration the threads run only when some run
 * type can poll; with one they always do, as a reload may add such a type
 * (while none is configured a claim makes no statement). */
enum status poller_start(struct poller *p, struct error *err)
{
    if (p->ntypes == 0 && !p->e->live)
        return ST_OK; /* nothing here can wait: no threads */
    p->room = (int)p->q.cap;
    p->claim_min = 1;
    p->wake = true;
    p->st.running = true;
    p->started = true; /* from here poller_stop undoes a partial start */
    if (poller_writer_start(p, err) != ST_OK)
        goto fail;
    for (int i = 0; i < p->n; i++) {
        if (thread_start(p->e, &p->checkers[i], checker_main, p, "poll checker", err) != ST_OK)
            goto fail;
        p->nstarted = i + 1;
    }
    if (thread_start(p->e, &p->sched, sched_main, p, "poll scheduler", err) != ST_OK)
        goto fail;
    p->sched_started = true;
    LOG(LOG_INFO, "poller started concurrency=%d types=%zu lease_ms=%lld", p->n, p->ntypes,
        (long long)atomic_load(&p->lease_ms));
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
        view_release(p->e, j->v);
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
    poller_writer_stop(p); /* after the checkers: it writes the next checks they handed over */
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
        poller_again_free(&a);
    handoff_cleanup(&p->againq);
    pthread_mutex_destroy(&p->mu);
    free(p->queue);
    free(p->checkers);
    if (p->tview)
        view_release(p->e, p->tview);
    free(p->types);
    free(p->open);
    free(p->limit_until);
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
