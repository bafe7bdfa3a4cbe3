/* handlers/logs.c — GET /runs/{id}/logs (docs/logs.md): a page of a run's
 * log lines, as JSON or as plain text. */
#include "handlers/handlers.h"

#include "common/dynbuf.h"
#include "store/db.h"
#include "store/logs.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define LOGS_DEFAULT 1000
/* The longest plain-text page: LOGS_PAGE_MAX lines of the longest kind
 * (logs.max_line_bytes at most 1 MiB) would not do, so a text page stops
 * early, with the next line's position in its header, past this. */
#define TEXT_MAX (16 * 1024 * 1024)

/* A whole number in [lo, hi] from v, else a field problem. */
static void parse_num(const char *v, const char *name, int64_t lo, int64_t hi, int64_t *out,
                      struct error *err)
{
    char *end;
    long long n;

    if (!v)
        return;
    errno = 0;
    n = strtoll(v, &end, 10);
    if (errno || end == v || *end || n < lo || n > hi)
        error_field(err, ST_INVALID, name, "must be an integer from %lld to %lld", (long long)lo,
                    (long long)hi);
    else
        *out = n;
}

/* Whether the answer is plain text: ?format=text, or an Accept header that
 * names text/plain and not JSON. */
static bool wants_text(const struct request *rq, struct error *err)
{
    const char *f = rq->query(rq, "format");

    if (f && strcmp(f, "text") != 0 && strcmp(f, "json") != 0)
        error_field(err, ST_INVALID, "format", "must be text or json");
    if (f)
        return strcmp(f, "text") == 0;
    return rq->accept && strstr(rq->accept, "text/plain") &&
           !strstr(rq->accept, "application/json");
}

enum status logs_parse_query(const struct request *rq, struct log_query *q, bool *text,
                             struct error *err)
{
    int64_t attempt = 0, after = 0, limit = LOGS_DEFAULT;

    parse_num(rq->query(rq, "attempt"), "attempt", 1, INT32_MAX, &attempt, err);
    parse_num(rq->query(rq, "after"), "after", 0, INT64_MAX, &after, err);
    parse_num(rq->query(rq, "limit"), "limit", 1, LOGS_PAGE_MAX, &limit, err);
    *text = wants_text(rq, err);
    q->attempt = (int)attempt;
    q->after = after;
    q->limit = (int)limit;
    return err->nfields ? error_set(err, ST_INVALID, "invalid query") : ST_OK;
}

struct page {
    json_t *lines;   /* JSON: the line objects */
    struct dynbuf t; /* text: the lines, each ended by "\n" */
    int64_t last;    /* the last seq given */
    bool text, full;
};

static void on_line(void *arg, const struct log_line *l)
{
    struct page *p = arg;

    if (p->full)
        return;
    if (p->text) {
        if (dynbuf_adds(&p->t, l->text) != ST_OK || dynbuf_add(&p->t, "\n", 1) != ST_OK) {
            p->full = true; /* the next page starts at this line */
            return;
        }
    } else {
        json_array_append_new(p->lines, log_line_json(l));
    }
    p->last = l->seq;
}

static void reply_page(struct reply *rp, struct page *p, const struct log_query *q,
                       const struct log_page *pg)
{
    bool more = p->full || pg->nlines == q->limit;
    char next[24];

    xsnprintf(next, sizeof(next), "%lld", (long long)p->last);
    if (p->text) {
        rp->http_status = 200;
        rp->text = dynbuf_take(&p->t);
        rp->text_type = "text/plain; charset=utf-8";
        if (more)
            reply_header(rp, "Opsrun-Next-After", next);
        if (pg->truncated)
            reply_header(rp, "Opsrun-Truncated", "true");
        return;
    }
    reply_json_take(rp, 200,
                    json_pack("{s:o, s:o, s:b}", "lines", p->lines, "next_after",
                              more && p->last > 0 ? json_integer(p->last) : json_null(),
                              "truncated", pg->truncated));
    p->lines = NULL;
}

enum status handle_runs_logs(const struct hctx *hc, const struct request *rq, struct reply *rp)
{
    struct log_query q = {.run_id = rq->path_id};
    struct page p = {.lines = json_array()};
    struct log_page pg;
    struct error err = {0};
    struct db *db = NULL;
    char tenant[65];
    enum status st = logs_parse_query(rq, &q, &p.text, &err);
    int cap = logs_page_lines(hc->cfg->logs.max_line_bytes);

    /* Long lines make short pages: what the database hands back is bounded. */
    if (q.limit > cap)
        q.limit = cap;
    dynbuf_init(&p.t, TEXT_MAX);
    xsnprintf(rp->run_id, sizeof(rp->run_id), "%s", rq->path_id);
    if (st == ST_OK && rq->all_tenants)
        st = handle_runs_locate(hc, rq, rq->path_id, tenant, &err);
    else
        xsnprintf(tenant, sizeof(tenant), "%s", rq->tenant);
    q.tenant = tenant;
    if (st == ST_OK)
        st = db_pool_get(hc->pool, &db, &err);
    if (st == ST_OK)
        st = store_logs_read(db, &q, on_line, &p, &pg, &err);
    db_pool_put(hc->pool, db);
    if (st == ST_OK)
        reply_page(rp, &p, &q, &pg);
    else
        reply_error(rp, st, &err);
    json_decref(p.lines);
    dynbuf_free(&p.t);
    return st;
}
