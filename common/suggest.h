/* common/suggest.h — "did you mean": the known word nearest to one that is
 * not known, by edit distance, when it is near enough to be a typo. Used
 * for unknown configuration keys, run types and commands, so that every
 * such error names the fix the same way.
 *
 * The distance counts insertions, deletions, substitutions and swaps of two
 * neighbours ("sumbit" is 1 from "submit"), ignoring case. Pure and
 * reentrant; a struct suggest borrows the word and the candidates, which
 * must outlive it. */
#ifndef OPSRUN_SUGGEST_H
#define OPSRUN_SUGGEST_H

#include "common/common.h"

/* Longer words and candidates count as far from everything. */
#define SUGGEST_LEN_MAX 128

struct suggest {
    const char *word;
    const char *best; /* the nearest candidate so far, or NULL */
    size_t best_len;
    size_t best_dist;
};

/* The edit distance between a[0..alen) and b[0..blen); SIZE_MAX when either
 * is longer than SUGGEST_LEN_MAX. */
size_t suggest_distance(const char *a, size_t alen, const char *b, size_t blen);

void suggest_init(struct suggest *s, const char *word);
/* Considers a candidate known by another name: the word is measured
 * against alias[0..alen), and shown[0..slen) is what is suggested
 * ("queue.workers" for the word "workers", measured against its last
 * part). The first of equally near candidates wins; one whose shown text
 * is the word itself is skipped. */
void suggest_add_as(struct suggest *s, const char *shown, size_t slen, const char *alias,
                    size_t alen);
/* Considers cand[0..len), measured against itself (a part of a longer
 * string is fine: "queue" of "queue.workers"). */
void suggest_add_len(struct suggest *s, const char *cand, size_t len);
void suggest_add(struct suggest *s, const char *cand); /* NULL is skipped */
/* Whether a candidate is near enough to be meant: at most a third of the
 * word's length apart, at least 1 and at most 3 edits. */
bool suggest_found(const struct suggest *s);
/* "; did you mean \"<nearest>\"?" into buf (cap bytes), or "" when no
 * candidate is near enough; returns buf. Every message with a suggestion
 * ends this way. */
const char *suggest_hint(const struct suggest *s, char *buf, size_t cap);

#endif
