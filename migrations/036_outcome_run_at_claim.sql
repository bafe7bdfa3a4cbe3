-- 036_outcome_run_at_claim: the delivery of a run's outcome takes its run
-- object when the notifier claims it, not when the run ends.
--
-- A delivery carries the run as it was at the transition it tells of
-- (docs/notifications.md). Until now the transition built that object
-- (opsrun_run_json) and wrote it into the outbox row, in the statement
-- that made the transition: for a completion batch of 16 runs each
-- notifying its success, 145,000 of the 327,000 instructions a run that
-- the deliveries added to it (bench/README.md, "An outcome's run object at
-- the claim"), paid on the engine's path, before the batch commits and its
-- workers take their next runs.
--
-- A run that has ended and is not a workflow no longer changes in anything
-- its object shows: nothing updates its status, outcome, result, error,
-- times or attempt again (a retry is a new run; after an end, the poller's
-- cleanup writes poll_owner, poll_state, hooks_at and hooks_attempts, and
-- a late log chunk log_seq, none of which the object of an ended run
-- shows: poll_owner only for a waiting one), and the deliveries owed for
-- it are deleted with it (migration 030's statement trigger on runs, in
-- the statement that deletes the run). So the object built when its
-- delivery is claimed is the one the transition would have built, byte for
-- byte, as long as opsrun_run_json stays what it is: a migration that
-- changes it changes the objects of the outcomes still owed, as it changes
-- GET /runs/:id. Any new statement that changes an ended run must keep
-- to this (store/run_state_sql.h says so too). A workflow's object shows
-- its steps (opsrun_wf_json), which may still change after its end; a
-- start, a retry or an approval asked for is followed by more changes. For
-- those the transition still writes the object.
--
-- 1. notifications.run may be NULL: an outcome of a run that is not a
--    workflow, written by opsrun_react_batch and opsrun_notify below.
-- 2. opsrun_deliveries_claim returns the stored object or, where there is
--    none, builds it from the run (one lookup by its key), in the claim's
--    statement, whose snapshot has the run whenever it has the delivery.
--    A row whose run is gone can only be made outside opsrun (runs
--    truncated, a partial restore, triggers disabled): it gets the JSON
--    null, which the notifier refuses to send (it gives the delivery up,
--    as for any object it cannot read), where a NULL made the previous
--    release's notifier crash.
--
-- Compatibility: a binary of the previous release claims deliveries only
-- through opsrun_deliveries_claim (migration 030), replaced here with the
-- same arguments and result, so its deliveries carry the run as before; it
-- never reads notifications.run otherwise. Dropping a NOT NULL is instant
-- and refuses no write.
ALTER TABLE notifications ALTER COLUMN run DROP NOT NULL;

-- Whether the delivery of p_event for a run takes the run's object at its
-- claim (NULL here): an outcome, of a run that is not a workflow.
CREATE FUNCTION opsrun_run_at_claim(p_event text, p_wf_def jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT p_wf_def IS NULL
       AND p_event IN ('succeeded', 'partially_succeeded', 'failed', 'cancelled', 'timed_out')
$$;

-- 031's, but for the object of an outcome.
CREATE OR REPLACE FUNCTION opsrun_notify(r runs, p_event text, p_rules jsonb) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO notifications (tenant, run_id, run_created_at, notifier, event, run)
    SELECT r.tenant, r.id, r.created_at, n.notifier, 'run.' || p_event,
           CASE WHEN NOT opsrun_run_at_claim(p_event, r.wf_def) THEN opsrun_run_json(r) END
      FROM opsrun_notifiers(p_rules, p_event) AS n(notifier);
END
$$;

-- 031's, but for the object of an outcome (the runs it notes are not
-- workflows).
CREATE OR REPLACE FUNCTION opsrun_react_batch() RETURNS trigger
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
    SELECT n.tenant, n.id, (l.r).created_at, d.notifier, 'run.' || n.event,
           CASE WHEN NOT opsrun_run_at_claim(n.event, (l.r).wf_def) THEN opsrun_run_json(l.r) END
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

-- 030's, but for a delivery without its run's object: built from the run,
-- looked up by its key (OFFSET 0 keeps it a lookup in the generic plan);
-- the JSON null when the run is gone.
CREATE OR REPLACE FUNCTION opsrun_deliveries_claim(p_owner text, p_notifiers text[],
                                                   p_rooms integer[], p_lease_ms integer)
RETURNS TABLE (id bigint, delivery_id uuid, tenant text, run_id text, notifier text, event text,
               run text, attempts integer, age_ms bigint)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_bitmapscan = off
SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH c AS (SELECT o.id
                 FROM unnest(p_notifiers, p_rooms) AS n(notifier, room)
                CROSS JOIN LATERAL (
                      SELECT o.id FROM notifications o
                       WHERE o.notifier = n.notifier AND o.next_at <= now()
                         AND NOT EXISTS (SELECT 1 FROM notifications p
                                          WHERE p.tenant = o.tenant AND p.run_id = o.run_id
                                            AND p.notifier = o.notifier AND p.id < o.id
                                         OFFSET 0)
                       ORDER BY o.next_at, o.id LIMIT n.room FOR UPDATE SKIP LOCKED) o)
    UPDATE notifications o SET attempts = o.attempts + 1, owner = p_owner,
                               next_at = now() + p_lease_ms * interval '1 millisecond'
      FROM c WHERE o.id = c.id
    RETURNING o.id, o.delivery_id, o.tenant, o.run_id, o.notifier, o.event,
              coalesce(o.run::text,
                       (SELECT opsrun_run_json(x)::text FROM runs x
                         WHERE x.tenant = o.tenant AND x.id = o.run_id OFFSET 0),
                       'null'),
              o.attempts, (extract(epoch FROM now() - o.created_at) * 1000)::bigint;
END
$$;
