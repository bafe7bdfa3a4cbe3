/* config/schedules.c — "schedules" (periodic runs: the cron expression
 * parsed, the time zone loaded from the machine's tz database at load) and
 * "rate_limits" (shared limits that run types name), their checks against
 * the run types, --print-config's view of them, and their lookups. */
#include "config/config_internal.h"

#include "common/suggest.h"
#include "common/tz.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* clang-format off */
#define SC_OFF(f) offsetof(struct schedule, f)
#define RL_OFF(f) offsetof(struct rate_limit_cfg, f)

/* The scalar fields of a schedule; "data", "overlap" and "catch_up" are
 * handled apart. */
static const struct opt sc_opts[] = {
    {.key = "cron", .type = OPT_STR, .flags = OPT_NULL, .off = SC_OFF(cron_text)},
    {.key = "time_zone", .type = OPT_STR, .def_str = "UTC", .off = SC_OFF(time_zone)},
    {.key = "run_type", .type = OPT_STR, .flags = OPT_NULL, .off = SC_OFF(run_type),
     .check = check_name},
    {.key = "tenant", .type = OPT_STR, .flags = OPT_NULL, .off = SC_OFF(tenant),
     .check = check_name},
    OPT_NUM(OPT_INT,  catch_up_window_s, 3600, 1, 2592000, SC_OFF(catch_up_window_s)),
    OPT_NUM(OPT_INT,  jitter_s,          0,    0, 86400,   SC_OFF(jitter_s)),
    OPT_NUM(OPT_BOOL, paused,            0,    0, 0,       SC_OFF(paused)),
};
static const struct opt rl_opts[] = {
    OPT_NUM(OPT_INT, limit, 0, 1, 1000000, RL_OFF(limit)),
    OPT_NUM(OPT_INT, per_s, 0, 1, 86400,   RL_OFF(per_s)),
};
/* clang-format on */

static const char *const overlap_names[] = {"skip", "allow", "cancel_previous"};
static const char *const catch_up_names[] = {"skip", "one", "all"};

const char *cfg_overlap_name(enum schedule_overlap o)
{
    return overlap_names[o];
}

const char *cfg_catch_up_name(enum schedule_catch_up c)
{
    return catch_up_names[c];
}

/* ---- schedules ---- */

static void sc_free(struct schedule *s)
{
    for (size_t i = 0; i < ARRAY_LEN(sc_opts); i++)
        if (sc_opts[i].type == OPT_STR)
            opt_store_str(s, &sc_opts[i], NULL);
    free(s->name);
    json_decref(s->data);
    tz_free(s->tz);
    memset(s, 0, sizeof(*s));
}

void schedules_free(struct config *cfg)
{
    for (size_t i = 0; i < cfg->nschedules; i++)
        sc_free(&cfg->schedules[i]);
    free(cfg->schedules);
    cfg->schedules = NULL;
    cfg->nschedules = 0;
}

/* One of names[0..n) for the string v, into *out. */
static enum status sc_enum(const json_t *v, const char *const *names, size_t n, int *out,
                           const char *path, struct error *err)
{
    for (size_t i = 0; json_is_string(v) && i < n; i++) {
        if (strcmp(json_string_value(v), names[i]) == 0) {
            *out = (int)i;
            return ST_OK;
        }
    }
    return error_set(err, ST_INVALID, "invalid \"%s\": expected one of \"%s\", \"%s\", \"%s\"",
                     path, names[0], names[1], names[2]);
}

static void sc_unknown_key(const char *key, const char *path, struct cfg_errors *errs)
{
    static const char *const own[] = {"data", "overlap", "catch_up"};
    struct suggest s;

    suggest_init(&s, key);
    for (size_t i = 0; i < ARRAY_LEN(own); i++)
        suggest_add(&s, own[i]);
    for (size_t i = 0; i < ARRAY_LEN(sc_opts); i++)
        suggest_add(&s, sc_opts[i].key);
    (void)cfg_unknown_key(errs, path, &s);
}

static void sc_apply_key(struct schedule *s, const char *key, const json_t *v, const char *path,
                         struct cfg_errors *errs)
{
    char label[KEY_MAX + 2];
    struct error one = {0};
    const struct opt *o;
    int e = 0;

    if (strcmp(key, "data") == 0) {
        if (!json_is_object(v)) {
            (void)cfg_errors_addf(errs, "invalid \"%s\": expected an object", path);
            return;
        }
        json_decref(s->data);
        s->data = json_incref((json_t *)v);
    } else if (strcmp(key, "overlap") == 0) {
        if (cfg_errors_note(errs, sc_enum(v, overlap_names, 3, &e, path, &one), &one) == ST_OK)
            s->overlap = (enum schedule_overlap)e;
    } else if (strcmp(key, "catch_up") == 0) {
        if (cfg_errors_note(errs, sc_enum(v, catch_up_names, 3, &e, path, &one), &one) == ST_OK)
            s->catch_up = (enum schedule_catch_up)e;
    } else if ((o = opt_find(sc_opts, ARRAY_LEN(sc_opts), key)) != NULL && !strchr(key, '.')) {
        xsnprintf(label, sizeof(label), "\"%s\"", path);
        (void)cfg_errors_note(errs, opt_from_json(s, o, v, label, &one), &one);
    } else {
        sc_unknown_key(key, path, errs);
    }
}

/* The checks of a whole schedule: the expression parses and comes due
 * again, the time zone loads, a run type is named. */
static void sc_check(struct schedule *s, const char *path, struct cfg_errors *errs)
{
    struct error one = {0};
    bool parsed = false;
    int64_t next;

    if (!s->cron_text)
        (void)cfg_errors_addf(errs, "missing \"%s.cron\"", path);
    else if (!(parsed = cron_parse(s->cron_text, &s->cron, &one) == ST_OK))
        (void)cfg_errors_addf(errs, "invalid \"%s.cron\": %s", path, one.message);
    if (tz_load(s->time_zone, &s->tz, &one) != ST_OK)
        (void)cfg_errors_addf(errs, "invalid \"%s.time_zone\": %s", path, one.message);
    else if (parsed && !cron_next(&s->cron, s->tz, (int64_t)time(NULL), &next))
        (void)cfg_errors_addf(errs, "invalid \"%s.cron\": \"%s\" matches no date in ten years",
                              path, s->cron_text);
    if (!s->run_type)
        (void)cfg_errors_addf(errs, "missing \"%s.run_type\"", path);
}

static struct schedule *sc_find(const struct config *cfg, const char *name)
{
    for (size_t i = 0; i < cfg->nschedules; i++)
        if (strcmp(cfg->schedules[i].name, name) == 0)
            return &cfg->schedules[i];
    return NULL;
}

/* A schedule the file names again is replaced as a whole; nothing changes
 * unless the new definition is valid. */
static void load_schedule(struct config *cfg, const char *name, const json_t *def, const char *path,
                          struct cfg_errors *errs)
{
    struct schedule s = {0}, *old = sc_find(cfg, name);
    unsigned before = errs->n;
    char sub[KEY_MAX];
    const char *key;
    json_t *v;

    s.name = xstrdup(name);
    s.data = json_object();
    s.catch_up = CATCH_UP_ONE;
    for (size_t i = 0; i < ARRAY_LEN(sc_opts); i++)
        opt_set_default(&s, &sc_opts[i]);
    json_object_foreach((json_t *)def, key, v)
    {
        xsnprintf(sub, sizeof(sub), "%s.%s", path, key);
        sc_apply_key(&s, key, v, sub, errs);
    }
    if (errs->n == before)
        sc_check(&s, path, errs);
    if (errs->n != before) {
        sc_free(&s);
    } else if (old) {
        sc_free(old);
        *old = s;
    } else {
        cfg->schedules = xrealloc(cfg->schedules, (cfg->nschedules + 1) * sizeof(s));
        cfg->schedules[cfg->nschedules++] = s;
    }
}

static void sc_remove(struct config *cfg, const char *name)
{
    struct schedule *s = sc_find(cfg, name);
    size_t i;

    if (!s)
        return;
    i = (size_t)(s - cfg->schedules);
    sc_free(s);
    memmove(s, s + 1, (cfg->nschedules - i - 1) * sizeof(*s));
    cfg->nschedules--;
}

void load_schedules(struct config *cfg, const json_t *v, struct cfg_errors *errs)
{
    load_named(cfg, "schedules", v, load_schedule, sc_remove, errs);
}

/* ---- rate limits ---- */

static struct rate_limit_cfg *rl_find(const struct config *cfg, const char *name)
{
    for (size_t i = 0; i < cfg->nrate_limits; i++)
        if (strcmp(cfg->rate_limits[i].name, name) == 0)
            return &cfg->rate_limits[i];
    return NULL;
}

static void load_rate_limit(struct config *cfg, const char *name, const json_t *def,
                            const char *path, struct cfg_errors *errs)
{
    struct rate_limit_cfg rl = {0}, *old = rl_find(cfg, name);
    unsigned before = errs->n;
    char sub[KEY_MAX], label[KEY_MAX + 2];
    const char *key;
    json_t *v;

    json_object_foreach((json_t *)def, key, v)
    {
        const struct opt *o = opt_find(rl_opts, ARRAY_LEN(rl_opts), key);
        struct error one = {0};

        xsnprintf(sub, sizeof(sub), "%s.%s", path, key);
        if (!o) {
            struct suggest s;
            suggest_init(&s, key);
            suggest_add(&s, "limit");
            suggest_add(&s, "per_s");
            (void)cfg_unknown_key(errs, sub, &s);
            continue;
        }
        xsnprintf(label, sizeof(label), "\"%s\"", sub);
        (void)cfg_errors_note(errs, opt_from_json(&rl, o, v, label, &one), &one);
    }
    for (size_t i = 0; i < ARRAY_LEN(rl_opts) && errs->n == before; i++)
        if (!json_object_get(def, rl_opts[i].key))
            (void)cfg_errors_addf(errs, "missing \"%s.%s\"", path, rl_opts[i].key);
    if (errs->n != before)
        return;
    if (old) {
        old->limit = rl.limit;
        old->per_s = rl.per_s;
        return;
    }
    rl.name = xstrdup(name);
    cfg->rate_limits = xrealloc(cfg->rate_limits, (cfg->nrate_limits + 1) * sizeof(rl));
    cfg->rate_limits[cfg->nrate_limits++] = rl;
}

static void rl_remove(struct config *cfg, const char *name)
{
    struct rate_limit_cfg *rl = rl_find(cfg, name);
    size_t i;

    if (!rl)
        return;
    i = (size_t)(rl - cfg->rate_limits);
    free(rl->name);
    memmove(rl, rl + 1, (cfg->nrate_limits - i - 1) * sizeof(*rl));
    cfg->nrate_limits--;
}

void load_rate_limits(struct config *cfg, const json_t *v, struct cfg_errors *errs)
{
    load_named(cfg, "rate_limits", v, load_rate_limit, rl_remove, errs);
}

void rate_limits_free(struct config *cfg)
{
    for (size_t i = 0; i < cfg->nrate_limits; i++)
        free(cfg->rate_limits[i].name);
    free(cfg->rate_limits);
    cfg->rate_limits = NULL;
    cfg->nrate_limits = 0;
}

/* ---- references, lookups, printing ---- */

void check_schedule_refs(const struct config *cfg, struct cfg_errors *errs)
{
    for (size_t i = 0; i < cfg->nschedules; i++) {
        const struct schedule *s = &cfg->schedules[i];
        struct suggest sg;
        char hint[NAME_MAX_LEN + 24];

        if (cfg_run_type(cfg, s->run_type))
            continue;
        suggest_init(&sg, s->run_type);
        cfg_run_type_suggest(cfg, &sg);
        (void)cfg_errors_addf(errs, "invalid \"schedules.%s.run_type\": unknown run type \"%s\"%s",
                              s->name, s->run_type, suggest_hint(&sg, hint, sizeof(hint)));
    }
    for (size_t i = 0; i < cfg->nrun_types; i++) {
        const struct run_type *rt = &cfg->run_types[i];
        struct suggest sg;
        char hint[NAME_MAX_LEN + 24];

        if (!rt->rate_limit || rl_find(cfg, rt->rate_limit))
            continue;
        suggest_init(&sg, rt->rate_limit);
        for (size_t k = 0; k < cfg->nrate_limits; k++)
            suggest_add(&sg, cfg->rate_limits[k].name);
        (void)cfg_errors_addf(errs,
                              "invalid \"run_types.%s.rate_limit\": unknown rate limit \"%s\"%s",
                              rt->name, rt->rate_limit, suggest_hint(&sg, hint, sizeof(hint)));
    }
}

const struct schedule *cfg_schedule(const struct config *cfg, const char *name)
{
    return name ? sc_find(cfg, name) : NULL;
}

const struct rate_limit_cfg *cfg_rate_limit(const struct config *cfg, const char *name)
{
    return name ? rl_find(cfg, name) : NULL;
}

const char *cfg_schedule_tenant(const struct config *cfg, const struct schedule *s)
{
    return s->tenant ? s->tenant : cfg->tenant_default;
}

static json_t *schedule_to_json(const struct schedule *s)
{
    json_t *j = json_pack("{s:s, s:O, s:s, s:s}", "cron", s->cron_text, "data", s->data, "overlap",
                          overlap_names[s->overlap], "catch_up", catch_up_names[s->catch_up]);
    bool ok = j != NULL;

    for (size_t i = 0; ok && i < ARRAY_LEN(sc_opts); i++)
        ok = json_object_set_new(j, sc_opts[i].key, opt_to_json(s, &sc_opts[i])) == 0;
    if (!ok) {
        json_decref(j);
        return NULL;
    }
    return j;
}

bool schedules_to_json(const struct config *cfg, json_t *root)
{
    json_t *sc = json_object(), *rl = json_object();
    bool ok = json_object_set_new(root, "schedules", sc) == 0 &&
              json_object_set_new(root, "rate_limits", rl) == 0;

    for (size_t i = 0; ok && i < cfg->nschedules; i++)
        ok = json_object_set_new(sc, cfg->schedules[i].name,
                                 schedule_to_json(&cfg->schedules[i])) == 0;
    for (size_t i = 0; ok && i < cfg->nrate_limits; i++)
        ok = json_object_set_new(rl, cfg->rate_limits[i].name,
                                 json_pack("{s:i, s:i}", "limit", cfg->rate_limits[i].limit,
                                           "per_s", cfg->rate_limits[i].per_s)) == 0;
    return ok;
}
