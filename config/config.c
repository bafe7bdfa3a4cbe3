/* config/config.c — the top-level option table (cfg_opts), the life cycle
 * of a configuration, its sources (the JSON file, the environment, flags),
 * the cross-field checks and the lookups. Every error names the key, the
 * variable or the flag. */
#include "config/config_internal.h"

#include "common/dynbuf.h"
#include "common/suggest.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* clang-format off */
#define CFG_OFF(f) offsetof(struct config, f)
#define CFG_NUM(t, f, d, lo, hi) OPT_NUM(t, f, d, lo, hi, CFG_OFF(f))

/* Bounds are the contract of config.h; sources[] is indexed by this table. */
const struct opt cfg_opts[] = {
    {.key = "listen", .env = "OPSRUN_LISTEN", .flag = "listen", .type = OPT_STR,
     .def_str = "127.0.0.1:8080", .off = CFG_OFF(listen), .check = check_listen},
    {.key = "database_url", .env = "OPSRUN_DATABASE_URL", .flag = "database-url", .type = OPT_STR,
     .flags = OPT_NULL | OPT_SECRET, .off = CFG_OFF(database_url)},
    {.key = "config_path", .env = "OPSRUN_CONFIG", .flag = "config", .type = OPT_STR,
     .flags = OPT_NULL | OPT_NOFILE | OPT_NOSET, .off = CFG_OFF(config_path)},
    {.key = "tenant_default", .type = OPT_STR, .def_str = "default",
     .off = CFG_OFF(tenant_default), .check = check_name},
    {.key = "log.level", .env = "OPSRUN_LOG_LEVEL", .flag = "log-level", .type = OPT_LEVEL,
     .flags = OPT_LIVE, .def = LOG_INFO, .off = CFG_OFF(log_level)},
    {.key = "log.format", .env = "OPSRUN_LOG_FORMAT", .flag = "log-format", .type = OPT_STR,
     .flags = OPT_NULL, .off = CFG_OFF(log_format), .check = check_log_format},
    {.key = "log.json", .type = OPT_BOOL, .def = 0, .off = CFG_OFF(log_json)},
    CFG_NUM(OPT_INT,  http.threads,                 4,       2,    64),
    CFG_NUM(OPT_INT,  http.connection_limit,        10000,   1,    1000000),
    CFG_NUM(OPT_INT,  http.connection_timeout_s,    60,      1,    3600),
    CFG_NUM(OPT_I64,  http.max_body_bytes,          1048576, 1024, 67108864),
    {.key = "http.max_connections_per_ip", .type = OPT_INT, .flags = OPT_ZERO, .def = 256,
     .min = 1, .max = 1000000, .off = CFG_OFF(http.max_connections_per_ip)},
    CFG_NUM(OPT_INT,  http.request_deadline_s,      30,      1,    3600),
    {.key = "http.public_url", .type = OPT_STR, .flags = OPT_NULL, .off = CFG_OFF(http.public_url),
     .check = check_http_url},
    {.key = "limits.streams_per_tenant", .type = OPT_INT, .flags = OPT_ZERO, .def = 1000,
     .min = 1, .max = 1000000, .off = CFG_OFF(limits.streams_per_tenant)},
    {.key = "limits.submit_rate_per_s", .type = OPT_INT, .flags = OPT_ZERO, .def = 20,
     .min = 1, .max = 1000000, .off = CFG_OFF(limits.submit_rate_per_s)},
    CFG_NUM(OPT_INT,  limits.submit_burst,          200,     1,    1000000),
    CFG_NUM(OPT_INT,  submit.flushers,              1,       1,    16),
    CFG_NUM(OPT_INT,  submit.batch_max,             1000,    1,    1000),
    CFG_NUM(OPT_INT,  submit.queue_max,             20000,   1,    1000000),
    {.key = "db.pool_size", .type = OPT_INT, .flags = OPT_ZERO, .def = 0, .min = 2, .max = 1000,
     .off = CFG_OFF(db.pool_size)},
    CFG_NUM(OPT_INT,  db.pool_wait_ms,              2000,    0,    600000),
    CFG_NUM(OPT_INT,  db.connect_timeout_s,         3,       1,    600),
    CFG_NUM(OPT_INT,  db.statement_timeout_ms,      10000,   1,    3600000),
    {.key = "db.tcp_user_timeout_ms", .type = OPT_INT, .flags = OPT_ZERO, .def = 0, .min = 100,
     .max = 7200000, .off = CFG_OFF(db.tcp_user_timeout_ms)},
    CFG_NUM(OPT_INT,  db.keepalive_idle_s,          30,      1,    7200),
    CFG_NUM(OPT_INT,  db.keepalive_interval_s,      10,      1,    600),
    CFG_NUM(OPT_BOOL, db.prepared_statements,       1,       0,    0),
    {.key = "queue.workers", .env = "OPSRUN_WORKERS", .flag = "workers", .type = OPT_INT,
     .def = 8, .min = 1, .max = 1024, .off = CFG_OFF(queue.workers)},
    CFG_NUM(OPT_INT,  queue.max_running,            64,      1,    100000),
    CFG_NUM(OPT_INT,  queue.claim_batch,            16,      1,    1000),
    CFG_NUM(OPT_INT,  queue.poll_interval_ms,       1000,    50,   600000),
    CFG_NUM(OPT_INT,  queue.heartbeat_interval_s,   5,       1,    3600),
    CFG_NUM(OPT_INT,  queue.orphan_after_s,         30,      2,    86400),
    CFG_NUM(OPT_INT,  queue.orphan_scan_interval_s, 5,       1,    3600),
    CFG_NUM(OPT_INT,  queue.shutdown_grace_s,       900,     0,    86400),
    CFG_NUM(OPT_INT,  queue.progress_interval_ms,   250,     0,    60000),
    CFG_NUM(OPT_INT,  queue.cancel_check_ms,        250,     10,   60000),
    CFG_NUM(OPT_BOOL, queue.listen,                 1,       0,    0),
    CFG_NUM(OPT_I64,  queue.retention_s,            604800,  60,   31536000),
    CFG_NUM(OPT_INT,  queue.retention_batch,        500,     1,    100000),
    CFG_NUM(OPT_I64,  queue.event_partition_s,      86400,   60,   2592000),
    CFG_NUM(OPT_INT,  queue.schedule_grace_s,       10,      1,    3600),
    CFG_NUM(OPT_INT,  queue.max_chain_depth,        10,      0,    1000),
    {.key = "queue.tenant_max_running", .type = OPT_INT, .flags = OPT_NULL | OPT_LIVE, .def = 0, .min = 1,
     .max = 100000, .off = CFG_OFF(queue.tenant_max_running)},
    CFG_NUM(OPT_INT,  logs.max_line_bytes,          8192,    256,  1048576),
    CFG_NUM(OPT_I64,  logs.max_bytes_per_attempt,   1048576, 1024, 67108864),
    CFG_NUM(OPT_INT,  logs.flush_ms,                200,     10,   60000),
    CFG_NUM(OPT_INT,  poller.concurrency,           16,      1,    256),
    CFG_NUM(OPT_INT,  poller.interval_ms,           1000,    50,   600000),
    CFG_NUM(OPT_INT,  sse.max_subscribers,          5000,    0,    1000000),
    CFG_NUM(OPT_INT,  sse.heartbeat_ms,             15000,   100,  600000),
    CFG_NUM(OPT_INT,  sse.retry_ms,                 3000,    0,    600000),
    CFG_NUM(OPT_INT,  sse.ring_frames,              4096,    16,   1000000),
    CFG_NUM(OPT_I64,  sse.ring_bytes,               16777216, 65536, 4294967296),
    CFG_NUM(OPT_INT,  sse.poll_interval_ms,         250,     10,   60000),
    CFG_NUM(OPT_INT,  sse.send_timeout_s,           60,      1,    3600),
    CFG_NUM(OPT_INT,  sse.send_buffer_bytes,        262144,  4096, 16777216),
    {.key = "default_route", .type = OPT_STR, .flags = OPT_NULL | OPT_LIVE, .off = CFG_OFF(default_route),
     .check = check_name},
    {.key = "auth.open_health", .type = OPT_BOOL, .flags = OPT_LIVE, .def = 0,
     .off = CFG_OFF(auth.open_health)},
    {.key = "auth.insecure_no_auth", .env = "OPSRUN_INSECURE_NO_AUTH", .flag = "insecure-no-auth",
     .type = OPT_BOOL, .def = 0, .off = CFG_OFF(auth.insecure_no_auth)},
};
const size_t cfg_nopts = ARRAY_LEN(cfg_opts);
/* clang-format on */

/* The option behind a key of the file, by its full path. */
static const struct opt *file_opt(const char *path)
{
    for (size_t i = 0; i < cfg_nopts; i++)
        if (!(cfg_opts[i].flags & OPT_NOFILE) && strcmp(cfg_opts[i].key, path) == 0)
            return &cfg_opts[i];
    return NULL;
}

/* True when some file option lives under "path." (a section such as "queue"). */
static bool is_section(const char *path)
{
    size_t n = strlen(path);
    for (size_t i = 0; i < cfg_nopts; i++)
        if (!(cfg_opts[i].flags & OPT_NOFILE) && strncmp(cfg_opts[i].key, path, n) == 0 &&
            cfg_opts[i].key[n] == '.')
            return true;
    return false;
}

/* ---- life cycle ---- */

void cfg_init(struct config *cfg, const struct cfg_actions *actions)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->actions = actions;
    cfg->sources = xcalloc(cfg_nopts, sizeof(*cfg->sources));
    for (size_t i = 0; i < cfg_nopts; i++)
        opt_set_default(cfg, &cfg_opts[i]);
    rt_add_demo(cfg);
}

void cfg_cleanup(struct config *cfg)
{
    for (size_t i = 0; i < cfg_nopts; i++)
        if (cfg_opts[i].type == OPT_STR)
            opt_store_str(cfg, &cfg_opts[i], NULL);
    rt_free_all(cfg);
    routes_free(cfg->routes, cfg->nroutes);
    tokens_free(cfg->auth.tokens, cfg->auth.ntokens);
    cors_origins_free(cfg->http.cors_origins, cfg->http.ncors_origins);
    schedules_free(cfg);
    rate_limits_free(cfg);
    notifiers_free(cfg);
    tenants_free(cfg);
    free(cfg->sources);
    memset(cfg, 0, sizeof(*cfg));
}

/* ---- sources: the file, the environment, flags ---- */

/* One key of the file as a candidate for an unknown key under parent
 * (NULL: the top level). */
static void suggest_one(struct suggest *s, const char *parent, const char *key)
{
    const char *dot = strchr(key, '.');
    size_t plen = parent ? strlen(parent) : 0;

    if (!parent && !dot) {
        suggest_add(s, key);
    } else if (!parent) {
        suggest_add_len(s, key, (size_t)(dot - key));                  /* its section */
        suggest_add_as(s, key, strlen(key), dot + 1, strlen(dot + 1)); /* by its last part */
    } else if (dot && (size_t)(dot - key) == plen && strncmp(key, parent, plen) == 0) {
        suggest_add_as(s, key, strlen(key), dot + 1, strlen(dot + 1));
    }
}

/* The keys near an unknown one: in a section, the section's keys by their
 * last part; at the top level, the top-level keys, the sections, and every
 * key of a section by its last part ("workers" for "queue.workers"). */
static void unknown_key(const char *parent, const char *key, const char *path,
                        struct cfg_errors *errs)
{
    static const char *const more[] = {"auth.tokens", "http.cors_origins", "run_types", "routes",
                                       "schedules",   "rate_limits",       "notifiers", "tenants"};
    struct suggest s;

    suggest_init(&s, key);
    for (size_t i = 0; i < cfg_nopts; i++)
        if (!(cfg_opts[i].flags & OPT_NOFILE))
            suggest_one(&s, parent, cfg_opts[i].key);
    for (size_t i = 0; i < ARRAY_LEN(more); i++)
        suggest_one(&s, parent, more[i]);
    (void)cfg_unknown_key(errs, path, &s);
}

static void load_value(struct config *cfg, const char *parent, const char *key, const json_t *v,
                       struct cfg_errors *errs);

static void load_section(struct config *cfg, const char *path, const json_t *v,
                         struct cfg_errors *errs)
{
    const char *key;
    json_t *child;

    if (!json_is_object(v)) {
        (void)cfg_errors_addf(errs, "invalid \"%s\": expected an object", path);
        return;
    }
    json_object_foreach((json_t *)v, key, child)
    {
        load_value(cfg, path, key, child, errs);
    }
}

static void load_value(struct config *cfg, const char *parent, const char *key, const json_t *v,
                       struct cfg_errors *errs)
{
    char path[KEY_MAX], label[KEY_MAX + 2];
    bool dotted = strchr(key, '.') != NULL; /* "queue.workers" is no key of the top level */
    struct error one = {0};
    const struct opt *o;

    if (parent)
        xsnprintf(path, sizeof(path), "%s.%s", parent, key);
    else
        xsnprintf(path, sizeof(path), "%s", key);
    if (!dotted && strcmp(path, "auth.tokens") == 0)
        load_auth_tokens(cfg, v, errs);
    else if (!dotted && strcmp(path, "http.cors_origins") == 0)
        (void)cfg_errors_note(errs, load_cors_origins(cfg, v, &one), &one);
    else if (!dotted && (o = file_opt(path)) != NULL) {
        xsnprintf(label, sizeof(label), "\"%s\"", path);
        if (cfg_errors_note(errs, opt_from_json(cfg, o, v, label, &one), &one) == ST_OK)
            cfg->sources[o - cfg_opts] = CFG_SRC_FILE;
    } else if (!dotted && is_section(path))
        load_section(cfg, path, v, errs);
    else
        unknown_key(parent, key, path, errs);
}

/* Routes go last, so they may name types defined further down the file. */
static void load_doc(struct config *cfg, const json_t *root, struct cfg_errors *errs)
{
    const char *key;
    json_t *v;

    json_object_foreach((json_t *)root, key, v)
    {
        if (strcmp(key, "routes") == 0)
            continue;
        if (strcmp(key, "run_types") == 0)
            load_run_types(cfg, v, errs);
        else if (strcmp(key, "schedules") == 0)
            load_schedules(cfg, v, errs);
        else if (strcmp(key, "rate_limits") == 0)
            load_rate_limits(cfg, v, errs);
        else if (strcmp(key, "notifiers") == 0)
            load_notifiers(cfg, v, errs);
        else if (strcmp(key, "tenants") == 0)
            load_tenants(cfg, v, errs);
        else
            load_value(cfg, NULL, key, v, errs);
    }
    v = json_object_get(root, "routes");
    if (v)
        load_routes(cfg, v, json_object_get(root, "run_types"), errs);
    if (errs->n == 0) {
        check_refs(cfg, errs);
        check_schedule_refs(cfg, errs);
        check_notify_refs(cfg, errs);
        check_conc_refs(cfg, errs);
        check_wf_refs(cfg, errs);
    }
}

static enum status load_text(struct config *cfg, const char *text, size_t len, const char *file,
                             struct error *err)
{
    char what[KEY_MAX + 16];
    struct cfg_errors errs;
    json_error_t jerr;
    json_t *root;

    if (file)
        xsnprintf(what, sizeof(what), "config file \"%s\"", file);
    else
        xsnprintf(what, sizeof(what), "configuration");
    root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return error_set(err, ST_INVALID, "could not parse %s: %s (line %d, column %d)", what,
                         jerr.text, jerr.line, jerr.column);
    cfg_errors_init(&errs, err);
    if (!json_is_object(root))
        (void)cfg_errors_addf(&errs, "could not load %s: expected a JSON object", what);
    else
        load_doc(cfg, root, &errs);
    json_decref(root);
    return cfg_errors_end(&errs);
}

enum status cfg_load_json(struct config *cfg, const char *text, struct error *err)
{
    return load_text(cfg, text, strlen(text), NULL, err);
}

/* The whole file, up to CFG_FILE_MAX bytes, as a heap string (free). */
static enum status read_file(const char *path, char **out, size_t *len, struct error *err)
{
    FILE *f = fopen(path, "rb");
    struct dynbuf b;
    char chunk[4096];
    size_t got;
    enum status st = ST_OK;

    if (!f)
        return error_set(err, ST_INVALID, "could not open config file \"%s\": %s", path,
                         strerror(errno));
    dynbuf_init(&b, CFG_FILE_MAX);
    while (st == ST_OK && (got = fread(chunk, 1, sizeof(chunk), f)) > 0)
        st = dynbuf_add(&b, chunk, got);
    if (st == ST_TOO_LARGE)
        st = error_set(err, ST_INVALID, "could not read config file \"%s\": larger than %zu MiB",
                       path, CFG_FILE_MAX >> 20);
    else if (ferror(f))
        st = error_set(err, ST_INVALID, "could not read config file \"%s\": read error", path);
    fclose(f);
    if (st != ST_OK) {
        dynbuf_free(&b);
        return st;
    }
    *len = dynbuf_len(&b);
    *out = dynbuf_take(&b);
    return ST_OK;
}

enum status cfg_load_file(struct config *cfg, const char *path, struct error *err)
{
    char *text = NULL;
    size_t len = 0;
    enum status st = read_file(path, &text, &len, err);

    if (st == ST_OK)
        st = load_text(cfg, text, len, path, err);
    free(text);
    if (st == ST_OK) {
        const struct opt *o = opt_find(cfg_opts, cfg_nopts, "config_path");
        opt_store_str(cfg, o, path);
        cfg->sources[o - cfg_opts] = CFG_SRC_FLAG;
    }
    return st;
}

static enum status set_opt(struct config *cfg, const struct opt *o, const char *value,
                           enum cfg_source src, struct error *err)
{
    char label[KEY_MAX + 2];

    if (o->flags & OPT_NOSET)
        return error_set(err, ST_INVALID, "invalid \"%s\": set by loading the file", o->key);
    opt_label(label, sizeof(label), o, src);
    if (opt_from_text(cfg, o, value, label, err) != ST_OK)
        return ST_INVALID;
    cfg->sources[o - cfg_opts] = src;
    return ST_OK;
}

enum status cfg_set(struct config *cfg, const char *key, const char *value, enum cfg_source src,
                    struct error *err)
{
    const struct opt *o = opt_find(cfg_opts, cfg_nopts, key);

    if (!o)
        return error_set(err, ST_INVALID, "unknown key \"%s\"", key);
    return set_opt(cfg, o, value, src, err);
}

void cfg_mark_source(struct config *cfg, const char *key, enum cfg_source src)
{
    const struct opt *o = opt_find(cfg_opts, cfg_nopts, key);

    assert(o && "cfg_mark_source: unknown key");
    if (o)
        cfg->sources[o - cfg_opts] = src;
}

/* Empty variables count as unset. OPSRUN_CONFIG was loaded by the caller; it
 * is credited here when it names the file that was loaded. */
enum status cfg_load_env(struct config *cfg, const char *(*getenv_fn)(const char *),
                         struct error *err)
{
    struct cfg_errors errs;
    struct error one = {0};

    cfg_errors_init(&errs, err);
    for (size_t i = 0; i < cfg_nopts; i++) {
        const struct opt *o = &cfg_opts[i];
        const char *v = o->env ? getenv_fn(o->env) : NULL;
        if (!v || !*v)
            continue;
        if (o->flags & OPT_NOSET) {
            const char *cur = *(char **)opt_field(cfg, o);
            if (cur && strcmp(cur, v) == 0)
                cfg->sources[i] = CFG_SRC_ENV;
            continue;
        }
        (void)cfg_errors_note(&errs, set_opt(cfg, o, v, CFG_SRC_ENV, &one), &one);
    }
    return cfg_errors_end(&errs);
}

enum status cfg_validate(const struct config *cfg, struct error *err)
{
    struct cfg_errors errs;

    cfg_errors_init(&errs, err);
    if (cfg->queue.orphan_after_s <= cfg->queue.heartbeat_interval_s)
        (void)cfg_errors_addf(&errs,
                              "invalid \"queue.orphan_after_s\": must be greater than "
                              "queue.heartbeat_interval_s (%d)",
                              cfg->queue.heartbeat_interval_s);
    if (cfg->db.tcp_user_timeout_ms != 0 &&
        cfg->db.tcp_user_timeout_ms <= cfg->db.statement_timeout_ms)
        (void)cfg_errors_addf(&errs,
                              "invalid \"db.tcp_user_timeout_ms\": must be greater than "
                              "db.statement_timeout_ms (%d), or a statement that runs its full "
                              "time is taken for a dead connection",
                              cfg->db.statement_timeout_ms);
    if ((int64_t)cfg->sse.heartbeat_ms >= (int64_t)cfg->sse.send_timeout_s * 1000)
        (void)cfg_errors_addf(&errs,
                              "invalid \"sse.heartbeat_ms\": must be less than "
                              "sse.send_timeout_s (%d s), or idle streams are closed",
                              cfg->sse.send_timeout_s);
    check_refs(cfg, &errs);
    check_schedule_refs(cfg, &errs);
    check_notify_refs(cfg, &errs);
    check_conc_refs(cfg, &errs);
    check_wf_refs(cfg, &errs);
    return cfg_errors_end(&errs);
}

/* ---- lookups ---- */

bool cfg_log_json(const struct config *cfg)
{
    bool json = cfg->log_json;

    if (cfg->log_format)
        (void)log_format_parse(cfg->log_format, &json);
    return json;
}

int cfg_pool_size(const struct config *cfg)
{
    if (cfg->db.pool_size > 0)
        return cfg->db.pool_size;
    return cfg->queue.workers + cfg->http.threads + cfg->submit.flushers + 4 +
           (cfg->poller.concurrency + 3) / 4 + (cfg->nnotifiers > 0 ? 1 : 0);
}
