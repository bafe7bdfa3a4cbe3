/* common/digest.h — SHA-256, in one call or streamed over several parts,
 * HMAC-SHA256, and the constant-time comparison of digests: OpenSSL's
 * libcrypto, walled into common/digest.c, the only file that includes an
 * OpenSSL header. libcrypto is in the process anyway (libpq and libcurl
 * link it); this is the one place opsrun calls it.
 *
 * Thread-safe; a struct sha256 or hmac_sha256 belongs to one thread at a
 * time. A streamed digest holds a libcrypto context from its init to its
 * final, which frees it: every init is followed by its final. libcrypto
 * failing (out of memory, or a provider configuration without SHA-256)
 * aborts the process with its reason on stderr, as xmalloc does. */
#ifndef OPSRUN_DIGEST_H
#define OPSRUN_DIGEST_H

#include "common.h"

/* SHA-256 (FIPS 180-4) of n bytes; out holds 32 bytes. */
struct sha256 {
    void *ctx; /* libcrypto's EVP_MD_CTX */
};
void sha256_init(struct sha256 *s);
void sha256_update(struct sha256 *s, const void *data, size_t n);
void sha256_final(struct sha256 *s, unsigned char out[32]);
/* The lower-case hex digest of n bytes; out holds 65 bytes. */
void sha256_hex(const void *data, size_t n, char out[65]);

/* HMAC-SHA256 (RFC 2104) of a message given in parts: init with the key,
 * update with each part, final writes the 32-byte MAC. */
struct hmac_sha256 {
    void *ctx; /* libcrypto's EVP_MAC_CTX */
};
void hmac_sha256_init(struct hmac_sha256 *h, const void *key, size_t klen);
void hmac_sha256_update(struct hmac_sha256 *h, const void *data, size_t n);
void hmac_sha256_final(struct hmac_sha256 *h, unsigned char out[32]);

/* Whether the n bytes at a and b are equal, in a time that depends on n
 * only, never on where they differ (for comparing secrets' digests). */
bool ct_equal(const void *a, const void *b, size_t n);

#endif
