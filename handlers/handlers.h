/* handlers/handlers.h — the HTTP resources: parse, validate, act, render.
 * No libmicrohttpd and no libpq here, so handlers are unit-testable; the
 * server hands them a parsed request and turns the reply into a response.
 * Handlers run on HTTP threads and are reentrant.
 *
 * One header for the resources the route table names (server/route.c).
 * reply.c builds every reply (reply_*, status_http); each resource's
 * handlers, and the pure parts their unit tests call, are in the file of
 * its name: alerts.c, runs.c (runs, events, completions, the query
 * parsers), runs_retry.c, logs.c (a run's log), approvals.c, bulk.c, schedules.c (schedules and
 * rate limits), admin.c (reloading the configuration), health.c, openapi.c and web.c. A file's
 * other callers have a header of its own (alertmanager.h, auth.h, bulk.h, intake.h, labels.h,
 * metrics.h, schedules.h, submitq.h). */
#ifndef OPSRUN_HANDLERS_H
#define OPSRUN_HANDLERS_H

#include "common/common.h"
#include "config/config.h"
#include "store/logs.h"
#include "store/runs.h"

#include <jansson.h>
#include <stdatomic.h>

struct bulk;
struct db_pool;
struct engine;
struct hub;
struct limits;
struct cfg_live;
struct metrics;
struct reloads;
struct submitq;

/* What every handler may use; lives as long as the server. A request's
 * handlers get a copy whose cfg is the configuration held for that request
 * (config/live.h), the same from its first call to its answer. */
struct hctx {
    const struct config *cfg;
    /* The running configuration, reloaded in place; NULL: cfg is fixed. */
    struct cfg_live *live;
    /* POST /admin/reload and its figures (handlers/admin.h); NULL: none. */
    struct reloads *reloads;
    struct db_pool *pool;
    struct engine *engine; /* NULL in tests that need no engine */
    struct hub *hub;       /* live events; NULL: no streams and no long-polls */
    struct limits *limits; /* per-client limits (common/limits.h); NULL: none */
    const _Atomic bool *draining;
    struct metrics *metrics; /* what GET /metrics serves (common/metrics.h); NULL: none */
    /* Shared commits for submissions (handlers/submitq.h); NULL: each
     * request writes its own on its HTTP thread. */
    struct submitq *submitq;
    /* The runner of bulk actions (handlers/bulk.h); NULL: each runs on its
     * HTTP thread. */
    struct bulk *bulk;
};

struct request {
    const char *method;
    const char *path;
    const char *path_id; /* the {id} segment, or NULL */
    /* Who asks (handlers/auth.h decided): the tenant the request works in,
     * which its submissions go to; whether its reads reach every tenant
     * (an admin token without ?tenant=); and the initiator its submissions
     * record (the token's name, or "anonymous"). */
    const char *tenant;
    bool all_tenants;
    const char *initiator;
    json_t *body;       /* parsed JSON body, or NULL (borrowed) */
    const char *accept; /* the Accept header, or NULL (borrowed) */
    /* Query parameter lookup (NULL when absent). */
    const char *(*query)(const struct request *rq, const char *key);
    void *query_arg;
};

#define REPLY_HEADERS_MAX 8
/* The WWW-Authenticate challenge of every 401 (RFC 6750). */
#define AUTH_CHALLENGE "Bearer realm=\"opsrun\""
#define WAIT_MAX_S 60
struct reply;
typedef enum status (*handler_fn)(const struct hctx *hc, const struct request *rq,
                                  struct reply *rp);

/* Work a handler hands back instead of an answer, so that no HTTP thread
 * waits for it: the server parks the connection, calls start, and once
 * done has been called calls finish on one of its own threads to fill the
 * reply, then free. Without start (a request that ended first), only free. */
struct deferred {
    /* done(arg) is called exactly once, from any thread, possibly this one
     * before start returns. */
    void (*start)(struct deferred *d, const struct hctx *hc, void (*done)(void *arg), void *arg);
    void (*finish)(struct deferred *d, const struct hctx *hc, const struct request *rq,
                   struct reply *rp);
    void (*free)(struct deferred *d, const struct hctx *hc);
};

struct reply {
    unsigned http_status;
    json_t *body;          /* owned; NULL = no body */
    bool problem;          /* application/problem+json */
    char *text;            /* owned; a text/plain body instead of JSON */
    const char *text_type; /* content type of text */
    struct {
        char name[32];
        char value[512];
    } headers[REPLY_HEADERS_MAX];
    unsigned nheaders;
    char run_id[130]; /* for the access log */
    /* A long-poll (?wait=S): when wait_ms > 0 the server holds the answer
     * until run wait_run_id is completed or wait_ms has passed, then calls
     * refresh to bring the answer up to date. refresh sets wait_ms to 0 once
     * the run is completed (or cannot be read). */
    int64_t wait_ms;
    char wait_tenant[65];
    char wait_run_id[130];
    handler_fn refresh;
    /* Set instead of an answer: see struct deferred. Owned; reply_cleanup
     * frees one the server did not take. */
    struct deferred *deferred;
    const struct hctx *deferred_hc;
};

void reply_init(struct reply *rp);
void reply_cleanup(struct reply *rp);
/* Sets a header, replacing one of the same name (dropped past REPLY_HEADERS_MAX). */
void reply_header(struct reply *rp, const char *name, const char *value);
/* Takes body. */
void reply_json_take(struct reply *rp, unsigned http_status, json_t *body);
/* Every problem+json body (RFC 9457) is built here: {"type": "about:blank",
 * "title", "status", "detail"} for st's HTTP status and title, then the
 * members of extra in their order (taken; NULL for none), which cannot
 * replace those four. A 503 also gets Retry-After. */
void reply_problem_take(struct reply *rp, enum status st, const char *detail, json_t *extra);
/* The one place that maps a status and err to a problem: err's message as
 * detail (but never the internals of a 500 or 503) and errors[] from its
 * fields. */
void reply_error(struct reply *rp, enum status st, const struct error *err);
/* err's fields as an errors[] array of {"field", "message"}: new ref. */
json_t *reply_error_fields(const struct error *err);
unsigned status_http(enum status st);

enum status handle_alerts_create(const struct hctx *hc, const struct request *rq, struct reply *rp);
enum status handle_runs_get(const struct hctx *hc, const struct request *rq, struct reply *rp);
enum status handle_runs_list(const struct hctx *hc, const struct request *rq, struct reply *rp);
enum status handle_runs_cancel(const struct hctx *hc, const struct request *rq, struct reply *rp);
enum status handle_runs_events(const struct hctx *hc, const struct request *rq, struct reply *rp);
/* The tenant that holds run id for this request (copied to out): its own
 * tenant, or, when its reads reach every tenant, the one tenant that has
 * a run with this id. ST_NOT_FOUND as for an unknown run; ST_CONFLICT when
 * several tenants have one (?tenant= then chooses). For the stream of one
 * run, which the server opens itself. */
enum status handle_runs_locate(const struct hctx *hc, const struct request *rq, const char *id,
                               char out[65], struct error *err) WUR;
enum status handle_runs_retry(const struct hctx *hc, const struct request *rq, struct reply *rp);
/* handlers/logs.c: GET /runs/{id}/logs (the stream is the server's). */
enum status handle_runs_logs(const struct hctx *hc, const struct request *rq, struct reply *rp);
/* handlers/approvals.c */
enum status handle_runs_approve(const struct hctx *hc, const struct request *rq, struct reply *rp);
enum status handle_runs_reject(const struct hctx *hc, const struct request *rq, struct reply *rp);
/* handlers/bulk.c: POST /runs/cancel and POST /runs/retry. */
enum status handle_runs_bulk_cancel(const struct hctx *hc, const struct request *rq,
                                    struct reply *rp);
enum status handle_runs_bulk_retry(const struct hctx *hc, const struct request *rq,
                                   struct reply *rp);
enum status handle_runs_completions(const struct hctx *hc, const struct request *rq,
                                    struct reply *rp);
/* handlers/schedules.c */
enum status handle_schedules_list(const struct hctx *hc, const struct request *rq,
                                  struct reply *rp);
enum status handle_schedules_get(const struct hctx *hc, const struct request *rq, struct reply *rp);
enum status handle_schedules_pause(const struct hctx *hc, const struct request *rq,
                                   struct reply *rp);
enum status handle_schedules_resume(const struct hctx *hc, const struct request *rq,
                                    struct reply *rp);
enum status handle_schedules_trigger(const struct hctx *hc, const struct request *rq,
                                     struct reply *rp);
enum status handle_rate_limits_list(const struct hctx *hc, const struct request *rq,
                                    struct reply *rp);
/* handlers/admin.c: POST /admin/reload. */
enum status handle_admin_reload(const struct hctx *hc, const struct request *rq, struct reply *rp);
enum status handle_health_healthz(const struct hctx *hc, const struct request *rq,
                                  struct reply *rp);
enum status handle_health_livez(const struct hctx *hc, const struct request *rq, struct reply *rp);
enum status handle_health_readyz(const struct hctx *hc, const struct request *rq, struct reply *rp);
/* GET /openapi.yaml: the embedded API description, application/yaml. */
enum status handle_openapi_get(const struct hctx *hc, const struct request *rq, struct reply *rp);
/* GET / (index.html) and GET /web/{name}: the embedded dashboard, with an
 * ETag, Cache-Control: no-cache and a Content-Security-Policy. */
enum status handle_web_get(const struct hctx *hc, const struct request *rq, struct reply *rp);
/* The Content-Type the dashboard serves a file name with; NULL for a kind
 * of file it does not serve. */
const char *web_content_type(const char *name);
/* The value of the reply's header name (case-insensitive), or NULL. */
const char *reply_header_get(const struct reply *rp, const char *name);

/* ---- pure parts, exposed for unit tests ---- */

/* The most submissions one array body of POST /alerts may hold. */
#define ALERTS_BATCH_MAX 1000

/* A validated generic submission. Strings borrow from the body. */
struct submission {
    const char *alert_type, *run_id, *dedupe_key, *run_at;
    const json_t *data, *labels;
    int priority;
    int64_t run_at_us;
    bool has_run_at;
};
/* Validates a generic POST /alerts body; field problems go to err->fields. */
enum status alerts_parse_generic(const json_t *body, struct submission *out, struct error *err) WUR;
/* The long-poll parameter "wait": whole seconds 0..WAIT_MAX_S, 0 when
 * absent; *wait_ms gets milliseconds. */
enum status parse_wait(const struct request *rq, int64_t *wait_ms, struct error *err) WUR;
/* GET /stream's filters "type" and "parent_id" (NULL when absent) and
 * "status" (*has_status false when absent). */
enum status stream_parse_filter(const struct request *rq, const char **type, const char **parent_id,
                                bool *has_status, enum run_status *status, struct error *err) WUR;
/* GET /runs/{id}/logs's query: attempt, after, limit into q (tenant and
 * run_id left alone), and whether the answer is plain text (?format=text,
 * or an Accept header naming text/plain and not JSON); field problems go
 * to err->fields. */
enum status logs_parse_query(const struct request *rq, struct log_query *q, bool *text,
                             struct error *err) WUR;
/* Validates GET /runs query parameters into f. */
enum status runs_parse_filter(const struct request *rq, struct run_filter *f,
                              struct error *err) WUR;
/* The optional body of POST /runs/{id}/approve and /reject: none (NULL),
 * or {"comment": string of at most 1000 characters}; *comment borrows
 * from body, NULL for none (an empty comment too). */
enum status approvals_parse_body(const json_t *body, const char **comment, struct error *err) WUR;

#endif
