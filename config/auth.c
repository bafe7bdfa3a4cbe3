/* config/auth.c — the "auth" section: the tokens of auth.tokens (their
 * names, tenants, scopes and SHA-256 digests), the check that keeps a
 * process without tokens off every address but loopback, and new tokens
 * for `opsrun token new`. The tokens themselves never reach this module
 * except in cfg_token_new, which only hashes the one it makes. */
#include "config/config_internal.h"

#include "common/digest.h"
#include "common/encoding.h"
#include "common/suggest.h"

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#define TOKEN_BYTES 32 /* 256 bits of getrandom() per token */
#define TOKEN_PREFIX "opsrun_"

/* Indexed by the bit of enum auth_scope. */
static const char *const scope_names[] = {"submit", "read", "cancel", "health", "admin", "approve"};

/* Runs carry "anonymous" without authentication and "system" when opsrun
 * starts them itself: no token may pass for either. */
static const char *const reserved_names[] = {"anonymous", "system", NULL};

bool cfg_scope_parse(const char *name, unsigned *bit)
{
    for (size_t i = 0; i < ARRAY_LEN(scope_names); i++) {
        if (strcmp(name, scope_names[i]) == 0) {
            *bit = 1u << i;
            return true;
        }
    }
    return false;
}

const char *cfg_scope_name(unsigned bit)
{
    for (size_t i = 0; i < ARRAY_LEN(scope_names); i++)
        if (bit == 1u << i)
            return scope_names[i];
    return "";
}

static void token_clear(struct auth_token *t)
{
    free(t->name);
    free(t->tenant);
    memset(t, 0, sizeof(*t));
}

void tokens_free(struct auth_token *tokens, size_t n)
{
    for (size_t i = 0; i < n; i++)
        token_clear(&tokens[i]);
    free(tokens);
}

/* ---- one entry ---------------------------------------------------------- */

/* "path.key", or just "key" for a path of "" (opsrun token new's flags). */
static void key_label(char *buf, size_t cap, const char *path, const char *key)
{
    xsnprintf(buf, cap, "\"%s%s%s\"", path, *path ? "." : "", key);
}

static enum status token_name(struct auth_token *t, const json_t *v, const char *path,
                              struct error *err)
{
    char label[KEY_MAX + 2];
    const char *s = json_string_value(v);

    key_label(label, sizeof(label), path, "name");
    if (!s || !name_valid(s))
        return name_error(label, err);
    if (str_in(s, reserved_names))
        return error_set(err, ST_INVALID, "invalid %s: \"%s\" is a reserved initiator", label, s);
    t->name = xstrdup(s);
    return ST_OK;
}

static enum status token_tenant(struct auth_token *t, const json_t *v, const char *path,
                                struct error *err)
{
    char label[KEY_MAX + 2];
    const char *s = json_string_value(v);

    key_label(label, sizeof(label), path, "tenant");
    if (!s || !name_valid(s))
        return name_error(label, err);
    t->tenant = xstrdup(s);
    return ST_OK;
}

static enum status token_scopes(struct auth_token *t, const json_t *v, const char *path,
                                struct error *err)
{
    char label[KEY_MAX + 2], elem[KEY_MAX + 32];
    size_t i;
    const json_t *e;
    unsigned bit;

    key_label(label, sizeof(label), path, "scopes");
    if (!json_is_array(v) || json_array_size(v) == 0)
        return error_set(err, ST_INVALID,
                         "invalid %s: expected a non-empty array of \"submit\", \"read\", "
                         "\"cancel\", \"health\", \"admin\" or \"approve\"",
                         label);
    json_array_foreach(v, i, e)
    {
        xsnprintf(elem, sizeof(elem), "%.*s[%zu]\"", (int)strlen(label) - 1, label, i);
        if (!json_is_string(e) || !cfg_scope_parse(json_string_value(e), &bit))
            return error_set(err, ST_INVALID,
                             "invalid %s: expected \"submit\", \"read\", \"cancel\", "
                             "\"health\", \"admin\" or \"approve\"",
                             elem);
        if (t->scopes & bit)
            return error_set(err, ST_INVALID, "invalid %s: \"%s\" is repeated", elem,
                             json_string_value(e));
        t->scopes |= bit;
    }
    return ST_OK;
}

static enum status token_digest(struct auth_token *t, const json_t *v, const char *path,
                                struct error *err)
{
    char label[KEY_MAX + 2];
    const char *s = json_string_value(v);

    key_label(label, sizeof(label), path, "sha256");
    if (!s || !hex_decode(s, t->sha256, sizeof(t->sha256)))
        return error_set(err, ST_INVALID,
                         "invalid %s: expected 64 hex digits, the SHA-256 of the token (opsrun "
                         "token new prints it)",
                         label);
    return ST_OK;
}

static enum status token_key(struct auth_token *t, const char *key, const json_t *v,
                             const char *path, struct cfg_errors *errs)
{
    static const char *const keys[] = {"name", "tenant", "scopes", "sha256"};
    char label[KEY_MAX];
    struct error one = {0};
    struct suggest s;

    if (strcmp(key, "name") == 0)
        return cfg_errors_note(errs, token_name(t, v, path, &one), &one);
    if (strcmp(key, "tenant") == 0)
        return cfg_errors_note(errs, token_tenant(t, v, path, &one), &one);
    if (strcmp(key, "scopes") == 0)
        return cfg_errors_note(errs, token_scopes(t, v, path, &one), &one);
    if (strcmp(key, "sha256") == 0)
        return cfg_errors_note(errs, token_digest(t, v, path, &one), &one);
    suggest_init(&s, key);
    for (size_t i = 0; i < ARRAY_LEN(keys); i++)
        suggest_add(&s, keys[i]);
    xsnprintf(label, sizeof(label), "%s%s%s", path, *path ? "." : "", key);
    return cfg_unknown_key(errs, label, &s);
}

/* Each key once, in the file's order; then every key must have been there. */
static enum status token_load(struct auth_token *t, const json_t *v, const char *path,
                              struct cfg_errors *errs)
{
    static const char *const required[] = {"name", "tenant", "scopes", "sha256"};
    const char *key;
    json_t *val;
    enum status st = ST_OK;

    if (!json_is_object(v))
        return cfg_errors_addf(errs, "invalid \"%s\": expected an object", path);
    json_object_foreach((json_t *)v, key, val)
    {
        if (token_key(t, key, val, path, errs) != ST_OK)
            st = ST_INVALID;
    }
    for (size_t i = 0; i < ARRAY_LEN(required); i++)
        if (!json_object_get(v, required[i]))
            st = cfg_errors_addf(errs, "missing \"%s%s%s\"", path, *path ? "." : "", required[i]);
    return st;
}

/* A name or a digest used twice would make one request match two entries.
 * Entries that failed to load (no name) are not compared. */
static enum status token_unique(const struct auth_token *tokens, size_t i, struct error *err)
{
    for (size_t j = 0; j < i; j++) {
        if (!tokens[j].name)
            continue;
        if (strcmp(tokens[j].name, tokens[i].name) == 0)
            return error_set(err, ST_INVALID,
                             "invalid \"auth.tokens[%zu].name\": \"%s\" is already the name of "
                             "auth.tokens[%zu]",
                             i, tokens[i].name, j);
        if (memcmp(tokens[j].sha256, tokens[i].sha256, sizeof(tokens[i].sha256)) == 0)
            return error_set(err, ST_INVALID,
                             "invalid \"auth.tokens[%zu].sha256\": the same token as "
                             "auth.tokens[%zu]",
                             i, j);
    }
    return ST_OK;
}

void load_auth_tokens(struct config *cfg, const json_t *v, struct cfg_errors *errs)
{
    unsigned before = errs->n;
    struct auth_token *tokens;
    struct error one = {0};
    char path[32];
    size_t n;

    if (!json_is_array(v)) {
        (void)cfg_errors_addf(errs, "invalid \"auth.tokens\": expected an array");
        return;
    }
    n = json_array_size(v);
    tokens = xcalloc(n ? n : 1, sizeof(*tokens));
    for (size_t i = 0; i < n; i++) {
        xsnprintf(path, sizeof(path), "auth.tokens[%zu]", i);
        if (token_load(&tokens[i], json_array_get(v, i), path, errs) == ST_OK)
            (void)cfg_errors_note(errs, token_unique(tokens, i, &one), &one);
        else
            token_clear(&tokens[i]);
    }
    if (errs->n != before) {
        tokens_free(tokens, n);
        return;
    }
    tokens_free(cfg->auth.tokens, cfg->auth.ntokens);
    cfg->auth.tokens = tokens;
    cfg->auth.ntokens = n;
}

json_t *token_to_json(const struct auth_token *t)
{
    json_t *scopes = json_array();
    char hex[65];

    for (size_t i = 0; i < ARRAY_LEN(scope_names); i++)
        if (t->scopes & (1u << i))
            json_array_append_new(scopes, json_string(scope_names[i]));
    for (size_t i = 0; i < sizeof(t->sha256); i++)
        xsnprintf(hex + 2 * i, 3, "%02x", t->sha256[i]);
    return json_pack("{s:s, s:s, s:o, s:s}", "name", t->name, "tenant", t->tenant, "scopes", scopes,
                     "sha256", hex);
}

/* ---- exposure ----------------------------------------------------------- */

bool cfg_host_is_loopback(const char *host)
{
    struct in_addr a4;
    struct in6_addr a6;

    if (strcmp(host, "localhost") == 0)
        return true;
    if (inet_pton(AF_INET, host, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, host, &a6) != 1)
        return false;
    if (IN6_IS_ADDR_LOOPBACK(&a6))
        return true;
    return IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127;
}

/* The host part of a valid "listen" value, without brackets. */
static void listen_host(const char *listen, char *out, size_t cap)
{
    const char *colon = strrchr(listen, ':');
    size_t n = colon ? (size_t)(colon - listen) : strlen(listen);

    if (n >= 2 && listen[0] == '[' && listen[n - 1] == ']')
        xsnprintf(out, cap, "%.*s", (int)(n - 2), listen + 1);
    else
        xsnprintf(out, cap, "%.*s", (int)n, listen);
}

enum status cfg_check_exposure(const struct config *cfg, struct error *err)
{
    char host[256];

    if (cfg->auth.ntokens > 0 || cfg->auth.insecure_no_auth)
        return ST_OK;
    listen_host(cfg->listen, host, sizeof(host));
    if (cfg_host_is_loopback(host))
        return ST_OK;
    return error_set(err, ST_INVALID,
                     "refusing to serve on %s without authentication: configure \"auth.tokens\" "
                     "(opsrun token new makes one), listen on a loopback address, or pass "
                     "--insecure-no-auth",
                     cfg->listen);
}

/* ---- tenants nobody sees ------------------------------------------------ */

bool cfg_tenant_visible(const struct config *cfg, const char *tenant)
{
    if (cfg->auth.ntokens == 0)
        return strcmp(tenant, cfg->tenant_default) == 0;
    for (size_t i = 0; i < cfg->auth.ntokens; i++) {
        const struct auth_token *t = &cfg->auth.tokens[i];
        if ((t->scopes & SCOPE_ADMIN) || strcmp(t->tenant, tenant) == 0)
            return true;
    }
    return false;
}

/* A schedule in a tenant nobody can see fires, and nobody is told: its
 * runs, its state and its pause and trigger are all out of every caller's
 * reach (handlers/auth.c: without tokens, every caller is tenant_default;
 * with tokens, only an admin token names another tenant). */
void cfg_warnings(const struct config *cfg, void (*warn)(void *arg, const char *line), void *arg)
{
    char line[512];

    for (size_t i = 0; i < cfg->nschedules; i++) {
        const struct schedule *s = &cfg->schedules[i];
        const char *tenant = cfg_schedule_tenant(cfg, s);
        if (cfg_tenant_visible(cfg, tenant))
            continue;
        if (cfg->auth.ntokens == 0)
            xsnprintf(line, sizeof(line),
                      "schedule in a tenant no caller can see schedule=%s tenant=%s: without "
                      "auth.tokens every caller is of tenant \"%s\" (tenant_default), so the "
                      "API, the CLI and the dashboard show neither the schedule nor its runs",
                      s->name, tenant, cfg->tenant_default);
        else
            xsnprintf(line, sizeof(line),
                      "schedule in a tenant no caller can see schedule=%s tenant=%s: no token "
                      "of auth.tokens is of that tenant or has the scope admin, so the API, the "
                      "CLI and the dashboard show neither the schedule nor its runs",
                      s->name, tenant);
        warn(arg, line);
    }
}

/* ---- new tokens --------------------------------------------------------- */

static json_t *scopes_array(const char *csv)
{
    json_t *a = json_array();
    const char *p = csv;

    while (*p) {
        size_t n = strcspn(p, ",");
        json_t *s = json_stringn(p, n);
        json_array_append_new(a, s ? s : json_string(""));
        p += n;
        if (*p == ',')
            p++;
    }
    return a;
}

enum status cfg_token_new(const char *name, const char *tenant, const char *scopes, char **token,
                          json_t **entry, struct error *err)
{
    unsigned char raw[TOKEN_BYTES];
    char b64[(TOKEN_BYTES * 4 + 2) / 3 + 1], hex[65];
    struct auth_token t = {0};
    json_t *e;
    enum status st;

    *token = NULL;
    *entry = NULL;
    rand_bytes(raw, sizeof(raw));
    base64url_encode(raw, sizeof(raw), b64);
    *token = xasprintf(TOKEN_PREFIX "%s", b64);
    sha256_hex(*token, strlen(*token), hex);
    e = json_pack("{s:s, s:s, s:o, s:s}", "name", name, "tenant", tenant, "scopes",
                  scopes_array(scopes), "sha256", hex);
    if (e) {
        struct cfg_errors errs;
        cfg_errors_init(&errs, err);
        (void)token_load(&t, e, "", &errs);
        st = cfg_errors_end(&errs);
    } else {
        st = error_set(err, ST_INVALID, "invalid token: name and tenant must be UTF-8");
    }
    token_clear(&t);
    if (st != ST_OK) {
        json_decref(e);
        free(*token);
        *token = NULL;
        return st;
    }
    *entry = e;
    return ST_OK;
}
