-- 033_claim_last_tenant: the claim finds its one tenant at the end of
-- runs_ready, not at its start.
--
-- When at most one tenant has queued runs (the usual case), the claim of
-- migration 022 reads the first tenant of runs_ready (ORDER BY tenant
-- LIMIT 1), then that none comes after it. runs_ready's entries are
-- (tenant, priority DESC, run_at, created_at) of the queued runs, and
-- a claimed run's entry stays in the index, dead, until a vacuum of runs
-- removes it: the first entries are those of the runs claimed since, the
-- earliest and the most urgent. The read of the first tenant walked them
-- all at every claim, and so did the claim's own read of its candidates
-- (which must: they come in that order), twice where e698232 walked them
-- once. The last tenant is read from the index's other end, where the
-- newest queued runs are, and "none before it" is one descent. What the
-- claim decides is unchanged: v_one is true exactly when one tenant has
-- queued runs, and that tenant is the same.
--
-- With 6,004 of 20,000 runs claimed and no vacuum since, a claim of 4 read
-- 78 blocks of runs_ready, 38 of them for its candidates; it reads 46 now
-- (integration_concurrency.one_tenant_claim_walks_the_claimed_once). With
-- 1,600 claimed, EXPLAIN ANALYZE of the tenant's read: 8 buffers and
-- 0.070 ms from the start, 3 buffers and 0.019 ms from the end. The
-- backend's CPU a run of 4,000 runs claimed 16 at a time by psql did not
-- tell the two apart on this machine (bench/README.md, "The claim's one
-- tenant").
--
-- The body is 022's but for that read (v_last for v_first). The arguments
-- and the result are unchanged: a binary from before this migration calls
-- it as before.
CREATE OR REPLACE FUNCTION opsrun_claim(p_worker text, p_limit integer, p_max_running integer,
                                        p_types text[], p_caps integer[], p_rates text[],
                                        p_rate_limits integer[], p_rate_per_ms bigint[],
                                        p_tenants text[], p_tenant_caps integer[],
                                        p_tenant_cap integer)
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
    v_left integer;
    v_lim record;
    v_names text[] := '{}';
    v_rooms integer[] := '{}';
    v_capped boolean := coalesce(cardinality(array_remove(p_caps, NULL)), 0) > 0
                        OR coalesce(cardinality(array_remove(p_rates, NULL)), 0) > 0;
    v_tcapped boolean := coalesce(p_tenant_cap, 0) > 0
                         OR coalesce(cardinality(array_remove(p_tenant_caps, NULL)), 0) > 0;
    v_turn bigint;
    v_open text[];
    v_tenants text[];
    v_troom integer[];
    v_done text[] := '{}';
    v_n integer;
    v_s integer;
    v_share integer;
    d record;
    v_got integer;
    v_more boolean;
    v_width integer; -- how many tenants, in turn, a round looks at
    v_last text;
    v_one boolean;
BEGIN
    -- A key's and a cap's running runs are counted after the claim lock is
    -- taken: only a statement snapshot taken after it sees the claims
    -- committed before.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'opsrun_claim needs the read committed isolation level, not %',
            current_setting('transaction_isolation');
    END IF;
    PERFORM pg_advisory_xact_lock(7260017001);
    SELECT p_max_running - count(*) INTO v_left
      FROM runs WHERE status IN ('running', 'cancelling');
    v_left := least(v_left, p_limit);
    IF v_left <= 0 THEN
        RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM conc_freed) THEN
        PERFORM opsrun_conc_release();
    END IF;
    IF v_capped THEN
        FOR v_lim IN SELECT DISTINCT ON (t.rate) t.rate, t.lim, t.per
                       FROM unnest(p_rates, p_rate_limits, p_rate_per_ms) AS t(rate, lim, per)
                      WHERE t.rate IS NOT NULL ORDER BY t.rate LOOP
            v_names := v_names || v_lim.rate;
            v_rooms := v_rooms || (SELECT r.room FROM opsrun_rate_room(v_lim.rate, v_lim.lim,
                                                                       v_lim.per) r);
        END LOOP;
    END IF;
    FOR v_round IN 1 .. 8 LOOP
        -- 1. The open types.
        IF v_capped THEN
            SELECT array_agg(t.type) INTO v_open
              FROM unnest(p_types, p_caps, p_rates) AS t(type, cap, rate)
              LEFT JOIN unnest(v_names, v_rooms) AS l(name, room) ON l.name = t.rate
             WHERE (t.cap IS NULL
                    OR t.cap > (SELECT count(*) FROM runs h
                                 WHERE h.type = t.type AND h.status IN ('running', 'cancelling')))
               AND (t.rate IS NULL OR l.room > 0);
        ELSE
            v_open := p_types;
        END IF;
        EXIT WHEN v_open IS NULL OR cardinality(v_open) = 0;
        -- 2. The ready tenants, with their room (NULL: no cap). When at
        -- most one tenant has queued runs (the usual case), two descents of
        -- runs_ready say so, and the first round's one statement below
        -- finds whether any is due. (Written as two ordered reads: a
        -- generic plan of "tenant < the last" read every queued run of
        -- runs_queued_at instead.) The last tenant, read from the index's
        -- end: its first entries are those of the runs claimed since the
        -- last vacuum, dead, which a read from the start walks (033).
        v_one := false;
        IF v_round = 1 AND NOT v_capped AND NOT v_tcapped THEN
            SELECT r.tenant INTO v_last FROM runs r
             WHERE r.status = 'queued' AND NOT r.conc_held ORDER BY r.tenant DESC LIMIT 1;
            EXIT WHEN v_last IS NULL;
            v_one := NOT EXISTS (SELECT 1 FROM (SELECT r.tenant FROM runs r
                                                 WHERE r.status = 'queued' AND NOT r.conc_held
                                                   AND r.tenant < v_last
                                                 ORDER BY r.tenant DESC LIMIT 1) x);
        END IF;
        IF v_tcapped THEN
            WITH c AS (
                SELECT s.tenant,
                       coalesce((SELECT u.cap FROM unnest(p_tenants, p_tenant_caps) AS u(tenant, cap)
                                  WHERE u.tenant = s.tenant LIMIT 1), p_tenant_cap) AS cap
                  FROM opsrun_ready_tenants() s
                 WHERE s.run_at <= now() AND s.tenant <> ALL (v_done)
            ), h AS MATERIALIZED (
                -- Every tenant's running runs at once, on runs_held: at
                -- most queue.max_running entries.
                SELECT a.tenant, count(*) AS n FROM runs a
                 WHERE a.status IN ('running', 'cancelling') GROUP BY a.tenant
            ), r AS (
                SELECT c.tenant,
                       CASE WHEN c.cap > 0 THEN c.cap - coalesce((SELECT h.n FROM h
                                                                   WHERE h.tenant = c.tenant), 0)
                       END AS room
                  FROM c
            )
            SELECT array_agg(r.tenant ORDER BY r.tenant), array_agg(r.room ORDER BY r.tenant)
              INTO v_tenants, v_troom
              FROM r WHERE r.room IS NULL OR r.room > 0;
        ELSIF v_one THEN
            v_tenants := ARRAY[v_last];
            v_troom := ARRAY[NULL::integer];
        ELSE
            SELECT array_agg(s.tenant ORDER BY s.tenant), array_agg(NULL::integer)
              INTO v_tenants, v_troom
              FROM opsrun_ready_tenants() s
             WHERE s.run_at <= now() AND s.tenant <> ALL (v_done);
        END IF;
        EXIT WHEN v_tenants IS NULL;
        v_n := cardinality(v_tenants);
        -- One tenant, no caps or limits (the default): the claim of 016 on
        -- that tenant, unless a run with a key is among its candidates
        -- (then the rounds below do it). It took every candidate there
        -- was, up to the room left.
        IF v_round = 1 AND v_n = 1 AND NOT v_capped AND NOT v_tcapped THEN
            RETURN QUERY
            WITH cand AS MATERIALIZED (
                SELECT r.tenant, r.id, r.conc_key
                  FROM runs r
                 WHERE r.tenant = v_tenants[1] AND r.status = 'queued' AND NOT r.conc_held
                   AND r.run_at <= now() AND r.type = ANY (v_open)
                 ORDER BY r.priority DESC, r.run_at, r.created_at
                 LIMIT v_left
                   FOR UPDATE OF r SKIP LOCKED
            ), upd AS (
                UPDATE runs r
                   SET status = 'running', worker_id = p_worker, attempt = r.attempt + 1,
                       heartbeat_at = now(), started_at = coalesce(r.started_at, now()),
                       deadline_at = now() + make_interval(secs => r.timeout_s),
                       progress = 0, step = NULL, error = NULL, updated_at = now()
                  FROM cand c
                 WHERE r.id = c.id AND r.tenant = c.tenant
                   AND NOT EXISTS (SELECT 1 FROM cand k WHERE k.conc_key IS NOT NULL)
                RETURNING r.*
            ), ev AS (
                INSERT INTO run_events (tenant, run_id, type, status, outcome, progress, step,
                                        message, run_created_at)
                SELECT u.tenant, u.id, 'status', u.status, u.outcome, u.progress, u.step,
                       format('attempt %s started by %s', u.attempt, p_worker), u.created_at
                  FROM upd u
            )
            SELECT * FROM upd;
            GET DIAGNOSTICS v_got = ROW_COUNT;
            EXIT WHEN v_got > 0;
        END IF;
        IF v_n > 1 THEN
            v_turn := coalesce(v_turn, nextval('opsrun_claim_turn'));
            v_s := (v_turn % v_n)::integer;
            v_tenants := v_tenants[v_s + 1 : v_n] || v_tenants[1 : v_s];
            v_troom := v_troom[v_s + 1 : v_n] || v_troom[1 : v_s];
        END IF;
        v_share := (v_left + v_n - 1) / v_n;
        v_width := greatest(coalesce(v_width, 0), v_left);
        -- 3. and 4. The candidates and what becomes of each: ok, within
        -- the room of its type's cap, its rate limit and its key (each
        -- counted over the candidates before it, in turn; only for a
        -- type with a cap or limit, a run with a key); picked, the first
        -- v_left that are ok; held, left over and its key full.
        WITH t AS (
            SELECT u.tenant, u.turn, least(v_share, coalesce(u.room, v_share)) AS lim
              FROM unnest(v_tenants, v_troom) WITH ORDINALITY AS u(tenant, room, turn)
             WHERE u.turn <= v_width
        ), cand AS MATERIALIZED (
            SELECT x.*, t.turn, t.lim,
                   row_number() OVER (PARTITION BY x.tenant
                                      ORDER BY x.priority DESC, x.run_at, x.created_at) AS trn,
                   CASE WHEN x.conc_key IS NOT NULL THEN
                       x.conc_max - (SELECT count(*) FROM runs a
                                      WHERE a.tenant = x.tenant AND a.conc_group = x.conc_group
                                        AND a.conc_key = x.conc_key
                                        AND a.status IN ('running', 'cancelling')
                                        AND a.status <> 'completed')
                   END AS key_room
              FROM t CROSS JOIN LATERAL (
                   SELECT r.tenant, r.id, r.type, r.priority, r.run_at, r.created_at,
                          r.conc_group, r.conc_key, r.conc_max
                     FROM runs r
                    WHERE r.tenant = t.tenant AND r.status = 'queued' AND NOT r.conc_held
                      AND r.run_at <= now() AND r.type = ANY (v_open)
                    ORDER BY r.priority DESC, r.run_at, r.created_at
                    LIMIT t.lim
                      FOR UPDATE OF r SKIP LOCKED) x
        ), kinds AS MATERIALIZED (
            SELECT k.type, k.rate, l.room AS rate_room,
                   CASE WHEN k.cap IS NOT NULL THEN
                       k.cap - (SELECT count(*) FROM runs h
                                 WHERE h.type = k.type AND h.status IN ('running', 'cancelling'))
                   END AS room
              FROM unnest(p_types, p_caps, p_rates) AS k(type, cap, rate)
              LEFT JOIN unnest(v_names, v_rooms) AS l(name, room) ON l.name = k.rate
             WHERE v_capped AND k.type = ANY (v_open)
        ), judged AS MATERIALIZED (
            SELECT c.tenant, c.id, c.trn, c.turn, c.conc_group, c.conc_key, c.key_room,
                   sum(CASE WHEN c.ok THEN 1 ELSE 0 END)
                       OVER (ORDER BY c.trn, c.turn ROWS UNBOUNDED PRECEDING) AS okn, c.ok
              FROM (SELECT c.*,
                           (NOT v_capped OR EXISTS (
                               SELECT 1 FROM kinds k WHERE k.type = c.type
                                  AND (k.room IS NULL
                                       OR k.room >= (SELECT count(*) FROM cand q
                                                      WHERE q.type = c.type
                                                        AND (q.trn, q.turn) <= (c.trn, c.turn)))
                                  AND (k.rate IS NULL
                                       OR k.rate_room >= (SELECT count(*) FROM cand q
                                                           JOIN kinds qk ON qk.type = q.type
                                                          WHERE qk.rate = k.rate
                                                            AND (q.trn, q.turn)
                                                                <= (c.trn, c.turn)))))
                           AND (c.key_room IS NULL
                                OR c.key_room >= (SELECT count(*) FROM cand q
                                                   WHERE q.tenant = c.tenant
                                                     AND q.conc_group = c.conc_group
                                                     AND q.conc_key = c.conc_key
                                                     AND q.trn <= c.trn)) AS ok
                      FROM cand c) c
        ), decided AS MATERIALIZED (
            SELECT j.tenant, j.id, j.trn, j.turn,
                   CASE WHEN j.ok AND j.okn <= v_left THEN 'p'
                        WHEN j.key_room IS NOT NULL
                             AND j.key_room <= (SELECT count(*) FROM judged q
                                                 WHERE q.tenant = j.tenant
                                                   AND q.conc_group = j.conc_group
                                                   AND q.conc_key = j.conc_key
                                                   AND q.ok AND q.okn <= v_left) THEN 'h'
                        ELSE 's' END AS d
              FROM judged j
        )
        SELECT array_agg(x.tenant ORDER BY x.trn, x.turn) FILTER (WHERE x.d = 'p') AS p_tenants,
               array_agg(x.id ORDER BY x.trn, x.turn) FILTER (WHERE x.d = 'p') AS p_ids,
               array_agg(x.tenant) FILTER (WHERE x.d = 'h') AS h_tenants,
               array_agg(x.id) FILTER (WHERE x.d = 'h') AS h_ids,
               count(*) FILTER (WHERE x.d = 's') AS skipped,
               (SELECT array_agg(t.tenant) FROM t
                 WHERE (SELECT count(*) FROM cand c WHERE c.tenant = t.tenant) < t.lim) AS done,
               EXISTS (SELECT 1 FROM t
                        WHERE t.lim = v_share
                          AND (SELECT count(*) FROM cand c WHERE c.tenant = t.tenant) = t.lim)
                   AS filled
          INTO d
          FROM decided x;
        -- 5. Hold, then start.
        IF d.h_ids IS NOT NULL THEN
            -- Every due run of a key found full is held, not only the
            -- candidates: a backlog on one key must not fill the next
            -- claims' candidates while another key's run waits behind it.
            WITH k AS (
                SELECT DISTINCT r.tenant, r.conc_group, r.conc_key
                  FROM unnest(d.h_tenants, d.h_ids) AS h(tenant, id)
                  JOIN runs r ON r.id = h.id AND r.tenant = h.tenant
            ), x AS (
                SELECT r.tenant, r.id FROM k JOIN runs r
                    ON r.tenant = k.tenant AND r.conc_group = k.conc_group
                   AND r.conc_key = k.conc_key
                 WHERE r.status = 'queued' AND r.status <> 'completed' AND NOT r.conc_held
                   AND r.run_at <= now()
                   FOR UPDATE OF r SKIP LOCKED
            )
            UPDATE runs r SET conc_held = true FROM x WHERE r.id = x.id AND r.tenant = x.tenant;
        END IF;
        v_got := 0;
        IF d.p_ids IS NOT NULL THEN
            RETURN QUERY
            WITH upd AS (
                UPDATE runs r
                   SET status = 'running', worker_id = p_worker, attempt = r.attempt + 1,
                       heartbeat_at = now(), started_at = coalesce(r.started_at, now()),
                       deadline_at = now() + make_interval(secs => r.timeout_s),
                       progress = 0, step = NULL, error = NULL, updated_at = now()
                  FROM unnest(d.p_tenants, d.p_ids) AS p(tenant, id)
                 WHERE r.id = p.id AND r.tenant = p.tenant
                RETURNING r.*
            ), ev AS (
                INSERT INTO run_events (tenant, run_id, type, status, outcome, progress, step,
                                        message, run_created_at)
                SELECT u.tenant, u.id, 'status', u.status, u.outcome, u.progress, u.step,
                       format('attempt %s started by %s', u.attempt, p_worker), u.created_at
                  FROM upd u
            ), used AS (
                INSERT INTO rate_limit_slices AS s (name, until, units)
                SELECT k.rate, opsrun_rate_slice_end(now(), max(k.per)), count(*)
                  FROM upd u JOIN unnest(p_types, p_rates, p_rate_per_ms) AS k(type, rate, per)
                    ON k.type = u.type
                 WHERE k.rate IS NOT NULL
                 GROUP BY k.rate
                ON CONFLICT (name, until) DO UPDATE SET units = s.units + EXCLUDED.units
            )
            SELECT * FROM upd;
            GET DIAGNOSTICS v_got = ROW_COUNT;
            IF cardinality(v_names) > 0 THEN
                SELECT array_agg(l.room - (SELECT count(*)
                                             FROM unnest(d.p_tenants, d.p_ids) AS p(tenant, id)
                                             JOIN runs r ON r.id = p.id AND r.tenant = p.tenant
                                             JOIN unnest(p_types, p_rates) AS k(type, rate)
                                               ON k.type = r.type
                                            WHERE k.rate = l.name)::integer ORDER BY l.o)
                  INTO v_rooms
                  FROM unnest(v_names, v_rooms) WITH ORDINALITY AS l(name, room, o);
            END IF;
        END IF;
        v_more := v_n > v_width; -- tenants were left out of this round's window
        v_left := v_left - v_got;
        v_done := v_done || d.done;
        EXIT WHEN v_left <= 0;
        -- Tenants of the window that had no more to give (their due runs
        -- are of closed types, or were taken) leave the next rounds' window
        -- to the tenants left out, and the window doubles: eight rounds
        -- look at up to 255 times the room left.
        IF v_more AND d.done IS NOT NULL THEN
            v_width := least(v_width * 2, 1000000);
            CONTINUE;
        END IF;
        EXIT WHEN (v_got = 0 AND d.h_ids IS NULL)
               OR (d.h_ids IS NULL AND d.skipped = 0 AND NOT d.filled);
    END LOOP;
END
$$;

