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

/* Passes each name the statement returned to fn; a NULL row says it gave
 * way to a lock. */
static enum status each_name(struct db *db, const struct stmt *s, int n, const char *const *p,
                             partition_fn fn, void *arg, struct partition_step *out,
                             struct error *err)
{
    PGresult *r;
    enum status st = db_run(db, s, n, p, &r, err);

    *out = (struct partition_step){0};
    if (st != ST_OK)
        return st;
    for (int i = 0; i < PQntuples(r); i++) {
        const char *name = db_val(r, i, 0);
        if (!name) {
            out->gave_way = true;
            continue;
        }
        out->n++;
        if (fn)
            fn(arg, name);
    }
    PQclear(r);
    return ST_OK;
}

enum status store_partitions_ensure(struct db *db, int64_t span_s, partition_fn fn, void *arg,
                                    struct partition_step *out, struct error *err)
{
    char span[24];
    const char *p[1] = {span};

    xsnprintf(span, sizeof(span), "%" PRId64, span_s);
    return each_name(db, &S_ENSURE, 1, p, fn, arg, out, err);
}

enum status store_partitions_drop(struct db *db, partition_fn fn, void *arg,
                                  struct partition_step *out, struct error *err)
{
    return each_name(db, &S_DROP, 0, NULL, fn, arg, out, err);
}
