-- One single-row INSERT transaction: the most a client that commits each
-- submission on its own can reach (bench/run.sh).
INSERT INTO bench_insert (body) VALUES ('{"alert_type":"demo","data":{}}');
