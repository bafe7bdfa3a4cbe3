/* handlers/auth.h — who a request is and what it may do: the bearer token
 * (Authorization header, or ?access_token= on event streams) checked
 * against auth.tokens, the scope a route needs, and the tenant the request
 * works in. Pure functions of the configuration and the request's text: no
 * I/O, reentrant, nothing allocated. The server calls auth_decide before
 * it reads a request's body, and answers a failure itself.
 *
 * The configuration holds only the SHA-256 of each token. A presented
 * token is hashed once and its digest compared with every configured digest
 * in constant time, without stopping at a match, so the time taken tells
 * nothing about which entry, or which prefix, came close. */
#ifndef OPSRUN_HANDLERS_AUTH_H
#define OPSRUN_HANDLERS_AUTH_H

#include "common/common.h"
#include "config/config.h"

/* The longest token accepted; ours are 50 characters. */
#define AUTH_TOKEN_MAX 512

/* What a route needs. */
enum auth_need {
    NEED_OPEN,    /* /livez, /readyz: never a token */
    NEED_TOKEN,   /* any valid token: a path or method that does not exist */
    NEED_SUBMIT,  /* POST /alerts */
    NEED_READ,    /* runs, events, streams, long-polls */
    NEED_CANCEL,  /* POST /runs/{id}/cancel, retry, the bulk cancel and retry */
    NEED_HEALTH,  /* /healthz: open when auth.open_health, else health or admin */
    NEED_APPROVE, /* POST /runs/{id}/approve and /reject */
    NEED_ADMIN,   /* POST /admin/reload */
};

/* What the request carries; NULL for what is absent. */
struct auth_request {
    enum auth_need need;
    const char *authorization; /* the Authorization header's value */
    const char *access_token;  /* the access_token query parameter */
    bool stream;               /* an event stream: access_token is accepted */
    const char *tenant;        /* the tenant query parameter */
};

/* Who the request is. Strings are borrowed from the configuration. */
struct principal {
    const struct auth_token *token; /* NULL without one */
    const char *name;               /* the token's name, or "anonymous" */
    const char *tenant;             /* the tenant it works in */
    bool all_tenants;               /* an admin token without ?tenant=: reads reach every tenant */
    /* On failure: the WWW-Authenticate value to send with the problem
     * (RFC 6750: the bare challenge, or one naming invalid_token or
     * insufficient_scope). */
    const char *challenge;
};

/* Decides one request. With no auth.tokens every request is "anonymous"
 * in tenant_default and may do anything but reach another tenant.
 * Otherwise: ST_UNAUTHORIZED (no token, a malformed one, an unknown one,
 * or access_token off a stream), ST_FORBIDDEN (the token lacks the scope,
 * or names another tenant without admin), ST_INVALID (both an
 * Authorization header and access_token, or a malformed ?tenant=). err
 * says which, without ever quoting the token. */
enum status auth_decide(const struct config *cfg, const struct auth_request *ar,
                        struct principal *out, struct error *err) WUR;

/* What a request's token was allowed to read when an event stream opened,
 * kept by the stream (which outlives the request and its configuration) to
 * ask again after a reload. */
struct auth_grant {
    unsigned char sha256[32]; /* the token's digest: what identifies it */
    char name[65];            /* its name then, for messages */
    char tenant[65];          /* the tenant the stream reads ... */
    bool all_tenants;         /* ... or every tenant (an admin token without ?tenant=) */
};

/* Fills g from who, a request auth_decide accepted for a read; false when
 * who has no token (no auth.tokens): such a stream has nothing to check. */
bool auth_grant_of(const struct principal *who, struct auth_grant *g);
/* Whether cfg still lets g's token read what it read: a token with g's
 * digest is configured, has the read or admin scope, and is of g's tenant
 * or an admin (every tenant: an admin). That is, whether the request that
 * opened the stream would be accepted again. */
bool auth_grant_holds(const struct config *cfg, const struct auth_grant *g);

/* ---- the parts, exposed for unit tests and the fuzz driver ---- */

/* The value of an Authorization header: "Bearer" in any case, one or more
 * spaces, then a token68 (RFC 7235: A-Z a-z 0-9 - . _ ~ + /, then "="s) of
 * at most AUTH_TOKEN_MAX characters, then optional spaces. On ST_OK *token
 * and *len point into header; ST_UNAUTHORIZED otherwise. */
enum status auth_parse_header(const char *header, const char **token, size_t *len,
                              struct error *err) WUR;
/* Whether the n characters at s are a token68 of at most AUTH_TOKEN_MAX. */
bool auth_token68(const char *s, size_t n);
/* The entry of auth.tokens whose digest is the SHA-256 of the len bytes at
 * token; NULL when none. Takes the same time whichever entry matches. */
const struct auth_token *auth_find(const struct config *cfg, const char *token, size_t len);

#endif
