/* tests/integration/test_schedules.c — the schedules table and the slot
 * transaction (store/schedules.h, migration 015) against a real
 * PostgreSQL: rows made once and kept, a slot taken once however often and
 * by however many connections it is tried, the pause of the database
 * winning over the file's, both overlap policies, several slots in one
 * batch, a schedule held elsewhere skipped, missed slots dropped, triggers,
 * and the runs list's schedule filter.
 *
 * Each test gets a fresh database cloned from the migrated template.
 *
 * System headers come before the opsrun headers, ahead of common.h's poison
 * pragma. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <libpq-fe.h>

#include "common/ids.h"
#include "common/time_rfc3339.h"
#include "store/db.h"
#include "store/runs.h"
#include "store/schedules.h"
#include "tests/support/fixture.h"
#include "tests/support/harness.h"

#define SLOT0 1795000000000000LL /* 2026-11-18T08:26:40Z, in microseconds */

static const char *const one_name[] = {"nightly"};
static const char *const one_tenant[] = {"acme"};

/* The slot's run as the scheduler builds it: the id and the identity are
 * the slot's. */
struct slot_run {
    char id[96], slot[40], identity[65];
    struct run_new rn;
    json_t *input;
};

static void slot_run_init(struct slot_run *s, const char *name, int64_t slot_us)
{
    time_format_rfc3339(slot_us, s->slot, sizeof(s->slot));
    snprintf(s->id, sizeof(s->id), "%s-%lld", name, (long long)(slot_us / 1000000));
    identity_hash("acme", "demo", "run_id", s->id, s->identity);
    s->input = json_pack("{s:i}", "duration_ms", 10);
    s->rn = (struct run_new){.tenant = "acme",
                             .id = s->id,
                             .type = "demo",
                             .initiator = "schedule:nightly",
                             .max_attempts = 1,
                             .timeout_s = 60,
                             .input = s->input,
                             .identity_hash = s->identity,
                             .request_hash = s->identity,
                             .schedule_name = name,
                             .schedule_slot = s->slot};
}

/* Takes slots[0..n) of "nightly" (overlap and pause as given) in one
 * batch on db; results into res[]. */
static void take_slots(struct db *db, const int64_t *slots, size_t n, bool paused, bool skip,
                       bool cancel, struct schedule_result *res)
{
    struct slot_run s[8];
    struct schedule_take t[8];
    struct error err = {0}; /* not g_err: racing threads call this */
    enum status st;

    ck_assert_uint_le(n, 8);
    for (size_t i = 0; i < n; i++) {
        slot_run_init(&s[i], "nightly", slots[i]);
        t[i] = (struct schedule_take){.name = "nightly",
                                      .tenant = "acme",
                                      .slot_us = slots[i],
                                      .paused = paused,
                                      .skip_if_active = skip,
                                      .cancel_active = cancel,
                                      .run = &s[i].rn};
    }
    st = store_schedules_take(db, t, n, res, &err);
    ck_assert_msg(st == ST_OK, "store_schedules_take: %s", err.message);
    for (size_t i = 0; i < n; i++) {
        ck_assert((res[i].taken == SCHEDULE_CREATED) == (res[i].run != NULL));
        if (res[i].run)
            ck_assert_str_eq(res[i].run->id, s[i].id);
        json_decref(s[i].input);
    }
}

/* One slot; returns its result, with *cancelled the runs it cancelled. */
static enum schedule_taken take_slot(struct db *db, int64_t slot_us, bool paused, bool skip,
                                     bool cancel, int *cancelled)
{
    struct schedule_result r;

    take_slots(db, &slot_us, 1, paused, skip, cancel, &r);
    if (cancelled)
        *cancelled = r.cancelled;
    schedule_result_cleanup(&r, 1);
    return r.taken;
}

static int64_t last_slot(void)
{
    return th_sql_int(g_pg, "SELECT (extract(epoch FROM last_slot) * 1000000)::bigint "
                            "FROM schedules WHERE name = 'nightly'");
}

/* Sync, then pretend the schedule was first seen just before SLOT0. */
static void open_with_schedule(const char *db)
{
    open_test_db(db);
    OK(store_schedules_sync(g_db, one_name, one_tenant, 1, &g_err));
    PQclear(th_sql(g_pg,
                   "UPDATE schedules SET last_slot = timestamptz 'epoch' + %lld * "
                   "interval '1 microsecond'",
                   SLOT0 - 1000000));
}

static long long runs_of_schedule(void)
{
    return th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE schedule_name = 'nightly'");
}

START_TEST(sync_keeps_rows)
{
    struct schedule_state st[2];
    const char *names[] = {"nightly", "unknown"};
    const char *tenants2[] = {"other"};
    int64_t now = 0, first;

    open_test_db("it_sched_sync");
    OK(store_schedules_sync(g_db, one_name, one_tenant, 1, &g_err));
    OK(store_schedules_read(g_db, names, 2, st, &now, &g_err));
    first = st[0].last_slot_us;
    ck_assert_str_eq(st[0].name, "nightly");
    ck_assert(first > 0 && first <= now);
    ck_assert(!st[0].has_paused);
    ck_assert_ptr_null(st[0].last_run_id);
    ck_assert_str_eq(st[1].name, "unknown");
    ck_assert_int_eq(st[1].last_slot_us, 0);
    schedule_state_cleanup(st, 2);
    /* Again (a second replica, a restart): the row and its slot stay; a
     * tenant changed in the file is taken. */
    th_sleep_ms(5);
    OK(store_schedules_sync(g_db, one_name, tenants2, 1, &g_err));
    ck_assert_int_eq(last_slot(), first);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM schedules WHERE tenant = 'other'"), 1);
    close_test_db();
}
END_TEST

START_TEST(slot_taken_once)
{
    open_with_schedule("it_sched_once");
    ck_assert_int_eq(take_slot(g_db, SLOT0, false, true, false, NULL), SCHEDULE_CREATED);
    ck_assert_int_eq(last_slot(), SLOT0);
    /* The run as the API shows it: its schedule, slot and initiator. */
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs r WHERE "
                                      "opsrun_run_json(r)->'schedule'->>'name' = 'nightly' AND "
                                      "(opsrun_run_json(r)->'schedule'->>'slot')::timestamptz = "
                                      "schedule_slot AND initiator = 'schedule:nightly'"),
                     1);
    ck_assert_int_eq(take_slot(g_db, SLOT0, false, true, false, NULL), SCHEDULE_ALREADY);
    ck_assert_int_eq(take_slot(g_db, SLOT0 - 500000, false, true, false, NULL), SCHEDULE_ALREADY);
    ck_assert_int_eq(runs_of_schedule(), 1);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM schedules WHERE last_run_id = "
                                      "'nightly-1795000000'"),
                     1);
    /* The run's submitted event is there, as for any submission. */
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM run_events WHERE run_id = "
                                      "'nightly-1795000000' AND message = 'submitted'"),
                     1);
    close_test_db();
}
END_TEST

START_TEST(pause_of_database_wins)
{
    open_with_schedule("it_sched_pause");
    /* The file pauses it: the slot is skipped, and taken. */
    ck_assert_int_eq(take_slot(g_db, SLOT0, true, false, false, NULL), SCHEDULE_SKIPPED_PAUSED);
    ck_assert_int_eq(last_slot(), SLOT0);
    /* Resumed through the API: the file's pause no longer counts. */
    OK(store_schedules_set_paused(g_db, "nightly", "acme", false, "ops", &g_err));
    ck_assert_int_eq(take_slot(g_db, SLOT0 + 1000000, true, false, false, NULL), SCHEDULE_CREATED);
    /* Paused through the API: wins over a file that does not pause. */
    OK(store_schedules_set_paused(g_db, "nightly", "acme", true, "ops", &g_err));
    ck_assert_int_eq(take_slot(g_db, SLOT0 + 2000000, false, false, false, NULL),
                     SCHEDULE_SKIPPED_PAUSED);
    ck_assert_int_eq(runs_of_schedule(), 1);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM schedules WHERE paused AND "
                                      "paused_by = 'ops' AND paused_at IS NOT NULL"),
                     1);
    /* A pause for a schedule no replica has synced yet makes its row. */
    OK(store_schedules_set_paused(g_db, "fresh", "acme", true, "ops", &g_err));
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM schedules WHERE name = 'fresh' AND "
                                      "paused AND last_slot <= now()"),
                     1);
    close_test_db();
}
END_TEST

START_TEST(overlap_skip_and_cancel)
{
    int cancelled = -1;

    open_with_schedule("it_sched_overlap");
    ck_assert_int_eq(take_slot(g_db, SLOT0, false, true, false, NULL), SCHEDULE_CREATED);
    /* skip: the first slot's run is still queued. */
    ck_assert_int_eq(take_slot(g_db, SLOT0 + 1000000, false, true, false, NULL),
                     SCHEDULE_SKIPPED_OVERLAP);
    ck_assert_int_eq(last_slot(), SLOT0 + 1000000);
    /* allow: neither skips nor cancels. */
    ck_assert_int_eq(take_slot(g_db, SLOT0 + 2000000, false, false, false, NULL), SCHEDULE_CREATED);
    ck_assert_int_eq(runs_of_schedule(), 2);
    /* cancel_previous: both active runs end cancelled, then the new one. */
    ck_assert_int_eq(take_slot(g_db, SLOT0 + 3000000, false, false, true, &cancelled),
                     SCHEDULE_CREATED);
    ck_assert_int_eq(cancelled, 2);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE schedule_name = "
                                      "'nightly' AND outcome = 'cancelled'"),
                     2);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE schedule_name = "
                                      "'nightly' AND status = 'queued'"),
                     1);
    /* Once the active run completes, skip creates again. */
    PQclear(th_sql(g_pg, "UPDATE runs SET status = 'completed', outcome = 'succeeded' "
                         "WHERE schedule_name = 'nightly' AND status = 'queued'"));
    ck_assert_int_eq(take_slot(g_db, SLOT0 + 4000000, false, true, false, NULL), SCHEDULE_CREATED);
    /* A running run is asked to cancel (cancelling) and counts. */
    PQclear(th_sql(g_pg, "UPDATE runs SET status = 'running', worker_id = 'w', attempt = 1 "
                         "WHERE schedule_name = 'nightly' AND status = 'queued'"));
    ck_assert_int_eq(take_slot(g_db, SLOT0 + 5000000, false, false, true, &cancelled),
                     SCHEDULE_CREATED);
    ck_assert_int_eq(cancelled, 1);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE status = 'cancelling'"), 1);
    close_test_db();
}
END_TEST

START_TEST(missed_slots_dropped)
{
    bool moved = false;

    open_with_schedule("it_sched_drop");
    OK(store_schedules_drop(g_db, "nightly", SLOT0 + 5000000, &moved, &g_err));
    ck_assert(moved);
    ck_assert_int_eq(last_slot(), SLOT0 + 5000000);
    OK(store_schedules_drop(g_db, "nightly", SLOT0 + 5000000, &moved, &g_err));
    ck_assert(!moved);
    OK(store_schedules_drop(g_db, "nightly", SLOT0, &moved, &g_err));
    ck_assert(!moved);
    ck_assert_int_eq(last_slot(), SLOT0 + 5000000);
    ck_assert_int_eq(take_slot(g_db, SLOT0 + 4000000, false, true, false, NULL), SCHEDULE_ALREADY);
    ck_assert_int_eq(runs_of_schedule(), 0);
    close_test_db();
}
END_TEST

START_TEST(trigger_and_read)
{
    struct schedule_state st;
    struct slot_run s;
    struct run *run = NULL;
    int64_t now;
    const char *names[] = {"nightly"};

    open_with_schedule("it_sched_trigger");
    slot_run_init(&s, "nightly", SLOT0);
    snprintf(s.id, sizeof(s.id), "01TRIGGERED");
    s.rn.schedule_slot = NULL;
    s.rn.initiator = "ops";
    OK(store_schedules_trigger(g_db, "nightly", &s.rn, &run, &g_err));
    ck_assert_str_eq(run->id, "01TRIGGERED");
    ck_assert(json_is_null(json_object_get(json_object_get(run->json, "schedule"), "slot")));
    run_free(run);
    json_decref(s.input);
    /* The slot is untouched; the last run is the triggered one. */
    ck_assert_int_eq(last_slot(), SLOT0 - 1000000);
    OK(store_schedules_read(g_db, names, 1, &st, &now, &g_err));
    ck_assert_str_eq(st.last_run_id, "01TRIGGERED");
    ck_assert_str_eq(st.last_status, "queued");
    ck_assert_str_eq(st.last_outcome, "pending");
    schedule_state_cleanup(&st, 1);
    /* A run not made by a schedule has "schedule": null. */
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs r WHERE "
                                      "opsrun_run_json(r)->'schedule' IS NOT NULL"),
                     1);
    close_test_db();
}
END_TEST

/* Several slots of one schedule in one batch act on one another, as one
 * after another would; a schedule another transaction holds is skipped. */
START_TEST(batch_of_slots)
{
    const int64_t three[] = {SLOT0, SLOT0 + 1000000, SLOT0 + 2000000};
    struct schedule_result r[3];
    PGconn *x;

    open_with_schedule("it_sched_batch");
    /* skip: the first slot's run, not yet committed, skips the others. */
    take_slots(g_db, three, 3, false, true, false, r);
    ck_assert_int_eq(r[0].taken, SCHEDULE_CREATED);
    ck_assert_int_eq(r[1].taken, SCHEDULE_SKIPPED_OVERLAP);
    ck_assert_int_eq(r[2].taken, SCHEDULE_SKIPPED_OVERLAP);
    schedule_result_cleanup(r, 3);
    ck_assert_int_eq(last_slot(), SLOT0 + 2000000);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM schedules WHERE last_run_id = "
                                      "'nightly-1795000000'"),
                     1);
    /* allow: a run each; the last run is the newest slot's. */
    {
        const int64_t next[] = {SLOT0 + 3000000, SLOT0 + 4000000};
        take_slots(g_db, next, 2, false, false, false, r);
        ck_assert_int_eq(r[0].taken, SCHEDULE_CREATED);
        ck_assert_int_eq(r[1].taken, SCHEDULE_CREATED);
        schedule_result_cleanup(r, 2);
    }
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM schedules WHERE last_run_id = "
                                      "'nightly-1795000004'"),
                     1);
    /* cancel_previous: the runs before are cancelled; a second slot of the
     * schedule in the same batch waits for the next one. */
    {
        const int64_t next[] = {SLOT0 + 5000000, SLOT0 + 6000000};
        take_slots(g_db, next, 2, false, false, true, r);
        ck_assert_int_eq(r[0].taken, SCHEDULE_CREATED);
        ck_assert_int_eq(r[0].cancelled, 3);
        ck_assert_int_eq(r[1].taken, SCHEDULE_BUSY);
        schedule_result_cleanup(r, 2);
    }
    ck_assert_int_eq(last_slot(), SLOT0 + 5000000);
    /* Another transaction holds the row: skipped, not waited for. */
    x = th_pg(g_ci);
    PQclear(th_sql(x, "BEGIN"));
    PQclear(th_sql(x, "SELECT * FROM schedules FOR UPDATE"));
    ck_assert_int_eq(take_slot(g_db, SLOT0 + 6000000, false, false, false, NULL), SCHEDULE_BUSY);
    PQclear(th_sql(x, "ROLLBACK"));
    PQfinish(x);
    ck_assert_int_eq(take_slot(g_db, SLOT0 + 6000000, false, false, true, NULL), SCHEDULE_CREATED);
    close_test_db();
}
END_TEST

START_TEST(list_by_schedule)
{
    struct run_filter f = {.limit = 10, .schedule = "nightly"};
    json_t *runs = NULL;
    char *next = NULL;

    open_with_schedule("it_sched_list");
    ck_assert_int_eq(take_slot(g_db, SLOT0, false, false, false, NULL), SCHEDULE_CREATED);
    ck_assert_int_eq(take_slot(g_db, SLOT0 + 1000000, false, false, false, NULL), SCHEDULE_CREATED);
    PQclear(th_sql(g_pg, "INSERT INTO runs (tenant, id, type, max_attempts, timeout_s, input, "
                         "identity_hash, request_hash) VALUES ('acme', 'other', 'demo', 1, 60, "
                         "'{}', 'x', 'x')"));
    OK(store_runs_list(g_db, "acme", &f, &runs, &next, &g_err));
    ck_assert_int_eq(json_array_size(runs), 2);
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(runs, 0), "id")),
                     "nightly-1795000001");
    json_decref(runs);
    f.schedule = "elsewhere";
    OK(store_runs_list(g_db, "acme", &f, &runs, &next, &g_err));
    ck_assert_int_eq(json_array_size(runs), 0);
    json_decref(runs);
    f.schedule = "nightly";
    OK(store_runs_list(g_db, "other", &f, &runs, &next, &g_err));
    ck_assert_int_eq(json_array_size(runs), 0);
    json_decref(runs);
    close_test_db();
}
END_TEST

/* Eight connections race for each of 40 slots, all at once: each slot makes
 * exactly one run, and every other try finds it taken, or held by the one
 * taking it (SCHEDULE_BUSY). */
struct racer {
    pthread_barrier_t *start;
    int created, already;
};

static void *race(void *arg)
{
    struct racer *r = arg;
    struct db *db = connect_db(g_ci);

    for (int i = 0; i < 40; i++) {
        enum schedule_taken res;

        pthread_barrier_wait(r->start);
        res = take_slot(db, SLOT0 + (int64_t)i * 1000000, false, true, false, NULL);
        r->created += res == SCHEDULE_CREATED;
        r->already += res == SCHEDULE_ALREADY || res == SCHEDULE_BUSY;
        /* The run is finished before the next slot, so skip never applies. */
        pthread_barrier_wait(r->start);
        if (res == SCHEDULE_CREATED) {
            PGconn *c = th_pg(g_ci);

            PQclear(th_sql(c, "UPDATE runs SET status = 'completed', outcome = 'succeeded' "
                              "WHERE schedule_name = 'nightly'"));
            PQfinish(c);
        }
        pthread_barrier_wait(r->start);
    }
    db_close(db);
    return NULL;
}

START_TEST(racing_connections)
{
    pthread_barrier_t start;
    pthread_t th[8];
    struct racer r[8];
    int created = 0, already = 0;

    open_with_schedule("it_sched_race");
    pthread_barrier_init(&start, NULL, 8);
    for (int i = 0; i < 8; i++) {
        r[i] = (struct racer){.start = &start};
        ck_assert_int_eq(pthread_create(&th[i], NULL, race, &r[i]), 0);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        created += r[i].created;
        already += r[i].already;
    }
    pthread_barrier_destroy(&start);
    ck_assert_int_eq(created, 40);
    ck_assert_int_eq(already, 40 * 7);
    ck_assert_int_eq(runs_of_schedule(), 40);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(DISTINCT schedule_slot) FROM runs"), 40);
    close_test_db();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("schedules");
    TCase *tc = tcase_create("schedules");

    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, sync_keeps_rows);
    tcase_add_test(tc, slot_taken_once);
    tcase_add_test(tc, pause_of_database_wins);
    tcase_add_test(tc, overlap_skip_and_cancel);
    tcase_add_test(tc, missed_slots_dropped);
    tcase_add_test(tc, trigger_and_read);
    tcase_add_test(tc, batch_of_slots);
    tcase_add_test(tc, list_by_schedule);
    tcase_add_test(tc, racing_connections);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
