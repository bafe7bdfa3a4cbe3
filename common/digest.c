/* common/digest.c — SHA-256, HMAC-SHA256 and the constant-time compare
 * (common/digest.h) over OpenSSL's libcrypto (the EVP interfaces of
 * OpenSSL 3). The digest and the MAC are fetched from the default library
 * context once, and shared by every thread. */
#include "digest.h"

#include "encoding.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/params.h>

static EVP_MD *sha256_md;
static EVP_MAC *hmac_mac;
static pthread_once_t fetch_once = PTHREAD_ONCE_INIT;

/* libcrypto failed: nothing but memory or the provider configuration can
 * make it, and no caller can do without a digest. */
static _Noreturn void crypto_failed(const char *what)
{
    unsigned long e = ERR_get_error();
    char why[256] = "no reason given";

    if (e)
        ERR_error_string_n(e, why, sizeof(why));
    fprintf(stderr, "opsrun: libcrypto: could not %s: %s\n", what, why);
    abort();
}

static void fetch(void)
{
    sha256_md = EVP_MD_fetch(NULL, "SHA2-256", NULL);
    if (!sha256_md)
        crypto_failed("fetch SHA-256");
    hmac_mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    if (!hmac_mac)
        crypto_failed("fetch HMAC");
}

static const EVP_MD *md(void)
{
    pthread_once(&fetch_once, fetch);
    return sha256_md;
}

void sha256_init(struct sha256 *s)
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();

    if (!ctx || EVP_DigestInit_ex2(ctx, md(), NULL) != 1)
        crypto_failed("start a SHA-256 digest");
    s->ctx = ctx;
}

void sha256_update(struct sha256 *s, const void *data, size_t n)
{
    if (n > 0 && EVP_DigestUpdate(s->ctx, data, n) != 1)
        crypto_failed("update a SHA-256 digest");
}

void sha256_final(struct sha256 *s, unsigned char out[32])
{
    unsigned int len = 0;

    if (EVP_DigestFinal_ex(s->ctx, out, &len) != 1 || len != 32)
        crypto_failed("finish a SHA-256 digest");
    EVP_MD_CTX_free(s->ctx);
    s->ctx = NULL;
}

void sha256_hex(const void *data, size_t n, char out[65])
{
    unsigned char d[32];
    unsigned int len = 0;

    if (EVP_Digest(data, n, d, &len, md(), NULL) != 1 || len != 32)
        crypto_failed("compute a SHA-256 digest");
    hex_encode(d, sizeof(d), out);
}

void hmac_sha256_init(struct hmac_sha256 *h, const void *key, size_t klen)
{
    static const unsigned char none = 0;
    char digest[] = "SHA2-256";
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
        OSSL_PARAM_construct_end(),
    };
    EVP_MAC_CTX *ctx;

    pthread_once(&fetch_once, fetch);
    ctx = EVP_MAC_CTX_new(hmac_mac);
    /* An empty key is a key: libcrypto wants a pointer for it all the same. */
    if (!ctx || EVP_MAC_init(ctx, klen ? key : &none, klen, params) != 1)
        crypto_failed("start an HMAC-SHA256");
    h->ctx = ctx;
}

void hmac_sha256_update(struct hmac_sha256 *h, const void *data, size_t n)
{
    if (n > 0 && EVP_MAC_update(h->ctx, data, n) != 1)
        crypto_failed("update an HMAC-SHA256");
}

void hmac_sha256_final(struct hmac_sha256 *h, unsigned char out[32])
{
    size_t len = 0;

    if (EVP_MAC_final(h->ctx, out, &len, 32) != 1 || len != 32)
        crypto_failed("finish an HMAC-SHA256");
    EVP_MAC_CTX_free(h->ctx);
    h->ctx = NULL;
}

bool ct_equal(const void *a, const void *b, size_t n)
{
    return CRYPTO_memcmp(a, b, n) == 0;
}
