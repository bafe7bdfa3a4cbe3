/* store/db.h — PostgreSQL connections and a bounded pool. A struct db is one
 * connection used by one thread at a time; the pool is thread-safe.
 * Connection failures come back as ST_UNAVAILABLE (the caller answers 503 and
 * the pool reconnects on the next checkout); other database errors as ST_DB.
 * Only store/ sees libpq. */
#ifndef OPSRUN_STORE_DB_H
#define OPSRUN_STORE_DB_H

#include "common/common.h"

struct db;
struct db_pool;

struct db_options {
    const char *conninfo; /* libpq URI or key=value string */
    int connect_timeout_s;
    int statement_timeout_ms; /* 0 = server default */
    const char *application_name;
    /* How long a connection may stay silent: libpq's tcp_user_timeout (sent
     * data unacknowledged), and the longest a call waits while nothing
     * arrives from the server before it gives the connection up (a peer
     * that acknowledges but never answers). 0 = statement_timeout_ms + 5000
     * (35000 without a statement timeout). */
    int tcp_user_timeout_ms;
    int keepalive_idle_s;     /* TCP keepalives: first probe after; 0 = 30 */
    int keepalive_interval_s; /* and between probes; 0 = 10 */
    /* No named prepared statement: each statement is parsed anew as the
     * unnamed one (for transaction-pooling proxies). */
    bool unnamed_statements;
};

/* The silence a call on a connection of opt tolerates (tcp_user_timeout_ms
 * with its default applied). */
int db_silence_ms(const struct db_options *opt);

/* A standalone connection (listener, migrate, tests); *out owned by caller. */
enum status db_connect(const struct db_options *opt, struct db **out, struct error *err) WUR;
void db_close(struct db *db); /* NULL is a no-op */
/* ST_OK while the connection is usable, reconnecting when it is not. */
enum status db_ensure(struct db *db, struct error *err) WUR;
int db_socket(const struct db *db);

/* The pool opens connections lazily, up to size. */
struct db_pool *db_pool_new(const struct db_options *opt, int size, int wait_ms);
void db_pool_free(struct db_pool *pool); /* every db must be back */
/* Waits up to the pool's wait_ms for a connection, else ST_UNAVAILABLE. */
enum status db_pool_get(struct db_pool *pool, struct db **out, struct error *err) WUR;
/* Same, with an explicit wait (0 = do not wait). */
enum status db_pool_get_wait(struct db_pool *pool, int wait_ms, struct db **out,
                             struct error *err) WUR;
void db_pool_put(struct db_pool *pool, struct db *db); /* NULL is a no-op */
/* The options the pool connects with (borrowed, lives with the pool). */
const struct db_options *db_pool_options(const struct db_pool *pool);

/* The pool now, and its checkouts since it was made (for /metrics). */
struct db_pool_stats {
    int size, open, in_use; /* connections: the most, opened, checked out */
    int64_t waits_total;    /* checkouts that found none free and waited */
    int64_t timeouts_total; /* of those, gave up (ST_UNAVAILABLE) */
    int64_t wait_us_total;  /* the time those waits took */
};
void db_pool_stats(struct db_pool *pool, struct db_pool_stats *out);

/* Simple statements without parameters: "BEGIN", "COMMIT", "ROLLBACK",
 * LISTEN, DDL. Never for anything built from input. */
enum status db_exec_simple(struct db *db, const char *sql, struct error *err) WUR;
/* A short health query bounded by timeout_ms. */
enum status db_ping(struct db *db, int timeout_ms, struct error *err) WUR;

/* LISTEN support for the listener thread: reads what has arrived and calls
 * fn once per notification (channel, payload). ST_UNAVAILABLE when the
 * connection broke. */
enum status db_consume_notifies(struct db *db,
                                void (*fn)(void *arg, const char *channel, const char *payload),
                                void *arg, struct error *err) WUR;

#endif
