/* tests/integration/test_operator_actions.c — approvals (store/approvals.h,
 * migration 018) and bulk actions (store/runs_bulk.h) against a real
 * PostgreSQL: every insert path makes a run awaiting approval (no poll
 * schedule, its event saying so); a cancel of one owes no remote hooks and
 * reads "cancelled"; decisions are fenced; expiry decides each run by its
 * own on_timeout, a batch at a time, skipping a run another transaction
 * holds; a bulk cancel acts only on what still matches under the locks;
 * a bulk retry joins, within one statement, the new run of an earlier
 * item of the same identity, and an active run of it; a match keeps to
 * its tenant, its order and its bound.
 *
 * Each test gets a fresh database cloned from the migrated template.
 *
 * System headers come before the opsrun headers, ahead of common.h's poison
 * pragma. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <libpq-fe.h>

#include "common/ids.h"
#include "store/approvals.h"
#include "store/runs_bulk.h"
#include "store/db.h"
#include "store/runs.h"
#include "tests/support/fixture.h"
#include "tests/support/harness.h"

/* A run of type T in tenant, with approval when approval_s > 0; returns
 * it (run_free). */
static struct run *submit(const char *tenant, const char *id, int approval_s, bool approve)
{
    json_t *in = json_pack("{s:s}", "id", id);
    struct run_new rn = {.tenant = tenant,
                         .id = id,
                         .type = "T",
                         .max_attempts = 3,
                         .timeout_s = 300,
                         .input = in,
                         .identity_hash = id,
                         .request_hash = "req",
                         .approval_timeout_s = approval_s,
                         .approve_on_timeout = approve};
    struct run *run = NULL;
    bool dedup = true;

    OK(store_runs_submit(g_db, &rn, &run, &dedup, &g_err));
    ck_assert(!dedup);
    json_decref(in);
    return run;
}

static char *col(const char *id, const char *expr)
{
    PGresult *r = th_sql(g_pg, "SELECT (%s)::text FROM runs WHERE id = '%s'", expr, id);
    char *v = PQntuples(r) && !PQgetisnull(r, 0, 0) ? xstrdup(PQgetvalue(r, 0, 0)) : NULL;

    PQclear(r);
    return v;
}

static void assert_col(const char *id, const char *expr, const char *want)
{
    char *got = col(id, expr);

    ck_assert_msg(want ? got && strcmp(got, want) == 0 : !got, "run %s: %s is %s, want %s", id,
                  expr, got ? got : "NULL", want ? want : "NULL");
    free(got);
}

#define APPROVAL(m) "opsrun_run_json(runs)->'approval'->>'" m "'"

/* Submission, batch and retry all make a run awaiting approval, which has
 * no poll schedule; its cancel owes no hooks, and it then reads cancelled. */
START_TEST(every_insert_awaits_approval)
{
    struct run *run;
    struct run_new items[2];
    struct run_submitted out[2];
    json_t *in = json_object();

    open_test_db("it_ops_insert");
    run = submit("default", "a-1", 600, false);
    ck_assert_int_eq(run->status, RUN_WAITING);
    run_free(run);
    assert_col("a-1", APPROVAL("state"), "pending");
    assert_col("a-1", "approval_expires_at - created_at", "00:10:00");
    assert_col("a-1", APPROVAL("on_timeout"), "reject");
    assert_col("a-1",
               "(SELECT message FROM run_events e WHERE e.run_id = runs.id) = 'submitted; awaiting "
               "approval until ' || opsrun_ts(approval_expires_at)",
               "true");
    for (int i = 0; i < 2; i++)
        items[i] = (struct run_new){.tenant = "default",
                                    .id = i ? "b-2" : "b-1",
                                    .type = "T",
                                    .max_attempts = 1,
                                    .timeout_s = 60,
                                    .input = in,
                                    .identity_hash = i ? "b-2" : "b-1",
                                    .request_hash = "r",
                                    .approval_timeout_s = i ? 0 : 60,
                                    .approve_on_timeout = true};
    OK(store_runs_submit_batch(g_db, items, 2, out, &g_err));
    ck_assert_int_eq(out[0].run->status, RUN_WAITING);
    ck_assert_int_eq(out[1].run->status, RUN_QUEUED);
    run_submitted_cleanup(out, 2);
    assert_col("b-1", APPROVAL("on_timeout"), "approve");
    assert_col("b-2", "opsrun_run_json(runs)->>'approval'", NULL);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM run_polls"), 0);

    /* a failed run retried: the retry awaits approval too */
    PQclear(th_sql(g_pg, "UPDATE runs SET status = 'completed', outcome = 'failed' "
                         "WHERE id = 'b-2'"));
    OK(store_runs_resubmit(g_db,
                           &(struct run_resubmit){.tenant = "default",
                                                  .of = "b-2",
                                                  .id = "b-2r",
                                                  .max_attempts = 1,
                                                  .timeout_s = 60,
                                                  .approval_timeout_s = 30},
                           &run, &(bool){false}, &g_err));
    ck_assert_int_eq(run->status, RUN_WAITING);
    run_free(run);
    assert_col("b-2r", APPROVAL("state"), "pending");

    /* cancelled while pending: no hooks owed, and it reads cancelled */
    OK(store_runs_cancel(g_db, "default", "a-1", &run, &(bool){false}, &g_err));
    ck_assert_int_eq(run->outcome, OUTCOME_CANCELLED);
    run_free(run);
    assert_col("a-1", "hooks_at", NULL);
    assert_col("a-1", APPROVAL("state"), "cancelled");
    assert_col("a-1", APPROVAL("decided_at") " = opsrun_ts(completed_at)", "true");
    json_decref(in);
    close_test_db();
}
END_TEST

/* A decision is fenced on the run awaiting approval, and says why not. */
START_TEST(decisions_are_fenced)
{
    struct approval_decision d = {.tenant = "default", .id = "d-1", .approve = true, .by = "alice"};
    struct run *run = NULL;

    open_test_db("it_ops_decide");
    run_free(submit("default", "d-1", 600, false));
    run_free(submit("default", "d-2", 600, false));
    run_free(submit("default", "plain", 0, false));
    PQclear(th_sql(g_pg, "UPDATE runs SET run_at = now() + interval '1 hour' WHERE id = 'd-1'"));
    OK(store_approvals_decide(g_db, &d, &run, &g_err));
    ck_assert_int_eq(run->status, RUN_QUEUED);
    run_free(run);
    /* a later run_at stays: approval does not make it due sooner */
    assert_col("d-1", "run_at > now() + interval '59 minutes'", "true");
    assert_col("d-1", "approval_decided_by", "alice");
    EXPECT(ST_CONFLICT, store_approvals_decide(g_db, &d, &run, &g_err));
    ck_assert_str_eq(g_err.message,
                     "run \"d-1\" is not awaiting approval: it is queued (approved)");
    ck_assert_ptr_null(run);
    d = (struct approval_decision){.tenant = "default", .id = "d-2", .by = "bob", .comment = "no"};
    OK(store_approvals_decide(g_db, &d, &run, &g_err));
    ck_assert_int_eq(run->outcome, OUTCOME_CANCELLED);
    run_free(run);
    assert_col("d-2", "error->>'code'", "rejected");
    assert_col("d-2", "error->>'message'", "rejected by bob: no");
    /* Past its expires_at, before any expiry pass: on_timeout decides. */
    run_free(submit("default", "d-3", 600, false));
    PQclear(th_sql(g_pg, "UPDATE runs SET approval_expires_at = now() - interval '1 second' "
                         "WHERE id = 'd-3'"));
    d = (struct approval_decision){.tenant = "default", .id = "d-3", .approve = true, .by = "eve"};
    EXPECT(ST_CONFLICT, store_approvals_decide(g_db, &d, &run, &g_err));
    ck_assert_msg(strstr(g_err.message, "its approval expired at ") &&
                      strstr(g_err.message, "and on_timeout (reject) decides it"),
                  "%s", g_err.message);
    ck_assert_ptr_null(run);
    assert_col("d-3", "approval_state", "pending");
    d.id = "plain";
    EXPECT(ST_CONFLICT, store_approvals_decide(g_db, &d, &run, &g_err));
    ck_assert_str_eq(g_err.message,
                     "run \"plain\" is not awaiting approval: its run type asks for none");
    d.id = "nope";
    EXPECT(ST_NOT_FOUND, store_approvals_decide(g_db, &d, &run, &g_err));
    d = (struct approval_decision){.tenant = "other", .id = "d-2", .by = "x"};
    EXPECT(ST_NOT_FOUND, store_approvals_decide(g_db, &d, &run, &g_err));
    close_test_db();
}
END_TEST

static int cancelled_types;
static void on_rejected(void *arg, const char *type, enum run_outcome outcome, int n)
{
    (void)arg;
    ck_assert_str_eq(type, "T");
    ck_assert_int_eq(outcome, OUTCOME_CANCELLED);
    cancelled_types += n;
}

/* 600 expired approvals, a third approving on timeout: decided 256 a
 * statement, each by its own on_timeout; one another transaction holds is
 * left for later; the next expiry is read by the database's clock. */
START_TEST(expiry_in_batches)
{
    PGconn *other;
    int approved = 0, rejected = 0, total_a = 0, total_r = 0;
    int64_t ms = -2;

    open_test_db("it_ops_expire");
    OK(store_approvals_next(g_db, &ms, &g_err));
    ck_assert_int_eq(ms, -1);
    for (int i = 0; i < 600; i++) {
        char id[32];
        snprintf(id, sizeof(id), "e-%d", i);
        run_free(submit("default", id, 600, i % 3 == 0));
    }
    run_free(submit("default", "later", 120, false));
    OK(store_approvals_next(g_db, &ms, &g_err));
    ck_assert_msg(ms > 110000 && ms <= 600000, "next in %lld ms", (long long)ms);
    PQclear(th_sql(g_pg, "UPDATE runs SET approval_expires_at = now() - interval '1 second' "
                         "WHERE id LIKE 'e-%%'"));
    other = th_pg(g_ci);
    PQclear(th_sql(other, "BEGIN"));
    PQclear(th_sql(other, "SELECT 1 FROM runs WHERE id = 'e-1' FOR UPDATE"));
    do {
        OK(store_approvals_expire(g_db, 256, &approved, &rejected, on_rejected, NULL, &g_err));
        ck_assert_int_le(approved + rejected, 256);
        total_a += approved;
        total_r += rejected;
    } while (approved + rejected == 256);
    ck_assert_int_eq(total_a, 200);
    ck_assert_int_eq(total_r, 399); /* e-1 is held */
    ck_assert_int_eq(cancelled_types, 399);
    OK(store_approvals_next(g_db, &ms, &g_err));
    ck_assert_int_eq(ms, 0); /* e-1 is still due */
    PQclear(th_sql(other, "COMMIT"));
    PQfinish(other);
    OK(store_approvals_expire(g_db, 256, &approved, &rejected, NULL, NULL, &g_err));
    ck_assert_int_eq(rejected, 1);
    assert_col("e-0", "status", "queued");
    assert_col("e-0", APPROVAL("state"), "expired");
    assert_col("e-0", APPROVAL("decided_by"), "system");
    assert_col("e-1", "error->>'code'", "approval_expired");
    assert_col("e-1", "outcome", "cancelled");
    assert_col("later", APPROVAL("state"), "pending");
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM run_events WHERE message LIKE "
                                      "'approval expired: %%'"),
                     600);
    close_test_db();
}
END_TEST

/* Matched while queued; by the batch one was claimed and one completed: a
 * status filter acts on the one still queued, no filter also asks the
 * running one to stop. */
START_TEST(bulk_cancel_rechecks_under_locks)
{
    struct bulk_filter queued = {.statuses = 1u << RUN_QUEUED, .type = "T"};
    struct bulk_filter any = {.type = "T"};
    const char *ids[] = {"c-1", "c-2", "c-3"};
    struct bulk_match m;
    struct bulk_result r = {0};

    open_test_db("it_ops_bulk_cancel");
    for (int i = 0; i < 3; i++)
        run_free(submit("default", ids[i], 0, false));
    run_free(submit("other", "c-1", 0, false)); /* the same id, another tenant */
    OK(store_bulk_match(g_db, "default", BULK_CANCEL, &queued, 10, &m, &g_err));
    ck_assert_uint_eq(m.n, 3);
    ck_assert_str_eq(m.ids[0], "c-1");
    bulk_match_cleanup(&m);
    PQclear(th_sql(g_pg, "UPDATE runs SET status = 'running', worker_id = 'w', attempt = 1 "
                         "WHERE id = 'c-2' AND tenant = 'default'"));
    PQclear(th_sql(g_pg, "UPDATE runs SET status = 'completed', outcome = 'succeeded' "
                         "WHERE id = 'c-3'"));
    OK(store_bulk_cancel(g_db, "default", &queued, ids, 3, &r, &g_err));
    ck_assert_uint_eq(r.n, 1);
    ck_assert_str_eq(r.v[0].id, "c-1");
    ck_assert(r.v[0].ended);
    bulk_result_cleanup(&r);
    OK(store_bulk_cancel(g_db, "default", &any, ids, 3, &r, &g_err));
    ck_assert_uint_eq(r.n, 1);
    ck_assert_str_eq(r.v[0].id, "c-2");
    ck_assert(!r.v[0].ended);
    bulk_result_cleanup(&r);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE tenant = 'default' AND "
                                      "id = 'c-2' AND status = 'cancelling'"),
                     1);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE tenant = 'other' AND "
                                      "status = 'queued'"),
                     1);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM run_events WHERE message = "
                                      "'cancel requested'"),
                     2);
    close_test_db();
}
END_TEST

/* Two failed runs of one identity retried in one statement: the first
 * makes the new run, the second joins it; a third, whose identity an
 * active run holds, joins that one; a succeeded run is left alone. */
START_TEST(bulk_retry_joins_within_a_statement)
{
    struct bulk_filter f = {.outcomes = 1u << OUTCOME_FAILED};
    struct bulk_retry_item items[4];
    const char *of[] = {"f-1", "f-2", "f-3", "ok"};
    const char *nid[] = {"n-1", "n-2", "n-3", "n-4"};
    struct bulk_result r = {0};

    open_test_db("it_ops_bulk_retry");
    PQclear(th_sql(g_pg,
                   "INSERT INTO runs (tenant, id, type, status, outcome, max_attempts, timeout_s, "
                   "input, identity_hash, request_hash) VALUES "
                   "('default', 'f-1', 'T', 'completed', 'failed', 1, 60, '{}', 'same', 'r'), "
                   "('default', 'f-2', 'T', 'completed', 'failed', 1, 60, '{}', 'same', 'r'), "
                   "('default', 'f-3', 'T', 'completed', 'failed', 1, 60, '{}', 'held', 'r'), "
                   "('default', 'active', 'T', 'queued', 'pending', 1, 60, '{}', 'held', 'r'), "
                   "('default', 'ok', 'T', 'completed', 'succeeded', 1, 60, '{}', 'ok', 'r')"));
    for (int i = 0; i < 4; i++)
        items[i] =
            (struct bulk_retry_item){.of = of[i], .id = nid[i], .max_attempts = 2, .timeout_s = 30};
    OK(store_bulk_retry(g_db, "default", "ops", &f, items, 4, &r, &g_err));
    ck_assert_uint_eq(r.n, 3);
    ck_assert_str_eq(r.v[0].id, "f-1");
    ck_assert_str_eq(r.v[0].new_id, "n-1");
    ck_assert(!r.v[0].joined);
    ck_assert_str_eq(r.v[1].id, "f-2");
    ck_assert_str_eq(r.v[1].new_id, "n-1");
    ck_assert(r.v[1].joined);
    ck_assert_str_eq(r.v[2].id, "f-3");
    ck_assert_str_eq(r.v[2].new_id, "active");
    ck_assert(r.v[2].joined);
    bulk_result_cleanup(&r);
    assert_col("n-1", "retry_of", "f-1");
    assert_col("n-1", "initiator", "ops");
    assert_col("n-1", "max_attempts", "2");
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE retry_of IS NOT NULL"), 1);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM run_events WHERE run_id = 'n-1' AND "
                                      "message = 'submitted'"),
                     1);
    close_test_db();
}
END_TEST

/* A match keeps to its tenant and its filter, oldest first, at most max;
 * created_after and created_before bound it. */
START_TEST(bulk_match_bounds)
{
    struct bulk_filter all = {0};
    struct bulk_match m;
    char *mid;

    open_test_db("it_ops_bulk_match");
    for (int i = 0; i < 5; i++) {
        char id[16];
        snprintf(id, sizeof(id), "m-%d", i);
        run_free(submit("default", id, 0, false));
        PQclear(th_sql(g_pg,
                       "UPDATE runs SET created_at = '2026-01-01'::timestamptz + %d * interval "
                       "'1 hour' WHERE id = '%s'",
                       i, id));
    }
    run_free(submit("other", "x-1", 0, false));
    OK(store_bulk_match(g_db, "default", BULK_CANCEL, &all, 3, &m, &g_err));
    ck_assert_uint_eq(m.n, 3);
    ck_assert_str_eq(m.ids[0], "m-0");
    ck_assert_str_eq(m.ids[2], "m-2");
    ck_assert_str_eq(m.types[0], "T");
    bulk_match_cleanup(&m);
    all.created_after = "2026-01-01T01:00:00Z";
    all.created_before = "2026-01-01T03:00:00Z";
    OK(store_bulk_match(g_db, "default", BULK_CANCEL, &all, 10, &m, &g_err));
    ck_assert_uint_eq(m.n, 2);
    mid = m.ids[0];
    ck_assert_str_eq(mid, "m-1");
    ck_assert_str_eq(m.ids[1], "m-2");
    bulk_match_cleanup(&m);
    OK(store_bulk_match(g_db, "default", BULK_RETRY, &(struct bulk_filter){0}, 10, &m, &g_err));
    ck_assert_uint_eq(m.n, 0);
    bulk_match_cleanup(&m);
    close_test_db();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("operator_actions");
    TCase *tc = tcase_create("operator_actions");

    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, every_insert_awaits_approval);
    tcase_add_test(tc, decisions_are_fenced);
    tcase_add_test(tc, expiry_in_batches);
    tcase_add_test(tc, bulk_cancel_rechecks_under_locks);
    tcase_add_test(tc, bulk_retry_joins_within_a_statement);
    tcase_add_test(tc, bulk_match_bounds);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
