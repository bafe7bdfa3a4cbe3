/* config/concurrency.c — a run type's "concurrency": its keys through a
 * small option table, the key template compiled by common/conc_key.c, the
 * strategy; --print-config's view of it; and its checks across the whole
 * configuration: the run types of a group agree on max_running and
 * strategy, and the input of every run opsrun makes itself from fixed data
 * (a schedule's data, a follow-up's data without placeholders) holds each
 * value the key of its run type takes. It calls only option.c and
 * errors.c. */
#include "config/config_internal.h"

#include "common/conc_key.h"
#include "common/suggest.h"

#include <stdlib.h>
#include <string.h>

/* clang-format off */
#define CC_OFF(f) offsetof(struct concurrency, f)

/* The scalar keys of "concurrency"; "strategy" is handled apart. */
static const struct opt cc_opts[] = {
    {.key = "group", .type = OPT_STR, .off = CC_OFF(group), .check = check_name},
    {.key = "key", .type = OPT_STR, .off = CC_OFF(key)},
    OPT_NUM(OPT_INT, max_running, 1, 1, 100000, CC_OFF(max_running)),
};
/* clang-format on */

static const char *const strategy_names[] = {"queue", "cancel_in_progress", "cancel_newest",
                                             "keep_newest"};

const char *cfg_conc_strategy_name(enum conc_strategy s)
{
    return (size_t)s < ARRAY_LEN(strategy_names) ? strategy_names[s] : "";
}

void conc_free(struct concurrency *c)
{
    free(c->group);
    free(c->key);
    json_decref(c->parts);
    memset(c, 0, sizeof(*c));
}

void conc_copy(struct concurrency *dst, const struct concurrency *src)
{
    *dst = *src;
    dst->group = src->group ? xstrdup(src->group) : NULL;
    dst->key = src->key ? xstrdup(src->key) : NULL;
    dst->parts = json_incref(src->parts);
}

static enum status conc_strategy(struct concurrency *c, const json_t *v, const char *path,
                                 struct error *err)
{
    for (size_t i = 0; json_is_string(v) && i < ARRAY_LEN(strategy_names); i++) {
        if (strcmp(json_string_value(v), strategy_names[i]) == 0) {
            c->strategy = (enum conc_strategy)i;
            return ST_OK;
        }
    }
    return error_set(err, ST_INVALID,
                     "invalid \"%s\": expected \"queue\", \"cancel_in_progress\", "
                     "\"cancel_newest\" or \"keep_newest\"",
                     path);
}

/* One key of "concurrency" into *c; path names it in errors. */
static void conc_key(struct concurrency *c, const char *key, const json_t *v, const char *path,
                     struct cfg_errors *errs)
{
    char label[KEY_MAX + 2];
    struct error one = {0};
    const struct opt *o = opt_find(cc_opts, ARRAY_LEN(cc_opts), key);
    struct suggest s;

    if (strcmp(key, "strategy") == 0) {
        (void)cfg_errors_note(errs, conc_strategy(c, v, path, &one), &one);
    } else if (o) {
        xsnprintf(label, sizeof(label), "\"%s\"", path);
        (void)cfg_errors_note(errs, opt_from_json(c, o, v, label, &one), &one);
    } else {
        suggest_init(&s, key);
        suggest_add(&s, "strategy");
        for (size_t i = 0; i < ARRAY_LEN(cc_opts); i++)
            suggest_add(&s, cc_opts[i].key);
        (void)cfg_unknown_key(errs, path, &s);
    }
}

/* The checks of a whole "concurrency": a key that compiles; the group
 * defaults to the type's name. */
static void conc_check(struct concurrency *c, const char *type, const char *path,
                       struct cfg_errors *errs)
{
    struct error one = {0};

    if (!c->key) {
        (void)cfg_errors_addf(errs, "missing \"%s.key\"", path);
        return;
    }
    if (conc_key_compile(c->key, &c->parts, &one) != ST_OK) {
        (void)cfg_errors_addf(errs, "invalid \"%s.key\": %s", path, one.message);
        return;
    }
    if (!c->group)
        c->group = xstrdup(type);
}

void conc_apply(struct run_type *rt, const json_t *v, const char *path, struct cfg_errors *errs)
{
    struct concurrency c = {.on = true, .max_running = 1, .strategy = CONC_QUEUE};
    unsigned before = errs->n;
    char sub[KEY_MAX];
    const char *key;
    json_t *e;

    if (json_is_null(v)) {
        conc_free(&rt->conc);
        return;
    }
    if (!json_is_object(v)) {
        (void)cfg_errors_addf(errs, "invalid \"%s\": expected an object or null", path);
        return;
    }
    json_object_foreach((json_t *)v, key, e)
    {
        xsnprintf(sub, sizeof(sub), "%s.%s", path, key);
        conc_key(&c, key, e, sub, errs);
    }
    if (errs->n == before)
        conc_check(&c, rt->name, path, errs);
    if (errs->n != before) {
        conc_free(&c);
        return;
    }
    conc_free(&rt->conc);
    rt->conc = c;
}

json_t *conc_to_json(const struct concurrency *c)
{
    if (!c->on)
        return json_null();
    return json_pack("{s:s, s:s, s:i, s:s}", "group", c->group, "key", c->key, "max_running",
                     c->max_running, "strategy", cfg_conc_strategy_name(c->strategy));
}

/* ---- across the configuration ---- */

/* A group's keys are shared by its types, so its cap and what happens at
 * a full key must be one: each type that disagrees with the group's first
 * type is named with it. */
static void check_group(const struct run_type *a, const struct run_type *b, struct cfg_errors *errs)
{
    if (a->conc.max_running != b->conc.max_running)
        (void)cfg_errors_addf(errs,
                              "invalid \"run_types.%s.concurrency.max_running\": %d, but run "
                              "type \"%s\" of the same group \"%s\" has %d; the run types of a "
                              "group share its max_running",
                              a->name, a->conc.max_running, b->name, b->conc.group,
                              b->conc.max_running);
    if (a->conc.strategy != b->conc.strategy)
        (void)cfg_errors_addf(errs,
                              "invalid \"run_types.%s.concurrency.strategy\": \"%s\", but run "
                              "type \"%s\" of the same group \"%s\" has \"%s\"; the run types of "
                              "a group share its strategy",
                              a->name, cfg_conc_strategy_name(a->conc.strategy), b->name,
                              b->conc.group, cfg_conc_strategy_name(b->conc.strategy));
}

static void check_groups(const struct config *cfg, struct cfg_errors *errs)
{
    for (size_t i = 0; i < cfg->nrun_types; i++) {
        const struct run_type *a = &cfg->run_types[i];
        for (size_t j = 0; a->conc.on && j < i; j++) {
            const struct run_type *b = &cfg->run_types[j];
            if (b->conc.on && strcmp(a->conc.group, b->conc.group) == 0) {
                check_group(a, b, errs);
                break;
            }
        }
    }
}

static const struct run_type *type_named(const struct config *cfg, const char *name)
{
    for (size_t i = 0; name && i < cfg->nrun_types; i++)
        if (strcmp(cfg->run_types[i].name, name) == 0)
            return &cfg->run_types[i];
    return NULL;
}

/* Each value rt's key takes from the input, over data, which is the input
 * of runs opsrun makes itself: a value missing or one a key cannot hold is
 * an error at what (the data's path), naming the pointer. With a tenant
 * (known), the whole key is made too, for its length. */
static void check_data(const struct run_type *rt, const json_t *data, const char *tenant,
                       const char *what, struct cfg_errors *errs)
{
    unsigned before = errs->n;
    struct error one = {0};
    const json_t *part;
    char *key = NULL;
    size_t i;

    json_array_foreach(rt->conc.parts, i, part)
    {
        json_t *alone;
        if (strcmp(json_string_value(json_array_get(part, 0)), "input") != 0)
            continue;
        alone = json_pack("[O]", part);
        if (!alone || conc_key_eval(alone, "", data, &key, &one) != ST_OK)
            (void)cfg_errors_addf(errs, "invalid \"%s\": run_types.%s.concurrency: %s", what,
                                  rt->name, alone ? one.message : "out of memory");
        free(key);
        key = NULL;
        json_decref(alone);
    }
    if (errs->n == before && tenant &&
        conc_key_eval(rt->conc.parts, tenant, data, &key, &one) != ST_OK)
        (void)cfg_errors_addf(errs, "invalid \"%s\": run_types.%s.concurrency: %s", what, rt->name,
                              one.message);
    free(key);
}

/* Whether a follow-up's data has a placeholder: its input is then made
 * when the run ends, and only the database can tell. */
static bool has_placeholder(const json_t *v)
{
    const char *key;
    json_t *e;
    size_t i;

    if (json_is_string(v))
        return strstr(json_string_value(v), "{{") != NULL;
    if (json_is_array(v)) {
        json_array_foreach(v, i, e)
        {
            if (has_placeholder(e))
                return true;
        }
    }
    if (json_is_object(v)) {
        json_object_foreach((json_t *)v, key, e)
        {
            if (has_placeholder(e))
                return true;
        }
    }
    return false;
}

void conc_check_fixed_data(const struct run_type *to, const json_t *data, const char *what,
                           struct cfg_errors *errs)
{
    json_t *none = NULL;

    if (!to || !to->conc.on || (data && has_placeholder(data)))
        return;
    if (!data)
        data = none = json_object();
    check_data(to, data, NULL, what, errs);
    json_decref(none);
}

/* The follow-ups of rt whose data is fixed (none is {}): their tenant is
 * their parent's, so only the values are checked here, not the length. */
static void check_then(const struct config *cfg, const struct run_type *rt, struct cfg_errors *errs)
{
    char what[KEY_MAX];
    const json_t *rule;
    size_t k;

    json_array_foreach(rt->then, k, rule)
    {
        const struct run_type *to =
            type_named(cfg, json_string_value(json_object_get(rule, "run_type")));
        xsnprintf(what, sizeof(what), "run_types.%s.then[%zu].data", rt->name, k);
        conc_check_fixed_data(to, json_object_get(rule, "data"), what, errs);
    }
}

void check_conc_refs(const struct config *cfg, struct cfg_errors *errs)
{
    char what[KEY_MAX];

    check_groups(cfg, errs);
    for (size_t i = 0; i < cfg->nschedules; i++) {
        const struct schedule *s = &cfg->schedules[i];
        const struct run_type *rt = type_named(cfg, s->run_type);
        if (!rt || !rt->conc.on)
            continue;
        xsnprintf(what, sizeof(what), "schedules.%s.data", s->name);
        check_data(rt, s->data, s->tenant ? s->tenant : cfg->tenant_default, what, errs);
    }
    for (size_t i = 0; i < cfg->nrun_types; i++)
        check_then(cfg, &cfg->run_types[i], errs);
}
