/* tests/e2e/test_cli_logs.c — a run's log on the command line (docs/cli.md):
 * the real binary (OPSRUN_BIN) against a real server running exec commands
 * that write to stderr, and against a scripted HTTP peer where the exact
 * requests matter.
 *
 * opsrun logs of a finished run, every page of it, as text, JSON Lines and
 * one attempt; logs --follow and watch of a running run print its lines
 * before it ends and exit with the run's code; both on a terminal (a
 * pseudo-terminal: the time and the marker, the lines above the bar, the
 * bar last); logs --follow resuming with Last-Event-ID after a break. */
#include "../support/cli.h"
#include "../support/harness.h"

#include "client/logs.h"
#include "client/watch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MANY_LINES 12000 /* three pages of GET /runs/{id}/logs */

/* A shell script at /tmp/opsrun-tests/<name>-<pid>.sh; its path (heap). */
static char *script(const char *name, const char *body)
{
    char *path = malloc(256);
    FILE *f;

    mkdir("/tmp/opsrun-tests", 0777);
    snprintf(path, 256, "/tmp/opsrun-tests/%s-%d.sh", name, (int)getpid());
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "#!/bin/sh\n%s", body);
    fclose(f);
    chmod(path, 0755);
    return path;
}

/* The gate of a gated run: a file whose content is the exit status. */
static void gate_path(const char *id, char *out, size_t cap)
{
    snprintf(out, cap, "/tmp/opsrun-tests/gate-%d-%s", (int)getpid(), id);
}

static void gate_open(const char *id, int status)
{
    char path[128], tmp[160];
    FILE *f;

    gate_path(id, path, sizeof(path));
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    f = fopen(tmp, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "%d\n", status);
    fclose(f);
    ck_assert(rename(tmp, path) == 0);
}

/* A server with three exec run types: chatty (fails its first attempt
 * with exit 75, with a tab and an escape sequence in its stderr, then
 * succeeds), many (MANY_LINES lines) and gated (waits for its gate). */
static void start(struct th_proc *p, const char *db)
{
    char body[1024], *chatty, *many, *gated, *config;

    snprintf(body, sizeof(body),
             "m=/tmp/opsrun-tests/chatty-%d-$1\n"
             "if [ ! -e \"$m\" ]; then touch \"$m\"; printf 'first try\\tfailed \\033[31mred\\n' "
             ">&2; exit 75; fi\n"
             "echo 'second try' >&2\necho '{}'\n",
             (int)getpid());
    chatty = script("cli-chatty", body);
    snprintf(body, sizeof(body), "seq 1 %d >&2\necho '{}'\n", MANY_LINES);
    many = script("cli-many", body);
    snprintf(body, sizeof(body),
             "g=/tmp/opsrun-tests/gate-%d-$1\n"
             "echo 'waiting for the gate' >&2\n"
             "while [ ! -e \"$g\" ]; do sleep 0.05; done\n"
             "echo 'through the gate' >&2\nexit $(cat \"$g\")\n",
             (int)getpid());
    gated = script("cli-gated", body);
    config = malloc(4096);
    snprintf(
        config, 4096,
        "{\"run_types\": {"
        "\"chatty\": {\"action\": \"exec\", \"max_attempts\": 2, \"retry_backoff_ms\": 100,"
        " \"params\": {\"argv\": [\"%s\", \"{{run_id}}\"]}},"
        "\"many\": {\"action\": \"exec\", \"params\": {\"argv\": [\"%s\"]}},"
        "\"gated\": {\"action\": \"exec\", \"params\": {\"argv\": [\"%s\", \"{{run_id}}\"]}}}}",
        chatty, many, gated);
    th_start_fresh(p, db, config);
    free(chatty);
    free(many);
    free(gated);
    free(config);
}

static void submit(const struct th_proc *p, const char *type, const char *id)
{
    char body[256];

    snprintf(body, sizeof(body), "{\"alert_type\": \"%s\", \"run_id\": \"%s\"}", type, id);
    free(th_submit(p, body, 202));
}

/* Asserts the client printed exactly run id's log in form (of attempt,
 * when > 0). */
static void assert_log(const struct th_proc *p, const char *id, const char *out, int form,
                       int attempt)
{
    int n;
    char *want = cli_expected_log(p->url, id, form, attempt, &n);

    ck_assert_msg(n > 0, "run %s has no log", id);
    ck_assert_msg(strcmp(out, want) == 0, "printed:\n%s\nthe log of %s:\n%s", out, id, want);
    free(want);
}

/* opsrun logs of a finished run: the text as the server has it (the
 * escape sequence too: a pipe), every page; --json; --attempt; an
 * attempt without lines; an unknown run; --follow of a finished run. */
START_TEST(logs_of_a_finished_run)
{
    struct th_proc p;
    struct cli c;
    struct th_resp r;
    json_t *line;

    start(&p, "e2e_cli_logs_finished");
    submit(&p, "chatty", "c-1");
    submit(&p, "many", "m-1");
    th_expect_outcome(&p, "c-1", "succeeded", 30);
    th_expect_outcome(&p, "m-1", "succeeded", 30);

    CLI(&c, p.url, 0, "logs", "c-1");
    th_get(p.url, "/runs/c-1/logs?format=text", &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(c.out, r.body);
    th_resp_free(&r);
    assert_log(&p, "c-1", c.out, LOGLINE_TEXT, 0);
    ck_assert_msg(strstr(c.out, "\nfirst try\tfailed \033[31mred\n"), "%s", c.out);
    ck_assert_msg(strstr(c.out, "\nattempt 2 of 2 started on "), "%s", c.out);
    ck_assert_str_eq(c.err, "");
    cli_free(&c);

    CLI(&c, p.url, 0, "logs", "c-1", "--json");
    assert_log(&p, "c-1", c.out, LOGLINE_JSON, 0);
    line = json_loads(c.out, JSON_DISABLE_EOF_CHECK, NULL);
    ck_assert_int_eq(th_ji(line, "seq"), 1);
    ck_assert_str_eq(th_js(line, "stream"), "opsrun");
    json_decref(line);
    cli_free(&c);

    CLI(&c, p.url, 0, "logs", "c-1", "--attempt", "1");
    assert_log(&p, "c-1", c.out, LOGLINE_TEXT, 1);
    ck_assert_msg(strstr(c.out, "first try") && !strstr(c.out, "second try"), "%s", c.out);
    cli_free(&c);
    CLI(&c, p.url, 0, "logs", "--attempt=2", "c-1");
    assert_log(&p, "c-1", c.out, LOGLINE_TEXT, 2);
    ck_assert_msg(!strstr(c.out, "first try") && strstr(c.out, "\nsecond try\n"), "%s", c.out);
    cli_free(&c);
    CLI(&c, p.url, 0, "logs", "c-1", "--attempt", "3");
    ck_assert_str_eq(c.out, "");
    ck_assert_str_eq(c.err, "opsrun: no log lines of attempt 3\n");
    cli_free(&c);

    /* three pages, each line once, in order */
    CLI(&c, p.url, 0, "logs", "m-1");
    assert_log(&p, "m-1", c.out, LOGLINE_TEXT, 0);
    ck_assert_int_gt(cli_count_lines(c.out), MANY_LINES);
    cli_free(&c);

    CLI(&c, p.url, 1, "logs", "nope");
    ck_assert_str_eq(c.out, "");
    ck_assert_str_eq(c.err, "opsrun: logs: Not Found: run \"nope\" not found\n");
    cli_free(&c);
    CLI(&c, p.url, 1, "logs", "nope", "--follow");
    ck_assert_str_eq(c.err, "opsrun: logs: Not Found: run \"nope\" not found\n");
    cli_free(&c);

    /* --follow of a run that is over: its lines, then its exit status */
    CLI(&c, p.url, 0, "logs", "c-1", "-f");
    assert_log(&p, "c-1", c.out, LOGLINE_TEXT, 0);
    ck_assert_str_eq(c.err, "");
    cli_free(&c);
    th_stop_clean(&p);
}
END_TEST

/* logs --follow and watch of a run that waits for its gate: both print the
 * run's first line while it still runs, then the rest once the gate
 * opens, and exit with the run's code: 1 when the command exits 3 (the
 * reason on stderr), 0 when it exits 0. */
START_TEST(follow_a_running_run)
{
    struct th_proc p;
    struct cli f, w;
    json_t *run;

    start(&p, "e2e_cli_logs_follow");
    for (int status = 3; status >= 0; status -= 3) {
        const char *id = status ? "g-1" : "g-2";
        char want[160];
        submit(&p, "gated", id);
        ck_assert(th_wait_status(&p, id, "running", 15000));
        cli_spawn(&f, p.url, (const char *const[]){"logs", id, "--follow", NULL});
        cli_spawn(&w, p.url, (const char *const[]){"watch", id, NULL});
        ck_assert_msg(cli_file_has(f.out_path, "waiting for the gate\n", 15000),
                      "logs --follow showed no line");
        ck_assert_msg(cli_file_has(w.out_path, "log       stderr  waiting for the gate\n", 15000),
                      "watch showed no log line");
        run = th_get_run(&p, id);
        ck_assert_str_eq(th_js(run, "status"), "running");
        json_decref(run);
        ck_assert(cli_running(&f) && cli_running(&w));
        gate_open(id, status);

        ck_assert_int_eq(cli_wait(&f, 30), status ? 1 : 0);
        assert_log(&p, id, f.out, LOGLINE_TEXT, 0);
        ck_assert_msg(strstr(f.out, "\nthrough the gate\n"), "%s", f.out);
        snprintf(want, sizeof(want), "opsrun: run %s failed (exit_failed): ", id);
        if (status)
            ck_assert_msg(cli_starts_with(f.err, want), "%s", f.err);
        else
            ck_assert_str_eq(f.err, "");
        ck_assert_int_eq(cli_wait(&w, 30), status ? 1 : 0);
        {
            char *logs = cli_lines_with(w.out, "log ", true), line[512];
            int n = cli_count_lines(w.out);
            assert_log(&p, id, logs, LOGLINE_WATCH, 0);
            ck_assert(cli_line_at(w.out, n - 2, line, sizeof(line)));
            ck_assert_msg(cli_starts_with(line, "status    completed"), "%s", w.out);
            free(logs);
        }
        cli_free(&f);
        cli_free(&w);
    }
    th_stop_clean(&p);
}
END_TEST

/* On a terminal: logs prints the time of day and the marker, in color
 * unless NO_COLOR; watch keeps its bar as the last line while the log
 * lines scroll above it, and ends with the log, the bar and the result. */
START_TEST(on_a_terminal)
{
    static const char *const no_color[] = {"NO_COLOR=1", NULL};
    struct th_proc p;
    struct cli c;
    char *screen, *want, bar[256], last[256];
    int n;
    json_t *run;

    start(&p, "e2e_cli_logs_tty");
    submit(&p, "chatty", "c-1");
    th_expect_outcome(&p, "c-1", "succeeded", 30);

    cli_spawn_pty(&c, p.url, (const char *const[]){"logs", "c-1", NULL}, NULL, 80);
    ck_assert_int_eq(cli_wait(&c, 30), 0);
    ck_assert_msg(strstr(c.out, "\033[2m") && strstr(c.out, "\033[36m* attempt 1 of 2 started"),
                  "%s", c.out);
    screen = cli_screen(c.out, c.out_len);
    assert_log(&p, "c-1", screen, LOGLINE_TERMINAL, 0);
    ck_assert_msg(strstr(screen, "   first try\tfailed ?[31mred\n"), "%s", screen);
    free(screen);
    cli_free(&c);
    cli_spawn_pty(&c, p.url, (const char *const[]){"logs", "c-1", NULL}, no_color, 80);
    ck_assert_int_eq(cli_wait(&c, 30), 0);
    ck_assert_msg(!strchr(c.out, '\033'), "%s", c.out);
    cli_free(&c);

    submit(&p, "gated", "g-1");
    ck_assert(th_wait_status(&p, "g-1", "running", 15000));
    cli_spawn_pty(&c, p.url, (const char *const[]){"watch", "g-1", NULL}, NULL, 80);
    /* the line, then the bar drawn again under it */
    ck_assert_msg(cli_pty_until(&c, "   waiting for the gate\r\n\r\033[K[", 15000),
                  "no log line: %s", c.tty);
    screen = cli_screen(c.tty, c.tty_len);
    n = cli_count_lines(screen);
    ck_assert(cli_line_at(screen, n - 2, last, sizeof(last)));
    ck_assert_msg(strstr(last, "   waiting for the gate"), "%s", screen);
    ck_assert(cli_line_at(screen, n - 1, last, sizeof(last)));
    ck_assert_msg(cli_starts_with(last, "[------------------------]   0%  running"), "%s", screen);
    free(screen);
    gate_open("g-1", 0);
    ck_assert_int_eq(cli_wait(&c, 30), 0);

    screen = cli_screen(c.out, c.out_len);
    run = th_get_run(&p, "g-1");
    watch_format_bar(run, 80, bar, sizeof(bar));
    json_decref(run);
    want = cli_expected_log(p.url, "g-1", LOGLINE_TERMINAL, 0, &n);
    want = realloc(want, strlen(want) + 512);
    snprintf(want + strlen(want), 512, "%s\nrun g-1 succeeded\n", bar);
    ck_assert_msg(strcmp(screen, want) == 0, "the screen:\n%s\nwant:\n%s", screen, want);
    ck_assert_str_eq(c.err, "");
    free(want);
    free(screen);
    cli_free(&c);
    th_stop_clean(&p);
}
END_TEST

/* ---- a scripted peer ---- */

#define STREAM_HEAD                                                                                \
    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\nretry: "       \
    "3000\n\n"
#define LINE(seq, attempt, text)                                                                   \
    "id: " #seq "\nevent: log\ndata: {\"seq\":" #seq ",\"attempt\":" #attempt                      \
    ",\"at\":\"2026-12-06T14:46:10Z\",\"stream\":\"stderr\",\"text\":\"" text "\"}\n\n"

/* logs --follow: the token; after a break, Last-Event-ID with the last
 * line's seq; a 503 retried after its Retry-After; the end, then the
 * run's outcome from GET /runs/{id}: failed, so exit 1 and why on stderr.
 * --attempt keeps one attempt's lines. */
START_TEST(follow_requests)
{
    struct cli c;
    char req[4096], url[64];
    int port, lfd = cli_peer_listen(&port), fd;

    snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
    cli_spawn(
        &c, url,
        (const char *const[]){"logs", "w-1", "-f", "--attempt", "2", "--token", "tok-9", NULL});
    fd = cli_peer_accept(lfd, req, sizeof(req));
    ck_assert_msg(cli_starts_with(req, "GET /runs/w-1/logs/stream HTTP/1.1\r\n"), "%s", req);
    ck_assert_msg(cli_has_header(req, "Authorization: Bearer tok-9"), "%s", req);
    ck_assert_msg(cli_has_header(req, "Accept: text/event-stream"), "%s", req);
    ck_assert_msg(!strstr(req, "Last-Event-ID"), "%s", req);
    cli_peer_answer(fd, STREAM_HEAD LINE(1, 1, "one") LINE(2, 2, "two"));

    fd = cli_peer_accept(lfd, req, sizeof(req));
    ck_assert_msg(cli_starts_with(req, "GET /runs/w-1/logs/stream HTTP/1.1\r\n"), "%s", req);
    ck_assert_msg(cli_has_header(req, "Last-Event-ID: 2"), "%s", req);
    cli_peer_answer(fd, "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: "
                        "0\r\nConnection: close\r\n\r\n");

    fd = cli_peer_accept(lfd, req, sizeof(req));
    ck_assert_msg(cli_has_header(req, "Last-Event-ID: 2"), "%s", req);
    cli_peer_answer(fd, STREAM_HEAD LINE(3, 2, "three\\u001b") "event: end\ndata: "
                                                               "{\"last_seq\":3}\n\n");

    fd = cli_peer_accept(lfd, req, sizeof(req));
    ck_assert_msg(cli_starts_with(req, "GET /runs/w-1 HTTP/1.1\r\n"), "%s", req);
    ck_assert_msg(cli_has_header(req, "Authorization: Bearer tok-9"), "%s", req);
    cli_peer_answer(fd, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 112"
                        "\r\nConnection: close\r\n\r\n"
                        "{\"id\":\"w-1\",\"status\":\"completed\",\"outcome\":\"failed\",\"error\":"
                        "{\"code\":\"boom\",\"message\":\"it broke\"},\"progress\":100}");
    ck_assert_int_eq(cli_wait(&c, 20), 1);
    ck_assert_str_eq(c.out, "two\nthree\033\n");
    ck_assert_msg(cli_starts_with(c.err, "opsrun: log stream of run w-1 lost (the stream ended "
                                         "before the run did); reconnecting in "),
                  "%s", c.err);
    ck_assert_msg(strstr(c.err, "\nopsrun: log stream of run w-1 lost (HTTP 503); reconnecting "
                                "in 1.0 s (try 3 of 10)\n"),
                  "%s", c.err);
    ck_assert_msg(strstr(c.err, "\nopsrun: run w-1 failed (boom): it broke\n"), "%s", c.err);
    ck_assert_int_eq(cli_count_lines(c.err), 3);
    cli_free(&c);
    close(lfd);
}
END_TEST

static Suite *cli_logs_suite(void)
{
    Suite *s = suite_create("e2e_cli_logs");
    const struct {
        const char *name;
        const TTest *fn;
        int timeout;
    } cases[] = {
        {"logs_of_a_finished_run", logs_of_a_finished_run, 120},
        {"follow_a_running_run", follow_a_running_run, 120},
        {"on_a_terminal", on_a_terminal, 120},
        {"follow_requests", follow_requests, 60},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        TCase *tc = tcase_create(cases[i].name);
        tcase_set_timeout(tc, cases[i].timeout);
        tcase_add_test(tc, cases[i].fn);
        suite_add_tcase(s, tc);
    }
    return s;
}

int main(void)
{
    return th_run_suite(cli_logs_suite());
}
