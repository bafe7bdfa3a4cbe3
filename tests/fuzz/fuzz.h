/* tests/fuzz/fuzz.h — what the libFuzzer drivers share: the entry point's
 * prototype, invariant checks that crash (so libFuzzer and the replay tests
 * report them), the request body as the server parses it, and the routing
 * configuration the intake drivers route with. Static functions only: each
 * driver is its own program. */
#ifndef OPSRUN_TESTS_FUZZ_H
#define OPSRUN_TESTS_FUZZ_H

#include "common/common.h"
#include "handlers/handlers.h"
#include "config/config.h"
#include "engine/actions/action.h"
#include "engine/actions/registry.h"

#include <jansson.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An invariant of the code under test; a failure is a finding. */
#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond);           \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* The bytes the process holds on its heap, when the build counts them
 * (AddressSanitizer's allocator, gcc or clang); 0 otherwise. */
#if defined(__SANITIZE_ADDRESS__)
#define FUZZ_HEAP_COUNTED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FUZZ_HEAP_COUNTED 1
#endif
#endif
#ifdef FUZZ_HEAP_COUNTED
size_t __sanitizer_get_current_allocated_bytes(void);
#endif
static inline size_t fuzz_heap_bytes(void)
{
#ifdef FUZZ_HEAP_COUNTED
    return __sanitizer_get_current_allocated_bytes();
#else
    return 0;
#endif
}

/* The input as a C string (heap, free); bytes after a NUL are cut, as a C
 * API would see them. */
static inline char *fuzz_cstr(const uint8_t *data, size_t size)
{
    char *s = xmalloc(size + 1);

    if (size > 0)
        memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

static inline bool fuzz_utf8(const char *s)
{
    json_t *j = json_string(s);

    json_decref(j);
    return j != NULL;
}

/* Whether every string and key of v can go into PostgreSQL's jsonb, where
 * what we emit is stored: jsonb refuses the character U+0000 (\u0000),
 * which jansson holds in a string made with a length. */
static inline bool fuzz_jsonb_ok(const json_t *v)
{
    const char *key;
    json_t *x;
    size_t i;

    if (json_is_string(v))
        return strlen(json_string_value(v)) == json_string_length(v);
    json_array_foreach(v, i, x)
    {
        if (!fuzz_jsonb_ok(x))
            return false;
    }
    json_object_foreach((json_t *)v, key, x)
    {
        if (!fuzz_jsonb_ok(x))
            return false;
    }
    return true;
}

/* JSON we emit (a run's result, error, summaries, poll state; a request
 * body): it serialises, parses back equal, and PostgreSQL can store it.
 * NULL passes (nothing emitted). */
static inline void fuzz_check_emitted(const json_t *v)
{
    char *text;
    json_t *back;

    if (!v)
        return;
    text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    FUZZ_CHECK(text != NULL);
    back = json_loads(text, JSON_DECODE_ANY, NULL);
    FUZZ_CHECK(back != NULL && json_equal(v, back));
    FUZZ_CHECK(fuzz_jsonb_ok(v));
    json_decref(back);
    free(text);
}

/* The request body exactly as server/http.c parses it before the handler;
 * a parse error goes into a problem+json detail there, so it must be UTF-8. */
static inline json_t *fuzz_body(const uint8_t *data, size_t size)
{
    json_error_t jerr;
    json_t *body = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &jerr);
    struct error err = {0};

    if (!body) {
        error_set(&err, ST_INVALID, "could not parse the body as JSON: %s at line %d column %d",
                  jerr.text, jerr.line, jerr.column);
        FUZZ_CHECK(fuzz_utf8(err.message));
    }
    return body;
}

/* Error texts end up in problem+json replies (reply_error) and in the
 * per-alert results of the Alertmanager intake: every one must be a valid
 * JSON string (UTF-8), or jansson refuses it and the text, or the whole
 * reply body, silently disappears. */
static inline void fuzz_check_error(enum status st, const struct error *err)
{
    struct reply rp;

    FUZZ_CHECK(fuzz_utf8(err->message));
    for (unsigned i = 0; i < err->nfields; i++) {
        FUZZ_CHECK(fuzz_utf8(err->fields[i].field));
        FUZZ_CHECK(fuzz_utf8(err->fields[i].message));
    }
    reply_init(&rp);
    reply_error(&rp, st, err);
    FUZZ_CHECK(rp.body != NULL);
    FUZZ_CHECK(json_array_size(json_object_get(rp.body, "errors")) == err->nfields);
    reply_cleanup(&rp);
}

/* The routing of docs/alertmanager.md, without a default route so that
 * unrouted alerts take their path too. */
static const char fuzz_routing_config[] =
    "{\"run_types\": {"
    "  \"disk_cleanup\": {\"action\": \"simulate\", \"params\": {\"steps\": 4}},"
    "  \"restart_service\": {\"action\": \"simulate\"}},"
    " \"routes\": ["
    "  {\"match\": {\"alert_type\": \"~Disk(Full|Pressure)\", \"severity\": \"critical\"},"
    "   \"run_type\": \"disk_cleanup\"},"
    "  {\"match\": {\"alertname\": \"ServiceDown\", \"team\": \"~(web|api)\"},"
    "   \"run_type\": \"restart_service\", \"on_resolved\": \"cancel\"}]}";

/* A fresh routing configuration per input, so no state outlives one. */
static inline void fuzz_routing_init(struct config *cfg)
{
    struct error err = {0};

    cfg_init(cfg, &action_registry);
    if (cfg_load_json(cfg, fuzz_routing_config, &err) != ST_OK ||
        cfg_validate(cfg, &err) != ST_OK) {
        fprintf(stderr, "fuzz: routing configuration: %s\n", err.message);
        abort();
    }
}

#endif
