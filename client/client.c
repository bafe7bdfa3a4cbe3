/* client/client.c — see client.h. */
#include "client/client.h"

#include "client/api.h"
#include "client/args.h"
#include "client/cmd.h"

#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define COLUMNS_DEFAULT 80

const char client_usage[] =
    "client commands (they talk HTTP to a running server):\n"
    "  submit TYPE [--data JSON] [--run-id ID] [--watch]\n"
    "             submit a run of TYPE and print its id; --watch then follows it\n"
    "  watch ID   follow a run to its end, with its log lines: exit 0 when it\n"
    "             succeeded, 1 when it ended otherwise, 2 when the server could\n"
    "             not be reached\n"
    "  logs ID [--attempt N] [--follow|-f] [--json]\n"
    "             print a run's log lines, oldest first (--json: one object a\n"
    "             line); --follow then prints new lines until the run ends, and\n"
    "             exits as watch does\n"
    "  runs [--status S] [--type T] [--schedule NAME] [--parent ID] [--approval pending]\n"
    "       [--concurrency-key K [--concurrency-group G]] [--limit N] [--json]\n"
    "             list runs, newest first: a table, or the server's JSON\n"
    "  cancel ID  cancel a run\n"
    "  cancel [--status S,...] [--type T] [--since 1h] [--schedule NAME] [--parent ID]\n"
    "         [--all] [--dry-run] [--limit N] [--json]\n"
    "             cancel every queued, running or waiting run that matches\n"
    "  retry ID [--watch]\n"
    "             start a completed run that did not succeed again; print the new id\n"
    "  retry [--outcome O,...] [--type T] [--since 1h] [--schedule NAME] [--parent ID]\n"
    "        [--all] [--dry-run] [--limit N] [--json]\n"
    "             retry every completed run that matches and did not succeed\n"
    "  approve ID [--comment TEXT], reject ID [--comment TEXT]\n"
    "             decide on a run that waits for approval\n"
    "  health     exit 0 when the server is ready to take traffic (GET /readyz)\n"
    "  schedules [--json]\n"
    "             list the schedules: next fire, paused, the last run's outcome\n"
    "  schedule pause|resume NAME\n"
    "             pause or resume a schedule on every replica\n"
    "  schedule trigger NAME [--watch]\n"
    "             a run of the schedule now; print its id\n"
    "\n"
    "client flags (each also an environment variable):\n"
    "  --server URL           OPSRUN_SERVER        default " ARGS_DEFAULT_SERVER "\n"
    "  --token TOKEN          OPSRUN_TOKEN         sent as \"Authorization: Bearer TOKEN\"\n";

static const char *env_get(const char *name)
{
    return getenv(name);
}

static struct watch_view view_of_stdout(void)
{
    struct watch_view v = {.out = stdout, .err = stderr, .columns = COLUMNS_DEFAULT};
    const char *term = getenv("TERM"), *no_color = getenv("NO_COLOR");
    struct winsize ws;

    v.tty = isatty(STDOUT_FILENO) && !(term && strcmp(term, "dumb") == 0);
    v.color = v.tty && !(no_color && *no_color); /* https://no-color.org */
    if (v.tty && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        v.columns = ws.ws_col;
    return v;
}

bool client_wants(int argc, char **argv)
{
    return args_is_client(argc, argv);
}

void client_suggest_command(struct suggest *s)
{
    args_suggest_command(s);
}

int client_main(int argc, char **argv)
{
    struct watch_view v = view_of_stdout();
    struct error err = {0};
    struct args args;
    struct api *a;
    int rc;

    if (args_parse(argc, argv, env_get, &args, &err) != ST_OK) {
        fprintf(stderr, "opsrun: %s\n(opsrun --help lists the commands and flags)\n", err.message);
        return CMD_USAGE;
    }
    if (args.help) {
        printf("usage: opsrun <command> [flags]\n\n%s", client_usage);
        return CMD_OK;
    }
    if (api_global_init(&err) != ST_OK) {
        fprintf(stderr, "opsrun: %s\n", err.message);
        return CMD_USAGE;
    }
    a = api_new(args.server, args.token);
    rc = cmd_run(a, &args, &v);
    api_free(a);
    api_global_cleanup();
    return rc;
}
