/* tests/e2e/test_exec.c — the exec action with a real command: the input on
 * stdin and the result from stdout, the environment it gets (and what it
 * must not: opsrun's own), progress lines on fd 3, exit 75 retried, other
 * exits failed with the tail of stderr, summaries lifted from stdout's
 * JSON, non-JSON stdout, stdout past its bound, cancel and timeout killing
 * the whole process group (a child that ignores SIGTERM included). */
#include "../support/harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static PGconn *g_db;
static char g_script[256];

/* One script, many modes: $1 is the mode, $2 a file for pids. */
static const char *const SCRIPT =
    "#!/bin/sh\n"
    "case \"$1\" in\n"
    "ok)\n"
    "  input=$(cat)\n"
    "  printf '{\"input\":%s,\"run\":\"%s\",\"attempt\":%s,\"tenant\":\"%s\",\"type\":\"%s\","
    "\"secret\":\"%s\",\"leak\":\"%s\",\"sockets\":%s}' \"$input\" \"$OPSRUN_RUN_ID\" "
    "\"$OPSRUN_ATTEMPT\" \"$OPSRUN_TENANT\" \"$OPSRUN_RUN_TYPE\" \"${X_SECRET:-}\" "
    "\"${LEAK_ME:-}\" \"$(ls -l /proc/$$/fd | grep -c socket)\" ;;\n"
    "progress)\n"
    "  echo 'progress 40 half way' >&3\n"
    "  echo 'not a progress line' >&3\n"
    "  sleep 0.6\n"
    "  echo 'progress 80 nearly' >&3\n"
    "  sleep 0.6\n"
    "  echo '{\"done\":true}' ;;\n"
    "retry_once)\n"
    "  if [ \"$OPSRUN_ATTEMPT\" = 1 ]; then echo 'try later' >&2; exit 75; fi\n"
    "  echo \"{\\\"attempt\\\":$OPSRUN_ATTEMPT}\" ;;\n"
    "always_75)\n"
    "  echo 'still busy' >&2; exit 75 ;;\n"
    "fail)\n"
    "  echo 'step 1 fine' >&2\n"
    "  echo 'something broke: disk full' >&2\n"
    "  exit 3 ;;\n"
    "sleep)\n"
    "  sleep 30 &\n"
    "  echo \"$$ $!\" > \"$2\"\n"
    "  wait ;;\n"
    "stubborn)\n"
    "  trap '' TERM\n"
    "  echo \"$$\" > \"$2\"\n"
    "  while true; do sleep 0.1; done ;;\n"
    "big)\n"
    "  head -c 3000000 /dev/zero | tr '\\0' 'a' ;;\n"
    "partial)\n"
    "  echo '{\"rows\":4,\"summary_counts\":{\"succeeded\":3,\"failed\":1},"
    "\"failure_summary\":[{\"code\":\"bad_row\",\"message\":\"row 2\"}]}' ;;\n"
    "text)\n"
    "  echo 'hello world' ;;\n"
    "esac\n";

static void write_script(void)
{
    FILE *f;

    mkdir("/tmp/opsrun-tests", 0777);
    snprintf(g_script, sizeof(g_script), "/tmp/opsrun-tests/exec-%d.sh", (int)getpid());
    f = fopen(g_script, "w");
    ck_assert_ptr_nonnull(f);
    fputs(SCRIPT, f);
    fclose(f);
    chmod(g_script, 0755);
}

static void start(struct th_proc *p, const char *db)
{
    static const char *const env[] = {"EXEC_SECRET=s3cr3t", "LEAK_ME=opsrun-only", NULL};
    char cfg[2048], *path, *conninfo;
    const char *args[3];

    write_script();
    snprintf(cfg, sizeof(cfg),
             "{\"run_types\": {"
             " \"x\": {\"action\": \"exec\", \"max_attempts\": 2, \"retry_backoff_ms\": 50,"
             "  \"params\": {\"argv\": [\"%s\", \"{{input:/mode}}\", \"{{input:/pidfile}}\"],"
             "   \"env\": {\"X_SECRET\": \"{{env:EXEC_SECRET}}\"}, \"grace_ms\": 300,"
             "   \"max_stdout_bytes\": 1000000}},"
             " \"xshort\": {\"action\": \"exec\", \"max_attempts\": 1, \"timeout_s\": 1,"
             "  \"params\": {\"argv\": [\"%s\", \"{{input:/mode}}\", \"{{input:/pidfile}}\"],"
             "   \"grace_ms\": 300}}}}",
             g_script, g_script);
    path = th_config_file(db, cfg);
    args[0] = "--config", args[1] = path, args[2] = NULL;
    conninfo = th_db_create(db);
    th_start(p, conninfo, args, env);
    if (g_db)
        PQfinish(g_db);
    g_db = th_pg(conninfo);
    free(path);
    free(conninfo);
}

static void stop(struct th_proc *p)
{
    th_stop_clean(p);
    PQfinish(g_db);
    g_db = NULL;
    unlink(g_script);
}

static char *submit(const struct th_proc *p, const char *type, const char *id, const char *mode,
                    const char *pidfile)
{
    char body[512];

    snprintf(body, sizeof(body),
             "{\"alert_type\":\"%s\",\"run_id\":\"%s\",\"data\":{\"mode\":\"%s\",\"pidfile\":"
             "\"%s\",\"n\":7}}",
             type, id, mode, pidfile ? pidfile : "");
    return th_submit(p, body, 202);
}

static json_t *wait_done(const struct th_proc *p, const char *id, int timeout_s)
{
    char *o = th_wait_run(p->url, id, timeout_s);

    ck_assert_msg(o, "run %s did not complete within %d s", id, timeout_s);
    free(o);
    return th_get_run(p, id);
}

static const char *err_msg(const json_t *run)
{
    return th_js(json_object_get(run, "error"), "message");
}

/* Whether the process runs (a zombie does not: an orphaned child is
 * reparented to a PID 1 that may never reap it). */
static bool running(long pid)
{
    char path[64], stat[512], *paren;
    FILE *f;
    size_t n;

    snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    if (!(f = fopen(path, "r")))
        return false;
    n = fread(stat, 1, sizeof(stat) - 1, f);
    fclose(f);
    stat[n] = '\0';
    paren = strrchr(stat, ')');
    return paren && paren[1] == ' ' && paren[2] != 'Z' && paren[2] != 'X';
}

/* Whether any of the pids in the file still runs. */
static bool pids_alive(const char *file)
{
    FILE *f = fopen(file, "r");
    long pid;
    bool alive = false;

    if (!f)
        return false;
    while (fscanf(f, "%ld", &pid) == 1)
        alive |= running(pid);
    fclose(f);
    return alive;
}

/* The input on stdin, the result from stdout; the environment has the
 * run's variables and the configured secret, not opsrun's own; no
 * descriptor beyond 0-3 is inherited. */
START_TEST(stdin_stdout_env)
{
    struct th_proc p;
    json_t *run, *res;
    char *id;

    start(&p, "e2e_exec_ok");
    id = submit(&p, "x", "e-ok", "ok", NULL);
    run = wait_done(&p, id, 20);
    ck_assert_str_eq(th_js(run, "outcome"), "succeeded");
    res = json_object_get(run, "result");
    ck_assert_int_eq(th_ji(json_object_get(res, "input"), "n"), 7);
    ck_assert_str_eq(th_js(res, "run"), "e-ok");
    ck_assert_int_eq(th_ji(res, "attempt"), 1);
    ck_assert_str_eq(th_js(res, "tenant"), "default");
    ck_assert_str_eq(th_js(res, "type"), "x");
    ck_assert_str_eq(th_js(res, "secret"), "s3cr3t");
    ck_assert_str_eq(th_js(res, "leak"), "");
    /* none of opsrun's sockets (database, HTTP) reached the command */
    ck_assert_int_eq(th_ji(res, "sockets"), 0);
    json_decref(run);
    free(id);
    stop(&p);
}
END_TEST

/* "progress N text" lines on fd 3 become progress events; other lines there
 * are ignored. */
START_TEST(progress_fd)
{
    struct th_proc p;
    json_t *run;
    char *id;

    start(&p, "e2e_exec_progress");
    id = submit(&p, "x", "e-prog", "progress", NULL);
    run = wait_done(&p, id, 20);
    ck_assert_str_eq(th_js(run, "outcome"), "succeeded");
    ck_assert_int_eq(th_sql_int(g_db, "SELECT count(*) FROM run_events WHERE run_id = 'e-prog' "
                                      "AND type = 'progress' AND progress = 40 AND step = "
                                      "'half way'"),
                     1);
    ck_assert_int_eq(th_sql_int(g_db, "SELECT count(*) FROM run_events WHERE run_id = 'e-prog' "
                                      "AND type = 'progress' AND progress = 80"),
                     1);
    json_decref(run);
    free(id);
    stop(&p);
}
END_TEST

/* Exit 75 is retried; other exits fail with the tail of stderr. */
START_TEST(exit_codes)
{
    struct th_proc p;
    json_t *run;
    char *a, *b, *c;

    start(&p, "e2e_exec_exit");
    a = submit(&p, "x", "e-retry", "retry_once", NULL);
    b = submit(&p, "x", "e-75", "always_75", NULL);
    c = submit(&p, "x", "e-fail", "fail", NULL);
    run = wait_done(&p, a, 20);
    ck_assert_str_eq(th_js(run, "outcome"), "succeeded");
    ck_assert_int_eq(th_ji(json_object_get(run, "result"), "attempt"), 2);
    json_decref(run);
    run = wait_done(&p, b, 20);
    ck_assert_str_eq(th_js(run, "outcome"), "failed");
    ck_assert_str_eq(th_js(json_object_get(run, "error"), "code"), "exit_retry");
    ck_assert_int_eq(th_ji(run, "attempt"), 2);
    json_decref(run);
    run = wait_done(&p, c, 20);
    ck_assert_str_eq(th_js(run, "outcome"), "failed");
    ck_assert_str_eq(th_js(json_object_get(run, "error"), "code"), "exit_failed");
    ck_assert_str_eq(err_msg(run), "the command exited with status 3: step 1 fine\nsomething "
                                   "broke: disk full");
    ck_assert_int_eq(th_ji(run, "attempt"), 1);
    json_decref(run);
    free(a);
    free(b);
    free(c);
    stop(&p);
}
END_TEST

/* Summaries in stdout's JSON make the run partially succeeded; stdout that
 * is not JSON is kept as text; stdout past its bound fails the run. */
START_TEST(stdout_shapes)
{
    struct th_proc p;
    json_t *run;
    char *a, *b, *c;

    start(&p, "e2e_exec_stdout");
    a = submit(&p, "x", "e-partial", "partial", NULL);
    b = submit(&p, "x", "e-text", "text", NULL);
    c = submit(&p, "x", "e-big", "big", NULL);
    run = wait_done(&p, a, 20);
    ck_assert_str_eq(th_js(run, "outcome"), "partially_succeeded");
    ck_assert_int_eq(th_ji(json_object_get(run, "summary_counts"), "failed"), 1);
    ck_assert_int_eq(json_array_size(json_object_get(run, "failure_summary")), 1);
    ck_assert_int_eq(th_ji(json_object_get(run, "result"), "rows"), 4);
    ck_assert_ptr_null(json_object_get(json_object_get(run, "result"), "summary_counts"));
    json_decref(run);
    run = wait_done(&p, b, 20);
    ck_assert_str_eq(th_js(run, "outcome"), "succeeded");
    ck_assert_str_eq(th_js(json_object_get(run, "result"), "stdout"), "hello world\n");
    json_decref(run);
    run = wait_done(&p, c, 20);
    ck_assert_str_eq(th_js(run, "outcome"), "failed");
    ck_assert_str_eq(th_js(json_object_get(run, "error"), "code"), "stdout_too_large");
    json_decref(run);
    free(a);
    free(b);
    free(c);
    stop(&p);
}
END_TEST

/* Cancel: the command and its own child (same process group) are gone
 * within a second or so; the run ends cancelled. */
START_TEST(cancel_kills_group)
{
    struct th_proc p;
    struct th_resp r;
    json_t *run;
    char pidfile[256], *id;
    long long t0;

    start(&p, "e2e_exec_cancel");
    snprintf(pidfile, sizeof(pidfile), "/tmp/opsrun-tests/exec-pids-%d", (int)getpid());
    unlink(pidfile);
    id = submit(&p, "x", "e-cancel", "sleep", pidfile);
    for (long long until = th_now_ms() + 10000; !pids_alive(pidfile) && th_now_ms() < until;)
        th_sleep_ms(20);
    ck_assert(pids_alive(pidfile));
    t0 = th_now_ms();
    th_post_json(p.url, "/runs/e-cancel/cancel", "{}", &r);
    ck_assert_int_eq(r.status, 202);
    th_resp_free(&r);
    run = wait_done(&p, id, 10);
    ck_assert_str_eq(th_js(run, "outcome"), "cancelled");
    ck_assert_msg(!pids_alive(pidfile), "the command or its child survived the cancel");
    fprintf(stderr, "cancel: run ended %lld ms after the request\n", th_now_ms() - t0);
    json_decref(run);
    unlink(pidfile);
    free(id);
    stop(&p);
}
END_TEST

/* The run's timeout: SIGTERM (ignored by this command), then SIGKILL after
 * grace_ms; the run ends timed_out. */
START_TEST(timeout_kills_stubborn)
{
    struct th_proc p;
    json_t *run;
    char pidfile[256], *id;

    start(&p, "e2e_exec_timeout");
    snprintf(pidfile, sizeof(pidfile), "/tmp/opsrun-tests/exec-pids2-%d", (int)getpid());
    unlink(pidfile);
    id = submit(&p, "xshort", "e-stubborn", "stubborn", pidfile);
    run = wait_done(&p, id, 20);
    ck_assert_str_eq(th_js(run, "outcome"), "timed_out");
    ck_assert_msg(!pids_alive(pidfile), "the command ignored SIGTERM and survived");
    json_decref(run);
    unlink(pidfile);
    free(id);
    stop(&p);
}
END_TEST

static Suite *exec_suite(void)
{
    Suite *s = suite_create("e2e_exec");
    const struct {
        const char *name;
        const TTest *fn;
    } cases[] = {
        {"stdin_stdout_env", stdin_stdout_env},
        {"progress_fd", progress_fd},
        {"exit_codes", exit_codes},
        {"stdout_shapes", stdout_shapes},
        {"cancel_kills_group", cancel_kills_group},
        {"timeout_kills_stubborn", timeout_kills_stubborn},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        TCase *tc = tcase_create(cases[i].name);
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, cases[i].fn);
        suite_add_tcase(s, tc);
    }
    return s;
}

int main(void)
{
    return th_run_suite(exec_suite());
}
