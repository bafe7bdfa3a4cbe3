/* store/db.c — connections, per-connection prepared statements (or unnamed
 * ones), calls bounded by the connection's silence, the pool. */
#include "store/db_internal.h"

#include "common/log.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
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
    int silence_ms; /* a call's tolerated silence now (db_ping lowers it) */
    /* The pool's count of read-only refusals (NULL standalone), and its
     * value when this connection was opened. */
    _Atomic int64_t *read_only_seen;
    int64_t opened_at_seen;
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
    _Atomic int64_t read_only_seen; /* see db_fail */
};

/* Server notices ("relation already exists, skipping") go to the debug log,
 * one line each, instead of libpq's default raw write to stderr. */
static void db_notice(void *arg, const char *message)
{
    size_t n = strcspn(message, "\n");
    (void)arg;
    LOG(LOG_DEBUG, "database notice: %.*s", (int)n, message);
}

int db_silence_ms(const struct db_options *opt)
{
    if (opt->tcp_user_timeout_ms > 0)
        return opt->tcp_user_timeout_ms;
    return (opt->statement_timeout_ms > 0 ? opt->statement_timeout_ms : 30000) + 5000;
}

/* Turns the libpq message of a failed connection attempt into one line. */
static enum status db_open_failed(struct db *db, struct error *err)
{
    enum status st = error_set(err, ST_UNAVAILABLE, "could not connect to the database: %s",
                               PQerrorMessage(db->conn));
    for (char *p = err ? err->message : NULL; p && *p; p++)
        if (*p == '\n')
            *p = ' ';
    PQfinish(db->conn);
    db->conn = NULL;
    return st;
}

static enum status db_open(struct db *db, struct error *err)
{
    char timeout[16], options[80], user_timeout[24], idle[16], interval[16];
    const char *keys[11], *vals[11];
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
    xsnprintf(user_timeout, sizeof(user_timeout), "%d", db_silence_ms(&db->opt));
    xsnprintf(idle, sizeof(idle), "%d",
              db->opt.keepalive_idle_s > 0 ? db->opt.keepalive_idle_s : 30);
    xsnprintf(interval, sizeof(interval), "%d",
              db->opt.keepalive_interval_s > 0 ? db->opt.keepalive_interval_s : 10);
    keys[n] = "dbname", vals[n++] = db->conninfo;
    keys[n] = "connect_timeout", vals[n++] = timeout;
    keys[n] = "keepalives", vals[n++] = "1";
    keys[n] = "keepalives_idle", vals[n++] = idle;
    keys[n] = "keepalives_interval", vals[n++] = interval;
    keys[n] = "application_name", vals[n++] = db->appname;
    /* Without it a call on a silently dead network waits for TCP to give up
     * (about 15 minutes); the server's statement_timeout cannot help. */
    keys[n] = "tcp_user_timeout", vals[n++] = user_timeout;
    keys[n] = "options", vals[n++] = options;
    keys[n] = NULL, vals[n] = NULL;
    if (db->read_only_seen)
        db->opened_at_seen = atomic_load(db->read_only_seen);
    db->conn = PQconnectdbParams(keys, vals, 1);
    db->nprepared = 0;
    db->silence_ms = db_silence_ms(&db->opt);
    if (!db->conn)
        return error_set(err, ST_UNAVAILABLE, "could not connect to the database: out of memory");
    /* Nonblocking: a call sends and waits in db_await, under its own bound,
     * never inside libpq's unbounded waits. */
    if (PQstatus(db->conn) != CONNECTION_OK || PQsetnonblocking(db->conn, 1) != 0)
        return db_open_failed(db, err);
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

/* Gives up a connection that stopped answering: the next checkout of a
 * pooled one reconnects. */
static void db_drop(struct db *db)
{
    PQfinish(db->conn);
    db->conn = NULL;
    db->nprepared = 0;
}

/* What a client may be told about a failure of class state (a SQLSTATE),
 * or NULL. These are states of the database, not of a request: they pass
 * by themselves, so the request may be repeated. */
static const char *db_reason(const char *state)
{
    if (strcmp(state, "25006") == 0) /* read_only_sql_transaction */
        return "the database is read-only";
    if (strcmp(state, "53100") == 0) /* disk_full */
        return "the database is out of disk space";
    if (strcmp(state, "53200") == 0) /* out_of_memory */
        return "the database is out of memory";
    if (STR_IN(state, "57014", "55P03")) /* statement or lock timeout */
        return "the database did not answer in time";
    return NULL;
}

/* The status of a failure of class state: connection loss and the states
 * that pass by themselves are ST_UNAVAILABLE (40P01: a deadlock victim,
 * rolled back; safe to retry). */
static enum status db_state_status(const char *state)
{
    if (strcmp(state, "23505") == 0)
        return ST_CONFLICT;
    if (strncmp(state, "08", 2) == 0 || strncmp(state, "53", 2) == 0 ||
        STR_IN(state, "57014", "57P01", "57P02", "57P03", "40P01", "25006", "55P03"))
        return ST_UNAVAILABLE;
    return ST_DB;
}

/* Maps a failed result to a status; connection loss is ST_UNAVAILABLE. */
static enum status db_fail(struct db *db, PGresult *r, const char *what, struct error *err)
{
    const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    const char *msg = r ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) : NULL;
    enum status st = ST_UNAVAILABLE;

    if (!msg)
        msg = db->conn ? PQerrorMessage(db->conn) : "no database connection";
    if (db->conn && PQstatus(db->conn) == CONNECTION_OK && state)
        st = db_state_status(state);
    error_set(err, st, "%s failed: %s", what, msg);
    if (err) {
        for (char *p = err->message; *p; p++)
            if (*p == '\n')
                *p = ' ';
        if (st == ST_UNAVAILABLE && state)
            err->reason = db_reason(state);
    }
    if (st == ST_DB)
        LOG(LOG_ERROR, "database error stmt=%s sqlstate=%s msg=\"%s\"", what, state ? state : "",
            msg);
    /* A session keeps the default_transaction_read_only it started with
     * (ALTER DATABASE/ROLE), and one on a server that became a standby
     * stays there: only a new connection sees the database writable again,
     * or finds the new primary (target_session_attrs=read-write). So this
     * one is closed, and every pooled one opened before now is opened anew
     * at its next checkout (db_pool_get_wait), instead of failing once each
     * after the database is writable again. */
    if (state && strcmp(state, "25006") == 0 && db->conn) {
        db_drop(db);
        if (db->read_only_seen)
            atomic_fetch_add(db->read_only_seen, 1);
    }
    if (r)
        PQclear(r);
    return st;
}

/* Waits until the socket can take more of the call (out) or has something
 * to read, for at most until_ms; false when that passed first. */
static bool db_wait_socket(struct db *db, bool out, int64_t until_ms)
{
    for (;;) {
        int64_t left = until_ms - clock_mono_ms();
        struct pollfd pf = {PQsocket(db->conn), (short)(POLLIN | (out ? POLLOUT : 0)), 0};
        int n;

        if (left <= 0)
            return false;
        n = poll(&pf, 1, (int)(left < 1000 ? left : 1000));
        if (n > 0 || (n < 0 && errno != EINTR))
            return true;
    }
}

/* Keeps what PQexec would: the last result, unless one was an error. */
static void db_keep(PGresult **kept, PGresult *r)
{
    ExecStatusType ks = *kept ? PQresultStatus(*kept) : PGRES_COMMAND_OK;

    if (ks == PGRES_FATAL_ERROR) {
        PQclear(r);
        return;
    }
    PQclear(*kept);
    *kept = r;
}

/* The answer to the call just sent: every result until the end, PQexec's
 * way, while something arrives at least every db->silence_ms (each byte
 * read restarts the wait). A silent peer (a network that drops everything,
 * a proxy or pooler that hangs) makes the call fail ST_UNAVAILABLE and the
 * connection closed, whatever TCP says; *res is NULL then. */
static enum status db_await(struct db *db, const char *what, PGresult **res, struct error *err)
{
    int64_t until = clock_mono_ms() + db->silence_ms;
    PGresult *kept = NULL, *r;

    for (;;) {
        int fl = PQflush(db->conn);
        /* Not busy (or broken): PQgetResult answers at once. */
        if (fl < 0 || !PQisBusy(db->conn) || PQstatus(db->conn) != CONNECTION_OK) {
            r = PQgetResult(db->conn);
            if (!r)
                break;
            db_keep(&kept, r);
            continue;
        }
        if (!db_wait_socket(db, fl == 1, until)) {
            PQclear(kept);
            db_drop(db);
            *res = NULL;
            error_set(err, ST_UNAVAILABLE,
                      "%s failed: no answer from the database within %d ms; connection closed",
                      what, db->silence_ms);
            if (err)
                err->reason = "the database did not answer in time";
            return ST_UNAVAILABLE;
        }
        if (PQconsumeInput(db->conn))
            until = clock_mono_ms() + db->silence_ms;
    }
    *res = kept;
    return ST_OK;
}

/* Sends with send's return (1 = sent), then awaits the answer; a result
 * that is neither rows nor a command's completion is a failure. */
static enum status db_finish(struct db *db, int sent, const char *what, PGresult **res,
                             struct error *err)
{
    PGresult *r = NULL;
    ExecStatusType rs;
    enum status st;

    *res = NULL;
    if (!sent)
        return db_fail(db, NULL, what, err);
    st = db_await(db, what, &r, err);
    if (st != ST_OK)
        return st;
    rs = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    if (rs != PGRES_TUPLES_OK && rs != PGRES_COMMAND_OK)
        return db_fail(db, r, what, err);
    *res = r;
    return ST_OK;
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
    enum status s;

    if (db_is_prepared(db, st))
        return ST_OK;
    if (db->nprepared >= DB_MAX_PREPARED)
        return error_set(err, ST_INTERNAL, "too many prepared statements");
    s = db_finish(db, PQsendPrepare(db->conn, st->name, st->sql, nparams, NULL), st->name, &r, err);
    if (s != ST_OK)
        return s;
    PQclear(r);
    db->prepared[db->nprepared++] = st;
    return ST_OK;
}

const struct stmt *db_stmt_for(const struct db *db, const struct stmt *inline_sql,
                               const struct stmt *fn)
{
    return db->opt.unnamed_statements ? fn : inline_sql;
}

/* With unnamed statements (db.prepared_statements false) the statement is
 * parsed on every call, in the same message train as its execution, so a
 * transaction-pooling proxy may run each call on another server
 * connection: nothing is left behind on any of them. */
enum status db_run(struct db *db, const struct stmt *st, int nparams, const char *const *params,
                   PGresult **res, struct error *err)
{
    enum status s;

    *res = NULL;
    if (!db->conn || PQstatus(db->conn) != CONNECTION_OK)
        return error_set(err, ST_UNAVAILABLE, "%s failed: no database connection", st->name);
    if (db->opt.unnamed_statements)
        return db_finish(db,
                         PQsendQueryParams(db->conn, st->sql, nparams, NULL, params, NULL, NULL, 0),
                         st->name, res, err);
    s = db_prepare(db, st, nparams, err);
    if (s != ST_OK)
        return s;
    return db_finish(db, PQsendQueryPrepared(db->conn, st->name, nparams, params, NULL, NULL, 0),
                     st->name, res, err);
}

enum status db_exec_simple(struct db *db, const char *sql, struct error *err)
{
    PGresult *r;
    enum status st;

    if (!db->conn || PQstatus(db->conn) != CONNECTION_OK)
        return error_set(err, ST_UNAVAILABLE, "no database connection");
    st = db_finish(db, PQsendQuery(db->conn, sql), "statement", &r, err);
    PQclear(r);
    return st;
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
     * hands the short timeout to another client. A server that does not
     * answer at all is given up a second past it. */
    xsnprintf(sql, sizeof(sql), "BEGIN; SET LOCAL statement_timeout = %d", timeout_ms);
    db->silence_ms = timeout_ms + 1000;
    st = db_exec_simple(db, sql, err);
    if (st == ST_OK)
        st = db_run(db, &ping, 0, NULL, &r, err);
    if (st == ST_OK) {
        PQclear(r);
        st = db_exec_simple(db, "COMMIT", err);
    } else if (db->conn && PQstatus(db->conn) == CONNECTION_OK) {
        (void)!db_exec_simple(db, "ROLLBACK", NULL);
    }
    db->silence_ms = db_silence_ms(&db->opt);
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
    db->read_only_seen = &pool->read_only_seen;
    if (db->conn && db->opened_at_seen != atomic_load(&pool->read_only_seen))
        db_drop(db); /* opened before a read-only refusal: it may be read-only itself */
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

const struct db_options *db_pool_options(const struct db_pool *pool)
{
    return &pool->opt;
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
