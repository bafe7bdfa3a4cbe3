-- 005_poller: the poller that drives runs in 'waiting' (docs/architecture.md,
-- "The poller"). The run row is the poll schedule: external_id, poll_state,
-- next_poll_at and poll_started_at (001) say what to check and when.

-- poll_count: checks claimed so far (the budget), and the fence of one
-- check: a check's result is written only while poll_count and poll_owner
-- are still what its claim set. poll_owner: the replica whose check is in
-- flight; its claim moved next_poll_at past the check's time limit, so no
-- other replica finds the run due meanwhile (at most one check in flight),
-- and a replica that dies mid-check just leaves the run due again.
ALTER TABLE runs ADD COLUMN poll_count integer NOT NULL DEFAULT 0,
                 ADD COLUMN poll_owner text;

-- hooks_at: the action's terminal hooks (the remote cancel, cleanup) are
-- due at this time; NULL when none are owed. Set in the same statement as
-- the terminal transition, so a crash never loses them; claimed like a
-- check (pushed past its time limit) and cleared once they ran, or after
-- hooks_attempts failures (they are best effort and never change the run).
ALTER TABLE runs ADD COLUMN hooks_at timestamptz,
                 ADD COLUMN hooks_attempts smallint NOT NULL DEFAULT 0;

CREATE INDEX runs_poll_due ON runs (next_poll_at) WHERE status = 'waiting';
CREATE INDEX runs_hooks_due ON runs (hooks_at) WHERE hooks_at IS NOT NULL;

