/* common/dynbuf.h — a growable byte buffer with a hard maximum, so no input
 * can make it grow without bound.
 *
 * A buffer belongs to one thread at a time; the functions keep no state of
 * their own. It holds up to max bytes (the terminating NUL not counted) and
 * is NUL-terminated whenever it holds memory, so its contents may be read as
 * a string when they hold no NUL of their own. Allocation failure aborts
 * (xmalloc); the only failure an add reports is ST_TOO_LARGE, when the
 * result would pass max, and then the buffer is left exactly as it was.
 *
 * The fields may be read; change them only through these functions. A
 * zeroed struct is an empty buffer with max 0: call dynbuf_init first.
 *
 * Ours: libcurl's dynbuf is private to libcurl, and libxml2's xmlBuffer
 * (walled in the actions) has no hard maximum. */
#ifndef OPSRUN_DYNBUF_H
#define OPSRUN_DYNBUF_H

#include <stdarg.h>

#include "common.h"

struct dynbuf {
    char *p;    /* NULL until the first byte is added, and after free or take */
    size_t len; /* bytes held, not counting the NUL */
    size_t cap; /* bytes allocated */
    size_t max; /* the most bytes it may hold, not counting the NUL */
};

/* An empty buffer that will hold at most max bytes (max < SIZE_MAX);
 * allocates nothing. */
void dynbuf_init(struct dynbuf *b, size_t max);

/* Appends n bytes (which may include NULs); ST_TOO_LARGE when len + n > max. */
enum status dynbuf_add(struct dynbuf *b, const void *ptr, size_t n) WUR;
/* Appends the string s without its NUL. */
enum status dynbuf_adds(struct dynbuf *b, const char *s) WUR;
/* Appends printf-style formatted text; ST_TOO_LARGE, and nothing appended,
 * when all of it does not fit. */
enum status dynbuf_addf(struct dynbuf *b, const char *fmt, ...) PRINTF_LIKE(2, 3) WUR;
/* dynbuf_addf with a va_list; the caller va_ends ap, as after vsnprintf. */
enum status dynbuf_vaddf(struct dynbuf *b, const char *fmt, va_list ap) PRINTF_LIKE(2, 0) WUR;

/* Shortens the contents to len bytes (len <= dynbuf_len(b)). */
void dynbuf_truncate(struct dynbuf *b, size_t len);
/* Empties the buffer but keeps its memory for the next adds. */
void dynbuf_reset(struct dynbuf *b);
/* Copies up to max bytes of the contents from *off into buf and advances
 * *off; returns how many. Once *off reaches the end the buffer is emptied
 * (*off back to 0), its memory given back when it grew past 64 KiB: a
 * buffer of output written out in pieces, as the streams' frames are. */
size_t dynbuf_drain(struct dynbuf *b, size_t *off, char *buf, size_t max);
/* Moves the contents out as a NUL-terminated heap string (free), "" when
 * empty, never NULL; b is left empty with the same max. */
char *dynbuf_take(struct dynbuf *b);
/* Frees the memory; b is left empty with the same max and may be used
 * again. Freeing twice is a no-op. */
void dynbuf_free(struct dynbuf *b);

size_t dynbuf_len(const struct dynbuf *b);
/* The contents, NUL-terminated, writable up to dynbuf_len bytes; NULL when
 * the buffer holds no memory. Valid until the next add, take or free. */
char *dynbuf_ptr(const struct dynbuf *b);

#endif
