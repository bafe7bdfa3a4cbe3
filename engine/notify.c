/* engine/notify.c — the notifier thread (engine_internal.h): it claims due
 * deliveries from the outbox, sends each with libcurl, and writes what came
 * of them, every attempt an event on its run.
 *
 * One thread drives every transfer through one curl multi handle, so a
 * receiver that does not answer holds only its own notifier's slots
 * (max_in_flight of them) until its timeout, never a worker, the poller or
 * another notifier. The thread claims when something may have become due:
 * run events were written anywhere (the engine's events hint, at most
 * every CLAIM_GAP_MS), and every CLAIM_EVERY_MS for retries coming due and
 * for what a hint missed. A claim leases each delivery for its notifier's
 * timeout plus LEASE_MARGIN_MS; a process that dies mid-attempt leaves it
 * due again once the lease ends, and any replica sends it then (at least
 * once, with the same delivery id). Results are written together
 * (SETTLE_BATCH, SETTLE_GAP_MS). At a stop, transfers in flight are
 * abandoned and their deliveries handed back, due at once.
 *
 * Each claim takes the notifiers of the engine's current view (view.c), so
 * a reload's notifiers apply from the next claim; a transfer in flight
 * holds the view it was claimed under and ends with its notifier as it was
 * (notifiers_follow says what becomes of a removed notifier's deliveries).
 * With a reloadable configuration the thread runs even without notifiers,
 * and claims nothing then (no statement). */
#include "engine/engine_internal.h"
#include "engine/notify_body.h"

#include "common/log.h"
#include "common/metrics.h"
#include "store/db.h"
#include "store/notify.h"

#include <curl/curl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CLAIM_GAP_MS 20
#define CLAIM_EVERY_MS 1000
#define LEASE_MARGIN_MS 20000
/* A result the database did not take is tried again while its lease
 * lasts, less this margin; then the delivery is left to the lease. */
#define SETTLE_MARGIN_MS 5000
/* Results are written together: when SETTLE_BATCH have gathered, or
 * SETTLE_GAP_MS after the first of them (a settle is one statement
 * whatever its size, and writing each transfer's end alone cost more per
 * delivery than the delivery's claim); again CLAIM_EVERY_MS / 4 after a
 * settle that failed. */
#define SETTLE_BATCH 64
#define SETTLE_GAP_MS 20

/* An attempt in flight. It holds the view it was claimed under, and ends
 * with the notifier it started with (URL, secret, headers, timeout,
 * max_attempts) whatever a reload did since. */
struct job {
    CURL *curl;
    struct curl_slist *hdrs;
    struct notify_request rq;
    struct delivery d;
    struct engine *e;
    const struct engine_view *v; /* held */
    const struct notifier *n;    /* in v->cfg */
    int64_t claimed_ms, lease_ms;
};

/* An attempt's end, until the database has it. */
struct result {
    struct delivery_result r;
    char *message; /* r.message */
    int64_t claimed_ms, lease_ms;
};

struct notify {
    struct engine *e;
    pthread_t thread;
    bool started;
    CURLM *multi;
    pthread_mutex_t mu; /* stop, wake */
    bool stop, wake;
    /* The notifiers of the last claim's view, by name (view.c's generation
     * tells a reload): a removed one is logged once. */
    uint64_t generation;
    char **names;
    size_t nnames;
    struct job **jobs;
    size_t njobs;
    struct result *results;
    size_t nresults;
    int64_t settle_at_ms; /* when the results gathered are written */
};

/* ---- transfers ---- */

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
    (void)p, (void)arg;
    return size * n; /* the answer's body is not read */
}

static void job_free(struct job *j)
{
    if (!j)
        return;
    if (j->curl)
        curl_easy_cleanup(j->curl);
    curl_slist_free_all(j->hdrs);
    notify_request_cleanup(&j->rq);
    delivery_cleanup(&j->d, 1);
    if (j->v)
        view_release(j->e, j->v);
    free(j);
}

static void result_add(struct notify *nt, const struct job *j, int64_t retry_ms, char *message)
{
    const struct delivery *d = &j->d;
    struct result *r;

    if (nt->nresults == 0)
        nt->settle_at_ms = clock_mono_ms() + SETTLE_GAP_MS;
    nt->results = xrealloc(nt->results, (nt->nresults + 1) * sizeof(*nt->results));
    r = &nt->results[nt->nresults++];
    r->r = (struct delivery_result){d->id, d->attempts, retry_ms, message};
    r->message = message;
    r->claimed_ms = j->claimed_ms;
    r->lease_ms = j->lease_ms;
}

/* Starts the transfer of a delivery claimed under v (for lease_ms); a
 * request that cannot be built (a run object the database should never
 * hold) gives up at once. */
static void job_start(struct notify *nt, const struct engine_view *v, int64_t lease_ms,
                      struct delivery *d, int64_t now_ms)
{
    const struct notifier *n = cfg_notifier(v->cfg, d->notifier);
    struct job *j = xcalloc(1, sizeof(*j));
    struct error err = {0};

    j->d = *d;
    memset(d, 0, sizeof(*d));
    j->e = nt->e;
    j->v = view_ref(v);
    j->n = n;
    j->claimed_ms = now_ms;
    j->lease_ms = lease_ms;
    if (!n) { /* claimed by name from v's notifiers: not expected; its lease ends it */
        LOG(LOG_WARN, "claimed a notification for unknown notifier=%s run=%s", j->d.notifier,
            j->d.run_id);
        job_free(j);
        return;
    }
    if (notify_request_build(n, j->d.event, j->d.delivery_id, j->d.run_json,
                             v->cfg->http.public_url, clock_wall_ms() / 1000, &j->rq,
                             &err) != ST_OK ||
        !(j->curl = curl_easy_init())) {
        LOG(LOG_WARN, "could not build a notification notifier=%s run=%s event=%s: %s", n->name,
            j->d.run_id, j->d.event, err.message);
        result_add(nt, j, -1,
                   xasprintf("notified %s: could not build the request (%s): %s", n->name,
                             j->d.event, err.message));
        job_free(j);
        return;
    }
    j->hdrs = curl_slist_append(NULL, "Expect:");
    for (size_t i = 0; j->rq.headers[i]; i++)
        j->hdrs = curl_slist_append(j->hdrs, j->rq.headers[i]);
    curl_easy_setopt(j->curl, CURLOPT_URL, j->rq.url);
    curl_easy_setopt(j->curl, CURLOPT_POST, 1L);
    curl_easy_setopt(j->curl, CURLOPT_POSTFIELDS, j->rq.body);
    curl_easy_setopt(j->curl, CURLOPT_POSTFIELDSIZE, (long)strlen(j->rq.body));
    curl_easy_setopt(j->curl, CURLOPT_HTTPHEADER, j->hdrs);
    curl_easy_setopt(j->curl, CURLOPT_TIMEOUT_MS, (long)n->timeout_ms);
    curl_easy_setopt(j->curl, CURLOPT_CONNECTTIMEOUT_MS,
                     (long)(n->timeout_ms < 5000 ? n->timeout_ms : 5000));
    curl_easy_setopt(j->curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(j->curl, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(j->curl, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(j->curl, CURLOPT_USERAGENT, "opsrun/" OPSRUN_VERSION);
    curl_easy_setopt(j->curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(j->curl, CURLOPT_PRIVATE, j);
    curl_multi_add_handle(nt->multi, j->curl);
    /* An array of pointers (see .clang-tidy). NOLINTNEXTLINE(bugprone-sizeof-expression) */
    nt->jobs = xrealloc(nt->jobs, (nt->njobs + 1) * sizeof(*nt->jobs));
    nt->jobs[nt->njobs++] = j;
}

static void job_remove(struct notify *nt, struct job *j)
{
    for (size_t i = 0; i < nt->njobs; i++) {
        if (nt->jobs[i] == j) {
            nt->jobs[i] = nt->jobs[--nt->njobs];
            break;
        }
    }
    curl_multi_remove_handle(nt->multi, j->curl);
}

/* Why a transfer got no answer, in words (never the URL, which may hold
 * a secret). */
static void transfer_failure(CURLcode cc, int timeout_ms, char *out, size_t n)
{
    switch (cc) {
    case CURLE_OPERATION_TIMEDOUT:
        xsnprintf(out, n, "no answer within %d ms", timeout_ms);
        break;
    case CURLE_COULDNT_RESOLVE_HOST:
        xsnprintf(out, n, "could not resolve the host");
        break;
    case CURLE_COULDNT_CONNECT:
        xsnprintf(out, n, "could not connect");
        break;
    case CURLE_GOT_NOTHING:
        xsnprintf(out, n, "the connection closed without an answer");
        break;
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
        xsnprintf(out, n, "the connection failed");
        break;
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
        xsnprintf(out, n, "the TLS handshake failed");
        break;
    default:
        xsnprintf(out, n, "the request failed (curl error %d)", (int)cc);
        break;
    }
}

/* What an attempt that ended with cc (and status, when cc is CURLE_OK)
 * calls for: the result, its event's message, the metrics and the log. */
static void job_done(struct notify *nt, struct job *j, CURLcode cc, int64_t now_ms)
{
    const struct notifier *n = j->n;
    long status = 0;
    char what[160];
    enum notify_verdict v;
    int64_t retry_ms = -1;
    char *msg;

    if (cc == CURLE_OK) {
        curl_easy_getinfo(j->curl, CURLINFO_RESPONSE_CODE, &status);
        xsnprintf(what, sizeof(what), "%ld", status);
    } else {
        transfer_failure(cc, n->timeout_ms, what, sizeof(what));
    }
    v = notify_verdict(status, j->d.attempts, n->max_attempts);
    if (v == NOTIFY_DELIVERED) {
        msg = xasprintf("notified %s: %s (%s)", n->name, what, j->d.event);
        metrics_notification(nt->e->metrics, n->name, METRICS_NOTIFY_DELIVERED,
                             (double)(j->d.age_ms + now_ms - j->claimed_ms) / 1000.0);
        LOG(LOG_DEBUG, "notification delivered notifier=%s run=%s event=%s attempt=%d", n->name,
            j->d.run_id, j->d.event, j->d.attempts);
    } else if (v == NOTIFY_RETRY) {
        curl_off_t ra = 0; /* Retry-After: seconds or an HTTP date, as libcurl reads it */
        if (cc != CURLE_OK || curl_easy_getinfo(j->curl, CURLINFO_RETRY_AFTER, &ra) != CURLE_OK)
            ra = 0;
        retry_ms = notify_retry_ms(j->d.attempts, (int64_t)ra);
        msg = xasprintf("notified %s: %s (%s), attempt %d of %d, next in %lld s", n->name, what,
                        j->d.event, j->d.attempts, n->max_attempts,
                        (long long)((retry_ms + 999) / 1000));
        metrics_notification(nt->e->metrics, n->name, METRICS_NOTIFY_RETRIED, -1);
        LOG(LOG_INFO,
            "notification failed, will retry notifier=%s run=%s event=%s attempt=%d "
            "answer=\"%s\" retry_ms=%lld",
            n->name, j->d.run_id, j->d.event, j->d.attempts, what, (long long)retry_ms);
    } else {
        msg = status == 410 ? xasprintf("notified %s: 410 (%s), the receiver is gone: not tried "
                                        "again",
                                        n->name, j->d.event)
                            : xasprintf("notified %s: %s (%s), gave up after %d attempts", n->name,
                                        what, j->d.event, j->d.attempts);
        metrics_notification(nt->e->metrics, n->name, METRICS_NOTIFY_GAVE_UP, -1);
        LOG(LOG_WARN,
            "notification given up notifier=%s run=%s event=%s attempts=%d "
            "answer=\"%s\"",
            n->name, j->d.run_id, j->d.event, j->d.attempts, what);
    }
    result_add(nt, j, retry_ms, msg);
}

static void collect(struct notify *nt, int64_t now_ms)
{
    CURLMsg *m;
    int left;

    while ((m = curl_multi_info_read(nt->multi, &left)) != NULL) {
        struct job *j = NULL;
        if (m->msg != CURLMSG_DONE)
            continue;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&j);
        job_remove(nt, j);
        job_done(nt, j, m->data.result, now_ms);
        job_free(j);
    }
}

/* ---- the database ---- */

/* A claim's lease: the longest timeout of v's notifiers, and a margin. */
static int64_t lease_ms(const struct engine_view *v)
{
    int64_t longest = 0;

    for (size_t i = 0; i < v->cfg->nnotifiers; i++)
        if (v->cfg->notifiers[i].timeout_ms > longest)
            longest = v->cfg->notifiers[i].timeout_ms;
    return longest + LEASE_MARGIN_MS;
}

/* The transfers in flight for the notifier named name, whichever
 * configuration they started under. */
static int in_flight(const struct notify *nt, const char *name)
{
    int n = 0;

    for (size_t i = 0; i < nt->njobs; i++)
        n += strcmp(nt->jobs[i]->n->name, name) == 0;
    return n;
}

/* After a reload: each notifier the configuration no longer has is logged.
 * Its deliveries still owed stay in the outbox, due, and no claim here takes
 * them: a replica still configured with it sends them, and so does this
 * one if a reload brings a notifier of that name back; meanwhile they count
 * in the pending notifications (metrics). Giving them up instead could not
 * be undone by a reload that only fixed a mistake. */
static void notifiers_follow(struct notify *nt, const struct engine_view *v)
{
    const struct config *cfg = v->cfg;

    if (nt->names && nt->generation == v->generation)
        return;
    for (size_t i = 0; nt->names && i < nt->nnames; i++)
        if (!cfg_notifier(cfg, nt->names[i]))
            LOG(LOG_WARN,
                "notifier removed notifier=%s: its deliveries still owed stay in the outbox "
                "until a notifier of that name is configured again",
                nt->names[i]);
    for (size_t i = 0; i < nt->nnames; i++)
        free(nt->names[i]);
    free(nt->names);
    nt->nnames = cfg->nnotifiers;
    nt->names = xcalloc(cfg->nnotifiers + 1, sizeof(*nt->names));
    for (size_t i = 0; i < cfg->nnotifiers; i++)
        nt->names[i] = xstrdup(cfg->notifiers[i].name);
    nt->generation = v->generation;
}

/* Claims, for each notifier of the current view with room, its due
 * deliveries; without a notifier no statement is made. */
static void claim(struct notify *nt, int64_t now_ms)
{
    const struct engine_view *v = view_hold(nt->e);
    const struct config *cfg = v->cfg;
    const char **names = xcalloc(cfg->nnotifiers + 1, sizeof(*names));
    int *rooms = xcalloc(cfg->nnotifiers + 1, sizeof(*rooms));
    int64_t lease = lease_ms(v);
    struct delivery *d = NULL;
    struct error err = {0};
    struct db *db = NULL;
    size_t n = 0, got = 0;

    notifiers_follow(nt, v);
    for (size_t i = 0; i < cfg->nnotifiers; i++) {
        int room = cfg->notifiers[i].max_in_flight - in_flight(nt, cfg->notifiers[i].name);
        if (room > 0) {
            names[n] = cfg->notifiers[i].name;
            rooms[n++] = room;
        }
    }
    if (n > 0 && (db_pool_get(nt->e->pool, &db, &err) != ST_OK ||
                  store_deliveries_claim(db, nt->e->worker_id, names, rooms, n, (int)lease, &d,
                                         &got, &err) != ST_OK))
        LOG(LOG_WARN, "could not claim notifications: %s", err.message);
    db_pool_put(nt->e->pool, db);
    for (size_t i = 0; i < got; i++)
        job_start(nt, v, lease, &d[i], now_ms);
    free(d);
    free(names);
    free(rooms);
    view_release(nt->e, v);
}

static void result_drop(struct notify *nt, size_t i)
{
    free(nt->results[i].message);
    nt->results[i] = nt->results[--nt->nresults];
}

/* Writes the results gathered; those the database does not take now are
 * kept for the next pass while their leases last. */
static void settle(struct notify *nt, int64_t now_ms)
{
    struct delivery_result *r;
    struct error err = {0};
    struct db *db = NULL;
    enum status st;

    if (nt->nresults == 0)
        return;
    r = xcalloc(nt->nresults, sizeof(*r));
    for (size_t i = 0; i < nt->nresults; i++)
        r[i] = nt->results[i].r;
    st = db_pool_get(nt->e->pool, &db, &err);
    if (st == ST_OK)
        st = store_deliveries_settle(db, nt->e->worker_id, r, nt->nresults, NULL, &err);
    db_pool_put(nt->e->pool, db);
    free(r);
    if (st == ST_OK) {
        while (nt->nresults > 0)
            result_drop(nt, nt->nresults - 1);
        doorbell_ring(nt->e, false, true);
        return;
    }
    LOG(LOG_WARN, "could not record notifications=%zu: %s", nt->nresults, err.message);
    for (size_t i = nt->nresults; i-- > 0;)
        if (now_ms > nt->results[i].claimed_ms + nt->results[i].lease_ms - SETTLE_MARGIN_MS)
            result_drop(nt, i);
    nt->settle_at_ms = now_ms + CLAIM_EVERY_MS / 4;
}

/* Whether the results gathered are to be written now. */
static bool settle_due(const struct notify *nt, int64_t now_ms)
{
    return nt->nresults > 0 && (nt->nresults >= SETTLE_BATCH || now_ms >= nt->settle_at_ms);
}

/* At a stop: the transfers in flight are abandoned, their deliveries due
 * again at once for any replica. */
static void give_back(struct notify *nt)
{
    int64_t *ids = xcalloc(nt->njobs ? nt->njobs : 1, sizeof(*ids));
    size_t n = 0;
    struct error err = {0};
    struct db *db = NULL;

    while (nt->njobs > 0) {
        struct job *j = nt->jobs[nt->njobs - 1];
        ids[n++] = j->d.id;
        job_remove(nt, j);
        job_free(j);
    }
    if (n > 0 && (db_pool_get(nt->e->pool, &db, &err) != ST_OK ||
                  store_deliveries_give_back(db, nt->e->worker_id, ids, n, &err) != ST_OK))
        LOG(LOG_WARN, "could not hand back notifications=%zu: %s", n, err.message);
    db_pool_put(nt->e->pool, db);
    free(ids);
}

/* ---- the thread ---- */

static void *notify_main(void *arg)
{
    struct notify *nt = arg;
    int64_t next_claim = 0, last_claim = -CLAIM_GAP_MS;

    for (;;) {
        int64_t now = clock_mono_ms(), wait;
        bool stop, wake;
        int running;

        pthread_mutex_lock(&nt->mu);
        stop = nt->stop;
        wake = nt->wake;
        if (wake && now - last_claim >= CLAIM_GAP_MS)
            nt->wake = false;
        pthread_mutex_unlock(&nt->mu);
        if (stop)
            break;
        if (now >= next_claim || (wake && now - last_claim >= CLAIM_GAP_MS)) {
            claim(nt, now);
            last_claim = now;
            next_claim = now + CLAIM_EVERY_MS;
        }
        curl_multi_perform(nt->multi, &running);
        collect(nt, clock_mono_ms());
        if (settle_due(nt, clock_mono_ms()))
            settle(nt, clock_mono_ms());
        now = clock_mono_ms();
        wait = next_claim - now;
        if (wake)
            wait = last_claim + CLAIM_GAP_MS - now;
        if (nt->nresults > 0 && wait > nt->settle_at_ms - now)
            wait = nt->settle_at_ms - now; /* results to write */
        curl_multi_poll(nt->multi, NULL, 0, wait > 0 ? (int)wait : 0, NULL);
    }
    curl_multi_perform(nt->multi, &(int){0});
    collect(nt, clock_mono_ms());
    settle(nt, clock_mono_ms());
    give_back(nt);
    return NULL;
}

static void notify_wake(struct engine *e)
{
    struct notify *nt = e->notify;

    pthread_mutex_lock(&nt->mu);
    nt->wake = true;
    pthread_mutex_unlock(&nt->mu);
    curl_multi_wakeup(nt->multi);
}

void notify_init(struct engine *e)
{
    struct notify *nt;

    if (e->notify || (e->cfg->nnotifiers == 0 && !e->live))
        return;
    nt = xcalloc(1, sizeof(*nt));
    nt->e = e;
    nt->multi = curl_multi_init();
    if (!nt->multi)
        abort(); /* only on allocation failure */
    pthread_mutex_init(&nt->mu, NULL);
    e->notify = nt;
    e->wake_notifier = notify_wake;
}

enum status notify_start(struct engine *e, struct error *err)
{
    struct notify *nt = e->notify;
    enum status st;

    if (!nt)
        return ST_OK;
    st = thread_start(e, &nt->thread, notify_main, nt, "notifier", err);
    nt->started = st == ST_OK;
    return st;
}

void notify_stop(struct engine *e)
{
    struct notify *nt = e->notify;

    if (!nt || !nt->started)
        return;
    pthread_mutex_lock(&nt->mu);
    nt->stop = true;
    pthread_mutex_unlock(&nt->mu);
    curl_multi_wakeup(nt->multi);
    pthread_join(nt->thread, NULL);
    nt->started = false;
}

void notify_free(struct engine *e)
{
    struct notify *nt = e->notify;

    if (!nt)
        return;
    while (nt->nresults > 0)
        result_drop(nt, nt->nresults - 1);
    free(nt->results);
    free(nt->jobs);
    for (size_t i = 0; i < nt->nnames; i++)
        free(nt->names[i]);
    free(nt->names);
    curl_multi_cleanup(nt->multi);
    pthread_mutex_destroy(&nt->mu);
    free(nt);
    e->notify = NULL;
}
