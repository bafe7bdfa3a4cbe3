/* tests/fuzz/fuzz_alerts.c — the generic POST /alerts body: parsed as
 * server/http.c parses it, validated by alerts_parse_generic, then routed and
 * hashed as handlers/alerts.c does before it touches the database. */
#include "tests/fuzz/fuzz.h"

#include "common/canon_json.h"
#include "common/digest.h"
#include "common/ids.h"
#include "common/time_rfc3339.h"

static bool is_hex64(const char *s)
{
    return strlen(s) == 64 && strspn(s, "0123456789abcdef") == 64;
}

/* What alerts_generic does with a valid submission, short of the store. */
static void submit(const json_t *body, const struct submission *s)
{
    struct config cfg;
    struct error err = {0};
    const struct run_type *rt;
    char identity[65], request[65], run_at[40];
    char *canon;
    int64_t back;

    FUZZ_CHECK(s->alert_type != NULL);
    FUZZ_CHECK(s->priority >= -1000 && s->priority <= 1000);
    FUZZ_CHECK(!s->run_id || run_id_valid(s->run_id));
    fuzz_routing_init(&cfg);
    rt = cfg_route(&cfg, s->alert_type, s->labels, NULL);
    if (!rt) {
        error_field(&err, ST_UNPROCESSABLE, "alert_type", "no route or run type matches \"%s\"",
                    s->alert_type);
        fuzz_check_error(ST_UNPROCESSABLE, &err);
        cfg_cleanup(&cfg);
        return;
    }
    canon = canon_json(body);
    FUZZ_CHECK(canon != NULL);
    sha256_hex(canon, strlen(canon), request);
    free(canon);
    if (s->dedupe_key) {
        identity_hash("default", rt->name, "dedupe_key", s->dedupe_key, identity);
    } else if (s->run_id) {
        identity_hash("default", rt->name, "run_id", s->run_id, identity);
    } else {
        json_t *empty = json_object();
        canon = canon_json(s->data ? s->data : empty);
        FUZZ_CHECK(canon != NULL);
        identity_hash("default", rt->name, "data", canon, identity);
        free(canon);
        json_decref(empty);
    }
    FUZZ_CHECK(is_hex64(identity) && is_hex64(request));
    if (s->has_run_at) {
        /* The store gets the formatted instant: it must read back the same. */
        FUZZ_CHECK(time_in_range(s->run_at_us));
        time_format_rfc3339(s->run_at_us, run_at, sizeof(run_at));
        FUZZ_CHECK(time_parse_rfc3339(run_at, &back) && back == s->run_at_us);
    }
    cfg_cleanup(&cfg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *body = fuzz_body(data, size);
    struct submission s;
    struct error err = {0};
    enum status st;

    if (!body)
        return 0;
    st = alerts_parse_generic(body, &s, &err);
    if (st == ST_OK)
        submit(body, &s);
    else
        fuzz_check_error(st, &err);
    FUZZ_CHECK(st == ST_OK || st == ST_INVALID);
    json_decref(body);
    return 0;
}
