/* tests/e2e/test_shell_query.c — the whole shell-query flow of soap_job
 * against the fake SOAP and REST APIs (tests/support/fake_jobs.c): a run
 * creates a temporary data extension and a query definition (preparation
 * steps), performs the query, polls it, and deletes both however it ends.
 * Every end is covered (complete, error, remote cancel, stuck past the
 * budget, rows seen early, faults, malformed XML, not ready, refused
 * creates and performs, a transient failure half-way through preparation),
 * then a user's cancel and a SIGKILL during preparation and during polling:
 * every object created is deleted exactly once. The same preparation shape
 * is checked for rest_job. */
#include "../support/fake_jobs.h"
#include "../support/harness.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_port;

static void setup(void)
{
    g_port = fake_jobs_start();
}

static void teardown(void)
{
    fake_jobs_stop();
}

/* A SOAP request description: SOAPAction action, body inner. */
static json_t *soap_request(const char *action, const char *inner)
{
    char url[96], *text = NULL;
    json_t *r;

    snprintf(url, sizeof(url), "http://127.0.0.1:%d/soap", g_port);
    if (asprintf(&text,
                 "<soap:Envelope xmlns:soap=\"http://schemas.xmlsoap.org/soap/envelope/\" "
                 "xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\">"
                 "<soap:Body>%s</soap:Body></soap:Envelope>",
                 inner) < 0)
        abort();
    r = json_pack("{s:s, s:s, s:{s:s}, s:s, s:b, s:i}", "method", "POST", "url", url, "headers",
                  "SOAPAction", action, "body_text", text, "xml_escape", 1, "timeout_ms", 10000);
    free(text);
    return r;
}

static json_t *rest_helper(const char *what, const char *pointer, json_t *nums)
{
    char url[128];
    json_t *h;

    snprintf(url, sizeof(url), "http://127.0.0.1:%d/rest/%s/{{state:query_id}}", g_port, what);
    h = json_pack("{s:{s:s}, s:s}", "request", "url", url, "pointer", pointer);
    json_object_update(h, nums);
    json_decref(nums);
    return h;
}

#define CREATE(type, fields)                                                                       \
    "<CreateRequest xmlns=\"urn:fake\"><Objects xsi:type=\"" type "\">"                            \
    "<CustomerKey>" fields "</CustomerKey><Scenario>{{input:/scenario}}</Scenario>"                \
    "<Run>{{run_id}}</Run></Objects></CreateRequest>"
#define DELETE(type, key)                                                                          \
    "<DeleteRequest xmlns=\"urn:fake\"><Objects xsi:type=\"" type "\"><CustomerKey>" key           \
    "</CustomerKey></Objects></DeleteRequest>"

/* The soap_job params of the flow: create the data extension (by a key
 * derived from the run id), create the query definition (capture its
 * ObjectID), perform it, poll, delete both by key. */
static json_t *shell_params(void)
{
    json_t *prepare = json_pack(
        "[{s:s, s:o, s:{s:s}, s:o}, {s:s, s:o, s:{s:s}, s:o}]", "name", "create_de", "request",
        soap_request("Create", CREATE("DataExtension", "de-{{run_id}}")), "capture", "de_id",
        "//f:NewObjectID", "cleanup",
        soap_request("Delete", DELETE("DataExtension", "de-{{run_id}}")), "name", "create_query",
        "request", soap_request("Create", CREATE("QueryDefinition", "qd-{{run_id}}")), "capture",
        "query_id", "//f:NewObjectID", "cleanup",
        soap_request("Delete", DELETE("QueryDefinition", "qd-{{run_id}}")));

    return json_pack(
        "{s:{s:s}, s:o, s:o, s:s, s:o, s:s, s:s, s:o, s:o, s:o}", "namespaces", "f", "urn:fake",
        "prepare", prepare, "start",
        soap_request("Perform", "<PerformRequestMsg xmlns=\"urn:fake\"><Definition>"
                                "<ObjectID>{{state:query_id}}</ObjectID></Definition><Scenario>"
                                "{{input:/scenario}}</Scenario><Run>{{run_id}}</Run>"
                                "</PerformRequestMsg>"),
        "task_id_xpath", "//f:Task/f:ID", "status",
        soap_request("Retrieve", "<RetrieveRequestMsg xmlns=\"urn:fake\"><TaskID>{{external_id}}"
                                 "</TaskID></RetrieveRequestMsg>"),
        "status_xpath", "//f:Property[f:Name='Status']/f:Value", "error_xpath",
        "//f:Property[f:Name='ErrorMsg']/f:Value", "is_running",
        rest_helper("isrunning", "/isRunning",
                    json_pack("{s:i, s:i, s:i, s:i}", "confirmations", 2, "min_gap_s", 1,
                              "after_completed_date_s", 0, "stuck_after_s", 2)),
        "row_probe",
        rest_helper("probe", "/count",
                    json_pack("{s:i, s:i}", "min_runtime_s", 0, "min_interval_s", 1)),
        "readiness",
        rest_helper("rowset", "/ready",
                    json_pack("{s:i, s:i, s:i}", "max_attempts", 3, "initial_delay_ms", 100,
                              "max_delay_ms", 200)));
}

static json_t *poll_policy(int max_checks)
{
    return json_pack("{s:i, s:i, s:i, s:i, s:i, s:i}", "initial_delay_ms", 100, "max_delay_ms", 200,
                     "jitter_pct", 0, "max_checks", max_checks, "max_duration_s", 60,
                     "check_timeout_s", 2);
}

/* "shell" (the flow), "shell_short" (the same with a budget of 4 checks)
 * and "jobprep" (rest_job with a preparation step) on db. */
static void start_on(struct th_proc *p, const char *conninfo, const char *name)
{
    char url[128], sub[128], res[128], del[128];
    json_t *params = shell_params(), *cfg, *jobprep;
    char *text, *path;
    const char *args[3];

    snprintf(url, sizeof(url), "http://127.0.0.1:%d/jobs", g_port);
    snprintf(sub, sizeof(sub), "http://127.0.0.1:%d/jobs/{{external_id}}", g_port);
    snprintf(res, sizeof(res), "http://127.0.0.1:%d/jobs/{{state:res_id}}", g_port);
    snprintf(del, sizeof(del), "http://127.0.0.1:%d/jobs/{{external_id}}", g_port);
    jobprep = json_pack(
        "{s:[{s:s, s:{s:s, s:s, s:{s:s, s:s}}, s:{s:s}, s:{s:s, s:s}}], s:{s:s, s:s, s:{s:s, s:s}},"
        " s:s, s:{s:s}, s:s, s:{s:s, s:s, s:s}, s:{s:s, s:s}}",
        "prepare", "name", "make_resource", "request", "method", "POST", "url", url, "body",
        "scenario", "resource", "run", "{{run_id}}-res", "capture", "res_id", "/id", "cleanup",
        "method", "DELETE", "url", res, "submit", "method", "POST", "url", url, "body", "scenario",
        "{{input:/scenario}}", "run", "{{run_id}}", "id_pointer", "/id", "status", "url", sub,
        "state_pointer", "/state", "state_map", "RUNNING", "running", "DONE", "succeeded", "FAILED",
        "failed", "cleanup", "method", "DELETE", "url", del);
    ck_assert_ptr_nonnull(jobprep);
    cfg = json_pack("{s:{s:i, s:i, s:i}, s:{s:i}, s:{s:{s:s, s:i, s:i, s:o, s:O},"
                    " s:{s:s, s:i, s:i, s:o, s:O}, s:{s:s, s:i, s:i, s:o, s:o}}}",
                    "queue", "heartbeat_interval_s", 1, "orphan_after_s", 3,
                    "orphan_scan_interval_s", 1, "poller", "interval_ms", 200, "run_types", "shell",
                    "action", "soap_job", "max_attempts", 2, "retry_backoff_ms", 50, "poll",
                    poll_policy(300), "params", params, "shell_short", "action", "soap_job",
                    "max_attempts", 2, "retry_backoff_ms", 50, "poll", poll_policy(4), "params",
                    params, "jobprep", "action", "rest_job", "max_attempts", 2, "retry_backoff_ms",
                    50, "poll", poll_policy(300), "params", jobprep);
    ck_assert_ptr_nonnull(cfg);
    text = json_dumps(cfg, 0);
    path = th_config_file(name, text);
    args[0] = "--config", args[1] = path, args[2] = NULL;
    th_start(p, conninfo, args, NULL);
    json_decref(cfg);
    json_decref(params);
    free(text);
    free(path);
}

static const char *start_fresh(struct th_proc *p, const char *db)
{
    static char conninfo[512];
    char *ci = th_db_create(db);

    snprintf(conninfo, sizeof(conninfo), "%s", ci);
    free(ci);
    start_on(p, conninfo, db);
    return conninfo;
}

static char *submit_to(const struct th_proc *p, const char *type, const char *run_id,
                       const char *scenario)
{
    char body[512];

    snprintf(body, sizeof(body),
             "{\"alert_type\":\"%s\",\"run_id\":\"%s\",\"data\":{\"scenario\":\"%s\"}}", type,
             run_id, scenario);
    return th_submit(p, body, 202);
}

/* Waits until every object created for run was deleted; asserts that each
 * was deleted exactly once and that there are want of them. */
static void expect_cleaned(const char *run, int want)
{
    struct fake_object o[16];
    int n = 0;
    bool all = false;

    for (long long until = th_now_ms() + 15000; th_now_ms() < until && !all; th_sleep_ms(50)) {
        n = fake_objects_of(run, o, 16);
        all = true;
        for (int i = 0; i < n; i++)
            all = all && o[i].deleted >= 1;
    }
    th_sleep_ms(300); /* a second delete would come now, if any */
    n = fake_objects_of(run, o, 16);
    ck_assert_msg(n == want, "run %s: %d objects created, want %d", run, n, want);
    for (int i = 0; i < n; i++)
        ck_assert_msg(o[i].deleted == 1, "run %s: %s %s deleted %d times", run, o[i].kind, o[i].key,
                      o[i].deleted);
}

/* complete: the request sequence is exactly create, create, perform,
 * retrieve until Complete, the readiness check, then the deletes in
 * reverse order; the result shows the captured ids, not the record. */
START_TEST(complete_sequence)
{
    struct th_proc p;
    char log[4096], want[1024];
    struct fake_object o[4];
    json_t *run;
    char *id;

    start_fresh(&p, "e2e_shell_complete");
    id = submit_to(&p, "shell", "sq-1", "soap_done:3,ready_after:1");
    run = th_wait_done(&p, id, 30);
    ck_assert_str_eq(th_js(run, "outcome"), "succeeded");
    expect_cleaned("sq-1", 2);
    ck_assert_int_eq(fake_objects_of("sq-1", o, 4), 2);
    ck_assert_str_eq(th_js(json_object_get(run, "result"), "query_id"), o[1].object_id);
    ck_assert_str_eq(th_js(json_object_get(run, "result"), "de_id"), o[0].object_id);
    ck_assert_ptr_null(json_object_get(json_object_get(run, "result"), "prepared"));
    fake_jobs_log("sq-1", log, sizeof(log));
    fprintf(stderr, "the requests of run sq-1:\n%s\n", log);
    snprintf(want, sizeof(want),
             "Create DataExtension de-sq-1\nCreate QueryDefinition qd-sq-1\nPerform %s\n"
             "Retrieve job-1\nGET /rest/probe/%s\nRetrieve job-1\nRetrieve job-1\n"
             "GET /rest/rowset/%s\nDelete QueryDefinition qd-sq-1\nDelete DataExtension de-sq-1",
             o[1].object_id, o[1].object_id, o[1].object_id);
    ck_assert_str_eq(log, want);
    json_decref(run);
    free(id);
    th_stop_clean(&p);
}
END_TEST

/* Every other end, each with what it created deleted exactly once. */
START_TEST(every_end_cleans_up)
{
    static const struct {
        const char *type, *run, *scenario, *outcome, *code, *msg;
        int objects;
    } cases[] = {
        {"shell", "e-error", "soap_error:2", "failed", "remote_failed", "syntax error near FROM",
         2},
        {"shell", "e-canceled", "soap_canceled:2", "cancelled", "remote_cancelled", "cancelled", 2},
        {"shell_short", "e-stuck", "soap_stuck,running_for:1000", "timed_out", "poll_budget",
         "after 4 checks", 2},
        {"shell", "e-rows", "soap_stuck,running_for:1000,probe_rows:2", "succeeded", NULL, NULL, 2},
        {"shell", "e-fault", "soap_fault_server:2,soap_done:3", "succeeded", NULL, NULL, 2},
        {"shell", "e-malformed", "soap_malformed:1,soap_done:2", "succeeded", NULL, NULL, 2},
        {"shell", "e-notready", "soap_done:1,never_ready", "failed", "not_ready",
         "not ready after 3", 2},
        {"shell", "e-qd-error", "create_qd_error", "failed", "soap_status_error",
         "StatusCode Error: An error occurred while checking the query syntax (ErrorCode "
         "180008)",
         1},
        {"shell", "e-de-error", "create_de_error", "failed", "soap_status_error",
         "Data extension name is already in use", 0},
        {"shell", "e-perform", "perform_error", "failed", "soap_status_error",
         "column \"Email\" is ambiguous", 2},
        /* a transient fault half-way: attempt 1 leaves its data extension,
         * attempt 2 deletes it first, then prepares anew */
        {"shell", "e-retry", "create_qd_fault:1,soap_done:1", "succeeded", NULL, NULL, 3},
    };
    struct th_proc p;
    char *ids[sizeof(cases) / sizeof(cases[0])];

    start_fresh(&p, "e2e_shell_ends");
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        ids[i] = submit_to(&p, cases[i].type, cases[i].run, cases[i].scenario);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *run = th_wait_done(&p, ids[i], 40), *err = json_object_get(run, "error");
        ck_assert_msg(th_streq(th_js(run, "outcome"), cases[i].outcome), "%s: %s (%s)",
                      cases[i].run, th_js(run, "outcome"), th_js(err, "message"));
        if (cases[i].code) {
            ck_assert_msg(th_streq(th_js(err, "code"), cases[i].code), "%s: code %s", cases[i].run,
                          th_js(err, "code"));
            ck_assert_msg(strstr(th_js(err, "message"), cases[i].msg), "%s: %s", cases[i].run,
                          th_js(err, "message"));
        }
        expect_cleaned(cases[i].run, cases[i].objects);
        json_decref(run);
        free(ids[i]);
    }
    {
        json_t *run = th_get_run(&p, "e-qd-error");
        json_t *remote = json_object_get(json_object_get(run, "error"), "remote");
        ck_assert_str_eq(th_js(remote, "status_code"), "Error");
        ck_assert_str_eq(th_js(remote, "error_code"), "180008");
        ck_assert_str_eq(th_js(remote, "overall_status"), "Error");
        json_decref(run);
    }
    th_stop_clean(&p);
}
END_TEST

/* Waits until the fake has n objects for run. */
static void wait_objects(const char *run, int n)
{
    struct fake_object o[8];

    for (long long until = th_now_ms() + 10000; th_now_ms() < until; th_sleep_ms(20))
        if (fake_objects_of(run, o, 8) >= n)
            return;
    ck_abort_msg("run %s never created %d objects", run, n);
}

/* A cancel while the query definition's create is in flight: the run ends
 * cancelled at once, and both objects are deleted (the query definition
 * by its key, though its answer never came). Nothing is performed. */
START_TEST(cancel_during_prepare)
{
    struct th_proc p;
    struct th_resp r;
    char log[4096];
    json_t *run;
    char *id;
    long long t0;

    start_fresh(&p, "e2e_shell_cancel");
    id = submit_to(&p, "shell", "c-1", "create_qd_slow:5000,soap_done:1");
    wait_objects("c-1", 2);
    t0 = th_now_ms();
    th_post_json(p.url, "/runs/c-1/cancel", "{}", &r);
    ck_assert_int_eq(r.status, 202); /* a run in progress is asked to stop */
    th_resp_free(&r);
    run = th_wait_done(&p, id, 10);
    ck_assert_str_eq(th_js(run, "outcome"), "cancelled");
    ck_assert_msg(th_now_ms() - t0 < 4000, "the cancel took %lld ms", th_now_ms() - t0);
    expect_cleaned("c-1", 2);
    fake_jobs_log("c-1", log, sizeof(log));
    ck_assert_msg(!strstr(log, "Perform"), "performed after a cancel:\n%s", log);
    json_decref(run);
    free(id);
    th_stop_clean(&p);
}
END_TEST

/* SIGKILL while the query definition's create is in flight: another
 * process rescues the run, its second attempt deletes what the first left
 * (the data extension, and the query definition by key), prepares again and
 * succeeds, and then deletes its own: each object exactly once. */
START_TEST(killed_during_prepare)
{
    struct th_proc a, b;
    const char *ci = start_fresh(&a, "e2e_shell_kill_prep");
    char conninfo[512], log[4096];
    json_t *run;
    char *id;

    snprintf(conninfo, sizeof(conninfo), "%s", ci);
    id = submit_to(&a, "shell", "k-1", "create_qd_slow:2000,soap_done:2");
    wait_objects("k-1", 2);
    kill(a.pid, SIGKILL);
    th_stop(&a, SIGKILL, 5);
    start_on(&b, conninfo, "e2e_shell_kill_prep_b");
    run = th_wait_done(&b, id, 60);
    ck_assert_str_eq(th_js(run, "outcome"), "succeeded");
    ck_assert_int_eq(th_ji(run, "attempt"), 2);
    expect_cleaned("k-1", 4);
    fake_jobs_log("k-1", log, sizeof(log));
    fprintf(stderr, "the requests of run k-1 (killed during preparation):\n%s\n", log);
    json_decref(run);
    free(id);
    th_stop_clean(&b);
}
END_TEST

/* SIGKILL while the run waits on its task: another process checks it once
 * the check's lease ends, and the run's end deletes each object once. */
START_TEST(killed_while_polling)
{
    struct th_proc a, b;
    const char *ci = start_fresh(&a, "e2e_shell_kill_poll");
    char conninfo[512];
    struct fake_job j = {0};
    json_t *run;
    char *id;

    snprintf(conninfo, sizeof(conninfo), "%s", ci);
    id = submit_to(&a, "shell", "kp-1", "soap_done:6,ready_after:1");
    for (long long until = th_now_ms() + 10000; th_now_ms() < until; th_sleep_ms(20))
        if (fake_jobs_get("kp-1", &j) && j.checks >= 2)
            break;
    ck_assert_int_ge(j.checks, 2);
    kill(a.pid, SIGKILL);
    th_stop(&a, SIGKILL, 5);
    {
        struct fake_object o[4];
        int n = fake_objects_of("kp-1", o, 4);
        ck_assert_int_eq(n, 2);
        ck_assert_int_eq(o[0].deleted + o[1].deleted, 0);
    }
    start_on(&b, conninfo, "e2e_shell_kill_poll_b");
    run = th_wait_done(&b, id, 60);
    ck_assert_str_eq(th_js(run, "outcome"), "succeeded");
    expect_cleaned("kp-1", 2);
    json_decref(run);
    free(id);
    th_stop_clean(&b);
}
END_TEST

/* rest_job with a preparation step (a resource job made first, deleted at
 * the end): on success, and when the submit is refused. */
START_TEST(rest_job_prepare)
{
    struct th_proc p;
    struct fake_job res, job;
    json_t *run;
    char *ok, *bad;

    start_fresh(&p, "e2e_shell_rest");
    ok = submit_to(&p, "jobprep", "rp-ok", "done_after:2");
    bad = submit_to(&p, "jobprep", "rp-bad", "submit_400");
    run = th_wait_done(&p, ok, 30);
    ck_assert_str_eq(th_js(run, "outcome"), "succeeded");
    json_decref(run);
    run = th_wait_done(&p, bad, 30);
    ck_assert_str_eq(th_js(run, "outcome"), "failed");
    json_decref(run);
    for (long long until = th_now_ms() + 10000; th_now_ms() < until; th_sleep_ms(50))
        if (fake_jobs_get("rp-ok-res", &res) && res.cleanups == 1 &&
            fake_jobs_get("rp-bad-res", &res) && res.cleanups == 1)
            break;
    ck_assert(fake_jobs_get("rp-ok-res", &res));
    ck_assert_int_eq(res.cleanups, 1);
    ck_assert(fake_jobs_get("rp-ok", &job));
    ck_assert_int_eq(job.cleanups, 1);
    ck_assert(fake_jobs_get("rp-bad-res", &res));
    ck_assert_int_eq(res.cleanups, 1);
    free(ok);
    free(bad);
    th_stop_clean(&p);
}
END_TEST

static Suite *shell_suite(void)
{
    Suite *s = suite_create("e2e_shell_query");
    const struct {
        const char *name;
        const TTest *fn;
        int timeout;
    } cases[] = {
        {"complete_sequence", complete_sequence, 60},
        {"every_end_cleans_up", every_end_cleans_up, 120},
        {"cancel_during_prepare", cancel_during_prepare, 60},
        {"killed_during_prepare", killed_during_prepare, 120},
        {"killed_while_polling", killed_while_polling, 120},
        {"rest_job_prepare", rest_job_prepare, 60},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        TCase *tc = tcase_create(cases[i].name);
        tcase_set_timeout(tc, cases[i].timeout);
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, cases[i].fn);
        suite_add_tcase(s, tc);
    }
    return s;
}

int main(void)
{
    return th_run_suite(shell_suite());
}
