-- 027_statement_functions: the three largest statements of a run's path
-- as PL/pgSQL functions, so that their plans are kept by the server.
--
-- With db.prepared_statements false (a transaction-pooling proxy) every
-- statement is sent as the unnamed one and planned at every call. Planning
-- these three cost about as much as running them or more: 0.79 ms a call
-- for the batch submission (0.46 ms to run it), 0.35 ms for the
-- completion batch (0.47 ms to run), 0.58 ms for the dispatcher's
-- next-due query (0.03 ms to run): 3.4 s of planning in the 6.4 s that
-- 8,000 no-op runs took on two cores shared with the server, which is why
-- the option halved the throughput. A PL/pgSQL function prepares each of its
-- statements once per server connection and keeps the plan, so the call
-- that names it is all that is planned each time: a transaction pooler
-- runs it on whichever server connection it likes, and each of those
-- keeps its own plans.
--
-- The server calls these only with unnamed statements. With named
-- prepared statements it sends the statements themselves, as before: the
-- call around the same statement cost 6 to 13 % of a single-run
-- submission's rate there (pgbench, 4 clients, generic plans both).
--
-- The bodies are the statements store/runs_batch.c and store/runs_engine.c
-- send with named prepared statements, word for word but for the names of
-- the parameters and every column named with its table; what they return
-- is what those read. A change to one is a change to the other (a new
-- migration), and the integration tests run both and compare what they
-- write. Such a migration is held to the rule of every migration: the
-- binary before it, with unnamed statements, calls the new body with its
-- own items and reads the same columns, so the arguments and the columns
-- returned stay (docs/operations.md, Upgrades). use_column: the names of
-- the columns they return are also columns of the tables they read.

-- The batch submission (store_runs_submit_batch): $1 is the round's items
-- as a JSON array. Per row: the run's scalars ('{}' for its JSON), the
-- item's position, its kind ('n' inserted now, 'i' the run with its id,
-- 'd' the active run with its identity), and the found run's
-- request_hash.
CREATE FUNCTION opsrun_submit_batch(p_items json)
RETURNS TABLE (j text, tenant text, id text, type text, status text, outcome text,
               attempt integer, max_attempts integer, deadline_ms bigint, created_us bigint,
               ord integer, kind text, request_hash text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH i AS MATERIALIZED (
        SELECT j.*, coalesce((SELECT t.reacts FROM run_type_rules t WHERE t.type = j.type), 0)
                    AS reacts
          FROM json_to_recordset(p_items) AS j(ord int, tenant text, id text, type text,
                                               priority int, run_at timestamptz,
                                               max_attempts int, timeout_s int, input jsonb,
                                               identity_hash text, request_hash text,
                                               initiator text, schedule_name text,
                                               schedule_slot timestamptz,
                                               approval_timeout_s int, approval_on_timeout text)
    ), upd AS (
        INSERT INTO runs AS r (tenant, id, type, priority, run_at, max_attempts, timeout_s, input,
                               identity_hash, request_hash, initiator, schedule_name,
                               schedule_slot, reacts, status, approval_state,
                               approval_expires_at, approval_on_timeout)
        SELECT i.tenant, i.id, i.type, i.priority, coalesce(i.run_at, now()), i.max_attempts,
               i.timeout_s, i.input, i.identity_hash, i.request_hash,
               coalesce(i.initiator, 'system'), i.schedule_name, i.schedule_slot, i.reacts,
               CASE WHEN i.approval_timeout_s IS NULL THEN 'queued' ELSE 'waiting' END,
               CASE WHEN i.approval_timeout_s IS NOT NULL THEN 'pending' END,
               greatest(now(), i.run_at) + make_interval(secs => i.approval_timeout_s),
               CASE WHEN i.approval_timeout_s IS NOT NULL THEN i.approval_on_timeout END
          FROM i
         ORDER BY i.tenant, CASE WHEN i.reacts & 256 <> 0 THEN i.ord END, i.identity_hash, i.ord
            ON CONFLICT DO NOTHING
        RETURNING r.*
    ), ev AS (
        INSERT INTO run_events (tenant, run_id, type, status, outcome, progress, step, message,
                                run_created_at)
        SELECT u.tenant, u.id, 'status', u.status, u.outcome, u.progress, u.step,
               CASE WHEN u.approval_state = 'pending'
                    THEN 'submitted; awaiting approval until ' || opsrun_ts(u.approval_expires_at)
                    ELSE 'submitted' END,
               u.created_at
          FROM upd u
    )
    SELECT '{}'::text, u.tenant, u.id, u.type, u.status, u.outcome, u.attempt, u.max_attempts,
           (extract(epoch FROM u.deadline_at - now()) * 1000)::bigint,
           (extract(epoch FROM u.created_at) * 1000000)::bigint, i.ord, 'n'::text, NULL::text
      FROM i JOIN upd u ON u.tenant = i.tenant AND u.id = i.id
    UNION ALL
    SELECT '{}', r.tenant, r.id, r.type, r.status, r.outcome, r.attempt, r.max_attempts,
           (extract(epoch FROM r.deadline_at - now()) * 1000)::bigint,
           (extract(epoch FROM r.created_at) * 1000000)::bigint, i.ord, 'i', r.request_hash
      FROM i JOIN runs r ON r.tenant = i.tenant AND r.id = i.id
     WHERE NOT EXISTS (SELECT 1 FROM upd u WHERE u.tenant = i.tenant AND u.id = i.id)
    UNION ALL
    SELECT '{}', r.tenant, r.id, r.type, r.status, r.outcome, r.attempt, r.max_attempts,
           (extract(epoch FROM r.deadline_at - now()) * 1000)::bigint,
           (extract(epoch FROM r.created_at) * 1000000)::bigint, i.ord, 'd', NULL
      FROM i JOIN runs r ON r.tenant = i.tenant AND r.identity_hash = i.identity_hash
                        AND r.status IN ('queued', 'running', 'waiting')
     WHERE NOT EXISTS (SELECT 1 FROM upd u WHERE u.tenant = i.tenant AND u.id = i.id)
       AND NOT EXISTS (SELECT 1 FROM runs x WHERE x.tenant = i.tenant AND x.id = i.id);
END
$$;

-- The completion batch (store_runs_finish_batch): p_worker the worker,
-- p_items a JSON array of {tenant, id, attempt, outcome, result, error,
-- summary_counts, failure_summary, message, log_n, log_dropped, i}, p_logs
-- each item's log lines (its i-th element, NULL for none) as the engine
-- wrote them, checked as json, never parsed into jsonb. Each row is fenced
-- on its own and gets its terminal event after its row is locked; the
-- UPDATE takes the lines' seqs, and lg writes their chunk after the event
-- (the order of the tables is the order of their locks, which the
-- partition drop takes the same way). Returns the runs it ended.
CREATE FUNCTION opsrun_finish_batch(p_worker text, p_items jsonb, p_logs text[])
RETURNS TABLE (tenant text, id text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH b AS (
        SELECT *
          FROM jsonb_to_recordset(p_items) AS b(tenant text, id text, attempt int, outcome text,
                                                result jsonb, error jsonb, summary_counts jsonb,
                                                failure_summary jsonb, message text, log_n int,
                                                log_dropped bigint, i bigint)
          LEFT JOIN unnest(p_logs) WITH ORDINALITY AS x(log, i) USING (i)
    ), upd AS (
        UPDATE runs r
           SET status = 'completed', outcome = b.outcome, result = b.result,
               error = CASE WHEN b.outcome = 'cancelled' AND b.error IS NULL THEN r.error
                            ELSE b.error END,
               summary_counts = b.summary_counts, failure_summary = b.failure_summary,
               progress = CASE WHEN b.outcome = 'succeeded' THEN 100 ELSE r.progress END,
               completed_at = now(), updated_at = now(), heartbeat_at = NULL, deadline_at = NULL,
               log_seq = r.log_seq + coalesce(b.log_n, 0),
               hooks_at = CASE WHEN r.cleanup_due THEN now() ELSE r.hooks_at END,
               hooks_attempts = CASE WHEN r.cleanup_due THEN 0 ELSE r.hooks_attempts END,
               cleanup_due = false
          FROM b
         WHERE r.tenant = b.tenant AND r.id = b.id AND r.worker_id = p_worker
           AND r.attempt = b.attempt AND r.status IN ('running', 'cancelling')
        RETURNING r.tenant, r.id, r.status, r.outcome, r.progress, r.step, r.created_at,
                  b.message, r.log_seq, b.attempt, b.log, b.log_n, b.log_dropped
    ), ev AS (
        INSERT INTO run_events (tenant, run_id, type, status, outcome, progress, step, message,
                                run_created_at)
        SELECT u.tenant, u.id, 'status', u.status, u.outcome, u.progress, u.step, u.message,
               u.created_at
          FROM upd u
    ), lg AS (
        INSERT INTO run_logs (tenant, run_id, run_created_at, attempt, first_seq, last_seq,
                              dropped, lines)
        SELECT u.tenant, u.id, u.created_at, u.attempt, u.log_seq - u.log_n + 1, u.log_seq,
               coalesce(u.log_dropped, 0), u.log::json
          FROM upd u
         WHERE u.log_n > 0
    )
    SELECT u.tenant, u.id FROM upd u;
END
$$;

-- What the dispatcher asks after each claim (store_runs_next_due): the
-- next delayed run (ms ahead), the newest and the oldest due run (ms ago),
-- and whether a run is held for its concurrency key.
CREATE FUNCTION opsrun_next_due()
RETURNS TABLE (next_ms bigint, newest_ms bigint, oldest_ms bigint, held boolean)
LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY
    SELECT ceil(extract(epoch FROM (SELECT min(r.run_at) FROM runs r
                                     WHERE r.status = 'queued' AND r.run_at > now()) - now())
                * 1000)::bigint,
           floor(extract(epoch FROM now() - (SELECT max(r.run_at) FROM runs r
                                               WHERE r.status = 'queued' AND r.run_at <= now()))
                 * 1000)::bigint,
           floor(extract(epoch FROM now() - CASE
               WHEN EXISTS (SELECT 1 FROM runs r WHERE r.conc_held AND r.status = 'queued')
               THEN (SELECT min(t.run_at) FROM opsrun_ready_tenants() t WHERE t.run_at <= now())
               ELSE (SELECT min(r.run_at) FROM runs r
                      WHERE r.status = 'queued' AND r.run_at <= now()) END) * 1000)::bigint,
           EXISTS (SELECT 1 FROM runs r WHERE r.conc_held AND r.status = 'queued');
END
$$;
