-- 001_core: runs (the queue), run_events (history, SSE ids), workers.

CREATE TABLE runs (
    tenant          text        NOT NULL,
    id              text        NOT NULL,
    type            text        NOT NULL,
    status          text        NOT NULL DEFAULT 'queued'
                    CHECK (status IN ('queued', 'running', 'waiting', 'cancelling', 'completed')),
    outcome         text        NOT NULL DEFAULT 'pending'
                    CHECK (outcome IN ('pending', 'succeeded', 'partially_succeeded', 'failed',
                                       'cancelled', 'timed_out')),
    priority        integer     NOT NULL DEFAULT 0,
    run_at          timestamptz NOT NULL DEFAULT now(),
    attempt         integer     NOT NULL DEFAULT 0,
    max_attempts    integer     NOT NULL CHECK (max_attempts >= 1),
    timeout_s       integer     NOT NULL CHECK (timeout_s >= 1),
    deadline_at     timestamptz,
    worker_id       text,
    heartbeat_at    timestamptz,
    progress        smallint    NOT NULL DEFAULT 0 CHECK (progress BETWEEN 0 AND 100),
    step            text,
    input           jsonb       NOT NULL,
    result          jsonb,
    error           jsonb,
    summary_counts  jsonb,
    failure_summary jsonb,
    context         jsonb,
    external_id     text,
    poll_state      jsonb,
    next_poll_at    timestamptz,
    poll_started_at timestamptz,
    identity_hash   text        NOT NULL,
    request_hash    text        NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    started_at      timestamptz,
    completed_at    timestamptz,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, id)
);

-- Dedupe is a database guarantee: one active run per identity and tenant.
CREATE UNIQUE INDEX runs_active_identity ON runs (tenant, identity_hash)
    WHERE status <> 'completed';
-- Claim order: priority (high first), then run_at, then creation.
CREATE INDEX runs_claim ON runs (priority DESC, run_at, created_at) WHERE status = 'queued';
-- The next delayed run, for the dispatcher's sleep.
CREATE INDEX runs_queued_at ON runs (run_at) WHERE status = 'queued';
-- Runs a worker holds: heartbeats, cancel checks, running counts, orphan scans.
CREATE INDEX runs_held ON runs (worker_id, type) WHERE status IN ('running', 'cancelling');
CREATE INDEX runs_heartbeat ON runs (heartbeat_at) WHERE status IN ('running', 'cancelling');
-- GET /runs, newest first, and its cursor.
CREATE INDEX runs_list ON runs (tenant, created_at DESC, id DESC);
CREATE INDEX runs_external ON runs (tenant, external_id) WHERE external_id IS NOT NULL;
-- Retention.
CREATE INDEX runs_completed ON runs (completed_at) WHERE status = 'completed';

CREATE TABLE run_events (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant      text        NOT NULL,
    run_id      text        NOT NULL,
    type        text        NOT NULL CHECK (type IN ('status', 'progress')),
    status      text        NOT NULL,
    outcome     text        NOT NULL,
    progress    smallint    NOT NULL,
    step        text,
    message     text,
    -- The writing transaction: lets a global reader consume events only below
    -- the oldest running transaction, so commit order never makes it skip one.
    xid         xid8        NOT NULL DEFAULT pg_current_xact_id(),
    created_at  timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (tenant, run_id) REFERENCES runs (tenant, id) ON DELETE CASCADE
);
CREATE INDEX run_events_run ON run_events (tenant, run_id, id);

CREATE TABLE workers (
    id            text        PRIMARY KEY,
    host          text        NOT NULL,
    pid           integer     NOT NULL,
    version       text        NOT NULL,
    status        text        NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'stopped')),
    threads       integer     NOT NULL,
    busy          integer     NOT NULL DEFAULT 0,
    runs_held     integer     NOT NULL DEFAULT 0,
    started_at    timestamptz NOT NULL DEFAULT now(),
    heartbeat_at  timestamptz NOT NULL DEFAULT now(),
    stopped_at    timestamptz
);
CREATE INDEX workers_running ON workers (heartbeat_at) WHERE status = 'running';

CREATE FUNCTION opsrun_ts(t timestamptz) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
$$;

-- The API representation of a run (docs/api.md, GET /runs/{id}).
CREATE FUNCTION opsrun_run_json(r runs) RETURNS json
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT json_build_object(
        'id', r.id, 'tenant', r.tenant, 'type', r.type, 'status', r.status,
        'outcome', r.outcome, 'priority', r.priority, 'attempt', r.attempt,
        'max_attempts', r.max_attempts, 'progress', r.progress, 'step', r.step,
        'input', r.input, 'result', r.result, 'error', r.error,
        'summary_counts', r.summary_counts, 'failure_summary', r.failure_summary,
        'context', r.context, 'external_id', r.external_id, 'worker_id', r.worker_id,
        'created_at', opsrun_ts(r.created_at), 'run_at', opsrun_ts(r.run_at),
        'started_at', opsrun_ts(r.started_at), 'completed_at', opsrun_ts(r.completed_at),
        'updated_at', opsrun_ts(r.updated_at))
$$;

CREATE FUNCTION opsrun_event_json(e run_events) RETURNS json
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT json_build_object(
        'id', e.id, 'run_id', e.run_id, 'type', e.type, 'status', e.status,
        'outcome', e.outcome, 'progress', e.progress, 'step', e.step,
        'message', e.message, 'created_at', opsrun_ts(e.created_at))
$$;

-- Claim up to p_limit due runs for p_worker. Claims from every replica are
-- serialised by one transaction-scoped advisory lock, so the running counts
-- read after taking it include every earlier claim: queue.max_running and the
-- per-type caps can never be exceeded, not even briefly (COUNT-then-claim
-- without the lock overshoots under concurrency). Transitions out of running
-- only lower the counts, so they need no lock. Candidates are still taken
-- with SKIP LOCKED so a claim never waits behind a cancel or a heartbeat.
-- p_types lists the run types this replica can execute; p_caps their caps
-- (NULL = none), in the same order.
CREATE FUNCTION opsrun_claim(p_worker text, p_limit integer, p_max_running integer,
                             p_types text[], p_caps integer[])
RETURNS SETOF runs
LANGUAGE plpgsql AS $$
DECLARE
    v_room integer;
BEGIN
    PERFORM pg_advisory_xact_lock(7260017001);
    SELECT p_max_running - count(*) INTO v_room
      FROM runs WHERE status IN ('running', 'cancelling');
    v_room := least(v_room, p_limit);
    IF v_room <= 0 THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH caps AS (
        SELECT t.type, t.cap,
               t.cap - (SELECT count(*) FROM runs h
                         WHERE h.type = t.type AND h.status IN ('running', 'cancelling')) AS room
          FROM unnest(p_types, p_caps) AS t(type, cap)
    ), cand AS (
        SELECT r.tenant, r.id, r.type, r.priority, r.run_at, r.created_at
          FROM runs r
         WHERE r.status = 'queued' AND r.run_at <= now() AND r.type = ANY (p_types)
           AND NOT EXISTS (SELECT 1 FROM caps c
                            WHERE c.type = r.type AND c.cap IS NOT NULL AND c.room <= 0)
         ORDER BY r.priority DESC, r.run_at, r.created_at
         LIMIT v_room
           FOR UPDATE OF r SKIP LOCKED
    ), ranked AS (
        SELECT cand.*, row_number() OVER (PARTITION BY cand.type
                                          ORDER BY cand.priority DESC, cand.run_at,
                                                   cand.created_at) AS rn
          FROM cand
    ), picked AS (
        SELECT k.tenant, k.id FROM ranked k JOIN caps c ON c.type = k.type
         WHERE c.cap IS NULL OR k.rn <= c.room
    ), upd AS (
        UPDATE runs r
           SET status = 'running', worker_id = p_worker, attempt = r.attempt + 1,
               heartbeat_at = now(), started_at = coalesce(r.started_at, now()),
               deadline_at = now() + make_interval(secs => r.timeout_s),
               progress = 0, step = NULL, error = NULL, updated_at = now()
          FROM picked
         WHERE r.tenant = picked.tenant AND r.id = picked.id
        RETURNING r.*
    ), ev AS (
        INSERT INTO run_events (tenant, run_id, type, status, outcome, progress, step, message)
        SELECT u.tenant, u.id, 'status', u.status, u.outcome, u.progress, u.step,
               format('attempt %s started by %s', u.attempt, p_worker)
          FROM upd u
    )
    SELECT * FROM upd;
END
$$;
