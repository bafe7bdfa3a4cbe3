/* tests/unit/test_util.c — the Check suite for the small pure modules of
 * common/, one test case each: SHA-256 against the FIPS 180-4 vectors and
 * HMAC-SHA256 against RFC 4231 and the constant-time compare (digest.c), hex and base64url
 * (encoding.c), canonical JSON (canon_json.c), identity hashes and run ids (ids.c), RFC 3339 time
 * (time_rfc3339.c), list cursors (cursor.c) and backoff (backoff.c).
 *
 * System headers come before the common/ headers, ahead of common.h's
 * poison pragma. */
#include <check.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "common/backoff.h"
#include "common/canon_json.h"
#include "common/cursor.h"
#include "common/digest.h"
#include "common/encoding.h"
#include "common/ids.h"
#include "common/time_rfc3339.h"

/* ---- helpers ---------------------------------------------------------- */

static char *canon_text(const char *text)
{
    json_error_t jerr;
    json_t *v = json_loads(text, JSON_DECODE_ANY, &jerr);
    char *out;

    ck_assert_msg(v != NULL, "could not parse test JSON \"%s\": %s", text, jerr.text);
    out = canon_json(v);
    ck_assert_ptr_nonnull(out);
    json_decref(v);
    return out;
}

static void assert_canon(const char *in, const char *want)
{
    char *got = canon_text(in);

    ck_assert_str_eq(got, want);
    free(got);
}

/* An independent base64url encoder (3-byte groups), so cursor tests can
 * build tokens over arbitrary plain text. */
static char *b64url(const void *data, size_t n)
{
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    const unsigned char *p = data;
    char *out = xmalloc(n / 3 * 4 + 5), *o = out;
    size_t i;

    for (i = 0; i + 3 <= n; i += 3) {
        unsigned long g = (unsigned long)p[i] << 16 | (unsigned long)p[i + 1] << 8 | p[i + 2];
        *o++ = a[g >> 18 & 63];
        *o++ = a[g >> 12 & 63];
        *o++ = a[g >> 6 & 63];
        *o++ = a[g & 63];
    }
    if (n - i == 1) {
        *o++ = a[p[i] >> 2];
        *o++ = a[(p[i] & 3) << 4];
    } else if (n - i == 2) {
        *o++ = a[p[i] >> 2];
        *o++ = a[(p[i] & 3) << 4 | p[i + 1] >> 4];
        *o++ = a[(p[i + 1] & 15) << 2];
    }
    *o = '\0';
    return out;
}

static bool decode_plain(const char *plain, int64_t *us, char id[129])
{
    char *tok = b64url(plain, strlen(plain));
    bool ok = cursor_decode(tok, us, id);

    free(tok);
    return ok;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = ms % 1000 * 1000000L};

    while (nanosleep(&ts, &ts) != 0)
        ;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(a, b);
}

/* ---- SHA-256 ---------------------------------------------------------- */

static void assert_sha(const char *msg, const char *want)
{
    char hex[65];

    sha256_hex(msg, strlen(msg), hex);
    ck_assert_str_eq(hex, want);
}

START_TEST(sha256_empty)
{
    assert_sha("", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}
END_TEST

START_TEST(sha256_abc)
{
    assert_sha("abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}
END_TEST

START_TEST(sha256_448_bits)
{
    assert_sha("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
               "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}
END_TEST

START_TEST(sha256_896_bits)
{
    assert_sha("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklm"
               "nopqrlmnopqrsmnopqrstnopqrstu",
               "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}
END_TEST

/* One million 'a' fed in odd, varying chunk sizes that straddle blocks. */
START_TEST(sha256_million_a_streaming)
{
    static const size_t sizes[] = {1, 3, 63, 65, 7, 127, 129, 55, 56, 64, 1001};
    unsigned char chunk[1024], md[32];
    struct sha256 s;
    size_t left = 1000000;
    char hex[65];
    static const char hexd[] = "0123456789abcdef";

    memset(chunk, 'a', sizeof(chunk));
    sha256_init(&s);
    for (unsigned i = 0; left > 0; i++) {
        size_t n = sizes[i % ARRAY_LEN(sizes)];
        if (n > left)
            n = left;
        sha256_update(&s, chunk, n);
        left -= n;
    }
    sha256_final(&s, md);
    for (int i = 0; i < 32; i++) {
        hex[2 * i] = hexd[md[i] >> 4];
        hex[2 * i + 1] = hexd[md[i] & 15];
    }
    hex[64] = '\0';
    ck_assert_str_eq(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}
END_TEST

/* Around the padding edges (55, 56, 63, 64, 65 bytes) every split of the
 * input gives the one-shot digest. */
START_TEST(sha256_split_matches_one_shot)
{
    unsigned char msg[130];

    for (size_t i = 0; i < sizeof(msg); i++)
        msg[i] = (unsigned char)(i * 7 + 1);
    for (size_t n = 50; n <= sizeof(msg); n++) {
        char want[65];
        sha256_hex(msg, n, want);
        for (size_t cut = 0; cut <= n; cut++) {
            struct sha256 s;
            unsigned char a[32], b[32];
            sha256_init(&s);
            sha256_update(&s, msg, cut);
            sha256_update(&s, NULL, 0);
            sha256_update(&s, msg + cut, n - cut);
            sha256_final(&s, a);
            sha256_init(&s);
            sha256_update(&s, msg, n);
            sha256_final(&s, b);
            ck_assert_mem_eq(a, b, 32);
        }
    }
}
END_TEST

/* ---- HMAC-SHA256: the test cases of RFC 4231 section 4 ---------------- */

/* key (klen bytes) over data, hex; want_len: hex digits compared (case 5
 * truncates the MAC to 128 bits). The data is fed in two parts when split
 * is non-zero, as a signature's "<t>." and body are. */
static void assert_hmac(const void *key, size_t klen, const void *data, size_t dlen, size_t split,
                        const char *want)
{
    struct hmac_sha256 h;
    unsigned char mac[32];
    char hex[65];

    hmac_sha256_init(&h, key, klen);
    hmac_sha256_update(&h, data, split);
    hmac_sha256_update(&h, (const char *)data + split, dlen - split);
    hmac_sha256_final(&h, mac);
    hex_encode(mac, sizeof(mac), hex);
    ck_assert_msg(strncmp(hex, want, strlen(want)) == 0, "HMAC %s, want %s", hex, want);
}

START_TEST(hmac_rfc4231)
{
    unsigned char k1[20], k3[20], d3[50], k4[25], d4[50], k5[20], k6[131];
    static const char d6[] = "Test Using Larger Than Block-Size Key - Hash Key First";
    static const char d7[] = "This is a test using a larger than block-size key and a larger than "
                             "block-size data. The key needs to be hashed before being used by the "
                             "HMAC algorithm.";

    memset(k1, 0x0b, sizeof(k1));
    memset(k3, 0xaa, sizeof(k3));
    memset(d3, 0xdd, sizeof(d3));
    for (size_t i = 0; i < sizeof(k4); i++)
        k4[i] = (unsigned char)(i + 1);
    memset(d4, 0xcd, sizeof(d4));
    memset(k5, 0x0c, sizeof(k5));
    memset(k6, 0xaa, sizeof(k6));
    for (size_t split = 0; split < 3; split++) {
        assert_hmac(k1, sizeof(k1), "Hi There", 8, split,
                    "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
        assert_hmac("Jefe", 4, "what do ya want for nothing?", 28, split,
                    "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
        assert_hmac(k3, sizeof(k3), d3, sizeof(d3), split,
                    "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
        assert_hmac(k4, sizeof(k4), d4, sizeof(d4), split,
                    "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
        assert_hmac(k5, sizeof(k5), "Test With Truncation", 20, split,
                    "a3b6167473100ee06e0c796c2955552b");
        assert_hmac(k6, sizeof(k6), d6, sizeof(d6) - 1, split,
                    "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
        assert_hmac(k6, sizeof(k6), d7, sizeof(d7) - 1, split,
                    "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
    }
}
END_TEST

/* An empty key is a key too (pinned with Python's hmac module). */
START_TEST(hmac_empty_key)
{
    static const char fox[] = "The quick brown fox jumps over the lazy dog";

    assert_hmac("", 0, "", 0, 0,
                "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
    assert_hmac(NULL, 0, fox, sizeof(fox) - 1, 4,
                "fb011e6154a19b9a4c767373c305275a5a69e8b68b0b4c9200c383dced19a416");
}
END_TEST

/* ---- secrets: constant-time compare, hex, base64url -------------------- */

START_TEST(ct_equal_cases)
{
    unsigned char a[32], b[32];

    for (size_t i = 0; i < sizeof(a); i++)
        a[i] = b[i] = (unsigned char)(i * 13 + 5);
    ck_assert(ct_equal(a, b, sizeof(a)));
    ck_assert(ct_equal(a, b, 0));
    for (size_t i = 0; i < sizeof(a); i++) {
        for (unsigned bit = 0; bit < 8; bit++) {
            b[i] ^= (unsigned char)(1u << bit);
            ck_assert_msg(!ct_equal(a, b, sizeof(a)), "byte %zu bit %u", i, bit);
            ck_assert(ct_equal(a, b, i)); /* the prefix before the change */
            b[i] ^= (unsigned char)(1u << bit);
        }
    }
}
END_TEST

START_TEST(hex_decode_cases)
{
    unsigned char out[4];
    static const unsigned char want[4] = {0x00, 0xab, 0xCD, 0xff};

    ck_assert(hex_decode("00abCDff", out, 4));
    ck_assert_mem_eq(out, want, 4);
    ck_assert(hex_decode("", out, 0));
    ck_assert(!hex_decode("00abCDf", out, 4));   /* short */
    ck_assert(!hex_decode("00abCDff0", out, 4)); /* long */
    ck_assert(!hex_decode("00abCDfg", out, 4));  /* not hex */
    ck_assert(!hex_decode("00 bCDff", out, 4));
    ck_assert(!hex_decode("0x00abCD", out, 4));
}
END_TEST

/* RFC 4648 section 10, in the URL-safe alphabet without padding. */
START_TEST(base64url_vectors)
{
    static const struct {
        const char *in, *out;
    } v[] = {{"", ""},           {"f", "Zg"},          {"fo", "Zm8"},          {"foo", "Zm9v"},
             {"foob", "Zm9vYg"}, {"fooba", "Zm9vYmE"}, {"foobar", "Zm9vYmFy"}, {"\xfb\xff", "-_8"}};
    char out[16];

    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        base64url_encode(v[i].in, strlen(v[i].in), out);
        ck_assert_str_eq(out, v[i].out);
    }
}
END_TEST

/* ---- canonical JSON --------------------------------------------------- */

START_TEST(canon_key_order_independent)
{
    char *a = canon_text("{\"b\":1,\"a\":2}");
    char *b = canon_text("{\"a\":2,\"b\":1}");

    ck_assert_str_eq(a, b);
    ck_assert_str_eq(a, "{\"a\":2,\"b\":1}");
    free(a);
    free(b);
}
END_TEST

START_TEST(canon_keys_bytewise)
{
    assert_canon("{\"b\":3,\"ab\":1,\"\":4,\"a\":2,\"B\":5,\"\xc3\xa9\":6,\"z\":7}",
                 "{\"\":4,\"B\":5,\"a\":2,\"ab\":1,\"b\":3,\"z\":7,\"\xc3\xa9\":6}");
}
END_TEST

START_TEST(canon_nested_compact)
{
    assert_canon(" { \"z\" : [ 3 , { \"y\" : { \"b\" : [ ] , \"a\" : { } } } , [ [ 1 ] ] ] ,\n"
                 "\t\"a\" : { \"d\" : null , \"c\" : [ true , false ] } } ",
                 "{\"a\":{\"c\":[true,false],\"d\":null},\"z\":[3,{\"y\":{\"a\":{},\"b\":[]}},"
                 "[[1]]]}");
}
END_TEST

START_TEST(canon_scalars)
{
    assert_canon("true", "true");
    assert_canon("false", "false");
    assert_canon("null", "null");
    assert_canon("0", "0");
    assert_canon("-42", "-42");
    assert_canon("9223372036854775807", "9223372036854775807");
    assert_canon("-9223372036854775808", "-9223372036854775808");
    assert_canon("\"\"", "\"\"");
}
END_TEST

/* Reals use "%.17g" plus ".0" when that looks like an integer. */
START_TEST(canon_reals)
{
    assert_canon("1.0", "1.0");
    assert_canon("1", "1");
    assert_canon("-0.0", "-0.0");
    assert_canon("0.5", "0.5");
    assert_canon("0.1", "0.10000000000000001");
    assert_canon("1e100", "1e+100");
    assert_canon("1.5e-7", "1.4999999999999999e-07");
    assert_canon("123456789012345678901234567890.0", "1.2345678901234568e+29");
    assert_canon("[2.0,2]", "[2.0,2]");
}
END_TEST

/* Every rendered real reads back as the same double and as a real. */
START_TEST(canon_reals_round_trip)
{
    static const double vals[] = {
        1.0,         -1.0,   0.1, 1.0 / 3, 1e-300, 4.9e-324, 1.7976931348623157e308,
        123456789.0, 2.5e15, 1e17};

    for (size_t i = 0; i < ARRAY_LEN(vals); i++) {
        json_t *r = json_real(vals[i]);
        char *s = canon_json(r);
        json_t *back = json_loads(s, JSON_DECODE_ANY, NULL);

        ck_assert_msg(back && json_is_real(back), "\"%s\" did not read back as a real", s);
        ck_assert(json_real_value(back) == vals[i]);
        json_decref(back);
        json_decref(r);
        free(s);
    }
}
END_TEST

START_TEST(canon_unicode)
{
    /* Raw UTF-8 stays raw; \u escapes in the input become UTF-8. */
    assert_canon("\"caf\xc3\xa9 \xf0\x9f\x98\x80\"", "\"caf\xc3\xa9 \xf0\x9f\x98\x80\"");
    assert_canon("\"\\u00e9\\ud83d\\ude00\"", "\"\xc3\xa9\xf0\x9f\x98\x80\"");
    assert_canon("{\"\\u00e9\":1}", "{\"\xc3\xa9\":1}");
}
END_TEST

/* Jansson's escaping: short forms where JSON has them, else \u with
 * upper-case hex; '/' and DEL stay as they are. */
START_TEST(canon_escapes)
{
    json_t *nul = json_stringn("a\0b", 3);
    char *s;

    assert_canon("\"q\\\" b\\\\ n\\n t\\t r\\r f\\f b\\b c\\u0001 d\\u001f s/ \\/\"",
                 "\"q\\\" b\\\\ n\\n t\\t r\\r f\\f b\\b c\\u0001 d\\u001F s/ /\"");
    assert_canon("{\"k\\n\\\"\":\"\\u007f\"}", "{\"k\\n\\\"\":\"\x7f\"}");
    s = canon_json(nul);
    ck_assert_str_eq(s, "\"a\\u0000b\"");
    free(s);
    json_decref(nul);
}
END_TEST

/* The canonical form is a fixed point and matches jansson's own sorted
 * compact output. */
START_TEST(canon_matches_jansson)
{
    const char *in =
        "{\"x\":[1,2.5,{\"q\":\"\\u00e9\\n\",\"p\":null}],\"a\":{\"c\":-1,\"b\":true}}";
    json_t *v = json_loads(in, 0, NULL);
    char *c1 = canon_json(v);
    char *ref = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS);
    char *c2 = canon_text(c1);

    ck_assert_str_eq(c1, ref);
    ck_assert_str_eq(c1, c2);
    free(c1);
    free(c2);
    free(ref);
    json_decref(v);
}
END_TEST

static json_t *nest_arrays(int depth)
{
    json_t *v = json_array();

    for (int i = 1; i < depth; i++) {
        json_t *outer = json_array();
        json_array_append_new(outer, v);
        v = outer;
    }
    return v;
}

/* What jansson can parse (2048 levels) renders in full; deeper hand-built
 * values render with null at the limit and stay valid JSON. */
START_TEST(canon_depth_limit)
{
    json_t *deep = nest_arrays(2048), *deeper = nest_arrays(2100), *back;
    char *s = canon_json(deep), *t;

    ck_assert_uint_eq(strlen(s), 2 * 2048);
    ck_assert(s[2047] == '[' && s[2048] == ']');
    back = json_loads(s, 0, NULL);
    ck_assert_ptr_nonnull(back);
    json_decref(back);
    free(s);
    s = canon_json(deeper);
    ck_assert_uint_eq(strlen(s), 2 * 2048 + 4);
    t = strstr(s, "null");
    ck_assert_ptr_eq(t, s + 2048);
    ck_assert(s[2047] == '[' && s[2052] == ']');
    free(s);
    json_decref(deep);
    json_decref(deeper);
}
END_TEST

START_TEST(canon_refuses_invalid_utf8)
{
    json_t *bad = json_string_nocheck("\xff\xfe");
    json_t *obj = json_object();

    ck_assert_ptr_null(canon_json(NULL));
    ck_assert_ptr_null(canon_json(bad));
    json_object_set_new_nocheck(obj, "ok", json_integer(1));
    json_object_set_new_nocheck(obj, "\xc3", json_integer(2));
    ck_assert_ptr_null(canon_json(obj));
    json_decref(bad);
    json_decref(obj);
}
END_TEST

/* ---- identity hash ---------------------------------------------------- */

/* Pinned with: printf 'default\0demo\0data\0{}\0' | sha256sum */
START_TEST(identity_hash_stable)
{
    char out[65];

    identity_hash("default", "demo", "data", "{}", out);
    ck_assert_str_eq(out, "b914afd841a0ee16da9aa91aef7e8ee6d9e472fab9d5bc0c2d26db7a1910015a");
}
END_TEST

START_TEST(identity_hash_separates_parts)
{
    char a[65], b[65], c[65], d[65];

    identity_hash("t", "ab", "c", "v", a);
    identity_hash("t", "a", "bc", "v", b);
    identity_hash("t", "ab", "c", "", c);
    identity_hash("t", "ab", "", "cv", d);
    ck_assert_str_ne(a, b);
    ck_assert_str_ne(c, d);
    ck_assert_str_ne(a, c);
}
END_TEST

START_TEST(identity_hash_is_sha_of_parts)
{
    static const char msg[] = "acme\0email\0dedupe_key\0k-1\0";
    char want[65], got[65];

    sha256_hex(msg, sizeof(msg) - 1, want);
    identity_hash("acme", "email", "dedupe_key", "k-1", got);
    ck_assert_str_eq(got, want);
    for (int i = 0; i < 64; i++)
        ck_assert(strchr("0123456789abcdef", got[i]) != NULL);
}
END_TEST

/* ---- run ids ---------------------------------------------------------- */

static const char crockford[] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

static int64_t ulid_ms(const char *id)
{
    int64_t ms = 0;

    for (int i = 0; i < 10; i++)
        ms = ms * 32 + (strchr(crockford, id[i]) - crockford);
    return ms;
}

START_TEST(run_id_format)
{
    for (int k = 0; k < 1000; k++) {
        char id[27];
        run_id_new(id);
        ck_assert_uint_eq(strlen(id), 26);
        ck_assert_uint_eq(strspn(id, crockford), 26);
        ck_assert(id[0] <= '7');
        ck_assert(run_id_valid(id));
    }
}
END_TEST

START_TEST(run_id_time_prefix)
{
    char id[27];
    int64_t before = clock_wall_ms(), after, ms;

    run_id_new(id);
    after = clock_wall_ms();
    ms = ulid_ms(id);
    ck_assert_int_ge(ms, before);
    ck_assert_int_le(ms, after);
}
END_TEST

START_TEST(run_id_sorts_by_time)
{
    char a[27], b[27];

    run_id_new(a);
    sleep_ms(2);
    run_id_new(b);
    ck_assert_int_lt(strcmp(a, b), 0);
}
END_TEST

START_TEST(run_id_unique)
{
    enum { N = 10000 };
    char(*ids)[27] = xmalloc(N * sizeof(*ids));

    for (int i = 0; i < N; i++)
        run_id_new(ids[i]);
    qsort(ids, N, sizeof(*ids), cmp_str);
    for (int i = 1; i < N; i++)
        ck_assert_str_ne(ids[i - 1], ids[i]);
    free(ids);
}
END_TEST

/* One thread's ids, made in a tight loop. */
struct id_run {
    pthread_t t;
    char (*ids)[27];
    int n;
};

static void *make_ids(void *arg)
{
    struct id_run *r = arg;

    for (int i = 0; i < r->n; i++)
        run_id_new(r->ids[i]);
    return NULL;
}

/* Many ids made at once by several threads, most of them within one
 * millisecond of the one before: each thread's are strictly increasing
 * (monotonic within a millisecond, the ULID spec's way, rather than in
 * random order), and no two of any thread are the same. */
START_TEST(run_id_monotonic_threads)
{
    enum { THREADS = 4, N = 20000 };
    struct id_run runs[THREADS];
    char(*all)[27] = xmalloc((size_t)THREADS * N * sizeof(*all));
    int same_ms = 0;

    for (int t = 0; t < THREADS; t++) {
        runs[t] = (struct id_run){.ids = all + (size_t)t * N, .n = N};
        ck_assert_int_eq(pthread_create(&runs[t].t, NULL, make_ids, &runs[t]), 0);
    }
    for (int t = 0; t < THREADS; t++)
        ck_assert_int_eq(pthread_join(runs[t].t, NULL), 0);
    for (int t = 0; t < THREADS; t++)
        for (int i = 1; i < N; i++) {
            ck_assert_msg(strcmp(runs[t].ids[i - 1], runs[t].ids[i]) < 0,
                          "thread %d: id %d %s is not after %s", t, i, runs[t].ids[i],
                          runs[t].ids[i - 1]);
            same_ms += ulid_ms(runs[t].ids[i - 1]) == ulid_ms(runs[t].ids[i]);
        }
    ck_assert_int_gt(same_ms, N); /* the loop did make ids within one millisecond */
    qsort(all, (size_t)THREADS * N, sizeof(*all), cmp_str);
    for (int i = 1; i < THREADS * N; i++)
        ck_assert_str_ne(all[i - 1], all[i]);
    free(all);
}
END_TEST

/* Within one millisecond, the next id is the one before plus one in its
 * last character (the random part's lowest bits), carried as base32 is. */
START_TEST(run_id_increments_within_a_millisecond)
{
    char a[27], b[27];
    int tries = 0;

    do {
        run_id_new(a);
        run_id_new(b);
    } while (ulid_ms(a) != ulid_ms(b) && ++tries < 100);
    ck_assert_int_eq(ulid_ms(a), ulid_ms(b));
    /* b is a + 1: equal up to the last digit that is not the greatest (Z),
     * that digit one more, and every Z after it 0 */
    {
        int k = 25;
        while (k >= 10 && a[k] == 'Z') {
            ck_assert_int_eq(b[k], '0');
            k--;
        }
        ck_assert_int_ge(k, 10);
        ck_assert_int_eq(strchr(crockford, b[k]) - crockford,
                         strchr(crockford, a[k]) - crockford + 1);
        ck_assert_int_eq(memcmp(a, b, (size_t)k), 0);
    }
}
END_TEST

START_TEST(run_id_validity)
{
    char s[131];

    ck_assert(run_id_valid("a"));
    ck_assert(run_id_valid("job-1.retry_2:x"));
    ck_assert(run_id_valid("AZaz09._:-"));
    ck_assert(!run_id_valid(NULL));
    ck_assert(!run_id_valid(""));
    ck_assert(!run_id_valid("a/b"));
    ck_assert(!run_id_valid("a b"));
    ck_assert(!run_id_valid("caf\xc3\xa9"));
    ck_assert(!run_id_valid("a\tb"));
    ck_assert(!run_id_valid("a+b"));
    memset(s, 'x', sizeof(s));
    s[128] = '\0';
    ck_assert(run_id_valid(s));
    s[128] = 'x';
    s[129] = '\0';
    ck_assert(!run_id_valid(s));
}
END_TEST

/* ---- RFC 3339 --------------------------------------------------------- */

/* 2026-11-22T03:04:05Z, from: date -u -d 2026-11-22T03:04:05Z +%s */
#define T0_US (INT64_C(1795316645) * 1000000)

static int64_t parse_ok(const char *s)
{
    int64_t us = 0;

    ck_assert_msg(time_parse_rfc3339(s, &us), "could not parse \"%s\"", s);
    return us;
}

START_TEST(time_parse_basic)
{
    ck_assert_int_eq(parse_ok("2026-11-22T03:04:05Z"), T0_US);
    ck_assert_int_eq(parse_ok("2026-11-22t03:04:05z"), T0_US);
    ck_assert_int_eq(parse_ok("1970-01-01T00:00:00Z"), 0);
    ck_assert_int_eq(parse_ok("1969-12-31T23:59:59.999999Z"), -1);
    ck_assert_int_eq(parse_ok("2000-02-29T00:00:00Z"), INT64_C(951782400) * 1000000);
    ck_assert_int_eq(parse_ok("2024-02-29T12:00:00Z"), INT64_C(1709208000) * 1000000);
}
END_TEST

START_TEST(time_parse_fraction)
{
    ck_assert_int_eq(parse_ok("2026-11-22T03:04:05.123456Z"), T0_US + 123456);
    ck_assert_int_eq(parse_ok("2026-11-22T03:04:05.1Z"), T0_US + 100000);
    ck_assert_int_eq(parse_ok("2026-11-22T03:04:05.000001Z"), T0_US + 1);
    ck_assert_int_eq(parse_ok("2026-11-22T03:04:05.123456789Z"), T0_US + 123456);
    ck_assert_int_eq(parse_ok("2026-11-22T03:04:05.9999999Z"), T0_US + 999999);
}
END_TEST

START_TEST(time_parse_offsets)
{
    ck_assert_int_eq(parse_ok("2026-11-22T05:04:05+02:00"), T0_US);
    ck_assert_int_eq(parse_ok("2026-11-22T05:04:05.5+02:00"), T0_US + 500000);
    ck_assert_int_eq(parse_ok("2026-11-21T21:34:05-05:30"), T0_US);
    ck_assert_int_eq(parse_ok("2026-11-22T03:04:05+00:00"), T0_US);
    ck_assert_int_eq(parse_ok("2026-11-22T03:04:05-00:00"), T0_US);
    ck_assert_int_eq(parse_ok("2026-11-23T03:03:05+23:59"), T0_US);
}
END_TEST

START_TEST(time_parse_rejects)
{
    static const char *const bad[] = {
        "",
        "2026-13-01T00:00:00Z",
        "2026-00-01T00:00:00Z",
        "2026-02-30T00:00:00Z",
        "2026-02-29T00:00:00Z",
        "1900-02-29T00:00:00Z",
        "2026-04-31T00:00:00Z",
        "2026-01-00T00:00:00Z",
        "2026-11-22T03:04:05",
        "2026-11-22T03:04:05Zjunk",
        "2026-11-22T03:04:05Z ",
        " 2026-11-22T03:04:05Z",
        "2026-11-22T03:04:60Z",
        "2026-11-22T24:00:00Z",
        "2026-11-22T03:60:05Z",
        "2026-11-22 03:04:05Z",
        "2026-11-22T03:04Z",
        "26-11-22T03:04:05Z",
        "2026-1-22T03:04:05Z",
        "2026-11-22T3:04:05Z",
        "2026-11-22T03:04:05.Z",
        "2026-11-22T03:04:05.1234567890Z",
        "2026-11-22T03:04:05,5Z",
        "2026-11-22T03:04:05+0200",
        "2026-11-22T03:04:05+02",
        "2026-11-22T03:04:05+24:00",
        "2026-11-22T03:04:05+02:60",
        "2026-11-22T03:04:05+02:00:00",
        "2026-11-22T03:04:05UTC",
        "+2026-11-22T03:04:05Z",
        "2026-11-22",
    };
    int64_t us = 7;

    for (size_t i = 0; i < ARRAY_LEN(bad); i++)
        ck_assert_msg(!time_parse_rfc3339(bad[i], &us), "accepted \"%s\"", bad[i]);
    ck_assert(!time_parse_rfc3339(NULL, &us));
    ck_assert_int_eq(us, 7);
}
END_TEST

START_TEST(time_format_known)
{
    char out[32];

    time_format_rfc3339(T0_US + 123456, out, sizeof(out));
    ck_assert_str_eq(out, "2026-11-22T03:04:05.123456Z");
    time_format_rfc3339(0, out, sizeof(out));
    ck_assert_str_eq(out, "1970-01-01T00:00:00.000000Z");
    time_format_rfc3339(-1, out, sizeof(out));
    ck_assert_str_eq(out, "1969-12-31T23:59:59.999999Z");
    time_format_rfc3339(INT64_C(951782400) * 1000000, out, sizeof(out));
    ck_assert_str_eq(out, "2000-02-29T00:00:00.000000Z");
}
END_TEST

/* Out-of-range values clamp to years 0000 and 9999, which still parse. */
START_TEST(time_format_clamps)
{
    char out[32];
    int64_t us;

    time_format_rfc3339(INT64_MAX, out, sizeof(out));
    ck_assert_str_eq(out, "9999-12-31T23:59:59.999999Z");
    ck_assert(time_parse_rfc3339(out, &us));
    time_format_rfc3339(INT64_MIN, out, sizeof(out));
    ck_assert_str_eq(out, "0000-01-01T00:00:00.000000Z");
    ck_assert(time_parse_rfc3339(out, &us));
}
END_TEST

START_TEST(time_round_trip_strings)
{
    static const char *const s[] = {
        "2026-11-22T03:04:05.123456Z", "1970-01-01T00:00:00.000000Z", "0001-01-01T00:00:00.000000Z",
        "1600-02-29T23:59:59.999999Z", "9999-12-31T23:59:59.999999Z", "0000-01-01T00:00:00.000000Z",
    };
    char out[32];

    for (size_t i = 0; i < ARRAY_LEN(s); i++) {
        time_format_rfc3339(parse_ok(s[i]), out, sizeof(out));
        ck_assert_str_eq(out, s[i]);
    }
}
END_TEST

/* Random instants across 0000..9999 survive format then parse, and agree
 * with glibc's gmtime_r where time_t reaches. */
START_TEST(time_round_trip_random)
{
    const int64_t lo = INT64_C(-62167219200) * 1000000, hi = INT64_C(253402300800) * 1000000;

    for (int i = 0; i < 10000; i++) {
        int64_t us = lo + (int64_t)rand_below((uint64_t)(hi - lo));
        time_t secs = (time_t)(us >= 0 ? us / 1000000 : (us - 999999) / 1000000);
        struct tm tm;
        char out[32], want[40];

        time_format_rfc3339(us, out, sizeof(out));
        ck_assert_int_eq(parse_ok(out), us);
        ck_assert_ptr_nonnull(gmtime_r(&secs, &tm));
        strftime(want, sizeof(want), "%Y-%m-%dT%H:%M:%S", &tm);
        if (tm.tm_year + 1900 >= 1000)
            ck_assert_mem_eq(out, want, 19);
    }
}
END_TEST

/* ---- cursors ---------------------------------------------------------- */

START_TEST(cursor_round_trip)
{
    /* The ends are the instants PostgreSQL can hold (years 0001 to 9999). */
    static const int64_t us[] = {
        0, 1, -1, T0_US + 123456, INT64_C(253402300799999999), INT64_C(-62135596800000000)};
    char long_id[129], id[129];

    memset(long_id, 'Z', 128);
    long_id[128] = '\0';
    for (size_t i = 0; i < ARRAY_LEN(us); i++) {
        const char *ids[] = {"a", "01JDAB3XYZ", "x:y:z", "a.b_c-d", long_id};
        for (size_t j = 0; j < ARRAY_LEN(ids); j++) {
            char *tok = cursor_encode(us[i], ids[j]);
            int64_t got = 42;
            ck_assert(
                strspn(tok, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") ==
                strlen(tok));
            ck_assert(cursor_decode(tok, &got, id));
            ck_assert_int_eq(got, us[i]);
            ck_assert_str_eq(id, ids[j]);
            free(tok);
        }
    }
}
END_TEST

START_TEST(utf8_scrub_cases)
{
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"plain ascii", "plain ascii"},
        {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"},
        {"cut \xc3", "cut ?"},        /* truncated two-byte sequence */
        {"cut \xe2\x82", "cut ??"},   /* truncated three-byte sequence */
        {"\xc0\xaf", "??"},           /* overlong */
        {"\xe0\x80\xaf", "???"},      /* overlong three-byte */
        {"\xed\xa0\x80", "???"},      /* UTF-16 surrogate */
        {"\xf4\x90\x80\x80", "????"}, /* above U+10FFFF */
        {"\xff\xfe x", "?? x"},
        {"\x80lone continuation", "?lone continuation"},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        char buf[64];
        snprintf(buf, sizeof(buf), "%s", cases[i].in);
        utf8_scrub(buf);
        ck_assert_msg(strcmp(buf, cases[i].out) == 0, "case %zu: got \"%s\"", i, buf);
    }
}
END_TEST

START_TEST(time_range_bounds)
{
    ck_assert(time_in_range(0));
    ck_assert(time_in_range(INT64_C(-62135596800000000))); /* 0001-01-01T00:00:00Z */
    ck_assert(!time_in_range(INT64_C(-62135596800000001)));
    ck_assert(time_in_range(INT64_C(253402300799999999))); /* 9999-12-31T23:59:59.999999Z */
    ck_assert(!time_in_range(INT64_C(253402300800000000)));
    ck_assert(!time_in_range(INT64_MIN));
    ck_assert(!time_in_range(INT64_MAX));
}
END_TEST

/* Pinned with: printf 'v1:1:a' | base64 | tr '+/' '-_' | tr -d = */
START_TEST(cursor_known_token)
{
    char *tok = cursor_encode(1, "a");

    ck_assert_str_eq(tok, "djE6MTph");
    free(tok);
    tok = cursor_encode(1732244645123456, "01JDAB3XYZ");
    ck_assert_str_eq(tok, "djE6MTczMjI0NDY0NTEyMzQ1NjowMUpEQUIzWFla");
    free(tok);
}
END_TEST

START_TEST(cursor_rejects_bad_base64)
{
    static const char *const bad[] = {
        "",         "djE6MTph=", "djE6MTp=",  "djE6MTph==", "djE6MT+h",
        "djE6MT/h", "djE6MT h",  "djE6MTph!", "djE6MTphA", /* 4k+1 characters */
    };
    int64_t us = 7;
    char id[129] = "keep";

    for (size_t i = 0; i < ARRAY_LEN(bad); i++)
        ck_assert_msg(!cursor_decode(bad[i], &us, id), "accepted \"%s\"", bad[i]);
    ck_assert(!cursor_decode(NULL, &us, id));
    ck_assert_int_eq(us, 7);
    ck_assert_str_eq(id, "keep");
}
END_TEST

/* "v1:1:ab" is "djE6MTphYg": the last character carries two bits of "b" and
 * four spare bits, which must be zero, so "djE6MTphYh" and "djE6MTphYj"
 * (same bytes, other spare bits) are not tokens we made. */
START_TEST(cursor_rejects_noncanonical_bits)
{
    int64_t us;
    char id[129];

    ck_assert(cursor_decode("djE6MTphYg", &us, id));
    ck_assert_str_eq(id, "ab");
    ck_assert(!cursor_decode("djE6MTphYh", &us, id));
    ck_assert(!cursor_decode("djE6MTphYj", &us, id));
}
END_TEST

START_TEST(cursor_rejects_bad_plain)
{
    static const char *const bad[] = {
        "v2:1:a",
        "V1:1:a",
        "v1",
        "v1:",
        "v1:1",
        "v1:1:",
        "1:a",
        "v1::a",
        "v1:abc:a",
        "v1:1x:a",
        "v1:+1:a",
        "v1: 1:a",
        "v1:01:a",
        "v1:-0:a",
        "v1:-:a",
        "v1:1.5:a",
        "v1:0x10:a",
        "v1:9223372036854775808:a",
        "v1:-9223372036854775809:a",
        "v1:99999999999999999999999:a",
        /* Instants PostgreSQL cannot hold: they would be a 500, not a 400. */
        "v1:9223372036854775807:a",
        "v1:253402300800000000:a",
        "v1:-62135596800000001:a",
        "v1:1:a/b",
        "v1:1:a b",
        "v1:1:caf\xc3\xa9",
        "v1:1:a\n",
        " v1:1:a",
    };
    int64_t us = 7;
    char id[129] = "keep";

    for (size_t i = 0; i < ARRAY_LEN(bad); i++)
        ck_assert_msg(!decode_plain(bad[i], &us, id), "accepted \"%s\"", bad[i]);
    ck_assert_int_eq(us, 7);
    ck_assert_str_eq(id, "keep");
}
END_TEST

START_TEST(cursor_rejects_long_id_and_nul)
{
    char plain[200], id[129];
    int64_t us;
    char *tok;

    memcpy(plain, "v1:5:", 5);
    memset(plain + 5, 'x', 129);
    plain[5 + 129] = '\0';
    ck_assert(!decode_plain(plain, &us, id));
    plain[5 + 128] = '\0';
    ck_assert(decode_plain(plain, &us, id));
    ck_assert_uint_eq(strlen(id), 128);
    tok = b64url("v1:5:a\0b", 8);
    ck_assert(!cursor_decode(tok, &us, id));
    free(tok);
    tok = b64url("v1:5:a\0", 7);
    ck_assert(!cursor_decode(tok, &us, id));
    free(tok);
}
END_TEST

START_TEST(cursor_rejects_oversized_token)
{
    char tok[1001];
    int64_t us;
    char id[129];

    memset(tok, 'A', 1000);
    tok[1000] = '\0';
    ck_assert(!cursor_decode(tok, &us, id));
}
END_TEST

/* ---- backoff ---------------------------------------------------------- */

START_TEST(backoff_ceiling_values)
{
    ck_assert_int_eq(backoff_ceiling_ms(100, 10000, 1), 100);
    ck_assert_int_eq(backoff_ceiling_ms(100, 10000, 2), 200);
    ck_assert_int_eq(backoff_ceiling_ms(100, 10000, 3), 400);
    ck_assert_int_eq(backoff_ceiling_ms(100, 10000, 7), 6400);
    ck_assert_int_eq(backoff_ceiling_ms(100, 10000, 8), 10000);
    ck_assert_int_eq(backoff_ceiling_ms(100, 10000, 0), 100);
    ck_assert_int_eq(backoff_ceiling_ms(100, 10000, -5), 100);
    ck_assert_int_eq(backoff_ceiling_ms(100, 10000, INT_MIN), 100);
    ck_assert_int_eq(backoff_ceiling_ms(100, 10000, 1000), 10000);
    ck_assert_int_eq(backoff_ceiling_ms(100, 10000, INT_MAX), 10000);
    ck_assert_int_eq(backoff_ceiling_ms(0, 10000, 5), 0);
    ck_assert_int_eq(backoff_ceiling_ms(-100, 10000, 5), 0);
    ck_assert_int_eq(backoff_ceiling_ms(100, 0, 5), 0);
    ck_assert_int_eq(backoff_ceiling_ms(100, -1, 5), 0);
    ck_assert_int_eq(backoff_ceiling_ms(5000, 1000, 1), 1000);
}
END_TEST

/* Doubling near INT64_MAX saturates at the cap instead of overflowing
 * (UBSan would catch a signed overflow in this build). */
START_TEST(backoff_ceiling_no_overflow)
{
    ck_assert_int_eq(backoff_ceiling_ms(INT64_MAX, INT64_MAX, INT_MAX), INT64_MAX);
    ck_assert_int_eq(backoff_ceiling_ms(1, INT64_MAX, 63), INT64_C(1) << 62);
    ck_assert_int_eq(backoff_ceiling_ms(1, INT64_MAX, 64), INT64_MAX);
    ck_assert_int_eq(backoff_ceiling_ms(1, INT64_MAX, INT_MAX), INT64_MAX);
    ck_assert_int_eq(backoff_ceiling_ms(INT64_MAX / 2 + 1, INT64_MAX, 2), INT64_MAX);
    ck_assert_int_eq(backoff_ceiling_ms(3, INT64_MAX - 1, 1000), INT64_MAX - 1);
    ck_assert_int_ge(backoff_full_jitter_ms(1, INT64_MAX, INT_MAX), 0);
}
END_TEST

/* The retry pause of a loop: first, doubled per failure, capped; a reset
 * starts over. */
START_TEST(backoff_pause_sequence)
{
    static const int64_t want[] = {100, 200, 400, 800, 1600, 2000, 2000};
    struct backoff b = {.first_ms = 100, .max_ms = 2000};

    for (size_t i = 0; i < ARRAY_LEN(want); i++)
        ck_assert_int_eq(backoff_next_ms(&b), want[i]);
    backoff_reset(&b);
    ck_assert_int_eq(backoff_next_ms(&b), 100);
    b.failures = INT_MAX;
    ck_assert_int_eq(backoff_next_ms(&b), 2000);
    ck_assert_int_eq(b.failures, INT_MAX);
}
END_TEST

/* Any factor: min(max, first * factor^(n-1)); a factor below 2 never grows. */
START_TEST(backoff_delay_factors)
{
    ck_assert_int_eq(backoff_delay_ms(2000, 3, 60000, 1), 2000);
    ck_assert_int_eq(backoff_delay_ms(2000, 3, 60000, 2), 6000);
    ck_assert_int_eq(backoff_delay_ms(2000, 3, 60000, 4), 54000);
    ck_assert_int_eq(backoff_delay_ms(2000, 3, 60000, 5), 60000);
    ck_assert_int_eq(backoff_delay_ms(2000, 1, 60000, 100), 2000);
    ck_assert_int_eq(backoff_delay_ms(2000, 0, 60000, 100), 2000);
    ck_assert_int_eq(backoff_delay_ms(2000, 10, 1000, 1), 1000);
    ck_assert_int_eq(backoff_delay_ms(3, 1000, INT64_MAX, INT_MAX), INT64_MAX);
    ck_assert_int_eq(backoff_delay_ms(0, 2, 1000, 3), 0);
    for (int n = -2; n < 70; n++)
        ck_assert_int_eq(backoff_delay_ms(100, 2, 10000, n), backoff_ceiling_ms(100, 10000, n));
}
END_TEST

/* The loops of many samples below compare each sample themselves and
 * assert only when one is out of bounds: Check records every assertion
 * that passes (a write to its message file), and 130,000 of them took a
 * second and a half. */
START_TEST(backoff_jitter_bounds)
{
    static const int attempts[] = {-1, 0, 1, 2, 3, 5, 10, 30, 1000, INT_MAX};

    for (size_t a = 0; a < ARRAY_LEN(attempts); a++) {
        int64_t ceil = backoff_ceiling_ms(250, 60000, attempts[a]);
        for (int i = 0; i < 10000; i++) {
            int64_t d = backoff_full_jitter_ms(250, 60000, attempts[a]);
            if (d < 0 || d > ceil || d > 60000)
                ck_abort_msg("attempt %d: %lld ms, outside [0, %lld] or over 60000", attempts[a],
                             (long long)d, (long long)ceil);
        }
    }
    for (int i = 0; i < 1000; i++) {
        int64_t d = backoff_full_jitter_ms(0, 60000, 3);
        if (d != 0)
            ck_abort_msg("base 0: %lld ms, want 0", (long long)d);
    }
}
END_TEST

START_TEST(backoff_jitter_spread)
{
    int64_t min = INT64_MAX, max = -1;

    ck_assert_int_eq(backoff_ceiling_ms(125, 1000, 10), 1000);
    for (int i = 0; i < 10000; i++) {
        int64_t d = backoff_full_jitter_ms(125, 1000, 10);
        if (d < min)
            min = d;
        if (d > max)
            max = d;
    }
    ck_assert_int_lt(min, 250);
    ck_assert_int_gt(max, 750);
}
END_TEST

START_TEST(jitter_bounds)
{
    int64_t min = INT64_MAX, max = -1;

    for (int i = 0; i < 10000; i++) {
        int64_t d = jitter_ms(1000, 0.2);
        if (d < 800 || d > 1200)
            ck_abort_msg("jitter_ms(1000, 0.2) = %lld, outside [800, 1200]", (long long)d);
        if (d < min)
            min = d;
        if (d > max)
            max = d;
    }
    ck_assert_int_lt(min, 850);
    ck_assert_int_gt(max, 1150);
    for (int i = 0; i < 1000; i++) {
        int64_t d = jitter_ms(1000, 1.0);
        if (d < 0 || d > 2000)
            ck_abort_msg("jitter_ms(1000, 1.0) = %lld, outside [0, 2000]", (long long)d);
    }
}
END_TEST

START_TEST(jitter_edges)
{
    ck_assert_int_eq(jitter_ms(1000, 0.0), 1000);
    ck_assert_int_eq(jitter_ms(1000, -0.5), 1000);
    ck_assert_int_eq(jitter_ms(1000, NAN), 1000);
    ck_assert_int_eq(jitter_ms(0, 0.5), 0);
    ck_assert_int_eq(jitter_ms(-1000, 0.5), 0);
    for (int i = 0; i < 1000; i++) {
        int64_t d = jitter_ms(1000, 5.0);
        if (d < 0 || d > 2000)
            ck_abort_msg("jitter_ms(1000, 5.0) = %lld, outside [0, 2000]", (long long)d);
        d = jitter_ms(INT64_MAX, 1.0);
        if (d < 0)
            ck_abort_msg("jitter_ms(INT64_MAX, 1.0) = %lld, negative", (long long)d);
        d = jitter_ms(1, 0.99);
        if (d != 1)
            ck_abort_msg("jitter_ms(1, 0.99) = %lld, want 1", (long long)d);
    }
}
END_TEST

/* ---- suite ------------------------------------------------------------ */

static TCase *tc_sha256(void)
{
    TCase *tc = tcase_create("sha256");

    tcase_add_test(tc, sha256_empty);
    tcase_add_test(tc, sha256_abc);
    tcase_add_test(tc, sha256_448_bits);
    tcase_add_test(tc, sha256_896_bits);
    tcase_add_test(tc, sha256_million_a_streaming);
    tcase_add_test(tc, sha256_split_matches_one_shot);
    tcase_add_test(tc, hmac_rfc4231);
    tcase_add_test(tc, hmac_empty_key);
    tcase_add_test(tc, ct_equal_cases);
    tcase_add_test(tc, hex_decode_cases);
    tcase_add_test(tc, base64url_vectors);
    return tc;
}

static TCase *tc_canon(void)
{
    TCase *tc = tcase_create("canon_json");

    tcase_add_test(tc, canon_key_order_independent);
    tcase_add_test(tc, canon_keys_bytewise);
    tcase_add_test(tc, canon_nested_compact);
    tcase_add_test(tc, canon_scalars);
    tcase_add_test(tc, canon_reals);
    tcase_add_test(tc, canon_reals_round_trip);
    tcase_add_test(tc, canon_unicode);
    tcase_add_test(tc, canon_escapes);
    tcase_add_test(tc, canon_matches_jansson);
    tcase_add_test(tc, canon_depth_limit);
    tcase_add_test(tc, canon_refuses_invalid_utf8);
    return tc;
}

static TCase *tc_ids(void)
{
    TCase *tc = tcase_create("identity_and_run_id");

    tcase_add_test(tc, identity_hash_stable);
    tcase_add_test(tc, identity_hash_separates_parts);
    tcase_add_test(tc, identity_hash_is_sha_of_parts);
    tcase_add_test(tc, run_id_format);
    tcase_add_test(tc, run_id_time_prefix);
    tcase_add_test(tc, run_id_sorts_by_time);
    tcase_add_test(tc, run_id_unique);
    tcase_add_test(tc, run_id_monotonic_threads);
    tcase_add_test(tc, run_id_increments_within_a_millisecond);
    tcase_add_test(tc, run_id_validity);
    return tc;
}

static TCase *tc_time(void)
{
    TCase *tc = tcase_create("rfc3339");

    tcase_add_test(tc, time_parse_basic);
    tcase_add_test(tc, time_parse_fraction);
    tcase_add_test(tc, time_parse_offsets);
    tcase_add_test(tc, time_parse_rejects);
    tcase_add_test(tc, time_format_known);
    tcase_add_test(tc, time_format_clamps);
    tcase_add_test(tc, time_round_trip_strings);
    tcase_add_test(tc, time_round_trip_random);
    return tc;
}

static TCase *tc_cursor(void)
{
    TCase *tc = tcase_create("cursor");

    tcase_add_test(tc, cursor_round_trip);
    tcase_add_test(tc, cursor_known_token);
    tcase_add_test(tc, time_range_bounds);
    tcase_add_test(tc, utf8_scrub_cases);
    tcase_add_test(tc, cursor_rejects_bad_base64);
    tcase_add_test(tc, cursor_rejects_noncanonical_bits);
    tcase_add_test(tc, cursor_rejects_bad_plain);
    tcase_add_test(tc, cursor_rejects_long_id_and_nul);
    tcase_add_test(tc, cursor_rejects_oversized_token);
    return tc;
}

static TCase *tc_backoff(void)
{
    TCase *tc = tcase_create("backoff");

    tcase_add_test(tc, backoff_ceiling_values);
    tcase_add_test(tc, backoff_ceiling_no_overflow);
    tcase_add_test(tc, backoff_pause_sequence);
    tcase_add_test(tc, backoff_delay_factors);
    tcase_add_test(tc, backoff_jitter_bounds);
    tcase_add_test(tc, backoff_jitter_spread);
    tcase_add_test(tc, jitter_bounds);
    tcase_add_test(tc, jitter_edges);
    return tc;
}

int main(void)
{
    Suite *s = suite_create("util");
    SRunner *sr;
    int failed;

    suite_add_tcase(s, tc_sha256());
    suite_add_tcase(s, tc_canon());
    suite_add_tcase(s, tc_ids());
    suite_add_tcase(s, tc_time());
    suite_add_tcase(s, tc_cursor());
    suite_add_tcase(s, tc_backoff());
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
