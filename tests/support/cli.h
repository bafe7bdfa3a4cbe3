/* tests/support/cli.h — the client commands (docs/cli.md) run as a user
 * runs them, for the end-to-end suites of the CLI: the real binary
 * (OPSRUN_BIN) with its output to files, or its standard output on a
 * pseudo-terminal of a given width (stderr still to a file), and a
 * scripted HTTP peer for the tests where the exact requests matter. Text
 * helpers for what it printed, and a small terminal that replays what a
 * pseudo-terminal got (carriage returns, "erase line", newlines) into the
 * lines left on the screen.
 *
 * Failures abort the test (Check). One thread. */
#ifndef OPSRUN_TEST_CLI_H
#define OPSRUN_TEST_CLI_H

#include <check.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct cli {
    pid_t pid;
    char out_path[128], err_path[128];
    int pty;   /* the terminal's master side, or -1 */
    int rc;    /* exit status; -1 when it had to be killed */
    char *out; /* its standard output, once it ended (heap) */
    char *err; /* its standard error */
    size_t out_len;
    char *tty; /* what the terminal got so far (heap) */
    size_t tty_len;
};

/* Starts `opsrun args...` with OPSRUN_SERVER=server (NULL: unset), no
 * OPSRUN_TOKEN nor NO_COLOR, and env's "K=V" entries (NULL: none), its
 * output going to files. */
void cli_spawn_env(struct cli *c, const char *server, const char *const *args,
                   const char *const *env);
void cli_spawn(struct cli *c, const char *server, const char *const *args);
/* The same with standard output on a pseudo-terminal of cols columns,
 * TERM=xterm. */
void cli_spawn_pty(struct cli *c, const char *server, const char *const *args,
                   const char *const *env, int cols);
/* Reads what the terminal gets until it holds needle (true) or timeout_ms
 * passed (false); c->tty has it all so far. */
bool cli_pty_until(struct cli *c, const char *needle, int timeout_ms);
/* Whether the client still runs. */
bool cli_running(struct cli *c);
/* Waits up to timeout_s for the client to end and reads its output (on a
 * terminal: all it got, escape sequences and CRs included). */
int cli_wait(struct cli *c, int timeout_s);
void cli_free(struct cli *c);

/* Runs the client to its end (at most 60 s); asserts its exit status. */
#define CLI(c, server, want, ...)                                                                  \
    do {                                                                                           \
        cli_spawn((c), (server), (const char *const[]){__VA_ARGS__, NULL});                        \
        cli_wait((c), 60);                                                                         \
        ck_assert_msg((c)->rc == (want), "opsrun %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s",  \
                      #__VA_ARGS__, (c)->rc, (want), (c)->out, (c)->err);                          \
    } while (0)

/* A file's whole content (heap; "" when it cannot be read). */
char *cli_slurp(const char *path);
/* Waits up to timeout_ms until the file holds needle. */
bool cli_file_has(const char *path, const char *needle, int timeout_ms);
/* The n-th line of text (from 0), without its newline, into out. */
bool cli_line_at(const char *text, int n, char *out, size_t cap);
int cli_count_lines(const char *text);
bool cli_starts_with(const char *s, const char *prefix);
/* The lines of text that start with prefix (keep) or do not (!keep),
 * each with its newline (heap). */
char *cli_lines_with(const char *text, const char *prefix, bool keep);

/* The lines a terminal shows after it got the n bytes of raw: CR moves to
 * the line's start, LF to the next line, ESC [ K erases to the line's end,
 * other escape sequences (colors) are dropped; writing past the end of
 * what a line holds extends it. Each line with a newline (heap). */
char *cli_screen(const char *raw, size_t n);

/* What the client should print for run id's log (every page of GET
 * /runs/{id}/logs from the server at base), in a form of client/logs.h
 * (enum logline_form), without color; only attempt's lines when it is > 0
 * (heap). *nlines: how many lines. */
char *cli_expected_log(const char *base, const char *id, int form, int attempt, int *nlines);

/* ---- a scripted HTTP peer ---- */

/* A listening loopback socket; its port in *port. */
int cli_peer_listen(int *port);
/* Accepts the next connection (within 15 s) and reads its request head. */
int cli_peer_accept(int lfd, char *req, size_t cap);
/* Writes raw and closes the connection. */
void cli_peer_answer(int fd, const char *raw);
/* Whether the request head has this header line exactly. */
bool cli_has_header(const char *req, const char *line);
/* A loopback port with nothing listening on it. */
int cli_dead_port(void);

#endif
