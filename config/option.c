/* config/option.c — the machinery of an option table (config_internal.h):
 * looking options up, storing defaults, and parsing values from JSON or from
 * text with their bounds, plus the checks of names and listen addresses. */
#include "config/config_internal.h"

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
