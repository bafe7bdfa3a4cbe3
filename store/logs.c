/* store/logs.c — run_logs (store/logs.h, migration 021). */
#include "store/logs.h"

#include "common/time_rfc3339.h"
#include "store/db_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* $1 tenant, $2 run, $3 attempt, $4 lines, $5 dropped, $6 the lines
 * (json). The run's row lock, taken by the UPDATE, orders its writers. */
static const struct stmt S_APPEND = {
    "logs_append",
    "WITH r AS (UPDATE runs SET log_seq = log_seq + $4::int WHERE tenant = $1 AND id = $2 "
    "RETURNING tenant, id, created_at, log_seq) "
    "INSERT INTO run_logs (tenant, run_id, run_created_at, attempt, first_seq, last_seq, "
    "dropped, lines) SELECT r.tenant, r.id, r.created_at, $3::int, r.log_seq - $4::int + 1, "
    "r.log_seq, $5::bigint, $6::json FROM r RETURNING last_seq"};
/* $1 tenant, $2 run, $3 attempt (NULL: every one). */
static const struct stmt S_RUN = {
    "logs_run", "SELECT r.status, r.log_seq, r.attempt, EXISTS (SELECT 1 FROM run_logs l "
                "WHERE l.tenant = r.tenant AND l.run_id = r.id AND l.run_created_at = r.created_at "
                "AND l.dropped > 0 AND ($3::int IS NULL OR l.attempt = $3::int)) "
                "FROM runs r WHERE r.tenant = $1 AND r.id = $2"};
/* $1 tenant, $2 run, $3 after, $4 attempt (NULL: every one), $5 limit.
 * A chunk holds at least one line, so the lines asked for are in the first
 * limit chunks past after (of the attempt, if one is given); of those, only
 * the chunks that begin before limit lines past after are reached are
 * expanded: m reads their seqs alone, c the lines of the ones needed. Chunks
 * of an earlier run of the same id (retention allows one) are told apart
 * by the run's creation time. */
static const struct stmt S_LINES = {
    "logs_lines",
    "WITH m AS MATERIALIZED (SELECT l.run_created_at, l.first_seq, l.last_seq, "
    "l.last_seq - greatest(l.first_seq - 1, $3::bigint) AS n FROM runs r "
    "JOIN run_logs l ON l.tenant = r.tenant AND l.run_id = r.id "
    "AND l.run_created_at = r.created_at WHERE r.tenant = $1 AND r.id = $2 "
    "AND l.last_seq > $3::bigint AND ($4::int IS NULL OR l.attempt = $4::int) "
    "ORDER BY l.last_seq LIMIT $5::int), "
    "k AS (SELECT m.*, sum(m.n) OVER (ORDER BY m.last_seq) - m.n AS before FROM m), "
    "c AS MATERIALIZED (SELECT l.first_seq, l.attempt, l.lines FROM k JOIN run_logs l "
    "ON l.tenant = $1 AND l.run_id = $2 AND l.run_created_at = k.run_created_at "
    "AND l.last_seq = k.last_seq WHERE k.before < $5::int) "
    "SELECT c.first_seq + x.i - 1 AS seq, c.attempt, (x.v->>0)::bigint, x.v->>1, x.v->>2 "
    "FROM c CROSS JOIN LATERAL json_array_elements(c.lines) WITH ORDINALITY AS x(v, i) "
    "WHERE c.first_seq + x.i - 1 > $3::bigint ORDER BY 1 LIMIT $5::int"};

enum status store_logs_append(struct db *db, const struct log_chunk *c, int64_t *last_seq,
                              struct error *err)
{
    char attempt[16], n[16], dropped[24];
    const char *p[6] = {c->tenant, c->run_id, attempt, n, dropped, c->lines_json};
    PGresult *r;
    enum status st;

    xsnprintf(attempt, sizeof(attempt), "%d", c->attempt);
    xsnprintf(n, sizeof(n), "%d", c->nlines);
    xsnprintf(dropped, sizeof(dropped), "%lld", (long long)c->dropped);
    st = db_run(db, &S_APPEND, 6, p, &r, err);
    if (st != ST_OK)
        return st;
    if (PQntuples(r) == 0) {
        PQclear(r);
        return error_set(err, ST_NOT_FOUND, "run \"%s\" not found", c->run_id);
    }
    if (last_seq)
        *last_seq = db_i64(r, 0, 0);
    PQclear(r);
    return ST_OK;
}

/* The run's state and whether its log (of q's attempt) was truncated. */
static enum status read_run(struct db *db, const struct log_query *q, const char *attempt,
                            struct log_page *out, struct error *err)
{
    const char *p[3] = {q->tenant, q->run_id, attempt};
    PGresult *r;
    enum status st = db_run(db, &S_RUN, 3, p, &r, err);

    if (st != ST_OK)
        return st;
    if (PQntuples(r) == 0) {
        PQclear(r);
        return error_set(err, ST_NOT_FOUND, "run \"%s\" not found", q->run_id);
    }
    if (!run_status_parse(db_val(r, 0, 0), &out->status))
        out->status = RUN_QUEUED;
    out->last_seq = db_i64(r, 0, 1);
    out->attempt = (int)db_i64(r, 0, 2);
    out->truncated = db_val(r, 0, 3) && db_val(r, 0, 3)[0] == 't';
    PQclear(r);
    return ST_OK;
}

enum status store_logs_read(struct db *db, const struct log_query *q, log_line_fn fn, void *arg,
                            struct log_page *out, struct error *err)
{
    char attempt[16], after[24], limit[16];
    const char *p[5] = {q->tenant, q->run_id, after, q->attempt > 0 ? attempt : NULL, limit};
    PGresult *r;
    enum status st;

    memset(out, 0, sizeof(*out));
    if (q->limit < 1 || q->limit > LOGS_PAGE_MAX || q->after < 0 || q->attempt < 0)
        return error_set(err, ST_INVALID, "invalid log query");
    xsnprintf(attempt, sizeof(attempt), "%d", q->attempt);
    xsnprintf(after, sizeof(after), "%lld", (long long)q->after);
    xsnprintf(limit, sizeof(limit), "%d", q->limit);
    /* The run first: a line written after this read is not in the page,
     * and the page says nothing of lines beyond last_seq. */
    st = read_run(db, q, q->attempt > 0 ? attempt : NULL, out, err);
    if (st == ST_OK)
        st = db_run(db, &S_LINES, 5, p, &r, err);
    if (st != ST_OK)
        return st;
    for (int i = 0; i < PQntuples(r); i++) {
        const struct log_line line = {
            .seq = db_i64(r, i, 0),
            .attempt = (int)db_i64(r, i, 1),
            .at_us = db_i64(r, i, 2),
            .stream = db_val(r, i, 3) ? db_val(r, i, 3) : "",
            .text = db_val(r, i, 4) ? db_val(r, i, 4) : "",
        };
        if (line.seq > out->last_seq)
            break; /* written after read_run: the next page has it */
        fn(arg, &line);
        out->nlines++;
    }
    PQclear(r);
    return ST_OK;
}

int logs_page_lines(int max_line_bytes)
{
    int64_t n = max_line_bytes > 0 ? LOGS_PAGE_BYTES / max_line_bytes : LOGS_PAGE_MAX;

    return n < 16 ? 16 : n > LOGS_PAGE_MAX ? LOGS_PAGE_MAX : (int)n;
}

json_t *log_line_json(const struct log_line *l)
{
    char at[40];
    json_t *o;

    time_format_rfc3339(l->at_us, at, sizeof(at));
    o = json_pack("{s:I, s:i, s:s, s:s, s:s}", "seq", (json_int_t)l->seq, "attempt", l->attempt,
                  "at", at, "stream", l->stream, "text", l->text);
    if (!o)
        abort(); /* the database's text is UTF-8: only allocation fails */
    return o;
}
