/* store/migrations.h — the SQL migrations embedded at build time
 * (scripts/embed_migrations.cmake writes them into migrations_gen.c of the
 * build tree) and their runner (migrations.c). */
#ifndef OPSRUN_STORE_MIGRATIONS_H
#define OPSRUN_STORE_MIGRATIONS_H

#include "common/common.h"

struct migration {
    int version;
    const char *name;
    const char *sql;
};

extern const struct migration migrations[];
extern const size_t migrations_count;

struct db;
/* Applies every pending migration in one transaction under an advisory lock,
 * so replicas starting together cannot race. *applied (optional) gets how
 * many were applied now. */
enum status store_migrate(struct db *db, int *applied, struct error *err) WUR;
/* ST_OK when every embedded migration is recorded in schema_migrations. */
enum status store_migrations_current(struct db *db, struct error *err) WUR;

#endif
