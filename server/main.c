/* server/main.c — the opsrun command line: serve, migrate, config check,
 * token new, version, help.
 * main() builds the runtime (configuration, the HTTP server's socket,
 * pool, engine, then HTTP serving), then waits for SIGINT/SIGTERM in
 * sigwait(); no handler runs in signal context. A second signal during the
 * drain cuts the grace period short. */
#include "client/client.h"
#include "common/limits.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/suggest.h"
#include "engine/actions/action.h"
#include "engine/actions/registry.h"
#include "engine/engine.h"
#include "handlers/bulk.h"
#include "handlers/submitq.h"
#include "config/config.h"
#include "config/live.h"
#include "server/build_info.h"
#include "server/reload.h"
#include "server/http.h"
#include "server/route.h"
#include "live/hub.h"
#include "store/db.h"
#include "store/migrations.h"
#include "store/partitions.h"
#include "store/run_state.h"

#include <curl/curl.h>
#include <libxml/parser.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define STARTUP_DB_WAIT_S 30

static const char usage[] =
    "usage: opsrun <command> [flags]\n"
    "\n"
    "commands:\n"
    "  serve      apply pending migrations, then serve HTTP and run workers\n"
    "  migrate    apply pending migrations and exit\n"
    "  config check FILE [flags]\n"
    "             validate a configuration file as serve would, offline: print\n"
    "             every error (exit 1) or \"FILE: ok\" (exit 0)\n"
    "  token new --name N --tenant T --scopes S1,S2\n"
    "             print a new token, then its entry for auth.tokens (JSON)\n"
    "  version    print the version\n"
    "\n"
    "flags (each also an environment variable):\n"
    "  --listen ADDR:PORT     OPSRUN_LISTEN        default 127.0.0.1:8080\n"
    "  --database-url URL     OPSRUN_DATABASE_URL  libpq URI or key=value string\n"
    "  --config FILE          OPSRUN_CONFIG        JSON configuration file\n"
    "  --workers N            OPSRUN_WORKERS       worker threads (queue.workers)\n"
    "  --log-level LEVEL      OPSRUN_LOG_LEVEL     debug, info, warn, error\n"
    "  --log-format FORMAT    OPSRUN_LOG_FORMAT    text (default) or json\n"
    "  --insecure-no-auth     OPSRUN_INSECURE_NO_AUTH=true\n"
    "                         serve without auth.tokens on a non-loopback address\n"
    "  --print-config                              print the effective configuration and exit\n"
    "  -h, --help                                  this text\n"
    "\n"
    "scopes: submit, read, cancel, approve, health, admin\n";

struct cli {
    const char *command;
    const char *config;
    bool check; /* config check: config is its FILE */
    bool print_config;
    struct {
        const char *key, *value;
    } sets[8];
    int nsets;
};

static const struct {
    const char *flag, *key;
} flag_keys[] = {
    {"--listen", "listen"},
    {"--database-url", "database_url"},
    {"--workers", "queue.workers"},
    {"--log-level", "log.level"},
    {"--log-format", "log.format"},
    {"--config", NULL}, /* the file, loaded before everything else */
};

/* What --help prints, and what a bad argument prints after its error: the
 * commands of serve and of the client alike. */
static void print_usage(FILE *f)
{
    fprintf(f, "%s\n%s", usage, client_usage);
}

/* An unknown first word: the nearest command, if it looks like a typo of
 * one, then the usage. */
static int unknown_command(const char *word)
{
    static const char *const mine[] = {"serve", "migrate", "config", "token", "version", "help"};
    struct suggest s;
    char hint[96];

    suggest_init(&s, word);
    for (size_t i = 0; i < ARRAY_LEN(mine); i++)
        suggest_add(&s, mine[i]);
    client_suggest_command(&s);
    fprintf(stderr, "opsrun: unknown command \"%s\"%s\n", word,
            suggest_hint(&s, hint, sizeof(hint)));
    print_usage(stderr);
    return 2;
}

#define CHECK_USAGE "usage: opsrun config check FILE [serve flags]"

/* "config check FILE" at argv[*i] (moving *i past it): 0, or 2 after a
 * usage error. The file is given this way only, not by --config. */
static int cli_check(int argc, char **argv, int *i, struct cli *cli)
{
    if (*i + 2 >= argc || strcmp(argv[*i + 1], "check") != 0 || argv[*i + 2][0] == '-' ||
        !argv[*i + 2][0]) {
        fprintf(stderr, "opsrun: " CHECK_USAGE "\n");
        return 2;
    }
    cli->command = "config";
    cli->check = true;
    cli->config = argv[*i + 2];
    *i += 2;
    return 0;
}

static int cli_parse(int argc, char **argv, struct cli *cli)
{
    memset(cli, 0, sizeof(*cli));
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool matched = false;
        if (STR_IN(a, "-h", "--help", "help")) {
            cli->command = "help";
            return 0;
        }
        if (strcmp(a, "--version") == 0) {
            cli->command = "version";
            return 0;
        }
        if (strcmp(a, "--print-config") == 0 && !cli->check) {
            cli->print_config = true;
            continue;
        }
        if (strcmp(a, "config") == 0 && !cli->command) {
            if (cli->config || cli->print_config) {
                fprintf(stderr, "opsrun: " CHECK_USAGE "\n");
                return 2;
            }
            if (cli_check(argc, argv, &i, cli) != 0)
                return 2;
            continue;
        }
        if (strcmp(a, "--insecure-no-auth") == 0) {
            if (cli->nsets < (int)ARRAY_LEN(cli->sets))
                cli->sets[cli->nsets].key = "auth.insecure_no_auth",
                cli->sets[cli->nsets++].value = "true";
            continue;
        }
        for (size_t k = 0; k < ARRAY_LEN(flag_keys) && !matched; k++) {
            const char *flag = flag_keys[k].flag;
            size_t n = strlen(flag);
            const char *val;
            if (strncmp(a, flag, n) != 0 || (a[n] != '\0' && a[n] != '='))
                continue;
            val = a[n] == '=' ? a + n + 1 : (i + 1 < argc ? argv[++i] : NULL);
            if (!val) {
                fprintf(stderr, "opsrun: flag %s needs a value\n", flag);
                return 2;
            }
            if (!flag_keys[k].key && cli->check) {
                fprintf(stderr, "opsrun: " CHECK_USAGE "\n");
                return 2;
            }
            if (!flag_keys[k].key)
                cli->config = val;
            else if (cli->nsets < (int)ARRAY_LEN(cli->sets))
                cli->sets[cli->nsets].key = flag_keys[k].key, cli->sets[cli->nsets++].value = val;
            matched = true;
        }
        if (matched)
            continue;
        if (a[0] == '-' || cli->command) {
            fprintf(stderr, "opsrun: unknown argument \"%s\"\n", a);
            print_usage(stderr);
            return 2;
        }
        if (!STR_IN(a, "serve", "migrate", "version"))
            return unknown_command(a);
        cli->command = a;
    }
    if (!cli->command)
        cli->command = cli->print_config ? "serve" : "help";
    return 0;
}

static const char *env_get(const char *name)
{
    return getenv(name);
}

/* Each line of msg (every error of a configuration is one) on stderr,
 * after "opsrun: " and prefix. */
static void print_lines(const char *prefix, const char *msg)
{
    const char *p = msg;

    do {
        size_t n = strcspn(p, "\n");
        fprintf(stderr, "opsrun: %s%.*s\n", prefix, (int)n, p);
        p += n + (p[n] == '\n');
    } while (*p);
}

/* Where the error lines of one build of the configuration go: each is
 * given to line as it comes (cfg_errors_sink), all of them, since a
 * message holds only the first few; lines counts them. */
struct config_sink {
    void (*line)(void *arg, const char *text);
    void *arg;
    unsigned lines;
};

static void sink_line(void *arg, const char *text)
{
    struct config_sink *k = arg;

    k->line(k->arg, text);
    k->lines++;
}

/* True when st is not ST_OK, after giving its errors to k: those of the
 * message, line by line, when none came as lines since *seen. */
static bool config_failed(enum status st, const struct error *err, struct config_sink *k,
                          unsigned *seen)
{
    bool given = k->lines != *seen;

    *seen = k->lines;
    if (st == ST_OK)
        return false;
    if (!given)
        reload_each_line(err->message, k->line, k->arg);
    return true;
}

/* Defaults, then the file, then the environment, then flags; validated.
 * Every source is read whatever the one before said, so every error is
 * told at once; the whole is validated only when each source was valid.
 * A reload builds the same way (server/reload.h). */
static int build_config_lines(const struct cli *cli, struct config *cfg,
                              void (*line)(void *arg, const char *text), void *arg)
{
    struct error err = {0};
    const char *path = cli->config ? cli->config : getenv("OPSRUN_CONFIG");
    bool failed = false;
    struct config_sink k = {line, arg, 0};
    unsigned seen = 0;

    cfg_errors_sink(sink_line, &k);
    cfg_init(cfg, &action_registry);
    if (path && *path)
        failed |= config_failed(cfg_load_file(cfg, path, &err), &err, &k, &seen);
    failed |= config_failed(cfg_load_env(cfg, env_get, &err), &err, &k, &seen);
    for (int i = 0; i < cli->nsets; i++)
        failed |=
            config_failed(cfg_set(cfg, cli->sets[i].key, cli->sets[i].value, CFG_SRC_FLAG, &err),
                          &err, &k, &seen);
    if (!failed)
        failed = config_failed(cfg_validate(cfg, &err), &err, &k, &seen);
    cfg_errors_sink(NULL, NULL);
    return failed ? 2 : 0;
}

static void print_config_error(void *arg, const char *line)
{
    (void)arg;
    fprintf(stderr, "opsrun: invalid configuration: %s\n", line);
}

static int build_config(const struct cli *cli, struct config *cfg)
{
    return build_config_lines(cli, cfg, print_config_error, NULL);
}

/* server/reload.h's builder: the sources serve started with. */
static int reload_build(const void *cli, struct config *cfg,
                        void (*line)(void *arg, const char *text), void *arg)
{
    return build_config_lines(cli, cfg, line, arg);
}

static struct db_options conn_options(const struct config *cfg, const char *app)
{
    return (struct db_options){
        .conninfo = cfg->database_url,
        .connect_timeout_s = cfg->db.connect_timeout_s,
        .statement_timeout_ms = cfg->db.statement_timeout_ms,
        .application_name = app,
        .tcp_user_timeout_ms = cfg->db.tcp_user_timeout_ms,
        .keepalive_idle_s = cfg->db.keepalive_idle_s,
        .keepalive_interval_s = cfg->db.keepalive_interval_s,
        .unnamed_statements = !cfg->db.prepared_statements,
    };
}

static void on_partition_created(void *arg, const char *name)
{
    (void)arg;
    LOG(LOG_INFO, "created partition=%s", name);
}

/* The partitions of run_events ahead, with the configured span, right after
 * migrating (migration 013 cannot know the span). Not fatal: retention
 * tries again at every pass, and events meanwhile go to run_events_default,
 * from where the partition takes them when it is created. */
static void ensure_partitions(const struct config *cfg, struct db *db)
{
    struct error err = {0};
    struct partition_step step;

    if (store_partitions_ensure(db, cfg->queue.event_partition_s, on_partition_created, NULL, &step,
                                &err) != ST_OK)
        LOG(LOG_WARN, "could not create partitions ahead: %s", err.message);
    else if (step.gave_way)
        LOG(LOG_INFO, "partitions ahead not created at start: a lock on run_events was not "
                      "granted in time; retention tries again");
}

/* Connects and migrates, retrying for up to wait_s while the database is
 * starting up (wait_s 0: one try); then creates the partitions ahead. */
static int migrate(const struct config *cfg, int wait_s)
{
    const struct db_options opt = conn_options(cfg, "opsrun-migrate");
    int64_t give_up = clock_mono_ms() + (int64_t)wait_s * 1000;
    struct error err = {0};
    enum status st;
    int applied = 0;

    for (;;) {
        struct db *db = NULL;
        st = db_connect(&opt, &db, &err);
        if (st == ST_OK)
            st = store_migrate(db, &applied, &err);
        if (st == ST_OK)
            ensure_partitions(cfg, db);
        db_close(db);
        if (st != ST_UNAVAILABLE || clock_mono_ms() >= give_up)
            break;
        LOG(LOG_WARN, "database not reachable yet, retrying: %s", err.message);
        sleep(1);
    }
    if (st != ST_OK) {
        LOG(LOG_ERROR, "could not migrate: %s", err.message);
        return 1;
    }
    LOG(LOG_INFO, "migrations applied=%d total=%zu", applied, migrations_count);
    return 0;
}

struct drain_arg {
    struct engine *engine;
    int grace_s;
    _Atomic bool done;
};

static void *drain_main(void *p)
{
    struct drain_arg *d = p;
    engine_drain(d->engine, d->grace_s);
    atomic_store(&d->done, true);
    return NULL;
}

static void raise_nofile(const struct config *cfg)
{
    struct rlimit rl;
    rlim_t want = (rlim_t)cfg->http.connection_limit + (rlim_t)cfg_pool_size(cfg) + 64;

    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < want) {
        rl.rlim_cur = want < rl.rlim_max ? want : rl.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &rl);
    }
}

/* SIGHUP: the configuration read again and applied (server/reload.h);
 * what it did, or why it refused, is in the log. */
static void reload_on_signal(struct reloads *r)
{
    json_t *answer = NULL, *errors = NULL;

    (void)r->run(r->arg, "SIGHUP", -1, &answer, &errors);
    json_decref(answer);
    json_decref(errors);
}

/* Reloads on SIGHUP until SIGINT/SIGTERM, then drains; returns when
 * everything stopped. */
static void serve_until_signal(const struct config *cfg, struct engine *engine,
                               struct reloads *reloads, _Atomic bool *draining,
                               const sigset_t *sigs)
{
    struct drain_arg d = {.engine = engine, .grace_s = cfg->queue.shutdown_grace_s};
    struct timespec tick = {0, 200 * 1000000L};
    pthread_t th;
    int sig = 0;

    for (;;) {
        if (sigwait(sigs, &sig) != 0)
            continue;
        if (sig != SIGHUP)
            break;
        reload_on_signal(reloads);
    }
    LOG(LOG_INFO, "received %s, draining (grace %d s; signal again to hand runs back now)",
        strsignal(sig), d.grace_s);
    /* Claims stop before /readyz says 503: a client that saw the 503 and
     * submitted elsewhere must not find its run claimed here. */
    engine_stop_claims(engine);
    atomic_store(draining, true);
    if (pthread_create(&th, NULL, drain_main, &d) != 0)
        abort();
    while (!atomic_load(&d.done)) {
        if ((sig = sigtimedwait(sigs, NULL, &tick)) == SIGHUP) {
            LOG(LOG_WARN, "SIGHUP ignored: draining, the configuration is not reloaded");
        } else if (sig > 0) {
            LOG(LOG_WARN, "second signal: handing running runs back to the queue now");
            engine_hurry(engine);
        }
    }
    pthread_join(th, NULL);
}

/* Bulk actions (POST /runs/cancel, /runs/retry) acted on at once, and
 * waiting for their turn. */
#define BULK_THREADS 2
#define BULK_QUEUE_MAX 16

/* With LISTEN on, the hub still reads this often in case a NOTIFY was lost. */
#define HUB_SAFETY_POLL_MS 2000

static void on_events(void *hub)
{
    hub_doorbell(hub);
}

static void on_logs(void *hub, const char *run_id)
{
    hub_poke(hub, run_id);
}

static struct hub *make_hub(const struct config *cfg)
{
    const struct hub_options o = {
        .db = conn_options(cfg, "opsrun-hub"),
        .ring_frames = cfg->sse.ring_frames,
        .ring_bytes = cfg->sse.ring_bytes,
        .max_subscribers = cfg->sse.max_subscribers,
        .heartbeat_ms = cfg->sse.heartbeat_ms,
        .poll_ms = cfg->queue.listen ? HUB_SAFETY_POLL_MS : cfg->sse.poll_interval_ms,
        .retry_ms = cfg->sse.retry_ms,
    };
    return hub_new(&o);
}

/* Ends the streams and long-polls, then stops HTTP: libmicrohttpd aborts
 * when it is stopped with a connection still suspended. */
static void stop_http(struct http *http, struct hub *hub, const struct hctx *hc)
{
    struct hub_stats hs;

    (void)submitq_close(hc->submitq, 5000); /* answers every queued submission */
    (void)bulk_close(hc->bulk, 10000);      /* each bulk action after its current batch */
    if (!http_wait_deferred(http, 5000))
        LOG(LOG_WARN, "answers of submissions or bulk actions still unsent after 5 s");
    hub_close(hub);
    if (!hub_wait_empty(hub, 5000)) {
        hub_stats(hub, &hs);
        LOG(LOG_WARN, "streams still open after 5 s subscribers=%d waiters=%d", hs.subscribers,
            hs.waiters);
    }
    http_stop(http);
}

static struct limits *make_limits(const struct config *cfg)
{
    const struct limits_options o = {
        .conns_per_addr = cfg->http.max_connections_per_ip,
        .streams_per_tenant = cfg->limits.streams_per_tenant,
        .submit_rate_per_s = cfg->limits.submit_rate_per_s,
        .submit_burst = cfg->limits.submit_burst,
    };
    return limits_new(&o);
}

/* The label values a configuration gives the metrics: its run types,
 * schedules, rate limits and notifiers, in su (arrays owned by the struct:
 * config_labels_free). */
struct config_labels {
    const char **types, **schedules, **limits, **notifiers;
    struct metrics_setup su;
};

static void config_labels(const struct config *cfg, struct config_labels *cl)
{
    cl->types = xcalloc(cfg->nrun_types + 1, sizeof(*cl->types));
    cl->schedules = xcalloc(cfg->nschedules + 1, sizeof(*cl->schedules));
    cl->limits = xcalloc(cfg->nrate_limits + 1, sizeof(*cl->limits));
    cl->notifiers = xcalloc(cfg->nnotifiers + 1, sizeof(*cl->notifiers));
    for (size_t i = 0; i < cfg->nrun_types; i++)
        cl->types[i] = cfg->run_types[i].name;
    for (size_t i = 0; i < cfg->nschedules; i++)
        cl->schedules[i] = cfg->schedules[i].name;
    for (size_t i = 0; i < cfg->nrate_limits; i++)
        cl->limits[i] = cfg->rate_limits[i].name;
    for (size_t i = 0; i < cfg->nnotifiers; i++)
        cl->notifiers[i] = cfg->notifiers[i].name;
    cl->su = (struct metrics_setup){
        .types = cl->types,
        .ntypes = cfg->nrun_types,
        .schedules = cl->schedules,
        .nschedules = cfg->nschedules,
        .limits = cl->limits,
        .nlimits = cfg->nrate_limits,
        .notifiers = cl->notifiers,
        .nnotifiers = cfg->nnotifiers,
    };
}

static void config_labels_free(struct config_labels *cl)
{
    free(cl->types);
    free(cl->schedules);
    free(cl->limits);
    free(cl->notifiers);
}

/* The registry, with every label value GET /metrics may show: the
 * configured run types, schedules, rate limits and notifiers (a reload
 * adds its own: reload_before_swap), the terminal outcomes and the route
 * templates. */
static struct metrics *make_metrics(const struct config *cfg)
{
    const char *outcomes[RUN_OUTCOME_COUNT], *routes[64];
    size_t nroutes = route_patterns(routes, ARRAY_LEN(routes)), n = 0;
    struct config_labels cl;
    struct metrics *m;

    for (int o = OUTCOME_PENDING + 1; o < RUN_OUTCOME_COUNT; o++)
        outcomes[n++] = run_outcome_name((enum run_outcome)o);
    config_labels(cfg, &cl);
    cl.su.outcomes = outcomes;
    cl.su.noutcomes = n;
    cl.su.routes = routes;
    cl.su.nroutes = nroutes < ARRAY_LEN(routes) ? nroutes : ARRAY_LEN(routes);
    cl.su.version = OPSRUN_VERSION;
    cl.su.commit = opsrun_build_commit;
    m = metrics_new(&cl.su);
    config_labels_free(&cl);
    return m;
}

/* What a reload's swap needs of the running server (server/reload.h). */
struct swap_ctx {
    struct metrics *metrics;
    struct hub *hub;
};

/* The new run types, schedules, rate limits and notifiers get their
 * series before anything can run under them. */
static void reload_before_swap(void *arg, const struct config *next)
{
    const struct swap_ctx *sc = arg;
    struct config_labels cl;
    size_t dropped;

    config_labels(next, &cl);
    dropped = metrics_add_labels(sc->metrics, &cl.su);
    config_labels_free(&cl);
    if (dropped > 0)
        LOG(LOG_WARN,
            "%zu run types, schedules, rate limits or notifiers added by reloads get no "
            "metrics: each may gain at most %d after start; restart to count them",
            dropped, METRICS_LABELS_ADDED_MAX);
}

/* Every stream asks again whether its token may still read it. */
static void reload_after_swap(void *arg)
{
    const struct swap_ctx *sc = arg;

    hub_wake_all(sc->hub);
}

/* Never runs: the signals stay blocked and are taken by sigwait(). */
static void on_signal(int sig)
{
    (void)sig;
}

/* SIGINT and SIGTERM go to sigwait() in *sigs: blocked before any thread
 * starts, so every thread inherits the mask. A shell that starts us in the
 * background sets SIGINT to ignored, and sigwait() never sees an ignored
 * signal: a handler is installed first. */
static void take_signals(sigset_t *sigs)
{
    sigemptyset(sigs);
    sigaddset(sigs, SIGINT);
    sigaddset(sigs, SIGTERM);
    sigaddset(sigs, SIGHUP);
    sigaction(SIGINT, &(struct sigaction){.sa_handler = on_signal}, NULL);
    sigaction(SIGTERM, &(struct sigaction){.sa_handler = on_signal}, NULL);
    sigaction(SIGHUP, &(struct sigaction){.sa_handler = on_signal}, NULL);
    pthread_sigmask(SIG_BLOCK, sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* The handlers' own threads: the submission flushers and the bulk
 * actions' runner, in hc; logged when they cannot start. */
static enum status start_handler_threads(const struct config *cfg, struct hctx *hc)
{
    struct error err = {0};

    hc->submitq = submitq_new(hc, &(struct submitq_options){
                                      .flushers = cfg->submit.flushers,
                                      .batch_max = cfg->submit.batch_max,
                                      .queue_max = cfg->submit.queue_max,
                                  });
    if (submitq_start(hc->submitq, &err) != ST_OK) {
        LOG(LOG_ERROR, "could not start the submission queue: %s", err.message);
        return ST_INTERNAL;
    }
    hc->bulk = bulk_new(hc, BULK_THREADS, BULK_QUEUE_MAX);
    if (bulk_start(hc->bulk, &err) != ST_OK) {
        LOG(LOG_ERROR, "could not start the bulk actions: %s", err.message);
        return ST_INTERNAL;
    }
    return ST_OK;
}

/* Serves with boot (heap, taken) as the first running configuration;
 * cli's sources are read again at each reload. cfg, held until the end,
 * gives what only a restart changes: a reload keeps those values. */
static int serve(const struct cli *cli, struct config *boot)
{
    struct cfg_live *live = cfg_live_new(boot);
    const struct config *cfg = cfg_live_hold(live);
    struct reloader *reloader = reloader_new(live, reload_build, cli);
    const struct db_options opt = conn_options(cfg, "opsrun");
    struct db_pool *pool = NULL;
    struct engine *engine = NULL;
    struct hub *hub = NULL;
    struct http *http = NULL;
    struct limits *limits = NULL;
    struct metrics *metrics = NULL;
    struct swap_ctx sc;
    struct error err = {0};
    _Atomic bool draining = false;
    struct hctx hc = {0};
    sigset_t sigs;
    int rc = 1;

    take_signals(&sigs);
    raise_nofile(cfg);
    if (migrate(cfg, STARTUP_DB_WAIT_S) != 0)
        goto out;
    /* Bound before anything starts: a taken port must not leave a worker
     * row behind (the engine registers one as it starts). */
    if (http_bind(cfg->listen, &http, &err) != ST_OK) {
        LOG(LOG_ERROR, "%s", err.message);
        goto out;
    }
    pool = db_pool_new(&opt, cfg_pool_size(cfg), cfg->db.pool_wait_ms);
    metrics = make_metrics(cfg);
    engine = engine_new(cfg, pool);
    engine_set_live(engine, live);
    engine_set_metrics(engine, metrics);
    hub = make_hub(cfg);
    sc = (struct swap_ctx){.metrics = metrics, .hub = hub};
    reloader_set_hooks(reloader,
                       &(struct reload_hooks){reload_before_swap, reload_after_swap, &sc});
    engine_on_events(engine, on_events, hub);
    engine_on_logs(engine, on_logs, hub);
    if (hub_start(hub, &err) != ST_OK || engine_start(engine, &err) != ST_OK) {
        LOG(LOG_ERROR, "could not start the engine: %s", err.message);
        goto out;
    }
    limits = make_limits(cfg);
    hc = (struct hctx){.cfg = cfg,
                       .live = live,
                       .reloads = reloader_reloads(reloader),
                       .pool = pool,
                       .engine = engine,
                       .hub = hub,
                       .limits = limits,
                       .draining = &draining};
    hc.metrics = metrics;
    if (start_handler_threads(cfg, &hc) != ST_OK) {
        engine_drain(engine, 0);
        goto out;
    }
    if (http_start(http, &hc, &err) != ST_OK) {
        LOG(LOG_ERROR, "could not start HTTP: %s", err.message);
        engine_drain(engine, 0);
        goto out;
    }
    LOG(LOG_INFO, "serving listen=%s port=%u version=%s", cfg->listen, http_port(http),
        OPSRUN_VERSION);
    serve_until_signal(cfg, engine, reloader_reloads(reloader), &draining, &sigs);
    stop_http(http, hub, &hc);
    http = NULL;
    rc = 0;
    LOG(LOG_INFO, "stopped");
out:
    http_stop(http); /* bound, but not served */
    if (hc.submitq)
        (void)submitq_close(hc.submitq, 0);
    submitq_free(hc.submitq);
    if (hc.bulk)
        (void)bulk_close(hc.bulk, 0);
    bulk_free(hc.bulk);
    engine_free(engine);
    hub_free(hub);
    limits_free(limits);
    db_pool_free(pool);
    metrics_free(metrics);
    reloader_free(reloader);
    cfg_live_release(live, cfg);
    cfg_live_free(live);
    return rc;
}

static void log_warning(void *arg, const char *line)
{
    (void)arg;
    LOG(LOG_WARN, "%s", line);
}

/* Without tokens opsrun serves loopback only, unless --insecure-no-auth,
 * which is warned about at every start. Logs how requests are checked,
 * and what the configuration has that no caller can see (cfg_warnings). */
static int check_auth(const struct config *cfg)
{
    struct error err = {0};

    if (cfg_check_exposure(cfg, &err) != ST_OK) {
        fprintf(stderr, "opsrun: %s\n", err.message);
        return 2;
    }
    reload_log_auth(cfg);
    cfg_warnings(cfg, log_warning, NULL);
    return 0;
}

static void print_warning(void *arg, const char *line)
{
    unsigned *n = arg;

    fprintf(stderr, "opsrun: warning: %s\n", line);
    (*n)++;
}

/* opsrun config check FILE: what serve would do with the configuration
 * built by build_config (built = its exit status) before it reaches for the
 * database: the same errors, the exposure check of serve, the same
 * warnings. Nothing is connected to. 0 valid, 1 not. */
static int config_check(const struct cli *cli, const struct config *cfg, int built)
{
    struct error err = {0};
    unsigned warnings = 0;

    if (built != 0)
        return 1;
    if (cfg_check_exposure(cfg, &err) != ST_OK) {
        fprintf(stderr, "opsrun: %s\n", err.message);
        return 1;
    }
    cfg_warnings(cfg, print_warning, &warnings);
    if (warnings > 0)
        printf("%s: ok, %u warning%s\n", cli->config, warnings, warnings == 1 ? "" : "s");
    else
        printf("%s: ok\n", cli->config);
    return fflush(stdout) == 0 ? 0 : 1;
}

/* The value of "--flag V" or "--flag=V" at argv[*i] into *out (moving *i
 * past a separate value); false when argv[*i] is not flag. */
static bool flag_value(int argc, char **argv, int *i, const char *flag, const char **out)
{
    size_t n = strlen(flag);

    if (strncmp(argv[*i], flag, n) != 0)
        return false;
    if (argv[*i][n] == '=')
        *out = argv[*i] + n + 1;
    else if (argv[*i][n] == '\0' && *i + 1 < argc)
        *out = argv[++*i];
    else
        return false;
    return true;
}

/* opsrun token new --name N --tenant T --scopes S1,S2: the token on the
 * first line, its auth.tokens entry on the second. Nothing is stored; the
 * token is shown this once. */
static int token_new(int argc, char **argv)
{
    static const char *const flags[] = {"--name", "--tenant", "--scopes"};
    const char *vals[ARRAY_LEN(flags)] = {NULL};
    struct error err = {0};
    json_t *entry = NULL;
    char *token = NULL, *line;

    if (argc < 3 || strcmp(argv[2], "new") != 0) {
        fprintf(stderr, "opsrun: usage: opsrun token new --name N --tenant T --scopes S1,S2\n");
        return 2;
    }
    for (int i = 3; i < argc; i++) {
        bool ok = false;
        for (size_t k = 0; k < ARRAY_LEN(flags) && !ok; k++)
            ok = flag_value(argc, argv, &i, flags[k], &vals[k]);
        if (!ok) {
            fprintf(stderr, "opsrun: token new: unknown argument \"%s\"\n", argv[i]);
            return 2;
        }
    }
    if (!vals[0] || !vals[1] || !vals[2]) {
        fprintf(stderr, "opsrun: token new needs --name, --tenant and --scopes\n");
        return 2;
    }
    if (cfg_token_new(vals[0], vals[1], vals[2], &token, &entry, &err) != ST_OK) {
        print_lines("token new: ", err.message);
        return 2;
    }
    line = json_dumps(entry, JSON_COMPACT);
    printf("%s\n%s\n", token, line);
    free(line);
    free(token);
    json_decref(entry);
    return fflush(stdout) == 0 ? 0 : 1;
}

static int print_config(const struct config *cfg)
{
    json_t *j = cfg_to_json(cfg);
    char *s = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);

    puts(s);
    free(s);
    json_decref(j);
    return 0;
}

/* serve() with cfg moved to the heap (cfg is left empty). */
static int serve_taking(const struct cli *cli, struct config *cfg)
{
    struct config *boot = xmalloc(sizeof(*boot));

    *boot = *cfg;
    memset(cfg, 0, sizeof(*cfg));
    return serve(cli, boot);
}

int main(int argc, char **argv)
{
    struct cli cli;
    struct config cfg;
    int rc;

    if (argc > 1 && strcmp(argv[1], "token") == 0)
        return token_new(argc, argv);
    if (client_wants(argc, argv))
        return client_main(argc, argv);
    rc = cli_parse(argc, argv, &cli);
    if (rc != 0)
        return rc;
    if (strcmp(cli.command, "help") == 0) {
        print_usage(stdout);
        return 0;
    }
    /* A SIGHUP before serve takes its signals (a reload sent as it
     * starts) waits for it, to reload then, instead of ending the process. */
    if (strcmp(cli.command, "serve") == 0) {
        sigset_t hup;
        sigemptyset(&hup);
        sigaddset(&hup, SIGHUP);
        pthread_sigmask(SIG_BLOCK, &hup, NULL);
    }
    if (strcmp(cli.command, "version") == 0) {
        printf("opsrun %s (commit %s, built %s)\n", OPSRUN_VERSION, opsrun_build_commit,
               opsrun_build_date);
        return 0;
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "opsrun: could not initialise libcurl\n");
        return 1;
    }
    xmlInitParser(); /* once, before any thread parses */
    rc = build_config(&cli, &cfg);
    if (cli.check) {
        rc = config_check(&cli, &cfg, rc);
    } else if (rc == 0) {
        log_init(cfg.log_level, cfg_log_json(&cfg));
        if (cli.print_config)
            rc = print_config(&cfg);
        else if (strcmp(cli.command, "serve") == 0 && (rc = check_auth(&cfg)) != 0)
            ; /* refused: it said why */
        else if (!cfg.database_url || !*cfg.database_url)
            fprintf(stderr, "opsrun: no database: set --database-url or OPSRUN_DATABASE_URL\n"),
                rc = 2;
        else if (strcmp(cli.command, "migrate") == 0)
            rc = migrate(&cfg, 0);
        else
            rc = serve_taking(&cli, &cfg);
    }
    cfg_cleanup(&cfg);
    xmlCleanupParser();
    curl_global_cleanup();
    return rc;
}
