/* tests/e2e/test_config_check.c — `opsrun config check FILE`
 * (docs/configuration.md#checking-a-file) as a user runs it: the real
 * binary, offline. A valid file is "FILE: ok" and exit 0; an invalid one
 * gets every error (more than one message holds), in exactly the words
 * `serve` prints for the same file, and exit 1; schedules' cron
 * expressions and time zones, run types' params, notifiers and their
 * {{env:NAME}} references, the environment's OPSRUN_* variables and the
 * refusal to serve without tokens on every address are checked as `serve`
 * checks them; usage errors exit 2. And the warning of a schedule in a
 * tenant no caller can see (docs/schedules.md#tenants): printed by check,
 * logged once by `serve` at start-up, and absent when a token can see it. */
#include "../support/harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* `opsrun config check path [more...]` with env (may be NULL); its exit
 * status, and its output in *out and *err (heap). */
static int check(const char *path, const char *more, const char *const *env, char **out, char **err)
{
    const char *args[] = {"config", "check", path, more, NULL};

    return th_exec(args, env, 30, out, err);
}

/* How many lines of text hold needle. */
static int lines_with(const char *text, const char *needle)
{
    int n = 0;

    for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

/* A file with every kind of valid content: run types of several actions,
 * a schedule in a zone, a rate limit, notifiers, routes and tokens. */
START_TEST(valid_file_ok)
{
    char *path = th_config_file(
        "e2e_config_check_valid",
        "{\"listen\": \"0.0.0.0:8080\","
        " \"auth\": {\"tokens\": [{\"name\": \"ci\", \"tenant\": \"default\", \"scopes\": "
        "[\"admin\"], \"sha256\": "
        "\"d817f766a3269db92136c19f92a6c0acd7b00b0fc09f45b66bc9093b80d428de\"}]},"
        " \"rate_limits\": {\"api\": {\"limit\": 10, \"per_s\": 1}},"
        " \"notifiers\": {\"chat\": {\"kind\": \"slack\", \"url\": \"{{env:E2E_CHECK_URL}}\"}},"
        " \"run_types\": {\"call\": {\"action\": \"http\", \"rate_limit\": \"api\","
        "   \"params\": {\"request\": {\"method\": \"POST\", \"url\": \"https://x.example/a\"}},"
        "   \"notify\": [{\"on\": [\"failed\"], \"to\": \"chat\"}]}},"
        " \"schedules\": {\"nightly\": {\"cron\": \"30 2 * * *\", \"time_zone\": "
        "\"Europe/Berlin\", \"run_type\": \"call\"}},"
        " \"routes\": [{\"match\": {\"alert_type\": \"~Disk.*\"}, \"run_type\": \"call\"}]}");
    const char *env[] = {"E2E_CHECK_URL=https://hooks.example/x", NULL};
    char *out = NULL, *err = NULL, want[600];

    ck_assert_int_eq(check(path, NULL, env, &out, &err), 0);
    snprintf(want, sizeof(want), "%s: ok\n", path);
    ck_assert_str_eq(out, want);
    ck_assert_str_eq(err, "");
    free(out);
    free(err);
    free(path);
}
END_TEST

/* Twenty-seven mistakes, far more than one message holds: check prints
 * each, in the words serve prints for the same file, and serve prints each
 * too. */
START_TEST(every_error_as_serve_says)
{
    char json[2048], *path, *out = NULL, *err = NULL, *sout = NULL, *serr = NULL;
    size_t n = 0;

    n += (size_t)snprintf(json + n, sizeof(json) - n, "{\"queue\": {");
    for (int i = 0; i < 25; i++)
        n +=
            (size_t)snprintf(json + n, sizeof(json) - n, "%s\"unknown_%02d\": 1", i ? ", " : "", i);
    snprintf(json + n, sizeof(json) - n,
             "}, \"http\": {\"threads\": 1}, \"run_types\": {\"q\": {\"action\": \"soap_job\", "
             "\"params\": {}}}}");
    path = th_config_file("e2e_config_check_errors", json);
    ck_assert_int_eq(check(path, NULL, NULL, &out, &err), 1);
    ck_assert_str_eq(out, "");
    for (int i = 0; i < 25; i++) {
        char line[128];
        snprintf(line, sizeof(line),
                 "opsrun: invalid configuration: unknown key \"queue.unknown_%02d\"\n", i);
        ck_assert_msg(strstr(err, line), "no line %s in:\n%s", line, err);
    }
    ck_assert_msg(strstr(err, "opsrun: invalid configuration: invalid \"http.threads\": must be "
                              "between 2 and 64\n"),
                  "%s", err);
    ck_assert_msg(
        strstr(err, "opsrun: invalid configuration: missing \"run_types.q.params.start\"\n"), "%s",
        err);
    ck_assert_int_eq(lines_with(err, "\n"), 27);
    ck_assert_ptr_null(strstr(err, "not shown"));
    {
        const char *args[] = {
            "serve", "--config", path, "--database-url", "postgresql://127.0.0.1:1/none", NULL};
        ck_assert_int_eq(th_exec(args, NULL, 30, &sout, &serr), 2);
    }
    ck_assert_str_eq(serr, err);
    free(out);
    free(err);
    free(sout);
    free(serr);
    free(path);
}
END_TEST

/* What only a look at the machine or the whole file finds: a cron field
 * out of range, a zone without its file, a run type that is not there. */
START_TEST(schedules_checked)
{
    char *path = th_config_file("e2e_config_check_schedules",
                                "{\"schedules\": {"
                                " \"a\": {\"cron\": \"61 * * * *\", \"run_type\": \"demo\"},"
                                " \"b\": {\"cron\": \"0 3 * * *\", \"time_zone\": "
                                "\"Europe/Berln\", \"run_type\": \"demo\"},"
                                " \"c\": {\"cron\": \"0 0 30 2 *\", \"run_type\": \"demo\"}}}");
    char *path2 =
        th_config_file("e2e_config_check_schedule_ref",
                       "{\"schedules\": {\"x\": {\"cron\": \"@hourly\", \"run_type\": \"dem\"}}}");
    char *out = NULL, *err = NULL;

    ck_assert_int_eq(check(path, NULL, NULL, &out, &err), 1);
    ck_assert_msg(strstr(err, "invalid \"schedules.a.cron\": minute \"61\" is out of range 0-59"),
                  "%s", err);
    ck_assert_msg(strstr(err, "invalid \"schedules.b.time_zone\": unknown time zone "
                              "\"Europe/Berln\""),
                  "%s", err);
    ck_assert_msg(strstr(err, "invalid \"schedules.c.cron\": \"0 0 30 2 *\" matches no date"), "%s",
                  err);
    free(out);
    free(err);
    ck_assert_int_eq(check(path2, NULL, NULL, &out, &err), 1);
    ck_assert_msg(strstr(err, "invalid \"schedules.x.run_type\": unknown run type \"dem\"; did "
                              "you mean \"demo\"?"),
                  "%s", err);
    free(out);
    free(err);
    free(path);
    free(path2);
}
END_TEST

/* Concurrency keys: a schedule whose data lacks a value its run type's
 * key takes, and two types of one group that disagree, are each named
 * (the file, the schedule, the pointer, both types); tenants are checked
 * like the rest. */
START_TEST(concurrency_checked)
{
    char *path = th_config_file(
        "e2e_config_check_concurrency",
        "{\"run_types\": {"
        " \"restart-host\": {\"action\": \"simulate\", \"concurrency\": {\"group\": \"host\", "
        "\"key\": \"{{input:/labels/instance}}\", \"max_running\": 2}},"
        " \"patch-host\": {\"action\": \"simulate\", \"concurrency\": {\"group\": \"host\", "
        "\"key\": \"{{input:/host}}\", \"max_running\": 2}}},"
        " \"schedules\": {\"nightly\": {\"cron\": \"@daily\", \"run_type\": \"restart-host\", "
        "\"data\": {\"labels\": {}}}, \"weekly\": {\"cron\": \"@weekly\", \"run_type\": "
        "\"patch-host\", \"data\": {\"host\": \"db-1\"}}},"
        " \"tenants\": {\"default\": {\"max_running\": 3}},"
        " \"queue\": {\"tenant_max_running\": 10}}");
    char *bad = th_config_file(
        "e2e_config_check_concurrency_bad",
        "{\"run_types\": {"
        " \"restart-host\": {\"action\": \"simulate\", \"concurrency\": {\"group\": \"host\", "
        "\"key\": \"{{input:/labels/instance}}\"}},"
        " \"patch-host\": {\"action\": \"simulate\", \"concurrency\": {\"group\": \"host\", "
        "\"key\": \"{{input:/host}}\", \"strategy\": \"keep_newest\"}}},"
        " \"tenants\": {\"acme\": {\"max_running\": 0}}}");
    char *out = NULL, *err = NULL, want[600];

    ck_assert_int_eq(check(path, NULL, NULL, &out, &err), 1);
    ck_assert_str_eq(err, "opsrun: invalid configuration: invalid \"schedules.nightly.data\": "
                          "run_types.restart-host.concurrency: the input has no value at "
                          "\"/labels/instance\"\n");
    free(out);
    free(err);
    ck_assert_int_eq(check(bad, NULL, NULL, &out, &err), 1);
    ck_assert_str_eq(err, "opsrun: invalid configuration: invalid \"tenants.acme.max_running\": "
                          "must be null or between 1 and 100000\n");
    free(out);
    free(err);
    free(bad);
    bad = th_config_file(
        "e2e_config_check_concurrency_group",
        "{\"run_types\": {"
        " \"restart-host\": {\"action\": \"simulate\", \"concurrency\": {\"group\": \"host\", "
        "\"key\": \"{{input:/labels/instance}}\"}},"
        " \"patch-host\": {\"action\": \"simulate\", \"concurrency\": {\"group\": \"host\", "
        "\"key\": \"{{input:/host}}\", \"strategy\": \"keep_newest\"}}}}");
    ck_assert_int_eq(check(bad, NULL, NULL, &out, &err), 1);
    ck_assert_str_eq(err, "opsrun: invalid configuration: invalid "
                          "\"run_types.patch-host.concurrency.strategy\": \"keep_newest\", but "
                          "run type \"restart-host\" of the same group \"host\" has \"queue\"; "
                          "the run types of a group share its strategy\n");
    free(out);
    free(err);
    free(bad);
    free(path);
    path = th_config_file(
        "e2e_config_check_concurrency_ok",
        "{\"run_types\": {"
        " \"restart-host\": {\"action\": \"simulate\", \"concurrency\": {\"group\": \"host\", "
        "\"key\": \"{{input:/labels/instance}}\"}}},"
        " \"schedules\": {\"nightly\": {\"cron\": \"@daily\", \"run_type\": \"restart-host\", "
        "\"data\": {\"labels\": {\"instance\": \"db-1:9100\"}}}},"
        " \"tenants\": {\"default\": {\"max_running\": 3}}}");
    ck_assert_int_eq(check(path, NULL, NULL, &out, &err), 0);
    snprintf(want, sizeof(want), "%s: ok\n", path);
    ck_assert_str_eq(out, want);
    ck_assert_str_eq(err, "");
    free(out);
    free(err);
    free(path);
}
END_TEST

/* A {{env:NAME}} whose variable is not set is an error, as serve would
 * not start; set, the file is valid, and its value is printed nowhere. */
START_TEST(env_references)
{
    char *path = th_config_file("e2e_config_check_env",
                                "{\"notifiers\": {\"hook\": {\"kind\": \"webhook\", \"url\": "
                                "\"https://hooks.example/x\", \"secret\": "
                                "\"{{env:E2E_CHECK_SECRET}}\"}}}");
    const char *env[] = {"E2E_CHECK_SECRET=very-secret-value", NULL};
    char *out = NULL, *err = NULL;

    ck_assert_int_eq(check(path, NULL, NULL, &out, &err), 1);
    ck_assert_str_eq(err, "opsrun: invalid configuration: invalid \"notifiers.hook.secret\": "
                          "environment variable E2E_CHECK_SECRET is not set\n");
    free(out);
    free(err);
    ck_assert_int_eq(check(path, NULL, env, &out, &err), 0);
    ck_assert_ptr_null(strstr(out, "very-secret-value"));
    ck_assert_str_eq(err, "");
    free(out);
    free(err);
    free(path);
}
END_TEST

/* The environment and the flags apply over the file as for serve: an
 * address that is not loopback without tokens is refused (from the file,
 * OPSRUN_LISTEN or --listen) unless --insecure-no-auth, and a bad
 * OPSRUN_WORKERS is an error. */
START_TEST(environment_and_flags)
{
    char *open_file = th_config_file("e2e_config_check_open", "{\"listen\": \"0.0.0.0:8080\"}");
    char *plain = th_config_file("e2e_config_check_plain", "{}");
    const char *listen_env[] = {"OPSRUN_LISTEN=0.0.0.0:9999", NULL};
    const char *workers_env[] = {"OPSRUN_WORKERS=0", NULL};
    char *out = NULL, *err = NULL;

    ck_assert_int_eq(check(open_file, NULL, NULL, &out, &err), 1);
    ck_assert_str_eq(err, "opsrun: refusing to serve on 0.0.0.0:8080 without authentication: "
                          "configure \"auth.tokens\" (opsrun token new makes one), listen on a "
                          "loopback address, or pass --insecure-no-auth\n");
    free(out);
    free(err);
    ck_assert_int_eq(check(open_file, "--insecure-no-auth", NULL, &out, &err), 0);
    free(out);
    free(err);
    ck_assert_int_eq(check(plain, NULL, listen_env, &out, &err), 1);
    ck_assert_msg(strstr(err, "refusing to serve on 0.0.0.0:9999"), "%s", err);
    free(out);
    free(err);
    ck_assert_int_eq(check(plain, "--listen=0.0.0.0:9998", NULL, &out, &err), 1);
    ck_assert_msg(strstr(err, "refusing to serve on 0.0.0.0:9998"), "%s", err);
    free(out);
    free(err);
    ck_assert_int_eq(check(plain, NULL, workers_env, &out, &err), 1);
    ck_assert_str_eq(err, "opsrun: invalid configuration: invalid OPSRUN_WORKERS: must be "
                          "between 1 and 1024\n");
    free(out);
    free(err);
    free(open_file);
    free(plain);
}
END_TEST

/* No file, a second argument, --config or --print-config beside it, a
 * missing or other subcommand: exit 2. A file that is not there: 1. */
START_TEST(usage_errors)
{
    char *plain = th_config_file("e2e_config_check_usage", "{}");
    const char *const cases[][6] = {
        {"config", NULL},
        {"config", "check", NULL},
        {"config", "lint", plain, NULL},
        {"config", "check", plain, "extra", NULL},
        {"config", "check", plain, "--config", plain, NULL},
        {"--config", plain, "config", "check", plain, NULL},
        {"config", "check", plain, "--print-config", NULL},
        {"config", "check", "--listen", "127.0.0.1:1", NULL},
    };
    char *out = NULL, *err = NULL;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int rc = th_exec(cases[i], NULL, 30, &out, &err);
        ck_assert_msg(rc == 2, "case %zu: exit %d, want 2; %s", i, rc, err);
        ck_assert_str_eq(out, "");
        free(out);
        free(err);
    }
    {
        const char *args[] = {"config", "check", "/nonexistent/opsrun.json", NULL};
        ck_assert_int_eq(th_exec(args, NULL, 30, &out, &err), 1);
        ck_assert_str_eq(err, "opsrun: invalid configuration: could not open config file "
                              "\"/nonexistent/opsrun.json\": No such file or directory\n");
        free(out);
        free(err);
    }
    free(plain);
}
END_TEST

#define HIDDEN_LINE                                                                                \
    "schedule in a tenant no caller can see schedule=hidden tenant=acme: without auth.tokens "     \
    "every caller is of tenant \"default\" (tenant_default), so the API, the CLI and the "         \
    "dashboard show neither the schedule nor its runs"

#define HIDDEN_SCHEDULES                                                                           \
    "\"schedules\": {\"hidden\": {\"cron\": \"@hourly\", \"run_type\": \"demo\", \"tenant\": "     \
    "\"acme\"}, \"seen\": {\"cron\": \"@hourly\", \"run_type\": \"demo\"}}"

/* A schedule in a tenant no caller can see: without tokens, and with
 * tokens of another tenant only, check warns (and the file stays valid),
 * and serve logs the same line once at start-up; a token of that tenant,
 * or an admin token, sees it, and nothing is said. */
START_TEST(tenant_nobody_sees)
{
    const char *config = "{" HIDDEN_SCHEDULES "}";
    char *path = th_config_file("e2e_config_check_tenant", config);
    char *out = NULL, *err = NULL, want[600], line[1024], *tokens, *other;
    struct th_proc p;
    int rc;

    ck_assert_int_eq(check(path, NULL, NULL, &out, &err), 0);
    snprintf(want, sizeof(want), "%s: ok, 1 warning\n", path);
    ck_assert_str_eq(out, want);
    ck_assert_str_eq(err, "opsrun: warning: " HIDDEN_LINE "\n");
    free(out);
    free(err);

    th_start_fresh(&p, "e2e_config_check_tenant", config);
    ck_assert_msg(th_log_find(p.log, "schedule in a tenant no caller can see", line, sizeof(line)),
                  "no warning in %s", p.log);
    ck_assert_msg(strstr(line, " warn  " HIDDEN_LINE), "the line: %s", line);
    th_check_documented_line(p.log, "no caller can see", "docs/schedules.md", "no caller can see");
    th_stop_clean(&p);
    {
        char *log = NULL;
        const char *cat[] = {"cat", p.log, NULL};
        ck_assert_int_eq(th_run(cat, NULL, 10, &log, NULL), 0);
        ck_assert_int_eq(lines_with(log, "no caller can see"), 1);
        free(log);
    }

    /* Tokens of another tenant only: the line names the tokens. */
    {
        const struct th_token t[] = {{"ci", "other", "\"read\"", "opsrun_e2e_check_other"}};
        char json[1024];
        other = th_auth_tokens(t, 1);
        snprintf(json, sizeof(json), "{%s, " HIDDEN_SCHEDULES "}", other);
        free(path);
        path = th_config_file("e2e_config_check_tenant_other", json);
    }
    ck_assert_int_eq(check(path, NULL, NULL, &out, &err), 0);
    ck_assert_msg(strstr(err, "schedule in a tenant no caller can see schedule=hidden tenant=acme: "
                              "no token of auth.tokens is of that tenant or has the scope admin"),
                  "%s", err);
    ck_assert_int_eq(lines_with(err, "warning"), 2); /* "seen" is of tenant "default" */
    free(out);
    free(err);

    /* A token of the tenant (and one of "default"), or an admin token. */
    for (int k = 0; k < 2; k++) {
        const struct th_token mine[] = {{"acme-ops", "acme", "\"read\"", "opsrun_e2e_check_acme"},
                                        {"ci", "default", "\"read\"", "opsrun_e2e_check_def"}};
        const struct th_token admin[] = {{"root", "ops", "\"admin\"", "opsrun_e2e_check_root"}};
        char json[2048];
        tokens = k == 0 ? th_auth_tokens(mine, 2) : th_auth_tokens(admin, 1);
        snprintf(json, sizeof(json), "{%s, " HIDDEN_SCHEDULES "}", tokens);
        free(path);
        path = th_config_file("e2e_config_check_tenant_seen", json);
        rc = check(path, NULL, NULL, &out, &err);
        ck_assert_msg(rc == 0 && strcmp(err, "") == 0, "case %d: exit %d; %s", k, rc, err);
        free(out);
        free(err);
        free(tokens);
    }
    free(other);
    free(path);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("config_check");
    TCase *tc = tcase_create("check");

    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, valid_file_ok);
    tcase_add_test(tc, every_error_as_serve_says);
    tcase_add_test(tc, schedules_checked);
    tcase_add_test(tc, concurrency_checked);
    tcase_add_test(tc, env_references);
    tcase_add_test(tc, environment_and_flags);
    tcase_add_test(tc, usage_errors);
    tcase_add_test(tc, tenant_nobody_sees);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
