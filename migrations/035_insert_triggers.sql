-- 035_insert_triggers: the row triggers on an insert of runs made fewer,
-- as migration 034 did for a change of status: every statement that
-- inserts runs (a submission, a retry, a follow-up, a workflow's steps)
-- prepares the WHEN of every row trigger it can fire before its first row.
--
--   BEFORE  runs_fill      runs_conc_fill, runs_wf_fill
--   AFTER   runs_inserted  runs_approval_requested, runs_conc_insert,
--                          runs_poll_enter_insert
--
-- Each function makes, in order, the tests of the triggers it replaces
-- (their names' order), each on the row as the one before left it, and
-- does what each did, its body word for word but for its early returns,
-- which leave a labelled block instead. The gates are the union of the old
-- one-column gates: a run that uses no feature fires neither trigger. A row
-- past a gate whose whole condition was false (a queued run of a
-- cancel_newest key, a run inserted waiting for approval without a
-- notification of it) fired no trigger before and fires runs_inserted now,
-- whose function finds nothing to do: in instructions, an insert of 16 such
-- keyed runs a statement costs 4,700 a run more, one of plain runs 6,000
-- less (bench/README.md, "Status triggers"), the trade migration 034 made.
-- Every test reads only NEW, the same when an AFTER event is queued and
-- when it fires. A binary from before
-- this migration keeps working beside one after it: everything here is
-- inside the database.

-- BEFORE INSERT: a concurrency key (migration 022), then a workflow's
-- definition and steps (migration 026).
CREATE FUNCTION opsrun_fill() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    t record;
    v_n bigint;
    v_def jsonb;
    v_old jsonb;
    v_name text;
BEGIN
    -- runs_conc_fill (migration 022)
    IF NEW.reacts & 256 <> 0 THEN
        <<conc>>
        BEGIN
            SELECT r.conc_group, r.conc_parts, r.conc_max, r.conc_strategy INTO t
              FROM run_type_rules r WHERE r.type = NEW.type;
            IF t.conc_group IS NULL THEN
                EXIT conc;
            END IF;
            NEW.conc_group := t.conc_group;
            NEW.conc_max := t.conc_max;
            NEW.conc_strategy := t.conc_strategy;
            NEW.conc_key := opsrun_conc_key(t.conc_parts, NEW.tenant, NEW.input);
            NEW.conc_held := false;
            IF NEW.status = 'completed' THEN
                EXIT conc;
            END IF;
            IF NEW.conc_key IS NULL THEN
                IF opsrun_conc_joins(NEW) THEN
                    EXIT conc;
                END IF;
                NEW.status := 'completed';
                NEW.outcome := 'failed';
                NEW.completed_at := now();
                NEW.error := jsonb_build_object('code', 'invalid_concurrency_key', 'message',
                    format('the concurrency key of run type "%s" could not be made: %s',
                           NEW.type, opsrun_conc_problem(t.conc_parts, NEW.input)));
                EXIT conc;
            END IF;
            -- A run that waits for approval is judged when it is approved
            -- (runs_conc_requeued), not now: it may never be.
            IF NEW.conc_strategy = 'cancel_newest' AND NEW.status = 'queued' THEN
                PERFORM opsrun_conc_lock(NEW.tenant, NEW.conc_group, NEW.conc_key);
                IF opsrun_conc_joins(NEW) THEN
                    EXIT conc;
                END IF;
                SELECT count(*) INTO v_n FROM runs r
                 WHERE r.tenant = NEW.tenant AND r.conc_group = NEW.conc_group
                   AND r.conc_key = NEW.conc_key
                   AND r.status IN ('queued', 'running', 'cancelling') AND r.status <> 'completed';
                IF v_n >= NEW.conc_max THEN
                    NEW.status := 'completed';
                    NEW.outcome := 'cancelled';
                    NEW.completed_at := now();
                    NEW.error := jsonb_build_object('code', 'concurrency_limit', 'message',
                        format('concurrency key "%s" of group "%s" is full: %s queued or running, '
                               'max_running %s', NEW.conc_key, NEW.conc_group, v_n,
                               NEW.conc_max));
                END IF;
            END IF;
        END;
    END IF;
    -- runs_wf_fill (migration 026)
    IF NEW.reacts & 512 <> 0 THEN
        <<wf>>
        BEGIN
            SELECT w.workflow INTO v_def FROM run_type_rules w WHERE w.type = NEW.type;
            IF v_def IS NULL OR NEW.status = 'completed' THEN
                EXIT wf;
            END IF;
            IF NEW.retry_of IS NOT NULL THEN
                SELECT o.wf_steps INTO v_old FROM runs o
                 WHERE o.tenant = NEW.tenant AND o.id = NEW.retry_of;
            END IF;
            NEW.wf_def := v_def;
            NEW.wf_steps := (SELECT jsonb_object_agg(e ->> 'name',
                                                     CASE WHEN s.id IS NULL
                                                          THEN '{"state": "pending"}'
                                                          ELSE jsonb_build_object(
                                                              'state', 'succeeded',
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
                PERFORM set_config(v_name, coalesce(current_setting(v_name, true), '')
                                           || chr(30) || NEW.tenant || chr(31) || NEW.id
                                           || chr(30), true);
            END IF;
        END;
    END IF;
    RETURN NEW;
END
$$;
DROP TRIGGER runs_conc_fill ON runs;
DROP TRIGGER runs_wf_fill ON runs;
DROP FUNCTION opsrun_conc_fill();
DROP FUNCTION opsrun_wf_fill();
CREATE TRIGGER runs_fill BEFORE INSERT ON runs
    FOR EACH ROW WHEN (NEW.reacts & 768 <> 0) EXECUTE FUNCTION opsrun_fill();

-- AFTER INSERT: an approval asked for (migration 018), a concurrency key's
-- decision carried out (migration 022), a run that waits on a remote job
-- from its insert (migration 024).
CREATE FUNCTION opsrun_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    t run_type_rules;
BEGIN
    -- runs_approval_requested (migrations 018, 029)
    IF NEW.reacts & 4 <> 0
       AND opsrun_approval_requested_wanted(NEW.approval_state, NEW.status, NEW.reacts) THEN
        PERFORM opsrun_notify_event(NEW, 'approval_requested');
    END IF;
    -- runs_conc_insert (migrations 022, 029)
    IF NEW.conc_group IS NOT NULL
       AND opsrun_conc_insert_wanted(NEW.conc_group, NEW.status, NEW.conc_strategy) THEN
        <<conc>>
        BEGIN
            IF NEW.status <> 'completed' THEN
                PERFORM opsrun_conc_supersede(NEW);
                EXIT conc;
            END IF;
            IF NEW.error ->> 'code' NOT IN ('invalid_concurrency_key', 'concurrency_limit') THEN
                EXIT conc;
            END IF;
            INSERT INTO run_events (tenant, run_id, type, status, outcome, progress, step,
                                    message, run_created_at)
            VALUES (NEW.tenant, NEW.id, 'status', NEW.status, NEW.outcome, NEW.progress,
                    NEW.step,
                    CASE WHEN NEW.outcome = 'failed' THEN 'failed: ' ELSE 'cancelled: ' END
                    || (NEW.error ->> 'message'), NEW.created_at);
            IF NEW.reacts & opsrun_event_bit(NEW.outcome) <> 0 THEN
                SELECT * INTO t FROM run_type_rules WHERE type = NEW.type;
                IF FOUND THEN
                    PERFORM opsrun_notify(NEW, NEW.outcome, t.notify);
                    IF t.follow_ups <> '[]' THEN
                        PERFORM opsrun_follow_ups(NEW, t);
                    END IF;
                END IF;
            END IF;
        END;
    END IF;
    -- runs_poll_enter_insert (migrations 024, 029)
    IF NEW.status = 'waiting'
       AND opsrun_poll_enter_insert_wanted(NEW.status, NEW.approval_state, NEW.wf_def) THEN
        INSERT INTO run_polls (tenant, run_id, type, next_poll_at, poll_count)
        VALUES (NEW.tenant, NEW.id, NEW.type, coalesce(NEW.next_poll_at, now()), NEW.poll_count)
        ON CONFLICT (tenant, run_id) DO UPDATE SET type = EXCLUDED.type,
            next_poll_at = EXCLUDED.next_poll_at, poll_count = EXCLUDED.poll_count,
            poll_owner = NULL;
    END IF;
    RETURN NULL;
END
$$;
DROP TRIGGER runs_approval_requested ON runs;
DROP TRIGGER runs_conc_insert ON runs;
DROP TRIGGER runs_poll_enter_insert ON runs;
DROP FUNCTION opsrun_approval_requested();
DROP FUNCTION opsrun_conc_inserted();
DROP FUNCTION opsrun_run_polls_enter();
CREATE TRIGGER runs_inserted AFTER INSERT ON runs
    FOR EACH ROW WHEN (NEW.reacts & 4 <> 0 OR NEW.conc_group IS NOT NULL
                       OR NEW.status = 'waiting')
    EXECUTE FUNCTION opsrun_inserted();
