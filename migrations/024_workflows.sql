-- 024_workflows: run types whose action is "workflow" run other run types
-- as their steps, in the order their needs give (docs/workflows.md).
--
-- A workflow run is a runs row that waits from its insert to its end and is
-- never claimed: it holds no worker, counts against no cap and has no
-- external job. It keeps the definition it was made with (wf_def, its
-- type's compiled steps in an order where every step comes after its
-- needs) and the state of each step (wf_steps: {"<name>": {"state",
-- "run_id"}}, state pending, active, skipped, or the outcome of the step's
-- run). Each step is an ordinary run, id "<workflow id>.<name>", parent_id
-- the workflow, step_name its name.
--
-- Everything happens in the database, in the transaction that makes a step
-- startable, whichever statement that is and whichever replica runs it:
--   the insert of the workflow     its first steps (runs_wf_started)
--   its approval                   the same (runs_wf_approved)
--   a step's end                   opsrun_wf_poke: the workflow's row is
--                                  locked and opsrun_wf_advance decides
--                                  every step it can, creates the steps
--                                  that may start, and ends the workflow
--                                  when no step can start any more
--   the workflow's end (a cancel)  its active steps are cancelled
--                                  (runs_wf_ended, opsrun_wf_stop)
-- A step is created once: its id is fixed, and only the holder of the
-- workflow's row lock creates steps. Joins are never missed: the lock is
-- taken with SKIP LOCKED, and a transaction that finds it taken leaves a
-- marker in wf_due instead of waiting (a batch that ends many runs would
-- otherwise lock workflows in any order and could deadlock with another);
-- the marker becomes visible with the step's end, and any replica's sweep
-- (opsrun_wf_sweep, from the maintenance thread) advances the workflow
-- once it can lock it. Each statement of a PL/pgSQL function reads a new
-- snapshot under READ COMMITTED, so what follows the lock sees everything
-- the lock's previous holder committed.
--
-- Only additions: a binary from before this migration keeps working beside
-- one after it. It makes no workflow (its configuration has none), and its
-- cancels, bulk actions and inserts pass through the triggers below as
-- this binary's do.

-- 1. The columns. NULL for every run but workflows and their steps.
ALTER TABLE runs ADD COLUMN wf_def    jsonb,
                 ADD COLUMN wf_steps  jsonb,
                 ADD COLUMN step_name text;
-- A workflow type's steps, compiled by the configuration (NULL for any
-- other type): [{"name", "run_type", "needs", "when", "data", "refs"}], in
-- an order where each step comes after its needs.
ALTER TABLE run_type_rules ADD COLUMN workflow jsonb;
-- reacts (migrations 017, 022) gains bit 512, "a workflow": the insert of a
-- run of the type makes it a workflow (runs_wf_fill). Every statement that
-- makes a run copies its type's reacts, so every one reaches the trigger,
-- and a run of any other type pays one false WHEN.
ALTER TABLE run_type_rules DROP COLUMN reacts;
ALTER TABLE run_type_rules ADD COLUMN reacts integer GENERATED ALWAYS AS
    (opsrun_reaction_mask(notify, follow_ups)
     | CASE WHEN conc_group IS NOT NULL THEN 256 ELSE 0 END
     | CASE WHEN workflow IS NOT NULL THEN 512 ELSE 0 END) STORED;

-- The workflows a step's end could not lock (their row was locked by
-- another transaction): the sweep advances them. No key: markers are
-- deleted by the lock's holder, and duplicates cost one advance.
CREATE TABLE wf_due (
    tenant      text NOT NULL,
    workflow_id text NOT NULL
);

-- Events of one more type: "step", a workflow's steps that ended, started
-- or were skipped, written by the advance that saw it.
ALTER TABLE run_events DROP CONSTRAINT run_events_type_check;
ALTER TABLE run_events ADD CONSTRAINT run_events_type_check
    CHECK (type IN ('status', 'progress', 'notification', 'follow_up', 'step')) NOT VALID;

-- A waiting workflow has no external job: no run_polls row (migration
-- 018's trigger, with the workflows left out).
DROP TRIGGER runs_poll_enter_insert ON runs;
CREATE TRIGGER runs_poll_enter_insert AFTER INSERT ON runs
    FOR EACH ROW WHEN (NEW.status = 'waiting' AND NEW.approval_state IS DISTINCT FROM 'pending'
                       AND NEW.wf_def IS NULL)
    EXECUTE FUNCTION opsrun_run_polls_enter();

-- 2. Deciding a step.

-- 'start', 'skip' or 'wait' for a step whose "when" is p_when and whose
-- needs are in the states p_needs. succeeded: start when every need
-- succeeded, skip once one ended otherwise (or was skipped); failed: once
-- every need ended or was skipped, start when one did not succeed;
-- always: start once every need ended or was skipped. A step without
-- needs starts.
CREATE FUNCTION opsrun_wf_decide(p_when text, p_needs text[]) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN p_when = 'succeeded' THEN
            CASE WHEN c.ok = c.n THEN 'start' WHEN c.done > c.ok THEN 'skip' ELSE 'wait' END
        WHEN c.done < c.n THEN 'wait'
        WHEN p_when = 'always' OR c.ok < c.n THEN 'start'
        ELSE 'skip' END
      FROM (SELECT coalesce(cardinality(p_needs), 0) AS n,
                   (SELECT count(*) FROM unnest(p_needs) s WHERE s = 'succeeded') AS ok,
                   (SELECT count(*) FROM unnest(p_needs) s
                     WHERE s NOT IN ('pending', 'active')) AS done) c
$$;

-- A step's data template, with its placeholders {{input:/p}} and
-- {{steps.NAME:/p}} written as the {{run:...}} placeholders of
-- opsrun_expand over the document {"input": ..., "steps": {NAME: ...}}.
-- Only values are templates, never keys (as common/template.c reads them).
CREATE FUNCTION opsrun_wf_template(t jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    CASE jsonb_typeof(t)
    WHEN 'object' THEN
        RETURN coalesce((SELECT jsonb_object_agg(k, opsrun_wf_template(v)) FROM jsonb_each(t) AS e(k, v)),
                        '{}');
    WHEN 'array' THEN
        RETURN coalesce((SELECT jsonb_agg(opsrun_wf_template(v) ORDER BY o)
                           FROM jsonb_array_elements(t) WITH ORDINALITY AS e(v, o)), '[]');
    WHEN 'string' THEN
        RETURN to_jsonb(regexp_replace(regexp_replace(t #>> '{}', '\{\{input:', '{{run:/input', 'g'),
                                       '\{\{steps\.([A-Za-z0-9_-]+):', '{{run:/steps/\1', 'g'));
    ELSE
        RETURN t;
    END CASE;
END
$$;

-- The placeholder of a pointer opsrun_expand found missing, as the step's
-- data wrote it.
CREATE FUNCTION opsrun_wf_placeholder(p_ptr text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN p_ptr ~ '^/input(/|$)' THEN '{{input:' || substr(p_ptr, 7) || '}}'
                ELSE regexp_replace(p_ptr, '^/steps/([^/]+)(.*)$', '{{steps.\1:\2}}') END
$$;

-- An event of type step on workflow w as it is now.
CREATE FUNCTION opsrun_wf_event(w runs, p_message text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO run_events (tenant, run_id, type, status, outcome, progress, step, message,
                            run_created_at)
    VALUES (w.tenant, w.id, 'step', w.status, w.outcome, w.progress, w.step, p_message,
            w.created_at);
END
$$;

-- 3. Creating a step: its run, inserted queued (or waiting for approval,
-- or a workflow of its own), with the workflow's tenant, initiator and
-- priority, its type's attempts, time limit and approval, parent_id the
-- workflow and chain_depth one deeper. The run is inserted already failed,
-- with its error and event, and with the notifications and follow-ups its
-- type's rules owe a failed run, when it would be deeper than
-- queue.max_chain_depth, its type is not configured, or its data names a
-- value that is not there or comes to more than 1 MiB (error
-- invalid_step_data); there is no run when its id is taken or would be
-- longer than 128 characters. Returns the step's new state in wf_steps:
-- {"state": "active" or the outcome of a run that ended at once,
-- "run_id"}, and why when there is no run or it failed at once.
--
-- Its "submitted" event is written before the insert: the insert's own
-- triggers may end the run at once (an invalid concurrency key, a nested
-- workflow whose steps all fail), and their events must come after it.
CREATE FUNCTION opsrun_wf_create(w runs, p_name text, p_type text, p_data jsonb, p_refs text[],
                                 p_steps jsonb, OUT state jsonb, OUT message text)
LANGUAGE plpgsql AS $$
DECLARE
    c run_type_rules;
    x record;
    r runs;
    v_id text := w.id || '.' || p_name;
    v_doc jsonb;
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
        v_doc := jsonb_build_object('input', w.input, 'steps',
            coalesce((SELECT jsonb_object_agg(n, opsrun_run_json(s)::jsonb)
                        FROM unnest(p_refs) AS n
                        JOIN runs s ON s.tenant = w.tenant AND s.id = p_steps -> n ->> 'run_id'),
                     '{}'));
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

-- The steps of a workflow with states st that were active and whose run
-- has ended since, with their outcome: st updated, and "<name> <outcome>"
-- for each. A step whose run is gone (retention deleted it, ended, before
-- the workflow saw it end) counts as failed.
CREATE FUNCTION opsrun_wf_collect(p_tenant text, p_st jsonb, OUT st jsonb, OUT ended text[])
LANGUAGE plpgsql AS $$
DECLARE
    x record;
BEGIN
    st := p_st;
    ended := '{}';
    FOR x IN SELECT k.key AS name, coalesce(r.outcome, 'failed') AS outcome
               FROM jsonb_each(p_st) AS k
               LEFT JOIN runs r ON r.tenant = p_tenant AND r.id = k.value ->> 'run_id'
              WHERE k.value ->> 'state' = 'active'
                AND (r.status = 'completed' OR r.id IS NULL)
              ORDER BY k.key LOOP
        st := jsonb_set(st, ARRAY[x.name, 'state'], to_jsonb(x.outcome));
        ended := ended || (x.name || ' ' || x.outcome);
    END LOOP;
END
$$;

-- summary_counts of a workflow that ended with steps in states st: how
-- many steps are in each state, a step still active counted as cancelled
-- (the end stops it; opsrun_wf_settle counts it again once it ended).
CREATE FUNCTION opsrun_wf_counts(st jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT jsonb_object_agg(s.state, s.n)
      FROM (SELECT CASE WHEN k.value ->> 'state' = 'active' THEN 'cancelled'
                        ELSE k.value ->> 'state' END AS state, count(*) AS n
              FROM jsonb_each(st) AS k GROUP BY 1) s
$$;

-- 4. Advancing a workflow w, whose row the caller has locked (or inserted
-- in this transaction): the active steps that ended take their outcome,
-- then, in definition order (needs first), each pending step whose needs
-- decide it starts or is skipped, and the workflow's row gets the new
-- states, its progress (the share of steps ended or skipped) and one step
-- event; when no step is pending or active any more, the workflow ends,
-- succeeded when every step that was not skipped succeeded, failed when
-- none did, partially_succeeded otherwise, summary_counts counting the
-- steps by state. Only under READ COMMITTED, where each statement sees
-- what the lock's previous holder committed.
CREATE FUNCTION opsrun_wf_advance(w runs) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    st jsonb := w.wf_steps;
    d record;
    x record;
    v_dec text;
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
        v_dec := opsrun_wf_decide(d."when", ARRAY(SELECT st -> n ->> 'state'
                                                     FROM unnest(d.needs) AS n));
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

-- A workflow w that ended: the steps that were active at its end and have
-- ended since take their outcome in wf_steps and summary_counts (a step
-- asked to cancel may still have succeeded). No event: the workflow has
-- ended; each step's own events say how it did.
CREATE FUNCTION opsrun_wf_settle(w runs) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    c record;
BEGIN
    c := opsrun_wf_collect(w.tenant, w.wf_steps);
    IF cardinality(c.ended) > 0 THEN
        UPDATE runs r SET wf_steps = c.st, summary_counts = opsrun_wf_counts(c.st),
                          updated_at = now()
         WHERE r.tenant = w.tenant AND r.id = w.id;
    END IF;
END
$$;

-- 5. The workflow's end stops its active steps: queued and waiting ones
-- end cancelled at once (a waiting one owes its action's hooks, as a
-- cancel's), running ones are asked to cancel; error code
-- workflow_cancelled. A step whose row another transaction holds (a claim
-- in flight) is left to the sweep, through a marker. Then the steps that
-- have ended take their outcome (opsrun_wf_settle); the end of each step
-- still running settles the workflow again (opsrun_wf_poke).
CREATE FUNCTION opsrun_wf_stop(w runs) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_guard text := current_setting('opsrun.wf_advancing', true);
    v_busy boolean;
BEGIN
    IF w.wf_steps IS NULL THEN
        RETURN;
    END IF;
    PERFORM set_config('opsrun.wf_advancing',
                       coalesce(v_guard, '') || chr(30) || w.tenant || chr(31) || w.id || chr(30), true);
    WITH act AS (
        SELECT k.value ->> 'run_id' AS id FROM jsonb_each(w.wf_steps) AS k
         WHERE k.value ->> 'state' = 'active'
    ), cur AS (
        SELECT r.tenant, r.id, r.status FROM runs r JOIN act ON r.tenant = w.tenant AND r.id = act.id
         WHERE r.status IN ('queued', 'waiting', 'running')
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
    SELECT EXISTS (SELECT 1 FROM jsonb_each(w.wf_steps) AS k
                     JOIN runs r ON r.tenant = w.tenant AND r.id = k.value ->> 'run_id'
                    WHERE k.value ->> 'state' = 'active'
                      AND r.status IN ('queued', 'waiting', 'running')) INTO v_busy;
    IF v_busy THEN
        INSERT INTO wf_due (tenant, workflow_id) VALUES (w.tenant, w.id);
    END IF;
    PERFORM opsrun_wf_settle(w);
    PERFORM set_config('opsrun.wf_advancing', coalesce(v_guard, ''), true);
END
$$;

-- 6. A step of workflow p_id ended: lock the workflow and advance it (or
-- stop what is left of a workflow that ended), or, when another
-- transaction holds its row, leave a marker for the sweep. Nothing when the
-- workflow is gone (retention took it).
CREATE FUNCTION opsrun_wf_poke(p_tenant text, p_id text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    w runs;
BEGIN
    IF position(chr(30) || p_tenant || chr(31) || p_id || chr(30)
                IN coalesce(current_setting('opsrun.wf_advancing', true), '')) > 0 THEN
        -- This transaction is advancing or stopping it: from within, the
        -- outer call's view of its steps would go stale.
        IF EXISTS (SELECT 1 FROM runs WHERE tenant = p_tenant AND id = p_id
                                         AND status <> 'completed') THEN
            INSERT INTO wf_due (tenant, workflow_id) VALUES (p_tenant, p_id);
        END IF;
        RETURN;
    END IF;
    SELECT * INTO w FROM runs WHERE tenant = p_tenant AND id = p_id FOR UPDATE SKIP LOCKED;
    IF FOUND THEN
        IF w.status = 'completed' THEN
            PERFORM opsrun_wf_stop(w);
        ELSE
            PERFORM opsrun_wf_advance(w);
        END IF;
    ELSIF EXISTS (SELECT 1 FROM runs WHERE tenant = p_tenant AND id = p_id) THEN
        INSERT INTO wf_due (tenant, workflow_id) VALUES (p_tenant, p_id);
    END IF;
END
$$;

-- The sweep: up to p_limit workflows with markers, each whose row it can
-- lock now (its markers deleted, then advanced or stopped); the others
-- keep theirs. Returns how many it took (the caller rings the doorbells:
-- it may have made runs and events).
CREATE FUNCTION opsrun_wf_sweep(p_limit integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    m record;
    w runs;
    v_n integer := 0;
BEGIN
    FOR m IN SELECT DISTINCT d.tenant, d.workflow_id FROM wf_due d LIMIT p_limit LOOP
        SELECT * INTO w FROM runs WHERE tenant = m.tenant AND id = m.workflow_id
           FOR UPDATE SKIP LOCKED;
        IF FOUND THEN
            DELETE FROM wf_due WHERE tenant = m.tenant AND workflow_id = m.workflow_id;
            IF w.status = 'completed' THEN
                PERFORM opsrun_wf_stop(w);
            ELSE
                PERFORM opsrun_wf_advance(w);
            END IF;
            v_n := v_n + 1;
        ELSIF NOT EXISTS (SELECT 1 FROM runs WHERE tenant = m.tenant AND id = m.workflow_id) THEN
            DELETE FROM wf_due WHERE tenant = m.tenant AND workflow_id = m.workflow_id;
        END IF;
    END LOOP;
    RETURN v_n;
END
$$;

-- 7. The triggers.

-- At insert: a run of a workflow type gets its type's definition and every
-- step pending, and waits (a run that waits for approval stays so). A
-- retry (retry_of, POST /runs/{id}/retry or a bulk retry) reuses each step
-- of the workflow it retries that succeeded: a step of the same name and
-- run type whose run still exists (retention) and succeeded starts
-- succeeded, with that run as its run_id (the run of an earlier workflow
-- when that one reused it too).
CREATE FUNCTION opsrun_wf_fill() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_def jsonb;
BEGIN
    SELECT t.workflow INTO v_def FROM run_type_rules t WHERE t.type = NEW.type;
    IF v_def IS NULL OR NEW.status = 'completed' THEN
        RETURN NEW;
    END IF;
    NEW.wf_def := v_def;
    NEW.wf_steps := (SELECT jsonb_object_agg(e ->> 'name',
                                             CASE WHEN s.id IS NULL THEN '{"state": "pending"}'
                                                  ELSE jsonb_build_object('state', 'succeeded',
                                                                          'run_id', s.id) END)
                       FROM jsonb_array_elements(v_def) AS e
                       LEFT JOIN runs o ON NEW.retry_of IS NOT NULL AND o.tenant = NEW.tenant
                                       AND o.id = NEW.retry_of
                       LEFT JOIN runs s ON s.tenant = NEW.tenant
                                       AND s.id = o.wf_steps -> (e ->> 'name') ->> 'run_id'
                                       AND s.type = e ->> 'run_type' AND s.status = 'completed'
                                       AND s.outcome = 'succeeded');
    IF NEW.status = 'queued' THEN
        NEW.status := 'waiting';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER runs_wf_fill BEFORE INSERT ON runs
    FOR EACH ROW WHEN (NEW.reacts & 512 <> 0) EXECUTE FUNCTION opsrun_wf_fill();

-- A workflow that would be queued (approved) waits instead. One that ends
-- otherwise than by its advance (a cancel, a rejection): its pending steps
-- are skipped, its active ones counted as cancelled (runs_wf_ended stops
-- them), and it owes no hooks (it started no external job).
CREATE FUNCTION opsrun_wf_hold() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = 'queued' THEN
        NEW.status := 'waiting';
        RETURN NEW;
    END IF;
    NEW.hooks_at := NULL;
    IF NEW.summary_counts IS NULL THEN
        NEW.wf_steps := (SELECT jsonb_object_agg(k.key, CASE WHEN k.value ->> 'state' = 'pending'
                                                             THEN '{"state": "skipped"}'::jsonb
                                                             ELSE k.value END)
                           FROM jsonb_each(NEW.wf_steps) AS k);
        NEW.summary_counts := opsrun_wf_counts(NEW.wf_steps);
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER runs_wf_hold BEFORE UPDATE OF status ON runs
    FOR EACH ROW WHEN (NEW.wf_def IS NOT NULL AND NEW.status IS DISTINCT FROM OLD.status
                       AND (NEW.status = 'queued'
                            OR (NEW.status = 'completed' AND OLD.status <> 'completed')))
    EXECUTE FUNCTION opsrun_wf_hold();

-- The first steps: at the insert of a workflow that does not wait for
-- approval, or at its approval.
CREATE FUNCTION opsrun_wf_started() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM opsrun_wf_advance(NEW);
    RETURN NULL;
END
$$;
CREATE TRIGGER runs_wf_started AFTER INSERT ON runs
    FOR EACH ROW WHEN (NEW.wf_def IS NOT NULL AND NEW.status = 'waiting'
                       AND NEW.approval_state IS DISTINCT FROM 'pending')
    EXECUTE FUNCTION opsrun_wf_started();
CREATE TRIGGER runs_wf_approved AFTER UPDATE OF status ON runs
    FOR EACH ROW WHEN (NEW.wf_def IS NOT NULL AND NEW.status = 'waiting'
                       AND OLD.approval_state = 'pending'
                       AND NEW.approval_state IS DISTINCT FROM 'pending')
    EXECUTE FUNCTION opsrun_wf_started();

-- A workflow that ended: its active steps stop.
CREATE FUNCTION opsrun_wf_ended() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM opsrun_wf_stop(NEW);
    RETURN NULL;
END
$$;
CREATE TRIGGER runs_wf_ended AFTER UPDATE OF status ON runs
    FOR EACH ROW WHEN (NEW.wf_def IS NOT NULL AND NEW.status = 'completed'
                       AND OLD.status <> 'completed')
    EXECUTE FUNCTION opsrun_wf_ended();

-- A step that ended: its workflow advances.
CREATE FUNCTION opsrun_wf_step_ended() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM opsrun_wf_poke(NEW.tenant, NEW.parent_id);
    RETURN NULL;
END
$$;
CREATE TRIGGER runs_wf_step_end AFTER UPDATE OF status ON runs
    FOR EACH ROW WHEN (NEW.step_name IS NOT NULL AND NEW.status = 'completed'
                       AND OLD.status <> 'completed')
    EXECUTE FUNCTION opsrun_wf_step_ended();

-- 8. The run object gains "workflow" (after "concurrency"): {"steps":
-- {"<name>": {"state", "run_id", "run_type", "needs", "when"}}} for a
-- workflow, in definition order, state pending, skipped, the status of an
-- active step's run (looked up now) or the outcome of an ended one; null
-- for any other run. And "workflow_step": the name of a step run in its
-- workflow, null for any other run. The other members and their order are
-- those of migration 022.
CREATE FUNCTION opsrun_wf_json(r runs) RETURNS json
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
      LEFT JOIN runs x ON y.s ->> 'state' = 'active' AND x.tenant = r.tenant
                      AND x.id = y.s ->> 'run_id'
$$;

CREATE OR REPLACE FUNCTION opsrun_run_json(r runs) RETURNS json
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT json_build_object(
        'id', r.id, 'tenant', r.tenant, 'initiator', r.initiator, 'type', r.type,
        'status', r.status, 'outcome', r.outcome, 'priority', r.priority,
        'attempt', r.attempt, 'max_attempts', r.max_attempts, 'progress', r.progress,
        'step', r.step, 'input', r.input, 'result', r.result, 'error', r.error,
        'summary_counts', r.summary_counts, 'failure_summary', r.failure_summary,
        'context', r.context, 'external_id', r.external_id, 'worker_id', r.worker_id,
        'created_at', opsrun_ts(r.created_at), 'run_at', opsrun_ts(r.run_at),
        'started_at', opsrun_ts(r.started_at), 'completed_at', opsrun_ts(r.completed_at),
        'updated_at', opsrun_ts(r.updated_at), 'retry_of', r.retry_of,
        'poll', CASE WHEN r.poll_started_at IS NOT NULL THEN json_build_object(
            'checks', r.poll_count, 'max_checks', r.poll_max_checks,
            'max_duration_s', r.poll_max_duration_s,
            'next_check_at', CASE WHEN r.status = 'waiting' AND r.poll_owner IS NULL
                                  THEN opsrun_ts(r.next_poll_at) END,
            'waiting_since', opsrun_ts(r.poll_started_at),
            'give_up_at', opsrun_ts(r.poll_started_at
                                    + make_interval(secs => r.poll_max_duration_s))) END,
        'parent_id', r.parent_id,
        'schedule', CASE WHEN r.schedule_name IS NOT NULL THEN json_build_object(
            'name', r.schedule_name, 'slot', opsrun_ts(r.schedule_slot)) END,
        'approval', CASE WHEN r.approval_state IS NOT NULL THEN json_build_object(
            'state', CASE WHEN r.approval_state = 'pending' AND r.status <> 'waiting'
                          THEN 'cancelled' ELSE r.approval_state END,
            'requested_at', opsrun_ts(r.created_at),
            'expires_at', opsrun_ts(r.approval_expires_at),
            'on_timeout', r.approval_on_timeout,
            'decided_by', r.approval_decided_by,
            'decided_at', opsrun_ts(CASE WHEN r.approval_state = 'pending'
                                         AND r.status <> 'waiting' THEN r.completed_at
                                         ELSE r.approval_decided_at END),
            'comment', r.approval_comment) END,
        'concurrency', CASE WHEN r.conc_group IS NOT NULL THEN json_build_object(
            'group', r.conc_group, 'key', r.conc_key, 'max_running', r.conc_max,
            'strategy', r.conc_strategy, 'held', r.conc_held AND r.status = 'queued') END,
        'workflow', CASE WHEN r.wf_def IS NOT NULL THEN opsrun_wf_json(r) END,
        'workflow_step', r.step_name)
$$;

-- 9. A follow-up's "submitted" event is written before its insert, as a
-- step's is (opsrun_wf_create): the insert's own triggers may end the run
-- at once (a workflow whose steps all fail at once, a concurrency key that
-- cannot be made), and their events must come after it. Migration 020's
-- function but for the order of those two statements (and a follow-up of
-- a workflow type is made waiting).
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
        PERFORM opsrun_follow_up_event(r, format('follow-up %s (%s) created: %s%s', f.k,
            f.run_type, v_id, CASE WHEN coalesce(f.delay_s, 0) > 0
                                   THEN format(', due in %s s', f.delay_s) ELSE '' END));
    END LOOP;
END
$$;
