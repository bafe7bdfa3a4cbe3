/* common/metrics.h — the process's metrics and their Prometheus text
 * exposition (format version 0.0.4), for GET /metrics.
 *
 * main() makes one registry and hands it to every layer that records, as
 * it does the configuration; like logging, recording is a call any layer
 * may make, so the registry lives here, below all of them. It knows no
 * opsrun type: the label values it accepts are given to metrics_new as
 * strings (the configured run types, the run outcomes, the route
 * templates), and a fixed set of status codes and check results is its
 * own; a reload's new run types, schedules, rate limits and notifiers are
 * added with metrics_add_labels, up to METRICS_LABELS_ADDED_MAX of each
 * over the process's life. Every label of every family therefore has a
 * bounded set of values, and a recorded value outside it is dropped, never
 * added. A value is never removed (a counter never goes backwards): the
 * series of one a reload removed stay.
 *
 * Recording is thread-safe, lock-free and allocation-free: each series is
 * a cell of relaxed atomic adds (a histogram: one per bucket, and its sum),
 * found by comparing the label values with the fixed sets. Every recording
 * function accepts a NULL registry (code run without metrics, in tests) and
 * does nothing then. Rendering is thread-safe and reads each cell once; a
 * histogram's count is the sum of the bucket counts it read, so a scrape
 * that races an observation is still consistent.
 *
 * Figures other modules already keep (engine, hub, pool) are not copied
 * here: the handler reads them at scrape time and writes them with
 * metrics_put_header and metrics_put_sample. Figures that cost a database
 * query are computed at most once per max age for every concurrent scrape
 * through the single-flight cache at the end. */
#ifndef OPSRUN_METRICS_H
#define OPSRUN_METRICS_H

#include "common.h"
#include "dynbuf.h"

struct metrics;

/* The label values known at start-up; the strings are copied. */
struct metrics_setup {
    const char *const *types; /* configured run types */
    size_t ntypes;
    const char *const *outcomes; /* terminal run outcomes */
    size_t noutcomes;
    const char *const *routes; /* route templates ("/runs/{id}"); repeats are merged */
    size_t nroutes;
    const char *const *schedules; /* configured schedules */
    size_t nschedules;
    const char *const *limits; /* configured rate limits */
    size_t nlimits;
    const char *const *notifiers; /* configured notifiers */
    size_t nnotifiers;
    const char *version, *commit; /* opsrun_build_info */
};

/* How many values metrics_add_labels may add to each of the run types,
 * schedules, rate limits and notifiers, beyond those at start. Each costs
 * its series' cells from the start (a run type about 400 bytes). */
#define METRICS_LABELS_ADDED_MAX 256

struct metrics *metrics_new(const struct metrics_setup *setup);
/* Adds the run types, schedules, rate limits and notifiers of more (the
 * rest of it is not read) that the registry does not know yet, so that
 * they get their series: a reloaded configuration's. Returns how many
 * found no room (past METRICS_LABELS_ADDED_MAX); they stay unrecorded.
 * Thread-safe; recording meanwhile sees each value before or after it is
 * added. m NULL: 0. */
size_t metrics_add_labels(struct metrics *m, const struct metrics_setup *more);
void metrics_free(struct metrics *m); /* NULL is a no-op */

/* ---- recording: any thread, lock-free; m may be NULL ---- */

/* A new run was stored (not a submission that joined one). */
void metrics_run_submitted(struct metrics *m, const char *type);
/* This process claimed a run that had been due for queue_wait_s. */
void metrics_run_claimed(struct metrics *m, const char *type, double queue_wait_s);
/* A claim statement took seconds (whatever it returned). */
void metrics_claim_latency(struct metrics *m, double seconds);
/* An attempt failed and the run went back to the queue. */
void metrics_run_retried(struct metrics *m, const char *type);
/* Lines of runs' logs written, and bytes of output left out of them. */
void metrics_log_lines(struct metrics *m, int64_t lines, int64_t dropped);
/* This process completed a run; duration_s from its first start, or < 0
 * when unknown (then only the counter moves). */
void metrics_run_completed(struct metrics *m, const char *type, const char *outcome,
                           double duration_s);

/* The results of one check of a waiting run (opsrun_poll_checks_total). */
#define METRICS_CHECK_RUNNING "running" /* the job still runs: next check scheduled */
#define METRICS_CHECK_ENDED "ended"     /* the job ended: the run completed */
#define METRICS_CHECK_ERROR "error"     /* the check failed (network, 5xx, bad answer) */
#define METRICS_CHECK_ABORTED "aborted" /* stopped by a shutdown: due again elsewhere */
void metrics_poll_check(struct metrics *m, const char *type, const char *result);
/* A waiting run ended timed_out: its poll budget was spent. */
void metrics_poll_budget_exhausted(struct metrics *m, const char *type);
/* The cancel and cleanup hooks of a run ran; failed when any of them did. */
void metrics_poll_hooks(struct metrics *m, const char *type, bool failed);

/* n slots of a schedule ended with result (opsrun_schedule_runs_total). */
#define METRICS_SLOT_CREATED "created"
#define METRICS_SLOT_SKIPPED_OVERLAP "skipped_overlap"
#define METRICS_SLOT_SKIPPED_PAUSED "skipped_paused"
#define METRICS_SLOT_MISSED "missed"
void metrics_schedule_slot(struct metrics *m, const char *schedule, const char *result, int64_t n);
/* n starts or checks waited for their rate limit (opsrun_rate_limit_waits_total). */
void metrics_rate_limit_wait(struct metrics *m, const char *limit, int64_t n);

/* One attempt of a delivery to notifier ended with result
 * (opsrun_notifications_total); a delivered one took latency_s from its
 * creation (the transition's commit) to its 2xx. */
#define METRICS_NOTIFY_DELIVERED "delivered"
#define METRICS_NOTIFY_RETRIED "retried"
#define METRICS_NOTIFY_GAVE_UP "gave_up"
void metrics_notification(struct metrics *m, const char *notifier, const char *result,
                          double latency_s);

/* An answered HTTP request: route is its template, NULL when no route
 * matched the path; code is the status sent. */
void metrics_http_request(struct metrics *m, const char *route, unsigned code, double seconds);

/* ---- exposition ---- */

/* The registry's families, then opsrun_build_info and
 * opsrun_start_time_seconds. ST_TOO_LARGE when out's cap is reached. */
enum status metrics_render(const struct metrics *m, struct dynbuf *out) WUR;

/* "# HELP name help\n# TYPE name type\n", help escaped. */
enum status metrics_put_header(struct dynbuf *out, const char *name, const char *type,
                               const char *help) WUR;
/* One sample line: name, the labels given as name/value pairs in kv (a
 * NULL-terminated array; NULL for none), values escaped, and v. */
enum status metrics_put_sample(struct dynbuf *out, const char *name, const char *const *kv,
                               double v) WUR;

/* ---- the single-flight cache of one small value ---- */

#define METRICS_CACHE_MAX 8192 /* the largest value it holds, in bytes */

enum metrics_cached {
    METRICS_CACHED,  /* *out holds the value (perhaps stale while a refresh runs) */
    METRICS_REFRESH, /* the caller must make the value and give it to metrics_cache_end */
    METRICS_NONE,    /* no value yet, and another caller's refresh outlived wait_ms */
};
/* Copies the cached value into out (size bytes) when it is younger than
 * max_age_ms. Otherwise the first caller gets METRICS_REFRESH and makes the
 * value without any lock held; the callers meanwhile get the previous
 * value, or, when there is none yet, wait up to wait_ms for the refresh.
 * With a NULL m every call is METRICS_REFRESH. */
enum metrics_cached metrics_cache_begin(struct metrics *m, int64_t max_age_ms, int wait_ms,
                                        void *out, size_t size);
/* Ends a METRICS_REFRESH: stores value (size bytes) and wakes the waiters.
 * Must follow every METRICS_REFRESH, also when making the value failed. */
void metrics_cache_end(struct metrics *m, const void *value, size_t size);

#endif
