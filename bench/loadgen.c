/* bench/loadgen.c — end-to-end figures for a running opsrun:
 *
 *   loadgen throughput URL DBCONNINFO RUNS CLIENTS [BATCH]
 *       submits RUNS no-op demo runs from CLIENTS threads (keep-alive), waits
 *       until all are completed, prints runs/s from first submit to last
 *       completion (completed_at in the database), and the p50/p99 of one
 *       submission's round trip. With BATCH > 1 each request is a JSON array
 *       of BATCH submissions (at most 1,000).
 *   loadgen submit URL DBCONNINFO RUNS CLIENTS [BATCH]
 *       the submissions of throughput alone: the runs wait for a run_at far
 *       in the future, so the engine stays idle and only submissions are
 *       measured (submissions/s and the round trip's p50/p99).
 *   loadgen pickup URL DBCONNINFO SAMPLES
 *       one run at a time on an otherwise idle service: started_at -
 *       created_at (both stamped by PostgreSQL) p50/p99 in ms, and as a
 *       baseline in the same run the p50/p99 of a bare GET /livez round trip.
 *   loadgen wrk URL DBCONNINFO SECONDS CONNECTIONS
 *       HTTP submit, wrk-style: CONNECTIONS keep-alive connections each
 *       POST one no-op demo run after another, every body distinct, for
 *       SECONDS; requests/s and the p50/p99 of the request latency. The runs
 *       are executed meanwhile; then it waits (untimed) until they are all
 *       completed, so the next step starts idle.
 *   loadgen bulk URL DBCONNINFO RUNS CONNECTIONS BATCH
 *       RUNS no-op demo runs submitted as JSON arrays of BATCH distinct
 *       bodies (POST /alerts, 200 {"runs": [...]}) from CONNECTIONS threads;
 *       runs/s from first submit to last completion, and the p50/p99 of one
 *       array's request.
 *   loadgen lateness URL DBCONNINFO DELAYED RETRIES
 *       DELAYED runs submitted with run_at 2 to 6 s ahead, evenly spread, and RETRIES demo
 *       runs whose first attempt fails ("fail": "first:1"), one every 50 ms;
 *       waits until all are completed and prints how late each started
 *       (p50/p99/max, ms): a delayed run started_at - run_at, a retry the
 *       claim of its second attempt (its "running" event) - the run_at the
 *       failure set.
 *   loadgen drain URL DBCONNINFO RUNS [HOOK]
 *       the engine alone: RUNS no-op demo runs inserted straight into the
 *       table (no HTTP), the engine woken, and runs/s from the wake-up to
 *       the last completed_at. HOOK, a shell command, runs after the insert
 *       and before the wake-up (bench/pgcost.sh starts its counters there).
 *   loadgen answers URL DBCONNINFO SECONDS CLIENTS OUT
 *       CLIENTS keep-alive connections each POST one no-op demo run after
 *       another for SECONDS, every one with a run_id of its own
 *       (a-<pid>-<client>-<n>), and write every answer to the file OUT, one
 *       line each: the run_id, the HTTP status (0: no answer) and the
 *       wall-clock time it came back (ms since the epoch). What was
 *       acknowledged, and when, for bench/failover.sh; DBCONNINFO is only
 *       connected to at the start.
 *   loadgen paced URL DBCONNINFO SECONDS RATE CLIENTS
 *       RATE no-op demo runs/s from CLIENTS threads, paced (each client
 *       sends on its own schedule, late sends are not skipped), for
 *       SECONDS; the requests, those not answered 202, the p50/p99/max of
 *       one request's round trip; then waits (untimed) until every
 *       acknowledged run is completed and prints how many never were
 *       (paced_lost). For bench/reload.sh: with LOADGEN_RELOAD_FILE set,
 *       one more thread reloads the configuration 10 times a second
 *       meanwhile, the file alternating between LOADGEN_RELOAD_A and _B,
 *       and prints the reloads, those not answered 200 and their round
 *       trip.
 *   loadgen soak URL DBCONNINFO MINUTES RATE CLIENTS [SERVER_PID]
 *       RATE no-op demo runs/s from CLIENTS threads, paced, for MINUTES. Every
 *       10 s it reads from the database the runs completed and the pickups
 *       (started_at - created_at) of the slice 10-20 s back (well before
 *       retention can delete them), and prints one line per minute:
 *       completed/s, pickup p50/p99, due runs not started, the rows of runs,
 *       the size of the runs and run_events tables and the server's RSS;
 *       then the last minute over the first and, from 12 minutes on, the
 *       last six minutes over minutes 2-6 (samples pooled; the first minute
 *       is the start-up).
 *
 * Output is one "key=value" line per figure, for bench/run.sh and
 * bench/all.sh. */
#include <curl/curl.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *base_url;
static int runs_per_client;
static int batch = 1;
static const char *extra = ""; /* more members of each submission */
/* The "steps" of each demo run (LOADGEN_STEPS, default 0): each step is a
 * progress report and a line of the run's log. */
static int steps;
static double *submit_ms; /* one per request, by client: [client * runs_per_client + i] */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A response body kept by request_to. */
struct buf {
    char *p;
    size_t len, cap;
};

static size_t sink(char *p, size_t s, size_t n, void *arg)
{
    struct buf *b = arg;

    if (b) {
        if (b->len + s * n + 1 > b->cap) {
            b->cap = (b->len + s * n + 1) * 2;
            b->p = realloc(b->p, b->cap);
            if (!b->p) {
                fprintf(stderr, "loadgen: out of memory\n");
                exit(1);
            }
        }
        memcpy(b->p + b->len, p, s * n);
        b->len += s * n;
        b->p[b->len] = '\0';
    }
    return s * n;
}

/* The response status; the body goes to *out when out is not NULL. */
static long request_to(CURL *c, const char *method, const char *path, const char *body,
                       struct buf *out)
{
    char url[512];
    long code = 0;
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");

    snprintf(url, sizeof(url), "%s%s", base_url, path);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    if (!body)
        curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_slist_free_all(h);
    return code;
}

static long request(CURL *c, const char *method, const char *path, const char *body)
{
    return request_to(c, method, path, body, NULL);
}

/* One request's body: a single submission, or an array of batch. */
static char *client_body(long id, int i)
{
    size_t cap = (size_t)batch * 128 + 16, len = 0;
    char *body = malloc(cap);

    len += (size_t)snprintf(body + len, cap - len, "%s", batch > 1 ? "[" : "");
    for (int k = 0; k < batch; k++)
        len += (size_t)snprintf(body + len, cap - len,
                                "%s{\"alert_type\":\"demo\",\"data\":{\"duration_ms\":0,"
                                "\"steps\":%d,\"n\":\"%ld-%d-%d-%d\"}%s}",
                                k ? "," : "", steps, id, i, k, (int)getpid(), extra);
    snprintf(body + len, cap - len, "%s", batch > 1 ? "]" : "");
    return body;
}

static void *client(void *arg)
{
    CURL *c = curl_easy_init();
    long id = (long)arg, failed = 0;

    for (int i = 0; i < runs_per_client; i++) {
        char *body = client_body(id, i);
        double t = now_s();
        if (request(c, "POST", "/alerts", body) != (batch > 1 ? 200 : 202))
            failed++;
        submit_ms[id * runs_per_client + i] = (now_s() - t) * 1000;
        free(body);
    }
    curl_easy_cleanup(c);
    return (void *)failed;
}

static double pct(double *v, int n, double p);

/* Completed runs created and completed at or after `since` (the database's
 * clock). Through the runs_completed index (completed_at) it reads only the
 * runs completed since, so its cost does not grow with the table. A count of
 * all completed runs, every 20 ms, read every completed run in the table with
 * its dead versions; next to 5,000 busy waiting runs (bench/poller.sh) that
 * took up to 15 ms a count, and slowed what it measured. */
static long long completed_since(PGconn *db, const char *since)
{
    const char *p[1] = {since};
    PGresult *r = PQexecParams(db,
                               "SELECT count(*) FROM runs WHERE status = 'completed' "
                               "AND completed_at >= $1::timestamptz "
                               "AND created_at >= $1::timestamptz",
                               1, NULL, p, NULL, NULL, 0);
    long long v = -1;
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
        v = atoll(PQgetvalue(r, 0, 0));
    PQclear(r);
    return v;
}

/* Whether a run created at or after `since` has not completed yet: the
 * first such row ends the scan (runs_active), so polling it every 20 ms costs
 * next to nothing, where counting every completed run (completed_since) each
 * time took PostgreSQL up to a core during a 50,000-run bench. */
static bool active_since(PGconn *db, const char *since)
{
    const char *p[1] = {since};
    PGresult *r = PQexecParams(db,
                               "SELECT EXISTS (SELECT 1 FROM runs WHERE status <> 'completed' "
                               "AND created_at >= $1::timestamptz)",
                               1, NULL, p, NULL, NULL, 0);
    bool v = PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1 ||
             strcmp(PQgetvalue(r, 0, 0), "f") != 0;
    PQclear(r);
    return v;
}

static int throughput(PGconn *db, int runs, int clients, bool wait)
{
    pthread_t th[64];
    long failed = 0;
    double t0, t_sub, t_done;
    char since[64] = "";
    PGresult *r = PQexec(db, "SELECT now()::text");

    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
        snprintf(since, sizeof(since), "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
    if (!since[0]) {
        fprintf(stderr, "loadgen: %s", PQerrorMessage(db));
        return 1;
    }

    runs_per_client = runs / clients / batch;
    runs = runs_per_client * clients * batch;
    submit_ms = calloc((size_t)(runs_per_client * clients) + 1, sizeof(double));
    t0 = now_s();
    for (long i = 0; i < clients; i++)
        pthread_create(&th[i], NULL, client, (void *)i);
    for (int i = 0; i < clients; i++) {
        void *f;
        pthread_join(th[i], &f);
        failed += (long)f;
    }
    t_sub = now_s();
    while (wait && (active_since(db, since) || completed_since(db, since) < runs)) {
        if (now_s() - t0 > 600) {
            fprintf(stderr, "loadgen: runs did not complete within 600 s\n");
            return 1;
        }
        usleep(20000);
    }
    t_done = now_s();
    printf("runs=%d clients=%d batch=%d failed_submits=%ld\n", runs, clients, batch, failed);
    printf("submit_per_s=%.0f\n", runs / (t_sub - t0));
    printf("submit_p50_ms=%.2f\nsubmit_p99_ms=%.2f\n",
           pct(submit_ms, runs_per_client * clients, 0.5),
           pct(submit_ms, runs_per_client * clients, 0.99));
    free(submit_ms);
    if (wait)
        printf("runs_per_s=%.0f\n", runs / (t_done - t0));
    return failed ? 1 : 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(double *v, int n, double p)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return v[(int)(p * (n - 1))];
}

static int pickup(PGconn *db, int samples)
{
    CURL *c = curl_easy_init();
    double *lat = calloc((size_t)samples, sizeof(double));
    double *rtt = calloc((size_t)samples, sizeof(double));
    char body[256];

    for (int i = 0; i < samples; i++) {
        double t = now_s();
        request(c, "GET", "/livez", NULL);
        rtt[i] = (now_s() - t) * 1000;
    }
    for (int i = 0; i < samples; i++) {
        snprintf(body, sizeof(body),
                 "{\"alert_type\":\"demo\",\"run_id\":\"pickup-%d-%d\",\"data\":{\"duration_ms\":"
                 "0,\"steps\":0}}",
                 (int)getpid(), i);
        if (request(c, "POST", "/alerts", body) != 202)
            return 1;
        usleep(100000); /* idle between samples: measure a cold pickup */
    }
    {
        char sql[256];
        PGresult *r;
        snprintf(sql, sizeof(sql),
                 "SELECT extract(epoch FROM started_at - created_at) * 1000 FROM runs "
                 "WHERE id LIKE 'pickup-%d-%%' AND started_at IS NOT NULL",
                 (int)getpid());
        r = PQexec(db, sql);
        if (PQntuples(r) != samples) {
            fprintf(stderr, "loadgen: %d of %d pickup runs started\n", PQntuples(r), samples);
            return 1;
        }
        for (int i = 0; i < samples; i++)
            lat[i] = atof(PQgetvalue(r, i, 0));
        PQclear(r);
    }
    printf("pickup_p50_ms=%.2f\npickup_p99_ms=%.2f\n", pct(lat, samples, 0.5),
           pct(lat, samples, 0.99));
    printf("livez_rtt_p50_ms=%.2f\nlivez_rtt_p99_ms=%.2f\n", pct(rtt, samples, 0.5),
           pct(rtt, samples, 0.99));
    free(lat);
    free(rtt);
    curl_easy_cleanup(c);
    return 0;
}

/* ---- shared by the modes below ------------------------------------------ */

#define MAX_THREADS 256

struct samples {
    double *v;
    int n, cap;
};

static void samples_add(struct samples *s, double x)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 1024;
        s->v = realloc(s->v, (size_t)s->cap * sizeof(*s->v));
        if (!s->v) {
            fprintf(stderr, "loadgen: out of memory\n");
            exit(1);
        }
    }
    s->v[s->n++] = x;
}

static void samples_merge(struct samples *into, struct samples *from)
{
    for (int i = 0; i < from->n; i++)
        samples_add(into, from->v[i]);
    free(from->v);
    from->v = NULL;
    from->n = from->cap = 0;
}

/* p50/p99/max of s as "PREFIX_p50_ms=..." lines (n=0: -1). */
static void print_pcts(const char *prefix, struct samples *s)
{
    double p50 = -1, p99 = -1, max = -1;

    if (s->n > 0) {
        p50 = pct(s->v, s->n, 0.5);
        p99 = pct(s->v, s->n, 0.99);
        max = s->v[s->n - 1];
    }
    printf("%s_n=%d\n%s_p50_ms=%.2f\n%s_p99_ms=%.2f\n%s_max_ms=%.2f\n", prefix, s->n, prefix, p50,
           prefix, p99, prefix, max);
}

static int db_now(PGconn *db, char *out, size_t cap)
{
    PGresult *r = PQexec(db, "SELECT now()::text");
    int ok = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1;

    if (ok)
        snprintf(out, cap, "%s", PQgetvalue(r, 0, 0));
    else
        fprintf(stderr, "loadgen: %s", PQerrorMessage(db));
    PQclear(r);
    return ok ? 0 : -1;
}

/* Waits until `want` runs created since `since` are completed; seconds, or -1
 * after timeout_s. */
static double wait_completed(PGconn *db, const char *since, long long want, double timeout_s)
{
    double t0 = now_s();

    while (active_since(db, since) || completed_since(db, since) < want) {
        if (now_s() - t0 > timeout_s) {
            fprintf(stderr, "loadgen: %lld runs did not complete within %.0f s\n", want, timeout_s);
            return -1;
        }
        usleep(20000);
    }
    return now_s() - t0;
}

static long long query_ll(PGconn *db, const char *sql)
{
    PGresult *r = PQexec(db, sql);
    long long v = -1;

    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 && !PQgetisnull(r, 0, 0))
        v = atoll(PQgetvalue(r, 0, 0));
    PQclear(r);
    return v;
}

/* POSTs one no-op demo run whose data is distinct ("n": TAG-client-i-pid);
 * the HTTP status. */
static long post_noop(CURL *c, char tag, long client, long i)
{
    char body[256];

    snprintf(body, sizeof(body),
             "{\"alert_type\":\"demo\",\"data\":{\"duration_ms\":0,\"steps\":0,"
             "\"n\":\"%c-%ld-%ld-%d\"}}",
             tag, client, i, (int)getpid());
    return request(c, "POST", "/alerts", body);
}

/* ---- wrk: HTTP submit, wrk-style, single runs, distinct bodies ------------- */

struct wrk_arg {
    long id;
    double deadline;
    long ok, other;
    struct samples lat;
};

static void *wrk_client(void *arg)
{
    struct wrk_arg *a = arg;
    CURL *c = curl_easy_init();

    for (long i = 0; now_s() < a->deadline; i++) {
        double t = now_s();
        long code = post_noop(c, 's', a->id, i);

        samples_add(&a->lat, (now_s() - t) * 1000);
        if (code == 202)
            a->ok++;
        else
            a->other++;
    }
    curl_easy_cleanup(c);
    return NULL;
}

static int wrk(PGconn *db, double seconds, int conns)
{
    static struct wrk_arg args[MAX_THREADS];
    pthread_t th[MAX_THREADS];
    struct samples all = {0};
    long ok = 0, other = 0;
    double t0, t1, drain;
    char since[64];

    if (db_now(db, since, sizeof(since)) != 0)
        return 1;
    t0 = now_s();
    for (int i = 0; i < conns; i++) {
        args[i] = (struct wrk_arg){.id = i, .deadline = t0 + seconds};
        pthread_create(&th[i], NULL, wrk_client, &args[i]);
    }
    for (int i = 0; i < conns; i++) {
        pthread_join(th[i], NULL);
        ok += args[i].ok;
        other += args[i].other;
        samples_merge(&all, &args[i].lat);
    }
    t1 = now_s();
    printf("submit_connections=%d\nsubmit_requests=%ld\nsubmit_non_202=%ld\n", conns, ok + other,
           other);
    printf("submit_per_s=%.0f\n", (double)(ok + other) / (t1 - t0));
    print_pcts("submit", &all);
    fflush(stdout);
    drain = wait_completed(db, since, ok, 600);
    printf("submit_drain_s=%.1f\n", drain);
    free(all.v);
    return other || drain < 0 ? 1 : 0;
}

/* ---- bulk: arrays of distinct bodies --------------------------------------- */

struct bulk_arg {
    long id;
    int runs, per_request;
    long ok_runs, failed_batches, failed_items;
    struct samples lat;
};

/* How many times `needle` occurs in s. */
static long count_of(const char *s, const char *needle)
{
    long n = 0;

    while (s && (s = strstr(s, needle))) {
        n++;
        s += strlen(needle);
    }
    return n;
}

static void *bulk_client(void *arg)
{
    struct bulk_arg *a = arg;
    CURL *c = curl_easy_init();
    size_t cap = (size_t)a->per_request * 160 + 16;
    char *body = malloc(cap);
    struct buf resp = {0};

    for (int done = 0; done < a->runs;) {
        int n = a->runs - done < a->per_request ? a->runs - done : a->per_request;
        size_t len = 0;
        double t;

        body[len++] = '[';
        for (int k = 0; k < n; k++)
            len += (size_t)snprintf(body + len, cap - len,
                                    "%s{\"alert_type\":\"demo\",\"data\":{\"duration_ms\":0,"
                                    "\"steps\":0,\"n\":\"b-%ld-%d-%d\"}}",
                                    k ? "," : "", a->id, done + k, (int)getpid());
        body[len++] = ']';
        body[len] = '\0';
        t = now_s();
        resp.len = 0;
        /* 200 {"runs": [...]}: one result per item, a submission (with its
         * run_id) or a problem object. */
        if (request_to(c, "POST", "/alerts", body, &resp) == 200) {
            long ok = count_of(resp.p, "\"run_id\"");
            a->ok_runs += ok;
            a->failed_items += n - ok;
        } else {
            a->failed_batches++;
        }
        samples_add(&a->lat, (now_s() - t) * 1000);
        done += n;
    }
    free(resp.p);
    free(body);
    curl_easy_cleanup(c);
    return NULL;
}

/* per_request: how many bodies one array holds */
static int bulk(PGconn *db, int runs, int conns, int per_request)
{
    static struct bulk_arg args[MAX_THREADS];
    pthread_t th[MAX_THREADS];
    struct samples all = {0};
    long ok = 0, failed = 0, failed_items = 0;
    double t0, t_sub, wait;
    char since[64];

    if (db_now(db, since, sizeof(since)) != 0)
        return 1;
    t0 = now_s();
    for (int i = 0; i < conns; i++) {
        args[i] = (struct bulk_arg){.id = i, .runs = runs / conns, .per_request = per_request};
        pthread_create(&th[i], NULL, bulk_client, &args[i]);
    }
    for (int i = 0; i < conns; i++) {
        pthread_join(th[i], NULL);
        ok += args[i].ok_runs;
        failed += args[i].failed_batches;
        failed_items += args[i].failed_items;
        samples_merge(&all, &args[i].lat);
    }
    t_sub = now_s();
    printf("bulk_runs=%ld\nbulk_connections=%d\nbulk_batch=%d\nbulk_failed_batches=%ld\n"
           "bulk_failed_items=%ld\n",
           ok, conns, per_request, failed, failed_items);
    printf("bulk_submit_per_s=%.0f\n", (double)ok / (t_sub - t0));
    print_pcts("bulk_request", &all);
    free(all.v);
    fflush(stdout);
    wait = wait_completed(db, since, ok, 600);
    if (wait < 0)
        return 1;
    printf("bulk_runs_per_s=%.0f\n", (double)ok / (t_sub - t0 + wait));
    return failed || failed_items ? 1 : 0;
}

/* ---- lateness: delayed runs and retries ------------------------------------ */

static void rfc3339_in(double ahead_s, char *out, size_t cap)
{
    struct timespec ts;
    struct tm tm;
    long long us;
    time_t secs;

    clock_gettime(CLOCK_REALTIME, &ts);
    us = (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000 + (long long)(ahead_s * 1e6);
    secs = (time_t)(us / 1000000);
    gmtime_r(&secs, &tm);
    snprintf(out, cap, "%04d-%02d-%02dT%02d:%02d:%02d.%06lldZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, us % 1000000);
}

static int lateness_query(PGconn *db, const char *sql, const char *prefix, int want)
{
    PGresult *r = PQexec(db, sql);
    struct samples s = {0};
    int early = 0, rc = 0;

    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        fprintf(stderr, "loadgen: %s", PQerrorMessage(db));
        PQclear(r);
        return 1;
    }
    for (int i = 0; i < PQntuples(r); i++) {
        double v = atof(PQgetvalue(r, i, 0));
        early += v < 0;
        samples_add(&s, v);
    }
    PQclear(r);
    print_pcts(prefix, &s);
    printf("%s_early=%d\n", prefix, early);
    if (s.n != want) {
        fprintf(stderr, "loadgen: %s: %d of %d runs measured\n", prefix, s.n, want);
        rc = 1;
    }
    free(s.v);
    return rc;
}

static int lateness(PGconn *db, int delayed, int retries)
{
    CURL *c = curl_easy_init();
    char body[512], at[96], sql[1024], since[64];
    int pid = (int)getpid();
    double t0;

    if (db_now(db, since, sizeof(since)) != 0)
        return 1;
    /* Due 2 s to 6 s from now, spread out, so that each is due on its own. */
    t0 = now_s();
    for (int i = 0; i < delayed; i++) {
        rfc3339_in(2.0 - (now_s() - t0) + 4.0 * i / (delayed > 1 ? delayed - 1 : 1), at,
                   sizeof(at));
        snprintf(body, sizeof(body),
                 "{\"alert_type\":\"demo\",\"run_id\":\"late-%d-%d\",\"run_at\":\"%s\","
                 "\"data\":{\"duration_ms\":0,\"steps\":0}}",
                 pid, i, at);
        if (request(c, "POST", "/alerts", body) != 202) {
            fprintf(stderr, "loadgen: a delayed run was not accepted\n");
            return 1;
        }
    }
    if (now_s() - t0 > 2.0)
        fprintf(stderr,
                "loadgen: submitting the delayed runs took %.1f s: the first were "
                "submitted after their run_at\n",
                now_s() - t0);
    for (int i = 0; i < retries; i++) {
        snprintf(body, sizeof(body),
                 "{\"alert_type\":\"demo\",\"run_id\":\"retry-%d-%d\","
                 "\"data\":{\"duration_ms\":0,\"steps\":0,\"fail\":\"first:1\"}}",
                 pid, i);
        if (request(c, "POST", "/alerts", body) != 202) {
            fprintf(stderr, "loadgen: a retried run was not accepted\n");
            return 1;
        }
        usleep(50000);
    }
    curl_easy_cleanup(c);
    if (wait_completed(db, since, delayed + retries, 120) < 0)
        return 1;
    snprintf(sql, sizeof(sql),
             "SELECT extract(epoch FROM started_at - run_at) * 1000 FROM runs "
             "WHERE id LIKE 'late-%d-%%'",
             pid);
    if (lateness_query(db, sql, "late_delayed", delayed))
        return 1;
    snprintf(sql, sizeof(sql),
             "SELECT extract(epoch FROM (SELECT max(e.created_at) FROM run_events e "
             "WHERE e.tenant = r.tenant AND e.run_id = r.id AND e.type = 'status' "
             "AND e.status = 'running') - r.run_at) * 1000 FROM runs r "
             "WHERE r.id LIKE 'retry-%d-%%' AND r.attempt >= 2",
             pid);
    return lateness_query(db, sql, "late_retry", retries);
}

/* ---- answers: every answer recorded, for failover ------------------------- */

#define ANSWERS_MAX (256 << 20) /* bytes of answers one client keeps */

struct answers_arg {
    long id;
    double deadline;
    char *lines; /* "run_id status ms\n" each */
    size_t len, cap;
};

static long long wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void *answers_client(void *arg)
{
    struct answers_arg *a = arg;
    CURL *c = curl_easy_init();
    char id[64], body[256];

    for (long i = 0; now_s() < a->deadline; i++) {
        long code;
        snprintf(id, sizeof(id), "a-%d-%ld-%ld", (int)getpid(), a->id, i);
        snprintf(body, sizeof(body),
                 "{\"alert_type\":\"demo\",\"run_id\":\"%s\",\"data\":{\"duration_ms\":0,"
                 "\"steps\":0}}",
                 id);
        code = request(c, "POST", "/alerts", body);
        if (a->len + 128 > a->cap) {
            a->cap = a->cap ? 2 * a->cap : 1 << 16;
            a->lines = a->cap <= ANSWERS_MAX ? realloc(a->lines, a->cap) : NULL;
            if (!a->lines) {
                fprintf(stderr, "loadgen: could not keep more than %d bytes of answers\n",
                        ANSWERS_MAX);
                exit(1);
            }
        }
        a->len += (size_t)snprintf(a->lines + a->len, a->cap - a->len, "%s %ld %lld\n", id, code,
                                   wall_ms());
    }
    curl_easy_cleanup(c);
    return NULL;
}

static int answers(double seconds, int conns, const char *out)
{
    static struct answers_arg args[MAX_THREADS];
    pthread_t th[MAX_THREADS];
    FILE *f = fopen(out, "w");
    double t0 = now_s();

    if (!f) {
        fprintf(stderr, "loadgen: could not write %s\n", out);
        return 1;
    }
    for (int i = 0; i < conns; i++) {
        args[i] = (struct answers_arg){.id = i, .deadline = t0 + seconds};
        pthread_create(&th[i], NULL, answers_client, &args[i]);
    }
    for (int i = 0; i < conns; i++) {
        pthread_join(th[i], NULL);
        if (args[i].len)
            fwrite(args[i].lines, 1, args[i].len, f);
        free(args[i].lines);
    }
    return fclose(f) == 0 ? 0 : 1;
}

/* ---- soak: a steady load for minutes, with retention running --------------- */

/* ---- paced: a steady rate, every request timed ---------------------------- */

/* One client of a steady rate (paced, and soak's): sends at t0,
 * t0 + interval, ... until end, late sends not skipped. */
struct paced_arg {
    long id;
    char tag; /* of its runs' data ("n": TAG-...) */
    double t0, interval, end;
    long ok, failed;
    struct samples lat;
};

static void *paced_client(void *arg)
{
    struct paced_arg *a = arg;
    CURL *c = curl_easy_init();

    for (long i = 0;; i++) {
        double due = a->t0 + (double)i * a->interval, now = now_s(), t;
        if (due >= a->end)
            break;
        if (due > now)
            usleep((useconds_t)((due - now) * 1e6));
        t = now_s();
        if (post_noop(c, a->tag, a->id, i) == 202)
            a->ok++;
        else
            a->failed++;
        samples_add(&a->lat, (now_s() - t) * 1000);
    }
    curl_easy_cleanup(c);
    return NULL;
}

/* The reloads beside a paced load (LOADGEN_RELOAD_FILE): 10 a second, each
 * writing the file with the other of two contents (LOADGEN_RELOAD_A and
 * _B: every reload changes something) and POSTing /admin/reload; what was
 * not answered 200, and the reloads' round trip. From one thread of this
 * process, so that the reloads cost the machine no more than they cost
 * opsrun. */
struct reloader {
    const char *path, *text[2];
    double t0, end;
    long ok, failed;
    struct samples lat;
};

static bool write_file(const char *path, const char *text)
{
    char tmp[1024];
    FILE *f;
    bool ok;

    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    if (!(f = fopen(tmp, "w")))
        return false;
    ok = fputs(text, f) >= 0;
    ok = fclose(f) == 0 && ok;
    return ok && rename(tmp, path) == 0;
}

static void *reloader_main(void *arg)
{
    struct reloader *r = arg;
    CURL *c = curl_easy_init();

    for (long i = 0;; i++) {
        double due = r->t0 + (double)i * 0.1, now = now_s(), t;
        if (due >= r->end)
            break;
        if (due > now)
            usleep((useconds_t)((due - now) * 1e6));
        t = now_s();
        if (write_file(r->path, r->text[i % 2]) && request(c, "POST", "/admin/reload", "") == 200)
            r->ok++;
        else
            r->failed++;
        samples_add(&r->lat, (now_s() - t) * 1000);
    }
    curl_easy_cleanup(c);
    return NULL;
}

static int paced(PGconn *db, double seconds, double rate, int conns)
{
    static struct paced_arg args[MAX_THREADS];
    pthread_t th[MAX_THREADS], rth;
    struct samples all = {0};
    struct reloader rl = {.path = getenv("LOADGEN_RELOAD_FILE"),
                          .text = {getenv("LOADGEN_RELOAD_A"), getenv("LOADGEN_RELOAD_B")}};
    long ok = 0, failed = 0;
    long long done;
    char since[64];
    double t0;

    if (db_now(db, since, sizeof(since)) != 0)
        return 1;
    t0 = now_s() + 0.1;
    if (rl.path && rl.text[0] && rl.text[1]) {
        rl.t0 = t0;
        rl.end = t0 + seconds;
        pthread_create(&rth, NULL, reloader_main, &rl);
    } else {
        rl.path = NULL;
    }
    for (int i = 0; i < conns; i++) {
        /* client i sends at t0 + i/rate + k * conns/rate: together, rate/s */
        args[i] = (struct paced_arg){.id = i,
                                     .tag = 'p',
                                     .t0 = t0 + (double)i / rate,
                                     .interval = (double)conns / rate,
                                     .end = t0 + seconds};
        pthread_create(&th[i], NULL, paced_client, &args[i]);
    }
    for (int i = 0; i < conns; i++) {
        pthread_join(th[i], NULL);
        ok += args[i].ok;
        failed += args[i].failed;
        samples_merge(&all, &args[i].lat);
    }
    printf("paced_requests=%ld\npaced_failed=%ld\n", ok + failed, failed);
    print_pcts("paced", &all);
    if (rl.path) {
        pthread_join(rth, NULL);
        printf("reloads=%ld\nreloads_failed=%ld\n", rl.ok + rl.failed, rl.failed);
        print_pcts("reload", &rl.lat);
        free(rl.lat.v);
        failed += rl.failed;
    }
    fflush(stdout);
    (void)wait_completed(db, since, ok, 600);
    done = completed_since(db, since);
    printf("paced_lost=%lld\n", done >= ok ? 0 : ok - done);
    free(all.v);
    return failed ? 1 : 0;
}

static long rss_kib(int pid)
{
    char path[64], line[256];
    long v = -1;
    FILE *f;

    if (pid <= 0)
        return -1;
    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    f = fopen(path, "r");
    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %ld", &v) == 1)
            break;
    fclose(f);
    return v;
}

struct minute {
    long long completed;
    struct samples pickup;
    long long due, rows, table_kib;
    long rss;
};

/* Slice k is [start + 10 k, start + 10 (k + 1)) in the database's clock. */
static void soak_slice(PGconn *db, double start, int k, struct minute *m)
{
    char sql[512];
    PGresult *r;
    double a = start + 10.0 * k, b = a + 10.0;

    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM runs WHERE status = 'completed' "
             "AND completed_at >= to_timestamp(%.6f) AND completed_at < to_timestamp(%.6f)",
             a, b);
    m->completed += query_ll(db, sql);
    snprintf(sql, sizeof(sql),
             "SELECT extract(epoch FROM started_at - created_at) * 1000 FROM runs "
             "WHERE created_at >= to_timestamp(%.6f) AND created_at < to_timestamp(%.6f) "
             "AND started_at IS NOT NULL",
             a, b);
    r = PQexec(db, sql);
    if (PQresultStatus(r) == PGRES_TUPLES_OK)
        for (int i = 0; i < PQntuples(r); i++)
            samples_add(&m->pickup, atof(PQgetvalue(r, i, 0)));
    PQclear(r);
}

static void soak_print(int i, struct minute *m)
{
    double p50 = -1, p99 = -1;

    if (m->pickup.n) {
        p50 = pct(m->pickup.v, m->pickup.n, 0.5);
        p99 = pct(m->pickup.v, m->pickup.n, 0.99);
    }
    printf(
        "minute=%d completed_per_s=%.1f pickup_p50_ms=%.2f pickup_p99_ms=%.2f due_not_started=%lld "
        "runs_rows=%lld tables_kib=%lld rss_kib=%ld\n",
        i + 1, (double)m->completed / 60.0, p50, p99, m->due, m->rows, m->table_kib, m->rss);
    fflush(stdout);
}

static double ratio(double a, double b)
{
    return b > 0 ? a / b : -1;
}

/* Minutes [from, to) (0-based) pooled: completed/s, pickup p50 and p99, and
 * the largest rows, table size and RSS of their ends. */
struct window {
    double per_s, p50, p99;
    long long rows, table_kib;
    long rss;
};

static struct window soak_window(const struct minute *m, int from, int to)
{
    struct window w = {0};
    struct samples all = {0};
    long long done = 0;

    for (int i = from; i < to; i++) {
        done += m[i].completed;
        for (int j = 0; j < m[i].pickup.n; j++)
            samples_add(&all, m[i].pickup.v[j]);
        w.rows = m[i].rows > w.rows ? m[i].rows : w.rows;
        w.table_kib = m[i].table_kib > w.table_kib ? m[i].table_kib : w.table_kib;
        w.rss = m[i].rss > w.rss ? m[i].rss : w.rss;
    }
    w.per_s = (double)done / (60.0 * (to - from));
    w.p50 = all.n ? pct(all.v, all.n, 0.5) : -1;
    w.p99 = all.n ? pct(all.v, all.n, 0.99) : -1;
    free(all.v);
    return w;
}

static void soak_windows(const struct minute *m, int minutes)
{
    struct window e, l;

    if (minutes < 12)
        return;
    e = soak_window(m, 1, 6);
    l = soak_window(m, minutes - 6, minutes);
    printf("soak_window_early=minutes 2-%d\nsoak_window_late=minutes %d-%d\n", 6, minutes - 5,
           minutes);
    printf("soak_early_completed_per_s=%.1f\nsoak_late_completed_per_s=%.1f\n", e.per_s, l.per_s);
    printf("soak_early_pickup_p50_ms=%.2f\nsoak_late_pickup_p50_ms=%.2f\n", e.p50, l.p50);
    printf("soak_early_pickup_p99_ms=%.2f\nsoak_late_pickup_p99_ms=%.2f\n", e.p99, l.p99);
    printf("soak_early_max_runs_rows=%lld\nsoak_late_max_runs_rows=%lld\n", e.rows, l.rows);
    printf("soak_early_max_tables_kib=%lld\nsoak_late_max_tables_kib=%lld\n", e.table_kib,
           l.table_kib);
    printf("soak_early_max_rss_kib=%ld\nsoak_late_max_rss_kib=%ld\n", e.rss, l.rss);
    printf("soak_late_over_early_throughput=%.2f\nsoak_late_over_early_pickup_p50=%.2f\n"
           "soak_late_over_early_pickup_p99=%.2f\n",
           ratio(l.per_s, e.per_s), ratio(l.p50, e.p50), ratio(l.p99, e.p99));
}

static int soak(PGconn *db, int minutes, double rate, int conns, int server_pid)
{
    static struct paced_arg args[MAX_THREADS];
    pthread_t th[MAX_THREADS];
    struct minute *m = calloc((size_t)minutes, sizeof(*m));
    int slices = minutes * 6, next_slice = 0;
    long sent = 0, failed = 0;
    double start_db, t0;
    /* run_events may be partitioned (migration 013): then its partitions
     * hold the bytes, the parent none. */
    const char *sizes = "SELECT (pg_total_relation_size('runs') + coalesce((SELECT "
                        "sum(pg_total_relation_size(relid)) FROM pg_partition_tree('run_events')), "
                        "pg_total_relation_size('run_events'))) / 1024";
    const char *due = "SELECT count(*) FROM runs WHERE status = 'queued' AND run_at <= now()";

    {
        PGresult *r = PQexec(db, "SELECT extract(epoch FROM now())");
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
            fprintf(stderr, "loadgen: %s", PQerrorMessage(db));
            return 1;
        }
        start_db = atof(PQgetvalue(r, 0, 0));
        PQclear(r);
    }
    t0 = now_s();
    for (int i = 0; i < conns; i++) {
        args[i] = (struct paced_arg){.id = i,
                                     .tag = 'k',
                                     .t0 = t0 + (double)i / rate,
                                     .interval = conns / rate,
                                     .end = t0 + minutes * 60.0};
        pthread_create(&th[i], NULL, paced_client, &args[i]);
    }
    printf("soak_minutes=%d\nsoak_rate_per_s=%.1f\nsoak_clients=%d\n", minutes, rate, conns);
    fflush(stdout);
    /* Every 10 s: the slice that ended 10 s ago; a minute is printed once its
     * last slice is read. Then the slices left after the load. */
    while (next_slice < slices) {
        double now = now_s() - t0;
        if (now >= 10.0 * (next_slice + 2)) {
            struct minute *mm = &m[next_slice / 6];
            soak_slice(db, start_db, next_slice, mm);
            if (next_slice % 6 == 5)
                soak_print(next_slice / 6, mm);
            next_slice++;
            continue;
        }
        if (next_slice / 6 < minutes && (int)(now / 60.0) == next_slice / 6 &&
            now - 60.0 * (next_slice / 6) > 55.0 && !m[next_slice / 6].table_kib) {
            struct minute *mm = &m[next_slice / 6];
            mm->due = query_ll(db, due);
            mm->rows = query_ll(db, "SELECT count(*) FROM runs");
            mm->table_kib = query_ll(db, sizes);
            mm->rss = rss_kib(server_pid);
        }
        usleep(200000);
    }
    for (int i = 0; i < conns; i++) {
        pthread_join(th[i], NULL);
        sent += args[i].ok;
        free(args[i].lat.v);
        failed += args[i].failed;
    }
    printf("soak_submitted=%ld\nsoak_failed_submits=%ld\n", sent, failed);
    {
        struct minute *f = &m[0], *l = &m[minutes - 1];
        double f99 = f->pickup.n ? pct(f->pickup.v, f->pickup.n, 0.99) : -1;
        double l99 = l->pickup.n ? pct(l->pickup.v, l->pickup.n, 0.99) : -1;
        double f50 = f->pickup.n ? pct(f->pickup.v, f->pickup.n, 0.5) : -1;
        double l50 = l->pickup.n ? pct(l->pickup.v, l->pickup.n, 0.5) : -1;
        printf("soak_first_completed_per_s=%.1f\nsoak_last_completed_per_s=%.1f\n",
               (double)f->completed / 60.0, (double)l->completed / 60.0);
        printf("soak_throughput_last_over_first=%.2f\n",
               ratio((double)l->completed, (double)f->completed));
        printf("soak_first_pickup_p50_ms=%.2f\nsoak_last_pickup_p50_ms=%.2f\n", f50, l50);
        printf("soak_first_pickup_p99_ms=%.2f\nsoak_last_pickup_p99_ms=%.2f\n", f99, l99);
        printf("soak_pickup_p50_last_over_first=%.2f\nsoak_pickup_p99_last_over_first=%.2f\n",
               ratio(l50, f50), ratio(l99, f99));
        printf("soak_first_runs_rows=%lld\nsoak_last_runs_rows=%lld\n", f->rows, l->rows);
        printf("soak_first_tables_kib=%lld\nsoak_last_tables_kib=%lld\n", f->table_kib,
               l->table_kib);
        printf("soak_first_rss_kib=%ld\nsoak_last_rss_kib=%ld\n", f->rss, l->rss);
    }
    soak_windows(m, minutes);
    for (int i = 0; i < minutes; i++)
        free(m[i].pickup.v);
    free(m);
    return failed ? 1 : 0;
}

/* The first column of the first row of sql as a double; -1 on an error. */
static double sql_double(PGconn *db, const char *sql)
{
    PGresult *r = PQexec(db, sql);
    double v = -1;

    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 && !PQgetisnull(r, 0, 0))
        v = atof(PQgetvalue(r, 0, 0));
    else if (PQresultStatus(r) != PGRES_TUPLES_OK)
        fprintf(stderr, "loadgen: %s", PQerrorMessage(db));
    PQclear(r);
    return v;
}

static int drain(PGconn *db, int runs, const char *hook)
{
    char sql[1024], prefix[64];
    double t0, rate;

    snprintf(prefix, sizeof(prefix), "drain-%d-", (int)getpid());
    /* Due at once, but not announced: with a long poll interval (see
     * bench/replicas.sh) no process looks before the NOTIFY below. */
    snprintf(sql, sizeof(sql),
             "WITH i AS (INSERT INTO runs (tenant, id, type, max_attempts, timeout_s, input, "
             "identity_hash, request_hash) SELECT 'default', '%s' || i, 'demo', 3, 900, "
             "'{\"duration_ms\": 0, \"steps\": 0}', '%s' || i, 'x' "
             "FROM generate_series(1, %d) AS i RETURNING 1) SELECT count(*) FROM i",
             prefix, prefix, runs);
    if (sql_double(db, sql) != runs)
        return 1;
    /* As autovacuum would soon: the claim's plan depends on the statistics,
     * and the table went from empty to RUNS queued runs at once. */
    PQclear(PQexec(db, "ANALYZE runs"));
    if (hook && system(hook) != 0) {
        fprintf(stderr, "loadgen: the hook failed: %s\n", hook);
        return 1;
    }
    /* The clock starts when the engine is told; the runs are all due. */
    t0 = sql_double(db, "SELECT extract(epoch FROM clock_timestamp()) FROM "
                        "pg_notify('opsrun_queue', '')");
    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM runs WHERE status = 'completed' AND id LIKE '%s%%'", prefix);
    for (double start = now_s(); sql_double(db, sql) < runs; usleep(100000)) {
        if (now_s() - start > 600) {
            fprintf(stderr, "loadgen: the runs did not complete within 600 s\n");
            return 1;
        }
    }
    snprintf(sql, sizeof(sql),
             "SELECT %d / (extract(epoch FROM max(completed_at)) - %.6f) FROM runs "
             "WHERE id LIKE '%s%%'",
             runs, t0, prefix);
    rate = sql_double(db, sql);
    printf("runs=%d\ndrain_runs_per_s=%.0f\n", runs, rate);
    return rate > 0 ? 0 : 1;
}

static void usage(void)
{
    fprintf(stderr, "usage: loadgen throughput|submit URL DB RUNS CLIENTS [BATCH]\n"
                    "       loadgen pickup URL DB SAMPLES\n"
                    "       loadgen wrk URL DB SECONDS CONNECTIONS\n"
                    "       loadgen bulk URL DB RUNS CONNECTIONS BATCH\n"
                    "       loadgen lateness URL DB DELAYED RETRIES\n"
                    "       loadgen answers URL DB SECONDS CLIENTS OUT\n"
                    "       loadgen paced URL DB SECONDS RATE CLIENTS\n"
                    "       loadgen soak URL DB MINUTES RATE CLIENTS [SERVER_PID]\n"
                    "       loadgen drain URL DB RUNS [HOOK]\n");
}

static int clamp_threads(int n)
{
    return n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : n;
}

int main(int argc, char **argv)
{
    PGconn *db;
    int rc;
    const char *mode = argc > 1 ? argv[1] : "";

    if (argc < 5) {
        usage();
        return 2;
    }
    base_url = argv[2];
    steps = getenv("LOADGEN_STEPS") ? atoi(getenv("LOADGEN_STEPS")) : 0;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    db = PQconnectdb(argv[3]);
    if (PQstatus(db) != CONNECTION_OK) {
        fprintf(stderr, "loadgen: %s", PQerrorMessage(db));
        return 1;
    }
    if ((strcmp(mode, "throughput") == 0 || strcmp(mode, "submit") == 0) && argc >= 6) {
        bool wait = strcmp(mode, "throughput") == 0;
        int clients = atoi(argv[5]);
        batch = argc >= 7 ? atoi(argv[6]) : 1;
        batch = batch < 1 ? 1 : batch > 1000 ? 1000 : batch;
        if (!wait)
            extra = ",\"run_at\":\"2999-01-01T00:00:00Z\"";
        rc = throughput(db, atoi(argv[4]), clients < 1 ? 1 : clients > 64 ? 64 : clients, wait);
    } else if (strcmp(mode, "pickup") == 0) {
        rc = pickup(db, atoi(argv[4]));
    } else if (strcmp(mode, "wrk") == 0 && argc >= 6) {
        rc = wrk(db, atof(argv[4]), clamp_threads(atoi(argv[5])));
    } else if (strcmp(mode, "bulk") == 0 && argc >= 7) {
        int per_request = atoi(argv[6]);
        rc = bulk(db, atoi(argv[4]), clamp_threads(atoi(argv[5])),
                  per_request < 1 ? 1 : per_request);
    } else if (strcmp(mode, "drain") == 0) {
        rc = drain(db, atoi(argv[4]), argc > 5 ? argv[5] : NULL);
    } else if (strcmp(mode, "lateness") == 0 && argc >= 6) {
        rc = lateness(db, atoi(argv[4]), atoi(argv[5]));
    } else if (strcmp(mode, "answers") == 0 && argc >= 7) {
        rc = answers(atof(argv[4]), clamp_threads(atoi(argv[5])), argv[6]);
    } else if (strcmp(mode, "paced") == 0 && argc >= 7) {
        double seconds = atof(argv[4]), rate = atof(argv[5]);
        rc = seconds <= 0 || rate <= 0 ? 2 : paced(db, seconds, rate, clamp_threads(atoi(argv[6])));
    } else if (strcmp(mode, "soak") == 0 && argc >= 7) {
        int minutes = atoi(argv[4]);
        double rate = atof(argv[5]);
        rc = minutes < 1 || rate <= 0 ? 2
                                      : soak(db, minutes, rate, clamp_threads(atoi(argv[6])),
                                             argc > 7 ? atoi(argv[7]) : 0);
    } else {
        usage();
        rc = 2;
    }
    PQfinish(db);
    curl_global_cleanup();
    return rc;
}
