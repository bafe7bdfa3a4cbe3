/* common/time_rfc3339.h — instants as RFC 3339 text and as microseconds
 * since the epoch (UTC), without the C library's time zones. Pure,
 * thread-safe; no allocation.
 *
 * Ours, not a library's: libc's strptime goes through the locale and a
 * struct tm, takes what RFC 3339 refuses (spaces, one-digit fields) and no
 * fraction, and strftime has no microseconds; libcurl's curl_getdate reads
 * HTTP dates (RFC 1123, RFC 850, asctime) to the second, not RFC 3339;
 * jansson and libxml2 have no dates. One exact format is shorter written
 * out than assembled from those. */
#ifndef OPSRUN_TIME_RFC3339_H
#define OPSRUN_TIME_RFC3339_H

#include "common.h"

/* RFC 3339 parse into microseconds since the epoch (UTC). Accepts "Z" or a
 * numeric offset, and optional fractional seconds (up to 9 digits, truncated
 * to microseconds). Returns false for anything else. */
bool time_parse_rfc3339(const char *s, int64_t *us_out);
/* True for an instant PostgreSQL's timestamptz holds and we can print:
 * 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999Z. */
bool time_in_range(int64_t us);
/* Formats microseconds since the epoch as "YYYY-MM-DDTHH:MM:SS.ffffffZ";
 * out holds at least 32 bytes. */
void time_format_rfc3339(int64_t us, char *out, size_t cap);

#endif
