/* tests/support/fake_jobs.h — a fake remote jobs REST API for the poller's
 * end-to-end tests, served by libmicrohttpd on 127.0.0.1 inside the test
 * process (a thread per connection, so a scenario can hang).
 *
 *   POST   /jobs              {"scenario": "...", "run": "..."} -> 201 {"id": "job-N"}
 *   GET    /jobs/{id}         the job's state, as its scenario says
 *   POST   /jobs/{id}/cancel  recorded; 200
 *   DELETE /jobs/{id}         the cleanup; recorded; 200 (500 with cleanup_fail)
 *
 * A scenario is a comma-separated list of steps; k is the number of the
 * status request (from 1):
 *   done_after:N      k >= N: {"state": "DONE", "output": {...}}
 *   fail_after:N      k >= N: {"state": "FAILED", "error": {"message": "boom"}}
 *   cancelled_after:N k >= N: {"state": "CANCELLED"}
 *   vanish_after:N    k >= N: 404
 *   partial           the DONE answer carries counts {succeeded 8, failed 2}
 *                     and failures [{"code","message"}]
 *   flaky:N           k <= N: 500
 *   hang:N            k <= N: answer only after 3 s
 *   malformed:N       k <= N: "{not json"
 *   unknown:N         k <= N: {"state": "WEIRD"}
 *   slow:MS           every status request takes MS ms
 *   submit_500 / submit_400 / submit_noid / submit_hang   the submit answers so
 *   cleanup_fail      DELETE answers 500
 * Anything else: {"state": "RUNNING"}.
 *
 * For the http action (the asynchronous request-reply pattern):
 *   POST   /call              {"scenario": "...", "run": "..."}
 *   GET    /status/{id}       the status URL of an accepted call
 *   DELETE /status/{id}       the cancel; recorded
 * with the scenarios
 *   sync          200 {"answer": 42, "run": ...}
 *   sync_text     200 "plain ok" (text/plain)
 *   call_500 / call_404 / call_hang   the call answers 500, 404, or after 3 s
 *   async:N       202, Location: /status/job-K (relative); check k < N: 202,
 *                 k >= N: 200 {"done": true, "rows": k}
 *   async_body:N  the same, the status URL absolute in the body's "statusUrl"
 *   async_other_host:N  the same, but the URL names localhost, not 127.0.0.1
 *   async_retry_after:N   the 202 answers carry Retry-After: 1
 *   async_state:N check k < N: 200 {"status": "working"}, then 200
 *                 {"status": "broken", "why": "nope"}
 *   async_vanish  every check: 404
 *
 * For the soap_job action: POST /soap, the operation in SOAPAction
 * (Perform: <Scenario>, <Run> -> Task/ID job-K and Object/ObjectID q-K;
 * Retrieve: <TaskID> -> Properties Status, ErrorMsg, CompletedDate; Delete:
 * <ObjectID>, the cleanup; Cancel: <TaskID>), in namespace urn:fake; and
 * GET /rest/isrunning/q-K {"isRunning"}, /rest/rowset/q-K {"ready"},
 * /rest/probe/q-K {"count"} (or .../qd-N: the task that performed that
 * query definition). Scenarios (k: the Retrieve number):
 *   soap_done:N          Status " Complete " from k = N, " Queued " before
 *   soap_error:N         from k = N: Status "Error", ErrorMsg "syntax error near FROM"
 *   soap_errmsg:N        from k = N: Status "Processing", ErrorMsg "quota exceeded"
 *   soap_fault_server:N  k <= N: a soap:Server fault (HTTP 500)
 *   soap_fault_client    Perform answers a soap:Client fault
 *   soap_malformed:N     k <= N: not XML
 *   soap_hang:N          k <= N: answered after 3 s
 *   soap_canceled:N      from k = N: Status "Canceled"
 *   soap_processing:N    Status "Processing" (ErrorMsg empty) before k = N,
 *                        " Complete " from k = N: a long normal run
 *   soap_stuck           always "Processing"
 *   soap_completed_date  always "Queued", with a CompletedDate
 *   running_for:N        isRunning true for the first N calls, then false
 *   ready_after:N        rowset ready from call N (default 1); never_ready: never
 *   probe_rows:N         probe count 5 from call N (default: always 0)
 *
 * The shell-query flow's preparation (SOAPAction Create and Delete):
 *   Create   <Objects xsi:type="DataExtension|QueryDefinition"> with
 *            <CustomerKey>, <Scenario>, <Run> -> Results StatusCode OK,
 *            NewID 0 and NewObjectID de-N / qd-N (a key already in use:
 *            StatusCode Error)
 *   Delete   of a DataExtension or QueryDefinition by <CustomerKey> or
 *            <ObjectID>: counted; an object unknown or already deleted
 *            answers StatusCode Error "The object does not exist"
 *   Perform  with <ObjectID>qd-N</ObjectID>: StatusCode Error "QueryDefinition
 *            not found" unless that query definition exists
 * with the scenario steps (k: this run's create of that kind, from 1)
 *   create_de_error / create_qd_error   StatusCode Error, nothing created
 *   create_de_fault:N / create_qd_fault:N   k <= N: a soap:Server fault
 *   create_de_slow:MS / create_qd_slow:MS   created at once, answered MS later
 *   perform_error        the Perform answers StatusCode Error
 * Every request of a run is logged ("Create DataExtension de-r1",
 * "Perform qd-2", "Retrieve job-1", "GET /rest/rowset/q-1", "Delete
 * QueryDefinition qd-2", ...).
 *
 * Any request under /echo/ (any method) answers 200 {"id": "echo-N",
 * "state": "DONE"}, or with an XML content type a SOAP envelope with
 * <ID>echo-N</ID> and <Status>Complete</Status> in urn:fake: what a test of
 * what arrived needs (fake_requests_with records every request, under
 * /echo/ or not).
 * Thread-safe. */
#ifndef OPSRUN_TEST_FAKE_JOBS_H
#define OPSRUN_TEST_FAKE_JOBS_H

#include <stdbool.h>
#include <stddef.h>

#define FAKE_MAX_CHECKS 64

struct fake_job {
    char id[32], run[64], scenario[128];
    int checks;                          /* status requests */
    long long check_ms[FAKE_MAX_CHECKS]; /* their monotonic times */
    long long submit_ms;
    int in_flight, max_in_flight; /* concurrent status requests */
    int cancels, cleanups;
    /* soap_job's REST helpers: calls, and the times of the is-running ones */
    int isrunning, readiness, probes;
    long long isrunning_ms[FAKE_MAX_CHECKS];
    char cleanup_object[32]; /* the ObjectID the cleanup envelope named */
    char query[40];          /* the query definition a Perform named (qd-N) */
};

/* An object made by a SOAP Create. */
struct fake_object {
    char kind[24];      /* DataExtension, QueryDefinition */
    char key[64];       /* its CustomerKey */
    char object_id[40]; /* de-N, qd-N */
    char run[64];
    int deleted; /* Delete requests that named it */
};

/* Starts the server; returns its port. */
int fake_jobs_start(void);
void fake_jobs_stop(void);
/* A copy of the job with this id, or of the job submitted for run_id
 * (whichever matches); false when there is none. */
bool fake_jobs_get(const char *id_or_run, struct fake_job *out);
/* Creates n jobs with this scenario directly (no submit request), named
 * job-<first>.. in order; returns the number of the first. */
int fake_jobs_create(int n, const char *scenario);
/* Submissions received (including refused ones), and the most status
 * requests in flight for one job at any moment, over all jobs. */
int fake_jobs_submits(void);
int fake_jobs_max_in_flight(void);
/* Status requests over all jobs. */
long long fake_jobs_checks(void);
/* TCP connections accepted since the start, over every route. */
long long fake_jobs_connections(void);
/* A request as it arrived: its method, its request target exactly as sent
 * (not percent-decoded), its header lines ("Name: value\n" each) and its
 * body, each cut at the size of its field. */
struct fake_request {
    char method[16];
    char target[1024];
    char headers[2048];
    char body[4096];
};
/* Copies into out, oldest first, up to max requests whose target or body
 * holds needle; returns how many there are (past max too). */
int fake_requests_with(const char *needle, struct fake_request *out, int max);

/* Copies up to max objects created for run into out; returns how many. */
int fake_objects_of(const char *run, struct fake_object *out, int max);
/* The requests of run, oldest first, one per line (without the run id),
 * into out; returns how many. */
int fake_jobs_log(const char *run, char *out, size_t cap);

#endif
