/* tests/e2e/test_exec.c — the exec action with a real command: the input on
 * stdin and the result from stdout, the environment it gets (and what it
 * must not: opsrun's own), progress lines on fd 3, exit 75 retried, other
 * exits failed with the tail of stderr, summaries lifted from stdout's
 * JSON, non-JSON stdout, stdout past its bound, cancel and timeout killing
 * the whole process group (a child that ignores SIGTERM included); input
 * that tries to add arguments, options, variables or shell commands. */
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
    "argv)\n"
    "  printf '%s\\0' \"$@\" > \"$2\"\n"
    "  cat /proc/$$/environ > \"$2.env\"\n"
    "  echo '{}' ;;\n"
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
    char cfg[4096], *path, *conninfo;
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
             "   \"grace_ms\": 300}},"
             " \"xargv\": {\"action\": \"exec\", \"max_attempts\": 1,"
             "  \"params\": {\"argv\": [\"%s\", \"argv\", \"{{input:/out}}\", \"{{input:/v}}\","
             "   \"--name={{input:/v}}\", \"--\", \"{{input:/v}}\"],"
             "   \"env\": {\"X_VALUE\": \"{{input:/v}}\"}}},"
             " \"xdash\": {\"action\": \"exec\", \"max_attempts\": 1,"
             "  \"params\": {\"argv\": [\"%s\", \"argv\", \"{{input:/out}}\","
             "   \"--name={{input:/v}}\", \"--\", \"{{input:/v}}\"],"
             "   \"env\": {\"X_VALUE\": \"{{input:/v}}\"}}}}}",
             g_script, g_script, g_script, g_script);
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

static const char *err_msg(const json_t *run)
{
    return th_js(json_object_get(run, "error"), "message");
}

/* Submits a run of type with data {"out": out, "v": value}. */
static char *submit_value(const struct th_proc *p, const char *type, const char *id,
                          const char *out, const char *value)
{
    json_t *a = json_pack("{s:s, s:s, s:{s:s, s:s}}", "alert_type", type, "run_id", id, "data",
                          "out", out, "v", value);
    char *body = json_dumps(a, 0), *got = th_submit(p, body, 202);

    json_decref(a);
    free(body);
    return got;
}

/* The NUL-terminated items of file, in items (heap each); how many. */
static int read_items(const char *file, char **items, int max)
{
    char buf[8192];
    size_t len;
    int n = 0;
    FILE *f = fopen(file, "r");

    ck_assert_msg(f, "the command wrote no %s", file);
    len = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    for (size_t at = 0; at < len && n < max; at += strlen(buf + at) + 1) {
        ck_assert_msg(memchr(buf + at, '\0', len - at), "%s: an unterminated item", file);
        items[n++] = strdup(buf + at);
    }
    return n;
}

/* The command got exactly these arguments after argv[0]. */
static void expect_args(const char *file, const char *const *want, int nwant)
{
    char *got[16];
    int n = read_items(file, got, 16);

    ck_assert_int_eq(n, nwant);
    for (int i = 0; i < n; i++) {
        ck_assert_str_eq(got[i], want[i]);
        free(got[i]);
    }
}

/* The command's environment, as opsrun passed it: only known names, and
 * X_VALUE once, with the value as it was. */
static void expect_env(const char *file, const char *value)
{
    static const char *const known[] = {"PATH",
                                        "HOME",
                                        "LANG",
                                        "LC_ALL",
                                        "TZ",
                                        "TMPDIR",
                                        "X_VALUE",
                                        "OPSRUN_RUN_ID",
                                        "OPSRUN_ATTEMPT",
                                        "OPSRUN_TENANT",
                                        "OPSRUN_RUN_TYPE",
                                        "OPSRUN_PROGRESS_FD"};
    char *env[64];
    int n = read_items(file, env, 64), values = 0;

    for (int i = 0; i < n; i++) {
        size_t k = strcspn(env[i], "=");
        bool ok = false;
        for (size_t j = 0; j < sizeof(known) / sizeof(known[0]); j++)
            ok |= strlen(known[j]) == k && strncmp(env[i], known[j], k) == 0;
        ck_assert_msg(ok, "an unexpected variable: %s", env[i]);
        if (strncmp(env[i], "X_VALUE=", 8) == 0) {
            ck_assert_str_eq(env[i] + 8, value);
            values++;
        }
        free(env[i]);
    }
    ck_assert_int_eq(values, 1);
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
    run = th_wait_done(&p, id, 20);
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
    run = th_wait_done(&p, id, 20);
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
    run = th_wait_done(&p, a, 20);
    ck_assert_str_eq(th_js(run, "outcome"), "succeeded");
    ck_assert_int_eq(th_ji(json_object_get(run, "result"), "attempt"), 2);
    json_decref(run);
    run = th_wait_done(&p, b, 20);
    ck_assert_str_eq(th_js(run, "outcome"), "failed");
    ck_assert_str_eq(th_js(json_object_get(run, "error"), "code"), "exit_retry");
    ck_assert_int_eq(th_ji(run, "attempt"), 2);
    json_decref(run);
    run = th_wait_done(&p, c, 20);
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
    run = th_wait_done(&p, a, 20);
    ck_assert_str_eq(th_js(run, "outcome"), "partially_succeeded");
    ck_assert_int_eq(th_ji(json_object_get(run, "summary_counts"), "failed"), 1);
    ck_assert_int_eq(json_array_size(json_object_get(run, "failure_summary")), 1);
    ck_assert_int_eq(th_ji(json_object_get(run, "result"), "rows"), 4);
    ck_assert_ptr_null(json_object_get(json_object_get(run, "result"), "summary_counts"));
    json_decref(run);
    run = th_wait_done(&p, b, 20);
    ck_assert_str_eq(th_js(run, "outcome"), "succeeded");
    ck_assert_str_eq(th_js(json_object_get(run, "result"), "stdout"), "hello world\n");
    json_decref(run);
    run = th_wait_done(&p, c, 20);
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
    run = th_wait_done(&p, id, 10);
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
    run = th_wait_done(&p, id, 20);
    ck_assert_str_eq(th_js(run, "outcome"), "timed_out");
    ck_assert_msg(!pids_alive(pidfile), "the command ignored SIGTERM and survived");
    json_decref(run);
    unlink(pidfile);
    free(id);
    stop(&p);
}
END_TEST

/* Input that tries to add arguments, options, variables or a command: each
 * template element stays one argument and each env key one variable, with
 * the value as it was (no shell: "$(touch /tmp/pwned)" creates nothing); a
 * value that would begin an argument with "-" is refused, unless a "--"
 * element comes before it. */
START_TEST(untrusted_input)
{
    static const char *const inputs[] = {
        "../admin",        "x@evil.example",      "%2e%2e",      "a\r\nX-Injected: 1",
        "</Value><Evil/>", "$(touch /tmp/pwned)", "--extra-flag"};
    struct th_proc p;
    char out[256], env[300], id[32], name[300];
    json_t *run;
    char *got;

    start(&p, "e2e_exec_input");
    unlink("/tmp/pwned");
    for (size_t i = 0; i < sizeof(inputs) / sizeof(inputs[0]); i++) {
        snprintf(out, sizeof(out), "/tmp/opsrun-tests/argv-%d-%zu", (int)getpid(), i);
        snprintf(env, sizeof(env), "%s.env", out);
        snprintf(id, sizeof(id), "e-input-%zu", i);
        snprintf(name, sizeof(name), "--name=%s", inputs[i]);
        unlink(out), unlink(env);
        got = submit_value(&p, "xargv", id, out, inputs[i]);
        run = th_wait_done(&p, got, 20);
        if (strcmp(inputs[i], "--extra-flag") == 0) {
            ck_assert_str_eq(th_js(run, "outcome"), "failed");
            ck_assert_str_eq(th_js(json_object_get(run, "error"), "code"), "unsafe_input");
            ck_assert_str_eq(err_msg(run), "argv[3]: unsafe value: it would begin the argument "
                                           "with \"-\" (an option); put a \"--\" element before "
                                           "it");
            ck_assert_msg(access(out, F_OK) != 0, "the command ran");
        } else {
            const char *want[] = {"argv", out, inputs[i], name, "--", inputs[i]};
            ck_assert_msg(th_streq(th_js(run, "outcome"), "succeeded"), "%s: %s", id,
                          err_msg(run) ? err_msg(run) : "");
            expect_args(out, want, 6);
            expect_env(env, inputs[i]);
        }
        ck_assert_msg(access("/tmp/pwned", F_OK) != 0, "a shell ran \"$(touch /tmp/pwned)\"");
        json_decref(run);
        free(got);
        unlink(out), unlink(env);
    }
    snprintf(out, sizeof(out), "/tmp/opsrun-tests/argv-%d-dash", (int)getpid());
    snprintf(env, sizeof(env), "%s.env", out);
    got = submit_value(&p, "xdash", "e-input-dash", out, "--extra-flag");
    run = th_wait_done(&p, got, 20);
    {
        const char *want[] = {"argv", out, "--name=--extra-flag", "--", "--extra-flag"};
        ck_assert_str_eq(th_js(run, "outcome"), "succeeded");
        expect_args(out, want, 5);
        expect_env(env, "--extra-flag");
    }
    json_decref(run);
    free(got);
    unlink(out), unlink(env);
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
        {"untrusted_input", untrusted_input},
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
