/* client/api.h — HTTP calls to an opsrun server, for the client commands.
 * The only file of client/ that includes libcurl (api.c).
 *
 * Every call has a time limit: a request's whole exchange is bounded by its
 * timeout, and a stream by the idle time it may go without a byte (the
 * server sends a keep-alive at least every 15 s). The token, when there is
 * one, goes out as "Authorization: Bearer ..." and nowhere else: never in a
 * message, and redirects are not followed, so it reaches no other host.
 *
 * A struct api holds one libcurl handle (its connection is reused between
 * calls) and is used by one thread at a time. Calls return ST_OK when the
 * server answered, whatever the HTTP status; ST_UNAVAILABLE, with err
 * naming the server and the reason, when no answer came (or a stream was
 * cut); ST_TOO_LARGE when the answer passed its cap. */
#ifndef OPSRUN_CLIENT_API_H
#define OPSRUN_CLIENT_API_H

#include "common/common.h"
#include "common/dynbuf.h"

#include <jansson.h>

/* Once per process, before any other call, and its counterpart at exit. */
enum status api_global_init(struct error *err) WUR;
void api_global_cleanup(void);

struct api;

/* server: "http(s)://host[:port][/prefix]" (a trailing slash is dropped);
 * token: NULL for none. Both are copied. */
struct api *api_new(const char *server, const char *token);
void api_free(struct api *a); /* NULL is a no-op */
const char *api_server(const struct api *a);

struct api_resp {
    long status; /* the HTTP status; 0 when no answer came */
    struct dynbuf body;
    json_t *json; /* the body parsed, when it is JSON; owned */
    char content_type[128];
    char location[256];
    long retry_after_s; /* Retry-After in seconds; -1 when absent */
};
void api_resp_init(struct api_resp *r);
void api_resp_cleanup(struct api_resp *r);

/* One request to path ("/runs?limit=5"), with a JSON body (NULL: none),
 * bounded by timeout_ms. r must be initialised. */
enum status api_call(struct api *a, const char *method, const char *path, const char *json_body,
                     long timeout_ms, struct api_resp *r, struct error *err) WUR;

/* Called with each piece of a 200 stream's body; false stops the stream. */
typedef bool (*api_data_fn)(void *arg, const char *buf, size_t n);

/* GET path as an event stream, with Last-Event-ID when last_id is neither
 * NULL nor "". A 200 answer's body goes to fn as it arrives; any other
 * answer's body is kept in r (a problem, or nothing for a 204). ST_OK when
 * the server ended the answer, or fn stopped it; ST_UNAVAILABLE when it
 * could not be reached, the connection broke, or idle_s passed without a
 * byte. */
enum status api_stream(struct api *a, const char *path, const char *last_id, long idle_s,
                       api_data_fn fn, void *arg, struct api_resp *r, struct error *err) WUR;

/* s percent-encoded for a query string or a path segment: heap string. */
char *api_escape(const char *s);

#endif
