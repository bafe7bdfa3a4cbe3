/* common/metrics.c — the metrics registry and its text exposition
 * (common/metrics.h). */
#include "metrics.h"

#include <assert.h>
#include <math.h>
#include <stdatomic.h>

#define LABELS_MAX 2
/* The label value indexes of one series, as series_of takes them: always
 * LABELS_MAX of them, the ones past a family's labels unused. */
#define IDX(...) ((const size_t[LABELS_MAX]){__VA_ARGS__})
#define BUCKETS_MAX 24 /* bounds of a histogram, +Inf not counted */

/* The label sets. A family names up to LABELS_MAX of them. */
enum label_set {
    L_NONE,
    L_TYPE,
    L_OUTCOME,
    L_CHECK,
    L_HOOK,
    L_ROUTE,
    L_CODE,
    L_SCHEDULE,
    L_SLOT,
    L_LIMIT,
    L_NOTIFIER,
    L_DELIVERY,
    L_COUNT
};

static const char *const check_results[] = {METRICS_CHECK_RUNNING, METRICS_CHECK_ENDED,
                                            METRICS_CHECK_ERROR, METRICS_CHECK_ABORTED};
static const char *const hook_results[] = {"ok", "failed"};
static const char *const slot_results[] = {METRICS_SLOT_CREATED, METRICS_SLOT_SKIPPED_OVERLAP,
                                           METRICS_SLOT_SKIPPED_PAUSED, METRICS_SLOT_MISSED};
static const char *const delivery_results[] = {METRICS_NOTIFY_DELIVERED, METRICS_NOTIFY_RETRIED,
                                               METRICS_NOTIFY_GAVE_UP};
/* The status codes opsrun answers with; any other is counted as "other". */
static const unsigned http_codes[] = {200, 201, 202, 204, 304, 400, 401, 403, 404, 405,
                                      408, 409, 413, 415, 422, 429, 500, 502, 503, 504};
#define ROUTE_UNMATCHED "unmatched"
#define CODE_OTHER "other"

/* One family: a cell per combination of label values (the series), in
 * row-major order of the labels. */
struct family {
    const char *name, *help;
    bool histogram, sparse; /* sparse: series still zero are not written */
    size_t nlabels;
    enum label_set labels[LABELS_MAX];
    const double *bounds; /* histograms: upper bounds, ascending, +Inf implied */
    size_t nbounds;
    size_t nseries;
    _Atomic uint64_t *cells; /* counters: [series]; histograms: [series][nbounds + 1] */
    _Atomic uint64_t *sums;  /* histograms: [series], the bits of a double */
};

enum family_id {
    F_SUBMITTED,
    F_COMPLETED,
    F_RETRIED,
    F_DURATION,
    F_QUEUE_WAIT,
    F_CLAIM,
    F_CHECKS,
    F_BUDGET,
    F_HOOKS,
    F_HTTP,
    F_HTTP_DURATION,
    F_SCHEDULE,
    F_RATE_WAITS,
    F_NOTIFY,
    F_NOTIFY_LATENCY,
    F_LOG_LINES,
    F_LOG_DROPPED,
    F_COUNT
};

static const double run_buckets[] = {0.1, 0.25, 0.5, 1,   2.5, 5,    10,  30,
                                     60,  120,  300, 600, 900, 1800, 3600};
static const double wait_buckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                      2.5,   5,    10,    30,   60,  300,  900};
static const double claim_buckets[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                       0.1,   0.25,   0.5,   1,    2.5,   5};
static const double http_buckets[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                      0.25,   0.5,   1,      2.5,   5,    10,    30,   60};

/* The catalogue: every family the registry records. docs/operations.md
 * has the same list for operators. */
/* clang-format off */
static const struct family catalogue[F_COUNT] = {
    [F_SUBMITTED] = {.name = "opsrun_runs_submitted_total",
        .help = "Runs stored by submissions to this process (a submission that joined an active "
                "run is not counted).",
        .nlabels = 1, .labels = {L_TYPE}},
    [F_COMPLETED] = {.name = "opsrun_runs_completed_total",
        .help = "Runs this process completed (worker, poller, cancel or orphan scan), by outcome.",
        .nlabels = 2, .labels = {L_TYPE, L_OUTCOME}},
    [F_RETRIED] = {.name = "opsrun_run_retries_total",
        .help = "Failed attempts this process sent back to the queue for another attempt.",
        .nlabels = 1, .labels = {L_TYPE}},
    [F_DURATION] = {.name = "opsrun_run_duration_seconds",
        .help = "Time from a run's first start to its completion, for runs this process completed "
                "after they started.",
        .histogram = true, .nlabels = 1, .labels = {L_TYPE},
        .bounds = run_buckets, .nbounds = ARRAY_LEN(run_buckets)},
    [F_QUEUE_WAIT] = {.name = "opsrun_run_queue_wait_seconds",
        .help = "Time a run was due before this process claimed it (each attempt).",
        .histogram = true, .nlabels = 1, .labels = {L_TYPE},
        .bounds = wait_buckets, .nbounds = ARRAY_LEN(wait_buckets)},
    [F_CLAIM] = {.name = "opsrun_claim_duration_seconds",
        .help = "Time one claim statement took, the wait for the claim lock included.",
        .histogram = true, .bounds = claim_buckets, .nbounds = ARRAY_LEN(claim_buckets)},
    [F_CHECKS] = {.name = "opsrun_poll_checks_total",
        .help = "Checks of waiting runs' external jobs made by this process, by result (running, "
                "ended, error, aborted).",
        .nlabels = 2, .labels = {L_TYPE, L_CHECK}},
    [F_BUDGET] = {.name = "opsrun_poll_budget_exhausted_total",
        .help = "Waiting runs this process ended timed_out because their poll budget was spent.",
        .nlabels = 1, .labels = {L_TYPE}},
    [F_HOOKS] = {.name = "opsrun_poll_hooks_total",
        .help = "Runs of the remote cancel and cleanup hooks after a waiting run ended, by result "
                "(ok, failed).",
        .nlabels = 2, .labels = {L_TYPE, L_HOOK}},
    [F_HTTP] = {.name = "opsrun_http_requests_total",
        .help = "HTTP requests answered, by route template and status code.",
        .sparse = true, .nlabels = 2, .labels = {L_ROUTE, L_CODE}},
    [F_HTTP_DURATION] = {.name = "opsrun_http_request_duration_seconds",
        .help = "Time from a request's arrival to the end of its answer (for streams and "
                "long-polls, the time they stayed open).",
        .histogram = true, .sparse = true, .nlabels = 1, .labels = {L_ROUTE},
        .bounds = http_buckets, .nbounds = ARRAY_LEN(http_buckets)},
    [F_SCHEDULE] = {.name = "opsrun_schedule_runs_total",
        .help = "Slots of schedules this process took, by result (created, skipped_overlap, "
                "skipped_paused, missed).",
        .nlabels = 2, .labels = {L_SCHEDULE, L_SLOT}},
    [F_RATE_WAITS] = {.name = "opsrun_rate_limit_waits_total",
        .help = "Times this process held back a start or a check because its rate limit had no "
                "unit left.",
        .nlabels = 1, .labels = {L_LIMIT}},
    [F_NOTIFY] = {.name = "opsrun_notifications_total",
        .help = "Attempts of this process to deliver notifications, by notifier and result "
                "(delivered, retried, gave_up).",
        .nlabels = 2, .labels = {L_NOTIFIER, L_DELIVERY}},
    [F_NOTIFY_LATENCY] = {.name = "opsrun_notification_latency_seconds",
        .help = "Time from the transition that owed a notification to its delivery (the "
                "receiver's 2xx), for deliveries this process made.",
        .histogram = true, .nlabels = 1, .labels = {L_NOTIFIER},
        .bounds = wait_buckets, .nbounds = ARRAY_LEN(wait_buckets)},
    [F_LOG_LINES] = {.name = "opsrun_log_lines_total",
        .help = "Lines of runs' logs this process wrote."},
    [F_LOG_DROPPED] = {.name = "opsrun_log_bytes_dropped_total",
        .help = "Bytes of runs' output this process left out of their logs: past "
                "logs.max_bytes_per_attempt, or cut from lines longer than logs.max_line_bytes."},
};
/* clang-format on */

/* A label's values. Those of the sets a reload may grow (run types,
 * schedules, rate limits, notifiers) have room for METRICS_LABELS_ADDED_MAX
 * more than at start, and each family's cells are laid out for cap values
 * from the start: a value added later only takes the next slot and
 * publishes it by its count (release), so recording reads the count
 * (acquire) and the slots under it without a lock, and nothing moves. A
 * value is never removed: its counters stay. */
struct label_values {
    const char *name;
    char **v;         /* cap slots; [0, n) hold owned copies */
    _Atomic size_t n; /* written under metrics.labels_mu only */
    size_t cap;
};

struct metrics {
    struct label_values sets[L_COUNT];
    struct family f[F_COUNT];
    char *version, *commit;
    int64_t start_wall_ms;
    pthread_mutex_t labels_mu; /* one writer of the label sets at a time */

    /* the single-flight cache */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool busy, have;
    int64_t at_ms; /* monotonic: when the value was stored */
    unsigned char value[METRICS_CACHE_MAX];
};

/* ---- setup ------------------------------------------------------------- */

static size_t set_len(const struct label_values *s)
{
    return atomic_load_explicit(&s->n, memory_order_acquire);
}

/* Adds v to the set unless it is there already; false when there is no
 * room left for it. One writer at a time (setup, or labels_mu). */
static bool set_add(struct label_values *s, const char *v)
{
    size_t n = atomic_load_explicit(&s->n, memory_order_relaxed);

    for (size_t i = 0; i < n; i++)
        if (strcmp(s->v[i], v) == 0)
            return true;
    if (n == s->cap)
        return false;
    s->v[n] = xstrdup(v);
    atomic_store_explicit(&s->n, n + 1, memory_order_release);
    return true;
}

/* A set of the n values of v (repeats merged), with room for extra more. */
static void set_fill(struct label_values *s, const char *name, const char *const *v, size_t n,
                     size_t extra)
{
    s->name = name;
    s->cap = n + extra;
    s->v = xcalloc(s->cap ? s->cap : 1, sizeof(*s->v));
    atomic_init(&s->n, 0);
    for (size_t i = 0; i < n; i++)
        (void)set_add(s, v[i]); /* room for all n */
}

static void sets_init(struct metrics *m, const struct metrics_setup *su)
{
    const size_t more = METRICS_LABELS_ADDED_MAX;
    char code[8];

    set_fill(&m->sets[L_TYPE], "type", su->types, su->ntypes, more);
    set_fill(&m->sets[L_OUTCOME], "outcome", su->outcomes, su->noutcomes, 0);
    set_fill(&m->sets[L_CHECK], "result", check_results, ARRAY_LEN(check_results), 0);
    set_fill(&m->sets[L_HOOK], "result", hook_results, ARRAY_LEN(hook_results), 0);
    set_fill(&m->sets[L_ROUTE], "route", su->routes, su->nroutes, 1);
    (void)set_add(&m->sets[L_ROUTE], ROUTE_UNMATCHED);
    set_fill(&m->sets[L_CODE], "code", NULL, 0, ARRAY_LEN(http_codes) + 1);
    for (size_t i = 0; i < ARRAY_LEN(http_codes); i++) {
        xsnprintf(code, sizeof(code), "%u", http_codes[i]);
        (void)set_add(&m->sets[L_CODE], code);
    }
    (void)set_add(&m->sets[L_CODE], CODE_OTHER);
    set_fill(&m->sets[L_SCHEDULE], "schedule", su->schedules, su->nschedules, more);
    set_fill(&m->sets[L_SLOT], "result", slot_results, ARRAY_LEN(slot_results), 0);
    set_fill(&m->sets[L_LIMIT], "limit", su->limits, su->nlimits, more);
    set_fill(&m->sets[L_NOTIFIER], "notifier", su->notifiers, su->nnotifiers, more);
    set_fill(&m->sets[L_DELIVERY], "result", delivery_results, ARRAY_LEN(delivery_results), 0);
}

/* The values of v not in set id yet; how many found no room. */
static size_t set_grow(struct metrics *m, enum label_set id, const char *const *v, size_t n)
{
    size_t dropped = 0;

    for (size_t i = 0; i < n; i++)
        dropped += !set_add(&m->sets[id], v[i]);
    return dropped;
}

size_t metrics_add_labels(struct metrics *m, const struct metrics_setup *more)
{
    size_t dropped;

    if (!m)
        return 0;
    pthread_mutex_lock(&m->labels_mu);
    dropped = set_grow(m, L_TYPE, more->types, more->ntypes);
    dropped += set_grow(m, L_SCHEDULE, more->schedules, more->nschedules);
    dropped += set_grow(m, L_LIMIT, more->limits, more->nlimits);
    dropped += set_grow(m, L_NOTIFIER, more->notifiers, more->nnotifiers);
    pthread_mutex_unlock(&m->labels_mu);
    return dropped;
}

static void family_init(struct metrics *m, struct family *f)
{
    size_t per = f->histogram ? f->nbounds + 1 : 1;

    assert(f->nbounds <= BUCKETS_MAX);
    f->nseries = 1; /* every series the label sets have room for */
    for (size_t i = 0; i < f->nlabels; i++)
        f->nseries *= m->sets[f->labels[i]].cap;
    f->cells = xcalloc(f->nseries * per, sizeof(*f->cells));
    if (f->histogram)
        f->sums = xcalloc(f->nseries, sizeof(*f->sums));
}

struct metrics *metrics_new(const struct metrics_setup *setup)
{
    struct metrics *m = xcalloc(1, sizeof(*m));

    sets_init(m, setup);
    for (size_t i = 0; i < F_COUNT; i++) {
        m->f[i] = catalogue[i];
        family_init(m, &m->f[i]);
    }
    m->version = xstrdup(setup->version ? setup->version : "unknown");
    m->commit = xstrdup(setup->commit ? setup->commit : "unknown");
    m->start_wall_ms = clock_wall_ms();
    pthread_mutex_init(&m->labels_mu, NULL);
    pthread_mutex_init(&m->mu, NULL);
    cond_init_monotonic(&m->cv);
    return m;
}

void metrics_free(struct metrics *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < F_COUNT; i++) {
        free(m->f[i].cells);
        free(m->f[i].sums);
    }
    for (size_t i = 0; i < L_COUNT; i++) {
        for (size_t k = 0; k < set_len(&m->sets[i]); k++)
            free(m->sets[i].v[k]);
        free(m->sets[i].v);
    }
    pthread_mutex_destroy(&m->labels_mu);
    pthread_cond_destroy(&m->cv);
    pthread_mutex_destroy(&m->mu);
    free(m->version);
    free(m->commit);
    free(m);
}

/* ---- recording --------------------------------------------------------- */

/* The index of v in set s, or SIZE_MAX when it is not one of its values. */
static size_t value_index(const struct metrics *m, enum label_set s, const char *v)
{
    const struct label_values *lv = &m->sets[s];
    size_t n = set_len(lv);

    for (size_t i = 0; v && i < n; i++)
        if (strcmp(lv->v[i], v) == 0)
            return i;
    return SIZE_MAX;
}

/* The series of the label value indexes idx (one per label of f), or
 * SIZE_MAX when one of them is unknown. */
static size_t series_of(const struct metrics *m, const struct family *f, const size_t *idx)
{
    size_t s = 0;

    assert(f->nlabels <= LABELS_MAX);
    for (size_t i = 0; i < f->nlabels; i++) {
        if (idx[i] == SIZE_MAX)
            return SIZE_MAX;
        s = s * m->sets[f->labels[i]].cap + idx[i];
    }
    return s;
}

static void count_n(struct metrics *m, enum family_id id, const size_t *idx, uint64_t n)
{
    const struct family *f = &m->f[id];
    size_t s = series_of(m, f, idx);

    if (s != SIZE_MAX)
        atomic_fetch_add_explicit(&f->cells[s], n, memory_order_relaxed);
}

static void count(struct metrics *m, enum family_id id, const size_t *idx)
{
    count_n(m, id, idx, 1);
}

static void observe(struct metrics *m, enum family_id id, const size_t *idx, double v)
{
    const struct family *f = &m->f[id];
    size_t s = series_of(m, f, idx), b = 0;
    uint64_t old, new;
    double sum;

    if (s == SIZE_MAX || isnan(v))
        return;
    if (v < 0)
        v = 0; /* clocks of two hosts can disagree by a little */
    while (b < f->nbounds && v > f->bounds[b])
        b++;
    atomic_fetch_add_explicit(&f->cells[s * (f->nbounds + 1) + b], 1, memory_order_relaxed);
    old = atomic_load_explicit(&f->sums[s], memory_order_relaxed);
    do {
        memcpy(&sum, &old, sizeof(sum));
        sum += v;
        memcpy(&new, &sum, sizeof(new));
    } while (!atomic_compare_exchange_weak_explicit(&f->sums[s], &old, new, memory_order_relaxed,
                                                    memory_order_relaxed));
}

void metrics_run_submitted(struct metrics *m, const char *type)
{
    if (m)
        count(m, F_SUBMITTED, IDX(value_index(m, L_TYPE, type)));
}

void metrics_run_claimed(struct metrics *m, const char *type, double queue_wait_s)
{
    if (m)
        observe(m, F_QUEUE_WAIT, IDX(value_index(m, L_TYPE, type)), queue_wait_s);
}

void metrics_claim_latency(struct metrics *m, double seconds)
{
    if (m)
        observe(m, F_CLAIM, IDX(0), seconds);
}

void metrics_log_lines(struct metrics *m, int64_t lines, int64_t dropped)
{
    if (!m)
        return;
    if (lines > 0)
        count_n(m, F_LOG_LINES, IDX(0), (uint64_t)lines);
    if (dropped > 0)
        count_n(m, F_LOG_DROPPED, IDX(0), (uint64_t)dropped);
}

void metrics_run_retried(struct metrics *m, const char *type)
{
    if (m)
        count(m, F_RETRIED, IDX(value_index(m, L_TYPE, type)));
}

void metrics_run_completed(struct metrics *m, const char *type, const char *outcome,
                           double duration_s)
{
    size_t t, o;

    if (!m)
        return;
    t = value_index(m, L_TYPE, type);
    o = value_index(m, L_OUTCOME, outcome);
    if (o == SIZE_MAX)
        return;
    count(m, F_COMPLETED, IDX(t, o));
    if (duration_s >= 0)
        observe(m, F_DURATION, IDX(t), duration_s);
}

void metrics_poll_check(struct metrics *m, const char *type, const char *result)
{
    if (m)
        count(m, F_CHECKS, IDX(value_index(m, L_TYPE, type), value_index(m, L_CHECK, result)));
}

void metrics_poll_budget_exhausted(struct metrics *m, const char *type)
{
    if (m)
        count(m, F_BUDGET, IDX(value_index(m, L_TYPE, type)));
}

void metrics_poll_hooks(struct metrics *m, const char *type, bool failed)
{
    if (m)
        count(m, F_HOOKS, IDX(value_index(m, L_TYPE, type), failed ? 1 : 0));
}

void metrics_schedule_slot(struct metrics *m, const char *schedule, const char *result, int64_t n)
{
    if (m && n > 0)
        count_n(m, F_SCHEDULE,
                IDX(value_index(m, L_SCHEDULE, schedule), value_index(m, L_SLOT, result)),
                (uint64_t)n);
}

void metrics_rate_limit_wait(struct metrics *m, const char *limit, int64_t n)
{
    if (m && n > 0)
        count_n(m, F_RATE_WAITS, IDX(value_index(m, L_LIMIT, limit)), (uint64_t)n);
}

void metrics_notification(struct metrics *m, const char *notifier, const char *result,
                          double latency_s)
{
    size_t n;

    if (!m)
        return;
    n = value_index(m, L_NOTIFIER, notifier);
    count(m, F_NOTIFY, IDX(n, value_index(m, L_DELIVERY, result)));
    if (latency_s >= 0)
        observe(m, F_NOTIFY_LATENCY, IDX(n), latency_s);
}

void metrics_http_request(struct metrics *m, const char *route, unsigned code, double seconds)
{
    size_t r, c = ARRAY_LEN(http_codes); /* CODE_OTHER comes last */

    if (!m)
        return;
    r = value_index(m, L_ROUTE, route ? route : ROUTE_UNMATCHED);
    for (size_t i = 0; i < ARRAY_LEN(http_codes); i++)
        if (http_codes[i] == code)
            c = i;
    count(m, F_HTTP, IDX(r, c));
    observe(m, F_HTTP_DURATION, IDX(r), seconds);
}

/* ---- exposition -------------------------------------------------------- */

/* The shortest text that reads back as v ("0.1", not "0.10000000000000001"),
 * as Prometheus writes numbers; "+Inf" and "NaN" as the format has them. */
static void format_double(double v, char out[32])
{
    if (isnan(v)) {
        xsnprintf(out, 32, "NaN");
        return;
    }
    if (isinf(v)) {
        xsnprintf(out, 32, "%sInf", v > 0 ? "+" : "-");
        return;
    }
    if (v == floor(v) && fabs(v) < 1e15) {
        xsnprintf(out, 32, "%.0f", v);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        xsnprintf(out, 32, "%.*g", prec, v);
        if (strtod(out, NULL) == v)
            return;
    }
}

/* Appends s with the escapes the format wants: backslash and newline in
 * HELP text, and also the double quote in a label value. */
static enum status put_escaped(struct dynbuf *out, const char *s, bool quote)
{
    enum status st = ST_OK;

    for (; *s && st == ST_OK; s++) {
        if (*s == '\\')
            st = dynbuf_adds(out, "\\\\");
        else if (*s == '\n')
            st = dynbuf_adds(out, "\\n");
        else if (*s == '"' && quote)
            st = dynbuf_adds(out, "\\\"");
        else
            st = dynbuf_add(out, s, 1);
    }
    return st;
}

enum status metrics_put_header(struct dynbuf *out, const char *name, const char *type,
                               const char *help)
{
    enum status st = dynbuf_addf(out, "# HELP %s ", name);

    if (st == ST_OK)
        st = put_escaped(out, help, false);
    if (st == ST_OK)
        st = dynbuf_addf(out, "\n# TYPE %s %s\n", name, type);
    return st;
}

/* name{k="v",...} with the pairs of kv (NULL-terminated; NULL for none). */
static enum status put_series(struct dynbuf *out, const char *name, const char *const *kv)
{
    enum status st = dynbuf_adds(out, name);

    for (size_t i = 0; st == ST_OK && kv && kv[i]; i += 2) {
        st = dynbuf_addf(out, "%s%s=\"", i ? "," : "{", kv[i]);
        if (st == ST_OK)
            st = put_escaped(out, kv[i + 1], true);
        if (st == ST_OK)
            st = dynbuf_adds(out, kv[i + 2] ? "\"" : "\"}");
    }
    return st;
}

enum status metrics_put_sample(struct dynbuf *out, const char *name, const char *const *kv,
                               double v)
{
    char num[32];
    enum status st = put_series(out, name, kv);

    format_double(v, num);
    if (st == ST_OK)
        st = dynbuf_addf(out, " %s\n", num);
    return st;
}

/* The label pairs of series s of f into kv (room for LABELS_MAX + 1 pairs
 * and the NULL), with room left for "le" after them; the count of strings
 * written, or 0 for a series of a value not added yet (not written). */
static size_t series_labels(const struct metrics *m, const struct family *f, size_t s,
                            const char **kv)
{
    for (size_t i = f->nlabels; i-- > 0;) {
        const struct label_values *lv = &m->sets[f->labels[i]];
        if (s % lv->cap >= set_len(lv))
            return 0;
        kv[2 * i] = lv->name;
        kv[2 * i + 1] = lv->v[s % lv->cap];
        s /= lv->cap;
    }
    kv[2 * f->nlabels] = NULL;
    return 2 * f->nlabels;
}

/* Whether series s of f is one of values there are (always, without labels). */
static bool series_exists(const struct metrics *m, const struct family *f, size_t s)
{
    const char *kv[2 * LABELS_MAX + 1];

    return f->nlabels == 0 || series_labels(m, f, s, kv) > 0;
}

/* One series of a histogram: cumulative buckets, sum and count; nothing
 * for a sparse family's series that has no observation yet. */
static enum status render_histogram(const struct metrics *m, const struct family *f, size_t s,
                                    struct dynbuf *out)
{
    const char *kv[2 * LABELS_MAX + 3];
    size_t n = series_labels(m, f, s, kv);
    uint64_t cells[BUCKETS_MAX + 1], cum = 0, sumbits;
    char name[128], le[32];
    double sum;
    enum status st = ST_OK;

    for (size_t b = 0; b <= f->nbounds; b++) {
        cells[b] = atomic_load_explicit(&f->cells[s * (f->nbounds + 1) + b], memory_order_relaxed);
        cum += cells[b];
    }
    if (f->sparse && cum == 0)
        return ST_OK;
    sumbits = atomic_load_explicit(&f->sums[s], memory_order_relaxed);
    memcpy(&sum, &sumbits, sizeof(sum));
    xsnprintf(name, sizeof(name), "%s_bucket", f->name);
    kv[n] = "le";
    kv[n + 1] = le;
    kv[n + 2] = NULL;
    cum = 0;
    for (size_t b = 0; b <= f->nbounds && st == ST_OK; b++) {
        cum += cells[b];
        format_double(b < f->nbounds ? f->bounds[b] : INFINITY, le);
        st = metrics_put_sample(out, name, kv, (double)cum);
    }
    kv[n] = NULL;
    xsnprintf(name, sizeof(name), "%s_sum", f->name);
    if (st == ST_OK)
        st = metrics_put_sample(out, name, kv, sum);
    xsnprintf(name, sizeof(name), "%s_count", f->name);
    if (st == ST_OK)
        st = metrics_put_sample(out, name, kv, (double)cum);
    return st;
}

static enum status render_family(const struct metrics *m, const struct family *f,
                                 struct dynbuf *out)
{
    enum status st =
        metrics_put_header(out, f->name, f->histogram ? "histogram" : "counter", f->help);

    for (size_t s = 0; s < f->nseries && st == ST_OK; s++) {
        const char *kv[2 * LABELS_MAX + 1];
        uint64_t v;
        if (!series_exists(m, f, s))
            continue;
        if (f->histogram) {
            st = render_histogram(m, f, s, out);
            continue;
        }
        v = atomic_load_explicit(&f->cells[s], memory_order_relaxed);
        if (f->sparse && v == 0)
            continue;
        series_labels(m, f, s, kv);
        st = metrics_put_sample(out, f->name, kv, (double)v);
    }
    return st;
}

enum status metrics_render(const struct metrics *m, struct dynbuf *out)
{
    enum status st = ST_OK;

    if (!m)
        return ST_OK;
    for (size_t i = 0; i < F_COUNT && st == ST_OK; i++)
        st = render_family(m, &m->f[i], out);
    if (st == ST_OK)
        st = metrics_put_header(out, "opsrun_build_info", "gauge",
                                "Always 1; the labels say which build of opsrun this is.");
    if (st == ST_OK)
        st = metrics_put_sample(
            out, "opsrun_build_info",
            (const char *const[]){"version", m->version, "commit", m->commit, NULL}, 1);
    if (st == ST_OK)
        st = metrics_put_header(out, "opsrun_start_time_seconds", "gauge",
                                "When this process started, in seconds since the Unix epoch.");
    if (st == ST_OK)
        st = metrics_put_sample(out, "opsrun_start_time_seconds", NULL,
                                (double)m->start_wall_ms / 1000.0);
    return st;
}

/* ---- the single-flight cache ------------------------------------------ */

enum metrics_cached metrics_cache_begin(struct metrics *m, int64_t max_age_ms, int wait_ms,
                                        void *out, size_t size)
{
    struct timespec until;
    enum metrics_cached r;

    assert(size <= METRICS_CACHE_MAX);
    if (!m)
        return METRICS_REFRESH;
    abstime_after_ms(&until, wait_ms);
    pthread_mutex_lock(&m->mu);
    if (!m->busy && !(m->have && clock_mono_ms() - m->at_ms < max_age_ms)) {
        m->busy = true;
        pthread_mutex_unlock(&m->mu);
        return METRICS_REFRESH;
    }
    while (m->busy && !m->have)
        if (pthread_cond_timedwait(&m->cv, &m->mu, &until) != 0)
            break;
    r = m->have ? METRICS_CACHED : METRICS_NONE;
    if (m->have)
        memcpy(out, m->value, size);
    pthread_mutex_unlock(&m->mu);
    return r;
}

void metrics_cache_end(struct metrics *m, const void *value, size_t size)
{
    assert(size <= METRICS_CACHE_MAX);
    if (!m)
        return;
    pthread_mutex_lock(&m->mu);
    memcpy(m->value, value, size);
    m->have = true;
    m->busy = false;
    m->at_ms = clock_mono_ms();
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
}
