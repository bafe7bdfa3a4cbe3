/* engine/actions/remote.h — HTTP requests described in a run type's
 * params, as the remote actions (http, rest_job, soap_job, their
 * preparation steps) make them: templates with secrets from the
 * environment (remote_template.c), URLs whose destination no value of a run
 * can change (remote_url.c), descriptions checked at load
 * (remote_request.c) and a bounded libcurl call (remote_call.c). Params
 * name values inside answers and inputs with JSON pointers
 * (common/jsonptr.h). What the job actions share on top is remote_job.h.
 *
 * A request description is a JSON object:
 *   {"method": "POST", "url": "https://jobs/api/jobs/{{external_id}}",
 *    "headers": {"Authorization": "Bearer {{env:JOBS_TOKEN}}"},
 *    "body": <a JSON template>  |  "body_text": "<a text template>",
 *    "content_type": "application/json", "timeout_ms": 10000}
 * Placeholders: {{run_id}}, {{attempt}}, {{external_id}}, {{tenant}},
 * {{input}} (the run's input as JSON), {{input:/json/pointer}} (one value of
 * it), {{state:NAME}} (a value the action kept in the run's poll state, such
 * as an id soap_job captured from its start answer), {{env:NAME}} (an
 * environment variable: the only way to put a secret in a request). In the URL every value is
 * percent-encoded; in a JSON body a string that is exactly one placeholder becomes that value (so
 * "{{input}}" is the input object), and placeholders inside longer strings
 * are spliced in as text; in body_text (XML for SOAP) values are XML-escaped,
 * or inserted as they are with "xml_escape": false.
 *
 * Untrusted input: every value but {{env:NAME}} is the run's, and a client
 * chooses it (the input, the run id) or a remote does (the external id,
 * the poll state). Such a value can never choose where a request goes, nor
 * add a header or markup:
 *   - URL: no value of the run before the path (checked at load); in a
 *     path segment it is percent-encoded including "/", and refused when
 *     it is "." or "..", holds such a part between slashes, or leaves the
 *     segment empty; anywhere in the URL a line break is refused; the
 *     expanded URL must have the template's scheme, host and port;
 *   - header: a control character (other than tab) is refused;
 *   - JSON body: always a JSON value or part of a JSON string;
 *   - body_text: XML-escaped, a control character XML does not allow is
 *     refused; "xml_escape": false loads only when body_text has no value
 *     of the run;
 *   - anywhere as text: a string with a NUL inside is refused.
 * A refused value makes the request fail to build with ST_UNPROCESSABLE.
 *
 * Secrets never leave the request: errors and logs name the URL template,
 * never the expanded URL, headers or body.
 *
 * Thread-safety: every function is reentrant; curl_global_init must have run
 * (main does it). */
#ifndef OPSRUN_ENGINE_REMOTE_H
#define OPSRUN_ENGINE_REMOTE_H

#include "common/common.h"

#include "engine/actions/action.h"
#include "engine/actions/params.h"

#include <jansson.h>

#define REMOTE_TIMEOUT_DEFAULT_MS 10000
#define REMOTE_TIMEOUT_MAX_MS 600000
#define REMOTE_RESPONSE_MAX (4 * 1024 * 1024)
/* The longest pause a Retry-After answer may ask for. */
#define REMOTE_RETRY_AFTER_MAX_S 86400

/* ---- templates (remote_template.c, remote_url.c) ---- */

/* The values placeholders take. */
struct remote_vars {
    const char *run_id, *tenant, *external_id; /* external_id may be NULL */
    int attempt;
    const json_t *input;
    const json_t *state; /* the run's poll state, for {{state:NAME}}; may be NULL */
};
/* The placeholder values of a run. */
struct remote_vars remote_vars_of(const struct run_ctx *rc);

/* Checks a template string's placeholders at load (known names, every
 * {{env:NAME}} set); errors name path. */
enum status remote_check_template(const char *tmpl, const char *path, struct error *err) WUR;

/* Whether every placeholder of tmpl is {{env:NAME}}: no value of a run can
 * change its expansion. */
bool remote_template_operator_only(const char *tmpl);
/* The values of every {{env:NAME}} placeholder in the strings of v (a run
 * type's params, at any depth), each once, empty ones left out, and each
 * also percent-encoded and XML-escaped as a request carries it where that
 * differs: what the run's log masks. *out is a heap array of heap strings
 * (free each, then it); returns their number. */
size_t remote_env_values(const json_t *v, char ***out);

/* Template expansion (exposed for tests and exec). On ST_OK *out is a heap
 * string, never NULL; otherwise it is NULL. ST_INVALID for a placeholder
 * with no value, a malformed template or a result longer than 512 MiB;
 * ST_UNPROCESSABLE for a value of the run refused where mode puts it (a
 * string with a NUL, anything mode names below). */
enum status remote_expand_text(const char *tmpl, const struct remote_vars *v, int mode, char **out,
                               struct error *err) WUR;
#define REMOTE_RAW 0    /* as it is */
#define REMOTE_URL 1    /* percent-encode every value; a run's with a line break is refused */
#define REMOTE_XML 2    /* XML-escape every value; a run's XML does not allow is refused */
#define REMOTE_HEADER 3 /* as it is; a run's with a control character is refused */
/* A request's URL, with the protections above: an {{env:NAME}} before the
 * path goes in as it is, every other value is percent-encoded. ST_INVALID
 * for a template with a run's value before its path. */
enum status remote_expand_url(const char *tmpl, const struct remote_vars *v, char **out,
                              struct error *err) WUR;
enum status remote_expand_json(const json_t *tmpl, const struct remote_vars *v, json_t **out,
                               struct error *err) WUR;

/* Whether url goes where origin (a URL: its scheme and authority count)
 * says: the same scheme, user, password, options, host, zone and port, as
 * libcurl reads them. A url libcurl cannot read is never sent, so it passes
 * here. */
bool remote_same_authority(const char *origin, const char *url);
/* ref (a Location header or a status URL from an answer: absolute, or
 * relative in any of the forms RFC 3986 allows) resolved against base, the
 * URL that was called, by libcurl's URL API: a new string (free), or NULL
 * when the result is not an http or https URL libcurl can read. */
char *remote_url_resolve(const char *base, const char *ref);
/* url as a run's log shows it: without its user, password, query and
 * fragment (where credentials and tokens travel); one libcurl cannot read
 * shows as "<a URL that could not be read>", never a piece of it. A new
 * string (free). */
char *remote_url_for_log(const char *url);

/* ---- request descriptions (remote_request.c) ---- */

/* Checks a request description at configuration load: its keys and types,
 * its placeholders, and that every {{env:NAME}} is set. need_url: "url" is
 * required (a status request may take its URL from the job instead). Errors
 * name path. */
enum status remote_check_request(const json_t *req, const char *path, bool need_url,
                                 struct error *err) WUR;
/* remote_check_request as a rule (params.h): with a "url"; or where a
 * request without one goes to the job's URL, its external id (the http
 * action's status, cancel and cleanup). */
enum status remote_rule_request(const struct param *p, struct error *err);
enum status remote_rule_job_request(const struct param *p, struct error *err);

/* ---- the call (remote_call.c) ---- */

struct remote_response {
    long status; /* HTTP status; 0 when no response */
    char *body;  /* heap, NUL-terminated (may hold NULs before it) */
    size_t len;
    char location[2048];
    char content_type[128];
    int retry_after_s;        /* Retry-After (seconds or an HTTP date, as libcurl reads it), at
                               * most REMOTE_RETRY_AFTER_MAX_S; 0 when none */
    char effective_url[2048]; /* the URL called (may hold secrets: never log it) */
    bool transport_error;     /* no HTTP answer: connect failure, reset, timeout */
    bool timed_out;
    bool stopped;    /* aborted because rc_should_stop() turned true */
    char error[256]; /* what went wrong, without secrets */
};
void remote_response_cleanup(struct remote_response *r);

/* Connections kept open between calls, for one thread at a time: the
 * remote calls of a run_ctx whose conn is set reuse them (HTTP keep-alive;
 * up to five hosts) instead of connecting anew. A poller checker keeps one
 * for its lifetime. remote_conn_new never returns NULL. */
struct remote_conn *remote_conn_new(void);
void remote_conn_free(struct remote_conn *c); /* NULL is a no-op */

/* Performs the request; url_override (may be NULL) replaces the template's
 * URL (a status URL from a Location header; sent as it is). rc (may be
 * NULL) aborts the transfer once rc_should_stop() is true. ST_OK whenever
 * an HTTP answer came back, whatever its status; ST_UNAVAILABLE for a
 * transport failure (out says which); ST_INVALID when the request could not
 * be built (a placeholder with no value, an expansion past 512 MiB);
 * ST_UNPROCESSABLE when a value of the run is refused where its placeholder
 * puts it (above). Nothing is sent unless it returns ST_OK or
 * ST_UNAVAILABLE. */
enum status remote_call(const json_t *req, const struct remote_vars *v, const char *url_override,
                        const struct run_ctx *rc, struct remote_response *out,
                        struct error *err) WUR;

/* What an answer means for a remote job. */
enum remote_class {
    REMOTE_OK,        /* 2xx */
    REMOTE_TRANSIENT, /* no answer, a timeout, 408, 429 or 5xx: try again later */
    REMOTE_GONE,      /* 404 or 410: the remote does not know it (any more) */
    REMOTE_REJECTED,  /* any other status: a permanent refusal */
};
enum remote_class remote_classify(const struct remote_response *r);
/* Sets rc->error to {"code": code, "message": "<what>: HTTP 503: <the
 * start of the body>"} (or the transport error), without secrets. */
void remote_error(struct run_ctx *rc, const char *code, const char *what,
                  const struct remote_response *r);
/* After remote_call returned st: false when the request could not be
 * built, with rc->error set to code "unsafe_input" (ST_UNPROCESSABLE) or
 * "invalid_request" and the message "could not build <what>: <why>"; the
 * run should fail, as a retry would build the same request. true
 * otherwise. */
bool remote_built(struct run_ctx *rc, enum status st, const char *what, const struct error *err);
/* remote_call of req (url_override as there) with the values of rc's run
 * (remote_vars_of), then remote_built: false when the request could not be
 * built (rc->error says why, and out holds nothing); true when it went
 * out, whatever came back (out then wants remote_response_cleanup). */
bool remote_call_run(struct run_ctx *rc, const json_t *req, const char *url_override,
                     const char *what, struct remote_response *out);
/* The body parsed as JSON, or NULL (not JSON). New reference. */
json_t *remote_json(const struct remote_response *r);

#endif
