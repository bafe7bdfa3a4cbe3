/* tests/e2e/test_bulk.c — several submissions in one POST /alerts (a JSON
 * array, docs/api.md "Several submissions in one request") and many single
 * submissions at once (shared commits), against one real opsrun process.
 * Every run here waits for a run_at far in the future, so nothing completes
 * and identities stay active. */
#include "../support/harness.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/digest.h"

#define LATER "\"run_at\":\"2999-01-01T00:00:00Z\""

static bool post(const struct th_proc *p, const char *path, const char *body, struct th_resp *r)
{
    char url[512];

    snprintf(url, sizeof(url), "%s%s", p->url, path);
    return th_http("POST", url, "application/json", body, r);
}

/* runs[i] of an array's answer. */
static const json_t *item(const struct th_resp *r, size_t i)
{
    return json_array_get(json_object_get(r->json, "runs"), i);
}

static void check_result(const json_t *o, size_t i, const char *run_id, bool dedup)
{
    char self[200];

    ck_assert_msg(json_is_object(o), "runs[%zu] is not an object", i);
    ck_assert_msg(th_js(o, "run_id") && (!run_id || strcmp(th_js(o, "run_id"), run_id) == 0),
                  "runs[%zu]: run_id %s, want %s", i, th_js(o, "run_id"), run_id);
    ck_assert_msg(json_is_boolean(json_object_get(o, "deduplicated")) &&
                      json_is_true(json_object_get(o, "deduplicated")) == dedup,
                  "runs[%zu]: deduplicated is not %d", i, dedup);
    ck_assert_str_eq(th_js(o, "status"), "queued");
    ck_assert_str_eq(th_js(o, "outcome"), "pending");
    snprintf(self, sizeof(self), "/runs/%s", th_js(o, "run_id"));
    ck_assert_str_eq(th_js(json_object_get(o, "links"), "self"), self);
    ck_assert_ptr_nonnull(th_js(json_object_get(o, "links"), "stream"));
    ck_assert_ptr_nonnull(th_js(json_object_get(o, "links"), "cancel"));
}

/* A problem object (RFC 9457) with status want, naming field when given. */
static void check_item_problem(const json_t *o, size_t i, long want, const char *field)
{
    ck_assert_msg(json_is_object(o), "runs[%zu] is not an object", i);
    ck_assert_msg(th_ji(o, "status") == want, "runs[%zu]: status %lld, want %ld", i,
                  th_ji(o, "status"), want);
    ck_assert_ptr_nonnull(th_js(o, "type"));
    ck_assert_ptr_nonnull(th_js(o, "title"));
    ck_assert_ptr_nonnull(th_js(o, "detail"));
    ck_assert_ptr_null(json_object_get(o, "run_id"));
    if (field)
        ck_assert_msg(th_has_error_field(json_object_get(o, "errors"), field),
                      "runs[%zu]: errors does not name %s", i, field);
}

/* The value of one sample line of GET /metrics, -1 when absent. */
static long long metric(const struct th_proc *p, const char *sample)
{
    struct th_resp r;
    long long v = -1;
    const char *at;

    th_get(p->url, "/metrics", &r);
    at = r.body ? strstr(r.body, sample) : NULL;
    if (at && at[strlen(sample)] == ' ')
        v = atoll(at + strlen(sample) + 1);
    th_resp_free(&r);
    return v;
}

START_TEST(test_array_order_and_problems)
{
    struct th_proc p;
    struct th_resp r;
    const char *k1;
    json_t *run;

    th_start_fresh(&p, "e2e_bulk_order", NULL);
    ck_assert(post(&p, "/alerts",
                   "[{\"alert_type\":\"demo\",\"run_id\":\"b-1\"," LATER "},"
                   " {\"alert_type\":5},"
                   " {\"alert_type\":\"no-such-type\"},"
                   " {\"alert_type\":\"demo\",\"run_id\":\"b-1\"," LATER "},"
                   " {\"alert_type\":\"demo\",\"run_id\":\"b-1\",\"data\":{\"x\":1}," LATER "},"
                   " {\"alert_type\":\"demo\",\"dedupe_key\":\"k1\",\"data\":{\"a\":1}," LATER "},"
                   " {\"alert_type\":\"demo\",\"dedupe_key\":\"k1\",\"data\":{\"a\":2}," LATER "},"
                   " \"not an object\"]",
                   &r));
    ck_assert_msg(r.status == 200, "HTTP %ld: %s", r.status, r.body);
    ck_assert_msg(strncmp(r.content_type, "application/json", 16) == 0, "Content-Type %s",
                  r.content_type);
    ck_assert_int_eq(json_array_size(json_object_get(r.json, "runs")), 8);
    check_result(item(&r, 0), 0, "b-1", false);
    check_item_problem(item(&r, 1), 1, 400, "alert_type");
    check_item_problem(item(&r, 2), 2, 422, "alert_type");
    check_result(item(&r, 3), 3, "b-1", true);
    check_item_problem(item(&r, 4), 4, 409, NULL);
    check_result(item(&r, 5), 5, NULL, false);
    k1 = th_js(item(&r, 5), "run_id");
    check_result(item(&r, 6), 6, k1, true);
    check_item_problem(item(&r, 7), 7, 400, "body");

    /* Stored as a single submission stores: the run, and the same body
     * again, alone, joins it. */
    run = th_get_run(&p, "b-1");
    ck_assert_str_eq(th_js(run, "type"), "demo");
    json_decref(run);
    th_resp_free(&r);
    ck_assert(post(&p, "/alerts", "{\"alert_type\":\"demo\",\"run_id\":\"b-1\"," LATER "}", &r));
    ck_assert_msg(r.status == 200, "HTTP %ld: %s", r.status, r.body);
    ck_assert(json_is_true(json_object_get(r.json, "deduplicated")));
    th_resp_free(&r);
    ck_assert_int_eq(metric(&p, "opsrun_runs_submitted_total{type=\"demo\"}"), 2);
    th_stop_clean(&p);
}
END_TEST

/* An array of n demo submissions with run ids m-0 .. m-(n-1). */
static char *array_of(int n)
{
    size_t cap = (size_t)n * 96 + 8, len = 0;
    char *b = malloc(cap);

    b[len++] = '[';
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(b + len, cap - len,
                                "%s{\"alert_type\":\"demo\",\"run_id\":\"m-%d\"," LATER "}",
                                i ? "," : "", i);
    snprintf(b + len, cap - len, "]");
    return b;
}

START_TEST(test_array_limits)
{
    struct th_proc p;
    struct th_resp r;
    char *body;
    char want[32];

    th_start_fresh(&p, "e2e_bulk_limits", NULL);
    body = array_of(1000);
    ck_assert(post(&p, "/alerts", body, &r));
    free(body);
    ck_assert_msg(r.status == 200, "HTTP %ld: %.300s", r.status, r.body);
    ck_assert_int_eq(json_array_size(json_object_get(r.json, "runs")), 1000);
    for (size_t i = 0; i < 1000; i++) {
        snprintf(want, sizeof(want), "m-%zu", i);
        check_result(item(&r, i), i, want, false);
    }
    th_resp_free(&r);
    ck_assert_int_eq(metric(&p, "opsrun_runs_submitted_total{type=\"demo\"}"), 1000);

    body = array_of(1001);
    ck_assert(post(&p, "/alerts", body, &r));
    free(body);
    th_check_problem(&r, 413, "1001 submissions");
    th_resp_free(&r);

    ck_assert(post(&p, "/alerts", "[]", &r));
    th_check_problem(&r, 400, "an empty array");
    th_resp_free(&r);

    ck_assert(post(&p, "/alerts?wait=5", "[{\"alert_type\":\"demo\"}]", &r));
    th_check_problem(&r, 400, "an array with ?wait");
    ck_assert(th_has_error_field(json_object_get(r.json, "errors"), "wait"));
    th_resp_free(&r);
    ck_assert_int_eq(metric(&p, "opsrun_runs_submitted_total{type=\"demo\"}"), 1000);
    th_stop_clean(&p);
}
END_TEST

/* ---- many single submissions at once ---------------------------------- */

enum { CLIENTS = 8, PER_CLIENT = 60, KEYS = 10 };

struct client {
    const struct th_proc *p;
    int index;
    int created, joined, other;
    char run_of[PER_CLIENT][64];
};

static int key_of(int client, int i)
{
    return (client * 3 + i) % KEYS;
}

static void *client_main(void *arg)
{
    struct client *c = arg;
    struct th_resp r;
    char body[256];

    for (int i = 0; i < PER_CLIENT; i++) {
        snprintf(
            body, sizeof(body),
            "{\"alert_type\":\"demo\",\"dedupe_key\":\"key-%d\",\"data\":{\"c\":%d,\"i\":%d}," LATER
            "}",
            key_of(c->index, i), c->index, i);
        if (!post(c->p, "/alerts", body, &r)) {
            c->other++;
            continue;
        }
        if (r.status == 202 || r.status == 200) {
            if (r.status == 202)
                c->created++;
            else
                c->joined++;
            snprintf(c->run_of[i], sizeof(c->run_of[i]), "%s",
                     th_js(r.json, "run_id") ? th_js(r.json, "run_id") : "");
        } else {
            c->other++;
        }
        th_resp_free(&r);
    }
    return NULL;
}

START_TEST(test_singles_at_once)
{
    static struct client clients[CLIENTS];
    pthread_t th[CLIENTS];
    struct th_proc p;
    char first[KEYS][64] = {{0}};
    int created = 0, joined = 0, other = 0;

    /* Every client submits from 127.0.0.1: no per-caller rate limit. */
    th_start_fresh(&p, "e2e_bulk_singles", "{\"limits\": {\"submit_rate_per_s\": 0}}");
    for (int i = 0; i < CLIENTS; i++) {
        memset(&clients[i], 0, sizeof(clients[i]));
        clients[i].p = &p;
        clients[i].index = i;
        ck_assert(pthread_create(&th[i], NULL, client_main, &clients[i]) == 0);
    }
    for (int i = 0; i < CLIENTS; i++) {
        pthread_join(th[i], NULL);
        created += clients[i].created;
        joined += clients[i].joined;
        other += clients[i].other;
    }
    ck_assert_int_eq(other, 0);
    ck_assert_int_eq(created + joined, CLIENTS * PER_CLIENT);
    ck_assert_int_eq(created, KEYS);
    /* Every answer for a key names the same run. */
    for (int c = 0; c < CLIENTS; c++)
        for (int i = 0; i < PER_CLIENT; i++) {
            int k = key_of(c, i);
            if (!first[k][0])
                snprintf(first[k], sizeof(first[k]), "%s", clients[c].run_of[i]);
            ck_assert_str_eq(clients[c].run_of[i], first[k]);
        }
    ck_assert_int_eq(metric(&p, "opsrun_runs_submitted_total{type=\"demo\"}"), KEYS);
    th_stop_clean(&p);
}
END_TEST

/* ---- tenants and scopes -------------------------------------------------- */

#define T_ACME "opsrun_e2e-bulk-acme-0000000000000000"
#define T_GLOBEX "opsrun_e2e-bulk-globex-11111111111111"
#define T_READER "opsrun_e2e-bulk-reader-2222222222222"

static char *tokens_config(void)
{
    static const struct {
        const char *name, *tenant, *scopes, *token;
    } t[] = {
        {"acme", "acme", "\"submit\", \"read\"", T_ACME},
        {"globex", "globex", "\"submit\", \"read\"", T_GLOBEX},
        {"reader", "acme", "\"read\"", T_READER},
    };
    char *out = malloc(4096);
    size_t n = 0;

    n += (size_t)snprintf(out + n, 4096 - n, "{\"auth\": {\"tokens\": [");
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        char hex[65];
        sha256_hex(t[i].token, strlen(t[i].token), hex);
        n += (size_t)snprintf(out + n, 4096 - n,
                              "%s{\"name\": \"%s\", \"tenant\": \"%s\", \"scopes\": [%s], "
                              "\"sha256\": \"%s\"}",
                              i ? ", " : "", t[i].name, t[i].tenant, t[i].scopes, hex);
    }
    snprintf(out + n, 4096 - n, "]}}");
    return out;
}

static bool post_as(const struct th_proc *p, const char *token, const char *body, struct th_resp *r)
{
    char url[512];

    snprintf(url, sizeof(url), "%s/alerts", p->url);
    return th_http_token("POST", url, token, "application/json", body, r);
}

/* An array is written in its caller's tenant, with its token as initiator,
 * and needs the submit scope, as a single submission does. */
START_TEST(test_array_tenants_and_scope)
{
    static const char body_a[] = "[{\"alert_type\":\"demo\",\"run_id\":\"t-1\"," LATER "}]";
    static const char body_g[] =
        "[{\"alert_type\":\"demo\",\"run_id\":\"t-1\",\"data\":{\"g\":1}," LATER "}]";
    char *cfg = tokens_config();
    struct th_proc p;
    struct th_resp r;
    char url[512];

    th_start_fresh(&p, "e2e_bulk_tenants", cfg);
    free(cfg);
    ck_assert(post_as(&p, T_ACME, body_a, &r));
    ck_assert_msg(r.status == 200, "HTTP %ld: %s", r.status, r.body);
    check_result(item(&r, 0), 0, "t-1", false);
    th_resp_free(&r);
    /* The same run id in another tenant, with another body: its own run. */
    ck_assert(post_as(&p, T_GLOBEX, body_g, &r));
    ck_assert_msg(r.status == 200, "HTTP %ld: %s", r.status, r.body);
    check_result(item(&r, 0), 0, "t-1", false);
    th_resp_free(&r);
    /* And back in the first tenant that body conflicts with its run. */
    ck_assert(post_as(&p, T_ACME, body_g, &r));
    check_item_problem(item(&r, 0), 0, 409, NULL);
    th_resp_free(&r);

    snprintf(url, sizeof(url), "%s/runs/t-1", p.url);
    ck_assert(th_http_token("GET", url, T_ACME, NULL, NULL, &r));
    ck_assert_msg(r.status == 200, "HTTP %ld: %s", r.status, r.body);
    ck_assert_str_eq(th_js(r.json, "tenant"), "acme");
    ck_assert_str_eq(th_js(r.json, "initiator"), "acme");
    th_resp_free(&r);
    ck_assert(th_http_token("GET", url, T_GLOBEX, NULL, NULL, &r));
    ck_assert_str_eq(th_js(r.json, "tenant"), "globex");
    ck_assert_int_eq(th_ji(json_object_get(r.json, "input"), "g"), 1);
    th_resp_free(&r);

    /* Without the submit scope: 403, nothing stored. */
    ck_assert(
        post_as(&p, T_READER, "[{\"alert_type\":\"demo\",\"run_id\":\"t-2\"," LATER "}]", &r));
    th_check_problem(&r, 403, "an array without the submit scope");
    th_resp_free(&r);
    snprintf(url, sizeof(url), "%s/runs/t-2", p.url);
    ck_assert(th_http_token("GET", url, T_ACME, NULL, NULL, &r));
    ck_assert_int_eq(r.status, 404);
    th_resp_free(&r);
    th_stop_clean(&p);
}
END_TEST

static Suite *bulk_suite(void)
{
    Suite *s = suite_create("e2e_bulk");
    const struct {
        const char *name;
        const TTest *fn;
    } cases[] = {
        {"order", test_array_order_and_problems},
        {"limits", test_array_limits},
        {"singles", test_singles_at_once},
        {"tenants", test_array_tenants_and_scope},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        TCase *tc = tcase_create(cases[i].name);
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, cases[i].fn);
        suite_add_tcase(s, tc);
    }
    return s;
}

int main(void)
{
    return th_run_suite(bulk_suite());
}
