/* common/log.h — one line per event on stderr, written with one write(2) so
 * threads never interleave. Plain "ts level msg key=value..." or one JSON
 * object per line. Thread-safe after log_init. */
#ifndef OPSRUN_LOG_H
#define OPSRUN_LOG_H

#include "common.h"

enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR };

void log_init(enum log_level min, bool json);
bool log_enabled(enum log_level lvl);
void log_write(enum log_level lvl, const char *fmt, ...) PRINTF_LIKE(2, 3);
/* Redacts credentials in s, in place: the value of every access_token=
 * (a query parameter that may reach a log inside a URL) and the credential
 * after "Bearer " become "[redacted]". log_write applies it to every line,
 * so no call site can leak a token by logging a URL or a header. */
void log_redact(char *s, size_t cap);
/* Parses "debug" | "info" | "warn" | "error"; false when unknown. */
bool log_level_parse(const char *s, enum log_level *out);

/* The message is lower case text, then key=value fields. Arguments are not
 * evaluated below the level. */
#define LOG(lvl, ...)                                                                              \
    do {                                                                                           \
        if (log_enabled(lvl))                                                                      \
            log_write(lvl, __VA_ARGS__);                                                           \
    } while (0)

#endif
