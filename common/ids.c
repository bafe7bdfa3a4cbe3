/* common/ids.c — run ids and identity hashes (common/ids.h). */
#include "ids.h"

#include <pthread.h>
#include <string.h>

#include "digest.h"
#include "encoding.h"

/* Writes the low 5 * nchars bits of v as Crockford base32, most significant
 * first. */
static void base32_put(char *out, uint64_t v, int nchars)
{
    static const char alphabet[] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

    for (int i = nchars - 1; i >= 0; i--) {
        out[i] = alphabet[v & 31];
        v >>= 5;
    }
}

static uint64_t load_be40(const unsigned char *p)
{
    return (uint64_t)p[0] << 32 | (uint64_t)p[1] << 24 | (uint64_t)p[2] << 16 |
           (uint64_t)p[3] << 8 | p[4];
}

/* The last id this process made: its millisecond and its random part, as
 * two 40-bit halves. */
static pthread_mutex_t last_mu = PTHREAD_MUTEX_INITIALIZER;
static bool have_last;
static uint64_t last_ms, last_hi, last_lo;

#define HALF_MAX ((UINT64_C(1) << 40) - 1)
#define MS_MAX UINT64_C(0xFFFFFFFFFFFF)

/* The ULID spec's monotonic mode: within the millisecond of the id before
 * (or a clock that went back), the next id is that one plus one in its
 * random part, so that the ids one process makes sort in the order it
 * made them, those of one array submission included (the newest of a
 * concurrency key is the greatest id among runs of one created_at). A new
 * millisecond takes fresh random bits, drawn before the lock so that the
 * lock holds no system call. The random part running out (2^80 ids in one
 * millisecond, or a start near its end) moves on to the next millisecond.
 * A wall clock before 1970 counts as 0; the 48-bit field lasts until
 * 10889. */
void run_id_new(char out[27])
{
    unsigned char r[10];
    int64_t now = clock_wall_ms();
    uint64_t ms = now < 0 ? 0 : (uint64_t)now & MS_MAX, hi = 0, lo = 0;

    rand_bytes(r, sizeof(r));
    pthread_mutex_lock(&last_mu);
    if (have_last && ms <= last_ms && (last_lo < HALF_MAX || last_hi < HALF_MAX)) {
        ms = last_ms;
        lo = last_lo == HALF_MAX ? 0 : last_lo + 1;
        hi = last_lo == HALF_MAX ? last_hi + 1 : last_hi;
    } else {
        if (have_last && ms <= last_ms) /* the random part ran out */
            ms = last_ms == MS_MAX ? MS_MAX : last_ms + 1;
        hi = load_be40(r);
        lo = load_be40(r + 5);
    }
    have_last = true;
    last_ms = ms, last_hi = hi, last_lo = lo;
    pthread_mutex_unlock(&last_mu);
    base32_put(out, ms, 10);
    base32_put(out + 10, hi, 8);
    base32_put(out + 18, lo, 8);
    out[26] = '\0';
}

static bool id_char_ok(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == ':' || c == '-';
}

bool run_id_valid_n(const char *s, size_t n)
{
    if (n == 0 || n > RUN_ID_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!id_char_ok(s[i]))
            return false;
    return true;
}

bool run_id_valid(const char *s)
{
    return s && run_id_valid_n(s, strnlen(s, RUN_ID_MAX + 1));
}

static void sha256_update_part(struct sha256 *s, const char *part)
{
    sha256_update(s, part, strlen(part) + 1);
}

void identity_hash(const char *tenant, const char *type, const char *kind, const char *value,
                   char out[65])
{
    struct sha256 s;
    unsigned char md[32];

    sha256_init(&s);
    sha256_update_part(&s, tenant);
    sha256_update_part(&s, type);
    sha256_update_part(&s, kind);
    sha256_update_part(&s, value);
    sha256_final(&s, md);
    hex_encode(md, sizeof(md), out);
}
