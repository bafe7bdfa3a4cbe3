/* server/cfg.c — the configuration. One option table (cfg_opts) drives the
 * defaults, the JSON file, the environment, the flags and --print-config;
 * a second, smaller table (rt_opts) does the same for the scalar fields of a
 * run type. Run types and routes, which are not scalars, have their own
 * loaders below. Every error names the key, the variable or the flag. */
#include "cfg.h"

#include "engine/actions/actions.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEY_MAX 256
#define NAME_MAX_LEN 64
#define FILE_MAX ((size_t)4 << 20)
#define MASK "****"
#define WS " \t\n\r\f\v"

enum opt_type { OPT_STR, OPT_INT, OPT_I64, OPT_BOOL, OPT_LEVEL };

enum {
    OPT_NULL = 1u << 0,   /* JSON null allowed: a NULL string, or 0 for an integer */
    OPT_ZERO = 1u << 1,   /* 0 is allowed besides [min, max] */
    OPT_NOFILE = 1u << 2, /* not a key of the JSON file */
    OPT_NOSET = 1u << 3,  /* set only by cfg_load_file, never by cfg_set */
    OPT_SECRET = 1u << 4, /* a connection string: passwords masked on output */
};

/* Checks a string value before it is stored; label names it in errors. */
typedef enum status (*opt_check_fn)(const char *label, const char *value, struct error *err);

struct opt {
    const char *key;  /* the JSON path, "queue.workers" */
    const char *env;  /* environment variable, or NULL */
    const char *flag; /* command-line flag without "--", or NULL */
    enum opt_type type;
    unsigned flags;
    const char *def_str; /* OPT_STR default (NULL allowed with OPT_NULL) */
    int64_t def, min, max;
    size_t off; /* offsetof the field in its struct */
    opt_check_fn check;
};

static enum status check_listen(const char *label, const char *value, struct error *err);
static enum status check_name(const char *label, const char *value, struct error *err);

/* clang-format off */
#define CFG_OFF(f) offsetof(struct config, f)
#define RT_OFF(f) offsetof(struct run_type, f)
/* A number or boolean whose key is its field's name ("queue.workers"). */
#define NUM(t, f, d, lo, hi, where) \
    {.key = #f, .type = (t), .def = (d), .min = (lo), .max = (hi), .off = (where)}
#define CFG_NUM(t, f, d, lo, hi) NUM(t, f, d, lo, hi, CFG_OFF(f))
#define RT_NUM(t, f, d, lo, hi) NUM(t, f, d, lo, hi, RT_OFF(f))

/* Bounds are the contract of cfg.h; sources[] is indexed by this table. */
static const struct opt cfg_opts[] = {
    {.key = "listen", .env = "OPSRUN_LISTEN", .flag = "listen", .type = OPT_STR,
     .def_str = "127.0.0.1:8080", .off = CFG_OFF(listen), .check = check_listen},
    {.key = "database_url", .env = "OPSRUN_DATABASE_URL", .flag = "database-url", .type = OPT_STR,
     .flags = OPT_NULL | OPT_SECRET, .off = CFG_OFF(database_url)},
    {.key = "config_path", .env = "OPSRUN_CONFIG", .flag = "config", .type = OPT_STR,
     .flags = OPT_NULL | OPT_NOFILE | OPT_NOSET, .off = CFG_OFF(config_path)},
    {.key = "tenant_default", .type = OPT_STR, .def_str = "default",
     .off = CFG_OFF(tenant_default), .check = check_name},
    {.key = "log.level", .env = "OPSRUN_LOG_LEVEL", .flag = "log-level", .type = OPT_LEVEL,
     .def = LOG_INFO, .off = CFG_OFF(log_level)},
    {.key = "log.json", .type = OPT_BOOL, .def = 0, .off = CFG_OFF(log_json)},
    CFG_NUM(OPT_INT,  http.threads,                 4,       2,    64),
    CFG_NUM(OPT_INT,  http.connection_limit,        10000,   1,    1000000),
    CFG_NUM(OPT_INT,  http.connection_timeout_s,    60,      1,    3600),
    CFG_NUM(OPT_I64,  http.max_body_bytes,          1048576, 1024, 67108864),
    {.key = "db.pool_size", .type = OPT_INT, .flags = OPT_ZERO, .def = 0, .min = 2, .max = 1000,
     .off = CFG_OFF(db.pool_size)},
    CFG_NUM(OPT_INT,  db.pool_wait_ms,              2000,    0,    600000),
    CFG_NUM(OPT_INT,  db.connect_timeout_s,         3,       1,    600),
    CFG_NUM(OPT_INT,  db.statement_timeout_ms,      10000,   1,    3600000),
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
    {.key = "default_route", .type = OPT_STR, .flags = OPT_NULL, .off = CFG_OFF(default_route),
     .check = check_name},
};

/* The scalar fields of a run type; "action" and "params" are handled apart. */
static const struct opt rt_opts[] = {
    RT_NUM(OPT_INT, max_attempts,         3,     1, 100),
    RT_NUM(OPT_I64, retry_backoff_ms,     200,   0, 3600000),
    RT_NUM(OPT_I64, retry_backoff_max_ms, 60000, 0, 86400000),
    RT_NUM(OPT_I64, timeout_s,            900,   1, 604800),
    {.key = "max_running", .type = OPT_INT, .flags = OPT_NULL, .def = 0, .min = 1, .max = 100000,
     .off = RT_OFF(max_running)},
    RT_NUM(OPT_I64, poll.initial_delay_ms, 2000,  1,  3600000),
    RT_NUM(OPT_INT, poll.multiplier,       2,     1,  10),
    RT_NUM(OPT_I64, poll.max_delay_ms,     30000, 1,  86400000),
    RT_NUM(OPT_INT, poll.jitter_pct,       20,    0,  100),
    RT_NUM(OPT_INT, poll.max_checks,       120,   1,  1000000),
    RT_NUM(OPT_I64, poll.max_duration_s,   1740,  1,  2592000),
    RT_NUM(OPT_INT, poll.check_timeout_s,  60,    1,  3600),
};
/* clang-format on */

static enum status sim_check_params(const json_t *params, const char *path, struct error *err);

/* The actions a run type may name, with the check of their params at load
 * (each action module validates its own params: engine/actions/). */
static const struct action_spec {
    const char *name;
    enum status (*check_params)(const json_t *params, const char *path, struct error *err);
} actions[] = {
    {"simulate", sim_check_params},      {"rest_job", action_rest_job_check},
    {"exec", action_exec_check},         {"http", action_http_check},
    {"soap_job", action_soap_job_check},
};

static const char *const level_names[] = {"debug", "info", "warn", "error"};
static const char *const source_names[] = {"default", "file", "env", "flag"};

static json_t *xjson_object(void)
{
    json_t *o = json_object();
    if (!o)
        abort();
    return o;
}

/* ---- the option table: lookup, labels, storing values ---- */

/* By JSON path, or by flag name ("workers"), for cfg_set. */
static const struct opt *opt_find(const struct opt *tab, size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(tab[i].key, key) == 0 || (tab[i].flag && strcmp(tab[i].flag, key) == 0))
            return &tab[i];
    return NULL;
}

/* The option behind a key of the file, by its full path. */
static const struct opt *file_opt(const char *path)
{
    for (size_t i = 0; i < ARRAY_LEN(cfg_opts); i++)
        if (!(cfg_opts[i].flags & OPT_NOFILE) && strcmp(cfg_opts[i].key, path) == 0)
            return &cfg_opts[i];
    return NULL;
}

/* True when some file option lives under "path." (a section such as "queue"). */
static bool is_section(const char *path)
{
    size_t n = strlen(path);
    for (size_t i = 0; i < ARRAY_LEN(cfg_opts); i++)
        if (!(cfg_opts[i].flags & OPT_NOFILE) && strncmp(cfg_opts[i].key, path, n) == 0 &&
            cfg_opts[i].key[n] == '.')
            return true;
    return false;
}

/* How an error names an option: OPSRUN_WORKERS, --workers, or "queue.workers". */
static void opt_label(char *buf, size_t n, const struct opt *o, enum cfg_source src)
{
    if (src == CFG_SRC_ENV && o->env)
        xsnprintf(buf, n, "%s", o->env);
    else if (src == CFG_SRC_FLAG && o->flag)
        xsnprintf(buf, n, "--%s", o->flag);
    else
        xsnprintf(buf, n, "\"%s\"", o->key);
}

static void *opt_field(void *base, const struct opt *o)
{
    return (char *)base + o->off;
}

static void opt_store_int(void *base, const struct opt *o, int64_t v)
{
    if (o->type == OPT_INT)
        *(int *)opt_field(base, o) = (int)v;
    else
        *(int64_t *)opt_field(base, o) = v;
}

static void opt_store_str(void *base, const struct opt *o, const char *s)
{
    char **field = opt_field(base, o);
    free(*field);
    *field = s ? xstrdup(s) : NULL;
}

static void opt_set_default(void *base, const struct opt *o)
{
    switch (o->type) {
    case OPT_STR:
        opt_store_str(base, o, o->def_str);
        break;
    case OPT_INT:
    case OPT_I64:
        opt_store_int(base, o, o->def);
        break;
    case OPT_BOOL:
        *(bool *)opt_field(base, o) = o->def != 0;
        break;
    case OPT_LEVEL:
        *(enum log_level *)opt_field(base, o) = (enum log_level)o->def;
        break;
    }
}

static enum status expected(const char *label, const char *what, struct error *err)
{
    return error_set(err, ST_INVALID, "invalid %s: expected %s", label, what);
}

static enum status opt_put_int(void *base, const struct opt *o, int64_t v, const char *label,
                               struct error *err)
{
    const char *also = (o->flags & OPT_NULL) ? "null or " : (o->flags & OPT_ZERO) ? "0 or " : "";

    if ((v < o->min || v > o->max) && !(v == 0 && (o->flags & OPT_ZERO)))
        return error_set(err, ST_INVALID, "invalid %s: must be %sbetween %lld and %lld", label,
                         also, (long long)o->min, (long long)o->max);
    opt_store_int(base, o, v);
    return ST_OK;
}

static enum status opt_put_str(void *base, const struct opt *o, const char *s, const char *label,
                               struct error *err)
{
    enum status st;

    if (!s && !(o->flags & OPT_NULL))
        return expected(label, "a string", err);
    if (s && o->check && (st = o->check(label, s, err)) != ST_OK)
        return st;
    opt_store_str(base, o, s);
    return ST_OK;
}

static enum status opt_put_level(void *base, const struct opt *o, const char *s, const char *label,
                                 struct error *err)
{
    if (!log_level_parse(s, (enum log_level *)opt_field(base, o)))
        return expected(label, "\"debug\", \"info\", \"warn\" or \"error\"", err);
    return ST_OK;
}

static enum status opt_from_json(void *base, const struct opt *o, const json_t *v,
                                 const char *label, struct error *err)
{
    bool null_ok = json_is_null(v) && (o->flags & OPT_NULL);

    switch (o->type) {
    case OPT_STR:
        if (!null_ok && !json_is_string(v))
            return expected(label, "a string", err);
        return opt_put_str(base, o, json_string_value(v), label, err);
    case OPT_INT:
    case OPT_I64:
        if (null_ok) {
            opt_store_int(base, o, 0);
            return ST_OK;
        }
        if (!json_is_integer(v))
            return expected(label, "an integer", err);
        return opt_put_int(base, o, (int64_t)json_integer_value(v), label, err);
    case OPT_BOOL:
        if (!json_is_boolean(v))
            return expected(label, "a boolean", err);
        *(bool *)opt_field(base, o) = json_is_true(v);
        return ST_OK;
    case OPT_LEVEL:
        if (!json_is_string(v))
            return expected(label, "a string", err);
        return opt_put_level(base, o, json_string_value(v), label, err);
    }
    return ST_INTERNAL;
}

/* Decimal integers only; values past int64 clamp, so the bounds check fails. */
static bool parse_i64(const char *s, int64_t *out)
{
    char *end;
    const char *d = (*s == '-' || *s == '+') ? s + 1 : s;

    if (*d < '0' || *d > '9')
        return false;
    *out = (int64_t)strtoll(s, &end, 10);
    return *end == '\0';
}

static bool parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"true", "1", "yes", "on"};
    static const char *const no[] = {"false", "0", "no", "off"};

    for (size_t i = 0; i < ARRAY_LEN(yes); i++) {
        if (strcmp(s, yes[i]) == 0 || strcmp(s, no[i]) == 0) {
            *out = strcmp(s, yes[i]) == 0;
            return true;
        }
    }
    return false;
}

/* s is a flag's or variable's text; NULL clears a nullable string. */
static enum status opt_from_text(void *base, const struct opt *o, const char *s, const char *label,
                                 struct error *err)
{
    int64_t v;

    if (!s && !(o->flags & OPT_NULL))
        return expected(label, "a value", err);
    if (!s && o->type != OPT_STR) {
        opt_store_int(base, o, 0);
        return ST_OK;
    }
    if (o->type == OPT_STR)
        return opt_put_str(base, o, s, label, err);
    switch (o->type) {
    case OPT_INT:
    case OPT_I64:
        if (!parse_i64(s, &v))
            return expected(label, "an integer", err);
        return opt_put_int(base, o, v, label, err);
    case OPT_BOOL:
        if (!parse_bool(s, (bool *)opt_field(base, o)))
            return expected(label, "true or false", err);
        return ST_OK;
    case OPT_LEVEL:
        return opt_put_level(base, o, s, label, err);
    case OPT_STR:
        break;
    }
    return ST_INTERNAL;
}

/* ---- value checks ---- */

static bool name_valid(const char *s)
{
    size_t n = strlen(s);

    if (n == 0 || n > NAME_MAX_LEN)
        return false;
    for (; *s; s++) {
        char c = *s;
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return false;
    }
    return true;
}

static enum status name_error(const char *label, struct error *err)
{
    return error_set(err, ST_INVALID,
                     "invalid %s: must be 1 to 64 characters of A-Z, a-z, 0-9, \"_\", \".\" "
                     "or \"-\"",
                     label);
}

static enum status check_name(const char *label, const char *value, struct error *err)
{
    return name_valid(value) ? ST_OK : name_error(label, err);
}

static bool port_valid(const char *s)
{
    size_t n = strspn(s, "0123456789");
    long port;

    if (n == 0 || n > 5 || s[n] != '\0')
        return false;
    port = strtol(s, NULL, 10);
    return port >= 1 && port <= 65535;
}

static bool host_valid(const char *host, size_t len, bool bracketed)
{
    char buf[64];
    unsigned char addr[16];

    if (len == 0 || len >= sizeof(buf))
        return false;
    memcpy(buf, host, len);
    buf[len] = '\0';
    if (bracketed)
        return inet_pton(AF_INET6, buf, addr) == 1;
    return strcmp(buf, "localhost") == 0 || inet_pton(AF_INET, buf, addr) == 1;
}

/* HOST:PORT, where HOST is an IPv4 literal, "localhost" or "[IPv6]". */
static enum status check_listen(const char *label, const char *value, struct error *err)
{
    const char *host = value, *colon;
    bool bracketed = value[0] == '[';

    if (bracketed) {
        const char *close = strchr(value, ']');
        colon = close && close[1] == ':' ? close + 1 : NULL;
        host = value + 1;
    } else {
        colon = strrchr(value, ':');
    }
    if (!colon)
        return error_set(err, ST_INVALID, "invalid %s: expected HOST:PORT, got \"%s\"", label,
                         value);
    if (!port_valid(colon + 1))
        return error_set(err, ST_INVALID, "invalid %s: port must be between 1 and 65535", label);
    if (!host_valid(host, (size_t)(colon - host) - (bracketed ? 1u : 0u), bracketed))
        return error_set(err, ST_INVALID,
                         "invalid %s: host must be an IPv4 address, localhost or [IPv6 address]",
                         label);
    return ST_OK;
}

/* ---- the simulate action's parameters ---- */

static void sim_path(char *buf, size_t n, const char *prefix, const char *key)
{
    if (prefix && *prefix)
        xsnprintf(buf, n, "%s.%s", prefix, key);
    else
        xsnprintf(buf, n, "%s", key);
}

static enum status sim_int(const json_t *obj, const char *prefix, const char *key, int64_t max,
                           int64_t *out, struct error *err)
{
    const json_t *v = json_object_get(obj, key);
    char path[KEY_MAX];
    json_int_t i;

    if (!v)
        return ST_OK;
    sim_path(path, sizeof(path), prefix, key);
    if (!json_is_integer(v))
        return error_set(err, ST_INVALID, "invalid \"%s\": expected an integer", path);
    i = json_integer_value(v);
    if (i < 0 || i > max)
        return error_set(err, ST_INVALID, "invalid \"%s\": must be between 0 and %lld", path,
                         (long long)max);
    *out = (int64_t)i;
    return ST_OK;
}

static enum status sim_fail_parse(const json_t *obj, const char *prefix, enum sim_fail *fail,
                                  int *first_n, struct error *err)
{
    static const char *const names[] = {"never", "permanent", "transient"};
    const json_t *v = json_object_get(obj, "fail");
    char path[KEY_MAX], *end;
    const char *s;
    long n;

    if (!v)
        return ST_OK;
    sim_path(path, sizeof(path), prefix, "fail");
    if (!json_is_string(v))
        return error_set(err, ST_INVALID, "invalid \"%s\": expected a string", path);
    s = json_string_value(v);
    for (size_t i = 0; i < ARRAY_LEN(names); i++) {
        if (strcmp(s, names[i]) == 0) {
            *fail = (enum sim_fail)i;
            return ST_OK;
        }
    }
    if (strncmp(s, "first:", 6) != 0 || s[6] < '0' || s[6] > '9')
        return error_set(err, ST_INVALID,
                         "invalid \"%s\": expected \"never\", \"permanent\", \"transient\" or "
                         "\"first:N\"",
                         path);
    n = strtol(s + 6, &end, 10);
    if (*end != '\0')
        return error_set(err, ST_INVALID, "invalid \"%s\": expected \"first:N\" with N an integer",
                         path);
    if (n > 100)
        return error_set(err, ST_INVALID,
                         "invalid \"%s\": N of \"first:N\" must be between 0 and 100", path);
    *fail = SIM_FAIL_FIRST;
    *first_n = (int)n;
    return ST_OK;
}

enum status cfg_sim_params(const json_t *obj, const char *key_prefix, int64_t *duration_ms,
                           int *steps, enum sim_fail *fail, int *fail_first_n, struct error *err)
{
    int64_t d = *duration_ms, s = *steps;
    enum sim_fail f = *fail;
    int n = *fail_first_n;
    enum status st;

    if (!obj)
        return ST_OK;
    if (!json_is_object(obj) && key_prefix && *key_prefix)
        return error_set(err, ST_INVALID, "invalid \"%s\": expected an object", key_prefix);
    if (!json_is_object(obj))
        return error_set(err, ST_INVALID, "invalid parameters: expected an object");
    if ((st = sim_int(obj, key_prefix, "duration_ms", 86400000, &d, err)) != ST_OK ||
        (st = sim_int(obj, key_prefix, "steps", 1000, &s, err)) != ST_OK ||
        (st = sim_fail_parse(obj, key_prefix, &f, &n, err)) != ST_OK)
        return st;
    *duration_ms = d;
    *steps = (int)s;
    *fail = f;
    *fail_first_n = n;
    return ST_OK;
}

/* At load, unlike on a run's input, keys other than the three are mistakes. */
static enum status sim_check_params(const json_t *params, const char *path, struct error *err)
{
    int64_t d = 0;
    int steps = 0, n = 0;
    enum sim_fail f = SIM_FAIL_NEVER;
    const char *key;
    json_t *v;

    json_object_foreach((json_t *)params, key, v)
    {
        if (strcmp(key, "duration_ms") != 0 && strcmp(key, "steps") != 0 &&
            strcmp(key, "fail") != 0)
            return error_set(err, ST_INVALID, "unknown key \"%s.%s\"", path, key);
    }
    return cfg_sim_params(params, path, &d, &steps, &f, &n, err);
}

/* ---- run types ---- */

static const struct action_spec *action_spec_find(const char *name)
{
    for (size_t i = 0; i < ARRAY_LEN(actions); i++)
        if (strcmp(actions[i].name, name) == 0)
            return &actions[i];
    return NULL;
}

static void rt_free(struct run_type *rt)
{
    free(rt->name);
    free(rt->action);
    json_decref(rt->params);
    memset(rt, 0, sizeof(*rt));
}

/* A new type: the defaults, no action yet. */
static void rt_init(struct run_type *rt, const char *name)
{
    memset(rt, 0, sizeof(*rt));
    rt->name = xstrdup(name);
    rt->params = xjson_object();
    for (size_t i = 0; i < ARRAY_LEN(rt_opts); i++)
        opt_set_default(rt, &rt_opts[i]);
}

static void rt_copy(struct run_type *dst, const struct run_type *src)
{
    *dst = *src;
    dst->name = xstrdup(src->name);
    dst->action = src->action ? xstrdup(src->action) : NULL;
    dst->params = json_incref(src->params);
}

static struct run_type *rt_find(const struct config *cfg, const char *name)
{
    for (size_t i = 0; i < cfg->nrun_types; i++)
        if (strcmp(cfg->run_types[i].name, name) == 0)
            return &cfg->run_types[i];
    return NULL;
}

static void rt_append(struct config *cfg, const struct run_type *rt)
{
    cfg->run_types = xrealloc(cfg->run_types, (cfg->nrun_types + 1) * sizeof(*cfg->run_types));
    cfg->run_types[cfg->nrun_types++] = *rt;
}

static void rt_remove(struct config *cfg, struct run_type *rt)
{
    size_t i = (size_t)(rt - cfg->run_types);

    rt_free(rt);
    memmove(rt, rt + 1, (cfg->nrun_types - i - 1) * sizeof(*rt));
    cfg->nrun_types--;
}

static enum status rt_set_action(struct run_type *rt, const json_t *v, const char *path,
                                 struct error *err)
{
    if (!json_is_string(v))
        return error_set(err, ST_INVALID, "invalid \"%s\": expected a string", path);
    if (!action_spec_find(json_string_value(v)))
        return error_set(err, ST_INVALID, "invalid \"%s\": unknown action \"%s\"", path,
                         json_string_value(v));
    free(rt->action);
    rt->action = xstrdup(json_string_value(v));
    return ST_OK;
}

/* "poll": {"initial_delay_ms": ..., ...}, each key an rt_opts "poll.x". */
static enum status rt_apply_poll(struct run_type *rt, const json_t *poll, const char *path,
                                 struct error *err)
{
    const char *key;
    json_t *v;

    if (!json_is_object(poll))
        return error_set(err, ST_INVALID, "invalid \"%s\": expected an object", path);
    json_object_foreach((json_t *)poll, key, v)
    {
        char name[KEY_MAX], label[KEY_MAX + 2];
        const struct opt *o;
        xsnprintf(name, sizeof(name), "poll.%s", key);
        if (!(o = opt_find(rt_opts, ARRAY_LEN(rt_opts), name)))
            return error_set(err, ST_INVALID, "unknown key \"%s.%s\"", path, key);
        xsnprintf(label, sizeof(label), "\"%s.%s\"", path, key);
        if (opt_from_json(rt, o, v, label, err) != ST_OK)
            return ST_INVALID;
    }
    return ST_OK;
}

static enum status rt_apply_key(struct run_type *rt, const char *key, json_t *v, const char *path,
                                struct error *err)
{
    const struct opt *o;
    char label[KEY_MAX + 2];

    if (strcmp(key, "action") == 0)
        return rt_set_action(rt, v, path, err);
    if (strcmp(key, "params") == 0) {
        if (!json_is_object(v))
            return error_set(err, ST_INVALID, "invalid \"%s\": expected an object", path);
        json_decref(rt->params);
        rt->params = json_incref(v);
        return ST_OK;
    }
    if (strcmp(key, "poll") == 0)
        return rt_apply_poll(rt, v, path, err);
    if (!(o = opt_find(rt_opts, ARRAY_LEN(rt_opts), key)) || strchr(key, '.'))
        return error_set(err, ST_INVALID, "unknown key \"%s\"", path);
    xsnprintf(label, sizeof(label), "\"%s\"", path);
    return opt_from_json(rt, o, v, label, err);
}

/* The checks that need the whole type: an action, its params, the backoff cap. */
static enum status rt_check(const struct run_type *rt, const char *path, struct error *err)
{
    const struct action_spec *spec;
    char sub[KEY_MAX];

    if (!rt->action)
        return error_set(err, ST_INVALID, "missing \"%s.action\"", path);
    spec = action_spec_find(rt->action);
    assert(spec); /* rt_set_action took only known actions */
    xsnprintf(sub, sizeof(sub), "%s.params", path);
    if (spec->check_params(rt->params, sub, err) != ST_OK)
        return ST_INVALID;
    if (rt->retry_backoff_max_ms < rt->retry_backoff_ms)
        return error_set(err, ST_INVALID,
                         "invalid \"%s.retry_backoff_max_ms\": must be at least "
                         "retry_backoff_ms (%lld)",
                         path, (long long)rt->retry_backoff_ms);
    if (rt->poll.max_delay_ms < rt->poll.initial_delay_ms)
        return error_set(err, ST_INVALID,
                         "invalid \"%s.poll.max_delay_ms\": must be at least "
                         "poll.initial_delay_ms (%lld)",
                         path, (long long)rt->poll.initial_delay_ms);
    return ST_OK;
}

/* A type the file names again is updated field by field; a new one starts
 * from the defaults. Nothing changes unless the whole definition is valid. */
static enum status load_run_type(struct config *cfg, const char *name, const json_t *def,
                                 const char *path, struct error *err)
{
    struct run_type *old = rt_find(cfg, name), rt;
    enum status st = ST_OK;
    char sub[KEY_MAX];
    const char *key;
    json_t *v;

    if (old)
        rt_copy(&rt, old);
    else
        rt_init(&rt, name);
    json_object_foreach((json_t *)def, key, v)
    {
        xsnprintf(sub, sizeof(sub), "%s.%s", path, key);
        if ((st = rt_apply_key(&rt, key, v, sub, err)) != ST_OK)
            break;
    }
    if (st == ST_OK)
        st = rt_check(&rt, path, err);
    if (st != ST_OK) {
        rt_free(&rt);
        return st;
    }
    if (old) {
        rt_free(old);
        *old = rt;
    } else {
        rt_append(cfg, &rt);
    }
    return ST_OK;
}

/* Merged into the types already there; a null definition removes a type. */
static enum status load_run_types(struct config *cfg, const json_t *v, struct error *err)
{
    char path[KEY_MAX + NAME_MAX_LEN];
    const char *name;
    json_t *def;
    enum status st;

    if (!json_is_object(v))
        return error_set(err, ST_INVALID, "invalid \"run_types\": expected an object");
    json_object_foreach((json_t *)v, name, def)
    {
        xsnprintf(path, sizeof(path), "run_types.%s", name);
        if (!name_valid(name)) {
            char label[sizeof(path) + 2];
            xsnprintf(label, sizeof(label), "\"%s\"", path);
            return name_error(label, err);
        }
        if (json_is_null(def)) {
            struct run_type *old = rt_find(cfg, name);
            if (old)
                rt_remove(cfg, old);
            continue;
        }
        if (!json_is_object(def))
            return error_set(err, ST_INVALID, "invalid \"%s\": expected an object", path);
        if ((st = load_run_type(cfg, name, def, path, err)) != ST_OK)
            return st;
    }
    return ST_OK;
}

/* ---- routes ---- */

static void route_free(struct route *r)
{
    for (size_t i = 0; i < r->nmatches; i++) {
        free(r->matches[i].key);
        free(r->matches[i].value);
        if (r->matches[i].is_regex)
            regfree(&r->matches[i].re);
    }
    free(r->matches);
    free(r->run_type);
    memset(r, 0, sizeof(*r));
}

static void routes_free(struct route *routes, size_t n)
{
    for (size_t i = 0; i < n; i++)
        route_free(&routes[i]);
    free(routes);
}

static enum status check_route_type(const struct config *cfg, size_t i, const char *name,
                                    struct error *err)
{
    if (!rt_find(cfg, name))
        return error_set(err, ST_INVALID,
                         "invalid \"routes[%zu].run_type\": unknown run type \"%s\"", i, name);
    return ST_OK;
}

/* "~src" is a POSIX extended regex that must match the whole value. */
static enum status match_compile(struct route_match *m, const char *path, struct error *err)
{
    char *src = xasprintf("^(%s)$", m->value);
    int rc = regcomp(&m->re, src, REG_EXTENDED | REG_NOSUB);
    char msg[256];

    free(src);
    if (rc != 0) {
        regerror(rc, &m->re, msg, sizeof(msg));
        return error_set(err, ST_INVALID, "invalid \"%s\": bad regular expression: %s", path, msg);
    }
    m->is_regex = true;
    return ST_OK;
}

static enum status load_matches(struct route *r, const json_t *v, const char *path,
                                struct error *err)
{
    char sub[KEY_MAX];
    const char *key, *s;
    json_t *val;

    if (!json_is_object(v))
        return error_set(err, ST_INVALID, "invalid \"%s\": expected an object", path);
    r->matches = xcalloc(json_object_size(v), sizeof(*r->matches));
    json_object_foreach((json_t *)v, key, val)
    {
        struct route_match *m = &r->matches[r->nmatches];
        xsnprintf(sub, sizeof(sub), "%s.%s", path, key);
        if (!json_is_string(val))
            return error_set(err, ST_INVALID, "invalid \"%s\": expected a string", sub);
        s = json_string_value(val);
        m->key = xstrdup(key);
        m->value = xstrdup(s[0] == '~' ? s + 1 : s);
        r->nmatches++;
        if (s[0] == '~' && match_compile(m, sub, err) != ST_OK)
            return ST_INVALID;
    }
    return ST_OK;
}

static enum status route_apply_key(struct route *r, const char *key, const json_t *v,
                                   const char *path, struct error *err)
{
    const char *s;

    if (strcmp(key, "match") == 0)
        return load_matches(r, v, path, err);
    if (strcmp(key, "run_type") != 0 && strcmp(key, "on_resolved") != 0)
        return error_set(err, ST_INVALID, "unknown key \"%s\"", path);
    if (!json_is_string(v))
        return error_set(err, ST_INVALID, "invalid \"%s\": expected a string", path);
    s = json_string_value(v);
    if (strcmp(key, "run_type") == 0) {
        r->run_type = xstrdup(s);
        return ST_OK;
    }
    if (strcmp(s, "ignore") != 0 && strcmp(s, "cancel") != 0)
        return error_set(err, ST_INVALID, "invalid \"%s\": expected \"ignore\" or \"cancel\"",
                         path);
    r->on_resolved_cancel = strcmp(s, "cancel") == 0;
    return ST_OK;
}

static enum status load_route(const struct config *cfg, struct route *r, size_t i, const json_t *v,
                              struct error *err)
{
    char path[32], sub[KEY_MAX];
    const char *key;
    json_t *val;
    enum status st;

    xsnprintf(path, sizeof(path), "routes[%zu]", i);
    if (!json_is_object(v))
        return error_set(err, ST_INVALID, "invalid \"%s\": expected an object", path);
    json_object_foreach((json_t *)v, key, val)
    {
        xsnprintf(sub, sizeof(sub), "%s.%s", path, key);
        if ((st = route_apply_key(r, key, val, sub, err)) != ST_OK)
            return st;
    }
    if (!r->run_type)
        return error_set(err, ST_INVALID, "missing \"%s.run_type\"", path);
    return check_route_type(cfg, i, r->run_type, err);
}

/* The file's routes replace any earlier ones, and only when all are valid. */
static enum status load_routes(struct config *cfg, const json_t *v, struct error *err)
{
    struct route *routes;
    size_t n;
    enum status st = ST_OK;

    if (!json_is_array(v))
        return error_set(err, ST_INVALID, "invalid \"routes\": expected an array");
    n = json_array_size(v);
    routes = xcalloc(n, sizeof(*routes));
    for (size_t i = 0; i < n && st == ST_OK; i++)
        st = load_route(cfg, &routes[i], i, json_array_get(v, i), err);
    if (st != ST_OK) {
        routes_free(routes, n);
        return st;
    }
    routes_free(cfg->routes, cfg->nroutes);
    cfg->routes = routes;
    cfg->nroutes = n;
    return ST_OK;
}

/* Names of run types, checked once every source has had its say. */
static enum status check_refs(const struct config *cfg, struct error *err)
{
    for (size_t i = 0; i < cfg->nroutes; i++)
        if (check_route_type(cfg, i, cfg->routes[i].run_type, err) != ST_OK)
            return ST_INVALID;
    if (cfg->default_route && !rt_find(cfg, cfg->default_route))
        return error_set(err, ST_INVALID, "invalid \"default_route\": unknown run type \"%s\"",
                         cfg->default_route);
    return ST_OK;
}

/* ---- life cycle ---- */

void cfg_init(struct config *cfg)
{
    struct run_type demo;

    memset(cfg, 0, sizeof(*cfg));
    cfg->sources = xcalloc(ARRAY_LEN(cfg_opts), sizeof(*cfg->sources));
    for (size_t i = 0; i < ARRAY_LEN(cfg_opts); i++)
        opt_set_default(cfg, &cfg_opts[i]);
    rt_init(&demo, "demo");
    demo.action = xstrdup("simulate");
    rt_append(cfg, &demo);
}

void cfg_cleanup(struct config *cfg)
{
    for (size_t i = 0; i < ARRAY_LEN(cfg_opts); i++)
        if (cfg_opts[i].type == OPT_STR)
            opt_store_str(cfg, &cfg_opts[i], NULL);
    for (size_t i = 0; i < cfg->nrun_types; i++)
        rt_free(&cfg->run_types[i]);
    free(cfg->run_types);
    routes_free(cfg->routes, cfg->nroutes);
    free(cfg->sources);
    memset(cfg, 0, sizeof(*cfg));
}

/* ---- sources: the file, the environment, flags ---- */

static enum status load_value(struct config *cfg, const char *parent, const char *key,
                              const json_t *v, struct error *err);

static enum status load_section(struct config *cfg, const char *path, const json_t *v,
                                struct error *err)
{
    const char *key;
    json_t *child;
    enum status st;

    if (!json_is_object(v))
        return error_set(err, ST_INVALID, "invalid \"%s\": expected an object", path);
    json_object_foreach((json_t *)v, key, child)
    {
        if ((st = load_value(cfg, path, key, child, err)) != ST_OK)
            return st;
    }
    return ST_OK;
}

static enum status load_value(struct config *cfg, const char *parent, const char *key,
                              const json_t *v, struct error *err)
{
    char path[KEY_MAX], label[KEY_MAX + 2];
    bool dotted = strchr(key, '.') != NULL; /* "queue.workers" is no key of the top level */
    const struct opt *o;

    if (parent)
        xsnprintf(path, sizeof(path), "%s.%s", parent, key);
    else
        xsnprintf(path, sizeof(path), "%s", key);
    if (!dotted && (o = file_opt(path)) != NULL) {
        xsnprintf(label, sizeof(label), "\"%s\"", path);
        if (opt_from_json(cfg, o, v, label, err) != ST_OK)
            return ST_INVALID;
        cfg->sources[o - cfg_opts] = CFG_SRC_FILE;
        return ST_OK;
    }
    if (!dotted && is_section(path))
        return load_section(cfg, path, v, err);
    return error_set(err, ST_INVALID, "unknown key \"%s\"", path);
}

/* Routes go last, so they may name types defined further down the file. */
static enum status load_doc(struct config *cfg, const json_t *root, struct error *err)
{
    const char *key;
    json_t *v;
    enum status st;

    json_object_foreach((json_t *)root, key, v)
    {
        if (strcmp(key, "routes") == 0)
            continue;
        if (strcmp(key, "run_types") == 0)
            st = load_run_types(cfg, v, err);
        else
            st = load_value(cfg, NULL, key, v, err);
        if (st != ST_OK)
            return st;
    }
    v = json_object_get(root, "routes");
    if (v && (st = load_routes(cfg, v, err)) != ST_OK)
        return st;
    return check_refs(cfg, err);
}

static enum status load_text(struct config *cfg, const char *text, size_t len, const char *file,
                             struct error *err)
{
    char what[KEY_MAX + 16];
    json_error_t jerr;
    json_t *root;
    enum status st;

    if (file)
        xsnprintf(what, sizeof(what), "config file \"%s\"", file);
    else
        xsnprintf(what, sizeof(what), "configuration");
    root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return error_set(err, ST_INVALID, "could not parse %s: %s (line %d, column %d)", what,
                         jerr.text, jerr.line, jerr.column);
    if (!json_is_object(root))
        st = error_set(err, ST_INVALID, "could not load %s: expected a JSON object", what);
    else
        st = load_doc(cfg, root, err);
    json_decref(root);
    return st;
}

enum status cfg_load_json(struct config *cfg, const char *text, struct error *err)
{
    return load_text(cfg, text, strlen(text), NULL, err);
}

/* The whole file, up to FILE_MAX bytes, in a heap buffer (free). */
static enum status read_file(const char *path, char **out, size_t *len, struct error *err)
{
    FILE *f = fopen(path, "rb");
    size_t cap = 4096, n = 0, got;
    char *buf;

    if (!f)
        return error_set(err, ST_INVALID, "could not open config file \"%s\": %s", path,
                         strerror(errno));
    buf = xmalloc(cap);
    while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n > FILE_MAX)
            break;
        if (n == cap) {
            cap *= 2;
            buf = xrealloc(buf, cap);
        }
    }
    if (ferror(f) || n > FILE_MAX) {
        bool big = n > FILE_MAX;
        fclose(f);
        free(buf);
        return error_set(err, ST_INVALID, "could not read config file \"%s\": %s", path,
                         big ? "larger than 4 MiB" : "read error");
    }
    fclose(f);
    *out = buf;
    *len = n;
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
        const struct opt *o = opt_find(cfg_opts, ARRAY_LEN(cfg_opts), "config_path");
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
    const struct opt *o = opt_find(cfg_opts, ARRAY_LEN(cfg_opts), key);

    if (!o)
        return error_set(err, ST_INVALID, "unknown key \"%s\"", key);
    return set_opt(cfg, o, value, src, err);
}

void cfg_mark_source(struct config *cfg, const char *key, enum cfg_source src)
{
    const struct opt *o = opt_find(cfg_opts, ARRAY_LEN(cfg_opts), key);

    assert(o && "cfg_mark_source: unknown key");
    if (o)
        cfg->sources[o - cfg_opts] = src;
}

/* Empty variables count as unset. OPSRUN_CONFIG was loaded by the caller; it
 * is credited here when it names the file that was loaded. */
enum status cfg_load_env(struct config *cfg, const char *(*getenv_fn)(const char *),
                         struct error *err)
{
    for (size_t i = 0; i < ARRAY_LEN(cfg_opts); i++) {
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
        if (set_opt(cfg, o, v, CFG_SRC_ENV, err) != ST_OK)
            return ST_INVALID;
    }
    return ST_OK;
}

enum status cfg_validate(const struct config *cfg, struct error *err)
{
    if (cfg->queue.orphan_after_s <= cfg->queue.heartbeat_interval_s)
        return error_set(err, ST_INVALID,
                         "invalid \"queue.orphan_after_s\": must be greater than "
                         "queue.heartbeat_interval_s (%d)",
                         cfg->queue.heartbeat_interval_s);
    if ((int64_t)cfg->sse.heartbeat_ms >= (int64_t)cfg->sse.send_timeout_s * 1000)
        return error_set(err, ST_INVALID,
                         "invalid \"sse.heartbeat_ms\": must be less than sse.send_timeout_s "
                         "(%d s), or idle streams are closed",
                         cfg->sse.send_timeout_s);
    return check_refs(cfg, err);
}

/* ---- lookups ---- */

const struct run_type *cfg_run_type(const struct config *cfg, const char *name)
{
    return name ? rt_find(cfg, name) : NULL;
}

int cfg_pool_size(const struct config *cfg)
{
    if (cfg->db.pool_size > 0)
        return cfg->db.pool_size;
    return cfg->queue.workers + cfg->http.threads + 4 + (cfg->poller.concurrency + 3) / 4;
}

static bool route_matches(const struct route *r, const char *alert_type, const json_t *labels)
{
    for (size_t i = 0; i < r->nmatches; i++) {
        const struct route_match *m = &r->matches[i];
        const char *s = strcmp(m->key, "alert_type") == 0
                            ? alert_type
                            : json_string_value(json_object_get(labels, m->key));
        if (!s)
            return false;
        if (m->is_regex ? regexec(&m->re, s, 0, NULL, 0) != 0 : strcmp(s, m->value) != 0)
            return false;
    }
    return true;
}

const struct run_type *cfg_route(const struct config *cfg, const char *alert_type,
                                 const json_t *labels, const struct route **route_out)
{
    const struct run_type *rt;

    if (route_out)
        *route_out = NULL;
    for (size_t i = 0; i < cfg->nroutes; i++) {
        if (route_matches(&cfg->routes[i], alert_type, labels)) {
            if (route_out)
                *route_out = &cfg->routes[i];
            return cfg_run_type(cfg, cfg->routes[i].run_type);
        }
    }
    if ((rt = cfg_run_type(cfg, alert_type)) != NULL)
        return rt;
    return cfg_run_type(cfg, cfg->default_route);
}

/* ---- output ---- */

struct sbuf {
    char *p;
    size_t len, cap;
};

static void sb_putn(struct sbuf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        b->cap = (b->len + n + 1) * 2;
        b->p = xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_puts(struct sbuf *b, const char *s)
{
    sb_putn(b, s, strlen(s));
}

static bool secret_key(const char *k, size_t n)
{
    return (n == 8 && memcmp(k, "password", 8) == 0) ||
           (n == 11 && memcmp(k, "sslpassword", 11) == 0);
}

/* URI query parameters: "a=b&password=c". */
static void mask_query(struct sbuf *b, const char *q)
{
    while (*q) {
        size_t n = strcspn(q, "&");
        const char *eq = memchr(q, '=', n);
        if (eq && secret_key(q, (size_t)(eq - q))) {
            sb_putn(b, q, (size_t)(eq + 1 - q));
            sb_puts(b, MASK);
        } else {
            sb_putn(b, q, n);
        }
        q += n;
        if (*q == '&')
            sb_putn(b, q++, 1);
    }
}

/* postgresql://user:secret@host/db?password=secret. The user info ends at the
 * first '@' before any '/', as libpq reads it. */
static void mask_uri(struct sbuf *b, const char *url)
{
    const char *auth = strstr(url, "://") + 3;
    const char *at = auth + strcspn(auth, "@/");
    const char *colon = *at == '@' ? memchr(auth, ':', (size_t)(at - auth)) : NULL;
    const char *rest = url, *q;

    if (colon) {
        sb_putn(b, url, (size_t)(colon + 1 - url));
        sb_puts(b, MASK);
        rest = at;
    }
    q = strchr(rest, '?');
    if (!q) {
        sb_puts(b, rest);
        return;
    }
    sb_putn(b, rest, (size_t)(q + 1 - rest));
    mask_query(b, q + 1);
}

/* Length of a key=value value: up to white space, or a quoted '...' with
 * backslash escapes. */
static size_t kv_value_len(const char *s)
{
    size_t i = 1;

    if (*s != '\'')
        return strcspn(s, WS);
    while (s[i] && s[i] != '\'')
        i += (s[i] == '\\' && s[i + 1]) ? 2 : 1;
    return s[i] == '\'' ? i + 1 : i;
}

/* "host=h password='x y' dbname=d". */
static void mask_kv(struct sbuf *b, const char *s)
{
    while (*s) {
        size_t n = strspn(s, WS), klen;
        const char *key;
        sb_putn(b, s, n);
        s += n;
        key = s;
        klen = strcspn(s, "=" WS);
        sb_putn(b, s, klen);
        s += klen;
        n = strspn(s, WS);
        sb_putn(b, s, n);
        s += n;
        if (*s != '=')
            continue;
        n = 1 + strspn(s + 1, WS);
        sb_putn(b, s, n);
        s += n;
        n = kv_value_len(s);
        if (secret_key(key, klen))
            sb_puts(b, MASK);
        else
            sb_putn(b, s, n);
        s += n;
    }
}

static char *mask_dburl(const char *url)
{
    struct sbuf b = {0};

    sb_puts(&b, "");
    if (strncmp(url, "postgresql://", 13) == 0 || strncmp(url, "postgres://", 11) == 0)
        mask_uri(&b, url);
    else
        mask_kv(&b, url);
    return b.p;
}

/* Strings from the environment need not be UTF-8; they show as null. */
static json_t *jstr(const char *s)
{
    json_t *j = s ? json_string(s) : NULL;
    return j ? j : json_null();
}

static json_t *opt_to_json(const void *base, const struct opt *o)
{
    const void *f = (const char *)base + o->off;
    const char *s;

    switch (o->type) {
    case OPT_STR:
        s = *(char *const *)f;
        if (s && (o->flags & OPT_SECRET)) {
            char *masked = mask_dburl(s);
            json_t *j = jstr(masked);
            free(masked);
            return j;
        }
        return jstr(s);
    case OPT_INT:
        if ((o->flags & OPT_NULL) && *(const int *)f == 0)
            return json_null();
        return json_integer(*(const int *)f);
    case OPT_I64:
        return json_integer(*(const int64_t *)f);
    case OPT_BOOL:
        return json_boolean(*(const bool *)f);
    case OPT_LEVEL:
        return json_string(level_names[*(const enum log_level *)f]);
    }
    return NULL;
}

/* Sets "a.b" as root["a"]["b"]; steals v. */
static bool jset_path(json_t *root, const char *key, json_t *v)
{
    const char *dot = strchr(key, '.');
    char sect[32];
    json_t *obj;

    if (!dot)
        return json_object_set_new(root, key, v) == 0;
    xsnprintf(sect, sizeof(sect), "%.*s", (int)(dot - key), key);
    obj = json_object_get(root, sect);
    if (!obj) {
        obj = json_object();
        if (json_object_set_new(root, sect, obj) != 0) {
            json_decref(v);
            return false;
        }
    }
    return json_object_set_new(obj, dot + 1, v) == 0;
}

static json_t *rt_to_json(const struct run_type *rt)
{
    json_t *j = json_pack("{s:s, s:O}", "action", rt->action, "params", rt->params);
    bool ok = j != NULL;

    for (size_t i = 0; ok && i < ARRAY_LEN(rt_opts); i++)
        ok = jset_path(j, rt_opts[i].key, opt_to_json(rt, &rt_opts[i]));
    if (!ok) {
        json_decref(j);
        return NULL;
    }
    return j;
}

static json_t *route_to_json(const struct route *r)
{
    json_t *match = json_object();
    bool ok = match != NULL;

    for (size_t i = 0; ok && i < r->nmatches; i++) {
        const struct route_match *m = &r->matches[i];
        char *v = xasprintf("%s%s", m->is_regex ? "~" : "", m->value);
        ok = json_object_set_new(match, m->key, jstr(v)) == 0;
        free(v);
    }
    if (!ok) {
        json_decref(match);
        return NULL;
    }
    return json_pack("{s:o, s:s, s:s}", "match", match, "run_type", r->run_type, "on_resolved",
                     r->on_resolved_cancel ? "cancel" : "ignore");
}

static bool types_and_routes_to_json(const struct config *cfg, json_t *root)
{
    json_t *types = json_object(), *routes;
    bool ok;

    if (json_object_set_new(root, "run_types", types) != 0)
        return false;
    routes = json_array();
    ok = json_object_set_new(root, "routes", routes) == 0;
    for (size_t i = 0; ok && i < cfg->nrun_types; i++) {
        const struct run_type *rt = &cfg->run_types[i];
        ok = json_object_set_new(types, rt->name, rt_to_json(rt)) == 0;
    }
    for (size_t i = 0; ok && i < cfg->nroutes; i++)
        ok = json_array_append_new(routes, route_to_json(&cfg->routes[i])) == 0;
    return ok;
}

json_t *cfg_to_json(const struct config *cfg)
{
    json_t *root = json_object(), *sources = json_object();
    bool ok = root && sources;

    for (size_t i = 0; ok && i < ARRAY_LEN(cfg_opts); i++) {
        ok = jset_path(root, cfg_opts[i].key, opt_to_json(cfg, &cfg_opts[i])) &&
             json_object_set_new(sources, cfg_opts[i].key,
                                 json_string(source_names[cfg->sources[i]])) == 0;
    }
    ok = ok && types_and_routes_to_json(cfg, root);
    if (!ok) {
        json_decref(sources);
        json_decref(root);
        return NULL;
    }
    if (json_object_set_new(root, "sources", sources) != 0) {
        json_decref(root);
        return NULL;
    }
    return root;
}
