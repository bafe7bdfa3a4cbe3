/* config/cors.c — http.cors_origins: the origins whose pages may call the
 * API from another origin (docs/api.md, "Browsers: CORS"). Read-only once
 * loaded, so cfg_cors_allowed is safe from any thread. */
#include "config/config_internal.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Cap on the list: every request's Origin is compared with each entry. */
#define CORS_ORIGINS_MAX 64
/* An origin is scheme "://" host [":" port]: well under a URL's usual cap. */
#define CORS_ORIGIN_MAX 255

void cors_origins_free(char **origins, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(origins[i]);
    free(origins);
}

/* The host of an origin: a DNS name, an IPv4 literal or a bracketed IPv6
 * literal; then an optional port of 1 to 5 digits. */
static bool cors_host_port_valid(const char *s)
{
    size_t n;

    if (*s == '[') {
        n = strspn(s + 1, "0123456789abcdefABCDEF:.");
        if (n == 0 || s[n + 1] != ']')
            return false;
        s += n + 2;
    } else {
        n = strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-.");
        if (n == 0)
            return false;
        s += n;
    }
    if (*s == '\0')
        return true;
    if (*s++ != ':')
        return false;
    n = strspn(s, "0123456789");
    return n >= 1 && n <= 5 && s[n] == '\0';
}

/* "*" or an origin as a browser sends it: http or https, a host, an
 * optional port, and nothing after it (not even "/"). */
static enum status cors_origin_check(const char *s, const char *label, struct error *err)
{
    const char *rest;

    if (strcmp(s, "*") == 0)
        return ST_OK;
    if (strncasecmp(s, "http://", 7) == 0)
        rest = s + 7;
    else if (strncasecmp(s, "https://", 8) == 0)
        rest = s + 8;
    else
        return error_set(err, ST_INVALID,
                         "invalid %s: \"%.100s\" is not an origin (expected \"*\" or "
                         "http[s]://HOST[:PORT])",
                         label, s);
    if (strlen(s) > CORS_ORIGIN_MAX || !cors_host_port_valid(rest))
        return error_set(err, ST_INVALID,
                         "invalid %s: \"%.100s\" is not an origin (expected http[s]://HOST[:PORT], "
                         "no path)",
                         label, s);
    return ST_OK;
}

enum status load_cors_origins(struct config *cfg, const json_t *v, struct error *err)
{
    char label[KEY_MAX];
    char **origins;
    size_t n = json_array_size(v), i;
    enum status st = ST_OK;

    if (!json_is_array(v))
        return error_set(err, ST_INVALID,
                         "invalid \"http.cors_origins\": expected an array of origins");
    if (n > CORS_ORIGINS_MAX)
        return error_set(err, ST_INVALID, "invalid \"http.cors_origins\": more than %d origins",
                         CORS_ORIGINS_MAX);
    origins = xcalloc(n ? n : 1, sizeof(*origins));
    for (i = 0; i < n && st == ST_OK; i++) {
        const char *s = json_string_value(json_array_get(v, i));
        xsnprintf(label, sizeof(label), "\"http.cors_origins[%zu]\"", i);
        if (!s)
            st = error_set(err, ST_INVALID, "invalid %s: expected a string", label);
        else if ((st = cors_origin_check(s, label, err)) == ST_OK)
            origins[i] = xstrdup(s);
    }
    if (st != ST_OK) {
        cors_origins_free(origins, n);
        return st;
    }
    cors_origins_free(cfg->http.cors_origins, cfg->http.ncors_origins);
    cfg->http.cors_origins = origins;
    cfg->http.ncors_origins = n;
    return ST_OK;
}

json_t *cors_origins_to_json(const struct config *cfg)
{
    json_t *a = json_array();

    for (size_t i = 0; a && i < cfg->http.ncors_origins; i++)
        if (json_array_append_new(a, json_string(cfg->http.cors_origins[i])) != 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

/* Scheme and host compare without regard to case (RFC 6454 serializes
 * them in lower case, a configuration may not); the port exactly. An
 * allowed origin is echoed in a header, so only one of an origin's shape
 * is allowed, even under "*": never "null" (sandboxed and file: pages),
 * never one with characters a header cannot hold. */
bool cfg_cors_allowed(const struct config *cfg, const char *origin)
{
    if (cfg->http.ncors_origins == 0 || !origin || strcmp(origin, "*") == 0 ||
        cors_origin_check(origin, "Origin", NULL) != ST_OK)
        return false;
    for (size_t i = 0; i < cfg->http.ncors_origins; i++) {
        const char *o = cfg->http.cors_origins[i];
        if (strcmp(o, "*") == 0 || strcasecmp(o, origin) == 0)
            return true;
    }
    return false;
}
