/* common/suggest.c — see suggest.h. */
#include "common/suggest.h"

#include <ctype.h>
#include <stdint.h>

static bool same_char(char a, char b)
{
    return tolower((unsigned char)a) == tolower((unsigned char)b);
}

static size_t min3(size_t a, size_t b, size_t c)
{
    size_t m = a < b ? a : b;
    return m < c ? m : c;
}

/* The optimal string alignment distance, three rows at a time: row i of
 * the table holds the distances of a's first i characters to each prefix
 * of b. */
size_t suggest_distance(const char *a, size_t alen, const char *b, size_t blen)
{
    size_t rows[3][SUGGEST_LEN_MAX + 1];
    size_t *prev2 = rows[0], *prev = rows[1], *cur = rows[2];

    if (alen > SUGGEST_LEN_MAX || blen > SUGGEST_LEN_MAX)
        return SIZE_MAX;
    for (size_t j = 0; j <= blen; j++)
        prev[j] = j;
    for (size_t i = 1; i <= alen; i++) {
        size_t *t;
        cur[0] = i;
        for (size_t j = 1; j <= blen; j++) {
            size_t cost = same_char(a[i - 1], b[j - 1]) ? 0 : 1;
            cur[j] = min3(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost);
            if (i > 1 && j > 1 && same_char(a[i - 1], b[j - 2]) && same_char(a[i - 2], b[j - 1]) &&
                prev2[j - 2] + 1 < cur[j])
                cur[j] = prev2[j - 2] + 1;
        }
        t = prev2;
        prev2 = prev;
        prev = cur;
        cur = t;
    }
    return prev[blen];
}

void suggest_init(struct suggest *s, const char *word)
{
    *s = (struct suggest){.word = word, .best_dist = SIZE_MAX};
}

void suggest_add_as(struct suggest *s, const char *shown, size_t slen, const char *alias,
                    size_t alen)
{
    size_t wlen = strlen(s->word), d;

    if (slen == wlen && strncmp(shown, s->word, slen) == 0)
        return;
    d = suggest_distance(s->word, wlen, alias, alen);
    if (d < s->best_dist) {
        s->best = shown;
        s->best_len = slen;
        s->best_dist = d;
    }
}

void suggest_add_len(struct suggest *s, const char *cand, size_t len)
{
    suggest_add_as(s, cand, len, cand, len);
}

void suggest_add(struct suggest *s, const char *cand)
{
    if (cand)
        suggest_add_len(s, cand, strlen(cand));
}

bool suggest_found(const struct suggest *s)
{
    size_t most = strlen(s->word) / 3;

    if (most < 1)
        most = 1;
    if (most > 3)
        most = 3;
    return s->best && s->best_dist <= most;
}

const char *suggest_hint(const struct suggest *s, char *buf, size_t cap)
{
    if (suggest_found(s))
        xsnprintf(buf, cap, "; did you mean \"%.*s\"?", (int)s->best_len, s->best);
    else if (cap > 0)
        buf[0] = '\0';
    return buf;
}
