/* tests/e2e/test_cors.c — CORS against the real binary, as curl sends it:
 * for an allowed Origin every kind of answer (JSON, problem+json 401, 403,
 * 404, 408 and 429, 204s, long-polls, event streams) carries
 * Access-Control-Allow-Origin, Vary and Access-Control-Expose-Headers; a
 * preflight of an allowed origin is answered 204 without a token; other
 * origins (and the default, an empty list) get no CORS header at all; and
 * GET /openapi.yaml serves the built-in description without a token.
 * tests/browser/cors.mjs shows the same with a real browser. */
#include "../support/harness.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "common/digest.h"

#define ALLOWED "http://app.example:3000"
#define DENIED "http://evil.example:3000"
#define T_ALL "opsrun_e2e-cors-all-000000000000000"
#define T_READ "opsrun_e2e-cors-read-11111111111111"

struct cresp {
    long status;
    char headers[8192]; /* every header line of the answer, as received */
    size_t hlen;
    char *body;
    size_t blen;
};

static size_t on_hdr(char *line, size_t size, size_t nmemb, void *arg)
{
    struct cresp *r = arg;
    size_t n = size * nmemb;

    if (r->hlen + n < sizeof(r->headers)) {
        memcpy(r->headers + r->hlen, line, n);
        r->hlen += n;
        r->headers[r->hlen] = '\0';
    }
    return n;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg)
{
    struct cresp *r = arg;
    size_t n = size * nmemb;

    r->body = realloc(r->body, r->blen + n + 1);
    memcpy(r->body + r->blen, data, n);
    r->blen += n;
    r->body[r->blen] = '\0';
    return n;
}

/* One request; origin, token, extra ("Name: value" headers separated by
 * "\r\n") and body may
 * be NULL. Asserts a transport success. */
static void req(const struct th_proc *p, const char *method, const char *path, const char *origin,
                const char *token, const char *extra, const char *body, struct cresp *r)
{
    CURL *c = curl_easy_init();
    struct curl_slist *h = NULL;
    char url[512], line[512];
    CURLcode rc;

    memset(r, 0, sizeof(*r));
    snprintf(url, sizeof(url), "%s%s", p->url, path);
    if (origin) {
        snprintf(line, sizeof(line), "Origin: %s", origin);
        h = curl_slist_append(h, line);
    }
    if (token) {
        snprintf(line, sizeof(line), "Authorization: Bearer %s", token);
        h = curl_slist_append(h, line);
    }
    for (const char *e = extra; e && *e;) { /* "\r\n"-separated */
        size_t n = strcspn(e, "\r");
        snprintf(line, sizeof(line), "%.*s", (int)n, e);
        h = curl_slist_append(h, line);
        e += n;
        e += strspn(e, "\r\n");
    }
    if (body) {
        h = curl_slist_append(h, "Content-Type: application/json");
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_hdr);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
    rc = curl_easy_perform(c);
    ck_assert_msg(rc == CURLE_OK, "%s %s: %s", method, path, curl_easy_strerror(rc));
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    {
        char *ct = NULL;
        curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ct);
        th_record_exchange(method, url, r->status, ct, r->body, r->blen, NULL);
    }
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
}

static void cresp_free(struct cresp *r)
{
    free(r->body);
    r->body = NULL;
}

/* The value of header name (its first occurrence), "" when absent. */
static const char *hdr(const struct cresp *r, const char *name, char *out, size_t cap)
{
    size_t n = strlen(name);

    out[0] = '\0';
    for (const char *l = r->headers; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : "") {
        if (strncasecmp(l, name, n) == 0 && l[n] == ':') {
            const char *v = l + n + 1, *end;
            while (*v == ' ')
                v++;
            end = v + strcspn(v, "\r\n");
            snprintf(out, cap, "%.*s", (int)(end - v), v);
            break;
        }
    }
    return out;
}

/* What every answer to an allowed origin carries. */
static void check_cors(const struct cresp *r, const char *origin, const char *what)
{
    char v[256];

    ck_assert_msg(strcmp(hdr(r, "Access-Control-Allow-Origin", v, sizeof(v)), origin) == 0,
                  "%s: Access-Control-Allow-Origin \"%s\", want \"%s\"; headers:\n%s", what, v,
                  origin, r->headers);
    ck_assert_msg(strcmp(hdr(r, "Vary", v, sizeof(v)), "Origin") == 0, "%s: Vary \"%s\"", what, v);
    ck_assert_msg(strstr(hdr(r, "Access-Control-Expose-Headers", v, sizeof(v)), "Location") &&
                      strstr(v, "Retry-After"),
                  "%s: Access-Control-Expose-Headers \"%s\"", what, v);
}

/* No header of CORS at all. */
static void check_no_cors(const struct cresp *r, const char *what)
{
    ck_assert_msg(!strcasestr(r->headers, "Access-Control-"), "%s: CORS headers in:\n%s", what,
                  r->headers);
}

static void check_status(const struct cresp *r, long want, const char *what)
{
    ck_assert_msg(r->status == want, "%s: HTTP %ld, want %ld; body %s", what, r->status, want,
                  r->body ? r->body : "");
}

/* A completed demo run of the no-auth server, its id into id. */
static void completed_run(const struct th_proc *p, char *id, size_t cap)
{
    char *rid =
        th_submit(p, "{\"alert_type\":\"demo\",\"data\":{\"duration_ms\":10,\"steps\":1}}", 202);

    snprintf(id, cap, "%s", rid);
    th_expect_outcome(p, rid, "succeeded", 20);
    free(rid);
}

/* Every kind of answer, once from the allowed origin and once from
 * another. */
START_TEST(allowed_and_denied_origins)
{
    struct th_proc p;
    struct cresp r;
    char id[130], path[256], v[256];
    const char *origins[] = {ALLOWED, DENIED};

    th_start_fresh(&p, "e2e_cors_origins",
                   "{\"http\": {\"cors_origins\": [\"https://other.example\", \"" ALLOWED "\"]}}");
    completed_run(&p, id, sizeof(id));
    for (int i = 0; i < 2; i++) {
        const char *o = origins[i];
        bool ok = i == 0;
        char what[128];
#define CHECK(label)                                                                               \
    do {                                                                                           \
        snprintf(what, sizeof(what), "%s from %s", (label), o);                                    \
        if (ok)                                                                                    \
            check_cors(&r, o, what);                                                               \
        else                                                                                       \
            check_no_cors(&r, what);                                                               \
        cresp_free(&r);                                                                            \
    } while (0)

        snprintf(path, sizeof(path), "{\"alert_type\":\"demo\",\"run_id\":\"cors-%d\"}", i);
        req(&p, "POST", "/alerts", o, NULL, NULL, path, &r);
        check_status(&r, 202, "POST /alerts");
        ck_assert(hdr(&r, "Location", v, sizeof(v))[0] != '\0');
        CHECK("POST /alerts 202");
        req(&p, "POST", "/alerts", o, NULL, NULL, "{\"alert_type\":", &r);
        check_status(&r, 400, "POST /alerts (bad JSON)");
        CHECK("POST /alerts 400");
        req(&p, "GET", "/runs/r-nobody", o, NULL, NULL, NULL, &r);
        check_status(&r, 404, "GET /runs/r-nobody");
        CHECK("404");
        req(&p, "DELETE", "/alerts", o, NULL, NULL, NULL, &r);
        check_status(&r, 405, "DELETE /alerts");
        CHECK("405");
        snprintf(path, sizeof(path), "/runs/%s?wait=1", id);
        req(&p, "GET", path, o, NULL, NULL, NULL, &r);
        check_status(&r, 200, "long-poll");
        CHECK("long-poll");
        snprintf(path, sizeof(path), "/runs/%s/stream", id);
        req(&p, "GET", path, o, NULL, NULL, NULL, &r);
        check_status(&r, 200, "stream");
        ck_assert_msg(r.body && strstr(r.body, "event: "), "stream: no event in %s", r.body);
        ck_assert(strstr(hdr(&r, "Content-Type", v, sizeof(v)), "text/event-stream"));
        CHECK("stream");
        req(&p, "GET", path, o, NULL, "Last-Event-ID: 999999999", NULL, &r);
        check_status(&r, 204, "stream past its end");
        CHECK("204");
        req(&p, "GET", "/openapi.yaml", o, NULL, NULL, NULL, &r);
        check_status(&r, 200, "GET /openapi.yaml");
        CHECK("openapi.yaml");
#undef CHECK
    }

    /* Preflights: the allowed origin's is answered, the other's is not one. */
    req(&p, "OPTIONS", "/alerts", ALLOWED, NULL,
        "Access-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: content-type", NULL,
        &r);
    check_status(&r, 204, "preflight of POST /alerts");
    check_cors(&r, ALLOWED, "preflight");
    ck_assert_str_eq(hdr(&r, "Access-Control-Allow-Methods", v, sizeof(v)), "POST");
    hdr(&r, "Access-Control-Allow-Headers", v, sizeof(v));
    ck_assert_msg(strstr(v, "Authorization") && strstr(v, "Content-Type") &&
                      strstr(v, "Last-Event-ID"),
                  "Access-Control-Allow-Headers \"%s\"", v);
    ck_assert_str_eq(hdr(&r, "Access-Control-Max-Age", v, sizeof(v)), "600");
    cresp_free(&r);
    snprintf(path, sizeof(path), "/runs/%s", id);
    req(&p, "OPTIONS", path, ALLOWED, NULL, "Access-Control-Request-Method: GET", NULL, &r);
    check_status(&r, 204, "preflight of GET /runs/{id}");
    ck_assert_str_eq(hdr(&r, "Access-Control-Allow-Methods", v, sizeof(v)), "GET");
    cresp_free(&r);
    req(&p, "OPTIONS", "/alerts", DENIED, NULL, "Access-Control-Request-Method: POST", NULL, &r);
    check_status(&r, 405, "preflight from another origin");
    check_no_cors(&r, "preflight from another origin");
    cresp_free(&r);
    req(&p, "OPTIONS", "/nowhere", ALLOWED, NULL, "Access-Control-Request-Method: GET", NULL, &r);
    check_status(&r, 404, "preflight of an unknown path");
    check_cors(&r, ALLOWED, "preflight of an unknown path");
    ck_assert(!strcasestr(r.headers, "Access-Control-Allow-Methods"));
    cresp_free(&r);
    req(&p, "OPTIONS", "/alerts", ALLOWED, NULL, NULL, NULL, &r);
    check_status(&r, 405, "OPTIONS without Access-Control-Request-Method");
    cresp_free(&r);

    /* Not an origin's shape: never echoed. */
    req(&p, "GET", "/livez", "null", NULL, NULL, NULL, &r);
    check_no_cors(&r, "Origin: null");
    cresp_free(&r);
    th_stop_clean(&p);
}
END_TEST

/* The default: no origin gets CORS headers, and OPTIONS is 405 as ever. */
START_TEST(default_same_origin_only)
{
    struct th_proc p;
    struct cresp r;

    th_start_fresh(&p, "e2e_cors_default", NULL);
    req(&p, "POST", "/alerts", ALLOWED, NULL, NULL, "{\"alert_type\":\"demo\"}", &r);
    check_status(&r, 202, "POST /alerts");
    check_no_cors(&r, "default, POST /alerts");
    cresp_free(&r);
    req(&p, "OPTIONS", "/alerts", ALLOWED, NULL, "Access-Control-Request-Method: POST", NULL, &r);
    check_status(&r, 405, "default, preflight");
    check_no_cors(&r, "default, preflight");
    cresp_free(&r);
    th_stop_clean(&p);
}
END_TEST

static char *auth_config(void)
{
    char all[65], rd[65], *out = malloc(2048);

    sha256_hex(T_ALL, strlen(T_ALL), all);
    sha256_hex(T_READ, strlen(T_READ), rd);
    snprintf(out, 2048,
             "{\"http\": {\"cors_origins\": [\"*\"]},"
             " \"limits\": {\"submit_rate_per_s\": 1, \"submit_burst\": 1},"
             " \"auth\": {\"tokens\": ["
             "{\"name\": \"all\", \"tenant\": \"acme\", \"scopes\": [\"submit\", \"read\", "
             "\"cancel\"], \"sha256\": \"%s\"},"
             "{\"name\": \"rd\", \"tenant\": \"acme\", \"scopes\": [\"read\"], \"sha256\": \"%s\"}"
             "]}}",
             all, rd);
    return out;
}

/* With tokens: preflights need none (browsers send them without
 * credentials), and refusals (401, 403, 429) still carry CORS, so a page
 * can read why. "*" echoes the page's origin. */
START_TEST(with_auth)
{
    struct th_proc p;
    struct cresp r;
    char *cfg = auth_config(), v[256];

    th_start_fresh(&p, "e2e_cors_auth", cfg);
    free(cfg);
    req(&p, "OPTIONS", "/runs/r-any/stream", ALLOWED, NULL,
        "Access-Control-Request-Method: GET\r\nAccess-Control-Request-Headers: last-event-id", NULL,
        &r);
    check_status(&r, 204, "preflight without a token");
    check_cors(&r, ALLOWED, "preflight without a token");
    ck_assert_str_eq(hdr(&r, "Access-Control-Allow-Methods", v, sizeof(v)), "GET");
    cresp_free(&r);
    req(&p, "OPTIONS", "/nowhere", ALLOWED, NULL, "Access-Control-Request-Method: GET", NULL, &r);
    check_status(&r, 401, "preflight of an unknown path"); /* who first, as for any request */
    check_cors(&r, ALLOWED, "preflight of an unknown path");
    cresp_free(&r);

    req(&p, "GET", "/runs", ALLOWED, NULL, NULL, NULL, &r);
    check_status(&r, 401, "GET /runs without a token");
    check_cors(&r, ALLOWED, "401");
    ck_assert(hdr(&r, "WWW-Authenticate", v, sizeof(v))[0] != '\0');
    cresp_free(&r);
    req(&p, "POST", "/alerts", ALLOWED, T_READ, NULL, "{\"alert_type\":\"demo\"}", &r);
    check_status(&r, 403, "POST /alerts without the scope");
    check_cors(&r, ALLOWED, "403");
    cresp_free(&r);
    req(&p, "POST", "/alerts", ALLOWED, T_ALL, NULL, "{\"alert_type\":\"demo\"}", &r);
    check_status(&r, 202, "POST /alerts");
    check_cors(&r, ALLOWED, "202 with a token");
    cresp_free(&r);
    req(&p, "POST", "/alerts", ALLOWED, T_ALL, NULL, "{\"alert_type\":\"demo\"}", &r);
    check_status(&r, 429, "POST /alerts past the burst");
    check_cors(&r, ALLOWED, "429");
    ck_assert(hdr(&r, "Retry-After", v, sizeof(v))[0] != '\0');
    cresp_free(&r);
    req(&p, "GET", "/runs", DENIED, T_ALL, NULL, NULL, &r);
    check_status(&r, 200, "GET /runs under \"*\"");
    check_cors(&r, DENIED, "\"*\" echoes any origin");
    cresp_free(&r);

    /* The API description: no token needed, the file the binary was built with. */
    req(&p, "GET", "/openapi.yaml", NULL, NULL, NULL, NULL, &r);
    check_status(&r, 200, "GET /openapi.yaml without a token");
    ck_assert_str_eq(hdr(&r, "Content-Type", v, sizeof(v)), "application/yaml");
    {
        char *want = NULL, file[512];
        size_t n = 0;
        FILE *f;
        snprintf(file, sizeof(file), "%s/openapi.yaml", getenv("OPSRUN_SOURCE_DIR"));
        f = fopen(file, "rb");
        ck_assert_msg(f != NULL, "could not open %s", file);
        want = malloc(1 << 20);
        n = fread(want, 1, 1 << 20, f);
        fclose(f);
        ck_assert_uint_eq(r.blen, n);
        ck_assert(memcmp(r.body, want, n) == 0);
        free(want);
    }
    cresp_free(&r);
    th_stop_clean(&p);
}
END_TEST

/* Sends a POST's headers (with origin) and one byte of its body, then waits
 * for what the server writes: the 408 at its deadline. */
static void late_request(const struct th_proc *p, const char *origin, char *out, size_t cap)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)p->port)};
    struct timeval tv = {.tv_sec = 10};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    char req[512];
    size_t got = 0;
    ssize_t n;

    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    snprintf(req, sizeof(req),
             "POST /alerts HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: %s\r\n"
             "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{",
             origin);
    ck_assert(write(fd, req, strlen(req)) == (ssize_t)strlen(req));
    while (got + 1 < cap && (n = read(fd, out + got, cap - 1 - got)) > 0)
        got += (size_t)n;
    out[got] = '\0';
    close(fd);
}

/* The 408 is written to the socket by the deadline thread, not through
 * libmicrohttpd: it must carry CORS too. */
START_TEST(late_request_408)
{
    struct th_proc p;
    char out[4096];

    th_start_fresh(&p, "e2e_cors_408",
                   "{\"http\": {\"request_deadline_s\": 1, \"cors_origins\": [\"" ALLOWED "\"]}}");
    late_request(&p, ALLOWED, out, sizeof(out));
    ck_assert_msg(strncmp(out, "HTTP/1.1 408 ", 13) == 0, "allowed origin: %s", out);
    ck_assert_msg(
        strstr(out, "\r\nAccess-Control-Allow-Origin: " ALLOWED "\r\n") &&
            strstr(out, "\r\nVary: Origin\r\n") &&
            strstr(out,
                   "\r\nAccess-Control-Expose-Headers: Location, Retry-After, X-Request-Id\r\n"),
        "allowed origin, 408 without CORS:\n%s", out);
    late_request(&p, DENIED, out, sizeof(out));
    ck_assert_msg(strncmp(out, "HTTP/1.1 408 ", 13) == 0, "denied origin: %s", out);
    ck_assert_msg(!strcasestr(out, "Access-Control-"), "denied origin, 408 with CORS:\n%s", out);
    th_stop_clean(&p);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cors");
    TCase *tc = tcase_create("cors");

    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, allowed_and_denied_origins);
    tcase_add_test(tc, default_same_origin_only);
    tcase_add_test(tc, with_auth);
    tcase_add_test(tc, late_request_408);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
