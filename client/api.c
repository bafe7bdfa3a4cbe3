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
    CURL *curl;
    const struct api *a; /* the server and the token */
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
    curl_easy_getinfo(x->curl, CURLINFO_RESPONSE_CODE, &code);
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

/* The options every transfer has; the caller adds its own. */
static struct curl_slist *xfer_setup(struct xfer *x, const char *path, const char *const *hdrs)
{
    CURL *c = x->curl;
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

/* How a finished transfer went, from libcurl's result rc. */
static enum status xfer_result(struct xfer *x, CURLcode rc, struct error *err)
{
    struct api_resp *r = x->r;

    curl_easy_getinfo(x->curl, CURLINFO_RESPONSE_CODE, &r->status);
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
    struct xfer x = {.curl = a->curl, .a = a, .r = r};
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
    st = xfer_result(&x, curl_easy_perform(a->curl), err);
    curl_slist_free_all(list);
    return st;
}

/* ---- streams ---- */

struct api_multi {
    struct api *a;
    CURLM *multi;
    struct api_stream *running; /* the streams not over yet, linked by next */
};

struct api_stream {
    struct api_multi *m;
    struct api_stream *next;
    struct xfer x;
    struct curl_slist *hdrs;
    struct api_resp r;
    bool over;
    enum status st;
    struct error err;
};

struct api_multi *api_multi_new(struct api *a)
{
    struct api_multi *m = xcalloc(1, sizeof(*m));

    m->a = a;
    m->multi = curl_multi_init();
    if (!m->multi)
        abort(); /* only when out of memory, as for xmalloc */
    return m;
}

void api_multi_free(struct api_multi *m)
{
    if (!m)
        return;
    curl_multi_cleanup(m->multi); /* its streams were freed (api.h) */
    free(m);
}

struct api_stream *api_stream_start(struct api_multi *m, const char *path, const char *last_id,
                                    long idle_s, api_data_fn fn, void *arg)
{
    struct api_stream *s = xcalloc(1, sizeof(*s));
    const char *hdrs[3] = {"Accept: text/event-stream", NULL, NULL};
    char *lid = last_id && *last_id ? xasprintf("Last-Event-ID: %s", last_id) : NULL;

    api_resp_init(&s->r);
    s->m = m;
    s->x = (struct xfer){.curl = curl_easy_init(),
                         .a = m->a,
                         .r = &s->r,
                         .fn = fn,
                         .arg = arg,
                         .idle_ms = idle_s * 1000,
                         .last_byte_ms = clock_mono_ms()};
    if (!s->x.curl)
        abort(); /* only when out of memory */
    hdrs[1] = lid;
    /* No limit on the whole exchange (a run may take hours); the server's
     * keep-alives keep bytes coming well within idle_s. */
    s->hdrs = xfer_setup(&s->x, path, hdrs);
    free(lid); /* libcurl copied the list's strings */
    curl_easy_setopt(s->x.curl, CURLOPT_PRIVATE, s);
    if (curl_multi_add_handle(m->multi, s->x.curl) != CURLM_OK)
        abort(); /* a new easy handle in a multi handle not in a callback */
    s->next = m->running;
    m->running = s;
    return s;
}

/* Takes s off the running list and out of the multi handle. */
static void stream_detach(struct api_stream *s)
{
    for (struct api_stream **p = &s->m->running; *p; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            break;
        }
    s->next = NULL;
    curl_multi_remove_handle(s->m->multi, s->x.curl);
}

static void stream_over(struct api_stream *s, CURLcode rc)
{
    stream_detach(s);
    s->st = xfer_result(&s->x, rc, &s->err);
    s->over = true;
}

/* The streams that went idle_ms without a byte end as broken. libcurl's
 * low-speed limit cannot stand in: a keep-alive of a few bytes every 15 s
 * is below any rate it can check. */
static void idle_check(struct api_multi *m)
{
    int64_t now = clock_mono_ms();
    struct api_stream *s = m->running, *next;

    for (; s; s = next) {
        next = s->next;
        if (now - s->x.last_byte_ms > s->x.idle_ms) {
            s->x.idle = true;
            stream_over(s, CURLE_OPERATION_TIMEDOUT);
        }
    }
}

void api_multi_wait(struct api_multi *m, long timeout_ms)
{
    CURLMsg *msg;
    int running, left;

    /* curl_multi_poll also waits with no stream running: a plain sleep */
    curl_multi_perform(m->multi, &running);
    curl_multi_poll(m->multi, NULL, 0, (int)(timeout_ms > 0 ? timeout_ms : 0), NULL);
    curl_multi_perform(m->multi, &running);
    while ((msg = curl_multi_info_read(m->multi, &left)) != NULL) {
        void *p = NULL;
        struct api_stream *s;
        if (msg->msg != CURLMSG_DONE)
            continue;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &p);
        s = p;
        if (s && !s->over)
            stream_over(s, msg->data.result);
    }
    idle_check(m);
}

bool api_stream_over(const struct api_stream *s, enum status *st, struct error *err)
{
    if (!s->over)
        return false;
    *st = s->st;
    if (s->st != ST_OK)
        error_set(err, s->st, "%s", s->err.message);
    return true;
}

const struct api_resp *api_stream_resp(const struct api_stream *s)
{
    return &s->r;
}

void api_stream_free(struct api_stream *s)
{
    if (!s)
        return;
    if (!s->over)
        stream_detach(s);
    curl_easy_cleanup(s->x.curl);
    curl_slist_free_all(s->hdrs);
    api_resp_cleanup(&s->r);
    free(s);
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
