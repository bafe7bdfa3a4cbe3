/* server/http_headers.h — what the front end makes of the request headers
 * whose values it parses itself: Content-Type (is the body JSON?) and
 * If-None-Match (is the client's copy current?). The others have parsers
 * of their own elsewhere: Authorization (handlers/auth.h), Origin
 * (http_cors.h), Last-Event-ID (live/sse.h), X-Request-Id and traceparent
 * (common/log.h). Pure functions of their arguments; thread-safe. */
#ifndef OPSRUN_SERVER_HTTP_HEADERS_H
#define OPSRUN_SERVER_HTTP_HEADERS_H

#include "common/common.h"

/* Whether a Content-Type value (NULL: the header is absent) names JSON:
 * application/json or application/<anything>+json, without regard to case,
 * whatever parameters follow a ';'. */
bool http_content_type_json(const char *ct);
/* Whether an If-None-Match value (NULL: absent) names etag, the quoted
 * entity tag of the answer, or is "*" (weak comparison, RFC 9110 13.1.2). */
bool http_etag_matches(const char *if_none_match, const char *etag);

#endif
