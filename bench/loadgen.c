/* bench/loadgen.c — end-to-end figures for a running opsrun:
 *
 *   loadgen throughput URL DBCONNINFO RUNS CLIENTS
 *       submits RUNS no-op demo runs from CLIENTS threads (keep-alive), waits
 *       until all are completed, prints runs/s from first submit to last
 *       completion (completed_at in the database).
 *   loadgen pickup URL DBCONNINFO SAMPLES
 *       one run at a time on an otherwise idle service: started_at -
 *       created_at (both stamped by PostgreSQL) p50/p99 in ms, and as a
 *       baseline in the same run the p50/p99 of a bare GET /livez round trip.
 *   loadgen lateness URL DBCONNINFO SAMPLES
 *       how late due runs start: SAMPLES delayed runs (run_at spread over
 *       3 s, all submitted before the first is due), then SAMPLES runs whose
 *       first attempt fails (a retry after the run type's backoff), one at a
 *       time on an otherwise idle service; for each, the start of the attempt that was due minus
 * its run_at (both stamped by PostgreSQL), p50/p99/max in ms, delayed runs and retries apart.
 *
 * Output is one "key=value" line per figure, for bench/run.sh. */
#include <curl/curl.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *base_url;
static int runs_per_client;

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

static void *client(void *arg)
{
    CURL *c = curl_easy_init();
    long id = (long)arg, failed = 0;
    char body[256];

    for (int i = 0; i < runs_per_client; i++) {
        snprintf(body, sizeof(body),
                 "{\"alert_type\":\"demo\",\"data\":{\"duration_ms\":0,\"steps\":0,"
                 "\"n\":\"%ld-%d-%d\"}}",
                 id, i, (int)getpid());
        if (request(c, "POST", "/alerts", body) != 202)
            failed++;
    }
    curl_easy_cleanup(c);
    return (void *)failed;
}

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

static int throughput(PGconn *db, int runs, int clients)
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

    runs_per_client = runs / clients;
    runs = runs_per_client * clients;
    t0 = now_s();
    for (long i = 0; i < clients; i++)
        pthread_create(&th[i], NULL, client, (void *)i);
    for (int i = 0; i < clients; i++) {
        void *f;
        pthread_join(th[i], &f);
        failed += (long)f;
    }
    t_sub = now_s();
    while (completed_since(db, since) < runs) {
        if (now_s() - t0 > 600) {
            fprintf(stderr, "loadgen: runs did not complete within 600 s\n");
            return 1;
        }
        usleep(20000);
    }
    t_done = now_s();
    printf("runs=%d clients=%d failed_submits=%ld\n", runs, clients, failed);
    printf("submit_per_s=%.0f\n", runs / (t_sub - t0));
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

/* Lateness figures of the runs whose id starts with prefix: the start of
 * attempt `attempt` (its "attempt N started" event) minus the run's run_at. */
static int lateness_report(PGconn *db, const char *name, const char *prefix, int attempt,
                           int samples)
{
    char sql[512];
    double *lat = calloc((size_t)samples, sizeof(double));
    PGresult *r;
    int n;

    snprintf(sql, sizeof(sql),
             "SELECT extract(epoch FROM e.created_at - r.run_at) * 1000 FROM runs r "
             "JOIN run_events e ON e.tenant = r.tenant AND e.run_id = r.id "
             "WHERE r.id LIKE '%s%%' AND e.message LIKE 'attempt %d started%%'",
             prefix, attempt);
    r = PQexec(db, sql);
    n = PQresultStatus(r) == PGRES_TUPLES_OK ? PQntuples(r) : -1;
    if (n != samples) {
        fprintf(stderr, "loadgen: %d of %d %s runs started their due attempt %s\n", n, samples,
                name, PQerrorMessage(db));
        PQclear(r);
        free(lat);
        return 1;
    }
    for (int i = 0; i < n; i++)
        lat[i] = atof(PQgetvalue(r, i, 0));
    PQclear(r);
    printf("%s_late_p50_ms=%.2f\n%s_late_p99_ms=%.2f\n%s_late_max_ms=%.2f\n", name,
           pct(lat, n, 0.5), name, pct(lat, n, 0.99), name, pct(lat, n, 1.0));
    free(lat);
    return 0;
}

/* Waits up to 60 s until `want` runs whose id starts with prefix completed. */
static int wait_completed(PGconn *db, const char *prefix, int want)
{
    char sql[256];

    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM runs WHERE status = 'completed' AND id LIKE '%s%%'", prefix);
    for (int waited = 0; waited < 6000; waited++) {
        PGresult *r = PQexec(db, sql);
        long long done = PQresultStatus(r) == PGRES_TUPLES_OK ? atoll(PQgetvalue(r, 0, 0)) : -1;
        PQclear(r);
        if (done >= want)
            return 0;
        usleep(10000);
    }
    fprintf(stderr, "loadgen: runs %s* did not complete within 60 s\n", prefix);
    return 1;
}

/* Delayed runs, all submitted before the first is due, so that nothing but
 * the engine's own timing starts them; then retries one at a time on an
 * otherwise idle service, each after the previous one completed. */
static int lateness(PGconn *db, int samples)
{
    CURL *c = curl_easy_init();
    char body[512], prefix[2][64], at_text[64];
    struct timespec ts;
    long long base_ms;
    int pid = (int)getpid();

    snprintf(prefix[0], sizeof(prefix[0]), "late-delayed-%d-", pid);
    snprintf(prefix[1], sizeof(prefix[1]), "late-retry-%d-", pid);
    clock_gettime(CLOCK_REALTIME, &ts);
    base_ms = (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + 1000 + samples * 5;
    for (int i = 0; i < samples; i++) {
        long long at = base_ms + (i * 7919) % 3000; /* over 3 s, not in submission order */
        time_t secs = (time_t)(at / 1000);
        struct tm tm;
        gmtime_r(&secs, &tm);
        strftime(at_text, sizeof(at_text), "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(body, sizeof(body),
                 "{\"alert_type\":\"demo\",\"run_id\":\"%s%d\",\"run_at\":\"%s.%03lldZ\","
                 "\"data\":{\"duration_ms\":0,\"steps\":0}}",
                 prefix[0], i, at_text, at % 1000);
        if (request(c, "POST", "/alerts", body) != 202)
            return 1;
    }
    if (wait_completed(db, prefix[0], samples) != 0)
        return 1;
    for (int i = 0; i < samples; i++) {
        char one[96];
        snprintf(body, sizeof(body),
                 "{\"alert_type\":\"demo\",\"run_id\":\"%s%d\",\"data\":{\"duration_ms\":0,"
                 "\"steps\":0,\"fail\":\"first:1\"}}",
                 prefix[1], i);
        if (request(c, "POST", "/alerts", body) != 202)
            return 1;
        snprintf(one, sizeof(one), "%s%d", prefix[1], i);
        if (wait_completed(db, one, 1) != 0)
            return 1;
    }
    curl_easy_cleanup(c);
    if (lateness_report(db, "delayed", prefix[0], 1, samples) != 0 ||
        lateness_report(db, "retry", prefix[1], 2, samples) != 0)
        return 1;
    return 0;
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

static int drain(PGconn *db, int runs)
{
    char sql[1024], prefix[64];
    double t0, rate;

    snprintf(prefix, sizeof(prefix), "drain-%d-", (int)getpid());
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
    /* The clock starts when the engine is told; the runs are all due. */
    t0 = sql_double(db, "SELECT extract(epoch FROM clock_timestamp()) FROM "
                        "pg_notify('opsrun_queue', '')");
    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM runs WHERE status = 'completed' AND completed_at >= "
             "to_timestamp(%.6f) AND id LIKE '%s%%'",
             t0, prefix);
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

int main(int argc, char **argv)
{
    PGconn *db;
    int rc;

    if (argc < 5) {
        fprintf(stderr, "usage: loadgen throughput URL DB RUNS CLIENTS | pickup URL DB SAMPLES | "
                        "lateness URL DB SAMPLES | drain URL DB RUNS\n");
        return 2;
    }
    base_url = argv[2];
    curl_global_init(CURL_GLOBAL_DEFAULT);
    db = PQconnectdb(argv[3]);
    if (PQstatus(db) != CONNECTION_OK) {
        fprintf(stderr, "loadgen: %s", PQerrorMessage(db));
        return 1;
    }
    if (strcmp(argv[1], "throughput") == 0 && argc >= 6) {
        int clients = atoi(argv[5]);
        rc = throughput(db, atoi(argv[4]), clients < 1 ? 1 : clients > 64 ? 64 : clients);
    } else if (strcmp(argv[1], "drain") == 0) {
        rc = drain(db, atoi(argv[4]));
    } else if (strcmp(argv[1], "lateness") == 0) {
        rc = lateness(db, atoi(argv[4]));
    } else {
        rc = pickup(db, atoi(argv[4]));
    }
    PQfinish(db);
    curl_global_cleanup();
    return rc;
}
