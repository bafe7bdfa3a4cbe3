/* engine/actions/remote_internal.h — what the files of the remote module
 * share besides remote.h: template expansion into a buffer, which the URL
 * expansion drives segment by segment (remote_template.c), and the URL
 * check of a request description (remote_url.c). Reentrant. */
#ifndef OPSRUN_ENGINE_ACTIONS_REMOTE_INTERNAL_H
#define OPSRUN_ENGINE_ACTIONS_REMOTE_INTERNAL_H

#include "engine/actions/params.h"
#include "engine/actions/remote.h"

#include "common/dynbuf.h"

/* The longest expanded template: 512 MiB. It holds {{input}} of the
 * largest input the server accepts (64 MiB, the bound of
 * http.max_body_bytes) even with every byte XML-escaped (six times as
 * long); only a template that repeats large placeholders reaches it. */
#define REMOTE_EXPAND_MAX ((size_t)512 << 20)

/* Where a value goes, besides the modes of remote.h: one segment of a URL's
 * path. Percent-encoded like REMOTE_URL, and refused when the value has a
 * "." or ".." segment of its own, for servers that decode %2F before they
 * route. */
#define REMOTE_URL_PATH 16

/* Appends tmpl expanded as mode says to buf (capped at REMOTE_EXPAND_MAX).
 * *run_values (may be NULL) turns true when a placeholder took a value of
 * the run. Failures as remote_expand_text's. */
enum status remote_expand_into(struct dynbuf *buf, const char *tmpl, const struct remote_vars *v,
                               int mode, bool *run_values, struct error *err) WUR;
/* The first character of set in s outside any {{...}}, or the end of s. */
const char *remote_literal_find(const char *s, const char *set);
/* The error of an expansion past REMOTE_EXPAND_MAX (ST_INVALID). */
enum status remote_too_large(struct error *err);

/* The rule (params.h) of a request description's "url": http or https (or
 * an operator's {{env:NAME}} first), known placeholders, none of the run's
 * before the path, no "." or ".." segment. */
enum status remote_rule_url(const struct param *p, struct error *err);

#endif
