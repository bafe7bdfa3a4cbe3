/* store/schedules.h — the state the replicas share about each configured
 * schedule (migrations/015_schedules.sql), and the one transaction that
 * takes a slot: lock the schedule's row, check its last slot, create the
 * slot's run or skip it, move the last slot. On the caller's db handle (one
 * thread at a time). Functions return ST_OK or a failure with *err filled;
 * a failed transaction is rolled back before they return. */
#ifndef OPSRUN_STORE_SCHEDULES_H
#define OPSRUN_STORE_SCHEDULES_H

#include "common/common.h"
#include "store/runs.h"

struct db;

/* One schedule as the database has it. */
struct schedule_state {
    char *name;
    int64_t last_slot_us; /* microseconds since the epoch */
    bool slot_taken;      /* a slot came due since the row was made */
    bool has_paused;      /* the API paused or resumed it ... */
    bool paused;          /* ... to this; else the configuration decides */
    char *last_run_id;    /* NULL when none yet */
    char *last_status;    /* that run's status and outcome; NULL when it is gone */
    char *last_outcome;
};
void schedule_state_cleanup(struct schedule_state *s, size_t n); /* frees the strings */

/* Makes sure each of the n schedules (names[i] in tenants[i]) has its row:
 * a new one starts at the database's now, so no slot before the schedule
 * existed fires; a known one takes the tenant given. */
enum status store_schedules_sync(struct db *db, const char *const *names,
                                 const char *const *tenants, size_t n, struct error *err) WUR;
/* The state of the n schedules named, in the order of names, into out[0..n)
 * (schedule_state_cleanup); a name without a row gets last_slot_us 0. The
 * database's clock in *now_us. */
enum status store_schedules_read(struct db *db, const char *const *names, size_t n,
                                 struct schedule_state *out, int64_t *now_us,
                                 struct error *err) WUR;

/* One due slot a replica takes. */
struct schedule_take {
    const char *name, *tenant;
    int64_t slot_us;           /* the slot; every slot before it is taken with it */
    bool paused;               /* the configuration's "paused" (the database's wins) */
    bool skip_if_active;       /* overlap "skip": an active run of the schedule skips the slot */
    bool cancel_active;        /* overlap "cancel_previous": they are cancelled first */
    const struct run_new *run; /* the slot's run (id, input, schedule_name/slot...) */
};
enum schedule_taken {
    SCHEDULE_ALREADY, /* another replica (or an earlier pass) took the slot */
    SCHEDULE_CREATED, /* the run was created (or existed: a retried take) */
    SCHEDULE_SKIPPED_PAUSED,
    SCHEDULE_SKIPPED_OVERLAP,
    SCHEDULE_BUSY,     /* another replica holds the schedule now: try again shortly */
    SCHEDULE_CONFLICT, /* the slot's run id is a run with another input (a schedule removed
                          and added again with other data): no run, the slot taken */
};
struct schedule_result {
    enum schedule_taken taken;
    struct run *run; /* SCHEDULE_CREATED: the run (its scalars; json "{}"), owned */
    int cancelled;   /* runs cancel_active acted on */
};
void schedule_result_cleanup(struct schedule_result *r, size_t n); /* frees the runs */
/* Takes the n slots t[0..n) in one transaction, each as the slot
 * transaction of the file comment, their runs inserted in one statement;
 * one schedule's slots come oldest first and act on one another (a run made
 * for one is active for the overlap of the next). Schedules another
 * transaction holds are skipped (SCHEDULE_BUSY), not waited for. */
enum status store_schedules_take(struct db *db, const struct schedule_take *t, size_t n,
                                 struct schedule_result *out, struct error *err) WUR;
/* Moves the schedule's last slot to upto_us without running anything (the
 * slots were missed); *moved false when it was there already. */
enum status store_schedules_drop(struct db *db, const char *name, int64_t upto_us, bool *moved,
                                 struct error *err) WUR;
/* A run of the schedule now (POST /schedules/{name}/trigger), in one
 * transaction with the record of it as the schedule's last run (the row is
 * made when there is none yet). run->id is a new id, run->tenant the
 * schedule's. */
enum status store_schedules_trigger(struct db *db, const char *name, const struct run_new *run,
                                    struct run **out, struct error *err) WUR;
/* The API's pause (paused true) or resume, by whom (a token's name); the
 * row is made (as by the sync) when there is none yet. */
enum status store_schedules_set_paused(struct db *db, const char *name, const char *tenant,
                                       bool paused, const char *by, struct error *err) WUR;

#endif
