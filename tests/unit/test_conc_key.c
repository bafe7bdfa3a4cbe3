/* tests/unit/test_conc_key.c — the Check suite for common/conc_key.c: key
 * templates compiled into parts (literal text kept whole, every error with
 * its exact message) and evaluated over a run's tenant and input (each
 * kind of value, a missing one, a key past its length, Unicode passed
 * through as it is).
 *
 * System headers come before conc_key.h, ahead of common.h's poison pragma. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/conc_key.h"

static json_t *parse(const char *text)
{
    json_t *j = json_loads(text, JSON_DECODE_ANY, NULL);

    ck_assert_ptr_nonnull(j);
    return j;
}

/* tmpl compiles to the parts written as JSON in want. */
static void ck_compiles(const char *tmpl, const char *want)
{
    struct error err = {0};
    json_t *parts = NULL, *w = parse(want);
    char *got;

    ck_assert_msg(conc_key_compile(tmpl, &parts, &err) == ST_OK, "%s: %s", tmpl, err.message);
    got = json_dumps(parts, JSON_COMPACT);
    ck_assert_msg(json_equal(parts, w), "%s: got %s, want %s", tmpl, got, want);
    free(got);
    json_decref(parts);
    json_decref(w);
}

START_TEST(compile_parts)
{
    ck_compiles("{{input:/labels/instance}}", "[[\"input\", \"/labels/instance\"]]");
    ck_compiles("{{tenant}}", "[[\"tenant\"]]");
    ck_compiles("all", "[[\"text\", \"all\"]]");
    ck_compiles("host-{{input:/host}}:{{tenant}}/{{input:/a~1b/0}}!",
                "[[\"text\", \"host-\"], [\"input\", \"/host\"], [\"text\", \":\"], [\"tenant\"],"
                " [\"text\", \"/\"], [\"input\", \"/a~1b/0\"], [\"text\", \"!\"]]");
    /* placeholders side by side: no empty text between them */
    ck_compiles("{{tenant}}{{input:/x}}", "[[\"tenant\"], [\"input\", \"/x\"]]");
    /* a lone "}}" and single braces are text; "/" alone is a pointer */
    ck_compiles("a}}b{c}", "[[\"text\", \"a}}b{c}\"]]");
    ck_compiles("{{input:/}}", "[[\"input\", \"/\"]]");
    ck_compiles("é–{{input:/ключ}}", "[[\"text\", \"é–\"], [\"input\", \"/ключ\"]]");
}
END_TEST

/* Everything before the first "}}" is one placeholder, so what follows a
 * text stays in the one text part that holds it. */
START_TEST(compile_keeps_text_whole)
{
    struct error err = {0};
    json_t *parts = NULL;

    ck_assert_int_eq(conc_key_compile("a b c {{tenant}} d e", &parts, &err), ST_OK);
    ck_assert_uint_eq(json_array_size(parts), 3);
    ck_assert_str_eq(json_string_value(json_array_get(json_array_get(parts, 0), 1)), "a b c ");
    ck_assert_str_eq(json_string_value(json_array_get(json_array_get(parts, 2), 1)), " d e");
    json_decref(parts);
}
END_TEST

static const struct {
    const char *tmpl, *message;
} bad[] = {
    {"", "the template is empty"},
    {"{{env:HOME}}",
     "unknown placeholder \"{{env:HOME}}\": a key takes {{input:/json/pointer}} and {{tenant}}"},
    {"x-{{run:/id}}",
     "unknown placeholder \"{{run:/id}}\": a key takes {{input:/json/pointer}} and {{tenant}}"},
    {"{{input}}",
     "unknown placeholder \"{{input}}\": a key takes {{input:/json/pointer}} and {{tenant}}"},
    {"{{ tenant }}",
     "unknown placeholder \"{{ tenant }}\": a key takes {{input:/json/pointer}} and {{tenant}}"},
    {"{{}}", "unknown placeholder \"{{}}\": a key takes {{input:/json/pointer}} and {{tenant}}"},
    {"{{input:}}", "\"{{input:}}\" is the whole input, and a key takes one value of it: name it, "
                   "as in {{input:/labels/instance}}"},
    {"{{input:host}}", "\"{{input:host}}\": \"host\" is not a JSON pointer (RFC 6901), such as "
                       "\"/labels/instance\""},
    {"{{input:/a~2}}", "\"{{input:/a~2}}\": \"/a~2\" is not a JSON pointer (RFC 6901), such as "
                       "\"/labels/instance\""},
    {"a-{{input:/host", "\"{{input:/host\" has no closing \"}}\""},
    {"{{tenant}}{{", "\"{{\" has no closing \"}}\""},
    /* a "{{" inside a placeholder: the first one was left open */
    {"{{input:/a{{tenant}}", "\"{{input:/a\" has no closing \"}}\""},
    {"x{{input:/a-{{input:/b", "\"{{input:/a-\" has no closing \"}}\""},
    {"\xff", "the template is not valid UTF-8"},
};

START_TEST(compile_errors)
{
    struct error err = {0};
    json_t *parts = (json_t *)&err; /* set to NULL on failure */

    ck_assert_int_eq(conc_key_compile(bad[_i].tmpl, &parts, &err), ST_INVALID);
    ck_assert_str_eq(err.message, bad[_i].message);
    ck_assert_ptr_null(parts);
}
END_TEST

/* 1024 bytes are a template; 1025 are not (most of them a pointer, so
 * that the literal text stays within a key). */
START_TEST(compile_length_bound)
{
    char tmpl[1026];
    struct error err = {0};
    json_t *parts = NULL;

    memset(tmpl, 'k', 1024);
    memcpy(tmpl, "{{input:/", 9);
    memcpy(tmpl + 1000, "}}", 2);
    tmpl[1024] = '\0';
    ck_assert_int_eq(conc_key_compile(tmpl, &parts, &err), ST_OK);
    json_decref(parts);
    tmpl[1024] = 'k';
    tmpl[1025] = '\0';
    ck_assert_int_eq(conc_key_compile(tmpl, &parts, &err), ST_INVALID);
    ck_assert_str_eq(err.message, "the template is longer than 1024 bytes");
    ck_assert_int_eq(conc_key_compile(NULL, &parts, &err), ST_INVALID);
    ck_assert_str_eq(err.message, "the template is empty");
}
END_TEST

/* The key of tmpl for tenant over the input written as JSON. */
static enum status eval(const char *tmpl, const char *tenant, const char *input, char **out,
                        struct error *err)
{
    json_t *parts = NULL, *in = input ? parse(input) : NULL;
    enum status st;

    ck_assert_msg(conc_key_compile(tmpl, &parts, err) == ST_OK, "%s: %s", tmpl, err->message);
    st = conc_key_eval(parts, tenant, in, out, err);
    json_decref(parts);
    json_decref(in);
    return st;
}

static void ck_evals(const char *tmpl, const char *tenant, const char *input, const char *want)
{
    struct error err = {0};
    char *out = NULL;

    ck_assert_msg(eval(tmpl, tenant, input, &out, &err) == ST_OK, "%s: %s", tmpl, err.message);
    ck_assert_str_eq(out, want);
    free(out);
}

static void ck_eval_fails(const char *tmpl, const char *input, const char *message)
{
    struct error err = {0};
    char *out = (char *)&err; /* set to NULL on failure */

    ck_assert_int_eq(eval(tmpl, "acme", input, &out, &err), ST_INVALID);
    ck_assert_str_eq(err.message, message);
    ck_assert_ptr_null(out);
}

/* A key is at most 512 bytes, and every key holds the template's literal
 * text: a template with more than 512 bytes of it could make no key, and
 * is refused when compiled, the bytes counted (an "é" is two) across the
 * placeholders. 512 bytes of it make a key of an empty value. */
START_TEST(compile_literal_text_bound)
{
    char tmpl[1100], input[16] = "{\"x\": \"\"}", *out = NULL;
    struct error err = {0};
    json_t *parts = NULL;
    size_t n;

    memset(tmpl, 'a', 300);
    n = 300 + (size_t)snprintf(tmpl + 300, sizeof(tmpl) - 300, "{{input:/x}}{{tenant}}");
    memset(tmpl + n, 'b', 212);
    tmpl[n + 212] = '\0';
    ck_assert_int_eq(conc_key_compile(tmpl, &parts, &err), ST_OK);
    json_decref(parts);
    ck_assert_int_eq(eval(tmpl, "", input, &out, &err), ST_OK);
    ck_assert_uint_eq(strlen(out), 512);
    free(out);
    tmpl[n + 212] = 'b';
    tmpl[n + 213] = '\0';
    ck_assert_int_eq(conc_key_compile(tmpl, &parts, &err), ST_INVALID);
    ck_assert_str_eq(err.message,
                     "the template's literal text is 513 bytes, more than the 512 of a key: it "
                     "could make no key");
    ck_assert_ptr_null(parts);
    n = 0;
    for (int i = 0; i < 257; i++)
        n += (size_t)snprintf(tmpl + n, sizeof(tmpl) - n, "\xc3\xa9");
    ck_assert_int_eq(conc_key_compile(tmpl, &parts, &err), ST_INVALID);
    ck_assert_str_eq(err.message,
                     "the template's literal text is 514 bytes, more than the 512 of a key: it "
                     "could make no key");
}
END_TEST

/* Strings as they are, integers in decimal, booleans as true and false:
 * what opsrun_conc_key gives in SQL. */
START_TEST(eval_values)
{
    const char *in = "{\"labels\": {\"instance\": \"db-1:9100\"}, \"n\": -42, \"big\": "
                     "9223372036854775807, \"t\": true, \"f\": false, \"list\": [\"a\", 7],"
                     " \"e\": \"\", \"a/b\": \"slash\", \"a~b\": \"tilde\", \"min\": "
                     "-9223372036854775808, \"z\": 0, \"mz\": -0, \"\": \"empty name\"}";

    ck_evals("host-{{input:/labels/instance}}", "acme", in, "host-db-1:9100");
    ck_evals("{{input:/n}}/{{input:/big}}", "acme", in, "-42/9223372036854775807");
    ck_evals("{{input:/t}},{{input:/f}}", "acme", in, "true,false");
    ck_evals("{{input:/list/0}}{{input:/list/1}}", "acme", in, "a7");
    ck_evals("{{input:/a~1b}}", "acme", in, "slash");
    ck_evals("{{input:/a~0b}}", "acme", in, "tilde");
    ck_evals("{{input:/}}", "acme", in, "empty name");
    ck_evals("{{input:/min}} {{input:/z}} {{input:/mz}}", "acme", in, "-9223372036854775808 0 0");
    ck_evals("{{tenant}}:{{input:/e}}:", "acme", in, "acme::");
    ck_evals("fixed", "acme", NULL, "fixed");
    ck_evals("[{{tenant}}]", NULL, NULL, "[]");
}
END_TEST

/* Unicode, escapes and bytes of every kind pass through untouched. */
START_TEST(eval_unicode_unchanged)
{
    ck_evals("{{input:/h}}", "t",
             "{\"h\": \"h\\u00f4te-\\u0444-\\ud83d\\ude80 \\\"q\\\" \\\\ \\t\"}",
             "h\xc3\xb4te-\xd1\x84-\xf0\x9f\x9a\x80 \"q\" \\ \t");
    ck_evals("ключ-{{tenant}}", "mandant-ü", NULL, "ключ-mandant-ü");
}
END_TEST

START_TEST(eval_errors)
{
    const char *in = "{\"o\": {}, \"a\": [], \"z\": null, \"r\": 1.5, \"w\": 2.0, \"x\": 1e3,"
                     " \"labels\": {}}";

    ck_eval_fails("{{input:/labels/instance}}", in,
                  "the input has no value at \"/labels/instance\"");
    ck_eval_fails("{{input:/labels/instance}}", NULL,
                  "the input has no value at \"/labels/instance\"");
    ck_eval_fails("{{input:/a/0}}", in, "the input has no value at \"/a/0\"");
    ck_eval_fails("{{input:/o}}", in,
                  "the value at \"/o\" is an object, not a string, a whole number or a boolean");
    ck_eval_fails("{{input:/a}}", in,
                  "the value at \"/a\" is an array, not a string, a whole number or a boolean");
    ck_eval_fails("{{input:/z}}", in,
                  "the value at \"/z\" is null, not a string, a whole number or a boolean");
    ck_eval_fails("{{input:/r}}", in,
                  "the value at \"/r\" is a number with a decimal point or an exponent, not a "
                  "string, a whole number or a boolean");
    ck_eval_fails("{{input:/w}}", in,
                  "the value at \"/w\" is a number with a decimal point or an exponent, not a "
                  "string, a whole number or a boolean");
    ck_eval_fails("{{input:/x}}", in,
                  "the value at \"/x\" is a number with a decimal point or an exponent, not a "
                  "string, a whole number or a boolean");
    /* the first part that fails is named */
    ck_eval_fails("{{input:/missing}}-{{input:/o}}", in, "the input has no value at \"/missing\"");
}
END_TEST

/* A string with a NUL in it (jansson builds one; no parser does) would be
 * cut short as a C string: refused. */
START_TEST(eval_nul_refused)
{
    struct error err = {0};
    json_t *parts = NULL, *in = json_pack("{s:s#}", "s", "a\0b", 3);
    char *out = NULL;

    ck_assert_int_eq(conc_key_compile("{{input:/s}}", &parts, &err), ST_OK);
    ck_assert_int_eq(conc_key_eval(parts, "t", in, &out, &err), ST_INVALID);
    ck_assert_str_eq(err.message, "the value at \"/s\" holds a NUL character");
    ck_assert_ptr_null(out);
    json_decref(parts);
    json_decref(in);
}
END_TEST

/* 512 bytes are a key, 513 are not, whichever part makes them. */
START_TEST(eval_length_bound)
{
    char value[600], input[700], want[700];
    struct error err = {0};
    char *out = NULL;

    memset(value, 'v', 508);
    value[508] = '\0';
    snprintf(input, sizeof(input), "{\"v\": \"%s\"}", value);
    snprintf(want, sizeof(want), "acme%s", value);
    ck_evals("{{tenant}}{{input:/v}}", "acme", input, want);
    ck_assert_int_eq(eval("{{tenant}}{{input:/v}}!", "acme", input, &out, &err), ST_INVALID);
    ck_assert_str_eq(err.message, "the concurrency key would be 513 bytes, more than 512");
    ck_assert_ptr_null(out);
    ck_assert_int_eq(eval("{{input:/v}}{{input:/v}}", "acme", input, &out, &err), ST_INVALID);
    ck_assert_str_eq(err.message, "the concurrency key would be 1016 bytes, more than 512");
}
END_TEST

/* The bounds count bytes, not characters: "é" is two. */
START_TEST(bounds_count_bytes)
{
    char tmpl[1100], input[1200], want[600];
    struct error err = {0};
    json_t *parts = NULL;
    char *out = NULL;
    size_t n = 0;

    n = (size_t)snprintf(tmpl, sizeof(tmpl), "{{input:/");
    for (int i = 0; i < 506; i++)
        n += (size_t)snprintf(tmpl + n, sizeof(tmpl) - n, "\xc3\xa9");
    n += (size_t)snprintf(tmpl + n, sizeof(tmpl) - n, "}}x");
    ck_assert_int_eq(conc_key_compile(tmpl, &parts, &err), ST_OK); /* 1024 bytes */
    json_decref(parts);
    snprintf(tmpl + n, sizeof(tmpl) - n, "x");
    ck_assert_int_eq(conc_key_compile(tmpl, &parts, &err), ST_INVALID);
    ck_assert_str_eq(err.message, "the template is longer than 1024 bytes");

    n = (size_t)snprintf(input, sizeof(input), "{\"v\": \"");
    for (int i = 0; i < 256; i++)
        n += (size_t)snprintf(input + n, sizeof(input) - n, "\xc3\xa9");
    snprintf(input + n, sizeof(input) - n, "\"}");
    memcpy(want, input + 7, 512);
    want[512] = '\0';
    ck_evals("{{input:/v}}", "acme", input, want); /* 256 characters, 512 bytes */
    ck_assert_int_eq(eval("{{input:/v}}x", "acme", input, &out, &err), ST_INVALID);
    ck_assert_str_eq(err.message, "the concurrency key would be 513 bytes, more than 512");
    ck_assert_ptr_null(out);
}
END_TEST

/* Parts that conc_key_compile did not make are the caller's bug. */
START_TEST(eval_foreign_parts)
{
    struct error err = {0};
    char *out = NULL;
    json_t *p = parse("[[\"env\", \"HOME\"]]"), *o = parse("{}");

    ck_assert_int_eq(conc_key_eval(p, "t", NULL, &out, &err), ST_INTERNAL);
    ck_assert_int_eq(conc_key_eval(o, "t", NULL, &out, &err), ST_INTERNAL);
    ck_assert_ptr_null(out);
    json_decref(p);
    json_decref(o);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("conc_key");
    TCase *c = tcase_create("compile"), *e = tcase_create("eval");
    SRunner *r;
    int failed;

    tcase_add_test(c, compile_parts);
    tcase_add_test(c, compile_keeps_text_whole);
    tcase_add_loop_test(c, compile_errors, 0, (int)(sizeof(bad) / sizeof(bad[0])));
    tcase_add_test(c, compile_length_bound);
    tcase_add_test(c, compile_literal_text_bound);
    tcase_add_test(e, eval_values);
    tcase_add_test(e, eval_unicode_unchanged);
    tcase_add_test(e, eval_errors);
    tcase_add_test(e, eval_nul_refused);
    tcase_add_test(e, eval_length_bound);
    tcase_add_test(e, bounds_count_bytes);
    tcase_add_test(e, eval_foreign_parts);
    suite_add_tcase(s, c);
    suite_add_tcase(s, e);
    r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
