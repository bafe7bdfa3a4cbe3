/* server/http_headers.c — the request header values the front end parses
 * itself (server/http_headers.h). */
#include "server/http_headers.h"

#include <string.h>
#include <strings.h>

bool http_content_type_json(const char *ct)
{
    size_t n;

    if (!ct)
        return false;
    n = strcspn(ct, ";");
    while (n > 0 && (ct[n - 1] == ' ' || ct[n - 1] == '\t'))
        n--;
    if (n == 16 && strncasecmp(ct, "application/json", 16) == 0)
        return true;
    return n > 5 && strncasecmp(ct + n - 5, "+json", 5) == 0 &&
           strncasecmp(ct, "application/", 12) == 0;
}

bool http_etag_matches(const char *if_none_match, const char *etag)
{
    return if_none_match && (strcmp(if_none_match, "*") == 0 || strstr(if_none_match, etag));
}
