/* tests/fuzz/fuzz_slack.c — Slack's text: the input is "TEXT\0RUN", a
 * notifier's "text" template and the run's JSON as the outbox holds it.
 * The text is configured as a slack notifier's when the configuration
 * takes it (the default text otherwise), and notify_request_build makes
 * the request for a failed run, with and without http.public_url.
 *
 * Invariants:
 *   - any run object makes a request whose body is {"text": "..."} alone,
 *     valid JSON (so UTF-8) whatever the run holds;
 *   - with a template, the text is the template's expansion over the run
 *     (tmpl_expand_text, a pointer that finds nothing ""), whose length
 *     cap refuses the delivery rather than cut it; without one, the
 *     default "Run <id> (<type>) failed: <message>" and the run's link;
 *   - once the text escapes the run's values for Slack (&, <, >; the
 *     driver finds out with a probe, so this holds itself to whichever the
 *     code does), no '<' or '>' in the text comes from the run: Slack
 *     would read one as the start of a link or a mention. */
#include "tests/fuzz/fuzz.h"

#include "common/template.h"
#include "engine/notify_body.h"

#define PUBLIC_URL "https://opsrun.example.com"

/* A configuration with a slack notifier "chat" (text: NULL for the
 * default); false when the configuration refuses the text. */
static bool load(struct config *cfg, const char *text)
{
    json_t *doc = json_pack("{s:{s:{s:s, s:s, s:s*}}}", "notifiers", "chat", "kind", "slack", "url",
                            "https://hooks.slack.example/T0/B0/x", "text", text);
    char *s = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    struct error err = {0};
    bool ok;

    cfg_init(cfg, &action_registry);
    ok = s && cfg_load_json(cfg, s, &err) == ST_OK && cfg_validate(cfg, &err) == ST_OK;
    if (s && !ok)
        FUZZ_CHECK(fuzz_utf8(err.message));
    free(s);
    json_decref(doc);
    return ok;
}

/* The text of notifier n's request for run_json; NULL when it refuses. */
static char *text_of(const struct notifier *n, const char *run_json, const char *public_url)
{
    struct notify_request rq;
    struct error err = {0};
    json_t *body;
    char *text = NULL;
    enum status st =
        notify_request_build(n, "run.failed", "dlv-1", run_json, public_url, 1700000000, &rq, &err);

    if (st != ST_OK) {
        FUZZ_CHECK(st == ST_INVALID && fuzz_utf8(err.message) && rq.body == NULL);
        return NULL;
    }
    body = json_loads(rq.body, 0, NULL);
    FUZZ_CHECK(json_is_object(body) && json_object_size(body) == 1);
    FUZZ_CHECK(json_is_string(json_object_get(body, "text")));
    text = xstrdup(json_string_value(json_object_get(body, "text")));
    json_decref(body);
    notify_request_cleanup(&rq);
    return text;
}

/* Whether the code escapes the run's values in Slack's text. */
static bool escapes(void)
{
    struct config cfg;
    char *text;
    bool yes;

    FUZZ_CHECK(load(&cfg, "{{run:/id}}"));
    text = text_of(&cfg.notifiers[0], "{\"id\": \"<&>\"}", NULL);
    FUZZ_CHECK(text != NULL);
    yes = strcmp(text, "<&>") != 0;
    if (yes)
        FUZZ_CHECK(strcmp(text, "&lt;&amp;&gt;") == 0);
    free(text);
    cfg_cleanup(&cfg);
    return yes;
}

static size_t count(const char *s, char c)
{
    size_t n = 0;

    for (; *s; s++)
        n += *s == c;
    return n;
}

static void check_template(const char *tmpl, const json_t *run, const char *text, bool escaped)
{
    char *want = NULL, *literal = NULL;
    struct error err = {0};
    enum status st =
        tmpl_expand_text(tmpl, run, true, escaped ? TMPL_SLACK : TMPL_AS_IS, &want, &err);

    if (!text) {
        FUZZ_CHECK(st == ST_INVALID); /* too long */
        return;
    }
    FUZZ_CHECK(st == ST_OK && strcmp(text, want) == 0);
    if (escaped) {
        /* the template's own text: every placeholder finding nothing */
        FUZZ_CHECK(tmpl_expand_text(tmpl, NULL, true, TMPL_AS_IS, &literal, &err) == ST_OK);
        FUZZ_CHECK(count(text, '<') == count(literal, '<'));
        FUZZ_CHECK(count(text, '>') == count(literal, '>'));
    }
    free(want);
    free(literal);
}

static void check_default(const char *text, const json_t *run, bool linked)
{
    const char *id = json_string_value(json_object_get(run, "id"));

    FUZZ_CHECK(text && strncmp(text, "Run ", 4) == 0);
    if (id && !strpbrk(id, "<>&"))
        FUZZ_CHECK(strncmp(text + 4, id, strlen(id)) == 0);
    if (linked)
        FUZZ_CHECK(strstr(text, PUBLIC_URL "/#/runs/") != NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, '\0', size);
    size_t tlen = nul ? (size_t)(nul - data) : size;
    char *tmpl = fuzz_cstr(data, tlen);
    char *run_json = nul ? fuzz_cstr(nul + 1, size - tlen - 1) : xstrdup("{}");
    json_t *run = json_loads(run_json, 0, NULL);
    bool escaped = escapes();
    struct config cfg;

    for (int linked = 0; linked < 2; linked++) {
        bool templated = load(&cfg, tmpl);
        char *text;
        if (!templated) {
            cfg_cleanup(&cfg);
            FUZZ_CHECK(load(&cfg, NULL));
        }
        text = text_of(&cfg.notifiers[0], run_json, linked ? PUBLIC_URL : NULL);
        if (!json_is_object(run))
            FUZZ_CHECK(text == NULL);
        else if (templated)
            check_template(tmpl, run, text, escaped);
        else
            check_default(text, run, linked);
        free(text);
        cfg_cleanup(&cfg);
    }
    json_decref(run);
    free(run_json);
    free(tmpl);
    return 0;
}
