/* tests/fuzz/fuzz_conc_key.c — a run type's concurrency key template
 * (common/conc_key.h) and a run's input. The input is "TEMPLATE\0INPUT":
 * INPUT is a JSON document (when it is not one, an input of every kind of
 * value the template may name).
 *
 * The template goes through conc_key_compile, and the parts through
 * conc_key_eval over the input for a tenant.
 *
 * Invariants:
 *   - a template without placeholders compiles exactly when it is 1 to
 *     1024 bytes of UTF-8 and at most 512 (every key holds its literal
 *     text); else, or when it does not compile, parts is NULL and the
 *     error is UTF-8 (it reaches --print-config's caller and config check);
 *   - the parts are well formed (["text", non-empty], ["input", a valid
 *     pointer], ["tenant"]), no two texts side by side, at most 512 bytes
 *     of text in all, and written back as a template they give the
 *     template compiled;
 *   - the key is what a plain reading of the value rules gives (the
 *     reference below): at most 512 bytes, UTF-8 when the template and
 *     the input are; a failure is ST_INVALID, with no key and a UTF-8
 *     message, naming the pointer when a value is missing. */
#include "tests/fuzz/fuzz.h"

#include "common/conc_key.h"
#include "common/dynbuf.h"
#include "common/jsonptr.h"

#define INPUT                                                                                      \
    "{\"labels\": {\"instance\": \"db-1:9100\", \"\": \"empty\"}, \"n\": -42, \"f\": 2.5, \"t\": " \
    "true, \"z\": null, \"list\": [\"a\", 7, {}], \"obj\": {\"k\": \"v\"}, \"a/b\": \"s\", "       \
    "\"c~d\": \"\\u00e9\"}"

/* The parts written back as a template. */
static char *rewrite(const json_t *parts)
{
    struct dynbuf b;
    const json_t *part;
    size_t i;
    bool prev_text = false;
    size_t text = 0;

    dynbuf_init(&b, 4096);
    json_array_foreach(parts, i, part)
    {
        const char *kind = json_string_value(json_array_get(part, 0));
        const char *arg = json_string_value(json_array_get(part, 1));
        FUZZ_CHECK(kind != NULL);
        if (strcmp(kind, "text") == 0) {
            FUZZ_CHECK(json_array_size(part) == 2 && arg && *arg && !prev_text);
            FUZZ_CHECK(dynbuf_adds(&b, arg) == ST_OK);
            text += strlen(arg);
        } else if (strcmp(kind, "input") == 0) {
            FUZZ_CHECK(json_array_size(part) == 2 && arg && *arg && jptr_valid(arg));
            FUZZ_CHECK(dynbuf_addf(&b, "{{input:%s}}", arg) == ST_OK);
        } else {
            FUZZ_CHECK(strcmp(kind, "tenant") == 0 && json_array_size(part) == 1);
            FUZZ_CHECK(dynbuf_adds(&b, "{{tenant}}") == ST_OK);
        }
        prev_text = strcmp(kind, "text") == 0;
    }
    FUZZ_CHECK(text <= CONC_KEY_MAX);
    return dynbuf_take(&b);
}

/* The key by the rules read plainly, or NULL; *missing: the pointer of
 * the first value that is missing or cannot be in a key. */
static char *reference(const json_t *parts, const char *tenant, const json_t *input,
                       const char **missing)
{
    struct dynbuf b;
    const json_t *part;
    size_t i;

    dynbuf_init(&b, 1 << 20);
    *missing = NULL;
    json_array_foreach(parts, i, part)
    {
        const char *kind = json_string_value(json_array_get(part, 0));
        const char *arg = json_string_value(json_array_get(part, 1));
        const json_t *v = strcmp(kind, "input") == 0 ? jptr_get(input, arg) : NULL;
        if (strcmp(kind, "text") == 0)
            FUZZ_CHECK(dynbuf_adds(&b, arg) == ST_OK);
        else if (strcmp(kind, "tenant") == 0)
            FUZZ_CHECK(dynbuf_adds(&b, tenant) == ST_OK);
        else if (json_is_string(v) && strlen(json_string_value(v)) == json_string_length(v))
            FUZZ_CHECK(dynbuf_adds(&b, json_string_value(v)) == ST_OK);
        else if (json_is_integer(v))
            FUZZ_CHECK(dynbuf_addf(&b, "%lld", (long long)json_integer_value(v)) == ST_OK);
        else if (json_is_boolean(v))
            FUZZ_CHECK(dynbuf_adds(&b, json_is_true(v) ? "true" : "false") == ST_OK);
        else
            *missing = arg;
        if (*missing) {
            dynbuf_free(&b);
            return NULL;
        }
    }
    if (dynbuf_len(&b) > CONC_KEY_MAX) {
        dynbuf_free(&b);
        return NULL;
    }
    return dynbuf_take(&b);
}

static void check_eval(const json_t *parts, const char *tenant, const json_t *input, bool utf8)
{
    struct error err = {0};
    const char *missing;
    char *want = reference(parts, tenant, input, &missing), *got = NULL;
    enum status st = conc_key_eval(parts, tenant, input, &got, &err);

    if (want) {
        FUZZ_CHECK(st == ST_OK && got && strcmp(got, want) == 0);
        FUZZ_CHECK(strlen(got) <= CONC_KEY_MAX);
        if (utf8)
            FUZZ_CHECK(fuzz_utf8(got));
    } else {
        FUZZ_CHECK(st == ST_INVALID && got == NULL && fuzz_utf8(err.message));
        if (missing) {
            char *quoted = xasprintf("\"%s\"", missing);
            utf8_scrub(quoted); /* as the message holds it */
            FUZZ_CHECK(strstr(err.message, quoted) || strlen(err.message) > 400);
            free(quoted);
        }
    }
    free(want);
    free(got);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, '\0', size);
    size_t tlen = nul ? (size_t)(nul - data) : size;
    char *tmpl = fuzz_cstr(data, tlen), *back;
    json_t *input =
        nul ? json_loadb((const char *)nul + 1, size - tlen - 1, JSON_DECODE_ANY, NULL) : NULL;
    json_t *parts = (json_t *)data; /* set by the call */
    struct error err = {0};
    enum status st = conc_key_compile(tmpl, &parts, &err);

    if (!input)
        input = json_loads(INPUT, 0, NULL);
    FUZZ_CHECK(input != NULL);
    if (st != ST_OK) {
        FUZZ_CHECK(st == ST_INVALID && parts == NULL && fuzz_utf8(err.message));
        FUZZ_CHECK(!*tmpl || strlen(tmpl) > CONC_KEY_TEMPLATE_MAX || !fuzz_utf8(tmpl) ||
                   strstr(tmpl, "{{") || strlen(tmpl) > CONC_KEY_MAX);
        goto out;
    }
    FUZZ_CHECK(*tmpl && strlen(tmpl) <= CONC_KEY_TEMPLATE_MAX && fuzz_utf8(tmpl));
    back = rewrite(parts);
    FUZZ_CHECK(strcmp(back, tmpl) == 0);
    free(back);
    check_eval(parts, "acme", input, true);
    check_eval(parts, "", input, true);
    check_eval(parts, "t", NULL, true);
    json_decref(parts);
out:
    json_decref(input);
    free(tmpl);
    return 0;
}
