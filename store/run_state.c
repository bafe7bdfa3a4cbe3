/* store/run_state.c — the names of run statuses and outcomes, and the
 * predicates over statuses (store/run_state.h). */
#include "store/run_state.h"

#include "common/common.h"

#include <assert.h>

static const char *const status_names[] = {
    [RUN_QUEUED] = "queued",         [RUN_RUNNING] = "running",     [RUN_WAITING] = "waiting",
    [RUN_CANCELLING] = "cancelling", [RUN_COMPLETED] = "completed",
};
static const char *const outcome_names[] = {
    [OUTCOME_PENDING] = "pending",
    [OUTCOME_SUCCEEDED] = "succeeded",
    [OUTCOME_PARTIALLY_SUCCEEDED] = "partially_succeeded",
    [OUTCOME_FAILED] = "failed",
    [OUTCOME_CANCELLED] = "cancelled",
    [OUTCOME_TIMED_OUT] = "timed_out",
};
static const char *const approval_names[] = {
    [APPROVAL_PENDING] = "pending",     [APPROVAL_APPROVED] = "approved",
    [APPROVAL_REJECTED] = "rejected",   [APPROVAL_EXPIRED] = "expired",
    [APPROVAL_CANCELLED] = "cancelled",
};
_Static_assert(ARRAY_LEN(status_names) == RUN_STATUS_COUNT, "a status without a name");
_Static_assert(ARRAY_LEN(outcome_names) == RUN_OUTCOME_COUNT, "an outcome without a name");
_Static_assert(ARRAY_LEN(approval_names) == APPROVAL_STATE_COUNT, "an approval without a name");

const char *run_status_name(enum run_status s)
{
    assert((unsigned)s < RUN_STATUS_COUNT);
    return status_names[s];
}

const char *run_outcome_name(enum run_outcome o)
{
    assert((unsigned)o < RUN_OUTCOME_COUNT);
    return outcome_names[o];
}

/* The index of name in names[n], or -1. */
static int name_index(const char *name, const char *const *names, int n)
{
    for (int i = 0; name && i < n; i++)
        if (strcmp(name, names[i]) == 0)
            return i;
    return -1;
}

bool run_status_parse(const char *name, enum run_status *out)
{
    int i = name_index(name, status_names, RUN_STATUS_COUNT);

    if (i < 0)
        return false;
    *out = (enum run_status)i;
    return true;
}

bool run_outcome_parse(const char *name, enum run_outcome *out)
{
    int i = name_index(name, outcome_names, RUN_OUTCOME_COUNT);

    if (i < 0)
        return false;
    *out = (enum run_outcome)i;
    return true;
}

bool run_status_is_terminal(enum run_status s)
{
    return s == RUN_COMPLETED;
}

bool run_status_is_joinable(enum run_status s)
{
    return s == RUN_QUEUED || s == RUN_RUNNING || s == RUN_WAITING;
}

bool run_status_is_held(enum run_status s)
{
    return s == RUN_RUNNING || s == RUN_CANCELLING;
}

const char *approval_state_name(enum approval_state a)
{
    assert((unsigned)a < APPROVAL_STATE_COUNT);
    return approval_names[a];
}

bool approval_state_parse(const char *name, enum approval_state *out)
{
    int i = name_index(name, approval_names, APPROVAL_STATE_COUNT);

    if (i < 0)
        return false;
    *out = (enum approval_state)i;
    return true;
}

bool run_awaits_approval(enum run_status s, enum approval_state a)
{
    return s == RUN_WAITING && a == APPROVAL_PENDING;
}
