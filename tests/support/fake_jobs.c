/* tests/support/fake_jobs.c — see fake_jobs.h. */
#include "fake_jobs.h"

#include "harness.h"

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* After the system headers: common.h poisons names some of them declare. */
#include "common/dynbuf.h"

#define MAX_JOBS 20000
/* The longest request body the fake keeps: far above any opsrun sends it. */
#define BODY_MAX ((size_t)64 << 20)

static struct MHD_Daemon *daemon_;
static int port_;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct fake_job *jobs;
static int njobs, submits, max_in_flight;
static long long checks_total, connections;
/* soap_job's preparation: objects created through SOAP Create */
#define MAX_OBJECTS 512
static struct fake_object objects[MAX_OBJECTS];
static int nobjects;
/* the request log: "<run> <what>" lines */
#define MAX_LOG 4096
static char *log_lines[MAX_LOG];
static int nlog;
/* every request as it arrived (fake_requests_with) */
#define MAX_RECORDS 4096
static struct fake_request *records[MAX_RECORDS];
static int nrecords, echoes;

/* Appends a line to the request log (mu held). */
static void log_request(const char *run, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void log_request(const char *run, const char *fmt, ...)
{
    char line[256];
    int n = snprintf(line, sizeof(line), "%s ", run && *run ? run : "-");
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    va_end(ap);
    if (nlog < MAX_LOG)
        log_lines[nlog++] = strdup(line);
}

/* The number after "name:" in the scenario, or -1 (0 for a bare name). */
static int step_arg(const char *scenario, const char *name)
{
    size_t n = strlen(name);

    for (const char *p = scenario; p && *p; p = strchr(p, ','), p = p ? p + 1 : NULL) {
        if (strncmp(p, name, n) == 0 && (p[n] == ':' || p[n] == ',' || p[n] == '\0'))
            return p[n] == ':' ? atoi(p + n + 1) : 0;
    }
    return -1;
}

/* An answer, with up to two extra headers ("Name: value"; NULL = none). */
static enum MHD_Result answer_h(struct MHD_Connection *c, unsigned status, const char *body,
                                const char *ctype, const char *h1, const char *h2)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
    const char *hs[2] = {h1, h2};
    enum MHD_Result ret;

    MHD_add_response_header(r, "Content-Type", ctype);
    for (int i = 0; i < 2; i++) {
        char name[64];
        const char *colon = hs[i] ? strchr(hs[i], ':') : NULL;
        if (!colon)
            continue;
        snprintf(name, sizeof(name), "%.*s", (int)(colon - hs[i]), hs[i]);
        MHD_add_response_header(r, name, colon + 2);
    }
    ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result answer(struct MHD_Connection *c, unsigned status, const char *body)
{
    return answer_h(c, status, body, "application/json", NULL, NULL);
}

static struct fake_job *find(const char *id)
{
    for (int i = 0; i < njobs; i++)
        if (strcmp(jobs[i].id, id) == 0)
            return &jobs[i];
    return NULL;
}

static enum MHD_Result on_submit(struct MHD_Connection *c, const char *body)
{
    json_t *j = json_loads(body ? body : "", 0, NULL);
    const char *scenario = json_string_value(json_object_get(j, "scenario"));
    const char *run = json_string_value(json_object_get(j, "run"));
    char out[96] = "{}";
    unsigned status = 201;
    struct fake_job *fj = NULL;

    pthread_mutex_lock(&mu);
    submits++;
    if (!scenario)
        scenario = "";
    if (step_arg(scenario, "submit_500") >= 0) {
        status = 500;
    } else if (step_arg(scenario, "submit_400") >= 0) {
        status = 400;
        snprintf(out, sizeof(out), "{\"error\":\"bad job\"}");
    } else if (njobs < MAX_JOBS) {
        fj = &jobs[njobs++];
        memset(fj, 0, sizeof(*fj));
        snprintf(fj->id, sizeof(fj->id), "job-%d", njobs);
        snprintf(fj->run, sizeof(fj->run), "%s", run ? run : "");
        snprintf(fj->scenario, sizeof(fj->scenario), "%s", scenario);
        fj->submit_ms = th_now_ms();
        if (step_arg(scenario, "submit_noid") < 0)
            snprintf(out, sizeof(out), "{\"id\":\"%s\",\"accepted\":true}", fj->id);
    }
    pthread_mutex_unlock(&mu);
    if (step_arg(scenario, "submit_hang") >= 0)
        sleep(5);
    json_decref(j);
    return answer(c, status, out);
}

/* What check k of a job gets, as its scenario says. */
static unsigned check_answer(const char *sc, int k, char *out, size_t cap)
{
    int n;

    if ((n = step_arg(sc, "flaky")) >= k)
        return snprintf(out, cap, "{\"error\":\"overloaded\"}"), 500;
    if ((n = step_arg(sc, "malformed")) >= k)
        return snprintf(out, cap, "{not json"), 200;
    if ((n = step_arg(sc, "unknown")) >= k)
        return snprintf(out, cap, "{\"state\":\"WEIRD\"}"), 200;
    if ((n = step_arg(sc, "vanish_after")) >= 0 && k >= n)
        return snprintf(out, cap, "{\"error\":\"no such job\"}"), 404;
    if ((n = step_arg(sc, "fail_after")) >= 0 && k >= n)
        return snprintf(out, cap, "{\"state\":\"FAILED\",\"error\":{\"message\":\"boom\"}}"), 200;
    if ((n = step_arg(sc, "cancelled_after")) >= 0 && k >= n)
        return snprintf(out, cap, "{\"state\":\"CANCELLED\"}"), 200;
    if ((n = step_arg(sc, "done_after")) >= 0 && k >= n) {
        if (step_arg(sc, "partial") >= 0)
            snprintf(out, cap,
                     "{\"state\":\"DONE\",\"output\":{\"rows\":10},\"counts\":{\"succeeded\":8,"
                     "\"failed\":2},\"failures\":[{\"code\":\"bad_row\",\"message\":\"row 3\"},"
                     "{\"code\":\"bad_row\",\"message\":\"row 7\"}]}");
        else
            snprintf(out, cap, "{\"state\":\"DONE\",\"output\":{\"rows\":%d}}", k);
        return 200;
    }
    return snprintf(out, cap, "{\"state\":\"RUNNING\",\"check\":%d}", k), 200;
}

static enum MHD_Result on_status(struct MHD_Connection *c, const char *id)
{
    struct fake_job *fj;
    char out[512], sc[128];
    unsigned status;
    int k, slow, hang;

    pthread_mutex_lock(&mu);
    fj = find(id);
    if (!fj) {
        pthread_mutex_unlock(&mu);
        return answer(c, 404, "{\"error\":\"no such job\"}");
    }
    k = ++fj->checks;
    checks_total++;
    if (k <= FAKE_MAX_CHECKS)
        fj->check_ms[k - 1] = th_now_ms();
    if (++fj->in_flight > fj->max_in_flight)
        fj->max_in_flight = fj->in_flight;
    if (fj->in_flight > max_in_flight)
        max_in_flight = fj->in_flight;
    snprintf(sc, sizeof(sc), "%s", fj->scenario);
    pthread_mutex_unlock(&mu);
    slow = step_arg(sc, "slow");
    hang = step_arg(sc, "hang");
    if (slow > 0)
        usleep((useconds_t)slow * 1000);
    if (hang >= k)
        sleep(3);
    status = check_answer(sc, k, out, sizeof(out));
    pthread_mutex_lock(&mu);
    fj->in_flight--;
    pthread_mutex_unlock(&mu);
    return answer(c, status, out);
}

static enum MHD_Result on_hook(struct MHD_Connection *c, const char *id, bool cancel)
{
    struct fake_job *fj;
    bool fail = false;

    pthread_mutex_lock(&mu);
    fj = find(id);
    if (fj) {
        if (cancel)
            fj->cancels++;
        else
            fj->cleanups++;
        fail = !cancel && step_arg(fj->scenario, "cleanup_fail") >= 0;
    }
    pthread_mutex_unlock(&mu);
    if (!fj)
        return answer(c, 404, "{}");
    return answer(c, fail ? 500 : 200, "{}");
}

/* The Retry-After header a scenario asks for, into buf: "1" second, or an
 * HTTP date 3 s ahead (a wait of 2-3 s, the date's resolution being a
 * second); NULL for none. */
static const char *retry_after_header(const char *sc, char *buf, size_t cap)
{
    time_t t = time(NULL) + 3;
    struct tm tm;

    if (step_arg(sc, "async_retry_after") >= 0)
        return "Retry-After: 1";
    if (step_arg(sc, "async_retry_date") < 0)
        return NULL;
    gmtime_r(&t, &tm);
    strftime(buf, cap, "Retry-After: %a, %d %b %Y %H:%M:%S GMT", &tm);
    return buf;
}

/* A new job record for an accepted call (mu held). */
static struct fake_job *new_job(const char *scenario, const char *run)
{
    struct fake_job *fj = &jobs[njobs++];

    memset(fj, 0, sizeof(*fj));
    snprintf(fj->id, sizeof(fj->id), "job-%d", njobs);
    snprintf(fj->run, sizeof(fj->run), "%s", run ? run : "");
    snprintf(fj->scenario, sizeof(fj->scenario), "%s", scenario);
    fj->submit_ms = th_now_ms();
    return fj;
}

static enum MHD_Result on_call(struct MHD_Connection *c, const char *body, int port)
{
    json_t *j = json_loads(body ? body : "", 0, NULL);
    const char *sc = json_string_value(json_object_get(j, "scenario"));
    const char *run = json_string_value(json_object_get(j, "run"));
    char out[256], loc[128], ra[64], id[32] = "";
    struct fake_job *fj = NULL;
    enum MHD_Result ret;

    if (!sc)
        sc = "";
    pthread_mutex_lock(&mu);
    submits++;
    if (strncmp(sc, "async", 5) == 0 && njobs < MAX_JOBS) {
        fj = new_job(sc, run);
        snprintf(id, sizeof(id), "%s", fj->id);
    }
    pthread_mutex_unlock(&mu);
    if (strcmp(sc, "sync") == 0) {
        snprintf(out, sizeof(out), "{\"answer\":42,\"run\":\"%s\"}", run ? run : "");
        ret = answer(c, 200, out);
    } else if (strcmp(sc, "sync_text") == 0) {
        ret = answer_h(c, 200, "plain ok", "text/plain", NULL, NULL);
    } else if (strcmp(sc, "call_500") == 0) {
        ret = answer(c, 500, "{\"error\":\"down\"}");
    } else if (strcmp(sc, "call_404") == 0) {
        ret = answer(c, 404, "{\"error\":\"no such endpoint\"}");
    } else if (strcmp(sc, "call_hang") == 0) {
        sleep(3);
        ret = answer(c, 200, "{}");
    } else if (fj && step_arg(sc, "async_body") >= 0) {
        snprintf(out, sizeof(out), "{\"statusUrl\":\"http://127.0.0.1:%d/status/%s\"}", port, id);
        ret = answer(c, 202, out);
    } else if (fj && step_arg(sc, "async_other_host") >= 0) {
        /* the same server under another name: another authority */
        snprintf(out, sizeof(out), "{\"statusUrl\":\"http://localhost:%d/status/%s\"}", port, id);
        ret = answer(c, 202, out);
    } else if (fj) {
        /* async_rel: a Location relative to the path called (/call) */
        snprintf(loc, sizeof(loc), "Location: %s/status/%s",
                 step_arg(sc, "async_rel") >= 0 ? "." : "", id);
        ret = answer_h(c, 202, "{\"accepted\":true}", "application/json", loc,
                       retry_after_header(sc, ra, sizeof(ra)));
    } else {
        ret = answer(c, 400, "{\"error\":\"unknown scenario\"}");
    }
    json_decref(j);
    return ret;
}

/* A check of an accepted call's status URL. */
static enum MHD_Result on_call_status(struct MHD_Connection *c, const char *id)
{
    struct fake_job *fj;
    char out[256], sc[128], ra[64];
    static const char *const kinds[] = {"async", "async_body", "async_retry_after",
                                        "async_retry_date", "async_rel"};
    int k, n = -1;

    pthread_mutex_lock(&mu);
    fj = find(id);
    if (fj) {
        k = ++fj->checks;
        checks_total++;
        if (k <= FAKE_MAX_CHECKS)
            fj->check_ms[k - 1] = th_now_ms();
        snprintf(sc, sizeof(sc), "%s", fj->scenario);
    }
    pthread_mutex_unlock(&mu);
    if (!fj || step_arg(sc, "async_vanish") >= 0)
        return answer(c, 404, "{\"error\":\"no such operation\"}");
    if ((n = step_arg(sc, "async_state")) >= 0)
        return answer(c, 200,
                      k < n ? "{\"status\":\"working\"}"
                            : "{\"status\":\"broken\",\"why\":\"nope\"}");
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]) && n < 0; i++)
        n = step_arg(sc, kinds[i]);
    if (k < n)
        return answer_h(c, 202, "{\"pending\":true}", "application/json",
                        retry_after_header(sc, ra, sizeof(ra)), NULL);
    snprintf(out, sizeof(out), "{\"done\":true,\"rows\":%d}", k);
    return answer(c, 200, out);
}

/* ---- SOAP ---- */

#define ENV_HEAD                                                                                   \
    "<?xml version=\"1.0\"?><soap:Envelope "                                                       \
    "xmlns:soap=\"http://schemas.xmlsoap.org/soap/envelope/\"><soap:Body>"
#define ENV_TAIL "</soap:Body></soap:Envelope>"

/* The text of <tag>...</tag> in body, into out. */
static bool xml_field(const char *body, const char *tag, char *out, size_t cap)
{
    char open[64], close[64];
    const char *a, *b;

    snprintf(open, sizeof(open), "<%s>", tag);
    snprintf(close, sizeof(close), "</%s>", tag);
    a = body ? strstr(body, open) : NULL;
    b = a ? strstr(a, close) : NULL;
    if (!b)
        return false;
    a += strlen(open);
    snprintf(out, cap, "%.*s", (int)(b - a), a);
    return true;
}

static enum MHD_Result soap_answer(struct MHD_Connection *c, unsigned status, const char *inner)
{
    char out[2048];

    snprintf(out, sizeof(out), ENV_HEAD "%s" ENV_TAIL, inner);
    return answer_h(c, status, out, "text/xml; charset=utf-8", NULL, NULL);
}

static enum MHD_Result soap_fault_answer(struct MHD_Connection *c, const char *code,
                                         const char *text)
{
    char inner[512];

    snprintf(inner, sizeof(inner),
             "<soap:Fault><faultcode>%s</faultcode><faultstring>%s</faultstring></soap:Fault>",
             code, text);
    return soap_answer(c, 500, inner);
}

/* The object of this kind with this key or object id: the newest one not
 * deleted yet, else the newest one (mu held). */
static struct fake_object *find_object(const char *kind, const char *key, const char *object_id)
{
    struct fake_object *found = NULL;

    for (int i = nobjects - 1; i >= 0; i--) {
        struct fake_object *o = &objects[i];
        if (strcmp(o->kind, kind) != 0 || !((key && strcmp(o->key, key) == 0) ||
                                            (object_id && strcmp(o->object_id, object_id) == 0)))
            continue;
        if (!o->deleted)
            return o;
        if (!found)
            found = o;
    }
    return found;
}

/* A 200 answer whose result says StatusCode Error, as the Marketing Cloud
 * SOAP API reports a refused Create, Perform or Delete. */
static enum MHD_Result soap_status_error(struct MHD_Connection *c, const char *msg_tag,
                                         const char *message, int code)
{
    char inner[768];

    snprintf(inner, sizeof(inner),
             "<%s xmlns=\"urn:fake\"><Results><StatusCode>Error</StatusCode><StatusMessage>%s"
             "</StatusMessage><ErrorCode>%d</ErrorCode></Results><OverallStatus>Error"
             "</OverallStatus></%s>",
             msg_tag, message, code, msg_tag);
    return soap_answer(c, 200, inner);
}

static enum MHD_Result soap_perform(struct MHD_Connection *c, const char *body)
{
    char sc[128] = "", run[64] = "", inner[512], qd[64] = "";
    struct fake_job *fj = NULL;
    struct fake_object *o = NULL;
    bool by_object;

    xml_field(body, "Scenario", sc, sizeof(sc));
    xml_field(body, "Run", run, sizeof(run));
    by_object = xml_field(body, "ObjectID", qd, sizeof(qd));
    pthread_mutex_lock(&mu);
    submits++;
    log_request(run, "Perform %s", by_object ? qd : "-");
    if (by_object) {
        o = find_object("QueryDefinition", NULL, qd);
        if (!o || o->deleted || step_arg(sc, "perform_error") >= 0) {
            pthread_mutex_unlock(&mu);
            return soap_status_error(c, "PerformResponseMsg",
                                     o && !o->deleted ? "Query failed validation: column "
                                                        "\"Email\" is ambiguous"
                                                      : "QueryDefinition not found",
                                     o ? 180008 : 2);
        }
    }
    if (step_arg(sc, "soap_fault_client") < 0 && njobs < MAX_JOBS)
        fj = new_job(sc, run);
    if (fj && by_object)
        snprintf(fj->query, sizeof(fj->query), "%.39s", qd);
    if (fj)
        snprintf(inner, sizeof(inner),
                 "<PerformResponseMsg xmlns=\"urn:fake\"><Results><Result><Task><ID>%s</ID>"
                 "</Task><Object><ObjectID>q-%s</ObjectID></Object></Result></Results>"
                 "</PerformResponseMsg>",
                 fj->id, fj->id + 4);
    pthread_mutex_unlock(&mu);
    if (!fj)
        return soap_fault_answer(c, "soap:Client", "bad query: unknown table");
    return soap_answer(c, 200, inner);
}

static enum MHD_Result soap_retrieve(struct MHD_Connection *c, const char *body)
{
    char id[32] = "", sc[128], inner[1024], props[768];
    struct fake_job *fj;
    int k, n;

    xml_field(body, "TaskID", id, sizeof(id));
    pthread_mutex_lock(&mu);
    fj = find(id);
    if (fj) {
        k = ++fj->checks;
        checks_total++;
        if (k <= FAKE_MAX_CHECKS)
            fj->check_ms[k - 1] = th_now_ms();
        snprintf(sc, sizeof(sc), "%s", fj->scenario);
        log_request(fj->run, "Retrieve %s", id);
    }
    pthread_mutex_unlock(&mu);
    if (!fj)
        return soap_fault_answer(c, "soap:Client", "no such task");
    if ((n = step_arg(sc, "soap_hang")) >= k)
        sleep(3);
    if ((n = step_arg(sc, "soap_fault_server")) >= k)
        return soap_fault_answer(c, "soap:Server", "the server is busy");
    if ((n = step_arg(sc, "soap_malformed")) >= k)
        return answer_h(c, 200, "<not xml", "text/xml", NULL, NULL);
    if ((n = step_arg(sc, "soap_processing")) >= 0)
        snprintf(props, sizeof(props),
                 "<Property><Name>Status</Name><Value>%s</Value></Property><Property><Name>"
                 "ErrorMsg</Name><Value/></Property>",
                 k >= n ? " Complete " : "Processing");
    else if ((n = step_arg(sc, "soap_done")) >= 0 && k >= n)
        snprintf(props, sizeof(props),
                 "<Property><Name>Status</Name><Value> Complete </Value>"
                 "</Property>");
    else if ((n = step_arg(sc, "soap_canceled")) >= 0 && k >= n)
        snprintf(props, sizeof(props),
                 "<Property><Name>Status</Name><Value>Canceled</Value></Property>");
    else if ((n = step_arg(sc, "soap_error")) >= 0 && k >= n)
        snprintf(props, sizeof(props),
                 "<Property><Name>Status</Name><Value>Error</Value></Property><Property><Name>"
                 "ErrorMsg</Name><Value>syntax error near FROM</Value></Property>");
    else if ((n = step_arg(sc, "soap_errmsg")) >= 0 && k >= n)
        snprintf(props, sizeof(props),
                 "<Property><Name>Status</Name><Value>Processing</Value></Property><Property>"
                 "<Name>ErrorMsg</Name><Value>quota exceeded</Value></Property>");
    else if (step_arg(sc, "soap_completed_date") >= 0)
        snprintf(props, sizeof(props),
                 "<Property><Name>Status</Name><Value>Queued</Value></Property><Property><Name>"
                 "CompletedDate</Name><Value>2026-11-23T01:02:03</Value></Property>");
    else
        snprintf(props, sizeof(props),
                 "<Property><Name>Status</Name><Value>%s</Value>"
                 "</Property><Property><Name>ErrorMsg</Name><Value/>"
                 "</Property>",
                 step_arg(sc, "soap_stuck") >= 0 ? "Processing" : " Queued ");
    snprintf(inner, sizeof(inner),
             "<RetrieveResponseMsg xmlns=\"urn:fake\"><Results><Properties>%s</Properties>"
             "</Results></RetrieveResponseMsg>",
             props);
    return soap_answer(c, 200, inner);
}

static enum MHD_Result soap_hook(struct MHD_Connection *c, const char *body, bool cancel)
{
    char id[32] = "", obj[32] = "";
    struct fake_job *fj = NULL;

    if (cancel)
        xml_field(body, "TaskID", id, sizeof(id));
    else if (xml_field(body, "ObjectID", obj, sizeof(obj)) && strncmp(obj, "q-", 2) == 0)
        snprintf(id, sizeof(id), "job-%.20s", obj + 2);
    pthread_mutex_lock(&mu);
    fj = find(id);
    if (fj)
        log_request(fj->run, "%s %s", cancel ? "Cancel" : "Delete", cancel ? id : obj);
    if (fj && cancel)
        fj->cancels++;
    else if (fj) {
        fj->cleanups++;
        snprintf(fj->cleanup_object, sizeof(fj->cleanup_object), "%s", obj);
    }
    pthread_mutex_unlock(&mu);
    if (!fj)
        return soap_fault_answer(c, "soap:Client", "no such object");
    return soap_answer(c, 200, "<OK xmlns=\"urn:fake\"/>");
}

/* SOAP Create of a DataExtension or a QueryDefinition: <CustomerKey>,
 * <Scenario>, <Run>. The scenario's create_de_* and create_qd_* steps
 * script the answers; a slow create makes the object first (the server did
 * the work; only its answer is late). */
static enum MHD_Result soap_create(struct MHD_Connection *c, const char *body)
{
    const char *kind =
        strstr(body ? body : "", "QueryDefinition") ? "QueryDefinition" : "DataExtension";
    bool qd = kind[0] == 'Q';
    char sc[128] = "", run[64] = "", key[64] = "", inner[768], id[40] = "";
    struct fake_object *o = NULL;
    int n, k = 0, slow;

    xml_field(body, "Scenario", sc, sizeof(sc));
    xml_field(body, "Run", run, sizeof(run));
    xml_field(body, "CustomerKey", key, sizeof(key));
    pthread_mutex_lock(&mu);
    log_request(run, "Create %s %s", kind, key);
    {
        char line[160]; /* this create's number for this run and kind */
        snprintf(line, sizeof(line), "%s Create %s ", *run ? run : "-", kind);
        for (int i = 0; i < nlog; i++)
            k += strncmp(log_lines[i], line, strlen(line)) == 0;
    }
    if ((n = step_arg(sc, qd ? "create_qd_fault" : "create_de_fault")) >= k) {
        pthread_mutex_unlock(&mu);
        return soap_fault_answer(c, "soap:Server", "the server is busy");
    }
    if (step_arg(sc, qd ? "create_qd_error" : "create_de_error") >= 0) {
        pthread_mutex_unlock(&mu);
        return soap_status_error(c, "CreateResponse",
                                 qd ? "An error occurred while checking the query syntax"
                                    : "Data extension name is already in use",
                                 qd ? 180008 : 310007);
    }
    if (find_object(kind, key, NULL) && !find_object(kind, key, NULL)->deleted) {
        pthread_mutex_unlock(&mu);
        return soap_status_error(c, "CreateResponse", "An object with this key already exists",
                                 310007);
    }
    if (nobjects < MAX_OBJECTS) {
        o = &objects[nobjects++];
        memset(o, 0, sizeof(*o));
        snprintf(o->kind, sizeof(o->kind), "%s", kind);
        snprintf(o->key, sizeof(o->key), "%s", key);
        snprintf(o->run, sizeof(o->run), "%s", run);
        snprintf(o->object_id, sizeof(o->object_id), "%s-%d", qd ? "qd" : "de", nobjects);
        snprintf(id, sizeof(id), "%s", o->object_id);
    }
    slow = step_arg(sc, qd ? "create_qd_slow" : "create_de_slow");
    pthread_mutex_unlock(&mu);
    if (slow > 0)
        usleep((useconds_t)slow * 1000);
    snprintf(inner, sizeof(inner),
             "<CreateResponse xmlns=\"urn:fake\"><Results><StatusCode>OK</StatusCode>"
             "<StatusMessage>Created %s</StatusMessage><NewID>0</NewID><NewObjectID>%s"
             "</NewObjectID></Results><OverallStatus>OK</OverallStatus></CreateResponse>",
             kind, id);
    return soap_answer(c, 200, inner);
}

/* SOAP Delete of a created object by <CustomerKey> or <ObjectID>; false
 * when the body names none (then it is the job cleanup of soap_hook). */
static bool soap_delete_object(struct MHD_Connection *c, const char *body, enum MHD_Result *ret)
{
    const char *kind = strstr(body ? body : "", "QueryDefinition") ? "QueryDefinition"
                       : strstr(body ? body : "", "DataExtension") ? "DataExtension"
                                                                   : NULL;
    char key[64] = "", oid[64] = "";
    struct fake_object *o;
    bool by_key;

    if (!kind)
        return false;
    by_key = xml_field(body, "CustomerKey", key, sizeof(key));
    if (!by_key)
        xml_field(body, "ObjectID", oid, sizeof(oid));
    pthread_mutex_lock(&mu);
    o = find_object(kind, by_key ? key : NULL, by_key ? NULL : oid);
    log_request(o ? o->run : NULL, "Delete %s %s", kind, by_key ? key : oid);
    if (o)
        o->deleted++;
    pthread_mutex_unlock(&mu);
    *ret = o && o->deleted == 1
               ? soap_answer(c, 200,
                             "<DeleteResponse xmlns=\"urn:fake\"><Results><StatusCode>OK"
                             "</StatusCode></Results><OverallStatus>OK</OverallStatus>"
                             "</DeleteResponse>")
               : soap_status_error(c, "DeleteResponse", "The object does not exist", 2);
    return true;
}

static enum MHD_Result on_soap(struct MHD_Connection *c, const char *body)
{
    const char *action = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "SOAPAction");
    enum MHD_Result ret;

    if (action && strstr(action, "Create"))
        return soap_create(c, body);
    if (action && strstr(action, "Delete") && soap_delete_object(c, body, &ret))
        return ret;

    if (action && strstr(action, "Perform"))
        return soap_perform(c, body);
    if (action && strstr(action, "Retrieve"))
        return soap_retrieve(c, body);
    if (action && strstr(action, "Delete"))
        return soap_hook(c, body, false);
    if (action && strstr(action, "Cancel"))
        return soap_hook(c, body, true);
    return soap_fault_answer(c, "soap:Client", "unknown SOAPAction");
}

/* GET /rest/<what>/q-K: soap_job's REST helpers. */
static enum MHD_Result on_rest(struct MHD_Connection *c, const char *what, const char *qid)
{
    char id[40], sc[128], out[128];
    struct fake_job *fj;
    int k = 0, n;

    snprintf(id, sizeof(id), "job-%.30s", strncmp(qid, "q-", 2) == 0 ? qid + 2 : qid);
    pthread_mutex_lock(&mu);
    fj = find(id);
    for (int i = njobs - 1; !fj && i >= 0; i--) /* a query definition's ObjectID */
        if (strcmp(jobs[i].query, qid) == 0)
            fj = &jobs[i];
    if (fj) {
        snprintf(sc, sizeof(sc), "%s", fj->scenario);
        log_request(fj->run, "GET /rest/%s/%s", what, qid);
        if (strcmp(what, "isrunning") == 0) {
            k = ++fj->isrunning;
            if (k <= FAKE_MAX_CHECKS)
                fj->isrunning_ms[k - 1] = th_now_ms();
        } else if (strcmp(what, "rowset") == 0) {
            k = ++fj->readiness;
        } else {
            k = ++fj->probes;
        }
    }
    pthread_mutex_unlock(&mu);
    if (!fj)
        return answer(c, 404, "{}");
    if (strcmp(what, "isrunning") == 0) {
        n = step_arg(sc, "running_for");
        snprintf(out, sizeof(out), "{\"isRunning\":%s}", n >= k ? "true" : "false");
    } else if (strcmp(what, "rowset") == 0) {
        n = step_arg(sc, "ready_after");
        snprintf(out, sizeof(out), "{\"ready\":%s,\"rows\":12}",
                 step_arg(sc, "never_ready") < 0 && k >= (n > 0 ? n : 1) ? "true" : "false");
    } else {
        n = step_arg(sc, "probe_rows");
        snprintf(out, sizeof(out), "{\"count\":%d}", n > 0 && k >= n ? 5 : 0);
    }
    return answer(c, 200, out);
}

/* ---- what arrived ---- */

/* Any request under /echo: 200 and a job id, its state DONE; in SOAP (an
 * XML content type) an envelope with the same, in namespace urn:fake. */
static enum MHD_Result on_echo(struct MHD_Connection *c)
{
    const char *ctype = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
    char out[512];
    int n;

    pthread_mutex_lock(&mu);
    n = ++echoes;
    pthread_mutex_unlock(&mu);
    if (ctype && strstr(ctype, "xml")) {
        snprintf(out, sizeof(out),
                 ENV_HEAD "<EchoResponse xmlns=\"urn:fake\"><ID>echo-%d</ID><Status>Complete"
                          "</Status></EchoResponse>" ENV_TAIL,
                 n);
        return answer_h(c, 200, out, "text/xml; charset=utf-8", NULL, NULL);
    }
    snprintf(out, sizeof(out), "{\"id\":\"echo-%d\",\"state\":\"DONE\",\"ok\":true}", n);
    return answer(c, 200, out);
}

/* *con_cls: a request's target as it was sent and its body (capped at
 * BODY_MAX). */
struct body {
    struct dynbuf buf;
    bool started;
    char target[1024]; /* as sent, before libmicrohttpd decodes it */
};

/* libmicrohttpd's first look at a request: its target as it was sent. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
    struct body *b = xcalloc(1, sizeof(*b));

    (void)cls, (void)c;
    dynbuf_init(&b->buf, BODY_MAX);
    snprintf(b->target, sizeof(b->target), "%s", uri);
    return b;
}

static enum MHD_Result add_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                  const char *value)
{
    struct fake_request *r = cls;
    size_t n = strlen(r->headers);

    (void)kind;
    snprintf(r->headers + n, sizeof(r->headers) - n, "%s: %s\n", key, value ? value : "");
    return MHD_YES;
}

static void record(struct MHD_Connection *c, const char *method, const struct body *b)
{
    struct fake_request *r = calloc(1, sizeof(*r));

    snprintf(r->method, sizeof(r->method), "%s", method);
    snprintf(r->target, sizeof(r->target), "%s", b->target);
    snprintf(r->body, sizeof(r->body), "%s", dynbuf_ptr(&b->buf) ? dynbuf_ptr(&b->buf) : "");
    MHD_get_connection_values(c, MHD_HEADER_KIND, add_header, r);
    pthread_mutex_lock(&mu);
    if (nrecords < MAX_RECORDS)
        records[nrecords++] = r;
    else
        free(r);
    pthread_mutex_unlock(&mu);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *data,
                                  size_t *size, void **con_cls)
{
    struct body *b = *con_cls;
    char id[64];

    (void)cls, (void)version;
    if (!b->started) {
        b->started = true;
        return MHD_YES;
    }
    if (*size) {
        if (dynbuf_add(&b->buf, data, *size) != ST_OK)
            return MHD_NO; /* past BODY_MAX: drop the connection */
        *size = 0;
        return MHD_YES;
    }
    record(c, method, b);
    if (strncmp(url, "/echo/", 6) == 0)
        return on_echo(c);
    if (strcmp(method, "POST") == 0 && strcmp(url, "/jobs") == 0)
        return on_submit(c, dynbuf_ptr(&b->buf));
    if (strcmp(method, "POST") == 0 && strcmp(url, "/soap") == 0)
        return on_soap(c, dynbuf_ptr(&b->buf));
    if (strcmp(method, "GET") == 0 && strncmp(url, "/rest/", 6) == 0) {
        char what[32], qid[40];
        if (sscanf(url, "/rest/%31[^/]/%39[^/]", what, qid) == 2)
            return on_rest(c, what, qid);
    }
    if (strcmp(method, "POST") == 0 && strcmp(url, "/call") == 0)
        return on_call(c, dynbuf_ptr(&b->buf), port_);
    if (sscanf(url, "/status/%63[^/]", id) == 1) {
        if (strcmp(method, "GET") == 0)
            return on_call_status(c, id);
        if (strcmp(method, "DELETE") == 0)
            return on_hook(c, id, true);
    }
    if (sscanf(url, "/jobs/%63[^/]", id) == 1) {
        bool is_cancel = strstr(url, "/cancel") != NULL;
        if (strcmp(method, "GET") == 0 && !is_cancel)
            return on_status(c, id);
        if (strcmp(method, "POST") == 0 && is_cancel)
            return on_hook(c, id, true);
        if (strcmp(method, "DELETE") == 0)
            return on_hook(c, id, false);
    }
    return answer(c, 405, "{}");
}

static void on_done(void *cls, struct MHD_Connection *c, void **con_cls,
                    enum MHD_RequestTerminationCode toe)
{
    struct body *b = *con_cls;

    (void)cls, (void)c, (void)toe;
    if (b) {
        dynbuf_free(&b->buf);
        free(b);
    }
    *con_cls = NULL;
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    (void)cls, (void)c, (void)socket_context;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        pthread_mutex_lock(&mu);
        connections++;
        pthread_mutex_unlock(&mu);
    }
}

int fake_jobs_start(void)
{
    const union MHD_DaemonInfo *info;

    jobs = calloc(MAX_JOBS, sizeof(*jobs));
    njobs = submits = max_in_flight = 0;
    checks_total = connections = 0;
    nobjects = 0;
    for (int i = 0; i < nlog; i++)
        free(log_lines[i]);
    nlog = 0;
    for (int i = 0; i < nrecords; i++)
        free(records[i]);
    nrecords = echoes = 0;
    daemon_ = MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0,
        NULL, NULL, on_request, NULL, MHD_OPTION_NOTIFY_COMPLETED, on_done, NULL,
        MHD_OPTION_URI_LOG_CALLBACK, on_uri, NULL, MHD_OPTION_NOTIFY_CONNECTION, on_connection,
        NULL, MHD_OPTION_CONNECTION_LIMIT, (unsigned int)2000, MHD_OPTION_END);
    ck_assert_msg(daemon_ != NULL, "could not start the fake jobs API");
    info = MHD_get_daemon_info(daemon_, MHD_DAEMON_INFO_BIND_PORT);
    port_ = info->port;
    return port_;
}

void fake_jobs_stop(void)
{
    MHD_stop_daemon(daemon_);
    daemon_ = NULL;
    free(jobs);
    jobs = NULL;
    for (int i = 0; i < nlog; i++)
        free(log_lines[i]);
    nlog = 0;
    for (int i = 0; i < nrecords; i++)
        free(records[i]);
    nrecords = 0;
}

int fake_requests_with(const char *needle, struct fake_request *out, int max)
{
    int n = 0;

    pthread_mutex_lock(&mu);
    for (int i = 0; i < nrecords; i++) {
        if (!strstr(records[i]->target, needle) && !strstr(records[i]->body, needle))
            continue;
        if (n < max)
            out[n] = *records[i];
        n++;
    }
    pthread_mutex_unlock(&mu);
    return n;
}

bool fake_jobs_get(const char *id_or_run, struct fake_job *out)
{
    bool found = false;

    pthread_mutex_lock(&mu);
    for (int i = 0; i < njobs && !found; i++) {
        if (strcmp(jobs[i].id, id_or_run) == 0 || strcmp(jobs[i].run, id_or_run) == 0) {
            *out = jobs[i];
            found = true;
        }
    }
    pthread_mutex_unlock(&mu);
    return found;
}

int fake_jobs_create(int n, const char *scenario)
{
    int first;

    pthread_mutex_lock(&mu);
    first = njobs + 1;
    for (int i = 0; i < n && njobs < MAX_JOBS; i++) {
        struct fake_job *fj = &jobs[njobs++];
        memset(fj, 0, sizeof(*fj));
        snprintf(fj->id, sizeof(fj->id), "job-%d", njobs);
        snprintf(fj->scenario, sizeof(fj->scenario), "%s", scenario);
        fj->submit_ms = th_now_ms();
    }
    pthread_mutex_unlock(&mu);
    return first;
}

int fake_jobs_submits(void)
{
    int n;

    pthread_mutex_lock(&mu);
    n = submits;
    pthread_mutex_unlock(&mu);
    return n;
}

int fake_jobs_max_in_flight(void)
{
    int n;

    pthread_mutex_lock(&mu);
    n = max_in_flight;
    pthread_mutex_unlock(&mu);
    return n;
}

long long fake_jobs_checks(void)
{
    long long n;

    pthread_mutex_lock(&mu);
    n = checks_total;
    pthread_mutex_unlock(&mu);
    return n;
}

long long fake_jobs_connections(void)
{
    long long n;

    pthread_mutex_lock(&mu);
    n = connections;
    pthread_mutex_unlock(&mu);
    return n;
}

int fake_objects_of(const char *run, struct fake_object *out, int max)
{
    int n = 0;

    pthread_mutex_lock(&mu);
    for (int i = 0; i < nobjects && n < max; i++)
        if (strcmp(objects[i].run, run) == 0)
            out[n++] = objects[i];
    pthread_mutex_unlock(&mu);
    return n;
}

int fake_jobs_log(const char *run, char *out, size_t cap)
{
    size_t len = 0;
    int n = 0;

    out[0] = '\0';
    pthread_mutex_lock(&mu);
    for (int i = 0; i < nlog; i++) {
        size_t rl = strlen(run);
        if (strncmp(log_lines[i], run, rl) != 0 || log_lines[i][rl] != ' ')
            continue;
        len += (size_t)snprintf(out + len, len < cap ? cap - len : 0, "%s%s", n ? "\n" : "",
                                log_lines[i] + rl + 1);
        if (len >= cap)
            len = cap - 1;
        n++;
    }
    pthread_mutex_unlock(&mu);
    return n;
}
