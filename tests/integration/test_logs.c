/* tests/integration/test_logs.c — run_logs (store/logs.h, migration 021)
 * against a real PostgreSQL: chunks take contiguous seqs, pages read them
 * back in order (after, limit, attempt), a truncated attempt says so, an
 * unknown run or another tenant's is not found, the lines of an earlier
 * run of the same id are never shown, and writers of one run racing on
 * many connections while a reader follows: every line read exactly once,
 * in seq order, none skipped by a commit that came late.
 *
 * System headers come before the opsrun headers, ahead of common.h's poison
 * pragma. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <libpq-fe.h>

#include "store/db.h"
#include "store/logs.h"
#include "tests/support/fixture.h"
#include "tests/support/harness.h"

/* A run r in tenant t, as a submission makes it. */
static void make_run(const char *tenant, const char *id)
{
    PQclear(th_sql(g_pg,
                   "INSERT INTO runs (tenant, id, type, status, attempt, max_attempts, timeout_s, "
                   "input, identity_hash, request_hash) VALUES ('%s', '%s', 'demo', 'running', "
                   "1, 3, 300, '{}', 'ident-%s', 'req')",
                   tenant, id, id));
}

/* A chunk of n lines "<prefix> i" (i from 1) of attempt, for run id. */
static void append(struct db *db, const char *tenant, const char *id, int attempt, int n,
                   const char *prefix, int64_t dropped, int64_t *last)
{
    json_t *a = json_array();
    char text[64], *js;
    struct log_chunk c;
    struct error err = {0};

    for (int i = 1; i <= n; i++) {
        snprintf(text, sizeof(text), "%s %d", prefix, i);
        json_array_append_new(a, json_pack("[I s s]", (json_int_t)1795000000000000LL + i,
                                           i % 2 ? "stderr" : "opsrun", text));
    }
    js = json_dumps(a, JSON_COMPACT);
    c = (struct log_chunk){tenant, id, attempt, n, dropped, js};
    ck_assert_msg(store_logs_append(db, &c, last, &err) == ST_OK, "%s", err.message);
    free(js);
    json_decref(a);
}

struct collect {
    json_t *lines; /* [seq, attempt, stream, text] */
};

static void on_line(void *arg, const struct log_line *l)
{
    struct collect *c = arg;

    json_array_append_new(c->lines, json_pack("[I i s s I]", (json_int_t)l->seq, l->attempt,
                                              l->stream, l->text, (json_int_t)l->at_us));
}

static json_t *read_page(const struct log_query *q, struct log_page *page, enum status want)
{
    struct collect c = {json_array()};
    struct error err = {0};
    enum status st = store_logs_read(g_db, q, on_line, &c, page, &err);

    ck_assert_msg(st == want, "read: %s (%s)", status_name(st), err.message);
    return c.lines;
}

static json_int_t seq_at(const json_t *lines, size_t i)
{
    return json_integer_value(json_array_get(json_array_get(lines, i), 0));
}

static const char *text_at(const json_t *lines, size_t i)
{
    return json_string_value(json_array_get(json_array_get(lines, i), 3));
}

/* Chunks of two attempts take seqs 1..n in order; pages by after and
 * limit, by attempt; truncated only for the attempt that dropped. */
START_TEST(chunks_pages_attempts)
{
    struct log_page page;
    int64_t last = 0;
    json_t *l;

    open_test_db("it_logs_pages");
    make_run("acme", "r1");
    append(g_db, "acme", "r1", 1, 3, "one", 0, &last);
    ck_assert_int_eq(last, 3);
    append(g_db, "acme", "r1", 1, 2, "two", 0, &last);
    ck_assert_int_eq(last, 5);
    append(g_db, "acme", "r1", 2, 4, "three", 17, &last);
    ck_assert_int_eq(last, 9);

    l = read_page(&(struct log_query){"acme", "r1", 0, 0, 1000}, &page, ST_OK);
    ck_assert_int_eq(json_array_size(l), 9);
    for (size_t i = 0; i < 9; i++)
        ck_assert_int_eq(seq_at(l, i), (json_int_t)i + 1);
    ck_assert_str_eq(text_at(l, 0), "one 1");
    ck_assert_str_eq(text_at(l, 3), "two 1");
    ck_assert_str_eq(text_at(l, 8), "three 4");
    ck_assert_int_eq(json_integer_value(json_array_get(json_array_get(l, 0), 4)),
                     1795000000000001LL);
    ck_assert_int_eq(page.last_seq, 9);
    ck_assert(page.truncated);
    ck_assert_int_eq(page.status, RUN_RUNNING);
    json_decref(l);

    l = read_page(&(struct log_query){"acme", "r1", 0, 2, 3}, &page, ST_OK);
    ck_assert_int_eq(json_array_size(l), 3);
    ck_assert_int_eq(seq_at(l, 0), 3);
    ck_assert_int_eq(seq_at(l, 2), 5);
    ck_assert_int_eq(page.nlines, 3);
    json_decref(l);

    l = read_page(&(struct log_query){"acme", "r1", 1, 0, 1000}, &page, ST_OK);
    ck_assert_int_eq(json_array_size(l), 5);
    ck_assert(!page.truncated);
    json_decref(l);
    l = read_page(&(struct log_query){"acme", "r1", 2, 6, 2}, &page, ST_OK);
    ck_assert_int_eq(json_array_size(l), 2);
    ck_assert_int_eq(seq_at(l, 0), 7);
    ck_assert_int_eq(seq_at(l, 1), 8);
    ck_assert(page.truncated);
    json_decref(l);
    l = read_page(&(struct log_query){"acme", "r1", 0, 9, 10}, &page, ST_OK);
    ck_assert_int_eq(json_array_size(l), 0);
    json_decref(l);
    close_test_db();
}
END_TEST

/* Another tenant's run, an unknown one: not found, for writers and
 * readers; a bad query is refused. */
START_TEST(not_found_and_refused)
{
    struct log_page page;
    struct log_chunk c = {"other", "r1", 1, 1, 0, "[[1,\"opsrun\",\"x\"]]"};
    struct error err = {0};

    open_test_db("it_logs_notfound");
    make_run("acme", "r1");
    ck_assert_int_eq(store_logs_append(g_db, &c, NULL, &err), ST_NOT_FOUND);
    json_decref(read_page(&(struct log_query){"other", "r1", 0, 0, 10}, &page, ST_NOT_FOUND));
    json_decref(read_page(&(struct log_query){"acme", "nope", 0, 0, 10}, &page, ST_NOT_FOUND));
    json_decref(read_page(&(struct log_query){"acme", "r1", 0, 0, 0}, &page, ST_INVALID));
    json_decref(
        read_page(&(struct log_query){"acme", "r1", 0, 0, LOGS_PAGE_MAX + 1}, &page, ST_INVALID));
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM run_logs"), 0);
    /* a page past any seq there can be is empty, not an overflow */
    append(g_db, "acme", "r1", 1, 3, "x", 0, NULL);
    json_decref(
        read_page(&(struct log_query){"acme", "r1", 0, INT64_MAX, LOGS_PAGE_MAX}, &page, ST_OK));
    ck_assert_int_eq(page.nlines, 0);
    ck_assert_int_eq(page.last_seq, 3);
    /* long lines, short pages: 16 MiB of text at most, 16 to 5000 lines */
    ck_assert_int_eq(logs_page_lines(8192), 2048);
    ck_assert_int_eq(logs_page_lines(1048576), 16);
    ck_assert_int_eq(logs_page_lines(256), LOGS_PAGE_MAX);
    close_test_db();
}
END_TEST

/* Retention deleted a run and a new one took its id: the old lines stay in
 * their partition until it is dropped, and are never shown. */
START_TEST(old_run_of_same_id_hidden)
{
    struct log_page page;
    json_t *l;

    open_test_db("it_logs_reuse");
    make_run("acme", "r1");
    append(g_db, "acme", "r1", 1, 5, "old", 0, NULL);
    PQclear(th_sql(g_pg, "DELETE FROM runs WHERE id = 'r1'"));
    make_run("acme", "r1");
    PQclear(th_sql(g_pg, "UPDATE runs SET created_at = created_at + interval '1 ms' WHERE id = "
                         "'r1'"));
    append(g_db, "acme", "r1", 1, 2, "new", 0, NULL);
    l = read_page(&(struct log_query){"acme", "r1", 0, 0, 100}, &page, ST_OK);
    ck_assert_int_eq(json_array_size(l), 2);
    ck_assert_str_eq(text_at(l, 0), "new 1");
    ck_assert_int_eq(seq_at(l, 0), 1);
    json_decref(l);
    close_test_db();
}
END_TEST

#define WRITERS 6
#define CHUNKS 60

struct writer {
    const char *ci;
    int k;
    atomic_bool *failed;
};

static void *write_main(void *arg)
{
    struct writer *w = arg;
    struct db *db = NULL;
    struct error err = {0};
    char prefix[16];

    if (db_connect(&(struct db_options){.conninfo = w->ci,
                                        .application_name = "it_logs_w",
                                        .connect_timeout_s = 5,
                                        .statement_timeout_ms = 10000},
                   &db, &err) != ST_OK) {
        atomic_store(w->failed, true);
        return NULL;
    }
    snprintf(prefix, sizeof(prefix), "w%d", w->k);
    for (int i = 0; i < CHUNKS; i++) {
        json_t *a = json_pack("[[I s s], [I s s]]", (json_int_t)i, "stderr", prefix, (json_int_t)i,
                              "stderr", prefix);
        char *js = json_dumps(a, JSON_COMPACT);
        struct log_chunk c = {"acme", "race", 1, 2, 0, js};
        if (store_logs_append(db, &c, NULL, &err) != ST_OK)
            atomic_store(w->failed, true);
        free(js);
        json_decref(a);
    }
    db_close(db);
    return NULL;
}

/* WRITERS connections write chunks of one run at once while a reader
 * pages with "after": every seq 1..N is read exactly once, in order. */
START_TEST(racing_writers_read_in_order)
{
    pthread_t t[WRITERS];
    struct writer w[WRITERS];
    atomic_bool failed = false;
    int64_t next = 1;
    const int64_t total = WRITERS * CHUNKS * 2;
    long long until = th_now_ms() + 60000;

    open_test_db("it_logs_race");
    make_run("acme", "race");
    for (int i = 0; i < WRITERS; i++) {
        w[i] = (struct writer){g_ci, i, &failed};
        pthread_create(&t[i], NULL, write_main, &w[i]);
    }
    while (next <= total && th_now_ms() < until) {
        struct log_page page;
        json_t *l = read_page(&(struct log_query){"acme", "race", 0, next - 1, 50}, &page, ST_OK);
        for (size_t i = 0; i < json_array_size(l); i++)
            ck_assert_int_eq(seq_at(l, i), next++);
        json_decref(l);
    }
    for (int i = 0; i < WRITERS; i++)
        pthread_join(t[i], NULL);
    ck_assert(!atomic_load(&failed));
    ck_assert_int_eq(next, total + 1);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT log_seq FROM runs WHERE id = 'race'"), total);
    close_test_db();
}
END_TEST

/* The partitions: a twin in run_logs for every span of run_events, and
 * the drop takes both. */
START_TEST(partitions_twinned)
{
    open_test_db("it_logs_partitions");
    ck_assert_int_eq(th_sql_int(g_pg,
                                "SELECT count(*) FROM opsrun_event_partitions() p WHERE NOT EXISTS "
                                "(SELECT 1 FROM pg_class c WHERE c.relname = "
                                "opsrun_log_partition_name(p.name))"),
                     0);
    PQclear(th_sql(g_pg, "SELECT * FROM opsrun_event_partitions_ensure(interval '1 hour', 1000)"));
    ck_assert_int_eq(th_sql_int(g_pg,
                                "SELECT count(*) FROM opsrun_event_partitions() p WHERE NOT EXISTS "
                                "(SELECT 1 FROM pg_inherits i JOIN pg_class c ON c.oid = "
                                "i.inhrelid WHERE i.inhparent = 'run_logs'::regclass AND "
                                "c.relname = opsrun_log_partition_name(p.name))"),
                     0);
    /* every partition compresses lines as the parent does (lz4 here) */
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM pg_inherits i JOIN pg_attribute a ON "
                                      "a.attrelid = i.inhrelid AND a.attname = 'lines' WHERE "
                                      "i.inhparent = 'run_logs'::regclass AND a.attcompression <> "
                                      "(SELECT attcompression FROM pg_attribute WHERE attrelid = "
                                      "'run_logs'::regclass AND attname = 'lines')"),
                     0);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM pg_attribute WHERE attrelid = "
                                      "'run_logs'::regclass AND attname = 'lines' AND "
                                      "attcompression = 'l'"),
                     1);
    close_test_db();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("logs");
    TCase *tc = tcase_create("logs");

    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, chunks_pages_attempts);
    tcase_add_test(tc, not_found_and_refused);
    tcase_add_test(tc, old_run_of_same_id_hidden);
    tcase_add_test(tc, racing_writers_read_in_order);
    tcase_add_test(tc, partitions_twinned);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
