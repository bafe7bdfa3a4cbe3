/* handlers/bulk.c — POST /runs/cancel and POST /runs/retry (handlers/bulk.h):
 * the body, the runner's threads, and one request's work: the match, then
 * the batches.
 *
 * The answer: 200 {"matched", "acted", "run_ids"} (and, for a retry,
 * "new_run_ids", the run each retry started or joined, in the same order,
 * and "joined", how many of them joined a run already active),
 * where matched is how many runs the filter selected that the action
 * applies to when the request began, acted how many of them it acted on
 * (a run that moved on meanwhile is left alone, and a retry leaves out,
 * with a warning in the log, a run that a single retry would refuse: its
 * type is gone, or its input cannot make its type's concurrency key), and
 * run_ids the first BULK_IDS_MAX of those; with dry_run, nothing is
 * changed, acted is 0 and run_ids lists the first matches. More matches
 * than "limit": 409, and nothing is changed. */
#include "handlers/bulk.h"

#include "config/live.h"

#include "common/ids.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/time_rfc3339.h"
#include "engine/engine.h"
#include "handlers/handlers.h"
#include "handlers/intake.h"
#include "store/db.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define BULK_THREADS_MAX 8
#define FILTER_TEXT_MAX 64

/* ---- the body ---------------------------------------------------------------- */

/* "status" or "outcome": a non-empty array of names, as bits. */
static unsigned parse_names(const json_t *v, const char *field, bool outcome, struct error *err)
{
    unsigned set = 0;
    size_t i;
    json_t *e;

    if (!json_is_array(v) || json_array_size(v) == 0) {
        error_field(err, ST_INVALID, field, "must be a non-empty array of %s names",
                    outcome ? "outcome" : "status");
        return 0;
    }
    json_array_foreach(v, i, e)
    {
        enum run_status s;
        enum run_outcome o;
        const char *name = json_string_value(e);
        if (!outcome && run_status_parse(name, &s))
            set |= 1u << s;
        else if (outcome && run_outcome_parse(name, &o))
            set |= 1u << o;
        else
            error_field(err, ST_INVALID, field,
                        outcome ? "must hold outcome names: pending, succeeded, "
                                  "partially_succeeded, failed, cancelled, timed_out"
                                : "must hold status names: queued, running, waiting, "
                                  "cancelling, completed");
    }
    return set;
}

static const char *parse_text(const json_t *v, const char *field, size_t max, struct error *err)
{
    const char *s = json_string_value(v);

    if (!s || !*s || strlen(s) > max)
        error_field(err, ST_INVALID, field, "must be a string of 1 to %zu characters", max);
    return s;
}

static const char *parse_instant(const json_t *v, const char *field, struct error *err)
{
    const char *s = json_string_value(v);
    int64_t us;

    if (!s || !time_parse_rfc3339(s, &us) || !time_in_range(us))
        error_field(err, ST_INVALID, field, "must be an RFC 3339 timestamp");
    return s;
}

/* One key of "filter"; *said is set when it selects something. */
static void parse_filter_key(const char *key, const json_t *v, struct bulk_filter *f, bool *all,
                             struct error *err)
{
    char field[80];

    xsnprintf(field, sizeof(field), "filter.%.60s", key);
    if (strcmp(key, "status") == 0)
        f->statuses = parse_names(v, field, false, err);
    else if (strcmp(key, "outcome") == 0)
        f->outcomes = parse_names(v, field, true, err);
    else if (strcmp(key, "type") == 0)
        f->type = parse_text(v, field, FILTER_TEXT_MAX, err);
    else if (strcmp(key, "schedule") == 0)
        f->schedule = parse_text(v, field, FILTER_TEXT_MAX, err);
    else if (strcmp(key, "created_after") == 0)
        f->created_after = parse_instant(v, field, err);
    else if (strcmp(key, "created_before") == 0)
        f->created_before = parse_instant(v, field, err);
    else if (strcmp(key, "parent_id") == 0)
        f->parent_id = parse_text(v, field, RUN_ID_MAX, err);
    else if (strcmp(key, "all") == 0 && json_is_boolean(v))
        *all = json_is_true(v);
    else if (strcmp(key, "all") == 0)
        error_field(err, ST_INVALID, field, "must be true or false");
    else
        error_field(err, ST_INVALID, field,
                    "is not a filter; expected status, outcome, type, created_after, "
                    "created_before, parent_id, schedule or all");
}

static void parse_filter(const json_t *v, struct bulk_filter *f, struct error *err)
{
    unsigned before = err ? err->nfields : 0;
    bool all = false;
    const char *key;
    json_t *e;

    if (!json_is_object(v)) {
        error_field(err, ST_INVALID, "filter", "is required: an object of criteria");
        return;
    }
    json_object_foreach((json_t *)v, key, e)
    {
        parse_filter_key(key, e, f, &all, err);
    }
    if (err && err->nfields > before)
        return;
    if (!all && !f->statuses && !f->outcomes && !f->type && !f->schedule && !f->parent_id &&
        !f->created_after && !f->created_before)
        error_field(err, ST_INVALID, "filter",
                    "is empty; to act on every run, say so: {\"filter\": {\"all\": true}}");
}

enum status bulk_parse(const json_t *body, struct bulk_request *out, struct error *err)
{
    const char *key;
    json_t *v;

    memset(out, 0, sizeof(*out));
    out->limit = BULK_LIMIT_DEFAULT;
    if (!json_is_object(body))
        return error_field(err, ST_INVALID, "body", "must be a JSON object");
    json_object_foreach((json_t *)body, key, v)
    {
        if (strcmp(key, "filter") == 0)
            continue;
        if (strcmp(key, "dry_run") == 0 && json_is_boolean(v))
            out->dry_run = json_is_true(v);
        else if (strcmp(key, "dry_run") == 0)
            error_field(err, ST_INVALID, "dry_run", "must be true or false");
        else if (strcmp(key, "limit") == 0 && json_is_integer(v) && json_integer_value(v) >= 1 &&
                 json_integer_value(v) <= BULK_LIMIT_MAX)
            out->limit = (int)json_integer_value(v);
        else if (strcmp(key, "limit") == 0)
            error_field(err, ST_INVALID, "limit", "must be an integer from 1 to %d",
                        BULK_LIMIT_MAX);
        else
            error_field(err, ST_INVALID, key,
                        "is not a known field; expected filter, dry_run or "
                        "limit");
    }
    parse_filter(json_object_get(body, "filter"), &out->filter, err);
    return err && err->nfields > 0 ? ST_INVALID : ST_OK;
}

/* ---- one request's work ------------------------------------------------------- */

/* A request, its own copy of everything it needs, and its answer. */
struct bulk_job {
    struct deferred d; /* first: the server sees only this */
    struct bulk_job *next;
    struct bulk *runner; /* NULL: run on the handler's thread */
    enum bulk_action action;
    struct bulk_request rq;
    char tenant[65], initiator[96], type[FILTER_TEXT_MAX + 1], schedule[FILTER_TEXT_MAX + 1];
    char parent_id[RUN_ID_MAX + 1];
    char after[40], before[40];
    void (*done)(void *arg);
    void *done_arg;
    /* the answer */
    enum status st;
    struct error err;
    size_t matched, acted, joined;
    bool interrupted;
    json_t *run_ids, *new_ids;
};

struct bulk {
    const struct hctx *hc;
    pthread_mutex_t mu;
    pthread_cond_t work_cv, idle_cv;
    struct bulk_job *head, *tail;
    int queued, queue_max, held, nthreads, want_threads;
    bool closing;
    pthread_t threads[BULK_THREADS_MAX];
};

static bool bulk_stopping(struct bulk *b)
{
    bool stop;

    if (!b)
        return false;
    pthread_mutex_lock(&b->mu);
    stop = b->closing;
    pthread_mutex_unlock(&b->mu);
    return stop;
}

/* What one batch did: metrics, the engine told, the answer's lists. */
static void batch_done(const struct hctx *hc, struct bulk_job *job, const struct bulk_result *r)
{
    bool submitted = false;

    for (size_t i = 0; i < r->n; i++) {
        const struct bulk_acted *a = &r->v[i];
        if (a->ended)
            metrics_run_completed(hc->metrics, a->type, run_outcome_name(OUTCOME_CANCELLED), -1);
        if (a->new_id && !a->joined) {
            metrics_run_submitted(hc->metrics, a->type);
            submitted = true;
        }
        job->joined += a->new_id && a->joined;
        if (json_array_size(job->run_ids) < BULK_IDS_MAX) {
            json_array_append_new(job->run_ids, json_string(a->id));
            if (job->new_ids)
                json_array_append_new(job->new_ids, json_string(a->new_id));
        }
    }
    job->acted += r->n;
    if (!hc->engine || r->n == 0)
        return;
    if (submitted)
        engine_submitted(hc->engine);
    else
        engine_events_written(hc->engine);
}

/* Whether m's run i may be retried with its run type rt of today, as a
 * single retry decides (handlers/runs_retry.c): its type is configured,
 * and when the type has a concurrency key its input (NULL: the run is
 * gone, and the statement will find nothing) can make it. A run left out
 * is logged with the reason, as the answer only counts it. */
static bool retry_may(const struct run_type *rt, const struct bulk_job *job,
                      const struct bulk_match *m, size_t i, const json_t *input)
{
    struct error one = {0};

    if (!rt) {
        LOG(LOG_WARN, "bulk retry leaves run=%s: its run type \"%s\" is not configured", m->ids[i],
            m->types[i]);
        return false;
    }
    if (input && intake_conc_check(rt, job->tenant, input, &one) != ST_OK) {
        LOG(LOG_WARN, "bulk retry leaves run=%s: %s", m->ids[i], one.message);
        return false;
    }
    return true;
}

/* The retries of m's runs [from, from + n), inputs[k] the input of run
 * from + k when its type has a concurrency key: each with its run type's
 * settings of today; a run retry_may refuses is left out. */
static size_t retry_items(const struct hctx *hc, const struct bulk_job *job,
                          const struct bulk_match *m, size_t from, size_t n, json_t *const *inputs,
                          struct bulk_retry_item *items, char (*ids)[27])
{
    size_t k = 0;

    for (size_t i = from; i < from + n; i++) {
        const struct run_type *rt = cfg_run_type(hc->cfg, m->types[i]);
        if (!retry_may(rt, job, m, i, inputs[i - from]))
            continue;
        run_id_new(ids[k]);
        items[k] = (struct bulk_retry_item){.of = m->ids[i],
                                            .id = ids[k],
                                            .max_attempts = rt->max_attempts,
                                            .timeout_s = (int)rt->timeout_s,
                                            .approval_timeout_s = rt->approval.timeout_s,
                                            .approve_on_timeout = rt->approval.approve_on_timeout};
        k++;
    }
    return k;
}

/* The inputs of m's runs [from, from + n) whose run type has a concurrency
 * key, into inputs[0..n) (NULL for the others): a batch without such a
 * run reads none. */
static enum status retry_inputs(const struct hctx *hc, struct db *db, const struct bulk_job *job,
                                const struct bulk_match *m, size_t from, size_t n, json_t **inputs,
                                struct error *err)
{
    const char **ids = xcalloc(n ? n : 1, sizeof(*ids));
    size_t *at = xcalloc(n ? n : 1, sizeof(*at)), k = 0;
    json_t **got;
    enum status st = ST_OK;

    for (size_t i = 0; i < n; i++) {
        const struct run_type *rt = cfg_run_type(hc->cfg, m->types[from + i]);
        if (rt && rt->conc.on) {
            ids[k] = m->ids[from + i];
            at[k++] = i;
        }
    }
    if (k > 0) {
        /* An array of pointers (see .clang-tidy). NOLINTNEXTLINE(bugprone-sizeof-expression) */
        got = xcalloc(k, sizeof(*got));
        st = store_bulk_inputs(db, job->tenant, ids, k, got, err);
        for (size_t j = 0; st == ST_OK && j < k; j++)
            inputs[at[j]] = got[j];
        free(got);
    }
    free(ids);
    free(at);
    return st;
}

/* The retries of m's runs [from, from + n) in one statement, into *r. */
static enum status retry_batch(const struct hctx *hc, struct db *db, const struct bulk_job *job,
                               const struct bulk_match *m, size_t from, size_t n,
                               struct bulk_result *r, struct error *err)
{
    struct bulk_retry_item *items = xcalloc(n ? n : 1, sizeof(*items));
    char(*ids)[27] = xcalloc(n ? n : 1, sizeof(*ids));
    /* An array of pointers (see .clang-tidy). NOLINTNEXTLINE(bugprone-sizeof-expression) */
    json_t **inputs = xcalloc(n ? n : 1, sizeof(*inputs));
    enum status st = retry_inputs(hc, db, job, m, from, n, inputs, err);
    size_t k = st == ST_OK ? retry_items(hc, job, m, from, n, inputs, items, ids) : 0;

    if (st == ST_OK)
        st = store_bulk_retry(db, job->tenant, job->initiator, &job->rq.filter, items, k, r, err);
    for (size_t i = 0; i < n; i++)
        json_decref(inputs[i]);
    free(inputs);
    free(items);
    free(ids);
    return st;
}

/* One batch: m's runs [from, from + n), in one statement, on a pooled
 * connection taken for it alone. */
static enum status batch_run(const struct hctx *hc, struct bulk_job *job,
                             const struct bulk_match *m, size_t from, size_t n, struct error *err)
{
    struct bulk_result r = {0};
    struct db *db = NULL;
    enum status st = db_pool_get(hc->pool, &db, err);

    if (st == ST_OK && job->action == BULK_CANCEL)
        st = store_bulk_cancel(db, job->tenant, &job->rq.filter, (const char *const *)m->ids + from,
                               n, &r, err);
    else if (st == ST_OK)
        st = retry_batch(hc, db, job, m, from, n, &r, err);
    db_pool_put(hc->pool, db);
    if (st == ST_OK)
        batch_done(hc, job, &r);
    bulk_result_cleanup(&r);
    return st;
}

static enum status job_match(const struct hctx *hc, struct bulk_job *job, struct bulk_match *m)
{
    struct db *db = NULL;
    enum status st = db_pool_get(hc->pool, &db, &job->err);

    if (st == ST_OK)
        st = store_bulk_match(db, job->tenant, job->action, &job->rq.filter, job->rq.limit + 1, m,
                              &job->err);
    db_pool_put(hc->pool, db);
    if (st == ST_OK && m->n > (size_t)job->rq.limit)
        st = error_set(&job->err, ST_CONFLICT,
                       "more than %d runs match the filter (the request's \"limit\"); nothing "
                       "was changed: narrow the filter, or raise \"limit\" (at most %d)",
                       job->rq.limit, BULK_LIMIT_MAX);
    return st;
}

/* The whole request: match, then batch after batch until done or the
 * runner closes. */
static void job_execute(const struct hctx *hc, struct bulk_job *job)
{
    struct bulk_match m = {0};
    int64_t started = clock_mono_ms();
    size_t i = 0;

    job->st = job_match(hc, job, &m);
    if (job->st == ST_OK)
        job->matched = m.n;
    for (i = 0; job->st == ST_OK && job->rq.dry_run && i < m.n && i < BULK_IDS_MAX; i++)
        json_array_append_new(job->run_ids, json_string(m.ids[i]));
    for (i = 0; job->st == ST_OK && !job->rq.dry_run && i < m.n; i += BULK_BATCH) {
        if (bulk_stopping(job->runner)) {
            job->interrupted = true;
            break;
        }
        job->st = batch_run(hc, job, &m, i, m.n - i < BULK_BATCH ? m.n - i : BULK_BATCH, &job->err);
    }
    LOG(LOG_INFO,
        "bulk %s tenant=%s by=%s matched=%zu acted=%zu dry_run=%s interrupted=%s ms=%lld%s%s",
        job->action == BULK_CANCEL ? "cancel" : "retry", job->tenant, job->initiator, job->matched,
        job->acted, job->rq.dry_run ? "true" : "false", job->interrupted ? "true" : "false",
        (long long)(clock_mono_ms() - started),
        job->st == ST_OK ? "" : " error=", job->st == ST_OK ? "" : job->err.message);
    bulk_match_cleanup(&m);
}

static void job_answer(struct bulk_job *job, struct reply *rp)
{
    char detail[256];

    if (job->st != ST_OK && job->acted == 0) {
        reply_error(rp, job->st, &job->err);
        return;
    }
    if (job->st != ST_OK || job->interrupted) {
        xsnprintf(detail, sizeof(detail),
                  "%s after acting on %zu of %zu runs; send the request again for the rest",
                  job->interrupted ? "the server is shutting down" : "a batch failed", job->acted,
                  job->matched);
        reply_problem_take(rp, job->interrupted ? ST_BUSY : job->st, detail,
                           json_pack("{s:I, s:I}", "matched", (json_int_t)job->matched, "acted",
                                     (json_int_t)job->acted));
        return;
    }
    reply_json_take(rp, 200,
                    json_pack("{s:I, s:I, s:O}", "matched", (json_int_t)job->matched, "acted",
                              (json_int_t)job->acted, "run_ids", job->run_ids));
    if (job->new_ids) {
        json_object_set(rp->body, "new_run_ids", job->new_ids);
        json_object_set_new(rp->body, "joined", json_integer((json_int_t)job->joined));
    }
}

/* ---- the deferred reply and the runner ---------------------------------------- */

static void job_free(struct bulk_job *job)
{
    json_decref(job->run_ids);
    json_decref(job->new_ids);
    free(job);
}

static void job_push(struct bulk *b, struct bulk_job *job)
{
    const char *why = NULL;

    pthread_mutex_lock(&b->mu);
    b->held++;
    if (b->closing)
        why = "the server is shutting down";
    else if (b->queued >= b->queue_max)
        why = "too many bulk actions are waiting";
    if (!why) {
        job->next = NULL;
        if (b->tail)
            b->tail->next = job;
        else
            b->head = job;
        b->tail = job;
        b->queued++;
        pthread_cond_signal(&b->work_cv);
    }
    pthread_mutex_unlock(&b->mu);
    if (why) {
        job->st = error_set(&job->err, ST_BUSY, "%s; retry shortly", why);
        job->done(job->done_arg);
    }
}

static void job_d_start(struct deferred *d, const struct hctx *hc, void (*done)(void *arg),
                        void *arg)
{
    struct bulk_job *job = (struct bulk_job *)d;

    job->done = done;
    job->done_arg = arg;
    job->runner = hc->bulk;
    job_push(hc->bulk, job);
}

static void job_d_finish(struct deferred *d, const struct hctx *hc, const struct request *rq,
                         struct reply *rp)
{
    (void)hc;
    (void)rq;
    job_answer((struct bulk_job *)d, rp);
}

static void job_d_free(struct deferred *d, const struct hctx *hc)
{
    struct bulk_job *job = (struct bulk_job *)d;
    struct bulk *b = job->runner;

    (void)hc;
    job_free(job);
    if (!b)
        return;
    pthread_mutex_lock(&b->mu);
    if (--b->held == 0)
        pthread_cond_broadcast(&b->idle_cv);
    pthread_mutex_unlock(&b->mu);
}

/* A job under the configuration running when it starts, held to its end
 * (config/live.h): its retries take their run types' settings from it. */
static void job_execute_held(const struct hctx *base, struct bulk_job *job)
{
    struct hctx hc = *base;

    if (base->live)
        hc.cfg = cfg_live_hold(base->live);
    job_execute(&hc, job);
    if (base->live)
        cfg_live_release(base->live, hc.cfg);
}

static void *bulk_main(void *arg)
{
    struct bulk *b = arg;
    struct bulk_job *job;

    pthread_mutex_lock(&b->mu);
    for (;;) {
        while (!b->head && !b->closing)
            pthread_cond_wait(&b->work_cv, &b->mu);
        if (!(job = b->head))
            break;
        b->head = job->next;
        if (!b->head)
            b->tail = NULL;
        b->queued--;
        pthread_mutex_unlock(&b->mu);
        if (bulk_stopping(b))
            job->st = error_set(&job->err, ST_BUSY, "the server is shutting down; retry shortly");
        else
            job_execute_held(b->hc, job);
        job->done(job->done_arg); /* the last touch: the job may be freed from here on */
        pthread_mutex_lock(&b->mu);
    }
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

struct bulk *bulk_new(const struct hctx *hc, int threads, int queue_max)
{
    struct bulk *b = xcalloc(1, sizeof(*b));

    b->hc = hc;
    b->want_threads = threads < 1 ? 1 : threads > BULK_THREADS_MAX ? BULK_THREADS_MAX : threads;
    b->queue_max = queue_max < 1 ? 1 : queue_max;
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->work_cv, NULL);
    cond_init_monotonic(&b->idle_cv);
    return b;
}

enum status bulk_start(struct bulk *b, struct error *err)
{
    for (int i = 0; i < b->want_threads; i++) {
        if (pthread_create(&b->threads[i], NULL, bulk_main, b) != 0)
            return error_set(err, ST_INTERNAL, "could not start a bulk action thread");
        b->nthreads++;
    }
    return ST_OK;
}

bool bulk_close(struct bulk *b, int wait_ms)
{
    struct timespec until;
    bool idle;

    pthread_mutex_lock(&b->mu);
    b->closing = true;
    pthread_cond_broadcast(&b->work_cv);
    pthread_mutex_unlock(&b->mu);
    for (int i = 0; i < b->nthreads; i++)
        pthread_join(b->threads[i], NULL);
    b->nthreads = 0;
    abstime_after_ms(&until, wait_ms);
    pthread_mutex_lock(&b->mu);
    while (b->held > 0 && pthread_cond_timedwait(&b->idle_cv, &b->mu, &until) == 0)
        ;
    idle = b->held == 0;
    if (!idle)
        LOG(LOG_WARN, "bulk actions still unanswered after %d ms held=%d", wait_ms, b->held);
    pthread_mutex_unlock(&b->mu);
    return idle;
}

void bulk_free(struct bulk *b)
{
    if (!b)
        return;
    pthread_cond_destroy(&b->work_cv);
    pthread_cond_destroy(&b->idle_cv);
    pthread_mutex_destroy(&b->mu);
    free(b);
}

/* ---- the handlers ---------------------------------------------------------------- */

/* Copies what the job needs of the request: the body is gone by the time
 * a runner's thread takes it. */
static void job_take_request(struct bulk_job *job, const struct request *rq)
{
    struct bulk_filter *f = &job->rq.filter;
    int64_t us;

    xsnprintf(job->tenant, sizeof(job->tenant), "%s", rq->tenant);
    xsnprintf(job->initiator, sizeof(job->initiator), "%s", rq->initiator);
    if (f->type) {
        xsnprintf(job->type, sizeof(job->type), "%s", f->type);
        f->type = job->type;
    }
    if (f->schedule) {
        xsnprintf(job->schedule, sizeof(job->schedule), "%s", f->schedule);
        f->schedule = job->schedule;
    }
    if (f->parent_id) {
        xsnprintf(job->parent_id, sizeof(job->parent_id), "%s", f->parent_id);
        f->parent_id = job->parent_id;
    }
    if (f->created_after && time_parse_rfc3339(f->created_after, &us)) {
        time_format_rfc3339(us, job->after, sizeof(job->after));
        f->created_after = job->after;
    }
    if (f->created_before && time_parse_rfc3339(f->created_before, &us)) {
        time_format_rfc3339(us, job->before, sizeof(job->before));
        f->created_before = job->before;
    }
}

static enum status handle_bulk(const struct hctx *hc, const struct request *rq, struct reply *rp,
                               enum bulk_action action)
{
    struct bulk_job *job = xcalloc(1, sizeof(*job));
    enum status st = bulk_parse(rq->body, &job->rq, &job->err);

    if (st != ST_OK) {
        reply_error(rp, st, &job->err);
        job_free(job);
        return st;
    }
    job->d = (struct deferred){job_d_start, job_d_finish, job_d_free};
    job->action = action;
    job->run_ids = json_array();
    job->new_ids = action == BULK_RETRY ? json_array() : NULL;
    job_take_request(job, rq);
    if (hc->bulk) {
        rp->deferred = &job->d;
        rp->deferred_hc = hc;
        return ST_OK;
    }
    job_execute(hc, job);
    job_answer(job, rp);
    st = job->st;
    job_free(job);
    return st;
}

enum status handle_runs_bulk_cancel(const struct hctx *hc, const struct request *rq,
                                    struct reply *rp)
{
    return handle_bulk(hc, rq, rp, BULK_CANCEL);
}

enum status handle_runs_bulk_retry(const struct hctx *hc, const struct request *rq,
                                   struct reply *rp)
{
    return handle_bulk(hc, rq, rp, BULK_RETRY);
}
