-- 034_status_triggers: fewer triggers on a run's change of status, each
-- with a short condition, so that a statement changing the status of runs
-- that use no notification, concurrency key or workflow (the claim, the
-- completion batch, a retry, a cancel) prepares less before its first row.
--
-- PostgreSQL prepares the WHEN condition of every trigger a statement can
-- fire once per statement, before the first row: it reads the stored
-- expression back (stringToNode), folds it and compiles it. Migration
-- 029 cut each condition of the features to a one-column gate and a
-- PL/pgSQL call; what was left was a price per trigger. With nine row
-- triggers and two statement triggers on UPDATE OF status, the completion
-- batch (16 runs a statement, no run using a feature) still spent 44,800
-- instructions a run in the triggers' code, most of it reading back and
-- preparing conditions; 24,500 after this migration (bench/stmtcost.sh,
-- callgrind inclusive; bench/README.md, "Status triggers (migrations
-- 034 and 035)").
--
-- The row triggers of one timing that guard the same kind of run are now
-- one trigger, whose function makes the tests of the triggers it replaces,
-- in the order they fired (their names'), each on the row as the one
-- before left it, and does what each did:
--   BEFORE  runs_status_before  runs_react_note, runs_wf_hold,
--                               runs_wf_step_note
--   AFTER   runs_conc_polls     runs_conc_freed, runs_conc_requeued,
--                               runs_poll_enter_update
--           runs_react          (kept: its condition reads a setting that
--                               must be read when the row is written)
--           runs_wf_status      runs_wf_approved, runs_wf_ended
-- AFTER row triggers still fire in that order for each row, as the ones
-- they replace did (conc_*, poll, react, wf_*), and each of their tests
-- reads only OLD and NEW, which are the same when the event is queued and
-- when it fires. Each new trigger's WHEN is the union of the one-column
-- gates of the triggers it replaced (and runs_poll_enter_update's whole
-- condition): false for a run that uses no feature. A run that uses one
-- now passes it at transitions where it owes nothing, a claim among them,
-- and pays a PL/pgSQL call there that the old conditions spared it, as
-- does a workflow's end made by its advance (which migration 026 kept
-- out of runs_wf_hold and runs_wf_ended). Each node of a condition is
-- paid at every statement by every run, so the gates stay short: tested
-- on the claim, in instructions, gates that also left out the claim cost
-- plain runs 10,800 a run and saved a notifying run 6,500 (bench/README.md,
-- "Status triggers"). runs_react's condition, and those of
-- the statement triggers that read the notes of a statement, are each one
-- call of a PL/pgSQL function instead of an expression, which is cheaper
-- to prepare; they are evaluated when they were. A binary from before
-- this migration keeps working beside one after it: everything here is
-- inside the database.

-- BEFORE UPDATE OF status.
CREATE FUNCTION opsrun_status_before() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_depth text := (pg_trigger_depth() - 1)::text;
    v_notes text;
    v_name text;
    v_key text;
BEGIN
    -- runs_react_note (migration 031): notes the transition of a run that
    -- is not a workflow for runs_react_batch, or marks the statement over.
    IF NEW.reacts & 255 <> 0 AND NEW.wf_def IS NULL
       AND opsrun_react_wanted(NEW.status, OLD.status, NEW.outcome, NEW.reacts, OLD.started_at,
                               NEW.attempt, OLD.attempt) THEN
        IF NEW.conc_key IS NOT NULL AND NEW.status = 'queued' THEN
            PERFORM opsrun_notify(NEW, 'retrying', t.notify) FROM run_type_rules t
              WHERE t.type = NEW.type;
        ELSE
            v_notes := coalesce(current_setting('opsrun.react_' || v_depth, true), '');
            IF octet_length(v_notes) < 32768 THEN
                PERFORM set_config('opsrun.react_' || v_depth,
                                   v_notes || NEW.tenant || chr(31) || NEW.id || chr(31)
                                   || CASE WHEN NEW.status = 'completed' THEN NEW.outcome
                                           WHEN NEW.status = 'running' THEN 'started'
                                           ELSE 'retrying' END || chr(30), true);
            ELSE
                PERFORM set_config('opsrun.react_over_' || v_depth, 'on', true);
            END IF;
        END IF;
    END IF;
    -- runs_wf_hold (migration 026): a workflow that would be queued waits;
    -- one that ends otherwise than by its advance skips its pending steps.
    IF NEW.wf_def IS NOT NULL
       AND opsrun_wf_hold_wanted(NEW.wf_def, NEW.status, OLD.status, NEW.summary_counts) THEN
        IF NEW.status = 'queued' THEN
            NEW.status := 'waiting';
        ELSE
            NEW.hooks_at := NULL;
            IF NEW.summary_counts IS NULL THEN
                NEW.wf_steps := (SELECT jsonb_object_agg(k.key,
                                                         CASE WHEN k.value ->> 'state' = 'pending'
                                                              THEN '{"state": "skipped"}'::jsonb
                                                              ELSE k.value END)
                                   FROM jsonb_each(NEW.wf_steps) AS k);
                NEW.summary_counts := opsrun_wf_counts(NEW.wf_steps);
            END IF;
        END IF;
    END IF;
    -- runs_wf_step_note (migration 026): a step that ended notes its
    -- workflow for runs_wf_poked_update.
    IF NEW.step_name IS NOT NULL
       AND opsrun_wf_step_note_wanted(NEW.step_name, NEW.status, OLD.status) THEN
        v_name := 'opsrun.wf_poke_' || v_depth;
        v_notes := coalesce(current_setting(v_name, true), '');
        v_key := chr(30) || NEW.tenant || chr(31) || NEW.parent_id || chr(30);
        IF position(v_key IN v_notes) = 0 THEN
            IF octet_length(v_notes) < 32768 THEN
                PERFORM set_config(v_name, v_notes || v_key, true);
            ELSE
                INSERT INTO wf_due (tenant, workflow_id) VALUES (NEW.tenant, NEW.parent_id);
            END IF;
        END IF;
    END IF;
    RETURN NEW;
END
$$;
DROP TRIGGER runs_react_note ON runs;
DROP TRIGGER runs_wf_hold ON runs;
DROP TRIGGER runs_wf_step_note ON runs;
DROP FUNCTION opsrun_react_note();
DROP FUNCTION opsrun_wf_hold();
DROP FUNCTION opsrun_wf_note();
CREATE TRIGGER runs_status_before BEFORE UPDATE OF status ON runs
    FOR EACH ROW WHEN (NEW.reacts & 255 <> 0 OR NEW.wf_def IS NOT NULL
                       OR NEW.step_name IS NOT NULL)
    EXECUTE FUNCTION opsrun_status_before();

-- AFTER UPDATE OF status, before runs_react: a concurrency key freed or
-- queued again, and a run that starts waiting on a remote job.
CREATE FUNCTION opsrun_conc_requeue(p_run runs) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_newer text;
    v_n bigint;
    v_msg text;
BEGIN
    PERFORM opsrun_conc_lock(p_run.tenant, p_run.conc_group, p_run.conc_key);
    IF p_run.conc_strategy = 'cancel_newest' THEN
        SELECT count(*) INTO v_n FROM runs r
         WHERE r.tenant = p_run.tenant AND r.conc_group = p_run.conc_group
           AND r.conc_key = p_run.conc_key AND r.status IN ('queued', 'running', 'cancelling')
           AND r.status <> 'completed' AND r.id <> p_run.id;
        IF v_n >= p_run.conc_max THEN
            v_msg := format('concurrency key "%s" of group "%s" is full: %s queued or running, '
                            'max_running %s', p_run.conc_key, p_run.conc_group, v_n,
                            p_run.conc_max);
            PERFORM opsrun_conc_cancel_queued(p_run, 'concurrency_limit', v_msg,
                                              'cancelled: ' || v_msg);
        END IF;
        RETURN;
    END IF;
    SELECT r.id INTO v_newer FROM runs r
     WHERE r.tenant = p_run.tenant AND r.conc_group = p_run.conc_group
       AND r.conc_key = p_run.conc_key AND r.status <> 'completed' AND r.id <> p_run.id
       AND (r.status IN ('queued', 'running', 'cancelling')
            OR (r.status = 'waiting' AND r.approval_state IS DISTINCT FROM 'pending'))
       AND (r.created_at, r.id) > (p_run.created_at, p_run.id)
     ORDER BY r.created_at DESC, r.id DESC LIMIT 1;
    IF v_newer IS NOT NULL THEN
        PERFORM opsrun_conc_cancel_queued(p_run, 'superseded',
                                          format('superseded by run %s', v_newer),
                                          'cancelled: superseded by ' || v_newer);
    ELSE
        PERFORM opsrun_conc_supersede(p_run);
    END IF;
END
$$;
CREATE FUNCTION opsrun_conc_polls() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- runs_conc_freed (migration 022)
    IF OLD.conc_key IS NOT NULL
       AND opsrun_conc_freed_wanted(OLD.conc_key, OLD.status, NEW.status) THEN
        INSERT INTO conc_freed (tenant, conc_group, conc_key)
        VALUES (OLD.tenant, OLD.conc_group, OLD.conc_key);
    END IF;
    -- runs_conc_requeued (migration 022)
    IF NEW.conc_key IS NOT NULL
       AND opsrun_conc_requeued_wanted(NEW.status, OLD.status, NEW.conc_key, NEW.conc_strategy,
                                       OLD.approval_state) THEN
        PERFORM opsrun_conc_requeue(NEW);
    END IF;
    -- runs_poll_enter_update (migration 012)
    IF NEW.status = 'waiting' AND OLD.status <> 'waiting' THEN
        INSERT INTO run_polls (tenant, run_id, type, next_poll_at, poll_count)
        VALUES (NEW.tenant, NEW.id, NEW.type, coalesce(NEW.next_poll_at, now()), NEW.poll_count)
        ON CONFLICT (tenant, run_id) DO UPDATE SET type = EXCLUDED.type,
            next_poll_at = EXCLUDED.next_poll_at, poll_count = EXCLUDED.poll_count,
            poll_owner = NULL;
    END IF;
    RETURN NULL;
END
$$;
DROP TRIGGER runs_conc_freed ON runs;
DROP TRIGGER runs_conc_requeued ON runs;
DROP TRIGGER runs_poll_enter_update ON runs;
DROP FUNCTION opsrun_conc_freed();
DROP FUNCTION opsrun_conc_requeued();
CREATE TRIGGER runs_conc_polls AFTER UPDATE OF status ON runs
    FOR EACH ROW WHEN (OLD.conc_key IS NOT NULL OR NEW.conc_key IS NOT NULL
                       OR (NEW.status = 'waiting' AND OLD.status <> 'waiting'))
    EXECUTE FUNCTION opsrun_conc_polls();

-- runs_react (migrations 029, 031): the same condition, made in one call.
-- Of each row only what the condition reads (the whole rows would be read
-- with every value stored out of line, a run's input among them).
CREATE FUNCTION opsrun_react_due(n_status text, o_status text, n_outcome text,
                                 n_reacts integer, o_started_at timestamptz,
                                 n_attempt integer, o_attempt integer, n_workflow boolean,
                                 n_conc_key text)
RETURNS boolean LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
BEGIN
    RETURN (n_workflow
            OR ((n_conc_key IS NULL OR n_status <> 'queued')
                AND current_setting('opsrun.react_over_' || pg_trigger_depth()::text, true)
                    = 'on'))
        AND opsrun_react_wanted(n_status, o_status, n_outcome, n_reacts, o_started_at,
                                n_attempt, o_attempt);
END
$$;
DROP TRIGGER runs_react ON runs;
CREATE TRIGGER runs_react AFTER UPDATE OF status ON runs
    FOR EACH ROW WHEN (NEW.reacts & 255 <> 0
                       AND opsrun_react_due(NEW.status, OLD.status, NEW.outcome, NEW.reacts,
                                            OLD.started_at, NEW.attempt, OLD.attempt,
                                            NEW.wf_def IS NOT NULL, NEW.conc_key))
    EXECUTE FUNCTION opsrun_react();

-- AFTER UPDATE OF status, after runs_react: a workflow approved, and one
-- that ended with steps still active.
CREATE FUNCTION opsrun_wf_status() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- runs_wf_approved (migration 024)
    IF opsrun_wf_approved_wanted(NEW.wf_def, NEW.status, OLD.approval_state,
                                 NEW.approval_state) THEN
        PERFORM opsrun_wf_advance(NEW);
    END IF;
    -- runs_wf_ended (migration 026)
    IF opsrun_wf_ended_wanted(NEW.wf_def, NEW.status, OLD.status, NEW.wf_steps) THEN
        PERFORM opsrun_wf_stop(NEW);
    END IF;
    RETURN NULL;
END
$$;
DROP TRIGGER runs_wf_approved ON runs;
DROP TRIGGER runs_wf_ended ON runs;
DROP FUNCTION opsrun_wf_started();
DROP FUNCTION opsrun_wf_ended();
CREATE TRIGGER runs_wf_status AFTER UPDATE OF status ON runs
    FOR EACH ROW WHEN (NEW.wf_def IS NOT NULL)
    EXECUTE FUNCTION opsrun_wf_status();

-- The statement triggers that read a statement's notes: whether there are
-- any, in one call (the setting's name made of the prefix and the depth).
CREATE FUNCTION opsrun_noted(p_prefix text) RETURNS boolean
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
BEGIN
    RETURN current_setting(p_prefix || pg_trigger_depth()::text, true) <> '';
END
$$;
DROP TRIGGER runs_react_batch ON runs;
CREATE TRIGGER runs_react_batch AFTER UPDATE OF status ON runs
    FOR EACH STATEMENT WHEN (opsrun_noted('opsrun.react_'))
    EXECUTE FUNCTION opsrun_react_batch();
DROP TRIGGER runs_wf_poked_update ON runs;
CREATE TRIGGER runs_wf_poked_update AFTER UPDATE ON runs
    FOR EACH STATEMENT WHEN (opsrun_noted('opsrun.wf_poke_'))
    EXECUTE FUNCTION opsrun_wf_poked();
DROP TRIGGER runs_wf_poked_insert ON runs;
CREATE TRIGGER runs_wf_poked_insert AFTER INSERT ON runs
    FOR EACH STATEMENT WHEN (opsrun_noted('opsrun.wf_poke_'))
    EXECUTE FUNCTION opsrun_wf_poked();
