/* common/log.h — one line per event on stderr, written with one write(2) so
 * threads never interleave. Plain "ts level msg key=value..." or one JSON
 * object per line. Thread-safe after log_init.
 *
 * Call sites write one format for both: a lower-case message, then
 * key=value fields (a value with spaces in double quotes, with \" and \\).
 * In JSON every field becomes a key of its own, a string, after "ts",
 * "level" and "msg" (log_json_line). A request id set for the thread
 * (log_request_id_set) is added to every line as request_id=.
 *
 * The JSON of a line is written here, not by jansson: a line is built in
 * bounded buffers on the stack, with no allocation, so logging works where
 * allocating fails, and a message need not be valid UTF-8 (jansson refuses
 * such a string) to reach the log. */
#ifndef OPSRUN_LOG_H
#define OPSRUN_LOG_H

#include "common.h"

enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR };

/* The longest message, and the longest line in either format. */
#define LOG_MSG_MAX 2208
#define LOG_LINE_MAX 16384
#define LOG_REQUEST_ID_MAX 128

void log_init(enum log_level min, bool json);
/* The least level written from now on, from any thread (a reload). */
void log_set_level(enum log_level min);
bool log_enabled(enum log_level lvl);
void log_write(enum log_level lvl, const char *fmt, ...) PRINTF_LIKE(2, 3);
/* Redacts credentials in s, in place: the value of every access_token=
 * (a query parameter that may reach a log inside a URL) and the credential
 * after "Bearer " become "[redacted]". log_write applies it to every line,
 * so no call site can leak a token by logging a URL or a header. */
void log_redact(char *s, size_t cap);
/* Parses "debug" | "info" | "warn" | "error"; false when unknown. */
bool log_level_parse(const char *s, enum log_level *out);
/* Parses "json" | "text" into *json; false when unknown. */
bool log_format_parse(const char *s, bool *json);

/* The JSON line of a message (redacted already) into dst, which holds cap
 * (at least 64) bytes: {"ts":ts,"level":...,"msg":the message's words,
 * then one string key per key=value field}, and "\n". Values are always
 * strings, so a key never changes type between lines; "run" becomes
 * "run_id"; a key seen before, or "ts", "level" or "msg", stays in the
 * message's text. Fields that do not fit are dropped, never cut, so the
 * line is always valid JSON. Returns the line's length. */
size_t log_json_line(char *dst, size_t cap, const char *ts, enum log_level lvl, const char *msg);

/* Request ids. The current thread's id, copied; NULL clears it. Set it
 * around the work done for one request, on the thread doing it. */
void log_request_id_set(const char *id);
const char *log_request_id(void); /* NULL when none; the thread's own buffer */
/* 1 to LOG_REQUEST_ID_MAX visible ASCII characters, neither '"' nor '\\'. */
bool log_request_id_valid(const char *s);
/* The id of a request into out: x_request_id when valid, else the trace id
 * of a valid W3C traceparent, else 32 new random hex digits. Either header
 * may be NULL. */
void log_request_id_pick(const char *x_request_id, const char *traceparent,
                         char out[LOG_REQUEST_ID_MAX + 1]);

/* The message is lower case text, then key=value fields. Arguments are not
 * evaluated below the level. */
#define LOG(lvl, ...)                                                                              \
    do {                                                                                           \
        if (log_enabled(lvl))                                                                      \
            log_write(lvl, __VA_ARGS__);                                                           \
    } while (0)

#endif
