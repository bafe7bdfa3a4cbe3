/* tests/fuzz/fuzz_soap_job.c — what a SOAP service answers to the soap_job
 * action: the start answer (the task id and the captures, found by XPath)
 * and the status answers (SOAP 1.1 and 1.2 faults, StatusCode and
 * OverallStatus errors, the status normalised and mapped to complete,
 * cancelled or failed), through soap_job_started and soap_job_checked
 * (engine/actions/soap_job.h) and soap_xml.c's libxml2 reading. The input
 * is as fuzz_remote.h says; the run type is one of four (namespaces or
 * local-name() paths, default or configured value lists, XPath functions).
 * None has a readiness check, a row probe or an is-running gate that could
 * call out.
 *
 * Invariants, besides fuzz_job_check's:
 *   - a fault from the server's side (Server, Receiver) retries, any other
 *     fault fails; an answer that is no XML at all retries; an HTTP
 *     refusal without a fault fails;
 *   - a start that waits has a trimmed task id, and its captures are text;
 *   - a check keeps the status it read lower-cased in the poll state, and a
 *     success's result names the task and none of the action's own keys;
 *   - nothing read from a file reaches the run: the parser loads no
 *     external entity (the corpus has one naming /etc/passwd). */
#include "tests/fuzz/fuzz_remote.h"

#include "engine/actions/soap_job.h"

#include <ctype.h>

/* The first line of /etc/passwd. */
#define PASSWD "root:x:0:0"
#define ENVELOPE "https://mc.example/Service.asmx"

static const char config[] =
    "{\"run_types\": {"
    /* 0: the Marketing Cloud flow of docs/actions/soap_job.md, without its
     * REST helpers */
    " \"mc\": {\"action\": \"soap_job\", \"params\": {"
    "  \"namespaces\": {\"s\": \"http://schemas.xmlsoap.org/soap/envelope/\","
    "                 \"p\": \"http://exacttarget.com/wsdl/partnerAPI\"},"
    "  \"start\": {\"url\": \"" ENVELOPE "\", \"body_text\": \"<a>{{run_id}}</a>\"},"
    "  \"task_id_xpath\": \"//p:Result/p:Task/p:ID\","
    "  \"capture\": {\"request_id\": \"//p:RequestID\"},"
    "  \"status\": {\"url\": \"" ENVELOPE "\", \"body_text\": \"<a>{{external_id}}</a>\"},"
    "  \"status_xpath\": \"//p:Properties/p:Property[p:Name='Status']/p:Value\","
    "  \"error_xpath\": \"//p:Properties/p:Property[p:Name='ErrorMsg']/p:Value\","
    "  \"completed_date_xpath\": "
    "    \"//p:Properties/p:Property[p:Name='CompletedDate']/p:Value\"}},"
    /* 1: local names, value lists of its own */
    " \"plain\": {\"action\": \"soap_job\", \"params\": {"
    "  \"start\": {\"url\": \"" ENVELOPE "\", \"body_text\": \"<a/>\"},"
    "  \"task_id_xpath\": \"//*[local-name()='TaskId']\","
    "  \"capture\": {\"ticket\": \"string(//*[local-name()='Ticket']/@id)\"},"
    "  \"status\": {\"url\": \"" ENVELOPE "\", \"body_text\": \"<a/>\"},"
    "  \"status_xpath\": \"//*[local-name()='Status']\","
    "  \"complete_values\": [\"Done\", \"FINISHED\"], \"error_values\": [\"Error\", \"failed\"],"
    "  \"cancelled_values\": [\"Aborted\"]}},"
    /* 2: XPath functions: numbers, concatenations, text nodes */
    " \"expr\": {\"action\": \"soap_job\", \"params\": {"
    "  \"start\": {\"url\": \"" ENVELOPE "\", \"body_text\": \"<a/>\"},"
    "  \"task_id_xpath\": \"concat(//*[local-name()='Id'], '-', count(//*))\","
    "  \"status\": {\"url\": \"" ENVELOPE "\", \"body_text\": \"<a/>\"},"
    "  \"status_xpath\": \"normalize-space(//*[local-name()='S'][1])\","
    "  \"error_xpath\": \"//*[local-name()='E']/text()\","
    "  \"completed_date_xpath\": \"//@completed\"}},"
    /* 3: SOAP 1.2 with absolute paths, two captures, REST helpers whose
     * thresholds the checks never reach (so nothing calls out) */
    " \"soap12\": {\"action\": \"soap_job\", \"params\": {"
    "  \"namespaces\": {\"env\": \"http://www.w3.org/2003/05/soap-envelope\", \"t\": "
    "\"urn:tasks\"},"
    "  \"start\": {\"url\": \"" ENVELOPE "\", \"body_text\": \"<a/>\"},"
    "  \"task_id_xpath\": \"/env:Envelope/env:Body/t:StartResponse/t:TaskId\","
    "  \"capture\": {\"a\": \"//t:A\", \"b\": \"//t:B/@v\"},"
    "  \"status\": {\"url\": \"" ENVELOPE "\", \"body_text\": \"<a/>\"},"
    "  \"status_xpath\": \"/env:Envelope/env:Body/t:StatusResponse/t:State\","
    "  \"completed_date_xpath\": \"//t:Completed\","
    "  \"is_running\": {\"request\": {\"url\": \"https://mc.example/isrunning\"},"
    "    \"pointer\": \"/isRunning\", \"after_completed_date_s\": 86400,"
    "    \"stuck_after_s\": 86400},"
    "  \"row_probe\": {\"request\": {\"url\": \"https://mc.example/rows\"},"
    "    \"pointer\": \"/count\", \"min_runtime_s\": 86400}}}"
    "}}";

static const char *const types[] = {"mc", "plain", "expr", "soap12"};

static const char *const start_codes[] = {"soap_fault",
                                          "soap_unavailable",
                                          "soap_rejected",
                                          "soap_malformed",
                                          "soap_status_error",
                                          "start_no_task_id",
                                          NULL};
static const char *const status_codes[] = {
    "soap_fault",        "soap_unavailable", "soap_rejected",    "soap_malformed",
    "soap_status_error", "remote_failed",    "remote_cancelled", NULL};

/* A string of the run (its error, result, poll state) holds text of
 * /etc/passwd that the answer itself does not. */
static bool leaked(const json_t *v, const struct remote_response *r)
{
    const char *key;
    json_t *x;
    size_t i;

    if (json_is_string(v))
        return strstr(json_string_value(v), PASSWD) && !memmem(r->body, r->len, PASSWD, 10);
    json_array_foreach(v, i, x)
    {
        if (leaked(x, r))
            return true;
    }
    json_object_foreach((json_t *)v, key, x)
    {
        if (leaked(x, r))
            return true;
    }
    return false;
}

/* What the answer's HTTP status and first words say, checked against the
 * step; false when the step came from reading the document (no verdict
 * before it). */
static bool check_read(const struct fuzz_job *j, enum step step)
{
    const char *code = fuzz_error_code(j);
    enum remote_class c = remote_classify(&j->r);

    if (code && strcmp(code, "soap_fault") == 0) {
        const char *msg = json_string_value(json_object_get(j->rc.error, "message"));
        bool server = strstr(msg, "Server") || strstr(msg, "Receiver");
        /* the message holds the fault code first: a server fault retries */
        FUZZ_CHECK(step == STEP_RETRY || step == STEP_FAIL);
        FUZZ_CHECK(step == STEP_FAIL || server);
        return true;
    }
    if (c == REMOTE_TRANSIENT) {
        FUZZ_CHECK(step == STEP_RETRY && strcmp(code, "soap_unavailable") == 0);
        return true;
    }
    if (c != REMOTE_OK) {
        FUZZ_CHECK(step == STEP_FAIL && strcmp(code, "soap_rejected") == 0);
        return true;
    }
    if (code && strcmp(code, "soap_malformed") == 0) {
        FUZZ_CHECK(step == STEP_RETRY);
        return true;
    }
    if (code && strcmp(code, "soap_status_error") == 0) {
        FUZZ_CHECK(step == STEP_FAIL && json_is_object(json_object_get(j->rc.error, "remote")));
        return true;
    }
    return false;
}

static bool trimmed(const char *s)
{
    size_t n = strlen(s);

    return n > 0 && !isspace((unsigned char)s[0]) && !isspace((unsigned char)s[n - 1]);
}

static void check_start(const struct fuzz_job *j, enum step step)
{
    const char *key;
    json_t *v;

    fuzz_job_check(j, step, start_codes);
    if (check_read(j, step))
        return;
    if (step == STEP_FAIL) {
        FUZZ_CHECK(strcmp(fuzz_error_code(j), "start_no_task_id") == 0);
        return;
    }
    FUZZ_CHECK(step == STEP_WAIT && trimmed(j->rc.external_id));
    json_object_foreach(j->rc.poll_state, key, v)
    {
        FUZZ_CHECK(json_is_string(v) && trimmed(json_string_value(v)));
    }
}

static void check_status(const struct fuzz_job *j, enum step step)
{
    const json_t *status = json_object_get(j->rc.poll_state, "status");

    fuzz_job_check(j, step, status_codes);
    if (check_read(j, step))
        return;
    FUZZ_CHECK(step != STEP_RETRY);
    FUZZ_CHECK(json_is_null(status) || json_is_string(status));
    for (const char *s = json_string_value(status); s && *s; s++)
        FUZZ_CHECK(!isupper((unsigned char)*s));
    if (step == STEP_DONE) {
        const char *task = json_string_value(json_object_get(j->rc.result, "task_id"));
        FUZZ_CHECK(json_is_object(j->rc.result) && task && strcmp(task, j->rc.external_id) == 0);
        FUZZ_CHECK(!json_object_get(j->rc.result, "phase"));
    }
    if (j->rc.outcome == OUTCOME_CANCELLED)
        FUZZ_CHECK(strcmp(fuzz_error_code(j), "remote_cancelled") == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fuzz_job j;
    enum step step;

    if (!fuzz_answer(&j, data, size)) {
        remote_response_cleanup(&j.r);
        return 0;
    }
    fuzz_job_init(&j, config, types[FUZZ_VARIANT(j.flags)], "job-1");
    if (j.poll) {
        step = soap_job_checked(&j.rc, &j.r);
        check_status(&j, step);
    } else {
        step = soap_job_started(&j.rc, &j.r);
        check_start(&j, step);
    }
    FUZZ_CHECK(!leaked(j.rc.error, &j.r) && !leaked(j.rc.result, &j.r) &&
               !leaked(j.rc.poll_state, &j.r));
    if (j.rc.external_id)
        FUZZ_CHECK(!strstr(j.rc.external_id, PASSWD) || memmem(j.r.body, j.r.len, PASSWD, 10));
    fuzz_job_cleanup(&j);
    return 0;
}
