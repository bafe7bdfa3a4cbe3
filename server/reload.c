/* server/reload.c — reloading the configuration in place (server/reload.h). */
#include "server/reload.h"

#include "common/log.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct reloader {
    struct reloads reloads; /* first: handlers see this */
    struct cfg_live *live;
    reload_build_fn build;
    const void *build_arg;
    struct reload_hooks hooks;
    pthread_mutex_t mu; /* one reload at a time */
};

/* The error lines of a load, kept for the answer and logged. */
static void error_line(void *arg, const char *text)
{
    json_array_append_new(arg, json_string(text));
    LOG(LOG_ERROR, "reload: invalid configuration: %s", text);
}

void reload_each_line(const char *msg, void (*line)(void *arg, const char *text), void *arg)
{
    const char *p = msg;

    while (*p) {
        size_t n = strcspn(p, "\n");
        char one[sizeof(((struct error *)0)->message)];
        if (n >= sizeof(one))
            n = sizeof(one) - 1;
        memcpy(one, p, n);
        one[n] = '\0';
        line(arg, one);
        p += strcspn(p, "\n");
        p += *p == '\n';
    }
}

static void warning_line(void *arg, const char *line)
{
    (void)arg;
    LOG(LOG_WARN, "%s", line);
}

/* The whole configuration from its sources, checked as serve checks it
 * at start-up, then as it would run: the keys only a restart applies get
 * their running value back (*changed, *restart: what differs), and only
 * then is the exposure checked, since the listen address and
 * auth.insecure_no_auth are such keys (a file that set the flag and
 * dropped every token must not leave the running address without
 * authentication). NULL after the error lines went to errors. */
static struct config *reload_read(struct reloader *r, json_t *errors, json_t **changed,
                                  json_t **restart)
{
    struct config *next = xcalloc(1, sizeof(*next));
    const struct config *cur;
    struct error err = {0};

    if (r->build(r->build_arg, next, error_line, errors) != 0) {
        cfg_cleanup(next);
        free(next);
        return NULL;
    }
    cur = cfg_live_hold(r->live);
    cfg_reload_diff(cur, next, changed, restart);
    cfg_live_release(r->live, cur);
    /* checked again as it would run: a restored value (tenant_default)
     * may not fit what the file checked against the new one */
    if (cfg_validate(next, &err) != ST_OK || cfg_check_exposure(next, &err) != ST_OK) {
        reload_each_line(err.message, error_line, errors);
        json_decref(*changed);
        json_decref(*restart);
        *changed = *restart = NULL;
        cfg_cleanup(next);
        free(next);
        return NULL;
    }
    return next;
}

void reload_log_auth(const struct config *cfg)
{
    size_t n = cfg->auth.ntokens;

    if (n == 0 && cfg->auth.insecure_no_auth)
        LOG(LOG_WARN,
            "serving without authentication (--insecure-no-auth) listen=%s: anyone who can "
            "reach it can submit, read and cancel runs; configure auth.tokens",
            cfg->listen);
    else if (n == 0)
        LOG(LOG_INFO, "no auth.tokens: serving without authentication, on loopback only listen=%s",
            cfg->listen);
    else
        LOG(LOG_INFO, "authentication by bearer token tokens=%zu open_health=%s", n,
            cfg->auth.open_health ? "true" : "false");
    if (n > 0 && cfg->auth.insecure_no_auth)
        LOG(LOG_WARN, "--insecure-no-auth has no effect: auth.tokens is configured");
}

static char *keys_text(const json_t *keys)
{
    char *s = json_dumps(keys, JSON_COMPACT);
    return s ? s : xstrdup("[]");
}

/* Logs what a reload did: the changed keys, and each one that keeps its
 * running value until a restart. */
static void reload_log(const char *why, const char *version, const json_t *changed,
                       const json_t *restart)
{
    char *c = keys_text(changed);
    size_t i;
    json_t *k;

    LOG(LOG_INFO, "configuration reloaded cause=\"%s\" version=%s changed=%s", why, version, c);
    free(c);
    json_array_foreach(restart, i, k)
        LOG(LOG_WARN,
            "configuration key %s changed but needs a restart to apply; it keeps its running value",
            json_string_value(k));
}

/* Takes the reloader's lock, waiting at most wait_ms (-1: as long as it
 * takes); false when another reload still holds it. */
static bool reload_lock(struct reloader *r, int wait_ms)
{
    struct timespec until;

    if (wait_ms < 0)
        return pthread_mutex_lock(&r->mu) == 0;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += wait_ms / 1000;
    until.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    return pthread_mutex_timedlock(&r->mu, &until) == 0;
}

static enum status reload_run(void *arg, const char *why, int wait_ms, json_t **answer,
                              json_t **errors)
{
    struct reloader *r = arg;
    json_t *errs, *changed = NULL, *restart = NULL;
    struct config *next;
    char version[CFG_VERSION_LEN + 1];

    if (!reload_lock(r, wait_ms)) {
        LOG(LOG_WARN, "configuration reload not made cause=\"%s\": another one is still running",
            why);
        return ST_CONFLICT;
    }
    errs = json_array();
    next = reload_read(r, errs, &changed, &restart);
    if (!next) {
        atomic_fetch_add(&r->reloads.failed, 1);
        LOG(LOG_ERROR,
            "configuration reload refused cause=\"%s\" errors=%zu: the running "
            "configuration stays",
            why, json_array_size(errs));
        pthread_mutex_unlock(&r->mu);
        *errors = errs;
        return ST_INVALID;
    }
    json_decref(errs);
    /* Only what applies makes a new configuration: a file that changed
     * only restart-only keys leaves the running one (and loaded_at) as is. */
    if (json_array_size(changed) > json_array_size(restart)) {
        log_set_level(next->log_level);
        if (cfg_keys_listed(changed, "auth.tokens") || cfg_keys_listed(changed, "auth.open_health"))
            reload_log_auth(next);
        cfg_warnings(next, warning_line, NULL);
        if (r->hooks.before_swap)
            r->hooks.before_swap(r->hooks.arg, next);
        cfg_live_swap(r->live, next);
        if (r->hooks.after_swap)
            r->hooks.after_swap(r->hooks.arg);
    } else {
        cfg_cleanup(next);
        free(next);
    }
    cfg_live_version(r->live, version, NULL);
    reload_log(why, version, changed, restart);
    atomic_fetch_add(&r->reloads.succeeded, 1);
    atomic_store(&r->reloads.last_success_ms, clock_wall_ms());
    pthread_mutex_unlock(&r->mu);
    *answer = json_pack("{s:s, s:o, s:o}", "config_version", version, "changed", changed,
                        "restart_required", restart);
    return ST_OK;
}

struct reloader *reloader_new(struct cfg_live *live, reload_build_fn build, const void *build_arg)
{
    struct reloader *r = xcalloc(1, sizeof(*r));

    r->live = live;
    r->build = build;
    r->build_arg = build_arg;
    r->reloads.run = reload_run;
    r->reloads.arg = r;
    if (pthread_mutex_init(&r->mu, NULL) != 0)
        abort();
    return r;
}

void reloader_set_hooks(struct reloader *r, const struct reload_hooks *hooks)
{
    r->hooks = *hooks;
}

struct reloads *reloader_reloads(struct reloader *r)
{
    return &r->reloads;
}

void reloader_free(struct reloader *r)
{
    if (!r)
        return;
    pthread_mutex_destroy(&r->mu);
    free(r);
}
