/* common/cursor.c — list cursors (common/cursor.h).
 *
 * System headers come before cursor.h, ahead of common.h's poison pragma. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cursor.h"

#include "encoding.h"
#include "ids.h"
#include "time_rfc3339.h"

/* "v1:" + 20 characters of int64 + ":" + a 128-character id, and its
 * base64url length (no padding). */
#define CURSOR_PLAIN_MAX (3 + 20 + 1 + RUN_ID_MAX)
#define CURSOR_TOKEN_MAX ((CURSOR_PLAIN_MAX * 4 + 2) / 3)

char *cursor_encode(int64_t created_us, const char *id)
{
    char *plain = xasprintf("v1:%lld:%s", (long long)created_us, id);
    size_t n = strlen(plain);
    char *token = xmalloc((n * 4 + 2) / 3 + 1);

    base64url_encode(plain, n, token);
    free(plain);
    return token;
}

/* The number must be written exactly as "%lld" writes it: no sign but '-',
 * no leading zeros, no overflow. */
static bool parse_us(const char *s, size_t n, int64_t *out)
{
    char back[24];
    char *end;
    long long v;

    if (n == 0 || n >= sizeof(back) || (s[0] != '-' && (s[0] < '0' || s[0] > '9')))
        return false;
    v = strtoll(s, &end, 10);
    if (end != s + n || xsnprintf(back, sizeof(back), "%lld", v) != n || memcmp(back, s, n) != 0)
        return false;
    *out = (int64_t)v;
    return true;
}

/* plain is NUL-terminated, n bytes long, with no NUL inside. */
static bool cursor_split(const char *plain, size_t n, int64_t *us_out, char id_out[129])
{
    const char *us, *colon, *id;
    int64_t v;

    if (n < 3 || memcmp(plain, "v1:", 3) != 0)
        return false;
    us = plain + 3;
    colon = strchr(us, ':');
    if (!colon || !parse_us(us, (size_t)(colon - us), &v) || !time_in_range(v))
        return false;
    id = colon + 1;
    if (!run_id_valid_n(id, n - (size_t)(id - plain)))
        return false;
    *us_out = v;
    memcpy(id_out, id, n - (size_t)(id - plain) + 1);
    return true;
}

bool cursor_decode(const char *token, int64_t *created_us_out, char id_out[129])
{
    unsigned char plain[CURSOR_PLAIN_MAX + 1];
    size_t tlen, n;

    if (!token)
        return false;
    tlen = strnlen(token, CURSOR_TOKEN_MAX + 1);
    if (tlen > CURSOR_TOKEN_MAX || !base64url_decode(token, tlen, plain, CURSOR_PLAIN_MAX, &n))
        return false;
    if (memchr(plain, '\0', n))
        return false;
    plain[n] = '\0';
    return cursor_split((const char *)plain, n, created_us_out, id_out);
}
