-- 011_claim_cost: the same claim as in 002 (same contract, same lock, same
-- order), made cheaper to run.
--
-- 1. Planned once per connection, with its plan fixed. plpgsql gave every
--    call a custom plan (the plan of "LIMIT v_room" for an unknown v_room
--    looks dearer than for the value at hand, so the cached generic plan was
--    never chosen) and planned the big statement below again on every
--    claim: about 0.6 ms, as long as running it (pg_stat_statements: 21
--    plans in 20 calls). A generic plan alone is not safe: it estimates a
--    LIMIT it cannot see at a tenth of the table, and joined the candidates
--    back to runs by hashing the whole table (measured: 23 ms a claim at
--    50,000 queued runs), and a plan made while the table was small would
--    stay while it grows. So the function also turns off what no statement
--    here needs: sequential scans, sorts other than the per-type ranking's,
--    hash and merge joins. What is left is the plan the custom plans were at
--    their best: runs_claim walked in claim order under the LIMIT, each pick
--    updated through the primary key, the counts from the partial indexes
--    of held runs; the same whatever the statistics say, from the first
--    claim on an empty table to 300,000 queued runs. jit is off because the
--    ranking's sort, which nothing can replace, now costs above
--    jit_above_cost: compiling it took 0.7 s a claim.
-- 2. Without the per-type ranking when no type of this replica has a cap
--    (the default): every configured type is then open and the candidates
--    are the picks, so the window, its sort and the join with the caps go.
CREATE OR REPLACE FUNCTION opsrun_claim(p_worker text, p_limit integer, p_max_running integer,
                                        p_types text[], p_caps integer[])
RETURNS SETOF runs
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_sort = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET jit = off
AS $$
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
    IF cardinality(array_remove(p_caps, NULL)) = 0 THEN
        RETURN QUERY
        WITH cand AS (
            SELECT r.tenant, r.id
              FROM runs r
             WHERE r.status = 'queued' AND r.run_at <= now() AND r.type = ANY (p_types)
             ORDER BY r.priority DESC, r.run_at, r.created_at
             LIMIT v_room
               FOR UPDATE OF r SKIP LOCKED
        ), upd AS (
            UPDATE runs r
               SET status = 'running', worker_id = p_worker, attempt = r.attempt + 1,
                   heartbeat_at = now(), started_at = coalesce(r.started_at, now()),
                   deadline_at = now() + make_interval(secs => r.timeout_s),
                   progress = 0, step = NULL, error = NULL, updated_at = now()
              FROM cand
             WHERE r.tenant = cand.tenant AND r.id = cand.id
            RETURNING r.*
        ), ev AS (
            INSERT INTO run_events (tenant, run_id, type, status, outcome, progress, step, message)
            SELECT u.tenant, u.id, 'status', u.status, u.outcome, u.progress, u.step,
                   format('attempt %s started by %s', u.attempt, p_worker)
              FROM upd u
        )
        SELECT * FROM upd;
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
