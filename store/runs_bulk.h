/* store/runs_bulk.h — one operator action on many runs of one tenant, chosen by
 * a filter (POST /runs/cancel, POST /runs/retry): the runs it matches,
 * then the action on them a batch at a time, each batch one statement and
 * so one transaction, so that acting on many thousands never holds the
 * queue up. Each run is acted on as its single action would (store_runs_
 * cancel, store_runs_resubmit), with its usual events; a batch acts only
 * on the runs that still match the filter and may still be acted on when
 * it runs. On the caller's db handle (one thread at a time). Functions
 * return ST_OK or a failure with *err filled; a batch that failed changed
 * nothing. */
#ifndef OPSRUN_STORE_RUNS_BULK_H
#define OPSRUN_STORE_RUNS_BULK_H

#include "common/common.h"
#include "store/runs.h"

struct db;

enum bulk_action {
    BULK_CANCEL, /* runs queued, running or waiting: cancelled (a running one is asked to) */
    BULK_RETRY,  /* completed runs that did not succeed: retried as new runs */
};

/* What a filter selects; every criterion given must hold. */
struct bulk_filter {
    unsigned statuses;                          /* 1u << enum run_status; 0 = any */
    unsigned outcomes;                          /* 1u << enum run_outcome; 0 = any */
    const char *type, *schedule;                /* NULL = any */
    const char *parent_id;                      /* follow-ups of this run; NULL = any */
    const char *created_after, *created_before; /* RFC 3339: created_at >= after, < before */
};

/* The runs a filter matched, oldest first: ids[i] of type types[i]. */
struct bulk_match {
    char **ids, **types;
    size_t n;
};
void bulk_match_cleanup(struct bulk_match *m);

/* The first max runs of tenant (oldest first) that f selects and the
 * action applies to, into *out: a caller that asks for one more than it
 * may act on learns whether there are too many. */
enum status store_bulk_match(struct db *db, const char *tenant, enum bulk_action action,
                             const struct bulk_filter *f, int max, struct bulk_match *out,
                             struct error *err) WUR;

/* One run a batch acted on. */
struct bulk_acted {
    char *id, *type;
    bool ended;   /* cancel: it completed (cancelled) at once, rather than being asked to */
    char *new_id; /* retry: the run its retry started, or joined (joined true) */
    bool joined;
};
struct bulk_result {
    struct bulk_acted *v;
    size_t n;
};
void bulk_result_cleanup(struct bulk_result *r);

/* Cancels those of ids[0..n) (of tenant) that f still selects and that are
 * queued, running or waiting, as POST /runs/{id}/cancel would each, in one
 * statement; appends them to *out. */
enum status store_bulk_cancel(struct db *db, const char *tenant, const struct bulk_filter *f,
                              const char *const *ids, size_t n, struct bulk_result *out,
                              struct error *err) WUR;

/* One run to retry: the completed run `of` as a new run `id`, with what
 * its run type says today (as struct run_resubmit). */
struct bulk_retry_item {
    const char *of, *id;
    int max_attempts, timeout_s;
    int approval_timeout_s; /* 0: none */
    bool approve_on_timeout;
};
/* Retries those of items[0..n) whose run f still selects and that are
 * completed and did not succeed, as POST /runs/{id}/retry would each (a
 * run with the same identity that is queued, running or waiting, the
 * retry of an earlier item included, is joined instead), in one statement,
 * initiator (NULL: "system") asking; appends them to *out. */
enum status store_bulk_retry(struct db *db, const char *tenant, const char *initiator,
                             const struct bulk_filter *f, const struct bulk_retry_item *items,
                             size_t n, struct bulk_result *out, struct error *err) WUR;

/* The input of each of ids[0..n) (runs of tenant) into inputs[0..n): a
 * new reference, or NULL for a run that does not exist (any more). What a
 * bulk retry checks its runs' concurrency keys against, a batch at a time.
 * On failure every inputs[i] is NULL. */
enum status store_bulk_inputs(struct db *db, const char *tenant, const char *const *ids, size_t n,
                              json_t **inputs, struct error *err) WUR;

#endif
