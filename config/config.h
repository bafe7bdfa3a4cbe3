/* config/config.h — the configuration: built-in defaults, then the JSON
 * file, then environment variables, then command-line flags. Built once in
 * main, validated, and read-only afterwards (safe to read from any thread).
 * Errors name the key: `invalid "queue.workers": must be between 1 and 1024`.
 * cfg_load_json, cfg_load_file, cfg_load_env and cfg_validate go on past an
 * error and put every one in err->message, one line each (as many as it
 * holds, then a line saying how many more); an unknown key ends with
 * `; did you mean "queue.workers"?` when a known one is near it.
 *
 * Configuration sits below everything that reads it (engine, actions,
 * handlers, the process). It knows actions only through struct cfg_actions,
 * which the action registry provides and main passes to cfg_init: a run
 * type's "action" must exist there, and its "params" are checked by it.
 *
 * One header for the folder's sources (config_internal.h says how they
 * share the work): config.c the life cycle, the sources and the checks
 * across sections; run_types.c the run types; concurrency.c a run type's
 * concurrency key and its strategy names; routes.c the routes; auth.c the
 * tokens, scopes and the loopback rule; cors.c the CORS origins;
 * schedules.c the schedules and rate limits; notify.c the notifiers;
 * tenants.c the tenants and their caps; workflows.c (with
 * config/workflows.h) the steps of workflow types; print.c the effective
 * configuration as JSON; errors.c where the errors of a load go
 * (cfg_errors_sink). */
#ifndef OPSRUN_CONFIG_H
#define OPSRUN_CONFIG_H

#include "common/common.h"
#include "common/cron.h"
#include "common/log.h"

#include <jansson.h>
#include <regex.h>

struct suggest;

enum cfg_source { CFG_SRC_DEFAULT, CFG_SRC_FILE, CFG_SRC_ENV, CFG_SRC_FLAG };

/* The actions as configuration sees them: whether one exists, and the check
 * of a run type's params, whose errors name keys under path
 * ("run_types.etl.params.url"). Both reentrant. */
struct cfg_actions {
    bool (*exists)(const char *action);
    enum status (*check_params)(const char *action, const json_t *params, const char *path,
                                struct error *err);
    /* Whether the action runs a workflow: its params hold steps, whose run
     * types are checked across the configuration (config/workflows.h).
     * NULL: none does. */
    bool (*is_workflow)(const char *action);
};

/* How the poller drives a run of this type while it waits on an external
 * job: the delay before check n is min(initial * multiplier^(n-1), max),
 * ± jitter_pct; the run ends timed_out after max_checks checks or
 * max_duration_s of waiting, whichever comes first. */
struct poll_policy {
    int64_t initial_delay_ms; /* default 2000 */
    int multiplier;           /* default 2 */
    int64_t max_delay_ms;     /* default 30000 */
    int jitter_pct;           /* default 20 */
    int max_checks;           /* default 120 */
    int64_t max_duration_s;   /* default 1740 (29 min) */
    int check_timeout_s;      /* one check's time limit, default 60 */
};

/* A run type's "approval": every new run waits (status waiting) for a
 * person to approve or reject it before its action starts, for at most
 * timeout_s, after which it is approved when approve_on_timeout, else
 * rejected. */
struct approval_policy {
    int timeout_s; /* 1..2592000, default 3600; 0 = no approval (JSON null, the default) */
    bool approve_on_timeout; /* "on_timeout": "approve"; false: "reject" (default) */
};

/* What a run type's "concurrency" does when a new run's key is taken. */
enum conc_strategy {
    CONC_QUEUE,              /* "queue" (default): it waits its turn */
    CONC_CANCEL_IN_PROGRESS, /* it cancels the key's other runs, then starts */
    CONC_CANCEL_NEWEST,      /* it completes at once, cancelled */
    CONC_KEEP_NEWEST,        /* it cancels the key's queued run it replaces */
};

/* A run type's "concurrency": at most max_running runs of one tenant,
 * group and key running (or cancelling) at once, across every replica.
 * The key is a template over the run (common/conc_key.h), evaluated at
 * submission. */
struct concurrency {
    bool on;         /* false: the type has none (JSON null, the default) */
    char *group;     /* default: the run type's name */
    char *key;       /* the template as written */
    json_t *parts;   /* owned: the template compiled (conc_key_compile) */
    int max_running; /* 1..100000, default 1 */
    enum conc_strategy strategy;
};

struct run_type {
    char *name;
    char *action;                 /* simulate, http, rest_job, soap_job or exec */
    json_t *params;               /* owned; {} when absent */
    int max_attempts;             /* 1..100, default 3 */
    int64_t retry_backoff_ms;     /* base, default 200 */
    int64_t retry_backoff_max_ms; /* cap, default 60000 */
    int64_t timeout_s;            /* default 900 */
    int max_running;              /* 0 = no per-type cap (JSON null) */
    struct poll_policy poll;
    char *rate_limit; /* the name of a rate_limits entry; NULL = none */
    struct approval_policy approval;
    /* [{"on": [...], "to": "<notifier>"}] and [{"on": [...], "run_type",
     * "delay_s"?, "data"?}] as the file has them (checked); [] when none. */
    json_t *notify, *then;
    struct concurrency conc;
};

/* One entry of tenants: settings of one tenant. */
struct tenant_cfg {
    char *name;
    int max_running; /* its running runs across replicas, 1..100000; 0 = queue.tenant_max_running */
};

/* One entry of rate_limits: at most limit units (action starts and poll
 * checks of the run types that name it) in any window of per_s seconds,
 * across every replica. */
struct rate_limit_cfg {
    char *name;
    int limit; /* 1..1000000 */
    int per_s; /* 1..86400 */
};

enum schedule_overlap { OVERLAP_SKIP, OVERLAP_ALLOW, OVERLAP_CANCEL_PREVIOUS };
enum schedule_catch_up { CATCH_UP_SKIP, CATCH_UP_ONE, CATCH_UP_ALL };

/* One entry of schedules: a run of run_type with data as its input at
 * every slot of cron in time_zone. */
struct schedule {
    char *name;
    char *cron_text; /* as written */
    struct cron cron;
    char *time_zone; /* an IANA name, default "UTC" */
    struct tz *tz;   /* loaded from the machine's tz database; owned */
    char *run_type;
    json_t *data;                    /* owned; {} when absent */
    char *tenant;                    /* NULL = tenant_default */
    enum schedule_overlap overlap;   /* default skip */
    enum schedule_catch_up catch_up; /* default one */
    int catch_up_window_s;           /* default 3600 */
    int jitter_s;                    /* default 0 */
    bool paused;                     /* until the API says otherwise */
};

enum notifier_kind { NOTIFIER_WEBHOOK, NOTIFIER_SLACK, NOTIFIER_ALERTMANAGER };

/* One entry of notifiers: where a run type's notify rules send the
 * transitions they name. url, header_values and secret are the templates
 * with every {{env:NAME}} expanded at load, and may hold secrets: never
 * log nor print them (the *_template fields and headers are what the file
 * says). */
struct notifier {
    char *name;
    enum notifier_kind kind;
    bool has_kind;
    char *url_template, *url;
    json_t *headers;                /* {"Name": "template"} as the file has it; NULL = none */
    json_t *header_values;          /* the same, expanded */
    char *secret_template, *secret; /* webhook: "{{env:NAME}}" and its value; NULL = none */
    char *text;                     /* slack: {{run:/pointer}} template; NULL = the default */
    json_t *labels;                 /* alertmanager: more labels; NULL = none */
    int max_attempts;               /* 1..20, default 8 */
    int max_in_flight;              /* deliveries at once per process, 1..64, default 4 */
    int timeout_ms;                 /* one attempt's limit, default 10000 */
};

struct route_match {
    char *key;   /* "alert_type" or a label name */
    char *value; /* exact value, or the regex source without "~" */
    bool is_regex;
    regex_t re; /* compiled anchored ^(...)$ (POSIX ERE) when is_regex */
};

struct route {
    struct route_match *matches;
    size_t nmatches;
    char *run_type;
    bool on_resolved_cancel; /* "cancel"; false = "ignore" (default) */
};

/* What a token may do: the bits of auth_token.scopes. */
enum auth_scope {
    SCOPE_SUBMIT = 1u << 0,  /* POST /alerts, the Alertmanager webhook included */
    SCOPE_READ = 1u << 1,    /* runs, events, streams, long-polls */
    SCOPE_CANCEL = 1u << 2,  /* POST /runs/{id}/cancel, retry, and the bulk ones */
    SCOPE_HEALTH = 1u << 3,  /* GET /healthz when auth.open_health is false */
    SCOPE_ADMIN = 1u << 4,   /* every scope, in every tenant */
    SCOPE_APPROVE = 1u << 5, /* POST /runs/{id}/approve and /reject */
};
/* "submit", "read", "cancel", "health", "admin", "approve"; false for
 * anything else. */
bool cfg_scope_parse(const char *name, unsigned *bit);
/* The name of one scope bit, "" for anything else. */
const char *cfg_scope_name(unsigned bit);

/* One entry of auth.tokens. The token itself is never stored: only its
 * SHA-256, compared in constant time (handlers/auth.h). */
struct auth_token {
    char *name;   /* unique; the runs it submits carry it as initiator */
    char *tenant; /* the tenant it works in */
    unsigned scopes;
    unsigned char sha256[32];
};

struct config {
    const struct cfg_actions *actions; /* borrowed; outlives the configuration */

    /* top level */
    char *listen;             /* "127.0.0.1:8080" */
    char *database_url;       /* NULL = none given (scripts then start a private cluster) */
    char *config_path;        /* NULL = built-in defaults */
    char *tenant_default;     /* "default" */
    enum log_level log_level; /* default info */
    char *log_format;         /* "json" | "text"; NULL = as log_json says */
    bool log_json;            /* the older switch, for files that have it */

    struct {
        int threads;                /* MHD pool, 2..64, default 4 */
        int connection_limit;       /* default 10000 */
        int connection_timeout_s;   /* default 60 */
        int64_t max_body_bytes;     /* default 1 MiB, 1 KiB..64 MiB */
        int max_connections_per_ip; /* default 256, 0 = no limit */
        int request_deadline_s;     /* headers and body arrive within this, default 30 */
        char **cors_origins;        /* exact origins, or "*"; none: same-origin only */
        char *public_url;           /* where people reach the dashboard; NULL = unknown */
        size_t ncors_origins;
    } http;

    struct {
        int streams_per_tenant; /* event streams open per tenant, default 1000, 0 = no limit */
        int submit_rate_per_s;  /* submissions per caller and second, default 20, 0 = no limit */
        int submit_burst;       /* and in a burst, default 200 */
    } limits;

    struct {
        int flushers;  /* threads writing submissions in shared commits, default 1 */
        int batch_max; /* submissions per shared statement, 1..1000, default 1000 */
        int queue_max; /* submissions waiting to be written; past it 503, default 20000 */
    } submit;

    struct {
        int pool_size; /* 0 = workers + http.threads + submit.flushers + 4 + poller.concurrency / 4,
                        * + 1 with notifiers */
        int pool_wait_ms;         /* checkout wait, default 2000 */
        int connect_timeout_s;    /* default 3 */
        int statement_timeout_ms; /* default 10000 */
        int tcp_user_timeout_ms;  /* silence before a connection is dead; 0 = statement + 5 s */
        int keepalive_idle_s;     /* TCP keepalives: first probe, default 30 */
        int keepalive_interval_s; /* and between probes, default 10 */
        bool prepared_statements; /* named prepared statements, default true */
    } db;

    struct {
        int workers;                /* 1..1024, default 8 */
        int max_running;            /* 1..100000, default 64 */
        int claim_batch;            /* 1..1000, default 16 */
        int poll_interval_ms;       /* 50..600000, default 1000 */
        int heartbeat_interval_s;   /* 1..3600, default 5 */
        int orphan_after_s;         /* > heartbeat_interval_s, default 30 */
        int orphan_scan_interval_s; /* default 5 */
        int shutdown_grace_s;       /* 0..86400, default 900 */
        int progress_interval_ms;   /* throttle, default 250 */
        int cancel_check_ms;        /* default 250 */
        bool listen;                /* LISTEN/NOTIFY wake-ups; false = poll only */
        int64_t retention_s;        /* completed runs kept, default 7 days */
        int retention_batch;        /* default 500 */
        int64_t event_partition_s;  /* run_events partition span, default 1 day */
        int schedule_grace_s;       /* a slot not taken this late is missed, default 10 */
        int max_chain_depth;        /* follow-ups of follow-ups, at most, default 10 */
        int tenant_max_running;     /* a tenant's running runs, at most; 0 = no cap (null) */
    } queue;

    struct {
        int max_line_bytes;            /* longer lines are cut, default 8 KiB */
        int64_t max_bytes_per_attempt; /* a command's lines past it are dropped, default 1 MiB */
        int flush_ms;                  /* lines wait at most about this long, default 200 */
    } logs;

    struct {
        int concurrency; /* checks in flight per process, 1..256, default 16 */
        int interval_ms; /* look for due checks at least this often, default 1000 */
    } poller;

    struct {
        int max_subscribers;   /* streams per process, default 5000 */
        int heartbeat_ms;      /* keep-alive comment interval, default 15000 */
        int retry_ms;          /* the retry: hint, default 3000 */
        int ring_frames;       /* live frames kept, default 4096 */
        int64_t ring_bytes;    /* and their bytes, default 16 MiB */
        int poll_interval_ms;  /* event reads without LISTEN, default 250 */
        int send_timeout_s;    /* a stream whose client takes nothing this long is closed */
        int send_buffer_bytes; /* kernel send buffer per stream (SO_SNDBUF), default 256 KiB */
    } sse;

    struct {
        struct auth_token *tokens; /* none: no authentication (loopback only) */
        size_t ntokens;
        bool open_health;      /* /healthz without a token; default false */
        bool insecure_no_auth; /* serve without tokens on any address */
    } auth;

    struct run_type *run_types;
    size_t nrun_types;
    struct rate_limit_cfg *rate_limits;
    size_t nrate_limits;
    struct tenant_cfg *tenants; /* the "tenants" section; none: no entries */
    size_t ntenants;
    struct schedule *schedules;
    size_t nschedules;
    struct notifier *notifiers;
    size_t nnotifiers;
    struct route *routes;
    size_t nroutes;
    char *default_route; /* run type when no route matches; NULL = none */

    /* Where each top-level scalar came from, for --print-config. Indexed by
     * the option table of config.c; opaque to other modules. */
    enum cfg_source *sources;
};

/* Defaults only, and the built-in run type "demo" (simulate). actions must
 * outlive cfg. */
void cfg_init(struct config *cfg, const struct cfg_actions *actions);
void cfg_cleanup(struct config *cfg);

/* Applies a JSON document (the config file's text). Unknown keys, wrong
 * types and out-of-range values are errors naming the key. "run_types" is
 * merged into the types already there (a type named again is updated field
 * by field; null removes it); "routes" replaces the routes. On failure cfg
 * may hold part of the document but stays valid for cfg_cleanup. */
enum status cfg_load_json(struct config *cfg, const char *text, struct error *err) WUR;
/* As cfg_load_json, and records path as config_path with source "flag";
 * cfg_load_env credits OPSRUN_CONFIG instead when it names the same file.
 * A file larger than 4 MiB is ST_INVALID, and nothing of it is applied. */
enum status cfg_load_file(struct config *cfg, const char *path, struct error *err) WUR;
/* Applies OPSRUN_LISTEN, OPSRUN_DATABASE_URL, OPSRUN_CONFIG (file loaded by
 * the caller first), OPSRUN_WORKERS, OPSRUN_LOG_LEVEL; getenv_fn is getenv
 * in production and a table lookup in tests. */
enum status cfg_load_env(struct config *cfg, const char *(*getenv_fn)(const char *),
                         struct error *err) WUR;
/* Sets one scalar option from text (a flag's or a variable's value), parsed
 * and bounded as the option table says. key is the JSON path ("listen",
 * "queue.workers") or the flag name ("workers", "database-url"); value NULL
 * clears a string that may be null. Errors name the option as src says:
 * OPSRUN_WORKERS, --workers, or "queue.workers". */
enum status cfg_set(struct config *cfg, const char *key, const char *value, enum cfg_source src,
                    struct error *err) WUR;
/* Records where an option came from, for --print-config; key as for cfg_set. */
void cfg_mark_source(struct config *cfg, const char *key, enum cfg_source src);
/* Cross-field checks after every source: orphan_after_s > heartbeat, routes
 * name existing run types, "demo"-free configs, and so on. */
enum status cfg_validate(const struct config *cfg, struct error *err) WUR;

/* serve's safety check: without auth.tokens, only a loopback "listen" is
 * allowed, unless auth.insecure_no_auth. ST_INVALID names auth.tokens. */
enum status cfg_check_exposure(const struct config *cfg, struct error *err) WUR;
/* Whether host (of a "listen" value: an IPv4 literal, "localhost" or an
 * IPv6 literal without brackets) is a loopback address. */
bool cfg_host_is_loopback(const char *host);
/* Whether some caller can see tenant's runs and schedules: without
 * auth.tokens only the anonymous caller's tenant (tenant_default), with
 * tokens a token of that tenant or one with the scope admin. */
bool cfg_tenant_visible(const struct config *cfg, const char *tenant);
/* The warnings of a valid configuration: what loads but cannot work as
 * meant. One kind so far: a schedule whose runs go to a tenant that no
 * caller can see (cfg_tenant_visible). warn gets each as one log line (a
 * sentence with key=value fields), in the order of the configuration. */
void cfg_warnings(const struct config *cfg, void (*warn)(void *arg, const char *line), void *arg);
/* Where every error line of a load also goes, whole, however many there
 * are (a message holds only the first few): serve and `config check` print
 * each. NULL stops it. Set from one thread, before loading. */
void cfg_errors_sink(void (*fn)(void *arg, const char *line), void *arg);

/* A new token for `opsrun token new`: 256 random bits, base64url, in
 * *token (heap), and its auth.tokens entry in *entry (new reference),
 * checked as the file's entries are. scopes is "s1,s2". */
enum status cfg_token_new(const char *name, const char *tenant, const char *scopes, char **token,
                          json_t **entry, struct error *err) WUR;

/* Whether a page of origin (an Origin header's value; NULL allowed) may
 * call the API: it is listed in http.cors_origins, or "*" is. */
bool cfg_cors_allowed(const struct config *cfg, const char *origin);

const struct run_type *cfg_run_type(const struct config *cfg, const char *name);
/* Offers every run type's name to s (common/suggest.h), for the "did you
 * mean" of an unknown one. */
void cfg_run_type_suggest(const struct config *cfg, struct suggest *s);
const struct schedule *cfg_schedule(const struct config *cfg, const char *name);
const struct rate_limit_cfg *cfg_rate_limit(const struct config *cfg, const char *name);
/* The most runs of tenant that may run at once: its tenants entry's
 * max_running, else queue.tenant_max_running; 0 = no cap. */
int cfg_tenant_max_running(const struct config *cfg, const char *tenant);
/* "queue", "cancel_in_progress", "cancel_newest", "keep_newest". */
const char *cfg_conc_strategy_name(enum conc_strategy s);
const struct notifier *cfg_notifier(const struct config *cfg, const char *name);
/* "webhook", "slack", "alertmanager". */
const char *cfg_notifier_kind_name(enum notifier_kind k);
/* Whether the type has notify or then rules: its transitions set
 * something off. */
bool cfg_run_type_reacts(const struct run_type *rt);
/* "skip", "allow", "cancel_previous"; "skip", "one", "all". */
const char *cfg_overlap_name(enum schedule_overlap o);
const char *cfg_catch_up_name(enum schedule_catch_up c);
/* The tenant a schedule's runs go to: its own, else tenant_default. */
const char *cfg_schedule_tenant(const struct config *cfg, const struct schedule *s);
int cfg_pool_size(const struct config *cfg);
/* Whether log lines are JSON: log.format when set, else log.json. */
bool cfg_log_json(const struct config *cfg);

/* Routing: the first route whose every match holds picks the run type.
 * labels may be NULL (a JSON object of string values otherwise). When no
 * route matches, alert_type naming a run type picks it, then the default
 * route. Returns NULL when nothing matches. *route_out (optional) is the
 * matching route or NULL. */
const struct run_type *cfg_route(const struct config *cfg, const char *alert_type,
                                 const json_t *labels, const struct route **route_out);

/* The effective configuration as JSON (secrets in database_url masked), with
 * a "sources" object naming the source of every scalar option by its JSON
 * path ("queue.workers": "env"). New reference; NULL if jansson fails. */
json_t *cfg_to_json(const struct config *cfg);

#endif
