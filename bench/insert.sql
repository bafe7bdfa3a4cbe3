-- The single-row INSERT ceiling (bench/all.sh): one INSERT of a small JSON
-- body per transaction, committed durably. No queue can submit more single
-- runs per second than the database commits these; bench/all.sh runs it
-- with 16 clients and sets it beside opsrun's single submissions.
INSERT INTO bench_insert (payload)
VALUES (json_build_object('alert_type', 'demo', 'data', json_build_object('n', :client_id))::jsonb);
