-- 030_delivery_functions: the dispatcher's claim and settle of deliveries
-- are planned once per connection, with plans that stay index lookups on a
-- young outbox; and an outbox row no longer checks its run exists.
--
-- Measured with pg_stat_statements (track_planning) while 6,400 runs each
-- owed a delivery (bench/README.md, "Notification statements"): PostgreSQL
-- planned the claim and the settle of store/notify.c again at every call
-- (122 plans for 117 claims, 58 for 74 settles: their generic plans cost
-- more than the average of the custom ones, so a prepared statement never
-- kept one), 0.5 and 1.3 ms each, 13 to 22 us for every run notified.
-- And a plan made on an outbox without statistics yet (a new database, or
-- one that only started notifying) tested that no earlier delivery of the
-- same run to the same notifier is still owed by a scan of the notifier's
-- rows for each candidate: with 5,700 deliveries waiting, 30 ms a claim
-- in that benchmark, and 0.9 s with 3,000 waiting for a generic plan made
-- on an empty outbox (below).
--
-- 1. opsrun_deliveries_claim and opsrun_deliveries_settle hold the two
-- statements of store/notify.c, in PL/pgSQL, which keeps their plans for
-- the session; generic plans are forced, and sequential scans, bitmap
-- scans, hash and merge joins are off inside them (as for opsrun_claim).
-- A plan made once must suit an outbox of any size: the first claim of a
-- connection may find it empty. So the claim reads a notifier's due rows
-- in the order it takes them (notifications_due gains id, below) and
-- stops at its room, and the test for an earlier delivery still owed is
-- a subquery of its own (OFFSET 0 keeps PostgreSQL from making it a
-- join), which can only be planned as a lookup of that run's rows in
-- notifications_run: made a join, it was planned on an empty outbox as a
-- scan of the notifier's rows in notifications_due for every candidate
-- (0.9 s a claim with 3,000 waiting, 0.2 ms now). What the statements do
-- is unchanged. A binary from before this migration keeps its own
-- statements, which work as before.
CREATE FUNCTION opsrun_deliveries_claim(p_owner text, p_notifiers text[], p_rooms integer[],
                                        p_lease_ms integer)
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
    RETURNING o.id, o.delivery_id, o.tenant, o.run_id, o.notifier, o.event, o.run::text,
              o.attempts, (extract(epoch FROM now() - o.created_at) * 1000)::bigint;
END
$$;

-- p_results: [{id, attempts, retry_ms, message}], one per attempt made;
-- retry_ms < 0 settles the delivery (delivered or abandoned), else it is
-- due again that much later. Each attempt is an event on its run, whose
-- status it copies: a run whose notification is of a transition before
-- its end may be changing, and is locked (shared) first, so that a
-- transition in flight has committed and its event comes first; the run
-- of an outcome's notification no longer changes, and is read without a
-- lock. A result whose lease another claim took over (owner or attempts
-- differ) still records its attempt, and changes nothing else. Returns
-- the rows settled or rescheduled.
CREATE FUNCTION opsrun_deliveries_settle(p_owner text, p_results jsonb) RETURNS bigint
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_bitmapscan = off
SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS $$
DECLARE
    v_n bigint;
BEGIN
    WITH b AS (SELECT * FROM jsonb_to_recordset(p_results)
                               AS b(id bigint, attempts int, retry_ms bigint, message text)),
    act AS (SELECT b.id AS nid, b.attempts, b.retry_ms, b.message, r.tenant, r.id, r.status,
                   r.outcome, r.progress, r.step, r.created_at
              FROM b JOIN notifications o ON o.id = b.id
              JOIN runs r ON r.tenant = o.tenant AND r.id = o.run_id
             WHERE o.event IN ('run.started', 'run.retrying', 'run.approval_requested')
             ORDER BY r.tenant, r.id FOR SHARE OF r),
    fin AS (SELECT b.id AS nid, b.attempts, b.retry_ms, b.message, r.tenant, r.id, r.status,
                   r.outcome, r.progress, r.step, r.created_at
              FROM b JOIN notifications o ON o.id = b.id
              JOIN runs r ON r.tenant = o.tenant AND r.id = o.run_id
             WHERE o.event NOT IN ('run.started', 'run.retrying', 'run.approval_requested')),
    lk AS (SELECT * FROM act UNION ALL SELECT * FROM fin),
    del AS (DELETE FROM notifications o USING lk
             WHERE o.id = lk.nid AND lk.retry_ms < 0 AND o.owner = p_owner
               AND o.attempts = lk.attempts RETURNING 1),
    upd AS (UPDATE notifications o SET owner = NULL,
                                       next_at = now() + lk.retry_ms * interval '1 millisecond'
              FROM lk WHERE o.id = lk.nid AND lk.retry_ms >= 0 AND o.owner = p_owner
               AND o.attempts = lk.attempts RETURNING 1),
    ev AS (INSERT INTO run_events (tenant, run_id, type, status, outcome, progress, step,
                                   message, run_created_at)
           SELECT tenant, id, 'notification', status, outcome, progress, step, message,
                  created_at FROM lk)
    SELECT (SELECT count(*) FROM del) + (SELECT count(*) FROM upd) INTO v_n;
    RETURN v_n;
END
$$;

-- The claim's order, in the index it reads.
DROP INDEX notifications_due;
CREATE INDEX notifications_due ON notifications (notifier, next_at, id);

-- 2. The outbox's foreign key to runs goes: its check locked the run's row
-- (FOR KEY SHARE, one more write of the row's header) at every delivery
-- owed: about 10 us of the 121 a notifying run cost a completion batch of
-- 16 (psql-driven, a set of rounds of its own: 110.8 without the key).
-- Its rows are written only by the triggers of runs, for the run being
-- changed, which exists; what the key's ON DELETE CASCADE did, a statement
-- trigger does: the deliveries of the runs a statement deletes
-- (retention, by any binary) go with them, in one statement.
ALTER TABLE notifications DROP CONSTRAINT notifications_tenant_run_id_fkey;
CREATE FUNCTION opsrun_runs_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM notifications n USING gone g WHERE n.tenant = g.tenant AND n.run_id = g.id;
    RETURN NULL;
END
$$;
CREATE TRIGGER runs_deleted AFTER DELETE ON runs REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION opsrun_runs_deleted();
