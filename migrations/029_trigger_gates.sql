-- 029_trigger_gates: the triggers of notifications, approvals,
-- concurrency keys and workflows cost little to a run that uses none of
-- them (a one-column test each, where they cost a long condition).
--
-- PostgreSQL prepares a row trigger's WHEN condition again for every
-- statement that can fire it (it reads the stored expression tree, folds
-- its constants, inlines the SQL functions it calls, and compiles it),
-- before the first row, whatever that row's values. Every statement that
-- changes a run's status (the claim, the completion batch, a retry, a
-- cancel) paid that for the seven conditions of the status triggers
-- below, 16 kB of stored expression, with opsrun_event_bit's body parsed
-- again each time; every insert of runs, for three more. A profile of the
-- completion batch (16 runs a statement, no run using a feature) put 16 %
-- of the server's time there (bench/README.md, "Trigger gates").
--
-- Each condition is now a gate, a test of one column that is false for a
-- run without the feature, AND a PL/pgSQL function holding the whole
-- condition word for word: PostgreSQL neither inlines nor folds that call,
-- so preparing the condition costs little, and the function runs only for
-- a row past the gate (AND stops at its first false operand). A run that
-- uses the feature pays that call instead of the inline test. The names,
-- events, columns and bodies of the triggers are unchanged, and so is the
-- order they fire in (their names'). The gates, each implied by the
-- condition it guards:
--   runs_react                NEW.reacts & 255 <> 0  (the event bits; 256
--                                                     and 512 flag the fills)
--   runs_conc_requeued        NEW.conc_key IS NOT NULL
--   runs_conc_freed           OLD.conc_key IS NOT NULL
--   runs_wf_approved          NEW.wf_def IS NOT NULL
--   runs_wf_ended             NEW.wf_def IS NOT NULL
--   runs_wf_hold              NEW.wf_def IS NOT NULL
--   runs_wf_step_note         NEW.step_name IS NOT NULL
--   runs_approval_requested   NEW.reacts & 4 <> 0
--   runs_conc_insert          NEW.conc_group IS NOT NULL
--   runs_poll_enter_insert    NEW.status = 'waiting'
-- (runs_poll_enter_update, older than these features, and the fills'
-- one-test conditions stay as they are.) No WHEN condition of runs calls
-- an SQL function now; the integration test status_triggers_gate_plain_runs
-- checks that, and that a plain run's path calls none of these functions.

-- runs_react (migration 017): a run reacts to its start, its retry, or
-- its outcome, as its bits ask.
CREATE FUNCTION opsrun_react_wanted(n_status text, o_status text, n_outcome text,
                                    n_reacts integer, o_started_at timestamptz,
                                    n_attempt integer, o_attempt integer)
RETURNS boolean LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN n_reacts <> 0 AND n_status IS DISTINCT FROM o_status AND (
        (n_status = 'completed' AND n_reacts & opsrun_event_bit(n_outcome) <> 0)
        OR (n_status = 'running' AND o_started_at IS NULL AND n_reacts & 1 <> 0)
        OR (n_status = 'queued' AND n_attempt = o_attempt AND n_attempt > 0
            AND n_reacts & 2 <> 0));
END
$$;
DROP TRIGGER runs_react ON runs;
CREATE TRIGGER runs_react AFTER UPDATE OF status ON runs
    FOR EACH ROW WHEN (NEW.reacts & 255 <> 0
                       AND opsrun_react_wanted(NEW.status, OLD.status, NEW.outcome, NEW.reacts,
                                               OLD.started_at, NEW.attempt, OLD.attempt))
    EXECUTE FUNCTION opsrun_react();

-- runs_conc_requeued (migration 022).
CREATE FUNCTION opsrun_conc_requeued_wanted(n_status text, o_status text, n_conc_key text,
                                            n_conc_strategy text, o_approval_state text)
RETURNS boolean LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN n_status = 'queued' AND o_status <> 'queued' AND n_conc_key IS NOT NULL
        AND (n_conc_strategy = 'keep_newest'
             OR (n_conc_strategy IN ('cancel_newest', 'cancel_in_progress')
                 AND o_approval_state = 'pending'));
END
$$;
DROP TRIGGER runs_conc_requeued ON runs;
CREATE TRIGGER runs_conc_requeued AFTER UPDATE OF status ON runs
    FOR EACH ROW WHEN (NEW.conc_key IS NOT NULL
                       AND opsrun_conc_requeued_wanted(NEW.status, OLD.status, NEW.conc_key,
                                                       NEW.conc_strategy, OLD.approval_state))
    EXECUTE FUNCTION opsrun_conc_requeued();

-- runs_conc_freed (migration 022).
CREATE FUNCTION opsrun_conc_freed_wanted(o_conc_key text, o_status text, n_status text)
RETURNS boolean LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN o_conc_key IS NOT NULL AND o_status IN ('running', 'cancelling')
        AND n_status NOT IN ('running', 'cancelling');
END
$$;
DROP TRIGGER runs_conc_freed ON runs;
CREATE TRIGGER runs_conc_freed AFTER UPDATE OF status ON runs
    FOR EACH ROW WHEN (OLD.conc_key IS NOT NULL
                       AND opsrun_conc_freed_wanted(OLD.conc_key, OLD.status, NEW.status))
    EXECUTE FUNCTION opsrun_conc_freed();

-- runs_wf_approved (migration 024).
CREATE FUNCTION opsrun_wf_approved_wanted(n_wf_def jsonb, n_status text,
                                          o_approval_state text, n_approval_state text)
RETURNS boolean LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN n_wf_def IS NOT NULL AND n_status = 'waiting' AND o_approval_state = 'pending'
        AND n_approval_state IS DISTINCT FROM 'pending';
END
$$;
DROP TRIGGER runs_wf_approved ON runs;
CREATE TRIGGER runs_wf_approved AFTER UPDATE OF status ON runs
    FOR EACH ROW WHEN (NEW.wf_def IS NOT NULL
                       AND opsrun_wf_approved_wanted(NEW.wf_def, NEW.status, OLD.approval_state,
                                                     NEW.approval_state))
    EXECUTE FUNCTION opsrun_wf_started();

-- runs_wf_ended (migration 026).
CREATE FUNCTION opsrun_wf_ended_wanted(n_wf_def jsonb, n_status text, o_status text,
                                       n_wf_steps jsonb)
RETURNS boolean LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN n_wf_def IS NOT NULL AND n_status = 'completed' AND o_status <> 'completed'
        AND n_wf_steps @? '$.* ? (@.state == "active")';
END
$$;
DROP TRIGGER runs_wf_ended ON runs;
CREATE TRIGGER runs_wf_ended AFTER UPDATE OF status ON runs
    FOR EACH ROW WHEN (NEW.wf_def IS NOT NULL
                       AND opsrun_wf_ended_wanted(NEW.wf_def, NEW.status, OLD.status,
                                                  NEW.wf_steps))
    EXECUTE FUNCTION opsrun_wf_ended();

-- runs_wf_hold (migration 026).
CREATE FUNCTION opsrun_wf_hold_wanted(n_wf_def jsonb, n_status text, o_status text,
                                      n_summary_counts jsonb)
RETURNS boolean LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN n_wf_def IS NOT NULL AND n_status IS DISTINCT FROM o_status
        AND (n_status = 'queued'
             OR (n_status = 'completed' AND o_status <> 'completed'
                 AND n_summary_counts IS NULL));
END
$$;
DROP TRIGGER runs_wf_hold ON runs;
CREATE TRIGGER runs_wf_hold BEFORE UPDATE OF status ON runs
    FOR EACH ROW WHEN (NEW.wf_def IS NOT NULL
                       AND opsrun_wf_hold_wanted(NEW.wf_def, NEW.status, OLD.status,
                                                 NEW.summary_counts))
    EXECUTE FUNCTION opsrun_wf_hold();

-- runs_wf_step_note (migration 026).
CREATE FUNCTION opsrun_wf_step_note_wanted(n_step_name text, n_status text, o_status text)
RETURNS boolean LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN n_step_name IS NOT NULL AND n_status = 'completed' AND o_status <> 'completed';
END
$$;
DROP TRIGGER runs_wf_step_note ON runs;
CREATE TRIGGER runs_wf_step_note BEFORE UPDATE OF status ON runs
    FOR EACH ROW WHEN (NEW.step_name IS NOT NULL
                       AND opsrun_wf_step_note_wanted(NEW.step_name, NEW.status, OLD.status))
    EXECUTE FUNCTION opsrun_wf_note();

-- runs_approval_requested (migration 018).
CREATE FUNCTION opsrun_approval_requested_wanted(n_approval_state text, n_status text,
                                                 n_reacts integer)
RETURNS boolean LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN n_approval_state = 'pending' AND n_status = 'waiting' AND n_reacts & 4 <> 0;
END
$$;
DROP TRIGGER runs_approval_requested ON runs;
CREATE TRIGGER runs_approval_requested AFTER INSERT ON runs
    FOR EACH ROW WHEN (NEW.reacts & 4 <> 0
                       AND opsrun_approval_requested_wanted(NEW.approval_state, NEW.status,
                                                            NEW.reacts))
    EXECUTE FUNCTION opsrun_approval_requested();

-- runs_conc_insert (migration 022).
CREATE FUNCTION opsrun_conc_insert_wanted(n_conc_group text, n_status text,
                                          n_conc_strategy text)
RETURNS boolean LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN n_conc_group IS NOT NULL
        AND (n_status = 'completed'
             OR (n_status = 'queued'
                 AND n_conc_strategy IN ('keep_newest', 'cancel_in_progress')));
END
$$;
DROP TRIGGER runs_conc_insert ON runs;
CREATE TRIGGER runs_conc_insert AFTER INSERT ON runs
    FOR EACH ROW WHEN (NEW.conc_group IS NOT NULL
                       AND opsrun_conc_insert_wanted(NEW.conc_group, NEW.status,
                                                     NEW.conc_strategy))
    EXECUTE FUNCTION opsrun_conc_inserted();

-- runs_poll_enter_insert (migration 024).
CREATE FUNCTION opsrun_poll_enter_insert_wanted(n_status text, n_approval_state text,
                                                n_wf_def jsonb)
RETURNS boolean LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN n_status = 'waiting' AND n_approval_state IS DISTINCT FROM 'pending'
        AND n_wf_def IS NULL;
END
$$;
DROP TRIGGER runs_poll_enter_insert ON runs;
CREATE TRIGGER runs_poll_enter_insert AFTER INSERT ON runs
    FOR EACH ROW WHEN (NEW.status = 'waiting'
                       AND opsrun_poll_enter_insert_wanted(NEW.status, NEW.approval_state,
                                                           NEW.wf_def))
    EXECUTE FUNCTION opsrun_run_polls_enter();

-- The statement triggers of migration 026 that advance the workflows a
-- statement noted: the same condition, with the depth made text by a
-- cast. `text || integer` is textanycat, an SQL function, whose body
-- PostgreSQL parsed again to inline it for every statement that inserted
-- or updated runs (3 % of the completion batch's time in the profile).
DROP TRIGGER runs_wf_poked_update ON runs;
CREATE TRIGGER runs_wf_poked_update AFTER UPDATE ON runs
    FOR EACH STATEMENT
    WHEN (current_setting('opsrun.wf_poke_' || pg_trigger_depth()::text, true) <> '')
    EXECUTE FUNCTION opsrun_wf_poked();
DROP TRIGGER runs_wf_poked_insert ON runs;
CREATE TRIGGER runs_wf_poked_insert AFTER INSERT ON runs
    FOR EACH STATEMENT
    WHEN (current_setting('opsrun.wf_poke_' || pg_trigger_depth()::text, true) <> '')
    EXECUTE FUNCTION opsrun_wf_poked();
