/* tests/support/cli.c — see cli.h. */
#include "cli.h"

#include "harness.h"

#include "client/logs.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#define ARGS_MAX 32

/* In the child: the environment the client gets. */
static void child_env(const char *server, const char *const *env)
{
    if (server)
        setenv("OPSRUN_SERVER", server, 1);
    else
        unsetenv("OPSRUN_SERVER");
    unsetenv("OPSRUN_TOKEN");
    unsetenv("NO_COLOR");
    for (size_t i = 0; env && env[i]; i++)
        putenv((char *)env[i]);
}

static void paths(struct cli *c)
{
    static int seq;

    mkdir("/tmp/opsrun-tests", 0777);
    snprintf(c->out_path, sizeof(c->out_path), "/tmp/opsrun-tests/cli-%d-%d.out", (int)getpid(),
             seq);
    snprintf(c->err_path, sizeof(c->err_path), "/tmp/opsrun-tests/cli-%d-%d.err", (int)getpid(),
             seq++);
}

static void argv_of(const char *const *args, const char **argv)
{
    const char *bin = getenv("OPSRUN_BIN");
    int n = 0;

    ck_assert_msg(bin != NULL, "OPSRUN_BIN is not set");
    argv[n++] = bin;
    for (int i = 0; args[i] && n < ARGS_MAX - 1; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
}

void cli_spawn_env(struct cli *c, const char *server, const char *const *args,
                   const char *const *env)
{
    const char *argv[ARGS_MAX];

    memset(c, 0, sizeof(*c));
    c->pty = -1;
    paths(c);
    argv_of(args, argv);
    c->pid = fork();
    ck_assert_msg(c->pid >= 0, "fork failed");
    if (c->pid == 0) {
        int o = open(c->out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int e = open(c->err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int in = open("/dev/null", O_RDONLY);
        dup2(in, 0);
        dup2(o, 1);
        dup2(e, 2);
        child_env(server, env);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
}

void cli_spawn(struct cli *c, const char *server, const char *const *args)
{
    cli_spawn_env(c, server, args, NULL);
}

void cli_spawn_pty(struct cli *c, const char *server, const char *const *args,
                   const char *const *env, int cols)
{
    struct winsize ws = {.ws_row = 40, .ws_col = (unsigned short)cols};
    const char *argv[ARGS_MAX];
    const char *slave;

    memset(c, 0, sizeof(*c));
    paths(c);
    argv_of(args, argv);
    c->pty = posix_openpt(O_RDWR | O_NOCTTY);
    ck_assert_msg(c->pty >= 0 && grantpt(c->pty) == 0 && unlockpt(c->pty) == 0,
                  "no pseudo-terminal: %s", strerror(errno));
    slave = ptsname(c->pty);
    ck_assert(slave != NULL);
    ck_assert(ioctl(c->pty, TIOCSWINSZ, &ws) == 0);
    c->pid = fork();
    ck_assert_msg(c->pid >= 0, "fork failed");
    if (c->pid == 0) {
        int t = open(slave, O_RDWR);
        int e = open(c->err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int in = open("/dev/null", O_RDONLY);
        setsid();
        dup2(in, 0);
        dup2(t, 1);
        dup2(e, 2);
        close(c->pty);
        child_env(server, env);
        setenv("TERM", "xterm", 1);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
}

/* What the terminal got within timeout_ms, added to c->tty. */
static void pty_drain(struct cli *c, int timeout_ms)
{
    struct pollfd pf = {c->pty, POLLIN, 0};
    char chunk[4096];
    ssize_t n;

    while (poll(&pf, 1, timeout_ms) == 1 && (n = read(c->pty, chunk, sizeof(chunk))) > 0) {
        c->tty = realloc(c->tty, c->tty_len + (size_t)n + 1);
        memcpy(c->tty + c->tty_len, chunk, (size_t)n);
        c->tty_len += (size_t)n;
        c->tty[c->tty_len] = '\0';
        timeout_ms = 0;
    }
}

bool cli_pty_until(struct cli *c, const char *needle, int timeout_ms)
{
    for (long long until = th_now_ms() + timeout_ms; th_now_ms() < until;) {
        pty_drain(c, 20);
        if (c->tty && memmem(c->tty, c->tty_len, needle, strlen(needle)))
            return true;
    }
    return false;
}

bool cli_running(struct cli *c)
{
    siginfo_t si = {0};

    /* WNOWAIT: an ended client stays for cli_wait to collect */
    return waitid(P_PID, (id_t)c->pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == 0;
}

char *cli_slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    char chunk[4096];
    size_t n;

    while (f && (n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        fwrite(chunk, 1, n, m);
    if (f)
        fclose(f);
    fclose(m);
    return buf;
}

int cli_wait(struct cli *c, int timeout_s)
{
    int st = 0;
    long long until = th_now_ms() + timeout_s * 1000LL;

    while (waitpid(c->pid, &st, WNOHANG) != c->pid) {
        if (th_now_ms() > until) {
            kill(c->pid, SIGKILL);
            waitpid(c->pid, &st, 0);
            st = -1;
            break;
        }
        if (c->pty >= 0)
            pty_drain(c, 20);
        else
            th_sleep_ms(20);
    }
    c->rc = st == -1 ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (c->pty >= 0) {
        pty_drain(c, 100);
        close(c->pty);
        c->pty = -1;
        c->out = c->tty ? c->tty : calloc(1, 1);
        c->out_len = c->tty_len;
        c->tty = NULL;
    } else {
        c->out = cli_slurp(c->out_path);
        c->out_len = strlen(c->out);
    }
    c->err = cli_slurp(c->err_path);
    unlink(c->out_path);
    unlink(c->err_path);
    return c->rc;
}

void cli_free(struct cli *c)
{
    free(c->out);
    free(c->err);
    c->out = c->err = NULL;
}

bool cli_file_has(const char *path, const char *needle, int timeout_ms)
{
    for (long long until = th_now_ms() + timeout_ms; th_now_ms() < until; th_sleep_ms(50)) {
        char *text = cli_slurp(path);
        bool found = text && strstr(text, needle);
        free(text);
        if (found)
            return true;
    }
    return false;
}

bool cli_line_at(const char *text, int n, char *out, size_t cap)
{
    for (int i = 0; i < n && text; i++)
        text = (text = strchr(text, '\n')) ? text + 1 : NULL;
    if (!text || !*text)
        return false;
    snprintf(out, cap, "%.*s", (int)strcspn(text, "\n"), text);
    return true;
}

int cli_count_lines(const char *text)
{
    int n = 0;

    for (const char *p = text; p && *p; p++)
        n += *p == '\n';
    return n;
}

bool cli_starts_with(const char *s, const char *prefix)
{
    return s && strncmp(s, prefix, strlen(prefix)) == 0;
}

char *cli_lines_with(const char *text, const char *prefix, bool keep)
{
    char *out = calloc(1, strlen(text) + 1);
    size_t o = 0;

    for (const char *p = text; *p;) {
        size_t n = strcspn(p, "\n");
        if (cli_starts_with(p, prefix) == keep) {
            memcpy(out + o, p, n);
            o += n;
            out[o++] = '\n';
        }
        p += n + (p[n] == '\n');
    }
    out[o] = '\0';
    return out;
}

char *cli_expected_log(const char *base, const char *id, int form, int attempt, int *nlines)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    long long after = 0;

    *nlines = 0;
    while (after >= 0) {
        char path[256];
        struct th_resp r;
        size_t i;
        json_t *line, *next;
        snprintf(path, sizeof(path), "/runs/%s/logs?limit=5000&after=%lld", id, after);
        th_get(base, path, &r);
        ck_assert_msg(r.status == 200, "GET %s: %ld %s", path, r.status, r.body);
        json_array_foreach(json_object_get(r.json, "lines"), i, line)
        {
            if (attempt > 0 && th_ji(line, "attempt") != attempt)
                continue;
            logline_print(m, line, (enum logline_form)form, false);
            ++*nlines;
        }
        next = json_object_get(r.json, "next_after");
        after = json_is_integer(next) ? json_integer_value(next) : -1;
        th_resp_free(&r);
    }
    fclose(m);
    return buf;
}

/* ---- the screen ---- */

struct screen {
    char **lines;
    size_t n, row, col;
};

static void screen_put(struct screen *s, char ch)
{
    char *line = s->lines[s->row];
    size_t len = strlen(line);

    if (s->col >= len) {
        line = realloc(line, s->col + 2);
        memset(line + len, ' ', s->col - len);
        line[s->col + 1] = '\0';
    }
    line[s->col++] = ch;
    s->lines[s->row] = line;
}

static void screen_newline(struct screen *s)
{
    s->row++;
    s->col = 0;
    if (s->row == s->n) {
        s->lines = realloc(s->lines, (s->n + 1) * sizeof(char *));
        s->lines[s->n++] = calloc(1, 1);
    }
}

/* The escape sequence at raw[i] (ESC [ params final): applied, and its
 * length. */
static size_t screen_escape(struct screen *s, const char *raw, size_t i, size_t n)
{
    size_t j = i + 1;

    if (j < n && raw[j] == '[')
        j++;
    while (j < n && ((raw[j] >= '0' && raw[j] <= '9') || raw[j] == ';'))
        j++;
    if (j < n && raw[j] == 'K')
        s->lines[s->row][s->col < strlen(s->lines[s->row]) ? s->col : strlen(s->lines[s->row])] =
            '\0';
    return j < n ? j - i + 1 : n - i;
}

char *cli_screen(const char *raw, size_t n)
{
    struct screen s = {.lines = calloc(1, sizeof(char *)), .n = 1};
    char *out;
    size_t len = 0, o = 0;

    s.lines[0] = calloc(1, 1);
    for (size_t i = 0; i < n;) {
        if (raw[i] == '\033') {
            i += screen_escape(&s, raw, i, n);
            continue;
        }
        if (raw[i] == '\r')
            s.col = 0;
        else if (raw[i] == '\n')
            screen_newline(&s);
        else
            screen_put(&s, raw[i]);
        i++;
    }
    for (size_t k = 0; k < s.n; k++)
        len += strlen(s.lines[k]) + 1;
    out = calloc(1, len + 1);
    for (size_t k = 0; k < s.n; k++) {
        if (k + 1 == s.n && !*s.lines[k]) { /* the line after the last newline */
            free(s.lines[k]);
            break;
        }
        memcpy(out + o, s.lines[k], strlen(s.lines[k]));
        o += strlen(s.lines[k]);
        out[o++] = '\n';
        free(s.lines[k]);
    }
    free(s.lines);
    return out;
}

/* ---- a scripted HTTP peer ---- */

int cli_peer_listen(int *port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    ck_assert(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(fd, 8) == 0 &&
              getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    *port = ntohs(a.sin_port);
    return fd;
}

int cli_peer_accept(int lfd, char *req, size_t cap)
{
    struct pollfd pf = {lfd, POLLIN, 0};
    size_t len = 0;
    int fd;

    ck_assert_msg(poll(&pf, 1, 15000) == 1, "the client did not connect within 15 s");
    fd = accept(lfd, NULL, NULL);
    ck_assert(fd >= 0);
    while (len + 1 < cap) {
        ssize_t n;
        pf = (struct pollfd){fd, POLLIN, 0};
        ck_assert_msg(poll(&pf, 1, 10000) == 1, "no request within 10 s");
        n = read(fd, req + len, cap - 1 - len);
        ck_assert(n > 0);
        len += (size_t)n;
        req[len] = '\0';
        if (strstr(req, "\r\n\r\n"))
            break;
    }
    return fd;
}

void cli_peer_answer(int fd, const char *raw)
{
    ck_assert(write(fd, raw, strlen(raw)) == (ssize_t)strlen(raw));
    close(fd);
}

bool cli_has_header(const char *req, const char *line)
{
    char want[256];

    snprintf(want, sizeof(want), "\r\n%s\r\n", line);
    return strstr(req, want) != NULL;
}

int cli_dead_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    ck_assert(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
              getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    close(fd);
    return ntohs(a.sin_port);
}
