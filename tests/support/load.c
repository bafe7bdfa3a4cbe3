/* tests/support/load.c — see load.h. */
#include "load.h"

#include "harness.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOAD_CLIENTS_MAX 16

struct answer {
    char id[48];
    long long at_ms;
};

struct answers {
    struct answer *v;
    int n, cap;
};

struct client {
    struct th_load *l;
    int no;
    pthread_t thread;
    char busy_url[96]; /* the server of the request under way, "" between requests */
};

struct th_load {
    char prefix[32];
    int nclients, run_ms, pause_ms;
    struct client clients[LOAD_CLIENTS_MAX];
    atomic_bool stop;
    pthread_mutex_t mu;
    char targets[TH_LOAD_SERVERS][96];
    int ntargets, next;
    char seen[TH_LOAD_SERVERS][96]; /* every server ever named, for acked_by */
    int nseen, acked_by[TH_LOAD_SERVERS];
    struct answers acked, refused;
    int bad;
    char refusal[160], bad_example[512];
};

static void answers_add(struct answers *a, const char *id, long long at_ms)
{
    if (a->n == a->cap) {
        a->cap = a->cap ? 2 * a->cap : 256;
        a->v = realloc(a->v, (size_t)a->cap * sizeof(*a->v));
        ck_assert_ptr_nonnull(a->v);
    }
    snprintf(a->v[a->n].id, sizeof(a->v[a->n].id), "%s", id);
    a->v[a->n++].at_ms = at_ms;
}

static int seen_index(struct th_load *l, const char *url)
{
    for (int i = 0; i < l->nseen; i++)
        if (strcmp(l->seen[i], url) == 0)
            return i;
    return -1;
}

/* The next server in turn, copied into url and marked busy; false when
 * there is none. */
static bool client_pick(struct client *c, char *url, size_t cap)
{
    struct th_load *l = c->l;
    bool ok;

    pthread_mutex_lock(&l->mu);
    ok = l->ntargets > 0;
    if (ok) {
        snprintf(url, cap, "%s", l->targets[l->next++ % l->ntargets]);
        snprintf(c->busy_url, sizeof(c->busy_url), "%s", url);
    }
    pthread_mutex_unlock(&l->mu);
    return ok;
}

static bool is_refusal(const struct th_resp *r)
{
    return r->status == 503 && strncmp(r->content_type, "application/problem+json", 24) == 0 &&
           r->json && th_ji(r->json, "status") == 503 && th_streq(r->retry_after, "1");
}

static void client_note(struct client *c, const char *url, const char *id, bool ok,
                        const struct th_resp *r)
{
    struct th_load *l = c->l;
    long long now;
    int i;

    pthread_mutex_lock(&l->mu);
    now = th_now_ms(); /* under the lock: the answers stay in time order */
    c->busy_url[0] = '\0';
    if (ok && r->status == 202) {
        answers_add(&l->acked, id, now);
        if ((i = seen_index(l, url)) >= 0)
            l->acked_by[i]++;
    } else if (ok && is_refusal(r)) {
        answers_add(&l->refused, id, now);
        snprintf(l->refusal, sizeof(l->refusal), "%s",
                 th_js(r->json, "reason") ? th_js(r->json, "reason") : "(no reason)");
    } else {
        l->bad++;
        snprintf(l->bad_example, sizeof(l->bad_example), "%s: %ld %s", url, ok ? r->status : -1L,
                 ok && r->body ? r->body : "(transport failure)");
    }
    pthread_mutex_unlock(&l->mu);
}

static void *client_main(void *arg)
{
    struct client *c = arg;
    struct th_load *l = c->l;

    for (int n = 0; !atomic_load(&l->stop);) {
        char base[96], url[128], id[48], body[192];
        struct th_resp r;
        bool ok;

        if (!client_pick(c, base, sizeof(base))) {
            th_sleep_ms(10);
            continue;
        }
        snprintf(id, sizeof(id), "%s-%d-%d", l->prefix, c->no, n++);
        snprintf(url, sizeof(url), "%s/alerts", base);
        th_load_body(l, id, body, sizeof(body));
        ok = th_http("POST", url, "application/json", body, &r);
        client_note(c, base, id, ok, &r);
        th_resp_free(&r);
        th_sleep_ms(l->pause_ms);
    }
    return NULL;
}

struct th_load *th_load_start(const char *prefix, int clients, int run_ms, int pause_ms)
{
    struct th_load *l = calloc(1, sizeof(*l));

    ck_assert_ptr_nonnull(l);
    ck_assert_int_le(clients, LOAD_CLIENTS_MAX);
    snprintf(l->prefix, sizeof(l->prefix), "%s", prefix);
    l->nclients = clients;
    l->run_ms = run_ms;
    l->pause_ms = pause_ms;
    pthread_mutex_init(&l->mu, NULL);
    for (int i = 0; i < clients; i++) {
        l->clients[i].l = l;
        l->clients[i].no = i;
        ck_assert_int_eq(pthread_create(&l->clients[i].thread, NULL, client_main, &l->clients[i]),
                         0);
    }
    return l;
}

/* Whether a client is under way to a server that is not a target. */
static bool busy_elsewhere(struct th_load *l)
{
    for (int i = 0; i < l->nclients; i++) {
        bool target = !l->clients[i].busy_url[0];
        for (int t = 0; !target && t < l->ntargets; t++)
            target = strcmp(l->clients[i].busy_url, l->targets[t]) == 0;
        if (!target)
            return true;
    }
    return false;
}

void th_load_targets(struct th_load *l, const char *const *urls, int n)
{
    bool busy = true;

    ck_assert_int_le(n, TH_LOAD_SERVERS);
    pthread_mutex_lock(&l->mu);
    l->ntargets = n;
    for (int i = 0; i < n; i++) {
        snprintf(l->targets[i], sizeof(l->targets[i]), "%s", urls[i]);
        if (seen_index(l, urls[i]) < 0) {
            ck_assert_int_lt(l->nseen, TH_LOAD_SERVERS);
            snprintf(l->seen[l->nseen++], sizeof(l->seen[0]), "%s", urls[i]);
        }
    }
    pthread_mutex_unlock(&l->mu);
    for (long long until = th_now_ms() + 35000; busy && th_now_ms() < until; th_sleep_ms(5)) {
        pthread_mutex_lock(&l->mu);
        busy = busy_elsewhere(l);
        pthread_mutex_unlock(&l->mu);
    }
    ck_assert_msg(!busy, "a request to a server taken out of the load did not end in 35 s");
}

void th_load_stop(struct th_load *l)
{
    atomic_store(&l->stop, true);
    for (int i = 0; i < l->nclients; i++)
        pthread_join(l->clients[i].thread, NULL);
    l->nclients = 0;
}

void th_load_free(struct th_load *l)
{
    if (!l)
        return;
    if (l->nclients)
        th_load_stop(l);
    free(l->acked.v);
    free(l->refused.v);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

void th_load_tally(struct th_load *l, struct th_load_tally *t)
{
    pthread_mutex_lock(&l->mu);
    t->acked = l->acked.n;
    t->refused = l->refused.n;
    t->bad = l->bad;
    snprintf(t->refusal, sizeof(t->refusal), "%s", l->refusal);
    snprintf(t->bad_example, sizeof(t->bad_example), "%s", l->bad_example);
    pthread_mutex_unlock(&l->mu);
}

int th_load_acked_by(struct th_load *l, const char *url)
{
    int i, n;

    pthread_mutex_lock(&l->mu);
    i = seen_index(l, url);
    n = i >= 0 ? l->acked_by[i] : 0;
    pthread_mutex_unlock(&l->mu);
    return n;
}

const char *th_load_acked_id(const struct th_load *l, int i)
{
    return l->acked.v[i].id;
}

const char *th_load_refused_id(const struct th_load *l, int i)
{
    return l->refused.v[i].id;
}

void th_load_body(const struct th_load *l, const char *id, char *body, size_t cap)
{
    snprintf(body, cap, "{\"alert_type\":\"demo\",\"run_id\":\"%s\",\"data\":{\"duration_ms\":%d}}",
             id, l->run_ms);
}

long long th_load_first_ack_after(struct th_load *l, long long since_ms)
{
    long long first = 0;

    pthread_mutex_lock(&l->mu);
    for (int i = l->acked.n - 1; i >= 0 && l->acked.v[i].at_ms >= since_ms; i--)
        first = l->acked.v[i].at_ms;
    pthread_mutex_unlock(&l->mu);
    return first;
}
