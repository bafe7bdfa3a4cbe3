/* common/log.c — single-write log lines. */
#include "log.h"

#include "encoding.h"

#include <assert.h>
#include <ctype.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

/* Set by log_init before threads start, and by log_set_level at a reload. */
static _Atomic enum log_level log_min = LOG_INFO;
static bool log_json;
/* The request this thread is working for (log_request_id_set). */
static _Thread_local char log_rid[LOG_REQUEST_ID_MAX + 1];

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void log_set_level(enum log_level min)
{
    atomic_store_explicit(&log_min, min, memory_order_relaxed);
}

void log_init(enum log_level min, bool json)
{
    log_min = min;
    log_json = json;
}

bool log_format_parse(const char *s, bool *json)
{
    if (strcmp(s, "json") == 0 || strcmp(s, "text") == 0) {
        *json = s[0] == 'j';
        return true;
    }
    return false;
}

bool log_enabled(enum log_level lvl)
{
    return lvl >= atomic_load_explicit(&log_min, memory_order_relaxed);
}

bool log_level_parse(const char *s, enum log_level *out)
{
    for (size_t i = 0; i < ARRAY_LEN(level_names); i++) {
        if (strcmp(s, level_names[i]) == 0) {
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

/* ---- request ids ---- */

bool log_request_id_valid(const char *s)
{
    size_t n = 0;

    for (; s[n]; n++)
        if (s[n] < '!' || s[n] > '~' || s[n] == '"' || s[n] == '\\' || n >= LOG_REQUEST_ID_MAX)
            return false;
    return n > 0;
}

/* The trace id of a W3C traceparent, "00-<32 hex>-<16 hex>-<2 hex>", into
 * out (33 bytes); false for anything else or an all-zero id. */
static bool traceparent_id(const char *tp, char out[33])
{
    unsigned char id[16], zero[16] = {0};
    char hex[33];

    if (strlen(tp) < 55 || tp[2] != '-' || tp[35] != '-' || tp[52] != '-' ||
        strncmp(tp, "ff", 2) == 0)
        return false;
    memcpy(hex, tp + 3, 32);
    hex[32] = '\0';
    if (!hex_decode(hex, id, sizeof(id)) || memcmp(id, zero, sizeof(id)) == 0)
        return false;
    for (size_t i = 0; i < 32; i++)
        out[i] = (char)tolower((unsigned char)hex[i]);
    out[32] = '\0';
    return true;
}

void log_request_id_pick(const char *x_request_id, const char *traceparent,
                         char out[LOG_REQUEST_ID_MAX + 1])
{
    unsigned char raw[16];

    if (x_request_id && log_request_id_valid(x_request_id)) {
        xsnprintf(out, LOG_REQUEST_ID_MAX + 1, "%s", x_request_id);
        return;
    }
    if (traceparent && traceparent_id(traceparent, out))
        return;
    rand_bytes(raw, sizeof(raw));
    for (size_t i = 0; i < sizeof(raw); i++)
        xsnprintf(out + 2 * i, 3, "%02x", raw[i]);
}

void log_request_id_set(const char *id)
{
    xsnprintf(log_rid, sizeof(log_rid), "%s", id ? id : "");
}

const char *log_request_id(void)
{
    return log_rid[0] ? log_rid : NULL;
}

/* ---- JSON lines ---- */

#define LOG_FIELDS_MAX 32

struct log_field {
    const char *key, *val; /* NUL-terminated, in the caller's scratch copy */
};

/* Keys a line's own fields may not take: they are written first. */
static const char *const log_reserved[] = {"ts", "level", "msg"};

/* Text keys renamed in JSON, where a field's name must say what it holds. */
static const struct {
    const char *text, *json;
} log_renames[] = {{"run", "run_id"}};

/* The length of "key" when s starts with key=, else 0. A key is lower case
 * letters, digits and '_', not starting with a digit. */
static size_t field_key_len(const char *s)
{
    size_t n = 0;

    if (!((*s >= 'a' && *s <= 'z') || *s == '_'))
        return 0;
    while ((s[n] >= 'a' && s[n] <= 'z') || (s[n] >= '0' && s[n] <= '9') || s[n] == '_')
        n++;
    return s[n] == '=' ? n : 0;
}

static const char *field_json_key(const char *key)
{
    for (size_t i = 0; i < ARRAY_LEN(log_renames); i++)
        if (strcmp(key, log_renames[i].text) == 0)
            return log_renames[i].json;
    return key;
}

static bool field_taken(const struct log_field *f, size_t nf, const char *key)
{
    for (size_t i = 0; i < ARRAY_LEN(log_reserved); i++)
        if (strcmp(key, log_reserved[i]) == 0)
            return true;
    for (size_t i = 0; i < nf; i++)
        if (strcmp(key, f[i].key) == 0)
            return true;
    return false;
}

/* A quoted value at p (after its '"'), unescaped in place up to its closing
 * quote; returns where the token goes on. An unclosed quote runs to the
 * end of the line. */
static char *field_unquote(char *p)
{
    char *out = p;

    while (*p && *p != '"') {
        if (*p == '\\' && (p[1] == '"' || p[1] == '\\'))
            p++;
        *out++ = *p++;
    }
    if (*p == '"')
        p++;
    *out = '\0';
    return p;
}

/* Appends len bytes of text to the message, a space before a new word. */
static void text_add(char *text, size_t cap, size_t *n, const char *s, size_t len, bool word)
{
    if (word && *n > 0 && *n + 1 < cap)
        text[(*n)++] = ' ';
    if (len > cap - 1 - *n)
        len = cap - 1 - *n;
    memcpy(text + *n, s, len);
    *n += len;
    text[*n] = '\0';
}

/* The field whose "key=" (klen bytes) starts s, into *f; returns where
 * the next token starts. A value is quoted ("a b", with \" and \\) or runs
 * to the next space; what follows it to the next space (the ':' of "run=x:
 * reason") belongs to the sentence and goes to the text. */
static char *field_take(char *s, size_t klen, struct log_field *f, char *text, size_t cap,
                        size_t *n)
{
    char *v = s + klen + 1, *rest, *next;
    size_t rlen;

    s[klen] = '\0';
    f->key = field_json_key(s);
    f->val = *v == '"' ? v + 1 : v;
    if (*v == '"') {
        rest = field_unquote(v + 1);
        rlen = strcspn(rest, " ");
    } else {
        size_t vlen = strcspn(v, " ");
        rlen = 0;
        while (vlen > 0 && strchr(":,;", v[vlen - 1])) {
            vlen--;
            rlen++;
        }
        rest = v + vlen;
    }
    next = rest + rlen;
    if (*next)
        next++;
    text_add(text, cap, n, rest, rlen, false);
    *rest = '\0';
    return next;
}

/* Splits s (modified) into the words of its message, into text, and its
 * key=value fields, into f (LOG_FIELDS_MAX). A key already taken, or past
 * the maximum, stays in the text as it was. */
static size_t log_split(char *s, char *text, size_t cap, struct log_field *f)
{
    size_t nf = 0, n = 0;

    text[0] = '\0';
    while (*s) {
        size_t klen, tlen = strcspn(s, " ");

        if (tlen == 0) {
            s++;
            continue;
        }
        klen = field_key_len(s);
        if (klen > 0 && nf < LOG_FIELDS_MAX) {
            s[klen] = '\0';
            if (!field_taken(f, nf, field_json_key(s))) {
                s = field_take(s, klen, &f[nf++], text, cap, &n);
                continue;
            }
            s[klen] = '=';
        }
        text_add(text, cap, &n, s, tlen, true);
        s += tlen;
    }
    return nf;
}

/* A writer into a buffer of fixed size that always leaves room for the
 * line's end ("}\n"), so whatever it drops, the line stays one object. */
struct jline {
    char *buf;
    size_t cap, n;
};

#define JLINE_TAIL 3

static size_t json_escaped_len(const char *s)
{
    size_t n = 0;

    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        n += c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t' ? 2 : c < 0x20 ? 6 : 1;
    }
    return n;
}

static void jline_raw(struct jline *w, const char *s)
{
    size_t len = strlen(s);

    memcpy(w->buf + w->n, s, len);
    w->n += len;
}

/* s as a JSON string; control characters escaped, UTF-8 as it is. */
static void jline_str(struct jline *w, const char *s)
{
    w->buf[w->n++] = '"';
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        const char *esc = c == '"'    ? "\\\""
                          : c == '\\' ? "\\\\"
                          : c == '\n' ? "\\n"
                          : c == '\r' ? "\\r"
                          : c == '\t' ? "\\t"
                                      : NULL;
        if (esc)
            jline_raw(w, esc);
        else if (c < 0x20)
            w->n += xsnprintf(w->buf + w->n, 7, "\\u%04x", c);
        else
            w->buf[w->n++] = (char)c;
    }
    w->buf[w->n++] = '"';
}

/* ,"key":"value" when it fits; false (and nothing written) when not. */
static bool jline_field(struct jline *w, const char *key, const char *val)
{
    size_t need = json_escaped_len(key) + json_escaped_len(val) + 6;

    if (w->n + need + JLINE_TAIL > w->cap)
        return false;
    jline_raw(w, ",");
    jline_str(w, key);
    jline_raw(w, ":");
    jline_str(w, val);
    return true;
}

size_t log_json_line(char *dst, size_t cap, const char *ts, enum log_level lvl, const char *msg)
{
    char scratch[LOG_MSG_MAX], text[LOG_MSG_MAX];
    struct log_field f[LOG_FIELDS_MAX];
    struct jline w = {.buf = dst, .cap = cap};
    size_t nf;

    assert(cap >= 64);
    xsnprintf(scratch, sizeof(scratch), "%s", msg);
    utf8_scrub(scratch);
    nf = log_split(scratch, text, sizeof(text), f);
    jline_raw(&w, "{");
    jline_str(&w, "ts");
    jline_raw(&w, ":");
    jline_str(&w, ts);
    (void)jline_field(&w, "level", level_names[lvl]);
    if (!jline_field(&w, "msg", text))
        (void)jline_field(&w, "msg", "(too long for one line)");
    for (size_t i = 0; i < nf; i++)
        if (!jline_field(&w, f[i].key, f[i].val))
            break;
    jline_raw(&w, "}\n");
    w.buf[w.n] = '\0';
    return w.n;
}

void log_write(enum log_level lvl, const char *fmt, ...)
{
    char msg[LOG_MSG_MAX], line[LOG_LINE_MAX], ts[48], sec[24];
    struct timespec now;
    struct tm tm;
    va_list ap;
    size_t n;

    clock_gettime(CLOCK_REALTIME, &now);
    gmtime_r(&now.tv_sec, &tm);
    strftime(sec, sizeof(sec), "%Y-%m-%dT%H:%M:%S", &tm);
    xsnprintf(ts, sizeof(ts), "%s.%03ldZ", sec, now.tv_nsec / 1000000);
    va_start(ap, fmt);
    vsnprintf(msg, LOG_MSG_MAX - LOG_REQUEST_ID_MAX - 16, fmt, ap);
    va_end(ap);
    if (log_rid[0] && !strstr(msg, "request_id="))
        xsnprintf(msg + strlen(msg), sizeof(msg) - strlen(msg), " request_id=%s", log_rid);
    for (char *p = msg; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    log_redact(msg, sizeof(msg));
    if (log_json) {
        n = log_json_line(line, sizeof(line), ts, lvl, msg);
    } else {
        n = (size_t)snprintf(line, sizeof(line), "%s %-5s %s\n", ts, level_names[lvl], msg);
        if (n >= sizeof(line)) {
            n = sizeof(line) - 1;
            line[n - 1] = '\n';
        }
    }
    (void)!write(STDERR_FILENO, line, n);
}
