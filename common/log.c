/* common/log.c — single-write log lines. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static enum log_level log_min = LOG_INFO; /* set once before threads start */
static bool log_json;

void log_init(enum log_level min, bool json)
{
    log_min = min;
    log_json = json;
}

bool log_enabled(enum log_level lvl)
{
    return lvl >= log_min;
}

bool log_level_parse(const char *s, enum log_level *out)
{
    static const char *const names[] = {"debug", "info", "warn", "error"};
    for (size_t i = 0; i < ARRAY_LEN(names); i++) {
        if (strcmp(s, names[i]) == 0) {
            *out = (enum log_level)i;
            return true;
        }
    }
    return false;
}

#define REDACTED "[redacted]"

static const struct {
    const char *marker;
    size_t min; /* shorter values are words, not credentials ("bearer token") */
} redact_rules[] = {{"access_token=", 1}, {"bearer ", 8}};

/* The length of the credential after a marker at p (case-insensitive), 0
 * when p starts none; *v gets where the credential starts. A credential
 * runs to the next separator of a URL, a header or a log field. */
static size_t redact_match(const char *p, const char **v)
{
    for (size_t i = 0; i < ARRAY_LEN(redact_rules); i++) {
        size_t n = strlen(redact_rules[i].marker), len;
        if (strncasecmp(p, redact_rules[i].marker, n) != 0)
            continue;
        len = strcspn(p + n, "& \t\"',;");
        if (len < redact_rules[i].min)
            continue;
        *v = p + n;
        return len;
    }
    return 0;
}

static bool redact_needed(const char *s)
{
    const char *v;

    for (; *s; s++)
        if ((*s == 'a' || *s == 'A' || *s == 'b' || *s == 'B') && redact_match(s, &v) > 0)
            return true;
    return false;
}

void log_redact(char *s, size_t cap)
{
    char *out;
    size_t n = 0;

    if (cap == 0 || !redact_needed(s))
        return;
    out = xmalloc(cap);
    for (const char *p = s; *p && n + 1 < cap;) {
        const char *v = NULL;
        size_t vlen = redact_match(p, &v);
        if (vlen == 0) {
            out[n++] = *p++;
            continue;
        }
        n += xsnprintf(out + n, cap - n, "%.*s" REDACTED, (int)(v - p), p);
        if (n >= cap)
            n = cap - 1;
        p = v + vlen;
    }
    out[n] = '\0';
    memcpy(s, out, n + 1);
    free(out);
}

static size_t json_escape(char *dst, size_t cap, const char *src)
{
    size_t n = 0;
    for (; *src && n + 7 < cap; src++) {
        unsigned char c = (unsigned char)*src;
        if (c == '"' || c == '\\') {
            dst[n++] = '\\';
            dst[n++] = (char)c;
        } else if (c < 0x20) {
            n += (size_t)snprintf(dst + n, cap - n, "\\u%04x", c);
        } else {
            dst[n++] = (char)c;
        }
    }
    dst[n] = '\0';
    return n;
}

void log_write(enum log_level lvl, const char *fmt, ...)
{
    static const char *const names[] = {"debug", "info", "warn", "error"};
    char msg[2048], line[4600], ts[40];
    struct timespec now;
    struct tm tm;
    va_list ap;
    size_t n;

    clock_gettime(CLOCK_REALTIME, &now);
    gmtime_r(&now.tv_sec, &tm);
    strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    for (char *p = msg; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    log_redact(msg, sizeof(msg));
    if (log_json) {
        char esc[sizeof(msg) * 2];
        json_escape(esc, sizeof(esc), msg);
        n = (size_t)snprintf(line, sizeof(line),
                             "{\"ts\":\"%s.%03ldZ\",\"level\":\"%s\",\"msg\":\"%s\"}\n", ts,
                             now.tv_nsec / 1000000, names[lvl], esc);
    } else {
        n = (size_t)snprintf(line, sizeof(line), "%s.%03ldZ %-5s %s\n", ts, now.tv_nsec / 1000000,
                             names[lvl], msg);
    }
    if (n >= sizeof(line)) {
        n = sizeof(line) - 1;
        line[n - 1] = '\n';
    }
    (void)!write(STDERR_FILENO, line, n);
}
