/* client/api.h — HTTP calls to an opsrun server, for the client commands.
 * The only file of client/ that includes libcurl (api.c).
 *
 * Every call has a time limit: a request's whole exchange is bounded by its
 * timeout, and a stream by the idle time it may go without a byte (the
 * server sends a keep-alive at least every 15 s). The token, when there is
 * one, goes out as "Authorization: Bearer ..." and nowhere else: never in a
 * message, and redirects are not followed, so it reaches no other host.
 *
 * A struct api holds one libcurl handle for requests (its connection is
 * reused between calls) and is used by one thread at a time; streams run
 * in an api_multi beside it. Calls return ST_OK when the server answered,
 * whatever the HTTP status; ST_UNAVAILABLE, with err naming the server and
 * the reason, when no answer came (or a stream was cut); ST_TOO_LARGE when
 * the answer passed its cap. */
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

/* ---- event streams, several at once on the calling thread ----
 *
 * An api_multi runs any number of streams side by side (one libcurl multi
 * handle, one connection per stream): api_multi_wait moves them all on,
 * calling each stream's fn with its body as it arrives, so no stream waits
 * for another. The api_multi and its streams belong to one thread. */
struct api_multi;
struct api_stream;

/* Borrows a's server and token: a must outlive it. */
struct api_multi *api_multi_new(struct api *a);
/* Frees m; its streams must have been freed first. NULL is a no-op. */
void api_multi_free(struct api_multi *m);

/* Starts GET path as an event stream in m, with Last-Event-ID when last_id
 * is neither NULL nor "", without waiting for it. A 200 answer's body goes
 * to fn as it arrives; any other answer's body is kept (a problem, or
 * nothing for a 204). */
struct api_stream *api_stream_start(struct api_multi *m, const char *path, const char *last_id,
                                    long idle_s, api_data_fn fn, void *arg);
/* Waits at most timeout_ms for any stream of m to move, and moves them. */
void api_multi_wait(struct api_multi *m, long timeout_ms);
/* Whether s is over; then *st says how: ST_OK when the server ended the
 * answer, or fn stopped it; ST_UNAVAILABLE (err says why) when it could not
 * be reached, the connection broke, or idle_s passed without a byte;
 * ST_TOO_LARGE when a kept body passed its cap. */
bool api_stream_over(const struct api_stream *s, enum status *st, struct error *err);
/* The answer of a stream that is over: its status, headers and any body
 * that did not go to fn. */
const struct api_resp *api_stream_resp(const struct api_stream *s);
/* Ends s, if it still runs, and frees it. NULL is a no-op. */
void api_stream_free(struct api_stream *s);

/* s percent-encoded for a query string or a path segment: heap string. */
char *api_escape(const char *s);

#endif
