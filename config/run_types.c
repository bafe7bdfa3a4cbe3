/* config/run_types.c — run types: the scalar fields through their option
 * table (rt_opts), "action" checked against the action registry given to
 * cfg_init, "params" checked by that action, "poll", "approval",
 * "concurrency" (concurrency.c), and the "notify" and "then" rules (whose
 * names notify.c checks once every notifier and run type is loaded); and
 * the lookups of a run type. */
#include "config/config_internal.h"

#include "common/suggest.h"
#include "common/template.h"

#include <stdlib.h>
#include <string.h>

/* clang-format off */
#define RT_OFF(f) offsetof(struct run_type, f)
#define RT_NUM(t, f, d, lo, hi) OPT_NUM(t, f, d, lo, hi, RT_OFF(f))

/* The scalar fields of a run type; "action" and "params" are handled apart. */
const struct opt rt_opts[] = {
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
    {.key = "rate_limit", .type = OPT_STR, .flags = OPT_NULL, .off = RT_OFF(rate_limit),
     .check = check_name},
};
const size_t rt_nopts = ARRAY_LEN(rt_opts);
/* clang-format on */

static json_t *xjson_object(void)
{
    json_t *o = json_object();
    if (!o)
        abort();
    return o;
}

static void rt_free(struct run_type *rt)
{
    free(rt->name);
    free(rt->action);
    free(rt->rate_limit);
    json_decref(rt->params);
    json_decref(rt->notify);
    json_decref(rt->then);
    conc_free(&rt->conc);
    memset(rt, 0, sizeof(*rt));
}

/* A new type: the defaults, no action yet. */
static void rt_init(struct run_type *rt, const char *name)
{
    memset(rt, 0, sizeof(*rt));
    rt->name = xstrdup(name);
    rt->params = xjson_object();
    rt->notify = json_array();
    rt->then = json_array();
    if (!rt->notify || !rt->then)
        abort();
    for (size_t i = 0; i < rt_nopts; i++)
        opt_set_default(rt, &rt_opts[i]);
}

static void rt_copy(struct run_type *dst, const struct run_type *src)
{
    *dst = *src;
    dst->name = xstrdup(src->name);
    dst->action = src->action ? xstrdup(src->action) : NULL;
    dst->rate_limit = src->rate_limit ? xstrdup(src->rate_limit) : NULL;
    dst->params = json_incref(src->params);
    dst->notify = json_incref(src->notify);
    dst->then = json_incref(src->then);
    conc_copy(&dst->conc, &src->conc);
}

struct run_type *rt_find(const struct config *cfg, const char *name)
{
    for (size_t i = 0; i < cfg->nrun_types; i++)
        if (strcmp(cfg->run_types[i].name, name) == 0)
            return &cfg->run_types[i];
    return NULL;
}

void cfg_run_type_suggest(const struct config *cfg, struct suggest *s)
{
    for (size_t i = 0; i < cfg->nrun_types; i++)
        suggest_add(s, cfg->run_types[i].name);
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

static enum status rt_set_action(const struct cfg_actions *acts, struct run_type *rt,
                                 const json_t *v, const char *path, struct error *err)
{
    if (!json_is_string(v))
        return error_set(err, ST_INVALID, "invalid \"%s\": expected a string", path);
    if (!acts->exists(json_string_value(v)))
        return error_set(err, ST_INVALID, "invalid \"%s\": unknown action \"%s\"", path,
                         json_string_value(v));
    free(rt->action);
    rt->action = xstrdup(json_string_value(v));
    return ST_OK;
}

/* An unknown key of a run type (prefix "", path names it) or of its
 * "poll" (prefix "poll."): the nearest key of the same object. */
static void rt_unknown_key(const char *prefix, const char *key, const char *path,
                           struct cfg_errors *errs)
{
    static const char *const own[] = {"action", "params", "poll",       "approval",
                                      "notify", "then",   "concurrency"};
    size_t plen = strlen(prefix);
    struct suggest s;

    suggest_init(&s, key);
    for (size_t i = 0; !*prefix && i < ARRAY_LEN(own); i++)
        suggest_add(&s, own[i]);
    for (size_t i = 0; i < rt_nopts; i++) {
        const char *k = rt_opts[i].key;
        if (strncmp(k, prefix, plen) == 0 && !strchr(k + plen, '.'))
            suggest_add(&s, k + plen);
    }
    (void)cfg_unknown_key(errs, path, &s);
}

/* "poll": {"initial_delay_ms": ..., ...}, each key an rt_opts "poll.x". */
static void rt_apply_poll(struct run_type *rt, const json_t *poll, const char *path,
                          struct cfg_errors *errs)
{
    const char *key;
    json_t *v;

    if (!json_is_object(poll)) {
        (void)cfg_errors_addf(errs, "invalid \"%s\": expected an object", path);
        return;
    }
    json_object_foreach((json_t *)poll, key, v)
    {
        char name[KEY_MAX], label[KEY_MAX + 2];
        struct error one = {0};
        const struct opt *o;
        xsnprintf(name, sizeof(name), "poll.%s", key);
        xsnprintf(label, sizeof(label), "%s.%s", path, key);
        if (!(o = opt_find(rt_opts, rt_nopts, name))) {
            rt_unknown_key("poll.", key, label, errs);
            continue;
        }
        xsnprintf(label, sizeof(label), "\"%s.%s\"", path, key);
        (void)cfg_errors_note(errs, opt_from_json(rt, o, v, label, &one), &one);
    }
}

#define APPROVAL_TIMEOUT_DEFAULT_S 3600
#define APPROVAL_TIMEOUT_MAX_S 2592000 /* 30 days */

/* One key of "approval" into *a; label names it in errors. */
static enum status rt_approval_key(struct approval_policy *a, const char *key, const json_t *v,
                                   const char *label, struct error *err)
{
    if (strcmp(key, "timeout_s") == 0) {
        if (!json_is_integer(v) || json_integer_value(v) < 1 ||
            json_integer_value(v) > APPROVAL_TIMEOUT_MAX_S)
            return error_set(err, ST_INVALID, "invalid \"%s\": must be an integer from 1 to %d",
                             label, APPROVAL_TIMEOUT_MAX_S);
        a->timeout_s = (int)json_integer_value(v);
        return ST_OK;
    }
    if (!json_is_string(v) || !STR_IN(json_string_value(v), "reject", "approve"))
        return error_set(err, ST_INVALID, "invalid \"%s\": expected \"reject\" or \"approve\"",
                         label);
    a->approve_on_timeout = strcmp(json_string_value(v), "approve") == 0;
    return ST_OK;
}

/* "approval": null (none), or {"timeout_s", "on_timeout"} over the
 * defaults (3600 s, reject), each key checked; applied only when all are
 * valid. */
static void rt_apply_approval(struct run_type *rt, const json_t *v, const char *path,
                              struct cfg_errors *errs)
{
    static const char *const keys[] = {"timeout_s", "on_timeout"};
    struct approval_policy a = {.timeout_s = APPROVAL_TIMEOUT_DEFAULT_S};
    unsigned before = errs->n;
    const char *key;
    json_t *e;

    if (json_is_null(v)) {
        rt->approval = (struct approval_policy){0};
        return;
    }
    if (!json_is_object(v)) {
        (void)cfg_errors_addf(errs, "invalid \"%s\": expected an object or null", path);
        return;
    }
    json_object_foreach((json_t *)v, key, e)
    {
        char label[KEY_MAX];
        struct error one = {0};
        struct suggest s;

        xsnprintf(label, sizeof(label), "%s.%s", path, key);
        if (!STR_IN(key, keys[0], keys[1])) {
            suggest_init(&s, key);
            for (size_t i = 0; i < ARRAY_LEN(keys); i++)
                suggest_add(&s, keys[i]);
            (void)cfg_unknown_key(errs, label, &s);
            continue;
        }
        (void)cfg_errors_note(errs, rt_approval_key(&a, key, e, label, &one), &one);
    }
    if (errs->n == before)
        rt->approval = a;
}

static void rt_apply_key(const struct cfg_actions *acts, struct run_type *rt, const char *key,
                         json_t *v, const char *path, struct cfg_errors *errs)
{
    const struct opt *o;
    char label[KEY_MAX + 2];
    struct error one = {0};

    if (strcmp(key, "action") == 0) {
        (void)cfg_errors_note(errs, rt_set_action(acts, rt, v, path, &one), &one);
    } else if (strcmp(key, "params") == 0) {
        if (!json_is_object(v)) {
            (void)cfg_errors_addf(errs, "invalid \"%s\": expected an object", path);
            return;
        }
        json_decref(rt->params);
        rt->params = json_incref(v);
    } else if (strcmp(key, "poll") == 0) {
        rt_apply_poll(rt, v, path, errs);
    } else if (strcmp(key, "approval") == 0) {
        rt_apply_approval(rt, v, path, errs);
    } else if (strcmp(key, "concurrency") == 0) {
        conc_apply(rt, v, path, errs);
    } else if (strcmp(key, "notify") == 0) {
        (void)cfg_errors_note(errs, rt_rules(&rt->notify, v, false, path, &one), &one);
    } else if (strcmp(key, "then") == 0) {
        (void)cfg_errors_note(errs, rt_rules(&rt->then, v, true, path, &one), &one);
    } else if (!(o = opt_find(rt_opts, rt_nopts, key)) || strchr(key, '.')) {
        rt_unknown_key("", key, path, errs);
    } else {
        xsnprintf(label, sizeof(label), "\"%s\"", path);
        (void)cfg_errors_note(errs, opt_from_json(rt, o, v, label, &one), &one);
    }
}

/* The checks that need the whole type: an action, its params (checked by
 * the action itself), the backoff cap. */
static void rt_check(const struct cfg_actions *acts, const struct run_type *rt, const char *path,
                     struct cfg_errors *errs)
{
    char sub[KEY_MAX];
    struct error one = {0};

    xsnprintf(sub, sizeof(sub), "%s.params", path);
    if (!rt->action)
        (void)cfg_errors_addf(errs, "missing \"%s.action\"", path);
    else
        (void)cfg_errors_note(errs, acts->check_params(rt->action, rt->params, sub, &one), &one);
    if (rt->retry_backoff_max_ms < rt->retry_backoff_ms)
        (void)cfg_errors_addf(errs,
                              "invalid \"%s.retry_backoff_max_ms\": must be at least "
                              "retry_backoff_ms (%lld)",
                              path, (long long)rt->retry_backoff_ms);
    if (rt->poll.max_delay_ms < rt->poll.initial_delay_ms)
        (void)cfg_errors_addf(errs,
                              "invalid \"%s.poll.max_delay_ms\": must be at least "
                              "poll.initial_delay_ms (%lld)",
                              path, (long long)rt->poll.initial_delay_ms);
}

/* A type the file names again is updated field by field; a new one starts
 * from the defaults. Nothing changes unless the whole definition is valid;
 * its whole-type checks run once its keys are valid. */
static void load_run_type(struct config *cfg, const char *name, const json_t *def, const char *path,
                          struct cfg_errors *errs)
{
    struct run_type *old = rt_find(cfg, name), rt;
    unsigned before = errs->n;
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
        rt_apply_key(cfg->actions, &rt, key, v, sub, errs);
    }
    if (errs->n == before)
        rt_check(cfg->actions, &rt, path, errs);
    if (errs->n != before) {
        rt_free(&rt);
        return;
    }
    if (old) {
        rt_free(old);
        *old = rt;
    } else {
        rt_append(cfg, &rt);
    }
}

static void rt_remove_named(struct config *cfg, const char *name)
{
    struct run_type *old = rt_find(cfg, name);

    if (old)
        rt_remove(cfg, old);
}

/* Merged into the types already there; a null definition removes a type. */
void load_run_types(struct config *cfg, const json_t *v, struct cfg_errors *errs)
{
    load_named(cfg, "run_types", v, load_run_type, rt_remove_named, errs);
}

/* The built-in type "demo": the simulate action with default params, which
 * a file may change or remove like any other. */
void rt_add_demo(struct config *cfg)
{
    struct run_type demo;

    rt_init(&demo, "demo");
    demo.action = xstrdup("simulate");
    rt_append(cfg, &demo);
}

void rt_free_all(struct config *cfg)
{
    for (size_t i = 0; i < cfg->nrun_types; i++)
        rt_free(&cfg->run_types[i]);
    free(cfg->run_types);
    cfg->run_types = NULL;
    cfg->nrun_types = 0;
}

#define RULES_MAX 32

/* The transitions "notify" may name; "then" takes only the outcomes and "*". */
static const char *const notify_events[] = {
    "started", "retrying",  "approval_requested", "succeeded", "partially_succeeded",
    "failed",  "cancelled", "timed_out",          "*"};
#define FIRST_OUTCOME 3

/* ---- a run type's "notify" and "then" ---- */

/* "on": a non-empty array of the names events[first..). */
static enum status rule_on(const json_t *on, size_t first, const char *path, struct error *err)
{
    size_t i;
    json_t *x;

    if (!json_is_array(on) || json_array_size(on) == 0)
        return error_set(err, ST_INVALID, "invalid \"%s\": expected a non-empty array", path);
    json_array_foreach(on, i, x)
    {
        bool known = false;
        for (size_t k = first; json_is_string(x) && k < ARRAY_LEN(notify_events); k++)
            known = known || strcmp(json_string_value(x), notify_events[k]) == 0;
        if (known)
            continue;
        if (first == 0)
            return error_set(err, ST_INVALID,
                             "invalid \"%s[%zu]\": expected \"started\", \"retrying\", "
                             "\"approval_requested\", an outcome or \"*\"",
                             path, i);
        return error_set(err, ST_INVALID, "invalid \"%s[%zu]\": expected an outcome or \"*\"", path,
                         i);
    }
    return ST_OK;
}

/* Every key of rule is one of keys[0..n), each of required is there. */
static enum status rule_keys(const json_t *rule, const char *const *keys, size_t n,
                             const char *path, struct error *err)
{
    const char *key;
    json_t *x;

    if (!json_is_object(rule))
        return error_set(err, ST_INVALID, "invalid \"%s\": expected an object", path);
    json_object_foreach((json_t *)rule, key, x)
    {
        bool known = false;
        for (size_t i = 0; i < n; i++)
            known = known || strcmp(key, keys[i]) == 0;
        if (!known)
            return error_set(err, ST_INVALID, "unknown key \"%s.%s\"", path, key);
    }
    for (size_t i = 0; i < 2; i++) /* the first two are required */
        if (!json_object_get(rule, keys[i]))
            return error_set(err, ST_INVALID, "missing \"%s.%s\"", path, keys[i]);
    return ST_OK;
}

static enum status notify_rule(const json_t *rule, const char *path, struct error *err)
{
    static const char *const keys[] = {"on", "to"};
    char sub[KEY_MAX];
    enum status st = rule_keys(rule, keys, ARRAY_LEN(keys), path, err);

    xsnprintf(sub, sizeof(sub), "%s.on", path);
    if (st == ST_OK)
        st = rule_on(json_object_get(rule, "on"), 0, sub, err);
    if (st == ST_OK && !json_is_string(json_object_get(rule, "to")))
        st = error_set(err, ST_INVALID, "invalid \"%s.to\": expected a notifier's name", path);
    return st;
}

static enum status then_rule(const json_t *rule, const char *path, struct error *err)
{
    static const char *const keys[] = {"on", "run_type", "delay_s", "data"};
    const json_t *delay = json_object_get(rule, "delay_s"), *data = json_object_get(rule, "data");
    char sub[KEY_MAX], why[160];
    enum status st = rule_keys(rule, keys, ARRAY_LEN(keys), path, err);

    xsnprintf(sub, sizeof(sub), "%s.on", path);
    if (st == ST_OK)
        st = rule_on(json_object_get(rule, "on"), FIRST_OUTCOME, sub, err);
    if (st == ST_OK && !json_is_string(json_object_get(rule, "run_type")))
        st =
            error_set(err, ST_INVALID, "invalid \"%s.run_type\": expected a run type's name", path);
    if (st == ST_OK && delay &&
        (!json_is_integer(delay) || json_integer_value(delay) < 0 ||
         json_integer_value(delay) > 2592000))
        st = error_set(err, ST_INVALID, "invalid \"%s.delay_s\": must be between 0 and 2592000",
                       path);
    if (st == ST_OK && data && !json_is_object(data))
        st = error_set(err, ST_INVALID, "invalid \"%s.data\": expected an object", path);
    if (st == ST_OK && data && !tmpl_check_json(data, why, sizeof(why)))
        st = error_set(err, ST_INVALID, "invalid \"%s.data\": %s", path, why);
    return st;
}

enum status rt_rules(json_t **slot, const json_t *v, bool then, const char *path, struct error *err)
{
    char sub[KEY_MAX];
    size_t i;
    json_t *rule;

    if (!json_is_array(v))
        return error_set(err, ST_INVALID, "invalid \"%s\": expected an array", path);
    if (json_array_size(v) > RULES_MAX)
        return error_set(err, ST_INVALID, "invalid \"%s\": at most %d entries", path, RULES_MAX);
    json_array_foreach(v, i, rule)
    {
        enum status st;
        xsnprintf(sub, sizeof(sub), "%s[%zu]", path, i);
        st = then ? then_rule(rule, sub, err) : notify_rule(rule, sub, err);
        if (st != ST_OK)
            return st;
    }
    json_decref(*slot);
    *slot = json_incref((json_t *)v);
    return ST_OK;
}

bool cfg_run_type_reacts(const struct run_type *rt)
{
    return json_array_size(rt->notify) > 0 || json_array_size(rt->then) > 0;
}

/* ---- lookups ---- */

const struct run_type *cfg_run_type(const struct config *cfg, const char *name)
{
    return name ? rt_find(cfg, name) : NULL;
}
