/* common/regex_cost.c — the size of a compiled extended regular
 * expression, estimated (common/regex_cost.h). */
#include "common/regex_cost.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* Deeper nesting is refused as costly: no real pattern needs it. */
#define DEPTH_MAX 64

static size_t add(size_t a, size_t b)
{
    return a > SIZE_MAX - b ? SIZE_MAX : a + b;
}

static size_t mul(size_t a, size_t b)
{
    return b != 0 && a > SIZE_MAX / b ? SIZE_MAX : a * b;
}

/* Past the bracket expression p opens ("[a-z]", "[]x]", "[[:digit:]]"),
 * at its ']' (or the end of the pattern when it has none). */
static const char *bracket_end(const char *p)
{
    p++;
    if (*p == '^')
        p++;
    if (*p == ']')
        p++;
    while (*p && *p != ']') {
        if (p[0] == '[' && (p[1] == ':' || p[1] == '.' || p[1] == '=')) {
            const char *end = strchr(p + 2, p[1]);
            while (end && end[1] != ']')
                end = strchr(end + 1, p[1]);
            p = end ? end + 1 : p + 1;
        }
        p++;
    }
    return *p ? p : p - 1;
}

/* The copies an interval at p spells out: n for "{n}", n and one more
 * for "{n,}", the larger bound for "{n,m}" (at least 1); *end then at its
 * '}'. 0 when p opens no interval. */
static size_t interval(const char *p, const char **end)
{
    unsigned long n, m;
    char *e;

    if (p[1] < '0' || p[1] > '9')
        return 0;
    n = m = strtoul(p + 1, &e, 10);
    if (*e == ',' && e[1] >= '0' && e[1] <= '9')
        m = strtoul(e + 1, &e, 10);
    else if (*e == ',')
        m = n == ULONG_MAX ? n : n + 1, e++;
    if (*e != '}')
        return 0;
    *end = e;
    m = m > n ? m : n;
    return m > 0 ? m : 1;
}

size_t regex_cost(const char *src)
{
    size_t total[DEPTH_MAX] = {0}, last[DEPTH_MAX] = {0}, copies;
    int d = 0;

    for (const char *p = src; *p; p++) {
        size_t atom = 1;
        switch (*p) {
        case '\\':
            if (p[1])
                p++;
            break;
        case '[':
            p = bracket_end(p);
            break;
        case '(':
            if (++d == DEPTH_MAX)
                return SIZE_MAX;
            total[d] = last[d] = 0;
            continue;
        case ')':
            if (d > 0) {
                atom = total[d] ? total[d] : 1;
                d--;
            }
            break;
        case '|':
            last[d] = 0;
            continue;
        case '*':
        case '?':
            continue; /* one node over the part, no copy */
        case '+':
        case '{':
            copies = *p == '+' ? 2 : interval(p, &p);
            if (copies == 0)
                break; /* a '{' that opens no interval */
            total[d] = add(total[d], mul(last[d], copies - 1));
            last[d] = mul(last[d], copies);
            continue;
        }
        total[d] = add(total[d], atom);
        last[d] = atom;
    }
    while (d > 0)
        total[d - 1] = add(total[d - 1], total[d]), d--;
    return total[0];
}
