/* common/tz.h — IANA time zones read from the machine's tz database (the
 * TZif files of RFC 8536 under $TZDIR, default /usr/share/zoneinfo), for
 * turning local wall-clock times into instants and back. A loaded zone is
 * immutable: any number of threads may use it at once. Times are whole
 * seconds since the Unix epoch; a "local" time is the wall-clock reading
 * counted the same way, as if the zone were UTC.
 *
 * Offsets after a zone's last listed transition follow the POSIX rule at
 * the end of its file, expanded at load up to the year 2200; later instants
 * keep the offset of the last transition. Zones with leap seconds (the
 * "right/" tree) are refused. "UTC" needs no file.
 *
 * Ours, not libc's: localtime_r and mktime read the same files, but only
 * for the one zone of the process-wide TZ variable, which no thread may
 * change while others convert; schedules need many zones at once. */
#ifndef OPSRUN_TZ_H
#define OPSRUN_TZ_H

#include "common.h"

struct tz;

/* Loads the zone named like "Europe/Berlin". On success *out is a new zone
 * (tz_free). ST_INVALID for a name that is not a zone name, or a file that
 * is not a TZif file; ST_NOT_FOUND when the database has no such zone. */
enum status tz_load(const char *name, struct tz **out, struct error *err) WUR;
/* The same from the n bytes of a TZif file in memory (tests, fuzzing). */
enum status tz_parse(const char *name, const unsigned char *data, size_t n, struct tz **out,
                     struct error *err) WUR;
void tz_free(struct tz *tz); /* NULL is a no-op */

const char *tz_name(const struct tz *tz); /* borrowed, lives with tz */
/* The offset from UTC in seconds (east positive) at instant t. */
int32_t tz_offset(const struct tz *tz, int64_t t);
/* The instants whose local time is `local`: returns 1 (out[0]); 2 when the
 * clock was set back and the time happened twice (out[0] < out[1]); or 0
 * when the clock jumped over it, with out[0] the first instant after the
 * jump. */
int tz_from_local(const struct tz *tz, int64_t local, int64_t out[2]);

#endif
