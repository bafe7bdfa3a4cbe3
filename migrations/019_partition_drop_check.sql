-- 019_partition_drop_check: the partition drop asks whether a run created
-- in a span is left in runs with one short index probe per tenant, instead
-- of reading all of runs_list, while every reader and writer of run_events
-- waits for it.
--
-- opsrun_event_partitions_drop (migration 013) asks that question for each
-- span it drops, once before and once under ACCESS EXCLUSIVE on run_events.
-- Migration 014 dropped the index on (created_at DESC, id DESC) that the
-- question was written for; since then PostgreSQL answered it by reading
-- the whole of runs_list (tenant, created_at DESC, id DESC), testing the
-- range on created_at at every entry: 2,128 buffers and 16-25 ms with
-- 100,000 runs, while claims, submissions and completions, which all insert
-- events, queued behind the lock. In soaks at 500 runs/s (bench/soak.sh)
-- the drop took 11.2 ms a call on average and 63 ms at most on a quiet
-- machine, 31.8 and 585 ms on a loaded one, and went with the slowest
-- pickups of the steady state.
--
-- opsrun_runs_created_within walks the tenants of runs_list by a skip scan
-- (each step one descent for the next tenant, as the admin's list does in
-- store/runs.c) and looks for the range within each tenant's part of the
-- index: as many index descents as there are tenants, whatever the number
-- of runs. With 100,000 runs in three tenants the drop's pass reads 89
-- buffers in about 1 ms; in the quiet soak it took 3.7 ms a call on
-- average and 11.3 ms at most.
--
-- Only functions: the drop keeps its signature, so a binary from before
-- this migration calls the new one.
CREATE FUNCTION opsrun_runs_created_within(p_lo timestamptz, p_hi timestamptz) RETURNS boolean
LANGUAGE sql STABLE AS $$
    WITH RECURSIVE t(tenant) AS (
        SELECT min(tenant) FROM runs
        UNION ALL
        SELECT (SELECT min(u.tenant) FROM runs u WHERE u.tenant > t.tenant)
          FROM t WHERE t.tenant IS NOT NULL)
    SELECT EXISTS (SELECT 1 FROM t
                    WHERE t.tenant IS NOT NULL
                      AND EXISTS (SELECT 1 FROM runs r
                                   WHERE r.tenant = t.tenant
                                     AND r.created_at >= p_lo AND r.created_at < p_hi))
$$;

-- As in migration 013, with the question asked by opsrun_runs_created_within.
CREATE OR REPLACE FUNCTION opsrun_event_partitions_drop(p_margin interval, p_lock_timeout_ms integer)
RETURNS SETOF text
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v record;
    v_locked boolean := false;
    v_max bigint;
    v_names text[] := '{}';
BEGIN
    IF NOT pg_try_advisory_xact_lock(7260017013) THEN
        RETURN;
    END IF;
    BEGIN
        PERFORM set_config('lock_timeout', p_lock_timeout_ms || 'ms', true);
        FOR v IN SELECT p.name, coalesce(p.lo, '-infinity') AS lo, p.hi
                   FROM opsrun_event_partitions() p
                  WHERE p.hi <= now() - p_margin LOOP
            CONTINUE WHEN opsrun_runs_created_within(v.lo, v.hi);
            IF NOT v_locked THEN
                LOCK TABLE ONLY run_events IN ACCESS EXCLUSIVE MODE;
                v_locked := true;
                CONTINUE WHEN opsrun_runs_created_within(v.lo, v.hi);
            END IF;
            EXECUTE format('SELECT max(id) FROM %I', v.name) INTO v_max;
            UPDATE run_events_pruned SET upto = greatest(upto, v_max) WHERE v_max IS NOT NULL;
            EXECUTE format('DROP TABLE %I', v.name);
            v_names := v_names || v.name;
        END LOOP;
    EXCEPTION WHEN lock_not_available THEN
        v_names := ARRAY[NULL];
    END;
    RETURN QUERY SELECT unnest(v_names);
END
$$;
