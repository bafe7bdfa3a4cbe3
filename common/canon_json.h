/* common/canon_json.h — canonical JSON, the one text of a JSON value that
 * identity hashes are taken over. Pure, thread-safe; the result is the
 * caller's. */
#ifndef OPSRUN_CANON_JSON_H
#define OPSRUN_CANON_JSON_H

#include "common.h"

#include <jansson.h>

/* Canonical JSON: objects with keys sorted by bytes, compact, no spaces,
 * integers as integers, reals with "%.17g", strings with jansson escaping.
 * Returns a heap string (free), never NULL for a valid json_t whose text is
 * shorter than 1 GiB (no parsed request body comes near). */
char *canon_json(const json_t *v);

#endif
