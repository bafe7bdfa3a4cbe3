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
