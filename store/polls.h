/* store/polls.h — the poll schedule of waiting runs (migrations 005 and
 * 012): the worker's hand-over to waiting, the poller's claims of due checks
 * and due terminal hooks, and the writes of a check's result, fenced by its
 * claim.
 *
 * The schedule is the narrow table run_polls, one row per waiting run. A
 * claim writes only that row: it moves next_poll_at lease_ms ahead, records
 * the claim's owner in poll_owner and the check's number in poll_count.
 * Until the lease passes no replica finds the run due, so at most one check
 * per run is in flight anywhere; a replica that dies mid-check leaves the run
 * due again at the lease's end. A check's result is written only while the
 * schedule row's poll_owner and poll_count still match and the run still
 * waits (otherwise ST_LOST: the run was cancelled, or the lease passed and
 * another replica took over); it writes the schedule row and the runs row's
 * poll_count, next_poll_at and poll_state (a HOT update: none is indexed).
 * Hooks are claimed from the runs row (hooks_at, poll_owner), not from
 * run_polls: they are due once the run has ended, when it no longer waits
 * and so has no schedule row.
 *
 * The owner is the caller's name for one claim, never reused (the poller
 * passes its replica's worker id and the claim's number, "w-.../17"): a
 * claim given back takes its count (or try) back, so the count alone would
 * match again at the next claim of the run, and a late duplicate of a
 * write for the old claim (a batch tried again after its commit was not
 * confirmed) would pass the new claim's fence. Owners are at most
 * POLL_OWNER_MAX - 1 bytes.
 *
 * Functions run on the caller's db handle (one thread at a time) and return
 * ST_OK or a failure with *err filled. */
#ifndef OPSRUN_STORE_POLLS_H
#define OPSRUN_STORE_POLLS_H

#include "store/runs.h"

/* The poll budget of a waiting run: the most checks, and the longest wait
 * (migration 010 stores it on the run when it begins waiting). */
struct poll_budget {
    int max_checks;
    int64_t max_duration_s;
};

/* start() asked to wait on an external job: running -> waiting with the
 * first check delay_ms from now and the budget stored on the run (the
 * poller enforces it, the run object shows it), fenced like the worker's
 * other writes. A run that was asked to cancel meanwhile ends cancelled
 * instead, with its hooks (the remote cancel, cleanup) due at once and no
 * poll schedule: then *cancelled is true (cancelled may be NULL). */
enum status store_runs_wait(struct db *db, const struct fence *f, const char *external_id,
                            const json_t *poll_state, int64_t delay_ms,
                            const struct poll_budget *budget, bool *cancelled,
                            struct error *err) WUR;
/* The budget stored on a run that began waiting (its JSON "poll"); false,
 * *out untouched, when it has none (it never waited, or began waiting
 * before migration 010). */
bool run_poll_budget(const struct run *run, struct poll_budget *out);

#define POLL_OWNER_MAX 96

/* One claimed check (or hooks run) of a waiting (or completed) run. */
struct poll_claim {
    /* A check's run carries in its JSON only id, tenant, type, status,
     * outcome, attempt, input, external_id, started_at and updated_at (what
     * run_input and run_seconds_between read); a hooks claim's, the whole
     * run. */
    struct run *run;
    char *external_id;          /* NULL when none */
    json_t *poll_state;         /* an object, never NULL */
    int poll_count;             /* this check's number: the fence */
    int64_t waited_ms;          /* since the run began waiting */
    int hooks_attempts;         /* hooks claims: this try's number */
    char owner[POLL_OWNER_MAX]; /* the claim's owner, as claimed */
};
void poll_claims_free(struct poll_claim *c, size_t n); /* NULL is a no-op */

/* Claims up to limit due checks of the given run types for owner, leased
 * for lease_ms, in one statement; *out is a heap array of *n claims. An
 * owner of POLL_OWNER_MAX bytes or more is ST_INVALID. A due
 * schedule row whose run no longer waits (cancelled, deleted) is deleted
 * instead, and counts against limit. */
enum status store_polls_claim(struct db *db, const char *owner, int limit, int64_t lease_ms,
                              const char *const *types, size_t ntypes, struct poll_claim **out,
                              size_t *n, struct error *err) WUR;
/* Claims up to limit runs whose terminal hooks are due, likewise. */
enum status store_hooks_claim(struct db *db, const char *owner, int limit, int64_t lease_ms,
                              const char *const *types, size_t ntypes, struct poll_claim **out,
                              size_t *n, struct error *err) WUR;
/* Hooks claims that ran no hook (left in the queue, or queued at a stop):
 * due again at once, their try taken back, so that no try of the run's
 * budget is spent and no one waits out the lease. Each is fenced on its
 * owner and its try (owners[i] and refs[i].attempt: poll_claim.owner and
 * .hooks_attempts); *given gets the runs given back. */
enum status store_hooks_give_back(struct db *db, const struct run_ref *refs,
                                  const char *const *owners, size_t n, int *given,
                                  struct error *err) WUR;
/* Milliseconds until the next check or hooks of these types are due (0
 * when some are due now), -1 when none are scheduled. */
enum status store_polls_next_due(struct db *db, const char *const *types, size_t ntypes,
                                 int64_t *ms, struct error *err) WUR;

/* Over every replica: waiting runs whose check is overdue by more than a
 * second (*overdue), and how late the most overdue one is (*lag_ms, 0 when
 * none). A check in flight is not overdue. */
enum status store_polls_lag(struct db *db, int64_t *overdue, int64_t *lag_ms,
                            struct error *err) WUR;

/* Identifies one claimed check. */
struct poll_fence {
    const char *tenant, *id, *owner;
    int poll_count;
};

/* One next check for store_polls_again_batch (strings and poll_state
 * borrowed): the job is still going, or the check failed transiently, or
 * the claim is given back unchecked. */
struct poll_again {
    const char *tenant, *id, *owner; /* owner: the claim's */
    int poll_count;
    const json_t *poll_state; /* NULL: {} */
    int64_t delay_ms;
    bool written;    /* out: the check's fence held */
    bool given_back; /* the claim made no check: its count is taken back */
};
/* The next checks of n claimed runs, each delay_ms from now with
 * the action's new poll_state, in one statement (one commit), each fenced
 * on its own claim; a[i].written says which were written. A fence
 * that no longer holds is not an error. A delay past the end of the run's
 * wait (poll_started_at + its stored max_duration_s) is cut to it, so the
 * run gives up when its run object says (poll.give_up_at). */
enum status store_polls_again_batch(struct db *db, struct poll_again *a, size_t n,
                                    struct error *err) WUR;
/* The check ended the run (res->outcome), writing its event and the checks
 * it made: f->poll_count, or one less when the claim found the budget spent
 * and made none. The run's hooks become due after hooks_lease_ms, still
 * owned by f->owner, which is expected to run them at once and then call
 * store_hooks_done. */
enum status store_polls_finish(struct db *db, const struct poll_fence *f, int checks,
                               const struct run_result *res, const json_t *poll_state,
                               int64_t hooks_lease_ms, struct error *err) WUR;
/* The hooks of a run ran (ok) or failed: done when ok or after
 * max_attempts tries, else due again after retry_ms; poll_state (NULL:
 * unchanged) records what they did, so a later try skips what is done.
 * Only while owner still holds them. */
enum status store_hooks_done(struct db *db, const char *tenant, const char *id, const char *owner,
                             bool ok, const json_t *poll_state, int max_attempts, int64_t retry_ms,
                             struct error *err) WUR;

#endif
