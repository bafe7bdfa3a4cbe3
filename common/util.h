/* common/util.h — small pure functions: SHA-256, canonical JSON, run ids,
 * RFC 3339 time, list cursors, retry backoff, and identifier checks.
 * All are thread-safe and allocate only where the comment says so. */
#ifndef OPSRUN_UTIL_H
#define OPSRUN_UTIL_H

#include "common.h"

#include <jansson.h>

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
void sha256_hex(const void *data, size_t n, char out[65]);

/* Whether the n bytes at a and b are equal, in a time that depends on n
 * only, never on where they differ (for comparing secrets' digests). */
bool ct_equal(const void *a, const void *b, size_t n);
/* Lower- or upper-case hex of exactly 2 * n digits into n bytes; false for
 * anything else (out may then hold part of the value). */
bool hex_decode(const char *hex, unsigned char *out, size_t n);
/* base64url without padding (RFC 4648 section 5); out holds
 * (n * 4 + 2) / 3 + 1 bytes. */
void base64url_encode(const void *in, size_t n, char *out);

/* Canonical JSON: objects with keys sorted by bytes, compact, no spaces,
 * integers as integers, reals with "%.17g", strings with jansson escaping.
 * Returns a heap string (free), never NULL for a valid json_t whose text is
 * shorter than 1 GiB (no parsed request body comes near). */
char *canon_json(const json_t *v);

/* The identity hash of a submission: lower-case hex SHA-256 over the parts,
 * each part followed by a NUL byte so ("ab","c") and ("a","bc") differ.
 * kind is "dedupe_key", "run_id" or "data"; value is the key, the run id or
 * the canonical JSON of data. */
void identity_hash(const char *tenant, const char *type, const char *kind, const char *value,
                   char out[65]);

/* A new run id: 26 characters of Crockford base32 (ULID layout: 48-bit
 * millisecond time, then 80 random bits), so ids sort by creation time.
 * out holds 27 bytes. */
void run_id_new(char out[27]);
/* True when s matches [A-Za-z0-9._:-]{1,128}. */
bool run_id_valid(const char *s);

/* RFC 3339 parse into microseconds since the epoch (UTC). Accepts "Z" or a
 * numeric offset, and optional fractional seconds (up to 9 digits, truncated
 * to microseconds). Returns false for anything else. */
bool time_parse_rfc3339(const char *s, int64_t *us_out);
/* True for an instant PostgreSQL's timestamptz holds and we can print:
 * 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999Z. */
bool time_in_range(int64_t us);
/* Formats microseconds since the epoch as "YYYY-MM-DDTHH:MM:SS.ffffffZ";
 * out holds at least 32 bytes. */
void time_format_rfc3339(int64_t us, char *out, size_t cap);

/* List cursor: an opaque token over (created_at microseconds, run id),
 * base64url without padding of "v1:<us>:<id>". encode writes a heap string;
 * decode returns false for anything that is not a token we made. id_out holds
 * 129 bytes. */
char *cursor_encode(int64_t created_us, const char *id);
bool cursor_decode(const char *token, int64_t *created_us_out, char id_out[129]);

/* Retry delay before attempt (attempt >= 1 is the attempt that just failed):
 * full jitter, uniform in [0, min(cap_ms, base_ms * 2^(attempt-1))].
 * Never negative, never above cap_ms, no overflow for any attempt. */
int64_t backoff_full_jitter_ms(int64_t base_ms, int64_t cap_ms, int attempt);
/* The upper bound that backoff_full_jitter_ms draws under (for tests). */
int64_t backoff_ceiling_ms(int64_t base_ms, int64_t cap_ms, int attempt);
/* base ± fraction (0 <= fraction <= 1), uniform; used for poll intervals. */
int64_t jitter_ms(int64_t base_ms, double fraction);

#endif
