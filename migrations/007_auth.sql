-- 007_auth: who started each run, and what an admin token's reads across
-- every tenant need.

-- The initiator: the name of the token that submitted the run, "anonymous"
-- without authentication, "system" for runs opsrun starts itself. Every
-- run before this migration was submitted without authentication. The
-- default stays, so a replica still on the previous binary (which does not
-- name one) keeps inserting while the others upgrade.
ALTER TABLE runs ADD COLUMN initiator text NOT NULL DEFAULT 'anonymous';

-- An admin's GET /runs/{id} without ?tenant= finds the run in any tenant.
CREATE INDEX runs_by_id ON runs (id);
-- An admin's GET /runs lists every tenant, newest first, with the cursor.
CREATE INDEX runs_list_all ON runs (created_at DESC, id DESC);

-- The run object gains "initiator" (after "tenant"). opsrun_run_json_at
-- (migration 004) calls this, so streams carry it too.
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
        'updated_at', opsrun_ts(r.updated_at))
$$;
