-- bench/lifecycle-narrow.sql — bench/lifecycle.sql on the schema of
-- bench/narrow.sql: each step also writes run_active (inserted, claimed,
-- deleted at completion).
WITH ins AS (
    INSERT INTO runs (tenant, id, type, max_attempts, timeout_s, input, identity_hash,
                      request_hash)
    SELECT 'default', 'r' || nextval('lifecycle_seq'), 'demo', 1, 60,
           '{"alert_type":"demo","data":{}}', md5(random()::text), 'req'
      FROM generate_series(1, 50)
    RETURNING tenant, id, type, status, outcome, priority, run_at, created_at, identity_hash),
act AS (
    INSERT INTO run_active (tenant, id, type, priority, run_at, created_at, identity_hash)
    SELECT tenant, id, type, priority, run_at, created_at, identity_hash FROM ins)
INSERT INTO run_events (tenant, run_id, type, status, outcome, progress, message, run_created_at)
SELECT tenant, id, 'status', status, outcome, 0, 'submitted', created_at FROM ins;
SELECT coalesce(array_agg(tenant), '{}') AS t, coalesce(array_agg(id), '{}') AS ids
  FROM bench_narrow_claim('w' || :client_id, 50, 100000, ARRAY['demo']) \gset
WITH d AS (
    DELETE FROM run_active a USING unnest(':t'::text[], ':ids'::text[]) u(tenant, id)
     WHERE a.tenant = u.tenant AND a.id = u.id RETURNING a.tenant, a.id),
upd AS (
    UPDATE runs r SET status = 'completed', outcome = 'succeeded', completed_at = now(),
                      updated_at = now(), progress = 100, heartbeat_at = NULL
      FROM d WHERE r.tenant = d.tenant AND r.id = d.id
    RETURNING r.tenant, r.id, r.status, r.outcome, r.created_at)
INSERT INTO run_events (tenant, run_id, type, status, outcome, progress, message, run_created_at)
SELECT tenant, id, 'status', status, outcome, 100, 'succeeded', created_at FROM upd;
