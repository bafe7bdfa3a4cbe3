/* tests/unit/test_client_args.c — the client commands' command line
 * (client/args.c): commands and operands, flags anywhere and in both
 * forms, which command takes which flag, the environment and its
 * precedence, every usage error with its exact message (and never the
 * token in one), and how main() tells a client command from serve's; plus
 * the requests the commands build from it (client/cmd.c), and the logs
 * command's own flags. */
#include "client/args.h"
#include "client/cmd.h"

#include <check.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* The environment the parser sees: "K=V" entries. */
static const char *const *g_env;

static const char *fake_env(const char *name)
{
    size_t n = strlen(name);

    for (size_t i = 0; g_env && g_env[i]; i++)
        if (strncmp(g_env[i], name, n) == 0 && g_env[i][n] == '=')
            return g_env[i] + n + 1;
    return NULL;
}

static int argc_of(const char *const *argv)
{
    int n = 0;

    while (argv[n])
        n++;
    return n;
}

/* Parses argv (argv[0] included) with env; returns the status. */
static enum status parse(const char *const *argv, const char *const *env, struct args *a,
                         struct error *err)
{
    g_env = env;
    memset(err, 0, sizeof(*err));
    return args_parse(argc_of(argv), (char *const *)argv, fake_env, a, err);
}

#define ARGV(...) ((const char *const[]){"opsrun", __VA_ARGS__, NULL})

/* Asserts argv is refused with exactly msg. */
static void refused(const char *const *argv, const char *const *env, const char *msg)
{
    struct args a;
    struct error err;

    ck_assert_int_eq(parse(argv, env, &a, &err), ST_INVALID);
    ck_assert_str_eq(err.message, msg);
}

START_TEST(commands)
{
    struct args a;
    struct error err;

    ck_assert_int_eq(parse(ARGV("submit", "demo"), NULL, &a, &err), ST_OK);
    ck_assert_int_eq(a.cmd, CMD_SUBMIT);
    ck_assert_str_eq(a.type, "demo");
    ck_assert_ptr_null(a.id);
    ck_assert_ptr_null(a.data);
    ck_assert_ptr_null(a.token);
    ck_assert_str_eq(a.server, "http://127.0.0.1:8080");
    ck_assert(!a.watch && !a.json && !a.help);

    ck_assert_int_eq(
        parse(ARGV("submit", "demo", "--data", "{\"a\":1}", "--run-id", "r-1", "--watch"), NULL, &a,
              &err),
        ST_OK);
    ck_assert_str_eq(a.data, "{\"a\":1}");
    ck_assert_str_eq(a.id, "r-1");
    ck_assert(a.watch);

    ck_assert_int_eq(parse(ARGV("watch", "01M80NWRSGG93QZSVK6VHZPY45"), NULL, &a, &err), ST_OK);
    ck_assert_int_eq(a.cmd, CMD_WATCH);
    ck_assert_str_eq(a.id, "01M80NWRSGG93QZSVK6VHZPY45");
    ck_assert_int_eq(parse(ARGV("cancel", "x"), NULL, &a, &err), ST_OK);
    ck_assert_int_eq(a.cmd, CMD_CANCEL);
    ck_assert_int_eq(parse(ARGV("retry", "x", "--watch"), NULL, &a, &err), ST_OK);
    ck_assert(a.cmd == CMD_RETRY && a.watch);
    ck_assert_int_eq(parse(ARGV("health"), NULL, &a, &err), ST_OK);
    ck_assert_int_eq(a.cmd, CMD_HEALTH);

    ck_assert_int_eq(
        parse(ARGV("runs", "--status", "completed", "--type", "demo", "--limit", "7", "--json"),
              NULL, &a, &err),
        ST_OK);
    ck_assert_int_eq(a.cmd, CMD_RUNS);
    ck_assert_str_eq(a.status, "completed");
    ck_assert_str_eq(a.type, "demo");
    ck_assert_int_eq(a.limit, 7);
    ck_assert(a.json);
    ck_assert_int_eq(parse(ARGV("runs"), NULL, &a, &err), ST_OK);
    ck_assert_int_eq(a.limit, 0);
    ck_assert_ptr_null(a.status);
    ck_assert_ptr_null(a.type);

    ck_assert_int_eq(parse(ARGV("schedules", "--json"), NULL, &a, &err), ST_OK);
    ck_assert(a.cmd == CMD_SCHEDULES && a.json);
    ck_assert_int_eq(parse(ARGV("schedule", "pause", "nightly"), NULL, &a, &err), ST_OK);
    ck_assert_int_eq(a.cmd, CMD_SCHEDULE);
    ck_assert_str_eq(a.action, "pause");
    ck_assert_str_eq(a.name, "nightly");
    ck_assert_int_eq(parse(ARGV("schedule", "trigger", "nightly", "--watch"), NULL, &a, &err),
                     ST_OK);
    ck_assert(a.watch);
}
END_TEST

/* Flags before or after the command, "--flag value" or "--flag=value",
 * and "--" before an operand that starts with a dash. */
START_TEST(flag_forms)
{
    struct args a;
    struct error err;

    ck_assert_int_eq(
        parse(ARGV("--server", "http://h:1", "--limit=3", "runs", "--token=t0k"), NULL, &a, &err),
        ST_OK);
    ck_assert_str_eq(a.server, "http://h:1");
    ck_assert_str_eq(a.token, "t0k");
    ck_assert_int_eq(a.limit, 3);
    ck_assert_int_eq(parse(ARGV("runs", "--limit", "1", "--limit", "2"), NULL, &a, &err), ST_OK);
    ck_assert_int_eq(a.limit, 2); /* the last one wins */
    ck_assert_int_eq(parse(ARGV("watch", "--", "-x"), NULL, &a, &err), ST_OK);
    ck_assert_str_eq(a.id, "-x");
    ck_assert_int_eq(parse(ARGV("submit", "demo", "--data={\"k\":\"a=b\"}"), NULL, &a, &err),
                     ST_OK);
    ck_assert_str_eq(a.data, "{\"k\":\"a=b\"}");
}
END_TEST

/* OPSRUN_SERVER and OPSRUN_TOKEN; flags win; empty counts as unset. */
START_TEST(environment)
{
    static const char *const env[] = {"OPSRUN_SERVER=https://ops.example:8443/",
                                      "OPSRUN_TOKEN=from-env", NULL};
    static const char *const empty[] = {"OPSRUN_SERVER=", "OPSRUN_TOKEN=", NULL};
    struct args a;
    struct error err;

    ck_assert_int_eq(parse(ARGV("health"), env, &a, &err), ST_OK);
    ck_assert_str_eq(a.server, "https://ops.example:8443/");
    ck_assert_str_eq(a.token, "from-env");
    ck_assert_int_eq(
        parse(ARGV("health", "--server", "http://other", "--token", "flag"), env, &a, &err), ST_OK);
    ck_assert_str_eq(a.server, "http://other");
    ck_assert_str_eq(a.token, "flag");
    ck_assert_int_eq(parse(ARGV("health"), empty, &a, &err), ST_OK);
    ck_assert_str_eq(a.server, "http://127.0.0.1:8080");
    ck_assert_ptr_null(a.token);
}
END_TEST

START_TEST(usage_errors)
{
    static const char *const bad_env[] = {"OPSRUN_SERVER=localhost:8080", NULL};

    refused((const char *const[]){"opsrun", NULL}, NULL, "no command given");
    refused(ARGV("frobnicate"), NULL, "unknown command \"frobnicate\"");
    refused(ARGV("wach", "x"), NULL, "unknown command \"wach\"; did you mean \"watch\"?");
    refused(ARGV("watch"), NULL, "watch needs a run id: opsrun watch ID");
    refused(ARGV("submit"), NULL, "submit needs a run type: opsrun submit TYPE");
    refused(ARGV("retry"), NULL,
            "retry needs a run id (opsrun retry ID) or a filter (--status, --outcome, --type, "
            "--since, --schedule, --parent or --all)");
    refused(ARGV("watch", "a", "b"), NULL, "unexpected argument \"b\"");
    refused(ARGV("health", "now"), NULL, "unexpected argument \"now\"");
    refused(ARGV("runs", "--bogus"), NULL, "unknown flag \"--bogus\"");
    refused(ARGV("runs", "-x"), NULL, "unknown flag \"-x\"");
    refused(ARGV("runs", "--limit"), NULL, "flag --limit needs a value");
    refused(ARGV("runs", "--json=yes"), NULL, "flag --json takes no value");
    refused(ARGV("runs", "--data", "{}"), NULL, "flag --data does not apply to runs");
    refused(ARGV("watch", "x", "--watch"), NULL, "flag --watch does not apply to watch");
    refused(ARGV("cancel", "x", "--json"), NULL,
            "flag --json applies to cancel by a filter, not to cancel ID: opsrun cancel "
            "[--status S] [--type T] ...");
    refused(ARGV("health", "--limit", "2"), NULL, "flag --limit does not apply to health");
    refused(ARGV("submit", "demo", "--status", "queued"), NULL,
            "flag --status does not apply to submit");
    refused(ARGV("watch", "a b"), NULL,
            "invalid run id \"a b\": must match [A-Za-z0-9._:-]{1,128}");
    refused(ARGV("submit", "demo", "--run-id", "x/y"), NULL,
            "invalid run id \"x/y\": must match [A-Za-z0-9._:-]{1,128}");
    refused(ARGV("submit", ""), NULL, "invalid run type \"\": must be 1 to 128 characters");
    refused(ARGV("submit", "demo", "--data", "[1]"), NULL, "invalid --data: must be a JSON object");
    refused(ARGV("submit", "demo", "--data", "{\"a\":1,\"a\":2}"), NULL,
            "invalid --data: duplicate object key near '\"a\"'");
    refused(ARGV("runs", "--status", "done"), NULL,
            "invalid --status \"done\": must be one of queued, running, waiting, cancelling, "
            "completed");
    refused(ARGV("runs", "--type", ""), NULL, "invalid --type: must be 1 to 64 characters");
    refused(ARGV("runs", "--server", "ftp://h"), NULL,
            "invalid --server \"ftp://h\": must start with http:// or https://");
    refused(ARGV("runs"), bad_env,
            "invalid OPSRUN_SERVER \"localhost:8080\": must start with http:// or https://");
    refused(ARGV("runs", "--token", ""), NULL, "invalid --token: empty");
    refused(ARGV("schedule"), NULL,
            "schedule needs an action and a name: opsrun schedule pause|resume|trigger NAME");
    refused(ARGV("schedule", "pause"), NULL,
            "schedule needs an action and a name: opsrun schedule pause|resume|trigger NAME");
    refused(ARGV("schedule", "stop", "x"), NULL,
            "unknown action \"stop\": opsrun schedule pause|resume|trigger NAME");
    refused(ARGV("schedule", "pause", "a/b"), NULL, "invalid schedule name \"a/b\"");
    refused(ARGV("schedule", "pause", "x", "--watch"), NULL,
            "flag --watch applies to schedule trigger only");
    refused(ARGV("schedules", "x"), NULL, "unexpected argument \"x\"");
    refused(ARGV("schedules", "--limit", "2"), NULL, "flag --limit does not apply to schedules");
    for (size_t i = 0; i < 6; i++) {
        static const char *const limits[] = {"0", "501", "abc", "+5", " 5", "5x"};
        char want[80];
        snprintf(want, sizeof(want), "invalid --limit \"%s\": must be 1 to 500", limits[i]);
        refused(ARGV("runs", "--limit", limits[i]), NULL, want);
    }
}
END_TEST

/* A token that could split a header is refused without being shown. */
START_TEST(token_never_shown)
{
    static const char *const env[] = {"OPSRUN_TOKEN=s3cret\r\nX-Evil: 1", NULL};
    struct args a;
    struct error err;

    ck_assert_int_eq(parse(ARGV("health", "--token", "s3cret value"), NULL, &a, &err), ST_INVALID);
    ck_assert_str_eq(err.message, "invalid --token: must not contain spaces or control characters");
    ck_assert_int_eq(parse(ARGV("health"), env, &a, &err), ST_INVALID);
    ck_assert_str_eq(err.message,
                     "invalid OPSRUN_TOKEN: must not contain spaces or control characters");
    ck_assert_ptr_null(strstr(err.message, "s3cret"));
}
END_TEST

/* -h/--help wins over everything else, mistakes included. */
START_TEST(help)
{
    struct args a;
    struct error err;

    ck_assert_int_eq(parse(ARGV("submit", "--help"), NULL, &a, &err), ST_OK);
    ck_assert(a.help);
    ck_assert_int_eq(parse(ARGV("-h", "frobnicate", "--limit", "0"), NULL, &a, &err), ST_OK);
    ck_assert(a.help);
}
END_TEST

static bool is_client(const char *const *argv)
{
    return args_is_client(argc_of(argv), (char *const *)argv);
}

/* main() gives the command line to the client when its command is one of
 * the client's, wherever the client's flags are; serve's stays serve's. */
START_TEST(client_or_server)
{
    ck_assert(is_client(ARGV("runs")));
    ck_assert(is_client(ARGV("--server", "http://h", "watch", "x")));
    ck_assert(is_client(ARGV("--server=http://h", "health")));
    ck_assert(is_client(ARGV("--json", "runs")));
    ck_assert(is_client(ARGV("--", "health")));
    ck_assert(!is_client(ARGV("serve")));
    ck_assert(!is_client(ARGV("migrate", "--database-url", "x")));
    ck_assert(!is_client(ARGV("version")));
    ck_assert(!is_client(ARGV("--version")));
    ck_assert(!is_client(ARGV("--help")));
    ck_assert(!is_client(ARGV("--token", "runs", "serve"))); /* "runs" is the token */
    ck_assert(!is_client(ARGV("--listen", "127.0.0.1:1", "serve")));
    ck_assert(!is_client((const char *const[]){"opsrun", NULL}));
}
END_TEST

/* The requests built from the arguments. */
START_TEST(requests)
{
    struct args a;
    struct error err;
    json_t *body;
    char *s;

    ck_assert_int_eq(
        parse(ARGV("submit", "demo", "--data", "{\"b\":[1,2]}", "--run-id", "r.1"), NULL, &a, &err),
        ST_OK);
    body = cmd_submit_body(&a);
    s = json_dumps(body, JSON_COMPACT | JSON_SORT_KEYS);
    ck_assert_str_eq(s, "{\"alert_type\":\"demo\",\"data\":{\"b\":[1,2]},\"run_id\":\"r.1\"}");
    free(s);
    json_decref(body);
    ck_assert_int_eq(parse(ARGV("submit", "demo"), NULL, &a, &err), ST_OK);
    body = cmd_submit_body(&a);
    s = json_dumps(body, JSON_COMPACT | JSON_SORT_KEYS);
    ck_assert_str_eq(s, "{\"alert_type\":\"demo\",\"data\":{}}");
    free(s);
    json_decref(body);

    ck_assert_int_eq(parse(ARGV("runs"), NULL, &a, &err), ST_OK);
    s = cmd_runs_path(&a);
    ck_assert_str_eq(s, "/runs");
    free(s);
    ck_assert_int_eq(
        parse(ARGV("runs", "--type", "db backup&x=1", "--status", "waiting", "--limit", "500"),
              NULL, &a, &err),
        ST_OK);
    s = cmd_runs_path(&a);
    ck_assert_str_eq(s, "/runs?status=waiting&type=db%20backup%26x%3D1&limit=500");
    free(s);
    ck_assert_int_eq(parse(ARGV("runs", "--limit", "9"), NULL, &a, &err), ST_OK);
    s = cmd_runs_path(&a);
    ck_assert_str_eq(s, "/runs?limit=9");
    free(s);
    ck_assert_int_eq(
        parse(ARGV("runs", "--parent", "r-1", "--schedule", "night ly"), NULL, &a, &err), ST_OK);
    s = cmd_runs_path(&a);
    ck_assert_str_eq(s, "/runs?schedule=night%20ly&parent_id=r-1");
    free(s);
    ck_assert_int_eq(parse(ARGV("runs", "--parent", ""), NULL, &a, &err), ST_INVALID);
    ck_assert_int_eq(
        parse(ARGV("runs", "--approval", "pending", "--type", "gated"), NULL, &a, &err), ST_OK);
    s = cmd_runs_path(&a);
    ck_assert_str_eq(s, "/runs?type=gated&approval=pending");
    free(s);
    ck_assert_int_eq(parse(ARGV("runs", "--approval", "approved"), NULL, &a, &err), ST_INVALID);
    ck_assert_str_eq(err.message, "invalid --approval \"approved\": the only value is pending (the "
                                  "runs awaiting approval)");
    ck_assert_int_eq(parse(ARGV("cancel", "--approval", "pending"), NULL, &a, &err), ST_INVALID);

    /* a concurrency key's runs: the key as it is, escaped */
    ck_assert_int_eq(
        parse(ARGV("runs", "--concurrency-key", "host/web 1&x", "--concurrency-group", "host"),
              NULL, &a, &err),
        ST_OK);
    s = cmd_runs_path(&a);
    ck_assert_str_eq(s, "/runs?concurrency_key=host%2Fweb%201%26x&concurrency_group=host");
    free(s);
    ck_assert_int_eq(
        parse(ARGV("runs", "--concurrency-key=db-7", "--status", "queued"), NULL, &a, &err), ST_OK);
    s = cmd_runs_path(&a);
    ck_assert_str_eq(s, "/runs?status=queued&concurrency_key=db-7");
    free(s);
    ck_assert_int_eq(parse(ARGV("runs", "--concurrency-key", ""), NULL, &a, &err), ST_INVALID);
    ck_assert_str_eq(err.message, "invalid --concurrency-key: must be 1 to 512 bytes");
    ck_assert_int_eq(parse(ARGV("runs", "--concurrency-group", ""), NULL, &a, &err), ST_INVALID);
    ck_assert_str_eq(err.message, "invalid --concurrency-group: must be 1 to 64 characters");
    ck_assert_int_eq(parse(ARGV("cancel", "r-1", "--concurrency-key", "db-7"), NULL, &a, &err),
                     ST_INVALID);
    ck_assert_str_eq(err.message, "flag --concurrency-key does not apply to cancel");
}
END_TEST

/* cancel and retry by a filter, approve and reject: their flags, their
 * errors, and the bodies they send. */
START_TEST(bulk_and_decisions)
{
    struct args a;
    struct error err;
    json_t *body;
    char *s;

    ck_assert_int_eq(parse(ARGV("cancel", "--status", "queued,waiting", "--type", "deploy",
                                "--dry-run", "--limit", "100000"),
                           NULL, &a, &err),
                     ST_OK);
    ck_assert(a.bulk);
    ck_assert_ptr_null(a.id);
    body = cmd_bulk_body(&a, 0);
    s = json_dumps(body, JSON_COMPACT | JSON_SORT_KEYS);
    ck_assert_str_eq(s, "{\"dry_run\":true,\"filter\":{\"status\":[\"queued\",\"waiting\"],"
                        "\"type\":\"deploy\"},\"limit\":100000}");
    free(s);
    json_decref(body);
    /* --since is created_after, that long before now */
    ck_assert_int_eq(parse(ARGV("retry", "--outcome", "failed,timed_out", "--since", "1h",
                                "--schedule", "nightly", "--parent", "r-9"),
                           NULL, &a, &err),
                     ST_OK);
    ck_assert_int_eq(a.since_s, 3600);
    body = cmd_bulk_body(&a, 7200LL * 1000000);
    s = json_dumps(body, JSON_COMPACT | JSON_SORT_KEYS);
    ck_assert_str_eq(s, "{\"dry_run\":false,\"filter\":{\"created_after\":"
                        "\"1970-01-01T01:00:00.000000Z\",\"outcome\":[\"failed\",\"timed_out\"],"
                        "\"parent_id\":\"r-9\",\"schedule\":\"nightly\"}}");
    free(s);
    json_decref(body);
    /* --parent alone is a filter */
    ck_assert_int_eq(parse(ARGV("cancel", "--parent", "r-9"), NULL, &a, &err), ST_OK);
    ck_assert(a.bulk);
    body = cmd_bulk_body(&a, 0);
    s = json_dumps(body, JSON_COMPACT | JSON_SORT_KEYS);
    ck_assert_str_eq(s, "{\"dry_run\":false,\"filter\":{\"parent_id\":\"r-9\"}}");
    free(s);
    json_decref(body);
    ck_assert_int_eq(parse(ARGV("cancel", "--all", "--json"), NULL, &a, &err), ST_OK);
    ck_assert(a.all && a.json && a.bulk);
    /* one run still works as it did */
    ck_assert_int_eq(parse(ARGV("retry", "r-1", "--watch"), NULL, &a, &err), ST_OK);
    ck_assert(!a.bulk);
    ck_assert_str_eq(a.id, "r-1");
    ck_assert_int_eq(parse(ARGV("approve", "r-1", "--comment", "ok by me"), NULL, &a, &err), ST_OK);
    ck_assert_int_eq(a.cmd, CMD_APPROVE);
    body = cmd_decision_body(&a);
    s = json_dumps(body, JSON_COMPACT);
    ck_assert_str_eq(s, "{\"comment\":\"ok by me\"}");
    free(s);
    json_decref(body);
    ck_assert_int_eq(parse(ARGV("reject", "r-1"), NULL, &a, &err), ST_OK);
    ck_assert_int_eq(a.cmd, CMD_REJECT);
    ck_assert_ptr_null(cmd_decision_body(&a));

    refused(ARGV("cancel"), NULL,
            "cancel needs a run id (opsrun cancel ID) or a filter (--status, --outcome, --type, "
            "--since, --schedule, --parent or --all)");
    refused(ARGV("cancel", "--dry-run"), NULL,
            "cancel needs a run id (opsrun cancel ID) or a filter (--status, --outcome, --type, "
            "--since, --schedule, --parent or --all)");
    refused(ARGV("cancel", "r-1", "--status", "queued"), NULL,
            "flag --status applies to cancel by a filter, not to cancel ID: opsrun cancel "
            "[--status S] [--type T] ...");
    refused(ARGV("retry", "--outcome", "failed", "--watch"), NULL,
            "flag --watch applies to retry ID only");
    refused(ARGV("cancel", "--status", "queued,done"), NULL,
            "invalid --status \"queued,done\": must be a comma-separated list of queued, running, "
            "waiting, cancelling, completed");
    refused(ARGV("runs", "--status", "queued,waiting"), NULL,
            "invalid --status \"queued,waiting\": must be one of queued, running, waiting, "
            "cancelling, completed");
    refused(ARGV("retry", "--outcome", "failed,"), NULL,
            "invalid --outcome \"failed,\": must be a comma-separated list of pending, succeeded, "
            "partially_succeeded, failed, cancelled, timed_out");
    refused(ARGV("retry", "--since", "1w"), NULL,
            "invalid --since \"1w\": must be a duration such as 30s, 15m, 1h or 7d (at most ten "
            "years)");
    refused(ARGV("retry", "--since", "0s"), NULL,
            "invalid --since \"0s\": must be a duration such as 30s, 15m, 1h or 7d (at most ten "
            "years)");
    refused(ARGV("cancel", "--parent", ""), NULL,
            "invalid --parent: must be a run id of 1 to 128 characters");
    refused(ARGV("cancel", "r-1", "--parent", "r-2"), NULL,
            "flag --parent applies to cancel by a filter, not to cancel ID: opsrun cancel "
            "[--status S] [--type T] ...");
    refused(ARGV("cancel", "--all", "--limit", "100001"), NULL,
            "invalid --limit \"100001\": must be 1 to 100000");
    refused(ARGV("approve"), NULL, "approve needs a run id: opsrun approve ID");
    refused(ARGV("reject", "r-1", "--dry-run"), NULL, "flag --dry-run does not apply to reject");
    refused(ARGV("runs", "--comment", "x"), NULL, "flag --comment does not apply to runs");
}
END_TEST

/* logs: its operand, --attempt, --follow (and -f), --json; the flags of
 * other commands refused, and the others' refusing its own. */
START_TEST(logs_command)
{
    struct args a;
    struct error err;

    ck_assert_int_eq(parse(ARGV("logs", "r-1"), NULL, &a, &err), ST_OK);
    ck_assert_int_eq(a.cmd, CMD_LOGS);
    ck_assert_str_eq(a.id, "r-1");
    ck_assert(!a.follow && !a.json);
    ck_assert_int_eq(a.attempt, 0);
    ck_assert_int_eq(
        parse(ARGV("logs", "r-1", "--attempt", "2", "--follow", "--json"), NULL, &a, &err), ST_OK);
    ck_assert(a.follow && a.json);
    ck_assert_int_eq(a.attempt, 2);
    ck_assert_int_eq(parse(ARGV("-f", "logs", "--attempt=2147483647", "r-1"), NULL, &a, &err),
                     ST_OK);
    ck_assert(a.follow);
    ck_assert_int_eq(a.attempt, 2147483647);
    ck_assert_str_eq(args_cmd_name(CMD_LOGS), "logs");
    ck_assert(args_is_client(3, (char *const *)ARGV("logs", "x")));
    ck_assert(args_is_client(4, (char *const *)ARGV("-f", "logs", "x")));

    refused(ARGV("logs"), NULL, "logs needs a run id: opsrun logs ID");
    refused(ARGV("logs", "a", "b"), NULL, "unexpected argument \"b\"");
    refused(ARGV("logs", "a/b"), NULL, "invalid run id \"a/b\": must match [A-Za-z0-9._:-]{1,128}");
    refused(ARGV("log", "x"), NULL, "unknown command \"log\"; did you mean \"logs\"?");
    for (size_t i = 0; i < 6; i++) {
        static const char *const bad[] = {"0", "-1", "x", "1.5", "2147483648", ""};
        char want[96];
        snprintf(want, sizeof(want),
                 "invalid --attempt \"%s\": must be an attempt's number, from 1", bad[i]);
        refused(ARGV("logs", "r-1", "--attempt", bad[i]), NULL, want);
    }
    refused(ARGV("logs", "r-1", "--attempt"), NULL, "flag --attempt needs a value");
    refused(ARGV("logs", "r-1", "--follow=yes"), NULL, "flag --follow takes no value");
    refused(ARGV("logs", "r-1", "--limit", "5"), NULL, "flag --limit does not apply to logs");
    refused(ARGV("logs", "r-1", "--watch"), NULL, "flag --watch does not apply to logs");
    refused(ARGV("watch", "r-1", "--follow"), NULL, "flag --follow does not apply to watch");
    refused(ARGV("watch", "r-1", "-f"), NULL, "flag --follow does not apply to watch");
    refused(ARGV("runs", "--attempt", "1"), NULL, "flag --attempt does not apply to runs");
    refused(ARGV("watch", "r-1", "--json"), NULL, "flag --json does not apply to watch");
}
END_TEST

static Suite *client_args_suite(void)
{
    Suite *s = suite_create("client_args");
    TCase *tc = tcase_create("args");

    tcase_add_test(tc, commands);
    tcase_add_test(tc, flag_forms);
    tcase_add_test(tc, environment);
    tcase_add_test(tc, usage_errors);
    tcase_add_test(tc, token_never_shown);
    tcase_add_test(tc, help);
    tcase_add_test(tc, client_or_server);
    tcase_add_test(tc, requests);
    tcase_add_test(tc, bulk_and_decisions);
    tcase_add_test(tc, logs_command);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(client_args_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
