/* common/jsonptr.h — JSON pointers (RFC 6901) into jansson documents: how
 * run type params name a value inside a remote answer or a run's input.
 * jansson has no JSON pointer of its own (libxml2's XPath is for XML).
 *
 * Thread-safe; no state. A value found is borrowed from the document and
 * lives as long as it does. Nothing fails but a lookup, which returns NULL. */
#ifndef OPSRUN_JSONPTR_H
#define OPSRUN_JSONPTR_H

#include <jansson.h>

#include "common.h"

/* Whether ptr is a valid JSON pointer ("" or "/..." with valid escapes);
 * false for NULL. */
bool jptr_valid(const char *ptr);
/* The value at ptr ("" is the whole document), or NULL when ptr is invalid
 * or finds nothing. Array indexes are digits without a leading zero ("-"
 * finds nothing). */
const json_t *jptr_get(const json_t *doc, const char *ptr);
/* The value at ptr as text: a string as it is, an integer or a real
 * printed; NULL for anything else. Heap (free). */
char *jptr_text(const json_t *doc, const char *ptr);

#endif
