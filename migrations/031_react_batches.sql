-- 031_react_batches: the deliveries a statement's transitions owe are
-- written by one INSERT at the statement's end, not one per run.
--
-- runs_react (migration 017) ran opsrun_react for each run whose
-- transition its rules name: a PL/pgSQL call with the row, a lookup of the
-- rules, and an INSERT of that run's deliveries, whose start (the
-- executor of the outbox with its indexes, the subquery over the rules)
-- was paid run by run. Completion batches of 16 runs each notifying on
-- success took 129 us a run against 61 without rules at migration 029
-- (psql-driven; bench/README.md, "Notification statements"); with 030
-- (of which the foreign key's check, about 10) and the deliveries of the
-- batch written together, 101 against 62.
--
-- Now, for a run that is not a workflow, a BEFORE row trigger with the
-- same condition (runs_react_note) notes the run and its event in a
-- transaction-local setting, opsrun.react_<depth> (the statement's
-- trigger depth, so that a statement run by a trigger of another keeps
-- its own notes, as the workflows' notes of migration 026 do), and a
-- statement trigger whose WHEN reads that setting (runs_react_batch)
-- writes every noted run's deliveries with one INSERT, each with the run
-- object as the statement left it, in the order the runs were noted, then
-- creates the follow-ups of those that ended, run by run (opsrun_follow_ups,
-- as before; only when some type has follow-ups). A BEFORE trigger, because
-- the statement trigger's WHEN is evaluated once every row is written,
-- before the AFTER row triggers run; for a run that is not a workflow no
-- later BEFORE trigger changes the row (runs_wf_hold is a workflow's), so
-- the transition noted is the one written. A run queued again with a
-- concurrency key is not noted: runs_conc_requeued, an AFTER row trigger
-- of the same statement, may end it at once (keep_newest), and read at
-- the statement's end its "retrying" would carry the cancelled run, and
-- its end's follow-ups would be made twice; runs_react_note writes that
-- "retrying" at once instead, with the row as the transition leaves it,
-- so that it also comes before the end's (which runs_react, after
-- runs_conc_requeued by name, wrote after it since migration 022).
-- runs_react stays for workflows (whose row its advance may change again
-- in the statement) and for a statement that notes more than 32 KB (some
-- 600 runs: each note copies the setting), whose further runs it takes
-- one by one, as before: runs_react_note sets opsrun.react_over_<depth>
-- instead of noting them, and runs_react's condition reads it (but for a
-- run queued again with a concurrency key, whose "retrying" is written
-- already). Any
-- trigger that may change a run's status again in the statement that
-- changed it must be met in the same way. Only a noted end makes
-- follow-ups: a run whose start or retry was noted is not followed up even
-- if something ended it since (that end owes its own, in its statement).
--
-- A statement that notes nothing pays runs_react_note's gate for each row
-- (the gates of migration 029) and one false WHEN. What is owed, and when
-- (in the transaction of the transition) is unchanged; so are the triggers'
-- names and opsrun_react. A binary from before this migration keeps
-- working beside one after it: everything here is inside the database.

-- The notifiers that event is owed to under rules (a run_type_rules.notify),
-- "*" standing for every outcome: what opsrun_notify (migration 017)
-- wrote inline, shared with opsrun_react_batch. SQL, so that PostgreSQL
-- inlines it into the statement that reads it (in each function's plan,
-- made once a session).
CREATE FUNCTION opsrun_notifiers(p_rules jsonb, p_event text) RETURNS SETOF text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT DISTINCT x."to"
      FROM jsonb_to_recordset(p_rules) AS x("on" jsonb, "to" text)
     WHERE x."on" ? p_event
        OR (x."on" ? '*' AND p_event IN ('succeeded', 'partially_succeeded', 'failed',
                                         'cancelled', 'timed_out'))
$$;
CREATE OR REPLACE FUNCTION opsrun_notify(r runs, p_event text, p_rules jsonb) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO notifications (tenant, run_id, run_created_at, notifier, event, run)
    SELECT r.tenant, r.id, r.created_at, n.notifier, 'run.' || p_event, opsrun_run_json(r)
      FROM opsrun_notifiers(p_rules, p_event) AS n(notifier);
END
$$;

CREATE FUNCTION opsrun_react_note() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_depth text := (pg_trigger_depth() - 1)::text;
    v_notes text := coalesce(current_setting('opsrun.react_' || v_depth, true), '');
BEGIN
    IF NEW.conc_key IS NOT NULL AND NEW.status = 'queued' THEN -- retrying, see above
        PERFORM opsrun_notify(NEW, 'retrying', t.notify) FROM run_type_rules t
          WHERE t.type = NEW.type;
        RETURN NEW;
    END IF;
    IF octet_length(v_notes) < 32768 THEN
        PERFORM set_config('opsrun.react_' || v_depth,
                           v_notes || NEW.tenant || chr(31) || NEW.id || chr(31)
                           || CASE WHEN NEW.status = 'completed' THEN NEW.outcome
                                   WHEN NEW.status = 'running' THEN 'started'
                                   ELSE 'retrying' END || chr(30), true);
    ELSE
        PERFORM set_config('opsrun.react_over_' || v_depth, 'on', true);
    END IF;
    RETURN NEW;
END
$$;

-- Generic plans, with index paths only, as the claims' (migrations 022
-- and 030): with custom plans PostgreSQL planned the INSERT again at every
-- small batch (its generic plan, for ten notes, looked dearer than a
-- custom one for one), 1.3 ms each; and a generic plan made on a young
-- runs table must still look each run up by its key.
CREATE FUNCTION opsrun_react_batch() RETURNS trigger
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_bitmapscan = off
SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS $$
DECLARE
    v_depth text := (pg_trigger_depth() - 1)::text;
    v_notes text[] := string_to_array(rtrim(current_setting('opsrun.react_' || v_depth, true),
                                            chr(30)), chr(30));
    v record;
BEGIN
    PERFORM set_config('opsrun.react_' || v_depth, '', true);
    PERFORM set_config('opsrun.react_over_' || v_depth, '', true);
    -- Each run looked up by its key (OFFSET 0 keeps the lookup a lookup,
    -- whatever the planner thinks of the notes' count).
    INSERT INTO notifications (tenant, run_id, run_created_at, notifier, event, run)
    SELECT n.tenant, n.id, (l.r).created_at, d.notifier, 'run.' || n.event, opsrun_run_json(l.r)
      FROM (SELECT split_part(u.e, chr(31), 1) AS tenant, split_part(u.e, chr(31), 2) AS id,
                   split_part(u.e, chr(31), 3) AS event, u.o
              FROM unnest(v_notes) WITH ORDINALITY AS u(e, o)) n
     CROSS JOIN LATERAL (SELECT x AS r FROM runs x WHERE x.tenant = n.tenant AND x.id = n.id
                         OFFSET 0) l
      JOIN run_type_rules t ON t.type = (l.r).type
     CROSS JOIN LATERAL opsrun_notifiers(t.notify, n.event) AS d(notifier)
     ORDER BY n.o, d.notifier;
    IF NOT EXISTS (SELECT 1 FROM run_type_rules WHERE follow_ups <> '[]') THEN
        RETURN NULL;
    END IF;
    FOR v IN SELECT l.r, t
               FROM unnest(v_notes) WITH ORDINALITY AS u(e, o)
              CROSS JOIN LATERAL (SELECT x AS r FROM runs x
                                   WHERE x.tenant = split_part(u.e, chr(31), 1)
                                     AND x.id = split_part(u.e, chr(31), 2) OFFSET 0) l
               JOIN run_type_rules t ON t.type = (l.r).type
              WHERE split_part(u.e, chr(31), 3) NOT IN ('started', 'retrying')
                AND (l.r).status = 'completed' AND t.follow_ups <> '[]'
              ORDER BY u.o LOOP
        PERFORM opsrun_follow_ups(v.r, v.t);
    END LOOP;
    RETURN NULL;
END
$$;

CREATE TRIGGER runs_react_note BEFORE UPDATE OF status ON runs
    FOR EACH ROW WHEN (NEW.reacts & 255 <> 0 AND NEW.wf_def IS NULL
                       AND opsrun_react_wanted(NEW.status, OLD.status, NEW.outcome, NEW.reacts,
                                               OLD.started_at, NEW.attempt, OLD.attempt))
    EXECUTE FUNCTION opsrun_react_note();
CREATE TRIGGER runs_react_batch AFTER UPDATE OF status ON runs
    FOR EACH STATEMENT
    WHEN (current_setting('opsrun.react_' || pg_trigger_depth()::text, true) <> '')
    EXECUTE FUNCTION opsrun_react_batch();
DROP TRIGGER runs_react ON runs;
CREATE TRIGGER runs_react AFTER UPDATE OF status ON runs
    FOR EACH ROW WHEN (NEW.reacts & 255 <> 0
                       AND (NEW.wf_def IS NOT NULL
                            OR ((NEW.conc_key IS NULL OR NEW.status <> 'queued')
                                AND current_setting('opsrun.react_over_'
                                                    || pg_trigger_depth()::text, true) = 'on'))
                       AND opsrun_react_wanted(NEW.status, OLD.status, NEW.outcome, NEW.reacts,
                                               OLD.started_at, NEW.attempt, OLD.attempt))
    EXECUTE FUNCTION opsrun_react();
