/* common/conc_key.c — the key template of a run type's concurrency
 * (common/conc_key.h). */
#include "conc_key.h"

#include "dynbuf.h"
#include "jsonptr.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INPUT_PREFIX "input:"
#define INPUT_PREFIX_LEN 6
/* How much of a bad placeholder an error quotes. */
#define QUOTE_MAX 80

/* ---- compiling ---- */

/* Appends a part (steals part); ST_INTERNAL when jansson fails. */
static enum status add_part(json_t *parts, json_t *part, struct error *err)
{
    if (!part || json_array_append_new(parts, part) != 0)
        return error_set(err, ST_INTERNAL, "could not build the parts of a concurrency key");
    return ST_OK;
}

/* The placeholder {{body}} (n bytes of body) as a part. */
static enum status placeholder_part(json_t *parts, const char *body, size_t n, struct error *err)
{
    char *p;
    enum status st;

    if (n == 6 && memcmp(body, "tenant", 6) == 0)
        return add_part(parts, json_pack("[s]", "tenant"), err);
    if (n < INPUT_PREFIX_LEN || memcmp(body, INPUT_PREFIX, INPUT_PREFIX_LEN) != 0)
        return error_set(err, ST_INVALID,
                         "unknown placeholder \"{{%.*s}}\": a key takes {{input:/json/pointer}} "
                         "and {{tenant}}",
                         (int)(n < QUOTE_MAX ? n : QUOTE_MAX), body);
    if (n == INPUT_PREFIX_LEN)
        return error_set(err, ST_INVALID,
                         "\"{{input:}}\" is the whole input, and a key takes one value of it: "
                         "name it, as in {{input:/labels/instance}}");
    p = xstrndup(body + INPUT_PREFIX_LEN, n - INPUT_PREFIX_LEN);
    if (!jptr_valid(p))
        st = error_set(err, ST_INVALID,
                       "\"{{%.*s}}\": \"%s\" is not a JSON pointer (RFC 6901), such as "
                       "\"/labels/instance\"",
                       (int)(n < QUOTE_MAX ? n : QUOTE_MAX), body, p);
    else
        st = add_part(parts, json_pack("[s, s]", "input", p), err);
    free(p);
    return st;
}

/* n bytes of literal text as a part; none for n == 0. */
static enum status text_part(json_t *parts, const char *s, size_t n, struct error *err)
{
    if (n == 0)
        return ST_OK;
    return add_part(parts, json_pack("[s, s#]", "text", s, (int)n), err);
}

/* Whether s is valid UTF-8: utf8_scrub changes nothing in it. */
static bool utf8_valid(const char *s)
{
    char *copy = xstrdup(s);
    bool ok;

    utf8_scrub(copy);
    ok = strcmp(copy, s) == 0;
    free(copy);
    return ok;
}

/* Every "{{" opens a placeholder, which the first "}}" after it closes
 * (a "{{" before that "}}" is an unclosed placeholder: no pointer of a key
 * holds one); the text between placeholders is literal. */
static enum status compile_into(json_t *parts, const char *tmpl, struct error *err)
{
    const char *p = tmpl, *open;
    enum status st = ST_OK;

    while (st == ST_OK && (open = strstr(p, "{{")) != NULL) {
        const char *close = strstr(open + 2, "}}"), *again = strstr(open + 2, "{{");
        if (again && (!close || again < close))
            return error_set(err, ST_INVALID, "\"%.*s\" has no closing \"}}\"",
                             (int)(again - open < QUOTE_MAX ? again - open : QUOTE_MAX), open);
        if (!close)
            return error_set(err, ST_INVALID, "\"%.*s\" has no closing \"}}\"", QUOTE_MAX, open);
        st = text_part(parts, p, (size_t)(open - p), err);
        if (st == ST_OK)
            st = placeholder_part(parts, open + 2, (size_t)(close - open - 2), err);
        p = close + 2;
    }
    if (st == ST_OK)
        st = text_part(parts, p, strlen(p), err);
    return st;
}

/* Every key holds the template's literal text: more of it than a key may
 * hold could make no key, for any run. */
static enum status literal_text_check(const json_t *parts, struct error *err)
{
    size_t i, n = 0;
    json_t *part;

    json_array_foreach(parts, i, part)
    {
        if (strcmp(json_string_value(json_array_get(part, 0)), "text") == 0)
            n += json_string_length(json_array_get(part, 1));
    }
    if (n > CONC_KEY_MAX)
        return error_set(err, ST_INVALID,
                         "the template's literal text is %zu bytes, more than the %d of a key: it "
                         "could make no key",
                         n, CONC_KEY_MAX);
    return ST_OK;
}

enum status conc_key_compile(const char *tmpl, json_t **parts, struct error *err)
{
    enum status st;

    *parts = NULL;
    if (!tmpl || !*tmpl)
        return error_set(err, ST_INVALID, "the template is empty");
    if (strnlen(tmpl, CONC_KEY_TEMPLATE_MAX + 1) > CONC_KEY_TEMPLATE_MAX)
        return error_set(err, ST_INVALID, "the template is longer than %d bytes",
                         CONC_KEY_TEMPLATE_MAX);
    if (!utf8_valid(tmpl))
        return error_set(err, ST_INVALID, "the template is not valid UTF-8");
    *parts = json_array();
    if (!*parts)
        return error_set(err, ST_INTERNAL, "could not build the parts of a concurrency key");
    st = compile_into(*parts, tmpl, err);
    if (st == ST_OK)
        st = literal_text_check(*parts, err);
    if (st != ST_OK) {
        json_decref(*parts);
        *parts = NULL;
    }
    return st;
}

/* ---- evaluating ---- */

/* What v is, for an error, when a key cannot hold it. */
static const char *kind_of(const json_t *v)
{
    if (json_is_object(v))
        return "an object";
    if (json_is_array(v))
        return "an array";
    if (json_is_real(v))
        return "a number with a decimal point or an exponent";
    return "null";
}

/* The text of the value at ptr in input, into buf (room for an integer)
 * or borrowed from input; *len its length. */
static enum status input_text(const json_t *input, const char *ptr, char *buf, size_t cap,
                              const char **text, size_t *len, struct error *err)
{
    const json_t *v = input ? jptr_get(input, ptr) : NULL;

    if (!v)
        return error_set(err, ST_INVALID, "the input has no value at \"%s\"", ptr);
    if (json_is_string(v)) {
        *text = json_string_value(v);
        *len = json_string_length(v);
        if (memchr(*text, '\0', *len))
            return error_set(err, ST_INVALID, "the value at \"%s\" holds a NUL character", ptr);
        return ST_OK;
    }
    if (json_is_integer(v))
        *len = xsnprintf(buf, cap, "%lld", (long long)json_integer_value(v));
    else if (json_is_boolean(v))
        *len = xsnprintf(buf, cap, "%s", json_is_true(v) ? "true" : "false");
    else
        return error_set(err, ST_INVALID,
                         "the value at \"%s\" is %s, not a string, a whole number or a boolean",
                         ptr, kind_of(v));
    *text = buf;
    return ST_OK;
}

/* The text of one part, borrowed from part, tenant, input or buf. */
static enum status part_text(const json_t *part, const char *tenant, const json_t *input, char *buf,
                             size_t cap, const char **text, size_t *len, struct error *err)
{
    const char *kind = json_string_value(json_array_get(part, 0));
    const char *arg = json_string_value(json_array_get(part, 1));

    if (kind && strcmp(kind, "tenant") == 0) {
        *text = tenant ? tenant : "";
        *len = strlen(*text);
        return ST_OK;
    }
    if (kind && arg && strcmp(kind, "text") == 0) {
        *text = arg;
        *len = strlen(arg);
        return ST_OK;
    }
    if (kind && arg && strcmp(kind, "input") == 0)
        return input_text(input, arg, buf, cap, text, len, err);
    return error_set(err, ST_INTERNAL, "a concurrency key part that is none");
}

enum status conc_key_eval(const json_t *parts, const char *tenant, const json_t *input, char **out,
                          struct error *err)
{
    struct dynbuf b;
    size_t total = 0, i;
    const json_t *part;
    enum status st = ST_OK;

    *out = NULL;
    if (!json_is_array(parts))
        return error_set(err, ST_INTERNAL, "concurrency key parts that are no array");
    dynbuf_init(&b, CONC_KEY_MAX);
    json_array_foreach(parts, i, part)
    {
        char buf[32];
        const char *text = NULL;
        size_t len = 0;
        st = part_text(part, tenant, input, buf, sizeof(buf), &text, &len, err);
        if (st != ST_OK)
            break;
        /* Past CONC_KEY_MAX the bytes are only counted, for the error. */
        total += len;
        if (total <= CONC_KEY_MAX && (st = dynbuf_add(&b, text, len)) != ST_OK)
            break;
    }
    if (st == ST_OK && total > CONC_KEY_MAX)
        st = error_set(err, ST_INVALID, "the concurrency key would be %zu bytes, more than %d",
                       total, CONC_KEY_MAX);
    if (st != ST_OK) {
        dynbuf_free(&b);
        return st;
    }
    *out = dynbuf_take(&b);
    return ST_OK;
}
