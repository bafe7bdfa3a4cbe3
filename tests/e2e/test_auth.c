/* tests/e2e/test_auth.c — authentication and tenants against the real
 * binary: every endpoint called by five callers (no token, an unknown
 * token, a token of the run's tenant without the scope, a token of another
 * tenant, an admin token), with the status each gets and no data of
 * another tenant in any body or stream; an admin's reads across tenants;
 * the initiator of runs; the loopback default and the refusal to serve
 * elsewhere without tokens; a token a reload removes, refused from its
 * next request and its open streams ended at once while another token's
 * stay; `opsrun token new` output as configuration;
 * and tokens never reaching the server's log. */
#include "../support/harness.h"
#include "../support/sse.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/digest.h"

/* The tokens of the matrix; their SHA-256 goes into the configuration. */
#define T_ACME "opsrun_e2e-acme-all-0000000000000000"
#define T_ACME_SUBMIT "opsrun_e2e-acme-submit-1111111111111"
#define T_ACME_READ "opsrun_e2e-acme-read-22222222222222"
#define T_GLOBEX "opsrun_e2e-globex-3333333333333333"
#define T_ROOT "opsrun_e2e-root-admin-44444444444444"
#define T_MON "opsrun_e2e-monitor-health-55555555"
#define T_WRONG "opsrun_e2e-revoked-666666666666666"

static const char *const all_tokens[] = {T_ACME, T_ACME_SUBMIT, T_ACME_READ, T_GLOBEX,
                                         T_ROOT, T_MON,         T_WRONG};

/* The acme run every by-id request names, the globex run, and an id no
 * tenant has (all three of one length, so answers compare byte for byte
 * once the id is replaced). */
#define RUN_A "r-alpha"
#define RUN_G "r-gamma"
#define RUN_U "r-omega"

/* The configuration of the tokens below but the one named skip (NULL:
 * all of them). */
static char *tokens_config_without(const char *skip)
{
    static const struct {
        const char *name, *tenant, *scopes, *token;
    } t[] = {
        {"acme-all", "acme", "\"submit\", \"read\", \"cancel\"", T_ACME},
        {"acme-submit", "acme", "\"submit\"", T_ACME_SUBMIT},
        {"acme-read", "acme", "\"read\"", T_ACME_READ},
        {"globex", "globex", "\"submit\", \"read\", \"cancel\"", T_GLOBEX},
        {"root", "ops", "\"admin\"", T_ROOT},
        {"mon", "ops", "\"health\"", T_MON},
    };
    char *out = malloc(8192);
    size_t n = 0;

    n += (size_t)snprintf(out + n, 8192 - n, "{\"auth\": {\"tokens\": [");
    for (size_t i = 0, k = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        char hex[65];
        if (skip && strcmp(t[i].name, skip) == 0)
            continue;
        sha256_hex(t[i].token, strlen(t[i].token), hex);
        n += (size_t)snprintf(out + n, 8192 - n,
                              "%s{\"name\": \"%s\", \"tenant\": \"%s\", \"scopes\": [%s], "
                              "\"sha256\": \"%s\"}",
                              k++ ? ", " : "", t[i].name, t[i].tenant, t[i].scopes, hex);
    }
    snprintf(out + n, 8192 - n, "]}}");
    return out;
}

static char *tokens_config(void)
{
    return tokens_config_without(NULL);
}

/* ---- one request, as each kind of caller ---------------------------------- */

enum caller { C_NONE, C_WRONG, C_NOSCOPE, C_OTHER, C_ADMIN, C_N };
static const char *const caller_names[C_N] = {"no token", "unknown token", "no scope",
                                              "other tenant", "admin"};

struct endpoint {
    const char *label;
    const char *method;
    const char *path; /* RUN_A where a run id goes */
    const char *body;
    bool stream;      /* an SSE endpoint */
    bool query_token; /* the token goes in ?access_token= */
    const char *noscope_token;
    long want[C_N];
};

static const char *caller_token(const struct endpoint *e, enum caller c)
{
    switch (c) {
    case C_NONE:
        return NULL;
    case C_WRONG:
        return T_WRONG;
    case C_NOSCOPE:
        return e->noscope_token;
    case C_OTHER:
        return T_GLOBEX;
    case C_ADMIN:
        return T_ROOT;
    case C_N:
        break;
    }
    return NULL;
}

/* path with RUN_A replaced by id, and ?access_token= (or &) when asked. */
static void build_path(const struct endpoint *e, const char *id, const char *token, char *out,
                       size_t cap)
{
    const char *a = strstr(e->path, RUN_A);
    size_t n;

    if (a)
        n = (size_t)snprintf(out, cap, "%.*s%s%s", (int)(a - e->path), e->path, id,
                             a + strlen(RUN_A));
    else
        n = (size_t)snprintf(out, cap, "%s", e->path);
    if (e->query_token && token)
        snprintf(out + n, cap - n, "%saccess_token=%s", strchr(out, '?') ? "&" : "?", token);
}

struct answer {
    long status;
    char *body;
    char content_type[128];
    char www_authenticate[256];
    char *events; /* a 200 stream: every event's name and data for a while */
};

static void answer_free(struct answer *a)
{
    free(a->body);
    free(a->events);
    memset(a, 0, sizeof(*a));
}

/* Reads a stream's events for up to ms, or until want and want2 (when not
 * NULL) have both appeared. */
static char *stream_events(struct th_sse *s, int ms, const char *want, const char *want2)
{
    size_t cap = 1 << 16, len = 0;
    char *out = calloc(1, cap);
    long long until = th_now_ms() + ms;
    struct th_sse_event ev;

    while (th_now_ms() < until && th_sse_next(s, &ev, 100) >= 0) {
        if (ev.data) {
            len += (size_t)snprintf(out + len, cap - len, "%s %s\n", ev.event, ev.data);
            if (len >= cap - 1)
                len = cap - 1;
        }
        th_sse_event_free(&ev);
        if (want && strstr(out, want) && (!want2 || strstr(out, want2)))
            break;
    }
    return out;
}

static void call(const struct th_proc *p, const struct endpoint *e, const char *id,
                 const char *token, struct answer *a)
{
    char path[512], url[640];
    const char *header_token = e->query_token ? NULL : token;

    memset(a, 0, sizeof(*a));
    build_path(e, id, token, path, sizeof(path));
    if (e->stream) {
        struct th_sse *s = th_sse_open_token(p->port, path, header_token, NULL);
        bool admin = token && strcmp(token, T_ROOT) == 0, run = strstr(path, "/runs/") != NULL;
        a->status = s->status;
        snprintf(a->content_type, sizeof(a->content_type), "%s", s->content_type);
        snprintf(a->www_authenticate, sizeof(a->www_authenticate), "%s", s->www_authenticate);
        a->body = strdup(s->body_text ? s->body_text : "");
        /* What the admin's cell checks, and nothing else, ends the admin's
         * read early; another tenant's is read for the whole time, to see
         * that nothing of acme comes. */
        if (s->status == 200)
            a->events = stream_events(s, run ? 1500 : 2500, admin ? RUN_A : NULL,
                                      admin ? (run ? "snapshot " : RUN_G) : NULL);
        th_sse_close(s);
        return;
    }
    {
        struct th_resp r;
        snprintf(url, sizeof(url), "%s%s", p->url, path);
        ck_assert_msg(th_http_token(e->method, url, header_token,
                                    e->body ? "application/json" : NULL, e->body, &r),
                      "%s %s failed", e->method, url);
        a->status = r.status;
        a->body = strdup(r.body);
        snprintf(a->content_type, sizeof(a->content_type), "%s", r.content_type);
        snprintf(a->www_authenticate, sizeof(a->www_authenticate), "%s", r.www_authenticate);
        th_resp_free(&r);
    }
}

/* s with every occurrence of from replaced by to (same length). */
static char *replaced(const char *s, const char *from, const char *to)
{
    char *out = strdup(s), *p = out;

    while ((p = strstr(p, from)) != NULL) {
        memcpy(p, to, strlen(to));
        p += strlen(to);
    }
    return out;
}

/* A run of acme, seen by globex, is answered as a run that exists nowhere. */
static void check_like_unknown(const struct th_proc *p, const struct endpoint *e,
                               const struct answer *a)
{
    struct answer u;
    char *x, *y;

    call(p, e, RUN_U, T_GLOBEX, &u);
    ck_assert_msg(u.status == 404, "%s for an unknown id: HTTP %ld", e->label, u.status);
    x = replaced(a->body, RUN_A, "<ID>...");
    y = replaced(u.body, RUN_U, "<ID>...");
    ck_assert_msg(strcmp(x, y) == 0,
                  "%s: another tenant's run answers\n  %.400s\nan unknown one\n  %.400s", e->label,
                  a->body, u.body);
    ck_assert_str_eq(a->content_type, u.content_type);
    free(x);
    free(y);
    answer_free(&u);
}

/* Where to start quoting text so that needle (if there) is in the quote. */
static const char *around(const char *text, const char *needle)
{
    const char *hit = strstr(text, needle);

    return hit && hit - text > 150 ? hit - 150 : text;
}

static void check_cell(const struct th_proc *p, const struct endpoint *e, enum caller c,
                       const struct answer *a)
{
    const char *what = caller_names[c];
    const char *text = a->events ? a->events : a->body;

    ck_assert_msg(a->status == e->want[c], "%s as %s: HTTP %ld, want %ld; body %.400s", e->label,
                  what, a->status, e->want[c], a->body);
    if (a->status >= 400)
        ck_assert_msg(strncmp(a->content_type, "application/problem+json", 24) == 0,
                      "%s as %s: Content-Type %s", e->label, what, a->content_type);
    if (a->status == 401)
        ck_assert_msg(strncmp(a->www_authenticate, "Bearer", 6) == 0,
                      "%s as %s: WWW-Authenticate \"%s\"", e->label, what, a->www_authenticate);
    if (c == C_OTHER) {
        ck_assert_msg(!strstr(text, RUN_A) || (a->status == 404 && strstr(e->path, RUN_A)),
                      "%s as another tenant shows the acme run: %.400s", e->label,
                      around(text, RUN_A));
        ck_assert_msg(!strstr(text, "\"acme"), "%s as another tenant shows acme: %.400s", e->label,
                      around(text, "\"acme"));
        if (a->status == 404 && strstr(e->path, RUN_A))
            check_like_unknown(p, e, a);
    }
    if (a->status == 401 || a->status == 403)
        ck_assert_msg(!strstr(text, RUN_A) && !strstr(text, RUN_G),
                      "%s as %s: a refusal names a run: %.400s", e->label, what, text);
}

/* ---- the matrix ------------------------------------------------------------- */

#define DEMO_LONG "\"data\":{\"duration_ms\":30000,\"steps\":60}"
#define AM_BODY(fp)                                                                                \
    "{\"version\":\"4\",\"status\":\"firing\",\"receiver\":\"opsrun\",\"groupKey\":\"g\","         \
    "\"alerts\":[{\"status\":\"firing\",\"labels\":{\"alertname\":\"demo\"},\"fingerprint\":\"" fp \
    "\"}]}"

static const struct endpoint endpoints[] = {
    {"POST /alerts", "POST", "/alerts", NULL, false, false, T_ACME_READ, {401, 401, 403, 202, 202}},
    {"POST /alerts (Alertmanager)",
     "POST",
     "/alerts",
     NULL,
     false,
     false,
     T_ACME_READ,
     {401, 401, 403, 202, 202}},
    {"GET /runs", "GET", "/runs", NULL, false, false, T_ACME_SUBMIT, {401, 401, 403, 200, 200}},
    {"GET /runs/{id}",
     "GET",
     "/runs/" RUN_A,
     NULL,
     false,
     false,
     T_ACME_SUBMIT,
     {401, 401, 403, 404, 200}},
    {"GET /runs/{id}?wait=1",
     "GET",
     "/runs/" RUN_A "?wait=1",
     NULL,
     false,
     false,
     T_ACME_SUBMIT,
     {401, 401, 403, 404, 200}},
    {"GET /runs/{id}/events",
     "GET",
     "/runs/" RUN_A "/events",
     NULL,
     false,
     false,
     T_ACME_SUBMIT,
     {401, 401, 403, 404, 200}},
    {"GET /runs/{id}/stream",
     "GET",
     "/runs/" RUN_A "/stream",
     NULL,
     true,
     false,
     T_ACME_SUBMIT,
     {401, 401, 403, 404, 200}},
    {"GET /runs/{id}/stream?access_token=",
     "GET",
     "/runs/" RUN_A "/stream",
     NULL,
     true,
     true,
     T_ACME_SUBMIT,
     {401, 401, 403, 404, 200}},
    {"GET /stream", "GET", "/stream", NULL, true, false, T_ACME_SUBMIT, {401, 401, 403, 200, 200}},
    {"GET /stream?access_token=",
     "GET",
     "/stream",
     NULL,
     true,
     true,
     T_ACME_SUBMIT,
     {401, 401, 403, 200, 200}},
    {"GET /healthz", "GET", "/healthz", NULL, false, false, T_ACME, {401, 401, 403, 403, 200}},
    {"GET /livez", "GET", "/livez", NULL, false, false, T_ACME_READ, {200, 200, 200, 200, 200}},
    {"GET /readyz", "GET", "/readyz", NULL, false, false, T_ACME_READ, {200, 200, 200, 200, 200}},
    {"GET /nope", "GET", "/nope", NULL, false, false, T_ACME_READ, {401, 401, 404, 404, 404}},
    {"GET /metrics", "GET", "/metrics", NULL, false, false, T_ACME, {401, 401, 403, 403, 200}},
    /* a running run cannot be retried: the admin, who finds it, gets 409 */
    {"POST /runs/{id}/retry",
     "POST",
     "/runs/" RUN_A "/retry",
     NULL,
     false,
     false,
     T_ACME_READ,
     {401, 401, 403, 404, 409}},
    /* last: the admin's cancel changes the run */
    {"POST /runs/{id}/cancel",
     "POST",
     "/runs/" RUN_A "/cancel",
     NULL,
     false,
     false,
     T_ACME_READ,
     {401, 401, 403, 404, 202}},
};

/* A body per caller, so no submission joins another's run. */
static const char *submit_body(const struct endpoint *e, enum caller c)
{
    static const char *const generic[C_N] = {
        "{\"alert_type\":\"demo\",\"data\":{\"duration_ms\":1,\"caller\":0}}",
        "{\"alert_type\":\"demo\",\"data\":{\"duration_ms\":1,\"caller\":1}}",
        "{\"alert_type\":\"demo\",\"data\":{\"duration_ms\":1,\"caller\":2}}",
        "{\"alert_type\":\"demo\",\"data\":{\"duration_ms\":1,\"caller\":3}}",
        "{\"alert_type\":\"demo\",\"run_id\":\"by-root\",\"data\":{\"duration_ms\":1}}"};
    static const char *const am[C_N] = {AM_BODY("f0"), AM_BODY("f1"), AM_BODY("f2"), AM_BODY("f3"),
                                        AM_BODY("f4")};

    if (strcmp(e->method, "POST") != 0 || strcmp(e->path, "/alerts") != 0)
        return NULL;
    return strstr(e->label, "Alertmanager") ? am[c] : generic[c];
}

static void admin_cell_checks(const struct endpoint *e, const struct answer *a)
{
    const char *text = a->events ? a->events : a->body;

    if (strcmp(e->label, "GET /runs") == 0 || strncmp(e->label, "GET /stream", 11) == 0) {
        ck_assert_msg(strstr(text, RUN_A) && strstr(text, RUN_G),
                      "%s as admin does not show every tenant: %.400s", e->label, text);
    }
    if (strncmp(e->label, "GET /runs/{id}/stream", 21) == 0)
        ck_assert_msg(strstr(text, "snapshot ") && strstr(text, RUN_A), "%s as admin: %.400s",
                      e->label, text);
    if (strcmp(e->label, "GET /runs/{id}") == 0) {
        ck_assert_msg(strstr(text, "\"tenant\":\"acme\"") &&
                          strstr(text, "\"initiator\":\"acme-all\""),
                      "GET /runs/{id} as admin: %.400s", text);
    }
}

static void other_cell_checks(const struct endpoint *e, const struct answer *a)
{
    const char *text = a->events ? a->events : a->body;

    if (strcmp(e->label, "GET /runs") == 0 || strncmp(e->label, "GET /stream", 11) == 0)
        ck_assert_msg(strstr(text, RUN_G) != NULL, "%s as globex lacks its own run: %.400s",
                      e->label, text);
}

/* Prints the matrix as it was observed. */
static void print_matrix(long got[][C_N], size_t n)
{
    fprintf(stderr, "\n| endpoint | no token | unknown token | no scope | other tenant | admin |\n"
                    "|---|---|---|---|---|---|\n");
    for (size_t i = 0; i < n; i++) {
        fprintf(stderr, "| %s |", endpoints[i].label);
        for (int c = 0; c < C_N; c++)
            fprintf(stderr, " %ld |", got[i][c]);
        fprintf(stderr, "\n");
    }
}

static void start_with_tokens(struct th_proc *p, const char *db)
{
    char *cfg = tokens_config();

    th_start_fresh(p, db, cfg);
    free(cfg);
}

static char *submit_as(const struct th_proc *p, const char *token, const char *body, long want)
{
    char url[256];
    struct th_resp r;
    char *id;

    snprintf(url, sizeof(url), "%s/alerts", p->url);
    ck_assert(th_http_token("POST", url, token, "application/json", body, &r));
    ck_assert_msg(r.status == want, "POST /alerts %s: HTTP %ld, want %ld: %s", body, r.status, want,
                  r.body);
    id = strdup(th_js(r.json, "run_id") ? th_js(r.json, "run_id") : "");
    th_resp_free(&r);
    return id;
}

static json_t *get_as(const struct th_proc *p, const char *token, const char *path, long want)
{
    char url[512];
    struct th_resp r;
    json_t *j;

    snprintf(url, sizeof(url), "%s%s", p->url, path);
    ck_assert(th_http_token("GET", url, token, NULL, NULL, &r));
    ck_assert_msg(r.status == want, "GET %s: HTTP %ld, want %ld: %s", path, r.status, want, r.body);
    j = json_incref(r.json);
    th_resp_free(&r);
    return j;
}

static bool running_as(const struct th_proc *p, const char *token, const char *id)
{
    char path[128];
    json_t *run;
    bool yes;

    snprintf(path, sizeof(path), "/runs/%s", id);
    run = get_as(p, token, path, 200);
    yes = th_streq(th_js(run, "status"), "running");
    json_decref(run);
    return yes;
}

START_TEST(isolation_matrix)
{
    const size_t n = sizeof(endpoints) / sizeof(endpoints[0]);
    long got[sizeof(endpoints) / sizeof(endpoints[0])][C_N];
    struct th_proc p;
    char *a, *g;

    start_with_tokens(&p, "e2e_auth_matrix");
    a = submit_as(&p, T_ACME, "{\"alert_type\":\"demo\",\"run_id\":\"" RUN_A "\"," DEMO_LONG "}",
                  202);
    g = submit_as(&p, T_GLOBEX, "{\"alert_type\":\"demo\",\"run_id\":\"" RUN_G "\"," DEMO_LONG "}",
                  202);
    for (long long t0 = th_now_ms(); th_now_ms() - t0 < 10000; th_sleep_ms(50))
        if (running_as(&p, T_ACME, RUN_A) && running_as(&p, T_GLOBEX, RUN_G))
            break;
    ck_assert(running_as(&p, T_ACME, RUN_A));

    for (size_t i = 0; i < n; i++) {
        for (int c = 0; c < C_N; c++) {
            struct endpoint e = endpoints[i];
            struct answer ans;
            e.body = submit_body(&e, (enum caller)c);
            call(&p, &e, RUN_A, caller_token(&e, (enum caller)c), &ans);
            got[i][c] = ans.status;
            check_cell(&p, &e, (enum caller)c, &ans);
            if (c == C_ADMIN)
                admin_cell_checks(&e, &ans);
            if (c == C_OTHER && ans.status == 200)
                other_cell_checks(&e, &ans);
            answer_free(&ans);
        }
        /* Nothing another tenant did touched the acme run. */
        if (i + 1 < n)
            ck_assert_msg(running_as(&p, T_ACME, RUN_A), "after %s the acme run is not running",
                          endpoints[i].label);
    }
    print_matrix(got, n);
    /* The globex run may still be running (it lasts 30 s): a stop would
     * wait for it. */
    {
        char url[256];
        struct th_resp r;
        snprintf(url, sizeof(url), "%s/runs/" RUN_G "/cancel", p.url);
        ck_assert(th_http_token("POST", url, T_GLOBEX, NULL, NULL, &r));
        ck_assert_msg(r.status == 202 || r.status == 200, "cancel " RUN_G ": HTTP %ld %s", r.status,
                      r.body);
        th_resp_free(&r);
    }
    free(a);
    free(g);
    th_stop_clean(&p);
}
END_TEST

/* ---- admin across tenants, the initiator, the health token ------------------ */

START_TEST(admin_and_initiator)
{
    struct th_proc p;
    json_t *j, *runs;
    char *id;
    size_t i;
    const json_t *run;

    start_with_tokens(&p, "e2e_auth_admin");
    free(submit_as(&p, T_ACME, "{\"alert_type\":\"demo\",\"run_id\":\"same\"}", 202));
    free(submit_as(&p, T_GLOBEX, "{\"alert_type\":\"demo\",\"run_id\":\"same\"}", 202));
    id = submit_as(&p, T_ROOT, "{\"alert_type\":\"demo\",\"data\":{\"who\":\"root\"}}", 202);

    /* One id in two tenants: the admin must choose. */
    j = get_as(&p, T_ROOT, "/runs/same", 409);
    ck_assert_str_eq(th_js(j, "detail"),
                     "run \"same\" exists in several tenants; choose one with ?tenant=");
    json_decref(j);
    j = get_as(&p, T_ROOT, "/runs/same?tenant=globex", 200);
    ck_assert_str_eq(th_js(j, "tenant"), "globex");
    ck_assert_str_eq(th_js(j, "initiator"), "globex");
    json_decref(j);
    j = get_as(&p, T_ACME, "/runs/same", 200);
    ck_assert_str_eq(th_js(j, "tenant"), "acme");
    ck_assert_str_eq(th_js(j, "initiator"), "acme-all");
    json_decref(j);
    json_decref(get_as(&p, T_ACME, "/runs/same?tenant=acme", 200));
    j = get_as(&p, T_ACME, "/runs/same?tenant=globex", 403);
    ck_assert_str_eq(th_js(j, "detail"), "only an admin token may name another tenant");
    json_decref(j);
    json_decref(get_as(&p, T_ROOT, "/runs/same?tenant=no%20such", 400));

    /* The admin's own run: its tenant, its name. */
    {
        char path[128];
        snprintf(path, sizeof(path), "/runs/%s", id);
        j = get_as(&p, T_ROOT, path, 200);
        ck_assert_str_eq(th_js(j, "tenant"), "ops");
        ck_assert_str_eq(th_js(j, "initiator"), "root");
        json_decref(j);
        json_decref(get_as(&p, T_ACME, path, 404));
    }

    /* Lists: every tenant for the admin, one with ?tenant=, and ?initiator=. */
    j = get_as(&p, T_ROOT, "/runs", 200);
    ck_assert_int_eq(json_array_size(json_object_get(j, "runs")), 3);
    json_decref(j);
    j = get_as(&p, T_ROOT, "/runs?tenant=acme", 200);
    runs = json_object_get(j, "runs");
    ck_assert_int_eq(json_array_size(runs), 1);
    json_decref(j);
    j = get_as(&p, T_ROOT, "/runs?initiator=globex", 200);
    runs = json_object_get(j, "runs");
    ck_assert_int_eq(json_array_size(runs), 1);
    json_array_foreach(runs, i, run)
    {
        ck_assert_str_eq(th_js(run, "tenant"), "globex");
    }
    json_decref(j);
    j = get_as(&p, T_ACME, "/runs?initiator=globex", 200); /* never another tenant's */
    ck_assert_int_eq(json_array_size(json_object_get(j, "runs")), 0);
    json_decref(j);

    /* The health token: /healthz only. */
    json_decref(get_as(&p, T_MON, "/healthz", 200));
    json_decref(get_as(&p, T_MON, "/runs", 403));
    free(id);
    th_stop_clean(&p);
}
END_TEST

/* auth.open_health: /healthz without a token, nothing else. */
START_TEST(open_health)
{
    struct th_proc p;
    char *cfg = tokens_config(), *open = malloc(strlen(cfg) + 64);

    snprintf(open, strlen(cfg) + 64, "%.*s, \"open_health\": true}}", (int)strlen(cfg) - 2, cfg);
    th_start_fresh(&p, "e2e_auth_health", open);
    json_decref(get_as(&p, NULL, "/healthz", 200));
    json_decref(get_as(&p, NULL, "/runs", 401));
    free(cfg);
    free(open);
    th_stop_clean(&p);
}
END_TEST

/* ---- a reload that removes a token ----------------------------------------- */

/* POST /admin/reload as root after writing cfg over the file the server
 * was started with (th_start_fresh's, named after db); asserts 200 and
 * that auth.tokens changed. */
static void reload_with(const struct th_proc *p, const char *db, const char *cfg)
{
    char *path = th_config_file(db, cfg);
    struct th_resp r;
    char *changed;

    th_post_expect(p, "/admin/reload", T_ROOT, NULL, 200, &r);
    changed = json_dumps(json_object_get(r.json, "changed"), JSON_COMPACT);
    ck_assert_msg(changed && strstr(changed, "\"auth.tokens\""), "changed: %s", r.body);
    free(changed);
    th_resp_free(&r);
    free(path);
}

START_TEST(token_removed_by_reload)
{
    struct th_proc p;
    struct th_sse *gone, *gone_q, *kept, *again;
    struct th_sse_event ev;
    char *cfg = tokens_config_without("acme-read"), *id;
    long long t0;

    start_with_tokens(&p, "e2e_auth_reload");
    gone = th_sse_open_token(p.port, "/stream", T_ACME_READ, NULL);
    gone_q = th_sse_open_token(p.port, "/stream?access_token=" T_ACME_READ, NULL, NULL);
    kept = th_sse_open_token(p.port, "/stream", T_GLOBEX, NULL);
    ck_assert_int_eq(gone->status, 200);
    ck_assert_int_eq(gone_q->status, 200);
    ck_assert_int_eq(kept->status, 200);
    ck_assert_int_eq(th_sse_next(gone, &ev, 300), 0); /* open, and nothing to say */

    reload_with(&p, "e2e_auth_reload", cfg);
    /* Its streams end at once (the keep-alive comes every 15 s), cleanly:
     * EventSource comes back, and its 401 stops it. */
    t0 = th_now_ms();
    ck_assert_int_eq(th_sse_next(gone, &ev, 1000), -1);
    ck_assert_msg(gone->clean_end, "the stream was cut, not ended");
    ck_assert_int_eq(th_sse_next(gone_q, &ev, 1000), -1);
    ck_assert_msg(th_now_ms() - t0 < 1000, "the streams ended after %lld ms", th_now_ms() - t0);
    /* The other token's stream stays open and goes on. */
    ck_assert_int_eq(th_sse_next(kept, &ev, 300), 0);
    id = submit_as(&p, T_GLOBEX, "{\"alert_type\":\"demo\",\"data\":{\"duration_ms\":1}}", 202);
    ck_assert_int_eq(th_sse_until(kept, "status", &ev, 5000), 1);
    ck_assert_str_eq(th_js(ev.json, "id"), id);
    th_sse_event_free(&ev);
    /* The removed token is refused from its next request, a stream too. */
    json_decref(get_as(&p, T_ACME_READ, "/runs", 401));
    again = th_sse_open_token(p.port, "/stream", T_ACME_READ, NULL);
    ck_assert_int_eq(again->status, 401);
    json_decref(get_as(&p, T_ACME, "/runs", 200));
    th_sse_close(again);
    th_sse_close(gone);
    th_sse_close(gone_q);
    th_sse_close(kept);
    free(id);
    free(cfg);
    th_stop_clean(&p);
}
END_TEST

/* ---- the loopback default and the refusal --------------------------------- */

START_TEST(loopback_default_and_refusal)
{
    char *ci = th_db_create("e2e_auth_loopback"), *err = NULL, *id;
    char listen[64], env_listen[80], line[512];
    const char *args0[] = {"serve", "--listen", listen, "--database-url", ci, NULL};
    const char *args6[] = {"serve", "--listen", "[::]:8080", "--database-url", ci, NULL};
    const char *args_env[] = {"serve", "--database-url", ci, NULL};
    const char *env[] = {env_listen, NULL};
    const char *insecure[] = {"--insecure-no-auth", NULL};
    struct th_proc p;
    json_t *run;

    snprintf(listen, sizeof(listen), "0.0.0.0:%d", th_free_port());
    snprintf(env_listen, sizeof(env_listen), "OPSRUN_LISTEN=%s", listen);

    /* Without tokens, off loopback: exit 2 before anything else, naming auth.tokens. */
    ck_assert_int_eq(th_exec(args0, NULL, 20, NULL, &err), 2);
    ck_assert_msg(strstr(err, "refusing to serve on 0.0.0.0:") && strstr(err, "\"auth.tokens\"") &&
                      strstr(err, "--insecure-no-auth"),
                  "stderr: %s", err);
    free(err);
    ck_assert_int_eq(th_exec(args6, NULL, 20, NULL, &err), 2);
    ck_assert_msg(strstr(err, "auth.tokens"), "stderr: %s", err);
    free(err);
    ck_assert_int_eq(th_exec(args_env, env, 20, NULL, &err), 2);
    ck_assert_msg(strstr(err, "auth.tokens"), "stderr: %s", err);
    free(err);

    /* Loopback without tokens: served, anonymous, said so in the log. */
    th_start(&p, ci, NULL, NULL);
    id = th_submit(&p, "{\"alert_type\":\"demo\"}", 202);
    run = th_get_run(&p, id);
    ck_assert_str_eq(th_js(run, "initiator"), "anonymous");
    ck_assert_str_eq(th_js(run, "tenant"), "default");
    json_decref(run);
    free(id);
    ck_assert(th_log_find(p.log,
                          "no auth.tokens: serving without authentication, on loopback "
                          "only",
                          line, sizeof(line)));
    th_stop_clean(&p);

    /* --insecure-no-auth: served on every address, with a warning. */
    th_start_host(&p, "0.0.0.0", ci, insecure, NULL);
    json_decref(get_as(&p, NULL, "/runs", 200));
    ck_assert(th_log_find(p.log, "warn  serving without authentication (--insecure-no-auth)", line,
                          sizeof(line)));
    th_stop_clean(&p);

    /* Tokens: served on every address, and every resource needs one. */
    {
        char *cfg = tokens_config(), *path = th_config_file("auth-any", cfg);
        const char *with[] = {"--config", path, NULL};
        th_start_host(&p, "0.0.0.0", ci, with, NULL);
        json_decref(get_as(&p, NULL, "/runs", 401));
        json_decref(get_as(&p, NULL, "/readyz", 200));
        json_decref(get_as(&p, T_ACME, "/runs", 200));
        th_stop_clean(&p);
        free(path);
        free(cfg);
    }
    free(ci);
}
END_TEST

/* ---- opsrun token new ------------------------------------------------------- */

START_TEST(token_new_is_configuration)
{
    const char *args[] = {"token", "new",      "--name",      "cli", "--tenant",
                          "acme",  "--scopes", "submit,read", NULL};
    const char *bad[] = {"token", "new",      "--name",       "cli", "--tenant",
                         "acme",  "--scopes", "submit,write", NULL};
    char *out = NULL, *err = NULL, *nl, *cfg, *id, path[128];
    struct th_proc p;
    json_t *run;

    ck_assert_int_eq(th_exec(args, NULL, 20, &out, &err), 0);
    nl = strchr(out, '\n');
    ck_assert_msg(nl && strchr(nl + 1, '\n') && strchr(nl + 1, '\n')[1] == '\0',
                  "want two lines: %s", out);
    *nl = '\0';
    *strchr(nl + 1, '\n') = '\0';
    ck_assert_int_ge(strlen(out), 43);
    cfg = malloc(strlen(nl + 1) + 64);
    snprintf(cfg, strlen(nl + 1) + 64, "{\"auth\": {\"tokens\": [%s]}}", nl + 1);
    th_start_fresh(&p, "e2e_auth_token_new", cfg);
    id = submit_as(&p, out, "{\"alert_type\":\"demo\"}", 202);
    snprintf(path, sizeof(path), "/runs/%s", id);
    run = get_as(&p, out, path, 200);
    ck_assert_str_eq(th_js(run, "initiator"), "cli");
    ck_assert_str_eq(th_js(run, "tenant"), "acme");
    json_decref(run);
    snprintf(path, sizeof(path), "/runs/%s/cancel", id);
    {
        char url[256];
        struct th_resp r;
        snprintf(url, sizeof(url), "%s%s", p.url, path);
        ck_assert(th_http_token("POST", url, out, NULL, NULL, &r));
        th_check_problem(&r, 403, "cancel without the scope");
        ck_assert_str_eq(th_js(r.json, "detail"), "token \"cli\" lacks the scope \"cancel\"");
        th_resp_free(&r);
    }
    json_decref(get_as(&p, NULL, "/runs", 401));
    json_decref(get_as(&p, T_WRONG, "/runs", 401));
    ck_assert_msg(!th_log_find(p.log, out, path, sizeof(path)), "the token is in the log");
    th_stop_clean(&p);
    free(out);
    free(err);
    free(id);
    free(cfg);

    ck_assert_int_eq(th_exec(bad, NULL, 20, &out, &err), 2);
    ck_assert_str_eq(out, "");
    ck_assert_str_eq(err, "opsrun: token new: invalid \"scopes[1]\": expected \"submit\", "
                          "\"read\", \"cancel\", \"health\", \"admin\" or \"approve\"\n");
    free(out);
    free(err);
}
END_TEST

/* ---- the log ------------------------------------------------------------------ */

/* Every way a token can arrive, right or wrong; then not one of them, and no
 * access_token value, is in the log. */
START_TEST(tokens_never_logged)
{
    struct th_proc p;
    char line[1024], path[256];
    FILE *f;

    start_with_tokens(&p, "e2e_auth_log");
    free(submit_as(&p, T_ACME, "{\"alert_type\":\"demo\",\"run_id\":\"logged\"}", 202));
    for (size_t i = 0; i < sizeof(all_tokens) / sizeof(all_tokens[0]); i++) {
        struct th_sse *s;
        struct th_resp r;
        snprintf(path, sizeof(path), "%s/runs/logged", p.url);
        ck_assert(th_http_token("GET", path, all_tokens[i], NULL, NULL, &r));
        th_resp_free(&r);
        snprintf(path, sizeof(path), "/runs/logged/stream?access_token=%s", all_tokens[i]);
        s = th_sse_open_token(p.port, path, NULL, NULL);
        th_sse_close(s);
        snprintf(path, sizeof(path), "/stream?type=demo&access_token=%s&status=queued",
                 all_tokens[i]);
        s = th_sse_open_token(p.port, path, NULL, NULL);
        th_sse_close(s);
        snprintf(path, sizeof(path), "/runs?access_token=%s", all_tokens[i]);
        json_decref(get_as(&p, NULL, path, 401));
    }
    th_stop_clean(&p);
    for (size_t i = 0; i < sizeof(all_tokens) / sizeof(all_tokens[0]); i++)
        ck_assert_msg(!th_log_find(p.log, all_tokens[i], line, sizeof(line)),
                      "token %zu in the log: %s", i, line);
    f = fopen(p.log, "r");
    ck_assert_ptr_nonnull(f);
    while (fgets(line, sizeof(line), f)) {
        const char *q = strstr(line, "access_token=");
        ck_assert_msg(!q || strncmp(q, "access_token=[redacted]", 23) == 0, "log line: %s", line);
    }
    fclose(f);
    ck_assert(th_log_find(p.log, "path=/runs/logged status=200", line, sizeof(line)));
    ck_assert_msg(strstr(line, " token=acme-all") != NULL, "no token name in: %s", line);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("auth");
    TCase *tc = tcase_create("auth");

    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, isolation_matrix);
    tcase_add_test(tc, admin_and_initiator);
    tcase_add_test(tc, open_health);
    tcase_add_test(tc, token_removed_by_reload);
    tcase_add_test(tc, loopback_default_and_refusal);
    tcase_add_test(tc, token_new_is_configuration);
    tcase_add_test(tc, tokens_never_logged);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
