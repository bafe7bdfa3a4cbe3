/* tests/support/harness.h — what integration and end-to-end suites share:
 * a fresh database per suite cloned from the migrated template
 * (OPSRUN_TEST_DATABASE_URL, set by scripts/test.sh), the real binary
 * started on a free loopback port (OPSRUN_BIN), an HTTP client (libcurl),
 * SQL for assertions, and PostgreSQL restarts (OPSRUN_TEST_PGCTL restart
 * OPSRUN_TEST_PGDATA). Failures abort the test with a message; processes
 * are killed at exit. Logs of started binaries stay in /tmp/opsrun-tests. */
#ifndef OPSRUN_TEST_HARNESS_H
#define OPSRUN_TEST_HARNESS_H

#include <check.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <sys/types.h>

/* Creates (or recreates) database `name` from the template; returns its
 * conninfo (static storage per call site is not assumed: heap, never freed
 * before exit). */
char *th_db_create(const char *name);
/* Same server as the template, another database: a conninfo string. */
char *th_conninfo(const char *dbname);
PGconn *th_pg(const char *conninfo);
/* Runs SQL (printf-style; tests only, never input); aborts on error. */
PGresult *th_sql(PGconn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The first column of the first row as an integer. */
long long th_sql_int(PGconn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

struct th_proc {
    pid_t pid;
    int port;
    char url[96];  /* http://127.0.0.1:port */
    char log[256]; /* its stderr */
};
/* Starts `opsrun serve` on a free port against conninfo, with extra flags
 * (NULL-terminated, may be NULL) and extra environment "K=V" entries
 * (NULL-terminated, may be NULL); waits until /livez answers. */
void th_start(struct th_proc *p, const char *conninfo, const char *const *args,
              const char *const *env);
/* Sends sig and waits up to timeout_s; returns the exit status (or -1 when
 * it had to be killed). */
int th_stop(struct th_proc *p, int sig, int timeout_s);
/* Writes a JSON config file and returns its path. */
char *th_config_file(const char *name, const char *json);

struct th_resp {
    long status;
    char *body;
    json_t *json; /* parsed body, NULL when not JSON */
    char content_type[128];
    char location[256];
    char allow[64];
    char retry_after[16];
};
/* One request; body/content_type may be NULL. Returns false on a transport
 * failure (connection refused, timeout). */
bool th_http(const char *method, const char *url, const char *content_type, const char *body,
             struct th_resp *r);
void th_resp_free(struct th_resp *r);
/* Convenience: POST JSON to base+path, asserting a transport success. */
void th_post_json(const char *base, const char *path, const char *body, struct th_resp *r);
void th_get(const char *base, const char *path, struct th_resp *r);

/* Polls GET /runs/{id} until status == completed or timeout_s; returns the
 * final outcome (heap) or NULL on timeout. */
char *th_wait_run(const char *base, const char *run_id, int timeout_s);

void th_pg_restart(void);
void th_sleep_ms(long ms);
long long th_now_ms(void);

/* Runs a Check suite (CK_NOFORK off by default); returns exit code. */
int th_run_suite(Suite *s);

#endif
