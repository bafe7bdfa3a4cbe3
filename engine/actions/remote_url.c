/* engine/actions/remote_url.c — the URL of a request (engine/actions/remote.h):
 * its template checked at load, expanded with a run's values that cannot
 * change where it goes, two URLs compared by their authority as libcurl
 * reads them, and a reference in an answer resolved against the URL
 * called, by libcurl's URL API. */
#include "engine/actions/remote_internal.h"

#include <curl/curl.h>
#include <stdlib.h>
#include <string.h>

/* The length of a URL template's scheme and authority: up to the first "/",
 * "?" or "#" after "://", outside placeholders (from the start when the
 * template begins with a placeholder instead of a scheme). */
static size_t url_origin_len(const char *tmpl)
{
    const char *p = remote_literal_find(tmpl, "/?#");

    if (p > tmpl && p[-1] == ':' && p[0] == '/' && p[1] == '/')
        p = remote_literal_find(p + 2, "/?#");
    return (size_t)(p - tmpl);
}

/* Appends "/" and one path segment (n bytes of seg, without its slash). A
 * segment that the run's values made "." or "..", or left empty, is
 * refused: libcurl would remove a dot segment together with the one before
 * it, and an empty one names the collection instead of one of its items. */
static enum status add_segment(struct dynbuf *buf, const char *seg, size_t n,
                               const struct remote_vars *v, struct error *err)
{
    char *t = xstrndup(seg, n);
    bool run_values = false;
    size_t at;
    enum status st;

    if (dynbuf_add(buf, "/", 1) != ST_OK) {
        free(t);
        return remote_too_large(err);
    }
    at = dynbuf_len(buf);
    st = remote_expand_into(buf, t, v, REMOTE_URL_PATH, &run_values, err);
    if (st == ST_OK && run_values) {
        const char *out = dynbuf_ptr(buf) + at;
        if (strcmp(out, ".") == 0 || strcmp(out, "..") == 0)
            st = error_set(err, ST_UNPROCESSABLE,
                           "unsafe value in the URL path segment \"%.100s\": it makes the "
                           "segment \"%s\"",
                           t, out);
        else if (*out == '\0')
            st = error_set(err, ST_UNPROCESSABLE,
                           "unsafe value in the URL path segment \"%.100s\": it leaves the "
                           "segment empty",
                           t);
    }
    free(t);
    return st;
}

bool remote_same_authority(const char *origin, const char *url)
{
    static const CURLUPart parts[] = {CURLUPART_SCHEME,  CURLUPART_USER, CURLUPART_PASSWORD,
                                      CURLUPART_OPTIONS, CURLUPART_HOST, CURLUPART_ZONEID,
                                      CURLUPART_PORT};
    const unsigned flags = CURLU_GUESS_SCHEME | CURLU_NON_SUPPORT_SCHEME;
    CURLU *a = curl_url(), *b = curl_url();
    bool same = true;

    if (!a || !b)
        abort();
    if (curl_url_set(b, CURLUPART_URL, url, flags) != CURLUE_OK)
        goto out;
    if (curl_url_set(a, CURLUPART_URL, origin, flags) != CURLUE_OK) {
        same = false;
        goto out;
    }
    for (size_t i = 0; i < ARRAY_LEN(parts) && same; i++) {
        char *x = NULL, *y = NULL;
        (void)curl_url_get(a, parts[i], &x, CURLU_DEFAULT_PORT);
        (void)curl_url_get(b, parts[i], &y, CURLU_DEFAULT_PORT);
        same = (!x && !y) || (x && y && strcmp(x, y) == 0);
        curl_free(x);
        curl_free(y);
    }
out:
    curl_url_cleanup(a);
    curl_url_cleanup(b);
    return same;
}

char *remote_url_resolve(const char *base, const char *ref)
{
    CURLU *u = curl_url();
    char *scheme = NULL, *got = NULL, *out = NULL;

    if (!u)
        abort();
    if (curl_url_set(u, CURLUPART_URL, base, 0) == CURLUE_OK &&
        curl_url_set(u, CURLUPART_URL, ref, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
        (strcmp(scheme, "http") == 0 || strcmp(scheme, "https") == 0) &&
        curl_url_get(u, CURLUPART_URL, &got, 0) == CURLUE_OK)
        out = xstrdup(got);
    curl_free(scheme);
    curl_free(got);
    curl_url_cleanup(u);
    return out;
}

char *remote_url_for_log(const char *url)
{
    static const CURLUPart gone[] = {CURLUPART_USER, CURLUPART_PASSWORD, CURLUPART_OPTIONS,
                                     CURLUPART_QUERY, CURLUPART_FRAGMENT};
    CURLU *u = curl_url();
    char *got = NULL, *out;

    if (!u)
        abort();
    if (curl_url_set(u, CURLUPART_URL, url, CURLU_NON_SUPPORT_SCHEME) == CURLUE_OK) {
        for (size_t i = 0; i < ARRAY_LEN(gone); i++)
            (void)curl_url_set(u, gone[i], NULL, 0);
        (void)curl_url_get(u, CURLUPART_URL, &got, 0);
    }
    out = xstrdup(got ? got : "<a URL that could not be read>");
    curl_free(got);
    curl_url_cleanup(u);
    return out;
}

enum status remote_expand_url(const char *tmpl, const struct remote_vars *v, char **out,
                              struct error *err)
{
    size_t olen = url_origin_len(tmpl), at;
    const char *seg = tmpl + olen, *query = remote_literal_find(seg, "?#");
    char *origin = xstrndup(tmpl, olen);
    struct dynbuf buf;
    enum status st = ST_OK;

    *out = NULL;
    dynbuf_init(&buf, REMOTE_EXPAND_MAX);
    if (!remote_template_operator_only(origin))
        st = error_set(err, ST_INVALID,
                       "could not expand the URL: only {{env:...}} placeholders may stand before "
                       "its path");
    if (st == ST_OK)
        st = remote_expand_into(&buf, origin, v, REMOTE_RAW, NULL, err);
    at = dynbuf_len(&buf);
    while (st == ST_OK && seg < query) {
        const char *end = remote_literal_find(seg + 1, "/?#");
        st = add_segment(&buf, seg + 1, (size_t)(end - seg - 1), v, err);
        seg = end;
    }
    if (st == ST_OK)
        st = remote_expand_into(&buf, query, v, REMOTE_URL, NULL, err);
    free(origin);
    if (st == ST_OK) {
        const char *url = dynbuf_ptr(&buf) ? dynbuf_ptr(&buf) : "";
        origin = xstrndup(url, at);
        if (!remote_same_authority(origin, url))
            st = error_set(err, ST_UNPROCESSABLE,
                           "unsafe value in the URL: it would change the scheme, host or port");
        free(origin);
    }
    if (st == ST_OK)
        *out = dynbuf_take(&buf);
    dynbuf_free(&buf);
    return st;
}

/* Whether a URL template's path has a "." or ".." segment of its own. */
static bool url_has_dot_segment(const char *tmpl)
{
    const char *seg = tmpl + url_origin_len(tmpl), *query = remote_literal_find(seg, "?#");

    while (seg < query) {
        const char *end = remote_literal_find(seg + 1, "/?#");
        size_t n = (size_t)(end - seg - 1);
        if ((n == 1 && seg[1] == '.') || (n == 2 && seg[1] == '.' && seg[2] == '.'))
            return true;
        seg = end;
    }
    return false;
}

/* No value of the run before the path, so that none can choose where the
 * request goes. */
enum status remote_rule_url(const struct param *p, struct error *err)
{
    const char *s = json_string_value(p->v);
    char *origin;
    bool fixed;

    if (!s || (strncmp(s, "http://", 7) != 0 && strncmp(s, "https://", 8) != 0 &&
               strncmp(s, "{{env:", 6) != 0))
        return error_set(err, ST_INVALID, "invalid \"%s\": expected an http:// or https:// URL",
                         p->path);
    if (remote_check_template(s, p->path, err) != ST_OK)
        return ST_INVALID;
    origin = xstrndup(s, url_origin_len(s));
    fixed = remote_template_operator_only(origin);
    free(origin);
    if (!fixed)
        return error_set(err, ST_INVALID,
                         "invalid \"%s\": only {{env:...}} placeholders may stand before the path "
                         "(in the scheme, host or port)",
                         p->path);
    if (url_has_dot_segment(s))
        return error_set(err, ST_INVALID, "invalid \"%s\": a \".\" or \"..\" path segment",
                         p->path);
    return ST_OK;
}
