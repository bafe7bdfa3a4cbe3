-- 006_cleanup_due: an action that creates things on a remote system before
-- its run can wait (preparation steps: a temporary table, a query
-- definition) records each of them in poll_state while the run is still
-- held by its worker, and sets cleanup_due. Every transition that ends such
-- a run (a finish, a cancel, a rescue whose attempts are spent) makes its
-- terminal hooks due in the same statement (hooks_at, migration 005), so
-- the poller deletes what was created even when the worker that created it
-- died. A run sent back to the queue keeps poll_state: its next attempt
-- cleans up the leftovers before it prepares again.
ALTER TABLE runs ADD COLUMN cleanup_due boolean NOT NULL DEFAULT false;
