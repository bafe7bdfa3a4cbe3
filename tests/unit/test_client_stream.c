/* tests/unit/test_client_stream.c — what `opsrun watch` makes of a stream:
 * the event-stream parser (client/evparse.c) against the WHATWG rules,
 * fed in every split a network can make, and its caps; then the lines,
 * the progress bar and the result it prints (client/watch.c), the runs
 * table (client/cmd.c), the cleaning of server text before it reaches
 * a terminal (client/report.c), and a run's log lines in each of their
 * forms, with the events they come in and the pages they are read by
 * (client/logs.c). */
#include "client/cmd.h"
#include "client/evparse.h"
#include "client/logs.h"
#include "client/report.h"
#include "client/watch.h"

#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the parser ---- */

/* The events a parse dispatched, as "type|id|data" lines. */
struct seen {
    char text[8192];
    int n;
    int stop_after; /* > 0: the callback fails on this event */
};

static enum status collect(void *arg, const struct evparse_event *ev, struct error *err)
{
    struct seen *s = arg;
    size_t len = strlen(s->text);

    ck_assert_uint_eq(strlen(ev->data), ev->data_len); /* NUL-terminated, no NUL inside */
    snprintf(s->text + len, sizeof(s->text) - len, "%s|%s|%s\n", ev->type, ev->id, ev->data);
    if (++s->n == s->stop_after)
        return error_set(err, ST_INVALID, "stop at %d", s->n);
    return ST_OK;
}

static enum status feed(struct evparse *p, const char *text, struct error *err)
{
    return evparse_feed(p, text, strlen(text), err);
}

/* Parses body fed in pieces of at most chunk bytes (0: all at once). */
static const char *parse_all(const char *body, size_t chunk, struct seen *s)
{
    struct evparse p;
    struct error err = {0};
    size_t n = strlen(body), step = chunk ? chunk : n;

    memset(s, 0, sizeof(*s));
    evparse_init(&p, 1024, collect, s);
    for (size_t i = 0; i < n; i += step)
        ck_assert_int_eq(evparse_feed(&p, body + i, n - i < step ? n - i : step, &err), ST_OK);
    evparse_cleanup(&p);
    return s->text;
}

static const char opsrun_stream[] =
    "retry: 3000\n\n"
    "id: 2\nevent: snapshot\ndata: {\"id\":\"r\",\"progress\":0}\n\n"
    ": hb\n\n"
    "id: 3\nevent: progress\ndata: {\"id\":\"r\",\"progress\":50}\n\n"
    "id: 5\nevent: status\ndata: {\"status\":\"completed\"}\n\n";
static const char opsrun_events[] = "snapshot|2|{\"id\":\"r\",\"progress\":0}\n"
                                    "progress|3|{\"id\":\"r\",\"progress\":50}\n"
                                    "status|5|{\"status\":\"completed\"}\n";

START_TEST(stream_of_opsrun)
{
    struct seen s;

    ck_assert_str_eq(parse_all(opsrun_stream, 0, &s), opsrun_events);
    ck_assert_int_eq(s.n, 3);
}
END_TEST

/* Every piece size, down to one byte at a time, gives the same events. */
START_TEST(any_split)
{
    struct seen s;

    for (size_t chunk = 1; chunk <= sizeof(opsrun_stream); chunk++)
        ck_assert_str_eq(parse_all(opsrun_stream, chunk, &s), opsrun_events);
}
END_TEST

/* CRLF, CR and LF all end lines, also mixed, also a CRLF split in two. */
START_TEST(line_endings)
{
    static const char *const bodies[] = {
        "data: a\r\n\r\ndata: b\r\n\r\n",
        "data: a\r\rdata: b\r\r",
        "data: a\n\ndata: b\n\n",
        "data: a\r\n\ndata: b\r\r\n",
    };
    struct seen s;

    for (size_t i = 0; i < ARRAY_LEN(bodies); i++)
        for (size_t chunk = 0; chunk <= 3; chunk++)
            ck_assert_msg(strcmp(parse_all(bodies[i], chunk, &s), "message||a\nmessage||b\n") == 0,
                          "body %zu chunk %zu: %s", i, chunk, s.text);
}
END_TEST

START_TEST(fields)
{
    struct seen s;

    /* data lines join with LF; one space after the colon is dropped, not two */
    ck_assert_str_eq(parse_all("data: one\ndata:two\ndata:  three\n\n", 1, &s),
                     "message||one\ntwo\n three\n");
    /* "data" alone is an empty line of data; an event with no data is not sent */
    ck_assert_str_eq(parse_all("data\n\nevent: x\n\nid: 7\n\n", 0, &s), "message||\n");
    /* the id lasts across events, an empty id clears it, one with a NUL is ignored */
    ck_assert_str_eq(parse_all("id: 9\ndata: a\n\ndata: b\n\nid\ndata: c\n\n", 0, &s),
                     "message|9|a\nmessage|9|b\nmessage||c\n");
    /* comments and unknown fields are skipped; the event type resets after each event */
    ck_assert_str_eq(parse_all(": hello\nfoo: bar\nevent: status\ndata: x\n\ndata: y\n\n", 0, &s),
                     "status||x\nmessage||y\n");
    /* what is not ended by a blank line before the body ends is never sent */
    ck_assert_str_eq(parse_all("data: a\n\ndata: b\n", 0, &s), "message||a\n");
    ck_assert_str_eq(parse_all("data: a\n\ndata: b", 0, &s), "message||a\n");
}
END_TEST

START_TEST(id_with_nul_ignored)
{
    static const char body[] = "id: 4\ndata: a\n\nid: 5\0x\ndata: b\n\n";
    struct seen s = {0};
    struct evparse p;
    struct error err = {0};

    evparse_init(&p, 1024, collect, &s);
    ck_assert_int_eq(evparse_feed(&p, body, sizeof(body) - 1, &err), ST_OK);
    ck_assert_str_eq(s.text, "message|4|a\nmessage|4|b\n");
    evparse_cleanup(&p);
}
END_TEST

START_TEST(retry_field)
{
    struct seen s = {0};
    struct evparse p;
    struct error err = {0};

    evparse_init(&p, 1024, collect, &s);
    ck_assert_int_eq(p.retry_ms, -1);
    ck_assert_int_eq(feed(&p, "retry: 2500\n\n", &err), ST_OK);
    ck_assert_int_eq(p.retry_ms, 2500);
    ck_assert_int_eq(feed(&p, "retry: 1s\nretry: -1\nretry:\n\n", &err), ST_OK);
    ck_assert_int_eq(p.retry_ms, 2500);
    ck_assert_int_eq(s.n, 0);
    evparse_cleanup(&p);
}
END_TEST

/* A BOM is dropped at the very start only, even split across pieces. */
START_TEST(bom)
{
    struct seen s;

    for (size_t chunk = 0; chunk <= 4; chunk++)
        ck_assert_str_eq(parse_all("\xEF\xBB\xBF"
                                   "data: a\n\n\xEF\xBB\xBF"
                                   "data: b\n\n",
                                   chunk, &s),
                         "message||a\n");
}
END_TEST

/* A new connection: what was half read is dropped, the last id stays. */
START_TEST(reset_keeps_id)
{
    struct seen s = {0};
    struct evparse p;
    struct error err = {0};

    evparse_init(&p, 1024, collect, &s);
    ck_assert_int_eq(feed(&p, "id: 3\ndata: a\n\nid: 4\ndata: half", &err), ST_OK);
    ck_assert_str_eq(evparse_last_id(&p), "4");
    evparse_reset(&p);
    ck_assert_int_eq(feed(&p, "data: b\n\n", &err), ST_OK);
    ck_assert_str_eq(s.text, "message|3|a\nmessage|4|b\n");
    evparse_cleanup(&p);
}
END_TEST

/* A line or an event past the cap is refused; a callback's failure stops
 * the parse and is returned. */
START_TEST(caps_and_stops)
{
    struct seen s = {0};
    struct evparse p;
    struct error err = {0};
    char big[64];

    memset(big, 'x', sizeof(big));
    evparse_init(&p, 32, collect, &s);
    ck_assert_int_eq(feed(&p, "data: ", &err), ST_OK);
    ck_assert_int_eq(evparse_feed(&p, big, sizeof(big), &err), ST_TOO_LARGE);
    ck_assert_str_eq(err.message, "event stream line or event longer than 32 bytes");
    evparse_cleanup(&p);

    memset(&s, 0, sizeof(s));
    evparse_init(&p, 32, collect, &s);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(feed(&p, "data: 0123456789\n", &err), i < 2 ? ST_OK : ST_TOO_LARGE);
    evparse_cleanup(&p);

    memset(&s, 0, sizeof(s));
    s.stop_after = 2;
    evparse_init(&p, 1024, collect, &s);
    ck_assert_int_eq(evparse_feed(&p, opsrun_stream, strlen(opsrun_stream), &err), ST_INVALID);
    ck_assert_str_eq(err.message, "stop at 2");
    ck_assert_int_eq(s.n, 2);
    evparse_cleanup(&p);
}
END_TEST

/* ---- what watch prints ---- */

static json_t *run_json(const char *text)
{
    json_error_t jerr;
    json_t *j = json_loads(text, 0, &jerr);

    ck_assert_msg(j != NULL, "%s: %s", text, jerr.text);
    return j;
}

START_TEST(event_lines)
{
    json_t *run = run_json("{\"id\":\"r\",\"status\":\"running\",\"outcome\":\"pending\","
                           "\"progress\":50,\"step\":\"step 2 of 4\"}");
    char line[512];

    watch_format_line("progress", run, line, sizeof(line));
    ck_assert_str_eq(line, "progress  running    pending    50%  step 2 of 4");
    json_object_set_new(run, "step", json_null());
    json_object_set_new(run, "status", json_string("queued"));
    json_object_set_new(run, "progress", json_integer(0));
    watch_format_line("snapshot", run, line, sizeof(line));
    ck_assert_str_eq(line, "snapshot  queued     pending     0%");
    /* a step cannot move the cursor, ring the bell or end the line */
    json_object_set_new(run, "step",
                        json_string("a\x1b[2Jb\nc\x07\xc2\x9b"
                                    "d"));
    watch_format_line("progress", run, line, sizeof(line));
    ck_assert_str_eq(line, "progress  queued     pending     0%  a?[2Jb?c??d");
    json_decref(run);
}
END_TEST

/* A workflow's steps that changed, a line each; nothing for other runs. */
START_TEST(step_lines)
{
    json_t *a = run_json("{\"id\":\"w\",\"status\":\"waiting\",\"workflow\":{\"steps\":{"
                         "\"diagnose\":{\"state\":\"running\"},\"clean\":{\"state\":\"pending\"},"
                         "\"page\":{\"state\":\"pending\"}}}}");
    json_t *b = run_json("{\"id\":\"w\",\"status\":\"waiting\",\"workflow\":{\"steps\":{"
                         "\"diagnose\":{\"state\":\"succeeded\"},\"clean\":{\"state\":\"queued\"},"
                         "\"page\":{\"state\":\"skipped\"}}}}");
    json_t *plain = run_json("{\"id\":\"r\",\"status\":\"running\",\"workflow\":null}");
    char out[512];

    watch_format_steps(NULL, a, out, sizeof(out));
    ck_assert_str_eq(out, "step      diagnose  running\n");
    watch_format_steps(a, b, out, sizeof(out));
    ck_assert_str_eq(out, "step      diagnose  succeeded\nstep      clean  queued\n"
                          "step      page  skipped\n");
    watch_format_steps(b, b, out, sizeof(out));
    ck_assert_str_eq(out, "");
    watch_format_steps(NULL, plain, out, sizeof(out));
    ck_assert_str_eq(out, "");
    ck_assert_int_lt(watch_step_rank("pending"), watch_step_rank("queued"));
    ck_assert_int_eq(watch_step_rank("queued"), watch_step_rank("waiting"));
    ck_assert_int_lt(watch_step_rank("waiting"), watch_step_rank("running"));
    ck_assert_int_lt(watch_step_rank("cancelling"), watch_step_rank("skipped"));
    ck_assert_int_eq(watch_step_rank("succeeded"), watch_step_rank("failed"));
    watch_format_steps(a, b, out, 20); /* cut, still a string */
    ck_assert_uint_lt(strlen(out), 20);
    json_decref(a);
    json_decref(b);
    json_decref(plain);
}
END_TEST

START_TEST(progress_bar)
{
    json_t *run = run_json("{\"id\":\"r\",\"status\":\"running\",\"outcome\":\"pending\","
                           "\"progress\":50,\"step\":\"step 2 of 4\"}");
    char line[512];

    watch_format_bar(run, 80, line, sizeof(line));
    ck_assert_str_eq(line, "[############------------]  50%  running  step 2 of 4");
    /* never as wide as the terminal, so it never wraps */
    watch_format_bar(run, 41, line, sizeof(line));
    ck_assert_str_eq(line, "[############------------]  50%  running");
    watch_format_bar(run, 47, line, sizeof(line));
    ck_assert_str_eq(line, "[############------------]  50%  running  step");
    watch_format_bar(run, 20, line, sizeof(line));
    ck_assert_str_eq(line, "[############------");
    /* the step is cut by characters, not inside one */
    json_object_set_new(run, "step", json_string("\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"));
    watch_format_bar(run, 45, line, sizeof(line));
    ck_assert_str_eq(line, "[############------------]  50%  running  \xc3\xa9\xc3\xa9");
    /* completed: the outcome instead of the status */
    json_object_set_new(run, "status", json_string("completed"));
    json_object_set_new(run, "outcome", json_string("succeeded"));
    json_object_set_new(run, "progress", json_integer(100));
    json_object_set_new(run, "step", json_null());
    watch_format_bar(run, 80, line, sizeof(line));
    ck_assert_str_eq(line, "[########################] 100%  succeeded");
    json_decref(run);
}
END_TEST

START_TEST(result_line)
{
    json_t *ok = run_json("{\"id\":\"r-1\",\"status\":\"completed\",\"outcome\":\"succeeded\","
                          "\"error\":null}");
    json_t *bad =
        run_json("{\"id\":\"r-2\",\"status\":\"completed\",\"outcome\":\"failed\","
                 "\"error\":{\"code\":\"simulated_failure\",\"message\":\"boom\\nbang\"}}");
    json_t *gone = run_json("{\"id\":\"r-3\",\"status\":\"completed\",\"outcome\":\"cancelled\","
                            "\"error\":null}");
    char line[512];

    watch_format_result(ok, line, sizeof(line));
    ck_assert_str_eq(line, "run r-1 succeeded");
    ck_assert_int_eq(watch_exit_of(ok), WATCH_SUCCEEDED);
    watch_format_result(bad, line, sizeof(line));
    ck_assert_str_eq(line, "run r-2 failed (simulated_failure): boom?bang");
    ck_assert_int_eq(watch_exit_of(bad), WATCH_OTHER);
    watch_format_result(gone, line, sizeof(line));
    ck_assert_str_eq(line, "run r-3 cancelled");
    ck_assert_int_eq(watch_exit_of(gone), WATCH_OTHER);
    json_decref(ok);
    json_decref(bad);
    json_decref(gone);
}
END_TEST

START_TEST(clean_text)
{
    char out[16];

    ck_assert_int_eq(report_clean("plain", out, sizeof(out), -1), 5);
    ck_assert_str_eq(out, "plain");
    ck_assert_int_eq(report_clean("a\tb\x7f"
                                  "c",
                                  out, sizeof(out), -1),
                     5);
    ck_assert_str_eq(out, "a?b?c");
    /* a byte that starts no sequence, and a sequence cut short */
    ck_assert_int_eq(report_clean("\xff"
                                  "a\xc3",
                                  out, sizeof(out), -1),
                     3);
    ck_assert_str_eq(out, "?a?");
    /* overlong forms, surrogates and code points past U+10FFFF are not UTF-8 */
    ck_assert_int_eq(report_clean("\xc0\xaf\xed\xa0\x80\xf4\x90\x80\x80", out, sizeof(out), -1), 9);
    ck_assert_str_eq(out, "?????????");
    /* max_cols counts characters; cap never cuts a sequence */
    ck_assert_int_eq(report_clean("\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac", out, sizeof(out), 2), 2);
    ck_assert_str_eq(out, "\xe2\x82\xac\xe2\x82\xac");
    ck_assert_int_eq(report_clean("\xe2\x82\xac\xe2\x82\xac", out, 6, -1), 1);
    ck_assert_str_eq(out, "\xe2\x82\xac");
}
END_TEST

START_TEST(runs_table)
{
    json_t *runs = run_json(
        "[{\"id\":\"01M80NWRSGG93QZSVK6VHZPY45\",\"type\":\"demo\",\"status\":\"completed\","
        "\"outcome\":\"succeeded\",\"progress\":100,\"created_at\":\"2026-11-22T03:48:12.721395Z\"}"
        ","
        "{\"id\":\"r\",\"type\":\"d\xc3\xa9ploy\",\"status\":\"running\",\"outcome\":\"pending\","
        "\"progress\":5,\"created_at\":\"2026-11-22T03:49:00.000001Z\"}]");
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    cmd_runs_table(f, runs);
    fclose(f);
    ck_assert_str_eq(text, "ID                          TYPE    STATUS      OUTCOME              "
                           "PROGRESS  CREATED (UTC)\n"
                           "01M80NWRSGG93QZSVK6VHZPY45  demo    completed   succeeded              "
                           "  100%  2026-11-22 03:48:12\n"
                           "r                           d\xc3\xa9ploy  running     pending         "
                           "           5%  2026-11-22 03:49:00\n");
    free(text);
    json_decref(runs);
}
END_TEST

/* ---- log lines ---- */

/* What logline_print writes for line (JSON text) in form. */
static char *printed(const char *line_json, enum logline_form form, bool color)
{
    json_t *line = json_loads(line_json, JSON_ALLOW_NUL, NULL);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    logline_print(f, line, form, color);
    fclose(f);
    json_decref(line);
    return text;
}

static const char own_line[] = "{\"seq\":1,\"attempt\":1,\"at\":\"2026-12-06T14:46:10.864845Z\","
                               "\"stream\":\"opsrun\",\"text\":\"attempt 1 of 3 started\"}";
static const char err_line[] = "{\"seq\":3,\"attempt\":2,\"at\":\"2026-12-06T14:46:11.5Z\","
                               "\"stream\":\"stderr\",\"text\":\"a\\tb \\u001b[2Jc\\u0000d\\r\"}";

#define CHECK_PRINTED(line, form, color, want)                                                     \
    do {                                                                                           \
        char *got_ = printed((line), (form), (color));                                             \
        ck_assert_str_eq(got_, (want));                                                            \
        free(got_);                                                                                \
    } while (0)

/* The text alone, as the server has it, control characters and all: for
 * a pipe or a file. */
START_TEST(log_text_form)
{
    char *got = printed(err_line, LOGLINE_TEXT, false);

    ck_assert_int_eq(memcmp(got, "a\tb \x1b[2Jc\0d\r\n", 13), 0);
    free(got);
    CHECK_PRINTED(own_line, LOGLINE_TEXT, false, "attempt 1 of 3 started\n");
    CHECK_PRINTED("{\"seq\":4,\"stream\":\"stderr\",\"text\":\"\"}", LOGLINE_TEXT, false, "\n");
}
END_TEST

/* On a terminal: the time of day (UTC), "*" for opsrun's lines, the text
 * cleaned but for its tabs; with color, a dim time and cyan own lines. */
START_TEST(log_terminal_form)
{
    CHECK_PRINTED(own_line, LOGLINE_TERMINAL, false, "14:46:10 * attempt 1 of 3 started\n");
    CHECK_PRINTED(err_line, LOGLINE_TERMINAL, false, "14:46:11   a\tb ?[2Jc?d?\n");
    CHECK_PRINTED(own_line, LOGLINE_TERMINAL, true,
                  "\x1b[2m14:46:10\x1b[0m \x1b[36m* attempt 1 of 3 started\x1b[0m\n");
    CHECK_PRINTED(err_line, LOGLINE_TERMINAL, true, "\x1b[2m14:46:11\x1b[0m   a\tb ?[2Jc?d?\n");
    /* no usable time, no text */
    CHECK_PRINTED("{\"seq\":1,\"at\":\"yesterday\",\"stream\":\"stderr\",\"text\":\"x\"}",
                  LOGLINE_TERMINAL, false, "--:--:--   x\n");
    CHECK_PRINTED("{\"seq\":1,\"at\":\"2026-12-06T1\\u001b:46:10Z\",\"stream\":\"opsrun\"}",
                  LOGLINE_TERMINAL, false, "--:--:-- * \n");
}
END_TEST

/* The object on one line (JSON Lines), control characters escaped. */
START_TEST(log_json_form)
{
    CHECK_PRINTED(err_line, LOGLINE_JSON, false,
                  "{\"seq\":3,\"attempt\":2,\"at\":\"2026-12-06T14:46:11.5Z\",\"stream\":"
                  "\"stderr\",\"text\":\"a\\tb \\u001B[2Jc\\u0000d\\r\"}\n");
    CHECK_PRINTED(own_line, LOGLINE_JSON, true,
                  "{\"seq\":1,\"attempt\":1,\"at\":\"2026-12-06T14:46:10.864845Z\",\"stream\":"
                  "\"opsrun\",\"text\":\"attempt 1 of 3 started\"}\n");
}
END_TEST

/* Among watch's event lines: "log", then the stream, in their columns. */
START_TEST(log_watch_form)
{
    CHECK_PRINTED(own_line, LOGLINE_WATCH, false, "log       opsrun  attempt 1 of 3 started\n");
    CHECK_PRINTED(err_line, LOGLINE_WATCH, true, "log       stderr  a\tb ?[2Jc?d?\n");
    /* a stream this version does not know is shown, cleaned */
    CHECK_PRINTED("{\"seq\":1,\"stream\":\"x\\ny\",\"text\":\"t\"}", LOGLINE_WATCH, false,
                  "log       x?y     t\n");
}
END_TEST

static json_t *event_line(const char *type, const char *data)
{
    struct evparse_event ev = {.type = type, .data = data, .data_len = strlen(data), .id = ""};

    return logline_of_event(&ev);
}

/* Only "log" events with a line object that has a positive seq. */
START_TEST(log_events)
{
    json_t *line = event_line("log", own_line);

    ck_assert_ptr_nonnull(line);
    ck_assert_int_eq(logline_seq(line), 1);
    json_decref(line);
    line = event_line("log", err_line); /* a NUL in the text is kept */
    ck_assert_ptr_nonnull(line);
    ck_assert_int_eq(json_string_length(json_object_get(line, "text")), 12);
    json_decref(line);
    ck_assert_ptr_null(event_line("end", "{\"last_seq\":3}"));
    ck_assert_ptr_null(event_line("message", own_line));
    ck_assert_ptr_null(event_line("log", "[1]"));
    ck_assert_ptr_null(event_line("log", "{\"seq\":0,\"text\":\"x\"}"));
    ck_assert_ptr_null(event_line("log", "{\"seq\":\"7\",\"text\":\"x\"}"));
    ck_assert_ptr_null(event_line("log", "{\"seq\":1,"));
}
END_TEST

START_TEST(log_pages)
{
    char *p = logs_page_path("r-1", 0, 0);

    ck_assert_str_eq(p, "/runs/r-1/logs?limit=5000");
    free(p);
    p = logs_page_path("r:1.x", 2, 5000);
    ck_assert_str_eq(p, "/runs/r:1.x/logs?limit=5000&attempt=2&after=5000");
    free(p);
}
END_TEST

/* report_put_clean: lengths with NULs, tabs kept or not, UTF-8 kept,
 * broken sequences and C1 controls replaced. */
START_TEST(put_clean)
{
    static const char in[] = "\xc3\xa9\t\0\xc2\x9b\xe2\x82";
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    report_put_clean(f, in, sizeof(in) - 1, true);
    fputc('|', f);
    report_put_clean(f, in, sizeof(in) - 1, false);
    fputc('|', f);
    report_put_clean(f, "ok", 1, false);
    fclose(f);
    ck_assert_str_eq(text, "\xc3\xa9\t???\?|\xc3\xa9????\?|o");
    free(text);
}
END_TEST

static Suite *client_stream_suite(void)
{
    Suite *s = suite_create("client_stream");
    TCase *tp = tcase_create("evparse"), *tw = tcase_create("watch"), *tl = tcase_create("logs");

    tcase_add_test(tp, stream_of_opsrun);
    tcase_add_test(tp, any_split);
    tcase_add_test(tp, line_endings);
    tcase_add_test(tp, fields);
    tcase_add_test(tp, id_with_nul_ignored);
    tcase_add_test(tp, retry_field);
    tcase_add_test(tp, bom);
    tcase_add_test(tp, reset_keeps_id);
    tcase_add_test(tp, caps_and_stops);
    tcase_add_test(tw, event_lines);
    tcase_add_test(tw, step_lines);
    tcase_add_test(tw, progress_bar);
    tcase_add_test(tw, result_line);
    tcase_add_test(tw, clean_text);
    tcase_add_test(tw, runs_table);
    tcase_add_test(tl, log_text_form);
    tcase_add_test(tl, log_terminal_form);
    tcase_add_test(tl, log_json_form);
    tcase_add_test(tl, log_watch_form);
    tcase_add_test(tl, log_events);
    tcase_add_test(tl, log_pages);
    tcase_add_test(tl, put_clean);
    suite_add_tcase(s, tp);
    suite_add_tcase(s, tw);
    suite_add_tcase(s, tl);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(client_stream_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
