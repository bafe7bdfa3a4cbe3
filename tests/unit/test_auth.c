/* tests/unit/test_auth.c — the Check suite for authentication: the
 * "auth" section of the configuration (config/auth.c: auth.tokens and its
 * validation messages, asserted exactly; the loopback rule; new tokens)
 * and the decision on each request (handlers/auth.c: the Authorization
 * header, the token lookup, scopes and tenants).
 *
 * System headers come before the project's, ahead of common.h's poison
 * pragma. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/digest.h"
#include "config/config.h"
#include "engine/actions/action.h"
#include "engine/actions/registry.h"
#include "handlers/auth.h"

/* Tokens of the fixture and, pinned with `printf %s TOKEN | sha256sum`,
 * their digests. */
#define TOK_CI "opsrun_ci-token-0123456789"
#define SHA_CI "45df62322d3981f2176159b56f328ae267e764678eaeb77359eebcc9f4579c87"
#define TOK_ADMIN "opsrun_admin-token-abcdefgh"
#define TOK_OTHER "opsrun_other-tenant-token"
#define TOK_HEALTH "opsrun_health-token"

static struct config cfg;

static char *digest(const char *token)
{
    static char hex[4][65];
    static int next;
    char *out = hex[next++ % 4];

    sha256_hex(token, strlen(token), out);
    return out;
}

static void load_ok(const char *text)
{
    struct error err = {0};

    ck_assert_msg(cfg_load_json(&cfg, text, &err) == ST_OK, "load failed: %s", err.message);
}

static void load_fails(const char *text, const char *msg)
{
    struct error err = {0};

    ck_assert_int_eq(cfg_load_json(&cfg, text, &err), ST_INVALID);
    ck_assert_str_eq(err.message, msg);
}

static void setup(void)
{
    cfg_init(&cfg, &action_registry);
}

/* Four tokens: ci (acme: submit, read), admin (ops: admin), other
 * (globex: submit, read, cancel, approve), health (ops: health). */
static void setup_tokens(void)
{
    char text[2048];

    cfg_init(&cfg, &action_registry);
    snprintf(
        text, sizeof(text),
        "{\"auth\": {\"tokens\": ["
        "{\"name\": \"ci\", \"tenant\": \"acme\", \"scopes\": [\"submit\", \"read\"],"
        " \"sha256\": \"%s\"},"
        "{\"name\": \"root\", \"tenant\": \"ops\", \"scopes\": [\"admin\"], \"sha256\": \"%s\"},"
        "{\"name\": \"other\", \"tenant\": \"globex\","
        " \"scopes\": [\"submit\", \"read\", \"cancel\", \"approve\"], \"sha256\": \"%s\"},"
        "{\"name\": \"mon\", \"tenant\": \"ops\", \"scopes\": [\"health\"], \"sha256\": \"%s\"}"
        "]}}",
        digest(TOK_CI), digest(TOK_ADMIN), digest(TOK_OTHER), digest(TOK_HEALTH));
    load_ok(text);
}

static void teardown(void)
{
    cfg_cleanup(&cfg);
}

/* ---- hashing ------------------------------------------------------------ */

/* The digest the configuration holds is the plain SHA-256 of the token's
 * text, as sha256sum prints it. */
START_TEST(token_digest_is_sha256_of_text)
{
    ck_assert_str_eq(digest(TOK_CI), SHA_CI);
    ck_assert_str_eq(digest(""),
                     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}
END_TEST

/* ---- auth.tokens ---------------------------------------------------------- */

START_TEST(tokens_load)
{
    const struct auth_token *t;

    ck_assert_uint_eq(cfg.auth.ntokens, 4);
    t = &cfg.auth.tokens[0];
    ck_assert_str_eq(t->name, "ci");
    ck_assert_str_eq(t->tenant, "acme");
    ck_assert_uint_eq(t->scopes, SCOPE_SUBMIT | SCOPE_READ);
    ck_assert_uint_eq(cfg.auth.tokens[1].scopes, SCOPE_ADMIN);
    ck_assert(!cfg.auth.open_health);
    ck_assert(!cfg.auth.insecure_no_auth);
}
END_TEST

START_TEST(tokens_default_none)
{
    struct error err = {0};

    ck_assert_uint_eq(cfg.auth.ntokens, 0);
    ck_assert_ptr_null(cfg.auth.tokens);
    ck_assert(!cfg.auth.open_health);
    ck_assert(!cfg.auth.insecure_no_auth);
    ck_assert_int_eq(cfg_validate(&cfg, &err), ST_OK);
}
END_TEST

/* Upper-case hex is the same digest. */
START_TEST(tokens_upper_case_hex)
{
    char text[512], upper[65];

    for (int i = 0; i < 64; i++)
        upper[i] = (char)(SHA_CI[i] >= 'a' ? SHA_CI[i] - 32 : SHA_CI[i]);
    upper[64] = '\0';
    snprintf(text, sizeof(text),
             "{\"auth\": {\"tokens\": [{\"name\": \"ci\", \"tenant\": \"acme\","
             " \"scopes\": [\"read\"], \"sha256\": \"%s\"}]}}",
             upper);
    load_ok(text);
    ck_assert_ptr_eq(auth_find(&cfg, TOK_CI, strlen(TOK_CI)), &cfg.auth.tokens[0]);
}
END_TEST

#define ENTRY(body) "{\"auth\": {\"tokens\": [" body "]}}"
#define GOOD                                                                                       \
    "\"name\": \"ci\", \"tenant\": \"acme\", \"scopes\": [\"read\"], \"sha256\": \"" SHA_CI "\""

static const struct {
    const char *text, *msg;
} bad_tokens[] = {
    {"{\"auth\": {\"tokens\": {}}}", "invalid \"auth.tokens\": expected an array"},
    {"{\"auth\": {\"tokens\": null}}", "invalid \"auth.tokens\": expected an array"},
    {"{\"auth\": []}", "invalid \"auth\": expected an object"},
    {"{\"auth\": {\"token\": []}}", "unknown key \"auth.token\"; did you mean \"auth.tokens\"?"},
    {ENTRY("\"ci\""), "invalid \"auth.tokens[0]\": expected an object"},
    {ENTRY("{" GOOD ", \"scope\": \"read\"}"),
     "unknown key \"auth.tokens[0].scope\"; did you mean \"scopes\"?"},
    {ENTRY("{\"tenant\": \"acme\", \"scopes\": [\"read\"], \"sha256\": \"" SHA_CI "\"}"),
     "missing \"auth.tokens[0].name\""},
    {ENTRY("{\"name\": \"ci\", \"scopes\": [\"read\"], \"sha256\": \"" SHA_CI "\"}"),
     "missing \"auth.tokens[0].tenant\""},
    {ENTRY("{\"name\": \"ci\", \"tenant\": \"acme\", \"sha256\": \"" SHA_CI "\"}"),
     "missing \"auth.tokens[0].scopes\""},
    {ENTRY("{\"name\": \"ci\", \"tenant\": \"acme\", \"scopes\": [\"read\"]}"),
     "missing \"auth.tokens[0].sha256\""},
    {ENTRY("{\"name\": \"c i\", \"tenant\": \"acme\", \"scopes\": [\"read\"], \"sha256\": \"" SHA_CI
           "\"}"),
     "invalid \"auth.tokens[0].name\": must be 1 to 64 characters of A-Z, a-z, 0-9, \"_\", \".\" "
     "or \"-\""},
    {ENTRY("{\"name\": 7, \"tenant\": \"acme\", \"scopes\": [\"read\"], \"sha256\": \"" SHA_CI
           "\"}"),
     "invalid \"auth.tokens[0].name\": must be 1 to 64 characters of A-Z, a-z, 0-9, \"_\", \".\" "
     "or \"-\""},
    {ENTRY("{\"name\": \"anonymous\", \"tenant\": \"acme\", \"scopes\": [\"read\"], \"sha256\": "
           "\"" SHA_CI "\"}"),
     "invalid \"auth.tokens[0].name\": \"anonymous\" is a reserved initiator"},
    {ENTRY("{\"name\": \"system\", \"tenant\": \"acme\", \"scopes\": [\"read\"], \"sha256\": "
           "\"" SHA_CI "\"}"),
     "invalid \"auth.tokens[0].name\": \"system\" is a reserved initiator"},
    {ENTRY("{\"name\": \"ci\", \"tenant\": \"\", \"scopes\": [\"read\"], \"sha256\": \"" SHA_CI
           "\"}"),
     "invalid \"auth.tokens[0].tenant\": must be 1 to 64 characters of A-Z, a-z, 0-9, \"_\", \".\" "
     "or \"-\""},
    {ENTRY("{\"name\": \"ci\", \"tenant\": \"acme\", \"scopes\": [], \"sha256\": \"" SHA_CI "\"}"),
     "invalid \"auth.tokens[0].scopes\": expected a non-empty array of \"submit\", \"read\", "
     "\"cancel\", \"health\", \"admin\" or \"approve\""},
    {ENTRY("{\"name\": \"ci\", \"tenant\": \"acme\", \"scopes\": \"read\", \"sha256\": \"" SHA_CI
           "\"}"),
     "invalid \"auth.tokens[0].scopes\": expected a non-empty array of \"submit\", \"read\", "
     "\"cancel\", \"health\", \"admin\" or \"approve\""},
    {ENTRY(
         "{\"name\": \"ci\", \"tenant\": \"acme\", \"scopes\": [\"read\", \"write\"], \"sha256\": "
         "\"" SHA_CI "\"}"),
     "invalid \"auth.tokens[0].scopes[1]\": expected \"submit\", \"read\", \"cancel\", \"health\", "
     "\"admin\" or \"approve\""},
    {ENTRY("{\"name\": \"ci\", \"tenant\": \"acme\", \"scopes\": [\"read\", \"read\"], \"sha256\": "
           "\"" SHA_CI "\"}"),
     "invalid \"auth.tokens[0].scopes[1]\": \"read\" is repeated"},
    {ENTRY("{\"name\": \"ci\", \"tenant\": \"acme\", \"scopes\": [\"READ\"], \"sha256\": \"" SHA_CI
           "\"}"),
     "invalid \"auth.tokens[0].scopes[0]\": expected \"submit\", \"read\", \"cancel\", \"health\", "
     "\"admin\" or \"approve\""},
    {ENTRY("{\"name\": \"ci\", \"tenant\": \"acme\", \"scopes\": [\"read\"], \"sha256\": \"abc\"}"),
     "invalid \"auth.tokens[0].sha256\": expected 64 hex digits, the SHA-256 of the token (opsrun "
     "token new prints it)"},
    {ENTRY("{\"name\": \"ci\", \"tenant\": \"acme\", \"scopes\": [\"read\"], \"sha256\": \"" SHA_CI
           "0\"}"),
     "invalid \"auth.tokens[0].sha256\": expected 64 hex digits, the SHA-256 of the token (opsrun "
     "token new prints it)"},
    {ENTRY("{\"name\": \"ci\", \"tenant\": \"acme\", \"scopes\": [\"read\"], \"sha256\": "
           "\"zzdf62322d3981f2176159b56f328ae267e764678eaeb77359eebcc9f4579c87\"}"),
     "invalid \"auth.tokens[0].sha256\": expected 64 hex digits, the SHA-256 of the token (opsrun "
     "token new prints it)"},
    {ENTRY("{" GOOD "}, {\"name\": \"ci\", \"tenant\": \"b\", \"scopes\": [\"read\"], \"sha256\": "
           "\"0000000000000000000000000000000000000000000000000000000000000000\"}"),
     "invalid \"auth.tokens[1].name\": \"ci\" is already the name of auth.tokens[0]"},
    {ENTRY("{" GOOD "}, {\"name\": \"ci2\", \"tenant\": \"b\", \"scopes\": [\"read\"], \"sha256\": "
           "\"" SHA_CI "\"}"),
     "invalid \"auth.tokens[1].sha256\": the same token as auth.tokens[0]"},
    {"{\"auth\": {\"open_health\": \"yes\"}}", "invalid \"auth.open_health\": expected a boolean"},
    {"{\"auth\": {\"insecure_no_auth\": 1}}",
     "invalid \"auth.insecure_no_auth\": expected a boolean"},
};

START_TEST(tokens_bad)
{
    load_fails(bad_tokens[_i].text, bad_tokens[_i].msg);
}
END_TEST

/* A failed list leaves the tokens that were there. */
START_TEST(tokens_failed_load_keeps_old)
{
    load_fails(ENTRY("{\"name\": \"x\"}"), "missing \"auth.tokens[0].tenant\"\n"
                                           "missing \"auth.tokens[0].scopes\"\n"
                                           "missing \"auth.tokens[0].sha256\"");
    ck_assert_uint_eq(cfg.auth.ntokens, 4);
    ck_assert_str_eq(cfg.auth.tokens[0].name, "ci");
    load_ok("{\"auth\": {\"tokens\": []}}");
    ck_assert_uint_eq(cfg.auth.ntokens, 0);
}
END_TEST

START_TEST(flag_and_env)
{
    struct error err = {0};

    ck_assert_int_eq(cfg_set(&cfg, "insecure-no-auth", "true", CFG_SRC_FLAG, &err), ST_OK);
    ck_assert(cfg.auth.insecure_no_auth);
    ck_assert_int_eq(cfg_set(&cfg, "auth.insecure_no_auth", "maybe", CFG_SRC_ENV, &err),
                     ST_INVALID);
    ck_assert_str_eq(err.message, "invalid OPSRUN_INSECURE_NO_AUTH: expected true or false");
    load_ok("{\"auth\": {\"open_health\": true}}");
    ck_assert(cfg.auth.open_health);
}
END_TEST

/* --print-config shows the entries as the file has them; they load back. */
START_TEST(print_config_round_trip)
{
    struct config again;
    struct error err = {0};
    json_t *a = cfg_to_json(&cfg), *b, *t;
    char *text;

    ck_assert_ptr_nonnull(a);
    t = json_array_get(json_object_get(json_object_get(a, "auth"), "tokens"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(t, "name")), "ci");
    ck_assert_str_eq(json_string_value(json_object_get(t, "sha256")), SHA_CI);
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(t, "scopes"), 1)), "read");
    json_object_del(a, "sources");
    json_object_del(a, "config_path");
    text = json_dumps(a, 0);
    cfg_init(&again, &action_registry);
    ck_assert_msg(cfg_load_json(&again, text, &err) == ST_OK, "%s", err.message);
    b = cfg_to_json(&again);
    json_object_del(b, "sources");
    json_object_del(b, "config_path");
    ck_assert(json_equal(a, b));
    json_decref(a);
    json_decref(b);
    free(text);
    cfg_cleanup(&again);
}
END_TEST

/* ---- the loopback rule ---------------------------------------------------- */

START_TEST(loopback_hosts)
{
    static const char *const yes[] = {"localhost", "127.0.0.1", "127.1.2.3", "::1",
                                      "::ffff:127.0.0.1"};
    static const char *const no[] = {
        "0.0.0.0", "10.0.0.1", "128.0.0.1", "::", "::ffff:10.0.0.1", "fe80::1", "example.com", ""};

    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
        ck_assert_msg(cfg_host_is_loopback(yes[i]), "%s", yes[i]);
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
        ck_assert_msg(!cfg_host_is_loopback(no[i]), "%s", no[i]);
}
END_TEST

static enum status exposure(const char *listen, struct error *err)
{
    struct error e = {0};

    ck_assert_int_eq(cfg_set(&cfg, "listen", listen, CFG_SRC_FLAG, &e), ST_OK);
    return cfg_check_exposure(&cfg, err);
}

START_TEST(exposure_without_tokens)
{
    struct error err = {0};

    ck_assert_int_eq(exposure("127.0.0.1:8080", &err), ST_OK);
    ck_assert_int_eq(exposure("localhost:1", &err), ST_OK);
    ck_assert_int_eq(exposure("[::1]:8080", &err), ST_OK);
    ck_assert_int_eq(exposure("0.0.0.0:8080", &err), ST_INVALID);
    ck_assert_str_eq(err.message,
                     "refusing to serve on 0.0.0.0:8080 without authentication: configure "
                     "\"auth.tokens\" (opsrun token new makes one), listen on a loopback address, "
                     "or pass --insecure-no-auth");
    ck_assert_int_eq(exposure("[::]:9000", &err), ST_INVALID);
    ck_assert_int_eq(exposure("192.168.1.5:80", &err), ST_INVALID);
    ck_assert_int_eq(cfg_set(&cfg, "insecure-no-auth", "true", CFG_SRC_FLAG, &err), ST_OK);
    ck_assert_int_eq(exposure("0.0.0.0:8080", &err), ST_OK);
}
END_TEST

START_TEST(exposure_with_tokens)
{
    struct error err = {0};

    ck_assert_int_eq(exposure("0.0.0.0:8080", &err), ST_OK);
    ck_assert_int_eq(exposure("[::]:8080", &err), ST_OK);
}
END_TEST

/* ---- opsrun token new ----------------------------------------------------- */

START_TEST(token_new_loads_and_authenticates)
{
    struct error err = {0};
    char *token = NULL, *text, *doc;
    json_t *entry = NULL;
    const struct auth_token *t;

    ck_assert_int_eq(cfg_token_new("deploy", "acme", "submit,cancel", &token, &entry, &err), ST_OK);
    ck_assert_uint_eq(strlen(token), 7 + 43); /* "opsrun_" and 256 bits of base64url */
    ck_assert_int_eq(strncmp(token, "opsrun_", 7), 0);
    ck_assert_uint_eq(strspn(token + 7, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                        "0123456789-_"),
                      43);
    ck_assert_str_eq(json_string_value(json_object_get(entry, "sha256")), digest(token));
    text = json_dumps(entry, JSON_COMPACT);
    doc = malloc(strlen(text) + 64);
    snprintf(doc, strlen(text) + 64, "{\"auth\": {\"tokens\": [%s]}}", text);
    load_ok(doc);
    t = auth_find(&cfg, token, strlen(token));
    ck_assert_ptr_nonnull(t);
    ck_assert_str_eq(t->name, "deploy");
    ck_assert_str_eq(t->tenant, "acme");
    ck_assert_uint_eq(t->scopes, SCOPE_SUBMIT | SCOPE_CANCEL);
    free(doc);
    free(text);
    free(token);
    json_decref(entry);
}
END_TEST

START_TEST(token_new_unique)
{
    char *seen[64];
    struct error err = {0};

    for (int i = 0; i < 64; i++) {
        json_t *entry = NULL;
        ck_assert_int_eq(cfg_token_new("n", "t", "read", &seen[i], &entry, &err), ST_OK);
        json_decref(entry);
        for (int j = 0; j < i; j++)
            ck_assert_str_ne(seen[i], seen[j]);
    }
    for (int i = 0; i < 64; i++)
        free(seen[i]);
}
END_TEST

static const struct {
    const char *name, *tenant, *scopes, *msg;
} bad_new[] = {
    {"", "t", "read",
     "invalid \"name\": must be 1 to 64 characters of A-Z, a-z, 0-9, \"_\", \".\" or \"-\""},
    {"system", "t", "read", "invalid \"name\": \"system\" is a reserved initiator"},
    {"n", "a/b", "read",
     "invalid \"tenant\": must be 1 to 64 characters of A-Z, a-z, 0-9, \"_\", \".\" or \"-\""},
    {"n", "t", "",
     "invalid \"scopes\": expected a non-empty array of \"submit\", \"read\", \"cancel\", "
     "\"health\", \"admin\" or \"approve\""},
    {"n", "t", "read,,cancel",
     "invalid \"scopes[1]\": expected \"submit\", \"read\", \"cancel\", \"health\", \"admin\" or "
     "\"approve\""},
    {"n", "t", "read,read", "invalid \"scopes[1]\": \"read\" is repeated"},
    {"n", "t", "read, cancel",
     "invalid \"scopes[1]\": expected \"submit\", \"read\", \"cancel\", \"health\", \"admin\" or "
     "\"approve\""},
};

START_TEST(token_new_bad)
{
    struct error err = {0};
    char *token = (char *)"x";
    json_t *entry = (json_t *)1;

    ck_assert_int_eq(cfg_token_new(bad_new[_i].name, bad_new[_i].tenant, bad_new[_i].scopes, &token,
                                   &entry, &err),
                     ST_INVALID);
    ck_assert_str_eq(err.message, bad_new[_i].msg);
    ck_assert_ptr_null(token);
    ck_assert_ptr_null(entry);
}
END_TEST

/* ---- the Authorization header --------------------------------------------- */

START_TEST(header_good)
{
    static const struct {
        const char *in, *token;
    } v[] = {{"Bearer abc", "abc"},
             {"bearer abc", "abc"},
             {"BEARER  \tabc  ", "abc"},
             {"Bearer a-b.c_d~e+f/g==", "a-b.c_d~e+f/g=="},
             {"Bearer " TOK_CI, TOK_CI}};
    struct error err = {0};
    const char *tok;
    size_t n;

    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        ck_assert_int_eq(auth_parse_header(v[i].in, &tok, &n, &err), ST_OK);
        ck_assert_uint_eq(n, strlen(v[i].token));
        ck_assert_int_eq(strncmp(tok, v[i].token, n), 0);
    }
}
END_TEST

#define SCHEME_MSG "could not read the Authorization header: expected \"Bearer <token>\""
#define TOKEN_MSG                                                                                  \
    "could not read the Authorization header: the token must be 1 to 512 characters of A-Z, a-z, " \
    "0-9, \"-._~+/\", then any \"=\""

START_TEST(header_bad)
{
    static const struct {
        const char *in, *msg;
    } v[] = {{"", SCHEME_MSG},           {"Basic dXNlcjpwYXNz", SCHEME_MSG},
             {"Bearer", SCHEME_MSG},     {"Bearerabc", SCHEME_MSG},
             {"Token abc", SCHEME_MSG},  {"Bearer ", TOKEN_MSG},
             {"Bearer    ", TOKEN_MSG},  {"Bearer a b", TOKEN_MSG},
             {"Bearer a,b", TOKEN_MSG},  {"Bearer =abc", TOKEN_MSG},
             {"Bearer ab=c", TOKEN_MSG}, {"Bearer \"abc\"", TOKEN_MSG}};
    struct error err = {0};
    const char *tok;
    size_t n;

    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        ck_assert_int_eq(auth_parse_header(v[i].in, &tok, &n, &err), ST_UNAUTHORIZED);
        ck_assert_str_eq(err.message, v[i].msg);
        ck_assert_ptr_null(tok);
    }
}
END_TEST

START_TEST(header_length_limit)
{
    char h[7 + AUTH_TOKEN_MAX + 2];
    struct error err = {0};
    const char *tok;
    size_t n;

    memcpy(h, "Bearer ", 7);
    memset(h + 7, 'a', AUTH_TOKEN_MAX);
    h[7 + AUTH_TOKEN_MAX] = '\0';
    ck_assert_int_eq(auth_parse_header(h, &tok, &n, &err), ST_OK);
    ck_assert_uint_eq(n, AUTH_TOKEN_MAX);
    h[7 + AUTH_TOKEN_MAX] = 'a';
    h[7 + AUTH_TOKEN_MAX + 1] = '\0';
    ck_assert_int_eq(auth_parse_header(h, &tok, &n, &err), ST_UNAUTHORIZED);
}
END_TEST

/* ---- lookup ----------------------------------------------------------------- */

START_TEST(find_each_and_none)
{
    ck_assert_ptr_eq(auth_find(&cfg, TOK_CI, strlen(TOK_CI)), &cfg.auth.tokens[0]);
    ck_assert_ptr_eq(auth_find(&cfg, TOK_ADMIN, strlen(TOK_ADMIN)), &cfg.auth.tokens[1]);
    ck_assert_ptr_eq(auth_find(&cfg, TOK_OTHER, strlen(TOK_OTHER)), &cfg.auth.tokens[2]);
    ck_assert_ptr_eq(auth_find(&cfg, TOK_HEALTH, strlen(TOK_HEALTH)), &cfg.auth.tokens[3]);
    ck_assert_ptr_null(auth_find(&cfg, TOK_CI, strlen(TOK_CI) - 1)); /* a prefix */
    ck_assert_ptr_null(auth_find(&cfg, "opsrun_ci-token-0123456788", strlen(TOK_CI)));
    ck_assert_ptr_null(auth_find(&cfg, "", 0));
    ck_assert_ptr_null(auth_find(&cfg, SHA_CI, 64)); /* the digest is not the token */
}
END_TEST

START_TEST(find_without_tokens)
{
    ck_assert_ptr_null(auth_find(&cfg, TOK_CI, strlen(TOK_CI)));
}
END_TEST

/* ---- the decision ------------------------------------------------------------ */

static enum status decide(enum auth_need need, const char *header, const char *query, bool stream,
                          const char *tenant, struct principal *who, struct error *err)
{
    const struct auth_request ar = {need, header, query, stream, tenant};

    memset(err, 0, sizeof(*err));
    return auth_decide(&cfg, &ar, who, err);
}

START_TEST(decide_without_tokens)
{
    struct principal who;
    struct error err;

    ck_assert_int_eq(decide(NEED_CANCEL, NULL, NULL, false, NULL, &who, &err), ST_OK);
    ck_assert_str_eq(who.name, "anonymous");
    ck_assert_str_eq(who.tenant, "default");
    ck_assert_ptr_null(who.token);
    ck_assert(!who.all_tenants);
    /* A token is not looked at: there is nothing to check it against. */
    ck_assert_int_eq(decide(NEED_READ, "Bearer whatever", NULL, false, NULL, &who, &err), ST_OK);
    ck_assert_str_eq(who.name, "anonymous");
    ck_assert_int_eq(decide(NEED_READ, NULL, NULL, false, "default", &who, &err), ST_OK);
    ck_assert_int_eq(decide(NEED_READ, NULL, NULL, false, "acme", &who, &err), ST_FORBIDDEN);
    ck_assert_str_eq(err.message, "only an admin token may name another tenant");
    ck_assert_ptr_null(who.challenge);
}
END_TEST

START_TEST(decide_open_routes)
{
    struct principal who;
    struct error err;

    ck_assert_int_eq(decide(NEED_OPEN, NULL, NULL, false, NULL, &who, &err), ST_OK);
    ck_assert_int_eq(decide(NEED_OPEN, "Bearer nonsense", NULL, false, "x y", &who, &err), ST_OK);
    ck_assert_int_eq(decide(NEED_HEALTH, NULL, NULL, false, NULL, &who, &err), ST_UNAUTHORIZED);
    load_ok("{\"auth\": {\"open_health\": true}}");
    ck_assert_int_eq(decide(NEED_HEALTH, NULL, NULL, false, NULL, &who, &err), ST_OK);
    ck_assert_int_eq(decide(NEED_READ, NULL, NULL, false, NULL, &who, &err), ST_UNAUTHORIZED);
}
END_TEST

START_TEST(decide_unauthorized)
{
    struct principal who;
    struct error err;

    ck_assert_int_eq(decide(NEED_READ, NULL, NULL, false, NULL, &who, &err), ST_UNAUTHORIZED);
    ck_assert_str_eq(err.message,
                     "this resource needs a token: send \"Authorization: Bearer <token>\"");
    ck_assert_str_eq(who.challenge, "Bearer realm=\"opsrun\"");
    ck_assert_int_eq(decide(NEED_TOKEN, NULL, NULL, false, NULL, &who, &err), ST_UNAUTHORIZED);

    ck_assert_int_eq(decide(NEED_READ, "Bearer opsrun_nope", NULL, false, NULL, &who, &err),
                     ST_UNAUTHORIZED);
    ck_assert_str_eq(err.message, "unknown token");
    ck_assert_str_eq(who.challenge, "Bearer realm=\"opsrun\", error=\"invalid_token\"");
    ck_assert_str_eq(who.name, "anonymous");

    ck_assert_int_eq(decide(NEED_READ, "Basic x", NULL, false, NULL, &who, &err), ST_UNAUTHORIZED);
    ck_assert_str_eq(err.message, SCHEME_MSG);
    ck_assert_str_eq(who.challenge, "Bearer realm=\"opsrun\", error=\"invalid_token\"");

    /* access_token only on event streams */
    ck_assert_int_eq(decide(NEED_READ, NULL, TOK_CI, false, NULL, &who, &err), ST_UNAUTHORIZED);
    ck_assert_str_eq(err.message,
                     "access_token is accepted only on event streams; send the token in an "
                     "Authorization header: \"Bearer <token>\"");
    ck_assert_int_eq(decide(NEED_READ, NULL, "not a token", true, NULL, &who, &err),
                     ST_UNAUTHORIZED);
    ck_assert_str_eq(err.message, "unknown token");
    ck_assert_int_eq(decide(NEED_READ, "Bearer " TOK_CI, TOK_CI, true, NULL, &who, &err),
                     ST_INVALID);
    ck_assert_str_eq(err.message,
                     "send the token in the Authorization header or as access_token, not both");
}
END_TEST

START_TEST(decide_scopes)
{
    static const struct {
        const char *token;
        enum auth_need need;
        enum status want;
    } v[] = {
        {TOK_CI, NEED_SUBMIT, ST_OK},          {TOK_CI, NEED_READ, ST_OK},
        {TOK_CI, NEED_CANCEL, ST_FORBIDDEN},   {TOK_CI, NEED_HEALTH, ST_FORBIDDEN},
        {TOK_CI, NEED_TOKEN, ST_OK},           {TOK_ADMIN, NEED_SUBMIT, ST_OK},
        {TOK_ADMIN, NEED_READ, ST_OK},         {TOK_ADMIN, NEED_CANCEL, ST_OK},
        {TOK_ADMIN, NEED_HEALTH, ST_OK},       {TOK_HEALTH, NEED_HEALTH, ST_OK},
        {TOK_HEALTH, NEED_READ, ST_FORBIDDEN}, {TOK_HEALTH, NEED_SUBMIT, ST_FORBIDDEN},
        {TOK_OTHER, NEED_CANCEL, ST_OK},       {TOK_OTHER, NEED_HEALTH, ST_FORBIDDEN},
        {TOK_CI, NEED_APPROVE, ST_FORBIDDEN},  {TOK_ADMIN, NEED_APPROVE, ST_OK},
        {TOK_OTHER, NEED_APPROVE, ST_OK},      {TOK_HEALTH, NEED_APPROVE, ST_FORBIDDEN},
    };
    struct principal who;
    struct error err;
    char h[128];

    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        snprintf(h, sizeof(h), "Bearer %s", v[i].token);
        ck_assert_msg(decide(v[i].need, h, NULL, false, NULL, &who, &err) == v[i].want,
                      "case %zu: %s", i, err.message);
    }
    ck_assert_int_eq(decide(NEED_CANCEL, "Bearer " TOK_CI, NULL, false, NULL, &who, &err),
                     ST_FORBIDDEN);
    ck_assert_str_eq(err.message, "token \"ci\" lacks the scope \"cancel\"");
    ck_assert_str_eq(who.challenge, "Bearer realm=\"opsrun\", error=\"insufficient_scope\"");
    ck_assert_str_eq(who.name, "ci");
    ck_assert_int_eq(decide(NEED_APPROVE, "Bearer " TOK_CI, NULL, false, NULL, &who, &err),
                     ST_FORBIDDEN);
    ck_assert_str_eq(err.message, "token \"ci\" lacks the scope \"approve\"");
    ck_assert_uint_eq(cfg.auth.tokens[2].scopes,
                      SCOPE_SUBMIT | SCOPE_READ | SCOPE_CANCEL | SCOPE_APPROVE);
}
END_TEST

START_TEST(decide_tenants)
{
    struct principal who;
    struct error err;

    ck_assert_int_eq(decide(NEED_READ, "Bearer " TOK_CI, NULL, false, NULL, &who, &err), ST_OK);
    ck_assert_str_eq(who.name, "ci");
    ck_assert_str_eq(who.tenant, "acme");
    ck_assert(!who.all_tenants);
    ck_assert_ptr_eq(who.token, &cfg.auth.tokens[0]);
    ck_assert_int_eq(decide(NEED_READ, "Bearer " TOK_CI, NULL, false, "acme", &who, &err), ST_OK);
    ck_assert_int_eq(decide(NEED_READ, "Bearer " TOK_CI, NULL, false, "globex", &who, &err),
                     ST_FORBIDDEN);
    ck_assert_str_eq(err.message, "only an admin token may name another tenant");
    ck_assert_int_eq(decide(NEED_READ, "Bearer " TOK_CI, NULL, false, "bad tenant", &who, &err),
                     ST_INVALID);
    ck_assert_str_eq(err.fields[0].field, "tenant");

    /* admin: every tenant, or the one it names */
    ck_assert_int_eq(decide(NEED_READ, "Bearer " TOK_ADMIN, NULL, false, NULL, &who, &err), ST_OK);
    ck_assert(who.all_tenants);
    ck_assert_str_eq(who.tenant, "ops"); /* where its submissions go */
    ck_assert_int_eq(decide(NEED_READ, "Bearer " TOK_ADMIN, NULL, false, "globex", &who, &err),
                     ST_OK);
    ck_assert(!who.all_tenants);
    ck_assert_str_eq(who.tenant, "globex");

    /* the query token on a stream */
    ck_assert_int_eq(decide(NEED_READ, NULL, TOK_OTHER, true, NULL, &who, &err), ST_OK);
    ck_assert_str_eq(who.name, "other");
    ck_assert_str_eq(who.tenant, "globex");
}
END_TEST

/* ---- a stream's grant after a reload ------------------------------------- */

/* Whether g holds in a configuration of the one token entry given (name,
 * tenant, scopes as JSON array members, the token whose digest it has). */
static bool holds_with(const struct auth_grant *g, const char *name, const char *tenant,
                       const char *scopes, const char *token)
{
    struct config next;
    struct error err = {0};
    char text[1024];
    bool ok;

    cfg_init(&next, &action_registry);
    snprintf(text, sizeof(text),
             "{\"auth\": {\"tokens\": [{\"name\": \"%s\", \"tenant\": \"%s\", "
             "\"scopes\": [%s], \"sha256\": \"%s\"}]}}",
             name, tenant, scopes, digest(token));
    ck_assert_msg(cfg_load_json(&next, text, &err) == ST_OK, "%s", err.message);
    ok = auth_grant_holds(&next, g);
    cfg_cleanup(&next);
    return ok;
}

START_TEST(grant_after_reload)
{
    struct principal who;
    struct auth_grant g, all, one;
    struct error err;
    struct config none;

    ck_assert_int_eq(decide(NEED_READ, "Bearer " TOK_CI, NULL, false, NULL, &who, &err), ST_OK);
    ck_assert(auth_grant_of(&who, &g));
    ck_assert_str_eq(g.name, "ci");
    ck_assert(auth_grant_holds(&cfg, &g));
    ck_assert(holds_with(&g, "ci", "acme", "\"read\"", TOK_CI));
    ck_assert(holds_with(&g, "renamed", "acme", "\"read\"", TOK_CI)); /* same secret */
    ck_assert(holds_with(&g, "ci", "acme", "\"admin\"", TOK_CI));
    ck_assert(!holds_with(&g, "ci", "acme", "\"read\"", TOK_OTHER));      /* new secret */
    ck_assert(!holds_with(&g, "ci", "globex", "\"read\"", TOK_CI));       /* moved */
    ck_assert(!holds_with(&g, "ci", "acme", "\"submit\"", TOK_CI));       /* no read */
    ck_assert(!holds_with(&g, "other", "globex", "\"read\"", TOK_OTHER)); /* removed */
    cfg_init(&none, &action_registry);
    ck_assert(!auth_grant_holds(&none, &g)); /* every token removed */
    cfg_cleanup(&none);

    /* an admin reading every tenant, or one it named */
    ck_assert_int_eq(decide(NEED_READ, "Bearer " TOK_ADMIN, NULL, false, NULL, &who, &err), ST_OK);
    ck_assert(auth_grant_of(&who, &all));
    ck_assert(all.all_tenants);
    ck_assert(holds_with(&all, "root", "elsewhere", "\"admin\"", TOK_ADMIN));
    ck_assert(!holds_with(&all, "root", "ops", "\"read\"", TOK_ADMIN));
    ck_assert_int_eq(decide(NEED_READ, "Bearer " TOK_ADMIN, NULL, false, "globex", &who, &err),
                     ST_OK);
    ck_assert(auth_grant_of(&who, &one));
    ck_assert(holds_with(&one, "root", "globex", "\"read\"", TOK_ADMIN));
    ck_assert(!holds_with(&one, "root", "ops", "\"read\"", TOK_ADMIN));
}
END_TEST

START_TEST(grant_without_tokens)
{
    struct principal who;
    struct auth_grant g;
    struct error err;

    ck_assert_int_eq(decide(NEED_READ, NULL, NULL, true, NULL, &who, &err), ST_OK);
    ck_assert(!auth_grant_of(&who, &g));
}
END_TEST

static Suite *auth_suite(void)
{
    Suite *s = suite_create("auth");
    TCase *tc = tcase_create("config");
    TCase *tn = tcase_create("token_new");
    TCase *tr = tcase_create("request");
    TCase *tx = tcase_create("no_tokens");

    tcase_add_checked_fixture(tc, setup_tokens, teardown);
    tcase_add_test(tc, token_digest_is_sha256_of_text);
    tcase_add_test(tc, tokens_load);
    tcase_add_loop_test(tc, tokens_bad, 0, (int)(sizeof(bad_tokens) / sizeof(bad_tokens[0])));
    tcase_add_test(tc, tokens_failed_load_keeps_old);
    tcase_add_test(tc, print_config_round_trip);
    tcase_add_test(tc, exposure_with_tokens);
    suite_add_tcase(s, tc);

    tcase_add_checked_fixture(tx, setup, teardown);
    tcase_add_test(tx, tokens_default_none);
    tcase_add_test(tx, tokens_upper_case_hex);
    tcase_add_test(tx, flag_and_env);
    tcase_add_test(tx, loopback_hosts);
    tcase_add_test(tx, exposure_without_tokens);
    tcase_add_test(tx, find_without_tokens);
    tcase_add_test(tx, decide_without_tokens);
    tcase_add_test(tx, grant_without_tokens);
    suite_add_tcase(s, tx);

    tcase_add_checked_fixture(tn, setup, teardown);
    tcase_add_test(tn, token_new_loads_and_authenticates);
    tcase_add_test(tn, token_new_unique);
    tcase_add_loop_test(tn, token_new_bad, 0, (int)(sizeof(bad_new) / sizeof(bad_new[0])));
    suite_add_tcase(s, tn);

    tcase_add_checked_fixture(tr, setup_tokens, teardown);
    tcase_add_test(tr, header_good);
    tcase_add_test(tr, grant_after_reload);
    tcase_add_test(tr, header_bad);
    tcase_add_test(tr, header_length_limit);
    tcase_add_test(tr, find_each_and_none);
    tcase_add_test(tr, decide_open_routes);
    tcase_add_test(tr, decide_unauthorized);
    tcase_add_test(tr, decide_scopes);
    tcase_add_test(tr, decide_tenants);
    suite_add_tcase(s, tr);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(auth_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
