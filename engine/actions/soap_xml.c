/* engine/actions/soap_xml.c — the soap_job action's XML, read with
 * libxml2 (engine/actions/soap_xml_internal.h): answers parsed without
 * network access or entity expansion, SOAP faults and status errors made
 * the run's error, values found by XPath, and XPath expressions checked at
 * load. No other file sees libxml2. */
#include "engine/actions/soap_xml_internal.h"

#include <ctype.h>
#include <libxml/parser.h>
#include <libxml/xpath.h>
#include <libxml/xpathInternals.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct soap_xml {
    xmlDocPtr doc;
};

/* libxml2 reports XPath and parse problems on stderr by default; we report
 * them ourselves (a config error, a failed check). The handler is
 * per-thread in libxml2, so each entry point sets it. */
static void quiet(void *ctx, xmlErrorPtr e)
{
    (void)ctx, (void)e;
}

enum status soap_xml_check_xpath(const json_t *v, const char *path, struct error *err)
{
    xmlXPathCompExprPtr c;

    xmlSetStructuredErrorFunc(NULL, quiet);
    if (!json_is_string(v) || !(c = xmlXPathCompile(BAD_CAST json_string_value(v))))
        return error_set(err, ST_INVALID, "invalid \"%s\": expected an XPath expression", path);
    xmlXPathFreeCompExpr(c);
    return ST_OK;
}

/* A parsed answer: never touches the network, never expands entities. */
static xmlDocPtr parse_xml(const struct remote_response *r)
{
    if (!r->body || r->len == 0 || r->len > (size_t)INT32_MAX)
        return NULL;
    return xmlReadMemory(r->body, (int)r->len, "answer.xml", NULL,
                         XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
}

/* The string value of expr in doc, trimmed; NULL when it matches nothing
 * or only empty text. Heap. */
static char *xpath_text(xmlDocPtr doc, const json_t *ns, const char *expr)
{
    xmlXPathContextPtr ctx = xmlXPathNewContext(doc);
    xmlXPathObjectPtr obj;
    xmlChar *s = NULL;
    char *out = NULL;
    const char *key;
    json_t *v;

    if (!ctx)
        return NULL;
    xmlSetStructuredErrorFunc(NULL, quiet);
    json_object_foreach((json_t *)ns, key, v)
    {
        xmlXPathRegisterNs(ctx, BAD_CAST key, BAD_CAST json_string_value(v));
    }
    obj = xmlXPathEvalExpression(BAD_CAST expr, ctx);
    if (obj && !(obj->type == XPATH_NODESET && xmlXPathNodeSetIsEmpty(obj->nodesetval)))
        s = xmlXPathCastToString(obj);
    if (s) {
        size_t a = 0, b = strlen((char *)s);
        while (a < b && isspace(s[a]))
            a++;
        while (b > a && isspace(s[b - 1]))
            b--;
        if (b > a)
            out = xstrndup((char *)s + a, b - a);
        xmlFree(s);
    }
    xmlXPathFreeObject(obj);
    xmlXPathFreeContext(ctx);
    return out;
}

/* A SOAP fault (1.1 faultcode/faultstring or 1.2 Code/Reason): its text in
 * *msg (heap) and whether the server side is at fault (transient). */
static bool soap_fault(xmlDocPtr doc, char **msg, bool *server)
{
    char *code = xpath_text(doc, NULL,
                            "(//*[local-name()='Fault']/*[local-name()='faultcode'] | "
                            "//*[local-name()='Fault']/*[local-name()='Code']/"
                            "*[local-name()='Value'])[1]");
    char *text;

    if (!code) {
        xmlXPathContextPtr ctx = xmlXPathNewContext(doc);
        xmlXPathObjectPtr o =
            ctx ? xmlXPathEvalExpression(BAD_CAST "//*[local-name()='Fault']", ctx) : NULL;
        bool any = o && o->type == XPATH_NODESET && !xmlXPathNodeSetIsEmpty(o->nodesetval);
        xmlXPathFreeObject(o);
        xmlXPathFreeContext(ctx);
        if (!any)
            return false;
    }
    text = xpath_text(doc, NULL,
                      "(//*[local-name()='Fault']/*[local-name()='faultstring'] | "
                      "//*[local-name()='Fault']/*[local-name()='Reason']/"
                      "*[local-name()='Text'])[1]");
    *server = code && (strstr(code, "Server") || strstr(code, "Receiver"));
    *msg = xasprintf("%s%s%s", code ? code : "soap:Fault", text ? ": " : "", text ? text : "");
    free(code);
    free(text);
    return true;
}

/* An answer that reports an error in its body, as the Marketing Cloud
 * style APIs do with HTTP 200: the first StatusCode "Error" of a result
 * with its StatusMessage and ErrorCode, or an OverallStatus that starts
 * with "Error" or "Has Errors". Sets rc->error (what: the call) with the
 * remote's own words in error.remote. */
static bool soap_status_error(struct run_ctx *rc, xmlDocPtr doc, const char *what)
{
#define SC_ERROR                                                                                   \
    "(//*[local-name()='StatusCode'][translate(normalize-space(.), 'ERO', 'ero') = 'error'])[1]"
    char *code = xpath_text(doc, NULL, SC_ERROR);
    char *msg = code ? xpath_text(doc, NULL, SC_ERROR "/../*[local-name()='StatusMessage']") : NULL;
    char *ecode = code ? xpath_text(doc, NULL, SC_ERROR "/../*[local-name()='ErrorCode']") : NULL;
    char *overall = xpath_text(doc, NULL, "(//*[local-name()='OverallStatus'])[1]");
    bool bad = code || (overall && (strncasecmp(overall, "error", 5) == 0 ||
                                    strncasecmp(overall, "has errors", 10) == 0));
#undef SC_ERROR

    if (bad) {
        json_t *remote = json_object();
        if (code) {
            rc_error(rc, "soap_status_error", "%s: StatusCode %s: %s%s%s%s", what, code,
                     msg ? msg : "(no StatusMessage)", ecode ? " (ErrorCode " : "",
                     ecode ? ecode : "", ecode ? ")" : "");
            json_object_set_new(remote, "status_code", json_string(code));
        } else {
            rc_error(rc, "soap_status_error", "%s: OverallStatus %s", what, overall);
        }
        if (msg)
            json_object_set_new(remote, "status_message", json_string(msg));
        if (ecode)
            json_object_set_new(remote, "error_code", json_string(ecode));
        if (overall)
            json_object_set_new(remote, "overall_status", json_string(overall));
        json_object_set_new(rc->error, "remote", remote);
    }
    free(code);
    free(msg);
    free(ecode);
    free(overall);
    return bad;
}

static xmlDocPtr read_doc(struct run_ctx *rc, const struct remote_response *r, const char *what,
                          enum step *fail)
{
    xmlDocPtr doc = r->transport_error ? NULL : parse_xml(r);
    enum step step = STEP_RETRY;
    char *msg = NULL;
    bool server = false;

    if (doc && soap_fault(doc, &msg, &server)) {
        rc_error(rc, "soap_fault", "%s: %s", what, msg);
        step = server ? STEP_RETRY : STEP_FAIL;
        xmlFreeDoc(doc), doc = NULL;
    } else if (remote_classify(r) != REMOTE_OK) {
        remote_error(rc,
                     remote_classify(r) == REMOTE_TRANSIENT ? "soap_unavailable" : "soap_rejected",
                     what, r);
        step = remote_classify(r) == REMOTE_TRANSIENT ? STEP_RETRY : STEP_FAIL;
        xmlFreeDoc(doc), doc = NULL;
    } else if (!doc) {
        remote_error(rc, "soap_malformed", what, r);
    } else if (soap_status_error(rc, doc, what)) {
        step = STEP_FAIL;
        xmlFreeDoc(doc), doc = NULL;
    }
    /* a call cut off by the check's time limit or a shutdown is transient:
     * the worker and the poller decide from their stop flag what it means */
    if (!doc)
        *fail = step;
    free(msg);
    return doc;
}

struct soap_xml *soap_xml_read(struct run_ctx *rc, const struct remote_response *r,
                               const char *what, enum step *fail)
{
    xmlDocPtr doc = read_doc(rc, r, what, fail);
    struct soap_xml *x;

    if (!doc)
        return NULL;
    x = xmalloc(sizeof(*x));
    x->doc = doc;
    return x;
}

void soap_xml_free(struct soap_xml *x)
{
    if (!x)
        return;
    xmlFreeDoc(x->doc);
    free(x);
}

char *soap_xml_text(const struct soap_xml *x, const json_t *ns, const char *expr)
{
    return xpath_text(x->doc, ns, expr);
}
