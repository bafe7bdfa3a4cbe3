-- 025_workflow_speed: four functions of migration 024 again, faster, with
-- what they do unchanged.
--
-- opsrun_wf_create reads the runs a step's data names one by one by primary
-- key: its join of unnest(refs) with runs was planned, for every step, as a
-- scan of the whole runs table (0.7 ms a step among 10,000 runs, growing
-- with the table), even for a step whose data names none. The other joins
-- of runs with keys taken from jsonb (the steps that ended, those a cancel
-- stops, a retry's reused steps, the run object's member) read each run by
-- its primary key too, so that no plan can scan runs whole.
-- opsrun_wf_advance decides each pending step by counting its needs' states
-- in PL/pgSQL: the query of opsrun_wf_decide, run once per pending step and
-- pass, cost more than the rest of the pass (measured with
-- pg_stat_statements on 1,000 five-step workflows: 1.5 of 11 s).
-- opsrun_wf_stop returns at once for a workflow with no active step (every
-- workflow that ends by its own advance): its search of the steps' runs
-- cost 2 ms a workflow. opsrun_follow_ups rings opsrun_queue when it makes
-- a follow-up due now, as opsrun_wf_create does for a step: a follow-up
-- waited for the next poll of the queue (queue.poll_interval_ms) on a
-- quiet service, so a chain of 50 took about 50 s. opsrun_wf_decide, no
-- longer called, goes.

DROP FUNCTION opsrun_wf_decide(text, text[]);

CREATE OR REPLACE FUNCTION opsrun_wf_create(w runs, p_name text, p_type text, p_data jsonb, p_refs text[],
                                 p_steps jsonb, OUT state jsonb, OUT message text)
LANGUAGE plpgsql AS $$
DECLARE
    c run_type_rules;
    x record;
    r runs;
    v_id text := w.id || '.' || p_name;
    v_doc jsonb;
    v_steps jsonb;
    v_ref text;
    v_json jsonb;
    v_code text;
    v_msg text;
    v_event bigint;
    v_status text;
    v_expires timestamptz;
BEGIN
    IF length(v_id) > 128 THEN
        state := '{"state": "failed"}';
        message := format('step %s not created: its id would be longer than 128 characters',
                          p_name);
        RETURN;
    END IF;
    SELECT * INTO c FROM run_type_rules WHERE type = p_type;
    IF NOT FOUND THEN
        v_code := 'unknown_type';
        v_msg := format('run type "%s" is not configured', p_type);
    ELSIF w.chain_depth >= c.max_chain_depth THEN
        v_code := 'max_chain_depth';
        v_msg := format('the workflow is %s runs down its chain, the most queue.max_chain_depth '
                        '(%s) allows', w.chain_depth, c.max_chain_depth);
    ELSE
        -- The runs the data names, each by its primary key: a join of
        -- unnest(p_refs) with runs was planned, once for every call, as a
        -- scan of runs (0.7 ms a step with 10,000 runs, growing with them).
        v_steps := '{}';
        FOREACH v_ref IN ARRAY coalesce(p_refs, '{}') LOOP
            SELECT opsrun_run_json(s)::jsonb INTO v_json FROM runs s
             WHERE s.tenant = w.tenant AND s.id = p_steps -> v_ref ->> 'run_id';
            IF v_json IS NOT NULL THEN
                v_steps := v_steps || jsonb_build_object(v_ref, v_json);
            END IF;
        END LOOP;
        v_doc := jsonb_build_object('input', w.input, 'steps', v_steps);
        x := opsrun_expand(opsrun_wf_template(coalesce(p_data, '{}')), v_doc);
        IF x.missing IS NOT NULL THEN
            v_code := 'invalid_step_data';
            v_msg := format('its data names %s, which is not there',
                            opsrun_wf_placeholder(x.missing));
        ELSIF octet_length(x.v::text) > 1048576 THEN
            v_code := 'invalid_step_data';
            v_msg := format('its data comes to %s bytes, more than 1 MiB',
                            octet_length(x.v::text));
        END IF;
    END IF;
    IF v_code IS NULL THEN
        v_status := CASE WHEN c.approval_timeout_s IS NOT NULL OR c.workflow IS NOT NULL
                         THEN 'waiting' ELSE 'queued' END;
        v_expires := greatest(now(), w.run_at) + make_interval(secs => c.approval_timeout_s);
    ELSE
        v_status := 'completed';
    END IF;
    INSERT INTO run_events (tenant, run_id, type, status, outcome, progress, step, message,
                            run_created_at)
    VALUES (w.tenant, v_id, 'status', v_status,
            CASE WHEN v_code IS NULL THEN 'pending' ELSE 'failed' END, 0, NULL,
            CASE WHEN v_code IS NOT NULL
                 THEN format('submitted as step %s of %s; failed: %s', p_name, w.id, v_msg)
                 WHEN c.approval_timeout_s IS NOT NULL
                 THEN format('submitted as step %s of %s; awaiting approval until %s', p_name,
                             w.id, opsrun_ts(v_expires))
                 ELSE format('submitted as step %s of %s', p_name, w.id) END,
            now())
    RETURNING id INTO v_event;
    IF v_code IS NULL THEN
        INSERT INTO runs (tenant, id, type, priority, run_at, max_attempts, timeout_s, input,
                          identity_hash, request_hash, initiator, parent_id, step_name,
                          chain_depth, reacts, status, approval_state, approval_expires_at,
                          approval_on_timeout)
        VALUES (w.tenant, v_id, p_type, w.priority, greatest(w.run_at, now()), c.max_attempts,
                c.timeout_s, x.v, opsrun_identity(w.tenant, p_type, 'run_id', v_id),
                opsrun_identity(w.tenant, w.id, 'step', p_name), w.initiator, w.id, p_name,
                w.chain_depth + 1, c.reacts,
                CASE WHEN c.approval_timeout_s IS NULL THEN 'queued' ELSE 'waiting' END,
                CASE WHEN c.approval_timeout_s IS NOT NULL THEN 'pending' END,
                v_expires,
                CASE WHEN c.approval_timeout_s IS NOT NULL THEN c.approval_on_timeout END)
        ON CONFLICT DO NOTHING
        RETURNING * INTO r;
    ELSE
        INSERT INTO runs (tenant, id, type, priority, run_at, max_attempts, timeout_s, input,
                          identity_hash, request_hash, initiator, parent_id, step_name,
                          chain_depth, reacts, status, outcome, completed_at, error)
        VALUES (w.tenant, v_id, p_type, w.priority, now(), coalesce(c.max_attempts, 1),
                coalesce(c.timeout_s, 60),
                CASE WHEN v_code = 'invalid_step_data' THEN '{}' ELSE coalesce(p_data, '{}') END,
                opsrun_identity(w.tenant, p_type, 'run_id', v_id),
                opsrun_identity(w.tenant, w.id, 'step', p_name), w.initiator, w.id, p_name,
                w.chain_depth + 1, coalesce(c.reacts, 0), 'completed', 'failed', now(),
                jsonb_build_object('code', v_code, 'message', 'step ' || p_name || ' of ' || w.id
                                                              || ' failed: ' || v_msg))
        ON CONFLICT DO NOTHING
        RETURNING * INTO r;
    END IF;
    IF NOT FOUND THEN
        DELETE FROM run_events WHERE id = v_event;
        state := '{"state": "failed"}';
        message := format('step %s not created: a run with id %s exists', p_name, v_id);
        RETURN;
    END IF;
    IF v_code IS NOT NULL THEN
        -- What the end of a failed run owes, as runs_react would.
        IF r.reacts & opsrun_event_bit('failed') <> 0 THEN
            PERFORM opsrun_notify(r, 'failed', c.notify);
            IF c.follow_ups <> '[]' THEN
                PERFORM opsrun_follow_ups(r, c);
            END IF;
        END IF;
        message := format('step %s failed: %s', p_name, v_msg);
    ELSIF c.workflow IS NOT NULL OR c.conc_group IS NOT NULL THEN
        -- Its insert may have ended it (a nested workflow whose steps all
        -- failed, a concurrency key that could not be made): the row says
        -- so, the insert's RETURNING does not.
        SELECT * INTO r FROM runs s WHERE s.tenant = w.tenant AND s.id = v_id;
    END IF;
    IF r.status = 'queued' THEN
        PERFORM pg_notify('opsrun_queue', '');
    END IF;
    state := jsonb_build_object('state', CASE WHEN r.status = 'completed' THEN r.outcome
                                              ELSE 'active' END, 'run_id', v_id);
END
$$;

CREATE OR REPLACE FUNCTION opsrun_wf_advance(w runs) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    st jsonb := w.wf_steps;
    d record;
    x record;
    v_dec text;
    v_need text;
    v_state text;
    v_n integer;
    v_done integer;
    v_ended text[] := '{}';
    v_started text[] := '{}';
    v_skipped text[] := '{}';
    v_notes text[] := '{}';
    v_reused text;
    v_total integer;
    v_open integer;
    v_closed integer;
    v_ok integer;
    v_counts jsonb;
    v_outcome text;
    v_msg text;
    v_guard text := current_setting('opsrun.wf_advancing', true);
    v_first boolean := w.started_at IS NULL;
BEGIN
    IF w.status <> 'waiting' OR w.wf_def IS NULL THEN
        RETURN;
    END IF;
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'opsrun_wf_advance needs the read committed isolation level';
    END IF;
    -- A step's end within this advance (a step that supersedes a sibling
    -- through its concurrency key) finds the workflow in this list and
    -- leaves a marker rather than advancing it again from within.
    PERFORM set_config('opsrun.wf_advancing',
                       coalesce(v_guard, '') || chr(30) || w.tenant || chr(31) || w.id || chr(30), true);
    -- 0. At the first advance of a retry, the steps it reused.
    IF v_first AND w.retry_of IS NOT NULL THEN
        SELECT string_agg(k.key || ' (' || (k.value ->> 'run_id') || ')', ', ' ORDER BY k.key)
          INTO v_reused
          FROM jsonb_each(st) AS k WHERE k.value ->> 'state' = 'succeeded';
    END IF;
    -- 1. The active steps that ended since.
    SELECT c.st, c.ended INTO st, v_ended FROM opsrun_wf_collect(w.tenant, st) AS c;
    -- 2. The pending steps, in definition order.
    FOR d IN SELECT e.name, e.run_type, e.needs, e."when", e.data, e.refs
               FROM ROWS FROM (jsonb_to_recordset(w.wf_def)
                                AS (name text, run_type text, needs text[], "when" text,
                                    data jsonb, refs text[]))
                    WITH ORDINALITY AS e(name, run_type, needs, "when", data, refs, o)
              ORDER BY e.o LOOP
        CONTINUE WHEN st -> d.name ->> 'state' IS DISTINCT FROM 'pending';
        -- opsrun_wf_decide, counted here: a query per step cost more
        -- than the rest of the pass.
        v_n := 0;
        v_ok := 0;
        v_done := 0;
        FOREACH v_need IN ARRAY coalesce(d.needs, '{}') LOOP
            v_state := st -> v_need ->> 'state';
            v_n := v_n + 1;
            IF v_state = 'succeeded' THEN
                v_ok := v_ok + 1;
            END IF;
            IF v_state NOT IN ('pending', 'active') THEN
                v_done := v_done + 1;
            END IF;
        END LOOP;
        v_dec := CASE WHEN d."when" = 'succeeded' THEN
                          CASE WHEN v_ok = v_n THEN 'start' WHEN v_done > v_ok THEN 'skip'
                               ELSE 'wait' END
                      WHEN v_done < v_n THEN 'wait'
                      WHEN d."when" = 'always' OR v_ok < v_n THEN 'start'
                      ELSE 'skip' END;
        IF v_dec = 'start' THEN
            x := opsrun_wf_create(w, d.name, d.run_type, d.data, d.refs, st);
            st := jsonb_set(st, ARRAY[d.name], x.state);
            IF x.state ->> 'state' = 'active' THEN
                v_started := v_started || d.name;
            ELSE
                v_ended := v_ended || (d.name || ' ' || (x.state ->> 'state'));
            END IF;
            IF x.message IS NOT NULL THEN
                v_notes := v_notes || x.message;
            END IF;
        ELSIF v_dec = 'skip' THEN
            st := jsonb_set(st, ARRAY[d.name], '{"state": "skipped"}');
            v_skipped := v_skipped || d.name;
        END IF;
    END LOOP;
    PERFORM set_config('opsrun.wf_advancing', coalesce(v_guard, ''), true);
    IF cardinality(v_ended) + cardinality(v_started) + cardinality(v_skipped) = 0 THEN
        RETURN;
    END IF;
    -- 3. The row, and one event.
    SELECT count(*), count(*) FILTER (WHERE s.value ->> 'state' IN ('pending', 'active')),
           count(*) FILTER (WHERE s.value ->> 'state' = 'succeeded'),
           count(*) FILTER (WHERE s.value ->> 'state' NOT IN ('pending', 'active', 'skipped'))
      INTO v_total, v_open, v_ok, v_closed
      FROM jsonb_each(st) AS s;
    v_msg := array_to_string(ARRAY[
        CASE WHEN v_reused IS NOT NULL THEN 'reused ' || v_reused END,
        CASE WHEN cardinality(v_ended) > 0 THEN array_to_string(v_ended, ', ') END,
        CASE WHEN cardinality(v_started) > 0 THEN 'started ' || array_to_string(v_started, ', ') END,
        CASE WHEN cardinality(v_skipped) > 0 THEN 'skipped ' || array_to_string(v_skipped, ', ') END]
        || v_notes, '; ');
    IF v_open > 0 THEN
        UPDATE runs r
           SET wf_steps = st, progress = ((v_total - v_open) * 100 / v_total)::smallint,
               step = format('%s of %s steps ended', v_total - v_open, v_total),
               started_at = coalesce(r.started_at, now()), updated_at = now()
         WHERE r.tenant = w.tenant AND r.id = w.id
        RETURNING r.* INTO w;
        PERFORM opsrun_wf_event(w, v_msg);
        IF v_first AND cardinality(v_started) > 0 THEN
            PERFORM opsrun_notify_event(w, 'started');
        END IF;
        RETURN;
    END IF;
    v_counts := opsrun_wf_counts(st);
    v_outcome := CASE WHEN v_ok = v_closed THEN 'succeeded' WHEN v_ok = 0 THEN 'failed'
                      ELSE 'partially_succeeded' END;
    -- The last step event, still waiting; then the end, an update of status
    -- like any other (the type's notify and then rules, and the parent of a
    -- nested workflow, see it) with its event in the same statement, so
    -- that what the end sets off comes after it.
    w.progress := 100;
    w.step := format('%s of %s steps ended', v_total, v_total);
    PERFORM opsrun_wf_event(w, v_msg);
    WITH u AS (
        UPDATE runs r
           SET wf_steps = st, progress = 100, step = w.step, status = 'completed',
               outcome = v_outcome, completed_at = now(),
               started_at = coalesce(r.started_at, now()), summary_counts = v_counts,
               error = CASE WHEN v_outcome <> 'succeeded' THEN jsonb_build_object(
                   'code', 'steps_not_succeeded', 'message',
                   format('%s of %s steps that ran did not succeed', v_closed - v_ok, v_closed))
               END,
               updated_at = now()
         WHERE r.tenant = w.tenant AND r.id = w.id
        RETURNING r.*
    )
    INSERT INTO run_events (tenant, run_id, type, status, outcome, progress, step, message,
                            run_created_at)
    SELECT u.tenant, u.id, 'status', u.status, u.outcome, u.progress, u.step,
           format('%s: %s', replace(v_outcome, '_', ' '),
                  (SELECT string_agg(format('%s %s', c.value, c.key), ', ' ORDER BY c.key)
                     FROM jsonb_each_text(v_counts) AS c)),
           u.created_at
      FROM u;
END
$$;

CREATE OR REPLACE FUNCTION opsrun_wf_stop(w runs) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_guard text := current_setting('opsrun.wf_advancing', true);
    v_busy boolean;
    v_ids text[];
BEGIN
    -- Nothing active (a workflow that ended by its own advance): nothing to
    -- stop or settle.
    IF w.wf_steps IS NULL
       OR NOT EXISTS (SELECT 1 FROM jsonb_each(w.wf_steps) AS k
                       WHERE k.value ->> 'state' = 'active') THEN
        RETURN;
    END IF;
    PERFORM set_config('opsrun.wf_advancing',
                       coalesce(v_guard, '') || chr(30) || w.tenant || chr(31) || w.id || chr(30), true);
    v_ids := ARRAY(SELECT k.value ->> 'run_id' FROM jsonb_each(w.wf_steps) AS k
                    WHERE k.value ->> 'state' = 'active');
    WITH cur AS (
        SELECT r.tenant, r.id, r.status FROM runs r
         WHERE r.tenant = w.tenant AND r.id = ANY (v_ids)
           AND r.status IN ('queued', 'waiting', 'running')
         ORDER BY r.id FOR UPDATE OF r SKIP LOCKED
    ), upd AS (
        UPDATE runs r
           SET status = CASE WHEN cur.status = 'running' THEN 'cancelling' ELSE 'completed' END,
               outcome = CASE WHEN cur.status = 'running' THEN r.outcome ELSE 'cancelled' END,
               completed_at = CASE WHEN cur.status = 'running' THEN NULL ELSE now() END,
               hooks_at = CASE WHEN (cur.status = 'waiting'
                                     AND r.approval_state IS DISTINCT FROM 'pending'
                                     AND r.wf_def IS NULL)
                                 OR (cur.status = 'queued' AND r.cleanup_due)
                               THEN now() ELSE r.hooks_at END,
               hooks_attempts = CASE WHEN (cur.status = 'waiting'
                                           AND r.approval_state IS DISTINCT FROM 'pending'
                                           AND r.wf_def IS NULL)
                                       OR (cur.status = 'queued' AND r.cleanup_due)
                                     THEN 0 ELSE r.hooks_attempts END,
               next_poll_at = NULL,
               error = jsonb_build_object('code', 'workflow_cancelled', 'message',
                                          format('workflow %s ended %s', w.id, w.outcome)),
               updated_at = now()
          FROM cur
         WHERE r.tenant = cur.tenant AND r.id = cur.id
        RETURNING r.tenant, r.id, r.status, r.outcome, r.progress, r.step, r.created_at
    )
    INSERT INTO run_events (tenant, run_id, type, status, outcome, progress, step, message,
                            run_created_at)
    SELECT u.tenant, u.id, 'status', u.status, u.outcome, u.progress, u.step,
           CASE WHEN u.status = 'cancelling' THEN 'cancel requested: workflow ' || w.id
                                                  || ' ended ' || w.outcome
                ELSE 'cancelled: workflow ' || w.id || ' ended ' || w.outcome END,
           u.created_at
      FROM upd u;
    SELECT EXISTS (SELECT 1 FROM runs r
                    WHERE r.tenant = w.tenant AND r.id = ANY (v_ids)
                      AND r.status IN ('queued', 'waiting', 'running')) INTO v_busy;
    IF v_busy THEN
        INSERT INTO wf_due (tenant, workflow_id) VALUES (w.tenant, w.id);
    END IF;
    PERFORM opsrun_wf_settle(w);
    PERFORM set_config('opsrun.wf_advancing', coalesce(v_guard, ''), true);
END
$$;

CREATE OR REPLACE FUNCTION opsrun_follow_ups(r runs, t run_type_rules) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    f record;
    c run_type_rules;
    x record;
    v_doc jsonb;
    v_id text;
    v_at timestamptz;
    v_event bigint;
    v_status text;
    v_expires timestamptz;
BEGIN
    FOR f IN SELECT * FROM jsonb_to_recordset(t.follow_ups)
                        AS y(k integer, "on" jsonb, run_type text, delay_s integer, data jsonb)
              WHERE y."on" ? r.outcome OR y."on" ? '*' ORDER BY y.k LOOP
        v_id := r.id || '.' || f.k;
        IF r.chain_depth >= t.max_chain_depth THEN
            PERFORM opsrun_follow_up_event(r, format(
                'follow-up %s (%s) not created: this run is %s follow-ups down its chain, '
                'the most queue.max_chain_depth (%s) allows', f.k, f.run_type, r.chain_depth,
                t.max_chain_depth));
            CONTINUE;
        END IF;
        IF length(v_id) > 128 THEN
            PERFORM opsrun_follow_up_event(r, format(
                'follow-up %s (%s) not created: its id would be longer than 128 characters',
                f.k, f.run_type));
            CONTINUE;
        END IF;
        SELECT * INTO c FROM run_type_rules WHERE type = f.run_type;
        IF NOT FOUND THEN
            PERFORM opsrun_follow_up_event(r, format(
                'follow-up %s not created: run type "%s" is not configured', f.k, f.run_type));
            CONTINUE;
        END IF;
        v_doc := coalesce(v_doc, opsrun_run_json(r)::jsonb);
        x := opsrun_expand(coalesce(f.data, '{}'), v_doc);
        IF x.missing IS NOT NULL THEN
            PERFORM opsrun_follow_up_event(r, format(
                'follow-up %s (%s) not created: its data names {{run:%s}}, which this run '
                'does not have', f.k, f.run_type, x.missing));
            CONTINUE;
        END IF;
        v_at := coalesce(r.completed_at, now()) + make_interval(secs => coalesce(f.delay_s, 0));
        v_status := CASE WHEN c.approval_timeout_s IS NOT NULL OR c.workflow IS NOT NULL
                         THEN 'waiting' ELSE 'queued' END;
        v_expires := greatest(now(), v_at) + make_interval(secs => c.approval_timeout_s);
        INSERT INTO run_events (tenant, run_id, type, status, outcome, progress, step, message,
                                run_created_at)
        VALUES (r.tenant, v_id, 'status', v_status, 'pending', 0, NULL,
                format('submitted as follow-up %s of %s', f.k, r.id)
                || CASE WHEN c.approval_timeout_s IS NOT NULL
                        THEN '; awaiting approval until ' || opsrun_ts(v_expires) ELSE '' END,
                now())
        RETURNING id INTO v_event;
        INSERT INTO runs (tenant, id, type, priority, run_at, max_attempts, timeout_s, input,
                          identity_hash, request_hash, initiator, parent_id, chain_depth, reacts,
                          status, approval_state, approval_expires_at, approval_on_timeout)
        VALUES (r.tenant, v_id, f.run_type, r.priority, v_at, c.max_attempts, c.timeout_s, x.v,
                opsrun_identity(r.tenant, f.run_type, 'run_id', v_id),
                opsrun_identity(r.tenant, r.id, 'follow_up', f.k::text),
                r.initiator, r.id, r.chain_depth + 1, c.reacts,
                CASE WHEN c.approval_timeout_s IS NULL THEN 'queued' ELSE 'waiting' END,
                CASE WHEN c.approval_timeout_s IS NOT NULL THEN 'pending' END,
                v_expires,
                CASE WHEN c.approval_timeout_s IS NOT NULL THEN c.approval_on_timeout END)
        ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            DELETE FROM run_events WHERE id = v_event;
            PERFORM opsrun_follow_up_event(r, format(
                'follow-up %s (%s) not created: a run with id %s exists', f.k, f.run_type, v_id));
            CONTINUE;
        END IF;
        IF v_status = 'queued' AND coalesce(f.delay_s, 0) = 0 THEN
            PERFORM pg_notify('opsrun_queue', '');
        END IF;
        PERFORM opsrun_follow_up_event(r, format('follow-up %s (%s) created: %s%s', f.k,
            f.run_type, v_id, CASE WHEN coalesce(f.delay_s, 0) > 0
                                   THEN format(', due in %s s', f.delay_s) ELSE '' END));
    END LOOP;
END
$$;


-- The steps that ended, each run read by its primary key (migration 024
-- joined jsonb_each with runs, which a plan may scan whole).
CREATE OR REPLACE FUNCTION opsrun_wf_collect(p_tenant text, p_st jsonb, OUT st jsonb,
                                             OUT ended text[])
LANGUAGE plpgsql AS $$
DECLARE
    k record;
    v_status text;
    v_outcome text;
BEGIN
    st := p_st;
    ended := '{}';
    FOR k IN SELECT j.key AS name, j.value ->> 'run_id' AS run_id FROM jsonb_each(p_st) AS j
              WHERE j.value ->> 'state' = 'active' ORDER BY j.key LOOP
        v_status := NULL;
        SELECT r.status, r.outcome INTO v_status, v_outcome FROM runs r
         WHERE r.tenant = p_tenant AND r.id = k.run_id;
        IF v_status IS NULL OR v_status = 'completed' THEN
            v_outcome := CASE WHEN v_status IS NULL THEN 'failed' ELSE v_outcome END;
            st := jsonb_set(st, ARRAY[k.name, 'state'], to_jsonb(v_outcome));
            ended := ended || (k.name || ' ' || v_outcome);
        END IF;
    END LOOP;
END
$$;

-- A retry's reused steps, each earlier run read by its primary key.
CREATE OR REPLACE FUNCTION opsrun_wf_fill() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_def jsonb;
    v_old jsonb;
BEGIN
    SELECT t.workflow INTO v_def FROM run_type_rules t WHERE t.type = NEW.type;
    IF v_def IS NULL OR NEW.status = 'completed' THEN
        RETURN NEW;
    END IF;
    IF NEW.retry_of IS NOT NULL THEN
        SELECT o.wf_steps INTO v_old FROM runs o WHERE o.tenant = NEW.tenant AND o.id = NEW.retry_of;
    END IF;
    NEW.wf_def := v_def;
    NEW.wf_steps := (SELECT jsonb_object_agg(e ->> 'name',
                                             CASE WHEN s.id IS NULL THEN '{"state": "pending"}'
                                                  ELSE jsonb_build_object('state', 'succeeded',
                                                                          'run_id', s.id) END)
                       FROM jsonb_array_elements(v_def) AS e
                       LEFT JOIN LATERAL (
                           SELECT x.id FROM runs x
                            WHERE v_old IS NOT NULL AND x.tenant = NEW.tenant
                              AND x.id = v_old -> (e ->> 'name') ->> 'run_id'
                              AND x.type = e ->> 'run_type' AND x.status = 'completed'
                              AND x.outcome = 'succeeded') s ON true);
    IF NEW.status = 'queued' THEN
        NEW.status := 'waiting';
    END IF;
    RETURN NEW;
END
$$;

-- The member, each active step's run read by its primary key.
CREATE OR REPLACE FUNCTION opsrun_wf_json(r runs) RETURNS json
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT json_build_object('steps', json_object_agg(d.name, json_build_object(
               'state', CASE WHEN y.s ->> 'state' <> 'active' THEN y.s ->> 'state'
                             WHEN x.status = 'completed' THEN x.outcome
                             ELSE coalesce(x.status, 'failed') END,
               'run_id', y.s ->> 'run_id', 'run_type', d.run_type, 'needs', d.needs,
               'when', d."when") ORDER BY d.o))
      FROM ROWS FROM (jsonb_to_recordset(r.wf_def)
                      AS (name text, run_type text, needs jsonb, "when" text))
           WITH ORDINALITY AS d(name, run_type, needs, "when", o)
     CROSS JOIN LATERAL (SELECT r.wf_steps -> d.name AS s) y
      LEFT JOIN LATERAL (SELECT a.status, a.outcome FROM runs a
                          WHERE y.s ->> 'state' = 'active' AND a.tenant = r.tenant
                            AND a.id = y.s ->> 'run_id') x ON true
$$;
