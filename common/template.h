/* common/template.h — {{run:/json/pointer}} placeholders over a finished
 * run's JSON: the data of a follow-up run and the text of a Slack
 * notification (docs/notifications.md); and the check of a workflow step's
 * data, whose placeholders are {{input:...}} and {{steps.NAME:...}}.
 *
 * A string that is one placeholder and nothing else stands for the value
 * at its pointer (an object stays an object); anywhere else a placeholder
 * is spliced in as text: a string as it is, any other value as JSON (", "
 * and ": " between items, as PostgreSQL prints jsonb). A follow-up's data is expanded in SQL, in
 * the transaction that ends the run (opsrun_expand in migrations/017): these are the same rules,
 * for the checks at load and the Slack text, and tests hold the two to each other.
 *
 * Thread-safe; no state. */
#ifndef OPSRUN_TEMPLATE_H
#define OPSRUN_TEMPLATE_H

#include "common.h"

#include <jansson.h>

/* Whether every "{{" in s opens a {{run:POINTER}} with a valid JSON
 * pointer; when not, why (naming the placeholder) into why[0..n). */
bool tmpl_check(const char *s, char *why, size_t n);
/* tmpl_check of every string in a JSON value, keys excluded. */
bool tmpl_check_json(const json_t *t, char *why, size_t n);

/* The placeholders of a workflow step's data (docs/design/workflows.md,
 * 2.4): whether every "{{" in the strings of t (keys excluded) opens an
 * {{input:POINTER}} or a {{steps.NAME:POINTER}}, NAME being 1 to 64 of
 * [A-Za-z0-9_-] and POINTER a valid JSON pointer; when not, why (naming
 * the placeholder) into why[0..n). When named is not NULL, each NAME is
 * set in that object (to null), so that the caller can check them. */
bool tmpl_step_check_json(const json_t *t, json_t *named, char *why, size_t n);

/* How a value spliced into a text is written: as it is, or escaped for
 * Slack (docs/notifications.md): "&", "<" and ">" become "&amp;", "&lt;"
 * and "&gt;", so that a run's text cannot become a mention (<!channel>), a
 * link or a command. The template's own text is never escaped: its markup
 * is the operator's. */
enum tmpl_escape {
    TMPL_AS_IS,
    TMPL_SLACK,
};

/* s with its placeholders spliced in over doc, each value written as esc
 * says. A pointer that finds nothing becomes "" when missing_ok, and is
 * ST_NOT_FOUND otherwise (err names it). On ST_OK *out is a heap string. */
enum status tmpl_expand_text(const char *s, const json_t *doc, bool missing_ok,
                             enum tmpl_escape esc, char **out, struct error *err) WUR;
/* s escaped for Slack as TMPL_SLACK says: a new string (free). */
char *tmpl_escape_slack(const char *s);

#endif
