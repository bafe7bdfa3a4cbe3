/* common/cursor.h — the opaque token of a run list's position.
 * Thread-safe. */
#ifndef OPSRUN_CURSOR_H
#define OPSRUN_CURSOR_H

#include "common.h"

/* List cursor: an opaque token over (created_at microseconds, run id),
 * base64url without padding of "v1:<us>:<id>". encode writes a heap string;
 * decode returns false for anything that is not a token we made. id_out holds
 * 129 bytes. */
char *cursor_encode(int64_t created_us, const char *id);
bool cursor_decode(const char *token, int64_t *created_us_out, char id_out[129]);

#endif
