-- 015_schedules: what the replicas share about the configured schedules,
-- and the runs the schedules make.
--
-- A schedule is defined in each replica's configuration file; what the
-- replicas must agree on is kept here, one row per schedule:
--   last_slot    every slot up to it has been taken (fired, or skipped for
--                a pause or an overlap, or dropped as missed); the slots
--                after it are due as they come. A new row starts at the
--                moment the schedule was first seen, so nothing before that
--                fires.
--   paused       the API's pause (true) or resume (false), which wins over
--                the file's "paused" until the next one; NULL: the file
--                decides.
--   last_run_id  the run the latest fired slot (or trigger) made.
-- A replica takes a slot in one transaction that locks the row, checks
-- last_slot, creates the slot's run and moves last_slot: two replicas never
-- both take a slot, and a replica that dies in the middle leaves all of it
-- or none. Rows of schedules removed from the configuration stay (a
-- schedule added again later goes on from them); their runs stay too.
--
-- Only additions: a binary from before this migration keeps working beside
-- one after it (it makes no scheduled runs, and its run objects carry the
-- new member too, as they are built here).
CREATE TABLE schedules (
    name        text        PRIMARY KEY,
    tenant      text        NOT NULL,
    last_slot   timestamptz NOT NULL,
    last_run_id text,
    paused      boolean,
    paused_by   text,
    paused_at   timestamptz,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- The schedule a run was made by: schedule_slot NULL for a run triggered
-- through the API.
ALTER TABLE runs ADD COLUMN schedule_name text,
                 ADD COLUMN schedule_slot timestamptz;

-- A schedule's active runs, for its overlap policy: small, and kept only
-- for runs that schedules made.
CREATE INDEX runs_schedule_active ON runs (schedule_name)
    WHERE schedule_name IS NOT NULL AND status <> 'completed';

-- The run object gains "schedule" (after "poll"): {"name", "slot"}, null
-- for a run no schedule made. The other members and their order are those
-- of migration 010.
CREATE OR REPLACE FUNCTION opsrun_run_json(r runs) RETURNS json
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT json_build_object(
        'id', r.id, 'tenant', r.tenant, 'initiator', r.initiator, 'type', r.type,
        'status', r.status, 'outcome', r.outcome, 'priority', r.priority,
        'attempt', r.attempt, 'max_attempts', r.max_attempts, 'progress', r.progress,
        'step', r.step, 'input', r.input, 'result', r.result, 'error', r.error,
        'summary_counts', r.summary_counts, 'failure_summary', r.failure_summary,
        'context', r.context, 'external_id', r.external_id, 'worker_id', r.worker_id,
        'created_at', opsrun_ts(r.created_at), 'run_at', opsrun_ts(r.run_at),
        'started_at', opsrun_ts(r.started_at), 'completed_at', opsrun_ts(r.completed_at),
        'updated_at', opsrun_ts(r.updated_at), 'retry_of', r.retry_of,
        'poll', CASE WHEN r.poll_started_at IS NOT NULL THEN json_build_object(
            'checks', r.poll_count, 'max_checks', r.poll_max_checks,
            'max_duration_s', r.poll_max_duration_s,
            'next_check_at', CASE WHEN r.status = 'waiting' AND r.poll_owner IS NULL
                                  THEN opsrun_ts(r.next_poll_at) END,
            'waiting_since', opsrun_ts(r.poll_started_at),
            'give_up_at', opsrun_ts(r.poll_started_at
                                    + make_interval(secs => r.poll_max_duration_s))) END,
        'schedule', CASE WHEN r.schedule_name IS NOT NULL THEN json_build_object(
            'name', r.schedule_name, 'slot', opsrun_ts(r.schedule_slot)) END)
$$;
