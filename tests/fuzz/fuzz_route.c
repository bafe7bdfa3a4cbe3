/* tests/fuzz/fuzz_route.c — route_find on a request line: the input is
 * "METHOD PATH" (split at the first space; no space means the method is
 * empty), the path as libmicrohttpd hands it over, already unescaped. */
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

static bool one_of_patterns(const char *path)
{
    static const char *const fixed[] = {"/alerts", "/runs",   "/healthz",
                                        "/livez",  "/readyz", "/metrics"};

    for (size_t i = 0; i < ARRAY_LEN(fixed); i++)
        if (strcmp(path, fixed[i]) == 0)
            return true;
    return strncmp(path, "/runs/", 6) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *line = fuzz_cstr(data, size);
    char *space = strchr(line, ' ');
    const char *method = space ? line : "", *path = space ? space + 1 : line;
    struct route_hit hit;
    enum route_result rr;

    if (space)
        *space = '\0';
    dirty_stack();
    rr = route_find(method, path, &hit);
    switch (rr) {
    case ROUTE_FOUND:
        FUZZ_CHECK(hit.entry != NULL && one_of_patterns(path));
        FUZZ_CHECK(strcmp(hit.entry->method, method) == 0 ||
                   (strcmp(method, "HEAD") == 0 && strcmp(hit.entry->method, "GET") == 0));
        /* http_dispatch passes hit.id as path_id whenever hit.id[0] != 0. */
        if (strstr(hit.entry->pattern, "{id}"))
            FUZZ_CHECK(run_id_valid(hit.id) && strncmp(path + 6, hit.id, strlen(hit.id)) == 0 &&
                       strchr("/", path[6 + strlen(hit.id)]));
        else
            FUZZ_CHECK(hit.id[0] == '\0');
        break;
    case ROUTE_METHOD:
        FUZZ_CHECK(hit.entry == NULL && one_of_patterns(path));
        FUZZ_CHECK(hit.allow[0] != '\0' && memchr(hit.allow, '\0', sizeof(hit.allow)));
        break;
    case ROUTE_NOT_FOUND:
        FUZZ_CHECK(hit.entry == NULL);
        break;
    }
    free(line);
    return 0;
}
