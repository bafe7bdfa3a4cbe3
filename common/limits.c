/* common/limits.c — admission limits: three string-keyed tables (counts of
 * connections per address and of streams per tenant, token buckets per
 * caller) under one mutex, and the refusal counters. */
#include "common/limits.h"

#include <assert.h>
#include <stdatomic.h>

#define TABLE_HEADS 4096 /* a power of two */
#define PRUNE_PER_CALL 2

struct entry {
    struct entry *next;          /* hash chain */
    struct entry *newer, *older; /* recency, buckets only */
    uint64_t hash;
    int count;
    struct bucket b;
    char key[];
};

struct table {
    struct entry *heads[TABLE_HEADS];
    int n;
    struct entry *newest, *oldest; /* buckets only */
};

struct limits {
    struct limits_options o;
    uint64_t seed;
    pthread_mutex_t mu;
    struct table addrs, tenants, callers;
    int conns; /* the sum of the counts in addrs */
    _Atomic int64_t total[LIMITS_NEVENTS];
};

/* ---- the token bucket ---------------------------------------------------- */

void bucket_init(struct bucket *b, int burst, int64_t now_ms)
{
    b->milli = (int64_t)burst * 1000;
    b->t_ms = now_ms;
}

/* Tokens are counted in thousandths, and rate_per_s tokens a second are
 * rate_per_s thousandths a millisecond: integer arithmetic, no drift. */
static void bucket_refill(struct bucket *b, int rate_per_s, int burst, int64_t now_ms)
{
    int64_t cap = (int64_t)burst * 1000;

    if (now_ms <= b->t_ms)
        return;
    if (b->milli < cap) {
        int64_t room = (cap - b->milli + rate_per_s - 1) / rate_per_s; /* ms to fill */
        int64_t dt = now_ms - b->t_ms;
        b->milli = dt >= room ? cap : b->milli + dt * rate_per_s;
    }
    b->t_ms = now_ms;
}

bool bucket_take(struct bucket *b, int rate_per_s, int burst, int64_t now_ms, int64_t *wait_ms)
{
    assert(rate_per_s > 0 && burst > 0);
    bucket_refill(b, rate_per_s, burst, now_ms);
    if (b->milli >= 1000) {
        b->milli -= 1000;
        return true;
    }
    if (wait_ms)
        *wait_ms = (1000 - b->milli + rate_per_s - 1) / rate_per_s;
    return false;
}

static bool bucket_full(const struct bucket *b, int rate_per_s, int burst, int64_t now_ms)
{
    struct bucket c = *b;

    bucket_refill(&c, rate_per_s, burst, now_ms);
    return c.milli >= (int64_t)burst * 1000;
}

/* ---- the tables ---------------------------------------------------------- */

/* FNV-1a from a random start, so an outsider cannot pick keys (addresses)
 * that share a chain. */
static uint64_t key_hash(const struct limits *l, const char *key)
{
    uint64_t h = 0xcbf29ce484222325ULL ^ l->seed;

    for (const unsigned char *p = (const unsigned char *)key; *p; p++)
        h = (h ^ *p) * 0x100000001b3ULL;
    return h;
}

static struct entry *table_find(struct table *t, const char *key, uint64_t hash)
{
    for (struct entry *e = t->heads[hash & (TABLE_HEADS - 1)]; e; e = e->next)
        if (e->hash == hash && strcmp(e->key, key) == 0)
            return e;
    return NULL;
}

static void recency_unlink(struct table *t, struct entry *e)
{
    if (e->newer)
        e->newer->older = e->older;
    else
        t->newest = e->older;
    if (e->older)
        e->older->newer = e->newer;
    else
        t->oldest = e->newer;
    e->newer = e->older = NULL;
}

static struct entry *recency_pop_oldest(struct table *t)
{
    struct entry *e = t->oldest;

    t->oldest = e->newer;
    if (t->oldest)
        t->oldest->older = NULL;
    else
        t->newest = NULL;
    e->newer = e->older = NULL;
    return e;
}

static void recency_push(struct table *t, struct entry *e)
{
    e->older = t->newest;
    e->newer = NULL;
    if (t->newest)
        t->newest->newer = e;
    t->newest = e;
    if (!t->oldest)
        t->oldest = e;
}

static struct entry *table_add(struct table *t, const char *key, uint64_t hash)
{
    size_t len = strlen(key);
    struct entry *e = xcalloc(1, sizeof(*e) + len + 1);
    struct entry **head = &t->heads[hash & (TABLE_HEADS - 1)];

    memcpy(e->key, key, len + 1);
    e->hash = hash;
    e->next = *head;
    *head = e;
    t->n++;
    return e;
}

/* Unlinks e from its chain and frees it; e is in no recency list. */
static void table_remove(struct table *t, struct entry *e)
{
    struct entry **pp = &t->heads[e->hash & (TABLE_HEADS - 1)];

    while (*pp != e)
        pp = &(*pp)->next;
    *pp = e->next;
    t->n--;
    free(e);
}

static void table_cleanup(struct table *t)
{
    for (size_t i = 0; i < TABLE_HEADS; i++) {
        while (t->heads[i]) {
            struct entry *e = t->heads[i];
            t->heads[i] = e->next;
            free(e);
        }
    }
    memset(t, 0, sizeof(*t));
}

/* Adds one to key's count, unless that would pass limit (0: none); the
 * entry goes when its count returns to 0. Returns the count before. */
static int count_up(struct limits *l, struct table *t, const char *key, int limit)
{
    uint64_t hash = key_hash(l, key);
    struct entry *e = table_find(t, key, hash);
    int before = e ? e->count : 0;

    if (limit > 0 && before >= limit)
        return before;
    if (!e)
        e = table_add(t, key, hash);
    e->count++;
    return before;
}

/* Returns false when key has no count. */
static bool count_down(struct limits *l, struct table *t, const char *key)
{
    struct entry *e = table_find(t, key, key_hash(l, key));

    if (!e)
        return false;
    if (--e->count <= 0)
        table_remove(t, e);
    return true;
}

/* ---- the limits ---------------------------------------------------------- */

struct limits *limits_new(const struct limits_options *o)
{
    struct limits *l = xcalloc(1, sizeof(*l));

    l->o = *o;
    if (!l->o.clock_ms)
        l->o.clock_ms = clock_mono_ms;
    if (l->o.max_callers <= 0)
        l->o.max_callers = LIMITS_MAX_CALLERS;
    if (l->o.submit_burst < 1)
        l->o.submit_burst = 1;
    rand_bytes(&l->seed, sizeof(l->seed));
    pthread_mutex_init(&l->mu, NULL);
    return l;
}

void limits_free(struct limits *l)
{
    if (!l)
        return;
    table_cleanup(&l->addrs);
    table_cleanup(&l->tenants);
    table_cleanup(&l->callers);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

bool limits_conn_admit(struct limits *l, const char *addr)
{
    int hard = l->o.conns_per_addr * LIMITS_ADDR_HARD_FACTOR;
    struct entry *e;
    bool ok;

    if (l->o.conns_per_addr <= 0)
        return true;
    pthread_mutex_lock(&l->mu);
    e = table_find(&l->addrs, addr, key_hash(l, addr));
    ok = !e || e->count < hard;
    pthread_mutex_unlock(&l->mu);
    if (!ok)
        limits_note(l, LIMITS_CONN_REFUSED);
    return ok;
}

bool limits_conn_open(struct limits *l, const char *addr)
{
    int before;

    if (l->o.conns_per_addr <= 0)
        return true;
    pthread_mutex_lock(&l->mu);
    before = count_up(l, &l->addrs, addr, 0);
    l->conns++;
    pthread_mutex_unlock(&l->mu);
    return before < l->o.conns_per_addr;
}

void limits_conn_close(struct limits *l, const char *addr)
{
    if (l->o.conns_per_addr <= 0)
        return;
    pthread_mutex_lock(&l->mu);
    if (count_down(l, &l->addrs, addr))
        l->conns--;
    pthread_mutex_unlock(&l->mu);
}

enum status limits_stream_open(struct limits *l, const char *tenant, struct error *err)
{
    int limit = l->o.streams_per_tenant, before;

    if (limit <= 0)
        return ST_OK;
    pthread_mutex_lock(&l->mu);
    before = count_up(l, &l->tenants, tenant, limit);
    pthread_mutex_unlock(&l->mu);
    if (before < limit)
        return ST_OK;
    limits_note(l, LIMITS_STREAM_REFUSED);
    return error_set(err, ST_LIMITED, "too many event streams for tenant \"%s\" (limit %d)", tenant,
                     limit);
}

void limits_stream_close(struct limits *l, const char *tenant)
{
    if (l->o.streams_per_tenant <= 0)
        return;
    pthread_mutex_lock(&l->mu);
    (void)count_down(l, &l->tenants, tenant);
    pthread_mutex_unlock(&l->mu);
}

/* Forgets the oldest buckets that have refilled (they are as good as new),
 * a few per call, and the oldest one whatever its state when the table is
 * full. */
static void callers_prune(struct limits *l, int64_t now)
{
    struct table *t = &l->callers;

    for (int i = 0; i < PRUNE_PER_CALL && t->oldest; i++) {
        if (!bucket_full(&t->oldest->b, l->o.submit_rate_per_s, l->o.submit_burst, now))
            break;
        table_remove(t, recency_pop_oldest(t));
    }
    if (t->n >= l->o.max_callers && t->oldest)
        table_remove(t, recency_pop_oldest(t));
}

/* Takes a token of caller's bucket, creating it full; the lock is held. */
static bool callers_take(struct limits *l, const char *caller, int64_t now, int64_t *wait_ms)
{
    struct table *t = &l->callers;
    uint64_t hash = key_hash(l, caller);
    struct entry *e = table_find(t, caller, hash);

    if (e) {
        recency_unlink(t, e);
    } else {
        callers_prune(l, now);
        e = table_add(t, caller, hash);
        bucket_init(&e->b, l->o.submit_burst, now);
    }
    recency_push(t, e);
    return bucket_take(&e->b, l->o.submit_rate_per_s, l->o.submit_burst, now, wait_ms);
}

enum status limits_submit(struct limits *l, const char *caller, int *retry_after_s,
                          struct error *err)
{
    int64_t wait_ms = 0, now;
    bool ok;

    if (l->o.submit_rate_per_s <= 0)
        return ST_OK;
    now = l->o.clock_ms();
    pthread_mutex_lock(&l->mu);
    ok = callers_take(l, caller, now, &wait_ms);
    pthread_mutex_unlock(&l->mu);
    if (ok)
        return ST_OK;
    *retry_after_s = (int)((wait_ms + 999) / 1000);
    limits_note(l, LIMITS_SUBMIT_REFUSED);
    return error_set(err, ST_LIMITED,
                     "too many submissions (limit %d per second, bursts of %d); retry in %d s",
                     l->o.submit_rate_per_s, l->o.submit_burst, *retry_after_s);
}

void limits_note(struct limits *l, enum limits_event ev)
{
    assert(ev < LIMITS_NEVENTS);
    atomic_fetch_add(&l->total[ev], 1);
}

void limits_stats(struct limits *l, struct limits_stats *out)
{
    memset(out, 0, sizeof(*out));
    for (int i = 0; i < LIMITS_NEVENTS; i++)
        out->total[i] = atomic_load(&l->total[i]);
    pthread_mutex_lock(&l->mu);
    out->connections = l->conns;
    out->addresses = l->addrs.n;
    out->tenants = l->tenants.n;
    out->callers = l->callers.n;
    pthread_mutex_unlock(&l->mu);
}

const char *limits_event_name(enum limits_event ev)
{
    static const char *const names[] = {
        [LIMITS_CONN_REFUSED] = "connections_refused_total",
        [LIMITS_CONN_ANSWERED] = "connections_limited_total",
        [LIMITS_DEADLINE] = "requests_timed_out_total",
        [LIMITS_STREAM_REFUSED] = "streams_refused_total",
        [LIMITS_SUBMIT_REFUSED] = "submissions_refused_total",
    };
    return (size_t)ev < ARRAY_LEN(names) ? names[ev] : "unknown";
}
