-- 037_settle_without_run: a delivery whose run is gone is settled like any
-- other, not claimed again at every lease.
--
-- opsrun_deliveries_settle (migration 030) found the outbox row to delete
-- or reschedule through its run: the rows it changed were those of the
-- results joined to runs. A delivery whose run no longer exists (made
-- outside opsrun: runs truncated, a partial restore, triggers disabled;
-- opsrun deletes a run's deliveries in the statement that deletes it) was
-- left as it was after its attempt, and claimed again once its lease ran
-- out, for ever: one that carries its run's object (a start, a retry, an
-- approval asked for, a workflow's outcome, any row from before migration
-- 036) was sent again at every lease; one of an outcome (run NULL since
-- 036) was claimed with the JSON null and given up again each time, with
-- a warning.
--
-- Now the row is deleted or rescheduled from the result alone (its id, and
-- the lease it was claimed under: owner and attempts), whether or not its
-- run exists; the attempt's event is still written on the run, when there
-- is one. For a delivery whose run exists, the same rows are deleted,
-- rescheduled and recorded as by 030, and in the same order of locks: the
-- run of a transition before its end (locked FOR SHARE) before its outbox
-- row. The results are read through the runs they locked (s below) for
-- that: retention locks runs and then deletes their deliveries (the
-- statement trigger of 030), and the other order deadlocked with it
-- (integration_notify.settle_locks_the_run_first).
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
    -- every result, read through lk: the runs are locked before the rows
    s AS (SELECT b.* FROM b LEFT JOIN lk ON lk.nid = b.id),
    del AS (DELETE FROM notifications o USING s
             WHERE o.id = s.id AND s.retry_ms < 0 AND o.owner = p_owner
               AND o.attempts = s.attempts RETURNING 1),
    upd AS (UPDATE notifications o SET owner = NULL,
                                       next_at = now() + s.retry_ms * interval '1 millisecond'
              FROM s WHERE o.id = s.id AND s.retry_ms >= 0 AND o.owner = p_owner
               AND o.attempts = s.attempts RETURNING 1),
    ev AS (INSERT INTO run_events (tenant, run_id, type, status, outcome, progress, step,
                                   message, run_created_at)
           SELECT tenant, id, 'notification', status, outcome, progress, step, message,
                  created_at FROM lk)
    SELECT (SELECT count(*) FROM del) + (SELECT count(*) FROM upd) INTO v_n;
    RETURN v_n;
END
$$;
