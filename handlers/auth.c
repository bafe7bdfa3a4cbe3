/* handlers/auth.c — see auth.h. */
#include "handlers/auth.h"

#include "common/digest.h"

#include <string.h>
#include <strings.h>

#define CHALLENGE_NONE "Bearer realm=\"opsrun\""
#define CHALLENGE_INVALID "Bearer realm=\"opsrun\", error=\"invalid_token\""
#define CHALLENGE_SCOPE "Bearer realm=\"opsrun\", error=\"insufficient_scope\""
#define CHALLENGE_REQUEST "Bearer realm=\"opsrun\", error=\"invalid_request\""

static bool token68_char(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_' || c == '~' || c == '+' || c == '/';
}

bool auth_token68(const char *s, size_t n)
{
    size_t i = 0;

    if (n == 0 || n > AUTH_TOKEN_MAX)
        return false;
    while (i < n && token68_char(s[i]))
        i++;
    if (i == 0)
        return false;
    while (i < n && s[i] == '=')
        i++;
    return i == n;
}

enum status auth_parse_header(const char *header, const char **token, size_t *len,
                              struct error *err)
{
    const char *p = header;
    size_t n;

    *token = NULL;
    *len = 0;
    if (strncasecmp(p, "Bearer", 6) != 0 || (p[6] != ' ' && p[6] != '\t'))
        return error_set(err, ST_UNAUTHORIZED,
                         "could not read the Authorization header: expected \"Bearer <token>\"");
    p += 6;
    p += strspn(p, " \t");
    n = strcspn(p, " \t");
    if (p[n + strspn(p + n, " \t")] != '\0' || !auth_token68(p, n))
        return error_set(err, ST_UNAUTHORIZED,
                         "could not read the Authorization header: the token must be 1 to %d "
                         "characters of A-Z, a-z, 0-9, \"-._~+/\", then any \"=\"",
                         AUTH_TOKEN_MAX);
    *token = p;
    *len = n;
    return ST_OK;
}

/* Every entry is compared; the match is selected with a mask, not a
 * branch, so neither the position of the match nor the length of a common
 * prefix shows in the time taken. */
const struct auth_token *auth_find(const struct config *cfg, const char *token, size_t len)
{
    unsigned char md[32];
    struct sha256 s;
    size_t match = 0; /* the index of the match + 1, 0 for none */

    sha256_init(&s);
    sha256_update(&s, token, len);
    sha256_final(&s, md);
    for (size_t i = 0; i < cfg->auth.ntokens; i++) {
        size_t mask = (size_t)0 - (size_t)ct_equal(md, cfg->auth.tokens[i].sha256, 32);
        match = (match & ~mask) | ((i + 1) & mask);
    }
    return match ? &cfg->auth.tokens[match - 1] : NULL;
}

/* The token the request presents, from exactly one of the two places. */
static enum status auth_credential(const struct auth_request *ar, const char **token, size_t *len,
                                   struct principal *out, struct error *err)
{
    bool query = ar->access_token && *ar->access_token;

    out->challenge = CHALLENGE_NONE;
    if (ar->authorization && query) {
        out->challenge = CHALLENGE_REQUEST;
        return error_set(err, ST_INVALID,
                         "send the token in the Authorization header or as access_token, not "
                         "both");
    }
    if (query && !ar->stream)
        return error_set(err, ST_UNAUTHORIZED,
                         "access_token is accepted only on event streams; send the token in an "
                         "Authorization header: \"Bearer <token>\"");
    if (query) {
        *token = ar->access_token;
        *len = strlen(*token);
        if (auth_token68(*token, *len))
            return ST_OK;
        out->challenge = CHALLENGE_INVALID;
        return error_set(err, ST_UNAUTHORIZED, "unknown token");
    }
    if (!ar->authorization)
        return error_set(err, ST_UNAUTHORIZED,
                         "this resource needs a token: send \"Authorization: Bearer <token>\"");
    out->challenge = CHALLENGE_INVALID;
    return auth_parse_header(ar->authorization, token, len, err);
}

static unsigned need_scope(enum auth_need need)
{
    switch (need) {
    case NEED_SUBMIT:
        return SCOPE_SUBMIT;
    case NEED_READ:
        return SCOPE_READ;
    case NEED_CANCEL:
        return SCOPE_CANCEL;
    case NEED_HEALTH:
        return SCOPE_HEALTH;
    case NEED_APPROVE:
        return SCOPE_APPROVE;
    case NEED_ADMIN:
        return SCOPE_ADMIN;
    case NEED_OPEN:
    case NEED_TOKEN:
        break;
    }
    return 0;
}

/* ?tenant=: any tenant for an admin token, only its own for the others. */
static enum status auth_tenant(const struct auth_request *ar, bool admin, struct principal *out,
                               struct error *err)
{
    size_t n = ar->tenant ? strlen(ar->tenant) : 0;

    out->all_tenants = admin && !ar->tenant;
    if (!ar->tenant)
        return ST_OK;
    if (n == 0 || n > 64 ||
        strspn(ar->tenant, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                           "0123456789_.-") != n)
        return error_field(err, ST_INVALID, "tenant",
                           "must be 1 to 64 characters of A-Z, a-z, 0-9, \"_\", \".\" or \"-\"");
    if (admin) {
        out->tenant = ar->tenant;
        return ST_OK;
    }
    if (strcmp(ar->tenant, out->tenant) == 0)
        return ST_OK;
    return error_set(err, ST_FORBIDDEN, "only an admin token may name another tenant");
}

static enum status auth_scope(const struct auth_token *t, enum auth_need need,
                              struct principal *out, struct error *err)
{
    unsigned want = need_scope(need);

    if (want == 0 || (t->scopes & (want | SCOPE_ADMIN)))
        return ST_OK;
    out->challenge = CHALLENGE_SCOPE;
    return error_set(err, ST_FORBIDDEN, "token \"%s\" lacks the scope \"%s\"", t->name,
                     cfg_scope_name(want));
}

enum status auth_decide(const struct config *cfg, const struct auth_request *ar,
                        struct principal *out, struct error *err)
{
    const struct auth_token *t;
    const char *token = NULL;
    size_t len = 0;
    enum status st;

    *out = (struct principal){.name = "anonymous", .tenant = cfg->tenant_default};
    if (ar->need == NEED_OPEN || (ar->need == NEED_HEALTH && cfg->auth.open_health))
        return ST_OK;
    if (cfg->auth.ntokens == 0)
        return auth_tenant(ar, false, out, err);
    st = auth_credential(ar, &token, &len, out, err);
    if (st != ST_OK)
        return st;
    t = auth_find(cfg, token, len);
    if (!t) {
        out->challenge = CHALLENGE_INVALID;
        return error_set(err, ST_UNAUTHORIZED, "unknown token");
    }
    *out = (struct principal){.token = t, .name = t->name, .tenant = t->tenant};
    st = auth_scope(t, ar->need, out, err);
    if (st == ST_OK)
        st = auth_tenant(ar, (t->scopes & SCOPE_ADMIN) != 0, out, err);
    if (st == ST_FORBIDDEN && !out->challenge)
        out->challenge = CHALLENGE_SCOPE;
    return st;
}

bool auth_grant_of(const struct principal *who, struct auth_grant *g)
{
    *g = (struct auth_grant){.all_tenants = who->all_tenants};
    if (!who->token)
        return false;
    memcpy(g->sha256, who->token->sha256, sizeof(g->sha256));
    xsnprintf(g->name, sizeof(g->name), "%s", who->token->name);
    xsnprintf(g->tenant, sizeof(g->tenant), "%s", who->tenant ? who->tenant : "");
    return true;
}

/* A stream's token is looked up by its digest, as a request's is: a token
 * renamed with the same secret still opens the same streams. */
bool auth_grant_holds(const struct config *cfg, const struct auth_grant *g)
{
    const struct auth_token *t = NULL;

    for (size_t i = 0; i < cfg->auth.ntokens; i++)
        if (ct_equal(g->sha256, cfg->auth.tokens[i].sha256, 32))
            t = &cfg->auth.tokens[i];
    if (!t || !(t->scopes & (SCOPE_READ | SCOPE_ADMIN)))
        return false;
    if (t->scopes & SCOPE_ADMIN)
        return true;
    return !g->all_tenants && strcmp(t->tenant, g->tenant) == 0;
}
