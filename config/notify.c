/* config/notify.c — "notifiers" (where notifications go: webhook, slack,
 * alertmanager), the check of every run type's "notify" and "then" rules
 * (run_types.c reads them) against the notifiers and run types there are,
 * --print-config's view of the notifiers, and their lookups
 * (docs/notifications.md).
 *
 * A notifier's url, headers and secret hold no value of a run: only
 * {{env:NAME}} placeholders, expanded here at load (an unset variable is
 * an error then, not at the first delivery). The expansions may hold
 * secrets: they are kept apart from the templates, and only the templates
 * are printed. */
#include "config/config_internal.h"

#include "common/suggest.h"
#include "common/template.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define ENV_NAME_MAX 128

/* clang-format off */
#define NT_OFF(f) offsetof(struct notifier, f)
static const struct opt nt_opts[] = {
    OPT_NUM(OPT_INT, max_attempts,  8,     1,   20,    NT_OFF(max_attempts)),
    OPT_NUM(OPT_INT, max_in_flight, 4,     1,   64,    NT_OFF(max_in_flight)),
    OPT_NUM(OPT_INT, timeout_ms,    10000, 100, 60000, NT_OFF(timeout_ms)),
};
/* clang-format on */

static const char *const kind_names[] = {"webhook", "slack", "alertmanager"};

/* Headers opsrun writes itself. */
static const char *const reserved_headers[] = {
    "Content-Type", "Content-Length",  "Host",
    "Opsrun-Event", "Opsrun-Delivery", "Opsrun-Signature"};
/* Labels the alertmanager notifier writes itself. */
static const char *const reserved_labels[] = {"alertname", "run_type", "run_id", "tenant"};

const char *cfg_notifier_kind_name(enum notifier_kind k)
{
    return kind_names[k];
}

/* ---- {{env:NAME}} templates ---- */

/* s with each {{env:NAME}} replaced by the variable's value; any other
 * placeholder, or an unset variable, is an error naming path. */
static enum status env_expand(const char *s, const char *path, char **out, struct error *err)
{
    size_t cap = strlen(s) + 1, len = 0;
    char *buf = xmalloc(cap);
    const char *p = s, *open;

    while ((open = strstr(p, "{{")) != NULL) {
        const char *close = strstr(open, "}}"), *val;
        char name[ENV_NAME_MAX];
        size_t n = close ? (size_t)(close - open - 6) : 0, vl;

        if (!close || strncmp(open, "{{env:", 6) != 0 || n == 0 || n >= sizeof(name)) {
            free(buf);
            return error_set(err, ST_INVALID,
                             "invalid \"%s\": only {{env:NAME}} placeholders are allowed here",
                             path);
        }
        memcpy(name, open + 6, n);
        name[n] = '\0';
        if (!(val = getenv(name))) {
            free(buf);
            return error_set(err, ST_INVALID, "invalid \"%s\": environment variable %s is not set",
                             path, name);
        }
        vl = strlen(val);
        cap += (size_t)(open - p) + vl;
        buf = xrealloc(buf, cap);
        memcpy(buf + len, p, (size_t)(open - p));
        len += (size_t)(open - p);
        memcpy(buf + len, val, vl);
        len += vl;
        p = close + 2;
    }
    memcpy(buf + len, p, strlen(p) + 1);
    *out = buf;
    return ST_OK;
}

/* ---- notifiers ---- */

static void nt_free(struct notifier *n)
{
    free(n->name);
    free(n->url_template);
    free(n->url);
    free(n->secret_template);
    free(n->secret);
    free(n->text);
    json_decref(n->headers);
    json_decref(n->header_values);
    json_decref(n->labels);
    memset(n, 0, sizeof(*n));
}

void notifiers_free(struct config *cfg)
{
    for (size_t i = 0; i < cfg->nnotifiers; i++)
        nt_free(&cfg->notifiers[i]);
    free(cfg->notifiers);
    cfg->notifiers = NULL;
    cfg->nnotifiers = 0;
}

static struct notifier *nt_find(const struct config *cfg, const char *name)
{
    for (size_t i = 0; i < cfg->nnotifiers; i++)
        if (strcmp(cfg->notifiers[i].name, name) == 0)
            return &cfg->notifiers[i];
    return NULL;
}

const struct notifier *cfg_notifier(const struct config *cfg, const char *name)
{
    return name ? nt_find(cfg, name) : NULL;
}

static enum status nt_kind(struct notifier *n, const json_t *v, const char *path, struct error *err)
{
    for (size_t i = 0; json_is_string(v) && i < ARRAY_LEN(kind_names); i++) {
        if (strcmp(json_string_value(v), kind_names[i]) == 0) {
            n->kind = (enum notifier_kind)i;
            n->has_kind = true;
            return ST_OK;
        }
    }
    return error_set(err, ST_INVALID,
                     "invalid \"%s\": expected one of \"webhook\", \"slack\", \"alertmanager\"",
                     path);
}

/* An http or https URL with a host and no blank. */
static bool http_url_ok(const char *url)
{
    const char *host = strncasecmp(url, "https://", 8) == 0  ? url + 8
                       : strncasecmp(url, "http://", 7) == 0 ? url + 7
                                                             : NULL;

    return host && *host && *host != '/' && !strpbrk(url, " \t\r\n");
}

enum status check_http_url(const char *label, const char *value, struct error *err)
{
    if (!http_url_ok(value))
        return error_set(err, ST_INVALID, "invalid %s: expected an http:// or https:// URL", label);
    return ST_OK;
}

/* The URL after expansion is an http or https URL. */
static enum status nt_url(struct notifier *n, const json_t *v, const char *path, struct error *err)
{
    const char *t = json_string_value(v);
    char *url = NULL;
    enum status st;

    if (!t)
        return error_set(err, ST_INVALID, "invalid \"%s\": expected a string", path);
    st = env_expand(t, path, &url, err);
    if (st != ST_OK)
        return st;
    if (!http_url_ok(url)) {
        free(url);
        return error_set(err, ST_INVALID, "invalid \"%s\": expected an http:// or https:// URL",
                         path);
    }
    free(n->url_template);
    free(n->url);
    n->url_template = xstrdup(t);
    n->url = url;
    return ST_OK;
}

static bool in_list(const char *s, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcasecmp(s, list[i]) == 0)
            return true;
    return false;
}

static bool header_name_ok(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && !strchr("!#$%&'*+-.^_`|~", *s))
            return false;
    return true;
}

static enum status nt_headers(struct notifier *n, const json_t *v, const char *path,
                              struct error *err)
{
    json_t *values = json_object(), *x;
    const char *key;

    if (!json_is_object(v)) {
        json_decref(values);
        return error_set(err, ST_INVALID, "invalid \"%s\": expected an object", path);
    }
    json_object_foreach((json_t *)v, key, x)
    {
        char sub[KEY_MAX], *val = NULL;
        enum status st = ST_OK;
        xsnprintf(sub, sizeof(sub), "%s.%s", path, key);
        if (!header_name_ok(key) || in_list(key, reserved_headers, ARRAY_LEN(reserved_headers)))
            st = error_set(err, ST_INVALID,
                           "invalid \"%s\": not a header name opsrun leaves to "
                           "the configuration",
                           sub);
        else if (!json_is_string(x))
            st = error_set(err, ST_INVALID, "invalid \"%s\": expected a string", sub);
        else if ((st = env_expand(json_string_value(x), sub, &val, err)) == ST_OK &&
                 strpbrk(val, "\r\n"))
            st = error_set(err, ST_INVALID, "invalid \"%s\": a header spans one line", sub);
        if (st == ST_OK)
            json_object_set_new(values, key, json_string(val));
        free(val);
        if (st != ST_OK) {
            json_decref(values);
            return st;
        }
    }
    json_decref(n->headers);
    json_decref(n->header_values);
    n->headers = json_incref((json_t *)v);
    n->header_values = values;
    return ST_OK;
}

/* The secret is exactly one {{env:NAME}}: it never sits in the file. */
static enum status nt_secret(struct notifier *n, const json_t *v, const char *path,
                             struct error *err)
{
    const char *t = json_string_value(v);
    char *val = NULL;
    enum status st;

    if (!t || strncmp(t, "{{env:", 6) != 0 || strstr(t, "}}") != t + strlen(t) - 2)
        return error_set(err, ST_INVALID,
                         "invalid \"%s\": expected \"{{env:NAME}}\" (a secret is read from the "
                         "environment, never written in the file)",
                         path);
    st = env_expand(t, path, &val, err);
    if (st == ST_OK && !*val) {
        free(val);
        return error_set(err, ST_INVALID, "invalid \"%s\": the variable is empty", path);
    }
    if (st != ST_OK)
        return st;
    free(n->secret_template);
    free(n->secret);
    n->secret_template = xstrdup(t);
    n->secret = val;
    return ST_OK;
}

static enum status nt_text(struct notifier *n, const json_t *v, const char *path, struct error *err)
{
    char why[160];

    if (!json_is_string(v))
        return error_set(err, ST_INVALID, "invalid \"%s\": expected a string", path);
    if (!tmpl_check(json_string_value(v), why, sizeof(why)))
        return error_set(err, ST_INVALID, "invalid \"%s\": %s", path, why);
    free(n->text);
    n->text = xstrdup(json_string_value(v));
    return ST_OK;
}

static bool label_name_ok(const char *s)
{
    if (!isalpha((unsigned char)*s) && *s != '_')
        return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_')
            return false;
    return true;
}

static enum status nt_labels(struct notifier *n, const json_t *v, const char *path,
                             struct error *err)
{
    const char *key;
    json_t *x;

    if (!json_is_object(v))
        return error_set(err, ST_INVALID, "invalid \"%s\": expected an object", path);
    json_object_foreach((json_t *)v, key, x)
    {
        if (!label_name_ok(key) || in_list(key, reserved_labels, ARRAY_LEN(reserved_labels)))
            return error_set(err, ST_INVALID,
                             "invalid \"%s.%s\": not a label name opsrun leaves to the "
                             "configuration",
                             path, key);
        if (!json_is_string(x))
            return error_set(err, ST_INVALID, "invalid \"%s.%s\": expected a string", path, key);
    }
    json_decref(n->labels);
    n->labels = json_incref((json_t *)v);
    return ST_OK;
}

static void nt_unknown_key(const char *key, const char *path, struct cfg_errors *errs)
{
    static const char *const own[] = {"kind", "url", "headers", "secret", "text", "labels"};
    struct suggest s;

    suggest_init(&s, key);
    for (size_t i = 0; i < ARRAY_LEN(own); i++)
        suggest_add(&s, own[i]);
    for (size_t i = 0; i < ARRAY_LEN(nt_opts); i++)
        suggest_add(&s, nt_opts[i].key);
    (void)cfg_unknown_key(errs, path, &s);
}

static void nt_apply_key(struct notifier *n, const char *key, const json_t *v, const char *path,
                         struct cfg_errors *errs)
{
    char label[KEY_MAX + 2];
    struct error one = {0};
    enum status st = ST_OK;
    const struct opt *o;

    if (strcmp(key, "kind") == 0)
        st = nt_kind(n, v, path, &one);
    else if (strcmp(key, "url") == 0)
        st = nt_url(n, v, path, &one);
    else if (strcmp(key, "headers") == 0)
        st = nt_headers(n, v, path, &one);
    else if (strcmp(key, "secret") == 0)
        st = nt_secret(n, v, path, &one);
    else if (strcmp(key, "text") == 0)
        st = nt_text(n, v, path, &one);
    else if (strcmp(key, "labels") == 0)
        st = nt_labels(n, v, path, &one);
    else if ((o = opt_find(nt_opts, ARRAY_LEN(nt_opts), key)) != NULL && !strchr(key, '.')) {
        xsnprintf(label, sizeof(label), "\"%s\"", path);
        st = opt_from_json(n, o, v, label, &one);
    } else {
        nt_unknown_key(key, path, errs);
    }
    (void)cfg_errors_note(errs, st, &one);
}

/* The checks of a whole notifier: a kind and a URL, and keys its kind
 * takes. */
static void nt_check(const struct notifier *n, const char *path, struct cfg_errors *errs)
{
    if (!n->has_kind)
        (void)cfg_errors_addf(errs, "missing \"%s.kind\"", path);
    if (!n->url)
        (void)cfg_errors_addf(errs, "missing \"%s.url\"", path);
    if (!n->has_kind)
        return;
    if (n->secret && n->kind != NOTIFIER_WEBHOOK)
        (void)cfg_errors_addf(errs, "invalid \"%s.secret\": only a webhook signs its body", path);
    if (n->text && n->kind != NOTIFIER_SLACK)
        (void)cfg_errors_addf(errs, "invalid \"%s.text\": only a slack notifier takes a text",
                              path);
    if (n->labels && n->kind != NOTIFIER_ALERTMANAGER)
        (void)cfg_errors_addf(
            errs, "invalid \"%s.labels\": only an alertmanager notifier takes labels", path);
}

/* A notifier the file names again is replaced as a whole; nothing changes
 * unless the new definition is valid. */
static void load_notifier(struct config *cfg, const char *name, const json_t *def, const char *path,
                          struct cfg_errors *errs)
{
    struct notifier n = {0}, *old = nt_find(cfg, name);
    unsigned before = errs->n;
    char sub[KEY_MAX];
    const char *key;
    json_t *v;

    n.name = xstrdup(name);
    for (size_t i = 0; i < ARRAY_LEN(nt_opts); i++)
        opt_set_default(&n, &nt_opts[i]);
    json_object_foreach((json_t *)def, key, v)
    {
        xsnprintf(sub, sizeof(sub), "%s.%s", path, key);
        nt_apply_key(&n, key, v, sub, errs);
    }
    if (errs->n == before)
        nt_check(&n, path, errs);
    if (errs->n != before) {
        nt_free(&n);
    } else if (old) {
        nt_free(old);
        *old = n;
    } else {
        cfg->notifiers = xrealloc(cfg->notifiers, (cfg->nnotifiers + 1) * sizeof(n));
        cfg->notifiers[cfg->nnotifiers++] = n;
    }
}

static void nt_remove(struct config *cfg, const char *name)
{
    struct notifier *n = nt_find(cfg, name);
    size_t i;

    if (!n)
        return;
    i = (size_t)(n - cfg->notifiers);
    nt_free(n);
    memmove(n, n + 1, (cfg->nnotifiers - i - 1) * sizeof(*n));
    cfg->nnotifiers--;
}

void load_notifiers(struct config *cfg, const json_t *v, struct cfg_errors *errs)
{
    load_named(cfg, "notifiers", v, load_notifier, nt_remove, errs);
}

/* ---- references, printing ---- */

void check_notify_refs(const struct config *cfg, struct cfg_errors *errs)
{
    for (size_t i = 0; i < cfg->nrun_types; i++) {
        const struct run_type *rt = &cfg->run_types[i];
        char hint[NAME_MAX_LEN + 24];
        struct suggest sg;
        json_t *rule;
        size_t k;

        json_array_foreach(rt->notify, k, rule)
        {
            const char *to = json_string_value(json_object_get(rule, "to"));
            if (nt_find(cfg, to))
                continue;
            suggest_init(&sg, to);
            for (size_t j = 0; j < cfg->nnotifiers; j++)
                suggest_add(&sg, cfg->notifiers[j].name);
            (void)cfg_errors_addf(errs,
                                  "invalid \"run_types.%s.notify[%zu].to\": unknown notifier "
                                  "\"%s\"%s",
                                  rt->name, k, to, suggest_hint(&sg, hint, sizeof(hint)));
        }
        json_array_foreach(rt->then, k, rule)
        {
            const char *to = json_string_value(json_object_get(rule, "run_type"));
            if (rt_find(cfg, to))
                continue;
            suggest_init(&sg, to);
            cfg_run_type_suggest(cfg, &sg);
            (void)cfg_errors_addf(errs,
                                  "invalid \"run_types.%s.then[%zu].run_type\": unknown run type "
                                  "\"%s\"%s",
                                  rt->name, k, to, suggest_hint(&sg, hint, sizeof(hint)));
        }
    }
}

static json_t *notifier_to_json(const struct notifier *n)
{
    json_t *j = json_pack("{s:s, s:s}", "kind", kind_names[n->kind], "url", n->url_template);
    bool ok = j != NULL;

    if (ok && n->headers)
        ok = json_object_set(j, "headers", n->headers) == 0;
    if (ok && n->secret_template)
        ok = json_object_set_new(j, "secret", json_string(n->secret_template)) == 0;
    if (ok && n->text)
        ok = json_object_set_new(j, "text", json_string(n->text)) == 0;
    if (ok && n->labels)
        ok = json_object_set(j, "labels", n->labels) == 0;
    for (size_t i = 0; ok && i < ARRAY_LEN(nt_opts); i++)
        ok = json_object_set_new(j, nt_opts[i].key, opt_to_json(n, &nt_opts[i])) == 0;
    if (!ok) {
        json_decref(j);
        return NULL;
    }
    return j;
}

bool notifiers_to_json(const struct config *cfg, json_t *root)
{
    json_t *all = json_object();
    bool ok = json_object_set_new(root, "notifiers", all) == 0;

    for (size_t i = 0; ok && i < cfg->nnotifiers; i++)
        ok = json_object_set_new(all, cfg->notifiers[i].name,
                                 notifier_to_json(&cfg->notifiers[i])) == 0;
    return ok;
}
