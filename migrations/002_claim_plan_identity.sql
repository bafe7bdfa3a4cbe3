-- 002: a claim plan that uses runs_claim at any backlog, and dedupe that no
-- longer joins a run that is being cancelled.

-- A submission (or a firing alert) matching a run that is being cancelled
-- started nothing: it joined a run that was about to end cancelled. Only
-- queued, running and waiting runs are joinable now.
DROP INDEX runs_active_identity;
CREATE UNIQUE INDEX runs_active_identity ON runs (tenant, identity_hash)
    WHERE status IN ('queued', 'running', 'waiting');

-- Same contract as in 001. The types whose cap is full are excluded before
-- the candidate scan, as a plain array: a NOT EXISTS over the caps made the
-- planner estimate one row, skip runs_claim and sort every due queued run
-- while holding the claim lock (hundreds of ms at 300k queued runs).
CREATE OR REPLACE FUNCTION opsrun_claim(p_worker text, p_limit integer, p_max_running integer,
                                        p_types text[], p_caps integer[])
RETURNS SETOF runs
LANGUAGE plpgsql AS $$
DECLARE
    v_room integer;
    v_open text[];
BEGIN
    PERFORM pg_advisory_xact_lock(7260017001);
    SELECT p_max_running - count(*) INTO v_room
      FROM runs WHERE status IN ('running', 'cancelling');
    v_room := least(v_room, p_limit);
    IF v_room <= 0 THEN
        RETURN;
    END IF;
    SELECT array_agg(t.type) INTO v_open
      FROM unnest(p_types, p_caps) AS t(type, cap)
     WHERE t.cap IS NULL
        OR t.cap > (SELECT count(*) FROM runs h
                     WHERE h.type = t.type AND h.status IN ('running', 'cancelling'));
    IF v_open IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH caps AS (
        SELECT t.type, t.cap,
               t.cap - (SELECT count(*) FROM runs h
                         WHERE h.type = t.type AND h.status IN ('running', 'cancelling')) AS room
          FROM unnest(p_types, p_caps) AS t(type, cap)
         WHERE t.type = ANY (v_open)
    ), cand AS (
        SELECT r.tenant, r.id, r.type, r.priority, r.run_at, r.created_at
          FROM runs r
         WHERE r.status = 'queued' AND r.run_at <= now() AND r.type = ANY (v_open)
         ORDER BY r.priority DESC, r.run_at, r.created_at
         LIMIT v_room
           FOR UPDATE OF r SKIP LOCKED
    ), ranked AS (
        SELECT cand.*, row_number() OVER (PARTITION BY cand.type
                                          ORDER BY cand.priority DESC, cand.run_at,
                                                   cand.created_at) AS rn
          FROM cand
    ), picked AS (
        SELECT k.tenant, k.id FROM ranked k JOIN caps c ON c.type = k.type
         WHERE c.cap IS NULL OR k.rn <= c.room
    ), upd AS (
        UPDATE runs r
           SET status = 'running', worker_id = p_worker, attempt = r.attempt + 1,
               heartbeat_at = now(), started_at = coalesce(r.started_at, now()),
               deadline_at = now() + make_interval(secs => r.timeout_s),
               progress = 0, step = NULL, error = NULL, updated_at = now()
          FROM picked
         WHERE r.tenant = picked.tenant AND r.id = picked.id
        RETURNING r.*
    ), ev AS (
        INSERT INTO run_events (tenant, run_id, type, status, outcome, progress, step, message)
        SELECT u.tenant, u.id, 'status', u.status, u.outcome, u.progress, u.step,
               format('attempt %s started by %s', u.attempt, p_worker)
          FROM upd u
    )
    SELECT * FROM upd;
END
$$;
