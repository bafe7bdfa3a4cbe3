/* common/runlog.c — one attempt's log lines until they are stored
 * (common/runlog.h).
 *
 * Pending lines are kept as their JSON text ("[at_us,\"stream\",\"text\"]"),
 * one after another with "\n" between them (compact JSON never holds a raw
 * newline), so a take is a copy with the separators turned into commas. */
#include "runlog.h"

#include "dynbuf.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MASK "***"

struct runlog {
    pthread_mutex_t mu;
    struct runlog_limits lim;
    int attempt;
    char **secrets;
    size_t nsecrets, secret_max;
    /* a command's line being assembled: at most part_cap bytes are kept,
     * part_over counts the rest */
    char *part;
    size_t part_len, part_cap, part_over;
    /* lines not taken yet */
    struct dynbuf pending;
    int npending;
    int64_t pending_since; /* monotonic ms; 0: nothing pending */
    int64_t dropped;       /* bytes dropped since the last take */
    size_t kept;           /* bytes the command's lines kept take in pending */
    bool capped;           /* max_bytes was reached: the command's lines go */
    int64_t cap_dropped;   /* bytes dropped for max_bytes, over the attempt */
    bool told;             /* the dropped line was added */
    int64_t lines_total, dropped_total;
};

static int64_t now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Adds the pieces of secret between its line breaks (lines are masked one
 * by one, so a secret of several lines is masked piece by piece), each
 * once, those shorter than RUNLOG_SECRET_MIN left out. */
static void add_secret(struct runlog *l, const char *secret)
{
    for (const char *p = secret; *p;) {
        size_t n = strcspn(p, "\r\n");
        bool seen = n < RUNLOG_SECRET_MIN;
        for (size_t i = 0; i < l->nsecrets && !seen; i++)
            seen = strlen(l->secrets[i]) == n && strncmp(l->secrets[i], p, n) == 0;
        if (!seen) {
            l->secrets = xrealloc(l->secrets, (l->nsecrets + 1) * sizeof(*l->secrets));
            l->secrets[l->nsecrets++] = xstrndup(p, n);
            if (n > l->secret_max)
                l->secret_max = n;
        }
        p += n;
        p += strspn(p, "\r\n");
    }
}

/* Longest first: a secret that holds another is masked whole. */
static int longer_first(const void *a, const void *b)
{
    size_t x = strlen(*(char *const *)a), y = strlen(*(char *const *)b);

    return (x < y) - (x > y);
}

struct runlog *runlog_new(const struct runlog_limits *lim, int attempt, const char *const *secrets,
                          size_t nsecrets)
{
    struct runlog *l = xcalloc(1, sizeof(*l));

    pthread_mutex_init(&l->mu, NULL);
    l->lim = *lim;
    if (l->lim.max_line_bytes < RUNLOG_LINE_MIN)
        l->lim.max_line_bytes = RUNLOG_LINE_MIN;
    l->attempt = attempt;
    for (size_t i = 0; i < nsecrets; i++)
        add_secret(l, secrets[i]);
    if (l->nsecrets)
        qsort(l->secrets, l->nsecrets, sizeof(*l->secrets), longer_first);
    l->part_cap = l->lim.max_line_bytes + l->secret_max;
    l->part = xmalloc(l->part_cap + 1);
    /* bounded by the cap (a command's lines) and by how few opsrun's are */
    dynbuf_init(&l->pending, SIZE_MAX - 1);
    return l;
}

void runlog_free(struct runlog *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->nsecrets; i++)
        free(l->secrets[i]);
    free(l->secrets);
    free(l->part);
    dynbuf_free(&l->pending);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

int runlog_attempt(const struct runlog *l)
{
    return l->attempt;
}

/* s (NUL-terminated, n bytes) with every secret replaced by MASK: a new
 * string, or s itself when none occurs. */
static char *mask(const struct runlog *l, char *s, size_t *n)
{
    for (size_t k = 0; k < l->nsecrets; k++) {
        const char *sec = l->secrets[k], *hit = strstr(s, sec);
        size_t sn = strlen(sec);
        struct dynbuf b;
        const char *from = s;

        if (!hit)
            continue;
        dynbuf_init(&b, SIZE_MAX - 1);
        for (; hit; from = hit + sn, hit = strstr(from, sec))
            if (dynbuf_add(&b, from, (size_t)(hit - from)) != ST_OK ||
                dynbuf_adds(&b, MASK) != ST_OK)
                abort();
        if (dynbuf_adds(&b, from) != ST_OK)
            abort();
        free(s);
        *n = dynbuf_len(&b);
        s = dynbuf_take(&b);
    }
    return s;
}

/* Appends s (n bytes of valid UTF-8 without NUL) as the inside of a JSON
 * string: quotes, backslashes and controls escaped, the rest as it is. */
static void json_escape_into(struct dynbuf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    size_t from = 0;

    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[7] = {'\\', 0};
        size_t k = 2;
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        if (c == '"' || c == '\\')
            esc[1] = (char)c;
        else if (c == '\n' || c == '\t' || c == '\r')
            esc[1] = c == '\n' ? 'n' : c == '\t' ? 't' : 'r';
        else
            esc[1] = 'u', esc[2] = '0', esc[3] = '0', esc[4] = hex[c >> 4], esc[5] = hex[c & 15],
            k = 6;
        if (dynbuf_add(b, s + from, i - from) != ST_OK || dynbuf_add(b, esc, k) != ST_OK)
            abort(); /* pending has no bound of its own: only allocation fails */
        from = i + 1;
    }
    if (dynbuf_add(b, s + from, n - from) != ST_OK)
        abort();
}

/* Adds one line (l->mu held): text, n bytes (NUL-terminated), made valid
 * UTF-8 without NULs (which json and jsonb refuse) first. Returns the
 * bytes it takes in pending: what it costs against the cap. */
static size_t add_line(struct runlog *l, const char *stream, char *text, size_t n)
{
    size_t before = dynbuf_len(&l->pending), k;
    char head[64];

    for (size_t i = 0; i < n; i++)
        if (text[i] == '\0')
            text[i] = ' ';
    utf8_scrub(text);
    k = xsnprintf(head, sizeof(head), "%s[%lld,\"%s\",\"", l->npending ? "\n" : "",
                  (long long)now_us(), stream);
    if (dynbuf_add(&l->pending, head, k) != ST_OK)
        abort();
    json_escape_into(&l->pending, text, n);
    if (dynbuf_add(&l->pending, "\"]", 2) != ST_OK)
        abort();
    if (l->npending++ == 0)
        l->pending_since = clock_mono_ms();
    l->lines_total++;
    return dynbuf_len(&l->pending) - before;
}

/* Takes back the line add_line just added, which took `added` bytes. */
static void undo_line(struct runlog *l, size_t added)
{
    dynbuf_truncate(&l->pending, dynbuf_len(&l->pending) - added);
    if (--l->npending == 0)
        l->pending_since = 0;
    l->lines_total--;
}

/* Where to cut text (n bytes) to keep at most max of it: max, or past a
 * secret that begins before max and ends after it, so that masking it
 * whole leaves no piece of it, and nothing that began at max or later
 * shows. */
static size_t safe_cut(const struct runlog *l, const char *text, size_t n, size_t max)
{
    size_t cut = n < max ? n : max;
    bool moved = cut < n;

    while (moved) {
        moved = false;
        for (size_t k = 0; k < l->nsecrets && !moved; k++) {
            size_t sn = strlen(l->secrets[k]);
            for (size_t p = cut >= sn ? cut - sn + 1 : 0; p < cut && !moved; p++)
                if (p + sn <= n && memcmp(text + p, l->secrets[k], sn) == 0)
                    cut = p + sn, moved = true;
        }
    }
    return cut;
}

void runlog_vsay(struct runlog *l, const char *fmt, va_list ap)
{
    char *text;
    size_t n;
    int len;
    va_list aq;

    if (!l)
        return;
    va_copy(aq, ap);
    len = vsnprintf(NULL, 0, fmt, aq);
    va_end(aq);
    if (len < 0)
        return;
    text = xmalloc((size_t)len + 1);
    vsnprintf(text, (size_t)len + 1, fmt, ap);
    n = (size_t)len;
    for (size_t i = 0; i < n; i++) /* one line: an error message may quote several */
        if (text[i] == '\n' || text[i] == '\r')
            text[i] = ' ';
    pthread_mutex_lock(&l->mu);
    n = safe_cut(l, text, n, l->lim.max_line_bytes); /* a remote's URL may be long */
    text[n] = '\0';
    text = mask(l, text, &n);
    (void)add_line(l, "opsrun", text, n);
    pthread_mutex_unlock(&l->mu);
    free(text);
}

/* The length of the longest end of a secret (RUNLOG_SECRET_MIN bytes or
 * more, short of all of it) that s begins with: text cut out of a longer
 * stream may begin inside a secret. */
static size_t secret_tail_at(const struct runlog *l, const char *s)
{
    size_t best = 0, n = strlen(s);

    for (size_t k = 0; k < l->nsecrets; k++) {
        size_t sn = strlen(l->secrets[k]);
        for (size_t t = sn - 1; t >= RUNLOG_SECRET_MIN && t > best; t--)
            if (t <= n && memcmp(s, l->secrets[k] + sn - t, t) == 0) {
                best = t;
                break;
            }
    }
    return best;
}

char *runlog_mask(struct runlog *l, const char *s)
{
    size_t n, head;
    char *out;

    pthread_mutex_lock(&l->mu);
    head = secret_tail_at(l, s);
    out = head ? xasprintf("%s%s", MASK, s + head) : xstrdup(s);
    n = strlen(out);
    out = mask(l, out, &n);
    pthread_mutex_unlock(&l->mu);
    return out;
}

void runlog_say(struct runlog *l, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    runlog_vsay(l, fmt, ap);
    va_end(ap);
}

/* Drops a command's line of n bytes (over more were never kept), and
 * every one after it: no holes in what is kept. */
static void drop_line(struct runlog *l, size_t n, size_t over)
{
    int64_t gone = (int64_t)(n + over + 1);

    l->capped = true;
    l->dropped += gone;
    l->cap_dropped += gone;
    l->dropped_total += gone;
}

/* The assembled command line ends (l->mu held): cut, masked, and counted
 * against the attempt's cap by what it takes stored (so a flood of empty
 * lines is bounded as much as long ones). */
static void end_line(struct runlog *l)
{
    size_t n = l->part_len, over = l->part_over, cut, added;
    char *text = l->part, *own = NULL;

    l->part_len = l->part_over = 0;
    while (n && text[n - 1] == '\r')
        n--;
    for (size_t i = 0; i < n; i++)
        if (text[i] == '\0')
            text[i] = ' ';
    cut = safe_cut(l, text, n, l->lim.max_line_bytes);
    over += n - cut;
    n = cut;
    text[n] = '\0';
    if (l->capped) {
        drop_line(l, n, over);
        return;
    }
    for (size_t k = 0; k < l->nsecrets && !own; k++)
        if (strstr(text, l->secrets[k])) /* the uncommon case: a copy, masked */
            text = own = mask(l, xstrndup(text, n), &n);
    if (over) {
        char *marked = xasprintf("%s [%zu bytes cut]", text, over);
        free(own);
        text = own = marked;
        n = strlen(marked);
    }
    added = add_line(l, "stderr", text, n);
    if (l->kept + added > l->lim.max_bytes) {
        undo_line(l, added);
        drop_line(l, cut, over);
    } else {
        l->kept += added;
        l->dropped += (int64_t)over;
        l->dropped_total += (int64_t)over;
    }
    free(own);
}

void runlog_write(struct runlog *l, const char *b, size_t n)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    for (size_t i = 0; i < n; i++) {
        const char *nl = memchr(b + i, '\n', n - i);
        size_t k = (nl ? (size_t)(nl - b) : n) - i, room = l->part_cap - l->part_len;
        size_t keep = k < room ? k : room;

        memcpy(l->part + l->part_len, b + i, keep);
        l->part_len += keep;
        l->part[l->part_len] = '\0';
        l->part_over += k - keep;
        i += k;
        if (nl)
            end_line(l);
    }
    pthread_mutex_unlock(&l->mu);
}

void runlog_end_output(struct runlog *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    if (l->part_len || l->part_over)
        end_line(l);
    pthread_mutex_unlock(&l->mu);
}

/* The length of the first lines of the pending buffer that fit in max
 * bytes, and how many they are; at least one line. */
static size_t take_len(const struct runlog *l, size_t max, int *count)
{
    const char *p = dynbuf_ptr(&l->pending);
    size_t len = dynbuf_len(&l->pending), at = 0;

    *count = 0;
    while (at < len) {
        const char *nl = memchr(p + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - p) : len;
        if (*count > 0 && end > max)
            break;
        (*count)++;
        at = nl ? end + 1 : len;
        if (!nl)
            return len;
    }
    return at ? at - 1 : 0; /* without the last separator */
}

bool runlog_take(struct runlog *l, size_t max_bytes, bool final, struct runlog_chunk *c)
{
    size_t n, len;
    char *p;

    memset(c, 0, sizeof(*c));
    pthread_mutex_lock(&l->mu);
    if (final && l->cap_dropped && !l->told) {
        char *text = xasprintf("%lld bytes of output dropped: the attempt wrote more than "
                               "logs.max_bytes_per_attempt (%zu bytes)",
                               (long long)l->cap_dropped, l->lim.max_bytes);
        (void)add_line(l, "opsrun", text, strlen(text));
        free(text);
        l->told = true;
    }
    if (l->npending == 0) { /* drops alone go with the next line */
        pthread_mutex_unlock(&l->mu);
        return false;
    }
    n = take_len(l, max_bytes, &c->nlines);
    len = dynbuf_len(&l->pending);
    p = dynbuf_ptr(&l->pending);
    c->frags = xstrndup(p, n);
    c->lines_json = xmalloc(n + 3);
    c->lines_json[0] = '[';
    memcpy(c->lines_json + 1, p, n);
    for (size_t i = 1; i <= n; i++)
        if (c->lines_json[i] == '\n')
            c->lines_json[i] = ',';
    c->lines_json[n + 1] = ']';
    c->lines_json[n + 2] = '\0';
    c->dropped = l->dropped;
    l->dropped = 0;
    if (n < len) {
        memmove(p, p + n + 1, len - n - 1);
        dynbuf_truncate(&l->pending, len - n - 1);
        l->npending -= c->nlines;
        l->pending_since = clock_mono_ms();
    } else {
        dynbuf_reset(&l->pending);
        l->npending = 0;
        l->pending_since = 0;
    }
    pthread_mutex_unlock(&l->mu);
    return true;
}

void runlog_restore(struct runlog *l, struct runlog_chunk *c)
{
    char *rest;

    if (!c->frags)
        return;
    pthread_mutex_lock(&l->mu);
    rest = l->npending ? xstrndup(dynbuf_ptr(&l->pending), dynbuf_len(&l->pending)) : NULL;
    dynbuf_reset(&l->pending);
    if (dynbuf_adds(&l->pending, c->frags) != ST_OK ||
        (rest &&
         (dynbuf_add(&l->pending, "\n", 1) != ST_OK || dynbuf_adds(&l->pending, rest) != ST_OK)))
        abort();
    l->npending += c->nlines;
    l->dropped += c->dropped;
    if (!l->pending_since)
        l->pending_since = clock_mono_ms();
    pthread_mutex_unlock(&l->mu);
    free(rest);
    runlog_chunk_cleanup(c);
}

void runlog_chunk_cleanup(struct runlog_chunk *c)
{
    free(c->lines_json);
    free(c->frags);
    memset(c, 0, sizeof(*c));
}

int64_t runlog_pending_since(struct runlog *l)
{
    int64_t t;

    pthread_mutex_lock(&l->mu);
    t = l->pending_since;
    pthread_mutex_unlock(&l->mu);
    return t;
}

void runlog_counts(struct runlog *l, int64_t *lines, int64_t *dropped)
{
    pthread_mutex_lock(&l->mu);
    *lines = l->lines_total;
    *dropped = l->dropped_total;
    pthread_mutex_unlock(&l->mu);
}
