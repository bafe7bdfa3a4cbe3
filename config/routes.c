/* config/routes.c — routes: loading the "routes" array of the file, and
 * routing an alert to a run type (cfg_route). */
#include "config/config_internal.h"

#include "common/regex_limits.h"
#include "common/suggest.h"

#include <stdlib.h>
#include <string.h>

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

void routes_free(struct route *routes, size_t n)
{
    for (size_t i = 0; i < n; i++)
        route_free(&routes[i]);
    free(routes);
}

/* A route's run type must exist; an unknown one is named with the nearest
 * run type. */
static void check_route_type(const struct config *cfg, const char *label, const char *name,
                             struct cfg_errors *errs)
{
    struct suggest s;
    char hint[NAME_MAX_LEN + 24];

    if (rt_find(cfg, name))
        return;
    suggest_init(&s, name);
    cfg_run_type_suggest(cfg, &s);
    (void)cfg_errors_addf(errs, "invalid \"%s\": unknown run type \"%s\"%s", label, name,
                          suggest_hint(&s, hint, sizeof(hint)));
}

/* "~src" is a POSIX extended regex that must match the whole value. One
 * that glibc would take too long or too much memory to compile is refused
 * before (common/regex_limits.h). */
static enum status match_compile(struct route_match *m, const char *path, struct error *err)
{
    char *src = xasprintf("^(%s)$", m->value);
    char msg[256];
    int rc;

    if (!regex_within_limits(src, msg, sizeof(msg))) {
        free(src);
        return error_set(err, ST_INVALID,
                         "invalid \"%s\": the regular expression is too costly: %s", path, msg);
    }
    rc = regcomp(&m->re, src, REG_EXTENDED | REG_NOSUB);
    free(src);
    if (rc != 0) {
        regerror(rc, &m->re, msg, sizeof(msg));
        return error_set(err, ST_INVALID, "invalid \"%s\": bad regular expression: %s", path, msg);
    }
    m->is_regex = true;
    return ST_OK;
}

static void load_matches(struct route *r, const json_t *v, const char *path,
                         struct cfg_errors *errs)
{
    char sub[KEY_MAX];
    const char *key, *s;
    json_t *val;

    if (!json_is_object(v)) {
        (void)cfg_errors_addf(errs, "invalid \"%s\": expected an object", path);
        return;
    }
    r->matches = xcalloc(json_object_size(v), sizeof(*r->matches));
    json_object_foreach((json_t *)v, key, val)
    {
        struct route_match *m = &r->matches[r->nmatches];
        struct error one = {0};
        xsnprintf(sub, sizeof(sub), "%s.%s", path, key);
        if (!json_is_string(val)) {
            (void)cfg_errors_addf(errs, "invalid \"%s\": expected a string", sub);
            continue;
        }
        s = json_string_value(val);
        m->key = xstrdup(key);
        m->value = xstrdup(s[0] == '~' ? s + 1 : s);
        r->nmatches++;
        if (s[0] == '~')
            (void)cfg_errors_note(errs, match_compile(m, sub, &one), &one);
    }
}

static void route_apply_key(struct route *r, const char *key, const json_t *v, const char *path,
                            struct cfg_errors *errs)
{
    static const char *const keys[] = {"match", "run_type", "on_resolved"};
    struct suggest hint;
    const char *s;

    if (strcmp(key, "match") == 0) {
        load_matches(r, v, path, errs);
        return;
    }
    if (!STR_IN(key, "run_type", "on_resolved")) {
        suggest_init(&hint, key);
        for (size_t i = 0; i < ARRAY_LEN(keys); i++)
            suggest_add(&hint, keys[i]);
        (void)cfg_unknown_key(errs, path, &hint);
        return;
    }
    if (!json_is_string(v)) {
        (void)cfg_errors_addf(errs, "invalid \"%s\": expected a string", path);
        return;
    }
    s = json_string_value(v);
    if (strcmp(key, "run_type") == 0) {
        free(r->run_type);
        r->run_type = xstrdup(s);
    } else if (!STR_IN(s, "ignore", "cancel")) {
        (void)cfg_errors_addf(errs, "invalid \"%s\": expected \"ignore\" or \"cancel\"", path);
    } else {
        r->on_resolved_cancel = strcmp(s, "cancel") == 0;
    }
}

/* A run type the file defines but that failed to load has its own errors;
 * a route naming it gets none more. */
static bool failed_in_file(const struct config *cfg, const json_t *file_types, const char *name)
{
    return !rt_find(cfg, name) && json_is_object(json_object_get(file_types, name));
}

static void load_route(const struct config *cfg, struct route *r, size_t i, const json_t *v,
                       const json_t *file_types, struct cfg_errors *errs)
{
    char path[32], sub[KEY_MAX];
    const char *key;
    json_t *val;

    xsnprintf(path, sizeof(path), "routes[%zu]", i);
    if (!json_is_object(v)) {
        (void)cfg_errors_addf(errs, "invalid \"%s\": expected an object", path);
        return;
    }
    json_object_foreach((json_t *)v, key, val)
    {
        xsnprintf(sub, sizeof(sub), "%s.%s", path, key);
        route_apply_key(r, key, val, sub, errs);
    }
    xsnprintf(sub, sizeof(sub), "%s.run_type", path);
    if (!json_object_get(v, "run_type"))
        (void)cfg_errors_addf(errs, "missing \"%s\"", sub);
    else if (r->run_type && !failed_in_file(cfg, file_types, r->run_type))
        check_route_type(cfg, sub, r->run_type, errs);
}

/* The file's routes replace any earlier ones, and only when all are valid. */
void load_routes(struct config *cfg, const json_t *v, const json_t *file_types,
                 struct cfg_errors *errs)
{
    unsigned before = errs->n;
    struct route *routes;
    size_t n;

    if (!json_is_array(v)) {
        (void)cfg_errors_addf(errs, "invalid \"routes\": expected an array");
        return;
    }
    n = json_array_size(v);
    routes = xcalloc(n, sizeof(*routes));
    for (size_t i = 0; i < n; i++)
        load_route(cfg, &routes[i], i, json_array_get(v, i), file_types, errs);
    if (errs->n != before) {
        routes_free(routes, n);
        return;
    }
    routes_free(cfg->routes, cfg->nroutes);
    cfg->routes = routes;
    cfg->nroutes = n;
}

/* Names of run types, checked once every source has had its say. */
void check_refs(const struct config *cfg, struct cfg_errors *errs)
{
    char label[32];

    for (size_t i = 0; i < cfg->nroutes; i++) {
        xsnprintf(label, sizeof(label), "routes[%zu].run_type", i);
        check_route_type(cfg, label, cfg->routes[i].run_type, errs);
    }
    if (cfg->default_route)
        check_route_type(cfg, "default_route", cfg->default_route, errs);
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
