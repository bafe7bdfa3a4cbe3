/* tests/e2e/test_schedules.c — schedules over HTTP on real processes
 * (docs/schedules.md): one run per slot across three replicas while one is
 * killed and another started, each overlap and catch_up policy with a case
 * that fails when the policy is ignored, a pause through one replica that
 * holds on all, resume and trigger, the API's tenancy, scopes and errors,
 * the run member and list filter, the metrics, and the missed-slot log line
 * as docs/schedules.md shows it. Every case gets a fresh
 * database. Slot times are read from the database, whose clock the
 * scheduler follows. */
#include "../support/harness.h"
#include "../support/reload.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A replica on conninfo with the config file at path. */
static void start_with(struct th_proc *p, const char *conninfo, const char *path)
{
    const char *args[] = {"--config", path, NULL};

    th_start(p, conninfo, args, NULL);
}

static void sql_exec(const char *conninfo, const char *sql)
{
    PGconn *c = th_pg(conninfo);

    PQclear(th_sql(c, "%s", sql));
    PQfinish(c);
}

static long long sql_int(const char *conninfo, const char *sql)
{
    PGconn *c = th_pg(conninfo);
    long long v = th_sql_int(c, "%s", sql);

    PQfinish(c);
    return v;
}

/* The runs of a schedule whose slot is within the last `window` (an SQL
 * interval) of the database's clock. */
static long long slot_runs(const char *conninfo, const char *name, const char *extra)
{
    char sql[512];

    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM runs WHERE schedule_name = '%s' AND schedule_slot IS NOT NULL%s",
             name, extra ? extra : "");
    return sql_int(conninfo, sql);
}

#define EVERY_CONFIG(overlap, duration_ms)                                                         \
    "{\"queue\": {\"workers\": 8, \"orphan_after_s\": 4, "                                         \
    "\"heartbeat_interval_s\": 1},"                                                                \
    " \"schedules\": {\"every\": {\"cron\": \"@every 1s\", \"run_type\": \"demo\", "               \
    "\"overlap\": \"" overlap "\", \"data\": {\"duration_ms\": " #duration_ms ", \"steps\": 1}}}}"

/* Three replicas, a schedule due every second, for a minute: one killed
 * at 20 s, another started at 40 s. Every slot from the first to the last
 * has exactly one run, whichever replica made it. */
START_TEST(one_run_per_slot)
{
    char *ci = th_db_create("e2e_sched_replicas");
    char *path = th_config_file("e2e_sched_replicas", EVERY_CONFIG("allow", 10));
    struct th_proc p[4];
    long long first, last, n, distinct, gaps;

    for (int i = 0; i < 3; i++)
        start_with(&p[i], ci, path);
    th_sleep_ms(20000);
    th_stop(&p[1], SIGKILL, 10);
    th_sleep_ms(20000);
    start_with(&p[3], ci, path);
    th_sleep_ms(20000);
    th_stop_clean(&p[0]);
    th_stop_clean(&p[2]);
    th_stop_clean(&p[3]);

    first = sql_int(ci, "SELECT extract(epoch FROM min(schedule_slot))::bigint FROM runs");
    last = sql_int(ci, "SELECT extract(epoch FROM max(schedule_slot))::bigint FROM runs");
    n = sql_int(ci, "SELECT count(*) FROM runs");
    distinct = sql_int(ci, "SELECT count(DISTINCT schedule_slot) FROM runs");
    gaps = sql_int(ci, "SELECT count(*) FROM (SELECT schedule_slot - lag(schedule_slot) OVER "
                       "(ORDER BY schedule_slot) AS d FROM runs) x WHERE d <> interval '1 s'");
    ck_assert_msg(n >= 55, "only %lld runs in a minute", n);
    ck_assert_msg(n == distinct, "%lld runs for %lld slots", n, distinct);
    ck_assert_msg(n == last - first + 1, "%lld runs for the %lld slots from first to last", n,
                  last - first + 1);
    ck_assert_int_eq(gaps, 0);
    ck_assert_int_eq(sql_int(ci, "SELECT count(*) FROM runs WHERE initiator <> 'schedule:every' "
                                 "OR id <> 'every-' || to_char(schedule_slot AT TIME ZONE 'UTC', "
                                 "'YYYYMMDD\"T\"HH24MISS\"Z\"')"),
                     0);
    free(path);
    free(ci);
}
END_TEST

/* Runs of 2.5 s due every second. skip: never two at once; allow: several
 * at once; cancel_previous: each new run cancels the one before. */
static const char *overlap_case(struct th_proc *p, const char *db, const char *config)
{
    const char *ci = th_start_fresh(p, db, config);

    th_sleep_ms(7000);
    th_stop(p, SIGTERM, 30);
    return ci;
}

/* The most runs of the schedule that ran at one instant. */
static long long most_at_once(const char *conninfo)
{
    return sql_int(conninfo, "SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM runs a "
                             "JOIN runs b ON b.started_at <= a.started_at AND "
                             "coalesce(b.completed_at, 'infinity') > a.started_at "
                             "WHERE a.started_at IS NOT NULL GROUP BY a.id) x");
}

START_TEST(overlap_skip)
{
    struct th_proc p;
    const char *ci = overlap_case(&p, "e2e_sched_skip", EVERY_CONFIG("skip", 2500));

    ck_assert_int_eq(most_at_once(ci), 1);
    ck_assert_msg(slot_runs(ci, "every", NULL) >= 2, "the schedule made no runs");
    ck_assert_int_eq(sql_int(ci, "SELECT count(*) FROM runs WHERE outcome = 'cancelled' AND "
                                 "completed_at < now() - interval '1 s'"),
                     0);
}
END_TEST

START_TEST(overlap_allow)
{
    struct th_proc p;
    const char *ci = overlap_case(&p, "e2e_sched_allow", EVERY_CONFIG("allow", 2500));

    ck_assert_msg(most_at_once(ci) >= 2, "allow never ran two at once");
}
END_TEST

START_TEST(overlap_cancel_previous)
{
    struct th_proc p;
    const char *ci = overlap_case(&p, "e2e_sched_cancel", EVERY_CONFIG("cancel_previous", 2500));

    ck_assert_msg(sql_int(ci, "SELECT count(*) FROM runs WHERE outcome = 'cancelled'") >= 3,
                  "cancel_previous cancelled too few");
    /* Each run but the last was cancelled by the next slot's, not left to
     * finish: only the last, which the stop let finish, may succeed. */
    ck_assert_int_le(sql_int(ci, "SELECT count(*) FROM runs WHERE outcome = 'succeeded'"), 1);
}
END_TEST

/* Schedules due every hour, their last slot set five hours back while the
 * only replica was down: at start, skip makes nothing, one makes the
 * latest missed slot, all makes every missed slot, oldest first (with
 * overlap allow: with skip, the first slot's run still queued would skip
 * the others). */
START_TEST(catch_up_policies)
{
    struct th_proc p;
    const char *config =
        "{\"queue\": {\"schedule_grace_s\": 2},"
        " \"schedules\": {"
        "  \"cu-skip\": {\"cron\": \"@every 1h\", \"run_type\": \"demo\", \"catch_up\": \"skip\"},"
        "  \"cu-one\": {\"cron\": \"@every 1h\", \"run_type\": \"demo\", \"catch_up\": \"one\"},"
        "  \"cu-all\": {\"cron\": \"@every 1h\", \"run_type\": \"demo\", \"catch_up\": \"all\","
        "             \"catch_up_window_s\": 86400, \"overlap\": \"allow\"}}}";
    const char *ci = th_start_fresh(&p, "e2e_sched_catch_up", config);
    char *path = th_config_file("e2e_sched_catch_up", config);
    long long hours;
    struct th_resp r;

    th_stop_clean(&p);
    ck_assert_int_eq(sql_int(ci, "SELECT count(*) FROM schedules"), 3);
    /* Down since five hours ago (the rows as they were then). */
    sql_exec(ci, "UPDATE schedules SET last_slot = now() - interval '5 h', "
                 "created_at = now() - interval '5 h'");
    hours = sql_int(ci, "SELECT floor(extract(epoch FROM now()) / 3600)::bigint - "
                        "floor(extract(epoch FROM now() - interval '5 h') / 3600)::bigint");
    start_with(&p, ci, path);
    th_sleep_ms(3000);
    ck_assert_int_eq(slot_runs(ci, "cu-skip", NULL), 0);
    ck_assert_int_eq(slot_runs(ci, "cu-one", NULL), 1);
    ck_assert_int_eq(slot_runs(ci, "cu-one", " AND schedule_slot = date_trunc('hour', now())"), 1);
    ck_assert_int_eq(slot_runs(ci, "cu-all", NULL), hours);
    /* The missed slots are counted. */
    th_get(p.url, "/metrics", &r);
    ck_assert_ptr_nonnull(
        strstr(r.body, "opsrun_schedule_runs_total{schedule=\"cu-one\",result=\"created\"} 1"));
    ck_assert_ptr_nonnull(
        strstr(r.body, "opsrun_schedule_runs_total{schedule=\"cu-skip\",result=\"created\"} 0"));
    {
        char want[160];
        snprintf(want, sizeof(want),
                 "opsrun_schedule_runs_total{schedule=\"cu-skip\",result=\"missed\"} %lld", hours);
        ck_assert_msg(strstr(r.body, want), "no %s in /metrics", want);
        snprintf(want, sizeof(want),
                 "opsrun_schedule_runs_total{schedule=\"cu-one\",result=\"missed\"} %lld",
                 hours - 1);
        ck_assert_msg(strstr(r.body, want), "no %s in /metrics", want);
    }
    th_resp_free(&r);
    th_check_documented_line(p.log, "schedule slots missed schedule=cu-one", "docs/schedules.md",
                             "schedule slots missed");
    th_stop_clean(&p);
    free(path);
}
END_TEST

#define PAUSE_CONFIG                                                                               \
    "{\"schedules\": {\"tick\": {\"cron\": \"* * * * * *\", \"run_type\": \"demo\","               \
    " \"overlap\": \"allow\", \"data\": {\"duration_ms\": 1}}}}"

static void post_expect(const struct th_proc *p, const char *path, long want, struct th_resp *r)
{
    th_post_json(p->url, path, "", r);
    ck_assert_msg(r->status == want, "POST %s: HTTP %ld, want %ld; %s", path, r->status, want,
                  r->body);
}

/* Paused through one replica, no replica fires; resumed through the other,
 * they fire again; a trigger runs it now, paused or not. */
START_TEST(pause_resume_trigger)
{
    struct th_proc a, b;
    const char *ci = th_start_fresh(&a, "e2e_sched_pause", PAUSE_CONFIG);
    char *path = th_config_file("e2e_sched_pause", PAUSE_CONFIG), *tid;
    struct th_resp r;
    long long before, during;
    json_t *run;

    start_with(&b, ci, path);
    th_sleep_ms(2500);
    ck_assert_msg(slot_runs(ci, "tick", NULL) >= 2, "no runs before the pause");
    /* Slots fired: the schedule names its last one, a slot with its run. */
    th_get(a.url, "/schedules/tick", &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_msg(json_is_string(json_object_get(r.json, "last_slot")), "last_slot: %s", r.body);
    {
        char sql[256];
        snprintf(sql, sizeof(sql),
                 "SELECT count(*) FROM runs WHERE schedule_name = 'tick' AND "
                 "opsrun_ts(schedule_slot) = '%s'",
                 th_js(r.json, "last_slot"));
        ck_assert_int_eq(sql_int(ci, sql), 1);
    }
    th_resp_free(&r);
    post_expect(&a, "/schedules/tick/pause", 200, &r);
    ck_assert(json_is_true(json_object_get(r.json, "paused")));
    ck_assert(json_is_null(json_object_get(r.json, "next_at")));
    th_resp_free(&r);
    th_sleep_ms(1500); /* a slot taken before the pause committed may still finish */
    before = slot_runs(ci, "tick", NULL);
    th_sleep_ms(3000);
    during = slot_runs(ci, "tick", NULL);
    ck_assert_msg(during == before, "%lld runs while paused", during - before);
    /* Both replicas say so. */
    th_get(b.url, "/schedules/tick", &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert(json_is_true(json_object_get(r.json, "paused")));
    th_resp_free(&r);
    /* A trigger while paused: a run now, slot null. */
    post_expect(&b, "/schedules/tick/trigger", 202, &r);
    tid = strdup(th_js(r.json, "run_id"));
    ck_assert_str_eq(r.location + strlen("/runs/"), tid);
    th_resp_free(&r);
    run = th_wait_done(&a, tid, 20);
    ck_assert_str_eq(th_js(json_object_get(run, "schedule"), "name"), "tick");
    ck_assert(json_is_null(json_object_get(json_object_get(run, "schedule"), "slot")));
    ck_assert_str_eq(th_js(run, "initiator"), "anonymous");
    json_decref(run);
    th_get(a.url, "/schedules/tick", &r);
    ck_assert_str_eq(th_js(r.json, "last_run_id"), tid);
    th_resp_free(&r);
    /* Resumed through the other replica: slots fire again. */
    post_expect(&b, "/schedules/tick/resume", 200, &r);
    ck_assert(json_is_false(json_object_get(r.json, "paused")));
    ck_assert(json_is_string(json_object_get(r.json, "next_at")));
    th_resp_free(&r);
    th_sleep_ms(2500);
    ck_assert_msg(slot_runs(ci, "tick", NULL) >= during + 2, "no runs after the resume");
    /* The command line: the table, and a pause (kept in the database: a
     * restart keeps it). */
    {
        const char *const list[] = {"schedules", "--server", a.url, NULL};
        const char *const pause[] = {"schedule", "pause", "tick", "--server", b.url, NULL};
        char *out = NULL, *err = NULL;

        ck_assert_int_eq(th_exec(list, NULL, 20, &out, &err), 0);
        ck_assert_msg(strstr(out, "NAME") && strstr(out, "tick") && strstr(out, "* * * * * *"),
                      "opsrun schedules printed %s", out);
        free(out);
        free(err);
        ck_assert_int_eq(th_exec(pause, NULL, 20, &out, &err), 0);
        ck_assert_str_eq(out, "schedule tick paused\n");
        free(out);
        free(err);
    }
    th_stop_clean(&b);
    start_with(&b, ci, path);
    th_get(b.url, "/schedules/tick", &r);
    ck_assert(json_is_true(json_object_get(r.json, "paused")));
    th_resp_free(&r);
    th_stop_clean(&a);
    th_stop_clean(&b);
    free(tid);
    free(path);
}
END_TEST

/* One request with a token; asserts the status. */
static void call(const struct th_proc *p, const char *method, const char *path, const char *token,
                 long want, struct th_resp *r)
{
    char url[512];

    snprintf(url, sizeof(url), "%s%s", p->url, path);
    ck_assert(th_http_token(method, url, token, NULL, NULL, r));
    ck_assert_msg(r->status == want, "%s %s (%s): HTTP %ld, want %ld; %s", method, path,
                  token ? token : "no token", r->status, want, r->body);
    if (want >= 400)
        th_check_problem(r, want, path);
}

static void call_free(const struct th_proc *p, const char *method, const char *path,
                      const char *token, long want)
{
    struct th_resp r;

    call(p, method, path, token, want, &r);
    th_resp_free(&r);
}

/* The API: the list and one schedule, the run member and the filter,
 * unknown names, tokens' tenants and scopes. */
START_TEST(api_and_tenancy)
{
    const char *config =
        "{\"auth\": {\"tokens\": ["
        "  {\"name\": \"acme-read\", \"tenant\": \"acme\", \"scopes\": [\"read\"], \"sha256\": "
        "\"37b8d57153bffdf023160736edb4fcb922a1b6b6ce2dba953f4b571880757b47\"},"
        "  {\"name\": \"acme-ops\", \"tenant\": \"acme\", \"scopes\": [\"read\", \"cancel\", "
        "\"submit\"], \"sha256\": "
        "\"619bd7757b180b9f8717f4a899986d1ffea2a05ce901278c9d0cb0d51942132c\"},"
        "  {\"name\": \"other\", \"tenant\": \"other\", \"scopes\": [\"read\", \"cancel\", "
        "\"submit\"], \"sha256\": "
        "\"315d9ac9754483bbfbb18f7de72d84c176b697b589b23ed00668111c92c29a9c\"},"
        "  {\"name\": \"root\", \"tenant\": \"acme\", \"scopes\": [\"admin\"], \"sha256\": "
        "\"c140b9ee332d67f84953aae63edc037a10d217685d2d98161ecb34696eb4e2a4\"}]},"
        " \"schedules\": {"
        "  \"nightly\": {\"cron\": \"30 2 * * *\", \"time_zone\": \"Europe/Berlin\", "
        "\"run_type\": \"demo\", \"tenant\": \"acme\", \"data\": {\"duration_ms\": 1}},"
        "  \"hourly\": {\"cron\": \"@hourly\", \"run_type\": \"demo\", \"tenant\": \"other\"}}}";
    struct th_proc p;
    struct th_resp r;
    const json_t *s;
    char *id, path[256];
    json_t *run;

    th_start_fresh(&p, "e2e_sched_api", config);
    /* Each token sees its tenant's schedules; the admin sees all. */
    call(&p, "GET", "/schedules", "t-read", 200, &r);
    ck_assert_int_eq(json_array_size(json_object_get(r.json, "schedules")), 1);
    s = json_array_get(json_object_get(r.json, "schedules"), 0);
    ck_assert_str_eq(th_js(s, "name"), "nightly");
    ck_assert_str_eq(th_js(s, "tenant"), "acme");
    ck_assert_str_eq(th_js(s, "cron"), "30 2 * * *");
    ck_assert_str_eq(th_js(s, "time_zone"), "Europe/Berlin");
    ck_assert_str_eq(th_js(s, "run_type"), "demo");
    ck_assert_str_eq(th_js(s, "overlap"), "skip");
    ck_assert_str_eq(th_js(s, "catch_up"), "one");
    ck_assert(json_is_false(json_object_get(s, "paused")));
    ck_assert(json_is_null(json_object_get(s, "last_slot")));
    ck_assert(json_is_null(json_object_get(s, "last_run_id")));
    ck_assert(json_is_null(json_object_get(s, "last_outcome")));
    /* 02:30 in Berlin is 00:30 or 01:30 UTC. */
    ck_assert_msg(strstr(th_js(s, "next_at"), "T00:30:00") ||
                      strstr(th_js(s, "next_at"), "T01:30:00"),
                  "next_at %s", th_js(s, "next_at"));
    th_resp_free(&r);
    call(&p, "GET", "/schedules", "t-admin", 200, &r);
    ck_assert_int_eq(json_array_size(json_object_get(r.json, "schedules")), 2);
    th_resp_free(&r);
    /* Another tenant's schedule is 404 for every verb, as one that does
     * not exist; nothing changes. */
    call_free(&p, "GET", "/schedules/hourly", "t-read", 404);
    call_free(&p, "POST", "/schedules/hourly/pause", "t-ops", 404);
    call_free(&p, "POST", "/schedules/hourly/trigger", "t-ops", 404);
    call_free(&p, "GET", "/schedules/nope", "t-read", 404);
    call_free(&p, "POST", "/schedules/nope/resume", "t-ops", 404);
    call_free(&p, "GET", "/schedules/hourly", "t-other", 200);
    /* Scopes: read may not pause, resume or trigger. */
    call_free(&p, "POST", "/schedules/nightly/pause", "t-read", 403);
    call_free(&p, "POST", "/schedules/nightly/resume", "t-read", 403);
    call_free(&p, "POST", "/schedules/nightly/trigger", "t-read", 403);
    call_free(&p, "GET", "/schedules", NULL, 401);
    call_free(&p, "DELETE", "/schedules/nightly", "t-ops", 405);
    call(&p, "GET", "/schedules/nightly", "t-read", 200, &r);
    ck_assert(json_is_false(json_object_get(r.json, "paused")));
    th_resp_free(&r);
    /* A trigger: the run, its member, the list filter, the last run. */
    call(&p, "POST", "/schedules/nightly/trigger", "t-ops", 202, &r);
    id = strdup(th_js(r.json, "run_id"));
    th_resp_free(&r);
    snprintf(path, sizeof(path), "/runs/%s?wait=20", id);
    call(&p, "GET", path, "t-read", 200, &r);
    run = json_incref(r.json);
    th_resp_free(&r);
    ck_assert_str_eq(th_js(run, "initiator"), "acme-ops");
    ck_assert_str_eq(th_js(run, "tenant"), "acme");
    ck_assert_str_eq(th_js(json_object_get(run, "schedule"), "name"), "nightly");
    json_decref(run);
    call(&p, "GET", "/runs?schedule=nightly", "t-read", 200, &r);
    ck_assert_int_eq(json_array_size(json_object_get(r.json, "runs")), 1);
    th_resp_free(&r);
    call(&p, "GET", "/runs?schedule=hourly", "t-read", 200, &r);
    ck_assert_int_eq(json_array_size(json_object_get(r.json, "runs")), 0);
    th_resp_free(&r);
    call(&p, "GET", "/runs?schedule=", "t-read", 400, &r);
    th_resp_free(&r);
    call(&p, "GET", "/schedules/nightly", "t-read", 200, &r);
    ck_assert_str_eq(th_js(r.json, "last_run_id"), id);
    ck_assert_msg(th_js(r.json, "last_outcome"), "no last_outcome");
    th_resp_free(&r);
    /* A run not made by a schedule has "schedule": null. */
    {
        char url[256];
        snprintf(url, sizeof(url), "%s/alerts", p.url);
        ck_assert(th_http_token("POST", url, "t-ops", "application/json",
                                "{\"alert_type\":\"demo\",\"run_id\":\"plain\"}", &r));
        ck_assert_int_eq(r.status, 202);
        th_resp_free(&r);
    }
    call(&p, "GET", "/runs/plain", "t-read", 200, &r);
    ck_assert(json_is_null(json_object_get(r.json, "schedule")));
    th_resp_free(&r);
    free(id);
    th_stop_clean(&p);
}
END_TEST

/* ---- reloads ---- */

/* The configuration of schedule "tick" on demo runs of 10 ms, every cron
 * (overlap allow: every slot makes its run). */
#define TICK_CONFIG(cron)                                                                          \
    "{\"schedules\": {\"tick\": {\"cron\": \"" cron "\", \"run_type\": \"demo\","                  \
    " \"overlap\": \"allow\", \"data\": {\"duration_ms\": 10, \"steps\": 1}}}}"

/* The database's clock, in seconds since the epoch, as SQL text (heap). */
static char *db_now(const char *conninfo)
{
    PGconn *c = th_pg(conninfo);
    char *v = th_sql_str(c, "SELECT extract(epoch FROM clock_timestamp())::text");

    PQfinish(c);
    return v;
}

/* The multiples of every (seconds) from `from` (epoch seconds, SQL text)
 * to the last slot of "tick" that have no run of it. */
static long long slots_without_run(const char *conninfo, int every, const char *from)
{
    char sql[1024];

    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM generate_series(ceil(%s)::bigint, (SELECT "
             "extract(epoch FROM max(schedule_slot))::bigint FROM runs)) g WHERE g %% %d = 0 "
             "AND NOT EXISTS (SELECT 1 FROM runs WHERE schedule_name = 'tick' AND "
             "extract(epoch FROM schedule_slot)::bigint = g)",
             from, every);
    return sql_int(conninfo, sql);
}

/* A server started without schedules gets one by a reload: it fires
 * within seconds, GET /schedules shows it, and a reload that removes it
 * stops it. */
START_TEST(schedule_added_by_reload)
{
    char *ci = th_db_create("e2e_sched_added");
    char *path = th_config_file("e2e_sched_added", "{\"queue\": {\"workers\": 4}}");
    struct th_proc p;
    struct th_resp r;
    long long n = 0, until;

    start_with(&p, ci, path);
    th_sleep_ms(1500);
    ck_assert_int_eq(sql_int(ci, "SELECT count(*) FROM schedules"), 0);
    th_config_rewrite(path, TICK_CONFIG("@every 1s"));
    th_reload(&p, NULL, "schedules.tick");
    for (until = th_now_ms() + 8000; n < 2 && th_now_ms() < until; th_sleep_ms(100))
        n = slot_runs(ci, "tick", NULL);
    ck_assert_msg(n >= 2, "%lld runs of the added schedule", n);
    th_get(p.url, "/schedules/tick", &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(th_js(r.json, "cron"), "@every 1s");
    th_resp_free(&r);

    th_config_rewrite(path, "{\"queue\": {\"workers\": 4}}");
    th_reload(&p, NULL, "schedules.tick");
    th_sleep_ms(1500);
    n = slot_runs(ci, "tick", NULL);
    th_sleep_ms(2500);
    ck_assert_int_eq(slot_runs(ci, "tick", NULL), n);
    th_get(p.url, "/schedules/tick", &r);
    ck_assert_int_eq(r.status, 404);
    th_resp_free(&r);
    th_stop_clean(&p);
    free(path);
    free(ci);
}
END_TEST

/* Two replicas run "tick" every 2 s; its cron becomes every 3 s by a
 * reload of one (POST /admin/reload), and 4 s later of the other (SIGHUP).
 * Meanwhile each fires its own cron's slots; no slot ever has two runs;
 * before the first reload every even second has its run, and from a
 * second after it every multiple of 3 has one (none missed, whichever
 * replica took it); once both run the new cron, no other slot fires. */
START_TEST(cron_changed_on_two_replicas)
{
    char *ci = th_db_create("e2e_sched_recron");
    char *pa = th_config_file("e2e_sched_recron_a", TICK_CONFIG("@every 2s"));
    char *pb = th_config_file("e2e_sched_recron_b", TICK_CONFIG("@every 2s"));
    char *t0, *ta, *tb, sql[512];
    struct th_proc a, b;

    start_with(&a, ci, pa);
    start_with(&b, ci, pb);
    th_sleep_ms(1000);
    t0 = db_now(ci);
    th_sleep_ms(5000);
    th_config_rewrite(pa, TICK_CONFIG("@every 3s"));
    th_reload(&a, NULL, "schedules.tick");
    ta = db_now(ci);
    th_sleep_ms(4000);
    th_config_rewrite(pb, TICK_CONFIG("@every 3s"));
    th_reload_signal(&b);
    tb = db_now(ci);
    th_sleep_ms(8000);
    th_stop_clean(&a);
    th_stop_clean(&b);

    ck_assert_int_eq(sql_int(ci, "SELECT count(*) FROM runs"),
                     sql_int(ci, "SELECT count(DISTINCT schedule_slot) FROM runs"));
    /* the old cron, none missed, up to the first reload */
    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM generate_series(ceil(%s)::bigint, floor(%s)::bigint) g "
             "WHERE g %% 2 = 0 AND NOT EXISTS (SELECT 1 FROM runs WHERE "
             "extract(epoch FROM schedule_slot)::bigint = g)",
             t0, ta);
    ck_assert_int_eq(sql_int(ci, sql), 0);
    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM runs WHERE schedule_slot < to_timestamp(%s) AND "
             "extract(epoch FROM schedule_slot)::bigint %% 2 <> 0",
             ta);
    ck_assert_int_eq(sql_int(ci, sql), 0);
    /* the new cron, none missed, from a second after the first reload on */
    snprintf(sql, sizeof(sql), "(%s) + 1.5", ta);
    ck_assert_int_eq(slots_without_run(ci, 3, sql), 0);
    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM runs WHERE schedule_slot > to_timestamp(%s) AND "
             "extract(epoch FROM schedule_slot)::bigint %% 3 = 0",
             tb);
    ck_assert_int_ge(sql_int(ci, sql), 2);
    /* nothing but the new cron once both follow it */
    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM runs WHERE schedule_slot > to_timestamp(%s) + interval "
             "'1.5 s' AND extract(epoch FROM schedule_slot)::bigint %% 3 <> 0",
             tb);
    ck_assert_int_eq(sql_int(ci, sql), 0);
    free(t0);
    free(ta);
    free(tb);
    free(pa);
    free(pb);
    free(ci);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("schedules");
    TCase *t = tcase_create("schedules");

    tcase_set_timeout(t, 180);
    tcase_add_test(t, one_run_per_slot);
    tcase_add_test(t, overlap_skip);
    tcase_add_test(t, overlap_allow);
    tcase_add_test(t, overlap_cancel_previous);
    tcase_add_test(t, catch_up_policies);
    tcase_add_test(t, pause_resume_trigger);
    tcase_add_test(t, api_and_tenancy);
    tcase_add_test(t, schedule_added_by_reload);
    tcase_add_test(t, cron_changed_on_two_replicas);
    suite_add_tcase(s, t);
    return th_run_suite(s);
}
