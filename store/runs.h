/* store/runs.h — runs and their events on the caller's db handle (one
 * thread at a time). Every query is scoped by tenant, except the engine's
 * claim/heartbeat/rescue/retention statements, which work across tenants by
 * design and are fenced by worker id and attempt where they write a run,
 * and the two an admin's reads use (store_runs_list with a NULL tenant,
 * store_runs_locate), which say so.
 * Every change of status, outcome or progress inserts its run_events row in
 * the same statement. Functions return ST_OK or a failure with *err filled.
 *
 * One header for the runs' sources: runs.c what a client asks of one run or
 * a list (submit, get, list, locate, cancel, completions, events, the
 * count of held runs);
 * runs_batch.c many submissions in one statement (store_runs_submit_batch);
 * runs_retry.c a run submitted again (store_runs_resubmit); runs_engine.c
 * the engine's statements (claim, progress, finish, state, retry, release,
 * heartbeat, rescue, prune, counts, store_notify). runs_bulk.h is
 * runs_bulk.c's, runs_internal.h what they share. */
#ifndef OPSRUN_STORE_RUNS_H
#define OPSRUN_STORE_RUNS_H

#include "common/common.h"
#include "store/rate_limits.h"
#include "store/run_state.h"

#include <jansson.h>

struct db;

/* A run as read from the database. json is the API representation
 * (docs/api.md, "The run object"); the scalar fields are copies for the engine.
 * A run claimed by store_runs_claim has no json: only what executing it
 * needs, its input and the two durations below. */
struct run {
    char *tenant, *id, *type;
    enum run_status status;
    enum run_outcome outcome;
    int attempt, max_attempts;
    bool has_deadline;
    int64_t deadline_left_ms; /* time left when read, by the database's clock */
    int64_t created_us;
    json_t *json;  /* owned; NULL for a claimed run */
    json_t *input; /* owned; a claimed run's input (else NULL: it is in json) */
    /* A claimed run, by the database's clock at the claim: how long it had
     * been due (run_at to the claim) and how long it ran before this attempt
     * (its first start to the claim; 0 on a first attempt). */
    double claim_due_s, claim_ran_s;
};
void run_free(struct run *run); /* NULL is a no-op */
/* Seconds from one of the run's timestamps to another, members of its JSON
 * ("run_at", "started_at", "updated_at", "completed_at"), both by the
 * database's clock; -1 when either is null or absent. */
double run_seconds_between(const struct run *run, const char *from, const char *to);
bool run_is_terminal(const struct run *run);
/* The run's input (borrowed from the run). */
const json_t *run_input(const struct run *run);

struct run_new {
    const char *tenant, *id, *type;
    const char *initiator; /* a token's name or "anonymous"; NULL: "system" (opsrun's own) */
    int priority;
    const char *run_at; /* RFC 3339, NULL = now */
    int max_attempts, timeout_s;
    const json_t *input;
    const char *identity_hash, *request_hash;
    /* The schedule that makes the run, and its slot (RFC 3339; NULL for a
     * run triggered through the API); both NULL for any other run. */
    const char *schedule_name, *schedule_slot;
    /* The run type's approval (migration 018): a new run waits, pending,
     * for up to approval_timeout_s, then is approved when
     * approve_on_timeout, else rejected; 0 = none, the run is queued. */
    int approval_timeout_s;
    bool approve_on_timeout;
};

/* Inserts the run, or finds the run it joins: *dedup true and the existing
 * run when the id exists with the same request_hash or an active run has the
 * same identity; ST_CONFLICT when the id exists with another request_hash. */
enum status store_runs_submit(struct db *db, const struct run_new *rn, struct run **out,
                              bool *dedup, struct error *err) WUR;
/* One item's answer from store_runs_submit_batch. */
struct run_submitted {
    enum status st;    /* ST_OK; ST_CONFLICT: the id exists with another request_hash;
                        * ST_UNAVAILABLE: the identity could not be settled */
    struct run *run;   /* on ST_OK the new or joined run, owned (run_submitted_cleanup) */
    bool dedup;        /* on ST_OK: joined rather than inserted */
    char message[200]; /* when st is not ST_OK */
};
/* store_runs_submit for each of items[0..n), with the same answers as if
 * they were submitted one after another in order (duplicates within items
 * included), in one statement when no two items share an id or identity,
 * in few otherwise (store/runs_batch.c). Each statement commits on its own.
 * out[0..n) is filled on ST_OK; a failure of the database fails the whole
 * call (the items settled before it stay stored). */
enum status store_runs_submit_batch(struct db *db, const struct run_new *items, size_t n,
                                    struct run_submitted *out, struct error *err) WUR;
void run_submitted_cleanup(struct run_submitted *out, size_t n); /* frees the runs */
enum status store_runs_get(struct db *db, const char *tenant, const char *id, struct run **out,
                           struct error *err) WUR;
/* The run as GET /runs/{id} shows it (docs/api.md, "Why a run waits"):
 * its json as store_runs_get's, with "waiting_for" last (null, or
 * {"reason", "running", "max_running"}: the run is queued and waits for its
 * concurrency key, held or due while the key's runs fill it; else due
 * while its tenant has tenant_cap runs running or cancelling, tenant_cap
 * 0 for no cap) and, for a run with a concurrency key, "holders" last in
 * its "concurrency": the ids of at most 10 other runs of its key running or
 * cancelling, the first started first ([] for a completed run).
 * ST_NOT_FOUND when there is no such run. */
enum status store_runs_get_detail(struct db *db, const char *tenant, const char *id, int tenant_cap,
                                  struct run **out, struct error *err) WUR;
/* The joinable (queued, running or waiting) run with this identity;
 * ST_NOT_FOUND if none. */
enum status store_runs_get_active(struct db *db, const char *tenant, const char *identity_hash,
                                  struct run **out, struct error *err) WUR;

struct run_filter {
    bool has_status, has_outcome; /* false = any */
    enum run_status status;
    enum run_outcome outcome;
    const char *type, *external_id; /* NULL = any */
    const char *initiator;          /* NULL = any */
    const char *schedule;           /* runs this schedule made; NULL = any */
    bool approval_pending;          /* only runs awaiting approval */
    const char *parent_id;          /* follow-ups of this run; NULL = any */
    const char *conc_key;           /* runs of this concurrency key; NULL = any */
    const char *conc_group;         /* runs of this concurrency group; NULL = any */
    int limit;                      /* 1..500 */
    bool has_cursor;
    int64_t cursor_us;
    char cursor_id[129];
};
/* *runs gets a new JSON array; *next_cursor a heap token or NULL. tenant
 * NULL lists every tenant's runs (an admin's list). */
enum status store_runs_list(struct db *db, const char *tenant, const struct run_filter *f,
                            json_t **runs, char **next_cursor, struct error *err) WUR;
/* The one tenant that has a run with this id, into tenant (an admin's
 * request by id, which may reach every tenant): ST_NOT_FOUND when none,
 * ST_CONFLICT when several do. */
enum status store_runs_locate(struct db *db, const char *id, char tenant[65],
                              struct error *err) WUR;
/* queued/waiting end cancelled now, running becomes cancelling; *changed is
 * false when nothing changed (already cancelling, or completed). */
enum status store_runs_cancel(struct db *db, const char *tenant, const char *id, struct run **out,
                              bool *changed, struct error *err) WUR;
/* What a retry (POST /runs/{id}/retry) starts from: the completed run `of`
 * in tenant, and what the run type says today. */
struct run_resubmit {
    const char *tenant, *of;
    const char *id;        /* the new run's */
    const char *initiator; /* who asks (a token's name, "anonymous"); NULL: "system" */
    int max_attempts, timeout_s;
    int approval_timeout_s; /* as in struct run_new */
    bool approve_on_timeout;
};
/* A new run repeating the completed run `of` that did not succeed: its
 * type, input, priority and identity, queued now, with retry_of = `of`.
 * When an active run has that identity, it is joined instead, as a
 * submission would join it: *dedup true and *out that run. ST_NOT_FOUND
 * when `of` does not exist (any more); ST_CONFLICT when it is not completed
 * or succeeded. */
enum status store_runs_resubmit(struct db *db, const struct run_resubmit *rs, struct run **out,
                                bool *dedup, struct error *err) WUR;
/* Runs completed in the last `seconds`, per second and outcome, for the
 * dashboard's chart: {"end", "seconds", "counts": [{"at", "outcome", "n"}]}
 * (new reference). tenant NULL counts every tenant's (an admin's). */
enum status store_runs_completions(struct db *db, const char *tenant, int seconds, json_t **out,
                                   struct error *err) WUR;
/* The run's events, oldest first, as a new JSON array; ST_NOT_FOUND when the
 * run does not exist. */
enum status store_events_list(struct db *db, const char *tenant, const char *run_id,
                              json_t **events, struct error *err) WUR;

/* ---- the engine's side ---- */

/* Identifies one attempt of one run held by one worker. */
struct fence {
    const char *tenant, *id, *worker_id;
    int attempt;
};

/* The caps on the running runs of tenants, for a claim: names[i]'s at most
 * caps[i] (0: no cap), every other tenant's at most default_cap (0: no
 * cap). The arrays are the caller's. */
struct claim_tenants {
    const char *const *names;
    const int *caps;
    size_t n;
    int default_cap;
};
/* Claims up to limit due runs (see opsrun_claim in migrations/022): the
 * ready tenants in turn, priority within each, each run's concurrency key
 * respected (a run whose key is full is held until it frees).
 * types/caps/rates: the run types this process executes, their caps (0 =
 * none) and their rate limits (rates NULL, or an entry NULL, for none; each
 * run started takes a unit of its type's limit, migration 016). tenants
 * (NULL: no caps) caps each tenant's running runs.
 * *out gets a heap array of *n runs, without json (struct run). */
enum status store_runs_claim_fair(struct db *db, const char *worker_id, int limit, int max_running,
                                  const char *const *types, const int *caps,
                                  const struct rate_limit *const *rates, size_t ntypes,
                                  const struct claim_tenants *tenants, struct run ***out, size_t *n,
                                  struct error *err) WUR;
/* store_runs_claim_fair without tenant caps. */
enum status store_runs_claim(struct db *db, const char *worker_id, int limit, int max_running,
                             const char *const *types, const int *caps,
                             const struct rate_limit *const *rates, size_t ntypes,
                             struct run ***out, size_t *n, struct error *err) WUR;
/* Releases the held runs of every key that has room for them (see
 * opsrun_conc_sweep in migrations/022): what a lost release would leave
 * waiting. *released (optional) gets how many. */
enum status store_runs_conc_sweep(struct db *db, int *released, struct error *err) WUR;
/* Advances up to limit workflows whose row a step's end found locked (see
 * opsrun_wf_sweep in migrations/024), each whose row is free now; *taken
 * (optional) gets how many. */
enum status store_runs_wf_sweep(struct db *db, int limit, int *taken, struct error *err) WUR;
/* Milliseconds until the next delayed queued run is due (-1 = none, 0 =
 * already), and whether a queued run is due now that a claim just left
 * behind (a cap was reached, or its type is not executed here), or is held
 * for its concurrency key (a finish here may free the key).
 * claim_began_us is when that claim began (clock_mono_us): a run that
 * became due after it began, or may have, is reported as due in 0 ms, not as
 * left behind, so the caller claims again instead of waiting for its next
 * poll. Only a run due before the claim certainly began is left behind: the
 * time the claim took is measured after this statement returns, so that it
 * bounds every delay between this process and the database. */
enum status store_runs_next_due(struct db *db, int64_t claim_began_us, int64_t *ms, bool *due_now,
                                struct error *err) WUR;

/* Fenced writes: ST_LOST when the run is no longer this attempt's. */
enum status store_runs_progress(struct db *db, const struct fence *f, int progress,
                                const char *step, struct error *err) WUR;
struct run_result {
    enum run_outcome outcome;                                        /* any but OUTCOME_PENDING */
    const json_t *result, *error, *summary_counts, *failure_summary; /* may be NULL */
    const char *message;                                             /* for the event */
};
enum status store_runs_finish(struct db *db, const struct fence *f, const struct run_result *res,
                              struct error *err) WUR;
/* One attempt's end for store_runs_finish_batch (borrowed strings). */
struct run_finish {
    const char *tenant, *id;
    int attempt;
    struct run_result res;
    /* the attempt's last log lines (store/logs.h), written with the end;
     * log_nlines 0: none */
    const char *log_lines_json;
    int log_nlines;
    int64_t log_dropped;
    bool written; /* out: the fence held, the run is completed */
};
/* store_runs_finish for n runs held by worker_id, in one statement (one
 * commit): each run is fenced on its own, and written with its terminal
 * event only while this attempt still holds it. fin[i].written says which
 * were; a fence that no longer holds is not an error. On failure nothing
 * was written. */
enum status store_runs_finish_batch(struct db *db, const char *worker_id, struct run_finish *fin,
                                    size_t n, struct error *err) WUR;
/* The action's own record of what it created on remote systems before it
 * could wait (preparation steps), kept in poll_state across attempts and
 * crashes. cleanup_due: something may need deleting, so every transition
 * that ends the run makes its terminal hooks due (migration 006). */
enum status store_runs_save_state(struct db *db, const struct fence *f, const json_t *state,
                                  bool cleanup_due, struct error *err) WUR;
/* The state saved by an earlier attempt (or earlier in this one) while it
 * still needs cleaning up: *state a new object, or NULL when none. */
enum status store_runs_load_state(struct db *db, const struct fence *f, json_t **state,
                                  struct error *err) WUR;
/* Back to queued after delay_ms, the failure recorded (a cancelling run ends
 * cancelled instead: then *cancelled is true; cancelled may be NULL). */
enum status store_runs_retry(struct db *db, const struct fence *f, int64_t delay_ms,
                             const json_t *error, bool *cancelled, struct error *err) WUR;
/* Shutdown: hands the run back to the queue without spending the attempt
 * (or, as store_runs_retry, ends a cancelling run cancelled). */
enum status store_runs_release(struct db *db, const struct fence *f, bool *cancelled,
                               struct error *err) WUR;

/* Called once per run of a result: one attempt of one run. */
typedef void (*run_ref_fn)(void *arg, const char *tenant, const char *id, int attempt);

/* One attempt of one run, as the worker knows it. */
struct run_ref {
    const char *tenant, *id;
    int attempt;
};

/* One statement refreshing heartbeat_at of the runs the worker says it is
 * executing (refs), and only those that are still its own: a row that names
 * this worker but is not in refs (a claim whose answer was lost, a run the
 * worker gave up on) goes stale and is rescued. fn (optional) is called for
 * each run still held, so the worker can stop the ones it lost (rescued,
 * re-claimed or ended elsewhere); *held (optional) gets their number. */
enum status store_runs_heartbeat(struct db *db, const char *worker_id, const struct run_ref *refs,
                                 size_t nrefs, int *held, run_ref_fn fn, void *arg,
                                 struct error *err) WUR;
/* Calls fn for each run of this worker in status cancelling. */
enum status store_runs_cancelling(struct db *db, const char *worker_id, run_ref_fn fn, void *arg,
                                  struct error *err) WUR;
/* Requeues (or fails, past max_attempts; or ends cancelled, when cancelling)
 * up to batch runs whose heartbeat is older than orphan_after_s. */
enum status store_runs_rescue(struct db *db, int orphan_after_s, int batch, int *rescued,
                              struct error *err) WUR;
/* Called with the number n of runs of one type that one statement ended
 * with one outcome. */
typedef void (*run_ended_fn)(void *arg, const char *type, enum run_outcome outcome, int n);
/* store_runs_rescue, and fn (optional) for the rescued runs it ended
 * (attempts spent: failed; cancelling: cancelled) rather than requeued. */
enum status store_runs_rescue_each(struct db *db, int orphan_after_s, int batch, int *rescued,
                                   run_ended_fn fn, void *arg, struct error *err) WUR;
/* Deletes up to batch completed runs (and their events) older than age_s. */
enum status store_runs_prune(struct db *db, int64_t age_s, int batch, int *deleted,
                             struct error *err) WUR;
/* How long the queued run that has been due longest has been due, over all
 * tenants, by the database's clock (0 when no queued run is due). */
enum status store_runs_queue_age(struct db *db, int64_t *age_ms, struct error *err) WUR;
/* {"queued": n, "running": n, "waiting": n, "cancelling": n} over all tenants. */
enum status store_runs_counts(struct db *db, json_t **out, struct error *err) WUR;
/* How many queued runs are held back by their concurrency key, over all
 * tenants. */
enum status store_runs_held_total(struct db *db, int64_t *n, struct error *err) WUR;

/* How many queued runs are held for their concurrency key in one group,
 * over all tenants. */
struct conc_held_count {
    char group[65];
    int64_t n;
};
/* The groups that have held runs, and each of groups[0..ngroups) (0 when
 * it has none), by name, at most max of them, into out[0..*n). */
enum status store_runs_held_by_group(struct db *db, const char *const *groups, size_t ngroups,
                                     struct conc_held_count *out, size_t max, size_t *n,
                                     struct error *err) WUR;

/* The doorbells: one NOTIFY per channel named (opsrun_queue, opsrun_events),
 * and on opsrun_logs with the payload logs (NULL: none; run ids, or "*"). */
enum status store_notify(struct db *db, bool queue, bool events, const char *logs,
                         struct error *err) WUR;

#endif
