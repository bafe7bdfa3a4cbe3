/* store/logs.h — a run's log lines in run_logs (migration 021): chunks
 * written with the run's next seqs, and pages read back in seq order.
 *
 * A chunk is every line one writer has for one run and one attempt at
 * once, as the JSON array text the engine builds ([[at_us, stream, text],
 * ...], common/runlog.h). Writing it raises runs.log_seq by its number of
 * lines under the run's row lock, so the seqs of a run's chunks are taken
 * and committed in one order (migration 021).
 *
 * Thread-safety: a db handle is used by one thread at a time. Functions
 * return ST_OK or a failure with *err filled: ST_NOT_FOUND for a run that
 * does not exist (in the tenant), ST_UNAVAILABLE when the connection is
 * lost or a statement timed out, ST_DB for other database errors. */
#ifndef OPSRUN_STORE_LOGS_H
#define OPSRUN_STORE_LOGS_H

#include "common/common.h"
#include "store/run_state.h"

#include <jansson.h>

struct db;

/* The most lines a page holds. */
#define LOGS_PAGE_MAX 5000
/* The most bytes of line text a page may ask the database for. */
#define LOGS_PAGE_BYTES (16 * 1024 * 1024)

/* One chunk to write; every string is borrowed. */
struct log_chunk {
    const char *tenant, *run_id;
    int attempt;
    int nlines;      /* how many lines lines_json holds, at least 1 */
    int64_t dropped; /* bytes of output left out of these lines */
    const char *lines_json;
};

/* Writes c for its run, with the run's next c->nlines seqs; *last_seq
 * (optional) gets the last. ST_NOT_FOUND when the run is gone (retention,
 * or it never was): nothing is written. */
enum status store_logs_append(struct db *db, const struct log_chunk *c, int64_t *last_seq,
                              struct error *err) WUR;

/* One line as read; strings borrowed for the duration of the callback. */
struct log_line {
    int64_t seq;
    int attempt;
    int64_t at_us; /* microseconds since the epoch */
    const char *stream;
    const char *text;
};
typedef void (*log_line_fn)(void *arg, const struct log_line *line);
/* The API's form of a line: {"seq", "attempt", "at", "stream", "text"}. */
json_t *log_line_json(const struct log_line *l);

/* What to read: the lines of a run after seq `after`, of one attempt
 * (0: every attempt), at most limit (1..LOGS_PAGE_MAX). */
struct log_query {
    const char *tenant, *run_id;
    int attempt;
    int64_t after;
    int limit;
};

/* What a page says of the run besides its lines. */
struct log_page {
    int nlines;             /* lines given to the callback */
    int64_t last_seq;       /* the run's last seq (every attempt) */
    bool truncated;         /* some of the selected attempts' output was dropped */
    enum run_status status; /* the run's, as read with the page */
    int attempt;            /* the run's current attempt */
};

/* The most lines a page may ask for when lines may be max_line_bytes
 * long: LOGS_PAGE_BYTES worth, from 16 to LOGS_PAGE_MAX. */
int logs_page_lines(int max_line_bytes);

/* Calls fn for each line of q in seq order. ST_NOT_FOUND when the run does
 * not exist in q->tenant. */
enum status store_logs_read(struct db *db, const struct log_query *q, log_line_fn fn, void *arg,
                            struct log_page *out, struct error *err) WUR;

#endif
