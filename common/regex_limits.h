/* common/regex_limits.h — whether the C library compiles a POSIX extended
 * regular expression in bounded time and memory, decided before regcomp
 * sees it. glibc spells every repetition out ("x+" as "xx*", "x{2,5}" as
 * five copies of x), and its epsilon closures grow much faster than the
 * pattern: fuzzing found a 20-byte pattern that took gigabytes
 * ("a" and 28 '+') and one that took minutes ("a+++*+++++++`++++++").
 * The rules here are conservative bounds that keep every compilation
 * well under a second and a few megabytes (random patterns that keep to
 * them compiled in 40 ms at most):
 *   - no repetition right after another ("a+*", "a{2}{3}": POSIX leaves
 *     them undefined);
 *   - no repetition of something that can match the empty string inside
 *     another such repetition ("((a*){0,2})*", "((a|b?){0,9})*");
 *   - repetitions nested at most REGEX_DEPTH_MAX deep ("((a+)b)+" is 2);
 *   - at most REGEX_PARTS_MAX parts once every repetition is spelled out;
 *   - a repetition of something that can match the empty string ("(a?)",
 *     "(x*y*)") spells out at most REGEX_EMPTY_PARTS_MAX parts of it.
 * Pure and reentrant. */
#ifndef OPSRUN_REGEX_LIMITS_H
#define OPSRUN_REGEX_LIMITS_H

#include "common/common.h"

#define REGEX_DEPTH_MAX 4
#define REGEX_PARTS_MAX 10000
#define REGEX_EMPTY_PARTS_MAX 100

/* Whether src keeps to the rules above; when not, which one it breaks, in
 * words, into why[0..n). A pattern malformed in another way passes: regcomp
 * refuses it with its own message. */
bool regex_within_limits(const char *src, char *why, size_t n);

#endif
