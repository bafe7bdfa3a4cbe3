/* tests/support/fixture.c — see fixture.h. */
#include "tests/support/fixture.h"

char *g_ci;
PGconn *g_pg;
struct db *g_db;
struct error g_err;
bool g_unnamed;

struct db *connect_db(const char *ci)
{
    struct db_options o = {.conninfo = ci,
                           .connect_timeout_s = 5,
                           .application_name = "opsrun_it",
                           .unnamed_statements = g_unnamed};
    struct db *db = NULL;

    OK(db_connect(&o, &db, &g_err));
    ck_assert_ptr_nonnull(db);
    return db;
}

void open_test_db(const char *name)
{
    g_ci = th_db_create(name);
    g_pg = th_pg(g_ci);
    g_db = connect_db(g_ci);
}

void close_test_db(void)
{
    db_close(g_db);
    PQfinish(g_pg);
    free(g_ci);
    g_db = NULL;
    g_pg = NULL;
    g_ci = NULL;
    g_unnamed = false;
}

/* Each run as one jsonb without its tenant, times made relative (see
 * tenants_differ); then its events and log chunks: (tenant, id, row). */
#define ALL_ROWS                                                                                   \
    "SELECT r.tenant, r.id, (SELECT jsonb_object_agg(e.key, CASE "                                 \
    "WHEN e.key = 'tenant' THEN NULL "                                                             \
    "WHEN e.key = 'approval_expires_at' "                                                          \
    "THEN to_jsonb((r.approval_expires_at - greatest(r.created_at, r.run_at))::text) "             \
    "WHEN e.value = to_jsonb(r.created_at) THEN '\"=created_at\"' "                                \
    "WHEN e.value = to_jsonb(r.completed_at) THEN '\"=completed_at\"' ELSE e.value END) "          \
    "FROM jsonb_each(to_jsonb(r)) e)::text FROM runs r "                                           \
    "UNION ALL SELECT e.tenant, e.run_id, concat_ws('/', 'event', e.type, e.status, e.outcome, "   \
    "e.progress, e.step, replace(e.message, coalesce(opsrun_ts(r.approval_expires_at), chr(1)), "  \
    "'<expiry>'), e.run_created_at = r.created_at) FROM run_events e JOIN runs r ON "              \
    "r.tenant = e.tenant AND r.id = e.run_id "                                                     \
    "UNION ALL SELECT l.tenant, l.run_id, concat_ws('/', 'log', l.attempt, l.first_seq, "          \
    "l.last_seq, l.dropped, l.lines::text, l.run_created_at = r.created_at) FROM run_logs l "      \
    "JOIN runs r ON r.tenant = l.tenant AND r.id = l.run_id"

char *tenants_differ(const char *a, const char *b)
{
    return th_sql_str(g_pg,
                      "WITH q(tenant, id, v) AS MATERIALIZED (" ALL_ROWS
                      "), a AS (SELECT id, v FROM q "
                      "WHERE tenant = '%s'), b AS (SELECT id, v FROM q WHERE tenant = '%s') "
                      "SELECT string_agg(w || ' only: ' || id || ' ' || v, E'\\n' ORDER BY w, "
                      "id, v) FROM (SELECT 'first', * FROM (TABLE a EXCEPT ALL TABLE b) x "
                      "UNION ALL SELECT 'second', * FROM (TABLE b EXCEPT ALL TABLE a) y) "
                      "d(w, id, v)",
                      a, b);
}
