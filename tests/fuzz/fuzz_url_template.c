/* tests/fuzz/fuzz_url_template.c — a request URL template and a value of
 * the run: the input is "TEMPLATE\0VALUE" (no NUL: the value is empty).
 * The value becomes the run's input ({{input:/v}}, {{input:/o/k}},
 * {{input}}), its external id and its poll state ({{state:s}}); the
 * template is used only when remote_check_request accepts it, as at load.
 *
 * Invariants, for every template that loads and every value:
 *   - the expanded URL goes where the template says: libcurl reads the same
 *     scheme, user, password, host and port in it as in the template with
 *     every value of the run replaced by "x" (the authority never changes);
 *   - its path has no "." or ".." segment and it has no line break, unless
 *     the template itself has one;
 *   - a refusal is ST_UNPROCESSABLE or ST_INVALID with a UTF-8 message;
 *   - XML and header expansions of the value keep it text: no markup
 *     character, no line break. */
#include "tests/fuzz/fuzz.h"

#include "engine/actions/remote.h"

#include <curl/curl.h>

#define FUZZ_BASE "https://env.example:8443"
#define FUZZ_TOKEN "t/k?n#@:x"

/* The template with every placeholder but {{env:NAME}} replaced by "x",
 * and {{env:NAME}} by the variable (heap): where the request must go. */
static char *reference(const char *tmpl)
{
    size_t cap = strlen(tmpl) * 2 + 64, n = 0;
    char *out = xmalloc(cap);

    while (*tmpl) {
        const char *b = strncmp(tmpl, "{{", 2) == 0 ? strstr(tmpl + 2, "}}") : NULL;
        const char *val = NULL;
        if (b && b > tmpl + 2) {
            char name[256];
            xsnprintf(name, sizeof(name), "%.*s", (int)(b - tmpl - 2), tmpl + 2);
            val = strncmp(name, "env:", 4) == 0 ? getenv(name + 4) : "x";
        }
        if (val) {
            size_t k = strlen(val);
            if (n + k + 1 > cap)
                out = xrealloc(out, cap = (n + k + 1) * 2);
            memcpy(out + n, val, k);
            n += k;
            tmpl = b + 2;
        } else {
            if (n + 2 > cap)
                out = xrealloc(out, cap *= 2);
            out[n++] = *tmpl++;
        }
    }
    out[n] = '\0';
    return out;
}

static CURLU *parse(const char *url, unsigned flags)
{
    CURLU *u = curl_url();

    if (!u)
        abort();
    if (curl_url_set(u, CURLUPART_URL, url,
                     flags | CURLU_GUESS_SCHEME | CURLU_NON_SUPPORT_SCHEME) != CURLUE_OK) {
        curl_url_cleanup(u);
        return NULL;
    }
    return u;
}

static bool same_part(CURLU *a, CURLU *b, CURLUPart part)
{
    char *x = NULL, *y = NULL;
    bool same;

    (void)curl_url_get(a, part, &x, CURLU_DEFAULT_PORT);
    (void)curl_url_get(b, part, &y, CURLU_DEFAULT_PORT);
    same = (!x && !y) || (x && y && strcmp(x, y) == 0);
    curl_free(x);
    curl_free(y);
    return same;
}

static bool has_dot_segment(const char *path)
{
    for (const char *s = path; s && *s; s = strchr(s, '/')) {
        size_t n;
        s++;
        n = strcspn(s, "/");
        if ((n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
            return true;
    }
    return false;
}

static void check_url(const char *tmpl, const char *url)
{
    static const CURLUPart parts[] = {CURLUPART_SCHEME, CURLUPART_USER, CURLUPART_PASSWORD,
                                      CURLUPART_HOST, CURLUPART_PORT};
    char *ref = reference(tmpl);
    CURLU *got = parse(url, 0), *want = parse(ref, 0), *as_is = parse(url, CURLU_PATH_AS_IS);
    char *path = NULL;

    if (!strpbrk(tmpl, "\r\n"))
        FUZZ_CHECK(!strpbrk(url, "\r\n"));
    if (got && want)
        for (size_t i = 0; i < ARRAY_LEN(parts); i++)
            FUZZ_CHECK(same_part(got, want, parts[i]));
    if (as_is && curl_url_get(as_is, CURLUPART_PATH, &path, 0) == CURLUE_OK)
        FUZZ_CHECK(!has_dot_segment(path));
    curl_free(path);
    curl_url_cleanup(got);
    curl_url_cleanup(want);
    curl_url_cleanup(as_is);
    free(ref);
}

/* The value as text in XML and in a header: never markup, never a line. */
static void check_text(const struct remote_vars *v)
{
    struct error err = {0};
    char *out = NULL;
    enum status st = remote_expand_text("{{input:/v}}", v, REMOTE_XML, &out, &err);

    if (st == ST_OK)
        FUZZ_CHECK(!strpbrk(out, "<>\"'"));
    else
        FUZZ_CHECK(st == ST_UNPROCESSABLE && fuzz_utf8(err.message));
    free(out);
    out = NULL;
    st = remote_expand_text("{{input:/v}}", v, REMOTE_HEADER, &out, &err);
    if (st == ST_OK)
        FUZZ_CHECK(!strpbrk(out, "\r\n"));
    else
        FUZZ_CHECK(st == ST_UNPROCESSABLE && fuzz_utf8(err.message));
    free(out);
}

/* The value as a JSON string: as it is when it is UTF-8, else scrubbed up
 * to its first NUL. */
static json_t *value_of(const uint8_t *p, size_t n)
{
    json_t *j = json_stringn((const char *)p, n);
    char *s;

    if (j)
        return j;
    s = fuzz_cstr(p, n);
    utf8_scrub(s);
    j = json_string(s);
    free(s);
    if (!j)
        abort();
    return j;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, '\0', size);
    size_t tlen = nul ? (size_t)(nul - data) : size;
    char *tmpl = fuzz_cstr(data, tlen), *url = NULL;
    json_t *val = value_of(nul ? nul + 1 : data + size, nul ? size - tlen - 1 : 0);
    json_t *input = json_pack("{s:O, s:i, s:{s:O}}", "v", val, "n", 7, "o", "k", val);
    json_t *state = json_pack("{s:O}", "s", val), *req = json_pack("{s:s?}", "url", tmpl);
    struct remote_vars v = {"run-1", "acme", json_string_value(val), 1, input, state};
    struct error err = {0};
    enum status st;

    setenv("FUZZ_BASE", FUZZ_BASE, 1);
    setenv("FUZZ_TOKEN", FUZZ_TOKEN, 1);
    if (req && json_object_get(req, "url") && remote_check_request(req, "f", true, &err) == ST_OK) {
        st = remote_expand_url(tmpl, &v, &url, &err);
        if (st == ST_OK)
            check_url(tmpl, url);
        else
            FUZZ_CHECK((st == ST_UNPROCESSABLE || st == ST_INVALID) && url == NULL &&
                       fuzz_utf8(err.message));
        free(url);
    }
    check_text(&v);
    json_decref(req);
    json_decref(state);
    json_decref(input);
    json_decref(val);
    free(tmpl);
    return 0;
}
