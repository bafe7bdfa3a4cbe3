/* config/print.c — the effective configuration as JSON, for
 * --print-config: every option with its source, run types and routes, and
 * the secrets of the database URL masked. */
#include "config/config_internal.h"

#include "common/dynbuf.h"

#include <stdlib.h>
#include <string.h>

#define MASK "****"
#define WS " \t\n\r\f\v"

/* The longest masked connection string. Each MASK replaces the value after
 * a "password=" or "sslpassword=" (at least 9 bytes of the source), or the
 * one password of the user info, so a result is less than twice its source
 * plus MASK; a source is at most a config file long (a variable or a flag
 * is shorter). No loadable configuration reaches the cap; past it the value
 * would show as null, never unmasked. */
#define MASKED_MAX (2 * CFG_FILE_MAX + sizeof(MASK))

static const char *const level_names[] = {"debug", "info", "warn", "error"};
static const char *const source_names[] = {"default", "file", "env", "flag"};

struct sbuf {
    struct dynbuf d;
    bool too_large; /* an add was refused: the result is NULL */
};

static void sb_putn(struct sbuf *b, const char *s, size_t n)
{
    if (!b->too_large && dynbuf_add(&b->d, s, n) != ST_OK)
        b->too_large = true;
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

/* url with its secrets masked (heap), or NULL past MASKED_MAX. */
static char *mask_dburl(const char *url)
{
    struct sbuf b = {.too_large = false};

    dynbuf_init(&b.d, MASKED_MAX);
    if (strncmp(url, "postgresql://", 13) == 0 || strncmp(url, "postgres://", 11) == 0)
        mask_uri(&b, url);
    else
        mask_kv(&b, url);
    if (b.too_large) {
        dynbuf_free(&b.d);
        return NULL;
    }
    return dynbuf_take(&b.d);
}

/* Strings from the environment need not be UTF-8; they show as null. */
static json_t *jstr(const char *s)
{
    json_t *j = s ? json_string(s) : NULL;
    return j ? j : json_null();
}

json_t *opt_to_json(const void *base, const struct opt *o)
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
         cors_to_json(cfg, root) && schedules_to_json(cfg, root) && notifiers_to_json(cfg, root);
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
