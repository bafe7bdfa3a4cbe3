/* engine/actions/soap_xml_internal.h — the soap_job action's XML
 * (soap_xml.c), the one place libxml2 is used: answers read and what they
 * mean, values found by XPath, and XPath expressions checked at load.
 * Private to engine/actions/; reentrant. */
#ifndef OPSRUN_ENGINE_ACTIONS_SOAP_XML_INTERNAL_H
#define OPSRUN_ENGINE_ACTIONS_SOAP_XML_INTERNAL_H

#include "engine/actions/action.h"
#include "engine/actions/remote.h"

#include <jansson.h>

struct soap_xml; /* a parsed answer */

/* A SOAP answer read: a new document (soap_xml_free), or NULL with
 * rc->error set and *fail the step to take (*fail is only set then).
 * Faults: Client/Sender fail, Server/Receiver are transient; a
 * StatusCode/OverallStatus error fails; HTTP errors as remote_classify
 * says; an answer that is not XML is transient, and so is a call that was
 * stopped. */
struct soap_xml *soap_xml_read(struct run_ctx *rc, const struct remote_response *r,
                               const char *what, enum step *fail);
void soap_xml_free(struct soap_xml *x); /* NULL is a no-op */

/* The string value of the XPath expr in x, with the namespaces ns (prefix
 * to URI; may be NULL), trimmed; NULL when it matches nothing or only
 * empty text. Heap. */
char *soap_xml_text(const struct soap_xml *x, const json_t *ns, const char *expr);

/* ST_OK when v is a string holding an XPath expression; otherwise
 * ST_INVALID with the error naming path. */
enum status soap_xml_check_xpath(const json_t *v, const char *path, struct error *err) WUR;

#endif
