-- 018_approvals: runs that wait for a person before their action starts.
--
-- A run of a run type with "approval" is inserted in 'waiting' with
-- approval_state 'pending': it holds no worker, counts against no cap, and
-- has no external job, so it must never reach the poller. From there one
-- statement moves it on:
--   approve        'queued', approval_state 'approved' (due now, or at its
--                  run_at when that is later)
--   reject         'completed'/'cancelled', approval_state 'rejected',
--                  error code "rejected"
--   expiry         at approval_expires_at, as approval_on_timeout says:
--                  'reject' as a rejection (error code "approval_expired"),
--                  'approve' as an approval; approval_state 'expired' and
--                  approval_decided_by 'system' either way
--   cancel         as any waiting run ('completed'/'cancelled'); the state
--                  stays 'pending' in the row and reads 'cancelled' in the
--                  run object, so a binary from before this migration can
--                  cancel such a run too.
-- Every decision is fenced on the run still awaiting approval (pending
-- and waiting), so of two deciders exactly one wins.
--
-- A run that starts waiting for approval owes the approval_requested
-- notifications its type's rules name (migration 017's seam,
-- opsrun_notify_event), in the transaction that inserts it, whichever
-- statement does (a submission, a batch, a retry, a bulk retry).
--
-- Only additions: a binary from before this migration keeps working beside
-- one after it (it makes no such runs, and its run objects carry the new
-- member too, as they are built here).
ALTER TABLE runs ADD COLUMN approval_state      text,
                 ADD COLUMN approval_expires_at timestamptz,
                 ADD COLUMN approval_on_timeout text,
                 ADD COLUMN approval_decided_by text,
                 ADD COLUMN approval_decided_at timestamptz,
                 ADD COLUMN approval_comment    text;

-- The runs awaiting approval by when they expire, for the expiry thread
-- (the next one due, and the due ones): small, only runs awaiting approval.
CREATE INDEX runs_approval_due ON runs (approval_expires_at)
    WHERE approval_state = 'pending' AND status = 'waiting';
-- The same runs as GET /runs?approval=pending lists them, newest first.
CREATE INDEX runs_approval_list ON runs (tenant, created_at DESC, id DESC)
    WHERE approval_state = 'pending' AND status = 'waiting';

-- A run awaiting approval has no external job: it gets no row in run_polls
-- (migration 012), so no poller ever checks it.
DROP TRIGGER runs_poll_enter_insert ON runs;
CREATE TRIGGER runs_poll_enter_insert AFTER INSERT ON runs
    FOR EACH ROW WHEN (NEW.status = 'waiting' AND NEW.approval_state IS DISTINCT FROM 'pending')
    EXECUTE FUNCTION opsrun_run_polls_enter();

-- A new run awaiting approval: its approval_requested notifications, when
-- its type's rules name that transition (runs.reacts bit 4). The WHEN
-- keeps every other insert free of it.
CREATE FUNCTION opsrun_approval_requested() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM opsrun_notify_event(NEW, 'approval_requested');
    RETURN NULL;
END
$$;
CREATE TRIGGER runs_approval_requested AFTER INSERT ON runs
    FOR EACH ROW WHEN (NEW.approval_state = 'pending' AND NEW.status = 'waiting' AND NEW.reacts & 4 <> 0)
    EXECUTE FUNCTION opsrun_approval_requested();

-- A follow-up (migration 017) is a new run like any other: of a type with
-- approval, it waits too. The rules carry each type's approval (written by
-- every replica at start; NULL for none, and for rows a binary from before
-- this migration wrote), and opsrun_follow_ups is 017's but for the
-- insert's approval columns and the "submitted" event's status and words.
ALTER TABLE run_type_rules ADD COLUMN approval_timeout_s  integer,
                           ADD COLUMN approval_on_timeout text;

CREATE OR REPLACE FUNCTION opsrun_follow_ups(r runs, t run_type_rules) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    f record;
    c run_type_rules;
    x record;
    v_doc jsonb;
    v_id text;
    v_at timestamptz;
    v_created timestamptz;
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
        INSERT INTO runs (tenant, id, type, priority, run_at, max_attempts, timeout_s, input,
                          identity_hash, request_hash, initiator, parent_id, chain_depth, reacts,
                          status, approval_state, approval_expires_at, approval_on_timeout)
        VALUES (r.tenant, v_id, f.run_type, r.priority, v_at, c.max_attempts, c.timeout_s, x.v,
                opsrun_identity(r.tenant, f.run_type, 'run_id', v_id),
                opsrun_identity(r.tenant, r.id, 'follow_up', f.k::text),
                r.initiator, r.id, r.chain_depth + 1, c.reacts,
                CASE WHEN c.approval_timeout_s IS NULL THEN 'queued' ELSE 'waiting' END,
                CASE WHEN c.approval_timeout_s IS NOT NULL THEN 'pending' END,
                now() + make_interval(secs => c.approval_timeout_s),
                CASE WHEN c.approval_timeout_s IS NOT NULL THEN c.approval_on_timeout END)
        ON CONFLICT DO NOTHING
        RETURNING created_at, status, approval_expires_at INTO v_created, v_status, v_expires;
        IF NOT FOUND THEN
            PERFORM opsrun_follow_up_event(r, format(
                'follow-up %s (%s) not created: a run with id %s exists', f.k, f.run_type, v_id));
            CONTINUE;
        END IF;
        INSERT INTO run_events (tenant, run_id, type, status, outcome, progress, step, message,
                                run_created_at)
        VALUES (r.tenant, v_id, 'status', v_status, 'pending', 0, NULL,
                format('submitted as follow-up %s of %s', f.k, r.id)
                || CASE WHEN v_status = 'waiting'
                        THEN '; awaiting approval until ' || opsrun_ts(v_expires) ELSE '' END,
                v_created);
        PERFORM opsrun_follow_up_event(r, format('follow-up %s (%s) created: %s%s', f.k,
            f.run_type, v_id, CASE WHEN coalesce(f.delay_s, 0) > 0
                                   THEN format(', due in %s s', f.delay_s) ELSE '' END));
    END LOOP;
END
$$;

-- The run object gains "approval" (after "schedule"): {"state",
-- "requested_at", "expires_at", "on_timeout", "decided_by", "decided_at",
-- "comment"}, null for a run of a type without approval. The other members
-- and their order are those of migration 017 (with "parent_id").
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
            'comment', r.approval_comment) END)
$$;
