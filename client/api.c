/* client/api.c — see api.h. libcurl stays in this file. */
#include "client/api.h"

#include <curl/curl.h>
#include <strings.h>

/* The connection must come up within this, whatever the call's timeout. */
#define CONNECT_TIMEOUT_MS 5000L
/* The most of an answer kept in memory: a page of 500 runs with large
 * inputs fits; a stream's body is never kept. */
#define BODY_MAX ((size_t)64 << 20)

struct api {
    CURL *curl;
    char *server; /* without a trailing slash */
    char *auth;   /* the Authorization header line, or NULL */
};

/* What the callbacks of one transfer share. */
struct xfer {
    struct api *a;
    struct api_resp *r;
    api_data_fn fn; /* NULL: keep the body */
    void *arg;
    bool stopped;                  /* fn asked to stop */
    bool too_large;                /* the body passed BODY_MAX */
    int64_t idle_ms, last_byte_ms; /* a stream: how long it may go without a byte */
    bool idle;                     /* it went that long */
};

enum status api_global_init(struct error *err)
{
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return error_set(err, ST_INTERNAL, "could not initialise libcurl");
    return ST_OK;
}

void api_global_cleanup(void)
{
    curl_global_cleanup();
}

struct api *api_new(const char *server, const char *token)
{
    struct api *a = xcalloc(1, sizeof(*a));
    size_t n = strlen(server);

    while (n > 0 && server[n - 1] == '/')
        n--;
    a->server = xstrndup(server, n);
    a->auth = token ? xasprintf("Authorization: Bearer %s", token) : NULL;
    a->curl = curl_easy_init();
    if (!a->curl)
        abort(); /* only when out of memory, as for xmalloc */
    return a;
}

void api_free(struct api *a)
{
    if (!a)
        return;
    curl_easy_cleanup(a->curl);
    if (a->auth)
        memset(a->auth, 0, strlen(a->auth)); /* the token does not outlive its use */
    free(a->auth);
    free(a->server);
    free(a);
}

const char *api_server(const struct api *a)
{
    return a->server;
}

void api_resp_init(struct api_resp *r)
{
    memset(r, 0, sizeof(*r));
    dynbuf_init(&r->body, BODY_MAX);
    r->retry_after_s = -1;
}

void api_resp_cleanup(struct api_resp *r)
{
    dynbuf_free(&r->body);
    json_decref(r->json);
    r->json = NULL;
}

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *arg)
{
    struct xfer *x = arg;
    size_t n = size * nmemb;
    long code = 0;

    x->last_byte_ms = clock_mono_ms();
    curl_easy_getinfo(x->a->curl, CURLINFO_RESPONSE_CODE, &code);
    if (x->fn && code == 200) {
        if (!x->fn(x->arg, ptr, n)) {
            x->stopped = true;
            return 0; /* ends the transfer (CURLE_WRITE_ERROR) */
        }
        return n;
    }
    if (dynbuf_add(&x->r->body, ptr, n) != ST_OK) {
        x->too_large = true;
        return 0;
    }
    return n;
}

/* "Name: value\r\n" into out when line is that header. */
static void header_copy(const char *line, size_t n, const char *name, char *out, size_t cap)
{
    size_t k = strlen(name);

    if (n <= k || strncasecmp(line, name, k) != 0)
        return;
    line += k, n -= k;
    while (n > 0 && (*line == ' ' || *line == '\t'))
        line++, n--;
    while (n > 0 && (line[n - 1] == '\r' || line[n - 1] == '\n' || line[n - 1] == ' '))
        n--;
    xsnprintf(out, cap, "%.*s", (int)(n < cap ? n : cap - 1), line);
}

static size_t on_header(char *line, size_t size, size_t nmemb, void *arg)
{
    struct xfer *x = arg;
    size_t n = size * nmemb;
    char ra[16] = "";

    x->last_byte_ms = clock_mono_ms();
    if (n >= 5 && strncmp(line, "HTTP/", 5) == 0) { /* a new answer (after a 100) */
        x->r->content_type[0] = x->r->location[0] = '\0';
        x->r->retry_after_s = -1;
    }
    header_copy(line, n, "content-type:", x->r->content_type, sizeof(x->r->content_type));
    header_copy(line, n, "location:", x->r->location, sizeof(x->r->location));
    header_copy(line, n, "retry-after:", ra, sizeof(ra));
    if (ra[0] && strspn(ra, "0123456789") == strlen(ra) && strlen(ra) < 9)
        x->r->retry_after_s = atol(ra);
    return n;
}

static bool is_json(const char *ct)
{
    size_t n = strcspn(ct, ";");

    while (n > 0 && ct[n - 1] == ' ')
        n--;
    return (n == 16 && strncasecmp(ct, "application/json", 16) == 0) ||
           (n > 5 && strncasecmp(ct + n - 5, "+json", 5) == 0);
}

/* libcurl calls this about once a second, with or without data. Its
 * low-speed limit cannot stand in: a keep-alive of a few bytes every 15 s
 * is below any rate it can check. */
static int on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
    struct xfer *x = arg;

    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    x->idle = clock_mono_ms() - x->last_byte_ms > x->idle_ms;
    return x->idle ? 1 : 0; /* 1 aborts the transfer */
}

/* The options every transfer has; the caller adds its own. */
static struct curl_slist *xfer_setup(struct xfer *x, const char *path, const char *const *hdrs)
{
    CURL *c = x->a->curl;
    struct curl_slist *list = NULL;
    char *url = xasprintf("%s%s", x->a->server, path);

    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    free(url); /* libcurl keeps its own copy */
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, CONNECT_TIMEOUT_MS);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "opsrun/" OPSRUN_VERSION);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, x);
    if (x->a->auth)
        list = curl_slist_append(list, x->a->auth);
    for (size_t i = 0; hdrs && hdrs[i]; i++)
        list = curl_slist_append(list, hdrs[i]);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, list);
    return list;
}

/* Runs the transfer and says how it went. */
static enum status xfer_run(struct xfer *x, struct error *err)
{
    CURLcode rc = curl_easy_perform(x->a->curl);
    struct api_resp *r = x->r;

    curl_easy_getinfo(x->a->curl, CURLINFO_RESPONSE_CODE, &r->status);
    if (x->too_large)
        return error_set(err, ST_TOO_LARGE, "the answer of %s is larger than %zu bytes",
                         x->a->server, BODY_MAX);
    if (x->idle)
        return error_set(err, ST_UNAVAILABLE, "nothing came from %s for %lld s", x->a->server,
                         (long long)(x->idle_ms / 1000));
    if (rc != CURLE_OK && !x->stopped)
        return error_set(err, ST_UNAVAILABLE, "could not reach %s: %s", x->a->server,
                         curl_easy_strerror(rc));
    if (dynbuf_len(&r->body) > 0 && is_json(r->content_type))
        r->json = json_loadb(dynbuf_ptr(&r->body), dynbuf_len(&r->body), 0, NULL);
    return ST_OK;
}

enum status api_call(struct api *a, const char *method, const char *path, const char *json_body,
                     long timeout_ms, struct api_resp *r, struct error *err)
{
    static const char *const json_hdrs[] = {"Content-Type: application/json",
                                            "Accept: application/json", NULL};
    static const char *const plain_hdrs[] = {"Accept: application/json", NULL};
    struct xfer x = {.a = a, .r = r};
    struct curl_slist *list = xfer_setup(&x, path, json_body ? json_hdrs : plain_hdrs);
    enum status st;

    curl_easy_setopt(a->curl, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(a->curl, CURLOPT_TIMEOUT_MS, timeout_ms);
    if (strcmp(method, "HEAD") == 0)
        curl_easy_setopt(a->curl, CURLOPT_NOBODY, 1L);
    if (json_body || strcmp(method, "POST") == 0) {
        curl_easy_setopt(a->curl, CURLOPT_POSTFIELDS, json_body ? json_body : "");
        curl_easy_setopt(a->curl, CURLOPT_POSTFIELDSIZE, (long)(json_body ? strlen(json_body) : 0));
    }
    st = xfer_run(&x, err);
    curl_slist_free_all(list);
    return st;
}

enum status api_stream(struct api *a, const char *path, const char *last_id, long idle_s,
                       api_data_fn fn, void *arg, struct api_resp *r, struct error *err)
{
    const char *hdrs[3] = {"Accept: text/event-stream", NULL, NULL};
    struct xfer x = {.a = a,
                     .r = r,
                     .fn = fn,
                     .arg = arg,
                     .idle_ms = idle_s * 1000,
                     .last_byte_ms = clock_mono_ms()};
    char *lid = last_id && *last_id ? xasprintf("Last-Event-ID: %s", last_id) : NULL;
    struct curl_slist *list;
    enum status st;

    hdrs[1] = lid;
    list = xfer_setup(&x, path, hdrs);
    /* No limit on the whole exchange (a run may take hours); the server's
     * keep-alives keep bytes coming well within idle_s. */
    curl_easy_setopt(a->curl, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(a->curl, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(a->curl, CURLOPT_XFERINFODATA, &x);
    st = xfer_run(&x, err);
    curl_slist_free_all(list);
    free(lid);
    return st;
}

char *api_escape(const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = strlen(s);
    char *out = xmalloc(3 * n + 1), *o = out;

    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
            strchr("-._~", *p)) {
            *o++ = (char)*p;
        } else {
            *o++ = '%';
            *o++ = hex[*p >> 4];
            *o++ = hex[*p & 15];
        }
    }
    *o = '\0';
    return out;
}
