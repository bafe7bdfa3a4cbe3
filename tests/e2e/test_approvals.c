/* tests/e2e/test_approvals.c — runs that wait for a person (docs/api.md,
 * "Approvals") on real processes: approve (the run then starts and
 * completes), reject, expiry with each on_timeout and on time on another
 * replica than the one that made the run, deciders racing on two replicas
 * (exactly one wins), cancel while pending, the scope and the tenants, a
 * pending run across a restart, the list filter, and that such a run never reaches the
 * poller. Times are read from the run objects, which the database's clock
 * writes. */
#include "../support/harness.h"
#include "../support/receiver.h"
#include "../support/reload.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/time_rfc3339.h"

/* Tokens: an approver and an operator of acme, an approver of another
 * tenant, and an admin. */
#define T_APPROVER "opsrun_e2e-approver-acme-000000000000"
#define T_OPS "opsrun_e2e-ops-acme-1111111111111111111"
#define T_OTHER "opsrun_e2e-approver-other-22222222222"
#define T_ROOT "opsrun_e2e-root-admin-3333333333333333"

/* A configuration with the run types gated (reject after timeout_s) and
 * gated_ok (approve after timeout_s), both a short simulate; with tokens
 * when auth is true. */
static char *config(int timeout_s, bool auth)
{
    static const struct th_token t[] = {
        {"approver", "acme", "\"approve\", \"read\"", T_APPROVER},
        {"ops", "acme", "\"submit\", \"read\", \"cancel\"", T_OPS},
        {"other-approver", "other", "\"approve\", \"read\", \"submit\"", T_OTHER},
        {"root", "ops", "\"admin\"", T_ROOT},
    };
    char *out = malloc(8192);
    size_t n = 0;

    n += (size_t)snprintf(out + n, 8192 - n,
                          "{\"run_types\": {"
                          "\"gated\": {\"action\": \"simulate\", \"params\": {\"duration_ms\": 50, "
                          "\"steps\": 1}, \"approval\": {\"timeout_s\": %d}},"
                          "\"gated_ok\": {\"action\": \"simulate\", \"params\": {\"duration_ms\": "
                          "50, \"steps\": 1}, \"approval\": {\"timeout_s\": %d, \"on_timeout\": "
                          "\"approve\"}}}",
                          timeout_s, timeout_s);
    if (auth) {
        char *tokens = th_auth_tokens(t, sizeof(t) / sizeof(t[0]));
        n += (size_t)snprintf(out + n, 8192 - n, ", %s", tokens);
        free(tokens);
    }
    snprintf(out + n, 8192 - n, "}");
    return out;
}

/* Starts p on a fresh database db; returns its conninfo (harness-owned). */
static const char *start_fresh(struct th_proc *p, const char *db, int timeout_s, bool auth)
{
    char *c = config(timeout_s, auth);
    const char *ci = th_start_fresh(p, db, c);

    free(c);
    return ci;
}

static void decide(const struct th_proc *p, const char *id, const char *what, const char *token,
                   const char *body, long want, struct th_resp *r)
{
    char path[256];

    snprintf(path, sizeof(path), "/runs/%s/%s", id, what);
    th_post_expect(p, path, token, body, want, r);
}

static char *submit_as(const struct th_proc *p, const char *token, const char *type, int i)
{
    char body[256];
    struct th_resp r;
    char *id;

    snprintf(body, sizeof(body), "{\"alert_type\": \"%s\", \"data\": {\"i\": %d}}", type, i);
    th_post_expect(p, "/alerts", token, body, 202, &r);
    id = strdup(th_js(r.json, "run_id"));
    ck_assert_str_eq(th_js(r.json, "status"), "waiting");
    th_resp_free(&r);
    return id;
}

static char *submit(const struct th_proc *p, const char *type, int i)
{
    return submit_as(p, NULL, type, i);
}

static const json_t *approval(const json_t *run)
{
    const json_t *a = json_object_get(run, "approval");

    ck_assert_msg(json_is_object(a), "no approval in %s", json_dumps(run, 0));
    return a;
}

/* Microseconds between two RFC 3339 members. */
static long long us_between(const json_t *a, const char *ka, const json_t *b, const char *kb)
{
    int64_t x, y;

    ck_assert(time_parse_rfc3339(th_js(a, ka), &x));
    ck_assert(time_parse_rfc3339(th_js(b, kb), &y));
    return (long long)(y - x);
}

/* The messages of a run's events, joined with "|". */
static char *event_messages(const struct th_proc *p, const char *id)
{
    char path[256], *out = calloc(1, 4096);
    struct th_resp r;
    size_t i;
    json_t *e;

    snprintf(path, sizeof(path), "/runs/%s/events", id);
    th_get(p->url, path, &r);
    ck_assert_int_eq(r.status, 200);
    json_array_foreach(json_object_get(r.json, "events"), i, e)
    {
        strncat(out, i ? "|" : "", 4095 - strlen(out));
        strncat(out, th_js(e, "message") ? th_js(e, "message") : "-", 4095 - strlen(out));
    }
    th_resp_free(&r);
    return out;
}

/* The count of what (a FROM and WHERE clause over run id) for run id. */
static long long sql_count(const char *conninfo, const char *what, const char *id)
{
    PGconn *c = th_pg(conninfo);
    long long v = th_sql_int(c, "SELECT count(*) FROM %s '%s'", what, id);

    PQfinish(c);
    return v;
}

/* A new run waits, pending, with no worker and no poll schedule; approved,
 * it is queued with the decision recorded, starts and succeeds. */
START_TEST(approve_starts_the_run)
{
    struct th_proc p;
    const char *ci;
    struct th_resp r;
    json_t *run;
    char *id, *msgs;

    ci = start_fresh(&p, "e2e_appr_approve", 300, false);
    id = submit(&p, "gated", 1);
    th_sleep_ms(500);
    run = th_get_run(&p, id);
    ck_assert_str_eq(th_js(run, "status"), "waiting");
    ck_assert_int_eq(th_ji(run, "attempt"), 0);
    ck_assert(json_is_null(json_object_get(run, "poll")));
    ck_assert(json_is_null(json_object_get(run, "worker_id")));
    ck_assert_str_eq(th_js(approval(run), "state"), "pending");
    ck_assert_str_eq(th_js(approval(run), "on_timeout"), "reject");
    ck_assert(json_is_null(json_object_get(approval(run), "decided_by")));
    ck_assert_int_eq(us_between(approval(run), "requested_at", approval(run), "expires_at"),
                     300000000LL);
    json_decref(run);
    /* no external job: the poller has nothing to check */
    ck_assert_int_eq(sql_count(ci, "run_polls WHERE run_id =", id), 0);

    decide(&p, id, "approve", NULL, "{\"comment\": \"go ahead\"}", 200, &r);
    ck_assert_str_eq(th_js(r.json, "status"), "queued");
    ck_assert_str_eq(th_js(approval(r.json), "state"), "approved");
    ck_assert_str_eq(th_js(approval(r.json), "decided_by"), "anonymous");
    ck_assert_str_eq(th_js(approval(r.json), "comment"), "go ahead");
    ck_assert_ptr_nonnull(th_js(approval(r.json), "decided_at"));
    th_resp_free(&r);

    th_expect_outcome(&p, id, "succeeded", 10);
    run = th_get_run(&p, id);
    ck_assert_str_eq(th_js(approval(run), "state"), "approved");
    ck_assert_int_eq(th_ji(run, "attempt"), 1);
    json_decref(run);
    msgs = event_messages(&p, id);
    ck_assert_msg(strncmp(msgs, "submitted; awaiting approval until ", 35) == 0, "%s", msgs);
    ck_assert_msg(strstr(msgs, "|approved by anonymous: go ahead|attempt 1 started"), "%s", msgs);
    free(msgs);
    /* A second decision, either way, is refused. */
    decide(&p, id, "approve", NULL, NULL, 409, &r);
    th_check_problem(&r, 409, "approve twice");
    ck_assert_msg(strstr(th_js(r.json, "detail"), "is not awaiting approval"), "%s", r.body);
    th_resp_free(&r);
    decide(&p, id, "reject", NULL, NULL, 409, &r);
    th_resp_free(&r);
    th_stop_clean(&p);
    free(id);
}
END_TEST

/* Rejected: completed cancelled at once, error code "rejected", never
 * started. */
START_TEST(reject_cancels_the_run)
{
    struct th_proc p;
    struct th_resp r;
    json_t *run;
    char *id, *msgs;

    start_fresh(&p, "e2e_appr_reject", 300, false);
    id = submit(&p, "gated", 1);
    decide(&p, id, "reject", NULL, "{\"comment\": \"not during the freeze\"}", 200, &r);
    ck_assert_str_eq(th_js(r.json, "status"), "completed");
    ck_assert_str_eq(th_js(r.json, "outcome"), "cancelled");
    ck_assert_str_eq(th_js(json_object_get(r.json, "error"), "code"), "rejected");
    ck_assert_str_eq(th_js(json_object_get(r.json, "error"), "message"),
                     "rejected by anonymous: not during the freeze");
    ck_assert_str_eq(th_js(approval(r.json), "state"), "rejected");
    ck_assert_str_eq(th_js(approval(r.json), "comment"), "not during the freeze");
    th_resp_free(&r);
    th_sleep_ms(300);
    run = th_get_run(&p, id);
    ck_assert_int_eq(th_ji(run, "attempt"), 0);
    ck_assert(json_is_null(json_object_get(run, "started_at")));
    json_decref(run);
    msgs = event_messages(&p, id);
    ck_assert_msg(strstr(msgs, "|rejected by anonymous: not during the freeze") &&
                      !strstr(msgs, "started"),
                  "%s", msgs);
    free(msgs);
    /* An empty body and an empty comment are both "no comment"; a bad body
     * is refused before anything is decided. */
    free(id);
    id = submit(&p, "gated", 2);
    decide(&p, id, "approve", NULL, "{\"comment\": 7, \"why\": \"x\"}", 400, &r);
    th_check_problem(&r, 400, "bad comment");
    ck_assert(th_has_error_field(json_object_get(r.json, "errors"), "comment"));
    ck_assert(th_has_error_field(json_object_get(r.json, "errors"), "why"));
    th_resp_free(&r);
    decide(&p, id, "reject", NULL, "{\"comment\": \"\"}", 200, &r);
    ck_assert(json_is_null(json_object_get(approval(r.json), "comment")));
    ck_assert_str_eq(th_js(json_object_get(r.json, "error"), "message"), "rejected by anonymous");
    th_resp_free(&r);
    decide(&p, "no-such-run", "approve", NULL, NULL, 404, &r);
    th_resp_free(&r);
    /* A run of a type without approval has none to decide. */
    free(id);
    id = th_submit(&p, "{\"alert_type\": \"demo\", \"run_at\": \"2999-01-01T00:00:00Z\"}", 202);
    decide(&p, id, "approve", NULL, NULL, 409, &r);
    ck_assert_msg(strstr(th_js(r.json, "detail"), "asks for none"), "%s", r.body);
    th_resp_free(&r);
    th_stop_clean(&p);
    free(id);
}
END_TEST

/* Checks an expired run: decided by "system" within a second of its expiry. */
static void assert_expired_on_time(const struct th_proc *p, const char *id, const char *status)
{
    json_t *run = th_get_run(p, id);
    long long late = us_between(approval(run), "expires_at", approval(run), "decided_at");

    ck_assert_str_eq(th_js(approval(run), "state"), "expired");
    ck_assert_str_eq(th_js(approval(run), "decided_by"), "system");
    ck_assert_msg(late >= 0 && late < 1000000, "run %s decided %lld us after its expiry", id, late);
    if (status)
        ck_assert_str_eq(th_js(run, "status"), status);
    json_decref(run);
}

/* Both outcomes of expiry, made on one replica and decided on another
 * after the first was killed, each within a second of its expires_at. */
START_TEST(expiry_on_any_replica)
{
    char *c = config(3, false);
    char *path = th_config_file("e2e_appr_expiry", c);
    char *ci = th_db_create("e2e_appr_expiry");
    const char *args[] = {"--config", path, NULL};
    struct th_proc a, b;
    char *reject, *approve;
    json_t *run;

    th_start(&a, ci, args, NULL);
    th_start(&b, ci, args, NULL);
    reject = submit(&a, "gated", 1);
    approve = submit(&a, "gated_ok", 2);
    th_stop(&a, SIGKILL, 10);
    ck_assert(th_wait_status(&b, reject, "completed", 6000));
    assert_expired_on_time(&b, reject, "completed");
    run = th_get_run(&b, reject);
    ck_assert_str_eq(th_js(run, "outcome"), "cancelled");
    ck_assert_str_eq(th_js(json_object_get(run, "error"), "code"), "approval_expired");
    ck_assert_int_eq(th_ji(run, "attempt"), 0);
    json_decref(run);
    th_expect_outcome(&b, approve, "succeeded", 10);
    assert_expired_on_time(&b, approve, NULL);
    th_stop_clean(&b);
    free(reject);
    free(approve);
    free(ci);
    free(path);
    free(c);
}
END_TEST

/* Deciders racing on one run. */
struct racer {
    const struct th_proc *p;
    const char *id, *what;
    pthread_barrier_t *go;
    long status;
};

static void *race(void *arg)
{
    struct racer *r = arg;
    char url[512];
    struct th_resp resp;

    snprintf(url, sizeof(url), "%s/runs/%s/%s", r->p->url, r->id, r->what);
    pthread_barrier_wait(r->go);
    ck_assert(th_http("POST", url, NULL, NULL, &resp));
    r->status = resp.status;
    th_resp_free(&resp);
    return NULL;
}

#define RACE_RUNS 10
#define RACERS 4

/* Two approvers and two rejecters at once on each of ten runs, half of
 * them on a second replica: exactly one 200 per run, the others 409, and
 * the run is as the winner decided, with one decision event. */
START_TEST(concurrent_deciders)
{
    char *c = config(300, false);
    char *path = th_config_file("e2e_appr_race", c);
    char *ci = th_db_create("e2e_appr_race");
    const char *args[] = {"--config", path, NULL};
    struct th_proc p[2];

    th_start(&p[0], ci, args, NULL);
    th_start(&p[1], ci, args, NULL);
    for (int k = 0; k < RACE_RUNS; k++) {
        char *id = submit(&p[k % 2], "gated", k);
        struct racer rc[RACERS];
        pthread_t th[RACERS];
        pthread_barrier_t go;
        int won = -1, lost = 0;
        json_t *run;

        pthread_barrier_init(&go, NULL, RACERS);
        for (int i = 0; i < RACERS; i++) {
            rc[i] = (struct racer){&p[i / 2], id, i % 2 ? "reject" : "approve", &go, 0};
            pthread_create(&th[i], NULL, race, &rc[i]);
        }
        for (int i = 0; i < RACERS; i++)
            pthread_join(th[i], NULL);
        pthread_barrier_destroy(&go);
        for (int i = 0; i < RACERS; i++) {
            if (rc[i].status == 200) {
                ck_assert_msg(won < 0, "run %s: two decisions won", id);
                won = i;
            } else {
                ck_assert_int_eq(rc[i].status, 409);
                lost++;
            }
        }
        ck_assert_int_eq(lost, RACERS - 1);
        run = th_get_run(&p[0], id);
        ck_assert_str_eq(th_js(approval(run), "state"), won % 2 ? "rejected" : "approved");
        json_decref(run);
        ck_assert_int_eq(sql_count(ci,
                                   "run_events WHERE (message LIKE 'approved by%' OR message "
                                   "LIKE 'rejected by%') AND run_id =",
                                   id),
                         1);
        free(id);
    }
    th_stop_clean(&p[1]);
    th_stop_clean(&p[0]);
    free(ci);
    free(path);
    free(c);
}
END_TEST

/* A pending run cancelled: completed cancelled at once, approval reads
 * cancelled, no remote hooks owed, and no decision afterwards. */
START_TEST(cancel_while_pending)
{
    struct th_proc p;
    const char *ci = start_fresh(&p, "e2e_appr_cancel", 300, false);
    char *id = submit(&p, "gated", 1), path[256];
    struct th_resp r;

    snprintf(path, sizeof(path), "/runs/%s/cancel", id);
    th_post_expect(&p, path, NULL, NULL, 200, &r);
    ck_assert_str_eq(th_js(r.json, "status"), "completed");
    ck_assert_str_eq(th_js(r.json, "outcome"), "cancelled");
    ck_assert_str_eq(th_js(approval(r.json), "state"), "cancelled");
    ck_assert_ptr_nonnull(th_js(approval(r.json), "decided_at"));
    ck_assert(json_is_null(json_object_get(approval(r.json), "decided_by")));
    th_resp_free(&r);
    ck_assert_int_eq(sql_count(ci, "runs WHERE hooks_at IS NOT NULL AND id =", id), 0);
    decide(&p, id, "approve", NULL, NULL, 409, &r);
    ck_assert_msg(strstr(th_js(r.json, "detail"), "completed (cancelled)"), "%s", r.body);
    th_resp_free(&r);
    th_sleep_ms(1500); /* past a pass of the approvals thread: nothing changes */
    ck_assert_int_eq(sql_count(ci, "run_events WHERE run_id =", id), 2);
    th_stop_clean(&p);
    free(id);
}
END_TEST

static void call(const struct th_proc *p, const char *path, const char *token, long want)
{
    struct th_resp r;

    th_post_expect(p, path, token, NULL, want, &r);
    th_resp_free(&r);
}

/* The approve scope, the tenants and the admin; the list filter. */
START_TEST(scopes_and_tenants)
{
    struct th_proc p;
    char *a, *b, *c, path[256], url[512];
    struct th_resp r;

    start_fresh(&p, "e2e_appr_auth", 300, true);
    a = submit_as(&p, T_OPS, "gated", 1);
    b = submit_as(&p, T_OPS, "gated", 2);
    c = submit_as(&p, T_OTHER, "gated", 3);
    snprintf(path, sizeof(path), "/runs/%s/approve", a);
    call(&p, path, NULL, 401);
    call(&p, path, T_OPS, 403);   /* submit, read, cancel: no approve */
    call(&p, path, T_OTHER, 404); /* another tenant's run does not exist for it */
    snprintf(path, sizeof(path), "/runs/%s/reject", a);
    call(&p, path, T_OTHER, 404);
    call(&p, path, T_OPS, 403);
    snprintf(path, sizeof(path), "/runs/%s/approve", a);
    snprintf(url, sizeof(url), "%s/runs?approval=pending", p.url);
    ck_assert(th_http_token("GET", url, T_OTHER, NULL, NULL, &r));
    ck_assert_int_eq(json_array_size(json_object_get(r.json, "runs")), 1);
    ck_assert_str_eq(th_js(json_array_get(json_object_get(r.json, "runs"), 0), "id"), c);
    th_resp_free(&r);
    ck_assert(th_http_token("GET", url, T_APPROVER, NULL, NULL, &r));
    ck_assert_int_eq(json_array_size(json_object_get(r.json, "runs")), 2);
    th_resp_free(&r);
    th_post_expect(&p, path, T_APPROVER, NULL, 200, &r);
    ck_assert_str_eq(th_js(approval(r.json), "decided_by"), "approver");
    ck_assert_str_eq(th_js(r.json, "initiator"), "ops");
    th_resp_free(&r);
    /* the admin reaches every tenant's run by its id */
    snprintf(path, sizeof(path), "/runs/%s/reject", c);
    th_post_expect(&p, path, T_ROOT, NULL, 200, &r);
    ck_assert_str_eq(th_js(approval(r.json), "decided_by"), "root");
    th_resp_free(&r);
    ck_assert(th_http_token("GET", url, T_APPROVER, NULL, NULL, &r));
    ck_assert_int_eq(json_array_size(json_object_get(r.json, "runs")), 1);
    ck_assert_str_eq(th_js(json_array_get(json_object_get(r.json, "runs"), 0), "id"), b);
    th_resp_free(&r);
    snprintf(url, sizeof(url), "%s/runs?approval=approved", p.url);
    ck_assert(th_http_token("GET", url, T_APPROVER, NULL, NULL, &r));
    th_check_problem(&r, 400, "approval=approved");
    ck_assert(th_has_error_field(json_object_get(r.json, "errors"), "approval"));
    th_resp_free(&r);
    th_stop_clean(&p);
    free(a);
    free(b);
    free(c);
}
END_TEST

/* Pending runs outlive their process: one approved after the restart
 * starts; the other expires on time with the new process, although the
 * new configuration gives its run type no approval any more (a run keeps
 * the expiry it was made with; were no replica to decide it, it would
 * wait for ever and hold its identity). */
START_TEST(pending_survives_restart)
{
    char *c = config(4, false);
    char *path = th_config_file("e2e_appr_restart", c);
    char *path2 = th_config_file("e2e_appr_restart_none",
                                 "{\"run_types\": {\"gated\": {\"action\": \"simulate\", "
                                 "\"params\": {\"duration_ms\": 50, \"steps\": 1}}}}");
    char *ci = th_db_create("e2e_appr_restart");
    const char *args[] = {"--config", path, NULL}, *args2[] = {"--config", path2, NULL};
    struct th_proc p;
    char *kept, *left;
    struct th_resp r;
    json_t *run;

    th_start(&p, ci, args, NULL);
    kept = submit(&p, "gated", 1);
    left = submit(&p, "gated", 2);
    th_stop_clean(&p);
    th_sleep_ms(1000);
    th_restart(&p, ci, args2, NULL);
    run = th_get_run(&p, kept);
    ck_assert_str_eq(th_js(run, "status"), "waiting");
    ck_assert_str_eq(th_js(approval(run), "state"), "pending");
    json_decref(run);
    decide(&p, kept, "approve", NULL, NULL, 200, &r);
    th_resp_free(&r);
    th_expect_outcome(&p, kept, "succeeded", 10);
    ck_assert(th_wait_status(&p, left, "completed", 8000));
    assert_expired_on_time(&p, left, "completed");
    th_stop_clean(&p);
    free(kept);
    free(left);
    free(ci);
    free(path);
    free(path2);
    free(c);
}
END_TEST

/* ---- the approval_requested notification ---- */

#define PUBLIC_URL "https://opsrun.example.test/base"

/* The body of the k-th request to path (k from 0), as JSON (json_decref). */
static json_t *received(struct receiver *rv, const char *path, int k)
{
    struct rcv_request a[8];
    int n = receiver_requests(rv, path, a, 8);
    json_t *j;

    ck_assert_msg(k < n, "%s has %d requests, not %d", path, n, k + 1);
    ck_assert_str_eq(a[k].event, "run.approval_requested");
    j = json_loads(a[k].body, 0, NULL);
    ck_assert_msg(j != NULL, "not JSON: %s", a[k].body);
    rcv_requests_free(a, n < 8 ? n : 8);
    return j;
}

/* What the k-th request of each notifier says of run id, awaiting approval:
 * the webhook the event and the run, pending; Slack the words and the
 * dashboard link. */
static void assert_requested(struct receiver *rv, int k, const char *id)
{
    json_t *hook, *chat;

    /* Each notifier delivers on its own: wait for both. */
    ck_assert_int_ge(receiver_wait(rv, "/hook", k + 1, 10000), k + 1);
    ck_assert_int_ge(receiver_wait(rv, "/chat", k + 1, 10000), k + 1);
    hook = received(rv, "/hook", k);
    chat = received(rv, "/chat", k);
    const json_t *run = json_object_get(hook, "run");
    char want[512];

    ck_assert_str_eq(th_js(hook, "event"), "run.approval_requested");
    ck_assert_str_eq(th_js(run, "id"), id);
    ck_assert_str_eq(th_js(run, "status"), "waiting");
    ck_assert_str_eq(th_js(approval(run), "state"), "pending");
    snprintf(want, sizeof(want), "Run %s (gated) waits for approval " PUBLIC_URL "/#/runs/%s", id,
             id);
    ck_assert_str_eq(th_js(chat, "text"), want);
    json_decref(hook);
    json_decref(chat);
}

/* A run that starts waiting for approval is announced to the notifiers its
 * type names for approval_requested, whichever way it was made (a
 * submission, a retry, a bulk retry, a follow-up), with the link to it in
 * the dashboard; a decision announces nothing more, nor does a type
 * without approval. */
START_TEST(approval_requested_notifies)
{
    struct receiver *rv = receiver_start();
    char hook[256], chat[256], config[2048], path[256];
    const char *args[3] = {"--config"};
    struct th_proc p;
    struct th_resp r;
    json_t *run;
    char *ci, *file, *a, *b, *c, *msgs;

    receiver_url(rv, "/hook", hook, sizeof(hook));
    receiver_url(rv, "/chat", chat, sizeof(chat));
    snprintf(config, sizeof(config),
             "{\"http\": {\"public_url\": \"" PUBLIC_URL "/\"},"
             " \"notifiers\": {\"hook\": {\"kind\": \"webhook\", \"url\": \"%s\"},"
             "  \"chat\": {\"kind\": \"slack\", \"url\": \"%s\"}},"
             " \"run_types\": {\"gated\": {\"action\": \"simulate\", \"approval\": {},"
             "  \"notify\": [{\"on\": [\"approval_requested\"], \"to\": \"hook\"},"
             "   {\"on\": [\"approval_requested\"], \"to\": \"chat\"}]},"
             "  \"plain\": {\"action\": \"simulate\","
             "   \"notify\": [{\"on\": [\"approval_requested\"], \"to\": \"hook\"}]},"
             "  \"starter\": {\"action\": \"simulate\", \"params\": {\"duration_ms\": 1},"
             "   \"then\": [{\"on\": [\"succeeded\"], \"run_type\": \"gated\"}]}}}",
             hook, chat);
    ci = th_db_create("e2e_appr_notify");
    file = th_config_file("e2e_appr_notify", config);
    args[1] = file;
    th_start(&p, ci, args, NULL);

    a = submit(&p, "gated", 1);
    ck_assert_int_eq(receiver_wait(rv, "/hook", 1, 10000), 1);
    ck_assert_int_eq(receiver_wait(rv, "/chat", 1, 10000), 1);
    assert_requested(rv, 0, a);
    free(th_submit(&p, "{\"alert_type\": \"plain\", \"data\": {}}", 202));

    /* rejected, then retried: the retry waits, and is announced */
    decide(&p, a, "reject", NULL, NULL, 200, &r);
    th_resp_free(&r);
    snprintf(path, sizeof(path), "/runs/%s/retry", a);
    th_post_expect(&p, path, NULL, NULL, 202, &r);
    b = strdup(th_js(r.json, "run_id"));
    th_resp_free(&r);
    ck_assert_int_eq(receiver_wait(rv, "/hook", 2, 10000), 2);
    ck_assert_int_eq(receiver_wait(rv, "/chat", 2, 10000), 2);
    assert_requested(rv, 1, b);

    /* the same by a bulk retry */
    decide(&p, b, "reject", NULL, NULL, 200, &r);
    th_resp_free(&r);
    run = th_get_run(&p, b);
    snprintf(path, sizeof(path),
             "{\"filter\": {\"type\": \"gated\", \"outcome\": [\"cancelled\"], "
             "\"created_after\": \"%s\"}}",
             th_js(run, "created_at"));
    json_decref(run);
    th_post_expect(&p, "/runs/retry", NULL, path, 200, &r);
    ck_assert_int_eq(th_ji(r.json, "acted"), 1);
    c = strdup(json_string_value(json_array_get(json_object_get(r.json, "new_run_ids"), 0)));
    th_resp_free(&r);
    ck_assert_int_eq(receiver_wait(rv, "/hook", 3, 10000), 3);
    assert_requested(rv, 2, c);

    /* approved and run to its end: nothing more is announced */
    decide(&p, c, "approve", NULL, NULL, 200, &r);
    th_resp_free(&r);
    th_expect_outcome(&p, c, "succeeded", 10);
    th_sleep_ms(1000);
    ck_assert_int_eq(receiver_count(rv, "/hook", NULL), 3);
    ck_assert_int_eq(receiver_count(rv, "/chat", NULL), 3);
    ck_assert_int_eq(sql_count(ci,
                               "run_events WHERE type = 'notification' AND message = "
                               "'notified hook: 200 (run.approval_requested)' AND run_id =",
                               c),
                     1);

    /* a follow-up of the gated type waits for approval too, and is announced */
    free(a);
    a = th_submit(&p, "{\"alert_type\": \"starter\", \"data\": {}}", 202);
    th_expect_outcome(&p, a, "succeeded", 10);
    snprintf(path, sizeof(path), "%s.1", a);
    free(b);
    b = strdup(path);
    ck_assert_int_eq(receiver_wait(rv, "/hook", 4, 10000), 4);
    assert_requested(rv, 3, b);
    msgs = event_messages(&p, b);
    snprintf(path, sizeof(path), "submitted as follow-up 1 of %s; awaiting approval until ", a);
    ck_assert_msg(strncmp(msgs, path, strlen(path)) == 0, "%s", msgs);
    free(msgs);
    ck_assert_int_eq(sql_count(ci, "run_polls WHERE run_id =", b), 0);
    th_stop_clean(&p);
    receiver_stop(rv);
    free(a);
    free(b);
    free(c);
    free(ci);
    free(file);
}
END_TEST

/* A run due later than it is made (a follow-up with delay_s, a submission
 * with run_at) waits for approval for its type's whole timeout from when
 * it is due, not from when it was made. */
START_TEST(expiry_counts_from_due)
{
    const char *config =
        "{\"run_types\": {\"gated\": {\"action\": \"simulate\", \"approval\": {\"timeout_s\": 60}},"
        " \"starter\": {\"action\": \"simulate\", \"params\": {\"duration_ms\": 1},"
        "  \"then\": [{\"on\": [\"succeeded\"], \"run_type\": \"gated\", \"delay_s\": 3600}]}}}";
    struct th_proc p;
    const char *ci = th_start_fresh(&p, "e2e_appr_due", config);
    char *a, *b, follow[160];
    PGconn *c = th_pg(ci);

    a = th_submit(&p, "{\"alert_type\": \"starter\", \"data\": {}}", 202);
    th_expect_outcome(&p, a, "succeeded", 10);
    snprintf(follow, sizeof(follow), "%s.1", a);
    b = th_submit(
        &p, "{\"alert_type\": \"gated\", \"data\": {}, \"run_at\": \"2999-01-01T00:00:00Z\"}", 202);
    for (int i = 0; i < 2; i++) {
        const char *id = i ? b : follow;
        ck_assert_int_eq(th_sql_int(c,
                                    "SELECT count(*) FROM runs WHERE id = '%s' AND "
                                    "approval_state = 'pending' AND run_at > now() + "
                                    "interval '50 min'",
                                    id),
                         1);
        ck_assert_int_eq(th_sql_int(c,
                                    "SELECT extract(epoch FROM approval_expires_at - run_at) "
                                    "FROM runs WHERE id = '%s'",
                                    id),
                         60);
    }
    PQfinish(c);
    th_stop_clean(&p);
    free(a);
    free(b);
}
END_TEST

/* The run type "plain" (a short simulate) with the members approval (text
 * after its params: "" or ", \"approval\": {...}"), made every second by
 * the schedule "tick" (overlap allow: a run awaiting approval does not
 * skip the next slots). */
#define PLAIN_TICK(approval)                                                                       \
    "{\"run_types\": {\"plain\": {\"action\": \"simulate\", \"params\": {\"duration_ms\": 50, "    \
    "\"steps\": 1}" approval "}},"                                                                 \
    " \"schedules\": {\"tick\": {\"cron\": \"@every 1s\", \"run_type\": \"plain\","                \
    " \"overlap\": \"allow\"}}}"

/* A reload gives a run type approval: a run submitted after it waits, and
 * so do the runs its schedule makes (the scheduler follows the reload
 * within a second); each expires as the reloaded type says (approve after
 * 2 s) and runs. */
START_TEST(approval_added_by_reload)
{
    struct th_proc p;
    char *path = th_config_file("e2e_appr_reload", PLAIN_TICK("")), *ci, *id, *at;
    const char *args[] = {"--config", path, NULL};
    long long until = th_now_ms() + 15000, done = 0;
    PGconn *c;

    ci = th_db_create("e2e_appr_reload");
    c = th_pg(ci);
    th_start(&p, ci, args, NULL);
    while (done == 0 && th_now_ms() < until) {
        th_sleep_ms(100);
        done = th_sql_int(c, "SELECT count(*) FROM runs WHERE schedule_name = 'tick' AND "
                             "status = 'completed'");
    }
    ck_assert_msg(done > 0, "no run of the schedule completed");
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM runs WHERE approval_state IS NOT NULL"),
                     0);

    th_config_rewrite(
        path, PLAIN_TICK(", \"approval\": {\"timeout_s\": 2, \"on_timeout\": \"approve\"}"));
    th_reload(&p, NULL, "run_types.plain");
    at = th_sql_str(c, "SELECT now()::text");
    id = submit(&p, "plain", 1); /* asserts that it waits */
    th_sleep_ms(3000);
    ck_assert_int_ge(th_sql_int(c,
                                "SELECT count(*) FROM runs WHERE schedule_name = 'tick' AND "
                                "created_at > '%s'::timestamptz + interval '1.2 s' AND "
                                "approval_state IS NOT NULL",
                                at),
                     1);
    ck_assert_int_eq(th_sql_int(c,
                                "SELECT count(*) FROM runs WHERE schedule_name = 'tick' AND "
                                "created_at > '%s'::timestamptz + interval '1.2 s' AND "
                                "approval_state IS NULL",
                                at),
                     0);
    th_expect_outcome(&p, id, "succeeded", 15);
    th_check_exit0(&p, th_stop(&p, SIGTERM, 30));
    PQfinish(c);
    free(at);
    free(id);
    free(ci);
    free(path);
}
END_TEST

static Suite *approvals_suite(void)
{
    Suite *s = suite_create("approvals");
    TCase *tc = tcase_create("approvals");

    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, approve_starts_the_run);
    tcase_add_test(tc, reject_cancels_the_run);
    tcase_add_test(tc, expiry_on_any_replica);
    tcase_add_test(tc, concurrent_deciders);
    tcase_add_test(tc, cancel_while_pending);
    tcase_add_test(tc, scopes_and_tenants);
    tcase_add_test(tc, pending_survives_restart);
    tcase_add_test(tc, expiry_counts_from_due);
    tcase_add_test(tc, approval_requested_notifies);
    tcase_add_test(tc, approval_added_by_reload);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return th_run_suite(approvals_suite());
}
