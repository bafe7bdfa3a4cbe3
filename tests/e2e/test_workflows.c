/* tests/e2e/test_workflows.c — workflow run types (docs/workflows.md) on
 * real processes and PostgreSQL: the disk-full runbook with each branch
 * taken (every step succeeds, verify fails, a cleanup fails, the input
 * lacks what a step's data names, a lone step fails), joins whose needs end
 * on two replicas at once (each join made once), a replica killed while
 * the workflow's row was locked at a step's end (another replica's sweep
 * goes on from the marker), cancel with steps running, queued and waiting
 * for approval, a workflow of a tenant that waits for approval, and a
 * workflow nested in another, one too deep, and retries that reuse the
 * steps that succeeded. */
#include "../support/cli.h"
#include "../support/harness.h"
#include "../support/reload.h"
#include "../support/sse.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define T_OPS "opsrun_e2e-wf-ops-acme-00000000000000"
#define T_APPROVER "opsrun_e2e-wf-approver-acme-11111111"
#define T_OTHER "opsrun_e2e-wf-other-tenant-2222222222"

/* The disk-full runbook: simulate steps whose "fail" comes from the
 * workflow's input, and a lone step that fails. */
#define DISK_FULL_CONFIG                                                                           \
    "{\"run_types\": {"                                                                            \
    "\"collect-diag\": {\"action\": \"simulate\", \"params\": {\"duration_ms\": 50, \"steps\": "   \
    "1}, \"then\": [{\"on\": [\"failed\"], \"run_type\": \"page-oncall\"}]},"                      \
    "\"clean-tmp\": {\"action\": \"simulate\", \"params\": {\"duration_ms\": 50, \"steps\": 1}},"  \
    "\"rotate-logs\": {\"action\": \"simulate\", \"params\": {\"duration_ms\": 150, \"steps\": "   \
    "1}},"                                                                                         \
    "\"verify-disk\": {\"action\": \"simulate\", \"params\": {\"duration_ms\": 50, \"steps\": "    \
    "1}},"                                                                                         \
    "\"page-oncall\": {\"action\": \"simulate\", \"params\": {\"duration_ms\": 10, \"steps\": "    \
    "1}},"                                                                                         \
    "\"disk-full\": {\"action\": \"workflow\", \"params\": {\"steps\": {"                          \
    "\"diagnose\": {\"run_type\": \"collect-diag\", \"data\": {\"host\": "                         \
    "\"{{input:/labels/instance}}\"}},"                                                            \
    "\"clean_tmp\": {\"run_type\": \"clean-tmp\", \"needs\": [\"diagnose\"], \"data\": "           \
    "{\"host\": \"{{input:/labels/instance}}\", \"diag\": "                                        \
    "\"{{steps.diagnose:/result/simulated}}\","                                                    \
    " \"note\": \"after {{steps.diagnose:/status}} on {{input:/labels/instance}}\", "              \
    "\"fail\": \"{{input:/fail_clean}}\"}},"                                                       \
    "\"rotate_logs\": {\"run_type\": \"rotate-logs\", \"needs\": [\"diagnose\"]},"                 \
    "\"verify\": {\"run_type\": \"verify-disk\", \"needs\": [\"clean_tmp\", \"rotate_logs\"], "    \
    "\"data\": {\"fail\": \"{{input:/fail_verify}}\"}},"                                           \
    "\"page\": {\"run_type\": \"page-oncall\", \"needs\": [\"verify\"], \"when\": \"failed\"}}}}," \
    "\"lone\": {\"action\": \"workflow\", \"params\": {\"steps\": {"                               \
    "\"only\": {\"run_type\": \"collect-diag\", \"data\": {\"fail\": \"permanent\"}}}}}}}"

/* The run's workflow step name's member. */
static const json_t *step_of(const json_t *run, const char *name)
{
    const json_t *s =
        json_object_get(json_object_get(json_object_get(run, "workflow"), "steps"), name);

    ck_assert_msg(json_is_object(s), "no step %s in %s", name, json_dumps(run, 0));
    return s;
}

static void check_step(const json_t *run, const char *name, const char *state)
{
    const json_t *s = step_of(run, name);
    char want_id[256];

    ck_assert_msg(th_streq(th_js(s, "state"), state), "step %s of %s: state %s, want %s", name,
                  th_js(run, "id"), th_js(s, "state"), state);
    snprintf(want_id, sizeof(want_id), "%s.%s", th_js(run, "id"), name);
    if (strcmp(state, "skipped") == 0 || strcmp(state, "pending") == 0)
        ck_assert_ptr_null(th_js(s, "run_id"));
    else
        ck_assert_str_eq(th_js(s, "run_id"), want_id);
}

/* summary_counts as compact JSON (keys sorted). */
static char *counts_of(const json_t *run)
{
    return json_dumps(json_object_get(run, "summary_counts"), JSON_COMPACT | JSON_SORT_KEYS);
}

/* The messages of a run's events of type kind (NULL: all), joined with
 * "|". */
static char *event_messages(const struct th_proc *p, const char *id, const char *kind)
{
    char path[256], *out = calloc(1, 8192);
    struct th_resp r;
    size_t i;
    json_t *e;

    snprintf(path, sizeof(path), "/runs/%s/events", id);
    th_get(p->url, path, &r);
    ck_assert_int_eq(r.status, 200);
    json_array_foreach(json_object_get(r.json, "events"), i, e)
    {
        if (kind && !th_streq(th_js(e, "type"), kind))
            continue;
        strncat(out, *out ? "|" : "", 8191 - strlen(out));
        strncat(out, th_js(e, "message") ? th_js(e, "message") : "-", 8191 - strlen(out));
    }
    th_resp_free(&r);
    return out;
}

/* A disk-full workflow with id: labels (or none), and what clean_tmp and
 * verify do ("never", "permanent"). */
static char *submit_disk_full(const struct th_proc *p, const char *id, bool labels,
                              const char *clean, const char *verify)
{
    char body[512];

    snprintf(body, sizeof(body),
             "{\"alert_type\": \"disk-full\", \"run_id\": \"%s\", \"data\": {%s\"fail_clean\": "
             "\"%s\", \"fail_verify\": \"%s\"}}",
             id, labels ? "\"labels\": {\"instance\": \"web-1\"}, " : "", clean, verify);
    return th_submit(p, body, 202);
}

#define FIRST_EVENTS                                                                               \
    "submitted|started diagnose|diagnose succeeded; started clean_tmp, rotate_logs|"

/* Every branch of the runbook once. */
START_TEST(disk_full_every_branch)
{
    struct th_proc p;
    const char *ci = th_start_fresh(&p, "e2e_wf_branches", DISK_FULL_CONFIG);
    PGconn *c = th_pg(ci);
    char *ids[5], *s;
    json_t *run, *step;
    struct th_resp r;

    ids[0] = submit_disk_full(&p, "df-ok", true, "never", "never");
    ids[1] = submit_disk_full(&p, "df-verify", true, "never", "permanent");
    ids[2] = submit_disk_full(&p, "df-clean", true, "permanent", "never");
    ids[3] = submit_disk_full(&p, "df-nolabels", false, "never", "never");
    ids[4] = th_submit(&p, "{\"alert_type\": \"lone\", \"run_id\": \"lone-1\"}", 202);

    /* Every step succeeded: page, whose when is failed, is skipped. */
    run = th_wait_done(&p, ids[0], 30);
    ck_assert_str_eq(th_js(run, "outcome"), "succeeded");
    ck_assert_int_eq(th_ji(run, "progress"), 100);
    ck_assert_ptr_null(th_js(run, "workflow_step"));
    check_step(run, "diagnose", "succeeded");
    check_step(run, "clean_tmp", "succeeded");
    check_step(run, "rotate_logs", "succeeded");
    check_step(run, "verify", "succeeded");
    check_step(run, "page", "skipped");
    ck_assert_str_eq(th_js(step_of(run, "page"), "when"), "failed");
    ck_assert_int_eq(json_array_size(json_object_get(step_of(run, "verify"), "needs")), 2);
    s = counts_of(run);
    ck_assert_str_eq(s, "{\"skipped\":1,\"succeeded\":4}");
    free(s);
    ck_assert(json_is_null(json_object_get(run, "error")));
    ck_assert_ptr_nonnull(th_js(run, "started_at"));
    json_decref(run);
    /* Its events tell the story (clean_tmp and rotate_logs may end in one
     * transaction, and then in one event). */
    s = event_messages(&p, ids[0], NULL);
    ck_assert_msg(strncmp(s, FIRST_EVENTS, strlen(FIRST_EVENTS)) == 0 &&
                      strstr(s, "; started verify|verify succeeded; skipped page|succeeded: 1 "
                                "skipped, 4 succeeded") &&
                      strstr(s, "clean_tmp succeeded") && strstr(s, "rotate_logs succeeded"),
                  "events of df-ok: %s", s);
    free(s);
    /* A step is a run of its own: parent, name, tenant, initiator, and its
     * data made from the workflow's input and an earlier step's run. */
    step = th_get_run(&p, "df-ok.clean_tmp");
    ck_assert_str_eq(th_js(step, "parent_id"), "df-ok");
    ck_assert_str_eq(th_js(step, "workflow_step"), "clean_tmp");
    ck_assert_str_eq(th_js(step, "type"), "clean-tmp");
    ck_assert_str_eq(th_js(step, "tenant"), "default");
    ck_assert_str_eq(th_js(step, "initiator"), "anonymous");
    ck_assert(json_is_null(json_object_get(step, "workflow")));
    ck_assert_str_eq(th_js(json_object_get(step, "input"), "host"), "web-1");
    ck_assert(json_is_true(json_object_get(json_object_get(step, "input"), "diag")));
    ck_assert_str_eq(th_js(json_object_get(step, "input"), "note"), "after completed on web-1");
    json_decref(step);
    s = event_messages(&p, "df-ok.verify", "status");
    ck_assert_msg(strncmp(s, "submitted as step verify of df-ok|", 34) == 0, "%s", s);
    free(s);
    th_get(p.url, "/runs?parent_id=df-ok&limit=10", &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_int_eq(json_array_size(json_object_get(r.json, "runs")), 4);
    th_resp_free(&r);

    /* verify failed: page runs; some steps succeeded. */
    run = th_wait_done(&p, ids[1], 30);
    ck_assert_str_eq(th_js(run, "outcome"), "partially_succeeded");
    check_step(run, "verify", "failed");
    check_step(run, "page", "succeeded");
    ck_assert_str_eq(th_js(json_object_get(run, "error"), "code"), "steps_not_succeeded");
    s = counts_of(run);
    ck_assert_str_eq(s, "{\"failed\":1,\"succeeded\":4}");
    free(s);
    json_decref(run);

    /* clean_tmp failed: verify (when succeeded) is skipped, and page, whose
     * need was skipped, runs. */
    run = th_wait_done(&p, ids[2], 30);
    ck_assert_str_eq(th_js(run, "outcome"), "partially_succeeded");
    check_step(run, "clean_tmp", "failed");
    check_step(run, "rotate_logs", "succeeded");
    check_step(run, "verify", "skipped");
    check_step(run, "page", "succeeded");
    json_decref(run);

    /* The input lacks what diagnose's data names: diagnose fails at once,
     * with a run that says why. */
    run = th_wait_done(&p, ids[3], 30);
    ck_assert_str_eq(th_js(run, "outcome"), "partially_succeeded");
    check_step(run, "diagnose", "failed");
    check_step(run, "clean_tmp", "skipped");
    check_step(run, "rotate_logs", "skipped");
    check_step(run, "verify", "skipped");
    check_step(run, "page", "succeeded");
    json_decref(run);
    step = th_get_run(&p, "df-nolabels.diagnose");
    ck_assert_str_eq(th_js(step, "outcome"), "failed");
    ck_assert_str_eq(th_js(json_object_get(step, "error"), "code"), "invalid_step_data");
    ck_assert_msg(
        strstr(th_js(json_object_get(step, "error"), "message"), "{{input:/labels/instance}}"),
        "%s", th_js(json_object_get(step, "error"), "message"));
    ck_assert_int_eq(th_ji(step, "attempt"), 0);
    json_decref(step);
    /* Its events: made and failed in one; and the follow-up its type owes
     * a failed run. */
    s = event_messages(&p, "df-nolabels.diagnose", NULL);
    ck_assert_msg(strncmp(s,
                          "submitted as step diagnose of df-nolabels; failed: its data names "
                          "{{input:/labels/instance}}",
                          90) == 0,
                  "%s", s);
    ck_assert_msg(strstr(s, "follow-up 1 (page-oncall) created: df-nolabels.diagnose.1"), "%s", s);
    free(s);
    th_expect_outcome(&p, "df-nolabels.diagnose.1", "succeeded", 30);

    /* No step succeeded: failed. */
    run = th_wait_done(&p, ids[4], 30);
    ck_assert_str_eq(th_js(run, "outcome"), "failed");
    check_step(run, "only", "failed");
    json_decref(run);

    /* A bulk retry of every failed run leaves the steps out: it retries
     * the workflows, which run their failed steps again. */
    th_post_expect(&p, "/runs/retry", NULL,
                   "{\"filter\": {\"outcome\": [\"failed\"]}, \"dry_run\": true}", 200, &r);
    ck_assert_int_eq(th_ji(r.json, "matched"), 1); /* lone-1 */
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(r.json, "run_ids"), 0)),
                     "lone-1");
    th_resp_free(&r);

    /* A workflow never reached a worker nor the poller. */
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM runs WHERE wf_def IS NOT NULL AND "
                                   "(attempt <> 0 OR worker_id IS NOT NULL)"),
                     0);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM run_polls"), 0);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM wf_due"), 0);
    for (int i = 0; i < 5; i++)
        free(ids[i]);
    PQfinish(c);
    th_stop_clean(&p);
}
END_TEST

#define JOINS 200
#define JOIN_CONFIG                                                                                \
    "{\"run_types\": {\"nop\": {\"action\": \"simulate\", \"params\": {\"duration_ms\": 0, "       \
    "\"steps\": 0}},"                                                                              \
    "\"join\": {\"action\": \"workflow\", \"params\": {\"steps\": {"                               \
    "\"a\": {\"run_type\": \"nop\"}, \"b\": {\"run_type\": \"nop\"}, \"c\": {\"run_type\": "       \
    "\"nop\"}, \"d\": {\"run_type\": \"nop\", \"needs\": [\"a\", \"b\", \"c\"], \"when\": "        \
    "\"always\"}}}}}, \"queue\": {\"workers\": 4}}"

/* JOINS workflows of three parallel steps and a join over them, on two
 * replicas: every join is made exactly once, with one "submitted" event,
 * whichever replica ended its last need, and no marker is left. */
START_TEST(join_made_once_on_two_replicas)
{
    char *path = th_config_file("e2e_wf_join", JOIN_CONFIG);
    char *ci = th_db_create("e2e_wf_join");
    const char *args[] = {"--config", path, NULL};
    struct th_proc p[2];
    PGconn *c = th_pg(ci);
    size_t cap = (size_t)JOINS * 64 + 16, n = 0;
    char *body = malloc(cap);

    th_start(&p[0], ci, args, NULL);
    th_start(&p[1], ci, args, NULL);
    for (int half = 0; half < 2; half++) {
        n = (size_t)snprintf(body, cap, "[");
        for (int i = half * JOINS / 2; i < (half + 1) * JOINS / 2; i++)
            n += (size_t)snprintf(body + n, cap - n,
                                  "%s{\"alert_type\": \"join\", \"run_id\": \"j-%d\"}",
                                  i == half * JOINS / 2 ? "" : ",", i);
        snprintf(body + n, cap - n, "]");
        struct th_resp r;
        th_post_json(p[half].url, "/alerts", body, &r);
        ck_assert_msg(r.status == 200, "HTTP %ld: %.300s", r.status, r.body);
        th_resp_free(&r);
    }
    th_wait_all_completed(c, 90000);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM runs WHERE wf_def IS NOT NULL AND "
                                   "outcome = 'succeeded'"),
                     JOINS);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM runs WHERE step_name = 'd'"), JOINS);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM runs WHERE step_name IS NOT NULL"),
                     4 * JOINS);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM run_events WHERE message LIKE "
                                   "'submitted as step d of %%'"),
                     JOINS);
    /* Each join was made after all three of its needs ended: its first
     * event comes after each need's last (event ids follow the order of
     * their inserts; timestamps are when each transaction began). */
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM runs d JOIN runs n ON n.parent_id = "
                                   "d.parent_id AND n.step_name <> 'd' WHERE d.step_name = 'd' AND "
                                   "(SELECT min(e.id) FROM run_events e WHERE e.run_id = d.id) < "
                                   "(SELECT max(e.id) FROM run_events e WHERE e.run_id = n.id "
                                   "AND e.type = 'status')"),
                     0);
    /* The steps ran on both replicas. */
    ck_assert_int_eq(th_sql_int(c, "SELECT count(DISTINCT worker_id) FROM runs WHERE step_name "
                                   "IS NOT NULL"),
                     2);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM wf_due"), 0);
    th_stop_clean(&p[1]);
    th_stop_clean(&p[0]);
    PQfinish(c);
    free(body);
    free(ci);
    free(path);
}
END_TEST

#define KILL_CONFIG                                                                                \
    "{\"run_types\": {\"slow\": {\"action\": \"simulate\", \"params\": {\"duration_ms\": 1500, "   \
    "\"steps\": 1}}, \"quick\": {\"action\": \"simulate\", \"params\": {\"duration_ms\": 10, "     \
    "\"steps\": 1}},"                                                                              \
    "\"two\": {\"action\": \"workflow\", \"params\": {\"steps\": {"                                \
    "\"first\": {\"run_type\": \"slow\"}, \"other\": {\"run_type\": \"slow\"}, \"second\": "       \
    "{\"run_type\": \"quick\", \"needs\": [\"first\", \"other\"]}}}}}}"

/* Both needs of a join end while a session holds the workflow's row: the
 * replica that ended them leaves markers, and is killed. Another replica's
 * sweep cannot take the row either until the session lets go; then it
 * makes the join, once, and the workflow ends. */
START_TEST(marker_outlives_a_killed_replica)
{
    char *path = th_config_file("e2e_wf_kill", KILL_CONFIG);
    char *ci = th_db_create("e2e_wf_kill");
    const char *args[] = {"--config", path, NULL};
    struct th_proc a, b;
    PGconn *c = th_pg(ci), *lock = th_pg(ci);
    char *id;
    json_t *run;
    PGresult *res;

    th_start(&a, ci, args, NULL);
    id = th_submit(&a, "{\"alert_type\": \"two\", \"run_id\": \"k-1\"}", 202);
    ck_assert(th_wait_status(&a, "k-1.first", "running", 10000));
    ck_assert(th_wait_status(&a, "k-1.other", "running", 10000));
    res = th_sql(lock, "BEGIN; SELECT 1 FROM runs WHERE id = 'k-1' FOR UPDATE");
    PQclear(res);
    ck_assert(th_wait_status(&a, "k-1.first", "completed", 10000));
    ck_assert(th_wait_status(&a, "k-1.other", "completed", 10000));
    for (int i = 0; i < 100 && th_sql_int(c, "SELECT count(*) FROM wf_due") == 0; i++)
        th_sleep_ms(50);
    /* one marker per transaction that ended a need: one or two */
    ck_assert_int_ge(th_sql_int(c, "SELECT count(*) FROM wf_due WHERE workflow_id = 'k-1'"), 1);
    th_stop(&a, SIGKILL, 10);

    th_start(&b, ci, args, NULL);
    th_sleep_ms(1000); /* four sweeps of b, each passing over the locked row */
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM runs WHERE id = 'k-1.second'"), 0);
    ck_assert_int_ge(th_sql_int(c, "SELECT count(*) FROM wf_due WHERE workflow_id = 'k-1'"), 1);
    res = th_sql(lock, "COMMIT");
    PQclear(res);

    run = th_wait_done(&b, id, 20);
    ck_assert_str_eq(th_js(run, "outcome"), "succeeded");
    check_step(run, "first", "succeeded");
    check_step(run, "other", "succeeded");
    check_step(run, "second", "succeeded");
    json_decref(run);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM runs WHERE parent_id = 'k-1'"), 3);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM run_events WHERE message LIKE "
                                   "'submitted as step second of k-1%%'"),
                     1);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM wf_due"), 0);
    th_stop_clean(&b);
    PQfinish(lock);
    PQfinish(c);
    free(id);
    free(ci);
    free(path);
}
END_TEST

#define CANCEL_CONFIG                                                                              \
    "{\"run_types\": {\"long\": {\"action\": \"simulate\", \"params\": {\"duration_ms\": 20000, "  \
    "\"steps\": 20}},"                                                                             \
    "\"capped\": {\"action\": \"simulate\", \"max_running\": 1, \"params\": {\"duration_ms\": "    \
    "20000, \"steps\": 20}},"                                                                      \
    "\"gated\": {\"action\": \"simulate\", \"approval\": {\"timeout_s\": 300}},"                   \
    "\"mix\": {\"action\": \"workflow\", \"params\": {\"steps\": {"                                \
    "\"run\": {\"run_type\": \"long\"}, \"q1\": {\"run_type\": \"capped\"}, \"q2\": "              \
    "{\"run_type\": \"capped\"}, \"gate\": {\"run_type\": \"gated\"}, \"after\": {\"run_type\": "  \
    "\"long\", \"needs\": [\"run\"], \"when\": \"always\"}}}}}}"

/* Cancel a workflow whose steps run, wait in the queue and wait for
 * approval: it ends cancelled at once, each step ends cancelled, and the
 * step after them is never made. */
START_TEST(cancel_reaches_every_step)
{
    struct th_proc p;
    const char *ci = th_start_fresh(&p, "e2e_wf_cancel", CANCEL_CONFIG);
    PGconn *c = th_pg(ci);
    char *id = th_submit(&p, "{\"alert_type\": \"mix\", \"run_id\": \"m-1\"}", 202), *s;
    struct th_resp r;
    json_t *run;

    ck_assert(th_wait_status(&p, "m-1.run", "running", 10000));
    ck_assert(th_wait_status(&p, "m-1.gate", "waiting", 10000));
    for (int i = 0; i < 200 && th_sql_int(c, "SELECT count(*) FROM runs WHERE parent_id = 'm-1' "
                                             "AND type = 'capped' AND status = 'running'") < 1;
         i++)
        th_sleep_ms(50);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM runs WHERE parent_id = 'm-1' AND type = "
                                   "'capped' AND status = 'queued'"),
                     1);
    th_post_expect(&p, "/runs/m-1/cancel", NULL, NULL, 200, &r);
    ck_assert_str_eq(th_js(r.json, "status"), "completed");
    ck_assert_str_eq(th_js(r.json, "outcome"), "cancelled");
    th_resp_free(&r);
    for (int i = 0; i < 300 && th_sql_int(c, "SELECT count(*) FROM runs WHERE parent_id = 'm-1' "
                                             "AND status <> 'completed'") > 0;
         i++)
        th_sleep_ms(50);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM runs WHERE parent_id = 'm-1' AND "
                                   "outcome = 'cancelled' AND error ->> 'code' = "
                                   "'workflow_cancelled'"),
                     4);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM runs WHERE id = 'm-1.after'"), 0);
    run = th_get_run(&p, id);
    ck_assert_str_eq(th_js(run, "outcome"), "cancelled");
    check_step(run, "run", "cancelled");
    check_step(run, "q1", "cancelled");
    check_step(run, "q2", "cancelled");
    check_step(run, "gate", "cancelled");
    check_step(run, "after", "skipped");
    s = counts_of(run);
    ck_assert_str_eq(s, "{\"cancelled\":4,\"skipped\":1}");
    free(s);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM runs WHERE id = 'm-1' AND hooks_at IS "
                                   "NOT NULL"),
                     0);
    json_decref(run);
    th_sleep_ms(500);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM runs WHERE parent_id = 'm-1'"), 4);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM wf_due"), 0);
    PQfinish(c);
    free(id);
    th_stop_clean(&p);
}
END_TEST

/* A workflow of a tenant whose type needs approval: it waits, pending,
 * with no step; approved, its steps run with the workflow's tenant and
 * initiator, and another tenant sees none of them. */
START_TEST(tenant_and_approval)
{
    static const struct th_token t[] = {
        {"ops", "acme", "\"submit\", \"read\", \"cancel\"", T_OPS},
        {"approver", "acme", "\"approve\", \"read\"", T_APPROVER},
        {"other", "other", "\"read\", \"submit\"", T_OTHER},
    };
    char *tokens = th_auth_tokens(t, 3), cfg[4096], *id;
    struct th_proc p;
    struct th_resp r;
    const char *ci;
    PGconn *c;
    json_t *run;

    snprintf(cfg, sizeof(cfg),
             "{\"run_types\": {\"step\": {\"action\": \"simulate\", \"params\": {\"duration_ms\": "
             "20, \"steps\": 1}}, \"gated-wf\": {\"action\": \"workflow\", \"approval\": "
             "{\"timeout_s\": 300}, \"params\": {\"steps\": {\"one\": {\"run_type\": \"step\"}, "
             "\"two\": {\"run_type\": \"step\", \"needs\": [\"one\"]}}}}}, %s}",
             tokens);
    ci = th_start_fresh(&p, "e2e_wf_tenant", cfg);
    c = th_pg(ci);
    th_post_expect(&p, "/alerts", T_OPS, "{\"alert_type\": \"gated-wf\", \"run_id\": \"g-1\"}", 202,
                   &r);
    ck_assert_str_eq(th_js(r.json, "status"), "waiting");
    th_resp_free(&r);
    th_sleep_ms(300);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM runs WHERE parent_id = 'g-1'"), 0);
    th_post_expect(&p, "/runs/g-1/approve", T_APPROVER, "{}", 200, &r);
    ck_assert_str_eq(th_js(r.json, "status"), "waiting");
    th_resp_free(&r);
    id = strdup("g-1");
    for (int i = 0; i < 200 && th_sql_int(c, "SELECT count(*) FROM runs WHERE id = 'g-1' AND "
                                             "status = 'completed'") == 0;
         i++)
        th_sleep_ms(50);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM runs WHERE id = 'g-1' AND outcome = "
                                   "'succeeded'"),
                     1);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM runs WHERE parent_id = 'g-1' AND tenant = "
                                   "'acme' AND initiator = 'ops' AND outcome = 'succeeded'"),
                     2);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM run_polls"), 0);
    {
        char url[256];
        snprintf(url, sizeof(url), "%s/runs/g-1.two", p.url);
        ck_assert(th_http_token("GET", url, T_OTHER, NULL, NULL, &r));
        ck_assert_int_eq(r.status, 404);
        th_resp_free(&r);
        ck_assert(th_http_token("GET", url, T_OPS, NULL, NULL, &r));
        ck_assert_int_eq(r.status, 200);
        ck_assert_str_eq(th_js(r.json, "tenant"), "acme");
        ck_assert_str_eq(th_js(r.json, "workflow_step"), "two");
        th_resp_free(&r);
        snprintf(url, sizeof(url), "%s/runs/g-1", p.url);
        ck_assert(th_http_token("GET", url, T_OPS, NULL, NULL, &r));
        run = json_incref(r.json);
        th_resp_free(&r);
        check_step(run, "one", "succeeded");
        check_step(run, "two", "succeeded");
        json_decref(run);
    }
    PQfinish(c);
    free(id);
    free(tokens);
    th_stop_clean(&p);
}
END_TEST

#define NEST_CONFIG                                                                                \
    "{\"queue\": {\"max_chain_depth\": 2}, \"run_types\": {"                                       \
    "\"leaf\": {\"action\": \"simulate\", \"params\": {\"duration_ms\": 20, \"steps\": 1}},"       \
    "\"inner\": {\"action\": \"workflow\", \"params\": {\"steps\": {\"x\": {\"run_type\": "        \
    "\"leaf\", \"data\": {\"from\": \"{{input:/who}}\"}}, \"y\": {\"run_type\": \"leaf\", "        \
    "\"needs\": [\"x\"]}}}},"                                                                      \
    "\"outer\": {\"action\": \"workflow\", \"params\": {\"steps\": {\"pre\": {\"run_type\": "      \
    "\"leaf\"}, \"mid\": {\"run_type\": \"inner\", \"needs\": [\"pre\"], \"data\": {\"who\": "     \
    "\"{{input:/who}}\"}}, \"post\": {\"run_type\": \"leaf\", \"needs\": [\"mid\"]}}}},"           \
    "\"starter\": {\"action\": \"simulate\", \"params\": {\"duration_ms\": 10, \"steps\": 1}, "    \
    "\"then\": [{\"on\": [\"succeeded\"], \"run_type\": \"starter2\"}]},"                          \
    "\"starter2\": {\"action\": \"simulate\", \"params\": {\"duration_ms\": 10, \"steps\": 1}, "   \
    "\"then\": [{\"on\": [\"succeeded\"], \"run_type\": \"inner\", \"data\": {\"who\": "           \
    "\"deep\"}}]}}}"

/* A step that is a workflow runs its own steps one level down and ends as
 * they make it end; the outer workflow goes on after it. A workflow that
 * starts as deep as queue.max_chain_depth allows (a follow-up of a
 * follow-up) fails the steps that would pass it. */
START_TEST(nested_workflow)
{
    struct th_proc p;
    const char *ci = th_start_fresh(&p, "e2e_wf_nest", NEST_CONFIG);
    PGconn *c = th_pg(ci);
    char *id = th_submit(&p,
                         "{\"alert_type\": \"outer\", \"run_id\": \"n-1\", \"data\": "
                         "{\"who\": \"me\"}}",
                         202);
    json_t *run = th_wait_done(&p, id, 30), *mid;

    ck_assert_str_eq(th_js(run, "outcome"), "succeeded");
    check_step(run, "pre", "succeeded");
    check_step(run, "mid", "succeeded");
    check_step(run, "post", "succeeded");
    json_decref(run);
    mid = th_get_run(&p, "n-1.mid");
    ck_assert_str_eq(th_js(mid, "workflow_step"), "mid");
    ck_assert_str_eq(th_js(mid, "parent_id"), "n-1");
    check_step(mid, "x", "succeeded");
    check_step(mid, "y", "succeeded");
    json_decref(mid);
    ck_assert_int_eq(th_sql_int(c, "SELECT chain_depth FROM runs WHERE id = 'n-1.mid.x' AND "
                                   "parent_id = 'n-1.mid' AND input ->> 'from' = 'me'"),
                     2);
    /* post was made after mid ended. */
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM runs m, runs p WHERE m.id = 'n-1.mid' "
                                   "AND p.id = 'n-1.post' AND (SELECT max(e.id) FROM run_events "
                                   "e WHERE e.run_id = m.id AND e.type = 'status') < (SELECT "
                                   "min(e.id) FROM run_events e WHERE e.run_id = p.id)"),
                     1);

    free(id);
    id = th_submit(&p, "{\"alert_type\": \"starter\", \"run_id\": \"s-1\"}", 202);
    run = th_wait_done(&p, "s-1.1.1", 30);
    ck_assert_str_eq(th_js(run, "type"), "inner");
    ck_assert_str_eq(th_js(run, "outcome"), "failed");
    check_step(run, "x", "failed");
    check_step(run, "y", "skipped");
    json_decref(run);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM runs WHERE id = 's-1.1.1.x' AND error "
                                   "->> 'code' = 'max_chain_depth' AND attempt = 0"),
                     1);
    /* Made and ended within one insert, its events are still in order:
     * made first, its end last. */
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM run_events WHERE run_id = 's-1.1.1'"), 3);
    ck_assert_int_eq(th_sql_int(c, "SELECT ((array_agg(status ORDER BY id))[3] = 'completed' AND "
                                   "(array_agg(message ORDER BY id))[1] LIKE 'submitted as "
                                   "follow-up%%')::int FROM run_events WHERE run_id = 's-1.1.1'"),
                     1);
    free(id);
    PQfinish(c);
    th_stop_clean(&p);
}
END_TEST

/* A workflow whose step b fails as the configuration says. */
static char *retry_config(const char *fail)
{
    char *out = malloc(2048);

    snprintf(out, 2048,
             "{\"run_types\": {\"ok\": {\"action\": \"simulate\", \"params\": {\"duration_ms\": "
             "10, \"steps\": 1}}, \"check\": {\"action\": \"simulate\", \"params\": "
             "{\"duration_ms\": 10, \"steps\": 1, \"fail\": \"%s\"}}, \"fix\": {\"action\": "
             "\"workflow\", \"params\": {\"steps\": {\"a\": {\"run_type\": \"ok\"}, \"b\": "
             "{\"run_type\": \"check\", \"needs\": [\"a\"]}, \"c\": {\"run_type\": \"ok\", "
             "\"needs\": [\"a\"]}, \"d\": {\"run_type\": \"ok\", \"needs\": [\"b\", \"c\"], "
             "\"when\": \"always\"}}}}}}",
             fail);
    return out;
}

/* POST /runs/{id}/retry, asserting 202; the new run's id (heap). */
static char *retry(const struct th_proc *p, const char *id)
{
    char path[256], *out;
    struct th_resp r;

    snprintf(path, sizeof(path), "/runs/%s/retry", id);
    th_post_expect(p, path, NULL, NULL, 202, &r);
    ck_assert_str_eq(th_js(r.json, "retry_of"), id);
    out = strdup(th_js(r.json, "run_id"));
    th_resp_free(&r);
    return out;
}

/* A retry reuses the steps that succeeded and runs the others again; a
 * retry of that retry reuses through it; a step run that retention took
 * runs again. */
START_TEST(retry_reuses_succeeded_steps)
{
    char *cfg = retry_config("permanent");
    char *path = th_config_file("e2e_wf_retry", cfg);
    char *ci = th_db_create("e2e_wf_retry");
    const char *args[] = {"--config", path, NULL};
    struct th_proc p;
    PGconn *c = th_pg(ci);
    char *w1, *w2, *w3, *s, want[512];
    json_t *run;

    th_start(&p, ci, args, NULL);
    w1 = th_submit(&p, "{\"alert_type\": \"fix\", \"run_id\": \"r-1\"}", 202);
    run = th_wait_done(&p, w1, 30);
    ck_assert_str_eq(th_js(run, "outcome"), "partially_succeeded");
    json_decref(run);

    w2 = retry(&p, w1);
    run = th_wait_done(&p, w2, 30);
    ck_assert_str_eq(th_js(run, "outcome"), "partially_succeeded");
    ck_assert_str_eq(th_js(step_of(run, "a"), "run_id"), "r-1.a");
    ck_assert_str_eq(th_js(step_of(run, "c"), "run_id"), "r-1.c");
    ck_assert_str_eq(th_js(step_of(run, "d"), "run_id"), "r-1.d");
    check_step(run, "b", "failed"); /* its own run, <w2>.b */
    json_decref(run);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM runs WHERE parent_id = '%s'", w2), 1);
    s = event_messages(&p, w2, "step");
    snprintf(want, sizeof(want), "reused a (r-1.a), c (r-1.c), d (r-1.d); started b|b failed");
    ck_assert_msg(strcmp(s, want) == 0, "step events of the retry: %s", s);
    free(s);

    /* Retention took c's run; b succeeds now. */
    PQclear(th_sql(c, "DELETE FROM runs WHERE id = 'r-1.c'"));
    free(cfg);
    cfg = retry_config("never");
    th_config_rewrite(path, cfg);
    th_reload(&p, NULL, "run_types.check");
    w3 = retry(&p, w2);
    run = th_wait_done(&p, w3, 30);
    ck_assert_str_eq(th_js(run, "outcome"), "succeeded");
    ck_assert_str_eq(th_js(step_of(run, "a"), "run_id"), "r-1.a");
    ck_assert_str_eq(th_js(step_of(run, "d"), "run_id"), "r-1.d");
    check_step(run, "b", "succeeded");
    check_step(run, "c", "succeeded");
    json_decref(run);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM runs WHERE parent_id = '%s'", w3), 2);
    th_stop_clean(&p);
    PQfinish(c);
    free(w1);
    free(w2);
    free(w3);
    free(cfg);
    free(ci);
    free(path);
}
END_TEST

#define PASS_CONFIG                                                                                \
    "{\"run_types\": {"                                                                            \
    "\"leaf\": {\"action\": \"simulate\", \"params\": {\"duration_ms\": 10, \"steps\": 1}},"       \
    "\"inner\": {\"action\": \"workflow\", \"params\": {\"steps\": {\"x\": {\"run_type\": "        \
    "\"leaf\", \"data\": {\"v\": \"{{input:/missing}}\"}}}}},"                                     \
    "\"outer\": {\"action\": \"workflow\", \"params\": {\"steps\": {"                              \
    "\"taken\": {\"run_type\": \"leaf\"}, \"nest\": {\"run_type\": \"inner\"},"                    \
    "\"after_taken\": {\"run_type\": \"leaf\", \"needs\": [\"taken\"], \"when\": \"failed\"},"     \
    "\"after_nest\": {\"run_type\": \"leaf\", \"needs\": [\"nest\"], \"when\": \"failed\"},"       \
    "\"last\": {\"run_type\": \"leaf\", \"needs\": [\"taken\", \"nest\"], \"when\": "              \
    "\"always\"}, \"taken2\": {\"run_type\": \"inner\"}, \"after_taken2\": {\"run_type\": "        \
    "\"leaf\", \"needs\": [\"taken2\"]}}}}}}"

/* Steps that end within the advance that makes them: one whose id a run
 * already has (no run made, the run there untouched), also when the step
 * is itself a workflow and the run there has succeeded (taken2: failed,
 * not the other run's outcome), and a nested workflow whose only step
 * fails at creation, so that it ends within its own insert. The workflow
 * sees them ended in a second pass of the same advance and starts what
 * their failure starts. */
START_TEST(steps_that_end_as_they_are_made)
{
    struct th_proc p;
    const char *ci = th_start_fresh(&p, "e2e_wf_pass", PASS_CONFIG);
    PGconn *c = th_pg(ci);
    char *first = th_submit(&p, "{\"alert_type\": \"leaf\", \"run_id\": \"o-1.taken\"}", 202);
    char *second = th_submit(&p, "{\"alert_type\": \"leaf\", \"run_id\": \"o-1.taken2\"}", 202);
    json_t *run = th_wait_done(&p, second, 30), *nest;
    char *id;

    ck_assert_str_eq(th_js(run, "outcome"), "succeeded");
    json_decref(run);
    id = th_submit(&p, "{\"alert_type\": \"outer\", \"run_id\": \"o-1\"}", 202);
    run = th_wait_done(&p, id, 30);

    ck_assert_str_eq(th_js(run, "outcome"), "partially_succeeded");
    ck_assert_str_eq(th_js(step_of(run, "taken"), "state"), "failed");
    ck_assert_ptr_null(th_js(step_of(run, "taken"), "run_id"));
    check_step(run, "nest", "failed");
    check_step(run, "after_taken", "succeeded");
    check_step(run, "after_nest", "succeeded");
    check_step(run, "last", "succeeded");
    ck_assert_str_eq(th_js(step_of(run, "taken2"), "state"), "failed");
    ck_assert_ptr_null(th_js(step_of(run, "taken2"), "run_id"));
    check_step(run, "after_taken2", "skipped");
    json_decref(run);
    nest = th_get_run(&p, "o-1.nest");
    ck_assert_str_eq(th_js(nest, "outcome"), "failed");
    check_step(nest, "x", "failed");
    json_decref(nest);
    /* The run that had the id is as it was submitted. */
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM runs WHERE id = 'o-1.taken' AND type = "
                                   "'leaf' AND parent_id IS NULL AND step_name IS NULL"),
                     1);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM run_events WHERE run_id = 'o-1.taken' "
                                   "AND message LIKE '%%step taken%%'"),
                     0);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM run_events WHERE run_id = 'o-1' AND "
                                   "type = 'step' AND message LIKE '%%step taken not created: a "
                                   "run with id o-1.taken exists%%'"),
                     1);
    /* The nested workflow ended as it was made: the workflow's events say it
     * failed, never that it started. */
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM run_events WHERE run_id = 'o-1' AND "
                                   "type = 'step' AND message ~ 'started ([A-Za-z0-9_-]+, )*"
                                   "(nest|taken2)(,|;|$)'"),
                     0);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM run_events WHERE run_id = 'o-1' AND "
                                   "type = 'step' AND message ~ '(^|, )nest failed'"),
                     1);
    /* Both failures were seen by the advance that made them: the steps they
     * started were made in its transaction (now() is the transaction's),
     * not by a later sweep. */
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM runs s, runs n WHERE n.id = 'o-1.nest' "
                                   "AND s.id IN ('o-1.after_taken', 'o-1.after_nest', 'o-1.last') "
                                   "AND s.created_at = n.created_at"),
                     3);
    /* Each step that ran was made once, after the failure that started it. */
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM runs WHERE parent_id = 'o-1'"), 4);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM run_events WHERE run_id = "
                                   "'o-1.after_nest' AND message LIKE 'submitted as step%%' AND "
                                   "id > (SELECT max(id) FROM run_events WHERE run_id = "
                                   "'o-1.nest')"),
                     1);
    /* The steps' identities are those a submission with their id has. */
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM runs WHERE parent_id = 'o-1' AND "
                                   "identity_hash = opsrun_identity(tenant, type, 'run_id', id) "
                                   "AND request_hash = opsrun_identity(tenant, parent_id, 'step', "
                                   "step_name)"),
                     4);
    free(first);
    free(second);
    free(id);
    PQfinish(c);
    th_stop_clean(&p);
}
END_TEST

#define MANY_CONFIG                                                                                \
    "{\"run_types\": {"                                                                            \
    "\"gated\": {\"action\": \"simulate\", \"approval\": {\"timeout_s\": 300}},"                   \
    "\"one\": {\"action\": \"workflow\", \"params\": {\"steps\": {\"s\": {\"run_type\": "          \
    "\"gated\"}}}}}}"

/* One statement that ends the steps of 1,000 workflows with long ids: the
 * notes of their workflows pass 32 KB, the rest become markers in that
 * statement's transaction, and the sweep advances them: every workflow
 * ends, once, and no marker is left. */
START_TEST(a_statement_ending_many_steps)
{
    struct th_proc p;
    const char *ci = th_start_fresh(&p, "e2e_wf_many", MANY_CONFIG);
    PGconn *c = th_pg(ci);
    size_t cap = 1000 * 160 + 16, n = 0;
    char *body = malloc(cap), pad[101];
    struct th_resp r;
    char url[512];
    long long markers;
    int i;

    memset(pad, 'x', 100);
    pad[100] = '\0';
    n += (size_t)snprintf(body + n, cap - n, "[");
    for (i = 0; i < 1000; i++)
        n += (size_t)snprintf(body + n, cap - n,
                              "%s{\"alert_type\": \"one\", \"run_id\": \"%.96s%04d\"}",
                              i ? "," : "", pad, i);
    snprintf(body + n, cap - n, "]");
    snprintf(url, sizeof(url), "%s/alerts", p.url);
    ck_assert(th_http("POST", url, "application/json", body, &r));
    ck_assert_msg(r.status == 200, "HTTP %ld: %.300s", r.status, r.body);
    th_resp_free(&r);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM runs WHERE type = 'gated' AND status = "
                                   "'waiting'"),
                     1000);
    /* One implicit transaction: the markers are seen before it commits. */
    markers = th_sql_int(c, "UPDATE runs SET status = 'completed', outcome = 'failed', "
                            "completed_at = now(), approval_state = NULL WHERE type = 'gated' "
                            "AND status = 'waiting'; SELECT count(DISTINCT workflow_id) FROM "
                            "wf_due");
    ck_assert_msg(markers > 100 && markers < 1000, "%lld markers", markers);
    for (i = 0; i < 300; i++) {
        if (th_sql_int(c, "SELECT count(*) FROM runs WHERE type = 'one' AND status = "
                          "'completed' AND outcome = 'failed'") == 1000 &&
            th_sql_int(c, "SELECT count(*) FROM wf_due") == 0)
            break;
        usleep(100 * 1000);
    }
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM runs WHERE type = 'one' AND status = "
                                   "'completed' AND outcome = 'failed'"),
                     1000);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM wf_due"), 0);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM run_events e JOIN runs r ON r.id = "
                                   "e.run_id WHERE r.type = 'one' AND e.type = 'status' AND "
                                   "e.status = 'completed'"),
                     1000);
    free(body);
    PQfinish(c);
    th_stop_clean(&p);
}
END_TEST

#define RACE_CONFIG                                                                                \
    "{\"run_types\": {"                                                                            \
    "\"leaf\": {\"action\": \"simulate\", \"params\": {\"duration_ms\": 10, \"steps\": 1}},"       \
    "\"gated\": {\"action\": \"simulate\", \"approval\": {\"timeout_s\": 300}},"                   \
    "\"inner\": {\"action\": \"workflow\", \"params\": {\"steps\": {\"s\": {\"run_type\": "        \
    "\"gated\"}, \"t\": {\"run_type\": \"leaf\", \"needs\": [\"s\"]}}}},"                          \
    "\"outer\": {\"action\": \"workflow\", \"params\": {\"steps\": {\"n\": {\"run_type\": "        \
    "\"inner\"}}}},"                                                                               \
    "\"pair\": {\"action\": \"workflow\", \"params\": {\"steps\": {\"s\": {\"run_type\": "         \
    "\"leaf\"}, \"after\": {\"run_type\": \"leaf\", \"needs\": [\"s\"], \"when\": \"failed\"}}}}," \
    "\"gatedfu\": {\"action\": \"simulate\", \"approval\": {\"timeout_s\": 300}, \"then\": "       \
    "[{\"on\": [\"succeeded\"], \"run_type\": \"leaf\"}]},"                                        \
    "\"fw\": {\"action\": \"workflow\", \"params\": {\"steps\": {\"s\": {\"run_type\": "           \
    "\"gatedfu\"}}}}}}"

/* Two workflows advanced together, one of which the other's stop ends: W
 * is cancelled while a session holds the row of its step n (a nested
 * workflow), so the stop leaves a marker; n's step s then ends while n's
 * row is still held, a marker too. Once the row is free, one sweep takes
 * both: W's stop cancels n, and n is then not advanced from the copy read
 * before the stop (its step t is never made). */
START_TEST(a_stop_then_an_advance_in_one_sweep)
{
    struct th_proc p;
    const char *ci = th_start_fresh(&p, "e2e_wf_race", RACE_CONFIG);
    PGconn *c = th_pg(ci), *hold = th_pg(ci);
    char *id = th_submit(&p, "{\"alert_type\": \"outer\", \"run_id\": \"w-1\"}", 202);
    struct th_resp r;
    json_t *n;
    int i;

    ck_assert(th_wait_status(&p, "w-1.n.s", "waiting", 10000));
    th_sql_int(hold, "BEGIN; SELECT 1 FROM runs WHERE id = 'w-1.n' FOR UPDATE");
    th_post_expect(&p, "/runs/w-1/cancel", NULL, NULL, 200, &r);
    ck_assert_str_eq(th_js(r.json, "outcome"), "cancelled");
    th_resp_free(&r);
    th_sql_int(c, "UPDATE runs SET status = 'completed', outcome = 'succeeded', completed_at = "
                  "now(), approval_state = NULL WHERE id = 'w-1.n.s' RETURNING 1");
    ck_assert_int_eq(th_sql_int(c, "SELECT count(DISTINCT workflow_id) FROM wf_due WHERE "
                                   "workflow_id IN ('w-1', 'w-1.n')"),
                     2);
    th_sql_int(hold, "COMMIT; SELECT 1");
    for (i = 0; i < 200 && th_sql_int(c, "SELECT count(*) FROM runs WHERE id = 'w-1.n' AND "
                                         "status = 'completed'") == 0;
         i++)
        th_sleep_ms(50);
    th_sleep_ms(600);
    n = th_get_run(&p, "w-1.n");
    ck_assert_str_eq(th_js(n, "outcome"), "cancelled");
    check_step(n, "s", "succeeded");
    check_step(n, "t", "skipped");
    json_decref(n);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM runs WHERE id = 'w-1.n.t'"), 0);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM wf_due"), 0);
    PQfinish(hold);
    PQfinish(c);
    free(id);
    th_stop_clean(&p);
}
END_TEST

/* Workflows of one id in two tenants, advanced by one statement, where the
 * first step's id is taken in one tenant only: that tenant's workflow
 * fails the step (the run there is left alone) and goes on, the other's
 * runs its step. */
START_TEST(one_id_in_two_tenants)
{
    struct th_proc p;
    const char *ci = th_start_fresh(&p, "e2e_wf_tenants2", RACE_CONFIG);
    PGconn *c = th_pg(ci);
    int i;

    th_sql_int(c, "INSERT INTO runs (tenant, id, type, status, outcome, max_attempts, timeout_s, "
                  "input, identity_hash, request_hash, completed_at) VALUES ('a', 'x-1.s', 'leaf', "
                  "'completed', 'succeeded', 1, 60, '{}', 'taken-ih', 'taken-rh', now()) "
                  "RETURNING 1");
    th_sql_int(c, "WITH i AS (INSERT INTO runs (tenant, id, type, max_attempts, timeout_s, input, "
                  "identity_hash, request_hash, reacts) SELECT t, 'x-1', 'pair', 1, 60, '{}', "
                  "'ih-' || t, 'rh-' || t, (SELECT reacts FROM run_type_rules WHERE type = "
                  "'pair') FROM unnest(ARRAY['a', 'b']) AS t RETURNING 1) SELECT count(*) FROM i");
    for (i = 0; i < 200 && th_sql_int(c, "SELECT count(*) FROM runs WHERE id = 'x-1' AND status "
                                         "= 'completed'") < 2;
         i++)
        th_sleep_ms(50);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM runs WHERE tenant = 'a' AND id = 'x-1' "
                                   "AND outcome = 'partially_succeeded' AND wf_steps -> 's' ->> "
                                   "'state' = 'failed' AND wf_steps -> 'after' ->> 'state' = "
                                   "'succeeded'"),
                     1);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM runs WHERE tenant = 'b' AND id = 'x-1' "
                                   "AND outcome = 'succeeded' AND wf_steps -> 's' ->> 'state' = "
                                   "'succeeded' AND wf_steps -> 'after' ->> 'state' = 'skipped'"),
                     1);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM runs WHERE tenant = 'a' AND id = "
                                   "'x-1.s' AND type = 'leaf' AND parent_id IS NULL"),
                     1);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM run_events WHERE tenant = 'a' AND "
                                   "run_id = 'x-1.s'"),
                     0);
    PQfinish(c);
    th_stop_clean(&p);
}
END_TEST

/* Two steps whose type has a follow-up end in one statement: each step's
 * follow-up is made by a statement within that one (a trigger's), which
 * advances the workflows it notes itself, not those the statement around
 * it noted: each workflow's step event comes after its step's follow-up
 * event, as when steps end one by one. */
START_TEST(follow_ups_of_steps_ending_together)
{
    struct th_proc p;
    const char *ci = th_start_fresh(&p, "e2e_wf_depth", RACE_CONFIG);
    PGconn *c = th_pg(ci);
    char *a = th_submit(&p, "{\"alert_type\": \"fw\", \"run_id\": \"f-1\"}", 202);
    char *b = th_submit(&p, "{\"alert_type\": \"fw\", \"run_id\": \"f-2\"}", 202);
    int i;

    ck_assert(th_wait_status(&p, "f-1.s", "waiting", 10000));
    ck_assert(th_wait_status(&p, "f-2.s", "waiting", 10000));
    ck_assert_int_eq(th_sql_int(c, "WITH u AS (UPDATE runs SET status = 'completed', outcome = "
                                   "'succeeded', completed_at = now(), approval_state = NULL "
                                   "WHERE id IN ('f-1.s', 'f-2.s') RETURNING 1) SELECT count(*) "
                                   "FROM u"),
                     2);
    for (i = 0; i < 200 && th_sql_int(c, "SELECT count(*) FROM runs WHERE id IN ('f-1', 'f-2') "
                                         "AND status = 'completed'") < 2;
         i++)
        th_sleep_ms(50);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM runs w WHERE w.id IN ('f-1', 'f-2') AND "
                                   "w.outcome = 'succeeded' AND (SELECT min(e.id) FROM "
                                   "run_events e WHERE e.run_id = w.id || '.s' AND e.type = "
                                   "'follow_up') < (SELECT min(e.id) FROM run_events e WHERE "
                                   "e.run_id = w.id AND e.type = 'step' AND e.message LIKE 's "
                                   "succeeded%%')"),
                     2);
    free(a);
    free(b);
    PQfinish(c);
    th_stop_clean(&p);
}
END_TEST

#define BIG_CONFIG                                                                                 \
    "{\"run_types\": {\"nop\": {\"action\": \"simulate\", \"params\": {\"duration_ms\": 0, "       \
    "\"steps\": 0}}, \"grow\": {\"action\": \"workflow\", \"params\": {\"steps\": {"               \
    "\"a\": {\"run_type\": \"nop\", \"data\": {\"p\": \"{{input:/big}}\"}},"                       \
    "\"b\": {\"run_type\": \"nop\", \"needs\": [\"a\"], \"data\": {\"p\": \"{{steps.a:}}\", "      \
    "\"q\": \"{{steps.a:}}\"}},"                                                                   \
    "\"c\": {\"run_type\": \"nop\", \"needs\": [\"b\"], \"data\": {\"p\": \"{{steps.b:}}\", "      \
    "\"q\": \"{{steps.b:}}\"}},"                                                                   \
    "\"d\": {\"run_type\": \"nop\", \"needs\": [\"c\"], \"data\": {\"p\": \"{{steps.c:}}\", "      \
    "\"q\": \"{{steps.c:}}\"}}}}}}}"

/* A step's input is bounded: data that doubles at each step fails the
 * step whose input would pass 1 MiB, and the workflow ends. */
START_TEST(step_input_bounded)
{
    struct th_proc p;
    const char *ci = th_start_fresh(&p, "e2e_wf_big", BIG_CONFIG);
    PGconn *c = th_pg(ci);
    size_t n = 200 * 1024;
    char *body = malloc(n + 128), *id;
    json_t *run;

    n = (size_t)snprintf(body, 128,
                         "{\"alert_type\": \"grow\", \"run_id\": \"g-1\", \"data\": "
                         "{\"big\": \"");
    memset(body + n, 'x', 200 * 1024);
    n += 200 * 1024;
    snprintf(body + n, 128, "\"}}");
    id = th_submit(&p, body, 202);
    run = th_wait_done(&p, id, 30);
    ck_assert_str_eq(th_js(run, "outcome"), "partially_succeeded");
    check_step(run, "b", "succeeded");
    check_step(run, "c", "succeeded");
    check_step(run, "d", "failed");
    json_decref(run);
    ck_assert_int_gt(th_sql_int(c, "SELECT octet_length(input::text) FROM runs WHERE id = "
                                   "'g-1.c'"),
                     800 * 1024);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM runs WHERE id = 'g-1.d' AND error ->> "
                                   "'code' = 'invalid_step_data' AND error ->> 'message' LIKE "
                                   "'%%more than 1 MiB' AND input = '{}'"),
                     1);
    PQfinish(c);
    free(body);
    free(id);
    th_stop_clean(&p);
}
END_TEST

/* GET /stream?parent_id=W: the snapshots of W's active steps, then their
 * events, and nothing of W itself nor of another workflow's steps; a bad
 * parent_id is 400. */
START_TEST(stream_of_a_workflows_steps)
{
    struct th_proc p;
    const char *ci = th_start_fresh(&p, "e2e_wf_stream", KILL_CONFIG);
    PGconn *c = th_pg(ci);
    char *id = th_submit(&p, "{\"alert_type\": \"two\", \"run_id\": \"s-1\"}", 202), *other;
    struct th_sse *s;
    struct th_sse_event ev;
    int snapshots = 0, ends = 0;
    bool second = false;
    struct th_resp r;

    ck_assert(th_wait_status(&p, "s-1.first", "running", 10000));
    s = th_sse_open(p.port, "/stream?parent_id=s-1", NULL, 0);
    ck_assert_int_eq(s->status, 200);
    other = th_submit(&p, "{\"alert_type\": \"two\", \"run_id\": \"s-2\"}", 202);
    for (long long t0 = th_now_ms(); th_now_ms() - t0 < 20000 && ends < 3;) {
        const char *rid;
        int got = th_sse_next(s, &ev, 2000);
        if (got < 0)
            break;
        if (got == 0)
            continue;
        rid = ev.json ? th_js(ev.json, "id") : NULL;
        ck_assert_msg(rid && strncmp(rid, "s-1.", 4) == 0, "a frame of %s on s-1's stream",
                      rid ? rid : ev.data);
        ck_assert_str_eq(th_js(ev.json, "parent_id"), "s-1");
        snapshots += strcmp(ev.event, "snapshot") == 0;
        second = second || strcmp(rid, "s-1.second") == 0;
        ends += th_streq(th_js(ev.json, "status"), "completed");
        th_sse_event_free(&ev);
    }
    ck_assert_int_ge(snapshots, 2); /* first and other, active at connect */
    ck_assert_int_eq(ends, 3);      /* first, other, second */
    ck_assert(second);
    th_sse_close(s);
    th_get(p.url, "/stream?parent_id=", &r);
    ck_assert_int_eq(r.status, 400);
    th_resp_free(&r);
    th_expect_outcome(&p, id, "succeeded", 30);
    th_expect_outcome(&p, other, "succeeded", 30);
    PQfinish(c);
    free(id);
    free(other);
    th_stop_clean(&p);
}
END_TEST

/* opsrun watch on a workflow: each step's state as it changes, in the
 * order a step moves on (never back), then the workflow's end. */
START_TEST(watch_a_workflow)
{
    struct th_proc p;
    struct cli c;
    char *id, *steps;

    th_start_fresh(&p, "e2e_wf_watch", KILL_CONFIG);
    id = th_submit(&p, "{\"alert_type\": \"two\", \"run_id\": \"v-1\"}", 202);
    CLI(&c, p.url, 0, "watch", "v-1");
    steps = cli_lines_with(c.out, "step      ", true);
    /* first and other run side by side, then second */
    ck_assert_msg(strstr(steps, "step      first  running\n") &&
                      strstr(steps, "step      other  running\n") &&
                      strstr(steps, "step      first  succeeded\n") &&
                      strstr(steps, "step      other  succeeded\n") &&
                      strstr(steps, "step      second  succeeded\n"),
                  "watch printed:\n%s", c.out);
    ck_assert(strstr(steps, "step      first  running\n") <
              strstr(steps, "step      first  succeeded\n"));
    ck_assert_ptr_null(
        strstr(strstr(steps, "step      first  succeeded\n"), "step      first  running\n"));
    ck_assert_msg(strstr(c.out, "run v-1 succeeded\n"), "%s", c.out);
    free(steps);
    cli_free(&c);
    free(id);
    th_stop_clean(&p);
}
END_TEST

static Suite *workflows_suite(void)
{
    Suite *s = suite_create("workflows");
    TCase *tc = tcase_create("workflows");

    tcase_set_timeout(tc, 180);
    tcase_add_test(tc, disk_full_every_branch);
    tcase_add_test(tc, join_made_once_on_two_replicas);
    tcase_add_test(tc, marker_outlives_a_killed_replica);
    tcase_add_test(tc, cancel_reaches_every_step);
    tcase_add_test(tc, tenant_and_approval);
    tcase_add_test(tc, nested_workflow);
    tcase_add_test(tc, retry_reuses_succeeded_steps);
    tcase_add_test(tc, step_input_bounded);
    tcase_add_test(tc, steps_that_end_as_they_are_made);
    tcase_add_test(tc, a_statement_ending_many_steps);
    tcase_add_test(tc, a_stop_then_an_advance_in_one_sweep);
    tcase_add_test(tc, one_id_in_two_tenants);
    tcase_add_test(tc, follow_ups_of_steps_ending_together);
    tcase_add_test(tc, stream_of_a_workflows_steps);
    tcase_add_test(tc, watch_a_workflow);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return th_run_suite(workflows_suite());
}
