/* server/route.h — the route table: method + path pattern → handler.
 * Patterns are literal segments, "{id}" (a run id) and "{name}" (a file of
 * the dashboard or a schedule, of the characters of a run id). Pure and
 * reentrant. */
#ifndef OPSRUN_SERVER_ROUTE_H
#define OPSRUN_SERVER_ROUTE_H

#include "handlers/auth.h"
#include "handlers/handlers.h"

enum route_result { ROUTE_FOUND, ROUTE_NOT_FOUND, ROUTE_METHOD };

/* The body a route reads: none (false), a JSON object (true), or a JSON
 * object or nothing at all. */
enum route_body { BODY_NONE = 0, BODY_JSON = 1, BODY_JSON_OPTIONAL = 2 };

struct route_entry {
    const char *method;
    const char *pattern;
    handler_fn fn;             /* NULL for a stream */
    enum route_body json_body; /* written false or true in the table, or BODY_JSON_OPTIONAL */
    bool stream;               /* a server-sent event stream (live/sse.h) */
    enum auth_need need;
};

struct route_hit {
    const struct route_entry *entry;
    char id[130];   /* the {id} or {name} segment, when the pattern has one */
    char allow[64]; /* ROUTE_METHOD: the Allow header value */
};

enum route_result route_find(const char *method, const char *path, struct route_hit *m);
/* The table's patterns in order (a path with several methods repeats),
 * at most cap of them into out (static strings); returns how many the
 * table has. For the route label of the HTTP metrics. */
size_t route_patterns(const char **out, size_t cap);

#endif
