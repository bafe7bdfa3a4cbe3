-- 021_run_logs: what a run printed, per attempt (docs/logs.md).
--
-- A run's log is a sequence of lines numbered from 1 within the run (seq),
-- each with the attempt it belongs to, when it was written, its stream
-- ('stderr': what an exec command wrote; 'opsrun': what opsrun did for the
-- run) and its text. Lines are written in chunks: one row holds every line
-- a writer had for one run at once, as a JSON array of
-- [at (microseconds since the epoch), stream, text], so a chatty command
-- costs a row per flush, not per line, and the lines of a short attempt
-- ride in the statement that completes it.
--
-- runs.log_seq is the seq of the run's last line. A writer takes the next
-- seqs by raising it in the statement that inserts the chunk: the row lock
-- it takes lasts until the writer commits, so two writers of one run take
-- their seqs one after the other and commit in that order, and a reader
-- that has every line up to seq N never later finds a line below N
-- appear. No trigger of runs fires for it (they are AFTER UPDATE OF
-- status).
--
-- run_logs is partitioned as run_events is (migration 013), by the
-- creation time of the run, with a partition of the same span next to each
-- of run_events': opsrun_event_partition_create makes both, and
-- opsrun_event_partitions_drop drops both, under the same checks, so a
-- run's lines are kept exactly as long as its events. run_logs_default
-- takes the lines of a run created outside every span; retention deletes
-- those with their run.
--
-- dropped is how many bytes of output the writer left out of this chunk:
-- beyond the attempt's cap (logs.max_bytes_per_attempt) or cut from lines
-- longer than logs.max_line_bytes. A run's log is "truncated" when any of
-- its chunks dropped something.
--
-- Only additions, and two functions replaced with the same signatures: a
-- binary from before this migration keeps working beside one after it (it
-- writes no lines; its partition maintenance makes and drops both tables'
-- partitions).
ALTER TABLE runs ADD COLUMN log_seq bigint NOT NULL DEFAULT 0;

CREATE TABLE run_logs (
    tenant         text        NOT NULL,
    run_id         text        NOT NULL,
    run_created_at timestamptz NOT NULL,
    attempt        integer     NOT NULL,
    first_seq      bigint      NOT NULL,
    last_seq       bigint      NOT NULL,
    dropped        bigint      NOT NULL DEFAULT 0,
    lines          json        NOT NULL,
    CONSTRAINT run_logs_seqs_check CHECK (first_seq >= 1 AND last_seq >= first_seq)
) PARTITION BY RANGE (run_created_at);
CREATE INDEX run_logs_run ON run_logs (tenant, run_id, last_seq);

-- A chunk's lines are json, not jsonb (kept as written: a flush costs a
-- check of the text, not a conversion), compressed with lz4 where the
-- server has it: a chatty run's chunks are about 1 MiB, which pglz took
-- 15-25 ms to compress, lz4 about 2 (measured here: 25,000 lines, 890 KB).
-- The partitions take it with LIKE ... INCLUDING COMPRESSION.
DO $$
BEGIN
    ALTER TABLE run_logs ALTER COLUMN lines SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported OR invalid_parameter_value THEN
    RAISE NOTICE 'run_logs.lines keeps the default compression: %', SQLERRM;
END
$$;

CREATE TABLE run_logs_default PARTITION OF run_logs DEFAULT;

-- The twin in run_logs of a partition of run_events: the same span.
CREATE FUNCTION opsrun_log_partition_name(p_events text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT 'run_logs_' || substr(p_events, length('run_events_') + 1)
$$;

-- Creates run_logs' partition [p_lo, p_hi) named p_name as 013 makes those
-- of run_events: built beside the table and attached, which locks run_logs
-- only in SHARE UPDATE EXCLUSIVE mode, after the rows of the range move
-- over from run_logs_default. p_lo NULL: from MINVALUE.
CREATE FUNCTION opsrun_log_partition_create(p_name text, p_lo timestamptz, p_hi timestamptz)
RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    EXECUTE format('CREATE TABLE %I (LIKE run_logs INCLUDING DEFAULTS INCLUDING CONSTRAINTS '
                   'INCLUDING COMPRESSION)', p_name);
    EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (run_created_at >= %L '
                   'AND run_created_at < %L)', p_name, p_name || '_bound',
                   coalesce(p_lo, '-infinity'), p_hi);
    LOCK TABLE run_logs_default IN ACCESS EXCLUSIVE MODE;
    EXECUTE format('WITH m AS (DELETE FROM run_logs_default WHERE run_created_at >= %L '
                   'AND run_created_at < %L RETURNING *) INSERT INTO %I SELECT * FROM m',
                   coalesce(p_lo, '-infinity'), p_hi, p_name);
    IF p_lo IS NULL THEN
        EXECUTE format('ALTER TABLE run_logs ATTACH PARTITION %I FOR VALUES FROM (MINVALUE) '
                       'TO (%L)', p_name, p_hi);
    ELSE
        EXECUTE format('ALTER TABLE run_logs ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                       p_name, p_lo, p_hi);
    END IF;
    EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', p_name, p_name || '_bound');
    RETURN p_name;
END
$$;

-- A twin for every partition run_events has now. The partition lock of
-- migration 013 first: a replica of an earlier release making or dropping
-- partitions meanwhile would leave one without its twin.
SELECT pg_advisory_xact_lock(7260017013);
SELECT opsrun_log_partition_create(opsrun_log_partition_name(p.name), p.lo, p.hi)
  FROM opsrun_event_partitions() p;

-- As in migration 013, and the twin in run_logs with it.
CREATE OR REPLACE FUNCTION opsrun_event_partition_create(p_lo timestamptz, p_hi timestamptz)
RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_name text := 'run_events_p' || to_char(p_lo AT TIME ZONE 'UTC', 'YYYYMMDD"_"HH24MISS');
BEGIN
    EXECUTE format('CREATE TABLE %I (LIKE run_events INCLUDING DEFAULTS INCLUDING CONSTRAINTS)',
                   v_name);
    EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (run_created_at >= %L '
                   'AND run_created_at < %L)', v_name, v_name || '_bound', p_lo, p_hi);
    LOCK TABLE run_events_default IN ACCESS EXCLUSIVE MODE;
    EXECUTE format('WITH m AS (DELETE FROM run_events_default WHERE run_created_at >= %L '
                   'AND run_created_at < %L RETURNING *) INSERT INTO %I SELECT * FROM m',
                   p_lo, p_hi, v_name);
    EXECUTE format('ALTER TABLE run_events ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                   v_name, p_lo, p_hi);
    EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', v_name, v_name || '_bound');
    PERFORM opsrun_log_partition_create(opsrun_log_partition_name(v_name), p_lo, p_hi);
    RETURN v_name;
END
$$;

-- As in migration 019, and the twin in run_logs with each span dropped:
-- no run created in the span is left, so no writer can be adding lines to
-- it (a writer names its run's row, which it locks and reads the creation
-- time from). run_logs is locked as run_events is before the first drop.
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
                LOCK TABLE ONLY run_logs IN ACCESS EXCLUSIVE MODE;
                v_locked := true;
                CONTINUE WHEN opsrun_runs_created_within(v.lo, v.hi);
            END IF;
            EXECUTE format('SELECT max(id) FROM %I', v.name) INTO v_max;
            UPDATE run_events_pruned SET upto = greatest(upto, v_max) WHERE v_max IS NOT NULL;
            EXECUTE format('DROP TABLE %I', v.name);
            EXECUTE format('DROP TABLE IF EXISTS %I', opsrun_log_partition_name(v.name));
            v_names := v_names || v.name;
        END LOOP;
    EXCEPTION WHEN lock_not_available THEN
        v_names := ARRAY[NULL];
    END;
    RETURN QUERY SELECT unnest(v_names);
END
$$;

ANALYZE run_logs;
