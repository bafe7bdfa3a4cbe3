/* store/events_internal.h — SQL fragments about run_events for the statements of
 * store/ only. Pure macros that expand to string literals. */
#ifndef OPSRUN_STORE_EVENTS_INTERNAL_H
#define OPSRUN_STORE_EVENTS_INTERNAL_H

/* Event row "e" belongs to runs row "r": the same tenant and run id, and
 * the run's creation time, which the event carries as its partition key
 * (migration 013). Retention deletes a run before the partition holding its
 * events is dropped, and a run created later may take the same id; the
 * creation time keeps the events of the earlier run off the later one.
 * 'infinity' is an event whose writer did not name the time (a binary from
 * before migration 013): it is matched by id alone, as before, and deleted
 * with its run. In a subquery correlated with r, PostgreSQL prunes the
 * lookup of one run's events to the partition of its creation time and
 * run_events_unknown; in a join it probes every partition's index. */
#define EVENT_OF_RUN                                                                               \
    "e.tenant = r.tenant AND e.run_id = r.id AND e.run_created_at IN (r.created_at, 'infinity')"

#endif
