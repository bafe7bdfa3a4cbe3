/* common/limits.h — admission limits and their counters: connections per
 * client address, event streams per tenant, and a token bucket of
 * submissions per caller. Keys are strings the caller chooses (an address,
 * a tenant, a caller's name), so this module knows nothing of HTTP, and the
 * authentication layer can key submissions by token instead of address.
 *
 * Memory is bounded. The counts hold one entry per key with something open
 * (at most one per connection or stream); the buckets at most max_callers,
 * forgetting the least recently seen caller first (a forgotten caller
 * starts again with a full burst) and dropping buckets that have refilled.
 *
 * Thread-safety: everything but limits_new and limits_free is thread-safe
 * (one mutex, held for a hash lookup). bucket_take is pure. Time comes from
 * the options' clock, so tests can drive it.
 *
 * The tables are ours: libc's hsearch_r has a fixed size and no removal,
 * and an entry here goes when its last connection or stream does. */
#ifndef OPSRUN_LIMITS_H
#define OPSRUN_LIMITS_H

#include "common/common.h"

/* A token bucket in thousandths of a token, refilled lazily. */
struct bucket {
    int64_t milli;
    int64_t t_ms; /* when milli was last brought up to date */
};
/* A bucket holding burst tokens as of now_ms. */
void bucket_init(struct bucket *b, int burst, int64_t now_ms);
/* Refills b by rate_per_s tokens a second (up to burst) as of now_ms, then
 * takes one token. false when there is none: *wait_ms (optional) is then
 * how long until there will be one (at least 1). A clock that went back
 * refills nothing. rate_per_s and burst are at least 1. */
bool bucket_take(struct bucket *b, int rate_per_s, int burst, int64_t now_ms, int64_t *wait_ms);

/* Over the per-address limit, a connection is still accepted and its first
 * request answered 429; past this many times the limit it is refused at
 * accept without an answer. */
#define LIMITS_ADDR_HARD_FACTOR 2
#define LIMITS_MAX_CALLERS 16384

struct limits_options {
    int conns_per_addr;        /* 0 = no limit */
    int streams_per_tenant;    /* 0 = no limit */
    int submit_rate_per_s;     /* 0 = no limit */
    int submit_burst;          /* at least 1 when submit_rate_per_s is set */
    int max_callers;           /* buckets kept; 0 = LIMITS_MAX_CALLERS */
    int64_t (*clock_ms)(void); /* monotonic milliseconds; NULL = clock_mono_ms */
};

/* What a refusal counts. */
enum limits_event {
    LIMITS_CONN_REFUSED,   /* closed at accept: past the hard per-address limit */
    LIMITS_CONN_ANSWERED,  /* a request answered 429: over the per-address limit */
    LIMITS_DEADLINE,       /* a request not received within its deadline: 408 */
    LIMITS_STREAM_REFUSED, /* a stream over its tenant's limit: 429 */
    LIMITS_SUBMIT_REFUSED, /* a submission over its caller's rate: 429 */
    LIMITS_NEVENTS
};

struct limits_stats {
    int64_t total[LIMITS_NEVENTS]; /* by enum limits_event, since start */
    int connections;               /* connections counted against their address's limit */
    int addresses;                 /* client addresses with a connection open */
    int tenants;                   /* tenants with a stream open */
    int callers;                   /* callers whose bucket is remembered */
};

/* o is copied. */
struct limits *limits_new(const struct limits_options *o);
void limits_free(struct limits *l); /* NULL is a no-op */

/* A connection from addr is about to be accepted: false when addr has
 * LIMITS_ADDR_HARD_FACTOR times its limit open already (counted as
 * LIMITS_CONN_REFUSED; the caller closes it). */
bool limits_conn_admit(struct limits *l, const char *addr);
/* A connection from addr opened; it counts until limits_conn_close. false
 * when it is over the per-address limit: its requests are to be refused. */
bool limits_conn_open(struct limits *l, const char *addr);
void limits_conn_close(struct limits *l, const char *addr);

/* A stream of tenant opens: ST_OK, and it counts until limits_stream_close;
 * or ST_LIMITED with err, counted as LIMITS_STREAM_REFUSED. */
enum status limits_stream_open(struct limits *l, const char *tenant, struct error *err) WUR;
void limits_stream_close(struct limits *l, const char *tenant);

/* One submission by caller: ST_OK, or ST_LIMITED with err and
 * *retry_after_s (whole seconds, at least 1), counted as
 * LIMITS_SUBMIT_REFUSED. */
enum status limits_submit(struct limits *l, const char *caller, int *retry_after_s,
                          struct error *err) WUR;

/* Counts a refusal the caller made itself (LIMITS_CONN_ANSWERED,
 * LIMITS_DEADLINE). */
void limits_note(struct limits *l, enum limits_event ev);
void limits_stats(struct limits *l, struct limits_stats *out);
/* The JSON name of a counter ("deadline_expired_total"). */
const char *limits_event_name(enum limits_event ev);

#endif
