/* tests/unit/test_scheduler.c — the Check suite for the plan of a
 * scheduler pass (engine/scheduler.h): on-time slots fire, slots older
 * than the grace follow catch_up (skip drops them, one fires the latest,
 * all fires those within the window, oldest first), at most a pass's worth
 * fire at once, long outages are jumped or worked off in bounded passes,
 * the slot's run (id, jitter) and a trigger's.
 *
 * System headers come before the opsrun headers, ahead of common.h's poison
 * pragma. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cron.h"
#include "common/time_rfc3339.h"
#include "common/tz.h"
#include "engine/scheduler.h"

#define T0 1795000000 /* 2026-11-18T11:06:40Z, a multiple of 10 */
#define GRACE 10

static struct tz *utc;

static struct schedule sched(const char *expr, enum schedule_catch_up catch_up, int window_s)
{
    struct schedule s = {.name = "s", .catch_up = catch_up, .catch_up_window_s = window_s};
    struct error err = {0};

    if (!utc)
        ck_assert_int_eq(tz_load("UTC", &utc, &err), ST_OK);
    s.tz = utc;
    ck_assert_msg(cron_parse(expr, &s.cron, &err) == ST_OK, "%s", err.message);
    return s;
}

static void assert_fires(const struct schedule_plan *p, const int64_t *want, int n)
{
    ck_assert_int_eq(p->nfire, n);
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(p->fire[i], want[i]);
}

START_TEST(on_time_slot_fires)
{
    struct schedule s = sched("@every 10s", CATCH_UP_ONE, 3600);
    struct schedule_plan p;

    /* Nothing due yet: the next slot is when to wake. */
    schedule_plan(&s, GRACE, T0, T0 + 5, &p);
    ck_assert_int_eq(p.nfire, 0);
    ck_assert_int_eq(p.drop_upto, 0);
    ck_assert_int_eq(p.next, T0 + 10);
    /* Due: fires, and the next is after it. */
    schedule_plan(&s, GRACE, T0, T0 + 10, &p);
    assert_fires(&p, (int64_t[]){T0 + 10}, 1);
    ck_assert_int_eq(p.next, T0 + 20);
    /* A few seconds late (a replica was slow): still fires. */
    schedule_plan(&s, GRACE, T0, T0 + 19, &p);
    assert_fires(&p, (int64_t[]){T0 + 10}, 1);
    /* Two slots within the grace both fire, whatever catch_up says. */
    s = sched("@every 1s", CATCH_UP_SKIP, 3600);
    schedule_plan(&s, GRACE, T0, T0 + 3, &p);
    assert_fires(&p, (int64_t[]){T0 + 1, T0 + 2, T0 + 3}, 3);
    ck_assert_int_eq(p.missed, 0);
}
END_TEST

/* A grace of 3 s against slots 10 s apart: at T0+75 the slots T0+10 to
 * T0+70 are all missed, at T0+72 the last one is still on time. */
START_TEST(catch_up_skip)
{
    struct schedule s = sched("@every 10s", CATCH_UP_SKIP, 3600);
    struct schedule_plan p;

    schedule_plan(&s, 3, T0, T0 + 72, &p);
    ck_assert_int_eq(p.drop_upto, T0 + 60);
    ck_assert_int_eq(p.missed, 6);
    assert_fires(&p, (int64_t[]){T0 + 70}, 1);
    ck_assert_int_eq(p.next, T0 + 80);
    /* Nothing on time: all dropped, nothing fires. */
    schedule_plan(&s, 3, T0, T0 + 75, &p);
    ck_assert_int_eq(p.drop_upto, T0 + 70);
    ck_assert_int_eq(p.missed, 7);
    ck_assert_int_eq(p.nfire, 0);
    ck_assert_int_eq(p.next, T0 + 80);
}
END_TEST

START_TEST(catch_up_one)
{
    struct schedule s = sched("@every 10s", CATCH_UP_ONE, 3600);
    struct schedule_plan p;

    /* The latest missed slot fires; those before it are dropped. */
    schedule_plan(&s, 3, T0, T0 + 75, &p);
    ck_assert_int_eq(p.drop_upto, T0 + 60);
    ck_assert_int_eq(p.missed, 6);
    assert_fires(&p, (int64_t[]){T0 + 70}, 1);
    /* With an on-time slot too: the latest missed, then it. */
    schedule_plan(&s, 3, T0, T0 + 81, &p);
    ck_assert_int_eq(p.drop_upto, T0 + 60);
    assert_fires(&p, (int64_t[]){T0 + 70, T0 + 80}, 2);
    /* A daily job missed for three days: the latest day fires. */
    s = sched("30 2 * * *", CATCH_UP_ONE, 3600);
    schedule_plan(&s, GRACE, T0, T0 + 3 * 86400, &p);
    ck_assert_int_eq(p.missed, 2);
    ck_assert_int_eq(p.nfire, 1);
    ck_assert_int_eq(p.fire[0] % 86400, 2 * 3600 + 1800);
    ck_assert(p.fire[0] > p.drop_upto);
}
END_TEST

START_TEST(catch_up_all)
{
    struct schedule s = sched("@every 10s", CATCH_UP_ALL, 45);
    struct schedule_plan p;

    /* Window 45 s at T0+75: slots from T0+30 fire, oldest first. */
    schedule_plan(&s, 3, T0, T0 + 75, &p);
    ck_assert_int_eq(p.drop_upto, T0 + 20);
    ck_assert_int_eq(p.missed, 2);
    assert_fires(&p, (int64_t[]){T0 + 30, T0 + 40, T0 + 50, T0 + 60, T0 + 70}, 5);
    ck_assert_int_eq(p.next, T0 + 80);
    /* More than a pass takes: the rest next pass, which is due at once. */
    s = sched("@every 1s", CATCH_UP_ALL, 3600);
    schedule_plan(&s, GRACE, T0, T0 + 100, &p);
    ck_assert_int_eq(p.nfire, SCHEDULE_PLAN_FIRES);
    ck_assert_int_eq(p.fire[0], T0 + 1);
    ck_assert_int_eq(p.fire[SCHEDULE_PLAN_FIRES - 1], T0 + SCHEDULE_PLAN_FIRES);
    ck_assert_int_eq(p.next, T0 + 100);
}
END_TEST

/* A month without any replica, for a schedule due every second: jumped
 * at once for @every; walked in bounded passes for a calendar expression. */
START_TEST(long_outage)
{
    struct schedule s = sched("@every 1s", CATCH_UP_ONE, 3600);
    struct schedule_plan p;
    int64_t last = T0, now = T0 + 30 * 86400;
    int passes = 0;

    /* Jumped to the latest missed slot, which fires, then the eleven on
     * time (within the grace, its ends included). */
    schedule_plan(&s, GRACE, last, now, &p);
    ck_assert_int_eq(p.missed, now - GRACE - 2 - last);
    ck_assert_int_eq(p.drop_upto, now - GRACE - 2);
    ck_assert_int_eq(p.nfire, GRACE + 2);
    ck_assert_int_eq(p.fire[0], now - GRACE - 1);
    ck_assert_int_eq(p.fire[GRACE + 1], now);
    s = sched("* * * * * *", CATCH_UP_SKIP, 3600);
    do {
        schedule_plan(&s, GRACE, last, now, &p);
        ck_assert(p.drop_upto > last || p.nfire > 0);
        last = p.nfire ? p.fire[p.nfire - 1] : p.drop_upto;
        passes++;
    } while (p.next <= now && passes < 100);
    ck_assert_int_eq(last, now);
    ck_assert(passes > 1);
}
END_TEST

START_TEST(never_again)
{
    struct schedule s = sched("0 0 30 2 *", CATCH_UP_ONE, 3600);
    struct schedule_plan p;

    schedule_plan(&s, GRACE, T0, T0 + 100, &p);
    ck_assert_int_eq(p.nfire, 0);
    ck_assert_int_eq(p.next, INT64_MAX);
}
END_TEST

/* A slot's run: the slot's id, identity and initiator; with jitter_s, due
 * at a random delay in [0, jitter_s) after the slot, the slot itself kept. */
START_TEST(slot_runs)
{
    struct config cfg;
    struct schedule s = sched("@every 10s", CATCH_UP_ONE, 3600);
    struct schedule_run r;
    int64_t at, min = INT64_MAX, max = 0;

    cfg_init(&cfg, NULL);
    s.run_type = "demo";
    s.jitter_s = 5;
    for (int i = 0; i < 200; i++) {
        schedule_run_init(&cfg, &s, T0, NULL, NULL, &r);
        ck_assert(time_parse_rfc3339(r.rn.run_at, &at));
        if (at < min)
            min = at;
        if (at > max)
            max = at;
    }
    ck_assert_str_eq(r.id, "s-20261118T110640Z");
    ck_assert_str_eq(r.rn.schedule_slot, "2026-11-18T11:06:40.000000Z");
    ck_assert_str_eq(r.rn.initiator, "schedule:s");
    ck_assert_str_eq(r.rn.tenant, "default");
    ck_assert(min >= (int64_t)T0 * 1000000 && max < (int64_t)(T0 + 5) * 1000000);
    ck_assert_msg(max - min > 3000000, "200 draws spread over only %lld us",
                  (long long)(max - min));
    /* A trigger: its own id and initiator, due now, no slot. */
    schedule_run_init(&cfg, &s, -1, "01TRIGGER", "ops", &r);
    ck_assert_str_eq(r.rn.id, "01TRIGGER");
    ck_assert_str_eq(r.rn.initiator, "ops");
    ck_assert_ptr_null(r.rn.run_at);
    ck_assert_ptr_null(r.rn.schedule_slot);
    ck_assert_str_eq(r.rn.schedule_name, "s");
    cfg_cleanup(&cfg);
}
END_TEST

START_TEST(run_ids)
{
    char id[96];

    schedule_run_id("nightly-refresh", T0, id, sizeof(id));
    ck_assert_str_eq(id, "nightly-refresh-20261118T110640Z");
    schedule_run_id("x", 0, id, sizeof(id));
    ck_assert_str_eq(id, "x-19700101T000000Z");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("scheduler");
    TCase *t = tcase_create("plan");
    SRunner *r;
    int failed;

    tcase_add_test(t, on_time_slot_fires);
    tcase_add_test(t, catch_up_skip);
    tcase_add_test(t, catch_up_one);
    tcase_add_test(t, catch_up_all);
    tcase_add_test(t, long_outage);
    tcase_add_test(t, never_again);
    tcase_add_test(t, slot_runs);
    tcase_add_test(t, run_ids);
    suite_add_tcase(s, t);
    r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    failed = srunner_ntests_failed(r);
    srunner_free(r);
    tz_free(utc);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
