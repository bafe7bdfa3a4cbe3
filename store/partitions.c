/* store/partitions.c — the time partitions of run_events: thin calls of the
 * SQL functions of migration 013, which hold the logic. */
#include "store/partitions.h"

#include "store/db_internal.h"

#include <inttypes.h>

#define STR_(x) #x
#define STR(x) STR_(x)

static const struct stmt S_ENSURE = {
    "partitions_ensure",
    "SELECT * FROM opsrun_event_partitions_ensure(make_interval(secs => $1::bigint), " STR(
        PARTITION_LOCK_TIMEOUT_MS) ")"};
static const struct stmt S_DROP = {
    "partitions_drop", "SELECT * FROM opsrun_event_partitions_drop(make_interval(secs => " STR(
                           PARTITION_DROP_MARGIN_S) "), " STR(PARTITION_LOCK_TIMEOUT_MS) ")"};

static enum status each_name(struct db *db, const struct stmt *s, int n, const char *const *p,
                             partition_fn fn, void *arg, int *count, struct error *err)
{
    PGresult *r;
    enum status st = db_run(db, s, n, p, &r, err);

    *count = 0;
    if (st != ST_OK)
        return st;
    *count = PQntuples(r);
    for (int i = 0; fn && i < *count; i++)
        fn(arg, db_val(r, i, 0));
    PQclear(r);
    return ST_OK;
}

enum status store_partitions_ensure(struct db *db, int64_t span_s, partition_fn fn, void *arg,
                                    int *created, struct error *err)
{
    char span[24];
    const char *p[1] = {span};

    xsnprintf(span, sizeof(span), "%" PRId64, span_s);
    return each_name(db, &S_ENSURE, 1, p, fn, arg, created, err);
}

enum status store_partitions_drop(struct db *db, partition_fn fn, void *arg, int *dropped,
                                  struct error *err)
{
    return each_name(db, &S_DROP, 0, NULL, fn, arg, dropped, err);
}
