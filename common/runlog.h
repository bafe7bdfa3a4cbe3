/* common/runlog.h — one attempt's log lines (docs/logs.md), from the moment
 * they are written until they are stored: opsrun's own lines, and the bytes
 * a command writes to stderr split into lines, each masked, bounded and
 * stamped, then taken in chunks for store/logs.h.
 *
 * Masking: every secret given at creation (the values that reached the
 * run through {{env:NAME}}, as the caller gives them: raw and in the forms
 * a request encodes them) is replaced by "***" in every line, the longest
 * first. A command's bytes are joined into whole lines before they are
 * masked, so a secret split across two writes is masked too; a secret of
 * several lines is masked line by line; a cut goes past a secret it would
 * split, so it never leaves part of one.
 *
 * Bounds: a line longer than max_line_bytes is cut, with a marker saying
 * how many bytes went (opsrun's own are cut too, without one); a command's
 * lines are counted against max_bytes (per attempt) by what they take
 * stored, their JSON, so that empty lines count too, and past it they are
 * dropped: the take that ends the attempt adds one line saying how many
 * bytes were. Dropping never blocks the writer: the bytes are counted and
 * forgotten. opsrun's own lines are never dropped (they are few, and they
 * say how the attempt ended). So what a log holds until it is taken is
 * bounded by max_bytes and opsrun's few lines, whether or not its takes
 * are written.
 *
 * The engine keeps one per attempt (an action writes, the maintenance
 * thread and the attempt's end take); anything else that has a line for a
 * run (a cancel, a rescue) makes one for that line.
 *
 * Thread-safety: every function may be called from any thread; a runlog
 * is freed by its owner once no other thread can reach it. */
#ifndef OPSRUN_ENGINE_RUNLOG_H
#define OPSRUN_ENGINE_RUNLOG_H

#include "common/common.h"

#include <stdarg.h>

#define RUNLOG_LINE_MIN 256
/* The shortest value masked: a shorter one cannot be told from ordinary
 * text (masking "1" would blank every 1 of the log). */
#define RUNLOG_SECRET_MIN 4

struct runlog;

struct runlog_limits {
    size_t max_line_bytes; /* at least RUNLOG_LINE_MIN */
    size_t max_bytes;      /* a command's lines per attempt */
};

/* A new, empty log of attempt; secrets[0..nsecrets) are copied (shorter
 * than RUNLOG_SECRET_MIN: ignored). */
struct runlog *runlog_new(const struct runlog_limits *lim, int attempt, const char *const *secrets,
                          size_t nsecrets);
void runlog_free(struct runlog *l); /* NULL is a no-op */
int runlog_attempt(const struct runlog *l);

/* s with every secret masked, and a start that is the end of one (s may be
 * cut out of a longer text): a new string (free). For text that is not a
 * line of the log but says what the run printed (an error message quoting
 * stderr). */
char *runlog_mask(struct runlog *l, const char *s);
/* One line of opsrun's own (stream "opsrun"), its line breaks made spaces.
 * NULL l is a no-op. */
void runlog_say(struct runlog *l, const char *fmt, ...) PRINTF_LIKE(2, 3);
void runlog_vsay(struct runlog *l, const char *fmt, va_list ap) PRINTF_LIKE(2, 0);
/* n bytes a command wrote to stderr: each "\n" ends a line (a "\r" before
 * it goes). */
void runlog_write(struct runlog *l, const char *b, size_t n);
/* The command's stderr was closed: a last line without "\n" is a line. */
void runlog_end_output(struct runlog *l);

/* Lines taken for one write. */
struct runlog_chunk {
    char *lines_json; /* heap: [[at_us, stream, text], ...]; NULL when empty */
    int nlines;
    int64_t dropped; /* bytes dropped since the last take */
    char *frags;     /* private: the lines as kept, for runlog_restore */
};
/* Takes at most max_bytes of the pending lines (at least one line) into
 * *c. final: the attempt is over, so a line about what was dropped is
 * added first. False when there is nothing to take. */
bool runlog_take(struct runlog *l, size_t max_bytes, bool final, struct runlog_chunk *c);
/* Puts back a chunk whose write failed, before anything taken after it. */
void runlog_restore(struct runlog *l, struct runlog_chunk *c);
void runlog_chunk_cleanup(struct runlog_chunk *c);
/* Whether lines wait to be taken, and since when (monotonic ms; 0: none). */
int64_t runlog_pending_since(struct runlog *l);

/* Counters since the log was made: lines kept and bytes dropped. */
void runlog_counts(struct runlog *l, int64_t *lines, int64_t *dropped);

#endif
