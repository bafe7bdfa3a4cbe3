/* engine/scheduler.h — what the configured schedules do at their slots: the
 * plan of one pass over a schedule (pure, for the scheduler thread and its
 * tests), and the names of its outcomes. The thread itself is internal to
 * the engine (engine/scheduler.c). */
#ifndef OPSRUN_ENGINE_SCHEDULER_H
#define OPSRUN_ENGINE_SCHEDULER_H

#include "common/common.h"
#include "common/ids.h"
#include "config/config.h"
#include "store/runs.h"

/* A slot is on time while no more than grace_s have passed since it; a
 * slot that no replica took by then is missed, and the schedule's catch_up
 * decides. */
#define SCHEDULE_PLAN_FIRES 16 /* slots one pass takes at most; the rest next pass */

struct schedule_plan {
    /* Slots that ended missed without a run, all of them before fire[0]:
     * the last slot is moved to drop_upto (0: none) and `missed` counts them. */
    int64_t drop_upto;
    int64_t missed;
    int64_t fire[SCHEDULE_PLAN_FIRES]; /* slots to take, oldest first */
    int nfire;
    /* The first slot after those, when the next pass is due; INT64_MAX for
     * none (an expression that never fires again). */
    int64_t next;
};

/* The plan for schedule s whose last slot taken is last_s, at now_s (both
 * seconds since the epoch, by the database's clock). */
void schedule_plan(const struct schedule *s, int grace_s, int64_t last_s, int64_t now_s,
                   struct schedule_plan *p);

/* The run id of a slot: "<name>-YYYYMMDDTHHMMSSZ" into out (cap >= 96). */
void schedule_run_id(const char *name, int64_t slot_s, char *out, size_t cap);

/* A run schedule s makes, as a submission would make it: at slot_s (its id
 * the slot's, initiator "schedule:<name>", due at the slot plus jitter), or
 * for a trigger (slot_s < 0: id and initiator given, due now, no slot).
 * rn points into the struct, and at s's data. */
struct schedule_run {
    char id[RUN_ID_MAX + 1], slot[40], run_at[40], identity[65], initiator[96];
    struct run_new rn;
};
void schedule_run_init(const struct config *cfg, const struct schedule *s, int64_t slot_s,
                       const char *id, const char *initiator, struct schedule_run *out);

#endif
