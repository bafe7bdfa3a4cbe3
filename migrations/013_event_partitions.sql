-- 013_event_partitions: run_events partitioned by the creation time of the
-- run each event belongs to, so that retention drops whole partitions
-- instead of deleting event rows one by one (docs/architecture.md,
-- "Retention").
--
-- The key is the run's creation time, not the event's: every event of a run
-- lives in the partition of the span its run was created in, so a run that
-- waits for days keeps its early events, and a partition can go as soon as
-- no run created in its span is left in runs (opsrun_event_partitions_drop
-- below). runs.created_at never changes after the insert; writers copy it
-- into run_created_at.
--
-- There is no foreign key to runs any more. Its ON DELETE CASCADE deleted
-- three or more event rows for every run retention deleted, which is the
-- cost this migration removes. When retention deletes a run, its events stay
-- in their partition until the partition is dropped, and nothing shows them:
-- every reader joins runs on (tenant, run_id) and on the run's creation time
-- (so a run created later under the same id, which retention allows, never
-- shows the events of the one before), GET /runs/{id}/events and the streams
-- answer 404 for a run that is gone, and the live fan-out skips an event
-- whose run is gone. The pruned-events mark of migration 004 is still raised
-- when a run is deleted.
--
-- Three partitions exist besides the spans:
--   run_events_unknown  [infinity, MAXVALUE): events whose writer did not
--       name the run's creation time, so the column default 'infinity' put
--       them here: a replica still on a binary from before this migration,
--       or SQL written by hand. Readers match them by (tenant, run_id) as
--       before; retention deletes them row by row together with their run.
--   run_events_default  DEFAULT: an event whose run was created outside
--       every span, which only happens when the spans ahead were not created
--       in time (every replica's maintenance failed for two spans). Creating
--       the span moves its rows out of here; retention deletes those of a
--       deleted run with the run. Normally empty, so the scan PostgreSQL
--       makes of it whenever a span is attached costs nothing.
--   run_events_pmin     [MINVALUE, the time of this migration): the events
--       that existed before it, moved here with their ids. Dropped like any
--       span once no run created before this migration is left.
-- Spans from the time of this migration on are created by the server
-- (opsrun_event_partitions_ensure, with queue.event_partition_s), right
-- after migrating and then by every retention pass, always two spans ahead.
--
-- The event horizon of migration 003 is unchanged: an INSERT into a
-- partitioned table takes RowExclusiveLock on the parent run_events (which
-- opsrun_event_horizon looks for) when the statement is planned, before the
-- id default is evaluated, and keeps it to the end of its transaction; the
-- partition it routes to is locked as well, later. The identity sequence
-- keeps its name (run_events_id_seq), its position and CACHE 1.

-- 1. The old table steps aside, with the names of its indexes and sequence
--    (index names are global in a schema).
ALTER TABLE run_events RENAME TO run_events_old;
ALTER INDEX run_events_pkey RENAME TO run_events_old_pkey;
ALTER INDEX run_events_run RENAME TO run_events_old_run;
ALTER SEQUENCE run_events_id_seq RENAME TO run_events_old_id_seq;

-- 2. The partitioned table. A primary key of a partitioned table must hold
--    the partition key; ids stay unique because the identity default is the
--    only source of ids (migration 003's rules).
CREATE TABLE run_events (
    id             bigint      GENERATED ALWAYS AS IDENTITY (CACHE 1),
    tenant         text        NOT NULL,
    run_id         text        NOT NULL,
    type           text        NOT NULL CONSTRAINT run_events_type_check CHECK (type IN ('status', 'progress')),
    status         text        NOT NULL,
    outcome        text        NOT NULL,
    progress       smallint    NOT NULL,
    step           text,
    message        text,
    xid            xid8        NOT NULL DEFAULT pg_current_xact_id(),
    created_at     timestamptz NOT NULL DEFAULT now(),
    run_created_at timestamptz NOT NULL DEFAULT 'infinity',
    PRIMARY KEY (id, run_created_at)
) PARTITION BY RANGE (run_created_at);
CREATE INDEX run_events_run ON run_events (tenant, run_id, id);

SELECT setval('run_events_id_seq', s.last_value, s.is_called) FROM run_events_old_id_seq s;

COMMENT ON COLUMN run_events.xid IS
    'The writing transaction, for diagnostics only. 001 meant it for a global reader '
    'ordering by (xid, id) below the oldest running transaction; measured wrong (xid order '
    'is not commit order, not even per run), see docs/design-event-order.md. Readers use '
    'the id horizon of opsrun_event_horizon()/opsrun_events_settled() and never this column.';
COMMENT ON COLUMN run_events.run_created_at IS
    'The created_at of the run this event belongs to: the partition key (migration 013). '
    '''infinity'' when the writer did not say (partition run_events_unknown).';

CREATE TABLE run_events_default PARTITION OF run_events DEFAULT;
CREATE TABLE run_events_unknown PARTITION OF run_events FOR VALUES FROM ('infinity') TO (MAXVALUE);

-- 3. The events so far, with their ids, into one partition for every run
--    created before now. It is filled before it is attached, so its indexes
--    are built once at the end instead of row by row; the CHECK, there
--    before the rows, lets the attach skip scanning them. The events of a
--    run created after now() (by a transaction that began after this one)
--    go through the parent, to run_events_default until their span exists.
--    An event whose run is gone (only possible where the foreign key was
--    bypassed) could never be shown and is left behind.
CREATE TABLE run_events_pmin (LIKE run_events INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
DO $$
BEGIN
    EXECUTE format('ALTER TABLE run_events_pmin ADD CONSTRAINT run_events_pmin_bound '
                   'CHECK (run_created_at < %L)', now());
END
$$;
INSERT INTO run_events_pmin
    SELECT e.id, e.tenant, e.run_id, e.type, e.status, e.outcome, e.progress, e.step,
           e.message, e.xid, e.created_at, r.created_at
      FROM run_events_old e JOIN runs r ON r.tenant = e.tenant AND r.id = e.run_id
     WHERE r.created_at < now();
DO $$
BEGIN
    EXECUTE format('ALTER TABLE run_events ATTACH PARTITION run_events_pmin '
                   'FOR VALUES FROM (MINVALUE) TO (%L)', now());
END
$$;
ALTER TABLE run_events_pmin DROP CONSTRAINT run_events_pmin_bound;
INSERT INTO run_events OVERRIDING SYSTEM VALUE
    SELECT e.id, e.tenant, e.run_id, e.type, e.status, e.outcome, e.progress, e.step,
           e.message, e.xid, e.created_at, r.created_at
      FROM run_events_old e JOIN runs r ON r.tenant = e.tenant AND r.id = e.run_id
     WHERE r.created_at >= now();

-- 4. The functions that take a run_events row follow the new table; then the
--    old one goes (with its foreign key and sequence). No CASCADE: anything
--    else still bound to the old table stops this migration instead of
--    silently disappearing with it.
DROP FUNCTION opsrun_run_json_at(runs, run_events_old);
DROP FUNCTION opsrun_event_json(run_events_old);
DROP TABLE run_events_old;

CREATE FUNCTION opsrun_event_json(e run_events) RETURNS json
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT json_build_object(
        'id', e.id, 'run_id', e.run_id, 'type', e.type, 'status', e.status,
        'outcome', e.outcome, 'progress', e.progress, 'step', e.step,
        'message', e.message, 'created_at', opsrun_ts(e.created_at))
$$;

-- As in migration 004.
CREATE FUNCTION opsrun_run_json_at(r runs, e run_events) RETURNS json
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
BEGIN
    r.status := e.status;
    r.outcome := e.outcome;
    r.progress := e.progress;
    r.step := e.step;
    RETURN opsrun_run_json(r);
END
$$;

-- 5. The claim of migration 011 (its settings and both of its paths), its
--    event now naming the run's creation time, and without bitmap scans:
--    the count of held runs took a bitmap scan of runs_heartbeat, which
--    never marks the entries of runs that have since completed as dead, so
--    until autovacuum came every claim visited every run completed since
--    (measured: 1.4 ms a claim after a 50,000-run bulk submission, against
--    microseconds with a plain index scan, which marks them and skips them
--    the next time).
CREATE OR REPLACE FUNCTION opsrun_claim(p_worker text, p_limit integer, p_max_running integer,
                                        p_types text[], p_caps integer[])
RETURNS SETOF runs
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_sort = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET enable_bitmapscan = off
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
            INSERT INTO run_events (tenant, run_id, type, status, outcome, progress, step, message,
                                    run_created_at)
            SELECT u.tenant, u.id, 'status', u.status, u.outcome, u.progress, u.step,
                   format('attempt %s started by %s', u.attempt, p_worker), u.created_at
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
        INSERT INTO run_events (tenant, run_id, type, status, outcome, progress, step, message,
                                run_created_at)
        SELECT u.tenant, u.id, 'status', u.status, u.outcome, u.progress, u.step,
               format('attempt %s started by %s', u.attempt, p_worker), u.created_at
          FROM upd u
    )
    SELECT * FROM upd;
END
$$;

-- 6. The spans.

-- The span partitions, oldest first: lo NULL for the one from MINVALUE. The
-- bounds are read back from the catalog, in this session's time zone, which
-- is also how they are parsed.
CREATE FUNCTION opsrun_event_partitions(OUT name text, OUT lo timestamptz, OUT hi timestamptz)
RETURNS SETOF record
LANGUAGE sql STABLE AS $$
    SELECT b.name,
           CASE WHEN b.m[1] = 'MINVALUE' THEN NULL ELSE btrim(b.m[1], '''')::timestamptz END,
           btrim(b.m[2], '''')::timestamptz
      FROM (SELECT c.relname::text AS name,
                   regexp_match(pg_get_expr(c.relpartbound, c.oid),
                                '^FOR VALUES FROM \((.*)\) TO \((.*)\)$') AS m
              FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
             WHERE i.inhparent = 'run_events'::regclass) b
     WHERE b.m IS NOT NULL AND b.m[2] <> 'MAXVALUE'
     ORDER BY 3
$$;

-- The start of the span of p_span that holds t (spans are aligned to the
-- Unix epoch: days start at 00:00 UTC).
CREATE FUNCTION opsrun_span_floor(t timestamptz, p_span interval) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT to_timestamp(floor(extract(epoch FROM t) / extract(epoch FROM p_span))
                        * extract(epoch FROM p_span))
$$;

-- Creates the partition [p_lo, p_hi) and returns its name. It is built
-- beside the table and attached, which locks run_events only in SHARE
-- UPDATE EXCLUSIVE mode (CREATE TABLE ... PARTITION OF would take ACCESS
-- EXCLUSIVE), and run_events_default in ACCESS EXCLUSIVE mode, whose rows in
-- the new range move over first.
CREATE FUNCTION opsrun_event_partition_create(p_lo timestamptz, p_hi timestamptz) RETURNS text
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
    RETURN v_name;
END
$$;

-- Creates the spans of p_span that are missing from the newest span's end
-- until two spans (and at least ten minutes) ahead of now, and returns their
-- names. A span change applies from the newest span's end on. Nothing is
-- created when another session holds the partition lock (another replica is
-- at it), and nothing but one NULL is returned when the locks are not
-- granted within p_lock_timeout_ms: the next pass tries again. A gap of whole spans into the past (no replica ran for
-- that long) gets one partition up to the current span.
CREATE FUNCTION opsrun_event_partitions_ensure(p_span interval, p_lock_timeout_ms integer)
RETURNS SETOF text
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_until timestamptz := now() + greatest(2 * p_span, interval '10 minutes');
    v_lo timestamptz;
    v_hi timestamptz;
    v_names text[] := '{}';
BEGIN
    IF NOT pg_try_advisory_xact_lock(7260017013) THEN
        RETURN;
    END IF;
    BEGIN
        PERFORM set_config('lock_timeout', p_lock_timeout_ms || 'ms', true);
        SELECT max(p.hi) INTO v_lo FROM opsrun_event_partitions() p;
        v_lo := coalesce(v_lo, opsrun_span_floor(now(), p_span));
        WHILE v_lo < v_until LOOP
            v_hi := greatest(opsrun_span_floor(v_lo, p_span) + p_span,
                             opsrun_span_floor(now(), p_span));
            v_names := v_names || opsrun_event_partition_create(v_lo, v_hi);
            v_lo := v_hi;
        END LOOP;
    EXCEPTION WHEN lock_not_available THEN
        v_names := ARRAY[NULL];
    END;
    RETURN QUERY SELECT unnest(v_names);
END
$$;

-- Drops every span partition that ended at least p_margin ago and holds no
-- run that is still in runs, and returns their names. The first check runs
-- without a lock; the partition is dropped after checking again under ACCESS
-- EXCLUSIVE on run_events, which waits for every writer in flight (each holds
-- RowExclusiveLock from before it inserts a run and its first event in one
-- statement), so a run whose insert was under way is seen. p_margin covers a
-- transaction that took its now() before the span ended but had not yet
-- started its insert; were one to come later still, its events would go to
-- run_events_default and be deleted with their run. The pruned-events mark
-- (migration 004) rises to the highest id dropped. Nothing is dropped when
-- another replica holds the partition lock; nothing is dropped and one NULL
-- returned when the lock is not granted within p_lock_timeout_ms (writers
-- wait behind the request for at most that long).
CREATE FUNCTION opsrun_event_partitions_drop(p_margin interval, p_lock_timeout_ms integer)
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
            CONTINUE WHEN EXISTS (SELECT 1 FROM runs r
                                   WHERE r.created_at >= v.lo AND r.created_at < v.hi);
            IF NOT v_locked THEN
                LOCK TABLE ONLY run_events IN ACCESS EXCLUSIVE MODE;
                v_locked := true;
                CONTINUE WHEN EXISTS (SELECT 1 FROM runs r
                                       WHERE r.created_at >= v.lo AND r.created_at < v.hi);
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

ANALYZE run_events;
