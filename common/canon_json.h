/* common/canon_json.h — canonical JSON, the one text of a JSON value that
 * identity hashes are taken over. Pure, thread-safe; the result is the
 * caller's.
 *
 * Ours, not jansson's json_dumps (JSON_SORT_KEYS | JSON_COMPACT): the
 * identity hashes in the database are taken over this text, so its bytes
 * are a stored contract that no jansson release may change (how a real is
 * printed is jansson's choice), and it bounds depth and length where
 * json_dumps would not. Strings are escaped by jansson all the same. */
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
