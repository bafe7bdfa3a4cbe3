/* tests/fuzz/fuzz_alertmanager.c — the Alertmanager webhook body (version
 * 4): am_parse_envelope, then per alert am_parse_alert, routing,
 * am_alert_identity and am_alert_input, as handlers/alertmanager.c does
 * short of the store. Per-alert errors become JSON results there, so their
 * texts are checked like a reply's. */
#include "tests/fuzz/fuzz.h"
#include "handlers/alertmanager.h"

#include "common/canon_json.h"
#include "common/digest.h"

static void one_alert(const struct config *cfg, const struct am_envelope *env, size_t index,
                      const json_t *alert)
{
    struct error err = {0};
    struct am_alert a;
    const struct route *route = NULL;
    const struct run_type *rt;
    char identity[65];
    enum status st = am_parse_alert(alert, index, &a, &err);

    if (st != ST_OK) {
        FUZZ_CHECK(st == ST_INVALID && err.nfields > 0);
        fuzz_check_error(st, &err);
        return;
    }
    FUZZ_CHECK(a.labels != NULL && json_is_object(a.labels) && a.alertname != NULL);
    FUZZ_CHECK(!a.fingerprint || (a.fingerprint[0] && strlen(a.fingerprint) <= 128));
    rt = cfg_route(cfg, a.alertname, a.labels, &route);
    if (!rt) {
        error_set(&err, ST_UNPROCESSABLE, "no route matches alert \"%s\"", a.alertname);
        fuzz_check_error(ST_UNPROCESSABLE, &err);
        return;
    }
    /* Labels parsed from text are valid UTF-8: they always have an identity. */
    FUZZ_CHECK(am_alert_identity("default", rt->name, &a, identity, &err) == ST_OK);
    FUZZ_CHECK(strlen(identity) == 64 && strspn(identity, "0123456789abcdef") == 64);
    if (!a.resolved) {
        json_t *input = am_alert_input(env, alert);
        char *canon = canon_json(input);
        char request[65];

        FUZZ_CHECK(json_is_object(input) && canon != NULL);
        sha256_hex(canon, strlen(canon), request);
        free(canon);
        json_decref(input);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *body = fuzz_body(data, size);
    struct am_envelope env;
    struct error err = {0};
    struct config cfg;
    const json_t *alert;
    size_t i;

    if (!json_is_object(body)) {
        json_decref(body);
        return 0;
    }
    if (am_parse_envelope(body, &env, &err) != ST_OK) {
        FUZZ_CHECK(err.nfields > 0);
        fuzz_check_error(ST_INVALID, &err);
        json_decref(body);
        return 0;
    }
    FUZZ_CHECK(json_is_array(env.alerts) && env.truncated >= 0);
    fuzz_routing_init(&cfg);
    json_array_foreach(env.alerts, i, alert)
    {
        one_alert(&cfg, &env, i, alert);
    }
    cfg_cleanup(&cfg);
    json_decref(body);
    return 0;
}
