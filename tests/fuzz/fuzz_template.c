/* tests/fuzz/fuzz_template.c — {{run:/json/pointer}} templates over a run
 * (common/template.h): a Slack text and a follow-up's data. The input is
 * "TEMPLATE\0RUN": RUN is a JSON document (when it is not one, a run of
 * the shape the database gives, whose values the template may name).
 *
 * The template goes through tmpl_check and tmpl_expand_text (with and
 * without missing_ok), and through the configuration as a Slack
 * notifier's "text"; when it is a JSON object it is also a follow-up
 * rule's "data": cfg_load_json, cfg_validate, then notify_rules_json, the
 * rules the database expands it with.
 *
 * Invariants:
 *   - the expansion is what a plain reading of the rules gives (the
 *     reference below): a placeholder that finds a string is that string,
 *     any other value its JSON, nothing "" (missing_ok) or ST_NOT_FOUND
 *     naming it; "{{" that opens no placeholder stays as it is;
 *   - a template that loads (tmpl_check) has no "{{" left in its expansion
 *     over an empty run but what the run's values bring;
 *   - a UTF-8 template over a run expands to UTF-8 (the Slack body is
 *     JSON);
 *   - the configuration accepts a text or data exactly when tmpl_check
 *     (tmpl_check_json) does, with a UTF-8 error otherwise, and the rules
 *     the database gets hold the data unchanged. */
#include "tests/fuzz/fuzz.h"

#include "common/dynbuf.h"
#include "common/jsonptr.h"
#include "common/template.h"
#include "engine/notify_body.h"

#define RUN                                                                                        \
    "{\"id\": \"r1\", \"tenant\": \"acme\", \"type\": \"restart-pod\", \"status\": "               \
    "\"completed\", \"outcome\": \"failed\", \"input\": {\"pod\": \"web-1\", \"n\": 3, \"f\": "    \
    "2.5, \"tags\": [\"a\", \"{{run:/id}}\"], \"obj\": {\"k\": \"v\"}, \"\": \"empty\", \"a/b\": " \
    "1, \"c~d\": null}, \"error\": {\"code\": \"boom\", \"message\": \"pod <b> & \\u00e9\"}, "     \
    "\"result\": null}"

/* The rules of common/template.h, read plainly: at each "{{", either a
 * placeholder "{{run:" POINTER "}}" (a valid pointer of under 512 bytes
 * without '}') or two characters of text. *missing: the first pointer that
 * found nothing. NULL past 1 MiB. */
static char *reference(const char *s, const json_t *doc, char **missing)
{
    struct dynbuf b;
    bool fits = true;

    dynbuf_init(&b, 1024 * 1024);
    *missing = NULL;
    while (*s) {
        const char *close = strncmp(s, "{{run:", 6) == 0 ? strstr(s + 6, "}}") : NULL;
        size_t n = close ? (size_t)(close - s - 6) : 0;
        char *ptr = close ? xstrndup(s + 6, n) : NULL;
        if (ptr && n < 512 && !strchr(ptr, '}') && jptr_valid(ptr)) {
            const json_t *v = jptr_get(doc, ptr);
            char *text = v && !json_is_string(v) ? json_dumps(v, JSON_ENCODE_ANY) : NULL;
            if (!v && !*missing)
                *missing = xstrdup(ptr);
            if (json_is_string(v))
                fits = fits && dynbuf_add(&b, json_string_value(v), json_string_length(v)) == ST_OK;
            else if (text)
                fits = fits && dynbuf_adds(&b, text) == ST_OK;
            free(text);
            s = close + 2;
        } else {
            fits = fits && dynbuf_add(&b, s, strncmp(s, "{{", 2) == 0 ? 2 : 1) == ST_OK;
            s += strncmp(s, "{{", 2) == 0 ? 2 : 1;
        }
        free(ptr);
        if (!fits) {
            dynbuf_free(&b);
            return NULL;
        }
    }
    return dynbuf_take(&b);
}

static void check_expand(const char *tmpl, const json_t *doc)
{
    char *want, *missing, *got = NULL, *strict = NULL;
    struct error err = {0};
    enum status st = tmpl_expand_text(tmpl, doc, true, TMPL_AS_IS, &got, &err);

    want = reference(tmpl, doc, &missing);
    if (!want) {
        FUZZ_CHECK(st == ST_INVALID && got == NULL && fuzz_utf8(err.message));
        free(missing);
        return;
    }
    FUZZ_CHECK(st == ST_OK && got && strcmp(got, want) == 0);
    if (fuzz_utf8(tmpl))
        FUZZ_CHECK(fuzz_utf8(got));
    st = tmpl_expand_text(tmpl, doc, false, TMPL_AS_IS, &strict, &err);
    if (missing) {
        FUZZ_CHECK(st == ST_NOT_FOUND && strict == NULL && fuzz_utf8(err.message));
        utf8_scrub(missing); /* as the message holds it */
        FUZZ_CHECK(strstr(err.message, missing) || strlen(err.message) > 400);
    } else {
        FUZZ_CHECK(st == ST_OK && strcmp(strict, got) == 0);
    }
    free(strict);
    free(got);
    free(want);
    free(missing);
}

/* A template that loads, over a run with nothing in it, leaves none of
 * its placeholders behind. */
static void check_loaded(const char *tmpl)
{
    char why[160], *out = NULL;
    struct error err = {0};
    json_t *empty = json_object();

    if (tmpl_check(tmpl, why, sizeof(why))) {
        FUZZ_CHECK(tmpl_expand_text(tmpl, empty, true, TMPL_AS_IS, &out, &err) == ST_OK);
        FUZZ_CHECK(!strstr(out, "{{run:"));
        free(out);
    }
    json_decref(empty);
}

/* The configuration the template would be written in. */
static enum status load(const json_t *doc, struct config *cfg, struct error *err)
{
    char *text = json_dumps(doc, JSON_COMPACT);
    enum status st;

    FUZZ_CHECK(text != NULL);
    cfg_init(cfg, &action_registry);
    st = cfg_load_json(cfg, text, err);
    if (st == ST_OK)
        st = cfg_validate(cfg, err);
    free(text);
    return st;
}

static void check_slack_text(const char *tmpl)
{
    json_t *doc = json_pack("{s:{s:{s:s, s:s, s:s}}}", "notifiers", "chat", "kind", "slack", "url",
                            "https://hooks.example/T/B/x", "text", tmpl);
    char why[160];
    struct config cfg;
    struct error err = {0};

    if (!doc)
        return; /* not UTF-8: no configuration holds it */
    if (load(doc, &cfg, &err) == ST_OK)
        FUZZ_CHECK(tmpl_check(tmpl, why, sizeof(why)) &&
                   strcmp(cfg_notifier(&cfg, "chat")->text, tmpl) == 0);
    else
        FUZZ_CHECK(!tmpl_check(tmpl, why, sizeof(why)) && fuzz_utf8(err.message));
    cfg_cleanup(&cfg);
    json_decref(doc);
}

/* data: the object a follow-up rule would carry. */
static void check_follow_up(const json_t *data)
{
    json_t *doc = json_pack("{s:{s:{s:s, s:[{s:[s], s:s, s:O}]}, s:{s:s}}}", "run_types", "fix",
                            "action", "simulate", "then", "on", "failed", "run_type", "page",
                            "data", data, "page", "action", "simulate");
    struct config cfg;
    struct error err = {0};
    char why[160], *rules;
    json_t *back;
    size_t i;
    json_t *rt;

    FUZZ_CHECK(doc != NULL);
    if (load(doc, &cfg, &err) != ST_OK) {
        FUZZ_CHECK(!tmpl_check_json(data, why, sizeof(why)) && fuzz_utf8(err.message));
        goto out;
    }
    FUZZ_CHECK(tmpl_check_json(data, why, sizeof(why)));
    rules = notify_rules_json(&cfg);
    back = json_loads(rules, 0, NULL);
    FUZZ_CHECK(json_is_array(back));
    json_array_foreach(back, i, rt)
    {
        const char *type = json_string_value(json_object_get(rt, "type"));
        if (type && strcmp(type, "fix") == 0)
            FUZZ_CHECK(json_equal(
                json_object_get(json_array_get(json_object_get(rt, "follow_ups"), 0), "data"),
                data));
    }
    json_decref(back);
    free(rules);
out:
    cfg_cleanup(&cfg);
    json_decref(doc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, '\0', size);
    size_t tlen = nul ? (size_t)(nul - data) : size;
    char *tmpl = fuzz_cstr(data, tlen);
    json_t *doc =
        nul ? json_loadb((const char *)nul + 1, size - tlen - 1, JSON_DECODE_ANY, NULL) : NULL;
    json_t *as_json = json_loads(tmpl, 0, NULL);

    if (!doc)
        doc = json_loads(RUN, 0, NULL);
    check_expand(tmpl, doc);
    check_loaded(tmpl);
    check_slack_text(tmpl);
    if (json_is_object(as_json))
        check_follow_up(as_json);
    json_decref(as_json);
    json_decref(doc);
    free(tmpl);
    return 0;
}
