/* common/sha256.h — SHA-256 (FIPS 180-4), in one call or streamed over
 * several parts, HMAC-SHA256 on top, and the constant-time comparison of
 * digests. Pure
 * functions, thread-safe; a struct sha256 belongs to one thread at a time. */
#ifndef OPSRUN_SHA256_H
#define OPSRUN_SHA256_H

#include "common.h"

/* SHA-256 of n bytes; out holds 32 bytes. Streaming form for multi-part input. */
struct sha256 {
    uint32_t h[8];
    uint64_t len;
    unsigned char buf[64];
    size_t fill;
};
void sha256_init(struct sha256 *s);
void sha256_update(struct sha256 *s, const void *data, size_t n);
void sha256_final(struct sha256 *s, unsigned char out[32]);
/* The lower-case hex digest of n bytes; out holds 65 bytes. */
void sha256_hex(const void *data, size_t n, char out[65]);

/* HMAC-SHA256 (RFC 2104) of a message given in parts: init with the key,
 * update with each part, final writes the 32-byte MAC. */
struct hmac_sha256 {
    struct sha256 inner, outer;
};
void hmac_sha256_init(struct hmac_sha256 *h, const void *key, size_t klen);
void hmac_sha256_update(struct hmac_sha256 *h, const void *data, size_t n);
void hmac_sha256_final(struct hmac_sha256 *h, unsigned char out[32]);

/* Whether the n bytes at a and b are equal, in a time that depends on n
 * only, never on where they differ (for comparing secrets' digests). */
bool ct_equal(const void *a, const void *b, size_t n);

#endif
