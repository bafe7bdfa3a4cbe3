/* engine/doorbell.c — the doorbell thread, which sends the coalesced
 * NOTIFYs of this process, and the LISTEN thread, which hears those of
 * every replica.
 *
 * The doorbell exists because NOTIFY serialises committing transactions in
 * PostgreSQL: one NOTIFY per submission would cap submissions at the rate of
 * that lock. Instead every change is committed without NOTIFY, and this
 * thread sends at most one NOTIFY per channel per few milliseconds after the
 * commits it covers. The payload is empty (the tables are the truth), but
 * for opsrun_logs, whose payload names the runs whose log lines were
 * written, so that a replica wakes only the followers of those runs. */
#include "engine/engine_internal.h"

#include "common/backoff.h"
#include "common/log.h"
#include "store/db.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define BELL_MIN_GAP_MS 5
/* A LISTEN connection that cannot be opened is tried again after
 * LISTEN_RETRY_FIRST_MS, doubling up to LISTEN_RETRY_MAX_MS; meanwhile the
 * dispatcher's poll interval still finds the work. */
#define LISTEN_RETRY_FIRST_MS 250
#define LISTEN_RETRY_MAX_MS 5000

/* ---- doorbell ---- */

void events_hint(struct engine *e)
{
    if (e->on_events)
        e->on_events(e->on_events_arg);
    if (e->wake_notifier)
        e->wake_notifier(e); /* a transition may have owed a delivery */
}

void doorbell_ring(struct engine *e, bool queue, bool events)
{
    if (events)
        events_hint(e); /* this process's hub need not wait for the NOTIFY */
    pthread_mutex_lock(&e->mu);
    e->ring_queue |= queue;
    e->ring_events |= events;
    pthread_cond_signal(&e->bell_cv);
    pthread_mutex_unlock(&e->mu);
}

void doorbell_ring_logs(struct engine *e, const char *run_id)
{
    if (e->on_logs)
        e->on_logs(e->on_logs_arg, run_id); /* this process's followers at once */
    pthread_mutex_lock(&e->mu);
    if (!e->ring_logs_all &&
        ((dynbuf_len(&e->ring_logs) && dynbuf_add(&e->ring_logs, " ", 1) != ST_OK) ||
         dynbuf_adds(&e->ring_logs, run_id) != ST_OK))
        e->ring_logs_all = true; /* too many for one payload: every follower looks */
    pthread_cond_signal(&e->bell_cv);
    pthread_mutex_unlock(&e->mu);
}

/* The payload of the next NOTIFY on opsrun_logs (e->mu held): the run ids,
 * "*" for every run, NULL for none. Heap. */
static char *take_logs_payload(struct engine *e)
{
    char *p = NULL;

    if (e->ring_logs_all)
        p = xstrdup("*");
    else if (dynbuf_len(&e->ring_logs))
        p = xstrdup(dynbuf_ptr(&e->ring_logs));
    dynbuf_reset(&e->ring_logs);
    e->ring_logs_all = false;
    return p;
}

static void *bell_main(void *arg)
{
    struct engine *e = arg;

    pthread_mutex_lock(&e->mu);
    for (;;) {
        bool q, ev;
        char *logs;
        struct db *db = NULL;
        struct error err = {0};

        while (!e->bell_stop && !e->ring_queue && !e->ring_events && !dynbuf_len(&e->ring_logs) &&
               !e->ring_logs_all)
            pthread_cond_wait(&e->bell_cv, &e->mu);
        q = e->ring_queue;
        ev = e->ring_events;
        logs = take_logs_payload(e);
        if (!q && !ev && !logs)
            break;
        e->ring_queue = e->ring_events = false;
        pthread_mutex_unlock(&e->mu);
        if (db_pool_get(e->pool, &db, &err) != ST_OK ||
            store_notify(db, q, ev, logs, &err) != ST_OK)
            LOG(LOG_DEBUG, "could not ring the doorbell: %s", err.message);
        db_pool_put(e->pool, db);
        free(logs);
        usleep(BELL_MIN_GAP_MS * 1000);
        pthread_mutex_lock(&e->mu);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/* ---- listener ---- */

/* Each run id of an opsrun_logs payload to on_logs; "*" or nothing: every
 * run's followers. */
static void logs_hint(struct engine *e, const char *payload)
{
    char id[160];

    if (!e->on_logs)
        return;
    if (!payload || !*payload || strcmp(payload, "*") == 0) {
        e->on_logs(e->on_logs_arg, NULL);
        return;
    }
    for (const char *p = payload; *p;) {
        size_t n = strcspn(p, " ");
        if (n > 0 && n < sizeof(id)) {
            memcpy(id, p, n);
            id[n] = '\0';
            e->on_logs(e->on_logs_arg, id);
        }
        p += n;
        p += *p == ' ';
    }
}

static void on_notify(void *arg, const char *channel, const char *payload)
{
    struct engine *e = arg;

    if (strcmp(channel, "opsrun_queue") == 0)
        e->wake_dispatcher(e);
    else if (strcmp(channel, "opsrun_events") == 0)
        events_hint(e);
    else if (strcmp(channel, "opsrun_logs") == 0)
        logs_hint(e, payload);
}

static void set_listening(struct engine *e, bool up)
{
    pthread_mutex_lock(&e->mu);
    e->st.listening = up;
    pthread_mutex_unlock(&e->mu);
}

/* Waits on the LISTEN socket until it breaks or we stop; true = stop. */
static bool listen_loop(struct engine *e, struct db *db)
{
    for (;;) {
        struct pollfd pf[2] = {{db_socket(db), POLLIN, 0}, {e->stop_efd, POLLIN, 0}};
        struct error err = {0};
        int r = poll(pf, 2, 1000);

        if (r < 0 && errno != EINTR)
            return false;
        if (pf[1].revents)
            return true;
        if (r > 0 && db_consume_notifies(db, on_notify, e, &err) != ST_OK) {
            LOG(LOG_WARN, "listen connection lost: %s", err.message);
            return false;
        }
    }
}

static void *listener_main(void *arg)
{
    struct engine *e = arg;
    struct db_options opt = *db_pool_options(e->pool);

    struct backoff pause = {.first_ms = LISTEN_RETRY_FIRST_MS, .max_ms = LISTEN_RETRY_MAX_MS};

    /* The pool's connection settings, without a statement timeout: a LISTEN
     * connection idles between notifications. */
    opt.statement_timeout_ms = 0;
    opt.application_name = "opsrun-listen";
    for (;;) {
        struct db *db = NULL;
        struct error err = {0};
        struct pollfd pf = {e->stop_efd, POLLIN, 0};
        bool stop = false;
        bool up =
            db_connect(&opt, &db, &err) == ST_OK &&
            db_exec_simple(db, "LISTEN opsrun_queue; LISTEN opsrun_events; LISTEN opsrun_logs",
                           &err) == ST_OK;
        int64_t wait_ms;

        if (up) {
            LOG(LOG_INFO, "listening for wake-ups channels=opsrun_queue,opsrun_events,opsrun_logs");
            set_listening(e, true);
            backoff_reset(&pause);
            e->wake_dispatcher(e); /* anything sent while we were away */
            events_hint(e);
            logs_hint(e, NULL);
            stop = listen_loop(e, db);
            set_listening(e, false);
        }
        wait_ms = backoff_next_ms(&pause);
        if (!up)
            LOG(LOG_WARN, "could not listen, retrying in %lld ms: %s", (long long)wait_ms,
                err.message);
        db_close(db);
        if (stop || poll(&pf, 1, (int)wait_ms) > 0)
            break;
    }
    return NULL;
}

/* ---- start and stop ---- */

enum status doorbell_start(struct engine *e, struct error *err)
{
    e->stop_efd = eventfd(0, EFD_CLOEXEC);
    if (e->stop_efd < 0)
        return error_set(err, ST_INTERNAL, "could not create eventfd: %s", strerror(errno));
    if (thread_start(e, &e->bell, bell_main, e, "doorbell", err) != ST_OK)
        goto fail;
    e->bell_started = true;
    if (!e->cfg->queue.listen)
        return ST_OK;
    if (thread_start(e, &e->listener, listener_main, e, "listener", err) != ST_OK)
        goto fail;
    e->listener_started = true;
    return ST_OK;
fail:
    doorbell_stop(e);
    return ST_INTERNAL;
}

void doorbell_stop(struct engine *e)
{
    pthread_mutex_lock(&e->mu);
    e->bell_stop = true;
    pthread_cond_signal(&e->bell_cv);
    pthread_mutex_unlock(&e->mu);
    if (e->stop_efd >= 0)
        (void)!eventfd_write(e->stop_efd, 1);
    if (e->bell_started)
        pthread_join(e->bell, NULL);
    if (e->listener_started)
        pthread_join(e->listener, NULL);
    e->bell_started = e->listener_started = false;
    if (e->stop_efd >= 0)
        close(e->stop_efd);
    e->stop_efd = -1;
}
