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
 *
 * Output is one "key=value" line per figure, for bench/run.sh. */
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
static double *submit_ms;      /* one per request, by client: [client * runs_per_client + i] */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static size_t sink(char *p, size_t s, size_t n, void *arg)
{
    (void)p;
    (void)arg;
    return s * n;
}

static long request(CURL *c, const char *method, const char *path, const char *body)
{
    char url[512];
    long code = 0;
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");

    snprintf(url, sizeof(url), "%s%s", base_url, path);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    if (!body)
        curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_slist_free_all(h);
    return code;
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
                                "\"steps\":0,\"n\":\"%ld-%d-%d-%d\"}%s}",
                                k ? "," : "", id, i, k, (int)getpid(), extra);
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
    while (wait && completed_since(db, since) < runs) {
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

int main(int argc, char **argv)
{
    PGconn *db;
    int rc;

    if (argc < 5) {
        fprintf(stderr, "usage: loadgen throughput|submit URL DB RUNS CLIENTS [BATCH] | pickup URL "
                        "DB SAMPLES\n");
        return 2;
    }
    base_url = argv[2];
    curl_global_init(CURL_GLOBAL_DEFAULT);
    db = PQconnectdb(argv[3]);
    if (PQstatus(db) != CONNECTION_OK) {
        fprintf(stderr, "loadgen: %s", PQerrorMessage(db));
        return 1;
    }
    if ((strcmp(argv[1], "throughput") == 0 || strcmp(argv[1], "submit") == 0) && argc >= 6) {
        bool wait = strcmp(argv[1], "throughput") == 0;
        int clients = atoi(argv[5]);
        batch = argc >= 7 ? atoi(argv[6]) : 1;
        batch = batch < 1 ? 1 : batch > 1000 ? 1000 : batch;
        if (!wait)
            extra = ",\"run_at\":\"2999-01-01T00:00:00Z\"";
        rc = throughput(db, atoi(argv[4]), clients < 1 ? 1 : clients > 64 ? 64 : clients, wait);
    } else {
        rc = pickup(db, atoi(argv[4]));
    }
    PQfinish(db);
    curl_global_cleanup();
    return rc;
}
