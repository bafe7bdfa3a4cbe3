/* store/workers.h — the workers table: one row per opsrun process, with its
 * heartbeat and load. Same conventions as store/runs.h. */
#ifndef OPSRUN_STORE_WORKERS_H
#define OPSRUN_STORE_WORKERS_H

#include "common/common.h"

#include <jansson.h>

struct db;

enum status store_workers_register(struct db *db, const char *id, const char *host, int pid,
                                   const char *version, int threads, struct error *err) WUR;
/* config_version: of the configuration the replica runs (config/live.h). */
enum status store_workers_heartbeat(struct db *db, const char *id, int busy, int runs_held,
                                    const char *config_version, struct error *err) WUR;
enum status store_workers_stop(struct db *db, const char *id, struct error *err) WUR;
/* Marks running workers whose heartbeat is older than after_s as stopped. */
enum status store_workers_mark_stale(struct db *db, int after_s, int *marked,
                                     struct error *err) WUR;
/* Running workers and those stopped in the last day, newest first (at most
 * 100), as a new JSON array. */
enum status store_workers_list(struct db *db, json_t **out, struct error *err) WUR;

#endif
