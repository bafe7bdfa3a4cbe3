-- 032_finish_batch_lines: the completion batch takes each run's log lines
-- by subscript instead of joining them to its runs.
--
-- opsrun_finish_batch (migration 027) joined the array of lines p_logs,
-- unnested WITH ORDINALITY, to the items of p_items on their position i.
-- The join read the array's rows again for every item, and the UPDATE,
-- whose FROM was that join, kept a copy of each joined row whole (the
-- row it would recheck after a concurrent update). Counted with
-- bench/stmtcost.sh (callgrind: the instructions of a single-user backend
-- running 250 batches of 16 no-op runs, the statement as the server sends
-- it, prepared): 395,800 instructions a run with the join and the
-- engine's two log lines a run, 368,100 with the subscript (-7.0 %);
-- without lines, 332,300 and 306,600 (bench/README.md, "Statement
-- shapes"). The result is the same: a row's lines are still p_logs[i],
-- NULL for none, checked as json, never parsed into jsonb.
--
-- store/runs_engine.c sends the same statement with named prepared
-- statements. The arguments and the columns returned are those of 027: a
-- binary from before this migration calls this body as it called the old
-- one, and its own named statement, the join, still works on this schema.
CREATE OR REPLACE FUNCTION opsrun_finish_batch(p_worker text, p_items jsonb, p_logs text[])
RETURNS TABLE (tenant text, id text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH b AS (
        SELECT *
          FROM jsonb_to_recordset(p_items) AS b(tenant text, id text, attempt int, outcome text,
                                                result jsonb, error jsonb, summary_counts jsonb,
                                                failure_summary jsonb, message text, log_n int,
                                                log_dropped bigint, i int)
    ), upd AS (
        UPDATE runs r
           SET status = 'completed', outcome = b.outcome, result = b.result,
               error = CASE WHEN b.outcome = 'cancelled' AND b.error IS NULL THEN r.error
                            ELSE b.error END,
               summary_counts = b.summary_counts, failure_summary = b.failure_summary,
               progress = CASE WHEN b.outcome = 'succeeded' THEN 100 ELSE r.progress END,
               completed_at = now(), updated_at = now(), heartbeat_at = NULL, deadline_at = NULL,
               log_seq = r.log_seq + coalesce(b.log_n, 0),
               hooks_at = CASE WHEN r.cleanup_due THEN now() ELSE r.hooks_at END,
               hooks_attempts = CASE WHEN r.cleanup_due THEN 0 ELSE r.hooks_attempts END,
               cleanup_due = false
          FROM b
         WHERE r.tenant = b.tenant AND r.id = b.id AND r.worker_id = p_worker
           AND r.attempt = b.attempt AND r.status IN ('running', 'cancelling')
        RETURNING r.tenant, r.id, r.status, r.outcome, r.progress, r.step, r.created_at,
                  b.message, r.log_seq, b.attempt, b.i, b.log_n, b.log_dropped
    ), ev AS (
        INSERT INTO run_events (tenant, run_id, type, status, outcome, progress, step, message,
                                run_created_at)
        SELECT u.tenant, u.id, 'status', u.status, u.outcome, u.progress, u.step, u.message,
               u.created_at
          FROM upd u
    ), lg AS (
        INSERT INTO run_logs (tenant, run_id, run_created_at, attempt, first_seq, last_seq,
                              dropped, lines)
        SELECT u.tenant, u.id, u.created_at, u.attempt, u.log_seq - u.log_n + 1, u.log_seq,
               coalesce(u.log_dropped, 0), p_logs[u.i]::json
          FROM upd u
         WHERE u.log_n > 0
    )
    SELECT u.tenant, u.id FROM upd u;
END
$$;
