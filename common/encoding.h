/* common/encoding.h — the text forms of bytes: lower-case hex and base64url
 * without padding (RFC 4648 section 5). Pure functions, thread-safe; they
 * write into the caller's buffers and allocate nothing.
 *
 * Ours, not a library's: libcrypto's base64 (EVP_EncodeBlock,
 * EVP_DecodeBlock) has the standard alphabet with padding and does not
 * refuse stray low bits, which a cursor needs (one token per position),
 * and its hex (OPENSSL_buf2hexstr) is upper case with separators; turning
 * either into these costs more than these few lines, and libcrypto stays
 * walled in digest.c. libcurl, jansson and libxml2 offer neither. */
#ifndef OPSRUN_ENCODING_H
#define OPSRUN_ENCODING_H

#include "common.h"

/* Lower-case hex of n bytes; out holds 2 * n + 1 bytes. */
void hex_encode(const void *in, size_t n, char *out);
/* Lower- or upper-case hex of exactly 2 * n digits into n bytes; false for
 * anything else (out may then hold part of the value). */
bool hex_decode(const char *hex, unsigned char *out, size_t n);
/* base64url without padding; out holds (n * 4 + 2) / 3 + 1 bytes. */
void base64url_encode(const void *in, size_t n, char *out);
/* The n characters at in, decoded into out (at most cap bytes), the length
 * in *len_out. Strict: only the alphabet, no padding, and the unused low
 * bits of the last character must be zero, so every byte string has one
 * encoding; false for anything else or a result longer than cap. */
bool base64url_decode(const char *in, size_t n, unsigned char *out, size_t cap, size_t *len_out);

#endif
