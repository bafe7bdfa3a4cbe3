-- 004_streams: what the SSE streams (GET /runs/{id}/stream, GET /stream)
-- need beyond the id-horizon reader of 003.

-- The run as of one of its events: the run's current representation with
-- the event's status, outcome, progress and step. A stream sends this with
-- each event, so a reader that is behind still sees every state in order
-- (never a "progress 33" event carrying "completed"). It reuses
-- opsrun_run_json so the field list lives in one place.
CREATE FUNCTION opsrun_run_json_at(r runs, e run_events) RETURNS json
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
BEGIN
    r.status := e.status;
    r.outcome := e.outcome;
    r.progress := e.progress;
    r.step := e.step;
    RETURN opsrun_run_json(r);
END
$$;

-- The highest event id retention has ever deleted. A GET /stream resuming
-- from Last-Event-ID X below it may have missed events that are gone, so it
-- gets a reset and fresh snapshots instead of a replay with holes. Retention
-- deletes whole runs, so pruned ids are not a prefix of the ids: min(id) of
-- what is left cannot tell this, a mark can.
CREATE TABLE run_events_pruned (
    one  boolean PRIMARY KEY DEFAULT true CHECK (one),
    upto bigint  NOT NULL DEFAULT 0
);
INSERT INTO run_events_pruned DEFAULT VALUES;

-- The active runs of a tenant in id order, for the snapshots GET /stream
-- sends on connect (paged by id). Small: only runs not yet completed.
CREATE INDEX runs_active ON runs (tenant, id) WHERE status <> 'completed';
