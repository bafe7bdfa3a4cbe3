/* tests/e2e/test_run_logs.c — runs' logs (docs/logs.md) on real processes
 * and PostgreSQL: an exec command that interleaves stderr with progress
 * and ends slowly, followed live from another replica; the per-attempt cap
 * with its exact dropped count and a cut line; a secret split across two
 * writes; resuming a stream by Last-Event-ID, live and after the end (204);
 * a replica killed mid-run (its lines survive, the rescue says so, attempt 2
 * has its own); tenants (another tenant's run is 404 on both endpoints);
 * the plain-text form. Every exchange goes to the OpenAPI check. */
#include "../support/harness.h"
#include "../support/sse.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define SECRET "hunter2-secret-value"

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

/* A config with one exec run type of the script, and extra top-level
 * members (may be ""). */
static char *exec_config(const char *type, const char *path, const char *extra)
{
    char *c = malloc(4096);

    snprintf(c, 4096,
             "{\"queue\": {\"orphan_after_s\": 3, \"heartbeat_interval_s\": 1},%s"
             " \"run_types\": {\"%s\": {\"action\": \"exec\", \"max_attempts\": 2,"
             " \"params\": {\"argv\": [\"%s\"], \"env\": {\"TOKEN\": \"{{env:LOGS_SECRET}}\"}}}}}",
             extra, type, path);
    return c;
}

static const char *const SECRET_ENV[] = {"LOGS_SECRET=" SECRET, NULL};

static void start_with(struct th_proc *p, const char *ci, const char *name, const char *config)
{
    char *path = th_config_file(name, config);
    const char *args[] = {"--config", path, NULL};

    th_start(p, ci, args, SECRET_ENV);
    free(path);
}

static char *submit(const struct th_proc *p, const char *type, const char *id)
{
    char body[256];

    snprintf(body, sizeof(body), "{\"alert_type\": \"%s\", \"run_id\": \"%s\", \"data\": {}}", type,
             id);
    return th_submit(p, body, 202);
}

/* GET /runs/{id}/logs<query>: asserts 200; the answer (new reference). */
static json_t *get_logs(const struct th_proc *p, const char *id, const char *query)
{
    char path[256];
    struct th_resp r;
    json_t *j;

    snprintf(path, sizeof(path), "/runs/%s/logs%s", id, query ? query : "");
    th_get(p->url, path, &r);
    ck_assert_msg(r.status == 200, "GET %s: %ld %s", path, r.status, r.body);
    j = json_incref(r.json);
    th_resp_free(&r);
    return j;
}

static const char *line_text(const json_t *lines, size_t i)
{
    return th_js(json_array_get(lines, i), "text");
}

/* The texts of a run's lines of one stream ("stderr", "opsrun"), joined
 * by "|" (heap). */
static char *texts_of(const json_t *lines, const char *stream)
{
    char *out = calloc(1, 65536);
    size_t i, n = 0;
    json_t *l;

    json_array_foreach(lines, i, l)
    {
        if (stream && strcmp(th_js(l, "stream"), stream) != 0)
            continue;
        n += (size_t)snprintf(out + n, 65536 - n, "%s%s", n ? "|" : "", th_js(l, "text"));
    }
    return out;
}

/* A command writes eight stderr lines 150 ms apart with progress between
 * them, then ends a second later. A follower on another replica (one that
 * does not run the type) gets each line while the run runs, in order, seq
 * 1, 2, ..., then "end" once the run has completed; the stream then ends. */
START_TEST(follow_live_from_another_replica)
{
    char *sh = script("logs-talky",
                      "for i in 1 2 3 4 5 6 7 8; do echo \"line $i\" >&2; echo \"progress $((i * "
                      "10)) step $i\" >&3; sleep 0.15; done\nsleep 1\necho '{\"done\": true}'\n");
    char *cfg = exec_config("talky", sh, "");
    char *ci = th_db_create("e2e_rlogs_follow");
    struct th_proc a, b;
    struct th_sse *s;
    struct th_sse_event ev;
    long long first_line_ms = 0, end_ms = 0;
    int next_seq = 1, stderr_seen = 0;
    json_t *run;

    start_with(&a, ci, "e2e_rlogs_follow_a", cfg);
    start_with(&b, ci, "e2e_rlogs_follow_b", "{}"); /* knows no "talky": never runs it */
    free(submit(&a, "talky", "talk-1"));
    s = th_sse_open(b.port, "/runs/talk-1/logs/stream", NULL, 0);
    ck_assert_int_eq(s->status, 200);
    ck_assert_str_eq(s->content_type, "text/event-stream");
    for (;;) {
        int r = th_sse_next(s, &ev, 15000);
        ck_assert_msg(r == 1, "the stream stopped before its end (%d)", r);
        if (strcmp(ev.event, "end") == 0) {
            end_ms = th_now_ms();
            ck_assert_int_eq(th_ji(ev.json, "last_seq"), next_seq - 1);
            th_sse_event_free(&ev);
            break;
        }
        ck_assert_str_eq(ev.event, "log");
        ck_assert(ev.has_id);
        ck_assert_int_eq(ev.id, next_seq);
        ck_assert_int_eq(th_ji(ev.json, "seq"), next_seq);
        ck_assert_int_eq(th_ji(ev.json, "attempt"), 1);
        next_seq++;
        if (strcmp(th_js(ev.json, "stream"), "stderr") == 0) {
            char want[32];
            snprintf(want, sizeof(want), "line %d", ++stderr_seen);
            ck_assert_str_eq(th_js(ev.json, "text"), want);
            if (stderr_seen == 1)
                first_line_ms = th_now_ms();
        }
        th_sse_event_free(&ev);
    }
    ck_assert_int_eq(stderr_seen, 8);
    ck_assert_msg(end_ms - first_line_ms >= 1500,
                  "the first line came only %lld ms before the end: not live",
                  end_ms - first_line_ms);
    ck_assert_int_eq(th_sse_next(s, &ev, 5000), -1);
    ck_assert(s->clean_end);
    th_sse_close(s);
    run = th_wait_done(&a, "talk-1", 10);
    ck_assert_str_eq(th_js(run, "outcome"), "succeeded");
    json_decref(run);
    {
        json_t *j = get_logs(&b, "talk-1", NULL);
        char *opsrun = texts_of(json_object_get(j, "lines"), "opsrun");
        ck_assert_msg(strncmp(opsrun, "attempt 1 of 2 started on w-", 28) == 0, "%s", opsrun);
        ck_assert_msg(strstr(opsrun, "|the command exited with status 0|attempt 1 succeeded in "),
                      "%s", opsrun);
        ck_assert(json_is_false(json_object_get(j, "truncated")));
        ck_assert(json_is_null(json_object_get(j, "next_after")));
        free(opsrun);
        json_decref(j);
    }
    th_stop_clean(&a);
    th_stop_clean(&b);
    free(ci);
    free(cfg);
    free(sh);
}
END_TEST

/* Past logs.max_bytes_per_attempt the command's lines are dropped, never
 * blocking it; the last line says exactly how many bytes; a line longer
 * than logs.max_line_bytes is cut with a marker. The metrics count both. */
START_TEST(cap_and_dropped_count)
{
    char *sh = script("logs-chatty",
                      "head -c 600 /dev/zero | tr '\\000' a >&2; echo >&2\n"
                      "i=0; while [ $i -lt 100 ]; do printf '%098d\\n' $i >&2; i=$((i + 1)); "
                      "done\necho '{}'\n");
    char *cfg = exec_config(
        "chatty", sh, " \"logs\": {\"max_bytes_per_attempt\": 1024, \"max_line_bytes\": 256},");
    struct th_proc p;
    struct th_resp r;
    json_t *j, *lines;
    size_t n;
    char want[300], *ci;

    ci = th_db_create("e2e_rlogs_cap");
    start_with(&p, ci, "e2e_rlogs_cap", cfg);
    free(submit(&p, "chatty", "chatty-1"));
    th_expect_outcome(&p, "chatty-1", "succeeded", 20);
    j = get_logs(&p, "chatty-1", NULL);
    lines = json_object_get(j, "lines");
    n = json_array_size(lines);
    ck_assert(json_is_true(json_object_get(j, "truncated")));
    /* The cap counts lines as stored: about 30 bytes of [at, stream, ...]
     * each besides the text. 256 of the 600 a's with " [344 bytes cut]"
     * (302 bytes), then five lines of 98 digits (129 bytes each: 947; a
     * sixth would pass 1024); the 95 lines after them (99 bytes with their
     * newline) are dropped: 9,405 bytes. */
    memset(want, 'a', 256);
    snprintf(want + 256, sizeof(want) - 256, " [344 bytes cut]");
    ck_assert_str_eq(line_text(lines, 2), want);
    ck_assert_str_eq(line_text(lines, 3), "00000000000000000000000000000000000000000000000000000000"
                                          "000000000000000000000000000000000000000000");
    ck_assert_int_eq(n, 11); /* 2 opsrun lines, 6 of output, 3 at the end */
    ck_assert_str_eq(th_js(json_array_get(lines, 7), "text") + 90, "00000004");
    ck_assert_str_eq(line_text(lines, n - 1),
                     "9405 bytes of output dropped: the attempt wrote more "
                     "than logs.max_bytes_per_attempt (1024 bytes)");
    ck_assert_msg(strncmp(line_text(lines, n - 2), "attempt 1 succeeded in ", 23) == 0, "%s",
                  line_text(lines, n - 2));
    json_decref(j);
    th_get(p.url, "/metrics", &r);
    ck_assert_msg(strstr(r.body, "\nopsrun_log_bytes_dropped_total 9749\n"), "%s", r.body);
    th_resp_free(&r);
    th_stop_clean(&p);
    free(ci);
    free(cfg);
    free(sh);
}
END_TEST

/* A secret of the run (an {{env:...}} value) written in two parts, 300 ms
 * apart, is masked in the stored line, the streamed line and the text. */
START_TEST(secret_split_across_writes)
{
    char *sh = script("logs-secret", "printf 'token: %.9s' \"$TOKEN\" >&2; sleep 0.3; "
                                     "printf '%s end\\n' \"${TOKEN#?????????}\" >&2\necho '{}'\n");
    char *cfg = exec_config("leaky", sh, "");
    struct th_proc p;
    char *ci;
    struct th_sse *s;
    struct th_sse_event ev;
    struct th_resp r;
    PGconn *c;

    ci = th_db_create("e2e_rlogs_secret");
    start_with(&p, ci, "e2e_rlogs_secret", cfg);
    free(submit(&p, "leaky", "leaky-1"));
    th_expect_outcome(&p, "leaky-1", "succeeded", 20);
    s = th_sse_open(p.port, "/runs/leaky-1/logs/stream", NULL, 0);
    ck_assert_int_eq(th_sse_until(s, NULL, &ev, 5000), 1);
    for (;;) {
        ck_assert_msg(!strstr(ev.data, "hunter2"), "%s", ev.data);
        if (strcmp(ev.event, "end") == 0)
            break;
        if (strcmp(th_js(ev.json, "stream"), "stderr") == 0)
            ck_assert_str_eq(th_js(ev.json, "text"), "token: *** end");
        th_sse_event_free(&ev);
        ck_assert_int_eq(th_sse_next(s, &ev, 5000), 1);
    }
    th_sse_event_free(&ev);
    th_sse_close(s);
    th_get(p.url, "/runs/leaky-1/logs?format=text", &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_msg(strstr(r.body, "\ntoken: *** end\n") && !strstr(r.body, "hunter2"), "%s", r.body);
    ck_assert_msg(strncmp(r.content_type, "text/plain", 10) == 0, "%s", r.content_type);
    th_resp_free(&r);
    c = th_pg(ci);
    ck_assert_int_eq(th_sql_int(c, "SELECT count(*) FROM run_logs WHERE lines::text LIKE "
                                   "'%%hunter2%%'"),
                     0);
    PQfinish(c);
    th_stop_clean(&p);
    free(ci);
    free(cfg);
    free(sh);
}
END_TEST

/* Reads events of s until a log with seq upto; asserts seqs from *next. */
static void read_upto(struct th_sse *s, int *next, int upto)
{
    struct th_sse_event ev;

    while (*next <= upto) {
        ck_assert_int_eq(th_sse_next(s, &ev, 10000), 1);
        ck_assert_str_eq(ev.event, "log");
        ck_assert_int_eq(ev.id, *next);
        (*next)++;
        th_sse_event_free(&ev);
    }
}

/* A follower that left after seq 3 comes back with Last-Event-ID: 3 and
 * gets 4 on, no line twice, none missing; one that has the end gets 204;
 * the plain text and paging with after and limit agree with the stream. */
START_TEST(resume_by_last_event_id)
{
    char *sh = script("logs-resume", "for i in 1 2 3 4 5 6; do echo \"r $i\" >&2; sleep 0.2; "
                                     "done\necho '{}'\n");
    char *cfg = exec_config("resumable", sh, "");
    struct th_proc p;
    struct th_sse *s;
    struct th_sse_event ev;
    struct th_resp r;
    json_t *j;
    int next = 1, last;
    char *ci;

    ci = th_db_create("e2e_rlogs_resume");
    start_with(&p, ci, "e2e_rlogs_resume", cfg);
    free(submit(&p, "resumable", "res-1"));
    s = th_sse_open(p.port, "/runs/res-1/logs/stream", NULL, 0);
    read_upto(s, &next, 3);
    th_sse_close(s);
    s = th_sse_open(p.port, "/runs/res-1/logs/stream", "3", 0);
    ck_assert_int_eq(s->status, 200);
    for (;;) {
        ck_assert_int_eq(th_sse_next(s, &ev, 10000), 1);
        if (strcmp(ev.event, "end") == 0)
            break;
        ck_assert_int_eq(ev.id, next++);
        th_sse_event_free(&ev);
    }
    last = (int)th_ji(ev.json, "last_seq");
    ck_assert_int_eq(last, next - 1);
    ck_assert_int_eq(ev.id, last); /* a client resuming from the end gets 204 */
    th_sse_event_free(&ev);
    th_sse_close(s);
    /* the client has everything: 204, no stream */
    {
        char id[16];
        snprintf(id, sizeof(id), "%d", last);
        s = th_sse_open(p.port, "/runs/res-1/logs/stream", id, 0);
        ck_assert_int_eq(s->status, 204);
        th_sse_close(s);
    }
    j = get_logs(&p, "res-1", "?after=2&limit=3");
    ck_assert_int_eq(json_array_size(json_object_get(j, "lines")), 3);
    ck_assert_int_eq(th_ji(json_array_get(json_object_get(j, "lines"), 0), "seq"), 3);
    ck_assert_int_eq(th_ji(j, "next_after"), 5);
    json_decref(j);
    /* past the end, however far: an empty last page */
    j = get_logs(&p, "res-1", "?after=9223372036854775807&limit=5000");
    ck_assert_int_eq(json_array_size(json_object_get(j, "lines")), 0);
    ck_assert(json_is_null(json_object_get(j, "next_after")));
    json_decref(j);
    th_get(p.url, "/runs/res-1/logs?limit=0", &r);
    th_check_problem(&r, 400, "limit=0");
    ck_assert(th_has_error_field(json_object_get(r.json, "errors"), "limit"));
    th_resp_free(&r);
    th_get(p.url, "/runs/nope/logs", &r);
    th_check_problem(&r, 404, "an unknown run's log");
    th_resp_free(&r);
    th_stop_clean(&p);
    free(ci);
    free(cfg);
    free(sh);
}
END_TEST

/* A replica killed while its command runs: the lines written before stay,
 * the rescue by another replica adds a line saying attempt 1 was lost, and
 * attempt 2 writes its own lines, which ?attempt=2 lists alone. */
START_TEST(sigkill_mid_run)
{
    char *sh = script("logs-kill",
                      "if [ \"$OPSRUN_ATTEMPT\" = 1 ]; then for i in 1 2 3; do echo \"before "
                      "kill $i\" >&2; done; sleep 60; fi\necho \"attempt two\" >&2\necho '{}'\n");
    char *cfg = exec_config("killable", sh, "");
    char *ci = th_db_create("e2e_rlogs_kill");
    struct th_proc a, b;
    json_t *j, *lines;
    char *all;

    start_with(&a, ci, "e2e_rlogs_kill_a", cfg);
    free(submit(&a, "killable", "kill-1"));
    for (long long until = th_now_ms() + 15000;; th_sleep_ms(50)) {
        j = get_logs(&a, "kill-1", "?format=json");
        all = texts_of(json_object_get(j, "lines"), "stderr");
        json_decref(j);
        if (strstr(all, "before kill 3"))
            break;
        free(all);
        ck_assert_msg(th_now_ms() < until, "the lines before the kill were never written");
    }
    free(all);
    th_stop(&a, SIGKILL, 5);
    start_with(&b, ci, "e2e_rlogs_kill_b", cfg);
    th_expect_outcome(&b, "kill-1", "succeeded", 30);
    j = get_logs(&b, "kill-1", NULL);
    lines = json_object_get(j, "lines");
    all = texts_of(lines, NULL);
    ck_assert_msg(strstr(all, "|before kill 1|before kill 2|before kill 3|attempt 1 lost: worker "),
                  "%s", all);
    ck_assert_msg(strstr(all, "stopped heartbeating; the run is queued for another attempt|"
                              "attempt 2 of 2 started on "),
                  "%s", all);
    ck_assert_msg(strstr(all, "|attempt two|"), "%s", all);
    free(all);
    json_decref(j);
    j = get_logs(&b, "kill-1", "?attempt=2");
    lines = json_object_get(j, "lines");
    for (size_t i = 0; i < json_array_size(lines); i++)
        ck_assert_int_eq(th_ji(json_array_get(lines, i), "attempt"), 2);
    ck_assert_msg(strncmp(line_text(lines, 0), "attempt 2 of 2 started on ", 26) == 0, "%s",
                  line_text(lines, 0));
    json_decref(j);
    th_stop_clean(&b);
    free(ci);
    free(cfg);
    free(sh);
}
END_TEST

#define T_ACME "opsrun_e2e-rlogs-acme-00000000000000"
#define T_OTHER "opsrun_e2e-rlogs-other-1111111111111"

/* Another tenant's run is 404 on both endpoints, exactly as an unknown
 * run; its own tenant reads it. */
START_TEST(tenants)
{
    static const struct th_token t[] = {
        {"acme", "acme", "\"submit\", \"read\"", T_ACME},
        {"other", "other", "\"submit\", \"read\"", T_OTHER},
    };
    char *tokens = th_auth_tokens(t, 2), cfg[4096], url[256];
    struct th_proc p;
    struct th_resp r, unknown;
    struct th_sse *s;

    snprintf(cfg, sizeof(cfg), "{%s}", tokens);
    th_start_fresh(&p, "e2e_rlogs_tenants", cfg);
    th_post_expect(&p, "/alerts", T_ACME,
                   "{\"alert_type\": \"demo\", \"run_id\": \"ten-1\", \"data\": {\"steps\": 2, "
                   "\"duration_ms\": 10}}",
                   202, &r);
    th_resp_free(&r);
    snprintf(url, sizeof(url), "%s/runs/ten-1/logs", p.url);
    ck_assert(th_http_token("GET", url, T_OTHER, NULL, NULL, &r));
    snprintf(url, sizeof(url), "%s/runs/none/logs", p.url);
    ck_assert(th_http_token("GET", url, T_OTHER, NULL, NULL, &unknown));
    /* the same answer as for a run that exists nowhere, but for the id */
    ck_assert_int_eq(r.status, 404);
    ck_assert_int_eq(unknown.status, 404);
    ck_assert_str_eq(th_js(r.json, "detail"), "run \"ten-1\" not found");
    ck_assert_str_eq(th_js(unknown.json, "detail"), "run \"none\" not found");
    th_resp_free(&unknown);
    th_resp_free(&r);
    s = th_sse_open_token(p.port, "/runs/ten-1/logs/stream", T_OTHER, NULL);
    ck_assert_int_eq(s->status, 404);
    th_sse_close(s);
    s = th_sse_open_token(p.port, "/runs/ten-1/logs/stream", NULL, NULL);
    ck_assert_int_eq(s->status, 401);
    th_sse_close(s);
    s = th_sse_open_token(p.port, "/runs/ten-1/logs/stream", T_ACME, NULL);
    ck_assert_int_eq(s->status, 200);
    {
        struct th_sse_event ev;
        ck_assert_int_eq(th_sse_until(s, "end", &ev, 10000), 1);
        th_sse_event_free(&ev);
    }
    th_sse_close(s);
    free(tokens);
    th_stop_clean(&p);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("run_logs");
    TCase *tc = tcase_create("run_logs");

    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, follow_live_from_another_replica);
    tcase_add_test(tc, cap_and_dropped_count);
    tcase_add_test(tc, secret_split_across_writes);
    tcase_add_test(tc, resume_by_last_event_id);
    tcase_add_test(tc, sigkill_mid_run);
    tcase_add_test(tc, tenants);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
