/* tests/unit/test_alertmanager.c — the pure parts of the Alertmanager
 * webhook intake (handlers/alertmanager.c): envelope and per-alert
 * validation with the exact field names and messages, the alert's identity
 * (fingerprint, or a hash of its labels) and the run's input. Routing
 * (precedence, regex, default route, no match) is covered by
 * tests/unit/test_cfg.c; the HTTP behaviour by tests/e2e/test_alertmanager.c. */
#include "handlers/alertmanager.h"
#include "handlers/handlers.h"

#include "common/canon_json.h"
#include "common/ids.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

static json_t *parse(const char *text)
{
    json_error_t jerr;
    json_t *j = json_loads(text, JSON_DECODE_ANY, &jerr);
    ck_assert_msg(j != NULL, "bad test JSON (%s): %s", jerr.text, text);
    return j;
}

/* A webhook body as Alertmanager documents it (version 4), with a field no
 * current Alertmanager sends at either level. */
static const char envelope_json[] =
    "{\"receiver\": \"opsrun\","
    " \"status\": \"firing\","
    " \"alerts\": ["
    "  {\"status\": \"firing\","
    "   \"labels\": {\"alertname\": \"HighLatency\", \"severity\": \"critical\","
    "               \"instance\": \"api-1:9100\", \"job\": \"api\"},"
    "   \"annotations\": {\"summary\": \"p99 latency above 2s\","
    "                    \"runbook_url\": \"https://runbooks.example.com/latency\"},"
    "   \"startsAt\": \"2026-11-22T09:52:26.739266876+02:00\","
    "   \"endsAt\": \"0001-01-01T00:00:00Z\","
    "   \"generatorURL\": \"http://prometheus:9090/graph?g0.expr=latency%3E2&g0.tab=1\","
    "   \"fingerprint\": \"c4f2a9b1d0e3f567\","
    "   \"silencedBy\": [], \"inhibitedBy\": []}"
    " ],"
    " \"groupLabels\": {\"alertname\": \"HighLatency\"},"
    " \"commonLabels\": {\"alertname\": \"HighLatency\", \"severity\": \"critical\"},"
    " \"commonAnnotations\": {\"summary\": \"p99 latency above 2s\"},"
    " \"externalURL\": \"http://alertmanager:9093\","
    " \"version\": \"4\","
    " \"groupKey\": \"{}/{severity=\\\"critical\\\"}:{alertname=\\\"HighLatency\\\"}\","
    " \"truncatedAlerts\": 0,"
    " \"futureField\": {\"nested\": [1, 2, 3]}}";

/* ---- am_parse_envelope ---- */

START_TEST(envelope_valid)
{
    json_t *body = parse(envelope_json);
    struct am_envelope env;
    struct error err = {0};

    ck_assert_int_eq(am_parse_envelope(body, &env, &err), ST_OK);
    ck_assert_uint_eq(err.nfields, 0);
    ck_assert_str_eq(env.version, "4");
    ck_assert_str_eq(env.receiver, "opsrun");
    ck_assert_str_eq(env.status, "firing");
    ck_assert_str_eq(env.external_url, "http://alertmanager:9093");
    ck_assert_str_eq(env.group_key, "{}/{severity=\"critical\"}:{alertname=\"HighLatency\"}");
    ck_assert_ptr_eq(env.alerts, json_object_get(body, "alerts"));
    ck_assert_uint_eq(json_array_size(env.alerts), 1);
    ck_assert_int_eq(env.truncated, 0);
    json_decref(body);
}
END_TEST

START_TEST(envelope_minimal_and_truncated)
{
    struct am_envelope env;
    struct error err = {0};
    json_t *body = parse("{\"version\": \"4\", \"alerts\": []}");

    /* Only alerts is required; absent strings are NULL, truncated 0. */
    ck_assert_int_eq(am_parse_envelope(body, &env, &err), ST_OK);
    ck_assert_ptr_null(env.receiver);
    ck_assert_ptr_null(env.status);
    ck_assert_ptr_null(env.external_url);
    ck_assert_ptr_null(env.group_key);
    ck_assert_uint_eq(json_array_size(env.alerts), 0);
    ck_assert_int_eq(env.truncated, 0);
    json_decref(body);

    body = parse("{\"alerts\": [], \"truncatedAlerts\": 1234567890123}");
    ck_assert_int_eq(am_parse_envelope(body, &env, &err), ST_OK);
    ck_assert_ptr_null(env.version);
    ck_assert_int_eq(env.truncated, 1234567890123LL);
    json_decref(body);
}
END_TEST

/* One malformed envelope and the one problem it must report. */
static const struct {
    const char *body, *field, *message;
} bad_envelopes[] = {
    {"{\"version\": \"4\"}", "alerts", "is required"},
    {"{\"version\": \"4\", \"alerts\": {}}", "alerts", "must be an array"},
    {"{\"version\": \"4\", \"alerts\": null}", "alerts", "must be an array"},
    {"{\"version\": \"4\", \"alerts\": \"[]\"}", "alerts", "must be an array"},
    {"{\"version\": 4, \"alerts\": []}", "version", "must be a string"},
    {"{\"version\": \"4\", \"alerts\": [], \"receiver\": 1}", "receiver", "must be a string"},
    {"{\"version\": \"4\", \"alerts\": [], \"status\": true}", "status", "must be a string"},
    {"{\"version\": \"4\", \"alerts\": [], \"groupKey\": {}}", "groupKey", "must be a string"},
    {"{\"version\": \"4\", \"alerts\": [], \"externalURL\": [\"http://am\"]}", "externalURL",
     "must be a string"},
    {"{\"version\": \"4\", \"alerts\": [], \"groupLabels\": []}", "groupLabels",
     "must be an object"},
    {"{\"version\": \"4\", \"alerts\": [], \"groupLabels\": \"alertname\"}", "groupLabels",
     "must be an object"},
    {"{\"version\": \"4\", \"alerts\": [], \"commonLabels\": 3}", "commonLabels",
     "must be an object"},
    {"{\"version\": \"4\", \"alerts\": [], \"commonAnnotations\": null}", "commonAnnotations",
     "must be an object"},
    {"{\"version\": \"4\", \"alerts\": [], \"truncatedAlerts\": -1}", "truncatedAlerts",
     "must not be negative"},
    {"{\"version\": \"4\", \"alerts\": [], \"truncatedAlerts\": 1.5}", "truncatedAlerts",
     "must be an integer"},
    {"{\"version\": \"4\", \"alerts\": [], \"truncatedAlerts\": \"3\"}", "truncatedAlerts",
     "must be an integer"},
};

START_TEST(envelope_malformed)
{
    json_t *body = parse(bad_envelopes[_i].body);
    struct am_envelope env;
    struct error err = {0};
    char message[600];

    ck_assert_int_eq(am_parse_envelope(body, &env, &err), ST_INVALID);
    ck_assert_msg(err.nfields == 1, "%s: %u problems, want 1 (first: %s %s)",
                  bad_envelopes[_i].body, err.nfields, err.fields[0].field, err.fields[0].message);
    ck_assert_str_eq(err.fields[0].field, bad_envelopes[_i].field);
    ck_assert_str_eq(err.fields[0].message, bad_envelopes[_i].message);
    snprintf(message, sizeof(message), "invalid \"%s\": %s", bad_envelopes[_i].field,
             bad_envelopes[_i].message);
    ck_assert_str_eq(err.message, message);
    json_decref(body);
}
END_TEST

START_TEST(envelope_reports_every_field)
{
    json_t *body = parse("{\"version\": 4, \"receiver\": [], \"groupKey\": 1,"
                         " \"externalURL\": false, \"groupLabels\": [],"
                         " \"truncatedAlerts\": -2}");
    struct am_envelope env;
    struct error err = {0};
    static const char *const want[] = {"version",     "receiver",        "externalURL", "groupKey",
                                       "groupLabels", "truncatedAlerts", "alerts"};

    ck_assert_int_eq(am_parse_envelope(body, &env, &err), ST_INVALID);
    ck_assert_uint_eq(err.nfields, sizeof(want) / sizeof(want[0]));
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        bool found = false;
        for (unsigned k = 0; k < err.nfields; k++)
            found = found || strcmp(err.fields[k].field, want[i]) == 0;
        ck_assert_msg(found, "no problem reported for \"%s\"", want[i]);
    }
    json_decref(body);
}
END_TEST

/* ---- am_parse_alert ---- */

START_TEST(alert_valid_firing)
{
    json_t *body = parse(envelope_json);
    const json_t *alert = json_array_get(json_object_get(body, "alerts"), 0);
    struct am_alert a;
    struct error err = {0};

    /* Unknown per-alert fields (silencedBy, inhibitedBy) are accepted. */
    ck_assert_int_eq(am_parse_alert(alert, 0, &a, &err), ST_OK);
    ck_assert_uint_eq(err.nfields, 0);
    ck_assert(!a.resolved);
    ck_assert_ptr_eq(a.labels, json_object_get(alert, "labels"));
    ck_assert_str_eq(a.alertname, "HighLatency");
    ck_assert_str_eq(a.fingerprint, "c4f2a9b1d0e3f567");
    json_decref(body);
}
END_TEST

START_TEST(alert_valid_resolved_minimal)
{
    json_t *alert = parse("{\"status\": \"resolved\", \"labels\": {\"job\": \"api\"},"
                          " \"endsAt\": \"2026-11-22T10:02:26.739266876+02:00\","
                          " \"newerField\": 1}");
    struct am_alert a;
    struct error err = {0};

    ck_assert_int_eq(am_parse_alert(alert, 7, &a, &err), ST_OK);
    ck_assert(a.resolved);
    /* No alertname label: "" (routing compares it as alert_type). */
    ck_assert_str_eq(a.alertname, "");
    ck_assert_ptr_null(a.fingerprint);
    ck_assert_ptr_eq(a.labels, json_object_get(alert, "labels"));
    json_decref(alert);

    /* Empty labels are labels. */
    alert = parse("{\"status\": \"firing\", \"labels\": {}}");
    ck_assert_int_eq(am_parse_alert(alert, 0, &a, &err), ST_OK);
    ck_assert(!a.resolved);
    json_decref(alert);
}
END_TEST

START_TEST(alert_fingerprint_lengths)
{
    char text[512], fp[130];
    json_t *alert;
    struct am_alert a;
    struct error err = {0};

    memset(fp, 'f', 128);
    fp[128] = '\0';
    snprintf(
        text, sizeof(text),
        "{\"status\": \"firing\", \"labels\": {\"alertname\": \"X\"}, \"fingerprint\": \"%s\"}",
        fp);
    alert = parse(text);
    ck_assert_int_eq(am_parse_alert(alert, 0, &a, &err), ST_OK);
    ck_assert_uint_eq(strlen(a.fingerprint), 128);
    json_decref(alert);

    alert = parse("{\"status\": \"firing\", \"labels\": {}, \"fingerprint\": \"a\"}");
    ck_assert_int_eq(am_parse_alert(alert, 0, &a, &err), ST_OK);
    ck_assert_str_eq(a.fingerprint, "a");
    json_decref(alert);
}
END_TEST

/* One invalid alert (as alerts[2]) and the problem it must report first. */
static const struct {
    const char *alert, *field, *message;
} bad_alerts[] = {
    {"[]", "alerts[2]", "must be an object"},
    {"\"firing\"", "alerts[2]", "must be an object"},
    {"null", "alerts[2]", "must be an object"},
    {"{\"labels\": {\"alertname\": \"X\"}}", "alerts[2].status",
     "must be \"firing\" or \"resolved\""},
    {"{\"status\": \"pending\", \"labels\": {}}", "alerts[2].status",
     "must be \"firing\" or \"resolved\""},
    {"{\"status\": \"Firing\", \"labels\": {}}", "alerts[2].status",
     "must be \"firing\" or \"resolved\""},
    {"{\"status\": \"\", \"labels\": {}}", "alerts[2].status",
     "must be \"firing\" or \"resolved\""},
    {"{\"status\": 1, \"labels\": {}}", "alerts[2].status", "must be a string"},
    {"{\"status\": \"firing\"}", "alerts[2].labels", "is required"},
    {"{\"status\": \"firing\", \"labels\": [\"alertname\"]}", "alerts[2].labels",
     "must be an object"},
    {"{\"status\": \"firing\", \"labels\": \"alertname=X\"}", "alerts[2].labels",
     "must be an object"},
    {"{\"status\": \"firing\", \"labels\": {\"alertname\": \"X\", \"replicas\": 3}}",
     "alerts[2].labels", "label \"replicas\" must be a string"},
    {"{\"status\": \"firing\", \"labels\": {\"alertname\": null}}", "alerts[2].labels",
     "label \"alertname\" must be a string"},
    {"{\"status\": \"firing\", \"labels\": {}, \"fingerprint\": \"\"}", "alerts[2].fingerprint",
     "must be 1 to 128 characters"},
    {"{\"status\": \"firing\", \"labels\": {}, \"fingerprint\": 42}", "alerts[2].fingerprint",
     "must be a string"},
    {"{\"status\": \"firing\", \"labels\": {}, \"annotations\": [\"x\"]}", "alerts[2].annotations",
     "must be an object"},
    {"{\"status\": \"firing\", \"labels\": {}, \"annotations\": \"summary\"}",
     "alerts[2].annotations", "must be an object"},
    {"{\"status\": \"firing\", \"labels\": {}, \"startsAt\": 1763797946}", "alerts[2].startsAt",
     "must be a string"},
    {"{\"status\": \"firing\", \"labels\": {}, \"endsAt\": null}", "alerts[2].endsAt",
     "must be a string"},
    {"{\"status\": \"firing\", \"labels\": {}, \"generatorURL\": {}}", "alerts[2].generatorURL",
     "must be a string"},
};

START_TEST(alert_invalid)
{
    json_t *alert = parse(bad_alerts[_i].alert);
    struct am_alert a;
    struct error err = {0};

    ck_assert_int_eq(am_parse_alert(alert, 2, &a, &err), ST_INVALID);
    ck_assert_uint_ge(err.nfields, 1);
    ck_assert_str_eq(err.fields[0].field, bad_alerts[_i].field);
    ck_assert_str_eq(err.fields[0].message, bad_alerts[_i].message);
    json_decref(alert);
}
END_TEST

START_TEST(alert_fingerprint_too_long)
{
    char text[512], fp[130];
    json_t *alert;
    struct am_alert a;
    struct error err = {0};

    memset(fp, '0', 129);
    fp[129] = '\0';
    snprintf(
        text, sizeof(text),
        "{\"status\": \"firing\", \"labels\": {\"alertname\": \"X\"}, \"fingerprint\": \"%s\"}",
        fp);
    alert = parse(text);
    ck_assert_int_eq(am_parse_alert(alert, 0, &a, &err), ST_INVALID);
    ck_assert_uint_eq(err.nfields, 1);
    ck_assert_str_eq(err.fields[0].field, "alerts[0].fingerprint");
    ck_assert_str_eq(err.fields[0].message, "must be 1 to 128 characters");
    json_decref(alert);
}
END_TEST

/* The prefix carries the alert's index, whatever its width. */
START_TEST(alert_field_prefix)
{
    json_t *alert = parse("{\"status\": \"firing\", \"labels\": {}, \"annotations\": 1}");
    struct am_alert a;
    struct error err = {0};

    ck_assert_int_eq(am_parse_alert(alert, 0, &a, &err), ST_INVALID);
    ck_assert_str_eq(err.fields[0].field, "alerts[0].annotations");
    ck_assert_int_eq(am_parse_alert(alert, 1234, &a, &err), ST_INVALID);
    ck_assert_str_eq(err.fields[1].field, "alerts[1234].annotations");
    ck_assert_int_eq(am_parse_alert(alert, (size_t)-1, &a, &err), ST_INVALID);
    ck_assert_str_eq(err.fields[2].field, "alerts[18446744073709551615].annotations");
    json_decref(alert);
}
END_TEST

/* Every problem of one alert is reported, each once. */
START_TEST(alert_reports_every_field)
{
    json_t *alert = parse("{\"status\": \"unknown\", \"labels\": {\"a\": 1},"
                          " \"fingerprint\": \"\", \"annotations\": [], \"startsAt\": 0,"
                          " \"endsAt\": 0, \"generatorURL\": 0}");
    struct am_alert a;
    struct error err = {0};
    static const char *const want[] = {
        "alerts[4].status",   "alerts[4].labels", "alerts[4].fingerprint", "alerts[4].annotations",
        "alerts[4].startsAt", "alerts[4].endsAt", "alerts[4].generatorURL"};

    ck_assert_int_eq(am_parse_alert(alert, 4, &a, &err), ST_INVALID);
    ck_assert_uint_eq(err.nfields, sizeof(want) / sizeof(want[0]));
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        ck_assert_str_eq(err.fields[i].field, want[i]);
    json_decref(alert);
}
END_TEST

/* A present value of the wrong type is one problem, not also "is required"
 * or "must be firing or resolved" for the same field. */
START_TEST(alert_wrong_type_reported_once)
{
    static const char *const alerts[] = {
        "{\"status\": \"firing\", \"labels\": [\"alertname\"]}",
        "{\"status\": 7, \"labels\": {}}",
    };
    char report[1024] = "";

    for (size_t i = 0; i < sizeof(alerts) / sizeof(alerts[0]); i++) {
        json_t *alert = parse(alerts[i]);
        struct am_alert a;
        struct error err = {0};
        size_t n = strlen(report);

        ck_assert_int_eq(am_parse_alert(alert, 0, &a, &err), ST_INVALID);
        if (err.nfields != 1)
            snprintf(report + n, sizeof(report) - n, " %s: %u problems [%s: %s] [%s: %s];",
                     alerts[i], err.nfields, err.fields[0].field, err.fields[0].message,
                     err.fields[1].field, err.fields[1].message);
        json_decref(alert);
    }
    ck_assert_msg(report[0] == '\0', "want one problem each:%s", report);
}
END_TEST

/* The verdict is about this alert: earlier problems in err (other alerts
 * of the batch) do not make a valid alert invalid. */
START_TEST(alert_verdict_ignores_earlier_problems)
{
    json_t *bad = parse("{\"status\": \"firing\"}");
    json_t *good = parse("{\"status\": \"firing\", \"labels\": {\"alertname\": \"X\"}}");
    struct am_alert a;
    struct error err = {0};

    ck_assert_int_eq(am_parse_alert(bad, 0, &a, &err), ST_INVALID);
    ck_assert_uint_eq(err.nfields, 1);
    ck_assert_int_eq(am_parse_alert(good, 1, &a, &err), ST_OK);
    ck_assert_uint_eq(err.nfields, 1);
    ck_assert_str_eq(a.alertname, "X");
    json_decref(bad);
    json_decref(good);
}
END_TEST

/* ---- am_alert_identity ---- */

static void identity_of(const char *tenant, const char *type, const char *alert_json, char out[65])
{
    json_t *alert = parse(alert_json);
    struct am_alert a;
    struct error err = {0};

    ck_assert_msg(am_parse_alert(alert, 0, &a, &err) == ST_OK, "%s: %s", alert_json, err.message);
    ck_assert_msg(am_alert_identity(tenant, type, &a, out, &err) == ST_OK, "%s: %s", alert_json,
                  err.message);
    json_decref(alert);
}

static bool is_hex64(const char *s)
{
    if (strlen(s) != 64)
        return false;
    for (; *s; s++)
        if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
            return false;
    return true;
}

START_TEST(identity_fingerprint)
{
    char a[65], b[65], c[65];

    identity_of("default", "restart",
                "{\"status\": \"firing\", \"fingerprint\": \"c4f2a9b1d0e3f567\","
                " \"labels\": {\"alertname\": \"HighLatency\", \"instance\": \"api-1\"}}",
                a);
    ck_assert(is_hex64(a));
    /* The fingerprint decides: other labels, status or annotations do not. */
    identity_of("default", "restart",
                "{\"status\": \"resolved\", \"fingerprint\": \"c4f2a9b1d0e3f567\","
                " \"labels\": {\"alertname\": \"HighLatency\", \"instance\": \"api-2\"},"
                " \"annotations\": {\"summary\": \"changed\"}}",
                b);
    ck_assert_str_eq(a, b);
    identity_of("default", "restart",
                "{\"status\": \"firing\", \"fingerprint\": \"c4f2a9b1d0e3f568\","
                " \"labels\": {\"alertname\": \"HighLatency\", \"instance\": \"api-1\"}}",
                c);
    ck_assert_str_ne(a, c);
}
END_TEST

START_TEST(identity_labels_fallback)
{
    char a[65], b[65], c[65], d[65];

    identity_of("default", "demo",
                "{\"status\": \"firing\","
                " \"labels\": {\"alertname\": \"DiskFull\", \"device\": \"/dev/sda1\","
                "              \"instance\": \"db-1\"}}",
                a);
    ck_assert(is_hex64(a));
    /* The same labels in another order: the same alert. */
    identity_of("default", "demo",
                "{\"status\": \"resolved\", \"annotations\": {\"summary\": \"x\"},"
                " \"labels\": {\"instance\": \"db-1\", \"device\": \"/dev/sda1\","
                "              \"alertname\": \"DiskFull\"}}",
                b);
    ck_assert_str_eq(a, b);
    /* Another label value, or one label more: another alert. */
    identity_of("default", "demo",
                "{\"status\": \"firing\","
                " \"labels\": {\"alertname\": \"DiskFull\", \"device\": \"/dev/sdb1\","
                "              \"instance\": \"db-1\"}}",
                c);
    ck_assert_str_ne(a, c);
    identity_of("default", "demo",
                "{\"status\": \"firing\","
                " \"labels\": {\"alertname\": \"DiskFull\", \"device\": \"/dev/sda1\","
                "              \"instance\": \"db-1\", \"severity\": \"page\"}}",
                d);
    ck_assert_str_ne(a, d);
}
END_TEST

START_TEST(identity_kinds_are_separate)
{
    char with_fp[65], without_fp[65], other[65];
    json_t *labels = parse("{\"alertname\": \"X\"}");
    char *canon = canon_json(labels);

    identity_of("default", "demo",
                "{\"status\": \"firing\", \"labels\": {\"alertname\": \"X\"},"
                " \"fingerprint\": \"{\\\"alertname\\\":\\\"X\\\"}\"}",
                with_fp);
    identity_of("default", "demo", "{\"status\": \"firing\", \"labels\": {\"alertname\": \"X\"}}",
                without_fp);
    /* Even a fingerprint spelled like the canonical labels is another kind. */
    ck_assert_str_eq(canon, "{\"alertname\":\"X\"}");
    ck_assert_str_ne(with_fp, without_fp);
    /* Nor does an alert collide with a generic submission keyed alike. */
    identity_hash("default", "demo", "dedupe_key", "{\"alertname\":\"X\"}", other);
    ck_assert_str_ne(with_fp, other);
    identity_hash("default", "demo", "data", canon, other);
    ck_assert_str_ne(without_fp, other);
    free(canon);
    json_decref(labels);
}
END_TEST

START_TEST(identity_tenant_and_type)
{
    static const char fp_alert[] =
        "{\"status\": \"firing\", \"labels\": {\"alertname\": \"X\"}, \"fingerprint\": \"abc\"}";
    static const char label_alert[] =
        "{\"status\": \"firing\", \"labels\": {\"alertname\": \"X\"}}";
    char base[65], other[65];

    identity_of("default", "demo", fp_alert, base);
    identity_of("acme", "demo", fp_alert, other);
    ck_assert_str_ne(base, other);
    identity_of("default", "restart", fp_alert, other);
    ck_assert_str_ne(base, other);
    identity_of("default", "demo", fp_alert, other);
    ck_assert_str_eq(base, other);

    identity_of("default", "demo", label_alert, base);
    identity_of("acme", "demo", label_alert, other);
    ck_assert_str_ne(base, other);
    identity_of("default", "restart", label_alert, other);
    ck_assert_str_ne(base, other);
    /* Parts are delimited: "ab"+"c" is not "a"+"bc". */
    identity_of("ab", "c", label_alert, base);
    identity_of("a", "bc", label_alert, other);
    ck_assert_str_ne(base, other);
}
END_TEST

/* Labels with no canonical JSON (here a string that is not UTF-8, which only
 * a *_nocheck constructor can make) fail the identity; they never hash. */
START_TEST(identity_without_canonical_labels)
{
    json_t *alert = parse("{\"status\": \"firing\", \"labels\": {\"alertname\": \"X\"}}");
    struct am_alert a;
    struct error err = {0};
    char out[65] = "";

    json_object_set_new(json_object_get(alert, "labels"), "bad", json_string_nocheck("\xff"));
    ck_assert_int_eq(am_parse_alert(alert, 0, &a, &err), ST_OK);
    ck_assert_int_eq(am_alert_identity("default", "demo", &a, out, &err), ST_INTERNAL);
    ck_assert_str_eq(err.message, "could not build the canonical JSON of the labels");
    ck_assert_str_eq(out, "");
    json_decref(alert);
}
END_TEST

/* ---- am_alert_input ---- */

START_TEST(input_whole_alert_plus_group)
{
    json_t *body = parse(envelope_json);
    const json_t *alert = json_array_get(json_object_get(body, "alerts"), 0);
    json_t *before = json_deep_copy(alert);
    struct am_envelope env;
    struct error err = {0};
    json_t *in;
    const char *key;
    json_t *v;

    ck_assert_int_eq(am_parse_envelope(body, &env, &err), ST_OK);
    in = am_alert_input(&env, alert);
    ck_assert(json_is_object(in));
    ck_assert_ptr_ne(in, alert);
    /* Every field of the alert, unknown ones included, as it came. */
    json_object_foreach((json_t *)alert, key, v)
    {
        ck_assert_msg(json_equal(json_object_get(in, key), v), "input.%s differs", key);
    }
    ck_assert(json_is_array(json_object_get(in, "silencedBy")));
    ck_assert_str_eq(json_string_value(json_object_get(in, "startsAt")),
                     "2026-11-22T09:52:26.739266876+02:00");
    /* Plus the group's receiver, externalURL and groupKey, and nothing else. */
    ck_assert_str_eq(json_string_value(json_object_get(in, "receiver")), "opsrun");
    ck_assert_str_eq(json_string_value(json_object_get(in, "externalURL")),
                     "http://alertmanager:9093");
    ck_assert_str_eq(json_string_value(json_object_get(in, "groupKey")),
                     "{}/{severity=\"critical\"}:{alertname=\"HighLatency\"}");
    ck_assert_uint_eq(json_object_size(in), json_object_size(alert) + 3);
    /* The body is left as it was. */
    ck_assert(json_equal(alert, before));
    ck_assert_ptr_null(json_object_get(alert, "receiver"));
    /* A deep copy: changing the input does not reach the body. */
    json_object_set_new(json_object_get(in, "labels"), "alertname", json_string("changed"));
    ck_assert(json_equal(alert, before));
    json_decref(in);
    json_decref(before);
    json_decref(body);
}
END_TEST

START_TEST(input_without_group_fields)
{
    json_t *body = parse("{\"version\": \"4\", \"alerts\": [{\"status\": \"firing\","
                         " \"labels\": {\"alertname\": \"X\"}}]}");
    const json_t *alert = json_array_get(json_object_get(body, "alerts"), 0);
    struct am_envelope env;
    struct error err = {0};
    json_t *in;

    ck_assert_int_eq(am_parse_envelope(body, &env, &err), ST_OK);
    in = am_alert_input(&env, alert);
    ck_assert(json_equal(in, alert));
    ck_assert_ptr_null(json_object_get(in, "receiver"));
    ck_assert_ptr_null(json_object_get(in, "externalURL"));
    ck_assert_ptr_null(json_object_get(in, "groupKey"));
    json_decref(in);
    json_decref(body);
}
END_TEST

static Suite *alertmanager_suite(void)
{
    Suite *s = suite_create("alertmanager");
    TCase *e = tcase_create("envelope");
    TCase *a = tcase_create("alert");
    TCase *i = tcase_create("identity");
    TCase *n = tcase_create("input");

    tcase_add_test(e, envelope_valid);
    tcase_add_test(e, envelope_minimal_and_truncated);
    tcase_add_loop_test(e, envelope_malformed, 0,
                        (int)(sizeof(bad_envelopes) / sizeof(bad_envelopes[0])));
    tcase_add_test(e, envelope_reports_every_field);
    suite_add_tcase(s, e);

    tcase_add_test(a, alert_valid_firing);
    tcase_add_test(a, alert_valid_resolved_minimal);
    tcase_add_test(a, alert_fingerprint_lengths);
    tcase_add_loop_test(a, alert_invalid, 0, (int)(sizeof(bad_alerts) / sizeof(bad_alerts[0])));
    tcase_add_test(a, alert_fingerprint_too_long);
    tcase_add_test(a, alert_field_prefix);
    tcase_add_test(a, alert_reports_every_field);
    tcase_add_test(a, alert_wrong_type_reported_once);
    tcase_add_test(a, alert_verdict_ignores_earlier_problems);
    suite_add_tcase(s, a);

    tcase_add_test(i, identity_fingerprint);
    tcase_add_test(i, identity_labels_fallback);
    tcase_add_test(i, identity_kinds_are_separate);
    tcase_add_test(i, identity_tenant_and_type);
    tcase_add_test(i, identity_without_canonical_labels);
    suite_add_tcase(s, i);

    tcase_add_test(n, input_whole_alert_plus_group);
    tcase_add_test(n, input_without_group_fields);
    suite_add_tcase(s, n);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(alertmanager_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
