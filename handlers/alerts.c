/* handlers/alerts.c — POST /alerts: validate, route to a run type, settle the
 * identity, insert or join a run. The intake dispatches on the body's shape
 * so the Alertmanager webhook body can sit beside the generic one; what the
 * two share is in intake.c. */
#include "handlers/handlers.h"
#include "handlers/alertmanager.h"
#include "handlers/intake.h"
#include "handlers/labels.h"
#include "handlers/metrics.h"
#include "handlers/submitq.h"

#include "common/canon_json.h"
#include "common/ids.h"
#include "common/log.h"
#include "common/suggest.h"
#include "common/time_rfc3339.h"
#include "store/db.h"
#include "store/runs.h"

#include <stdlib.h>
#include <string.h>

#define ALERT_TYPE_MAX 128
#define DEDUPE_KEY_MAX 512
#define PRIORITY_MIN (-1000)
#define PRIORITY_MAX 1000
#define RUN_ID_MAX 128

static const char *const generic_fields[] = {"alert_type", "data",   "run_id", "dedupe_key",
                                             "priority",   "run_at", "labels", NULL};

static void parse_strings(const json_t *body, struct submission *s, struct error *err)
{
    const json_t *v;

    v = json_object_get(body, "alert_type");
    if (!v)
        error_field(err, ST_INVALID, "alert_type", "is required");
    else if (!json_is_string(v) || json_string_length(v) == 0 ||
             json_string_length(v) > ALERT_TYPE_MAX)
        error_field(err, ST_INVALID, "alert_type", "must be a string of 1 to %d characters",
                    ALERT_TYPE_MAX);
    else
        s->alert_type = json_string_value(v);

    v = json_object_get(body, "run_id");
    if (v && !(json_is_string(v) && run_id_valid(json_string_value(v))))
        error_field(err, ST_INVALID, "run_id", "must match [A-Za-z0-9._:-]{1,128}");
    else if (v)
        s->run_id = json_string_value(v);

    v = json_object_get(body, "dedupe_key");
    if (v && !(json_is_string(v) && json_string_length(v) > 0 &&
               json_string_length(v) <= DEDUPE_KEY_MAX))
        error_field(err, ST_INVALID, "dedupe_key", "must be a string of 1 to %d characters",
                    DEDUPE_KEY_MAX);
    else if (v)
        s->dedupe_key = json_string_value(v);
}

static void parse_others(const json_t *body, struct submission *s, struct error *err)
{
    const json_t *v;

    v = json_object_get(body, "data");
    if (v && !json_is_object(v))
        error_field(err, ST_INVALID, "data", "must be an object");
    else
        s->data = v;

    v = json_object_get(body, "priority");
    if (v && !(json_is_integer(v) && json_integer_value(v) >= PRIORITY_MIN &&
               json_integer_value(v) <= PRIORITY_MAX))
        error_field(err, ST_INVALID, "priority", "must be an integer from %d to %d", PRIORITY_MIN,
                    PRIORITY_MAX);
    else if (v)
        s->priority = (int)json_integer_value(v);

    v = json_object_get(body, "run_at");
    if (v && !(json_is_string(v) && time_parse_rfc3339(json_string_value(v), &s->run_at_us)))
        error_field(err, ST_INVALID, "run_at", "must be an RFC 3339 timestamp");
    else if (v && !time_in_range(s->run_at_us))
        error_field(err, ST_INVALID, "run_at", "must be between years 0001 and 9999 in UTC");
    else if (v)
        s->has_run_at = true;

    s->labels = labels_check(json_object_get(body, "labels"), "labels", err);
}

enum status alerts_parse_generic(const json_t *body, struct submission *out, struct error *err)
{
    const char *key;
    const json_t *val;

    memset(out, 0, sizeof(*out));
    if (!json_is_object(body))
        return error_field(err, ST_INVALID, "body", "must be a JSON object");
    parse_strings(body, out, err);
    parse_others(body, out, err);
    json_object_foreach((json_t *)body, key, val)
    {
        if (!str_in(key, generic_fields))
            error_field(err, ST_INVALID, key, "is not a known field");
    }
    return err && err->nfields > 0 ? ST_INVALID : ST_OK;
}

/* Fills the identity and request hashes of a submission; ST_INTERNAL when
 * a canonical JSON text cannot be built (jansson could not allocate). */
static enum status submission_hashes(const char *tenant, const struct run_type *rt,
                                     const struct submission *s, const json_t *body,
                                     char identity[65], char request[65], struct error *err)
{
    enum status st = intake_request_hash(body, request, err);
    char *canon;

    if (st != ST_OK)
        return st;
    if (s->dedupe_key) {
        identity_hash(tenant, rt->name, "dedupe_key", s->dedupe_key, identity);
    } else if (s->run_id) {
        identity_hash(tenant, rt->name, "run_id", s->run_id, identity);
    } else {
        canon = canon_json(s->data);
        if (!canon)
            return error_set(err, ST_INTERNAL, "could not build the canonical JSON of \"data\"");
        identity_hash(tenant, rt->name, "data", canon, identity);
        free(canon);
    }
    return ST_OK;
}

/* The long-poll's refresh: the run's status and outcome as they are now,
 * in the answer the submission got. */
static enum status alerts_refresh(const struct hctx *hc, const struct request *rq, struct reply *rp)
{
    struct error err = {0};
    struct run *run = NULL;
    struct db *db = NULL;
    enum status st = db_pool_get(hc->pool, &db, &err);

    (void)rq; /* the run's tenant was noted in rp when the wait began */

    if (st == ST_OK)
        st = store_runs_get(db, rp->wait_tenant, rp->wait_run_id, &run, &err);
    db_pool_put(hc->pool, db);
    if (st == ST_OK) {
        json_object_set_new(rp->body, "status", json_string(run_status_name(run->status)));
        json_object_set_new(rp->body, "outcome", json_string(run_outcome_name(run->outcome)));
    } else {
        LOG(LOG_WARN, "could not refresh run=%s for a long-poll: %s", rp->wait_run_id, err.message);
    }
    if (st != ST_OK || run_is_terminal(run))
        rp->wait_ms = 0;
    run_free(run);
    return st;
}

/* A valid generic body as the run to insert or join; its strings live
 * here, its input is a reference. */
struct prepared {
    struct run_new rn;
    char id[RUN_ID_MAX + 2], identity[65], request[65], run_at[40];
    json_t *input;
};

static void prepared_cleanup(struct prepared *p)
{
    json_decref(p->input);
    p->input = NULL;
}

/* The run types an unknown alert_type's detail lists: the first ones, as
 * many as fit in cap bytes, then how many more there are. */
#define KNOWN_TYPES_SHOWN 20
static void known_types(const struct config *cfg, char *buf, size_t cap)
{
    size_t len = 0, shown = 0;

    buf[0] = '\0';
    if (cfg->nrun_types == 0) {
        xsnprintf(buf, cap, "no run types are configured");
        return;
    }
    len = xsnprintf(buf, cap, "known run types: ");
    for (; shown < cfg->nrun_types && shown < KNOWN_TYPES_SHOWN; shown++) {
        const char *name = cfg->run_types[shown].name;
        /* room for this name and for ", and N more" after it */
        if (len + strlen(name) + 2 + 24 >= cap)
            break;
        len += xsnprintf(buf + len, cap - len, "%s%s", shown ? ", " : "", name);
    }
    if (shown < cfg->nrun_types)
        xsnprintf(buf + len, cap - len, ", and %zu more", cfg->nrun_types - shown);
}

/* 422 for an alert_type that no route and no run type takes: the detail
 * lists the known run types, and both it and the field name the nearest
 * one when alert_type looks like a typo of it. */
static enum status unknown_alert_type(const struct config *cfg, const char *alert_type,
                                      struct error *err)
{
    char hint[96], known[224];
    struct suggest s;

    suggest_init(&s, alert_type);
    cfg_run_type_suggest(cfg, &s);
    suggest_hint(&s, hint, sizeof(hint));
    known_types(cfg, known, sizeof(known));
    error_field(err, ST_UNPROCESSABLE, "alert_type", "no route or run type matches \"%s\"%s",
                alert_type, hint);
    return error_set(err, ST_UNPROCESSABLE,
                     "invalid \"alert_type\": no route or run type matches \"%s\" (%s)%s",
                     alert_type, known, hint);
}

/* The run's input can make its type's concurrency key: else 400 naming
 * "data" and the pointer. */
static enum status data_conc_check(const struct run_type *rt, const char *tenant,
                                   const json_t *input, struct error *err)
{
    struct error one = {0};

    if (intake_conc_check(rt, tenant, input, &one) != ST_OK)
        return error_field(err, ST_INVALID, "data", "%s", one.message);
    return ST_OK;
}

/* Validates one generic body, routes it, checks its concurrency key and
 * settles its hashes. */
static enum status alerts_prepare(const struct hctx *hc, const struct request *rq,
                                  const json_t *body, struct prepared *p, struct error *err)
{
    struct submission s;
    const struct run_type *rt;
    enum status st = alerts_parse_generic(body, &s, err);

    memset(p, 0, sizeof(*p));
    if (st != ST_OK)
        return st;
    rt = cfg_route(hc->cfg, s.alert_type, s.labels, NULL);
    if (!rt)
        return unknown_alert_type(hc->cfg, s.alert_type, err);
    p->input = s.data ? json_incref((json_t *)s.data) : json_object();
    s.data = p->input;
    st = data_conc_check(rt, rq->tenant, p->input, err);
    if (st == ST_OK)
        st = submission_hashes(rq->tenant, rt, &s, body, p->identity, p->request, err);
    if (st != ST_OK) {
        prepared_cleanup(p);
        return st;
    }
    if (s.has_run_at)
        time_format_rfc3339(s.run_at_us, p->run_at, sizeof(p->run_at));
    if (s.run_id)
        xsnprintf(p->id, sizeof(p->id), "%s", s.run_id);
    else
        run_id_new(p->id);
    p->rn = (struct run_new){
        .tenant = rq->tenant,
        .id = p->id,
        .type = rt->name,
        .priority = s.priority,
        .run_at = s.has_run_at ? p->run_at : NULL,
        .max_attempts = rt->max_attempts,
        .timeout_s = (int)rt->timeout_s,
        .input = p->input,
        .identity_hash = p->identity,
        .request_hash = p->request,
        .initiator = rq->initiator,
        .approval_timeout_s = rt->approval.timeout_s,
        .approve_on_timeout = rt->approval.approve_on_timeout,
    };
    return ST_OK;
}

/* The submissions of one request, written by the queue (or at once
 * without one), then answered. */
struct alerts_job {
    struct deferred d; /* first: the server sees only this */
    struct submit_batch *b;
    bool array, pushed;
    int64_t wait_ms;
    size_t nbody;     /* array: the body's items */
    long *item_of;    /* array: per body item, its index in b, or -1 */
    json_t **problem; /* array: per body item, its problem, or NULL */
};

static void alerts_job_start(struct deferred *d, const struct hctx *hc, void (*done)(void *arg),
                             void *arg)
{
    struct alerts_job *job = (struct alerts_job *)d;

    job->pushed = true;
    submitq_push(hc->submitq, job->b, done, arg);
}

static void alerts_job_free(struct deferred *d, const struct hctx *hc)
{
    struct alerts_job *job = (struct alerts_job *)d;

    if (job->pushed)
        submitq_release(hc->submitq);
    submit_batch_free(job->b);
    for (size_t i = 0; i < job->nbody; i++)
        json_decref(job->problem[i]);
    free(job->problem);
    free(job->item_of);
    free(job);
}

/* A problem object (RFC 9457) for one item of an array. */
static json_t *item_problem(enum status st, const struct error *err)
{
    struct reply tmp;
    json_t *j;

    reply_init(&tmp);
    reply_error(&tmp, st, err);
    j = tmp.body;
    tmp.body = NULL;
    reply_cleanup(&tmp);
    return j;
}

/* The answer for one stored item: the run, or why it is not. */
static enum status item_answer(const struct run_submitted *o, struct error *err)
{
    return o->st == ST_OK ? ST_OK : error_set(err, o->st, "%s", o->message);
}

/* One generic body's answer, as a submission always had; a failure is
 * left in err for the caller to answer. */
static enum status alerts_finish_one(struct alerts_job *job, struct reply *rp, struct error *err)
{
    const struct run_submitted *o = &job->b->out[0];
    const struct run *run = o->run;
    char loc[200];

    if (job->b->st != ST_OK) {
        *err = job->b->err;
        return job->b->st;
    }
    if (item_answer(o, err) != ST_OK)
        return o->st;
    xsnprintf(rp->run_id, sizeof(rp->run_id), "%s", run->id);
    if (!o->dedup) {
        xsnprintf(loc, sizeof(loc), "/runs/%s", run->id);
        reply_header(rp, "Location", loc);
    }
    reply_json_take(rp, o->dedup ? 200 : 202, intake_result(run, o->dedup));
    if (job->wait_ms > 0 && !run_is_terminal(run)) {
        rp->wait_ms = job->wait_ms;
        xsnprintf(rp->wait_tenant, sizeof(rp->wait_tenant), "%s", run->tenant);
        xsnprintf(rp->wait_run_id, sizeof(rp->wait_run_id), "%s", run->id);
        rp->refresh = alerts_refresh;
    }
    return ST_OK;
}

/* An array's answer: {"runs": [...]}, one entry per body item, in order. */
static void alerts_finish_array(struct alerts_job *job, struct reply *rp)
{
    json_t *runs = json_array();
    struct error err;

    for (size_t i = 0; i < job->nbody; i++) {
        const struct run_submitted *o = job->item_of[i] >= 0 ? &job->b->out[job->item_of[i]] : NULL;
        memset(&err, 0, sizeof(err));
        if (job->problem[i])
            json_array_append(runs, job->problem[i]);
        else if (item_answer(o, &err) != ST_OK)
            json_array_append_new(runs, item_problem(o->st, &err));
        else
            json_array_append_new(runs, intake_result(o->run, o->dedup));
    }
    reply_json_take(rp, 200, json_pack("{s:o}", "runs", runs));
}

/* The job's answer; a failure of the whole request is left in err. */
static enum status alerts_job_answer(struct alerts_job *job, struct reply *rp, struct error *err)
{
    if (!job->array)
        return alerts_finish_one(job, rp, err);
    if (job->b->n > 0 && job->b->st != ST_OK) {
        *err = job->b->err;
        return job->b->st;
    }
    alerts_finish_array(job, rp);
    return ST_OK;
}

static void alerts_job_finish(struct deferred *d, const struct hctx *hc, const struct request *rq,
                              struct reply *rp)
{
    struct error err = {0};
    enum status st = alerts_job_answer((struct alerts_job *)d, rp, &err);

    (void)hc;
    (void)rq;
    if (st != ST_OK)
        reply_error(rp, st, &err);
}

static struct alerts_job *alerts_job_new(size_t nitems)
{
    struct alerts_job *job = xcalloc(1, sizeof(*job));

    job->d = (struct deferred){alerts_job_start, alerts_job_finish, alerts_job_free};
    job->b = submit_batch_new(nitems);
    return job;
}

/* Hands the job to the queue as the reply's deferred part, or, without a
 * queue (or with nothing to write), writes it here and answers; a failure
 * of the whole request is left in err. */
static enum status alerts_job_run(const struct hctx *hc, struct alerts_job *job, struct reply *rp,
                                  struct error *err)
{
    enum status st;

    if (hc->submitq && job->b->n > 0) {
        rp->deferred = &job->d;
        rp->deferred_hc = hc;
        return ST_OK;
    }
    if (job->b->n > 0)
        submit_batch_run(hc, job->b);
    st = alerts_job_answer(job, rp, err);
    alerts_job_free(&job->d, hc);
    return st;
}

static enum status alerts_generic(const struct hctx *hc, const struct request *rq, struct reply *rp,
                                  struct error *err)
{
    struct prepared p;
    struct alerts_job *job;
    int64_t wait_ms = 0;
    enum status st = parse_wait(rq, &wait_ms, err);

    if (st == ST_OK)
        st = alerts_prepare(hc, rq, rq->body, &p, err);
    if (st != ST_OK)
        return st;
    job = alerts_job_new(1);
    job->wait_ms = wait_ms;
    submit_batch_set(job->b, 0, &p.rn);
    prepared_cleanup(&p);
    return alerts_job_run(hc, job, rp, err);
}

/* Checks an array body's size and the query before any item is read. */
static enum status alerts_array_check(const struct request *rq, size_t n, struct error *err)
{
    int64_t wait_ms = 0;
    enum status st = parse_wait(rq, &wait_ms, err);

    if (st != ST_OK)
        return st;
    if (wait_ms > 0)
        return error_field(err, ST_INVALID, "wait", "is not supported with an array body");
    if (n == 0)
        return error_field(err, ST_INVALID, "body", "must hold 1 to %d submissions",
                           ALERTS_BATCH_MAX);
    if (n > ALERTS_BATCH_MAX)
        return error_set(err, ST_TOO_LARGE, "an array body holds at most %d submissions, not %zu",
                         ALERTS_BATCH_MAX, n);
    return ST_OK;
}

/* A JSON array of generic bodies: each valid item is written with the
 * others in one batch; an invalid one is answered with its problem. */
static enum status alerts_array(const struct hctx *hc, const struct request *rq, struct reply *rp,
                                struct error *err)
{
    size_t n = json_array_size(rq->body), nvalid = 0;
    struct prepared *p;
    struct alerts_job *job;
    struct error ierr;
    enum status st = alerts_array_check(rq, n, err);

    if (st != ST_OK)
        return st;
    p = xcalloc(n, sizeof(*p));
    job = alerts_job_new(0);
    job->array = true;
    job->nbody = n;
    job->item_of = xcalloc(n, sizeof(*job->item_of));
    /* An array of pointers (see .clang-tidy). NOLINTNEXTLINE(bugprone-sizeof-expression) */
    job->problem = xcalloc(n, sizeof(*job->problem));
    for (size_t i = 0; i < n; i++) {
        memset(&ierr, 0, sizeof(ierr));
        st = alerts_prepare(hc, rq, json_array_get(rq->body, i), &p[i], &ierr);
        job->item_of[i] = st == ST_OK ? (long)nvalid++ : -1;
        if (st != ST_OK)
            job->problem[i] = item_problem(st, &ierr);
    }
    submit_batch_free(job->b);
    job->b = submit_batch_new(nvalid);
    for (size_t i = 0; i < n; i++) {
        if (job->item_of[i] >= 0)
            submit_batch_set(job->b, (size_t)job->item_of[i], &p[i].rn);
        prepared_cleanup(&p[i]);
    }
    free(p);
    return alerts_job_run(hc, job, rp, err);
}

static bool is_alertmanager(const json_t *body)
{
    return json_is_object(body) && json_object_get(body, "alerts") &&
           json_object_get(body, "version") && !json_object_get(body, "alert_type");
}

enum status handle_alerts_create(const struct hctx *hc, const struct request *rq, struct reply *rp)
{
    struct error err = {0};
    enum status st;

    if (is_alertmanager(rq->body))
        st = alerts_alertmanager(hc, rq, rp, &err);
    else if (json_is_array(rq->body))
        st = alerts_array(hc, rq, rp, &err);
    else
        st = alerts_generic(hc, rq, rp, &err);
    if (st != ST_OK)
        reply_error(rp, st, &err);
    return st;
}
