-- 003_event_horizon: the global reader's safe horizon over run_events ids
-- (docs/design-event-order.md, approach (d')).
--
-- An event id is taken when its row is inserted and becomes visible when its
-- transaction commits; the two orders differ, so a reader of
-- "id > last ORDER BY id" can move past an id that commits later and skip it
-- for good. The writers stay as they are; the reader instead only moves up to
-- a horizon h once every transaction that may still hold an id <= h is gone:
--   1. opsrun_event_horizon(): h = the highest id handed out, THEN the virtual
--      transaction ids of every session holding RowExclusiveLock on
--      run_events (every writer takes that lock before it evaluates the id
--      and keeps it until its commit or abort is visible);
--   2. opsrun_events_settled(inflight), in a later statement: true once none
--      of those transactions is still running. From then on a new statement
--      sees every committed id <= h, and no id <= h can appear later.
--
-- Rules this relies on: never take event ids any other way than the identity
-- default of an INSERT (no nextval() outside it, no OVERRIDING SYSTEM VALUE);
-- the reader reads from the primary; no prepared (2PC) transactions write
-- events.

-- CACHE 1 is load-bearing: ids must be handed out in time order, which a
-- per-session cache of ids breaks (a session could hand out a cached id below
-- h after h was read). 1 is the identity's default; this states it, so no
-- later ALTER changes it by accident.
ALTER TABLE run_events ALTER COLUMN id SET CACHE 1;

-- Step 1. The order of the two reads matters (h first, then the locks);
-- plpgsql runs them in order. The caller's own session is left out: a reader
-- never writes events in the transaction it reads with.
CREATE FUNCTION opsrun_event_horizon(OUT h bigint, OUT inflight text[])
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    SELECT CASE WHEN s.is_called THEN s.last_value ELSE 0 END INTO h FROM run_events_id_seq s;
    SELECT coalesce(array_agg(l.virtualtransaction), '{}') INTO inflight
      FROM pg_locks l
     WHERE l.locktype = 'relation'
       AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
       AND l.relation = 'run_events'::regclass AND l.mode = 'RowExclusiveLock'
       AND l.pid IS DISTINCT FROM pg_backend_pid();
END
$$;

-- Step 2, in a later statement than step 1: true once none of the recorded
-- transactions is still running (each holds the lock on its own virtual
-- transaction id until it has ended).
CREATE FUNCTION opsrun_events_settled(p_inflight text[]) RETURNS boolean
LANGUAGE sql VOLATILE AS $$
    SELECT NOT EXISTS (SELECT 1 FROM pg_locks
                        WHERE locktype = 'virtualxid' AND virtualxid = ANY (p_inflight))
$$;

COMMENT ON COLUMN run_events.xid IS
    'The writing transaction, for diagnostics only. 001 meant it for a global reader '
    'ordering by (xid, id) below the oldest running transaction; measured wrong (xid order '
    'is not commit order, not even per run), see docs/design-event-order.md. Readers use '
    'the id horizon of opsrun_event_horizon()/opsrun_events_settled() and never this column.';
