/* tests/fuzz/fuzz_bulk.c — the body of POST /runs/cancel and POST
 * /runs/retry (handlers/bulk.h): parsed as the server parses a body, then
 * bulk_parse, then what the handler copies for its job (texts into
 * fixed buffers, instants normalised to UTC) before the store uses it.
 *
 * Invariants:
 *   - an accepted body has a filter that says something (or "all": true),
 *     a limit from 1 to BULK_LIMIT_MAX, and only known statuses and
 *     outcomes;
 *   - its texts fit the buffers the handler copies them into (type and
 *     schedule 1 to 64 bytes, parent_id 1 to RUN_ID_MAX), whole;
 *   - its instants are RFC 3339 that PostgreSQL holds, and their UTC
 *     form parses back to the same instant;
 *   - a refused body has at least one field error, every text UTF-8 for
 *     the problem+json answer. */
#include "tests/fuzz/fuzz.h"

#include "common/ids.h"
#include "common/time_rfc3339.h"
#include "handlers/bulk.h"

static void check_text(const char *s, size_t max)
{
    if (!s)
        return;
    FUZZ_CHECK(*s && strlen(s) <= max && fuzz_utf8(s));
}

static void check_instant(const char *s)
{
    int64_t us, back;
    char utc[40];

    if (!s)
        return;
    FUZZ_CHECK(time_parse_rfc3339(s, &us) && time_in_range(us));
    time_format_rfc3339(us, utc, sizeof(utc));
    FUZZ_CHECK(time_parse_rfc3339(utc, &back) && back == us);
}

static void check_accepted(const struct bulk_request *rq)
{
    const struct bulk_filter *f = &rq->filter;

    FUZZ_CHECK(rq->limit >= 1 && rq->limit <= BULK_LIMIT_MAX);
    FUZZ_CHECK((f->statuses & ~((1u << RUN_STATUS_COUNT) - 1)) == 0);
    FUZZ_CHECK((f->outcomes & ~((1u << RUN_OUTCOME_COUNT) - 1)) == 0);
    check_text(f->type, 64);
    check_text(f->schedule, 64);
    check_text(f->parent_id, RUN_ID_MAX);
    check_instant(f->created_after);
    check_instant(f->created_before);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *body = fuzz_body(data, size);
    json_t *filter = json_object_get(body, "filter");
    struct bulk_request rq;
    struct error err = {0};
    enum status st;

    if (!body)
        return 0;
    st = bulk_parse(body, &rq, &err);
    if (st == ST_OK) {
        FUZZ_CHECK(err.nfields == 0);
        check_accepted(&rq);
        /* nothing at all selected is said out loud */
        if (!rq.filter.statuses && !rq.filter.outcomes && !rq.filter.type && !rq.filter.schedule &&
            !rq.filter.parent_id && !rq.filter.created_after && !rq.filter.created_before)
            FUZZ_CHECK(json_is_true(json_object_get(filter, "all")));
    } else {
        FUZZ_CHECK(st == ST_INVALID && err.nfields > 0);
        fuzz_check_error(st, &err);
    }
    json_decref(body);
    return 0;
}
