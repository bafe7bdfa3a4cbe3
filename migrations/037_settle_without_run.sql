-- 037_settle_without_run: a delivery whose run is gone is settled like any
-- other, not claimed again at every lease.
--
-- opsrun_deliveries_settle (migration 030) found the outbox row to delete
-- or reschedule through its run: the rows it changed were those of the
-- results joined to runs. A delivery whose run no longer exists (made
-- outside opsrun: runs truncated, a partial restore, triggers disabled;
-- opsrun deletes a run's deliveries in the statement that deletes it) was
-- given up by the notifier (its claim carries the JSON null, migration 036)
-- and then left as it was, owned by nobody once its lease ran out: claimed
-- again at every lease, with a warning each time, for ever.
--
-- Now the row is deleted or rescheduled from the result alone (its id, and
-- the lease it was claimed under: owner and attempts), whether or not its
-- run exists; the attempt's event is still written on the run, when there
-- is one. Nothing else changes: for a delivery whose run exists, the same
-- rows are deleted, rescheduled and recorded, and the run of a transition
-- before its end is still locked (shared) before its event is written.
--
-- Compatibility: the arguments and the result are 030's. A binary of the
-- previous release settles through this function as it did through 030's.
CREATE OR REPLACE FUNCTION opsrun_deliveries_settle(p_owner text, p_results jsonb) RETURNS bigint
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_bitmapscan = off
SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS $$
DECLARE
    v_n bigint;
BEGIN
    WITH b AS (SELECT * FROM jsonb_to_recordset(p_results)
                               AS b(id bigint, attempts int, retry_ms bigint, message text)),
    act AS (SELECT b.id AS nid, b.attempts, b.retry_ms, b.message, r.tenant, r.id, r.status,
                   r.outcome, r.progress, r.step, r.created_at
              FROM b JOIN notifications o ON o.id = b.id
              JOIN runs r ON r.tenant = o.tenant AND r.id = o.run_id
             WHERE o.event IN ('run.started', 'run.retrying', 'run.approval_requested')
             ORDER BY r.tenant, r.id FOR SHARE OF r),
    fin AS (SELECT b.id AS nid, b.attempts, b.retry_ms, b.message, r.tenant, r.id, r.status,
                   r.outcome, r.progress, r.step, r.created_at
              FROM b JOIN notifications o ON o.id = b.id
              JOIN runs r ON r.tenant = o.tenant AND r.id = o.run_id
             WHERE o.event NOT IN ('run.started', 'run.retrying', 'run.approval_requested')),
    lk AS (SELECT * FROM act UNION ALL SELECT * FROM fin),
    del AS (DELETE FROM notifications o USING b
             WHERE o.id = b.id AND b.retry_ms < 0 AND o.owner = p_owner
               AND o.attempts = b.attempts RETURNING 1),
    upd AS (UPDATE notifications o SET owner = NULL,
                                       next_at = now() + b.retry_ms * interval '1 millisecond'
              FROM b WHERE o.id = b.id AND b.retry_ms >= 0 AND o.owner = p_owner
               AND o.attempts = b.attempts RETURNING 1),
    ev AS (INSERT INTO run_events (tenant, run_id, type, status, outcome, progress, step,
                                   message, run_created_at)
           SELECT tenant, id, 'notification', status, outcome, progress, step, message,
                  created_at FROM lk)
    SELECT (SELECT count(*) FROM del) + (SELECT count(*) FROM upd) INTO v_n;
    RETURN v_n;
END
$$;
