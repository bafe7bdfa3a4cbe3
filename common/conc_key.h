/* common/conc_key.h — the key template of a run type's "concurrency"
 * (docs/configuration.md#concurrency-keys): literal text, {{input:/json/pointer}} (one
 * value of the run's input, an RFC 6901 pointer) and {{tenant}} (the run's
 * tenant). Compiled once at load into a JSON array of parts, evaluated
 * for each run at submission:
 *
 *     "host-{{input:/labels/instance}}"
 *     -> [["text", "host-"], ["input", "/labels/instance"]]
 *
 * A value spliced in is written as follows: a string as it is (its bytes,
 * Unicode untouched), an integer in decimal, true and false as "true" and
 * "false"; any other value (null, a number with a decimal point or an
 * exponent, an object, an array) or a missing one is an error. The
 * migration that adds concurrency keys evaluates the same parts in SQL
 * (opsrun_conc_key) with these same rules, so that both give one string
 * for one run.
 *
 * Pure: no I/O, no state, thread-safe. Errors come back as an enum status
 * with a message in err (lower case, no final period, naming the
 * placeholder or the pointer), for the caller to prefix with what it
 * checked. */
#ifndef OPSRUN_CONC_KEY_H
#define OPSRUN_CONC_KEY_H

#include "common.h"

#include <jansson.h>

/* The longest template, and the longest key one evaluates to, in bytes. */
#define CONC_KEY_TEMPLATE_MAX 1024
#define CONC_KEY_MAX 512

/* Compiles tmpl into *parts (a new array: ["text", "literal"],
 * ["input", "/pointer"] and ["tenant"], adjacent literal text in one part).
 * ST_INVALID for an empty template, one longer than CONC_KEY_TEMPLATE_MAX
 * or not UTF-8, a "{{" without its "}}", a placeholder other than
 * {{input:/pointer}} and {{tenant}}, {{input:}} (the whole input: a key
 * names one value), a pointer that is not one, and literal text longer
 * than CONC_KEY_MAX bytes in all (every key holds it, so such a template
 * could make no key); *parts is then NULL. */
enum status conc_key_compile(const char *tmpl, json_t **parts, struct error *err) WUR;

/* The key the compiled parts give for a run of tenant (NULL: "") whose
 * input is input (NULL: none). On ST_OK *out is a heap string (free).
 * ST_INVALID, *out NULL, when a pointer finds nothing (`the input has no
 * value at "/labels/instance"`), finds a value a key cannot hold (`the
 * value at "/x" is an object, not a string, a whole number or a boolean`),
 * or when the key would be longer than CONC_KEY_MAX bytes. ST_INTERNAL for
 * parts that conc_key_compile did not make. */
enum status conc_key_eval(const json_t *parts, const char *tenant, const json_t *input, char **out,
                          struct error *err) WUR;

#endif
