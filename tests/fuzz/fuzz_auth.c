/* tests/fuzz/fuzz_auth.c — what a request says about who it is: the input
 * is an Authorization header value, also tried as ?access_token= (on a
 * stream and off it) and as ?tenant=, through auth_parse_header and
 * auth_decide against two configured tokens, for every route need. The
 * answers are only the documented statuses, their texts are UTF-8 for
 * problem+json and never quote the token, and a success names a principal
 * the configuration holds. */
#include "tests/fuzz/fuzz.h"

#include "common/digest.h"
#include "handlers/auth.h"

#include <strings.h>

/* The tokens whose digests the configuration holds (the corpus uses them). */
#define TOKEN_READER "opsrun_fuzz-reader-token-0123456789"
#define TOKEN_ADMIN "opsrun_fuzz-admin-token-9876543210"

static void config_init(struct config *cfg)
{
    char text[1024], a[65], b[65];
    struct error err = {0};

    sha256_hex(TOKEN_READER, strlen(TOKEN_READER), a);
    sha256_hex(TOKEN_ADMIN, strlen(TOKEN_ADMIN), b);
    snprintf(
        text, sizeof(text),
        "{\"auth\": {\"tokens\": ["
        "{\"name\": \"reader\", \"tenant\": \"acme\", \"scopes\": [\"read\"], \"sha256\": "
        "\"%s\"},"
        "{\"name\": \"root\", \"tenant\": \"ops\", \"scopes\": [\"admin\"], \"sha256\": \"%s\"}"
        "]}}",
        a, b);
    cfg_init(cfg, &action_registry);
    if (cfg_load_json(cfg, text, &err) != ST_OK) {
        fprintf(stderr, "fuzz: auth configuration: %s\n", err.message);
        abort();
    }
}

/* The parsed token is a token68 inside the header, after "Bearer". */
static void check_header(const char *header)
{
    struct error err = {0};
    const char *token = NULL;
    size_t len = 0;
    enum status st = auth_parse_header(header, &token, &len, &err);

    if (st != ST_OK) {
        FUZZ_CHECK(st == ST_UNAUTHORIZED && token == NULL);
        fuzz_check_error(st, &err);
        return;
    }
    FUZZ_CHECK(strncasecmp(header, "bearer", 6) == 0);
    FUZZ_CHECK(token > header && token + len <= header + strlen(header));
    FUZZ_CHECK(len >= 1 && len <= AUTH_TOKEN_MAX && auth_token68(token, len));
}

static void check_decision(const struct config *cfg, const struct auth_request *ar,
                           const char *input)
{
    struct principal who;
    struct error err = {0};
    enum status st = auth_decide(cfg, ar, &who, &err);

    FUZZ_CHECK(st == ST_OK || st == ST_UNAUTHORIZED || st == ST_FORBIDDEN || st == ST_INVALID);
    FUZZ_CHECK(who.name && who.tenant);
    if (st != ST_OK) {
        fuzz_check_error(st, &err);
        /* A detail never quotes what was presented (no fixed text has a
         * run of 20 token68 characters). */
        FUZZ_CHECK(strlen(input) < 20 || !strstr(err.message, input));
        FUZZ_CHECK(st == ST_INVALID || who.challenge != NULL);
        return;
    }
    if (ar->need == NEED_OPEN)
        return;
    FUZZ_CHECK(who.token == NULL || who.token == &cfg->auth.tokens[0] ||
               who.token == &cfg->auth.tokens[1]);
    FUZZ_CHECK(who.token != NULL); /* every other route needs one here */
    FUZZ_CHECK(!who.all_tenants || (who.token->scopes & SCOPE_ADMIN));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const enum auth_need needs[] = {NEED_OPEN, NEED_TOKEN,  NEED_SUBMIT,
                                           NEED_READ, NEED_CANCEL, NEED_HEALTH};
    char *input = fuzz_cstr(data, size);
    struct config cfg;

    config_init(&cfg);
    check_header(input);
    for (size_t i = 0; i < ARRAY_LEN(needs); i++) {
        const struct auth_request as_header = {needs[i], input, NULL, false, NULL};
        const struct auth_request as_query = {needs[i], NULL, input, true, NULL};
        const struct auth_request off_stream = {needs[i], NULL, input, false, NULL};
        const struct auth_request as_tenant = {needs[i], "Bearer " TOKEN_ADMIN, NULL, false, input};
        check_decision(&cfg, &as_header, input);
        check_decision(&cfg, &as_query, input);
        check_decision(&cfg, &off_stream, input);
        check_decision(&cfg, &as_tenant, input);
    }
    cfg_cleanup(&cfg);
    free(input);
    return 0;
}
