/* store/db.c — connections, per-connection prepared statements, the pool. */
#include "store/db_internal.h"

#include "common/log.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DB_MAX_PREPARED 96

struct db {
    PGconn *conn;
    struct db_options opt;
    char *conninfo;
    char *appname;
    const struct stmt *prepared[DB_MAX_PREPARED];
    int nprepared;
    struct db *next_free; /* pool free list */
};

struct db_pool {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct db_options opt;
    char *conninfo;
    int size, opened, wait_ms;
    struct db *free;
    int in_use;
    int64_t waits_total, timeouts_total, wait_us_total;
};

/* Server notices ("relation already exists, skipping") go to the debug log,
 * one line each, instead of libpq's default raw write to stderr. */
static void db_notice(void *arg, const char *message)
{
    size_t n = strcspn(message, "\n");
    (void)arg;
    LOG(LOG_DEBUG, "database notice: %.*s", (int)n, message);
}

static enum status db_open(struct db *db, struct error *err)
{
    char timeout[16], options[80], user_timeout[24];
    const char *keys[10], *vals[10];
    int n = 0;

    xsnprintf(timeout, sizeof(timeout), "%d", db->opt.connect_timeout_s);
    /* No JIT: every statement here is short, and compiling one took longer
     * than running it many times over (0.4 s for the admin's list planned
     * generically, against 1.4 ms run without it; migration 011 for the
     * claim). */
    if (db->opt.statement_timeout_ms > 0)
        xsnprintf(options, sizeof(options), "-c jit=off -c statement_timeout=%d",
                  db->opt.statement_timeout_ms);
    else
        xsnprintf(options, sizeof(options), "-c jit=off");
    xsnprintf(user_timeout, sizeof(user_timeout), "%d",
              (db->opt.statement_timeout_ms > 0 ? db->opt.statement_timeout_ms : 30000) + 5000);
    keys[n] = "dbname", vals[n++] = db->conninfo;
    keys[n] = "connect_timeout", vals[n++] = timeout;
    keys[n] = "keepalives", vals[n++] = "1";
    keys[n] = "keepalives_idle", vals[n++] = "30";
    keys[n] = "keepalives_interval", vals[n++] = "10";
    keys[n] = "application_name", vals[n++] = db->appname;
    /* Without it a call on a silently dead network waits for TCP to give up
     * (about 15 minutes); the server's statement_timeout cannot help. */
    keys[n] = "tcp_user_timeout", vals[n++] = user_timeout;
    keys[n] = "options", vals[n++] = options;
    keys[n] = NULL, vals[n] = NULL;
    db->conn = PQconnectdbParams(keys, vals, 1);
    db->nprepared = 0;
    if (!db->conn)
        return error_set(err, ST_UNAVAILABLE, "could not connect to the database: out of memory");
    if (PQstatus(db->conn) != CONNECTION_OK) {
        enum status st = error_set(err, ST_UNAVAILABLE, "could not connect to the database: %s",
                                   PQerrorMessage(db->conn));
        for (char *p = err ? err->message : NULL; p && *p; p++)
            if (*p == '\n')
                *p = ' ';
        PQfinish(db->conn);
        db->conn = NULL;
        return st;
    }
    PQsetNoticeProcessor(db->conn, db_notice, NULL);
    return ST_OK;
}

static struct db *db_alloc(const struct db_options *opt, const char *conninfo)
{
    struct db *db = xcalloc(1, sizeof(*db));
    db->opt = *opt;
    db->conninfo = xstrdup(conninfo);
    db->appname = xstrdup(opt->application_name ? opt->application_name : "opsrun");
    db->opt.conninfo = db->conninfo;
    db->opt.application_name = db->appname;
    return db;
}

enum status db_connect(const struct db_options *opt, struct db **out, struct error *err)
{
    struct db *db = db_alloc(opt, opt->conninfo);
    enum status st = db_open(db, err);

    if (st != ST_OK) {
        db_close(db);
        *out = NULL;
        return st;
    }
    *out = db;
    return ST_OK;
}

void db_close(struct db *db)
{
    if (!db)
        return;
    if (db->conn)
        PQfinish(db->conn);
    free(db->conninfo);
    free(db->appname);
    free(db);
}

/* An idle connection has nothing to read; a readable one was closed by the
 * server (a restart, an idle timeout) or holds an async message. Reading it
 * turns a dead connection into CONNECTION_BAD without a round trip, so a
 * restart does not cost one failed request per pooled connection. */
static void db_check_idle(struct db *db)
{
    /* A shut-down server sends a FATAL message, then closes: read both. */
    for (int i = 0; i < 4 && PQstatus(db->conn) == CONNECTION_OK; i++) {
        struct pollfd pf = {PQsocket(db->conn), POLLIN, 0};
        if (pf.fd < 0 || poll(&pf, 1, 0) <= 0 || !PQconsumeInput(db->conn))
            break;
    }
}

enum status db_ensure(struct db *db, struct error *err)
{
    if (db->conn && PQstatus(db->conn) == CONNECTION_OK)
        db_check_idle(db);
    if (db->conn && PQstatus(db->conn) == CONNECTION_OK)
        return ST_OK;
    if (db->conn) {
        PQfinish(db->conn);
        db->conn = NULL;
    }
    return db_open(db, err);
}

int db_socket(const struct db *db)
{
    return db->conn ? PQsocket(db->conn) : -1;
}

PGconn *db_conn(struct db *db)
{
    return db->conn;
}

/* Maps a failed result to a status; connection loss is ST_UNAVAILABLE. */
static enum status db_fail(struct db *db, PGresult *r, const char *what, struct error *err)
{
    const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    const char *msg = r ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) : NULL;
    enum status st = ST_DB;

    if (!msg)
        msg = PQerrorMessage(db->conn);
    if (PQstatus(db->conn) != CONNECTION_OK || !state)
        st = ST_UNAVAILABLE;
    else if (strcmp(state, "23505") == 0)
        st = ST_CONFLICT;
    else if (strncmp(state, "08", 2) == 0 ||
             STR_IN(state, "57014", "57P01", "57P02", "57P03", "53300", "40P01"))
        st = ST_UNAVAILABLE; /* 40P01: a deadlock victim, rolled back; safe to retry */
    error_set(err, st, "%s failed: %s", what, msg);
    if (err)
        for (char *p = err->message; *p; p++)
            if (*p == '\n')
                *p = ' ';
    if (st == ST_DB)
        LOG(LOG_ERROR, "database error stmt=%s sqlstate=%s msg=\"%s\"", what, state ? state : "",
            msg);
    if (r)
        PQclear(r);
    return st;
}

static bool db_is_prepared(const struct db *db, const struct stmt *st)
{
    for (int i = 0; i < db->nprepared; i++)
        if (db->prepared[i] == st)
            return true;
    return false;
}

static enum status db_prepare(struct db *db, const struct stmt *st, int nparams, struct error *err)
{
    PGresult *r;

    if (db_is_prepared(db, st))
        return ST_OK;
    if (db->nprepared >= DB_MAX_PREPARED)
        return error_set(err, ST_INTERNAL, "too many prepared statements");
    r = PQprepare(db->conn, st->name, st->sql, nparams, NULL);
    if (!r || PQresultStatus(r) != PGRES_COMMAND_OK)
        return db_fail(db, r, st->name, err);
    PQclear(r);
    db->prepared[db->nprepared++] = st;
    return ST_OK;
}

enum status db_run(struct db *db, const struct stmt *st, int nparams, const char *const *params,
                   PGresult **res, struct error *err)
{
    enum status s;
    PGresult *r;
    ExecStatusType rs;

    *res = NULL;
    if (!db->conn || PQstatus(db->conn) != CONNECTION_OK)
        return error_set(err, ST_UNAVAILABLE, "%s failed: no database connection", st->name);
    s = db_prepare(db, st, nparams, err);
    if (s != ST_OK)
        return s;
    r = PQexecPrepared(db->conn, st->name, nparams, params, NULL, NULL, 0);
    rs = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    if (rs != PGRES_TUPLES_OK && rs != PGRES_COMMAND_OK)
        return db_fail(db, r, st->name, err);
    *res = r;
    return ST_OK;
}

enum status db_exec_simple(struct db *db, const char *sql, struct error *err)
{
    PGresult *r;
    ExecStatusType rs;

    if (!db->conn || PQstatus(db->conn) != CONNECTION_OK)
        return error_set(err, ST_UNAVAILABLE, "no database connection");
    r = PQexec(db->conn, sql);
    rs = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    if (rs != PGRES_TUPLES_OK && rs != PGRES_COMMAND_OK)
        return db_fail(db, r, "statement", err);
    PQclear(r);
    return ST_OK;
}

enum status db_exec_count(struct db *db, const struct stmt *st, int nparams,
                          const char *const *params, int *affected, struct error *err)
{
    PGresult *r;
    enum status s = db_run(db, st, nparams, params, &r, err);

    if (s != ST_OK)
        return s;
    if (affected)
        *affected = atoi(PQcmdTuples(r));
    PQclear(r);
    return ST_OK;
}

enum status db_begin(struct db *db, struct error *err)
{
    return db_exec_simple(db, "BEGIN", err);
}

enum status db_end(struct db *db, enum status st, struct error *err)
{
    if (st == ST_OK)
        return db_exec_simple(db, "COMMIT", err);
    if (db->conn && PQstatus(db->conn) == CONNECTION_OK)
        (void)!db_exec_simple(db, "ROLLBACK", NULL);
    return st;
}

enum status db_ping(struct db *db, int timeout_ms, struct error *err)
{
    static const struct stmt ping = {"db_ping", "SELECT 1"};
    char sql[64];
    PGresult *r;
    enum status st;

    /* SET LOCAL ends with the transaction, so a transaction pooler never
     * hands the short timeout to another client. */
    xsnprintf(sql, sizeof(sql), "BEGIN; SET LOCAL statement_timeout = %d", timeout_ms);
    st = db_exec_simple(db, sql, err);
    if (st == ST_OK)
        st = db_run(db, &ping, 0, NULL, &r, err);
    if (st == ST_OK) {
        PQclear(r);
        st = db_exec_simple(db, "COMMIT", err);
    } else if (db->conn && PQstatus(db->conn) == CONNECTION_OK) {
        (void)!db_exec_simple(db, "ROLLBACK", NULL);
    }
    return st;
}

enum status db_consume_notifies(struct db *db,
                                void (*fn)(void *arg, const char *channel, const char *payload),
                                void *arg, struct error *err)
{
    PGnotify *n;

    if (!db->conn || !PQconsumeInput(db->conn))
        return error_set(err, ST_UNAVAILABLE, "listen connection lost: %s",
                         db->conn ? PQerrorMessage(db->conn) : "not connected");
    while ((n = PQnotifies(db->conn)) != NULL) {
        fn(arg, n->relname, n->extra);
        PQfreemem(n);
        (void)PQconsumeInput(db->conn);
    }
    return ST_OK;
}

const char *db_val(const PGresult *r, int row, int col)
{
    return PQgetisnull(r, row, col) ? NULL : PQgetvalue(r, row, col);
}

int64_t db_i64(const PGresult *r, int row, int col)
{
    const char *v = db_val(r, row, col);
    return v ? strtoll(v, NULL, 10) : 0;
}

/* ---- pool ---- */

struct db_pool *db_pool_new(const struct db_options *opt, int size, int wait_ms)
{
    struct db_pool *p = xcalloc(1, sizeof(*p));

    pthread_mutex_init(&p->mu, NULL);
    cond_init_monotonic(&p->cv);
    p->conninfo = xstrdup(opt->conninfo);
    p->opt = *opt;
    p->opt.conninfo = p->conninfo;
    p->size = size < 1 ? 1 : size;
    p->wait_ms = wait_ms;
    return p;
}

void db_pool_free(struct db_pool *pool)
{
    if (!pool)
        return;
    while (pool->free) {
        struct db *db = pool->free;
        pool->free = db->next_free;
        db_close(db);
    }
    pthread_cond_destroy(&pool->cv);
    pthread_mutex_destroy(&pool->mu);
    free(pool->conninfo);
    free(pool);
}

/* A checkout's figures, under pool->mu; waited_from is 0 when it did not
 * have to wait. */
static void pool_count(struct db_pool *pool, bool got, int64_t waited_from)
{
    pool->in_use += got;
    if (!waited_from)
        return;
    pool->waits_total++;
    pool->timeouts_total += !got;
    pool->wait_us_total += clock_mono_us() - waited_from;
}

enum status db_pool_get_wait(struct db_pool *pool, int wait_ms, struct db **out, struct error *err)
{
    struct timespec until;
    struct db *db = NULL;
    int64_t waited_from = 0;
    enum status st;

    *out = NULL;
    abstime_after_ms(&until, wait_ms);
    pthread_mutex_lock(&pool->mu);
    while (!pool->free && pool->opened >= pool->size) {
        if (!waited_from)
            waited_from = clock_mono_us();
        if (pthread_cond_timedwait(&pool->cv, &pool->mu, &until) == ETIMEDOUT)
            break;
    }
    if (pool->free) {
        db = pool->free;
        pool->free = db->next_free;
    } else if (pool->opened < pool->size) {
        pool->opened++;
        db = db_alloc(&pool->opt, pool->conninfo);
    }
    pool_count(pool, db != NULL, waited_from);
    pthread_mutex_unlock(&pool->mu);
    if (!db)
        return error_set(err, ST_UNAVAILABLE, "no database connection free within %d ms", wait_ms);
    st = db_ensure(db, err);
    if (st != ST_OK) {
        db_pool_put(pool, db);
        return st;
    }
    *out = db;
    return ST_OK;
}

enum status db_pool_get(struct db_pool *pool, struct db **out, struct error *err)
{
    return db_pool_get_wait(pool, pool->wait_ms, out, err);
}

void db_pool_put(struct db_pool *pool, struct db *db)
{
    if (!db)
        return;
    /* A connection left inside a transaction (an error path) is rolled back
     * so the next user starts clean. */
    if (db->conn && PQstatus(db->conn) == CONNECTION_OK &&
        PQtransactionStatus(db->conn) != PQTRANS_IDLE)
        (void)!db_exec_simple(db, "ROLLBACK", NULL);
    pthread_mutex_lock(&pool->mu);
    db->next_free = pool->free;
    pool->free = db;
    pool->in_use--;
    pthread_cond_signal(&pool->cv);
    pthread_mutex_unlock(&pool->mu);
}

void db_pool_stats(struct db_pool *pool, struct db_pool_stats *out)
{
    pthread_mutex_lock(&pool->mu);
    *out = (struct db_pool_stats){
        .size = pool->size,
        .open = pool->opened,
        .in_use = pool->in_use,
        .waits_total = pool->waits_total,
        .timeouts_total = pool->timeouts_total,
        .wait_us_total = pool->wait_us_total,
    };
    pthread_mutex_unlock(&pool->mu);
}

char *db_text_array(const char *const *v, size_t n)
{
    size_t cap = 3, len = 1;
    char *s;

    for (size_t i = 0; i < n; i++)
        cap += v[i] ? 2 * strlen(v[i]) + 3 : 5;
    s = xmalloc(cap);
    s[0] = '{';
    for (size_t i = 0; i < n; i++) {
        if (i)
            s[len++] = ',';
        if (!v[i]) {
            memcpy(s + len, "NULL", 4);
            len += 4;
            continue;
        }
        s[len++] = '"';
        for (const char *p = v[i]; *p; p++) {
            if (*p == '"' || *p == '\\')
                s[len++] = '\\';
            s[len++] = *p;
        }
        s[len++] = '"';
    }
    s[len++] = '}';
    s[len] = '\0';
    return s;
}
