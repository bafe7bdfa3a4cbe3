/* common/jsonptr.c — JSON pointers (common/jsonptr.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "jsonptr.h"

/* Room for one unescaped reference token and its NUL; a longer token finds
 * nothing. */
#define JPTR_TOKEN_MAX 512

bool jptr_valid(const char *ptr)
{
    if (!ptr || (*ptr && *ptr != '/'))
        return false;
    for (const char *p = ptr; *p; p++)
        if (*p == '~' && p[1] != '0' && p[1] != '1')
            return false;
    return true;
}

/* The next reference token of *ptr (after its '/'), unescaped into tok. */
static bool jptr_token(const char **ptr, char *tok, size_t cap)
{
    const char *p = *ptr + 1;
    size_t n = 0;

    for (; *p && *p != '/'; p++) {
        char c = *p;
        if (c == '~') {
            c = p[1] == '0' ? '~' : '/';
            p++;
        }
        if (n + 1 >= cap)
            return false;
        tok[n++] = c;
    }
    tok[n] = '\0';
    *ptr = p;
    return true;
}

/* An array index: "0" or digits without a leading zero. */
static bool jptr_index(const char *tok, size_t *out)
{
    char *end;
    unsigned long long v;

    if (!*tok || (tok[0] == '0' && tok[1]) || strspn(tok, "0123456789") != strlen(tok))
        return false;
    errno = 0;
    v = strtoull(tok, &end, 10);
    if (errno)
        return false;
    *out = (size_t)v;
    return true;
}

const json_t *jptr_get(const json_t *doc, const char *ptr)
{
    char tok[JPTR_TOKEN_MAX];

    if (!jptr_valid(ptr))
        return NULL;
    while (doc && *ptr) {
        size_t i;
        if (!jptr_token(&ptr, tok, sizeof(tok)))
            return NULL;
        if (json_is_object(doc))
            doc = json_object_get(doc, tok);
        else if (json_is_array(doc) && jptr_index(tok, &i))
            doc = json_array_get(doc, i);
        else
            return NULL;
    }
    return doc;
}

char *jptr_text(const json_t *doc, const char *ptr)
{
    const json_t *v = jptr_get(doc, ptr);

    if (json_is_string(v))
        return xstrdup(json_string_value(v));
    if (json_is_integer(v))
        return xasprintf("%lld", (long long)json_integer_value(v));
    if (json_is_real(v))
        return xasprintf("%.17g", json_real_value(v));
    return NULL;
}
