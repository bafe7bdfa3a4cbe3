/* handlers/openapi.c — GET /openapi.yaml: the API description this binary
 * was built with (embedded from openapi.yaml by scripts/embed_file.cmake).
 * It describes the API, not anyone's data, so it needs no token. */
#include "handlers/handlers.h"

#include <string.h>

/* The generated array: the file's bytes and a NUL. */
extern const char openapi_yaml[];
extern const size_t openapi_yaml_len;

enum status handle_openapi_get(const struct hctx *hc, const struct request *rq, struct reply *rp)
{
    (void)hc;
    (void)rq;
    rp->http_status = 200;
    rp->text = xmalloc(openapi_yaml_len + 1);
    memcpy(rp->text, openapi_yaml, openapi_yaml_len + 1);
    rp->text_type = "application/yaml";
    return ST_OK;
}
