/* common/common.h — what every module of opsrun includes: the status codes,
 * the error carrier, string sets, allocation that aborts on failure, and the
 * functions curl bans. Thread-safe; no state. */
#ifndef OPSRUN_COMMON_H
#define OPSRUN_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
/* Declared before the poison below, so later includes are no-ops. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <time.h>

#define WUR __attribute__((warn_unused_result))
#define PRINTF_LIKE(f, a) __attribute__((format(printf, f, a)))
#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

enum status {
    ST_OK = 0,
    ST_INVALID,       /* bad input: 400 */
    ST_NOT_FOUND,     /* 404 */
    ST_CONFLICT,      /* 409 */
    ST_TOO_LARGE,     /* 413 */
    ST_UNSUPPORTED,   /* 415 */
    ST_UNPROCESSABLE, /* 422: well-formed but names something unknown */
    ST_METHOD,        /* 405 */
    ST_DB,            /* a database error that is ours: 500 */
    ST_UNAVAILABLE,   /* database unreachable, pool exhausted, shutting down: 503 */
    ST_LOST,          /* a fenced write matched nothing: the run is no longer ours */
    ST_INTERNAL,      /* a bug or resource failure: 500 */
    ST_BUSY,          /* a limit of this process (stream subscribers, shutdown): 503, the
                         message is shown to the client */
    ST_UNAUTHORIZED,  /* no valid credential: 401 */
    ST_FORBIDDEN,     /* a valid credential without the right: 403 */
    ST_LIMITED,       /* a limit of one client (connections, streams, rate): 429, the message
                         is shown to the client */
    ST_TIMEOUT,       /* the request did not arrive in time: 408 */
};

const char *status_name(enum status st);

/* One field problem of a validation failure (problem+json errors[]). */
#define ERROR_MAX_FIELDS 16
struct error_field {
    char field[64];
    char message[160];
};

/* The optional error text that travels with an enum status. message is
 * for the log (it may hold the database's own words); reason, when not
 * NULL, is a short static cause a client may be told (a 503's "the
 * database is read-only"). */
struct error {
    char message[512];
    unsigned nfields;
    struct error_field fields[ERROR_MAX_FIELDS];
    const char *reason;
};

/* Sets err->message and clears err->reason (NULL err is a no-op); returns
 * st for tail calls:
 * return error_set(err, ST_INVALID, "unknown key \"%s\"", key). */
#define error_set(err, st, ...) (error_message((err), __VA_ARGS__), error_status(st))
/* Adds a field problem (dropped past ERROR_MAX_FIELDS); returns st. */
#define error_field(err, st, field, ...)                                                           \
    (error_field_message((err), (field), __VA_ARGS__), error_status(st))

/* What error_set and error_field call. They are macros, not variadic
 * functions, so that the status a failure returns is visible where it is
 * returned: static analysis does not look into variadic functions, and
 * would otherwise follow "return error_set(...)" as if it might be ST_OK. */
void error_message(struct error *err, const char *fmt, ...) PRINTF_LIKE(2, 3);
void error_field_message(struct error *err, const char *field, const char *fmt, ...)
    PRINTF_LIKE(3, 4);
static inline enum status error_status(enum status st)
{
    return st;
}

/* Replaces, in place, every byte that is not part of a valid UTF-8 sequence
 * (including a sequence cut short by truncation) with '?', so the text can
 * go into JSON. */
void utf8_scrub(char *s);

/* True when s equals one of the strings of set, a NULL-terminated array;
 * false for a NULL s. */
bool str_in(const char *s, const char *const *set);
/* str_in over a list written in place: STR_IN(method, "GET", "HEAD"). */
#define STR_IN(s, ...) str_in((s), (const char *const[]){__VA_ARGS__, NULL})

void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
/* Like snprintf, but aborts on output error; returns the untruncated length. */
size_t xsnprintf(char *buf, size_t n, const char *fmt, ...) PRINTF_LIKE(3, 4);
/* Heap-allocated formatted string. */
char *xasprintf(const char *fmt, ...) PRINTF_LIKE(1, 2);

/* Condition variables that time out on the monotonic clock, so a step of
 * the wall clock never lengthens or shortens a wait. */
void cond_init_monotonic(pthread_cond_t *cv);
/* The absolute monotonic time ms from now, for pthread_cond_timedwait on a
 * cond_init_monotonic() variable. */
void abstime_after_ms(struct timespec *ts, int64_t ms);

/* Monotonic and wall clocks in milliseconds. */
int64_t clock_mono_ms(void);
int64_t clock_wall_ms(void);
/* The monotonic clock in microseconds, for durations shorter than a
 * millisecond (request and statement latencies). */
int64_t clock_mono_us(void);
/* Uniform random integer in [0, n) from a thread-local generator seeded from
 * getrandom(); n == 0 returns 0. */
uint64_t rand_below(uint64_t n);
/* Fills buf with n bytes from getrandom(); aborts if the kernel fails. */
void rand_bytes(void *buf, size_t n);

#pragma GCC poison sprintf vsprintf strcpy strcat gets strtok

#endif
