/* handlers/intake.h — what the two bodies of POST /alerts share
 * (handlers/intake.c): inserting or joining a run, the check of its
 * concurrency key, the request hash a repeated submission is recognised
 * by, and the result object each run is answered with. The generic body (handlers/alerts.c) and the
 * Alertmanager webhook body (handlers/alertmanager.c) call in here; intake.c calls neither.
 * Internal to handlers/; reentrant. */
#ifndef OPSRUN_HANDLERS_INTAKE_H
#define OPSRUN_HANDLERS_INTAKE_H

#include "common/common.h"
#include "config/config.h"
#include "store/runs.h"

#include <jansson.h>

struct db;

/* One run to insert or join. */
struct intake_run {
    const struct run_type *type;
    const char *id; /* NULL = a new generated id */
    const json_t *input;
    int priority;
    const char *run_at;        /* RFC 3339, NULL = now */
    const char *identity_hash; /* lower-case hex SHA-256 */
    const char *request_hash;
    const char *initiator; /* the request's (struct request) */
};

/* Inserts the run or joins the run it matches (see store_runs_submit), on
 * the caller's connection. */
enum status intake_submit(struct db *db, const char *tenant, const struct intake_run *in,
                          struct run **out, bool *dedup, struct error *err) WUR;
/* Whether a run of type rt, of tenant, with input can have its
 * concurrency key (common/conc_key.h) when the database inserts it:
 * ST_OK when the type has none or the key can be made; ST_INVALID when it
 * cannot, with a message naming the type and the pointer
 * (`run_types.restart-host.concurrency: the input has no value at
 * "/labels/instance"`) for the caller to answer with. The key itself is
 * made again, and stored, by the database. */
enum status intake_conc_check(const struct run_type *rt, const char *tenant, const json_t *input,
                              struct error *err) WUR;
/* The request hash of doc: lower-case hex SHA-256 of its canonical JSON.
 * ST_INTERNAL when canon_json fails (jansson could not allocate). */
enum status intake_request_hash(const json_t *doc, char out[65], struct error *err) WUR;
/* {"run_id", "status", "outcome", "deduplicated", "links": {...}}: new ref. */
json_t *intake_result(const struct run *run, bool dedup);

#endif
