-- The least a durable queue must commit per run, without opsrun: submit,
-- claim and finish as three single-row write transactions. One execution of
-- this script is one "baseline run" (bench/run.sh).
\set id random(1, 2000000000)
INSERT INTO bench_runs (id, status) VALUES (:id, 'queued') ON CONFLICT (id) DO UPDATE SET status = 'queued';
UPDATE bench_runs SET status = 'running', started_at = now() WHERE id = :id;
UPDATE bench_runs SET status = 'completed', completed_at = now() WHERE id = :id;
