/* tests/support/harness.c — see harness.h. */
#include "harness.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* After the system headers: common.h poisons names some of them declare. */
#include "common/digest.h"
#include "common/dynbuf.h"

#define MAX_PROCS 64
static pid_t procs[MAX_PROCS];

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "harness: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    ck_abort_msg("harness failure (see stderr)");
    abort();
}

long long th_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void th_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static const char *template_url(void)
{
    const char *u = getenv("OPSRUN_TEST_DATABASE_URL");
    if (!u || !*u)
        die("OPSRUN_TEST_DATABASE_URL is not set: run the tests through scripts/test.sh");
    return u;
}

char *th_conninfo(const char *dbname)
{
    char *errmsg = NULL;
    PQconninfoOption *opts = PQconninfoParse(template_url(), &errmsg);
    size_t cap = 1024, len = 0;
    char *s;

    if (!opts)
        die("bad OPSRUN_TEST_DATABASE_URL: %s", errmsg ? errmsg : "?");
    s = malloc(cap);
    s[0] = '\0';
    for (PQconninfoOption *o = opts; o->keyword; o++) {
        if (!o->val || strcmp(o->keyword, "dbname") == 0)
            continue;
        len += (size_t)snprintf(s + len, cap - len, "%s='%s' ", o->keyword, o->val);
    }
    snprintf(s + len, cap - len, "dbname='%s'", dbname);
    PQconninfoFree(opts);
    return s;
}

PGconn *th_pg(const char *conninfo)
{
    PGconn *c = PQconnectdb(conninfo);
    if (PQstatus(c) != CONNECTION_OK)
        die("could not connect to %s: %s", conninfo, PQerrorMessage(c));
    return c;
}

static PGresult *vsql(PGconn *c, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
static PGresult *vsql(PGconn *c, const char *fmt, va_list ap)
{
    char sql[8192];
    PGresult *r;

    vsnprintf(sql, sizeof(sql), fmt, ap);
    r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK && PQresultStatus(r) != PGRES_COMMAND_OK)
        die("SQL failed: %s\n  %s", PQerrorMessage(c), sql);
    return r;
}

PGresult *th_sql(PGconn *c, const char *fmt, ...)
{
    va_list ap;
    PGresult *r;
    va_start(ap, fmt);
    r = vsql(c, fmt, ap);
    va_end(ap);
    return r;
}

long long th_sql_int(PGconn *c, const char *fmt, ...)
{
    va_list ap;
    PGresult *r;
    long long v;

    va_start(ap, fmt);
    r = vsql(c, fmt, ap);
    va_end(ap);
    if (PQntuples(r) < 1)
        die("SQL returned no row");
    v = PQgetisnull(r, 0, 0) ? 0 : atoll(PQgetvalue(r, 0, 0));
    PQclear(r);
    return v;
}

void th_wait_all_completed(PGconn *c, int timeout_ms)
{
    const char *active = "SELECT count(*) FROM runs WHERE status <> 'completed'";
    long long left = 0;

    for (long long t0 = th_now_ms(); th_now_ms() - t0 < timeout_ms; th_sleep_ms(50))
        if ((left = th_sql_int(c, "%s", active)) == 0)
            return;
    left = th_sql_int(c, "%s", active);
    ck_assert_msg(left == 0, "%lld runs not completed within %d ms", left, timeout_ms);
}

char *th_sql_str(PGconn *c, const char *fmt, ...)
{
    va_list ap;
    PGresult *r;
    char *v = NULL;

    va_start(ap, fmt);
    r = vsql(c, fmt, ap);
    va_end(ap);
    if (PQntuples(r) >= 1 && !PQgetisnull(r, 0, 0))
        v = strdup(PQgetvalue(r, 0, 0));
    PQclear(r);
    return v;
}

/* Under scripts/test.sh, records that this test (OPSRUN_TEST_NAME) creates
 * database `name`, in a file of that name under OPSRUN_TEST_DBNAMES (one
 * directory per test run) made with link(2), which fails when the file
 * exists: the first test to create a name owns it; any other that creates
 * it fails, whether or not the two happen to run at the same moment this
 * time. */
static void claim_db_name(const char *name)
{
    const char *dir = getenv("OPSRUN_TEST_DBNAMES"), *me = getenv("OPSRUN_TEST_NAME");
    char path[1024], tmp[1100], owner[256] = "";
    int fd;
    ssize_t n;

    if (!dir || !*dir || !me || !*me)
        return;
    mkdir(dir, 0777);
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    snprintf(tmp, sizeof(tmp), "%s/.%s.%d", dir, name, (int)getpid());
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, me, strlen(me)) != (ssize_t)strlen(me))
        die("could not write %s: %s", tmp, strerror(errno));
    close(fd);
    if (link(tmp, path) != 0 && errno != EEXIST)
        die("could not claim the database name in %s: %s", path, strerror(errno));
    unlink(tmp);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    n = fd < 0 ? -1 : read(fd, owner, sizeof(owner) - 1);
    if (fd >= 0)
        close(fd);
    if (n < 0)
        die("could not read %s: %s", path, strerror(errno));
    owner[n] = '\0';
    if (strcmp(owner, me) != 0)
        die("database \"%s\" is created by the test %s and by this one, %s: tests run at "
            "the same time, so one would drop the other's database; give one another name",
            name, owner, me);
}

char *th_db_create(const char *name)
{
    char *admin = th_conninfo("postgres");
    PGconn *c = th_pg(admin);
    char *tmpl_err = NULL;
    PQconninfoOption *opts = PQconninfoParse(template_url(), &tmpl_err);
    char tmpl[256] = "opsrun_template";

    claim_db_name(name);

    for (PQconninfoOption *o = opts; o && o->keyword; o++)
        if (strcmp(o->keyword, "dbname") == 0 && o->val)
            snprintf(tmpl, sizeof(tmpl), "%s", o->val);
    PQconninfoFree(opts);
    PQclear(th_sql(c, "DROP DATABASE IF EXISTS \"%s\" WITH (FORCE)", name));
    PQclear(th_sql(c, "CREATE DATABASE \"%s\" TEMPLATE \"%s\"", name, tmpl));
    PQfinish(c);
    free(admin);
    return th_conninfo(name);
}

char *th_db_create_empty(const char *name)
{
    char *admin = th_conninfo("postgres");
    PGconn *c = th_pg(admin);

    claim_db_name(name);
    PQclear(th_sql(c, "DROP DATABASE IF EXISTS \"%s\" WITH (FORCE)", name));
    PQclear(th_sql(c, "CREATE DATABASE \"%s\" TEMPLATE template0", name));
    PQfinish(c);
    free(admin);
    return th_conninfo(name);
}

static void kill_all(void)
{
    for (int i = 0; i < MAX_PROCS; i++)
        if (procs[i] > 0)
            kill(procs[i], SIGKILL);
}

/* th_free_port's ports: below the kernel's ephemeral range (32768-60999
 * by default, /proc/sys/net/ipv4/ip_local_port_range), which it numbers
 * client sockets and sockets bound to port 0 from. A port of the kernel's
 * choosing, released and used a moment later, may be taken in between by
 * another process's connection or server; one of this range is only ever
 * handed out under its lock. */
#define TH_PORT_FIRST 20000
#define TH_PORT_COUNT 12000
#define TH_PORT_LOCKS "/tmp/opsrun-tests/ports"

/* Whether nothing is bound to port on any address (no SO_REUSEADDR: a port
 * with connections of an earlier server still closing is passed over). */
static bool port_unbound(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_ANY)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    bool ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;

    if (fd >= 0)
        close(fd);
    return ok;
}

/* Takes the lock of port: a descriptor to keep open for as long as the
 * port is in use (until this process exits), or -1 when another process
 * holds it. */
static int port_lock(int port)
{
    char path[128];
    int fd;

    snprintf(path, sizeof(path), TH_PORT_LOCKS "/%d", port);
    fd = open(path, O_RDONLY | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0)
        die("could not open %s: %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) == 0)
        return fd;
    close(fd);
    return -1;
}

int th_free_port(void)
{
    static unsigned seed;

    if (!seed)
        seed = (unsigned)getpid() ^ (unsigned)th_now_ms();
    mkdir("/tmp/opsrun-tests", 0777);
    mkdir(TH_PORT_LOCKS, 0777);
    chmod(TH_PORT_LOCKS, 0777); /* every user's tests share it */
    for (int tries = 0; tries < 1000; tries++) {
        int port = TH_PORT_FIRST + (int)(rand_r(&seed) % TH_PORT_COUNT);
        int fd = port_lock(port);
        if (fd >= 0 && port_unbound(port))
            return port; /* fd stays open: the lock is this process's */
        if (fd >= 0)
            close(fd);
    }
    die("could not find a free port in %d-%d", TH_PORT_FIRST, TH_PORT_FIRST + TH_PORT_COUNT - 1);
}

void th_start(struct th_proc *p, const char *conninfo, const char *const *args,
              const char *const *env)
{
    th_start_host(p, "127.0.0.1", conninfo, args, env);
}

/* Opens path to append, creating it and its directory (the first suite of
 * a test run creates exchanges/); -1 with errno on failure. */
static int open_append(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);

    if (fd < 0 && errno == ENOENT) {
        char dir[1024];
        snprintf(dir, sizeof(dir), "%s", path);
        if (strrchr(dir, '/'))
            *strrchr(dir, '/') = '\0';
        mkdir(dir, 0777);
        fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    }
    return fd;
}

/* With OPSRUN_TEST_EXCHANGES set, names each server's log in
 * <exchanges>.servers, so that tests/openapi/validate.mjs can count the
 * requests the servers answered against those recorded. */
static void note_server_log(const char *log)
{
    const char *ex = getenv("OPSRUN_TEST_EXCHANGES");
    char path[1024], line[300];
    int fd, n;

    if (!ex || !*ex)
        return;
    snprintf(path, sizeof(path), "%s.servers", ex);
    n = snprintf(line, sizeof(line), "%s\n", log);
    fd = open_append(path);
    if (fd < 0 || write(fd, line, (size_t)n) != n)
        die("could not write to %s: %s", path, strerror(errno));
    close(fd);
}

/* The binary under test. */
static const char *opsrun_bin(void)
{
    const char *bin = getenv("OPSRUN_BIN");

    if (!bin)
        die("OPSRUN_BIN is not set");
    return bin;
}

/* Forks and execs `bin serve` for p (its port and log already set). */
static void spawn(struct th_proc *p, const char *bin, const char *host, const char *conninfo,
                  const char *const *args, const char *const *env)
{
    char listen[64];
    const char *argv[64];
    int n = 0;

    snprintf(listen, sizeof(listen), "%s:%d", host, p->port);
    argv[n++] = bin;
    argv[n++] = "serve";
    argv[n++] = "--listen";
    argv[n++] = listen;
    argv[n++] = "--database-url";
    argv[n++] = conninfo;
    for (int i = 0; args && args[i] && n < 62; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    p->pid = fork();
    if (p->pid < 0)
        die("fork: %s", strerror(errno));
    if (p->pid == 0) {
        int fd = open(p->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        dup2(fd, 2);
        dup2(fd, 1);
        for (int i = 0; env && env[i]; i++)
            putenv((char *)env[i]);
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    for (int i = 0; i < MAX_PROCS; i++)
        if (procs[i] <= 0) {
            procs[i] = p->pid;
            break;
        }
    note_server_log(p->log);
}

/* Waits until p serves: /livez answers, and p's own log says it serves and
 * its event hub is ready (a stream opened before gets 503). The log, because
 * the port is free when chosen, but another process, of another checkout's
 * tests, may take it before p binds it, and then answers /livez for it;
 * with the info lines off, p alive 3 s after /livez answered will do.
 * False when p exited because the port was taken; any other exit aborts. */
static bool wait_serving(struct th_proc *p)
{
    char line[512], u[128];
    long long up_since = 0;

    snprintf(u, sizeof(u), "%s/livez", p->url);
    for (long long until = th_now_ms() + 30000; th_now_ms() < until; th_sleep_ms(50)) {
        struct th_resp r;
        int st;
        if (waitpid(p->pid, &st, WNOHANG) == p->pid) {
            for (int i = 0; i < MAX_PROCS; i++)
                if (procs[i] == p->pid)
                    procs[i] = 0;
            p->pid = 0;
            if (th_log_find(p->log, "could not listen on", line, sizeof(line)))
                return false;
            die("opsrun exited during start-up (status %d); log: %s", st, p->log);
        }
        if (th_http("GET", u, NULL, NULL, &r) && r.status == 200 && !up_since)
            up_since = th_now_ms();
        th_resp_free(&r);
        if (up_since && ((th_log_find(p->log, "serving listen=", line, sizeof(line)) &&
                          th_log_find(p->log, "event hub ready", line, sizeof(line))) ||
                         th_now_ms() - up_since > 3000))
            return true;
    }
    die("opsrun did not answer /livez within 30 s; log: %s", p->log);
}

void th_start_host(struct th_proc *p, const char *host, const char *conninfo,
                   const char *const *args, const char *const *env)
{
    th_start_bin_host(p, opsrun_bin(), host, conninfo, args, env);
}

void th_start_bin(struct th_proc *p, const char *bin, const char *conninfo, const char *const *args,
                  const char *const *env)
{
    th_start_bin_host(p, bin, "127.0.0.1", conninfo, args, env);
}

void th_start_bin_host(struct th_proc *p, const char *bin, const char *host, const char *conninfo,
                       const char *const *args, const char *const *env)
{
    static bool registered;

    if (!registered) {
        atexit(kill_all);
        registered = true;
    }
    mkdir("/tmp/opsrun-tests", 0777);
    for (int attempt = 0; attempt < 5; attempt++) {
        memset(p, 0, sizeof(*p));
        p->port = th_free_port();
        snprintf(p->url, sizeof(p->url), "http://127.0.0.1:%d", p->port);
        snprintf(p->log, sizeof(p->log), "/tmp/opsrun-tests/opsrun-%d-%d.log", (int)getpid(),
                 p->port);
        spawn(p, bin, host, conninfo, args, env);
        if (wait_serving(p))
            return;
    }
    die("opsrun could not listen on a free port in 5 tries; log: %s", p->log);
}

void th_restart(struct th_proc *p, const char *conninfo, const char *const *args,
                const char *const *env)
{
    int port = p->port;

    if (p->pid > 0)
        die("th_restart: the process on port %d is still running", p->port);
    memset(p, 0, sizeof(*p));
    p->port = port;
    snprintf(p->url, sizeof(p->url), "http://127.0.0.1:%d", p->port);
    snprintf(p->log, sizeof(p->log), "/tmp/opsrun-tests/opsrun-%d-%d-again.log", (int)getpid(),
             p->port);
    spawn(p, opsrun_bin(), "127.0.0.1", conninfo, args, env);
    if (!wait_serving(p))
        die("opsrun could not listen on port %d again; log: %s", p->port, p->log);
}

int th_stop(struct th_proc *p, int sig, int timeout_s)
{
    int st = 0;

    if (p->pid <= 0)
        return -1;
    kill(p->pid, sig);
    for (long long until = th_now_ms() + timeout_s * 1000LL; th_now_ms() < until;) {
        if (waitpid(p->pid, &st, WNOHANG) == p->pid) {
            for (int i = 0; i < MAX_PROCS; i++)
                if (procs[i] == p->pid)
                    procs[i] = 0;
            p->pid = 0;
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        th_sleep_ms(20);
    }
    kill(p->pid, SIGKILL);
    waitpid(p->pid, &st, 0);
    p->pid = 0;
    return -1;
}

/* Appends what fd has to *buf (heap, NUL-terminated); false at its end. */
static bool drain_fd(int fd, char **buf, size_t *len)
{
    char tmp[4096];
    ssize_t n = read(fd, tmp, sizeof(tmp));

    if (n <= 0)
        return n < 0 && errno == EINTR;
    *buf = realloc(*buf, *len + (size_t)n + 1);
    memcpy(*buf + *len, tmp, (size_t)n);
    *len += (size_t)n;
    (*buf)[*len] = '\0';
    return true;
}

int th_exec(const char *const *args, const char *const *env, int timeout_s, char **out, char **err)
{
    const char *argv[32];
    int n = 0;

    argv[n++] = opsrun_bin();
    for (int i = 0; args && args[i] && n < 31; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    return th_run(argv, env, timeout_s, out, err);
}

int th_run(const char *const *argv, const char *const *env, int timeout_s, char **out, char **err)
{
    int po[2], pe[2], st = 0;
    char *bufs[2] = {strdup(""), strdup("")};
    size_t lens[2] = {0, 0};
    struct pollfd pf[2];
    long long until = th_now_ms() + timeout_s * 1000LL;
    pid_t pid;

    if (pipe(po) != 0 || pipe(pe) != 0)
        die("pipe: %s", strerror(errno));
    pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0) {
        setpgid(0, 0); /* a script's children go with it on a timeout */
        dup2(po[1], 1);
        dup2(pe[1], 2);
        /* Only 1 and 2: a daemon it starts (a postmaster) must not keep
         * the pipes open, or the wait for their end lasts the timeout. */
        close(po[0]);
        close(pe[0]);
        close(po[1]);
        close(pe[1]);
        for (int i = 0; env && env[i]; i++)
            putenv((char *)env[i]);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    setpgid(pid, pid);
    close(po[1]);
    close(pe[1]);
    pf[0] = (struct pollfd){po[0], POLLIN, 0};
    pf[1] = (struct pollfd){pe[0], POLLIN, 0};
    while ((pf[0].fd >= 0 || pf[1].fd >= 0) && th_now_ms() < until) {
        if (poll(pf, 2, 100) <= 0)
            continue;
        for (int i = 0; i < 2; i++) {
            if (pf[i].fd >= 0 && pf[i].revents && !drain_fd(pf[i].fd, &bufs[i], &lens[i])) {
                close(pf[i].fd);
                pf[i].fd = -1;
            }
        }
    }
    for (int i = 0; i < 2; i++)
        if (pf[i].fd >= 0)
            close(pf[i].fd);
    while (waitpid(pid, &st, WNOHANG) == 0) {
        if (th_now_ms() >= until) {
            kill(-pid, SIGKILL);
            waitpid(pid, &st, 0);
            st = -1;
            break;
        }
        th_sleep_ms(20);
    }
    if (out)
        *out = bufs[0];
    else
        free(bufs[0]);
    if (err)
        *err = bufs[1];
    else
        free(bufs[1]);
    if (st == -1)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

char *th_config_file(const char *name, const char *json)
{
    char *path = malloc(256);
    FILE *f;

    mkdir("/tmp/opsrun-tests", 0777);
    snprintf(path, 256, "/tmp/opsrun-tests/%s-%d.json", name, (int)getpid());
    f = fopen(path, "w");
    if (!f)
        die("could not write %s", path);
    fputs(json, f);
    fclose(f);
    return path;
}

char *th_auth_tokens(const struct th_token *t, size_t n)
{
    struct dynbuf b;
    bool ok;

    dynbuf_init(&b, 1 << 20);
    ok = dynbuf_adds(&b, "\"auth\": {\"tokens\": [") == ST_OK;
    for (size_t i = 0; ok && i < n; i++) {
        char hex[65];
        sha256_hex(t[i].token, strlen(t[i].token), hex);
        ok = dynbuf_addf(&b,
                         "%s{\"name\": \"%s\", \"tenant\": \"%s\", \"scopes\": [%s], "
                         "\"sha256\": \"%s\"}",
                         i ? ", " : "", t[i].name, t[i].tenant, t[i].scopes, hex) == ST_OK;
    }
    if (!ok || dynbuf_adds(&b, "]}") != ST_OK)
        die("could not build auth.tokens");
    return dynbuf_take(&b);
}

/* The longest answer th_http keeps: far above any a test reads. */
#define TH_BODY_MAX ((size_t)256 << 20)

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *arg)
{
    size_t n = size * nmemb;

    return dynbuf_add(arg, ptr, n) == ST_OK ? n : 0; /* 0 fails the transfer */
}

static void copy_header(const char *line, size_t n, const char *name, char *out, size_t cap)
{
    size_t k = strlen(name);
    if (n > k && strncasecmp(line, name, k) == 0) {
        const char *v = line + k;
        size_t len = n - k;
        while (len && (*v == ' '))
            v++, len--;
        while (len && (v[len - 1] == '\r' || v[len - 1] == '\n'))
            len--;
        snprintf(out, cap, "%.*s", (int)len, v);
    }
}

static size_t on_header(char *line, size_t size, size_t nmemb, void *arg)
{
    struct th_resp *r = arg;
    size_t n = size * nmemb;
    copy_header(line, n, "Content-Type:", r->content_type, sizeof(r->content_type));
    copy_header(line, n, "Location:", r->location, sizeof(r->location));
    copy_header(line, n, "Allow:", r->allow, sizeof(r->allow));
    copy_header(line, n, "Retry-After:", r->retry_after, sizeof(r->retry_after));
    copy_header(line, n, "WWW-Authenticate:", r->www_authenticate, sizeof(r->www_authenticate));
    return n;
}

/* Bodies longer than this are recorded without their text (status only). */
#define TH_RECORD_BODY_MAX ((size_t)4 << 20)

void th_record_exchange(const char *method, const char *url, long status, const char *content_type,
                        const char *body, size_t body_len, const char *sse_event)
{
    const char *path = getenv("OPSRUN_TEST_EXCHANGES");
    json_t *o, *b = NULL;
    char *line;
    int fd;

    if (!path || !*path || status <= 0)
        return;
    if (body && body_len <= TH_RECORD_BODY_MAX)
        b = json_stringn(body, body_len); /* NULL when not UTF-8 */
    o = json_pack("{s:s, s:s, s:I, s:s, s:o, s:b}", "method", method, "url", url, "status",
                  (json_int_t)status, "content_type", content_type ? content_type : "", "body",
                  b ? b : json_null(), "body_kept", b != NULL || !body);
    if (!o)
        die("could not record an exchange of %s %s", method, url);
    if (sse_event)
        json_object_set_new(o, "sse_event", json_string(sse_event));
    line = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!line)
        die("could not record an exchange of %s %s", method, url);
    fd = open_append(path);
    if (fd < 0)
        die("could not open %s: %s", path, strerror(errno));
    /* One write per line with O_APPEND: Check's forked tests and a suite's
     * threads never interleave their lines. */
    {
        size_t n = strlen(line);
        line[n] = '\n';
        if (write(fd, line, n + 1) != (ssize_t)(n + 1))
            die("could not write to %s: %s", path, strerror(errno));
        line[n] = '\0';
    }
    close(fd);
    free(line);
}

bool th_http(const char *method, const char *url, const char *content_type, const char *body,
             struct th_resp *r)
{
    return th_http_token(method, url, NULL, content_type, body, r);
}

bool th_http_token(const char *method, const char *url, const char *token, const char *content_type,
                   const char *body, struct th_resp *r)
{
    CURL *c = curl_easy_init();
    struct curl_slist *h = NULL;
    struct dynbuf b;
    char ct[160], auth[700];
    CURLcode rc;

    memset(r, 0, sizeof(*r));
    dynbuf_init(&b, TH_BODY_MAX);
    if (!url)
        return false;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 30000L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 2000L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    if (content_type) {
        snprintf(ct, sizeof(ct), "Content-Type: %s", content_type);
        h = curl_slist_append(h, ct);
    }
    if (token) {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
        h = curl_slist_append(h, auth);
    }
    h = curl_slist_append(h, "Expect:");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    }
    if (strcmp(method, "HEAD") == 0)
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    rc = curl_easy_perform(c);
    if (rc == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    r->body = dynbuf_take(&b);
    if (rc == CURLE_OK && r->body[0])
        r->json = json_loads(r->body, 0, NULL);
    if (rc == CURLE_OK)
        th_record_exchange(method, url, r->status, r->content_type, r->body, strlen(r->body), NULL);
    return rc == CURLE_OK;
}

void th_resp_free(struct th_resp *r)
{
    free(r->body);
    json_decref(r->json);
    r->body = NULL;
    r->json = NULL;
}

void th_post_json(const char *base, const char *path, const char *body, struct th_resp *r)
{
    char url[512];
    snprintf(url, sizeof(url), "%s%s", base, path);
    ck_assert_msg(th_http("POST", url, "application/json", body, r), "POST %s failed", url);
}

void th_get(const char *base, const char *path, struct th_resp *r)
{
    char url[512];
    snprintf(url, sizeof(url), "%s%s", base, path);
    ck_assert_msg(th_http("GET", url, NULL, NULL, r), "GET %s failed", url);
}

char *th_wait_run(const char *base, const char *run_id, int timeout_s)
{
    char path[256];
    snprintf(path, sizeof(path), "/runs/%s", run_id);
    for (long long until = th_now_ms() + timeout_s * 1000LL; th_now_ms() < until;) {
        struct th_resp r;
        char url[512];
        snprintf(url, sizeof(url), "%s%s", base, path);
        if (th_http("GET", url, NULL, NULL, &r) && r.status == 200 && r.json &&
            strcmp(json_string_value(json_object_get(r.json, "status")), "completed") == 0) {
            char *o = strdup(json_string_value(json_object_get(r.json, "outcome")));
            th_resp_free(&r);
            return o;
        }
        th_resp_free(&r);
        th_sleep_ms(50);
    }
    return NULL;
}

void th_pg_restart(void)
{
    const char *ctl = getenv("OPSRUN_TEST_PGCTL"), *data = getenv("OPSRUN_TEST_PGDATA");
    char cmd[1024];

    if (!ctl || !data)
        die("this test restarts PostgreSQL, and only the tests named in OPSRUN_TESTS_ALONE in "
            "tests/CMakeLists.txt may (each runs alone on a cluster of its own): add it there");
    snprintf(cmd, sizeof(cmd), "'%s' restart '%s' >&2", ctl, data);
    if (system(cmd) != 0)
        die("could not restart PostgreSQL: %s", cmd);
}

/* ---- small helpers the end-to-end suites share ---- */

const char *th_js(const json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}

long long th_ji(const json_t *o, const char *k)
{
    return json_integer_value(json_object_get(o, k));
}

bool th_streq(const char *a, const char *b)
{
    return a && b && strcmp(a, b) == 0;
}

bool th_alive(pid_t pid)
{
    int st;
    return pid > 0 && waitpid(pid, &st, WNOHANG) == 0 && kill(pid, 0) == 0;
}

void th_sanitizer_report(const char *log, char *out, size_t cap)
{
    FILE *f = fopen(log, "r");
    char line[512];
    bool found = false;
    int frames = 0;

    out[0] = '\0';
    while (f && fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        if (!found && (strstr(line, "ERROR: AddressSanitizer") ||
                       strstr(line, "ERROR: LeakSanitizer") || strstr(line, "runtime error:"))) {
            snprintf(out, cap, "%s", line);
            found = true;
        } else if (found && strstr(line, ".c:") && strstr(line, " in ") &&
                   !strstr(line, "/tests/")) {
            size_t n = strlen(out);
            snprintf(out + n, cap - n, " | %s", strstr(line, " in ") + 4);
            if (++frames == 3)
                break;
        }
    }
    if (f)
        fclose(f);
}

bool th_log_find(const char *log, const char *needle, char *out, size_t cap)
{
    FILE *f = fopen(log, "r");
    char *line = NULL;
    size_t n = 0;
    bool found = false;

    if (!f)
        die("could not open the log %s: %s", log, strerror(errno));
    while (!found && getline(&line, &n, f) >= 0) {
        if (strstr(line, needle)) {
            line[strcspn(line, "\n")] = '\0';
            snprintf(out, cap, "%s", line);
            found = true;
        }
    }
    free(line);
    fclose(f);
    return found;
}

/* A log line's form: its timestamp's digits as 9, each key=value's value
 * as "*" (a ':', ',' or ';' that ends it stays: it belongs to the
 * sentence, as common/log.c reads it), the rest as it is. */
static void line_form(const char *line, char *out, size_t cap)
{
    size_t n = 0;

    for (const char *w = line; *w && n + 1 < cap;) {
        size_t len = strcspn(w, " "), key = strspn(w, "abcdefghijklmnopqrstuvwxyz0123456789_");
        if (w == line) {
            for (size_t i = 0; i < len && n + 1 < cap; i++)
                out[n++] = (w[i] >= '0' && w[i] <= '9') ? '9' : w[i];
        } else if (key > 0 && key < len && w[key] == '=') {
            size_t end = len;
            while (end > key + 1 && strchr(":,;", w[end - 1]))
                end--;
            n += (size_t)snprintf(out + n, cap - n, "%.*s*%.*s", (int)(key + 1), w,
                                  (int)(len - end), w + end);
        } else {
            n += (size_t)snprintf(out + n, cap - n, "%.*s", (int)len, w);
        }
        if (n >= cap)
            n = cap - 1;
        w += len;
        if (*w == ' ' && n + 1 < cap) {
            out[n++] = ' ';
            w++;
        }
    }
    out[n] = '\0';
}

void th_check_documented_line(const char *log, const char *needle, const char *doc,
                              const char *doc_needle)
{
    const char *src = getenv("OPSRUN_SOURCE_DIR");
    char path[1024], line[1024], want[1024], got[1024];

    if (!src)
        die("OPSRUN_SOURCE_DIR is not set");
    snprintf(path, sizeof(path), "%s/%s", src, doc);
    if (!th_log_find(log, needle, line, sizeof(line)))
        die("no line with \"%s\" in %s", needle, log);
    line_form(line, got, sizeof(got));
    if (!th_log_find(path, doc_needle, line, sizeof(line)))
        die("%s shows no line with \"%s\"", doc, doc_needle);
    line_form(line, want, sizeof(want));
    ck_assert_msg(strcmp(want, got) == 0, "%s shows the line as\n  %s\nthe server prints\n  %s",
                  doc, want, got);
}

void th_check_exit0(const struct th_proc *p, int rc)
{
    char report[1024];

    th_sanitizer_report(p->log, report, sizeof(report));
    ck_assert_msg(rc == 0, "opsrun exited with %d after SIGTERM%s%s; log: %s", rc,
                  report[0] ? ": " : "", report, p->log);
}

void th_stop_clean(struct th_proc *p)
{
    th_check_exit0(p, th_stop(p, SIGTERM, 20));
}

const char *th_start_fresh(struct th_proc *p, const char *db, const char *config_json)
{
    static char *conninfo;
    char *path = config_json ? th_config_file(db, config_json) : NULL;
    const char *args[3] = {path ? "--config" : NULL, path, NULL};

    free(conninfo);
    conninfo = th_db_create(db);
    th_start(p, conninfo, args, NULL);
    free(path);
    return conninfo;
}

char *th_submit(const struct th_proc *p, const char *body, long want)
{
    struct th_resp r;
    char *id;

    th_post_json(p->url, "/alerts", body, &r);
    ck_assert_msg(r.status == want, "POST /alerts %s: HTTP %ld, want %ld; body %s", body, r.status,
                  want, r.body);
    ck_assert_msg(r.json && th_js(r.json, "run_id"), "POST /alerts: no run_id in %s", r.body);
    id = strdup(th_js(r.json, "run_id"));
    th_resp_free(&r);
    return id;
}

void th_post_expect(const struct th_proc *p, const char *path, const char *token, const char *body,
                    long want, struct th_resp *r)
{
    char url[512];

    snprintf(url, sizeof(url), "%s%s", p->url, path);
    ck_assert(th_http_token("POST", url, token, body ? "application/json" : NULL, body, r));
    ck_assert_msg(r->status == want, "POST %s %.300s: HTTP %ld, want %ld; body %.500s", path,
                  body ? body : "", r->status, want, r->body);
}

json_t *th_get_run(const struct th_proc *p, const char *id)
{
    char path[256];
    struct th_resp r;
    json_t *j;

    snprintf(path, sizeof(path), "/runs/%s", id);
    th_get(p->url, path, &r);
    ck_assert_msg(r.status == 200, "GET %s: HTTP %ld, want %ld; body %s", path, r.status, 200L,
                  r.body);
    ck_assert_msg(r.json != NULL, "GET %s: body is not JSON: %s", path, r.body);
    j = json_incref(r.json);
    th_resp_free(&r);
    return j;
}

bool th_wait_status(const struct th_proc *p, const char *id, const char *want, int timeout_ms)
{
    char url[512];
    snprintf(url, sizeof(url), "%s/runs/%s", p->url, id);
    for (long long until = th_now_ms() + timeout_ms; th_now_ms() < until; th_sleep_ms(20)) {
        struct th_resp r;
        bool ok = th_http("GET", url, NULL, NULL, &r) && r.status == 200 && r.json &&
                  th_streq(th_js(r.json, "status"), want);
        th_resp_free(&r);
        if (ok)
            return true;
    }
    return false;
}

json_t *th_wait_done(const struct th_proc *p, const char *id, int timeout_s)
{
    char *o = th_wait_run(p->url, id, timeout_s);

    ck_assert_msg(o, "run %s did not complete within %d s", id, timeout_s);
    free(o);
    return th_get_run(p, id);
}

void th_expect_outcome(const struct th_proc *p, const char *id, const char *want, int timeout_s)
{
    char *o = th_wait_run(p->url, id, timeout_s);
    ck_assert_msg(o != NULL, "run %s did not complete within %d s", id, timeout_s);
    ck_assert_msg(th_streq(o, want), "run %s: outcome %s, want %s", id, o, want);
    free(o);
}

void th_check_problem(const struct th_resp *r, long want, const char *what)
{
    ck_assert_msg(r->status == want, "%s: HTTP %ld, want %ld; body %s", what, r->status, want,
                  r->body);
    ck_assert_msg(strncmp(r->content_type, "application/problem+json", 24) == 0,
                  "%s: Content-Type \"%s\", want problem+json", what, r->content_type);
    ck_assert_msg(json_is_object(r->json), "%s: body is not a JSON object: %s", what, r->body);
    ck_assert_msg(json_is_string(json_object_get(r->json, "type")), "%s: no type: %s", what,
                  r->body);
    ck_assert_msg(json_is_string(json_object_get(r->json, "title")), "%s: no title: %s", what,
                  r->body);
    ck_assert_msg(json_is_string(json_object_get(r->json, "detail")), "%s: no detail: %s", what,
                  r->body);
    ck_assert_msg(json_is_integer(json_object_get(r->json, "status")) &&
                      th_ji(r->json, "status") == want,
                  "%s: problem status is not %ld: %s", what, want, r->body);
}

bool th_has_error_field(const json_t *errors, const char *field)
{
    size_t i;
    const json_t *e;

    json_array_foreach(errors, i, e)
    {
        if (th_streq(th_js(e, "field"), field) && json_is_string(json_object_get(e, "message")))
            return true;
    }
    return false;
}

/* ---- one test per process ---- */

#undef _tcase_add_test

/* The tests OPSRUN_TEST_ONLY names that the suite added, and the test
 * cases, with how many of their tests were added. */
#define TH_MAX_TCASES 256
static struct {
    TCase *tc;
    int added;
} tcases[TH_MAX_TCASES];
static size_t ntcases;
static const char *selected[TH_MAX_TCASES];
static size_t nselected;

/* Whether list (comma-separated) holds name. */
static bool listed(const char *list, const char *name)
{
    size_t n = strlen(name);

    for (const char *p = list; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (strncmp(p, name, n) == 0 && (p[n] == ',' || p[n] == '\0'))
            return true;
    return false;
}

void th_tcase_add_test(TCase *tc, const TTest *t, int sig, int exit_value, int start, int end)
{
    const char *only = getenv("OPSRUN_TEST_ONLY");
    size_t i;

    for (i = 0; i < ntcases && tcases[i].tc != tc; i++)
        ;
    if (i == ntcases && ntcases < TH_MAX_TCASES)
        tcases[ntcases++].tc = tc;
    if (only && *only) {
        if (!listed(only, t->name))
            return;
        if (nselected < TH_MAX_TCASES)
            selected[nselected++] = t->name;
    }
    if (i < ntcases)
        tcases[i].added++;
    _tcase_add_test(tc, t, sig, exit_value, start, end);
}

/* False (with a message) when OPSRUN_TEST_ONLY names a test the suite did
 * not add: a test renamed or taken out, or one never added. */
static bool all_selected_found(const char *only)
{
    bool ok = true;

    for (const char *p = only; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL) {
        size_t n = strcspn(p, ","), i;
        for (i = 0; i < nselected; i++)
            if (strlen(selected[i]) == n && strncmp(selected[i], p, n) == 0)
                break;
        if (i == nselected) {
            fprintf(stderr,
                    "harness: this suite adds no test named \"%.*s\" (OPSRUN_TEST_ONLY; "
                    "ctest names the tests after the START_TEST lines of the suite's file)\n",
                    (int)n, p);
            ok = false;
        }
    }
    return ok;
}

/* With OPSRUN_TEST_CLUSTER=alone, the test needs a cluster to itself (it
 * may stop or restart it): it gets the second cluster of scripts/test.sh,
 * which one such test at a time uses. */
static void use_cluster_alone(void)
{
    static const char *const vars[] = {"DATABASE_URL", "ADMIN_URL", "PGDATA"};
    const char *cluster = getenv("OPSRUN_TEST_CLUSTER");

    if (!cluster || strcmp(cluster, "alone") != 0)
        return;
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        char from[64], to[64];
        const char *v;
        snprintf(from, sizeof(from), "OPSRUN_TEST_ALONE_%s", vars[i]);
        snprintf(to, sizeof(to), "OPSRUN_TEST_%s", vars[i]);
        v = getenv(from);
        if (!v || !*v) {
            fprintf(stderr, "harness: %s is not set: run the tests through scripts/test.sh\n",
                    from);
            exit(1);
        }
        setenv(to, v, 1);
    }
}

int th_run_suite(Suite *s)
{
    SRunner *sr = srunner_create(s);
    const char *only = getenv("OPSRUN_TEST_ONLY");
    int failed;

    use_cluster_alone();
    if (only && *only) {
        if (!all_selected_found(only)) {
            srunner_free(sr);
            return 1;
        }
        /* A test case left without a test is not run at all: not even its
         * unchecked fixtures. */
        for (size_t i = 0; i < ntcases; i++)
            if (tcases[i].added == 0)
                tcase_set_tags(tcases[i].tc, "th_not_selected");
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    srunner_run_tagged(sr, NULL, NULL, NULL, "th_not_selected", CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    curl_global_cleanup();
    return failed == 0 ? 0 : 1;
}
