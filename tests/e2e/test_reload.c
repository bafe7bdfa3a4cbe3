/* tests/e2e/test_reload.c — reloading the configuration without a restart
 * (docs/configuration.md#reloading), against the real binary and
 * PostgreSQL: POST /admin/reload and SIGHUP read the file again and apply
 * it at once (a run type added is accepted on the next POST /alerts, a
 * route changed picks the new type, a CORS origin added is answered, a
 * log level of debug prints debug lines); the answer's changed,
 * restart_required and config_version; a key only a restart applies keeps
 * its value; an invalid file changes nothing (400 with every error, the
 * old run types still work, the version stays); the endpoint needs the
 * admin scope; a token removed is refused from the next request;
 * /healthz's config and each worker's config_version, across
 * two replicas on one database that disagree until both reloaded; the
 * reload metrics; a running attempt ends under the run type it started
 * with while a queued run starts under the new one; and the refusal to
 * drop every token while listening on every address. */
#include "../support/harness.h"
#include "../support/sse.h"

#include <curl/curl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#define T_ADMIN "opsrun_e2e-reload-admin-000000000000"
#define T_READ "opsrun_e2e-reload-read-1111111111111"
#define T_OTHER "opsrun_e2e-reload-other-222222222222"

/* The tokens of the auth tests: an admin, a reader, and another reader. */
static const struct th_token tokens[] = {
    {"root", "ops", "\"admin\"", T_ADMIN},
    {"viewer", "ops", "\"read\"", T_READ},
    {"other", "ops", "\"read\"", T_OTHER},
};

/* Writes the configuration file name again (th_config_file: the same
 * path for the same name), as an operator edits it before a reload. */
static void rewrite(const char *name, const char *json)
{
    free(th_config_file(name, json));
}

/* POST /admin/reload with token (NULL: none), asserting HTTP want; the
 * answer in *r. */
static void reload(const struct th_proc *p, const char *token, long want, struct th_resp *r)
{
    th_post_expect(p, "/admin/reload", token, NULL, want, r);
}

/* A successful reload's answer, checked for its form: config_version (12
 * hex digits), changed and restart_required (arrays of strings). */
static json_t *reload_ok(const struct th_proc *p, const char *token)
{
    struct th_resp r;
    json_t *j;

    reload(p, token, 200, &r);
    ck_assert_msg(r.json, "reload: not JSON: %s", r.body);
    j = json_incref(r.json);
    th_resp_free(&r);
    ck_assert_msg(th_js(j, "config_version") && strlen(th_js(j, "config_version")) == 12, "%s",
                  json_dumps(j, 0));
    ck_assert(json_is_array(json_object_get(j, "changed")));
    ck_assert(json_is_array(json_object_get(j, "restart_required")));
    return j;
}

/* Whether the array of strings a holds s. */
static bool has(const json_t *a, const char *s)
{
    size_t i;
    json_t *v;

    json_array_foreach(a, i, v) if (th_streq(json_string_value(v), s)) return true;
    return false;
}

/* GET /healthz (with token, NULL: none), asserting 200; the body. */
static json_t *healthz(const struct th_proc *p, const char *token)
{
    char url[256];
    struct th_resp r;
    json_t *j;

    snprintf(url, sizeof(url), "%s/healthz", p->url);
    ck_assert(th_http_token("GET", url, token, NULL, NULL, &r));
    ck_assert_msg(r.status == 200 && r.json, "GET /healthz: HTTP %ld %s", r.status, r.body);
    j = json_incref(r.json);
    th_resp_free(&r);
    return j;
}

/* /healthz's config.version and config.loaded_at, into version and at. */
static void config_of(const struct th_proc *p, const char *token, char version[16], char at[40])
{
    json_t *h = healthz(p, token), *c = json_object_get(h, "config");

    ck_assert_msg(json_is_object(c) && th_js(c, "version"), "no config in /healthz");
    snprintf(version, 16, "%s", th_js(c, "version"));
    snprintf(at, 40, "%s", th_js(c, "loaded_at") ? th_js(c, "loaded_at") : "null");
    json_decref(h);
}

/* POST /alerts of alert_type (with data {}), asserting HTTP want; the
 * answer's run_id when there is one (heap), else NULL. */
static char *alert(const struct th_proc *p, const char *type, long want)
{
    char body[256];
    struct th_resp r;
    char *id = NULL;

    snprintf(body, sizeof(body), "{\"alert_type\": \"%s\", \"data\": {\"duration_ms\": 10}}", type);
    th_post_expect(p, "/alerts", NULL, body, want, &r);
    if (r.json && th_js(r.json, "run_id"))
        id = strdup(th_js(r.json, "run_id"));
    th_resp_free(&r);
    return id;
}

/* The type of run id. */
static char *type_of(const struct th_proc *p, const char *id)
{
    json_t *run = th_get_run(p, id);
    char *t = strdup(th_js(run, "type"));

    json_decref(run);
    return t;
}

/* A run type added and a route changed apply to the next POST /alerts;
 * the answer lists them and no restart. */
START_TEST(run_type_and_route_apply_at_once)
{
    const char *v1 = "{\"run_types\": {\"a\": {\"action\": \"simulate\"}},"
                     " \"routes\": [{\"match\": {\"alert_type\": \"Disk\"}, \"run_type\": \"a\"}]}";
    const char *v2 = "{\"run_types\": {\"a\": {\"action\": \"simulate\"}, \"b\": {\"action\": "
                     "\"simulate\"}},"
                     " \"routes\": [{\"match\": {\"alert_type\": \"Disk\"}, \"run_type\": \"b\"}]}";
    struct th_proc p;
    char *path = th_config_file("e2e_reload_types", v1), *id, *t;
    const char *args[] = {"--config", path, NULL};
    char *db = th_db_create("e2e_reload_types");
    char before[16], at[40], after[16];
    json_t *ans;

    th_start(&p, db, args, NULL);
    config_of(&p, NULL, before, at);
    ck_assert_ptr_null(alert(&p, "b", 422));
    id = alert(&p, "Disk", 202);
    t = type_of(&p, id);
    ck_assert_str_eq(t, "a");
    free(id);
    free(t);

    rewrite("e2e_reload_types", v2);
    ans = reload_ok(&p, NULL);
    ck_assert_msg(has(json_object_get(ans, "changed"), "run_types.b"), "%s", json_dumps(ans, 0));
    ck_assert_msg(has(json_object_get(ans, "changed"), "routes"), "%s", json_dumps(ans, 0));
    ck_assert_int_eq(json_array_size(json_object_get(ans, "changed")), 2);
    ck_assert_int_eq(json_array_size(json_object_get(ans, "restart_required")), 0);
    config_of(&p, NULL, after, at);
    ck_assert_str_eq(th_js(ans, "config_version"), after);
    ck_assert_str_ne(before, after);

    id = alert(&p, "b", 202);
    th_expect_outcome(&p, id, "succeeded", 30);
    free(id);
    id = alert(&p, "Disk", 202);
    t = type_of(&p, id);
    ck_assert_str_eq(t, "b");
    th_expect_outcome(&p, id, "succeeded", 30);
    free(id);
    free(t);

    /* The same file again: nothing changed, the same version. */
    json_decref(ans);
    ans = reload_ok(&p, NULL);
    ck_assert_int_eq(json_array_size(json_object_get(ans, "changed")), 0);
    ck_assert_str_eq(th_js(ans, "config_version"), after);
    json_decref(ans);
    th_stop_clean(&p);
    free(db);
    free(path);
}
END_TEST

/* A key only a restart applies is listed in restart_required, logged, and
 * keeps its running value: /healthz still shows the old workers. */
START_TEST(restart_required_keeps_the_old_value)
{
    struct th_proc p;
    char *path = th_config_file("e2e_reload_restart", "{\"queue\": {\"workers\": 2}}");
    const char *args[] = {"--config", path, NULL};
    char *db = th_db_create("e2e_reload_restart");
    char before[16], at[40], after[16], line[1024];
    json_t *ans, *h;

    th_start(&p, db, args, NULL);
    config_of(&p, NULL, before, at);
    rewrite("e2e_reload_restart", "{\"queue\": {\"workers\": 3}, \"log\": {\"level\": \"warn\"}}");
    ans = reload_ok(&p, NULL);
    ck_assert_msg(has(json_object_get(ans, "changed"), "queue.workers"), "%s", json_dumps(ans, 0));
    ck_assert_msg(has(json_object_get(ans, "changed"), "log.level"), "%s", json_dumps(ans, 0));
    ck_assert_msg(has(json_object_get(ans, "restart_required"), "queue.workers"), "%s",
                  json_dumps(ans, 0));
    ck_assert_int_eq(json_array_size(json_object_get(ans, "restart_required")), 1);
    config_of(&p, NULL, after, at);
    ck_assert_str_eq(th_js(ans, "config_version"), after);
    ck_assert_str_ne(before, after); /* log.level did change */

    h = healthz(&p, NULL);
    ck_assert_int_eq(th_ji(json_object_get(h, "engine"), "workers"), 2);
    json_decref(h);
    ck_assert_msg(th_log_find(p.log, "configuration key queue.workers changed but needs a restart",
                              line, sizeof(line)),
                  "no restart line in %s", p.log);
    json_decref(ans);
    th_stop_clean(&p);
    free(db);
    free(path);
}
END_TEST

/* A file that changes only what a restart applies: both lists name the
 * key, and the running configuration stays (its version and loaded_at). */
START_TEST(restart_only_change_keeps_the_configuration)
{
    struct th_proc p;
    char *path = th_config_file("e2e_reload_restart_only", "{\"queue\": {\"workers\": 2}}");
    const char *args[] = {"--config", path, NULL};
    char *db = th_db_create("e2e_reload_restart_only");
    char before[16], at0[40], after[16], at1[40];
    json_t *ans;

    th_start(&p, db, args, NULL);
    config_of(&p, NULL, before, at0);
    th_sleep_ms(20); /* loaded_at is to the millisecond: it would move */
    rewrite("e2e_reload_restart_only", "{\"queue\": {\"workers\": 3}}");
    ans = reload_ok(&p, NULL);
    ck_assert_msg(has(json_object_get(ans, "changed"), "queue.workers"), "%s", json_dumps(ans, 0));
    ck_assert_msg(has(json_object_get(ans, "restart_required"), "queue.workers"), "%s",
                  json_dumps(ans, 0));
    ck_assert_str_eq(th_js(ans, "config_version"), before);
    config_of(&p, NULL, after, at1);
    ck_assert_str_eq(after, before);
    ck_assert_str_eq(at1, at0);
    json_decref(ans);
    th_stop_clean(&p);
    free(db);
    free(path);
}
END_TEST

static char *auth_config(const struct th_token *t, size_t n, const char *extra);

/* A stream opened without a token (no auth.tokens, on loopback) ends at
 * once when a reload adds tokens, as a new request without one is refused. */
START_TEST(anonymous_stream_ends_when_tokens_come)
{
    struct th_proc p;
    char *path = th_config_file("e2e_reload_anon", "{}");
    const char *args[] = {"--config", path, NULL};
    char *db = th_db_create("e2e_reload_anon");
    char *cfg = auth_config(tokens, 1, "");
    struct th_sse *s;
    struct th_sse_event ev;
    long long t0;

    th_start(&p, db, args, NULL);
    s = th_sse_open(p.port, "/stream", NULL, 0);
    ck_assert_int_eq(s->status, 200);
    ck_assert_int_eq(th_sse_next(s, &ev, 300), 0); /* open, nothing to say */
    rewrite("e2e_reload_anon", cfg);
    json_decref(reload_ok(&p, NULL));
    t0 = th_now_ms();
    ck_assert_int_eq(th_sse_next(s, &ev, 2000), -1);
    ck_assert_msg(s->clean_end, "the stream was cut, not ended");
    ck_assert_msg(th_now_ms() - t0 < 1000, "the stream ended after %lld ms", th_now_ms() - t0);
    th_sse_close(s);
    th_stop_clean(&p);
    free(cfg);
    free(db);
    free(path);
}
END_TEST

/* An invalid file: 400 with every error, naming the keys; nothing
 * changes (the old run types work, the version and loaded_at stay), a
 * log line says so, and the failure is counted. */
START_TEST(invalid_file_changes_nothing)
{
    struct th_proc p;
    char *path = th_config_file("e2e_reload_invalid", "{\"run_types\": {\"a\": {\"action\": "
                                                      "\"simulate\"}}}");
    const char *args[] = {"--config", path, NULL};
    char *db = th_db_create("e2e_reload_invalid");
    char before[16], at0[40], after[16], at1[40], line[1024];
    struct th_resp r;
    json_t *errors;
    char *id;
    bool key_a = false, key_q = false;
    size_t i;
    json_t *e;

    th_start(&p, db, args, NULL);
    config_of(&p, NULL, before, at0);
    rewrite("e2e_reload_invalid", "{\"run_types\": {\"a\": {\"action\": \"nope\"}, \"b\": "
                                  "{\"action\": \"simulate\"}}, \"queue\": {\"workerz\": "
                                  "1}}");
    reload(&p, NULL, 400, &r);
    th_check_problem(&r, 400, "an invalid reload");
    errors = json_object_get(r.json, "errors");
    ck_assert_msg(json_is_array(errors) && json_array_size(errors) >= 2, "%s", r.body);
    json_array_foreach(errors, i, e)
    {
        const char *s = json_string_value(e);
        ck_assert_msg(s, "an error that is not a string: %s", r.body);
        key_a |= strstr(s, "run_types.a.action") != NULL;
        key_q |= strstr(s, "unknown key \"queue.workerz\"") != NULL;
    }
    ck_assert_msg(key_a && key_q, "the errors do not name both keys: %s", r.body);
    th_resp_free(&r);
    ck_assert_msg(th_log_find(p.log, "configuration reload refused", line, sizeof(line)),
                  "no refusal in %s", p.log);
    ck_assert_msg(th_log_find(p.log, "queue.workerz", line, sizeof(line)),
                  "the error is not logged in %s", p.log);

    config_of(&p, NULL, after, at1);
    ck_assert_str_eq(before, after);
    ck_assert_str_eq(at0, at1);
    id = alert(&p, "a", 202);
    th_expect_outcome(&p, id, "succeeded", 30);
    free(id);
    ck_assert_ptr_null(alert(&p, "b", 422));
    th_stop_clean(&p);
    free(db);
    free(path);
}
END_TEST

/* GET /metrics: the value of the sample whose name and labels are
 * sample ("name{label=\"v\"}"); -1 when there is none. */
static double metric(const struct th_proc *p, const char *sample)
{
    struct th_resp r;
    const char *at;
    double v = -1;
    size_t n = strlen(sample);

    th_get(p->url, "/metrics", &r);
    ck_assert_int_eq(r.status, 200);
    for (at = r.body; at && *at; at = strchr(at, '\n'), at = at ? at + 1 : NULL) {
        if (strncmp(at, sample, n) == 0 && at[n] == ' ') {
            v = strtod(at + n + 1, NULL);
            break;
        }
    }
    th_resp_free(&r);
    return v;
}

#define OK_SAMPLE "opsrun_config_reloads_total{result=\"success\"}"
#define BAD_SAMPLE "opsrun_config_reloads_total{result=\"failure\"}"
#define WHEN_SAMPLE "opsrun_config_last_reload_success_timestamp_seconds"

/* Polls /healthz until config.version differs from old; false after 10 s. */
static bool wait_version_change(const struct th_proc *p, const char *old, char now[16])
{
    char at[40];

    for (int i = 0; i < 200; i++) {
        config_of(p, NULL, now, at);
        if (strcmp(now, old) != 0)
            return true;
        th_sleep_ms(50);
    }
    return false;
}

/* Polls the log until a line holds needle; false after 10 s. */
static bool wait_log(const struct th_proc *p, const char *needle)
{
    char line[1024];

    for (int i = 0; i < 200; i++) {
        if (th_log_find(p->log, needle, line, sizeof(line)))
            return true;
        th_sleep_ms(50);
    }
    return false;
}

/* SIGHUP does what the endpoint does: a valid file applies (a new run
 * type accepted), an invalid one is refused and logged, and the process
 * keeps serving; the metrics count both, and the timestamp is the
 * success's. */
START_TEST(sighup_and_metrics)
{
    struct th_proc p;
    char *path = th_config_file("e2e_reload_hup", "{\"run_types\": {\"a\": {\"action\": "
                                                  "\"simulate\"}}}");
    const char *args[] = {"--config", path, NULL};
    char *db = th_db_create("e2e_reload_hup");
    char before[16], after[16], again[16], at[40];
    long long t0;
    double when;
    char *id;

    th_start(&p, db, args, NULL);
    ck_assert(metric(&p, OK_SAMPLE) == 0);
    ck_assert(metric(&p, BAD_SAMPLE) == 0);
    ck_assert(metric(&p, WHEN_SAMPLE) == 0);
    config_of(&p, NULL, before, at);
    ck_assert_ptr_null(alert(&p, "b", 422));

    rewrite("e2e_reload_hup", "{\"run_types\": {\"a\": {\"action\": \"simulate\"}, \"b\": "
                              "{\"action\": \"simulate\"}}}");
    t0 = (long long)time(NULL);
    ck_assert_int_eq(kill(p.pid, SIGHUP), 0);
    ck_assert_msg(wait_version_change(&p, before, after), "SIGHUP changed no version");
    ck_assert_msg(wait_log(&p, "configuration reloaded cause=\"SIGHUP\""), "no log line in %s",
                  p.log);
    id = alert(&p, "b", 202);
    th_expect_outcome(&p, id, "succeeded", 30);
    free(id);
    ck_assert(metric(&p, OK_SAMPLE) == 1);
    ck_assert(metric(&p, BAD_SAMPLE) == 0);
    when = metric(&p, WHEN_SAMPLE);
    ck_assert_msg(when >= (double)t0 - 1 && when <= (double)time(NULL) + 1,
                  "timestamp %f, reload at %lld s", when, t0);

    rewrite("e2e_reload_hup", "{\"run_types\": {\"a\": {\"action\": \"nope\"}}}");
    ck_assert_int_eq(kill(p.pid, SIGHUP), 0);
    ck_assert_msg(wait_log(&p, "configuration reload refused cause=\"SIGHUP\""), "no refusal in %s",
                  p.log);
    th_check_documented_line(p.log, "configuration reloaded cause=\"SIGHUP\"",
                             "docs/configuration.md", "configuration reloaded cause=\"SIGHUP\"");
    th_check_documented_line(p.log, "configuration reload refused cause=\"SIGHUP\"",
                             "docs/configuration.md",
                             "configuration reload refused cause=\"SIGHUP\"");
    ck_assert(th_alive(p.pid));
    config_of(&p, NULL, again, at);
    ck_assert_str_eq(again, after);
    id = alert(&p, "b", 202);
    th_expect_outcome(&p, id, "succeeded", 30);
    free(id);
    ck_assert(metric(&p, OK_SAMPLE) == 1);
    ck_assert(metric(&p, BAD_SAMPLE) == 1);
    ck_assert(metric(&p, WHEN_SAMPLE) == when);
    th_stop_clean(&p);
    free(db);
    free(path);
}
END_TEST

/* The configuration of the auth tests: tokens t[0..n) and extra members
 * (may be ""), as a file's text (heap). */
static char *auth_config(const struct th_token *t, size_t n, const char *extra)
{
    char *auth = th_auth_tokens(t, n), *out = malloc(16384);

    snprintf(out, 16384, "{%s%s}", auth, extra);
    free(auth);
    return out;
}

/* The endpoint needs the admin scope; a token the file no longer has is
 * refused from the next request, while the one kept still works. */
START_TEST(admin_scope_and_removed_token)
{
    struct th_proc p;
    char *cfg = auth_config(tokens, 3, ""), *path = th_config_file("e2e_reload_auth", cfg);
    const char *args[] = {"--config", path, NULL};
    char *db = th_db_create("e2e_reload_auth");
    char url[256];
    struct th_resp r;
    json_t *ans;

    th_start(&p, db, args, NULL);
    reload(&p, NULL, 401, &r);
    th_check_problem(&r, 401, "reload without a token");
    th_resp_free(&r);
    reload(&p, T_READ, 403, &r);
    th_check_problem(&r, 403, "reload with a read token");
    th_resp_free(&r);

    snprintf(url, sizeof(url), "%s/runs", p.url);
    ck_assert(th_http_token("GET", url, T_READ, NULL, NULL, &r));
    ck_assert_int_eq(r.status, 200);
    th_resp_free(&r);

    free(cfg);
    cfg = auth_config((const struct th_token[]){tokens[0], tokens[2]}, 2, "");
    rewrite("e2e_reload_auth", cfg);
    ans = reload_ok(&p, T_ADMIN);
    ck_assert_msg(has(json_object_get(ans, "changed"), "auth.tokens"), "%s", json_dumps(ans, 0));
    json_decref(ans);

    ck_assert(th_http_token("GET", url, T_READ, NULL, NULL, &r));
    th_check_problem(&r, 401, "a removed token");
    th_resp_free(&r);
    ck_assert(th_http_token("GET", url, T_OTHER, NULL, NULL, &r));
    ck_assert_int_eq(r.status, 200);
    th_resp_free(&r);

    th_stop_clean(&p);
    free(db);
    free(cfg);
    free(path);
}
END_TEST

/* The value of header name in the answer to GET /healthz with Origin:
 * origin, "" when absent. */
static void cors_header(const struct th_proc *p, const char *origin, char *out, size_t cap)
{
    CURL *c = curl_easy_init();
    struct curl_slist *h = NULL;
    struct curl_header *hv = NULL;
    char url[256], line[256];
    long status = 0;

    snprintf(url, sizeof(url), "%s/healthz", p->url);
    snprintf(line, sizeof(line), "Origin: %s", origin);
    h = curl_slist_append(h, line);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
    ck_assert_int_eq(curl_easy_perform(c), CURLE_OK);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    ck_assert_int_eq(status, 200);
    out[0] = '\0';
    if (curl_easy_header(c, "Access-Control-Allow-Origin", 0, CURLH_HEADER, -1, &hv) == CURLHE_OK)
        snprintf(out, cap, "%s", hv->value);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
}

/* A CORS origin added is answered from the next request; log.level debug
 * prints debug lines from then on. */
START_TEST(cors_and_log_level_apply)
{
    struct th_proc p;
    char *path = th_config_file("e2e_reload_cors", "{\"log\": {\"level\": \"info\"}}");
    const char *args[] = {"--config", path, NULL};
    char *db = th_db_create("e2e_reload_cors");
    char acao[256], needle[128], line[1024];
    json_t *ans;
    char *id;

    th_start(&p, db, args, NULL);
    cors_header(&p, "http://app.example:3000", acao, sizeof(acao));
    ck_assert_str_eq(acao, "");
    id = alert(&p, "demo", 202);
    th_expect_outcome(&p, id, "succeeded", 30);
    snprintf(needle, sizeof(needle), "claimed run=%s", id);
    ck_assert_msg(!th_log_find(p.log, needle, line, sizeof(line)), "a debug line at info: %s",
                  line);
    free(id);

    rewrite("e2e_reload_cors", "{\"log\": {\"level\": \"debug\"}, \"http\": "
                               "{\"cors_origins\": [\"http://app.example:3000\"]}}");
    ans = reload_ok(&p, NULL);
    ck_assert_msg(has(json_object_get(ans, "changed"), "http.cors_origins"), "%s",
                  json_dumps(ans, 0));
    ck_assert_msg(has(json_object_get(ans, "changed"), "log.level"), "%s", json_dumps(ans, 0));
    ck_assert_int_eq(json_array_size(json_object_get(ans, "restart_required")), 0);
    json_decref(ans);
    cors_header(&p, "http://app.example:3000", acao, sizeof(acao));
    ck_assert_str_eq(acao, "http://app.example:3000");
    cors_header(&p, "http://evil.example:3000", acao, sizeof(acao));
    ck_assert_str_eq(acao, "");

    id = alert(&p, "demo", 202);
    th_expect_outcome(&p, id, "succeeded", 30);
    snprintf(needle, sizeof(needle), "claimed run=%s", id);
    ck_assert_msg(wait_log(&p, needle), "no debug line \"%s\" in %s", needle, p.log);
    free(id);
    th_stop_clean(&p);
    free(db);
    free(path);
}
END_TEST

/* The config_version of the running workers of pid in a /healthz body;
 * "" while they have none yet, "?" when they disagree or there is none. */
static void worker_version(const json_t *h, pid_t pid, char out[16])
{
    size_t i;
    json_t *w;

    snprintf(out, 16, "?");
    json_array_foreach(json_object_get(h, "workers"), i, w)
    {
        const char *v = th_js(w, "config_version");
        if (th_ji(w, "pid") != pid || !th_streq(th_js(w, "status"), "running"))
            continue;
        snprintf(out, 16, "%s", v ? v : "");
        return;
    }
}

/* Polls p's /healthz until the workers of pid report version want;
 * false after 15 s. */
static bool wait_worker_version(const struct th_proc *p, pid_t pid, const char *want)
{
    char got[16];

    for (int i = 0; i < 150; i++) {
        json_t *h = healthz(p, NULL);
        worker_version(h, pid, got);
        json_decref(h);
        if (strcmp(got, want) == 0)
            return true;
        th_sleep_ms(100);
    }
    return false;
}

/* Two replicas on one database, started alike (but for their listen
 * address and file path, which the version leaves out): the same version;
 * one reloaded shows its new version on /healthz (config.version, a new
 * loaded_at) and in its worker row, while the other's row still has the
 * old one; once the other reloaded too, they agree again. */
START_TEST(replicas_show_their_versions)
{
    const char *v1 = "{\"queue\": {\"heartbeat_interval_s\": 1}}";
    const char *v2 = "{\"queue\": {\"heartbeat_interval_s\": 1}, \"run_types\": {\"b\": "
                     "{\"action\": \"simulate\"}}}";
    struct th_proc a, b;
    char *pa = th_config_file("e2e_reload_replica_a", v1);
    char *pb = th_config_file("e2e_reload_replica_b", v1);
    const char *args_a[] = {"--config", pa, NULL}, *args_b[] = {"--config", pb, NULL};
    char *db = th_db_create("e2e_reload_replicas");
    char va[16], vb[16], at0[40], at1[40], na[16], nb[16];
    json_t *ans, *h;

    th_start(&a, db, args_a, NULL);
    th_start(&b, db, args_b, NULL);
    config_of(&a, NULL, va, at0);
    config_of(&b, NULL, vb, at1);
    ck_assert_str_eq(va, vb);
    ck_assert_msg(wait_worker_version(&a, a.pid, va), "a's workers never showed %s", va);
    ck_assert_msg(wait_worker_version(&a, b.pid, vb), "b's workers never showed %s", vb);

    th_sleep_ms(20); /* loaded_at is to the millisecond; make sure it moves */
    rewrite("e2e_reload_replica_a", v2);
    ans = reload_ok(&a, NULL);
    snprintf(na, sizeof(na), "%s", th_js(ans, "config_version"));
    json_decref(ans);
    ck_assert_str_ne(na, va);
    config_of(&a, NULL, va, at1);
    ck_assert_str_eq(va, na);
    ck_assert_str_ne(at0, at1);
    ck_assert_msg(wait_worker_version(&b, a.pid, na), "a's workers never showed %s", na);
    h = healthz(&b, NULL);
    worker_version(h, b.pid, nb);
    json_decref(h);
    ck_assert_str_eq(nb, vb); /* b runs what it ran */

    rewrite("e2e_reload_replica_b", v2);
    ans = reload_ok(&b, NULL);
    snprintf(nb, sizeof(nb), "%s", th_js(ans, "config_version"));
    json_decref(ans);
    ck_assert_str_ne(nb, vb);
    ck_assert_str_eq(nb, na); /* the same settings again: the same version */
    ck_assert_msg(wait_worker_version(&a, b.pid, nb), "b's workers never showed %s", nb);
    ck_assert_msg(wait_worker_version(&a, a.pid, na), "a's workers left %s", na);
    th_stop_clean(&a);
    th_stop_clean(&b);
    free(db);
    free(pa);
    free(pb);
}
END_TEST

/* With one worker: a running attempt ends under the run type it started
 * with (its result shows the old params), while a run queued behind it
 * starts under the reloaded one. */
START_TEST(running_attempt_keeps_its_run_type)
{
    const char *v1 = "{\"queue\": {\"workers\": 1}, \"run_types\": {\"slow\": {\"action\": "
                     "\"simulate\", \"params\": {\"duration_ms\": 3000, \"steps\": 3}}}}";
    const char *v2 = "{\"queue\": {\"workers\": 1}, \"run_types\": {\"slow\": {\"action\": "
                     "\"simulate\", \"params\": {\"duration_ms\": 200, \"steps\": 7}}}}";
    struct th_proc p;
    char *path = th_config_file("e2e_reload_inflight", v1);
    const char *args[] = {"--config", path, NULL};
    char *db = th_db_create("e2e_reload_inflight");
    char *first, *second;
    json_t *run, *res, *ans;
    long long t0;

    th_start(&p, db, args, NULL);
    first = th_submit(&p, "{\"alert_type\": \"slow\", \"dedupe_key\": \"first\"}", 202);
    /* A step reported: the attempt began under v1, not only its claim. */
    t0 = th_now_ms();
    for (;;) {
        run = th_get_run(&p, first);
        if (th_js(run, "step"))
            break;
        json_decref(run);
        ck_assert_msg(th_now_ms() - t0 < 10000, "run %s never reported a step", first);
        th_sleep_ms(20);
    }
    json_decref(run);
    second = th_submit(&p, "{\"alert_type\": \"slow\", \"dedupe_key\": \"second\"}", 202);
    rewrite("e2e_reload_inflight", v2);
    ans = reload_ok(&p, NULL);
    ck_assert_msg(has(json_object_get(ans, "changed"), "run_types.slow"), "%s", json_dumps(ans, 0));
    json_decref(ans);
    run = th_get_run(&p, second);
    ck_assert_str_eq(th_js(run, "status"), "queued");
    json_decref(run);

    run = th_wait_done(&p, first, 30);
    ck_assert_str_eq(th_js(run, "outcome"), "succeeded");
    res = json_object_get(run, "result");
    ck_assert_int_eq(th_ji(res, "duration_ms"), 3000);
    ck_assert_int_eq(th_ji(res, "steps"), 3);
    json_decref(run);
    run = th_wait_done(&p, second, 30);
    ck_assert_str_eq(th_js(run, "outcome"), "succeeded");
    res = json_object_get(run, "result");
    ck_assert_int_eq(th_ji(res, "duration_ms"), 200);
    ck_assert_int_eq(th_ji(res, "steps"), 7);
    json_decref(run);
    free(first);
    free(second);
    th_stop_clean(&p);
    free(db);
    free(path);
}
END_TEST

/* Listening on every address, a reload whose file (text) leaves no token
 * is refused as start-up would refuse it, its first error naming the
 * exposure; the version stays, and a request without a token is still
 * refused (401): the tokens still apply. name names the file and the
 * database. */
static void exposure_refused(const char *name, const char *text)
{
    struct th_proc p;
    char *cfg = auth_config(tokens, 1, ""), *path = th_config_file(name, cfg);
    const char *args[] = {"--config", path, NULL};
    char *db = th_db_create(name);
    char before[16], after[16], at[40], url[256];
    struct th_resp r;
    const char *e;

    th_start_host(&p, "0.0.0.0", db, args, NULL);
    config_of(&p, T_ADMIN, before, at);
    rewrite(name, text);
    reload(&p, T_ADMIN, 400, &r);
    th_check_problem(&r, 400, "a reload without tokens on 0.0.0.0");
    e = json_string_value(json_array_get(json_object_get(r.json, "errors"), 0));
    ck_assert_msg(e && strstr(e, "refusing to serve on") && strstr(e, "without authentication"),
                  "%s", r.body);
    th_resp_free(&r);
    config_of(&p, T_ADMIN, after, at);
    ck_assert_str_eq(before, after);
    snprintf(url, sizeof(url), "%s/runs", p.url);
    ck_assert(th_http_token("GET", url, NULL, NULL, NULL, &r));
    ck_assert_msg(r.status == 401, "GET /runs without a token: HTTP %ld", r.status);
    th_resp_free(&r);
    th_stop_clean(&p);
    free(db);
    free(cfg);
    free(path);
}

/* A reload that removes every token (without insecure_no_auth). */
START_TEST(exposure_checked)
{
    exposure_refused("e2e_reload_exposure", "{\"auth\": {\"tokens\": []}}");
}
END_TEST

/* The same check on what a reload would apply, not on the file alone:
 * auth.insecure_no_auth only a restart applies, so a file that removes
 * every token and sets it would leave the process on every address with
 * no tokens and the flag still false. */
START_TEST(exposure_checked_on_what_applies)
{
    exposure_refused("e2e_reload_insecure",
                     "{\"auth\": {\"tokens\": [], \"insecure_no_auth\": true}}");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("reload");
    TCase *tc = tcase_create("reload");

    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, run_type_and_route_apply_at_once);
    tcase_add_test(tc, restart_required_keeps_the_old_value);
    tcase_add_test(tc, restart_only_change_keeps_the_configuration);
    tcase_add_test(tc, anonymous_stream_ends_when_tokens_come);
    tcase_add_test(tc, invalid_file_changes_nothing);
    tcase_add_test(tc, sighup_and_metrics);
    tcase_add_test(tc, admin_scope_and_removed_token);
    tcase_add_test(tc, cors_and_log_level_apply);
    tcase_add_test(tc, replicas_show_their_versions);
    tcase_add_test(tc, running_attempt_keeps_its_run_type);
    tcase_add_test(tc, exposure_checked);
    tcase_add_test(tc, exposure_checked_on_what_applies);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
