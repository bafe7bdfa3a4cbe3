/* common/template.c — {{run:/json/pointer}} placeholders, and those of a
 * workflow step's data (common/template.h). */
#include "template.h"

#include "dynbuf.h"
#include "jsonptr.h"

#include <stdlib.h>
#include <string.h>

#define PREFIX "{{run:"
#define PREFIX_LEN 6
/* The longest pointer a placeholder holds. */
#define POINTER_MAX 512
/* The longest expansion: a Slack message is far shorter. */
#define EXPANSION_MAX (1024 * 1024)

/* The placeholder starting at s ("{{"): its pointer into ptr; false when s
 * does not open a well-formed one. *end is past its "}}". */
static bool placeholder_at(const char *s, char ptr[POINTER_MAX], const char **end)
{
    const char *close;
    size_t n;

    if (strncmp(s, PREFIX, PREFIX_LEN) != 0)
        return false;
    close = strstr(s + PREFIX_LEN, "}}");
    if (!close)
        return false;
    n = (size_t)(close - s - PREFIX_LEN);
    if (n >= POINTER_MAX || memchr(s + PREFIX_LEN, '}', n))
        return false;
    memcpy(ptr, s + PREFIX_LEN, n);
    ptr[n] = '\0';
    *end = close + 2;
    return jptr_valid(ptr);
}

bool tmpl_check(const char *s, char *why, size_t n)
{
    char ptr[POINTER_MAX];
    const char *p = s, *end;

    while ((p = strstr(p, "{{")) != NULL) {
        if (!placeholder_at(p, ptr, &end)) {
            xsnprintf(why, n, "\"%.40s\" is not a placeholder {{run:/json/pointer}}", p);
            return false;
        }
        p = end;
    }
    return true;
}

bool tmpl_check_json(const json_t *t, char *why, size_t n)
{
    const char *key;
    json_t *v;
    size_t i;

    if (json_is_string(t))
        return tmpl_check(json_string_value(t), why, n);
    if (json_is_array(t)) {
        json_array_foreach(t, i, v)
        {
            if (!tmpl_check_json(v, why, n))
                return false;
        }
    }
    if (json_is_object(t)) {
        json_object_foreach((json_t *)t, key, v)
        {
            if (!tmpl_check_json(v, why, n))
                return false;
        }
    }
    return true;
}

#define STEP_NAME_MAX 64

/* The length of the step name at s ([A-Za-z0-9_-]*). */
static size_t step_name_len(const char *s)
{
    size_t i = 0;

    while ((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
           (s[i] >= '0' && s[i] <= '9') || s[i] == '_' || s[i] == '-')
        i++;
    return i;
}

/* The step placeholder at s ("{{"): true when well-formed, with *end past
 * its "}}" and the step's name, if it names one, in name (else ""). */
static bool step_placeholder_at(const char *s, char name[STEP_NAME_MAX + 1], const char **end)
{
    char ptr[POINTER_MAX];
    const char *p, *close;
    size_t n;

    name[0] = '\0';
    if (strncmp(s, "{{input:", 8) == 0) {
        p = s + 8;
    } else if (strncmp(s, "{{steps.", 8) == 0) {
        n = step_name_len(s + 8);
        if (n == 0 || n > STEP_NAME_MAX || s[8 + n] != ':')
            return false;
        memcpy(name, s + 8, n);
        name[n] = '\0';
        p = s + 8 + n + 1;
    } else {
        return false;
    }
    close = strstr(p, "}}");
    if (!close)
        return false;
    n = (size_t)(close - p);
    if (n >= POINTER_MAX || memchr(p, '}', n))
        return false;
    memcpy(ptr, p, n);
    ptr[n] = '\0';
    *end = close + 2;
    return jptr_valid(ptr);
}

static bool step_check(const char *s, json_t *named, char *why, size_t n)
{
    char name[STEP_NAME_MAX + 1];
    const char *p = s, *end;

    while ((p = strstr(p, "{{")) != NULL) {
        if (!step_placeholder_at(p, name, &end)) {
            xsnprintf(why, n,
                      "\"%.40s\" is not a placeholder {{input:/json/pointer}} or "
                      "{{steps.NAME:/json/pointer}}",
                      p);
            return false;
        }
        if (named && name[0] && json_object_set_new(named, name, json_null()) != 0)
            abort(); /* out of memory */
        p = end;
    }
    return true;
}

bool tmpl_step_check_json(const json_t *t, json_t *named, char *why, size_t n)
{
    const char *key;
    json_t *v;
    size_t i;

    if (json_is_string(t))
        return step_check(json_string_value(t), named, why, n);
    if (json_is_array(t)) {
        json_array_foreach(t, i, v)
        {
            if (!tmpl_step_check_json(v, named, why, n))
                return false;
        }
    }
    if (json_is_object(t)) {
        json_object_foreach((json_t *)t, key, v)
        {
            if (!tmpl_step_check_json(v, named, why, n))
                return false;
        }
    }
    return true;
}

/* n bytes of s added to b as esc says; false when b is full. */
static bool splice(struct dynbuf *b, const char *s, size_t n, enum tmpl_escape esc)
{
    size_t from = 0;

    for (size_t i = 0; esc == TMPL_SLACK && i < n; i++) {
        const char *ent = s[i] == '&'   ? "&amp;"
                          : s[i] == '<' ? "&lt;"
                          : s[i] == '>' ? "&gt;"
                                        : NULL;
        if (!ent)
            continue;
        if (dynbuf_add(b, s + from, i - from) != ST_OK || dynbuf_adds(b, ent) != ST_OK)
            return false;
        from = i + 1;
    }
    return dynbuf_add(b, s + from, n - from) == ST_OK;
}

char *tmpl_escape_slack(const char *s)
{
    size_t n = strlen(s);
    struct dynbuf b;

    dynbuf_init(&b, n * 5); /* "&amp;" is the longest an escape makes a byte */
    if (!splice(&b, s, n, TMPL_SLACK))
        abort(); /* it always fits */
    return dynbuf_take(&b);
}

enum status tmpl_expand_text(const char *s, const json_t *doc, bool missing_ok,
                             enum tmpl_escape esc, char **out, struct error *err)
{
    struct dynbuf b;
    char ptr[POINTER_MAX];
    const char *p = s, *open, *end;
    bool ok = true;

    *out = NULL;
    dynbuf_init(&b, EXPANSION_MAX);
    while (ok && (open = strstr(p, "{{")) != NULL) {
        const json_t *v;
        char *text = NULL;

        ok = dynbuf_add(&b, p, (size_t)(open - p)) == ST_OK;
        if (!placeholder_at(open, ptr, &end)) {
            ok = ok && dynbuf_add(&b, "{{", 2) == ST_OK;
            p = open + 2;
            continue;
        }
        p = end;
        v = jptr_get(doc, ptr);
        if (!v && !missing_ok) {
            dynbuf_free(&b);
            return error_set(err, ST_NOT_FOUND, "{{run:%s}} names nothing in the run", ptr);
        }
        if (json_is_string(v))
            ok = ok && splice(&b, json_string_value(v), json_string_length(v), esc);
        else if (v && (text = json_dumps(v, JSON_ENCODE_ANY)) != NULL)
            ok = ok && splice(&b, text, strlen(text), esc);
        free(text);
    }
    if (ok)
        ok = dynbuf_adds(&b, p) == ST_OK;
    if (!ok) {
        dynbuf_free(&b);
        return error_set(err, ST_INVALID, "the expansion is longer than %d KiB",
                         EXPANSION_MAX / 1024);
    }
    *out = dynbuf_take(&b);
    return ST_OK;
}
