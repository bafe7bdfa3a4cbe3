/* tests/unit/test_run_state.c — the Check suite for store/run_state.c: the
 * exact name of every status, outcome and approval state, parsing them
 * back, rejecting everything else, and the predicates value by value; and
 * for store/run_state_sql.h: its status sets are the predicates' (built
 * here from the names table) and the partial indexes' (approvals too),
 * every quoted word of its status sets is a status or outcome name, and its
 * transition arms expand to the exact SQL.
 *
 * System headers come before run_state.h, ahead of common.h's poison pragma. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/migrations.h"
#include "store/run_state.h"
#include "store/run_state_sql.h"

/* The API's names, in enum order: what clients and the database see. */
static const char *const want_status[] = {"queued", "running", "waiting", "cancelling",
                                          "completed"};
static const char *const want_outcome[] = {"pending", "succeeded", "partially_succeeded",
                                           "failed",  "cancelled", "timed_out"};

START_TEST(status_values)
{
    ck_assert_int_eq(RUN_STATUS_COUNT, 5);
    ck_assert_int_eq(RUN_QUEUED, 0);
    ck_assert_int_eq(RUN_RUNNING, 1);
    ck_assert_int_eq(RUN_WAITING, 2);
    ck_assert_int_eq(RUN_CANCELLING, 3);
    ck_assert_int_eq(RUN_COMPLETED, 4);
}
END_TEST

START_TEST(outcome_values)
{
    ck_assert_int_eq(RUN_OUTCOME_COUNT, 6);
    ck_assert_int_eq(OUTCOME_PENDING, 0); /* a zeroed run context has chosen none */
    ck_assert_int_eq(OUTCOME_SUCCEEDED, 1);
    ck_assert_int_eq(OUTCOME_PARTIALLY_SUCCEEDED, 2);
    ck_assert_int_eq(OUTCOME_FAILED, 3);
    ck_assert_int_eq(OUTCOME_CANCELLED, 4);
    ck_assert_int_eq(OUTCOME_TIMED_OUT, 5);
}
END_TEST

START_TEST(status_names)
{
    ck_assert_str_eq(run_status_name(RUN_QUEUED), "queued");
    ck_assert_str_eq(run_status_name(RUN_RUNNING), "running");
    ck_assert_str_eq(run_status_name(RUN_WAITING), "waiting");
    ck_assert_str_eq(run_status_name(RUN_CANCELLING), "cancelling");
    ck_assert_str_eq(run_status_name(RUN_COMPLETED), "completed");
}
END_TEST

START_TEST(outcome_names)
{
    ck_assert_str_eq(run_outcome_name(OUTCOME_PENDING), "pending");
    ck_assert_str_eq(run_outcome_name(OUTCOME_SUCCEEDED), "succeeded");
    ck_assert_str_eq(run_outcome_name(OUTCOME_PARTIALLY_SUCCEEDED), "partially_succeeded");
    ck_assert_str_eq(run_outcome_name(OUTCOME_FAILED), "failed");
    ck_assert_str_eq(run_outcome_name(OUTCOME_CANCELLED), "cancelled");
    ck_assert_str_eq(run_outcome_name(OUTCOME_TIMED_OUT), "timed_out");
}
END_TEST

/* name -> value -> name, for every value, and the name is the API's. */
START_TEST(status_round_trip)
{
    for (int i = 0; i < RUN_STATUS_COUNT; i++) {
        enum run_status s = RUN_COMPLETED - (enum run_status)i; /* not the value sought */
        const char *name = run_status_name((enum run_status)i);
        ck_assert_str_eq(name, want_status[i]);
        ck_assert_msg(run_status_parse(want_status[i], &s), "\"%s\" rejected", want_status[i]);
        ck_assert_int_eq(s, i);
    }
}
END_TEST

START_TEST(outcome_round_trip)
{
    for (int i = 0; i < RUN_OUTCOME_COUNT; i++) {
        enum run_outcome o = OUTCOME_TIMED_OUT - (enum run_outcome)i;
        const char *name = run_outcome_name((enum run_outcome)i);
        ck_assert_str_eq(name, want_outcome[i]);
        ck_assert_msg(run_outcome_parse(want_outcome[i], &o), "\"%s\" rejected", want_outcome[i]);
        ck_assert_int_eq(o, i);
    }
}
END_TEST

/* Near misses, the other enum's names, and NULL: rejected, *out untouched. */
static const char *const unknown[] = {
    "",        "Queued",  "QUEUED",     " queued",   "queued ",      "queue",     "queuedx",
    "run",     "done",    "complete",   "canceling", "canceled",     "timed-out", "timedout",
    "partial", "success", "partially_", "pending\n", "cancelling\t", "firing",    "resolved",
    "none",    "stopped",
};

START_TEST(status_rejects_unknown)
{
    enum run_status s = RUN_WAITING;

    for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
        ck_assert_msg(!run_status_parse(unknown[i], &s), "\"%s\" accepted", unknown[i]);
        ck_assert_int_eq(s, RUN_WAITING);
    }
    for (int i = 0; i < RUN_OUTCOME_COUNT; i++)
        ck_assert_msg(!run_status_parse(want_outcome[i], &s), "outcome \"%s\" accepted",
                      want_outcome[i]);
    ck_assert(!run_status_parse(NULL, &s));
    ck_assert_int_eq(s, RUN_WAITING);
}
END_TEST

START_TEST(outcome_rejects_unknown)
{
    enum run_outcome o = OUTCOME_FAILED;

    for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
        ck_assert_msg(!run_outcome_parse(unknown[i], &o), "\"%s\" accepted", unknown[i]);
        ck_assert_int_eq(o, OUTCOME_FAILED);
    }
    for (int i = 0; i < RUN_STATUS_COUNT; i++)
        ck_assert_msg(!run_outcome_parse(want_status[i], &o), "status \"%s\" accepted",
                      want_status[i]);
    ck_assert(!run_outcome_parse(NULL, &o));
    ck_assert_int_eq(o, OUTCOME_FAILED);
}
END_TEST

START_TEST(terminal)
{
    ck_assert(!run_status_is_terminal(RUN_QUEUED));
    ck_assert(!run_status_is_terminal(RUN_RUNNING));
    ck_assert(!run_status_is_terminal(RUN_WAITING));
    ck_assert(!run_status_is_terminal(RUN_CANCELLING));
    ck_assert(run_status_is_terminal(RUN_COMPLETED));
}
END_TEST

START_TEST(joinable)
{
    ck_assert(run_status_is_joinable(RUN_QUEUED));
    ck_assert(run_status_is_joinable(RUN_RUNNING));
    ck_assert(run_status_is_joinable(RUN_WAITING));
    ck_assert(!run_status_is_joinable(RUN_CANCELLING)); /* about to end: not joined */
    ck_assert(!run_status_is_joinable(RUN_COMPLETED));
}
END_TEST

START_TEST(held)
{
    ck_assert(!run_status_is_held(RUN_QUEUED));
    ck_assert(run_status_is_held(RUN_RUNNING));
    ck_assert(!run_status_is_held(RUN_WAITING)); /* the worker slot is free at once */
    ck_assert(run_status_is_held(RUN_CANCELLING));
    ck_assert(!run_status_is_held(RUN_COMPLETED));
}
END_TEST

/* ---- approvals -------------------------------------------------------- */

static const char *const want_approval[] = {"pending", "approved", "rejected", "expired",
                                            "cancelled"};

START_TEST(approval_names)
{
    ck_assert_int_eq(APPROVAL_STATE_COUNT, 5);
    for (int i = 0; i < APPROVAL_STATE_COUNT; i++) {
        enum approval_state a = APPROVAL_CANCELLED - (enum approval_state)i;
        ck_assert_str_eq(approval_state_name((enum approval_state)i), want_approval[i]);
        ck_assert(approval_state_parse(want_approval[i], &a));
        ck_assert_int_eq(a, i);
    }
    for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
        enum approval_state a = APPROVAL_EXPIRED;
        ck_assert_msg(!approval_state_parse(unknown[i], &a), "\"%s\" accepted", unknown[i]);
        ck_assert_int_eq(a, APPROVAL_EXPIRED);
    }
    ck_assert(!approval_state_parse(NULL, &(enum approval_state){APPROVAL_PENDING}));
}
END_TEST

/* Only a waiting run whose approval is pending awaits a decision: it is
 * joinable (a submission of its identity joins it), cancelled at once, and
 * held by nobody. */
START_TEST(awaits_approval)
{
    for (int s = 0; s < RUN_STATUS_COUNT; s++)
        for (int a = 0; a < APPROVAL_STATE_COUNT; a++)
            ck_assert_int_eq(run_awaits_approval((enum run_status)s, (enum approval_state)a),
                             s == RUN_WAITING && a == APPROVAL_PENDING);
    ck_assert(run_status_is_joinable(RUN_WAITING));
    ck_assert(!run_status_is_held(RUN_WAITING));
}
END_TEST

/* ---- store/run_state_sql.h ------------------------------------------- */

/* "('a', 'b')": the statuses pred holds for, in enum order. */
static void sql_set(bool (*pred)(enum run_status), char *out, size_t cap)
{
    size_t len = 0;

    out[len++] = '(';
    for (int i = 0; i < RUN_STATUS_COUNT; i++)
        if (pred((enum run_status)i))
            len += (size_t)snprintf(out + len, cap - len, "%s'%s'", len > 1 ? ", " : "",
                                    run_status_name((enum run_status)i));
    snprintf(out + len, cap - len, ")");
}

static bool cancel_at_once(enum run_status s)
{
    return run_status_is_joinable(s) && !run_status_is_held(s);
}

START_TEST(sql_sets_are_the_predicates)
{
    char want[128];

    sql_set(run_status_is_held, want, sizeof(want));
    ck_assert_str_eq(want, "('running', 'cancelling')");
    ck_assert_str_eq(HELD_STATUSES, want);
    sql_set(run_status_is_joinable, want, sizeof(want));
    ck_assert_str_eq(want, "('queued', 'running', 'waiting')");
    ck_assert_str_eq(JOINABLE_STATUSES, want);
    sql_set(cancel_at_once, want, sizeof(want));
    ck_assert_str_eq(want, "('queued', 'waiting')");
    ck_assert_str_eq(CANCEL_AT_ONCE_STATUSES, want);
}
END_TEST

static const char *migration_sql(int version)
{
    for (size_t i = 0; i < migrations_count; i++)
        if (migrations[i].version == version)
            return migrations[i].sql;
    ck_abort_msg("no migration %d", version);
    return NULL;
}

/* The partial indexes that serve the statements have the same predicates,
 * so the planner can prove a statement's WHERE clause implies them. */
START_TEST(sql_sets_are_the_index_predicates)
{
    ck_assert_ptr_nonnull(strstr(migration_sql(1),
                                 "CREATE INDEX runs_held ON runs (worker_id, type) "
                                 "WHERE status IN " HELD_STATUSES ";"));
    ck_assert_ptr_nonnull(strstr(migration_sql(2), "CREATE UNIQUE INDEX runs_active_identity ON "
                                                   "runs (tenant, identity_hash)\n    WHERE status "
                                                   "IN " JOINABLE_STATUSES ";"));
}
END_TEST

/* The partial indexes of the runs awaiting approval have the predicate of
 * the statements, the trigger that makes a waiting run's poll schedule
 * leaves those runs out, and the one that owes their approval_requested
 * notifications takes them in (migration 018). */
START_TEST(sql_approval_is_the_index_predicate)
{
    const char *m = migration_sql(18);

    ck_assert_str_eq(AWAITING_APPROVAL("r."),
                     "r.approval_state = 'pending' AND r.status = 'waiting'");
    ck_assert_ptr_nonnull(strstr(m, "CREATE INDEX runs_approval_due ON runs (approval_expires_at)\n"
                                    "    WHERE " AWAITING_APPROVAL("") ";"));
    ck_assert_ptr_nonnull(strstr(m, "CREATE INDEX runs_approval_list ON runs (tenant, created_at "
                                    "DESC, id DESC)\n    WHERE " AWAITING_APPROVAL("") ";"));
    ck_assert_ptr_nonnull(strstr(m, "WHEN (NEW.status = 'waiting' AND NEW.approval_state IS "
                                    "DISTINCT FROM 'pending')"));
    ck_assert_ptr_nonnull(
        strstr(m, "WHEN (" AWAITING_APPROVAL("NEW.") " AND NEW.reacts & 4 <> 0)"));
}
END_TEST

/* Every 'quoted' word of sql is a status or an outcome name; *n counts them. */
static void assert_quoted_names(const char *sql, int *n)
{
    for (const char *p = strchr(sql, '\''); p; p = strchr(p, '\'')) {
        const char *end = strchr(p + 1, '\'');
        char word[64];
        enum run_status s;
        enum run_outcome o;

        ck_assert_ptr_nonnull(end);
        ck_assert_uint_lt((size_t)(end - p), sizeof(word));
        snprintf(word, sizeof(word), "%.*s", (int)(end - p - 1), p + 1);
        ck_assert_msg(run_status_parse(word, &s) || run_outcome_parse(word, &o),
                      "'%s' in \"%s\" is neither a status nor an outcome", word, sql);
        (*n)++;
        p = end + 1;
    }
}

START_TEST(sql_words_are_names)
{
    const struct {
        const char *sql;
        int words;
    } macros[] = {
        {HELD_STATUSES, 2}, {JOINABLE_STATUSES, 3}, {CANCEL_AT_ONCE_STATUSES, 2},
        {CANCEL_ASKED, 1},  {SET_CANCEL, 9},        {SET_REQUEUE, 7},
        {SET_WAIT, 6},      {SET_RESCUE, 9},        {HAND_BACK_MESSAGE("x", "y"), 1},
    };

    for (size_t i = 0; i < sizeof(macros) / sizeof(macros[0]); i++) {
        int n = 0;
        assert_quoted_names(macros[i].sql, &n);
        ck_assert_int_eq(n, macros[i].words);
    }
}
END_TEST

START_TEST(sql_transitions)
{
    ck_assert_str_eq(CANCEL_ASKED, "r.status = 'cancelling'");
    ck_assert_str_eq(SET_CANCEL,
                     "status = CASE WHEN cur.status IN ('queued', 'waiting') THEN 'completed' "
                     "ELSE 'cancelling' END, "
                     "outcome = CASE WHEN cur.status IN ('queued', 'waiting') THEN 'cancelled' "
                     "ELSE r.outcome END, "
                     "completed_at = CASE WHEN cur.status IN ('queued', 'waiting') THEN now() "
                     "ELSE NULL END, ");
    ck_assert_str_eq(SET_REQUEUE,
                     "status = CASE WHEN r.status = 'cancelling' THEN 'completed' "
                     "ELSE 'queued' END, "
                     "outcome = CASE WHEN r.status = 'cancelling' THEN 'cancelled' "
                     "ELSE 'pending' END, "
                     "completed_at = CASE WHEN r.status = 'cancelling' THEN now() ELSE NULL END, ");
    ck_assert_str_eq(SET_WAIT,
                     "status = CASE WHEN r.status = 'cancelling' THEN 'completed' "
                     "ELSE 'waiting' END, "
                     "outcome = CASE WHEN r.status = 'cancelling' THEN 'cancelled' "
                     "ELSE r.outcome END, "
                     "completed_at = CASE WHEN r.status = 'cancelling' THEN now() ELSE NULL END, ");
    ck_assert_str_eq(SET_RESCUE,
                     "status = CASE WHEN r.status = 'cancelling' THEN 'completed' ELSE "
                     "CASE WHEN r.attempt >= r.max_attempts THEN 'completed' ELSE 'queued' END "
                     "END, "
                     "outcome = CASE WHEN r.status = 'cancelling' THEN 'cancelled' ELSE "
                     "CASE WHEN r.attempt >= r.max_attempts THEN 'failed' ELSE 'pending' END "
                     "END, "
                     "completed_at = CASE WHEN r.status = 'cancelling' THEN now() ELSE "
                     "CASE WHEN r.attempt >= r.max_attempts THEN now() END END, ");
    ck_assert_str_eq(HAND_BACK_MESSAGE("'a'", "$7"),
                     "CASE WHEN outcome = 'cancelled' THEN 'a' ELSE $7 END");
    ck_assert_str_eq(RETRYABLE_RUN("o."), "o.status = 'completed' AND o.outcome <> 'succeeded'");
    ck_assert_str_eq(CANCEL_OWES_HOOKS,
                     "(cur.status = 'waiting' AND r.approval_state IS DISTINCT FROM 'pending') OR "
                     "(cur.status = 'queued' AND r.cleanup_due)");
}
END_TEST

/* The approval transitions, exactly: a decision moves a pending run to
 * queued or to completed/cancelled, and expiry does what the run's own
 * on_timeout says. */
START_TEST(sql_approval_transitions)
{
    ck_assert_str_eq(SET_APPROVED("'approved'", "$3"),
                     "status = 'queued', approval_state = 'approved', approval_decided_by = $3, "
                     "approval_decided_at = now(), run_at = greatest(r.run_at, now()), "
                     "updated_at = now(), ");
    ck_assert_str_eq(SET_REJECTED("'rejected'", "$3", "$9"),
                     "status = 'completed', outcome = 'cancelled', completed_at = now(), "
                     "error = $9, approval_state = 'rejected', approval_decided_by = $3, "
                     "approval_decided_at = now(), updated_at = now(), ");
    ck_assert_str_eq(
        SET_EXPIRED("$9"),
        "status = CASE WHEN r.approval_on_timeout = 'approve' THEN 'queued' ELSE 'completed' END, "
        "outcome = CASE WHEN r.approval_on_timeout = 'approve' THEN r.outcome ELSE 'cancelled' "
        "END, completed_at = CASE WHEN r.approval_on_timeout = 'approve' THEN NULL ELSE now() "
        "END, run_at = CASE WHEN r.approval_on_timeout = 'approve' THEN greatest(r.run_at, now()) "
        "ELSE r.run_at END, error = CASE WHEN r.approval_on_timeout = 'approve' THEN r.error ELSE "
        "$9 END, approval_state = 'expired', approval_decided_by = 'system', "
        "approval_decided_at = now(), updated_at = now(), ");
    ck_assert_str_eq(APPROVAL_INSERT_VALUES("$14", "$15", "$5"),
                     "CASE WHEN $14 IS NULL THEN 'queued' ELSE 'waiting' END, "
                     "CASE WHEN $14 IS NOT NULL THEN 'pending' END, "
                     "greatest(now(), $5) + make_interval(secs => $14), "
                     "CASE WHEN $14 IS NOT NULL THEN $15 END");
}
END_TEST

static TCase *tc_names(void)
{
    TCase *tc = tcase_create("names");

    tcase_add_test(tc, status_values);
    tcase_add_test(tc, outcome_values);
    tcase_add_test(tc, status_names);
    tcase_add_test(tc, outcome_names);
    tcase_add_test(tc, status_round_trip);
    tcase_add_test(tc, outcome_round_trip);
    tcase_add_test(tc, status_rejects_unknown);
    tcase_add_test(tc, outcome_rejects_unknown);
    return tc;
}

static TCase *tc_predicates(void)
{
    TCase *tc = tcase_create("predicates");

    tcase_add_test(tc, terminal);
    tcase_add_test(tc, joinable);
    tcase_add_test(tc, held);
    tcase_add_test(tc, approval_names);
    tcase_add_test(tc, awaits_approval);
    return tc;
}

static TCase *tc_sql(void)
{
    TCase *tc = tcase_create("sql");

    tcase_add_test(tc, sql_sets_are_the_predicates);
    tcase_add_test(tc, sql_sets_are_the_index_predicates);
    tcase_add_test(tc, sql_words_are_names);
    tcase_add_test(tc, sql_transitions);
    tcase_add_test(tc, sql_approval_is_the_index_predicate);
    tcase_add_test(tc, sql_approval_transitions);
    return tc;
}

int main(void)
{
    Suite *s = suite_create("run_state");
    SRunner *sr;
    int failed;

    suite_add_tcase(s, tc_names());
    suite_add_tcase(s, tc_predicates());
    suite_add_tcase(s, tc_sql());
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
