/* client/report.h — how the client commands tell the user what went wrong:
 * "opsrun: " and one line per problem on the given stream. A server's
 * problem+json answer is shown as its title and detail, then one line per
 * further entry of errors[]; any other failed answer by its HTTP status.
 * Nothing here ever prints the token. Not thread-safe (stdio). */
#ifndef OPSRUN_CLIENT_REPORT_H
#define OPSRUN_CLIENT_REPORT_H

#include "client/api.h"

#include <stdio.h>

/* A failed answer r (status >= 300): "opsrun: <what>: <title>: <detail>". */
void report_answer(FILE *f, const char *what, const struct api_resp *r);
/* A failure without an answer: "opsrun: <message>". */
void report_error(FILE *f, const struct error *err);
/* Text from the server made safe to show on a terminal: control
 * characters (C0, DEL and C1, which terminals may take as escape
 * sequences) become '?', and it stops before max_cols characters (counting
 * one per UTF-8 sequence; -1: no limit) or cap bytes, never inside a
 * sequence. Returns the characters written. */
int report_clean(const char *in, char *out, size_t cap, int max_cols);
/* The n bytes at s (NULs included) written to f as report_clean cleans
 * them, without a limit; a tab stays a tab when tabs is true (it moves the
 * cursor along its own line only). */
void report_put_clean(FILE *f, const char *s, size_t n, bool tabs);
/* The detail of a failed answer in one line, for messages that go on
 * (a problem's detail, else "HTTP <status>"); out holds cap bytes. */
void report_reason(const struct api_resp *r, char *out, size_t cap);

#endif
