-- 016_rate_limits: shared rate limits (the configuration's rate_limits),
-- kept by every replica in one table, so that together they never take
-- more than a limit's units in any window of its length.
--
-- A unit is taken by every start of an action (each attempt, in the claim)
-- and every poll check of a run type that names the limit. Units are
-- counted in slices of a hundredth of the window (at least 1 ms): a row
-- per limit and slice, keyed by the slice's end. A take counts every slice
-- that ends after the window's start (now() - per), without an upper
-- bound, and takes only what is left, under a lock of its own per limit.
-- So for any window, the last unit taken in it was taken after counting
-- every earlier unit of that window (a transaction whose now() is older
-- still counts the units of newer ones): no window holds more than the
-- limit. The slices cost at most one slice's worth of the limit (1%).
-- Slices are deleted a minute after they leave the window, by the takes
-- themselves, so that a transaction with an older now() never misses one.
--
-- Only additions: the claim of migration 013 stays, for a binary from
-- before this migration, which knows no limits; the claim below is its
-- overload with the limits of this replica's run types.
CREATE TABLE rate_limit_slices (
    name  text        NOT NULL,
    until timestamptz NOT NULL,
    units integer     NOT NULL,
    PRIMARY KEY (name, until)
);

-- The end of the slice of instant t, for a window of p_per_ms.
CREATE FUNCTION opsrun_rate_slice_end(t timestamptz, p_per_ms bigint) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT timestamptz 'epoch' + (floor(extract(epoch FROM t) * 1000
                                        / greatest(p_per_ms / 100, 1)) + 1)
                                 * greatest(p_per_ms / 100, 1) * interval '1 millisecond'
$$;

-- The units of limit p_name left now (negative when a smaller limit was
-- configured since), and when the oldest units counted leave the window.
-- Takes the limit's lock until the end of the transaction; the caller
-- records what it uses in the same transaction (opsrun_rate_use, or the
-- claim's own insert).
CREATE FUNCTION opsrun_rate_room(p_name text, p_limit integer, p_per_ms bigint,
                                 OUT room integer, OUT next_at timestamptz)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(726001702, hashtext(p_name));
    DELETE FROM rate_limit_slices
     WHERE name = p_name AND until <= now() - make_interval(secs => p_per_ms / 1000.0 + 60);
    SELECT p_limit - coalesce(sum(s.units), 0),
           min(s.until) + make_interval(secs => p_per_ms / 1000.0)
      INTO room, next_at
      FROM rate_limit_slices s
     WHERE s.name = p_name AND s.until > now() - make_interval(secs => p_per_ms / 1000.0);
END
$$;

CREATE FUNCTION opsrun_rate_use(p_name text, p_per_ms bigint, p_units integer) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO rate_limit_slices AS s (name, until, units)
    SELECT p_name, opsrun_rate_slice_end(now(), p_per_ms), p_units WHERE p_units > 0
    ON CONFLICT (name, until) DO UPDATE SET units = s.units + EXCLUDED.units
$$;

-- Up to p_want units of one limit now, for the poller's checks: how many
-- were taken, and when the next one frees when that is fewer.
CREATE FUNCTION opsrun_rate_take(p_name text, p_limit integer, p_per_ms bigint,
                                 p_want integer, OUT taken integer, OUT next_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    v_room integer;
BEGIN
    SELECT r.room, r.next_at INTO v_room, next_at FROM opsrun_rate_room(p_name, p_limit, p_per_ms) r;
    taken := greatest(least(v_room, p_want), 0);
    PERFORM opsrun_rate_use(p_name, p_per_ms, taken);
    IF taken = p_want THEN
        next_at := NULL;
    ELSIF next_at IS NULL THEN
        next_at := now() + make_interval(secs => p_per_ms / 1000.0);
    END IF;
END
$$;

-- What a limit looks like now, for GET /rate_limits and the metrics
-- (read only, no lock): units taken in the window, and when the next unit
-- frees when none is left.
CREATE FUNCTION opsrun_rate_status(p_names text[], p_limits integer[], p_per_ms bigint[])
RETURNS TABLE (name text, used integer, next_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT l.name, coalesce(sum(s.units), 0)::integer,
           CASE WHEN coalesce(sum(s.units), 0) >= l.lim
                THEN min(s.until) + make_interval(secs => l.per / 1000.0) END
      FROM unnest(p_names, p_limits, p_per_ms) AS l(name, lim, per)
      LEFT JOIN rate_limit_slices s
        ON s.name = l.name AND s.until > now() - make_interval(secs => l.per / 1000.0)
     GROUP BY l.name, l.lim, l.per
$$;

-- The claim of migration 013 with this replica's rate limits: p_rates[i]
-- names the limit of run type p_types[i] (NULL for none), of
-- p_rate_limits[i] units per p_rate_per_ms[i]. Without any, it is the
-- claim of 013. With them, the limits are locked in name order after the
-- claim's own lock, a type whose limit has no unit left is not a candidate
-- (its runs stay queued and hold no worker), the candidates are ranked per
-- limit as per capped type, and the units of the runs started are taken in
-- the same statement as their claim.
CREATE FUNCTION opsrun_claim(p_worker text, p_limit integer, p_max_running integer,
                             p_types text[], p_caps integer[], p_rates text[],
                             p_rate_limits integer[], p_rate_per_ms bigint[])
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
    v_lim record;
    v_names text[] := '{}';
    v_rooms integer[] := '{}';
    v_open text[];
BEGIN
    IF cardinality(array_remove(p_rates, NULL)) = 0 THEN
        RETURN QUERY SELECT * FROM opsrun_claim(p_worker, p_limit, p_max_running, p_types, p_caps);
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(7260017001);
    SELECT p_max_running - count(*) INTO v_room
      FROM runs WHERE status IN ('running', 'cancelling');
    v_room := least(v_room, p_limit);
    IF v_room <= 0 THEN
        RETURN;
    END IF;
    FOR v_lim IN SELECT DISTINCT ON (t.rate) t.rate, t.lim, t.per
                   FROM unnest(p_rates, p_rate_limits, p_rate_per_ms) AS t(rate, lim, per)
                  WHERE t.rate IS NOT NULL ORDER BY t.rate LOOP
        v_names := v_names || v_lim.rate;
        v_rooms := v_rooms || (SELECT r.room FROM opsrun_rate_room(v_lim.rate, v_lim.lim,
                                                                   v_lim.per) r);
    END LOOP;
    SELECT array_agg(t.type) INTO v_open
      FROM unnest(p_types, p_caps, p_rates) AS t(type, cap, rate)
      LEFT JOIN unnest(v_names, v_rooms) AS l(name, room) ON l.name = t.rate
     WHERE (t.cap IS NULL
            OR t.cap > (SELECT count(*) FROM runs h
                         WHERE h.type = t.type AND h.status IN ('running', 'cancelling')))
       AND (t.rate IS NULL OR l.room > 0);
    IF v_open IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH kinds AS (
        SELECT t.type, t.rate, t.per, l.room AS rate_room,
               t.cap - (SELECT count(*) FROM runs h
                         WHERE h.type = t.type AND h.status IN ('running', 'cancelling')) AS room
          FROM unnest(p_types, p_caps, p_rates, p_rate_per_ms) AS t(type, cap, rate, per)
          LEFT JOIN unnest(v_names, v_rooms) AS l(name, room) ON l.name = t.rate
         WHERE t.type = ANY (v_open)
    ), cand AS (
        SELECT r.tenant, r.id, r.type, r.priority, r.run_at, r.created_at
          FROM runs r
         WHERE r.status = 'queued' AND r.run_at <= now() AND r.type = ANY (v_open)
         ORDER BY r.priority DESC, r.run_at, r.created_at
         LIMIT v_room
           FOR UPDATE OF r SKIP LOCKED
    ), ranked AS (
        SELECT cand.*, k.room, k.rate, k.rate_room,
               row_number() OVER (PARTITION BY cand.type
                                  ORDER BY cand.priority DESC, cand.run_at,
                                           cand.created_at) AS rn,
               row_number() OVER (PARTITION BY k.rate
                                  ORDER BY cand.priority DESC, cand.run_at,
                                           cand.created_at) AS rate_rn
          FROM cand JOIN kinds k ON k.type = cand.type
    ), picked AS (
        SELECT k.tenant, k.id FROM ranked k
         WHERE (k.room IS NULL OR k.rn <= k.room)
           AND (k.rate IS NULL OR k.rate_rn <= k.rate_room)
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
    ), used AS (
        INSERT INTO rate_limit_slices AS s (name, until, units)
        SELECT k.rate, opsrun_rate_slice_end(now(), max(k.per)), count(*)
          FROM upd u JOIN kinds k ON k.type = u.type
         WHERE k.rate IS NOT NULL
         GROUP BY k.rate
        ON CONFLICT (name, until) DO UPDATE SET units = s.units + EXCLUDED.units
    )
    SELECT * FROM upd;
END
$$;
