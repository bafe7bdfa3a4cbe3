-- 009_run_json: the run object built in one json_build_object again.
-- Migration 008 added "retry_of" by wrapping the function of 007 and
-- splicing the member into its text, which turned every run read (gets,
-- lists, stream snapshots) into a build, a print and a parse. The members
-- and their order are unchanged: those of 007, then "retry_of".
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
        'updated_at', opsrun_ts(r.updated_at), 'retry_of', r.retry_of)
$$;

DROP FUNCTION opsrun_run_json_base(runs);
