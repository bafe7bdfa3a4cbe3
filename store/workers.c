/* store/workers.c — worker process rows. */
#include "store/workers.h"

#include "store/db_internal.h"

#include <stdlib.h>

static const struct stmt S_REGISTER = {"workers_register",
                                       "INSERT INTO workers (id, host, pid, version, threads) "
                                       "VALUES ($1, $2, $3::int, $4, $5::int)"};
static const struct stmt S_HEARTBEAT = {
    "workers_heartbeat", "UPDATE workers SET heartbeat_at = now(), busy = $2::int, "
                         "runs_held = $3::int, config_version = $4, status = 'running', "
                         "stopped_at = NULL WHERE id = $1"};
static const struct stmt S_STOP = {
    "workers_stop", "UPDATE workers SET status = 'stopped', stopped_at = now(), busy = 0, "
                    "runs_held = 0 WHERE id = $1"};
static const struct stmt S_STALE = {"workers_stale",
                                    "UPDATE workers SET status = 'stopped', stopped_at = now() "
                                    "WHERE status = 'running' AND heartbeat_at < now() - "
                                    "make_interval(secs => $1::int)"};
static const struct stmt S_LIST = {
    "workers_list",
    "SELECT coalesce(json_agg(json_build_object('id', id, 'host', host, 'pid', pid, "
    "'version', version, 'status', status, 'threads', threads, 'busy', busy, "
    "'runs_held', runs_held, 'config_version', config_version, "
    "'started_at', opsrun_ts(started_at), "
    "'heartbeat_at', opsrun_ts(heartbeat_at), 'stopped_at', opsrun_ts(stopped_at)) "
    "ORDER BY started_at DESC), '[]')::text FROM (SELECT * FROM workers "
    "WHERE status = 'running' OR stopped_at > now() - interval '1 day' "
    "ORDER BY started_at DESC LIMIT 100) w"};

enum status store_workers_register(struct db *db, const char *id, const char *host, int pid,
                                   const char *version, int threads, struct error *err)
{
    char spid[16], sthr[16];
    const char *p[5] = {id, host, spid, version, sthr};

    xsnprintf(spid, sizeof(spid), "%d", pid);
    xsnprintf(sthr, sizeof(sthr), "%d", threads);
    return db_exec_count(db, &S_REGISTER, 5, p, NULL, err);
}

enum status store_workers_heartbeat(struct db *db, const char *id, int busy, int runs_held,
                                    const char *config_version, struct error *err)
{
    char sb[16], sh[16];
    const char *p[4] = {id, sb, sh, config_version};

    xsnprintf(sb, sizeof(sb), "%d", busy);
    xsnprintf(sh, sizeof(sh), "%d", runs_held);
    return db_exec_count(db, &S_HEARTBEAT, 4, p, NULL, err);
}

enum status store_workers_stop(struct db *db, const char *id, struct error *err)
{
    return db_exec_count(db, &S_STOP, 1, &id, NULL, err);
}

enum status store_workers_mark_stale(struct db *db, int after_s, int *marked, struct error *err)
{
    char s[16];
    const char *p[1] = {s};

    xsnprintf(s, sizeof(s), "%d", after_s);
    return db_exec_count(db, &S_STALE, 1, p, marked, err);
}

enum status store_workers_list(struct db *db, json_t **out, struct error *err)
{
    json_error_t jerr;
    PGresult *r;
    enum status st = db_run(db, &S_LIST, 0, NULL, &r, err);

    *out = NULL;
    if (st != ST_OK)
        return st;
    if (!(*out = json_loads(db_val(r, 0, 0), 0, &jerr)))
        st = error_set(err, ST_INTERNAL, "could not parse workers JSON: %s", jerr.text);
    PQclear(r);
    return st;
}
