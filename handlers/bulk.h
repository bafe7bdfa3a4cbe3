/* handlers/bulk.h — POST /runs/cancel and POST /runs/retry: one action on
 * every run of the caller's tenant that a filter matches.
 *
 * The handler checks the body and hands the work to this runner, parking
 * its connection (struct deferred), so that no HTTP thread, and none of
 * the connections it serves, waits while thousands of runs are acted on.
 * The runner's threads take one request at a time each: the match (one
 * statement), then the action BULK_BATCH runs at a time, each batch one
 * statement and one transaction (store/runs_bulk.h), with the engine and the
 * metrics told after each. Without a runner (hctx.bulk NULL) the work is
 * done on the handler's thread.
 *
 * Thread-safety: bulk_new/start/close/free from one thread; the handlers
 * from any. hc must outlive the runner. */
#ifndef OPSRUN_HANDLERS_BULK_H
#define OPSRUN_HANDLERS_BULK_H

#include "common/common.h"
#include "store/runs_bulk.h"

#include <jansson.h>

struct hctx;
struct bulk;

/* The most runs one request may act on ("limit"), its default, the runs
 * one batch (transaction) acts on, and the run ids an answer lists. */
#define BULK_LIMIT_MAX 100000
#define BULK_LIMIT_DEFAULT 10000
#define BULK_BATCH 500
#define BULK_IDS_MAX 1000

/* threads: requests acted on at once (at least 1); queue_max: requests
 * waiting for a thread, past which one is answered 503. */
struct bulk *bulk_new(const struct hctx *hc, int threads, int queue_max);
enum status bulk_start(struct bulk *b, struct error *err) WUR;
/* Takes no more requests (503); a request under way stops after its
 * current batch and is answered 503 with what it did. Waits up to wait_ms
 * for every request to be answered; false when some were not. */
bool bulk_close(struct bulk *b, int wait_ms);
void bulk_free(struct bulk *b); /* after bulk_close; NULL is a no-op */

/* ---- pure parts, for unit tests ---- */

/* A checked request body. Strings borrow from the body. */
struct bulk_request {
    struct bulk_filter filter;
    bool dry_run;
    int limit; /* 1..BULK_LIMIT_MAX */
};
/* {"filter": {"status": [...], "outcome": [...], "type", "created_after",
 * "created_before", "schedule", "all": true}, "dry_run", "limit"}: every
 * key known, a filter that says something ("all": true to act on every
 * run), field errors in err->fields ("filter.status"). */
enum status bulk_parse(const json_t *body, struct bulk_request *out, struct error *err) WUR;

#endif
