-- 012_run_polls: the poll schedule of waiting runs in a narrow table of its
-- own (docs/architecture.md, "The poller"). Until now every check updated
-- the wide runs row twice (its claim and its result), never HOT because
-- runs_poll_due indexes next_poll_at: a new version of the whole row and an
-- entry in every index a waiting run matches, twice per check.
--
-- run_polls holds one row per waiting run: when its next check is due
-- (next_poll_at, or the end of the lease of the check in flight), the
-- checks claimed so far (poll_count, the budget and the fence of a check)
-- and the replica whose check is in flight (poll_owner). The lease and the
-- order of due checks live only in this row and its index. The runs row
-- is still written twice per check, for the readers of the run object:
-- the claim sets runs.poll_count and runs.poll_owner (a check in flight),
-- the result clears poll_owner and writes next_poll_at (when the next
-- check is due, as that result set it) and poll_state. None of those is
-- indexed any more, so both writes can be HOT. runs.poll_started_at keeps
-- its meaning (since when the run waits); once the run ended,
-- runs.poll_owner is the owner of a claim of its terminal hooks, which
-- stay in runs (hooks_at, migration 005).
CREATE TABLE run_polls (
    tenant       text        NOT NULL,
    run_id       text        NOT NULL,
    type         text        NOT NULL,
    next_poll_at timestamptz NOT NULL,
    poll_count   integer     NOT NULL DEFAULT 0,
    poll_owner   text,
    PRIMARY KEY (tenant, run_id)
);
CREATE INDEX run_polls_due ON run_polls (next_poll_at);

-- A run that enters 'waiting', whichever statement puts it there, gets its
-- schedule from the runs row in the same transaction. A run that leaves it
-- is not followed here: its row is removed by the poller's next claim that
-- reaches it (or by the check that ends the run), so that a cancel never
-- waits for, nor deadlocks with, a claim holding the schedule row.
CREATE FUNCTION opsrun_run_polls_enter() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO run_polls (tenant, run_id, type, next_poll_at, poll_count)
    VALUES (NEW.tenant, NEW.id, NEW.type, coalesce(NEW.next_poll_at, now()), NEW.poll_count)
    ON CONFLICT (tenant, run_id) DO UPDATE SET type = EXCLUDED.type,
        next_poll_at = EXCLUDED.next_poll_at, poll_count = EXCLUDED.poll_count,
        poll_owner = NULL;
    RETURN NULL;
END
$$;
CREATE TRIGGER runs_poll_enter_insert AFTER INSERT ON runs
    FOR EACH ROW WHEN (NEW.status = 'waiting') EXECUTE FUNCTION opsrun_run_polls_enter();
CREATE TRIGGER runs_poll_enter_update AFTER UPDATE OF status ON runs
    FOR EACH ROW WHEN (NEW.status = 'waiting' AND OLD.status <> 'waiting')
    EXECUTE FUNCTION opsrun_run_polls_enter();

INSERT INTO run_polls (tenant, run_id, type, next_poll_at, poll_count, poll_owner)
SELECT tenant, id, type, coalesce(next_poll_at, now()), poll_count, poll_owner
FROM runs WHERE status = 'waiting';

DROP INDEX runs_poll_due;
