/* client/client.h — the client commands of the opsrun program (submit,
 * watch, logs, runs, cancel, retry, health, ...): main() hands them the command line
 * when client_wants() says it names one. They talk HTTP to a running
 * server (--server / OPSRUN_SERVER, --token / OPSRUN_TOKEN) and share
 * nothing with serve: no configuration, no database. docs/cli.md has the
 * user's view. Called once, from the main thread. */
#ifndef OPSRUN_CLIENT_H
#define OPSRUN_CLIENT_H

#include <stdbool.h>

struct suggest;

/* The part of `opsrun --help` that lists the client commands. */
extern const char client_usage[];

/* Whether argv's command is a client command. */
bool client_wants(int argc, char **argv);
/* Offers every client command's name to s (common/suggest.h), for the
 * "did you mean" of an unknown command. */
void client_suggest_command(struct suggest *s);
/* Parses argv and runs the command; returns the exit status (0 done, 1
 * refused or, for watch, a run that did not succeed, 2 usage or connection
 * errors). */
int client_main(int argc, char **argv);

#endif
