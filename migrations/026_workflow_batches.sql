-- 026_workflow_batches: a statement that ends many steps advances their
-- workflows once, together, and the steps those advances make are inserted
-- by one statement.
--
-- Measured with pg_stat_statements on 1,000 five-step workflows (5,000
-- steps), migration 025: the completer's batches spent 2.6 of the 3.2 s
-- the workflows took in advancing them, 0.42 ms a step ended, and the
-- plain runs of the same count were done three times as fast. A step's end
-- locked and advanced its workflow from a row trigger, one at a time, and
-- each step the advance made was a single-row INSERT (0.19 ms: the
-- executor opens runs' 20 indexes and triggers for each), with one UPDATE
-- of the workflow's row and one INSERT of its event per advance, each paying
-- the same start-up.
--
-- Now a step's end (and a workflow's insert) notes its workflow in a
-- transaction-local setting (a BEFORE row trigger, with the WHEN of
-- runs_wf_step_end), and a statement-level trigger whose WHEN reads that
-- setting takes every workflow noted by the statement at its end
-- (opsrun_wf_poke_many): their rows locked by one SELECT ... FOR UPDATE
-- SKIP LOCKED (those another transaction holds get a marker, as before),
-- each one's decisions made in PL/pgSQL without a statement per step
-- (opsrun_wf_plan), then the steps of all of them inserted by one statement
-- and their submitted events by another, and the workflows' rows and step
-- events by one more (opsrun_wf_advance_many). A statement that notes
-- nothing pays two false WHENs: the row trigger's, as before, and the
-- statement trigger's, once.
--
-- What an advance decides and how the lock is taken are those of
-- migrations 024 and 025. Its events differ in two ways: the steps of one
-- workflow that ended in one statement are named by one step event, in
-- definition order (025 named those an advance found ended by name); and
-- what a step that ended as it was made starts (a taken id, a nested
-- workflow whose every step failed, a concurrency key that could not be
-- made) comes in a second step event of the same transaction, from a
-- second pass, where 025 decided it in the same pass (so a workflow whose
-- every first step ended as it was made sends no "started" notification
-- when a step its failure starts is made, as docs/workflows.md says; 025
-- sent one). A binary from before this migration keeps working beside one
-- after it: everything here is inside the database.

-- 1. Noting a workflow: chr(30) tenant chr(31) id chr(30), appended to
-- the setting opsrun.wf_poke_<depth> unless it is there, depth the
-- statement's trigger depth (pg_trigger_depth() outside the trigger's own
-- body): a statement that a trigger of another runs (a follow-up's insert
-- under a step's end, a sibling superseded by a concurrency key) takes
-- its own notes, not those of the statement still running around it.
-- The note is a string, and each append copies it: past 32 KB (some 700
-- workflows; a completer's batch ends at most 256 steps) a workflow gets
-- a wf_due marker instead, which the sweep takes within
-- queue.cancel_check_ms, so that a statement ending 40,000 steps of 8,000
-- workflows spends half a second here (measured), where appending every
-- note cost three and a half minutes. A statement inserts at most 1,000
-- workflows (an array, a batch of submissions or of a bulk retry): their
-- notes (runs_wf_fill) are appended as they come.
CREATE FUNCTION opsrun_wf_note() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_name text := 'opsrun.wf_poke_' || (pg_trigger_depth() - 1);
    v_notes text := coalesce(current_setting(v_name, true), '');
    v_key text := chr(30) || NEW.tenant || chr(31) || NEW.parent_id || chr(30);
BEGIN
    IF position(v_key IN v_notes) = 0 THEN
        IF octet_length(v_notes) < 32768 THEN
            PERFORM set_config(v_name, v_notes || v_key, true);
        ELSE
            INSERT INTO wf_due (tenant, workflow_id) VALUES (NEW.tenant, NEW.parent_id);
        END IF;
    END IF;
    RETURN NEW;
END
$$;

-- A step that ends notes its workflow (before the row is written: the
-- statement trigger's WHEN is evaluated once every row is, before the
-- AFTER row triggers run). A note for a row that is then not written (a
-- later BEFORE trigger skipping it) costs one advance that decides nothing.
DROP TRIGGER runs_wf_step_end ON runs;
DROP FUNCTION opsrun_wf_step_ended();
CREATE TRIGGER runs_wf_step_note BEFORE UPDATE OF status ON runs
    FOR EACH ROW WHEN (NEW.step_name IS NOT NULL AND NEW.status = 'completed'
                       AND OLD.status <> 'completed')
    EXECUTE FUNCTION opsrun_wf_note();

-- A workflow inserted to start now notes itself: runs_wf_fill, as in 025,
-- with the note at its end (it replaces the AFTER row trigger
-- runs_wf_started, which advanced each workflow of an array alone). A row
-- that ON CONFLICT DO NOTHING then skips leaves a note for the run already
-- there, which costs one advance that decides nothing.
CREATE OR REPLACE FUNCTION opsrun_wf_fill() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_def jsonb;
    v_old jsonb;
    v_name text;
BEGIN
    SELECT t.workflow INTO v_def FROM run_type_rules t WHERE t.type = NEW.type;
    IF v_def IS NULL OR NEW.status = 'completed' THEN
        RETURN NEW;
    END IF;
    IF NEW.retry_of IS NOT NULL THEN
        SELECT o.wf_steps INTO v_old FROM runs o
         WHERE o.tenant = NEW.tenant AND o.id = NEW.retry_of;
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
    IF NEW.status = 'waiting' AND NEW.approval_state IS DISTINCT FROM 'pending' THEN
        v_name := 'opsrun.wf_poke_' || (pg_trigger_depth() - 1);
        PERFORM set_config(v_name, coalesce(current_setting(v_name, true), '') || chr(30)
                                   || NEW.tenant || chr(31) || NEW.id || chr(30), true);
    END IF;
    RETURN NEW;
END
$$;
DROP TRIGGER runs_wf_started ON runs;

-- At the end of a statement that noted workflows: the note is emptied
-- first (the advance's own statements note what they end: a nested
-- workflow's parent, a nested workflow's first steps), then every
-- workflow it names advances.
CREATE FUNCTION opsrun_wf_poked() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_name text := 'opsrun.wf_poke_' || (pg_trigger_depth() - 1);
    v_keys text := current_setting(v_name, true);
BEGIN
    PERFORM set_config(v_name, '', true);
    PERFORM opsrun_wf_poke_many(v_keys);
    RETURN NULL;
END
$$;
CREATE TRIGGER runs_wf_poked_update AFTER UPDATE ON runs
    FOR EACH STATEMENT
    WHEN (current_setting('opsrun.wf_poke_' || pg_trigger_depth(), true) <> '')
    EXECUTE FUNCTION opsrun_wf_poked();
CREATE TRIGGER runs_wf_poked_insert AFTER INSERT ON runs
    FOR EACH STATEMENT
    WHEN (current_setting('opsrun.wf_poke_' || pg_trigger_depth(), true) <> '')
    EXECUTE FUNCTION opsrun_wf_poked();

-- 2. Locking. The rows of the workflows p_keys names (tenant chr(31) id)
-- that this transaction can lock now, each read by its primary key (a
-- join with runs can be planned as a scan of the table).
CREATE FUNCTION opsrun_wf_lock(p_keys text[]) RETURNS runs[]
LANGUAGE plpgsql AS $$
DECLARE
    ws runs[];
BEGIN
    SELECT array_agg(s.r ORDER BY (s.r).tenant, (s.r).id) INTO ws
      FROM (SELECT r FROM runs r
             WHERE r.id = ANY (ARRAY(SELECT split_part(k, chr(31), 2) FROM unnest(p_keys) AS k))
               AND r.tenant || chr(31) || r.id = ANY (p_keys)
             FOR UPDATE OF r SKIP LOCKED) s;
    RETURN coalesce(ws, '{}');
END
$$;

-- The workflows p_keys names (tenant chr(31) id; repeats allowed), as
-- opsrun_wf_poke did each: one this transaction is advancing or stopping
-- further up gets a marker (from within, the outer call's view of its
-- steps would go stale); of the others, those whose row it can lock now
-- are stopped (ended ones) or advanced together, and the rest get a marker,
-- which any replica's sweep takes once their row is free.
CREATE FUNCTION opsrun_wf_poke_many(p_keys text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_guard text := coalesce(current_setting('opsrun.wf_advancing', true), '');
    v_keys text[];
    v_mine text[];
    ws runs[];
BEGIN
    v_keys := ARRAY(SELECT DISTINCT k FROM unnest(string_to_array(p_keys, chr(30))) AS k
                     WHERE k <> '');
    IF cardinality(v_keys) = 0 THEN
        RETURN;
    END IF;
    IF v_guard <> '' THEN
        v_mine := ARRAY(SELECT k FROM unnest(v_keys) AS k
                         WHERE position(chr(30) || k || chr(30) IN v_guard) > 0);
        IF cardinality(v_mine) > 0 THEN
            INSERT INTO wf_due (tenant, workflow_id)
            SELECT r.tenant, r.id FROM runs r
             WHERE r.id = ANY (ARRAY(SELECT split_part(k, chr(31), 2) FROM unnest(v_mine) AS k))
               AND r.tenant || chr(31) || r.id = ANY (v_mine)
               AND r.status IS DISTINCT FROM 'completed';
            v_keys := ARRAY(SELECT k FROM unnest(v_keys) AS k WHERE k <> ALL (v_mine));
        END IF;
    END IF;
    ws := opsrun_wf_lock(v_keys);
    IF cardinality(ws) < cardinality(v_keys) THEN
        INSERT INTO wf_due (tenant, workflow_id)
        SELECT r.tenant, r.id FROM runs r
         WHERE r.id = ANY (ARRAY(SELECT split_part(k, chr(31), 2) FROM unnest(v_keys) AS k))
           AND r.tenant || chr(31) || r.id = ANY (v_keys)
           AND r.tenant || chr(31) || r.id
               <> ALL (ARRAY(SELECT x.tenant || chr(31) || x.id FROM unnest(ws) AS x));
    END IF;
    PERFORM opsrun_wf_take(ws);
END
$$;

-- Workflows ws, whose rows this transaction has locked: those that ended
-- are stopped, then the rest advance together, each as it is after the
-- stops (a stop cancels steps, and a step may be a workflow of ws: its copy
-- in ws would be stale).
CREATE FUNCTION opsrun_wf_take(ws runs[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    w runs;
    v_rest text[] := '{}';
    v_stopped boolean := false;
    v_adv runs[] := '{}';
BEGIN
    FOREACH w IN ARRAY ws LOOP
        IF w.status = 'completed' THEN
            PERFORM opsrun_wf_stop(w);
            v_stopped := true;
        ELSE
            v_rest := v_rest || (w.tenant || chr(31) || w.id);
            v_adv := v_adv || w;
        END IF;
    END LOOP;
    IF v_stopped AND cardinality(v_rest) > 0 THEN
        v_adv := ARRAY(SELECT x FROM unnest(opsrun_wf_lock(v_rest)) AS x
                        WHERE x.status = 'waiting');
    END IF;
    PERFORM opsrun_wf_advance_many(v_adv);
END
$$;

-- Its trigger gone, opsrun_wf_poke goes.
DROP FUNCTION opsrun_wf_poke(text, text);

-- 3. Deciding, without writing: workflow w's active steps that ended
-- since, in definition order (p_runs: {tenant chr(31) run id: the outcome,
-- or "active"} of the active steps' runs that exist; one that does not,
-- which retention took, failed), then, in definition order, each pending
-- step its needs decide (as migration 025 decided them). st: the new states,
-- each step to start "active" with its run_id; ended: "NAME OUTCOME, ...";
-- started and skipped: the names; notes: why a step failed at creation;
-- reused: the steps a retry reused, at its first advance. The steps to
-- start: c_names, c_types, c_inputs (their data, made). p_rules is
-- {run type: [its queue.max_chain_depth, its reacts]} of every configured
-- type; c_check: whether a step to start has a type whose insert may end
-- it at once. A step that cannot be made (its run type is not configured
-- any more, it would be deeper than that depth allows, its data cannot be
-- made or its id would be too long) is made failed, or not made, at once
-- by opsrun_wf_create, as before, and the pass goes on with its state.
CREATE FUNCTION opsrun_wf_plan(w runs, p_runs jsonb, p_rules jsonb, OUT st jsonb, OUT ended text,
                               OUT started text[], OUT skipped text[], OUT notes text[],
                               OUT reused text, OUT c_names text[], OUT c_types text[],
                               OUT c_inputs jsonb[], OUT c_check boolean)
LANGUAGE plpgsql AS $$
DECLARE
    -- Only simple expressions below (no query but the rare ones named):
    -- each query a PL/pgSQL function runs costs about 10 us, as much as
    -- the rest of a five-step workflow's pass.
    v_def jsonb := w.wf_def;
    v_n_steps integer := jsonb_array_length(w.wf_def);
    d jsonb;
    x record;
    i integer;
    k integer;
    v_name text;
    v_needs jsonb;
    v_refs jsonb;
    v_ended text[] := '{}';
    v_state text;
    v_n integer;
    v_ok integer;
    v_done integer;
    v_dec text;
    v_ref text;
    v_json jsonb;
    v_steps jsonb;
    v_input jsonb;
    v_text text;
BEGIN
    st := w.wf_steps;
    started := '{}';
    skipped := '{}';
    notes := '{}';
    c_names := '{}';
    c_types := '{}';
    c_inputs := '{}';
    c_check := false;
    IF w.started_at IS NULL AND w.retry_of IS NOT NULL THEN
        SELECT string_agg(e.key || ' (' || (e.value ->> 'run_id') || ')', ', ' ORDER BY e.key)
          INTO reused
          FROM jsonb_each(w.wf_steps) AS e WHERE e.value ->> 'state' = 'succeeded';
    END IF;
    -- The active steps that ended, in definition order.
    FOR i IN 0 .. v_n_steps - 1 LOOP
        v_name := v_def -> i ->> 'name';
        CONTINUE WHEN st -> v_name ->> 'state' IS DISTINCT FROM 'active';
        v_state := coalesce(p_runs ->> (w.tenant || chr(31) || (st -> v_name ->> 'run_id')),
                            'failed');
        IF v_state <> 'active' THEN
            st := jsonb_set(st, ARRAY[v_name, 'state'], to_jsonb(v_state));
            v_ended := v_ended || (v_name || ' ' || v_state);
        END IF;
    END LOOP;
    -- The pending steps, in definition order (each after its needs).
    FOR i IN 0 .. v_n_steps - 1 LOOP
        d := v_def -> i;
        v_name := d ->> 'name';
        CONTINUE WHEN st -> v_name ->> 'state' IS DISTINCT FROM 'pending';
        v_needs := coalesce(d -> 'needs', '[]');
        v_n := jsonb_array_length(v_needs);
        v_ok := 0;
        v_done := 0;
        FOR k IN 0 .. v_n - 1 LOOP
            v_state := st -> (v_needs ->> k) ->> 'state';
            IF v_state = 'succeeded' THEN
                v_ok := v_ok + 1;
            END IF;
            IF v_state NOT IN ('pending', 'active') THEN
                v_done := v_done + 1;
            END IF;
        END LOOP;
        v_dec := CASE WHEN d ->> 'when' = 'succeeded' THEN
                          CASE WHEN v_ok = v_n THEN 'start' WHEN v_done > v_ok THEN 'skip'
                               ELSE 'wait' END
                      WHEN v_done < v_n THEN 'wait'
                      WHEN d ->> 'when' = 'always' OR v_ok < v_n THEN 'start'
                      ELSE 'skip' END;
        IF v_dec = 'skip' THEN
            st := jsonb_set(st, ARRAY[v_name], '{"state": "skipped"}');
            skipped := skipped || v_name;
            CONTINUE;
        ELSIF v_dec <> 'start' THEN
            CONTINUE;
        END IF;
        -- Its data: the runs it names, each by its primary key (a query
        -- each, only for data that names a step).
        v_input := NULL;
        IF length(w.id || '.' || v_name) <= 128
           AND w.chain_depth < (p_rules -> (d ->> 'run_type') ->> 0)::integer THEN
            v_text := coalesce((d -> 'data')::text, '{}');
            IF position('{{' IN v_text) = 0 THEN
                -- No placeholder: the data as it is.
                IF octet_length(v_text) <= 1048576 THEN
                    v_input := coalesce(d -> 'data', '{}');
                END IF;
            ELSE
                v_steps := '{}';
                v_refs := coalesce(d -> 'refs', '[]');
                FOR k IN 0 .. jsonb_array_length(v_refs) - 1 LOOP
                    v_ref := v_refs ->> k;
                    SELECT opsrun_run_json(s)::jsonb INTO v_json FROM runs s
                     WHERE s.tenant = w.tenant AND s.id = st -> v_ref ->> 'run_id';
                    IF v_json IS NOT NULL THEN
                        v_steps := v_steps || jsonb_build_object(v_ref, v_json);
                    END IF;
                END LOOP;
                x := opsrun_expand(opsrun_wf_template(d -> 'data'),
                                   jsonb_build_object('input', w.input, 'steps', v_steps));
                IF x.missing IS NULL AND octet_length(x.v::text) <= 1048576 THEN
                    v_input := x.v;
                END IF;
            END IF;
        END IF;
        IF v_input IS NULL THEN
            -- It fails at creation: made (failed) or not made now, with the
            -- reason, as migration 025 made it.
            x := opsrun_wf_create(w, v_name, d ->> 'run_type', d -> 'data',
                                  ARRAY(SELECT jsonb_array_elements_text(d -> 'refs')), st);
            st := jsonb_set(st, ARRAY[v_name], x.state);
            v_ended := v_ended || (v_name || ' ' || (x.state ->> 'state'));
            IF x.message IS NOT NULL THEN
                notes := notes || x.message;
            END IF;
            CONTINUE;
        END IF;
        st := jsonb_set(st, ARRAY[v_name],
                        jsonb_build_object('state', 'active', 'run_id', w.id || '.' || v_name));
        started := started || v_name;
        c_names := c_names || v_name;
        c_types := c_types || (d ->> 'run_type');
        c_inputs := c_inputs || v_input;
        -- A concurrency key (256) or a workflow (512) may end it within its
        -- insert.
        c_check := c_check OR (p_rules -> (d ->> 'run_type') ->> 1)::integer & 768 <> 0;
    END LOOP;
    ended := array_to_string(v_ended, ', ');
END
$$;

-- opsrun_identity of four parts, as one expression: an SQL function whose
-- body is an expression is inlined into the statement that calls it,
-- where opsrun_identity, which aggregates over its parts, is a query of
-- its own for each call (4 us, twice for each step made).
CREATE FUNCTION opsrun_identity4(a text, b text, c text, d text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT encode(sha256(convert_to(a, 'UTF8') || '\x00'::bytea || convert_to(b, 'UTF8')
                         || '\x00'::bytea || convert_to(c, 'UTF8') || '\x00'::bytea
                         || convert_to(d, 'UTF8') || '\x00'::bytea), 'hex')
$$;

-- 4. Advancing workflows ws, whose rows the caller has locked (or
-- inserted, in this transaction), each at most once: what each decides
-- (opsrun_wf_plan), then the steps they start, inserted together (their
-- submitted events first: an insert's own triggers may end the run at
-- once, and their events must come after), then their rows, progress and
-- step events, and the end of each that has no step pending or active any
-- more (as migration 025 ended it: the last step event, then the update of
-- status with its event). A workflow whose step failed or ended at its
-- insert (a taken id, a run type no longer configured or a chain too deep,
-- a nested workflow or a concurrency key that ended it) advances once more
-- after, to decide what that step's end decides. Only under READ COMMITTED,
-- where each statement sees what the lock's previous holder committed.
CREATE FUNCTION opsrun_wf_advance_many(ws runs[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    w runs;
    p record;
    x record;
    y record;
    i integer;
    n integer := cardinality(ws);
    v_guard text := current_setting('opsrun.wf_advancing', true);
    v_mine text := '';
    v_st jsonb[] := '{}';
    v_ended text[] := '{}';
    v_started text[] := '{}';
    v_skipped text[] := '{}';
    v_notes text[] := '{}';
    v_reused text[] := '{}';
    v_again boolean[] := '{}';
    v_ci integer[] := '{}';
    v_cname text[] := '{}';
    v_ctype text[] := '{}';
    v_cinput jsonb[] := '{}';
    v_drop bigint[] := '{}';
    v_made text[];
    v_events bigint[];
    v_event_runs text[];
    v_queued boolean;
    v_bulk integer;
    v_data jsonb;
    v_refs text[];
    v_ut text[] := '{}';
    v_uid text[] := '{}';
    v_ust jsonb[] := '{}';
    v_umsg text[] := '{}';
    v_ucreated timestamptz[] := '{}';
    v_uout text[] := '{}';
    v_first text[] := '{}';
    v_redo text[] := '{}';
    v_bit integer;
    v_rules jsonb;
    v_runs jsonb;
    v_check boolean := false;
BEGIN
    IF n IS NULL OR n = 0 THEN
        RETURN;
    END IF;
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'opsrun_wf_advance needs the read committed isolation level';
    END IF;
    -- A step's end within this advance (a step that supersedes a sibling
    -- through its concurrency key) finds its workflow in this list and
    -- leaves a marker rather than advancing it again from within.
    FOR i IN 1 .. n LOOP
        v_mine := v_mine || chr(30) || (ws[i]).tenant || chr(31) || (ws[i]).id || chr(30);
    END LOOP;
    PERFORM set_config('opsrun.wf_advancing', coalesce(v_guard, '') || v_mine, true);
    SELECT jsonb_object_agg(t.type, jsonb_build_array(t.max_chain_depth, t.reacts))
      INTO v_rules FROM run_type_rules t;
    -- The active steps' runs, all read by one statement.
    SELECT jsonb_object_agg(r.tenant || chr(31) || r.id,
                            CASE WHEN r.status = 'completed' THEN r.outcome ELSE 'active' END)
      INTO v_runs
      FROM runs r
     WHERE r.id = ANY (ARRAY(SELECT s.value ->> 'run_id' FROM unnest(ws) AS wx,
                                    jsonb_each(wx.wf_steps) AS s
                              WHERE wx.status = 'waiting' AND s.value ->> 'state' = 'active'));
    -- 1. What each decides.
    FOR i IN 1 .. n LOOP
        w := ws[i];
        IF w.status <> 'waiting' OR w.wf_def IS NULL THEN
            v_st := v_st || NULL::jsonb;
            v_ended := v_ended || ''::text;
            v_started := v_started || ''::text;
            v_skipped := v_skipped || ''::text;
            v_notes := v_notes || ''::text;
            v_reused := v_reused || NULL::text;
            v_again := v_again || false;
            CONTINUE;
        END IF;
        p := opsrun_wf_plan(w, coalesce(v_runs, '{}'), coalesce(v_rules, '{}'));
        v_st := v_st || p.st;
        v_ended := v_ended || p.ended;
        v_started := v_started || array_to_string(p.started, ', ');
        v_skipped := v_skipped || array_to_string(p.skipped, ', ');
        v_notes := v_notes || array_to_string(p.notes, '; ');
        v_reused := v_reused || p.reused;
        v_again := v_again || false;
        IF cardinality(p.c_names) > 0 THEN
            v_ci := v_ci || array_fill(i, ARRAY[cardinality(p.c_names)]);
            v_cname := v_cname || p.c_names;
            v_ctype := v_ctype || p.c_types;
            v_cinput := v_cinput || p.c_inputs;
            v_check := v_check OR p.c_check;
        END IF;
    END LOOP;
    -- 2. The steps to start. One whose run type another transaction has
    -- just removed, or whose depth it has just lowered, is made failed
    -- alone, as migration 025 made it.
    IF cardinality(v_cname) > 0 THEN
        FOR x IN SELECT k.o, k.i, k.name, k.type
                   FROM unnest(v_ci, v_cname, v_ctype) WITH ORDINALITY AS k(i, name, type, o)
                   LEFT JOIN run_type_rules c ON c.type = k.type
                  WHERE c.type IS NULL OR (ws[k.i]).chain_depth >= c.max_chain_depth
                  ORDER BY k.o LOOP
            SELECT e.data, e.refs INTO v_data, v_refs
              FROM jsonb_to_recordset((ws[x.i]).wf_def) AS e(name text, data jsonb, refs text[])
             WHERE e.name = x.name;
            y := opsrun_wf_create(ws[x.i], x.name, x.type, v_data, v_refs, v_st[x.i]);
            i := x.i;
            v_st[i] := jsonb_set(v_st[i], ARRAY[x.name], y.state);
            v_started[i] := array_to_string(array_remove(string_to_array(v_started[i], ', '),
                                                         x.name), ', ');
            v_ended[i] := concat_ws(', ', nullif(v_ended[i], ''),
                                    x.name || ' ' || (y.state ->> 'state'));
            IF y.message IS NOT NULL THEN
                v_notes[i] := concat_ws('; ', nullif(v_notes[i], ''), y.message);
            END IF;
            v_again[i] := true;
            v_drop := v_drop || x.o;
        END LOOP;
        v_bulk := cardinality(v_cname) - cardinality(v_drop);
    ELSE
        v_bulk := 0;
    END IF;
    IF v_bulk > 0 THEN
        WITH ev AS (
            INSERT INTO run_events (tenant, run_id, type, status, outcome, progress, step, message,
                                    run_created_at)
            SELECT wr.tenant, wr.id || '.' || k.name, 'status',
                   CASE WHEN c.approval_timeout_s IS NOT NULL OR c.workflow IS NOT NULL
                        THEN 'waiting' ELSE 'queued' END,
                   'pending', 0, NULL,
                   CASE WHEN c.approval_timeout_s IS NOT NULL
                        THEN format('submitted as step %s of %s; awaiting approval until %s',
                                    k.name, wr.id,
                                    opsrun_ts(greatest(now(), wr.run_at)
                                              + make_interval(secs => c.approval_timeout_s)))
                        ELSE format('submitted as step %s of %s', k.name, wr.id) END,
                   now()
              FROM unnest(v_ci, v_cname, v_ctype) WITH ORDINALITY AS k(i, name, type, o)
              JOIN unnest(ws) WITH ORDINALITY AS wr ON wr.ordinality = k.i
              JOIN run_type_rules c ON c.type = k.type
             WHERE k.o <> ALL (v_drop)
             ORDER BY k.o
            RETURNING id, tenant || chr(31) || run_id AS k
        )
        SELECT array_agg(ev.id), array_agg(ev.k) INTO v_events, v_event_runs FROM ev;
        WITH ins AS (
            INSERT INTO runs (tenant, id, type, priority, run_at, max_attempts, timeout_s, input,
                              identity_hash, request_hash, initiator, parent_id, step_name,
                              chain_depth, reacts, status, approval_state, approval_expires_at,
                              approval_on_timeout)
            SELECT wr.tenant, wr.id || '.' || k.name, k.type, wr.priority,
                   greatest(wr.run_at, now()),
                   c.max_attempts, c.timeout_s, k.input,
                   opsrun_identity4(wr.tenant, k.type, 'run_id', wr.id || '.' || k.name),
                   opsrun_identity4(wr.tenant, wr.id, 'step', k.name), wr.initiator, wr.id, k.name,
                   wr.chain_depth + 1, c.reacts,
                   CASE WHEN c.approval_timeout_s IS NULL THEN 'queued' ELSE 'waiting' END,
                   CASE WHEN c.approval_timeout_s IS NOT NULL THEN 'pending' END,
                   greatest(now(), wr.run_at) + make_interval(secs => c.approval_timeout_s),
                   CASE WHEN c.approval_timeout_s IS NOT NULL THEN c.approval_on_timeout END
              FROM unnest(v_ci, v_cname, v_ctype, v_cinput) WITH ORDINALITY
                       AS k(i, name, type, input, o)
              JOIN unnest(ws) WITH ORDINALITY AS wr ON wr.ordinality = k.i
              JOIN run_type_rules c ON c.type = k.type
             WHERE k.o <> ALL (v_drop)
             ORDER BY k.o
            ON CONFLICT DO NOTHING
            RETURNING tenant || chr(31) || id AS k, status
        )
        SELECT coalesce(array_agg(ins.k), '{}'), coalesce(bool_or(ins.status = 'queued'), false)
          INTO v_made, v_queued FROM ins;
        IF v_queued THEN
            PERFORM pg_notify('opsrun_queue', '');
        END IF;
        -- A step whose id is taken (in its workflow's tenant: ids repeat
        -- across tenants): no run, its event taken back.
        IF cardinality(v_made) < v_bulk THEN
            FOR x IN SELECT k.i, k.name, (ws[k.i]).id || '.' || k.name AS id,
                            (ws[k.i]).tenant || chr(31) || (ws[k.i]).id || '.' || k.name AS key
                       FROM unnest(v_ci, v_cname) WITH ORDINALITY AS k(i, name, o)
                      WHERE k.o <> ALL (v_drop)
                        AND (ws[k.i]).tenant || chr(31) || (ws[k.i]).id || '.' || k.name
                            <> ALL (v_made)
                      ORDER BY k.o LOOP
                DELETE FROM run_events
                 WHERE id = v_events[array_position(v_event_runs, x.key)];
                i := x.i;
                v_st[i] := jsonb_set(v_st[i], ARRAY[x.name], '{"state": "failed"}');
                v_started[i] := array_to_string(array_remove(string_to_array(v_started[i], ', '),
                                                             x.name), ', ');
                v_ended[i] := concat_ws(', ', nullif(v_ended[i], ''), x.name || ' failed');
                v_notes[i] := concat_ws('; ', nullif(v_notes[i], ''),
                                        format('step %s not created: a run with id %s exists',
                                               x.name, x.id));
                v_again[i] := true;
            END LOOP;
        END IF;
        -- A step its insert ended at once (a nested workflow, a concurrency
        -- key): it ended, not started, as this advance's event says, and
        -- its workflow decides what that starts in a second pass.
        IF v_check THEN
            FOR x IN SELECT k.i, k.name, r.outcome
                       FROM unnest(v_ci, v_cname, v_ctype) WITH ORDINALITY AS k(i, name, type, o)
                       JOIN runs r ON r.id = (ws[k.i]).id || '.' || k.name
                                  AND r.tenant IS NOT DISTINCT FROM (ws[k.i]).tenant
                      WHERE k.o <> ALL (v_drop) AND (v_rules -> k.type ->> 1)::integer & 768 <> 0
                        AND r.status IS NOT DISTINCT FROM 'completed'
                        AND r.tenant || chr(31) || r.id = ANY (v_made)
                      ORDER BY k.o LOOP
                i := x.i;
                v_st[i] := jsonb_set(v_st[i], ARRAY[x.name, 'state'], to_jsonb(x.outcome));
                v_started[i] := array_to_string(array_remove(string_to_array(v_started[i], ', '),
                                                             x.name), ', ');
                v_ended[i] := concat_ws(', ', nullif(v_ended[i], ''), x.name || ' ' || x.outcome);
                v_again[i] := true;
            END LOOP;
        END IF;
    END IF;
    PERFORM set_config('opsrun.wf_advancing', coalesce(v_guard, ''), true);
    -- 3. The rows, and one step event each; the end of those with no step
    -- pending or active (every row of ws is waiting and current: the
    -- callers stop the ended ones and read the rest again, and nothing in
    -- this advance ends a workflow of ws). Each joins runs on id with the
    -- tenant compared by IS NOT DISTINCT FROM (tenant is never NULL), so
    -- that the only index the join can use is the primary key, (id,
    -- tenant): with tenant = , a table whose statistics are young had the
    -- join read runs_list, which leads with tenant, and scan the tenant's
    -- every run for each row; a condition on status had it read a partial
    -- index on status the same way (five times slower for 1,000
    -- workflows). Status is compared by IS [NOT] DISTINCT FROM wherever a
    -- statement here joins runs, which no partial index's predicate
    -- follows from.
    FOR i IN 1 .. n LOOP
        CONTINUE WHEN v_st[i] IS NULL
                      OR (v_ended[i] = '' AND v_started[i] = '' AND v_skipped[i] = '');
        v_ut := v_ut || (ws[i]).tenant;
        v_uid := v_uid || (ws[i]).id;
        v_ust := v_ust || v_st[i];
        v_ucreated := v_ucreated || (ws[i]).created_at;
        v_uout := v_uout || (ws[i]).outcome;
        v_umsg := v_umsg || array_to_string(ARRAY[
            'reused ' || v_reused[i], nullif(v_ended[i], ''),
            'started ' || nullif(v_started[i], ''),
            'skipped ' || nullif(v_skipped[i], ''), nullif(v_notes[i], '')], '; ');
        IF (ws[i]).started_at IS NULL AND v_started[i] <> '' THEN
            v_first := v_first || ((ws[i]).tenant || chr(31) || (ws[i]).id);
        END IF;
        IF v_again[i] THEN
            v_redo := v_redo || ((ws[i]).tenant || chr(31) || (ws[i]).id);
        END IF;
    END LOOP;
    IF cardinality(v_uid) = 0 THEN
        RETURN;
    END IF;
    WITH xs AS (
        SELECT k.tenant, k.id, k.st, k.msg, k.created_at, k.outcome, t.total, t.open
          FROM unnest(v_ut, v_uid, v_ust, v_umsg, v_ucreated, v_uout)
                   AS k(tenant, id, st, msg, created_at, outcome)
         CROSS JOIN LATERAL (
             SELECT count(*) AS total,
                    count(*) FILTER (WHERE s.value ->> 'state' IN ('pending', 'active')) AS open
               FROM jsonb_each(k.st) AS s) t
    ), u AS (
        UPDATE runs r
           SET wf_steps = xs.st, progress = ((xs.total - xs.open) * 100 / xs.total)::smallint,
               step = format('%s of %s steps ended', xs.total - xs.open, xs.total),
               started_at = coalesce(r.started_at, now()), updated_at = now()
          FROM xs
         WHERE r.id = xs.id AND r.tenant IS NOT DISTINCT FROM xs.tenant AND xs.open > 0
        RETURNING r.tenant, r.id, r.status, r.outcome, r.progress, r.step, r.created_at, xs.msg
    )
    INSERT INTO run_events (tenant, run_id, type, status, outcome, progress, step, message,
                            run_created_at)
    SELECT u.tenant, u.id, 'step', u.status, u.outcome, u.progress, u.step, u.msg, u.created_at
      FROM u
     UNION ALL
    -- The last step event of a workflow that ends: still waiting.
    SELECT xs.tenant, xs.id, 'step', 'waiting', xs.outcome, 100,
           format('%s of %s steps ended', xs.total, xs.total), xs.msg, xs.created_at
      FROM xs WHERE xs.open = 0;
    -- The ends: an update of status like any other (the type's notify and
    -- then rules, and the parent of a nested workflow, see it) with its
    -- event in the same statement, so that what the end sets off comes
    -- after it.
    WITH xs AS (
        SELECT k.tenant, k.id, k.st, t.total, t.ok, t.closed, opsrun_wf_counts(k.st) AS counts,
               CASE WHEN t.ok = t.closed THEN 'succeeded' WHEN t.ok = 0 THEN 'failed'
                    ELSE 'partially_succeeded' END AS outcome
          FROM unnest(v_ut, v_uid, v_ust) AS k(tenant, id, st)
         CROSS JOIN LATERAL (
             SELECT count(*) AS total,
                    count(*) FILTER (WHERE s.value ->> 'state' IN ('pending', 'active')) AS open,
                    count(*) FILTER (WHERE s.value ->> 'state' = 'succeeded') AS ok,
                    count(*) FILTER (WHERE s.value ->> 'state'
                                           NOT IN ('pending', 'active', 'skipped')) AS closed
               FROM jsonb_each(k.st) AS s) t
         WHERE t.open = 0
    ), u AS (
        UPDATE runs r
           SET wf_steps = xs.st, progress = 100,
               step = format('%s of %s steps ended', xs.total, xs.total), status = 'completed',
               outcome = xs.outcome, completed_at = now(),
               started_at = coalesce(r.started_at, now()), summary_counts = xs.counts,
               hooks_at = NULL,
               error = CASE WHEN xs.outcome <> 'succeeded' THEN jsonb_build_object(
                   'code', 'steps_not_succeeded', 'message',
                   format('%s of %s steps that ran did not succeed', xs.closed - xs.ok, xs.closed))
               END,
               updated_at = now()
          FROM xs
         WHERE r.id = xs.id AND r.tenant IS NOT DISTINCT FROM xs.tenant
        RETURNING r.tenant, r.id, r.status, r.outcome, r.progress, r.step, r.summary_counts,
                  r.created_at
    )
    INSERT INTO run_events (tenant, run_id, type, status, outcome, progress, step, message,
                            run_created_at)
    SELECT u.tenant, u.id, 'status', u.status, u.outcome, u.progress, u.step,
           format('%s: %s', replace(u.outcome, '_', ' '),
                  (SELECT string_agg(format('%s %s', c.value, c.key), ', ' ORDER BY c.key)
                     FROM jsonb_each_text(u.summary_counts) AS c)),
           u.created_at
      FROM u;
    -- A workflow's first steps: its type's "started" notification.
    IF cardinality(v_first) > 0 THEN
        v_bit := opsrun_event_bit('started');
        FOR w IN SELECT r.* FROM runs r
                  WHERE r.id = ANY (ARRAY(SELECT split_part(k, chr(31), 2)
                                            FROM unnest(v_first) AS k))
                    AND r.tenant || chr(31) || r.id = ANY (v_first) AND r.reacts & v_bit <> 0
                  ORDER BY r.tenant, r.id LOOP
            PERFORM opsrun_notify_event(w, 'started');
        END LOOP;
    END IF;
    -- The second pass.
    IF cardinality(v_redo) > 0 THEN
        PERFORM opsrun_wf_advance_many(opsrun_wf_lock(v_redo));
    END IF;
END
$$;

-- Kept for the triggers and callers of migration 024: one workflow.
CREATE OR REPLACE FUNCTION opsrun_wf_advance(w runs) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM opsrun_wf_advance_many(ARRAY[w]);
END
$$;

-- 5. The sweep: up to p_limit workflows with markers, those whose row it
-- can lock now (their markers deleted, then stopped or advanced together);
-- the others keep theirs, and the markers of workflows that are gone go.
-- Returns how many it took (the caller rings the doorbells: it may have
-- made runs and events).
CREATE OR REPLACE FUNCTION opsrun_wf_sweep(p_limit integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_keys text[];
    ws runs[];
BEGIN
    v_keys := ARRAY(SELECT DISTINCT d.tenant || chr(31) || d.workflow_id FROM wf_due d
                     LIMIT p_limit);
    IF cardinality(v_keys) = 0 THEN
        RETURN 0;
    END IF;
    ws := opsrun_wf_lock(v_keys);
    DELETE FROM wf_due d
     WHERE d.tenant || chr(31) || d.workflow_id = ANY (v_keys)
       AND (d.tenant || chr(31) || d.workflow_id
                = ANY (ARRAY(SELECT x.tenant || chr(31) || x.id FROM unnest(ws) AS x))
            OR NOT EXISTS (SELECT 1 FROM runs r
                            WHERE r.tenant = d.tenant AND r.id = d.workflow_id));
    PERFORM opsrun_wf_take(ws);
    RETURN cardinality(ws);
END
$$;

-- 6. An end made by the advance passes two triggers of migration 024 by
-- their WHEN, not by their body: runs_wf_hold (the advance sets
-- summary_counts and clears hooks_at itself; a cancel or a rejection sets
-- neither) and runs_wf_ended (no step is active: opsrun_wf_stop would
-- return at once). Each cost a PL/pgSQL call on the workflow's wide row.
DROP TRIGGER runs_wf_hold ON runs;
CREATE TRIGGER runs_wf_hold BEFORE UPDATE OF status ON runs
    FOR EACH ROW WHEN (NEW.wf_def IS NOT NULL AND NEW.status IS DISTINCT FROM OLD.status
                       AND (NEW.status = 'queued'
                            OR (NEW.status = 'completed' AND OLD.status <> 'completed'
                                AND NEW.summary_counts IS NULL)))
    EXECUTE FUNCTION opsrun_wf_hold();
DROP TRIGGER runs_wf_ended ON runs;
CREATE TRIGGER runs_wf_ended AFTER UPDATE OF status ON runs
    FOR EACH ROW WHEN (NEW.wf_def IS NOT NULL AND NEW.status = 'completed'
                       AND OLD.status <> 'completed'
                       AND NEW.wf_steps @? '$.* ? (@.state == "active")')
    EXECUTE FUNCTION opsrun_wf_ended();
