/* store/partitions.h — the time partitions of run_events (migrations 013
 * and 019): one per span of run creation times, created ahead and dropped
 * once no run created in the span is left. Both calls run one statement on
 * the caller's handle, serialise with other replicas through an advisory
 * lock (a call that finds it taken does nothing), and give up without an
 * error when a table lock is not granted within PARTITION_LOCK_TIMEOUT_MS
 * (*gave_way then says so): the next call tries again. They return ST_OK or
 * a failure with *err filled. */
#ifndef OPSRUN_STORE_PARTITIONS_H
#define OPSRUN_STORE_PARTITIONS_H

#include "common/common.h"

#include <stdbool.h>
#include <stdint.h>

struct db;

/* How long partition maintenance waits for a table lock, and so at most how
 * long writers of events queue behind its request. */
#define PARTITION_LOCK_TIMEOUT_MS 500
/* A span is dropped no sooner than this after its end (see
 * opsrun_event_partitions_drop in migrations 013 and 019). */
#define PARTITION_DROP_MARGIN_S 60

/* Called with the name of each partition created or dropped (borrowed, for
 * the duration of the call). */
typedef void (*partition_fn)(void *arg, const char *name);

/* What one call did: how many partitions it created or dropped, and
 * whether it gave way to a lock it was not granted in time. */
struct partition_step {
    int n;
    bool gave_way;
};

/* Creates the partitions of span_s seconds missing from the newest one's
 * end until two spans (at least ten minutes) from now. */
enum status store_partitions_ensure(struct db *db, int64_t span_s, partition_fn fn, void *arg,
                                    struct partition_step *out, struct error *err) WUR;
/* Drops the partitions that ended PARTITION_DROP_MARGIN_S ago or more and
 * hold no run still in runs. */
enum status store_partitions_drop(struct db *db, partition_fn fn, void *arg,
                                  struct partition_step *out, struct error *err) WUR;

#endif
