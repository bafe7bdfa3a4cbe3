/* tests/fuzz/fuzz_route.c — route_find on a request line: the input is
 * "METHOD PATH" (split at the first space; no space means the method is
 * empty), the path as libmicrohttpd hands it over, already unescaped.
 * The answer must agree with the table's patterns (route_patterns) read
 * segment by segment: a path found has the shape of its entry's pattern
 * and the {id} or {name} it holds; a path refused for its method has the
 * shape of some pattern; a path not found has none. */
#include "tests/fuzz/fuzz.h"

#include "common/ids.h"
#include "server/route.h"

/* Fills the stack below us with non-zero bytes, so a value route_find
 * leaves uninitialised shows up as garbage instead of as a lucky zero. */
__attribute__((noinline)) static void dirty_stack(void)
{
    volatile char junk[4096];

    for (size_t i = 0; i < sizeof(junk); i++)
        junk[i] = 'J';
}

/* Whether path has pattern's shape, read segment by segment: the same
 * literal segments, and for "{id}" or "{name}" one segment of the
 * characters of a run id, copied to seg ("" when the pattern has none). */
static bool shape(const char *pattern, const char *path, char seg[130])
{
    seg[0] = '\0';
    for (;;) {
        size_t pn = strcspn(pattern, "/"), n = strcspn(path, "/");
        if ((pn == 4 && strncmp(pattern, "{id}", 4) == 0) ||
            (pn == 6 && strncmp(pattern, "{name}", 6) == 0)) {
            if (n == 0 || n >= 130)
                return false;
            memcpy(seg, path, n);
            seg[n] = '\0';
            if (!run_id_valid(seg))
                return false;
        } else if (pn != n || strncmp(pattern, path, n) != 0) {
            return false;
        }
        pattern += pn;
        path += n;
        if (!*pattern || !*path)
            return !*pattern && !*path;
        pattern++; /* both at a '/' */
        path++;
    }
}

/* Whether any pattern of the table has path's shape. */
static bool known(const char *path)
{
    const char *patterns[64];
    size_t n = route_patterns(patterns, ARRAY_LEN(patterns));
    char seg[130];

    FUZZ_CHECK(n <= ARRAY_LEN(patterns));
    for (size_t i = 0; i < n; i++)
        if (shape(patterns[i], path, seg))
            return true;
    return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *line = fuzz_cstr(data, size);
    char *space = strchr(line, ' ');
    const char *method = space ? line : "", *path = space ? space + 1 : line;
    struct route_hit hit;
    enum route_result rr;
    char seg[130];

    if (space)
        *space = '\0';
    dirty_stack();
    rr = route_find(method, path, &hit);
    switch (rr) {
    case ROUTE_FOUND:
        FUZZ_CHECK(hit.entry != NULL && shape(hit.entry->pattern, path, seg));
        FUZZ_CHECK(strcmp(hit.entry->method, method) == 0 ||
                   (strcmp(method, "HEAD") == 0 && strcmp(hit.entry->method, "GET") == 0));
        /* http_dispatch passes hit.id as path_id whenever hit.id[0] != 0. */
        FUZZ_CHECK(strcmp(hit.id, seg) == 0);
        break;
    case ROUTE_METHOD:
        FUZZ_CHECK(hit.entry == NULL && known(path));
        FUZZ_CHECK(hit.allow[0] != '\0' && memchr(hit.allow, '\0', sizeof(hit.allow)));
        break;
    case ROUTE_NOT_FOUND:
        FUZZ_CHECK(hit.entry == NULL && !known(path));
        break;
    }
    free(line);
    return 0;
}
