-- 008_retry_of: POST /runs/{id}/retry starts a new run with the type, input
-- and priority of a completed run that did not succeed; the new run's
-- retry_of names the run it repeats.
--
-- No foreign key: retention deletes completed runs on their own schedule,
-- and a retry may outlive the run it repeats (its retry_of then names a run
-- that is gone, which is still worth knowing).
ALTER TABLE runs ADD COLUMN retry_of text;

-- The run object gains "retry_of", as its last member. The function is
-- wrapped rather than rewritten: the members an earlier migration defined
-- stay exactly as that migration wrote them, whichever migrations came
-- before this one. The splice keeps their order (a jsonb merge would sort
-- the keys). opsrun_run_json_at (migration 004) calls opsrun_run_json by
-- name, so streams carry the member too.
ALTER FUNCTION opsrun_run_json(runs) RENAME TO opsrun_run_json_base;

CREATE FUNCTION opsrun_run_json(r runs) RETURNS json
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT (left(opsrun_run_json_base(r)::text, -1) || ', "retry_of" : '
            || coalesce(to_json(r.retry_of)::text, 'null') || '}')::json
$$;
