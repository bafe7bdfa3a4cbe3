/* store/notify.h — what runs set off when their status changes
 * (migrations/017_notifications.sql): the rules each replica writes from its
 * configuration, and the outbox of deliveries the notifier threads of every
 * replica claim, send and settle. The deliveries and follow-up runs
 * themselves are created by the trigger on runs, in the transaction of the
 * transition.
 *
 * On the caller's db handle (one thread at a time); ST_OK or a failure with
 * *err filled. */
#ifndef OPSRUN_STORE_NOTIFY_H
#define OPSRUN_STORE_NOTIFY_H

#include "common/common.h"

struct db;

/* Writes rules, a JSON array of {"type", "max_attempts", "timeout_s",
 * "notify", "follow_ups", "approval_timeout_s", "approval_on_timeout",
 * "conc_group", "conc_parts", "conc_max", "conc_strategy"} (the
 * run_type_rules columns; a member left out is NULL), one per configured
 * run type, with max_chain_depth, into run_type_rules: rows that change
 * are rewritten, and the active runs of a type whose rules name other
 * transitions than before follow them (runs.reacts). *types and *runs
 * (either may be NULL): how many types and active runs changed. */
enum status store_rules_sync(struct db *db, const char *rules, int max_chain_depth, int *types,
                             int64_t *runs, struct error *err) WUR;

/* A delivery claimed for one attempt. */
struct delivery {
    int64_t id;
    char delivery_id[40];
    char *tenant, *run_id, *notifier, *event;
    char *run_json; /* the run object as the transition left it */
    int attempts;   /* this attempt's number, from 1: the fence of its result */
    int64_t age_ms; /* from the delivery's creation to the claim, by the database's clock */
};
void delivery_cleanup(struct delivery *d, size_t n); /* frees the strings of d[0..n) */

/* Claims, for each notifiers[i], up to rooms[i] due deliveries, the oldest
 * first, and of one run only the first still owed to that notifier (a
 * run's deliveries to a notifier go out in order). Each is leased to owner
 * for lease_ms: no other claim takes it before then. *out (heap, n_out
 * entries; delivery_cleanup then free) holds what was claimed. */
enum status store_deliveries_claim(struct db *db, const char *owner, const char *const *notifiers,
                                   const int *rooms, size_t n, int lease_ms, struct delivery **out,
                                   size_t *n_out, struct error *err) WUR;

/* The end of one attempt: retry_ms < 0 settles the delivery (delivered or
 * given up: the row goes), else it is due again after retry_ms. message is
 * the run event that records the attempt. */
struct delivery_result {
    int64_t id;
    int attempts;
    int64_t retry_ms;
    const char *message;
};
/* Writes results, each only while owner still holds that attempt (its
 * lease not taken over), with its event of type "notification" on the run,
 * in one statement. *written (may be NULL): how many were. */
enum status store_deliveries_settle(struct db *db, const char *owner,
                                    const struct delivery_result *results, size_t n, int *written,
                                    struct error *err) WUR;
/* Hands back claimed attempts that were not made (a shutdown): due now,
 * the attempt not counted. */
enum status store_deliveries_give_back(struct db *db, const char *owner, const int64_t *ids,
                                       size_t n, struct error *err) WUR;

/* Deliveries owed, and the seconds the oldest due one has waited (0 when
 * none is due). */
enum status store_deliveries_pending(struct db *db, int64_t *pending, double *oldest_due_s,
                                     struct error *err) WUR;

#endif
