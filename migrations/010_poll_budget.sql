-- 010_poll_budget: the poll schedule in the run object, and the budget the
-- poller enforces stored on the run.
--
-- poll_max_checks, poll_max_duration_s: the run type's poll.max_checks and
-- poll.max_duration_s as they were when the run began waiting, written by
-- the statement that hands it over to waiting (runs_wait), as max_attempts
-- is written at submission. The poller enforces these, so a configuration
-- changed (or different on another replica) while a run waits does not move
-- the budget the run object reports. NULL for a run that never waited, and
-- for one that began waiting before this migration (or on a replica still
-- on the previous binary): the poller then enforces its type's current
-- configuration, and the run object reports the limits as null.
ALTER TABLE runs ADD COLUMN poll_max_checks integer,
                 ADD COLUMN poll_max_duration_s integer;

-- The run object gains "poll" (after "retry_of"): null for a run that never
-- waited, else its schedule and budget, kept once it ended (how many checks
-- it took). "next_check_at" is null unless the run waits with no check in
-- flight (a check in flight has poll_owner set, and next_poll_at then holds
-- the end of its lease, not a check). The other members and their order are
-- those of 009. opsrun_run_json_at (migration 004) calls this by name, so
-- streams carry the member too.
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
                                    + make_interval(secs => r.poll_max_duration_s))) END)
$$;
