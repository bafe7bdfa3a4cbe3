-- 014_fewer_run_indexes: three indexes fewer on runs, the same statements
-- served.
--
-- Every change of a run's status is a non-HOT update (status is in the
-- predicates of the partial indexes), so each index without a predicate
-- gets an entry at the insert, the claim and the completion of every run:
-- inserting index entries was the largest part of PostgreSQL's time per
-- run. With this change a run writes 14 index entries of runs instead of
-- 21, and the engine's drain costs PostgreSQL 0.85x the execution time
-- per run (bench/pgcost.sh; figures in bench/README.md).
--
-- 1. The primary key becomes (id, tenant). It serves every lookup by
--    (tenant, id) as before, and also the lookups by id alone that
--    runs_by_id (migration 007) was there for: the admin's search for the
--    tenant of a run id, and the poller's joins on an array of ids.
-- 2. runs_list_all (migration 007) goes: the admin's list over every
--    tenant walks runs_list once per tenant instead (store/runs.c), found
--    by a skip scan of its first column.
-- 3. runs_heartbeat (migration 001) goes: the orphan scan reads the held
--    runs through runs_held, at most queue.max_running of them, every
--    queue.orphan_scan_interval_s. A heartbeat then changes no indexed
--    column and is a HOT update.
--
-- The new primary key is built while the table is locked, as long as an
-- index build over runs takes.
ALTER TABLE runs DROP CONSTRAINT runs_pkey;
ALTER TABLE runs ADD CONSTRAINT runs_pkey PRIMARY KEY (id, tenant);
DROP INDEX runs_by_id;
DROP INDEX runs_list_all;
DROP INDEX runs_heartbeat;
