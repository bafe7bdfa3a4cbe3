/* config/option.c — the machinery of an option table (config_internal.h):
 * looking options up, storing defaults, parsing values from JSON or from
 * text with their bounds, and printing one as the file would have it (a
 * connection string with its secrets masked); the checks of names and
 * listen addresses; and the loading of an object of named definitions,
 * which every section of named things shares. It calls only errors.c. */
#include "config/config_internal.h"

#include "common/dynbuf.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* By JSON path, or by flag name ("workers"), for cfg_set. */
const struct opt *opt_find(const struct opt *tab, size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(tab[i].key, key) == 0 || (tab[i].flag && strcmp(tab[i].flag, key) == 0))
            return &tab[i];
    return NULL;
}

/* How an error names an option: OPSRUN_WORKERS, --workers, or "queue.workers". */
void opt_label(char *buf, size_t n, const struct opt *o, enum cfg_source src)
{
    if (src == CFG_SRC_ENV && o->env)
        xsnprintf(buf, n, "%s", o->env);
    else if (src == CFG_SRC_FLAG && o->flag)
        xsnprintf(buf, n, "--%s", o->flag);
    else
        xsnprintf(buf, n, "\"%s\"", o->key);
}

void *opt_field(void *base, const struct opt *o)
{
    return (char *)base + o->off;
}

static void opt_store_int(void *base, const struct opt *o, int64_t v)
{
    if (o->type == OPT_INT)
        *(int *)opt_field(base, o) = (int)v;
    else
        *(int64_t *)opt_field(base, o) = v;
}

void opt_store_str(void *base, const struct opt *o, const char *s)
{
    char **field = opt_field(base, o);
    free(*field);
    *field = s ? xstrdup(s) : NULL;
}

void opt_set_default(void *base, const struct opt *o)
{
    switch (o->type) {
    case OPT_STR:
        opt_store_str(base, o, o->def_str);
        break;
    case OPT_INT:
    case OPT_I64:
        opt_store_int(base, o, o->def);
        break;
    case OPT_BOOL:
        *(bool *)opt_field(base, o) = o->def != 0;
        break;
    case OPT_LEVEL:
        *(enum log_level *)opt_field(base, o) = (enum log_level)o->def;
        break;
    }
}

void opt_copy(void *dst, const void *src, const struct opt *o)
{
    const void *from = (const char *)src + o->off;

    switch (o->type) {
    case OPT_STR:
        opt_store_str(dst, o, *(char *const *)from);
        break;
    case OPT_INT:
        *(int *)opt_field(dst, o) = *(const int *)from;
        break;
    case OPT_I64:
        *(int64_t *)opt_field(dst, o) = *(const int64_t *)from;
        break;
    case OPT_BOOL:
        *(bool *)opt_field(dst, o) = *(const bool *)from;
        break;
    case OPT_LEVEL:
        *(enum log_level *)opt_field(dst, o) = *(const enum log_level *)from;
        break;
    }
}

static enum status expected(const char *label, const char *what, struct error *err)
{
    return error_set(err, ST_INVALID, "invalid %s: expected %s", label, what);
}

static enum status opt_put_int(void *base, const struct opt *o, int64_t v, const char *label,
                               struct error *err)
{
    const char *also = (o->flags & OPT_NULL) ? "null or " : (o->flags & OPT_ZERO) ? "0 or " : "";

    if ((v < o->min || v > o->max) && !(v == 0 && (o->flags & OPT_ZERO)))
        return error_set(err, ST_INVALID, "invalid %s: must be %sbetween %lld and %lld", label,
                         also, (long long)o->min, (long long)o->max);
    opt_store_int(base, o, v);
    return ST_OK;
}

static enum status opt_put_str(void *base, const struct opt *o, const char *s, const char *label,
                               struct error *err)
{
    enum status st;

    if (!s && !(o->flags & OPT_NULL))
        return expected(label, "a string", err);
    if (s && o->check && (st = o->check(label, s, err)) != ST_OK)
        return st;
    opt_store_str(base, o, s);
    return ST_OK;
}

static enum status opt_put_level(void *base, const struct opt *o, const char *s, const char *label,
                                 struct error *err)
{
    if (!log_level_parse(s, (enum log_level *)opt_field(base, o)))
        return expected(label, "\"debug\", \"info\", \"warn\" or \"error\"", err);
    return ST_OK;
}

enum status opt_from_json(void *base, const struct opt *o, const json_t *v, const char *label,
                          struct error *err)
{
    bool null_ok = json_is_null(v) && (o->flags & OPT_NULL);

    switch (o->type) {
    case OPT_STR:
        if (!null_ok && !json_is_string(v))
            return expected(label, "a string", err);
        return opt_put_str(base, o, json_string_value(v), label, err);
    case OPT_INT:
    case OPT_I64:
        if (null_ok) {
            opt_store_int(base, o, 0);
            return ST_OK;
        }
        if (!json_is_integer(v))
            return expected(label, "an integer", err);
        return opt_put_int(base, o, (int64_t)json_integer_value(v), label, err);
    case OPT_BOOL:
        if (!json_is_boolean(v))
            return expected(label, "a boolean", err);
        *(bool *)opt_field(base, o) = json_is_true(v);
        return ST_OK;
    case OPT_LEVEL:
        if (!json_is_string(v))
            return expected(label, "a string", err);
        return opt_put_level(base, o, json_string_value(v), label, err);
    }
    return ST_INTERNAL;
}

/* Decimal integers only; values past int64 clamp, so the bounds check fails. */
static bool parse_i64(const char *s, int64_t *out)
{
    char *end;
    const char *d = (*s == '-' || *s == '+') ? s + 1 : s;

    if (*d < '0' || *d > '9')
        return false;
    *out = (int64_t)strtoll(s, &end, 10);
    return *end == '\0';
}

static bool parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"true", "1", "yes", "on"};
    static const char *const no[] = {"false", "0", "no", "off"};

    for (size_t i = 0; i < ARRAY_LEN(yes); i++) {
        if (strcmp(s, yes[i]) == 0 || strcmp(s, no[i]) == 0) {
            *out = strcmp(s, yes[i]) == 0;
            return true;
        }
    }
    return false;
}

/* s is a flag's or variable's text; NULL clears a nullable string. */
enum status opt_from_text(void *base, const struct opt *o, const char *s, const char *label,
                          struct error *err)
{
    int64_t v;

    if (!s && !(o->flags & OPT_NULL))
        return expected(label, "a value", err);
    if (!s && o->type != OPT_STR) {
        opt_store_int(base, o, 0);
        return ST_OK;
    }
    if (o->type == OPT_STR)
        return opt_put_str(base, o, s, label, err);
    switch (o->type) {
    case OPT_INT:
    case OPT_I64:
        if (!parse_i64(s, &v))
            return expected(label, "an integer", err);
        return opt_put_int(base, o, v, label, err);
    case OPT_BOOL:
        if (!parse_bool(s, (bool *)opt_field(base, o)))
            return expected(label, "true or false", err);
        return ST_OK;
    case OPT_LEVEL:
        return opt_put_level(base, o, s, label, err);
    case OPT_STR:
        break;
    }
    return ST_INTERNAL;
}

/* ---- value checks ---- */

bool name_valid(const char *s)
{
    size_t n = strlen(s);

    if (n == 0 || n > NAME_MAX_LEN)
        return false;
    for (; *s; s++) {
        char c = *s;
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return false;
    }
    return true;
}

enum status name_error(const char *label, struct error *err)
{
    return error_set(err, ST_INVALID,
                     "invalid %s: must be 1 to 64 characters of A-Z, a-z, 0-9, \"_\", \".\" "
                     "or \"-\"",
                     label);
}

enum status check_log_format(const char *label, const char *value, struct error *err)
{
    bool json;

    if (!log_format_parse(value, &json))
        return error_set(err, ST_INVALID, "invalid %s: expected \"json\" or \"text\", got \"%s\"",
                         label, value);
    return ST_OK;
}

enum status check_name(const char *label, const char *value, struct error *err)
{
    return name_valid(value) ? ST_OK : name_error(label, err);
}

static bool port_valid(const char *s)
{
    size_t n = strspn(s, "0123456789");
    long port;

    if (n == 0 || n > 5 || s[n] != '\0')
        return false;
    port = strtol(s, NULL, 10);
    return port >= 1 && port <= 65535;
}

static bool host_valid(const char *host, size_t len, bool bracketed)
{
    char buf[64];
    unsigned char addr[16];

    if (len == 0 || len >= sizeof(buf))
        return false;
    memcpy(buf, host, len);
    buf[len] = '\0';
    if (bracketed)
        return inet_pton(AF_INET6, buf, addr) == 1;
    return strcmp(buf, "localhost") == 0 || inet_pton(AF_INET, buf, addr) == 1;
}

/* HOST:PORT, where HOST is an IPv4 literal, "localhost" or "[IPv6]". */
enum status check_listen(const char *label, const char *value, struct error *err)
{
    const char *host = value, *colon;
    bool bracketed = value[0] == '[';

    if (bracketed) {
        const char *close = strchr(value, ']');
        colon = close && close[1] == ':' ? close + 1 : NULL;
        host = value + 1;
    } else {
        colon = strrchr(value, ':');
    }
    if (!colon)
        return error_set(err, ST_INVALID, "invalid %s: expected HOST:PORT, got \"%s\"", label,
                         value);
    if (!port_valid(colon + 1))
        return error_set(err, ST_INVALID, "invalid %s: port must be between 1 and 65535", label);
    if (!host_valid(host, (size_t)(colon - host) - (bracketed ? 1u : 0u), bracketed))
        return error_set(err, ST_INVALID,
                         "invalid %s: host must be an IPv4 address, localhost or [IPv6 address]",
                         label);
    return ST_OK;
}

/* ---- an option as the file would have it ---- */

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

/* ---- objects of named definitions ---- */

void load_named(struct config *cfg, const char *what, const json_t *v,
                void (*load)(struct config *, const char *, const json_t *, const char *,
                             struct cfg_errors *),
                void (*remove)(struct config *, const char *), struct cfg_errors *errs)
{
    char path[KEY_MAX + NAME_MAX_LEN];
    const char *name;
    json_t *def;

    if (!json_is_object(v)) {
        (void)cfg_errors_addf(errs, "invalid \"%s\": expected an object", what);
        return;
    }
    json_object_foreach((json_t *)v, name, def)
    {
        xsnprintf(path, sizeof(path), "%s.%s", what, name);
        if (!name_valid(name)) {
            char label[sizeof(path) + 2];
            struct error one = {0};
            xsnprintf(label, sizeof(label), "\"%s\"", path);
            (void)cfg_errors_note(errs, name_error(label, &one), &one);
        } else if (json_is_null(def)) {
            remove(cfg, name);
        } else if (!json_is_object(def)) {
            (void)cfg_errors_addf(errs, "invalid \"%s\": expected an object", path);
        } else {
            load(cfg, name, def, path, errs);
        }
    }
}
