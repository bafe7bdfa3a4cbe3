/* common/common.c — status names, error text, string sets, aborting
 * allocation, clocks, randomness. */
#include "common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

const char *status_name(enum status st)
{
    static const char *const names[] = {
        [ST_OK] = "ok",
        [ST_INVALID] = "invalid",
        [ST_NOT_FOUND] = "not_found",
        [ST_CONFLICT] = "conflict",
        [ST_TOO_LARGE] = "too_large",
        [ST_UNSUPPORTED] = "unsupported",
        [ST_UNPROCESSABLE] = "unprocessable",
        [ST_METHOD] = "method_not_allowed",
        [ST_DB] = "database_error",
        [ST_UNAVAILABLE] = "unavailable",
        [ST_LOST] = "lost",
        [ST_INTERNAL] = "internal",
        [ST_BUSY] = "busy",
        [ST_UNAUTHORIZED] = "unauthorized",
        [ST_FORBIDDEN] = "forbidden",
        [ST_LIMITED] = "limited",
        [ST_TIMEOUT] = "timeout",
    };
    if ((size_t)st < ARRAY_LEN(names) && names[st])
        return names[st];
    return "unknown";
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 when it is not one
 * (RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF). */
static size_t utf8_len(const unsigned char *s)
{
    unsigned char c = s[0];
    size_t n;
    unsigned char lo = 0x80, hi = 0xBF;

    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        n = 2;
    else if (c >= 0xE0 && c <= 0xEF)
        n = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4)
        n = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else
        return 0;
    if (s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if (s[i] < 0x80 || s[i] > 0xBF)
            return 0;
    return n;
}

void utf8_scrub(char *s)
{
    unsigned char *p = (unsigned char *)s;

    while (*p) {
        size_t n = utf8_len(p);
        if (n == 0)
            *p++ = '?';
        else
            p += n;
    }
}

void error_message(struct error *err, const char *fmt, ...)
{
    va_list ap;

    if (!err)
        return;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof(err->message), fmt, ap);
    va_end(ap);
    utf8_scrub(err->message);
    err->reason = NULL;
}

void error_field_message(struct error *err, const char *field, const char *fmt, ...)
{
    va_list ap;
    struct error_field *f;

    if (!err || err->nfields >= ERROR_MAX_FIELDS)
        return;
    f = &err->fields[err->nfields++];
    snprintf(f->field, sizeof(f->field), "%s", field);
    va_start(ap, fmt);
    vsnprintf(f->message, sizeof(f->message), fmt, ap);
    va_end(ap);
    utf8_scrub(f->field);
    utf8_scrub(f->message);
    if (!err->message[0]) {
        char first[sizeof(err->message)];
        snprintf(first, sizeof(first), "invalid \"%s\": %s", f->field, f->message);
        utf8_scrub(first);
        memcpy(err->message, first, sizeof(first));
    }
}

bool str_in(const char *s, const char *const *set)
{
    for (; s && *set; set++)
        if (strcmp(s, *set) == 0)
            return true;
    return false;
}

static void oom(size_t n)
{
    fprintf(stderr, "opsrun: out of memory allocating %zu bytes\n", n);
    abort();
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        oom(n);
    return p;
}

void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        oom(n * size);
    return p;
}

void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        oom(n);
    return q;
}

char *xstrdup(const char *s)
{
    return xstrndup(s, strlen(s));
}

char *xstrndup(const char *s, size_t n)
{
    char *p = xmalloc(n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

size_t xsnprintf(char *buf, size_t n, const char *fmt, ...)
{
    va_list ap;
    int r;

    va_start(ap, fmt);
    r = vsnprintf(buf, n, fmt, ap);
    va_end(ap);
    if (r < 0)
        abort();
    return (size_t)r;
}

char *xasprintf(const char *fmt, ...)
{
    va_list ap;
    char *s = NULL;
    int r;

    va_start(ap, fmt);
    r = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (r < 0)
        oom(0);
    return s;
}

void cond_init_monotonic(pthread_cond_t *cv)
{
    pthread_condattr_t a;

    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
}

void abstime_after_ms(struct timespec *ts, int64_t ms)
{
    if (ms < 0)
        ms = 0;
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += (time_t)(ms / 1000);
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

int64_t clock_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t clock_mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t clock_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void rand_bytes(void *buf, size_t n)
{
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t r = getrandom(p, n, 0);
        if (r < 0) {
            perror("opsrun: getrandom");
            abort();
        }
        p += r;
        n -= (size_t)r;
    }
}

/* xorshift64*: fast, good enough for jitter; never for secrets. */
static _Thread_local uint64_t rng_state;

uint64_t rand_below(uint64_t n)
{
    uint64_t x;

    if (n == 0)
        return 0;
    while (rng_state == 0)
        rand_bytes(&rng_state, sizeof(rng_state));
    x = rng_state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng_state = x;
    return (x * 0x2545F4914F6CDD1DULL) % n;
}
