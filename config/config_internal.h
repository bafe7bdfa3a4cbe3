/* config/config_internal.h — what the config/ sources share, for them only.
 *
 * One option table drives every source of a scalar setting: the defaults,
 * the JSON file, the environment, the flags and --print-config. Two tables
 * use it: cfg_opts (config.c, the top level and its sections) and rt_opts
 * (run_types.c, the scalar fields of a run type). option.c holds the
 * machinery every table and loader shares, errors.c every error of a
 * load; each section of the file has a source of its own: run_types.c
 * (with concurrency.c, a run type's "concurrency"), routes.c, auth.c
 * (tokens), cors.c, schedules.c (schedules and rate limits), notify.c
 * (notifiers) and tenants.c; workflows.c checks the steps of workflow
 * types across run types; print.c puts them together for
 * --print-config. Calls go one way, each only to files below it:
 *   config.c, print.c
 *     -> notify.c, schedules.c, routes.c, auth.c, cors.c, tenants.c, workflows.c
 *     -> run_types.c -> concurrency.c -> option.c -> errors.c
 * (workflows.c also calls concurrency.c, for the data of steps.) */
#ifndef OPSRUN_CONFIG_INTERNAL_H
#define OPSRUN_CONFIG_INTERNAL_H

#include "config/config.h"

#include <stddef.h>

/* The largest config file: 4 MiB (docs/configuration.md). */
#define CFG_FILE_MAX ((size_t)4 << 20)
#define KEY_MAX 256
#define NAME_MAX_LEN 64

enum opt_type { OPT_STR, OPT_INT, OPT_I64, OPT_BOOL, OPT_LEVEL };

enum {
    OPT_NULL = 1u << 0,   /* JSON null allowed: a NULL string, or 0 for an integer */
    OPT_ZERO = 1u << 1,   /* 0 is allowed besides [min, max] */
    OPT_NOFILE = 1u << 2, /* not a key of the JSON file */
    OPT_NOSET = 1u << 3,  /* set only by cfg_load_file, never by cfg_set */
    OPT_SECRET = 1u << 4, /* a connection string: passwords masked on output */
    OPT_LIVE = 1u << 5,   /* a reload applies it (config/live.h); others need a restart */
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

/* A number or boolean whose key is its field's name ("queue.workers"). */
#define OPT_NUM(t, f, d, lo, hi, where)                                                            \
    {                                                                                              \
        .key = #f, .type = (t), .def = (d), .min = (lo), .max = (hi), .off = (where)               \
    }

/* The tables: cfg_opts indexes struct config's sources[]. */
extern const struct opt cfg_opts[];
extern const size_t cfg_nopts;
extern const struct opt rt_opts[];
extern const size_t rt_nopts;

/* ---- errors.c: every error of one load ---- */

/* A load goes on past a bad key, so one run names every mistake: each
 * loop over a file's keys adds the error of a key that failed and goes on
 * with the next. The errors go into out->message, one line each, as many
 * as it holds; cfg_errors_end then adds a line saying how many more there
 * were. A definition with an error (a run type, the routes, the tokens) is
 * not applied. */
struct cfg_errors {
    struct error *out; /* may be NULL */
    unsigned n;        /* errors added */
    unsigned dropped;  /* of them, those the message had no room for */
};
struct suggest;

/* Clears out's message. */
void cfg_errors_init(struct cfg_errors *e, struct error *out);
/* Each returns ST_INVALID, or for _note ST_OK when st is ST_OK (one is
 * then not read). */
enum status cfg_errors_addf(struct cfg_errors *e, const char *fmt, ...) PRINTF_LIKE(2, 3);
enum status cfg_errors_add(struct cfg_errors *e, const struct error *one);
enum status cfg_errors_note(struct cfg_errors *e, enum status st, const struct error *one);
/* ST_OK when nothing was added, else ST_INVALID. */
enum status cfg_errors_end(struct cfg_errors *e) WUR;
/* unknown key "path", and "; did you mean ..." when s (the known keys
 * around it) has one near it. */
enum status cfg_unknown_key(struct cfg_errors *e, const char *path, const struct suggest *s);

/* ---- option.c: the machinery of an option table ---- */

/* By JSON path, or by flag name ("workers"), for cfg_set. */
const struct opt *opt_find(const struct opt *tab, size_t n, const char *key);
/* How an error names an option: OPSRUN_WORKERS, --workers, or "queue.workers". */
void opt_label(char *buf, size_t n, const struct opt *o, enum cfg_source src);
void *opt_field(void *base, const struct opt *o);
void opt_store_str(void *base, const struct opt *o, const char *s);
void opt_set_default(void *base, const struct opt *o);
/* Copies the option's value from src to dst (a string is duplicated). */
void opt_copy(void *dst, const void *src, const struct opt *o);
/* Parse, bound-check and store; label names the option in errors. */
enum status opt_from_json(void *base, const struct opt *o, const json_t *v, const char *label,
                          struct error *err) WUR;
/* s is a flag's or variable's text; NULL clears a nullable string. */
enum status opt_from_text(void *base, const struct opt *o, const char *s, const char *label,
                          struct error *err) WUR;
/* Names of run types, tenants and routes: 1 to 64 of [A-Za-z0-9_.-]. */
bool name_valid(const char *s);
enum status name_error(const char *label, struct error *err) WUR;
enum status check_name(const char *label, const char *value, struct error *err) WUR;
/* "json" or "text" (--log-format). */
enum status check_log_format(const char *label, const char *value, struct error *err) WUR;
/* HOST:PORT, where HOST is an IPv4 literal, "localhost" or "[IPv6]". */
enum status check_listen(const char *label, const char *value, struct error *err) WUR;
/* An option's value as the file would have it (new reference). */
json_t *opt_to_json(const void *base, const struct opt *o);
/* An object of named definitions ("run_types", "schedules", "rate_limits"
 * at path what): each name checked, a null definition removed (remove),
 * an object handed to load with its path ("what.name"), anything else an
 * error. */
void load_named(struct config *cfg, const char *what, const json_t *v,
                void (*load)(struct config *cfg, const char *name, const json_t *def,
                             const char *path, struct cfg_errors *errs),
                void (*remove)(struct config *cfg, const char *name), struct cfg_errors *errs);

/* ---- run_types.c ---- */

/* The type named name, or NULL. */
struct run_type *rt_find(const struct config *cfg, const char *name);
/* Appends the built-in "demo" type (the simulate action, default params). */
void rt_add_demo(struct config *cfg);
void rt_free_all(struct config *cfg);
/* The "run_types" object of a file: merged into the types already there. */
void load_run_types(struct config *cfg, const json_t *v, struct cfg_errors *errs);
/* A run type's "notify" (then false) or "then" list, checked, into *slot
 * (which it replaces); errors name path. */
enum status rt_rules(json_t **slot, const json_t *v, bool then, const char *path,
                     struct error *err) WUR;

/* ---- concurrency.c ---- */

/* A run type's "concurrency" (v) into rt->conc, errors naming path: null
 * (none), or an object over the defaults (max_running 1, strategy queue,
 * group the type's name) with a key that compiles; applied only when all
 * of it is valid. */
void conc_apply(struct run_type *rt, const json_t *v, const char *path, struct cfg_errors *errs);
void conc_free(struct concurrency *c);
void conc_copy(struct concurrency *dst, const struct concurrency *src);
/* null, or the object the file would have (the group always named). */
json_t *conc_to_json(const struct concurrency *c);
/* The run types of a group agree on max_running and strategy; the fixed
 * data of each schedule and follow-up whose run type has a key holds every
 * value the key takes. */
void check_conc_refs(const struct config *cfg, struct cfg_errors *errs);
/* The input of a run opsrun makes itself from data (NULL: {}), of type to:
 * when to has a key and data no placeholder, it holds every value the key
 * takes; an error names what (the data's path). The tenant is not known,
 * so the key's length is not checked. */
void conc_check_fixed_data(const struct run_type *to, const json_t *data, const char *what,
                           struct cfg_errors *errs);

/* ---- tenants.c ---- */

/* The "tenants" object of a file: merged by name (an entry replaces the
 * one of that name, only when valid; null removes one). */
void load_tenants(struct config *cfg, const json_t *v, struct cfg_errors *errs);
void tenants_free(struct config *cfg);
/* root["tenants"] as the file has it. */
bool tenants_to_json(const struct config *cfg, json_t *root);

/* ---- auth.c ---- */

/* The "auth.tokens" array of a file: replaces the tokens, and only when
 * all are valid. */
void load_auth_tokens(struct config *cfg, const json_t *v, struct cfg_errors *errs);
void tokens_free(struct auth_token *tokens, size_t n);
/* An auth.tokens entry as --print-config shows it (the file's form). */
json_t *token_to_json(const struct auth_token *t);

/* ---- cors.c ---- */

/* The "http.cors_origins" array of a file: replaces the list, and only when
 * every entry is "*" or an origin. */
enum status load_cors_origins(struct config *cfg, const json_t *v, struct error *err) WUR;
void cors_origins_free(char **origins, size_t n);
/* The list as --print-config shows it (new reference; NULL if jansson fails). */
json_t *cors_origins_to_json(const struct config *cfg);

/* ---- schedules.c ---- */

/* The "schedules" and "rate_limits" objects of a file: merged by name into
 * those already there (a definition replaces the one of that name as a
 * whole, only when valid; null removes one). */
void load_schedules(struct config *cfg, const json_t *v, struct cfg_errors *errs);
void load_rate_limits(struct config *cfg, const json_t *v, struct cfg_errors *errs);
void schedules_free(struct config *cfg);
void rate_limits_free(struct config *cfg);
/* Every schedule names an existing run type, every run type's rate_limit
 * an existing limit. */
void check_schedule_refs(const struct config *cfg, struct cfg_errors *errs);
/* root["schedules"] and root["rate_limits"] as the file has them. */
bool schedules_to_json(const struct config *cfg, json_t *root);

/* ---- notify.c ---- */

/* The "notifiers" object of a file: merged by name (a definition replaces
 * the one of that name as a whole, only when valid; null removes one). */
void load_notifiers(struct config *cfg, const json_t *v, struct cfg_errors *errs);
void notifiers_free(struct config *cfg);
/* Every notify rule names an existing notifier, every then rule an
 * existing run type. */
void check_notify_refs(const struct config *cfg, struct cfg_errors *errs);
/* root["notifiers"] as the file has it (templates, never their values). */
bool notifiers_to_json(const struct config *cfg, json_t *root);
/* An http:// or https:// URL (http.public_url). */
enum status check_http_url(const char *label, const char *value, struct error *err) WUR;

/* ---- workflows.c ---- */

/* Every workflow type (config/workflows.h): its steps' run types exist;
 * workflow types nest in no cycle and no deeper than
 * queue.max_chain_depth; and it sets none of the keys that mean nothing
 * for a workflow (max_attempts, retry_backoff_ms, retry_backoff_max_ms,
 * timeout_s, max_running, poll, rate_limit and concurrency, told by a
 * value other than the default; "retrying" in a notify rule); and a
 * step's data without placeholders holds what its type's concurrency key
 * takes (conc_check_fixed_data). */
void check_wf_refs(const struct config *cfg, struct cfg_errors *errs);

/* ---- routes.c ---- */

/* The "routes" array of a file: replaces the routes, and only when all are
 * valid. file_types is the file's "run_types" (NULL: none): a route may
 * name one of them that failed to load without an error of its own. */
void load_routes(struct config *cfg, const json_t *v, const json_t *file_types,
                 struct cfg_errors *errs);
void routes_free(struct route *routes, size_t n);
/* Every route and default_route names an existing run type. */
void check_refs(const struct config *cfg, struct cfg_errors *errs);

#endif
