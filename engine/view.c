/* engine/view.c — the configuration as the engine uses it (engine_internal.h
 * "views"): the running configuration held, with what the engine derives
 * from it, rebuilt when a reload swapped the configuration (config/live.h).
 * Calls only notify_body.c (the rules as JSON) in engine/. */
#include "engine/engine_internal.h"

#include "config/live.h"
#include "config/workflows.h"
#include "common/log.h"
#include "engine/notify_body.h"
#include "store/notify.h"

#include <stdlib.h>
#include <string.h>

/* The configured rate limits, and each run type's (by its index in
 * cfg->run_types; NULL for none). */
static void view_rates(struct engine_view *v)
{
    const struct config *cfg = v->cfg;

    v->nlimits = cfg->nrate_limits;
    v->limits = xcalloc(v->nlimits ? v->nlimits : 1, sizeof(*v->limits));
    for (size_t i = 0; i < v->nlimits; i++)
        v->limits[i] = (struct rate_limit){cfg->rate_limits[i].name, cfg->rate_limits[i].limit,
                                           (int64_t)cfg->rate_limits[i].per_s * 1000};
    /* An array of pointers (see .clang-tidy). NOLINTNEXTLINE(bugprone-sizeof-expression) */
    v->type_rates = xcalloc(cfg->nrun_types ? cfg->nrun_types : 1, sizeof(*v->type_rates));
    for (size_t t = 0; t < cfg->nrun_types; t++)
        for (size_t i = 0; i < v->nlimits && cfg->run_types[t].rate_limit; i++)
            if (strcmp(v->limits[i].name, cfg->run_types[t].rate_limit) == 0)
                v->type_rates[t] = &v->limits[i];
}

static struct engine_view *view_new(struct engine *e)
{
    struct engine_view *v = xcalloc(1, sizeof(*v));

    if (e->live) {
        v->generation = cfg_live_generation(e->live);
        v->cfg = cfg_live_hold(e->live);
        v->live = e->live;
    } else {
        v->cfg = e->cfg;
    }
    atomic_init(&v->refs, 1);
    view_rates(v);
    for (size_t t = 0; t < v->cfg->nrun_types && !v->workflows; t++)
        v->workflows = cfg_run_type_is_workflow(v->cfg, &v->cfg->run_types[t]);
    return v;
}

static void view_put(struct engine_view *v)
{
    if (!v || atomic_fetch_sub(&v->refs, 1) != 1)
        return;
    if (v->live)
        cfg_live_release(v->live, v->cfg);
    free(v->limits);
    free(v->type_rates);
    free(v);
}

void view_init(struct engine *e)
{
    pthread_mutex_init(&e->view_mu, NULL);
    e->view = view_new(e);
    cfg_version(e->cfg, e->fixed_version);
}

void view_version(struct engine *e, char *out)
{
    if (e->live)
        cfg_live_version(e->live, out, NULL);
    else
        memcpy(out, e->fixed_version, CFG_VERSION_LEN + 1);
}

void view_cleanup(struct engine *e)
{
    view_put(e->view);
    e->view = NULL;
    pthread_mutex_destroy(&e->view_mu);
}

void view_set_live(struct engine *e, struct cfg_live *live)
{
    struct engine_view *old = e->view;

    e->live = live;
    e->view = view_new(e);
    view_put(old);
}

const struct engine_view *view_hold(struct engine *e)
{
    struct engine_view *v, *old = NULL;

    pthread_mutex_lock(&e->view_mu);
    if (e->live && cfg_live_generation(e->live) != e->view->generation) {
        old = e->view;
        e->view = view_new(e);
    }
    v = e->view;
    atomic_fetch_add(&v->refs, 1);
    pthread_mutex_unlock(&e->view_mu);
    view_put(old);
    return v;
}

const struct engine_view *view_ref(const struct engine_view *v)
{
    atomic_fetch_add(&((struct engine_view *)(uintptr_t)v)->refs, 1);
    return v;
}

void view_release(struct engine *e, const struct engine_view *v)
{
    (void)e; /* the engine's views are freed by their last holder alone */
    view_put((struct engine_view *)(uintptr_t)v);
}

const struct rate_limit *view_rate_limit_of(const struct engine_view *v, const char *type)
{
    for (size_t t = 0; v->nlimits && t < v->cfg->nrun_types; t++)
        if (strcmp(v->cfg->run_types[t].name, type) == 0)
            return v->type_rates[t];
    return NULL;
}

enum status view_rules_sync(struct engine *e, struct db *db, struct error *err)
{
    const struct engine_view *v = view_hold(e);
    char *rules = notify_rules_json(v->cfg);
    int64_t runs = 0;
    int types = 0;
    /* Written at every new configuration, even when this process's rules
     * did not change: a replica that started with an older file may have
     * written others since (rows already as wanted are not written). */
    enum status st = store_rules_sync(db, rules, e->cfg->queue.max_chain_depth, &types, &runs, err);

    if (st == ST_OK) {
        e->rules_generation = v->generation;
        if (types > 0)
            LOG(LOG_INFO, "run type rules written types=%d active_runs_changed=%lld", types,
                (long long)runs);
    }
    free(rules);
    view_release(e, v);
    return st;
}
