/* tests/e2e/test_metrics.c — GET /metrics of one real opsrun process after
 * runs of three types (two simulate, one rest_job against the fake jobs
 * API): exact counter values, route templates instead of paths, the
 * database's gauges, and `promtool check metrics` on the body; a run type
 * a reload adds, counted like the others; then the
 * deployment files: `promtool check rules` and `promtool test rules` on
 * deploy/prometheus, and every metric name that the alerting rules and the
 * Grafana dashboard use must be one the server exposes.
 *
 * promtool comes from the Debian package prometheus, which scripts/test.sh
 * installs for the tests only. */
#include "../support/fake_jobs.h"
#include "../support/harness.h"

#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int g_port;

/* demo (built in), etl (simulate, three attempts) and job (rest_job against
 * the fake, at most three checks 100 ms apart). */
static char *config(void)
{
    char *cfg = malloc(4096);

    snprintf(cfg, 4096,
             "{\"poller\": {\"concurrency\": 4, \"interval_ms\": 100},"
             " \"run_types\": {"
             "  \"etl\": {\"action\": \"simulate\", \"max_attempts\": 3, \"retry_backoff_ms\": 20},"
             "  \"job\": {\"action\": \"rest_job\", \"max_attempts\": 1,"
             "   \"poll\": {\"initial_delay_ms\": 100, \"multiplier\": 1, \"max_delay_ms\": 100,"
             "    \"jitter_pct\": 0, \"max_checks\": 3, \"max_duration_s\": 60,"
             "    \"check_timeout_s\": 2},"
             "   \"params\": {"
             "    \"submit\": {\"method\": \"POST\", \"url\": \"http://127.0.0.1:%d/jobs\","
             "     \"body\": {\"scenario\": \"{{input:/scenario}}\", \"run\": \"{{run_id}}\"}},"
             "    \"id_pointer\": \"/id\","
             "    \"status\": {\"url\": \"http://127.0.0.1:%d/jobs/{{external_id}}\"},"
             "    \"state_pointer\": \"/state\","
             "    \"state_map\": {\"RUNNING\": \"running\", \"DONE\": \"succeeded\","
             "     \"FAILED\": \"failed\", \"CANCELLED\": \"cancelled\"},"
             "    \"cancel\": {\"method\": \"POST\","
             "     \"url\": \"http://127.0.0.1:%d/jobs/{{external_id}}/cancel\"},"
             "    \"cleanup\": {\"method\": \"DELETE\","
             "     \"url\": \"http://127.0.0.1:%d/jobs/{{external_id}}\"}}}}}",
             g_port, g_port, g_port, g_port);
    return cfg;
}

/* GET /metrics: asserts 200 and the text format; the body (heap). */
static char *scrape(const struct th_proc *p)
{
    struct th_resp r;
    char *body;

    th_get(p->url, "/metrics", &r);
    ck_assert_msg(r.status == 200, "GET /metrics: HTTP %ld: %s", r.status, r.body);
    ck_assert_msg(strncmp(r.content_type, "text/plain; version=0.0.4", 25) == 0, "Content-Type %s",
                  r.content_type);
    body = strdup(r.body);
    th_resp_free(&r);
    return body;
}

/* The value of the sample whose line starts with series (name and labels
 * exactly as written); -1 when there is none. */
static double sample(const char *text, const char *series)
{
    size_t n = strlen(series);

    for (const char *l = text; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL)
        if (strncmp(l, series, n) == 0 && l[n] == ' ')
            return strtod(l + n + 1, NULL);
    return -1;
}

#define ck_assert_sample(text, series, want)                                                       \
    do {                                                                                           \
        double got_ = sample((text), (series));                                                    \
        ck_assert_msg(got_ == (want), "%s is %g, want %g", (series), got_, (double)(want));        \
    } while (0)

/* Scrapes until series has value want, up to timeout_ms; the last body. */
static char *scrape_until(const struct th_proc *p, const char *series, double want, int timeout_ms)
{
    long long until = th_now_ms() + timeout_ms;
    char *text;

    for (;;) {
        text = scrape(p);
        if (sample(text, series) == want || th_now_ms() > until)
            return text;
        free(text);
        th_sleep_ms(100);
    }
}

/* Runs cmd with stdin from file in (NULL: none); its exit status, and its
 * output (stdout and stderr) into out. */
static int run_cmd(const char *cmd, const char *in, char *out, size_t cap)
{
    char full[2048];
    FILE *f;
    size_t n;
    int rc;

    snprintf(full, sizeof(full), "%s%s%s 2>&1", cmd, in ? " < " : "", in ? in : "");
    f = popen(full, "r");
    ck_assert_msg(f != NULL, "could not run %s", cmd);
    n = fread(out, 1, cap - 1, f);
    out[n] = '\0';
    rc = pclose(f);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static void need_promtool(void)
{
    char out[256];

    ck_assert_msg(run_cmd("command -v promtool", NULL, out, sizeof(out)) == 0,
                  "promtool not found: install the Debian package prometheus "
                  "(scripts/test.sh does)");
}

/* `promtool check metrics` on text: asserts it passes, lint included. */
static void promtool_check_metrics(const char *text)
{
    char path[] = "/tmp/opsrun-metrics-XXXXXX", out[8192];
    int fd = mkstemp(path), rc;
    FILE *f;

    ck_assert_int_ge(fd, 0);
    f = fdopen(fd, "w");
    fputs(text, f);
    fclose(f);
    rc = run_cmd("promtool check metrics", path, out, sizeof(out));
    ck_assert_msg(rc == 0 && out[0] == '\0', "promtool check metrics: exit %d:\n%s", rc, out);
    unlink(path);
}

static char *submit_job(const struct th_proc *p, const char *scenario)
{
    char body[256];

    snprintf(body, sizeof(body), "{\"alert_type\":\"job\",\"data\":{\"scenario\":\"%s\"}}",
             scenario);
    return th_submit(p, body, 202);
}

START_TEST(counts_after_runs)
{
    struct th_proc p;
    struct th_resp r;
    char *cfg = config(), *ids[12], *text, path[256];
    int n = 0;

    need_promtool();
    th_start_fresh(&p, "e2e_metrics_counts", cfg);

    /* demo: two successes, a permanent failure, and one joined twice. */
    ids[n++] = th_submit(&p, "{\"alert_type\":\"demo\",\"data\":{\"duration_ms\":20}}", 202);
    ids[n++] = th_submit(&p, "{\"alert_type\":\"demo\",\"data\":{\"duration_ms\":30}}", 202);
    ids[n++] = th_submit(&p, "{\"alert_type\":\"demo\",\"data\":{\"fail\":\"permanent\"}}", 202);
    ids[n++] = th_submit(
        &p, "{\"alert_type\":\"demo\",\"dedupe_key\":\"k\",\"data\":{\"duration_ms\":1500}}", 202);
    free(th_submit(
        &p, "{\"alert_type\":\"demo\",\"dedupe_key\":\"k\",\"data\":{\"duration_ms\":1500}}", 200));
    /* etl: one retried once, one cancelled while it waits for its run_at. */
    ids[n++] = th_submit(&p, "{\"alert_type\":\"etl\",\"data\":{\"fail\":\"first:1\"}}", 202);
    ids[n++] = th_submit(&p, "{\"alert_type\":\"etl\",\"run_at\":\"2999-01-01T00:00:00Z\"}", 202);
    snprintf(path, sizeof(path), "%s/runs/%s/cancel", p.url, ids[n - 1]);
    ck_assert(th_http("POST", path, NULL, NULL, &r) && r.status == 200);
    th_resp_free(&r);
    /* job: done at the 3rd check; a failed check then done; out of checks;
     * done with a cleanup that fails. */
    ids[n++] = submit_job(&p, "done_after:3");
    ids[n++] = submit_job(&p, "flaky:1,done_after:2");
    ids[n++] = submit_job(&p, "forever");
    ids[n++] = submit_job(&p, "done_after:1,cleanup_fail");
    /* Unknown run, unknown path, method not allowed. */
    th_get(p.url, "/runs/no-such-run", &r);
    ck_assert_int_eq(r.status, 404);
    th_resp_free(&r);
    th_get(p.url, "/no/such/path", &r);
    ck_assert_int_eq(r.status, 404);
    th_resp_free(&r);
    snprintf(path, sizeof(path), "%s/runs/%s", p.url, ids[0]);
    ck_assert(th_http("DELETE", path, NULL, NULL, &r) && r.status == 405);
    th_resp_free(&r);

    th_expect_outcome(&p, ids[0], "succeeded", 20);
    th_expect_outcome(&p, ids[1], "succeeded", 20);
    th_expect_outcome(&p, ids[2], "failed", 20);
    th_expect_outcome(&p, ids[3], "succeeded", 20);
    th_expect_outcome(&p, ids[4], "succeeded", 20);
    th_expect_outcome(&p, ids[5], "cancelled", 20);
    th_expect_outcome(&p, ids[6], "succeeded", 20);
    th_expect_outcome(&p, ids[7], "succeeded", 20);
    th_expect_outcome(&p, ids[8], "timed_out", 20);
    th_expect_outcome(&p, ids[9], "succeeded", 20);
    /* Hooks run after the run completes; the database figures lag by up to
     * METRICS_DB_MAX_AGE_MS. */
    free(scrape_until(&p, "opsrun_poll_hooks_total{type=\"job\",result=\"failed\"}", 1, 10000));
    text = scrape_until(&p, "opsrun_runs{status=\"waiting\"}", 0, 10000);

    ck_assert_sample(text, "opsrun_runs_submitted_total{type=\"demo\"}", 4);
    ck_assert_sample(text, "opsrun_runs_submitted_total{type=\"etl\"}", 2);
    ck_assert_sample(text, "opsrun_runs_submitted_total{type=\"job\"}", 4);
    ck_assert_sample(text, "opsrun_runs_completed_total{type=\"demo\",outcome=\"succeeded\"}", 3);
    ck_assert_sample(text, "opsrun_runs_completed_total{type=\"demo\",outcome=\"failed\"}", 1);
    ck_assert_sample(text, "opsrun_runs_completed_total{type=\"etl\",outcome=\"succeeded\"}", 1);
    ck_assert_sample(text, "opsrun_runs_completed_total{type=\"etl\",outcome=\"cancelled\"}", 1);
    ck_assert_sample(text, "opsrun_runs_completed_total{type=\"etl\",outcome=\"failed\"}", 0);
    ck_assert_sample(text, "opsrun_runs_completed_total{type=\"job\",outcome=\"succeeded\"}", 3);
    ck_assert_sample(text, "opsrun_runs_completed_total{type=\"job\",outcome=\"timed_out\"}", 1);
    ck_assert_sample(text, "opsrun_run_retries_total{type=\"etl\"}", 1);
    /* the per-client limits' refusals (none here; e2e_limits counts them) */
    ck_assert_sample(text, "opsrun_http_refused_total{reason=\"submit_rate\"}", 0);
    ck_assert_sample(text, "opsrun_http_refused_total{reason=\"request_deadline\"}", 0);
    /* A run cancelled before it started has no duration. */
    ck_assert_sample(text, "opsrun_run_duration_seconds_count{type=\"demo\"}", 4);
    ck_assert_sample(text, "opsrun_run_duration_seconds_count{type=\"etl\"}", 1);
    ck_assert_sample(text, "opsrun_run_duration_seconds_count{type=\"job\"}", 4);
    ck_assert_sample(text, "opsrun_run_duration_seconds_bucket{type=\"demo\",le=\"+Inf\"}", 4);
    ck_assert_msg(sample(text, "opsrun_run_duration_seconds_bucket{type=\"demo\",le=\"1\"}") == 3,
                  "the 1.5 s run is in no bucket below 2.5 s");
    /* Each attempt is claimed: etl's retried run twice. */
    ck_assert_sample(text, "opsrun_run_queue_wait_seconds_count{type=\"demo\"}", 4);
    ck_assert_sample(text, "opsrun_run_queue_wait_seconds_count{type=\"etl\"}", 2);
    ck_assert_sample(text, "opsrun_run_queue_wait_seconds_count{type=\"job\"}", 4);
    ck_assert_msg(sample(text, "opsrun_claim_duration_seconds_count") >= 1, "no claim recorded");

    ck_assert_sample(text, "opsrun_poll_checks_total{type=\"job\",result=\"running\"}", 5);
    ck_assert_sample(text, "opsrun_poll_checks_total{type=\"job\",result=\"ended\"}", 3);
    ck_assert_sample(text, "opsrun_poll_checks_total{type=\"job\",result=\"error\"}", 1);
    ck_assert_sample(text, "opsrun_poll_checks_total{type=\"demo\",result=\"running\"}", 0);
    ck_assert_sample(text, "opsrun_poll_budget_exhausted_total{type=\"job\"}", 1);
    ck_assert_sample(text, "opsrun_poll_hooks_total{type=\"job\",result=\"ok\"}", 3);
    ck_assert_sample(text, "opsrun_poll_hooks_total{type=\"job\",result=\"failed\"}", 1);

    ck_assert_sample(text, "opsrun_http_requests_total{route=\"/alerts\",code=\"202\"}", 10);
    ck_assert_sample(text, "opsrun_http_requests_total{route=\"/alerts\",code=\"200\"}", 1);
    ck_assert_sample(text, "opsrun_http_requests_total{route=\"/runs/{id}/cancel\",code=\"200\"}",
                     1);
    ck_assert_sample(text, "opsrun_http_requests_total{route=\"/runs/{id}\",code=\"404\"}", 1);
    ck_assert_sample(text, "opsrun_http_requests_total{route=\"unmatched\",code=\"404\"}", 1);
    ck_assert_sample(text, "opsrun_http_requests_total{route=\"unmatched\",code=\"405\"}", 1);
    ck_assert_msg(sample(text, "opsrun_http_requests_total{route=\"/runs/{id}\",code=\"200\"}") >=
                      10,
                  "the polls of GET /runs/{id} were not counted");
    ck_assert_msg(sample(text, "opsrun_http_request_duration_seconds_count{route=\"/alerts\"}") ==
                      11,
                  "every POST /alerts is timed");
    for (int i = 0; i < n; i++)
        ck_assert_msg(strstr(text, ids[i]) == NULL, "run id %s appears in /metrics", ids[i]);
    ck_assert_msg(strstr(text, "no-such-run") == NULL && strstr(text, "/no/such") == NULL,
                  "a raw path appears in /metrics");

    ck_assert_sample(text, "opsrun_runs{status=\"queued\"}", 0);
    ck_assert_sample(text, "opsrun_runs{status=\"running\"}", 0);
    ck_assert_sample(text, "opsrun_queue_oldest_due_seconds", 0);
    ck_assert_sample(text, "opsrun_poll_overdue_runs", 0);
    ck_assert_sample(text, "opsrun_database_up", 1);
    ck_assert_sample(text, "opsrun_ready", 1);
    ck_assert_sample(text, "opsrun_draining", 0);
    ck_assert_sample(text, "opsrun_workers_busy", 0);
    ck_assert_sample(text, "opsrun_sse_subscribers", 0);
    /* The engine's threads check connections out at any moment. */
    ck_assert_msg(sample(text, "opsrun_db_pool_in_use_connections") >= 0, "no pool figures");
    ck_assert_msg(strstr(text, "\nopsrun_build_info{version=\"") != NULL, "no opsrun_build_info");

    promtool_check_metrics(text);
    free(text);
    for (int i = 0; i < n; i++)
        free(ids[i]);
    free(cfg);
    th_stop_clean(&p);
}
END_TEST

/* The families the text declares ("# TYPE name kind"), one per line, into
 * out as "\nname\n..." for strstr lookups. */
static void families(const char *text, char *out, size_t cap)
{
    size_t len = 0;

    out[0] = '\0';
    for (const char *l = strstr(text, "# TYPE "); l; l = strstr(l + 1, "\n# TYPE ")) {
        const char *name = l[0] == '\n' ? l + 8 : l + 7;
        size_t n = strcspn(name, " ");
        len += (size_t)snprintf(out + len, cap - len, "\n%.*s", (int)n, name);
        ck_assert_uint_lt(len, cap);
    }
    snprintf(out + len, cap - len, "\n");
}

/* Every opsrun_ name in text must be a declared family, or a histogram's
 * _bucket, _sum or _count series; returns how many names it checked. */
static int check_names(const char *what, const char *text, const char *fams)
{
    static const char *const suffixes[] = {"_bucket", "_sum", "_count"};
    regex_t re;
    regmatch_t m;
    int checked = 0;

    ck_assert(regcomp(&re, "opsrun_[a-z_]*[a-z]", REG_EXTENDED) == 0);
    for (const char *s = text; regexec(&re, s, 1, &m, 0) == 0; s += m.rm_eo) {
        char name[128], key[132];
        size_t n = (size_t)(m.rm_eo - m.rm_so);
        bool found;
        ck_assert_uint_lt(n, sizeof(name));
        memcpy(name, s + m.rm_so, n);
        name[n] = '\0';
        snprintf(key, sizeof(key), "\n%s\n", name);
        found = strstr(fams, key) != NULL;
        for (size_t i = 0; !found && i < 3; i++) {
            size_t k = strlen(suffixes[i]);
            if (n > k && strcmp(name + n - k, suffixes[i]) == 0) {
                snprintf(key, sizeof(key), "\n%.*s\n", (int)(n - k), name);
                found = strstr(fams, key) != NULL;
            }
        }
        ck_assert_msg(found, "%s uses %s, which GET /metrics does not have", what, name);
        checked++;
    }
    regfree(&re);
    return checked;
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "r");
    char *buf;
    long n;

    ck_assert_msg(f != NULL, "could not open %s", path);
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc((size_t)n + 1);
    ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* Appends every "expr" string under j to out (newline-separated). */
static void collect_exprs(const json_t *j, char **out, size_t *len)
{
    const char *key;
    const json_t *v;
    size_t i;

    if (json_is_object(j)) {
        json_object_foreach((json_t *)j, key, v)
        {
            if (strcmp(key, "expr") == 0 && json_is_string(v)) {
                size_t n = strlen(json_string_value(v));
                *out = realloc(*out, *len + n + 2);
                memcpy(*out + *len, json_string_value(v), n);
                *len += n;
                (*out)[(*len)++] = '\n';
                (*out)[*len] = '\0';
            } else {
                collect_exprs(v, out, len);
            }
        }
    } else if (json_is_array(j)) {
        json_array_foreach(j, i, v) collect_exprs(v, out, len);
    }
}

START_TEST(deploy_files)
{
    const char *src = getenv("OPSRUN_SOURCE_DIR");
    struct th_proc p;
    char cmd[1024], out[16384], path[512], *text, *fams, *rules, *exprs = NULL;
    json_error_t jerr;
    json_t *dash;
    size_t len = 0;
    int rc;

    ck_assert_msg(src != NULL, "OPSRUN_SOURCE_DIR is not set");
    need_promtool();
    snprintf(cmd, sizeof(cmd), "promtool check rules %s/deploy/prometheus/alerts.yml", src);
    rc = run_cmd(cmd, NULL, out, sizeof(out));
    ck_assert_msg(rc == 0, "%s: exit %d:\n%s", cmd, rc, out);
    snprintf(cmd, sizeof(cmd), "cd %s/deploy/prometheus && promtool test rules alerts_test.yml",
             src);
    rc = run_cmd(cmd, NULL, out, sizeof(out));
    ck_assert_msg(rc == 0, "%s: exit %d:\n%s", cmd, rc, out);

    /* The names a freshly started server declares, histograms included. */
    th_start_fresh(&p, "e2e_metrics_deploy", NULL);
    text = scrape(&p);
    fams = malloc(16384);
    families(text, fams, 16384);

    snprintf(path, sizeof(path), "%s/deploy/prometheus/alerts.yml", src);
    rules = read_file(path);
    ck_assert_int_ge(check_names("deploy/prometheus/alerts.yml", rules, fams), 10);

    snprintf(path, sizeof(path), "%s/deploy/grafana/opsrun.json", src);
    dash = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    ck_assert_msg(dash != NULL, "%s: %s at line %d", path, jerr.text, jerr.line);
    ck_assert_msg(json_is_array(json_object_get(dash, "panels")), "the dashboard has no panels");
    collect_exprs(dash, &exprs, &len);
    ck_assert_msg(exprs != NULL, "the dashboard has no expr");
    ck_assert_int_ge(check_names("deploy/grafana/opsrun.json", exprs, fams), 15);

    json_decref(dash);
    free(exprs);
    free(rules);
    free(fams);
    free(text);
    th_stop_clean(&p);
}
END_TEST

/* A run whose cancel arrives while its attempt fails retryably is ended
 * cancelled by the retry statement itself (a hand-back): it counts as
 * completed (cancelled), not as retried. The cancel is written with SQL,
 * without the notification POST /runs/{id}/cancel sends, and the worker's
 * own cancel checks (and heartbeats) are a minute apart, so it does not
 * learn of it before its attempt ends; the error the retry recorded shows that this path was taken.
 */
START_TEST(cancel_during_hand_back)
{
    struct th_proc p;
    const char *ci;
    PGconn *pg;
    PGresult *res;
    json_t *run;
    char *id, *text;

    ci = th_start_fresh(&p, "e2e_metrics_hand_back",
                        "{\"queue\": {\"heartbeat_interval_s\": 60, \"orphan_after_s\": 120,"
                        " \"cancel_check_ms\": 60000},"
                        " \"run_types\": {\"flaky\": {\"action\": \"simulate\","
                        "  \"max_attempts\": 3, \"retry_backoff_ms\": 20}}}");
    pg = th_pg(ci);
    id = th_submit(&p,
                   "{\"alert_type\":\"flaky\",\"data\":{\"fail\":\"transient\","
                   "\"duration_ms\":4000,\"steps\":1}}",
                   202);
    ck_assert_msg(th_wait_status(&p, id, "running", 10000), "run %s did not start", id);
    res = th_sql(pg, "UPDATE runs SET status = 'cancelling' WHERE id = '%s' AND status = 'running'",
                 id);
    ck_assert_msg(strcmp(PQcmdTuples(res), "1") == 0, "run %s was no longer running", id);
    PQclear(res);
    run = th_wait_done(&p, id, 30);
    ck_assert_str_eq(th_js(run, "outcome"), "cancelled");
    ck_assert_msg(th_streq(th_js(json_object_get(run, "error"), "code"), "simulated_transient"),
                  "run %s did not end through the retry statement (error %s)", id,
                  th_js(json_object_get(run, "error"), "code"));
    ck_assert_int_eq(th_ji(run, "attempt"), 1);
    text = scrape(&p);
    ck_assert_sample(text, "opsrun_runs_completed_total{type=\"flaky\",outcome=\"cancelled\"}", 1);
    ck_assert_sample(text, "opsrun_run_retries_total{type=\"flaky\"}", 0);
    free(text);
    json_decref(run);
    free(id);
    PQfinish(pg);
    th_stop_clean(&p);
}
END_TEST

/* A run type a reload adds gets its series: a run of it is counted (before
 * the fix the registry knew only the run types of the start). */
START_TEST(run_type_added_by_reload)
{
    static const char *const db = "e2e_metrics_reload";
    static const char *const first =
        "{\"run_types\": {\"etl\": {\"action\": \"simulate\", \"max_attempts\": 1}}}";
    static const char *const second =
        "{\"run_types\": {\"etl\": {\"action\": \"simulate\", \"max_attempts\": 1},"
        " \"ingest\": {\"action\": \"simulate\", \"max_attempts\": 1}}}";
    struct th_proc p;
    struct th_resp r;
    char *id, *text, *path;

    th_start_fresh(&p, db, first);
    text = scrape(&p);
    ck_assert_sample(text, "opsrun_runs_submitted_total{type=\"ingest\"}", -1);
    free(text);
    path = th_config_file(db, second); /* the file the server was started with */
    th_post_expect(&p, "/admin/reload", NULL, NULL, 200, &r);
    th_resp_free(&r);
    id = th_submit(&p, "{\"alert_type\":\"ingest\",\"data\":{\"duration_ms\":1}}", 202);
    th_expect_outcome(&p, id, "succeeded", 20);
    text = scrape_until(&p, "opsrun_runs_completed_total{type=\"ingest\",outcome=\"succeeded\"}", 1,
                        5000);
    ck_assert_sample(text, "opsrun_runs_submitted_total{type=\"ingest\"}", 1);
    ck_assert_sample(text, "opsrun_runs_completed_total{type=\"ingest\",outcome=\"succeeded\"}", 1);
    ck_assert_sample(text, "opsrun_run_duration_seconds_count{type=\"ingest\"}", 1);
    ck_assert_sample(text, "opsrun_runs_submitted_total{type=\"etl\"}", 0);
    promtool_check_metrics(text);
    free(text);
    free(path);
    free(id);
    th_stop_clean(&p);
}
END_TEST

/* Three runs of one key that allows one at a time: one runs, the claims
 * hold the other two, and /metrics says so, per group
 * (opsrun_runs_held_by_key); GET /runs?concurrency_key= lists the three,
 * and a held run's detail names the run that holds the key. Once that run
 * is cancelled the next starts and one run is held. */
START_TEST(held_by_key)
{
    struct th_proc p;
    struct th_resp r;
    char *ids[3], *text, path[256];
    json_t *list, *run;

    th_start_fresh(&p, "e2e_metrics_held",
                   "{\"run_types\": {\"restart-host\": {\"action\": \"simulate\","
                   " \"params\": {\"duration_ms\": 600000, \"steps\": 600},"
                   " \"concurrency\": {\"group\": \"host\", \"key\": \"{{input:/host}}\"}}}}");
    for (int i = 0; i < 3; i++) {
        char body[128];
        snprintf(body, sizeof(body),
                 "{\"alert_type\":\"restart-host\",\"data\":{\"host\":\"web-1\",\"n\":%d}}", i);
        ids[i] = th_submit(&p, body, 202);
    }
    ck_assert_msg(th_wait_status(&p, ids[0], "running", 10000), "run %s did not start", ids[0]);
    text = scrape_until(&p, "opsrun_runs_held_by_key{group=\"host\"}", 2, 20000);
    ck_assert_sample(text, "opsrun_runs_held_by_key{group=\"host\"}", 2);
    ck_assert_sample(text, "opsrun_runs{status=\"running\"}", 1);
    promtool_check_metrics(text);
    free(text);

    th_get(p.url, "/runs?concurrency_key=web-1&concurrency_group=host", &r);
    ck_assert_int_eq(r.status, 200);
    list = json_loads(r.body, 0, NULL);
    ck_assert_ptr_nonnull(list);
    ck_assert_uint_eq(json_array_size(json_object_get(list, "runs")), 3);
    json_decref(list);
    th_resp_free(&r);
    run = th_get_run(&p, ids[2]);
    ck_assert_str_eq(th_js(run, "status"), "queued");
    ck_assert_str_eq(th_js(json_object_get(run, "waiting_for"), "reason"), "concurrency_key");
    ck_assert_str_eq(json_string_value(json_array_get(
                         json_object_get(json_object_get(run, "concurrency"), "holders"), 0)),
                     ids[0]);
    json_decref(run);

    snprintf(path, sizeof(path), "%s/runs/%s/cancel", p.url, ids[0]);
    ck_assert(th_http("POST", path, NULL, NULL, &r) && r.status == 202);
    th_resp_free(&r);
    ck_assert_msg(th_wait_status(&p, ids[1], "running", 20000), "run %s did not start", ids[1]);
    text = scrape_until(&p, "opsrun_runs_held_by_key{group=\"host\"}", 1, 20000);
    ck_assert_sample(text, "opsrun_runs_held_by_key{group=\"host\"}", 1);
    free(text);

    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof(path), "%s/runs/%s/cancel", p.url, ids[i]);
        ck_assert(th_http("POST", path, NULL, NULL, &r));
        th_resp_free(&r);
    }
    for (int i = 0; i < 3; i++) {
        th_expect_outcome(&p, ids[i], "cancelled", 20);
        free(ids[i]);
    }
    th_stop_clean(&p);
}
END_TEST

/* In the test's own process (Check forks one per test). */
static void setup(void)
{
    g_port = fake_jobs_start();
}

static void teardown(void)
{
    fake_jobs_stop();
}

static Suite *metrics_suite(void)
{
    Suite *s = suite_create("e2e_metrics");
    TCase *tc = tcase_create("metrics");

    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, counts_after_runs);
    tcase_add_test(tc, deploy_files);
    tcase_add_test(tc, cancel_during_hand_back);
    tcase_add_test(tc, held_by_key);
    tcase_add_test(tc, run_type_added_by_reload);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return th_run_suite(metrics_suite());
}
