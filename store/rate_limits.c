/* store/rate_limits.c — the poller's units and the limits' status
 * (store/rate_limits.h); the claim's units are in store/runs_engine.c. */
#include "store/rate_limits.h"

#include "store/db_internal.h"

#include <stdlib.h>

#define MS_UNTIL(t)                                                                                \
    "CASE WHEN " t " IS NOT NULL THEN greatest(0, ceil(extract(epoch FROM " t " - now()) * "       \
    "1000))::bigint END"

static const struct stmt S_TAKE = {
    "rate_take", "SELECT taken, " MS_UNTIL("next_at") " FROM opsrun_rate_take("
                                                      "$1, $2::int, $3::bigint, $4::int)"};
static const struct stmt S_STATUS = {
    "rate_status",
    "SELECT used, " MS_UNTIL(
        "next_at") " FROM opsrun_rate_status($1::text[], "
                   "$2::int[], $3::bigint[]) s JOIN unnest($1::text[]) WITH ORDINALITY "
                   "AS u(name, i) ON u.name = s.name ORDER BY u.i"};

enum status store_rate_take(struct db *db, const struct rate_limit *rl, int want, int *taken,
                            int64_t *next_ms, struct error *err)
{
    char lim[16], per[24], w[16];
    const char *p[4] = {rl->name, lim, per, w};
    PGresult *r;
    enum status st;

    xsnprintf(lim, sizeof(lim), "%d", rl->limit);
    xsnprintf(per, sizeof(per), "%lld", (long long)rl->per_ms);
    xsnprintf(w, sizeof(w), "%d", want);
    *taken = 0;
    *next_ms = 0;
    if ((st = db_run(db, &S_TAKE, 4, p, &r, err)) != ST_OK)
        return st;
    *taken = (int)db_i64(r, 0, 0);
    *next_ms = db_i64(r, 0, 1);
    PQclear(r);
    return ST_OK;
}

/* The limits as three arrays: names, limits and windows. */
static void limit_arrays(const struct rate_limit *rl, size_t n, char **names, char **limits,
                         char **pers)
{
    const char **v = xcalloc(n, sizeof(*v));
    size_t cap = 3 + n * 22, ll = 0, pl = 0;

    *limits = xmalloc(cap);
    *pers = xmalloc(cap);
    for (size_t i = 0; i < n; i++) {
        v[i] = rl[i].name;
        ll += xsnprintf(*limits + ll, cap - ll, "%c%d", i ? ',' : '{', rl[i].limit);
        pl += xsnprintf(*pers + pl, cap - pl, "%c%lld", i ? ',' : '{', (long long)rl[i].per_ms);
    }
    xsnprintf(*limits + ll, cap - ll, "}");
    xsnprintf(*pers + pl, cap - pl, "}");
    *names = db_text_array(v, n);
    free(v);
}

enum status store_rate_status(struct db *db, const struct rate_limit *rl, size_t n,
                              struct rate_status *out, struct error *err)
{
    char *names, *limits, *pers;
    const char *p[3];
    PGresult *r;
    enum status st;

    if (n == 0)
        return ST_OK;
    limit_arrays(rl, n, &names, &limits, &pers);
    p[0] = names, p[1] = limits, p[2] = pers;
    st = db_run(db, &S_STATUS, 3, p, &r, err);
    free(names);
    free(limits);
    free(pers);
    if (st != ST_OK)
        return st;
    for (size_t i = 0; i < n && (int)i < PQntuples(r); i++) {
        out[i].used = (int)db_i64(r, (int)i, 0);
        out[i].next_ms = db_val(r, (int)i, 1) ? db_i64(r, (int)i, 1) : -1;
    }
    PQclear(r);
    return ST_OK;
}
