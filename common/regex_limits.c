/* common/regex_limits.c — the size and shape of an extended regular
 * expression, against the limits of common/regex_limits.h: a
 * recursive-descent reading of the pattern that counts what regcomp would
 * spell out. */
#include "common/regex_limits.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* Groups nested deeper are refused: no real pattern needs them. */
#define GROUPS_MAX 64

/* What a part of the pattern compiles to. */
struct part {
    size_t parts;       /* with every repetition spelled out */
    size_t empty_parts; /* the most, in one repetition, of something that can match "" */
    int depth;          /* repetitions nested */
    int empty_depth;    /* repetitions of something that can match "" nested */
    bool nullable;      /* can match the empty string */
};

struct reader {
    const char *p;
    int groups;
    const char *broken; /* the rule broken, or NULL */
};

static size_t add(size_t a, size_t b)
{
    return a > SIZE_MAX - b ? SIZE_MAX : a + b;
}

static size_t mul(size_t a, size_t b)
{
    return b != 0 && a > SIZE_MAX / b ? SIZE_MAX : a * b;
}

/* Past the bracket expression at p ("[a-z]", "[]x]", "[[:digit:]]"): at its
 * closing ']', or at the pattern's end when it has none. */
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

/* The repetition at p, if any: the copies it spells out (1 for '*' and
 * '?', 2 for '+', the larger bound of an interval, or its lower bound and
 * one more for "{n,}") in *copies, whether it can repeat zero times in
 * *optional, and the length of its text; 0 when p starts none. */
static size_t repetition(const char *p, size_t *copies, bool *optional)
{
    unsigned long lo, hi;
    char *e;

    if (*p == '*' || *p == '?' || *p == '+') {
        *copies = *p == '+' ? 2 : 1;
        *optional = *p != '+';
        return 1;
    }
    if (*p != '{' || p[1] < '0' || p[1] > '9')
        return 0;
    lo = hi = strtoul(p + 1, &e, 10);
    if (*e == ',' && e[1] >= '0' && e[1] <= '9')
        hi = strtoul(e + 1, &e, 10);
    else if (*e == ',')
        hi = lo == ULONG_MAX ? lo : lo + 1, e++;
    if (*e != '}')
        return 0;
    hi = hi > lo ? hi : lo;
    *copies = hi > 0 ? hi : 1;
    *optional = lo == 0;
    return (size_t)(e + 1 - p);
}

static struct part alternatives(struct reader *r);

/* One character, bracket expression, escape, anchor or group. */
static struct part atom(struct reader *r)
{
    struct part a = {1, 0, 0, 0, false};
    char c = *r->p++;

    if (c == '(') {
        if (++r->groups > GROUPS_MAX) {
            r->broken = "its groups are nested too deep";
            return a;
        }
        a = alternatives(r);
        r->groups--;
        if (*r->p == ')')
            r->p++;
        a.parts = a.parts ? a.parts : 1;
    } else if (c == '[') {
        r->p = bracket_end(r->p - 1) + 1;
    } else if (c == '\\' && *r->p) {
        r->p++;
    } else if (c == '^' || c == '$') {
        a.nullable = true;
    }
    return a;
}

/* An atom and the repetition that follows it, if any. */
static struct part piece(struct reader *r)
{
    struct part a = atom(r);
    size_t copies, again, len, spelled;
    bool optional, again_optional;

    if (r->broken || (len = repetition(r->p, &copies, &optional)) == 0)
        return a;
    r->p += len;
    if (repetition(r->p, &again, &again_optional) != 0) {
        r->broken = "it has a repetition right after another";
        return a;
    }
    spelled = mul(a.parts, copies);
    if (a.nullable) {
        a.empty_parts = spelled > a.empty_parts ? spelled : a.empty_parts;
        a.empty_depth++;
    } else {
        a.empty_parts = mul(a.empty_parts, copies);
    }
    a.parts = spelled;
    a.nullable = a.nullable || optional;
    a.depth++;
    return a;
}

/* Pieces up to '|', ')' or the end. */
static struct part sequence(struct reader *r)
{
    struct part s = {0, 0, 0, 0, true};

    while (*r->p && *r->p != '|' && *r->p != ')' && !r->broken) {
        struct part a = piece(r);
        s.parts = add(s.parts, a.parts);
        s.empty_parts = a.empty_parts > s.empty_parts ? a.empty_parts : s.empty_parts;
        s.depth = a.depth > s.depth ? a.depth : s.depth;
        s.empty_depth = a.empty_depth > s.empty_depth ? a.empty_depth : s.empty_depth;
        s.nullable = s.nullable && a.nullable;
    }
    return s;
}

static struct part alternatives(struct reader *r)
{
    struct part all = sequence(r);

    while (*r->p == '|' && !r->broken) {
        struct part s;
        r->p++;
        s = sequence(r);
        all.parts = add(all.parts, s.parts);
        all.empty_parts = s.empty_parts > all.empty_parts ? s.empty_parts : all.empty_parts;
        all.depth = s.depth > all.depth ? s.depth : all.depth;
        all.empty_depth = s.empty_depth > all.empty_depth ? s.empty_depth : all.empty_depth;
        all.nullable = all.nullable || s.nullable;
    }
    return all;
}

bool regex_within_limits(const char *src, char *why, size_t n)
{
    struct reader r = {src, 0, NULL};
    struct part all = {0, 0, 0, 0, true};

    while (*r.p && !r.broken) {
        struct part a = alternatives(&r);
        all.parts = add(all.parts, a.parts);
        all.empty_parts = a.empty_parts > all.empty_parts ? a.empty_parts : all.empty_parts;
        all.depth = a.depth > all.depth ? a.depth : all.depth;
        all.empty_depth = a.empty_depth > all.empty_depth ? a.empty_depth : all.empty_depth;
        if (*r.p == ')')
            r.p++; /* unmatched: regcomp's to refuse */
    }
    if (r.broken)
        xsnprintf(why, n, "%s", r.broken);
    else if (all.empty_depth > 1)
        xsnprintf(why, n,
                  "it repeats something that can match the empty string and holds such a "
                  "repetition itself");
    else if (all.depth > REGEX_DEPTH_MAX)
        xsnprintf(why, n, "its repetitions are nested more than %d deep", REGEX_DEPTH_MAX);
    else if (all.parts > REGEX_PARTS_MAX)
        xsnprintf(why, n,
                  "it would compile to more than %d parts once its repetitions are "
                  "spelled out",
                  REGEX_PARTS_MAX);
    else if (all.empty_parts > REGEX_EMPTY_PARTS_MAX)
        xsnprintf(why, n,
                  "a repetition in it spells out more than %d parts of something that "
                  "can match the empty string",
                  REGEX_EMPTY_PARTS_MAX);
    else
        return true;
    return false;
}
