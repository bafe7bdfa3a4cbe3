/* tests/e2e/test_partitions.c — run_events partitioned by the runs'
 * creation time (migration 013), through the real binary: a database that
 * has every migration before 013 and events is migrated by `serve`, keeping
 * the ids, the sequence and the Last-Event-ID resume of both streams across
 * the migration; every writer names its run's creation time; and retention
 * drops a span partition whose runs are all gone while one that still holds
 * a run stays; a drop that gave way to a reader of run_events is tried
 * again seconds later, not a pass (a minute) later.
 *
 * The older migrations are applied the way store/migrations.c applies them,
 * from the array embedded in this build. */
#include "../support/harness.h"
#include "../support/sse.h"

#include "store/migrations.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIGRATION 13

/* ---- helpers ---------------------------------------------------------- */

/* Database name, created empty, with every embedded migration below 13
 * applied and recorded as store_migrate would; its conninfo (heap). */
static char *db_before_013(const char *name)
{
    char *admin = th_conninfo("postgres"), *ci = th_conninfo(name);
    PGconn *a = th_pg(admin), *c;

    PQclear(th_sql(a, "DROP DATABASE IF EXISTS %s WITH (FORCE)", name));
    PQclear(th_sql(a, "CREATE DATABASE %s TEMPLATE template0", name));
    PQfinish(a);
    c = th_pg(ci);
    PQclear(th_sql(c, "CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text "
                      "NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"));
    for (size_t i = 0; i < migrations_count; i++) {
        PGresult *r;
        if (migrations[i].version >= MIGRATION)
            continue;
        r = PQexec(c, migrations[i].sql);
        ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK,
                      "migration %s: %s", migrations[i].name, PQerrorMessage(c));
        PQclear(r);
        PQclear(th_sql(c, "INSERT INTO schema_migrations (version, name) VALUES (%d, '%s')",
                       migrations[i].version, migrations[i].name));
    }
    PQfinish(c);
    free(admin);
    return ci;
}

/* "id,id,..." of run_events, all or of one run, in id order. */
static char *event_ids(PGconn *c, const char *run_id)
{
    PGresult *r = run_id
                      ? th_sql(c,
                               "SELECT string_agg(id::text, ',' ORDER BY id) FROM run_events "
                               "WHERE run_id = '%s'",
                               run_id)
                      : th_sql(c, "SELECT string_agg(id::text, ',' ORDER BY id) FROM run_events");
    char *s = strdup(PQgetvalue(r, 0, 0));

    PQclear(r);
    return s;
}

/* Reads events of s until one with an id past upto, or 5 s of nothing;
 * appends their ids ("id,") to out. */
static void read_ids(struct th_sse *s, long long upto, char *out, size_t cap)
{
    struct th_sse_event ev;

    while (th_sse_next(s, &ev, 5000) == 1) {
        size_t len = strlen(out);
        bool done;
        ck_assert_msg(ev.has_id && !th_streq(ev.event, "snapshot") && !th_streq(ev.event, "reset"),
                      "unexpected %s event", ev.event);
        snprintf(out + len, cap - len, "%lld,", ev.id);
        done = ev.id >= upto;
        th_sse_event_free(&ev);
        if (done)
            return;
    }
}

/* ---- the migration ---------------------------------------------------- */

/* Events written before 013 keep their ids and land in run_events_pmin,
 * named with their run's creation time; new ids continue the sequence; a
 * stream resumed from an id written before the migration gets every event
 * after it (of its run, and of every run), nothing twice, nothing missing.
 * Then every writer of the new binary names the run's creation time. */
START_TEST(migrate_keeps_ids_and_resume)
{
    char *ci = db_before_013("e2e_parts_migrate"), *before, *after, *id;
    char lid[32], got[512] = "", want[512];
    PGconn *c = th_pg(ci);
    struct th_proc p;
    struct th_sse *one, *all;
    struct th_resp r;
    long long first, last;

    /* Two runs, as the previous binary left them: one completed with three
     * events, one delayed with its submission. */
    PQclear(th_sql(c, "INSERT INTO runs (tenant, id, type, status, outcome, max_attempts, "
                      "timeout_s, input, identity_hash, request_hash, created_at, completed_at, "
                      "progress) VALUES ('default', 'old-done', 'demo', 'completed', "
                      "'succeeded', 3, 60, '{}', 'i1', 'r1', now() - interval '1 hour', now() - "
                      "interval '59 minutes', 100), ('default', 'old-later', 'demo', 'queued', "
                      "'pending', 3, 60, '{}', 'i2', 'r2', now() - interval '30 minutes', NULL, "
                      "0)"));
    PQclear(th_sql(c, "UPDATE runs SET run_at = now() + interval '1 day' WHERE id = 'old-later'"));
    PQclear(th_sql(c, "INSERT INTO run_events (tenant, run_id, type, status, outcome, progress) "
                      "VALUES ('default', 'old-done', 'status', 'queued', 'pending', 0), "
                      "('default', 'old-later', 'status', 'queued', 'pending', 0), "
                      "('default', 'old-done', 'status', 'running', 'pending', 0), "
                      "('default', 'old-done', 'status', 'completed', 'succeeded', 100)"));
    before = event_ids(c, NULL);
    first = th_sql_int(c, "SELECT min(id) FROM run_events");
    last = th_sql_int(c, "SELECT max(id) FROM run_events");

    th_start(&p, ci, NULL, NULL);
    ck_assert_int_eq(
        th_sql_int(c, "SELECT count(*) FROM schema_migrations WHERE version = %d", MIGRATION), 1);
    after = event_ids(c, NULL);
    ck_assert_str_eq(after, before);
    free(after);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM run_events_pmin e JOIN runs r ON "
                                   "r.tenant = e.tenant AND r.id = e.run_id AND "
                                   "e.run_created_at = r.created_at"),
                     4);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM pg_constraint WHERE conrelid = "
                                   "'run_events'::regclass AND contype = 'f'"),
                     0);
    th_get(p.url, "/runs/old-done/events", &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_int_eq(json_array_size(json_object_get(r.json, "events")), 3);
    ck_assert_int_eq(th_ji(json_array_get(json_object_get(r.json, "events"), 0), "id"), first);
    th_resp_free(&r);

    /* Resumed from the first event: its run's stream sends the other two
     * and ends; GET /stream sends everything after it, then live events. */
    snprintf(lid, sizeof(lid), "%lld", first);
    one = th_sse_open(p.port, "/runs/old-done/stream", lid, 0);
    ck_assert_int_eq(one->status, 200);
    read_ids(one, last, got, sizeof(got));
    snprintf(want, sizeof(want), "%lld,%lld,", first + 2, first + 3);
    ck_assert_str_eq(got, want);
    th_sse_close(one);
    all = th_sse_open(p.port, "/stream", lid, 0);
    ck_assert_int_eq(all->status, 200);
    got[0] = '\0';
    read_ids(all, last, got, sizeof(got));
    snprintf(want, sizeof(want), "%lld,%lld,%lld,", first + 1, first + 2, first + 3);
    ck_assert_str_eq(got, want);

    /* The next id follows the last one before the migration, live. */
    id = th_submit(&p,
                   "{\"alert_type\": \"demo\", \"run_id\": \"new-1\", \"data\": "
                   "{\"duration_ms\": 50, \"steps\": 2}}",
                   202);
    got[0] = '\0';
    read_ids(all, last + 1, got, sizeof(got));
    snprintf(want, sizeof(want), "%lld,", last + 1);
    ck_assert_str_eq(got, want);
    th_sse_close(all);
    th_expect_outcome(&p, id, "succeeded", 10);
    free(id);

    /* Every other writer: a retry after a transient failure, a permanent
     * failure retried through the API, a cancel of the delayed run created
     * before the migration, and an array. */
    id = th_submit(&p,
                   "{\"alert_type\": \"demo\", \"run_id\": \"new-2\", \"data\": "
                   "{\"duration_ms\": 20, \"fail\": \"first:1\"}}",
                   202);
    th_expect_outcome(&p, id, "succeeded", 10);
    free(id);
    id = th_submit(&p,
                   "{\"alert_type\": \"demo\", \"run_id\": \"new-3\", \"data\": "
                   "{\"duration_ms\": 20, \"fail\": \"permanent\"}}",
                   202);
    th_expect_outcome(&p, id, "failed", 10);
    th_post_json(p.url, "/runs/new-3/retry", "{}", &r);
    ck_assert_int_eq(r.status, 202);
    th_resp_free(&r);
    free(id);
    th_post_json(p.url, "/runs/old-later/cancel", "{}", &r);
    ck_assert_int_eq(r.status, 200);
    th_resp_free(&r);
    th_post_json(p.url, "/alerts",
                 "[{\"alert_type\": \"demo\", \"data\": {\"duration_ms\": 10, \"n\": 1}}, "
                 "{\"alert_type\": \"demo\", \"data\": {\"duration_ms\": 10, \"n\": 2}}]",
                 &r);
    ck_assert_int_eq(r.status, 200);
    th_resp_free(&r);
    th_wait_all_completed(c, 10000);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM run_events e JOIN runs r ON r.tenant = "
                                   "e.tenant AND r.id = e.run_id WHERE e.run_created_at <> "
                                   "r.created_at"),
                     0);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM run_events_unknown"), 0);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM run_events_default"), 0);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM run_events_pmin WHERE run_id = "
                                   "'old-later' AND status = 'completed'"),
                     1);
    ck_assert_int_ge(th_sql_int(c, "SELECT count(*) FROM run_events WHERE tableoid::regclass::text "
                                   "LIKE 'run_events_p2%%'"),
                     4 * 3);
    th_stop_clean(&p);
    PQfinish(c);
    free(before);
    free(ci);
}
END_TEST

/* ---- retention -------------------------------------------------------- */

/* Spans A and B ended hours ago, A holding only expired runs, B an expired
 * one and a delayed one. The first retention pass creates the 60 s spans
 * ahead and deletes the expired runs, but its drop of A gives way to a
 * reader of run_events; a pass seconds after the reader is done drops A
 * (logged, counted); B stays, and the delayed run's events are still
 * served. */
START_TEST(retention_drops_spans)
{
    char *ci = th_db_create("e2e_parts_retention");
    char *cfg = th_config_file("e2e_parts_retention",
                               "{\"queue\": {\"retention_s\": 60, \"event_partition_s\": 60}}");
    const char *args[] = {"--config", cfg, NULL};
    PGconn *c = th_pg(ci), *hold;
    PGresult *names;
    char a[64], b[64], line[512] = "", needle[128];
    struct th_proc p;
    struct th_resp r;
    long long until;

    names = th_sql(c, "SELECT name, opsrun_log_partition_name(name) FROM "
                      "opsrun_event_partitions()");
    for (int i = 0; i < PQntuples(names); i++)
        PQclear(th_sql(c, "DROP TABLE %s, %s", PQgetvalue(names, i, 0), PQgetvalue(names, i, 1)));
    PQclear(names);
    names = th_sql(c, "SELECT opsrun_event_partition_create(date_trunc('minute', now()) - "
                      "interval '4 hours', date_trunc('minute', now()) - interval '3 hours'), "
                      "opsrun_event_partition_create(date_trunc('minute', now()) - "
                      "interval '3 hours', date_trunc('minute', now()) - interval '2 hours')");
    snprintf(a, sizeof(a), "%s", PQgetvalue(names, 0, 0));
    snprintf(b, sizeof(b), "%s", PQgetvalue(names, 0, 1));
    PQclear(names);
    PQclear(th_sql(c, "INSERT INTO runs (tenant, id, type, status, outcome, max_attempts, "
                      "timeout_s, input, identity_hash, request_hash, created_at, completed_at) "
                      "SELECT 'default', 'a-' || g, 'demo', 'completed', 'succeeded', 1, 60, "
                      "'{}', 'ia' || g, 'r', date_trunc('minute', now()) - interval '210 minutes', "
                      "now() - interval '200 minutes' FROM generate_series(1, 20) g"));
    PQclear(th_sql(c, "INSERT INTO runs (tenant, id, type, status, outcome, max_attempts, "
                      "timeout_s, input, identity_hash, request_hash, created_at, completed_at, "
                      "run_at) VALUES ('default', 'b-done', 'demo', 'completed', 'succeeded', 1, "
                      "60, '{}', 'ib1', 'r', date_trunc('minute', now()) - interval '150 minutes', "
                      "now() - interval '140 minutes', now()), ('default', 'b-later', 'demo', "
                      "'queued', 'pending', 1, 60, '{}', 'ib2', 'r', date_trunc('minute', now()) "
                      "- interval '150 minutes', NULL, now() + interval '1 day')"));
    PQclear(th_sql(c, "INSERT INTO run_events (tenant, run_id, type, status, outcome, progress, "
                      "run_created_at) SELECT tenant, id, 'status', status, outcome, 0, "
                      "created_at FROM runs"));
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM %s", a), 20);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM %s", b), 2);

    /* A reader of run_events itself (ONLY: not of its partitions, so that
     * the creation of spans, which locks run_events_default, goes on) in
     * the drop's way: the first pass's drop gives way to it, and the next
     * comes seconds after the reader is done, not a pass (a minute)
     * later. */
    hold = th_pg(ci);
    PQclear(th_sql(hold, "BEGIN"));
    PQclear(th_sql(hold, "LOCK TABLE ONLY run_events IN ACCESS SHARE MODE"));
    th_start(&p, ci, args, NULL);
    for (until = th_now_ms() + 30000;
         !th_log_find(p.log, "could not drop partitions now", line, sizeof(line)) &&
         th_now_ms() < until;)
        th_sleep_ms(50);
    ck_assert_msg(strstr(line, "could not drop partitions now") &&
                      strstr(line, "trying again within 2 s"),
                  "the drop did not give way: %s", line);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM pg_class WHERE relname = '%s'", a), 1);
    /* only the drop gave way: the spans ahead were created */
    ck_assert_msg(!th_log_find(p.log, "could not create partitions now", line, sizeof(line)) &&
                      !th_log_find(p.log, "partitions ahead not created", line, sizeof(line)),
                  "the creation gave way too: %s", line);
    ck_assert_int_eq(th_sql_int(c, "SELECT (max(hi) >= now() + interval '10 minutes')::int FROM "
                                   "opsrun_event_partitions()"),
                     1);
    PQclear(th_sql(hold, "COMMIT"));
    PQfinish(hold);
    /* Tries 2, 4, 8, 16 s apart: it may give way to opsrun's own readers a
     * few more times on a loaded machine, and still be within 45 s, where
     * a next pass came 48 to 72 s later before. */
    until = th_now_ms() + 45000;
    while (th_sql_int(c, "SELECT count(*) FROM pg_class WHERE relname = '%s'", a) > 0 &&
           th_now_ms() < until)
        th_sleep_ms(100);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM pg_class WHERE relname = '%s'", a), 0);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM pg_class WHERE relname = '%s'", b), 1);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM runs WHERE id LIKE 'a-%%' OR id = "
                                   "'b-done'"),
                     0);
    /* the line is written after the drop commits: it may come a moment
     * after the table is gone */
    snprintf(needle, sizeof(needle), "retention dropped partition=%s", a);
    for (until = th_now_ms() + 5000;
         !th_log_find(p.log, needle, line, sizeof(line)) && th_now_ms() < until;)
        th_sleep_ms(50);
    ck_assert_msg(th_log_find(p.log, needle, line, sizeof(line)), "no \"%s\" in %s", needle, p.log);
    /* 60 s spans ahead: at least ten minutes. */
    ck_assert_int_eq(th_sql_int(c, "SELECT (max(hi) >= now() + interval '10 minutes')::int FROM "
                                   "opsrun_event_partitions()"),
                     1);
    ck_assert_int_ge(th_sql_int(c, "SELECT count(*) FROM opsrun_event_partitions() WHERE hi - lo "
                                   "= interval '60 seconds'"),
                     10);
    th_get(p.url, "/runs/b-later/events", &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_int_eq(json_array_size(json_object_get(r.json, "events")), 1);
    th_resp_free(&r);
    th_get(p.url, "/runs/b-done/events", &r);
    ck_assert_int_eq(r.status, 404);
    th_resp_free(&r);
    th_get(p.url, "/metrics", &r);
    ck_assert_msg(r.body && strstr(r.body, "\nopsrun_event_partitions_dropped_total "),
                  "no partition counter in /metrics");
    ck_assert_msg(!strstr(r.body, "\nopsrun_event_partitions_dropped_total 0\n"),
                  "the drop was not counted");
    th_resp_free(&r);
    th_stop_clean(&p);
    PQfinish(c);
    free(cfg);
    free(ci);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("e2e_partitions");
    TCase *tc = tcase_create("partitions");

    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, migrate_keeps_ids_and_resume);
    tcase_add_test(tc, retention_drops_spans);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
