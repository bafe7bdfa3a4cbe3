/* store/db_internal.h — for the store/ sources only: statements prepared per
 * connection on first use, and result access. */
#ifndef OPSRUN_STORE_DB_INTERNAL_H
#define OPSRUN_STORE_DB_INTERNAL_H

#include "store/db.h"

#include <libpq-fe.h>

/* A statement: a unique name and parameterised SQL. Static storage only;
 * identity is the pointer. */
struct stmt {
    const char *name;
    const char *sql;
};

/* Runs a prepared statement with text parameters (NULL = SQL NULL).
 * On ST_OK *res is a PGresult with PGRES_TUPLES_OK or PGRES_COMMAND_OK that
 * the caller PQclear()s. Unique violations come back as ST_CONFLICT;
 * connection loss and statement timeouts as ST_UNAVAILABLE. */
enum status db_run(struct db *db, const struct stmt *st, int nparams, const char *const *params,
                   PGresult **res, struct error *err) WUR;
PGconn *db_conn(struct db *db);
/* inline with named prepared statements, else fn: the same statement as a
 * call of a PL/pgSQL function (migration 027), which the server plans once
 * per connection where an unnamed statement is planned at every call. For
 * statements whose planning costs about as much as their run or more; the
 * two must take the same parameters, answer the same rows and write the
 * same rows (tests/integration: *_function_writes_what_the_statement_writes). */
const struct stmt *db_stmt_for(const struct db *db, const struct stmt *inline_sql,
                               const struct stmt *fn);
/* db_run for a statement whose result is only how many rows it changed:
 * into *affected (may be NULL). */
enum status db_exec_count(struct db *db, const struct stmt *st, int nparams,
                          const char *const *params, int *affected, struct error *err) WUR;

/* A transaction of several statements: db_begin, then db_end with the
 * status of the work, which commits on ST_OK and rolls back otherwise.
 * db_end returns st, or the failure of the commit. */
enum status db_begin(struct db *db, struct error *err) WUR;
enum status db_end(struct db *db, enum status st, struct error *err) WUR;

/* A PostgreSQL text[] literal of v: "{"a","b"}", each element quoted and
 * escaped, a NULL element as NULL. Heap. */
char *db_text_array(const char *const *v, size_t n);

/* Result helpers: NULL for SQL NULL. */
const char *db_val(const PGresult *r, int row, int col);
int64_t db_i64(const PGresult *r, int row, int col); /* 0 for NULL */

#endif
