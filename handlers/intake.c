/* handlers/intake.c — see intake.h. */
#include "handlers/intake.h"

#include "common/canon_json.h"
#include "common/conc_key.h"
#include "common/digest.h"
#include "common/ids.h"

#include <stdlib.h>
#include <string.h>

enum status intake_submit(struct db *db, const char *tenant, const struct intake_run *in,
                          struct run **out, bool *dedup, struct error *err)
{
    char id[27];
    const struct run_new rn = {
        .tenant = tenant,
        .id = in->id ? in->id : (run_id_new(id), id),
        .type = in->type->name,
        .priority = in->priority,
        .run_at = in->run_at,
        .max_attempts = in->type->max_attempts,
        .timeout_s = (int)in->type->timeout_s,
        .input = in->input,
        .identity_hash = in->identity_hash,
        .request_hash = in->request_hash,
        .initiator = in->initiator,
        .approval_timeout_s = in->type->approval.timeout_s,
        .approve_on_timeout = in->type->approval.approve_on_timeout,
    };
    return store_runs_submit(db, &rn, out, dedup, err);
}

enum status intake_conc_check(const struct run_type *rt, const char *tenant, const json_t *input,
                              struct error *err)
{
    struct error one = {0};
    char *key = NULL;
    enum status st;

    if (!rt->conc.on)
        return ST_OK;
    st = conc_key_eval(rt->conc.parts, tenant, input, &key, &one);
    free(key);
    if (st != ST_OK)
        return error_set(err, st, "run_types.%s.concurrency: %s", rt->name, one.message);
    return ST_OK;
}

enum status intake_request_hash(const json_t *doc, char out[65], struct error *err)
{
    char *canon = canon_json(doc);

    if (!canon)
        return error_set(err, ST_INTERNAL, "could not build the canonical JSON of the request");
    sha256_hex(canon, strlen(canon), out);
    free(canon);
    return ST_OK;
}

json_t *intake_result(const struct run *run, bool dedup)
{
    char self[200], stream[220], cancel[220];

    xsnprintf(self, sizeof(self), "/runs/%s", run->id);
    xsnprintf(stream, sizeof(stream), "/runs/%s/stream", run->id);
    xsnprintf(cancel, sizeof(cancel), "/runs/%s/cancel", run->id);
    return json_pack("{s:s, s:s, s:s, s:b, s:{s:s, s:s, s:s}}", "run_id", run->id, "status",
                     run_status_name(run->status), "outcome", run_outcome_name(run->outcome),
                     "deduplicated", dedup, "links", "self", self, "stream", stream, "cancel",
                     cancel);
}
