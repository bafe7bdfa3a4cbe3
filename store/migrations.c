/* store/migrations.c — applies the embedded migrations. */
#include "store/migrations.h"

#include "common/log.h"
#include "store/db_internal.h"

#include <stdlib.h>

static const struct stmt S_VERSIONS = {"mig_versions", "SELECT version FROM schema_migrations"};
static const struct stmt S_RECORD = {
    "mig_record", "INSERT INTO schema_migrations (version, name) VALUES ($1::int, $2)"};

static bool mig_applied(const PGresult *r, int version)
{
    for (int i = 0; i < PQntuples(r); i++)
        if (db_i64(r, i, 0) == version)
            return true;
    return false;
}

static enum status mig_apply_pending(struct db *db, int *applied, struct error *err)
{
    PGresult *r = NULL;
    enum status st = db_run(db, &S_VERSIONS, 0, NULL, &r, err);

    for (size_t i = 0; st == ST_OK && i < migrations_count; i++) {
        const struct migration *m = &migrations[i];
        char ver[16];
        const char *params[2] = {ver, m->name};
        PGresult *ins;

        if (mig_applied(r, m->version))
            continue;
        LOG(LOG_INFO, "applying migration version=%d name=%s", m->version, m->name);
        st = db_exec_simple(db, m->sql, err);
        if (st != ST_OK)
            break;
        xsnprintf(ver, sizeof(ver), "%d", m->version);
        st = db_run(db, &S_RECORD, 2, params, &ins, err);
        if (st == ST_OK) {
            PQclear(ins);
            (*applied)++;
        }
    }
    PQclear(r);
    return st;
}

enum status store_migrate(struct db *db, int *applied_out, struct error *err)
{
    int applied = 0;
    enum status st = db_exec_simple(db, "BEGIN", err);

    if (st == ST_OK)
        st = db_exec_simple(db, "SELECT pg_advisory_xact_lock(7260017000)", err);
    if (st == ST_OK)
        st = db_exec_simple(db,
                            "CREATE TABLE IF NOT EXISTS schema_migrations ("
                            " version integer PRIMARY KEY, name text NOT NULL,"
                            " applied_at timestamptz NOT NULL DEFAULT now())",
                            err);
    if (st == ST_OK)
        st = mig_apply_pending(db, &applied, err);
    if (st == ST_OK)
        st = db_exec_simple(db, "COMMIT", err);
    else
        (void)!db_exec_simple(db, "ROLLBACK", NULL);
    if (st == ST_OK && applied_out)
        *applied_out = applied;
    return st;
}

enum status store_migrations_current(struct db *db, struct error *err)
{
    PGresult *r = NULL;
    enum status st = db_run(db, &S_VERSIONS, 0, NULL, &r, err);

    for (size_t i = 0; st == ST_OK && i < migrations_count; i++)
        if (!mig_applied(r, migrations[i].version))
            st = error_set(err, ST_UNAVAILABLE, "migration %d (%s) is not applied",
                           migrations[i].version, migrations[i].name);
    PQclear(r);
    return st;
}
