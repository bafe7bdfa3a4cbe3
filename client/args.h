/* client/args.h — the command line of the client commands (submit, watch,
 * runs, cancel, retry, health, schedules, schedule, approve, reject, logs),
 * parsed and checked into struct args before
 * anything talks to a server, so every usage error exits 2 without a
 * request. Flags may come before or after the command; a flag that only
 * some commands take is refused elsewhere.
 *
 * Pure: no I/O. Strings in struct args borrow from argv and from what env
 * returned. Errors come back as ST_INVALID with a message for the user in
 * err. Thread-safe. */
#ifndef OPSRUN_CLIENT_ARGS_H
#define OPSRUN_CLIENT_ARGS_H

#include "common/common.h"

struct suggest;

#define ARGS_DEFAULT_SERVER "http://127.0.0.1:8080"
#define ARGS_LIMIT_MAX 500
#define ARGS_BULK_LIMIT_MAX 100000 /* cancel and retry by filter: --limit */

enum client_cmd {
    CMD_SUBMIT,
    CMD_WATCH,
    CMD_RUNS,
    CMD_CANCEL,
    CMD_RETRY,
    CMD_HEALTH,
    CMD_SCHEDULES,
    CMD_SCHEDULE,
    CMD_APPROVE,
    CMD_REJECT,
    CMD_LOGS
};

struct args {
    enum client_cmd cmd;
    const char *server;   /* --server, OPSRUN_SERVER or the default; http(s)://... */
    const char *token;    /* --token or OPSRUN_TOKEN; NULL: none */
    const char *type;     /* submit: TYPE; runs: --type (NULL: any) */
    const char *id;       /* watch, cancel, retry, approve, reject, logs: ID; submit: --run-id
                           * (NULL: generated); cancel, retry: NULL with a filter */
    const char *data;     /* submit: --data, a JSON object's text (NULL: {}) */
    const char *status;   /* runs: --status (NULL: any); cancel, retry: a comma list */
    const char *action;   /* schedule: pause, resume or trigger */
    const char *name;     /* schedule: NAME */
    int limit;            /* runs: --limit, 1..ARGS_LIMIT_MAX; cancel, retry by filter:
                           * 1..ARGS_BULK_LIMIT_MAX; 0: the server's default */
    const char *comment;  /* approve, reject: --comment (NULL: none) */
    const char *approval; /* runs: --approval pending (NULL: any run) */
    /* runs: --concurrency-key (1..512 bytes) and --concurrency-group
     * (1..64 characters); NULL: any */
    const char *conc_key, *conc_group;
    /* cancel and retry by filter (bulk true, id NULL): --outcome (a comma
     * list), --schedule, --parent (a run whose follow-ups), --since (as
     * seconds before now, 0: none), --all, --dry-run; and --status, --type,
     * --limit above. */
    bool bulk;
    const char *outcome, *schedule, *parent;
    long long since_s;
    bool all, dry_run;
    bool watch;  /* submit, retry, schedule trigger: --watch */
    bool json;   /* runs, schedules, cancel and retry by filter, logs: --json */
    int attempt; /* logs: --attempt, 1..INT32_MAX; 0: every attempt */
    bool follow; /* logs: --follow (or -f) */
    bool help;   /* -h or --help: print the usage, nothing else is checked */
};

/* An environment lookup (getenv in the program); NULL when unset. */
typedef const char *(*args_env_fn)(const char *name);

/* Parses argv[1..argc-1]. OPSRUN_SERVER and OPSRUN_TOKEN come from env
 * (empty counts as unset); flags win over them. */
enum status args_parse(int argc, char *const *argv, args_env_fn env, struct args *out,
                       struct error *err) WUR;

/* Whether the first word of argv that is not a client flag (or its value)
 * names a client command, so main() hands the whole command line here. */
bool args_is_client(int argc, char *const *argv);

/* The command's name as typed ("submit", ...). */
const char *args_cmd_name(enum client_cmd cmd);
/* Offers every command's name to s (common/suggest.h). */
void args_suggest_command(struct suggest *s);

#endif
