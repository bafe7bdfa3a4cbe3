/* tests/support/harness.h — what integration and end-to-end suites share:
 * a fresh database per test cloned from the migrated template
 * (OPSRUN_TEST_DATABASE_URL, set by scripts/test.sh), the real binary
 * started on a free loopback port (OPSRUN_BIN), an HTTP client (libcurl),
 * SQL for assertions, and PostgreSQL restarts (OPSRUN_TEST_PGCTL restart
 * OPSRUN_TEST_PGDATA). Failures abort the test with a message; processes
 * are killed at exit. Logs of started binaries stay in /tmp/opsrun-tests.
 *
 * ctest runs every test of these suites as a process of its own, side by
 * side with the others (tests/CMakeLists.txt): the environment names the
 * test (OPSRUN_TEST_ONLY, OPSRUN_TEST_NAME), and the few tests that need a
 * cluster to themselves (they stop or restart it) get the second one
 * (OPSRUN_TEST_CLUSTER). So that tests running at once never meet, database
 * names are claimed per test (th_db_create) and ports per process
 * (th_free_port). */
#ifndef OPSRUN_TEST_HARNESS_H
#define OPSRUN_TEST_HARNESS_H

#include <check.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Creates (or recreates) database `name` from the template; returns its
 * conninfo (static storage per call site is not assumed: heap, never freed
 * before exit). Under scripts/test.sh (OPSRUN_TEST_DBNAMES set), the first
 * test to create a name owns it for the whole run: another test that
 * creates it, and so might drop it under the first, fails. */
char *th_db_create(const char *name);
/* As th_db_create, but empty (from template0, no migration applied). */
char *th_db_create_empty(const char *name);
/* Same server as the template, another database: a conninfo string. */
char *th_conninfo(const char *dbname);
PGconn *th_pg(const char *conninfo);
/* Runs SQL (printf-style; tests only, never input); aborts on error. */
PGresult *th_sql(PGconn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The first column of the first row as an integer. */
long long th_sql_int(PGconn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The first column of the first row as a new string (free); NULL when
 * there is no row or the value is NULL. */
char *th_sql_str(PGconn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Waits until every run in c's database is completed; after timeout_ms
 * the test fails, saying how many are not. */
void th_wait_all_completed(PGconn *c, int timeout_ms);

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
/* As th_start, listening on host (an IPv4 literal: "0.0.0.0" listens on
 * every address) instead of 127.0.0.1; p->url still names 127.0.0.1. */
void th_start_host(struct th_proc *p, const char *host, const char *conninfo,
                   const char *const *args, const char *const *env);
/* Runs OPSRUN_BIN with args (NULL-terminated, after the binary) and extra
 * environment "K=V" entries (may be NULL) to its end, for at most
 * timeout_s; its standard output and error in *out and *err (heap, may be
 * NULL). Returns the exit status, or -1 when it had to be killed. */
int th_exec(const char *const *args, const char *const *env, int timeout_s, char **out, char **err);
/* As th_exec for any program: argv[0] is looked up in PATH. It runs in a
 * process group of its own, which a timeout kills whole (a script and the
 * commands it started). */
int th_run(const char *const *argv, const char *const *env, int timeout_s, char **out, char **err);
/* A port nothing listens on now, and that no other test process (of any
 * checkout) is handed while this process lives: below the kernel's range of
 * ephemeral ports, reserved by a lock in /tmp/opsrun-tests/ports. */
int th_free_port(void);
/* As th_start and th_start_host, with another opsrun binary than
 * OPSRUN_BIN (the previous release, in a rolling upgrade). */
void th_start_bin(struct th_proc *p, const char *bin, const char *conninfo, const char *const *args,
                  const char *const *env);
void th_start_bin_host(struct th_proc *p, const char *bin, const char *host, const char *conninfo,
                       const char *const *args, const char *const *env);
/* Starts `opsrun serve` again on the port p had (p stopped with th_stop),
 * as th_start does: what a client of the old process sees when it comes
 * back, at the same address. opsrun's listening socket has SO_REUSEADDR
 * (libmicrohttpd's default), so the old one's closed connections do not
 * keep the port. */
void th_restart(struct th_proc *p, const char *conninfo, const char *const *args,
                const char *const *env);
/* Sends sig and waits up to timeout_s; returns the exit status (or -1 when
 * it had to be killed). */
int th_stop(struct th_proc *p, int sig, int timeout_s);
/* Writes a JSON config file and returns its path. */
char *th_config_file(const char *name, const char *json);
/* One entry of auth.tokens: scopes as the members of a JSON array
 * ("\"read\", \"cancel\""), token in the clear. */
struct th_token {
    const char *name, *tenant, *scopes, *token;
};
/* The member "auth": {"tokens": [...]} for t[0..n), each token stored as its
 * SHA-256, as text to put into a configuration's object (heap, free). */
char *th_auth_tokens(const struct th_token *t, size_t n);

struct th_resp {
    long status;
    char *body;
    json_t *json; /* parsed body, NULL when not JSON */
    char content_type[128];
    char location[256];
    char allow[64];
    char retry_after[16];
    char www_authenticate[256];
};
/* One request; body/content_type may be NULL. Returns false on a transport
 * failure (connection refused, timeout). */
bool th_http(const char *method, const char *url, const char *content_type, const char *body,
             struct th_resp *r);
/* As th_http, sending "Authorization: Bearer <token>" when token is not NULL. */
bool th_http_token(const char *method, const char *url, const char *token, const char *content_type,
                   const char *body, struct th_resp *r);
void th_resp_free(struct th_resp *r);
/* Appends one HTTP exchange as a JSON line to the file named by
 * OPSRUN_TEST_EXCHANGES, when it is set (tests/openapi/validate.mjs checks
 * every line against openapi.yaml): url is a full URL or a path with its
 * query; body (body_len bytes, may be NULL) is what came back, or one
 * event's data when sse_event is not NULL. th_http and the SSE client call
 * it themselves; a suite that talks HTTP some other way calls it too. */
void th_record_exchange(const char *method, const char *url, long status, const char *content_type,
                        const char *body, size_t body_len, const char *sse_event);
/* Convenience: POST JSON to base+path, asserting a transport success. */
void th_post_json(const char *base, const char *path, const char *body, struct th_resp *r);
void th_get(const char *base, const char *path, struct th_resp *r);

/* Polls GET /runs/{id} until status == completed or timeout_s; returns the
 * final outcome (heap) or NULL on timeout. */
char *th_wait_run(const char *base, const char *run_id, int timeout_s);

/* Restarts the cluster of OPSRUN_TEST_PGDATA, which only the tests that
 * tests/CMakeLists.txt runs alone on a cluster of their own have: any
 * other aborts, naming that list. */
void th_pg_restart(void);
void th_sleep_ms(long ms);
long long th_now_ms(void);

/* ---- small helpers the end-to-end suites share ---- */

/* o[k] as a string, NULL when absent or not a string. */
const char *th_js(const json_t *o, const char *k);
/* o[k] as an integer, 0 when absent or not an integer. */
long long th_ji(const json_t *o, const char *k);
/* Both non-NULL and equal. */
bool th_streq(const char *a, const char *b);
/* Whether pid is a child still running (reaps it when it has exited). */
bool th_alive(pid_t pid);
/* The first sanitizer report line in log plus up to 3 frames outside
 * tests/ (" | "-separated) into out; "" when there is none. */
void th_sanitizer_report(const char *log, char *out, size_t cap);
/* The first line of the log file holding needle, into line (cap bytes,
 * without its newline); false when there is none. A log that cannot be read
 * aborts the test. */
bool th_log_find(const char *log, const char *needle, char *line, size_t cap);
/* Asserts that doc (a path under OPSRUN_SOURCE_DIR, "docs/schedules.md")
 * shows the line the server printed: its first line holding doc_needle has
 * the form of the first line of log holding needle, that is the same once
 * the timestamp's digits and every key=value's value are set aside. */
void th_check_documented_line(const char *log, const char *needle, const char *doc,
                              const char *doc_needle);
/* Asserts a stopped process's status rc (from th_stop) is 0, quoting any
 * sanitizer report and the log path. */
void th_check_exit0(const struct th_proc *p, int rc);
/* SIGTERM with nothing active left: asserts exit 0 within 20 s. */
void th_stop_clean(struct th_proc *p);
/* Starts p on a freshly created database db, with a config file when
 * config_json is non-NULL; returns the conninfo (harness-owned, valid
 * until the next call). */
const char *th_start_fresh(struct th_proc *p, const char *db, const char *config_json);
/* POSTs body to /alerts, asserts HTTP want and a run_id; returns it (heap). */
char *th_submit(const struct th_proc *p, const char *body, long want);
/* POSTs body (JSON; NULL: none) to path with token (NULL: none), asserts
 * HTTP want; the answer in *r (th_resp_free). */
void th_post_expect(const struct th_proc *p, const char *path, const char *token, const char *body,
                    long want, struct th_resp *r);
/* GET /runs/{id}, asserting 200 and a JSON body; the run (new reference). */
json_t *th_get_run(const struct th_proc *p, const char *id);
/* Polls GET /runs/{id} every 20 ms until status == want; false on timeout. */
bool th_wait_status(const struct th_proc *p, const char *id, const char *want, int timeout_ms);
/* Waits up to timeout_s for the run to complete (asserting it did);
 * returns it (new reference). */
json_t *th_wait_done(const struct th_proc *p, const char *id, int timeout_s);
/* Waits up to timeout_s for the run to complete; asserts its outcome. */
void th_expect_outcome(const struct th_proc *p, const char *id, const char *want, int timeout_s);
/* Asserts an RFC 9457 problem: HTTP want, problem+json, string type, title
 * and detail, integer status == want; what names the request. */
void th_check_problem(const struct th_resp *r, long want, const char *what);
/* Whether errors (an array) holds {"field": field, "message": string}. */
bool th_has_error_field(const json_t *errors, const char *field);

/* Runs a Check suite (CK_NOFORK off by default); returns exit code. With
 * OPSRUN_TEST_ONLY (test names, comma-separated) it runs only those tests
 * (the suite adds no other, see below) and fails when one is not in the
 * suite. With OPSRUN_TEST_CLUSTER=alone it first points the suite at the
 * cluster it has to itself (OPSRUN_TEST_ALONE_DATABASE_URL, _ADMIN_URL and
 * _PGDATA become OPSRUN_TEST_DATABASE_URL, _ADMIN_URL and _PGDATA). */
int th_run_suite(Suite *s);

/* Every tcase_add_test (and its variants) of a suite comes here: with
 * OPSRUN_TEST_ONLY set, a test it does not name is left out. */
void th_tcase_add_test(TCase *tc, const TTest *t, int sig, int exit_value, int start, int end);
#define _tcase_add_test th_tcase_add_test

#endif
