/* tests/fuzz/fuzz_runs_filter.c — GET /runs query parameters. The input is
 * a query string ("status=queued&limit=10&cursor=..."), split and
 * percent-decoded as libmicrohttpd does ('+' is a space, a key without '='
 * has no value, the first of repeated keys wins), then runs_parse_filter. */
#include "tests/fuzz/fuzz.h"

#include "common/cursor.h"

#define MAX_ARGS 32

struct query {
    char *buf;
    size_t n;
    const char *key[MAX_ARGS], *value[MAX_ARGS];
};

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* In place; a NUL from "%00" ends the string, as it would in C. */
static void unescape(char *s)
{
    char *out = s;

    for (; *s; s++) {
        int hi, lo;
        if (*s == '+') {
            *out++ = ' ';
        } else if (*s == '%' && (hi = hex_digit(s[1])) >= 0 && (lo = hex_digit(s[2])) >= 0) {
            *out++ = (char)(hi * 16 + lo);
            s += 2;
        } else {
            *out++ = *s;
        }
    }
    *out = '\0';
}

static void query_parse(struct query *q, const uint8_t *data, size_t size)
{
    char *p;

    q->buf = fuzz_cstr(data, size);
    q->n = 0;
    for (p = q->buf; p && q->n < MAX_ARGS;) {
        char *amp = strchr(p, '&'), *eq;
        if (amp)
            *amp = '\0';
        eq = strchr(p, '=');
        if (eq)
            *eq = '\0';
        unescape(p);
        if (eq)
            unescape(eq + 1);
        q->key[q->n] = p;
        q->value[q->n++] = eq ? eq + 1 : NULL;
        p = amp ? amp + 1 : NULL;
    }
}

static const char *query_get(const struct request *rq, const char *key)
{
    const struct query *q = rq->query_arg;

    for (size_t i = 0; i < q->n; i++)
        if (strcmp(q->key[i], key) == 0)
            return q->value[i];
    return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct query q;
    struct request rq = {.method = "GET", .path = "/runs", .tenant = "default"};
    struct run_filter f;
    struct error err = {0};
    enum status st;

    query_parse(&q, data, size);
    rq.query = query_get;
    rq.query_arg = &q;
    st = runs_parse_filter(&rq, &f, &err);
    if (st != ST_OK) {
        FUZZ_CHECK(st == ST_INVALID && err.nfields > 0);
        fuzz_check_error(st, &err);
    } else {
        FUZZ_CHECK(f.limit >= 1 && f.limit <= 500);
        FUZZ_CHECK(!f.type || (f.type[0] && strlen(f.type) <= 64));
        FUZZ_CHECK(!f.external_id || (f.external_id[0] && strlen(f.external_id) <= 512));
        if (f.has_cursor) {
            /* Only tokens we issue decode, and each has one spelling. */
            char *again = cursor_encode(f.cursor_us, f.cursor_id);
            FUZZ_CHECK(strcmp(again, query_get(&rq, "cursor")) == 0);
            free(again);
        }
    }
    free(q.buf);
    return 0;
}
