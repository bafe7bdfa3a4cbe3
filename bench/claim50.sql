-- The batched-worker ceiling (bench/all.sh): claim 50 queued jobs in one
-- transaction, then complete those 50 in a second one, as a queue that
-- fetches and completes in batches must at least do. bench/all.sh fills
-- bench_jobs first, runs this with 4 clients, and counts jobs completed per
-- second of the database's clock.
WITH c AS (
    SELECT id FROM bench_jobs WHERE status = 'queued' ORDER BY id LIMIT 50 FOR UPDATE SKIP LOCKED
)
UPDATE bench_jobs j SET status = 'running', worker = :client_id, started_at = now()
FROM c WHERE j.id = c.id;
UPDATE bench_jobs SET status = 'completed', completed_at = now()
WHERE status = 'running' AND worker = :client_id;
