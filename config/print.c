/* config/print.c — the effective configuration as JSON, for
 * --print-config: every option with its source (each printed by option.c,
 * the secrets of the database URL masked), run types and routes, and the
 * other sections as their own files print them. */
#include "config/config_internal.h"

#include <stdlib.h>
#include <string.h>

static const char *const source_names[] = {"default", "file", "env", "flag"};

/* Strings from the environment need not be UTF-8; they show as null. */
static json_t *jstr(const char *s)
{
    json_t *j = s ? json_string(s) : NULL;
    return j ? j : json_null();
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

/* A run type's "approval" as the file has it: null when none. */
static json_t *approval_to_json(const struct approval_policy *a)
{
    if (a->timeout_s == 0)
        return json_null();
    return json_pack("{s:i, s:s}", "timeout_s", a->timeout_s, "on_timeout",
                     a->approve_on_timeout ? "approve" : "reject");
}

static json_t *rt_to_json(const struct run_type *rt)
{
    json_t *j = json_pack("{s:s, s:O}", "action", rt->action, "params", rt->params);
    bool ok = j != NULL;

    for (size_t i = 0; ok && i < rt_nopts; i++)
        ok = jset_path(j, rt_opts[i].key, opt_to_json(rt, &rt_opts[i]));
    if (ok)
        ok = json_object_set_new(j, "approval", approval_to_json(&rt->approval)) == 0;
    if (ok)
        ok = json_object_set_new(j, "concurrency", conc_to_json(&rt->conc)) == 0;
    if (ok && json_array_size(rt->notify))
        ok = json_object_set(j, "notify", rt->notify) == 0;
    if (ok && json_array_size(rt->then))
        ok = json_object_set(j, "then", rt->then) == 0;
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

static bool tokens_to_json(const struct config *cfg, json_t *root)
{
    json_t *auth = json_object_get(root, "auth"), *tokens;
    bool ok;

    if (!auth)
        return false;
    tokens = json_array();
    ok = json_object_set_new(auth, "tokens", tokens) == 0;

    for (size_t i = 0; ok && i < cfg->auth.ntokens; i++)
        ok = json_array_append_new(tokens, token_to_json(&cfg->auth.tokens[i])) == 0;
    return ok;
}

static bool cors_to_json(const struct config *cfg, json_t *root)
{
    json_t *http = json_object_get(root, "http");

    return http && json_object_set_new(http, "cors_origins", cors_origins_to_json(cfg)) == 0;
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

    for (size_t i = 0; ok && i < cfg_nopts; i++) {
        ok = jset_path(root, cfg_opts[i].key, opt_to_json(cfg, &cfg_opts[i])) &&
             json_object_set_new(sources, cfg_opts[i].key,
                                 json_string(source_names[cfg->sources[i]])) == 0;
    }
    ok = ok && types_and_routes_to_json(cfg, root) && tokens_to_json(cfg, root) &&
         cors_to_json(cfg, root) && schedules_to_json(cfg, root) && notifiers_to_json(cfg, root) &&
         tenants_to_json(cfg, root);
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
