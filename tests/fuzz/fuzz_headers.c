/* tests/fuzz/fuzz_headers.c — the request headers the server reads, each
 * given the input as its value (a C string, as libmicrohttpd hands it):
 *   Last-Event-ID (and ?last_event_id=)  sse_parse_last_id
 *   Origin                               http_cors_origin, http_cors_headers,
 *                                        http_cors_lines (configured origins,
 *                                        then "*")
 *   X-Request-Id, traceparent            log_request_id_pick
 *   Content-Type                         http_content_type_json
 *   If-None-Match                        http_etag_matches
 * Authorization has its own driver (fuzz_auth); Content-Length and
 * Transfer-Encoding are read by libmicrohttpd before us, and Access-Control-
 * Request-Method only for its presence.
 *
 * Invariants:
 *   - an event id accepted is 1 to 19 digits and the number they write;
 *   - an Origin allowed is echoed unchanged in exactly three header lines,
 *     so it can add none: no control character, at most 255 bytes, one of
 *     the configured origins (without regard to case) unless "*" is;
 *   - the request id picked is always a valid one (it is echoed in a
 *     header and logged), the X-Request-Id itself when that is valid, else
 *     the traceparent's 32 lower-case hex digits or 32 random ones;
 *   - a Content-Type taken for JSON is application/json or
 *     application/...+json before its parameters;
 *   - If-None-Match matches only "*" or a value holding the entity tag. */
#include "tests/fuzz/fuzz.h"

#include "common/log.h"
#include "live/sse.h"
#include "server/http_cors.h"
#include "server/http_headers.h"

#include <ctype.h>
#include <strings.h>

#define ETAG "\"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\""

static void check_event_id(const char *v)
{
    int64_t id = -1;
    char back[24];

    if (!sse_parse_last_id(v, &id))
        return;
    FUZZ_CHECK(strlen(v) >= 1 && strlen(v) <= 19 && strspn(v, "0123456789") == strlen(v));
    FUZZ_CHECK(id >= 0);
    xsnprintf(back, sizeof(back), "%lld", (long long)id);
    v += strspn(v, "0");
    FUZZ_CHECK(strcmp(back, *v ? v : "0") == 0);
}

static void config_init(struct config *cfg, const char *origins)
{
    struct error err = {0};
    char text[512];

    xsnprintf(text, sizeof(text), "{\"http\": {\"cors_origins\": %s}}", origins);
    cfg_init(cfg, &action_registry);
    if (cfg_load_json(cfg, text, &err) != ST_OK) {
        fprintf(stderr, "fuzz: cors configuration: %s\n", err.message);
        abort();
    }
}

static void check_origin(const char *v, const char *origins)
{
    struct config cfg;
    const char *allowed;
    char lines[1024];
    size_t nl = 0, cr = 0;
    bool listed = false;

    config_init(&cfg, origins);
    allowed = http_cors_origin(&cfg, v);
    if (allowed) {
        FUZZ_CHECK(allowed == v && strlen(v) <= 255);
        for (const char *p = v; *p; p++)
            FUZZ_CHECK(!iscntrl((unsigned char)*p));
        for (size_t i = 0; i < cfg.http.ncors_origins; i++)
            listed = listed || strcmp(cfg.http.cors_origins[i], "*") == 0 ||
                     strcasecmp(cfg.http.cors_origins[i], v) == 0;
        FUZZ_CHECK(listed);
        http_cors_lines(allowed, lines, sizeof(lines));
        for (const char *p = lines; *p; p++) {
            nl += *p == '\n';
            cr += *p == '\r';
        }
        FUZZ_CHECK(nl == HTTP_CORS_HEADERS && cr == HTTP_CORS_HEADERS);
        FUZZ_CHECK(strstr(lines, v) != NULL);
    }
    cfg_cleanup(&cfg);
}

static bool lower_hex32(const char *s)
{
    return strlen(s) == 32 && strspn(s, "0123456789abcdef") == 32;
}

static void check_request_id(const char *v)
{
    char out[LOG_REQUEST_ID_MAX + 1];

    log_request_id_pick(v, NULL, out);
    FUZZ_CHECK(log_request_id_valid(out));
    FUZZ_CHECK(log_request_id_valid(v) ? strcmp(out, v) == 0 : lower_hex32(out));
    log_request_id_pick(NULL, v, out);
    FUZZ_CHECK(log_request_id_valid(out) && lower_hex32(out));
    log_request_id_pick("", v, out);
    FUZZ_CHECK(log_request_id_valid(out));
}

/* application/json or application/...+json, in any case, before ';'. */
static void check_content_type(const char *v)
{
    size_t n;

    if (!http_content_type_json(v))
        return;
    n = strcspn(v, ";");
    while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t'))
        n--;
    FUZZ_CHECK(n >= 16 && strncasecmp(v, "application/", 12) == 0);
    FUZZ_CHECK((n == 16 && strncasecmp(v + 12, "json", 4) == 0) ||
               strncasecmp(v + n - 5, "+json", 5) == 0);
    FUZZ_CHECK(!memchr(v, ';', n));
}

static void check_if_none_match(const char *v)
{
    if (http_etag_matches(v, ETAG))
        FUZZ_CHECK(strcmp(v, "*") == 0 || strstr(v, ETAG));
    FUZZ_CHECK(!http_etag_matches(NULL, ETAG));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *v = fuzz_cstr(data, size);

    check_event_id(v);
    check_origin(v, "[\"https://app.example.com\", \"http://LOCALHOST:3000\", "
                    "\"https://[::1]:8443\"]");
    check_origin(v, "[\"*\"]");
    check_request_id(v);
    check_content_type(v);
    check_if_none_match(v);
    FUZZ_CHECK(!http_content_type_json(NULL));
    free(v);
    return 0;
}
