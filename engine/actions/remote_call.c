/* engine/actions/remote_call.c — a request made with libcurl
 * (engine/actions/remote.h): the body and headers built from the
 * templates, the bounded transfer on a kept or a new connection, and what
 * its answer means. */
#include "engine/actions/remote.h"

#include "common/dynbuf.h"
#include "common/runlog.h"

#include <curl/curl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct sink {
    struct dynbuf body; /* capped at REMOTE_RESPONSE_MAX */
    bool too_big;
};

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
    struct sink *k = arg;

    if (dynbuf_add(&k->body, p, size * n) != ST_OK) {
        k->too_big = true;
        return 0; /* aborts the transfer */
    }
    return size * n;
}

static void header_copy(const char *line, size_t n, const char *name, char *out, size_t cap)
{
    size_t nl = strlen(name);

    if (n > nl + 1 && strncasecmp(line, name, nl) == 0 && line[nl] == ':') {
        const char *v = line + nl + 1;
        size_t k = n - nl - 1;
        while (k && (*v == ' ' || *v == '\t'))
            v++, k--;
        while (k && (v[k - 1] == '\r' || v[k - 1] == '\n' || v[k - 1] == ' '))
            k--;
        xsnprintf(out, cap, "%.*s", (int)k, v);
    }
}

static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
    struct remote_response *r = arg;

    header_copy(p, size * n, "Location", r->location, sizeof(r->location));
    header_copy(p, size * n, "Content-Type", r->content_type, sizeof(r->content_type));
    return size * n;
}

/* The answer's Retry-After in seconds, 0 when none: libcurl reads both
 * forms (delay-seconds and an HTTP date, which it counts from now). */
static int retry_after(CURL *c)
{
    curl_off_t s = 0;

    if (curl_easy_getinfo(c, CURLINFO_RETRY_AFTER, &s) != CURLE_OK || s <= 0)
        return 0;
    return s > REMOTE_RETRY_AFTER_MAX_S ? REMOTE_RETRY_AFTER_MAX_S : (int)s;
}

static int on_progress(void *arg, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
    (void)a, (void)b, (void)c, (void)d;
    return arg && rc_should_stop(arg) ? 1 : 0;
}

/* The expanded body and its content type; *body NULL when there is none. */
static enum status build_body(const json_t *req, const struct remote_vars *v, char **body,
                              const char **ctype, struct error *err)
{
    const json_t *b = json_object_get(req, "body"), *t = json_object_get(req, "body_text");
    json_t *x = NULL;
    enum status st = ST_OK;

    *body = NULL;
    *ctype = json_string_value(json_object_get(req, "content_type"));
    if (b) {
        st = remote_expand_json(b, v, &x, err);
        if (st == ST_OK)
            *body = json_dumps(x, JSON_COMPACT | JSON_ENCODE_ANY);
        json_decref(x);
        if (!*ctype)
            *ctype = "application/json";
    } else if (t) {
        st = remote_expand_text(
            json_string_value(t), v,
            json_is_false(json_object_get(req, "xml_escape")) ? REMOTE_RAW : REMOTE_XML, body, err);
        if (!*ctype)
            *ctype = "text/xml; charset=utf-8";
    }
    return st;
}

static enum status build_headers(const json_t *req, const struct remote_vars *v, const char *ctype,
                                 struct curl_slist **out, struct error *err)
{
    const json_t *h = json_object_get(req, "headers");
    const char *key;
    json_t *x;

    *out = curl_slist_append(NULL, "Expect:");
    if (ctype) {
        char *line = xasprintf("Content-Type: %s", ctype);
        *out = curl_slist_append(*out, line);
        free(line);
    }
    json_object_foreach((json_t *)h, key, x)
    {
        char *val = NULL, *line;
        enum status st = remote_expand_text(json_string_value(x), v, REMOTE_HEADER, &val, err);
        if (st != ST_OK) {
            char why[sizeof(err->message)] = "";
            if (err)
                xsnprintf(why, sizeof(why), "%s", err->message);
            return error_set(err, st, "header %s: %s", key, why);
        }
        if (strpbrk(val, "\r\n")) {
            free(val);
            return error_set(err, ST_INVALID, "header %s would span lines", key);
        }
        line = xasprintf("%s: %s", key, val);
        *out = curl_slist_append(*out, line);
        free(line);
        free(val);
    }
    return ST_OK;
}

void remote_response_cleanup(struct remote_response *r)
{
    if (!r)
        return;
    free(r->body);
    r->body = NULL;
    r->len = 0;
}

struct remote_conn {
    CURL *curl; /* its connection cache outlives each transfer */
};

struct remote_conn *remote_conn_new(void)
{
    struct remote_conn *c = xcalloc(1, sizeof(*c));

    c->curl = curl_easy_init();
    if (!c->curl)
        abort(); /* only on allocation failure */
    return c;
}

void remote_conn_free(struct remote_conn *c)
{
    if (!c)
        return;
    curl_easy_cleanup(c->curl);
    free(c);
}

/* The handle of one transfer: the context's kept one, reset to its
 * defaults (its open connections stay), or a new one. */
static CURL *transfer_handle(const struct run_ctx *rc)
{
    if (rc && rc->conn) {
        curl_easy_reset(rc->conn->curl);
        return rc->conn->curl;
    }
    return curl_easy_init();
}

static void transfer_done(const struct run_ctx *rc, CURL *c)
{
    if (!rc || !rc->conn)
        curl_easy_cleanup(c);
}

static void set_options(CURL *c, const char *method, const char *url, const char *body,
                        long timeout_ms)
{
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (strcmp(method, "GET") == 0)
        curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    }
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms < 5000 ? timeout_ms : 5000L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "opsrun/" OPSRUN_VERSION);
}

/* One line in the run's log for a request: method, URL without its query,
 * what came back and how long it took. */
static void log_request(const struct run_ctx *rc, const char *method, const char *url, CURLcode cc,
                        long status, int64_t ms, const char *why)
{
    char *shown;

    if (!rc->log)
        return;
    shown = remote_url_for_log(url);
    if (cc == CURLE_OK)
        runlog_say(rc->log, "%s %s: %ld in %lld ms", method, shown, status, (long long)ms);
    else
        runlog_say(rc->log, "%s %s: no answer after %lld ms: %s", method, shown, (long long)ms,
                   why);
    free(shown);
}

enum status remote_call(const json_t *req, const struct remote_vars *v, const char *url_override,
                        const struct run_ctx *rc, struct remote_response *out, struct error *err)
{
    const char *method = json_string_value(json_object_get(req, "method"));
    const char *tmpl = url_override ? url_override : json_string_value(json_object_get(req, "url"));
    const json_t *t = json_object_get(req, "timeout_ms");
    long timeout_ms = t ? (long)json_integer_value(t) : REMOTE_TIMEOUT_DEFAULT_MS;
    struct curl_slist *hdrs = NULL;
    struct sink k = {.too_big = false};
    const char *ctype = NULL;
    char *url = NULL, *body = NULL;
    int64_t started;
    enum status st;
    CURLcode cc;
    CURL *c;

    memset(out, 0, sizeof(*out));
    dynbuf_init(&k.body, REMOTE_RESPONSE_MAX);
    if (!method)
        method = json_object_get(req, "body") || json_object_get(req, "body_text") ? "POST" : "GET";
    if (!tmpl)
        return error_set(err, ST_INVALID, "no URL to call");
    if (url_override) {
        url = xstrdup(url_override);
        st = ST_OK;
    } else {
        st = remote_expand_url(tmpl, v, &url, err);
    }
    if (st == ST_OK)
        st = build_body(req, v, &body, &ctype, err);
    if (st == ST_OK)
        st = build_headers(req, v, body ? ctype : NULL, &hdrs, err);
    if (st != ST_OK || !(c = transfer_handle(rc))) {
        free(url), free(body), curl_slist_free_all(hdrs);
        return st != ST_OK ? st : error_set(err, ST_INTERNAL, "could not start a transfer");
    }
    xsnprintf(out->effective_url, sizeof(out->effective_url), "%s", url);
    set_options(c, method, url, body, timeout_ms);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &k);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, out);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, (void *)rc);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    started = clock_mono_ms();
    cc = curl_easy_perform(c);
    if (cc == CURLE_OK) {
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out->status);
        out->retry_after_s = retry_after(c);
    }
    if (rc)
        log_request(rc, method, url, cc, out->status, clock_mono_ms() - started,
                    k.too_big ? "the response is larger than 4 MiB" : curl_easy_strerror(cc));
    transfer_done(rc, c);
    curl_slist_free_all(hdrs);
    free(url);
    free(body);
    out->len = dynbuf_len(&k.body);
    out->body = dynbuf_take(&k.body);
    if (cc == CURLE_OK)
        return ST_OK;
    out->transport_error = true;
    out->timed_out = cc == CURLE_OPERATION_TIMEDOUT;
    out->stopped = cc == CURLE_ABORTED_BY_CALLBACK;
    xsnprintf(out->error, sizeof(out->error), "%s %s: %s", method, tmpl,
              k.too_big ? "the response is larger than 4 MiB" : curl_easy_strerror(cc));
    return error_set(err, ST_UNAVAILABLE, "could not call %s", out->error);
}

/* ---- the answer ------------------------------------------------------------ */

enum remote_class remote_classify(const struct remote_response *r)
{
    if (r->transport_error || r->status == 408 || r->status == 429 || r->status >= 500)
        return REMOTE_TRANSIENT;
    if (r->status >= 200 && r->status < 300)
        return REMOTE_OK;
    if (r->status == 404 || r->status == 410)
        return REMOTE_GONE;
    return REMOTE_REJECTED;
}

void remote_error(struct run_ctx *rc, const char *code, const char *what,
                  const struct remote_response *r)
{
    char excerpt[201];
    size_t n = 0;

    if (r->transport_error) {
        rc_error(rc, code, "%s: %s", what, r->error);
        return;
    }
    for (size_t i = 0; r->body && i < r->len && n < sizeof(excerpt) - 1; i++)
        excerpt[n++] =
            r->body[i] == '\n' || r->body[i] == '\r' || r->body[i] == '\0' ? ' ' : r->body[i];
    excerpt[n] = '\0';
    utf8_scrub(excerpt);
    rc_error(rc, code, "%s: HTTP %ld%s%s", what, r->status, n ? ": " : "", excerpt);
}

bool remote_built(struct run_ctx *rc, enum status st, const char *what, const struct error *err)
{
    if (st != ST_INVALID && st != ST_UNPROCESSABLE)
        return true;
    rc_error(rc, st == ST_UNPROCESSABLE ? "unsafe_input" : "invalid_request",
             "could not build %s: %s", what, err->message);
    return false;
}

bool remote_call_run(struct run_ctx *rc, const json_t *req, const char *url_override,
                     const char *what, struct remote_response *out)
{
    const struct remote_vars v = remote_vars_of(rc);
    struct error err = {0};

    return remote_built(rc, remote_call(req, &v, url_override, rc, out, &err), what, &err);
}

json_t *remote_json(const struct remote_response *r)
{
    return r->body ? json_loadb(r->body, r->len, JSON_DECODE_ANY, NULL) : NULL;
}
