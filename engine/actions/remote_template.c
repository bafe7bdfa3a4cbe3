/* engine/actions/remote_template.c — the placeholders of request templates
 * (engine/actions/remote.h): their values, their checks at load, and their
 * expansion as text (as it is, percent-encoded, XML-escaped, in a header)
 * and as JSON bodies. */
#include "engine/actions/remote_internal.h"

#include "common/jsonptr.h"

#include <stdlib.h>
#include <string.h>

#define PLACEHOLDER_MAX 256

/* ---- placeholders ---------------------------------------------------------- */

/* {{env:NAME}} is the operator's. Every other value is the run's: its input,
 * its poll state and external id (read from the remote's answers), its id
 * (chosen by the client), tenant and attempt. Only the run's values are
 * checked where they go. */
static bool placeholder_is_operators(const char *name)
{
    return strncmp(name, "env:", 4) == 0;
}

/* One placeholder's value: text and, for JSON bodies, a JSON value. On
 * ST_OK *text (when text is not NULL) is a heap string, never NULL, and
 * *json (when json is not NULL) a new reference; on failure neither is set
 * and err names the placeholder. A string with a NUL inside cannot be text:
 * C would cut it there. */
static enum status placeholder_value(const char *name, const struct remote_vars *v, char **text,
                                     json_t **json, struct error *err)
{
    json_t *j = NULL;

    if (strcmp(name, "run_id") == 0 && v->run_id) {
        j = json_string(v->run_id);
    } else if (strcmp(name, "tenant") == 0 && v->tenant) {
        j = json_string(v->tenant);
    } else if (strcmp(name, "attempt") == 0) {
        j = json_integer(v->attempt);
    } else if (strcmp(name, "external_id") == 0 && v->external_id) {
        j = json_string(v->external_id);
    } else if (strcmp(name, "input") == 0) {
        j = v->input ? json_deep_copy(v->input) : json_null();
    } else if (strncmp(name, "input:", 6) == 0) {
        const json_t *x = jptr_get(v->input, name + 6);
        if (!x)
            return error_set(err, ST_INVALID, "the run's input has no value at \"%s\"", name + 6);
        j = json_deep_copy(x);
    } else if (strncmp(name, "state:", 6) == 0) {
        const json_t *x = json_object_get(v->state, name + 6);
        if (!json_is_string(x) && !json_is_number(x))
            return error_set(err, ST_INVALID, "the run's poll state has no \"%s\"", name + 6);
        j = json_deep_copy(x);
    } else if (strncmp(name, "env:", 4) == 0) {
        const char *e = getenv(name + 4);
        if (!e)
            return error_set(err, ST_INVALID, "environment variable %s is not set", name + 4);
        j = json_string(e);
    } else {
        return error_set(err, ST_INVALID, "placeholder {{%s}} has no value here", name);
    }
    if (!j)
        abort(); /* jansson could not allocate: as xmalloc does */
    if (text && json_is_string(j) && strlen(json_string_value(j)) != json_string_length(j)) {
        json_decref(j);
        return error_set(err, ST_UNPROCESSABLE,
                         "unsafe value of {{%s}}: a NUL character is not allowed", name);
    }
    if (text) {
        *text = json_is_string(j) ? xstrdup(json_string_value(j))
                                  : json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!*text)
            abort(); /* the same: json_dumps of a valid value fails only so */
    }
    if (json)
        *json = j;
    else
        json_decref(j);
    return ST_OK;
}

static bool placeholder_known(const char *name)
{
    if (STR_IN(name, "run_id", "tenant", "attempt", "external_id", "input"))
        return true;
    if (strncmp(name, "input:", 6) == 0)
        return jptr_valid(name + 6);
    if (strncmp(name, "state:", 6) == 0)
        return name[6] != '\0';
    return strncmp(name, "env:", 4) == 0 && name[4] != '\0';
}

/* Finds the next "{{name}}" at or after s: *start and *end bracket it, name
 * gets its inside. False when there is none; an unclosed one is an error. */
static bool next_placeholder(const char *s, const char **start, const char **end, char *name,
                             bool *bad)
{
    const char *a = strstr(s, "{{"), *b;
    size_t n;

    *bad = false;
    if (!a)
        return false;
    b = strstr(a + 2, "}}");
    n = b ? (size_t)(b - a - 2) : 0;
    if (!b || n == 0 || n >= PLACEHOLDER_MAX) {
        *bad = true;
        return false;
    }
    memcpy(name, a + 2, n);
    name[n] = '\0';
    *start = a;
    *end = b + 2;
    return true;
}

const char *remote_literal_find(const char *s, const char *set)
{
    while (*s && !strchr(set, *s)) {
        const char *b = s[0] == '{' && s[1] == '{' ? strstr(s + 2, "}}") : NULL;
        s = b ? b + 2 : s + 1;
    }
    return s;
}

bool remote_template_operator_only(const char *s)
{
    const char *a, *b;
    char name[PLACEHOLDER_MAX];
    bool bad;

    for (; next_placeholder(s, &a, &b, name, &bad); s = b)
        if (!placeholder_is_operators(name))
            return false;
    return true;
}

/* Checks every placeholder of a template string; env ones must be set. */
enum status remote_check_template(const char *s, const char *path, struct error *err)
{
    const char *a, *b;
    char name[PLACEHOLDER_MAX];
    bool bad;

    while (next_placeholder(s, &a, &b, name, &bad)) {
        if (!placeholder_known(name))
            return error_set(err, ST_INVALID, "invalid \"%s\": unknown placeholder {{%s}}", path,
                             name);
        if (strncmp(name, "env:", 4) == 0 && !getenv(name + 4))
            return error_set(err, ST_INVALID, "invalid \"%s\": environment variable %s is not set",
                             path, name + 4);
        s = b;
    }
    if (bad)
        return error_set(err, ST_INVALID, "invalid \"%s\": an unterminated or empty {{...}}", path);
    return ST_OK;
}

/* Adds the values of the {{env:NAME}} placeholders of s to *out (n of
 * them), each once. */
static void env_values_of(const char *s, char ***out, size_t *n)
{
    const char *a, *b, *e;
    char name[PLACEHOLDER_MAX];
    bool bad, seen;

    for (; next_placeholder(s, &a, &b, name, &bad); s = b) {
        if (strncmp(name, "env:", 4) != 0 || !(e = getenv(name + 4)) || !*e)
            continue;
        seen = false;
        for (size_t i = 0; i < *n && !seen; i++)
            seen = strcmp((*out)[i], e) == 0;
        if (seen)
            continue;
        *out = xrealloc(*out, (*n + 1) * sizeof(**out));
        (*out)[(*n)++] = xstrdup(e);
    }
}

static void env_values_walk(const json_t *v, char ***out, size_t *n)
{
    const char *key;
    json_t *x;
    size_t i;

    if (json_is_string(v))
        env_values_of(json_string_value(v), out, n);
    else if (json_is_array(v))
        json_array_foreach(v, i, x) env_values_walk(x, out, n);
    else if (json_is_object(v))
        json_object_foreach((json_t *)v, key, x) env_values_walk(x, out, n);
}

static enum status add_encoded(struct dynbuf *buf, const char *s, int mode);

/* Adds value as mode encodes it, when that differs from the value. */
static void add_variant(char ***out, size_t *n, const char *value, int mode)
{
    struct dynbuf b;

    dynbuf_init(&b, REMOTE_EXPAND_MAX);
    if (add_encoded(&b, value, mode) == ST_OK && dynbuf_ptr(&b) && strcmp(dynbuf_ptr(&b), value)) {
        *out = xrealloc(*out, (*n + 1) * sizeof(**out));
        (*out)[(*n)++] = dynbuf_take(&b);
    }
    dynbuf_free(&b);
}

size_t remote_env_values(const json_t *v, char ***out)
{
    size_t n = 0, raw;

    *out = NULL;
    env_values_walk(v, out, &n);
    raw = n;
    for (size_t i = 0; i < raw; i++) { /* as a URL or an XML body carries them */
        add_variant(out, &n, (*out)[i], REMOTE_URL);
        add_variant(out, &n, (*out)[i], REMOTE_XML);
    }
    return n;
}

/* ---- expansion ------------------------------------------------------------- */

enum status remote_too_large(struct error *err)
{
    return error_set(err, ST_INVALID, "could not expand a template: the result exceeds %zu MiB",
                     REMOTE_EXPAND_MAX >> 20);
}

/* Whether s, split at "/" and "\", has a "." or ".." part. */
static bool has_dot_part(const char *s)
{
    for (;;) {
        size_t n = strcspn(s, "/\\");
        if ((n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
            return true;
        if (!s[n])
            return false;
        s += n + 1;
    }
}

/* Whether the UTF-8 text s holds a character XML 1.0 does not allow: a C0
 * control other than tab, line feed and carriage return, U+FFFE or U+FFFF. */
static bool has_non_xml_char(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p < 0x20 && *p != '\t' && *p != '\n' && *p != '\r')
            return true;
        if (p[0] == 0xEF && p[1] == 0xBF && (p[2] == 0xBE || p[2] == 0xBF))
            return true;
    }
    return false;
}

/* Why a value of the run may not go where mode puts it, or NULL. */
static const char *value_refused(const char *val, int mode)
{
    if ((mode == REMOTE_URL || mode == REMOTE_URL_PATH) && strpbrk(val, "\r\n"))
        return "a line break is not allowed in a URL";
    if (mode == REMOTE_URL_PATH && has_dot_part(val))
        return "\".\" and \"..\" are not allowed as path segments";
    if (mode == REMOTE_XML && has_non_xml_char(val))
        return "a control character is not allowed in XML";
    if (mode == REMOTE_HEADER) {
        for (const unsigned char *p = (const unsigned char *)val; *p; p++)
            if ((*p < 0x20 && *p != '\t') || *p == 0x7F)
                return "a control character is not allowed in a header";
    }
    return NULL;
}

static enum status add_encoded(struct dynbuf *buf, const char *s, int mode)
{
    static const char hex[] = "0123456789ABCDEF";
    enum status st = ST_OK;

    for (; *s && st == ST_OK; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        if ((mode == REMOTE_URL || mode == REMOTE_URL_PATH) && !(c >= 'A' && c <= 'Z') &&
            !(c >= 'a' && c <= 'z') && !(c >= '0' && c <= '9') && !strchr("-._~", c)) {
            esc[0] = '%', esc[1] = hex[c >> 4], esc[2] = hex[c & 15];
            st = dynbuf_add(buf, esc, 3);
        } else if (mode == REMOTE_XML && strchr("&<>\"'", c)) {
            const char *e = c == '&'   ? "&amp;"
                            : c == '<' ? "&lt;"
                            : c == '>' ? "&gt;"
                            : c == '"' ? "&quot;"
                                       : "&apos;";
            st = dynbuf_adds(buf, e);
        } else {
            st = dynbuf_add(buf, s, 1);
        }
    }
    return st;
}

enum status remote_expand_into(struct dynbuf *buf, const char *tmpl, const struct remote_vars *v,
                               int mode, bool *run_values, struct error *err)
{
    char name[PLACEHOLDER_MAX];
    const char *s = tmpl, *a, *b, *why;
    enum status st;
    bool bad;

    while (next_placeholder(s, &a, &b, name, &bad)) {
        char *val = NULL;
        if ((st = placeholder_value(name, v, &val, NULL, err)) != ST_OK)
            return st;
        why = placeholder_is_operators(name) ? NULL : value_refused(val, mode);
        if (why)
            st = error_set(err, ST_UNPROCESSABLE, "unsafe value of {{%s}}: %s", name, why);
        else if (dynbuf_add(buf, s, (size_t)(a - s)) != ST_OK ||
                 add_encoded(buf, val, mode) != ST_OK)
            st = remote_too_large(err);
        free(val);
        if (st != ST_OK)
            return st;
        if (run_values && !placeholder_is_operators(name))
            *run_values = true;
        s = b;
    }
    if (bad)
        return error_set(err, ST_INVALID,
                         "could not expand a template: an unterminated or empty "
                         "{{...}}");
    return dynbuf_adds(buf, s) == ST_OK ? ST_OK : remote_too_large(err);
}

enum status remote_expand_text(const char *tmpl, const struct remote_vars *v, int mode, char **out,
                               struct error *err)
{
    struct dynbuf buf;
    enum status st;

    *out = NULL;
    dynbuf_init(&buf, REMOTE_EXPAND_MAX);
    st = remote_expand_into(&buf, tmpl, v, mode, NULL, err);
    if (st == ST_OK)
        *out = dynbuf_take(&buf);
    dynbuf_free(&buf);
    return st;
}

/* ---- JSON ------------------------------------------------------------------ */

enum status remote_expand_json(const json_t *tmpl, const struct remote_vars *v, json_t **out,
                               struct error *err)
{
    enum status st = ST_OK;
    const char *key, *a, *b;
    char name[PLACEHOLDER_MAX];
    json_t *x, *r;
    size_t i;
    bool bad;

    *out = NULL;
    if (json_is_string(tmpl)) {
        const char *s = json_string_value(tmpl);
        char *text = NULL;
        if (next_placeholder(s, &a, &b, name, &bad) && a == s && *b == '\0')
            return placeholder_value(name, v, NULL, out, err);
        st = remote_expand_text(s, v, REMOTE_RAW, &text, err);
        if (st == ST_OK)
            *out = json_string(text);
        free(text);
        return st;
    }
    if (json_is_object(tmpl)) {
        r = json_object();
        json_object_foreach((json_t *)tmpl, key, x)
        {
            json_t *e;
            if ((st = remote_expand_json(x, v, &e, err)) != ST_OK)
                break;
            json_object_set_new(r, key, e);
        }
    } else if (json_is_array(tmpl)) {
        r = json_array();
        json_array_foreach(tmpl, i, x)
        {
            json_t *e;
            if ((st = remote_expand_json(x, v, &e, err)) != ST_OK)
                break;
            json_array_append_new(r, e);
        }
    } else {
        r = json_deep_copy(tmpl);
    }
    if (st != ST_OK)
        json_decref(r);
    else
        *out = r;
    return st;
}

struct remote_vars remote_vars_of(const struct run_ctx *rc)
{
    return (struct remote_vars){
        .run_id = rc->run->id,
        .tenant = rc->run->tenant,
        .external_id = rc->external_id,
        .attempt = rc->run->attempt,
        .input = run_input(rc->run),
        .state = rc->poll_state,
    };
}
