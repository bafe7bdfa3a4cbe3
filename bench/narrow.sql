-- bench/narrow.sql — the design bench/lifecycle.sh NARROW=1 measures beside
-- the real schema: a run's claim state (status, priority, run_at, worker,
-- heartbeat, identity) in a narrow table of its own, run_active, with the
-- partial indexes that follow a run's status moved there, so that runs has
-- no index on a column a claim or a completion changes but the one of
-- retention. Applied to a database opsrun has migrated; not a migration.
DROP TABLE IF EXISTS run_active;
DROP INDEX IF EXISTS runs_active, runs_active_identity, runs_claim, runs_completed,
    runs_heartbeat, runs_held, runs_queued_at;
-- The trigger that enters a waiting run in run_polls: runs_poll_enter_update,
-- part of runs_conc_polls since migration 034.
DROP TRIGGER IF EXISTS runs_poll_enter_update ON runs;
DROP TRIGGER IF EXISTS runs_conc_polls ON runs;
CREATE INDEX runs_completed ON runs (completed_at) WHERE completed_at IS NOT NULL;
CREATE TABLE run_active (
    tenant text NOT NULL, id text NOT NULL, type text NOT NULL,
    status text NOT NULL DEFAULT 'queued', priority integer NOT NULL DEFAULT 0,
    run_at timestamptz NOT NULL DEFAULT now(), created_at timestamptz NOT NULL DEFAULT now(),
    identity_hash text NOT NULL, worker_id text, heartbeat_at timestamptz,
    PRIMARY KEY (tenant, id));
CREATE UNIQUE INDEX run_active_identity ON run_active (tenant, identity_hash)
    WHERE status <> 'cancelling';
CREATE INDEX run_active_claim ON run_active (priority DESC, run_at, created_at)
    WHERE status = 'queued';
CREATE INDEX run_active_held ON run_active (worker_id, type)
    WHERE status IN ('running', 'cancelling');
-- opsrun_claim (migration 013) without caps, on run_active: the same lock,
-- count, order and event.
CREATE FUNCTION bench_narrow_claim(p_worker text, p_limit integer, p_max_running integer,
                                   p_types text[])
RETURNS SETOF runs LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_sort = off
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_bitmapscan = off SET jit = off
AS $$
DECLARE
    v_room integer;
BEGIN
    PERFORM pg_advisory_xact_lock(7260017001);
    SELECT p_max_running - count(*) INTO v_room FROM run_active
     WHERE status IN ('running', 'cancelling');
    v_room := least(v_room, p_limit);
    IF v_room <= 0 THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH cand AS (
        SELECT a.tenant, a.id FROM run_active a
         WHERE a.status = 'queued' AND a.run_at <= now() AND a.type = ANY (p_types)
         ORDER BY a.priority DESC, a.run_at, a.created_at LIMIT v_room FOR UPDATE OF a SKIP LOCKED
    ), act AS (
        UPDATE run_active a SET status = 'running', worker_id = p_worker, heartbeat_at = now()
          FROM cand WHERE a.tenant = cand.tenant AND a.id = cand.id RETURNING a.tenant, a.id
    ), upd AS (
        UPDATE runs r
           SET status = 'running', worker_id = p_worker, attempt = r.attempt + 1,
               heartbeat_at = now(), started_at = coalesce(r.started_at, now()),
               deadline_at = now() + make_interval(secs => r.timeout_s),
               progress = 0, step = NULL, error = NULL, updated_at = now()
          FROM act WHERE r.tenant = act.tenant AND r.id = act.id
        RETURNING r.*
    ), ev AS (
        INSERT INTO run_events (tenant, run_id, type, status, outcome, progress, step, message,
                                run_created_at)
        SELECT u.tenant, u.id, 'status', u.status, u.outcome, u.progress, u.step,
               format('attempt %s started by %s', u.attempt, p_worker), u.created_at FROM upd u
    )
    SELECT * FROM upd;
END
$$;
