/* common/ids.h — run ids (new, time-ordered ones and the check of a
 * client's) and the identity hash that makes dedupe a database guarantee.
 * Thread-safe; no allocation. */
#ifndef OPSRUN_IDS_H
#define OPSRUN_IDS_H

#include "common.h"

/* The longest run id. */
#define RUN_ID_MAX 128

/* A new run id: 26 characters of Crockford base32 (ULID layout: 48-bit
 * millisecond time, then 80 random bits), so ids sort by creation time.
 * Monotonic within the process (the ULID spec's monotonic mode): within
 * the millisecond of the id before, the next is that one plus one in its
 * random part, so each id sorts after every id this process made before
 * it, from any thread; a wall clock that went back keeps the millisecond
 * of the id before. Ids are not secrets: within a millisecond the next is
 * easy to guess. out holds 27 bytes. */
void run_id_new(char out[27]);
/* True when s matches [A-Za-z0-9._:-]{1,128}. */
bool run_id_valid(const char *s);
/* run_id_valid over the n bytes at s (no NUL needed). */
bool run_id_valid_n(const char *s, size_t n);

/* The identity hash of a submission: lower-case hex SHA-256 over the parts,
 * each part followed by a NUL byte so ("ab","c") and ("a","bc") differ.
 * kind is "dedupe_key", "run_id" or "data"; value is the key, the run id or
 * the canonical JSON of data. */
void identity_hash(const char *tenant, const char *type, const char *kind, const char *value,
                   char out[65]);

#endif
