/* bench/bulkbench.c — what a bulk cancel of many runs costs the rest of the
 * queue, measured beside the same queue without one:
 *
 *   bulkbench URL DBCONNINFO ROUNDS HELD RATE CLIENTS WINDOW_S
 *
 * A steady load runs throughout: RATE no-op demo runs/s, paced, from
 * CLIENTS threads (keep-alive), each submission's round trip timed. Each
 * of ROUNDS rounds inserts HELD runs of type "held" straight into the
 * table (due in 2999, so no worker takes them), lets the load settle for a
 * second, then measures two windows in a row: the baseline, WINDOW_S
 * seconds of the load alone; and the bulk, the load while one
 * POST /runs/cancel {"filter": {"type": "held"}} acts on the HELD runs
 * (the window lasts as long as that request). Each submission is counted
 * in the window it was sent in, and its run carries the window in its
 * input ("p": 1 baseline, 2 bulk).
 *
 * Figures, per window over all rounds: the submission's round trip
 * p50/p99/max (ms); the pickup, started_at - created_at (both stamped by
 * PostgreSQL: the claim side of the queue), p50/p99/max; the claim
 * statement's own time (the server's opsrun_claim_duration_seconds
 * histogram, read before and after each window) as the p99's bucket; and
 * for the bulk, its time and runs/s per round. One "key=value" per line. */
#include <curl/curl.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_SAMPLES 400000
#define NBUCKETS 16

static const char *base_url;
static double rate_per_client;
static _Atomic int phase; /* 0 settle, 1 baseline, 2 bulk */
static _Atomic bool stopping;

struct sample {
    double ms;
    int phase;
};
static struct sample *samples;
static _Atomic long nsamples;
static _Atomic long seq;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_until(double t)
{
    double d = t - now_s();

    if (d > 0) {
        struct timespec ts = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
        nanosleep(&ts, NULL);
    }
}

struct buf {
    char *p;
    size_t len, cap;
};

static size_t sink(char *p, size_t s, size_t n, void *arg)
{
    struct buf *b = arg;
    size_t k = s * n;

    if (b->len + k + 1 > b->cap) {
        b->cap = (b->len + k + 1) * 2;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->len, p, k);
    b->len += k;
    b->p[b->len] = '\0';
    return k;
}

/* One request on curl handle c; the body into *b (reset first). Returns the
 * HTTP status, 0 on a transport failure. */
static long request(CURL *c, const char *method, const char *path, const char *body, struct buf *b,
                    long timeout_ms)
{
    char url[512];
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    long status = 0;

    b->len = 0;
    if (b->p)
        b->p[0] = '\0';
    snprintf(url, sizeof(url), "%s%s", base_url, path);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    if (!body)
        curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, b);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(h);
    return status;
}

/* One client: paced submissions until stopping. */
static void *client(void *arg)
{
    CURL *c = curl_easy_init();
    struct buf b = {0};
    double next = now_s() + (double)(long)arg / (rate_per_client * 64);

    while (!atomic_load(&stopping)) {
        char body[200];
        int p = atomic_load(&phase);
        double t0;
        long st, i;

        sleep_until(next);
        next += 1.0 / rate_per_client;
        snprintf(body, sizeof(body),
                 "{\"alert_type\": \"demo\", \"data\": {\"duration_ms\": 0, \"steps\": 1, "
                 "\"n\": %ld, \"p\": %d}}",
                 atomic_fetch_add(&seq, 1), p);
        t0 = now_s();
        st = request(c, "POST", "/alerts", body, &b, 30000);
        i = atomic_fetch_add(&nsamples, 1);
        if (st != 202)
            fprintf(stderr, "bulkbench: POST /alerts answered %ld\n", st);
        if (i < MAX_SAMPLES)
            samples[i] = (struct sample){(now_s() - t0) * 1000, p};
    }
    free(b.p);
    curl_easy_cleanup(c);
    return NULL;
}

/* ---- the claim histogram ---------------------------------------------------- */

struct hist {
    int n;
    double le[NBUCKETS];
    double count[NBUCKETS]; /* cumulative, as exposed */
};

static void hist_read(CURL *c, struct hist *h)
{
    struct buf b = {0};
    const char *key = "opsrun_claim_duration_seconds_bucket{le=\"";

    memset(h, 0, sizeof(*h));
    if (request(c, "GET", "/metrics", NULL, &b, 10000) == 200)
        for (char *p = strstr(b.p, key); p && h->n < NBUCKETS; p = strstr(p + 1, key)) {
            char *q = p + strlen(key);
            h->le[h->n] = strncmp(q, "+Inf", 4) == 0 ? 1e9 : strtod(q, NULL);
            h->count[h->n] = strtod(strstr(q, "} ") + 2, NULL);
            h->n++;
        }
    free(b.p);
}

/* Adds after - before into acc. */
static void hist_add(struct hist *acc, const struct hist *before, const struct hist *after)
{
    acc->n = after->n;
    for (int i = 0; i < after->n; i++) {
        acc->le[i] = after->le[i];
        acc->count[i] += after->count[i] - (i < before->n ? before->count[i] : 0);
    }
}

static void hist_print(const char *name, const struct hist *h)
{
    double total = h->n ? h->count[h->n - 1] : 0;

    printf("%s_claims=%.0f\n", name, total);
    for (int i = 0; i < h->n && total > 0; i++)
        if (h->count[i] >= 0.99 * total) {
            printf("%s_claim_p99_le_ms=%g\n", name, h->le[i] * 1000);
            return;
        }
}

/* ---- figures -------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void submit_figures(const char *name, int p)
{
    long n = atomic_load(&nsamples), k = 0;
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));

    for (long i = 0; i < n && i < MAX_SAMPLES; i++)
        if (samples[i].phase == p)
            v[k++] = samples[i].ms;
    qsort(v, (size_t)k, sizeof(*v), cmp_double);
    printf("%s_submits=%ld\n", name, k);
    if (k)
        printf("%s_submit_p50_ms=%.2f\n%s_submit_p99_ms=%.2f\n%s_submit_max_ms=%.2f\n", name,
               v[k / 2], name, v[(long)((double)k * 0.99)], name, v[k - 1]);
    free(v);
}

static PGresult *sql(PGconn *db, const char *q)
{
    PGresult *r = PQexec(db, q);

    if (PQresultStatus(r) != PGRES_TUPLES_OK && PQresultStatus(r) != PGRES_COMMAND_OK) {
        fprintf(stderr, "bulkbench: %s: %s", q, PQerrorMessage(db));
        exit(1);
    }
    return r;
}

static void pickup_figures(PGconn *db)
{
    PGresult *r;

    /* every submitted run started before its pickup is read */
    for (int i = 0; i < 600; i++) {
        r = sql(db, "SELECT count(*) FROM runs WHERE type = 'demo' AND status <> 'completed'");
        bool done = strcmp(PQgetvalue(r, 0, 0), "0") == 0;
        PQclear(r);
        if (done)
            break;
        usleep(100000);
    }
    r = sql(db, "SELECT input->>'p', count(*), "
                "percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), "
                "percentile_cont(0.99) WITHIN GROUP (ORDER BY ms), max(ms) FROM (SELECT input, "
                "extract(epoch FROM started_at - created_at) * 1000 AS ms FROM runs "
                "WHERE type = 'demo' AND input->>'p' IN ('1', '2')) x GROUP BY 1 ORDER BY 1");
    for (int i = 0; i < PQntuples(r); i++) {
        const char *name = strcmp(PQgetvalue(r, i, 0), "1") == 0 ? "baseline" : "bulk";
        printf("%s_pickups=%s\n%s_pickup_p50_ms=%.2f\n%s_pickup_p99_ms=%.2f\n"
               "%s_pickup_max_ms=%.2f\n",
               name, PQgetvalue(r, i, 1), name, atof(PQgetvalue(r, i, 2)), name,
               atof(PQgetvalue(r, i, 3)), name, atof(PQgetvalue(r, i, 4)));
    }
    PQclear(r);
}

/* ---- the rounds ----------------------------------------------------------------- */

static void insert_held(PGconn *db, int round, int held)
{
    char q[512];

    snprintf(q, sizeof(q),
             "INSERT INTO runs (tenant, id, type, max_attempts, timeout_s, input, identity_hash, "
             "request_hash, run_at) SELECT 'default', 'held-%d-' || i, 'held', 1, 900, '{}', "
             "'held-%d-' || i, 'x', '2999-01-01' FROM generate_series(1, %d) AS i",
             round, round, held);
    PQclear(sql(db, q));
    PQclear(sql(db, "ANALYZE runs"));
}

/* One round: settle, the baseline window, the bulk window. */
static void round_run(CURL *c, PGconn *db, int round, int held, double window_s, struct hist *base,
                      struct hist *bulk)
{
    struct hist h0, h1, h2;
    struct buf b = {0};
    double t0, t1;
    long st;

    insert_held(db, round, held);
    atomic_store(&phase, 0);
    sleep_until(now_s() + 1);
    hist_read(c, &h0);
    atomic_store(&phase, 1);
    sleep_until(now_s() + window_s);
    hist_read(c, &h1);
    atomic_store(&phase, 2);
    t0 = now_s();
    st = request(c, "POST", "/runs/cancel", "{\"filter\": {\"type\": \"held\"}, \"limit\": 100000}",
                 &b, 600000);
    t1 = now_s();
    atomic_store(&phase, 0);
    hist_read(c, &h2);
    hist_add(base, &h0, &h1);
    hist_add(bulk, &h1, &h2);
    printf("round%d_bulk_status=%ld\nround%d_bulk_s=%.3f\nround%d_bulk_runs_per_s=%.0f\n", round,
           st, round, t1 - t0, round, held / (t1 - t0));
    if (st != 200)
        fprintf(stderr, "bulkbench: POST /runs/cancel answered %ld: %s\n", st, b.p ? b.p : "");
    fflush(stdout);
    free(b.p);
}

int main(int argc, char **argv)
{
    struct hist base = {0}, bulk = {0};
    pthread_t th[64];
    PGconn *db;
    CURL *c;
    int rounds, held, clients;
    double window_s;

    if (argc != 8) {
        fprintf(stderr, "usage: bulkbench URL DBCONNINFO ROUNDS HELD RATE CLIENTS WINDOW_S\n");
        return 2;
    }
    base_url = argv[1];
    rounds = atoi(argv[3]);
    held = atoi(argv[4]);
    clients = atoi(argv[6]);
    window_s = atof(argv[7]);
    if (clients < 1 || clients > 64 || rounds < 1 || held < 1)
        return 2;
    rate_per_client = atof(argv[5]) / clients;
    db = PQconnectdb(argv[2]);
    if (PQstatus(db) != CONNECTION_OK) {
        fprintf(stderr, "bulkbench: %s", PQerrorMessage(db));
        return 1;
    }
    samples = calloc(MAX_SAMPLES, sizeof(*samples));
    curl_global_init(CURL_GLOBAL_ALL);
    c = curl_easy_init();
    for (long i = 0; i < clients; i++)
        pthread_create(&th[i], NULL, client, (void *)i);
    for (int r = 1; r <= rounds; r++)
        round_run(c, db, r, held, window_s, &base, &bulk);
    atomic_store(&stopping, true);
    for (int i = 0; i < clients; i++)
        pthread_join(th[i], NULL);
    submit_figures("baseline", 1);
    submit_figures("bulk", 2);
    pickup_figures(db);
    hist_print("baseline", &base);
    hist_print("bulk", &bulk);
    curl_easy_cleanup(c);
    curl_global_cleanup();
    PQfinish(db);
    free(samples);
    return 0;
}
