-- bench/lifecycle.sql — one pgbench transaction of bench/lifecycle.sh: the
-- SQL 50 no-op runs need at the least, in three transactions as the engine
-- runs them: inserted with their submitted events, claimed by opsrun_claim
-- (its started events), completed with their ended events.
WITH ins AS (
    INSERT INTO runs (tenant, id, type, max_attempts, timeout_s, input, identity_hash,
                      request_hash)
    SELECT 'default', 'r' || nextval('lifecycle_seq'), 'demo', 1, 60,
           '{"alert_type":"demo","data":{}}', md5(random()::text), 'req'
      FROM generate_series(1, 50)
    RETURNING tenant, id, status, outcome, created_at)
INSERT INTO run_events (tenant, run_id, type, status, outcome, progress, message, run_created_at)
SELECT tenant, id, 'status', status, outcome, 0, 'submitted', created_at FROM ins;
SELECT coalesce(array_agg(tenant), '{}') AS t, coalesce(array_agg(id), '{}') AS ids
  FROM opsrun_claim('w' || :client_id, 50, 100000, ARRAY['demo'], ARRAY[NULL::int]) \gset
WITH upd AS (
    UPDATE runs r SET status = 'completed', outcome = 'succeeded', completed_at = now(),
                      updated_at = now(), progress = 100, heartbeat_at = NULL
      FROM unnest(':t'::text[], ':ids'::text[]) u(tenant, id)
     WHERE r.tenant = u.tenant AND r.id = u.id
    RETURNING r.tenant, r.id, r.status, r.outcome, r.created_at)
INSERT INTO run_events (tenant, run_id, type, status, outcome, progress, message, run_created_at)
SELECT tenant, id, 'status', status, outcome, 100, 'succeeded', created_at FROM upd;
