/* engine/actions/exec.c — a configured local command (docs/actions/exec.md).
 *
 * argv is executed directly (never through a shell), in a process group of
 * its own, with the run's input as JSON on stdin and a small environment:
 * PATH, HOME, LANG, LC_ALL, TZ and TMPDIR from opsrun's, the run type's
 * "env" (templates; secrets through {{env:NAME}}), and OPSRUN_RUN_ID,
 * OPSRUN_ATTEMPT, OPSRUN_TENANT, OPSRUN_RUN_TYPE and OPSRUN_PROGRESS_FD=3.
 * Nothing else of opsrun's environment (its database URL among it) is
 * passed, and no descriptor but 0-3.
 *
 * Untrusted input: each argv element of the template is one argument, and
 * each env key one variable, whatever the values hold (no shell, no word
 * splitting). argv[0] takes no value of the run (checked at load). A value
 * with a NUL is refused, and so is one that would begin an argument with
 * "-" (an option) unless the template's element begins with "-" itself or
 * follows a "--" element: the run fails with "unsafe_input" before
 * anything starts.
 *
 * Exit 0: succeeded, stdout's JSON (at most max_stdout_bytes) the result,
 * its "summary_counts" and "failure_summary" members lifted into the run.
 * Exit 75 (EX_TEMPFAIL): a retryable failure. Anything else: failed, with
 * the tail of stderr. Lines "progress <0-100> <step text>" on fd 3 are
 * progress. On cancel, timeout or shutdown the group gets SIGTERM, then
 * SIGKILL after grace_ms. */
#include "engine/actions/action.h"
#include "engine/actions/params.h"
#include "engine/actions/remote.h"
#include "common/runlog.h"

#include "common/dynbuf.h"
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define EXIT_RETRY 75
#define PROGRESS_FD 3
#define STDERR_TAIL 4096
/* The most of it an error message quotes (rc_error keeps about 500 bytes). */
#define ERROR_TAIL_MAX 400
#define PROGRESS_LINE_MAX 512
#define GRACE_DEFAULT_MS 5000
#define GRACE_MAX_MS 600000
#define STDOUT_DEFAULT_MAX (1024 * 1024)
#define STDOUT_HARD_MAX (64 * 1024 * 1024)

extern char **environ;

static const char *const inherited[] = {"PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR"};

/* ---- params ------------------------------------------------------------ */

static enum status check_argv(const struct param *p, struct error *err)
{
    size_t i;
    json_t *a;
    char sub[200];

    if (!json_is_array(p->v) || json_array_size(p->v) == 0)
        return error_set(err, ST_INVALID, "missing \"%s\": a non-empty array of strings", p->path);
    json_array_foreach(p->v, i, a)
    {
        xsnprintf(sub, sizeof(sub), "%s[%zu]", p->path, i);
        if (!json_is_string(a))
            return error_set(err, ST_INVALID, "invalid \"%s\": expected a string", sub);
        if (remote_check_template(json_string_value(a), sub, err) != ST_OK)
            return ST_INVALID;
    }
    if (json_string_value(json_array_get(p->v, 0))[0] != '/')
        return error_set(err, ST_INVALID,
                         "invalid \"%s[0]\": expected an absolute path (no search in PATH)",
                         p->path);
    if (!remote_template_operator_only(json_string_value(json_array_get(p->v, 0))))
        return error_set(err, ST_INVALID,
                         "invalid \"%s[0]\": only {{env:...}} placeholders may choose the "
                         "program",
                         p->path);
    return ST_OK;
}

static enum status check_env(const struct param *p, struct error *err)
{
    const char *key;
    json_t *v;
    char sub[200];

    if (!json_is_object(p->v))
        return error_set(err, ST_INVALID, "invalid \"%s\": expected an object", p->path);
    json_object_foreach((json_t *)p->v, key, v)
    {
        xsnprintf(sub, sizeof(sub), "%s.%s", p->path, key);
        if (!*key || strchr(key, '=') || !json_is_string(v))
            return error_set(err, ST_INVALID, "invalid \"%s\": expected a name and a string", sub);
        if (remote_check_template(json_string_value(v), sub, err) != ST_OK)
            return ST_INVALID;
    }
    return ST_OK;
}

static enum status check_cwd(const struct param *p, struct error *err)
{
    if (!json_is_string(p->v) || json_string_value(p->v)[0] != '/')
        return error_set(err, ST_INVALID, "invalid \"%s\": expected an absolute path", p->path);
    return ST_OK;
}

static const struct param_rule exec_rules[] = {
    {"argv", check_argv, .need = PARAM_ALWAYS},
    {"env", check_env, .need = PARAM_OPTIONAL},
    {"cwd", check_cwd, .need = PARAM_OPTIONAL},
    {"grace_ms", params_int, .min = 0, .max = GRACE_MAX_MS},
    {"max_stdout_bytes", params_int, .min = 1, .max = STDOUT_HARD_MAX},
    {0},
};

/* ---- the child ---------------------------------------------------------- */

/* A NULL-terminated heap array of heap strings. */
struct strv {
    char **v;
    size_t n;
};

static void strv_add(struct strv *s, char *take)
{
    s->v = xrealloc(s->v, (s->n + 2) * sizeof(*s->v));
    s->v[s->n++] = take;
    s->v[s->n] = NULL;
}

static void strv_free(struct strv *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i]);
    free(s->v);
}

/* Puts where (argv[1], env NAME) before err's message. */
static enum status failed_at(struct error *err, enum status st, const char *where)
{
    char why[sizeof(err->message)] = "";

    if (err)
        xsnprintf(why, sizeof(why), "%s", err->message);
    return error_set(err, st, "%s: %s", where, why);
}

/* Whether the run's values made an argument an option: it begins with "-"
 * where its template does not, before any "--" element. */
static bool made_option(const char *tmpl, const char *arg, bool after_dashes)
{
    return !after_dashes && arg[0] == '-' && tmpl[0] != '-' && !remote_template_operator_only(tmpl);
}

static enum status build_argv(const struct run_ctx *rc, struct strv *argv, struct error *err)
{
    const struct remote_vars v = remote_vars_of(rc);
    bool after_dashes = false;
    char where[32];
    size_t i;
    json_t *a;

    json_array_foreach(json_object_get(rc->type->params, "argv"), i, a)
    {
        const char *t = json_string_value(a);
        char *s = NULL;
        enum status st = remote_expand_text(t, &v, REMOTE_RAW, &s, err);
        xsnprintf(where, sizeof(where), "argv[%zu]", i);
        if (st != ST_OK)
            return failed_at(err, st, where);
        if (made_option(t, s, after_dashes)) {
            free(s);
            return error_set(
                err, ST_UNPROCESSABLE,
                "%s: unsafe value: it would begin the argument with \"-\" (an option); "
                "put a \"--\" element before it",
                where);
        }
        after_dashes |= strcmp(t, "--") == 0;
        strv_add(argv, s);
    }
    return ST_OK;
}

static enum status build_env(const struct run_ctx *rc, struct strv *env, struct error *err)
{
    const struct remote_vars v = remote_vars_of(rc);
    const char *key;
    json_t *x;

    for (size_t i = 0; i < ARRAY_LEN(inherited); i++) {
        const char *val = getenv(inherited[i]);
        if (val)
            strv_add(env, xasprintf("%s=%s", inherited[i], val));
    }
    json_object_foreach(json_object_get(rc->type->params, "env"), key, x)
    {
        char *s = NULL, where[160];
        enum status st = remote_expand_text(json_string_value(x), &v, REMOTE_RAW, &s, err);
        if (st != ST_OK) {
            xsnprintf(where, sizeof(where), "env %.100s", key);
            return failed_at(err, st, where);
        }
        strv_add(env, xasprintf("%s=%s", key, s));
        free(s);
    }
    strv_add(env, xasprintf("OPSRUN_RUN_ID=%s", rc->run->id));
    strv_add(env, xasprintf("OPSRUN_ATTEMPT=%d", rc->run->attempt));
    strv_add(env, xasprintf("OPSRUN_TENANT=%s", rc->run->tenant));
    strv_add(env, xasprintf("OPSRUN_RUN_TYPE=%s", rc->run->type));
    strv_add(env, xasprintf("OPSRUN_PROGRESS_FD=%d", PROGRESS_FD));
    return ST_OK;
}

/* The four pipes: [0] stdin, [1] stdout, [2] stderr, [3] progress; each
 * {read end, write end}, close-on-exec (the child gets dups). */
struct pipes {
    int p[4][2];
};

static void pipes_close(struct pipes *ps)
{
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 2; j++)
            if (ps->p[i][j] >= 0) {
                close(ps->p[i][j]);
                ps->p[i][j] = -1;
            }
}

static enum status spawn(struct run_ctx *rc, struct pipes *ps, pid_t *pid, struct error *err)
{
    struct strv argv = {0}, env = {0};
    const char *cwd = json_string_value(json_object_get(rc->type->params, "cwd"));
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    enum status st = build_argv(rc, &argv, err);
    int rv;

    if (st == ST_OK)
        st = build_env(rc, &env, err);
    for (int i = 0; i < 4 && st == ST_OK; i++)
        if (pipe2(ps->p[i], O_CLOEXEC) != 0)
            st = error_set(err, ST_INTERNAL, "could not create a pipe: %s", strerror(errno));
    if (st != ST_OK) {
        strv_free(&argv), strv_free(&env);
        return st;
    }
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, ps->p[0][0], 0);
    posix_spawn_file_actions_adddup2(&fa, ps->p[1][1], 1);
    posix_spawn_file_actions_adddup2(&fa, ps->p[2][1], 2);
    posix_spawn_file_actions_adddup2(&fa, ps->p[3][1], PROGRESS_FD);
    posix_spawn_file_actions_addclosefrom_np(&fa, PROGRESS_FD + 1);
    if (cwd)
        posix_spawn_file_actions_addchdir_np(&fa, cwd);
    posix_spawnattr_init(&at);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF);
    posix_spawnattr_setpgroup(&at, 0);
    {
        sigset_t none, all;
        sigemptyset(&none);
        sigfillset(&all);
        posix_spawnattr_setsigmask(&at, &none); /* opsrun blocks SIGINT/SIGTERM */
        posix_spawnattr_setsigdefault(&at, &all);
    }
    rv = posix_spawn(pid, argv.v[0], &fa, &at, argv.v, env.v);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    if (rv != 0)
        st = error_set(err, ST_INTERNAL, "could not execute %s: %s", argv.v[0], strerror(rv));
    else
        rc_log(rc, "started %s, pid %d", argv.v[0], (int)*pid);
    strv_free(&argv);
    strv_free(&env);
    /* The parent keeps the write end of stdin and the read ends. */
    for (int i = 0; i < 4; i++) {
        int child_end = i == 0 ? 0 : 1;
        close(ps->p[i][child_end]);
        ps->p[i][child_end] = -1;
    }
    return st;
}

/* ---- the parent's loop ------------------------------------------------ */

struct io {
    const char *input; /* the JSON on stdin */
    size_t input_len, input_off;
    struct dynbuf out; /* capped at max_stdout_bytes */
    bool out_over;
    char err[STDERR_TAIL];
    size_t err_len;   /* the last STDERR_TAIL bytes */
    bool err_wrapped; /* what came before them was dropped */
    char prog[PROGRESS_LINE_MAX];
    size_t prog_len;
};

static void err_append(struct io *io, const char *b, size_t n)
{
    io->err_wrapped |= io->err_len + n > STDERR_TAIL;
    if (n >= STDERR_TAIL) {
        memcpy(io->err, b + n - STDERR_TAIL, STDERR_TAIL);
        io->err_len = STDERR_TAIL;
        return;
    }
    if (io->err_len + n > STDERR_TAIL) {
        size_t drop = io->err_len + n - STDERR_TAIL;
        memmove(io->err, io->err + drop, io->err_len - drop);
        io->err_len -= drop;
    }
    memcpy(io->err + io->err_len, b, n);
    io->err_len += n;
}

/* "progress <pct> <step>" lines; others are ignored. */
static void progress_line(struct run_ctx *rc, char *line)
{
    char *end;
    long pct;

    if (strncmp(line, "progress ", 9) != 0)
        return;
    pct = strtol(line + 9, &end, 10);
    if (end == line + 9 || pct < 0 || pct > 100 || (*end && *end != ' '))
        return;
    rc_progress(rc, (int)pct, *end ? end + 1 : NULL);
}

static void prog_append(struct run_ctx *rc, struct io *io, const char *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (b[i] == '\n') {
            io->prog[io->prog_len] = '\0';
            progress_line(rc, io->prog);
            io->prog_len = 0;
        } else if (io->prog_len < sizeof(io->prog) - 1) {
            io->prog[io->prog_len++] = b[i];
        }
    }
}

/* Reads what one descriptor has; false at its end. */
static bool drain(struct run_ctx *rc, struct io *io, int which, int fd)
{
    char buf[16384];
    ssize_t n = read(fd, buf, sizeof(buf));

    if (n < 0)
        return errno == EAGAIN || errno == EINTR;
    if (n == 0)
        return false;
    if (which == 1) {
        if (!io->out_over && dynbuf_add(&io->out, buf, (size_t)n) != ST_OK)
            io->out_over = true; /* what it held is never read */
    } else if (which == 2) {
        err_append(io, buf, (size_t)n);
        runlog_write(rc->log, buf, (size_t)n);
    } else {
        prog_append(rc, io, buf, (size_t)n);
    }
    return true;
}

static void feed_stdin(struct pipes *ps, struct io *io)
{
    ssize_t n = write(ps->p[0][1], io->input + io->input_off, io->input_len - io->input_off);

    if (n > 0)
        io->input_off += (size_t)n;
    if ((n < 0 && errno != EAGAIN && errno != EINTR) || io->input_off == io->input_len) {
        close(ps->p[0][1]); /* all written, or the child closed its stdin */
        ps->p[0][1] = -1;
    }
}

/* Pumps the pipes until the child closed stdout, stderr and fd 3, or it
 * must stop; true when it must stop. */
static bool pump(struct run_ctx *rc, struct pipes *ps, struct io *io)
{
    for (;;) {
        struct pollfd pf[4] = {{ps->p[0][1], POLLOUT, 0},
                               {ps->p[1][0], POLLIN, 0},
                               {ps->p[2][0], POLLIN, 0},
                               {ps->p[3][0], POLLIN, 0}};
        bool open = false;
        if (rc_should_stop(rc))
            return true;
        for (int i = 1; i < 4; i++)
            open |= ps->p[i][0] >= 0;
        if (!open)
            return false;
        if (poll(pf, 4, 50) <= 0)
            continue;
        if (pf[0].revents)
            feed_stdin(ps, io);
        for (int i = 1; i < 4; i++) {
            if (pf[i].revents && !drain(rc, io, i, ps->p[i][0])) {
                close(ps->p[i][0]);
                ps->p[i][0] = -1;
            }
        }
    }
}

/* Waits for the child to exit (it may have closed its outputs and kept
 * running); true when it must be stopped first. */
static bool wait_child(const struct run_ctx *rc, pid_t pid, int *status)
{
    for (;;) {
        pid_t r = waitpid(pid, status, WNOHANG);
        if (r == pid || (r < 0 && errno != EINTR))
            return false;
        if (rc_should_stop(rc))
            return true;
        usleep(10000);
    }
}

/* SIGTERM to the group, SIGKILL after grace_ms; reaps the child. */
static int stop_group(pid_t pid, int64_t grace_ms, bool *killed)
{
    int64_t until = clock_mono_ms() + grace_ms;
    int status = 0;

    kill(-pid, SIGTERM);
    while (waitpid(pid, &status, WNOHANG) == 0) {
        if (clock_mono_ms() >= until) {
            kill(-pid, SIGKILL);
            *killed = true;
            waitpid(pid, &status, 0);
            break;
        }
        usleep(10000);
    }
    kill(-pid, SIGKILL); /* what the leader left behind in its group */
    return status;
}

/* ---- the outcome -------------------------------------------------------- */

/* The error of a failed command: what happened and the end of its stderr,
 * from the start of a line when there is one in reach (so that it does not
 * begin in the middle of what the command wrote, a secret say; the worker
 * masks the secrets in it, a piece of one at its start too). */
static void error_with_stderr(struct run_ctx *rc, const char *code, const char *what, struct io *io)
{
    char tail[STDERR_TAIL + 1];
    size_t n = io->err_len, from = 0;

    for (size_t i = 0; i < n; i++)
        tail[i] = io->err[i] == '\0' || io->err[i] == '\r' ? ' ' : io->err[i];
    tail[n] = '\0';
    while (n && (tail[n - 1] == '\n' || tail[n - 1] == ' '))
        tail[--n] = '\0';
    if (n > ERROR_TAIL_MAX) {
        const char *nl = memchr(tail + n - ERROR_TAIL_MAX, '\n', ERROR_TAIL_MAX);
        from = nl ? (size_t)(nl + 1 - tail) : n - ERROR_TAIL_MAX;
    } else if (io->err_wrapped) {
        const char *nl = memchr(tail, '\n', n);
        from = nl ? (size_t)(nl + 1 - tail) : 0;
    }
    utf8_scrub(tail + from);
    rc_error(rc, code, "%s%s%s", what, tail[from] ? ": " : "", tail + from);
}

/* Exit 0: the result, and summaries lifted out of it. */
static enum step succeeded(struct run_ctx *rc, struct io *io)
{
    char *text = dynbuf_ptr(&io->out);
    size_t len = dynbuf_len(&io->out);
    json_t *out;

    if (io->out_over) {
        rc_error(rc, "stdout_too_large", "the command wrote more than %zu bytes to stdout",
                 io->out.max);
        return STEP_FAIL;
    }
    out = len ? json_loadb(text, len, 0, NULL) : json_null();
    if (!out) { /* not JSON: the text, made valid UTF-8 */
        for (size_t i = 0; i < len; i++)
            if (text[i] == '\0')
                text[i] = ' ';
        utf8_scrub(text);
        out = json_pack("{s:s}", "stdout", text);
    }
    if (json_is_object(out)) {
        rc->summary_counts = json_incref(json_object_get(out, "summary_counts"));
        rc->failure_summary = json_incref(json_object_get(out, "failure_summary"));
        if (rc->summary_counts && !json_is_object(rc->summary_counts))
            json_decref(rc->summary_counts), rc->summary_counts = NULL;
        if (rc->failure_summary && !json_is_array(rc->failure_summary))
            json_decref(rc->failure_summary), rc->failure_summary = NULL;
        json_object_del(out, "summary_counts");
        json_object_del(out, "failure_summary");
    }
    rc->result = out;
    return STEP_DONE;
}

static enum step outcome(struct run_ctx *rc, struct io *io, int status, bool stopped)
{
    char what[96];

    if (stopped)
        return STEP_FAIL; /* the worker says cancelled, timed out or released */
    if (WIFSIGNALED(status)) {
        xsnprintf(what, sizeof(what), "the command was killed by signal %d", WTERMSIG(status));
        error_with_stderr(rc, "killed", what, io);
        return STEP_FAIL;
    }
    if (WEXITSTATUS(status) == 0)
        return succeeded(rc, io);
    xsnprintf(what, sizeof(what), "the command exited with status %d", WEXITSTATUS(status));
    error_with_stderr(rc, WEXITSTATUS(status) == EXIT_RETRY ? "exit_retry" : "exit_failed", what,
                      io);
    return WEXITSTATUS(status) == EXIT_RETRY ? STEP_RETRY : STEP_FAIL;
}

static enum step exec_start(struct run_ctx *rc)
{
    const json_t *params = rc->type->params;
    const json_t *g = json_object_get(params, "grace_ms"),
                 *m = json_object_get(params, "max_stdout_bytes");
    struct pipes ps;
    struct io io = {0};
    struct error err = {0};
    char *input = json_dumps(run_input(rc->run), JSON_COMPACT | JSON_ENCODE_ANY);
    bool stopped, killed = false;
    int status = 0;
    pid_t pid = 0;
    enum status st;
    enum step step;

    memset(&ps, -1, sizeof(ps));
    io.input = input ? input : "null";
    io.input_len = strlen(io.input);
    dynbuf_init(&io.out, m ? (size_t)json_integer_value(m) : STDOUT_DEFAULT_MAX);
    if ((st = spawn(rc, &ps, &pid, &err)) != ST_OK) {
        rc_error(rc, st == ST_UNPROCESSABLE ? "unsafe_input" : "exec_failed", "%s", err.message);
        pipes_close(&ps);
        free(input);
        return STEP_FAIL;
    }
    for (int i = 0; i < 4; i++)
        fcntl(ps.p[i][i == 0 ? 1 : 0], F_SETFL, O_NONBLOCK);
    stopped = pump(rc, &ps, &io) || wait_child(rc, pid, &status);
    if (stopped) {
        rc_log(rc, "stopping the command: SIGTERM to its process group");
        status = stop_group(pid, g ? json_integer_value(g) : GRACE_DEFAULT_MS, &killed);
    }
    kill(-pid, SIGKILL); /* no stray children in its group */
    runlog_end_output(rc->log);
    if (stopped) {
        LOG(LOG_INFO, "stopped command run=%s pid=%d%s", rc->run->id, (int)pid,
            killed ? " (killed after the grace period)" : "");
        rc_log(rc, "the command stopped%s",
               killed ? ": killed with SIGKILL after the grace period" : "");
    } else if (WIFSIGNALED(status)) {
        rc_log(rc, "the command was killed by signal %d", WTERMSIG(status));
    } else {
        rc_log(rc, "the command exited with status %d", WEXITSTATUS(status));
    }
    pipes_close(&ps);
    step = outcome(rc, &io, status, stopped);
    dynbuf_free(&io.out);
    free(input);
    return step;
}

const struct action_ops action_exec_ops = {
    .name = "exec",
    .params = exec_rules,
    .start = exec_start,
};
