/* config/routes.c — routes: loading the "routes" array of the file, and
 * routing an alert to a run type (cfg_route). */
#include "config/config_internal.h"

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
    if (!STR_IN(key, "run_type", "on_resolved"))
        return error_set(err, ST_INVALID, "unknown key \"%s\"", path);
    if (!json_is_string(v))
        return error_set(err, ST_INVALID, "invalid \"%s\": expected a string", path);
    s = json_string_value(v);
    if (strcmp(key, "run_type") == 0) {
        r->run_type = xstrdup(s);
        return ST_OK;
    }
    if (!STR_IN(s, "ignore", "cancel"))
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
enum status load_routes(struct config *cfg, const json_t *v, struct error *err)
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
enum status check_refs(const struct config *cfg, struct error *err)
{
    for (size_t i = 0; i < cfg->nroutes; i++)
        if (check_route_type(cfg, i, cfg->routes[i].run_type, err) != ST_OK)
            return ST_INVALID;
    if (cfg->default_route && !rt_find(cfg, cfg->default_route))
        return error_set(err, ST_INVALID, "invalid \"default_route\": unknown run type \"%s\"",
                         cfg->default_route);
    return ST_OK;
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
