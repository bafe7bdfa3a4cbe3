/* common/sha256.c — SHA-256 (FIPS 180-4), HMAC-SHA256 and the
 * constant-time compare (common/sha256.h). */
#include "sha256.h"

#include <string.h>

#include "encoding.h"

static const uint32_t sha256_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t ror32(uint32_t x, unsigned n)
{
    return (x >> n) | (x << (32 - n));
}

static uint32_t load_be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static void store_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* The message schedule of FIPS 180-4 section 6.2.2 step 1. */
static void sha256_schedule(uint32_t w[64], const unsigned char block[64])
{
    for (size_t i = 0; i < 16; i++)
        w[i] = load_be32(block + 4 * i);
    for (unsigned i = 16; i < 64; i++) {
        uint32_t s0 = ror32(w[i - 15], 7) ^ ror32(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ror32(w[i - 2], 17) ^ ror32(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
}

/* One compression; v[] holds the working variables a..h in order. */
static void sha256_block(uint32_t h[8], const unsigned char block[64])
{
    uint32_t w[64], v[8];

    sha256_schedule(w, block);
    memcpy(v, h, sizeof(v));
    for (unsigned i = 0; i < 64; i++) {
        uint32_t s1 = ror32(v[4], 6) ^ ror32(v[4], 11) ^ ror32(v[4], 25);
        uint32_t ch = (v[4] & v[5]) ^ (~v[4] & v[6]);
        uint32_t t1 = v[7] + s1 + ch + sha256_k[i] + w[i];
        uint32_t s0 = ror32(v[0], 2) ^ ror32(v[0], 13) ^ ror32(v[0], 22);
        uint32_t maj = (v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]);

        memmove(v + 1, v, 7 * sizeof(v[0]));
        v[4] += t1;
        v[0] = t1 + s0 + maj;
    }
    for (unsigned i = 0; i < 8; i++)
        h[i] += v[i];
}

void sha256_init(struct sha256 *s)
{
    static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

    memcpy(s->h, iv, sizeof(iv));
    s->len = 0;
    s->fill = 0;
}

/* s->len counts bytes; sha256_final turns it into the bit length. */
void sha256_update(struct sha256 *s, const void *data, size_t n)
{
    const unsigned char *p = data;

    if (n == 0)
        return;
    s->len += n;
    if (s->fill > 0) {
        size_t take = n < 64 - s->fill ? n : 64 - s->fill;

        memcpy(s->buf + s->fill, p, take);
        s->fill += take;
        p += take;
        n -= take;
        if (s->fill < 64)
            return;
        sha256_block(s->h, s->buf);
        s->fill = 0;
    }
    for (; n >= 64; p += 64, n -= 64)
        sha256_block(s->h, p);
    memcpy(s->buf, p, n);
    s->fill = n;
}

void sha256_final(struct sha256 *s, unsigned char out[32])
{
    uint64_t bits = s->len * 8;

    s->buf[s->fill++] = 0x80;
    if (s->fill > 56) {
        memset(s->buf + s->fill, 0, 64 - s->fill);
        sha256_block(s->h, s->buf);
        s->fill = 0;
    }
    memset(s->buf + s->fill, 0, 56 - s->fill);
    store_be32(s->buf + 56, (uint32_t)(bits >> 32));
    store_be32(s->buf + 60, (uint32_t)bits);
    sha256_block(s->h, s->buf);
    for (size_t i = 0; i < 8; i++)
        store_be32(out + 4 * i, s->h[i]);
    s->fill = 0;
}

void sha256_hex(const void *data, size_t n, char out[65])
{
    struct sha256 s;
    unsigned char md[32];

    sha256_init(&s);
    sha256_update(&s, data, n);
    sha256_final(&s, md);
    hex_encode(md, sizeof(md), out);
}

/* A key longer than a block is hashed first; the padded key XOR ipad
 * starts the inner hash, XOR opad the outer one. */
void hmac_sha256_init(struct hmac_sha256 *h, const void *key, size_t klen)
{
    unsigned char k[64] = {0}, pad[64];

    if (klen > sizeof(k)) {
        struct sha256 s;
        sha256_init(&s);
        sha256_update(&s, key, klen);
        sha256_final(&s, k);
    } else if (klen) {
        memcpy(k, key, klen);
    }
    for (size_t i = 0; i < sizeof(pad); i++)
        pad[i] = (unsigned char)(k[i] ^ 0x36);
    sha256_init(&h->inner);
    sha256_update(&h->inner, pad, sizeof(pad));
    for (size_t i = 0; i < sizeof(pad); i++)
        pad[i] = (unsigned char)(k[i] ^ 0x5c);
    sha256_init(&h->outer);
    sha256_update(&h->outer, pad, sizeof(pad));
}

void hmac_sha256_update(struct hmac_sha256 *h, const void *data, size_t n)
{
    sha256_update(&h->inner, data, n);
}

void hmac_sha256_final(struct hmac_sha256 *h, unsigned char out[32])
{
    unsigned char md[32];

    sha256_final(&h->inner, md);
    sha256_update(&h->outer, md, sizeof(md));
    sha256_final(&h->outer, out);
}

/* The OR of every byte's difference, so the loop never ends early; the
 * volatile accumulator keeps the compiler from turning it into memcmp. */
bool ct_equal(const void *a, const void *b, size_t n)
{
    const volatile unsigned char *x = a, *y = b;
    volatile unsigned char acc = 0;

    for (size_t i = 0; i < n; i++)
        acc = (unsigned char)(acc | (x[i] ^ y[i]));
    return acc == 0;
}
