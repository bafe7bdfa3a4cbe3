/* tests/integration/test_notify.c — what runs set off (migration 017,
 * store/notify.h) against a real PostgreSQL, driven through the store's
 * own statements: the rules written once per change and the active runs
 * following them; a delivery owed by each transition a rule names, in the
 * transaction of the transition (none for one that rolled back, "started"
 * once even when the first attempt is handed back); follow-up runs
 * (id, parent, tenant, initiator, due time, input from placeholders, the
 * depth limit, a missing pointer, a taken id) created once however many
 * connections race to end the run; the outbox's claim (per notifier, in a
 * run's order, leased), settle (fenced, each attempt an event) and give
 * back; and the SQL placeholders held to common/template.c's and the
 * identity to common/ids.c's.
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
#include "common/template.h"
#include "store/db.h"
#include "store/logs.h"
#include "store/notify.h"
#include "store/polls.h"
#include "store/runs.h"
#include "tests/support/fixture.h"
#include "tests/support/harness.h"

/* "fix" notifies audit of every outcome and its first start, chat of a
 * failure; a failure is followed by "page" (with placeholders) and by
 * "fix" again (a loop), a success by "verify" a minute later. */
#define RULES                                                                                      \
    "[{\"type\": \"fix\", \"max_attempts\": 2, \"timeout_s\": 60, \"notify\": "                    \
    "[{\"on\": [\"*\", \"started\", \"retrying\"], \"to\": \"audit\"}, {\"on\": [\"failed\"], "    \
    "\"to\": \"chat\"}], \"follow_ups\": [{\"k\": 1, \"on\": [\"failed\"], \"run_type\": "         \
    "\"page\", \"delay_s\": 0, \"data\": {\"why\": \"{{run:/error/message}}\", \"run\": "          \
    "\"{{run:/id}}\", \"input\": \"{{run:/input}}\"}}, {\"k\": 2, \"on\": [\"succeeded\"], "       \
    "\"run_type\": \"verify\", \"delay_s\": 60, \"data\": {\"pod\": \"{{run:/input/pod}}\"}}, "    \
    "{\"k\": 3, \"on\": [\"failed\"], \"run_type\": \"fix\", \"delay_s\": 0, \"data\": {}}]}, "    \
    "{\"type\": \"page\", \"max_attempts\": 1, \"timeout_s\": 30, \"notify\": [], "                \
    "\"follow_ups\": []}, "                                                                        \
    "{\"type\": \"verify\", \"max_attempts\": 5, \"timeout_s\": 40, \"notify\": [{\"on\": "        \
    "[\"*\"], \"to\": \"audit\"}], \"follow_ups\": []}, "                                          \
    "{\"type\": \"plain\", \"max_attempts\": 3, \"timeout_s\": 60, \"notify\": [], "               \
    "\"follow_ups\": []}]"

static const char *const TYPES[] = {"fix", "page", "verify", "plain"};
static const int CAPS[] = {0, 0, 0, 0};

static void open_with_rules(const char *name, int depth)
{
    open_test_db(name);
    OK(store_rules_sync(g_db, RULES, depth, NULL, NULL, &g_err));
}

static void submit(const char *id, const char *type, const char *input)
{
    json_t *in = json_loads(input, 0, NULL);
    char identity[65];
    struct run *run = NULL;
    bool dedup = false;

    identity_hash("acme", type, "run_id", id, identity);
    OK(store_runs_submit(g_db,
                         &(struct run_new){.tenant = "acme",
                                           .id = id,
                                           .type = type,
                                           .initiator = "ops-token",
                                           .priority = 5,
                                           .max_attempts = 2,
                                           .timeout_s = 60,
                                           .input = in,
                                           .identity_hash = identity,
                                           .request_hash = identity},
                         &run, &dedup, &g_err));
    ck_assert(!dedup);
    run_free(run);
    json_decref(in);
}

/* Claims every due run for worker w; asserts how many. */
static void claim(const char *w, size_t want)
{
    struct run **runs = NULL;
    size_t n = 0;

    OK(store_runs_claim(g_db, w, 100, 100, TYPES, CAPS, NULL, 4, &runs, &n, &g_err));
    ck_assert_uint_eq(n, want);
    for (size_t i = 0; i < n; i++)
        run_free(runs[i]);
    free(runs);
}

static void finish(const char *id, int attempt, enum run_outcome o, const char *error)
{
    json_t *e = error ? json_pack("{s:s, s:s}", "code", "boom", "message", error) : NULL;
    const struct fence f = {"acme", id, "w1", attempt};

    OK(store_runs_finish(g_db, &f, &(struct run_result){.outcome = o, .error = e, .message = "x"},
                         &g_err));
    json_decref(e);
}

/* The deliveries owed, each with the run object its claim carries: the one
 * its transition wrote, or for an outcome of a run that is not a workflow
 * (migration 036) the run as it is. */
#define BODIES                                                                                     \
    "(SELECT n.*, coalesce(n.run, opsrun_run_json(r)) AS body FROM notifications n JOIN runs r "   \
    "ON r.tenant = n.tenant AND r.id = n.run_id) d"

static long long owed(const char *id, const char *notifier, const char *event)
{
    return th_sql_int(g_pg,
                      "SELECT count(*) FROM notifications WHERE run_id = '%s' AND notifier = '%s' "
                      "AND event = '%s'",
                      id, notifier, event);
}

static long long events_like(const char *id, const char *type, const char *like)
{
    return th_sql_int(g_pg,
                      "SELECT count(*) FROM run_events WHERE run_id = '%s' AND type = '%s' AND "
                      "message LIKE '%s'",
                      id, type, like);
}

/* Written when they change; the active runs of a type whose rules start
 * (or stop) setting something off follow it, the completed ones do not. */
START_TEST(rules_sync_and_reacts)
{
    int types = -1;
    int64_t runs = -1;

    open_test_db("it_notify_rules");
    OK(store_rules_sync(g_db, RULES, 10, &types, &runs, &g_err));
    ck_assert_int_eq(types, 4);
    ck_assert_int_eq(runs, 0);
    OK(store_rules_sync(g_db, RULES, 10, &types, &runs, &g_err));
    ck_assert_int_eq(types, 0);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM run_type_rules WHERE reacts <> 0"), 2);
    /* A new run takes its type's flag. */
    submit("a", "fix", "{}");
    submit("b", "plain", "{}");
    submit("c", "plain", "{}");
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE reacts <> 0"), 1);
    claim("w1", 3);
    finish("c", 1, OUTCOME_SUCCEEDED, NULL);
    /* "plain" gains a rule: its active run follows, its completed one not. */
    OK(store_rules_sync(g_db,
                        "[{\"type\": \"plain\", \"max_attempts\": 3, \"timeout_s\": 60, "
                        "\"notify\": [{\"on\": [\"failed\"], \"to\": \"chat\"}], "
                        "\"follow_ups\": []}]",
                        10, &types, &runs, &g_err));
    ck_assert_int_eq(types, 1);
    ck_assert_int_eq(runs, 1);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE reacts = 32 AND id = 'b'"),
                     1);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE reacts <> 0 AND id = 'c'"),
                     0);
    finish("b", 1, OUTCOME_FAILED, "no");
    ck_assert_int_eq(owed("b", "chat", "run.failed"), 1);
    /* The depth limit changes every row. */
    OK(store_rules_sync(g_db, RULES, 3, &types, &runs, &g_err));
    ck_assert_int_eq(types, 4);
    close_test_db();
}
END_TEST

/* started (once), retrying, the outcome ("*" and named), each with the run
 * as that transition left it; nothing for a run whose type has no rule. */
START_TEST(transitions_owe_deliveries)
{
    const struct fence f1 = {"acme", "r", "w1", 1};
    bool cancelled = false;

    open_with_rules("it_notify_transitions", 10);
    submit("r", "fix", "{\"pod\": \"web-1\"}");
    submit("p", "plain", "{}");
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM notifications"), 0);
    claim("w1", 2);
    ck_assert_int_eq(owed("r", "audit", "run.started"), 1);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM notifications WHERE run->>'status' = "
                                      "'running' AND (run->>'attempt')::int = 1"),
                     1);
    /* Handed back at shutdown and claimed again: started only once. */
    OK(store_runs_release(g_db, &f1, &cancelled, &g_err));
    claim("w1", 1);
    ck_assert_int_eq(owed("r", "audit", "run.started"), 1);
    /* A failed attempt that goes back to the queue. */
    OK(store_runs_retry(g_db, &f1, 0, NULL, &cancelled, &g_err));
    ck_assert_int_eq(owed("r", "audit", "run.retrying"), 1);
    claim("w1", 1);
    finish("r", 2, OUTCOME_FAILED, "pod did not come back");
    ck_assert_int_eq(owed("r", "audit", "run.failed"), 1);
    ck_assert_int_eq(owed("r", "chat", "run.failed"), 1);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM notifications WHERE run_id = 'r'"), 4);
    /* An outcome's run object is built when the delivery is claimed
     * (migration 036; outcome_object_built_at_claim). */
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM notifications WHERE event = "
                                      "'run.failed' AND run IS NULL"),
                     2);
    /* The run of a type without rules sets nothing off. */
    finish("p", 1, OUTCOME_FAILED, "no");
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM notifications WHERE run_id = 'p'"), 0);
    /* Every delivery has its own id. */
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(DISTINCT delivery_id) FROM notifications"), 4);
    close_test_db();
}
END_TEST

/* The transition and what it owes commit or roll back together. */
START_TEST(rollback_owes_nothing)
{
    open_with_rules("it_notify_rollback", 10);
    submit("r", "fix", "{}");
    claim("w1", 1);
    PQclear(th_sql(g_pg, "BEGIN"));
    PQclear(th_sql(g_pg, "UPDATE runs SET status = 'completed', outcome = 'failed', "
                         "error = '{\"message\": \"x\"}', completed_at = now() WHERE id = 'r'"));
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM notifications WHERE event = "
                                      "'run.failed'"),
                     2);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE parent_id = 'r'"), 2);
    PQclear(th_sql(g_pg, "ROLLBACK"));
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM notifications WHERE event = "
                                      "'run.failed'"),
                     0);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE parent_id = 'r'"), 0);
    close_test_db();
}
END_TEST

/* A failure creates "page" and "fix" again, a success "verify" a minute
 * after the end; each with the parent's tenant, initiator and priority,
 * its type's attempts and timeout, its submitted event, and an event on
 * the parent. */
START_TEST(follow_ups_created)
{
    open_with_rules("it_notify_follow_ups", 10);
    submit("r", "fix", "{\"pod\": \"web-1\"}");
    submit("s", "fix", "{\"pod\": \"web-2\"}");
    claim("w1", 2);
    finish("r", 1, OUTCOME_FAILED, "pod did not come back");
    finish("s", 1, OUTCOME_SUCCEEDED, NULL);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE parent_id IS NOT NULL"), 3);
    ck_assert_int_eq(th_sql_int(g_pg,
                                "SELECT count(*) FROM runs WHERE id = 'r.1' AND type = 'page' AND "
                                "tenant = 'acme' AND initiator = 'ops-token' AND priority = 5 AND "
                                "max_attempts = 1 AND timeout_s = 30 AND chain_depth = 1 AND "
                                "reacts = 0 AND status = 'queued' AND input = '{\"why\": \"pod did "
                                "not come back\", \"run\": \"r\", \"input\": {\"pod\": "
                                "\"web-1\"}}' AND run_at = (SELECT completed_at FROM runs WHERE "
                                "id = 'r')"),
                     1);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE id = 'r.3' AND type = "
                                      "'fix' AND reacts = 1 + 2 + 248 AND input = '{}'"),
                     1);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs c JOIN runs p ON p.id = "
                                      "c.parent_id WHERE c.id = 's.2' AND c.type = 'verify' AND "
                                      "c.max_attempts = 5 AND c.input = '{\"pod\": \"web-2\"}' "
                                      "AND c.run_at = p.completed_at + interval '60 seconds'"),
                     1);
    /* As the API shows them, and as the list finds them. */
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs r WHERE "
                                      "opsrun_run_json(r)->>'parent_id' = 'r'"),
                     2);
    {
        struct run_filter f = {.parent_id = "r", .limit = 10};
        json_t *list = NULL;
        char *next = NULL;
        OK(store_runs_list(g_db, "acme", &f, &list, &next, &g_err));
        ck_assert_uint_eq(json_array_size(list), 2);
        json_decref(list);
        free(next);
    }
    /* The identity a submission of that id would have. */
    {
        char identity[65];
        char *got = th_sql_str(g_pg, "SELECT identity_hash FROM runs WHERE id = 'r.1'");
        identity_hash("acme", "page", "run_id", "r.1", identity);
        ck_assert_str_eq(got, identity);
        free(got);
    }
    ck_assert_int_eq(events_like("r.1", "status", "submitted as follow-up 1 of r"), 1);
    ck_assert_int_eq(events_like("r", "follow_up", "follow-up 1 (page) created: r.1"), 1);
    ck_assert_int_eq(events_like("s", "follow_up",
                                 "follow-up 2 (verify) created: s.2, due in "
                                 "60 s"),
                     1);
    /* The follow-up's own rules: verify notifies audit when it ends. */
    claim("w1", 2); /* r.1 and r.3; s.2 is not due */
    close_test_db();
}
END_TEST

/* A type that follows itself stops at queue.max_chain_depth, with an event
 * naming it; a missing pointer and a taken id are events, never a crash. */
START_TEST(follow_ups_bounded)
{
    open_with_rules("it_notify_bounded", 2);
    submit("r", "fix", "{}");
    claim("w1", 1);
    finish("r", 1, OUTCOME_FAILED, "one");
    claim("w1", 2); /* r.1 (page), r.3 (fix) */
    finish("r.3", 1, OUTCOME_FAILED, "two");
    claim("w1", 2); /* r.3.1, r.3.3 */
    finish("r.3.3", 1, OUTCOME_FAILED, "three");
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT max(chain_depth) FROM runs"), 2);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE parent_id = 'r.3.3'"), 0);
    ck_assert_int_eq(events_like("r.3.3", "follow_up",
                                 "follow-up 3 (fix) not created: this run is 2 follow-ups down "
                                 "its chain, the most queue.max_chain_depth (2) allows"),
                     1);
    ck_assert_int_eq(events_like("r.3.3", "follow_up", "follow-up 1 (page) not created: %"), 1);
    close_test_db();

    /* {{run:/error/message}} of a run that failed without one. */
    open_with_rules("it_notify_missing", 10);
    submit("m", "fix", "{}");
    claim("w1", 1);
    finish("m", 1, OUTCOME_FAILED, NULL);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE parent_id = 'm'"), 1);
    ck_assert_int_eq(events_like("m", "follow_up",
                                 "follow-up 1 (page) not created: its data names "
                                 "{{run:/error/message}}, which this run does not have"),
                     1);
    /* An id someone already submitted. */
    submit("t", "fix", "{}");
    submit("t.1", "plain", "{}");
    claim("w1", 3); /* and m.3 */
    finish("t", 1, OUTCOME_FAILED, "x");
    ck_assert_int_eq(
        events_like("t", "follow_up", "follow-up 1 (page) not created: a run with id t.1 exists"),
        1);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE id = 't.1' AND type = "
                                      "'plain'"),
                     1);
    close_test_db();
}
END_TEST

/* Eight connections end the same attempt at once: one wins the fence, and
 * the follow-ups and deliveries exist once. */
struct racer {
    pthread_barrier_t *start;
    bool written;
};

static void *race(void *arg)
{
    struct racer *r = arg;
    struct db *db = connect_db(g_ci);
    struct run_finish fin = {.tenant = "acme",
                             .id = "r",
                             .attempt = 1,
                             .res = {.outcome = OUTCOME_FAILED, .message = "failed"}};
    struct error err = {0};

    pthread_barrier_wait(r->start);
    ck_assert_int_eq(store_runs_finish_batch(db, "w1", &fin, 1, &err), ST_OK);
    r->written = fin.written;
    db_close(db);
    return NULL;
}

START_TEST(racing_completions)
{
    pthread_barrier_t start;
    pthread_t th[8];
    struct racer r[8];
    int written = 0;

    open_with_rules("it_notify_race", 10);
    PQclear(th_sql(g_pg, "UPDATE run_type_rules SET follow_ups = '[{\"k\": 1, \"on\": "
                         "[\"failed\"], \"run_type\": \"page\", \"delay_s\": 0, \"data\": {}}]' "
                         "WHERE type = 'fix'"));
    submit("r", "fix", "{}");
    claim("w1", 1);
    pthread_barrier_init(&start, NULL, 8);
    for (int i = 0; i < 8; i++) {
        r[i] = (struct racer){.start = &start};
        ck_assert_int_eq(pthread_create(&th[i], NULL, race, &r[i]), 0);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        written += r[i].written;
    }
    pthread_barrier_destroy(&start);
    ck_assert_int_eq(written, 1);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE parent_id = 'r'"), 1);
    ck_assert_int_eq(owed("r", "chat", "run.failed"), 1);
    ck_assert_int_eq(owed("r", "audit", "run.failed"), 1);
    close_test_db();
}
END_TEST

static struct delivery *claim_deliveries(const char *owner, const char *const *names,
                                         const int *rooms, size_t n, int lease_ms, size_t *got)
{
    struct delivery *d = NULL;

    OK(store_deliveries_claim(g_db, owner, names, rooms, n, lease_ms, &d, got, &g_err));
    return d;
}

/* Claimed per notifier up to its room, a run's deliveries to one notifier
 * in order, leased; a result is written only by the holder of that
 * attempt, each attempt an event; a give-back makes it due again. */
START_TEST(outbox_claim_and_settle)
{
    const char *const both[] = {"audit", "chat"};
    const int one_each[] = {1, 1}, many[] = {10, 10};
    struct delivery *d;
    size_t n;
    int written = 0;

    open_with_rules("it_notify_outbox", 10);
    submit("r", "fix", "{}");
    claim("w1", 1);
    finish("r", 1, OUTCOME_FAILED, "boom");
    /* audit owes started then failed: only started is claimable. */
    d = claim_deliveries("o1", both, many, 2, 30000, &n);
    ck_assert_uint_eq(n, 2);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(d[i].notifier, "audit") == 0)
            ck_assert_str_eq(d[i].event, "run.started");
        else
            ck_assert_str_eq(d[i].event, "run.failed");
        ck_assert_int_eq(d[i].attempts, 1);
        ck_assert_str_eq(d[i].tenant, "acme");
        ck_assert_str_eq(d[i].run_id, "r");
        ck_assert_uint_eq(strlen(d[i].delivery_id), 36);
        ck_assert_ptr_nonnull(strstr(d[i].run_json, "\"id\" : \"r\""));
    }
    /* Leased: nothing more is due. */
    delivery_cleanup(d, n);
    free(d);
    d = claim_deliveries("o2", both, many, 2, 30000, &n);
    ck_assert_uint_eq(n, 0);
    free(d);
    /* Give back (a shutdown): due at once, the attempt not counted. */
    PQclear(th_sql(g_pg, "SELECT 1"));
    {
        long long id = th_sql_int(g_pg, "SELECT id FROM notifications WHERE notifier = 'audit' "
                                        "AND event = 'run.started'");
        const int64_t ids[] = {id};
        OK(store_deliveries_give_back(g_db, "o1", ids, 1, &g_err));
    }
    d = claim_deliveries("o2", both, one_each, 2, 30000, &n);
    ck_assert_uint_eq(n, 1);
    ck_assert_str_eq(d[0].event, "run.started");
    ck_assert_int_eq(d[0].attempts, 1);
    /* The old holder's result is refused, but its attempt is an event;
     * the holder's retry makes it due later. */
    {
        const struct delivery_result stale = {d[0].id, 1, -1, "notified audit: 200 (stale)"};
        OK(store_deliveries_settle(g_db, "o1", &stale, 1, &written, &g_err));
        ck_assert_int_eq(written, 0);
        const struct delivery_result retry = {d[0].id, 1, 60000, "notified audit: 503 (x)"};
        OK(store_deliveries_settle(g_db, "o2", &retry, 1, &written, &g_err));
        ck_assert_int_eq(written, 1);
    }
    ck_assert_int_eq(events_like("r", "notification", "notified audit: %"), 2);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM notifications WHERE notifier = "
                                      "'audit' AND event = 'run.started' AND owner IS NULL AND "
                                      "next_at > now() + interval '50 seconds'"),
                     1);
    /* The event carries the run's status as it is. */
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM run_events WHERE type = "
                                      "'notification' AND status = 'completed' AND outcome = "
                                      "'failed'"),
                     2);
    delivery_cleanup(d, n);
    free(d);
    /* Delivered: the row goes. */
    PQclear(th_sql(g_pg, "UPDATE notifications SET next_at = now() WHERE notifier = 'audit'"));
    d = claim_deliveries("o3", both, many, 2, 30000, &n);
    ck_assert_uint_eq(n, 1); /* started again; failed waits behind it */
    ck_assert_int_eq(d[0].attempts, 2);
    {
        const struct delivery_result ok = {d[0].id, 2, -1, "notified audit: 200 (run.started)"};
        OK(store_deliveries_settle(g_db, "o3", &ok, 1, &written, &g_err));
    }
    delivery_cleanup(d, n);
    free(d);
    d = claim_deliveries("o3", both, many, 2, 30000, &n);
    ck_assert_uint_eq(n, 1);
    ck_assert_str_eq(d[0].event, "run.failed");
    delivery_cleanup(d, n);
    free(d);
    {
        int64_t pending = 0;
        double oldest = -1;
        OK(store_deliveries_pending(g_db, &pending, &oldest, &g_err));
        ck_assert_int_eq(pending, 2);
    }
    close_test_db();
}
END_TEST

/* Migration 036: an outcome's delivery of a run that is not a workflow
 * carries no object in the outbox; its claim builds it from the run, byte
 * for byte the object the transition wrote before 036 (captured here by
 * making the transition write it), also after what the product still does
 * to an ended run (a late log chunk, the poller's cleanup hooks claimed
 * and done). A start's delivery keeps the object of its transition, and so
 * does a workflow's outcome (its steps may change after its end). A row
 * whose run is gone (made outside opsrun) is claimed with the JSON null,
 * which the notifier refuses, never with a NULL, and is then settled. */
START_TEST(outcome_object_built_at_claim)
{
    const char *const both[] = {"audit", "chat"}, *const fix[] = {"fix"};
    const int many[] = {10, 10};
    struct delivery *d;
    struct poll_claim *pc = NULL;
    size_t n;
    int written = 0;
    char *wrote;
    int64_t last = 0;

    open_with_rules("it_notify_at_claim", 10);
    submit("r", "fix", "{\"pod\": \"web-1\"}");
    claim("w1", 1);
    /* The end as before 036: the transition writes the object. */
    PQclear(th_sql(g_pg, "ALTER FUNCTION opsrun_run_at_claim(text, jsonb) RENAME TO keep_036"));
    PQclear(th_sql(g_pg, "CREATE FUNCTION opsrun_run_at_claim(text, jsonb) RETURNS boolean "
                         "LANGUAGE sql IMMUTABLE AS 'SELECT false'"));
    finish("r", 1, OUTCOME_FAILED, "pod did not come back");
    PQclear(th_sql(g_pg, "DROP FUNCTION opsrun_run_at_claim(text, jsonb)"));
    PQclear(th_sql(g_pg, "ALTER FUNCTION keep_036(text, jsonb) RENAME TO opsrun_run_at_claim"));
    wrote = th_sql_str(g_pg, "SELECT run::text FROM notifications WHERE run_id = 'r' AND "
                             "notifier = 'chat'");
    ck_assert_ptr_nonnull(wrote);
    ck_assert_ptr_nonnull(strstr(wrote, "pod did not come back"));
    /* ... and as 036 writes it: without. */
    PQclear(th_sql(g_pg, "UPDATE notifications SET run = NULL WHERE event = 'run.failed'"));
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM notifications WHERE event = "
                                      "'run.started' AND run->>'status' = 'running'"),
                     1);
    /* What may still happen to the ended run. */
    OK(store_logs_append(
        g_db,
        &(struct log_chunk){"acme", "r", 1, 1, 0, "[[1796651268318382, \"opsrun\", \"late\"]]"},
        &last, &g_err));
    ck_assert_int_eq(last, 1);
    PQclear(th_sql(g_pg, "UPDATE runs SET hooks_at = now() WHERE id = 'r'"));
    OK(store_hooks_claim(g_db, "p1", 10, 30000, fix, 1, &pc, &n, &g_err));
    ck_assert_uint_eq(n, 1);
    {
        json_t *state = json_pack("{s:b}", "cleaned", 1);
        OK(store_hooks_done(g_db, "acme", "r", pc[0].owner, true, state, 3, 1000, &g_err));
        json_decref(state);
    }
    poll_claims_free(pc, n);
    d = claim_deliveries("o1", both, many, 2, 30000, &n);
    ck_assert_uint_eq(n, 2);
    for (size_t i = 0; i < n; i++)
        if (strcmp(d[i].notifier, "chat") == 0) {
            ck_assert_str_eq(d[i].event, "run.failed");
            ck_assert_str_eq(d[i].run_json, wrote);
        } else {
            ck_assert_str_eq(d[i].event, "run.started");
            ck_assert_ptr_nonnull(strstr(d[i].run_json, "\"status\" : \"running\""));
            const struct delivery_result ok = {d[i].id, 1, -1, "notified audit: 200"};
            OK(store_deliveries_settle(g_db, "o1", &ok, 1, &written, &g_err));
            ck_assert_int_eq(written, 1);
        }
    delivery_cleanup(d, n);
    free(d);
    d = claim_deliveries("o1", both, many, 2, 30000, &n);
    ck_assert_uint_eq(n, 1);
    ck_assert_str_eq(d[0].event, "run.failed");
    ck_assert_str_eq(d[0].notifier, "audit");
    ck_assert_str_eq(d[0].run_json, wrote);
    delivery_cleanup(d, n);
    free(d);
    free(wrote);
    /* A delivery whose run is gone: the JSON null, not a NULL (which the
     * previous release's notifier cannot take). */
    PQclear(th_sql(g_pg, "INSERT INTO notifications (tenant, run_id, run_created_at, notifier, "
                         "event, run) VALUES ('acme', 'gone', now(), 'chat', 'run.failed', NULL)"));
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM opsrun_deliveries_claim('o2', "
                                      "'{chat}', '{10}', 30000) WHERE run_id = 'gone' AND run = "
                                      "'null'"),
                     1);
    /* ... which the notifier gives up, and the settle deletes (migration
     * 037): it is not claimed again when its lease ends. A delivery whose
     * run is gone but that carries its object (a start) is sent, and its
     * retry rescheduled; a result of a lease taken over (another owner, or
     * an older attempt) changes nothing. */
    PQclear(th_sql(g_pg, "INSERT INTO notifications (tenant, run_id, run_created_at, notifier, "
                         "event, run, owner, attempts) VALUES ('acme', 'gone2', now(), 'audit', "
                         "'run.started', '{\"id\": \"gone2\"}', 'o2', 2)"));
    {
        const int64_t gone = th_sql_int(g_pg, "SELECT id FROM notifications WHERE run_id = 'gone'"),
                      gone2 =
                          th_sql_int(g_pg, "SELECT id FROM notifications WHERE run_id = 'gone2'");
        const struct delivery_result stale[] = {{gone2, 1, -1, "notified audit: 200"}},
                                     res[] = {{gone, 1, -1, "notified chat: could not build"},
                                              {gone2, 2, 5000, "notified audit: 503"}};
        OK(store_deliveries_settle(g_db, "o2", stale, 1, &written, &g_err));
        ck_assert_int_eq(written, 0);
        OK(store_deliveries_settle(g_db, "o3", res, 2, &written, &g_err));
        ck_assert_int_eq(written, 0);
        OK(store_deliveries_settle(g_db, "o2", res, 2, &written, &g_err));
        ck_assert_int_eq(written, 2);
    }
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM notifications WHERE run_id = 'gone'"),
                     0);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM notifications WHERE run_id = 'gone2' "
                                      "AND owner IS NULL AND next_at > now()"),
                     1);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM run_events WHERE run_id LIKE 'gone%%'"),
                     0);
    /* A workflow's end keeps its object, steps and all. */
    PQclear(th_sql(g_pg, "INSERT INTO runs (tenant, id, type, max_attempts, timeout_s, input, "
                         "identity_hash, request_hash, reacts, status, worker_id, attempt, "
                         "started_at, wf_def, wf_steps) SELECT 'acme', 'wf', 'fix', 1, 60, '{}', "
                         "'iwf', 'rwf', reacts, 'running', 'w1', 1, now(), '[{\"name\": \"s1\", "
                         "\"run_type\": \"plain\"}]', '{\"s1\": {\"state\": \"succeeded\"}}' "
                         "FROM run_type_rules WHERE type = 'fix'"));
    PQclear(th_sql(g_pg, "UPDATE runs SET status = 'completed', outcome = 'succeeded', "
                         "completed_at = now() WHERE id = 'wf'"));
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM notifications WHERE run_id = 'wf' AND "
                                      "event = 'run.succeeded' AND run->'workflow'->'steps'->'s1'"
                                      "->>'state' = 'succeeded'"),
                     1);
    close_test_db();
}
END_TEST

/* Migration 037: the settle locks the run of a delivery of a transition
 * before its end before it touches the delivery's row, as 030 did.
 * Retention locks runs, then deletes their deliveries (runs_deleted): a
 * settle that took the row first deadlocked with it. Here a transaction
 * holds the run as retention does; the settle must wait for the run with
 * the row still free, and find it gone once the run is deleted. */
START_TEST(settle_locks_the_run_first)
{
    const char *const audit[] = {"audit"};
    const int room[] = {10};
    struct delivery *d;
    size_t n;
    PGconn *ret, *set;
    PGresult *r;
    char sql[256];
    int waited = 0;

    open_with_rules("it_notify_lock_order", 10);
    submit("r", "fix", "{\"pod\": \"web-1\"}");
    claim("w1", 1);
    d = claim_deliveries("o1", audit, room, 1, 30000, &n);
    ck_assert_uint_eq(n, 1);
    ck_assert_str_eq(d[0].event, "run.started");
    xsnprintf(sql, sizeof(sql),
              "SELECT opsrun_deliveries_settle('o1', '[{\"id\": %lld, \"attempts\": 1, "
              "\"retry_ms\": -1, \"message\": \"notified audit: 200\"}]')",
              (long long)d[0].id);
    ret = th_pg(g_ci);
    set = th_pg(g_ci);
    PQclear(th_sql(ret, "BEGIN"));
    PQclear(th_sql(ret, "SELECT 1 FROM runs WHERE id = 'r' FOR UPDATE"));
    ck_assert_int_eq(PQsendQuery(set, sql), 1);
    while (waited < 10000 && th_sql_int(g_pg,
                                        "SELECT count(*) FROM pg_stat_activity WHERE pid = %d "
                                        "AND wait_event_type = 'Lock'",
                                        PQbackendPID(set)) == 0) {
        th_sleep_ms(20);
        waited += 20;
    }
    ck_assert_int_lt(waited, 10000);
    /* the settle waits for the run, holding nothing of the outbox */
    xsnprintf(sql, sizeof(sql), "SELECT 1 FROM notifications WHERE id = %lld FOR UPDATE NOWAIT",
              (long long)d[0].id);
    r = PQexec(ret, sql);
    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "the settle holds the delivery: %s",
                  PQresultErrorMessage(r));
    PQclear(r);
    PQclear(th_sql(ret, "DELETE FROM runs WHERE id = 'r'"));
    PQclear(th_sql(ret, "COMMIT"));
    r = PQgetResult(set);
    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "the settle failed: %s",
                  PQresultErrorMessage(r));
    ck_assert_str_eq(PQgetvalue(r, 0, 0), "0");
    PQclear(r);
    while ((r = PQgetResult(set)) != NULL)
        PQclear(r);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM notifications"), 0);
    PQfinish(ret);
    PQfinish(set);
    delivery_cleanup(d, n);
    free(d);
    close_test_db();
}
END_TEST

/* Migration 031: a statement that ends several runs writes what each owes
 * together at its end: every run its own deliveries, with the run as the
 * statement left it, and its follow-ups; the claim that starts them, each
 * its "started". */
START_TEST(one_statement_owes_each_run)
{
    const char *const ids[] = {"a", "b", "c", "p"};
    const enum run_outcome outs[] = {OUTCOME_FAILED, OUTCOME_SUCCEEDED, OUTCOME_FAILED,
                                     OUTCOME_FAILED};
    json_t *err = json_pack("{s:s, s:s}", "code", "boom", "message", "no");
    struct run_finish fin[4];

    open_with_rules("it_notify_batch", 10);
    for (size_t i = 0; i < 4; i++)
        submit(ids[i], i == 3 ? "plain" : "fix", "{\"pod\": \"web\"}");
    claim("w1", 4); /* one statement */
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM notifications WHERE event = "
                                      "'run.started' AND notifier = 'audit' AND run->>'status' = "
                                      "'running'"),
                     3);
    for (size_t i = 0; i < 4; i++)
        fin[i] = (struct run_finish){.tenant = "acme",
                                     .id = ids[i],
                                     .attempt = 1,
                                     .res = {.outcome = outs[i],
                                             .error = outs[i] == OUTCOME_FAILED ? err : NULL,
                                             .message = "x"}};
    OK(store_runs_finish_batch(g_db, "w1", fin, 4, &g_err));
    for (size_t i = 0; i < 4; i++)
        ck_assert(fin[i].written);
    ck_assert_int_eq(owed("a", "audit", "run.failed"), 1);
    ck_assert_int_eq(owed("a", "chat", "run.failed"), 1);
    ck_assert_int_eq(owed("b", "audit", "run.succeeded"), 1);
    ck_assert_int_eq(owed("b", "chat", "run.succeeded"), 0);
    ck_assert_int_eq(owed("c", "audit", "run.failed"), 1);
    ck_assert_int_eq(owed("c", "chat", "run.failed"), 1);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM notifications WHERE run_id = 'p'"), 0);
    /* each with its own run, as the statement left it: built when it is
     * claimed */
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM notifications WHERE event <> "
                                      "'run.started' AND run IS NULL"),
                     5);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM " BODIES " WHERE event <> "
                                      "'run.started' AND (body->>'id' <> run_id OR "
                                      "body->>'status' <> 'completed' OR 'run.' || "
                                      "(body->>'outcome') <> event)"),
                     0);
    /* the follow-ups: page and fix of a and c, verify of b */
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE parent_id IN ('a', 'c') "
                                      "AND type IN ('page', 'fix')"),
                     4);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE parent_id = 'b' AND type "
                                      "= 'verify'"),
                     1);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE parent_id = 'p'"), 0);
    json_decref(err);
    close_test_db();
}
END_TEST

/* Migration 031: past 32 KB of notes in one statement, the further runs
 * are taken one by one: 1,500 runs ended by one UPDATE each owe exactly
 * one delivery, with its run; and the next statement of the transaction
 * owes only its own. */
START_TEST(a_large_statement_owes_each_run_once)
{
    open_with_rules("it_notify_large", 10);
    PQclear(th_sql(g_pg, "INSERT INTO runs (tenant, id, type, max_attempts, timeout_s, input, "
                         "identity_hash, request_hash, reacts, status, worker_id, attempt, "
                         "started_at) SELECT 'acme', CASE WHEN i <= 1500 THEN 'a-long-run-id-to-"
                         "fill-the-notes-' ELSE 'b-' END || i, 'verify', 5, 40, '{}', 'i' || i, "
                         "'r', (SELECT reacts FROM run_type_rules WHERE type = 'verify'), "
                         "'running', 'w1', 1, now() FROM generate_series(1, 1510) i"));
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM notifications"), 0);
    PQclear(th_sql(g_pg, "BEGIN"));
    PQclear(th_sql(g_pg, "SET LOCAL track_functions = 'pl'"));
    PQclear(th_sql(g_pg, "UPDATE runs SET status = 'completed', outcome = 'succeeded', "
                         "completed_at = now() WHERE id LIKE 'a-%%'"));
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM notifications"), 1500);
    /* both ways taken: one batch for the runs noted, the rest one by one */
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT pg_stat_get_xact_function_calls("
                                      "'opsrun_react_batch()'::regprocedure)"),
                     1);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT (pg_stat_get_xact_function_calls("
                                      "'opsrun_react()'::regprocedure) BETWEEN 100 AND 1400)::int"),
                     1);
    PQclear(th_sql(g_pg, "UPDATE runs SET status = 'completed', outcome = 'failed', "
                         "completed_at = now() WHERE id LIKE 'b-%%'"));
    PQclear(th_sql(g_pg, "COMMIT"));
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM notifications"), 1510);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM notifications WHERE run IS NULL"),
                     1510);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(DISTINCT run_id) FROM " BODIES " WHERE "
                                      "body->>'id' = run_id AND body->>'status' = 'completed' AND "
                                      "event = 'run.' || (body->>'outcome')"),
                     1510);
    close_test_db();
}
END_TEST

/* Migration 031: a run queued again with a concurrency key owes its
 * "retrying" from the BEFORE trigger, once, also in a statement past its
 * notes' 32 KB (where runs_react takes the other runs one by one). */
START_TEST(a_keyed_retry_past_the_notes_owes_once)
{
    open_with_rules("it_notify_keyed_over", 10);
    PQclear(th_sql(g_pg, "INSERT INTO runs (tenant, id, type, max_attempts, timeout_s, input, "
                         "identity_hash, request_hash, reacts, status, worker_id, attempt, "
                         "started_at, conc_group, conc_key, conc_max, conc_strategy) SELECT "
                         "'acme', CASE WHEN i <= 1500 THEN 'a-long-run-id-to-fill-the-notes-' "
                         "ELSE 'k-' END || i, CASE WHEN i <= 1500 THEN 'verify' ELSE 'fix' END, "
                         "5, 40, '{}', 'i' || i, 'r', (SELECT reacts FROM run_type_rules WHERE "
                         "type = CASE WHEN i <= 1500 THEN 'verify' ELSE 'fix' END), 'running', "
                         "'w1', 1, now(), CASE WHEN i > 1500 THEN 'g' END, CASE WHEN i > 1500 "
                         "THEN 'k' || i END, CASE WHEN i > 1500 THEN 1 END, CASE WHEN i > 1500 "
                         "THEN 'queue' END FROM generate_series(1, 1505) i ORDER BY i"));
    PQclear(th_sql(g_pg, "UPDATE runs SET status = CASE WHEN type = 'verify' THEN 'completed' "
                         "ELSE 'queued' END, outcome = CASE WHEN type = 'verify' THEN "
                         "'succeeded' ELSE outcome END, completed_at = CASE WHEN type = 'verify' "
                         "THEN now() END, worker_id = CASE WHEN type = 'verify' THEN worker_id "
                         "END"));
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM notifications WHERE event = "
                                      "'run.succeeded'"),
                     1500);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM notifications WHERE event = "
                                      "'run.retrying' AND run->>'status' = 'queued'"),
                     5);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM notifications WHERE event = "
                                      "'run.retrying'"),
                     5);
    close_test_db();
}
END_TEST

/* Migration 031: only a noted end makes follow-ups. Here a trigger of the
 * test ends run x, failed, in the statement that starts it, after its
 * start was noted (no trigger of opsrun does that: migration 031 leaves
 * such runs to runs_react): the end's own statement owes its deliveries
 * and follow-ups, and the start's note, written at the outer statement's
 * end when x has ended, makes none again (each follow-up reported once). */
START_TEST(a_noted_start_ended_since_is_followed_up_once)
{
    open_with_rules("it_notify_ended_since", 10);
    submit("x", "fix", "{\"pod\": \"web\"}");
    PQclear(th_sql(g_pg, "CREATE FUNCTION test_end_x() RETURNS trigger LANGUAGE plpgsql AS "
                         "$$BEGIN UPDATE runs SET status = 'completed', outcome = 'failed', "
                         "completed_at = now(), error = '{\"code\": \"x\", \"message\": "
                         "\"x\"}' WHERE tenant = NEW.tenant AND id = NEW.id; RETURN NULL; "
                         "END$$"));
    PQclear(th_sql(g_pg, "CREATE TRIGGER test_end_x AFTER UPDATE OF status ON runs FOR EACH ROW "
                         "WHEN (NEW.id = 'x' AND NEW.status = 'running') EXECUTE FUNCTION "
                         "test_end_x()"));
    claim("w1", 1);
    ck_assert_int_eq(owed("x", "audit", "run.started"), 1);
    ck_assert_int_eq(owed("x", "audit", "run.failed"), 1);
    ck_assert_int_eq(owed("x", "chat", "run.failed"), 1);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM runs WHERE parent_id = 'x'"), 2);
    ck_assert_int_eq(events_like("x", "follow_up", "%) created: %"), 2);
    ck_assert_int_eq(events_like("x", "follow_up", "%not created%"), 0);
    close_test_db();
}
END_TEST

/* The plans auto_explain reports, received as notices (bounded). */
static char g_plans[1 << 16];
static size_t g_plans_len;

static void plan_notice(void *arg, const PGresult *r)
{
    const char *m = PQresultErrorMessage(r);
    size_t n = strlen(m);

    (void)arg;
    if (n > sizeof(g_plans) - 1 - g_plans_len)
        n = sizeof(g_plans) - 1 - g_plans_len;
    memcpy(g_plans + g_plans_len, m, n);
    g_plans_len += n;
    g_plans[g_plans_len] = '\0';
}

/* Migration 030: the claim's plan is made at a connection's first claim
 * and kept; made on an empty outbox, it must still suit 3,000 deliveries
 * waiting: a notifier's due rows read in order up to its room, and the
 * test that no earlier delivery of the same run to the same notifier is
 * still owed a lookup of that run's rows (notifications_run), never a
 * scan of the notifier's rows for each candidate (0.9 s a claim). The
 * plans are those of the statements inside opsrun_deliveries_claim. */
START_TEST(claim_plan_on_a_young_outbox)
{
    PQnoticeReceiver old;

    open_with_rules("it_notify_young", 10);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM opsrun_deliveries_claim('o', "
                                      "'{audit}', '{8}', 30000)"),
                     0); /* planned on an empty outbox */
    PQclear(th_sql(g_pg, "INSERT INTO notifications (tenant, run_id, run_created_at, notifier, "
                         "event, run) SELECT 'acme', 'r' || (i / 2), now(), 'audit', CASE WHEN "
                         "i %% 2 = 0 THEN 'run.started' ELSE 'run.succeeded' END, '{}' FROM "
                         "generate_series(0, 2999) i"));
    g_plans_len = 0;
    g_plans[0] = '\0';
    old = PQsetNoticeReceiver(g_pg, plan_notice, NULL);
    PQclear(th_sql(g_pg, "LOAD 'auto_explain'"));
    PQclear(th_sql(g_pg, "SET auto_explain.log_min_duration = 0"));
    PQclear(th_sql(g_pg, "SET auto_explain.log_nested_statements = on"));
    PQclear(th_sql(g_pg, "SET client_min_messages = log"));
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(th_sql_int(g_pg,
                                    "SELECT count(*) FROM opsrun_deliveries_claim('o%d', "
                                    "'{audit}', '{8}', 30000)",
                                    i),
                         8);
    PQclear(th_sql(g_pg, "SET client_min_messages = notice"));
    PQsetNoticeReceiver(g_pg, old, NULL);
    /* Each run's started delivery, never its later one. */
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM notifications WHERE owner IS NOT "
                                      "NULL AND event = 'run.started'"),
                     24);
    ck_assert_msg(strstr(g_plans, "Scan using notifications_run"), "plans: %.3000s", g_plans);
    ck_assert_msg(!strstr(g_plans, "Bitmap") && !strstr(g_plans, "Seq Scan") &&
                      !strstr(g_plans, "Sort"),
                  "plans: %.3000s", g_plans);
    close_test_db();
}
END_TEST

/* Migration 030: the outbox has no foreign key to runs; the deliveries of
 * the runs a statement deletes go with them, whether retention deletes
 * them or a binary from before, and those of other runs stay. */
START_TEST(deleted_runs_take_their_deliveries)
{
    int deleted = 0;

    open_with_rules("it_notify_deleted", 10);
    submit("r", "fix", "{}");
    submit("s", "fix", "{}");
    submit("t", "fix", "{}");
    claim("w1", 3);
    finish("r", 1, OUTCOME_FAILED, "x");
    finish("s", 1, OUTCOME_SUCCEEDED, NULL);
    finish("t", 1, OUTCOME_SUCCEEDED, NULL);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM notifications WHERE run_id = 'r'"), 3);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM notifications WHERE run_id IN ('s', "
                                      "'t')"),
                     4);
    PQclear(th_sql(g_pg, "UPDATE runs SET completed_at = now() - interval '2 hours' WHERE id = "
                         "'r'"));
    OK(store_runs_prune(g_db, 3600, 100, &deleted, &g_err));
    ck_assert_int_eq(deleted, 1);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM notifications WHERE run_id = 'r'"), 0);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM notifications WHERE run_id IN ('s', "
                                      "'t')"),
                     4);
    PQclear(th_sql(g_pg, "DELETE FROM runs WHERE id = 's'"));
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM notifications WHERE run_id = 's'"), 0);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM notifications WHERE run_id = 't'"), 2);
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM pg_constraint WHERE conrelid = "
                                      "'notifications'::regclass AND contype = 'f'"),
                     0);
    close_test_db();
}
END_TEST

/* The same template over the same run gives the same text in SQL as in C;
 * a pointer that finds nothing, nothing in either. */
START_TEST(placeholders_agree)
{
    static const char *const cases[] = {
        "{{run:/id}}",
        "plain text",
        "{{run:/input/pod}} on {{run:/type}}",
        "n={{run:/input/n}} f={{run:/input/f}} b={{run:/input/b}} z={{run:/input/z}}",
        "{{run:/input/tags}} {{run:/input/tags/1}} {{run:/input/obj}}", /* one key: one order */
        "{{run:/input/a~1b}} {{run:/input/c~0d}} {{run:/input/}}",
        "é ü {{run:/input/u}} ✓",
        "{{run:/input/tags/01}}",
        "{{run:/input/tags/-}}",
        "{{run:/input/tags/2}}",
        "{{run:/nope}}",
    };
    const char *doc_text =
        "{\"id\": \"r1\", \"type\": \"fix\", \"input\": {\"pod\": \"web-1\", \"n\": 3, \"f\": 2.5, "
        "\"b\": true, \"z\": null, \"tags\": [\"a\", \"b\"], \"obj\": {\"k\": \"v\"}, \"a/b\": 1, "
        "\"c~d\": 2, \"\": \"empty\", \"u\": \"naïve\"}}";
    json_t *doc = json_loads(doc_text, 0, NULL);

    open_test_db("it_notify_placeholders");
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct error err = {0};
        char *c = NULL, *sql = NULL, *q;
        enum status st = tmpl_expand_text(cases[i], doc, false, TMPL_AS_IS, &c, &err);
        PGresult *r;
        const char *p[2] = {cases[i], doc_text};

        r = PQexecParams(g_pg,
                         "SELECT v #>> '{}', missing FROM opsrun_expand(to_jsonb($1::text), "
                         "$2::jsonb)",
                         2, NULL, p, NULL, NULL, 0);
        ck_assert_int_eq(PQresultStatus(r), PGRES_TUPLES_OK);
        if (!PQgetisnull(r, 0, 0))
            sql = strdup(PQgetvalue(r, 0, 0));
        q = PQgetisnull(r, 0, 1) ? NULL : PQgetvalue(r, 0, 1);
        if (st == ST_OK) {
            ck_assert_msg(sql && strcmp(c, sql) == 0, "%s: C \"%s\", SQL \"%s\"", cases[i], c,
                          sql ? sql : "(missing)");
        } else {
            ck_assert_int_eq(st, ST_NOT_FOUND);
            ck_assert_msg(!sql && q, "%s: SQL found \"%s\"", cases[i], sql);
        }
        PQclear(r);
        free(c);
        free(sql);
    }
    /* A string that is one placeholder keeps the value's type. */
    ck_assert_int_eq(th_sql_int(g_pg, "SELECT count(*) FROM opsrun_expand('{\"a\": "
                                      "\"{{run:/x}}\", \"b\": [\"{{run:/y}}\"]}', '{\"x\": {\"k\": "
                                      "1}, \"y\": 2}') WHERE v = '{\"a\": {\"k\": 1}, \"b\": "
                                      "[2]}'"),
                     1);
    json_decref(doc);
    close_test_db();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("notify");
    TCase *tc = tcase_create("notify");

    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, rules_sync_and_reacts);
    tcase_add_test(tc, transitions_owe_deliveries);
    tcase_add_test(tc, rollback_owes_nothing);
    tcase_add_test(tc, follow_ups_created);
    tcase_add_test(tc, follow_ups_bounded);
    tcase_add_test(tc, racing_completions);
    tcase_add_test(tc, outbox_claim_and_settle);
    tcase_add_test(tc, outcome_object_built_at_claim);
    tcase_add_test(tc, settle_locks_the_run_first);
    tcase_add_test(tc, claim_plan_on_a_young_outbox);
    tcase_add_test(tc, one_statement_owes_each_run);
    tcase_add_test(tc, a_large_statement_owes_each_run_once);
    tcase_add_test(tc, a_keyed_retry_past_the_notes_owes_once);
    tcase_add_test(tc, a_noted_start_ended_since_is_followed_up_once);
    tcase_add_test(tc, deleted_runs_take_their_deliveries);
    tcase_add_test(tc, placeholders_agree);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
