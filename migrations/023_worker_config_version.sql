-- 023_worker_config_version: the configuration each replica runs.
--
-- A replica reloads its configuration in place (SIGHUP, POST
-- /admin/reload); each heartbeat records the version of the configuration
-- it runs (a digest of its effective settings, the same on replicas with
-- the same settings), so GET /healthz shows replicas that disagree. NULL:
-- a replica from before this migration, which does not say.
ALTER TABLE workers ADD COLUMN config_version text;
