/* handlers/web.c — GET / and GET /web/{name}: the web dashboard, whose files
 * (web/) are embedded at build time by scripts/embed_web.cmake. The files
 * hold no data, so they need no token; the page asks for one itself when
 * the API answers 401.
 *
 * Every file is answered with its SHA-256 as a strong ETag and
 * Cache-Control: no-cache, so a browser keeps a copy but asks each time
 * whether it is still current (the server answers 304 to a matching
 * If-None-Match). The file names carry no version, so a longer lifetime
 * would let a browser mix the files of two builds after an upgrade. */
#include "handlers/handlers.h"

#include <string.h>

/* The generated table (scripts/embed_web.cmake). */
struct web_file {
    const char *path;
    const char *data;
    size_t len;
    const char *sha256;
};
extern const struct web_file web_files[];
extern const size_t web_files_len;

/* The page's own files and nothing else: no inline script or style, no
 * other origin, no frames, no plugins. */
#define WEB_CSP                                                                                    \
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "                    \
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

static const struct {
    const char *ext;
    const char *type;
} web_types[] = {
    {".html", "text/html; charset=utf-8"}, {".js", "text/javascript; charset=utf-8"},
    {".css", "text/css; charset=utf-8"},   {".svg", "image/svg+xml"},
    {".txt", "text/plain; charset=utf-8"},
};

const char *web_content_type(const char *name)
{
    size_t n = strlen(name);

    for (size_t i = 0; i < ARRAY_LEN(web_types); i++) {
        size_t e = strlen(web_types[i].ext);
        if (n > e && strcmp(name + n - e, web_types[i].ext) == 0)
            return web_types[i].type;
    }
    return NULL;
}

static const struct web_file *web_find(const char *name)
{
    for (size_t i = 0; i < web_files_len; i++)
        if (strcmp(web_files[i].path, name) == 0)
            return &web_files[i];
    return NULL;
}

enum status handle_web_get(const struct hctx *hc, const struct request *rq, struct reply *rp)
{
    const char *name = rq->path_id ? rq->path_id : "index.html";
    const struct web_file *f = web_find(name);
    const char *type = web_content_type(name);
    struct error err = {0};
    char etag[72];

    (void)hc;
    if (!f || !type) {
        error_set(&err, ST_NOT_FOUND, "no resource at \"%.200s\"", rq->path);
        reply_error(rp, ST_NOT_FOUND, &err);
        return ST_NOT_FOUND;
    }
    rp->http_status = 200;
    rp->text = xmalloc(f->len + 1);
    memcpy(rp->text, f->data, f->len + 1);
    rp->text_type = type;
    xsnprintf(etag, sizeof(etag), "\"%.64s\"", f->sha256);
    reply_header(rp, "ETag", etag);
    reply_header(rp, "Cache-Control", "no-cache");
    reply_header(rp, "Content-Security-Policy", WEB_CSP);
    reply_header(rp, "X-Content-Type-Options", "nosniff");
    reply_header(rp, "Referrer-Policy", "no-referrer");
    return ST_OK;
}
