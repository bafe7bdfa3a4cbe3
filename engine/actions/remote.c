/* engine/actions/remote.c — request templates, secrets and the libcurl call
 * for the remote actions (engine/actions/remote.h). */
#include "engine/actions/remote.h"

#include "engine/actions/action.h"

#include "common/dynbuf.h"
#include "common/jsonptr.h"
#include "common/log.h"

#include <curl/curl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define PLACEHOLDER_MAX 256
/* The longest expanded template: 512 MiB. It holds {{input}} of the
 * largest input the server accepts (64 MiB, the bound of
 * http.max_body_bytes) even with every byte XML-escaped (six times as
 * long); only a template that repeats large placeholders reaches it. */
#define EXPAND_MAX ((size_t)512 << 20)

/* ---- placeholders ---------------------------------------------------------- */

/* Where a value goes, besides the modes of remote.h: one segment of a URL's
 * path. Percent-encoded like REMOTE_URL, and refused when the value has a
 * "." or ".." segment of its own, for servers that decode %2F before they
 * route. */
#define URL_PATH 16

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

/* The first character of set in s outside any {{...}}, or the end of s. */
static const char *literal_find(const char *s, const char *set)
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

/* ---- expansion ------------------------------------------------------------- */

static enum status too_large(struct error *err)
{
    return error_set(err, ST_INVALID, "could not expand a template: the result exceeds %zu MiB",
                     EXPAND_MAX >> 20);
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
    if ((mode == REMOTE_URL || mode == URL_PATH) && strpbrk(val, "\r\n"))
        return "a line break is not allowed in a URL";
    if (mode == URL_PATH && has_dot_part(val))
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
        if ((mode == REMOTE_URL || mode == URL_PATH) && !(c >= 'A' && c <= 'Z') &&
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

/* Appends tmpl expanded as mode says. *run_values (may be NULL) turns true
 * when a placeholder took a value of the run. */
static enum status expand(struct dynbuf *buf, const char *tmpl, const struct remote_vars *v,
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
            st = too_large(err);
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
    return dynbuf_adds(buf, s) == ST_OK ? ST_OK : too_large(err);
}

enum status remote_expand_text(const char *tmpl, const struct remote_vars *v, int mode, char **out,
                               struct error *err)
{
    struct dynbuf buf;
    enum status st;

    *out = NULL;
    dynbuf_init(&buf, EXPAND_MAX);
    st = expand(&buf, tmpl, v, mode, NULL, err);
    if (st == ST_OK)
        *out = dynbuf_take(&buf);
    dynbuf_free(&buf);
    return st;
}

/* ---- URLs ------------------------------------------------------------------ */

/* The length of a URL template's scheme and authority: up to the first "/",
 * "?" or "#" after "://", outside placeholders (from the start when the
 * template begins with a placeholder instead of a scheme). */
static size_t url_origin_len(const char *tmpl)
{
    const char *p = literal_find(tmpl, "/?#");

    if (p > tmpl && p[-1] == ':' && p[0] == '/' && p[1] == '/')
        p = literal_find(p + 2, "/?#");
    return (size_t)(p - tmpl);
}

/* Appends "/" and one path segment (n bytes of seg, without its slash). A
 * segment that the run's values made "." or "..", or left empty, is
 * refused: libcurl would remove a dot segment together with the one before
 * it, and an empty one names the collection instead of one of its items. */
static enum status add_segment(struct dynbuf *buf, const char *seg, size_t n,
                               const struct remote_vars *v, struct error *err)
{
    char *t = xstrndup(seg, n);
    bool run_values = false;
    size_t at;
    enum status st;

    if (dynbuf_add(buf, "/", 1) != ST_OK) {
        free(t);
        return too_large(err);
    }
    at = dynbuf_len(buf);
    st = expand(buf, t, v, URL_PATH, &run_values, err);
    if (st == ST_OK && run_values) {
        const char *out = dynbuf_ptr(buf) + at;
        if (strcmp(out, ".") == 0 || strcmp(out, "..") == 0)
            st = error_set(err, ST_UNPROCESSABLE,
                           "unsafe value in the URL path segment \"%.100s\": it makes the "
                           "segment \"%s\"",
                           t, out);
        else if (*out == '\0')
            st = error_set(err, ST_UNPROCESSABLE,
                           "unsafe value in the URL path segment \"%.100s\": it leaves the "
                           "segment empty",
                           t);
    }
    free(t);
    return st;
}

bool remote_same_authority(const char *origin, const char *url)
{
    static const CURLUPart parts[] = {CURLUPART_SCHEME,  CURLUPART_USER, CURLUPART_PASSWORD,
                                      CURLUPART_OPTIONS, CURLUPART_HOST, CURLUPART_ZONEID,
                                      CURLUPART_PORT};
    const unsigned flags = CURLU_GUESS_SCHEME | CURLU_NON_SUPPORT_SCHEME;
    CURLU *a = curl_url(), *b = curl_url();
    bool same = true;

    if (!a || !b)
        abort();
    if (curl_url_set(b, CURLUPART_URL, url, flags) != CURLUE_OK)
        goto out;
    if (curl_url_set(a, CURLUPART_URL, origin, flags) != CURLUE_OK) {
        same = false;
        goto out;
    }
    for (size_t i = 0; i < ARRAY_LEN(parts) && same; i++) {
        char *x = NULL, *y = NULL;
        (void)curl_url_get(a, parts[i], &x, CURLU_DEFAULT_PORT);
        (void)curl_url_get(b, parts[i], &y, CURLU_DEFAULT_PORT);
        same = (!x && !y) || (x && y && strcmp(x, y) == 0);
        curl_free(x);
        curl_free(y);
    }
out:
    curl_url_cleanup(a);
    curl_url_cleanup(b);
    return same;
}

enum status remote_expand_url(const char *tmpl, const struct remote_vars *v, char **out,
                              struct error *err)
{
    size_t olen = url_origin_len(tmpl), at;
    const char *seg = tmpl + olen, *query = literal_find(seg, "?#");
    char *origin = xstrndup(tmpl, olen);
    struct dynbuf buf;
    enum status st = ST_OK;

    *out = NULL;
    dynbuf_init(&buf, EXPAND_MAX);
    if (!remote_template_operator_only(origin))
        st = error_set(err, ST_INVALID,
                       "could not expand the URL: only {{env:...}} placeholders may stand before "
                       "its path");
    if (st == ST_OK)
        st = expand(&buf, origin, v, REMOTE_RAW, NULL, err);
    at = dynbuf_len(&buf);
    while (st == ST_OK && seg < query) {
        const char *end = literal_find(seg + 1, "/?#");
        st = add_segment(&buf, seg + 1, (size_t)(end - seg - 1), v, err);
        seg = end;
    }
    if (st == ST_OK)
        st = expand(&buf, query, v, REMOTE_URL, NULL, err);
    free(origin);
    if (st == ST_OK) {
        const char *url = dynbuf_ptr(&buf) ? dynbuf_ptr(&buf) : "";
        origin = xstrndup(url, at);
        if (!remote_same_authority(origin, url))
            st = error_set(err, ST_UNPROCESSABLE,
                           "unsafe value in the URL: it would change the scheme, host or port");
        free(origin);
    }
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

/* ---- request descriptions -------------------------------------------------- */

/* Every string inside a JSON template. */
static enum status check_json_template(const json_t *t, const char *path, struct error *err)
{
    const char *key;
    json_t *x;
    size_t i;
    enum status st = ST_OK;

    if (json_is_string(t))
        return remote_check_template(json_string_value(t), path, err);
    if (json_is_object(t)) {
        json_object_foreach((json_t *)t, key, x)
        {
            if ((st = check_json_template(x, path, err)) != ST_OK)
                return st;
        }
    }
    if (json_is_array(t)) {
        json_array_foreach(t, i, x)
        {
            if ((st = check_json_template(x, path, err)) != ST_OK)
                return st;
        }
    }
    return st;
}

static enum status check_method(const struct param *p, struct error *err)
{
    if (STR_IN(json_string_value(p->v), "GET", "POST", "PUT", "PATCH", "DELETE"))
        return ST_OK;
    return error_set(err, ST_INVALID, "invalid \"%s\": expected GET, POST, PUT, PATCH or DELETE",
                     p->path);
}

/* Whether a URL template's path has a "." or ".." segment of its own. */
static bool url_has_dot_segment(const char *tmpl)
{
    const char *seg = tmpl + url_origin_len(tmpl), *query = literal_find(seg, "?#");

    while (seg < query) {
        const char *end = literal_find(seg + 1, "/?#");
        size_t n = (size_t)(end - seg - 1);
        if ((n == 1 && seg[1] == '.') || (n == 2 && seg[1] == '.' && seg[2] == '.'))
            return true;
        seg = end;
    }
    return false;
}

/* The URL: http or https (or an operator's {{env:NAME}} first), no value of
 * the run before the path, so that none can choose where the request goes. */
static enum status check_url(const struct param *p, struct error *err)
{
    const char *s = json_string_value(p->v);
    char *origin;
    bool fixed;

    if (!s || (strncmp(s, "http://", 7) != 0 && strncmp(s, "https://", 8) != 0 &&
               strncmp(s, "{{env:", 6) != 0))
        return error_set(err, ST_INVALID, "invalid \"%s\": expected an http:// or https:// URL",
                         p->path);
    if (remote_check_template(s, p->path, err) != ST_OK)
        return ST_INVALID;
    origin = xstrndup(s, url_origin_len(s));
    fixed = remote_template_operator_only(origin);
    free(origin);
    if (!fixed)
        return error_set(err, ST_INVALID,
                         "invalid \"%s\": only {{env:...}} placeholders may stand before the path "
                         "(in the scheme, host or port)",
                         p->path);
    if (url_has_dot_segment(s))
        return error_set(err, ST_INVALID, "invalid \"%s\": a \".\" or \"..\" path segment",
                         p->path);
    return ST_OK;
}

static enum status check_headers(const struct param *p, struct error *err)
{
    char sub[200];
    const char *key;
    json_t *x;

    if (!json_is_object(p->v))
        return error_set(err, ST_INVALID, "invalid \"%s\": expected an object", p->path);
    json_object_foreach((json_t *)p->v, key, x)
    {
        xsnprintf(sub, sizeof(sub), "%s.%s", p->path, key);
        if (!json_is_string(x) || strpbrk(json_string_value(x), "\r\n") || strpbrk(key, "\r\n: ") ||
            !*key)
            return error_set(err, ST_INVALID,
                             "invalid \"%s\": expected a header name and a one-line string", sub);
        if (remote_check_template(json_string_value(x), sub, err) != ST_OK)
            return ST_INVALID;
    }
    return ST_OK;
}

static enum status check_body(const struct param *p, struct error *err)
{
    if (json_object_get(p->in, "body_text"))
        return error_set(err, ST_INVALID,
                         "invalid \"%s\": \"body\" and \"body_text\" exclude each other",
                         p->in_path);
    return check_json_template(p->v, p->path, err);
}

static enum status check_body_text(const struct param *p, struct error *err)
{
    if (!json_is_string(p->v))
        return error_set(err, ST_INVALID, "invalid \"%s\": expected a string", p->path);
    return remote_check_template(json_string_value(p->v), p->path, err);
}

/* "xml_escape": false puts values in as they are: the operator's only. */
static enum status check_xml_escape(const struct param *p, struct error *err)
{
    const char *text = json_string_value(json_object_get(p->in, "body_text"));

    if (!json_is_boolean(p->v))
        return error_set(err, ST_INVALID, "invalid \"%s\": expected true or false", p->path);
    if (json_is_false(p->v) && text && !remote_template_operator_only(text))
        return error_set(err, ST_INVALID,
                         "invalid \"%s.body_text\": with \"xml_escape\": false only {{env:...}} "
                         "placeholders may be used (a run's values would go in unescaped)",
                         p->in_path);
    return ST_OK;
}

/* A request description's rules, "url" as url_need says. */
/* clang-format off */
#define REQUEST_RULES(url_need)                                  \
    {"method", check_method, .need = PARAM_OPTIONAL},            \
    {"url", check_url, .need = (url_need)},                      \
    {"headers", check_headers, .need = PARAM_OPTIONAL},          \
    {"body", check_body, .need = PARAM_OPTIONAL},                \
    {"body_text", check_body_text, .need = PARAM_OPTIONAL},      \
    {"content_type", params_string, .need = PARAM_OPTIONAL},     \
    {"xml_escape", check_xml_escape, .need = PARAM_OPTIONAL},    \
    {"timeout_ms", params_int, .min = 1, .max = REMOTE_TIMEOUT_MAX_MS}
/* clang-format on */

static const struct param_rule request_rules[] = {REQUEST_RULES(PARAM_REQUIRED), {0}};
static const struct param_rule job_request_rules[] = {REQUEST_RULES(PARAM_OPTIONAL), {0}};

enum status remote_check_request(const json_t *req, const char *path, bool need_url,
                                 struct error *err)
{
    if (!json_is_object(req))
        return error_set(err, ST_INVALID, "invalid \"%s\": expected an object", path);
    return params_check(req, need_url ? request_rules : job_request_rules, path, err);
}

enum status remote_rule_request(const struct param *p, struct error *err)
{
    return remote_check_request(p->v, p->path, true, err);
}

enum status remote_rule_job_request(const struct param *p, struct error *err)
{
    return remote_check_request(p->v, p->path, false, err);
}

/* ---- the call -------------------------------------------------------------- */

struct sink {
    struct dynbuf body; /* capped at REMOTE_RESPONSE_MAX */
    bool too_big;
};

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
    struct sink *k = arg;

    if (dynbuf_add(&k->body, p, size * n) != ST_OK) {
        k->too_big = true;
        return 0; /* aborts the transfer */
    }
    return size * n;
}

static void header_copy(const char *line, size_t n, const char *name, char *out, size_t cap)
{
    size_t nl = strlen(name);

    if (n > nl + 1 && strncasecmp(line, name, nl) == 0 && line[nl] == ':') {
        const char *v = line + nl + 1;
        size_t k = n - nl - 1;
        while (k && (*v == ' ' || *v == '\t'))
            v++, k--;
        while (k && (v[k - 1] == '\r' || v[k - 1] == '\n' || v[k - 1] == ' '))
            k--;
        xsnprintf(out, cap, "%.*s", (int)k, v);
    }
}

static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
    struct remote_response *r = arg;
    char ra[32] = "";

    header_copy(p, size * n, "Location", r->location, sizeof(r->location));
    header_copy(p, size * n, "Content-Type", r->content_type, sizeof(r->content_type));
    header_copy(p, size * n, "Retry-After", ra, sizeof(ra));
    if (ra[0] && strspn(ra, "0123456789") == strlen(ra) && strlen(ra) < 6)
        r->retry_after_s = atoi(ra); /* seconds; an HTTP date is ignored */
    return size * n;
}

static int on_progress(void *arg, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
    (void)a, (void)b, (void)c, (void)d;
    return arg && rc_should_stop(arg) ? 1 : 0;
}

/* The expanded body and its content type; *body NULL when there is none. */
static enum status build_body(const json_t *req, const struct remote_vars *v, char **body,
                              const char **ctype, struct error *err)
{
    const json_t *b = json_object_get(req, "body"), *t = json_object_get(req, "body_text");
    json_t *x = NULL;
    enum status st = ST_OK;

    *body = NULL;
    *ctype = json_string_value(json_object_get(req, "content_type"));
    if (b) {
        st = remote_expand_json(b, v, &x, err);
        if (st == ST_OK)
            *body = json_dumps(x, JSON_COMPACT | JSON_ENCODE_ANY);
        json_decref(x);
        if (!*ctype)
            *ctype = "application/json";
    } else if (t) {
        st = remote_expand_text(
            json_string_value(t), v,
            json_is_false(json_object_get(req, "xml_escape")) ? REMOTE_RAW : REMOTE_XML, body, err);
        if (!*ctype)
            *ctype = "text/xml; charset=utf-8";
    }
    return st;
}

static enum status build_headers(const json_t *req, const struct remote_vars *v, const char *ctype,
                                 struct curl_slist **out, struct error *err)
{
    const json_t *h = json_object_get(req, "headers");
    const char *key;
    json_t *x;

    *out = curl_slist_append(NULL, "Expect:");
    if (ctype) {
        char *line = xasprintf("Content-Type: %s", ctype);
        *out = curl_slist_append(*out, line);
        free(line);
    }
    json_object_foreach((json_t *)h, key, x)
    {
        char *val = NULL, *line;
        enum status st = remote_expand_text(json_string_value(x), v, REMOTE_HEADER, &val, err);
        if (st != ST_OK) {
            char why[sizeof(err->message)] = "";
            if (err)
                xsnprintf(why, sizeof(why), "%s", err->message);
            return error_set(err, st, "header %s: %s", key, why);
        }
        if (strpbrk(val, "\r\n")) {
            free(val);
            return error_set(err, ST_INVALID, "header %s would span lines", key);
        }
        line = xasprintf("%s: %s", key, val);
        *out = curl_slist_append(*out, line);
        free(line);
        free(val);
    }
    return ST_OK;
}

void remote_response_cleanup(struct remote_response *r)
{
    if (!r)
        return;
    free(r->body);
    r->body = NULL;
    r->len = 0;
}

struct remote_conn {
    CURL *curl; /* its connection cache outlives each transfer */
};

struct remote_conn *remote_conn_new(void)
{
    struct remote_conn *c = xcalloc(1, sizeof(*c));

    c->curl = curl_easy_init();
    if (!c->curl)
        abort(); /* only on allocation failure */
    return c;
}

void remote_conn_free(struct remote_conn *c)
{
    if (!c)
        return;
    curl_easy_cleanup(c->curl);
    free(c);
}

/* The handle of one transfer: the context's kept one, reset to its
 * defaults (its open connections stay), or a new one. */
static CURL *transfer_handle(const struct run_ctx *rc)
{
    if (rc && rc->conn) {
        curl_easy_reset(rc->conn->curl);
        return rc->conn->curl;
    }
    return curl_easy_init();
}

static void transfer_done(const struct run_ctx *rc, CURL *c)
{
    if (!rc || !rc->conn)
        curl_easy_cleanup(c);
}

static void set_options(CURL *c, const char *method, const char *url, const char *body,
                        long timeout_ms)
{
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (strcmp(method, "GET") == 0)
        curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    }
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms < 5000 ? timeout_ms : 5000L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "opsrun/" OPSRUN_VERSION);
}

enum status remote_call(const json_t *req, const struct remote_vars *v, const char *url_override,
                        const struct run_ctx *rc, struct remote_response *out, struct error *err)
{
    const char *method = json_string_value(json_object_get(req, "method"));
    const char *tmpl = url_override ? url_override : json_string_value(json_object_get(req, "url"));
    const json_t *t = json_object_get(req, "timeout_ms");
    long timeout_ms = t ? (long)json_integer_value(t) : REMOTE_TIMEOUT_DEFAULT_MS;
    struct curl_slist *hdrs = NULL;
    struct sink k = {.too_big = false};
    const char *ctype = NULL;
    char *url = NULL, *body = NULL;
    enum status st;
    CURLcode cc;
    CURL *c;

    memset(out, 0, sizeof(*out));
    dynbuf_init(&k.body, REMOTE_RESPONSE_MAX);
    if (!method)
        method = json_object_get(req, "body") || json_object_get(req, "body_text") ? "POST" : "GET";
    if (!tmpl)
        return error_set(err, ST_INVALID, "no URL to call");
    if (url_override) {
        url = xstrdup(url_override);
        st = ST_OK;
    } else {
        st = remote_expand_url(tmpl, v, &url, err);
    }
    if (st == ST_OK)
        st = build_body(req, v, &body, &ctype, err);
    if (st == ST_OK)
        st = build_headers(req, v, body ? ctype : NULL, &hdrs, err);
    if (st != ST_OK || !(c = transfer_handle(rc))) {
        free(url), free(body), curl_slist_free_all(hdrs);
        return st != ST_OK ? st : error_set(err, ST_INTERNAL, "could not start a transfer");
    }
    xsnprintf(out->effective_url, sizeof(out->effective_url), "%s", url);
    set_options(c, method, url, body, timeout_ms);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &k);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, out);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, (void *)rc);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    cc = curl_easy_perform(c);
    if (cc == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out->status);
    transfer_done(rc, c);
    curl_slist_free_all(hdrs);
    free(url);
    free(body);
    out->len = dynbuf_len(&k.body);
    out->body = dynbuf_take(&k.body);
    if (cc == CURLE_OK)
        return ST_OK;
    out->transport_error = true;
    out->timed_out = cc == CURLE_OPERATION_TIMEDOUT;
    out->stopped = cc == CURLE_ABORTED_BY_CALLBACK;
    xsnprintf(out->error, sizeof(out->error), "%s %s: %s", method, tmpl,
              k.too_big ? "the response is larger than 4 MiB" : curl_easy_strerror(cc));
    return error_set(err, ST_UNAVAILABLE, "could not call %s", out->error);
}

enum remote_class remote_classify(const struct remote_response *r)
{
    if (r->transport_error || r->status == 408 || r->status == 429 || r->status >= 500)
        return REMOTE_TRANSIENT;
    if (r->status >= 200 && r->status < 300)
        return REMOTE_OK;
    if (r->status == 404 || r->status == 410)
        return REMOTE_GONE;
    return REMOTE_REJECTED;
}

void remote_error(struct run_ctx *rc, const char *code, const char *what,
                  const struct remote_response *r)
{
    char excerpt[201];
    size_t n = 0;

    if (r->transport_error) {
        rc_error(rc, code, "%s: %s", what, r->error);
        return;
    }
    for (size_t i = 0; r->body && i < r->len && n < sizeof(excerpt) - 1; i++)
        excerpt[n++] =
            r->body[i] == '\n' || r->body[i] == '\r' || r->body[i] == '\0' ? ' ' : r->body[i];
    excerpt[n] = '\0';
    utf8_scrub(excerpt);
    rc_error(rc, code, "%s: HTTP %ld%s%s", what, r->status, n ? ": " : "", excerpt);
}

bool remote_built(struct run_ctx *rc, enum status st, const char *what, const struct error *err)
{
    if (st != ST_INVALID && st != ST_UNPROCESSABLE)
        return true;
    rc_error(rc, st == ST_UNPROCESSABLE ? "unsafe_input" : "invalid_request",
             "could not build %s: %s", what, err->message);
    return false;
}

json_t *remote_json(const struct remote_response *r)
{
    return r->body ? json_loadb(r->body, r->len, JSON_DECODE_ANY, NULL) : NULL;
}

/* ---- what the job actions share -------------------------------------------- */

const char *remote_param(const struct run_ctx *rc, const char *key, const char *def)
{
    const char *v = json_string_value(json_object_get(rc->type->params, key));
    return v ? v : def;
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

/* A pointer's value copied, NULL when the pointer is not configured or
 * finds nothing of the expected kind (is_kind NULL: any). */
static json_t *take(const struct run_ctx *rc, const json_t *body, const char *key,
                    int (*is_kind)(const json_t *))
{
    const char *ptr = remote_param(rc, key, NULL);
    const json_t *v = ptr ? jptr_get(body, ptr) : NULL;

    return v && (!is_kind || is_kind(v)) ? json_deep_copy(v) : NULL;
}

static int is_object(const json_t *v)
{
    return json_is_object(v);
}

static int is_array(const json_t *v)
{
    return json_is_array(v);
}

/* The outcome a state_map value or the "gone" param names: "succeeded",
 * "failed" or "cancelled" (checked at configuration load). */
static enum run_outcome mapped_outcome(const char *mapped)
{
    enum run_outcome o;

    return run_outcome_parse(mapped, &o) ? o : OUTCOME_FAILED;
}

enum step remote_job_ended(struct run_ctx *rc, const json_t *body, const char *mapped,
                           const char *state)
{
    char *msg = NULL;
    const char *eptr = remote_param(rc, "error_pointer", NULL);
    enum run_outcome outcome = mapped_outcome(mapped);

    rc->summary_counts = take(rc, body, "summary_counts_pointer", is_object);
    rc->failure_summary = take(rc, body, "failure_summary_pointer", is_array);
    if (outcome == OUTCOME_SUCCEEDED) {
        rc->result = remote_param(rc, "result_pointer", NULL)
                         ? take(rc, body, "result_pointer", NULL)
                         : json_deep_copy(body);
        return STEP_DONE;
    }
    msg = eptr ? jptr_text(body, eptr) : NULL;
    if (outcome == OUTCOME_CANCELLED)
        rc->outcome = OUTCOME_CANCELLED;
    rc_error(rc, outcome == OUTCOME_CANCELLED ? "remote_cancelled" : "remote_failed",
             "job %s ended in state \"%s\"%s%s", rc->external_id, state, msg ? ": " : "",
             msg ? msg : "");
    free(msg);
    return STEP_FAIL;
}

enum step remote_job_gone(struct run_ctx *rc, const struct remote_response *r)
{
    enum run_outcome as = mapped_outcome(remote_param(rc, "gone", "failed"));

    if (as == OUTCOME_SUCCEEDED)
        return STEP_DONE;
    if (as == OUTCOME_CANCELLED)
        rc->outcome = OUTCOME_CANCELLED;
    rc_error(rc, "job_gone", "the remote system no longer knows job %s (HTTP %ld)", rc->external_id,
             r->status);
    return STEP_FAIL;
}

enum step remote_job_state(struct run_ctx *rc, const json_t *body)
{
    char *state = jptr_text(body, remote_param(rc, "state_pointer", ""));
    const char *mapped;
    enum step step;

    if (!state) {
        rc_error(rc, "status_malformed", "the status answer has no state at \"%s\"",
                 remote_param(rc, "state_pointer", ""));
        return STEP_RETRY;
    }
    mapped =
        json_string_value(json_object_get(json_object_get(rc->type->params, "state_map"), state));
    if (!mapped) {
        mapped = remote_param(rc, "unknown_state", "running");
        LOG(LOG_DEBUG, "unmapped remote state run=%s state=%s treated_as=%s", rc->run->id, state,
            mapped);
    }
    json_object_set_new(rc->poll_state, "state", json_string(state));
    step = strcmp(mapped, "running") == 0 ? STEP_WAIT : remote_job_ended(rc, body, mapped, state);
    free(state);
    return step;
}

bool remote_hook(struct run_ctx *rc, const char *key)
{
    const json_t *req = json_object_get(rc->type->params, key);
    const struct remote_vars v = remote_vars_of(rc);
    struct remote_response r;
    struct error err = {0};
    enum remote_class c;
    enum status st;

    if (!req)
        return true;
    /* without a URL of its own, the request goes to the job's external id
     * (http: the status URL) */
    st = remote_call(req, &v, json_object_get(req, "url") ? NULL : rc->external_id, rc, &r, &err);
    if (st == ST_INVALID || st == ST_UNPROCESSABLE) {
        LOG(LOG_WARN, "could not build the %s request run=%s: %s", key, rc->run->id, err.message);
        return false;
    }
    c = remote_classify(&r);
    if (c != REMOTE_OK && c != REMOTE_GONE)
        LOG(LOG_WARN, "%s request failed run=%s: %s%s HTTP %ld", key, rc->run->id, r.error,
            r.transport_error ? "" : " answered", r.status);
    remote_response_cleanup(&r);
    return c == REMOTE_OK || c == REMOTE_GONE;
}

bool remote_cancel_hook(struct run_ctx *rc)
{
    return remote_hook(rc, "cancel");
}

bool remote_cleanup_hook(struct run_ctx *rc)
{
    return remote_hook(rc, "cleanup");
}

/* ---- params every job action reads -------------------------------------- */

enum status remote_rule_pointer(const struct param *p, struct error *err)
{
    if (!json_is_string(p->v) || !jptr_valid(json_string_value(p->v)))
        return error_set(err, ST_INVALID,
                         "invalid \"%s\": expected a JSON pointer such as \"/job/id\"", p->path);
    return ST_OK;
}

enum status remote_rule_state_map(const struct param *p, struct error *err)
{
    const char *key;
    json_t *v;

    if (!p->v && !json_object_get(p->in, "state_pointer"))
        return ST_OK;
    if (!json_is_object(p->v) || json_object_size(p->v) == 0)
        return error_set(err, ST_INVALID,
                         "invalid \"%s\": expected an object mapping remote states to "
                         "running, succeeded, failed or cancelled",
                         p->path);
    json_object_foreach((json_t *)p->v, key, v)
    {
        if (!STR_IN(json_string_value(v), "running", "succeeded", "failed", "cancelled"))
            return error_set(err, ST_INVALID,
                             "invalid \"%s.%s\": expected running, succeeded, failed "
                             "or cancelled",
                             p->path, key);
    }
    return ST_OK;
}
