-- 020_approval_due_and_retried: two corrections.
--
-- A run awaiting approval expires timeout_s after it is due, not after it
-- was made. A follow-up with delay_s (migration 017) is made when its
-- parent ends and due delay_s later; until now its approval expired
-- timeout_s after it was made, so a follow-up due in two hours whose type
-- gives an hour to decide expired before it was due. opsrun_follow_ups is
-- 018's but for approval_expires_at, greatest(now(), run_at) + timeout_s;
-- the statements of store/ that make runs (a submission with run_at, a
-- batch, a retry) write the same, through APPROVAL_INSERT_VALUES.
--
-- A bulk retry leaves out the runs that were retried already: a request
-- sent again acts on the rest, as a retry of one run sent twice starts
-- one run. runs_retried finds a run's retries; it holds only retries.
--
-- Only additions: a binary from before this migration keeps working beside
-- one after it (its runs awaiting approval expire as before, and its bulk
-- retries do not use the index).
CREATE INDEX runs_retried ON runs (tenant, retry_of) WHERE retry_of IS NOT NULL;

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
                greatest(now(), v_at) + make_interval(secs => c.approval_timeout_s),
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
