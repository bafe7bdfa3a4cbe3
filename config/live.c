/* config/live.c — the running configuration, replaced whole on a reload
 * (config/live.h): the holder, the version, and what a reload changes. */
#include "config/live.h"

#include "common/digest.h"
#include "config/config_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* One configuration and its holders. cfg comes first: a held struct
 * config * is the snap's address. */
struct snap {
    struct config cfg;
    atomic_long refs; /* holders, the holder's current slot included */
    char version[CFG_VERSION_LEN + 1];
    int64_t loaded_at_ms;
};

struct cfg_live {
    pthread_mutex_t mu; /* held for a pointer's copy and a count, nothing more */
    struct snap *cur;
    _Atomic uint64_t generation;
};

void cfg_version(const struct config *cfg, char *out)
{
    json_t *j = cfg_to_json(cfg);
    char *text, hex[65];

    /* what tells one replica from another, not what it runs */
    if (j) {
        json_object_del(j, "sources");
        json_object_del(j, "listen");
        json_object_del(j, "config_path");
    }
    text = j ? json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    sha256_hex(text ? text : "", text ? strlen(text) : 0, hex);
    memcpy(out, hex, CFG_VERSION_LEN);
    out[CFG_VERSION_LEN] = '\0';
    free(text);
    json_decref(j);
}

static struct snap *snap_of(struct config *cfg)
{
    struct snap *s = xcalloc(1, sizeof(*s));

    s->cfg = *cfg; /* the fields move: cfg's allocations are the snap's now */
    free(cfg);
    atomic_init(&s->refs, 1);
    cfg_version(&s->cfg, s->version);
    s->loaded_at_ms = clock_wall_ms();
    return s;
}

static void snap_put(struct snap *s)
{
    if (s && atomic_fetch_sub(&s->refs, 1) == 1) {
        cfg_cleanup(&s->cfg);
        free(s);
    }
}

struct cfg_live *cfg_live_new(struct config *first)
{
    struct cfg_live *l = xcalloc(1, sizeof(*l));

    if (pthread_mutex_init(&l->mu, NULL) != 0)
        abort();
    l->cur = snap_of(first);
    atomic_init(&l->generation, 1);
    return l;
}

void cfg_live_free(struct cfg_live *l)
{
    if (!l)
        return;
    snap_put(l->cur);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

const struct config *cfg_live_hold(struct cfg_live *l)
{
    struct snap *s;

    if (!l)
        return NULL;
    pthread_mutex_lock(&l->mu);
    s = l->cur;
    atomic_fetch_add(&s->refs, 1);
    pthread_mutex_unlock(&l->mu);
    return &s->cfg;
}

void cfg_live_release(struct cfg_live *l, const struct config *cfg)
{
    (void)l;
    /* The holder handed out &snap->cfg, the snap's first member. */
    snap_put((struct snap *)(uintptr_t)cfg);
}

void cfg_live_swap(struct cfg_live *l, struct config *next)
{
    struct snap *s = snap_of(next), *old;

    pthread_mutex_lock(&l->mu);
    old = l->cur;
    l->cur = s;
    atomic_fetch_add(&l->generation, 1);
    pthread_mutex_unlock(&l->mu);
    snap_put(old);
}

void cfg_live_version(struct cfg_live *l, char *out, int64_t *loaded_at_ms)
{
    pthread_mutex_lock(&l->mu);
    memcpy(out, l->cur->version, CFG_VERSION_LEN + 1);
    if (loaded_at_ms)
        *loaded_at_ms = l->cur->loaded_at_ms;
    pthread_mutex_unlock(&l->mu);
}

uint64_t cfg_live_generation(struct cfg_live *l)
{
    return atomic_load(&l->generation);
}

/* ---- what a reload changes ----------------------------------------------- */

/* The sections a reload applies whole: every key under them. */
static const char *const live_sections[] = {
    "run_types", "routes",  "schedules",   "rate_limits",
    "notifiers", "tenants", "auth.tokens", "http.cors_origins",
};

static bool path_live(const char *path)
{
    const struct opt *o = opt_find(cfg_opts, cfg_nopts, path);
    size_t top = strcspn(path, ".");

    if (o)
        return (o->flags & OPT_LIVE) != 0;
    for (size_t i = 0; i < ARRAY_LEN(live_sections); i++) {
        const char *s = live_sections[i];
        if (strcmp(path, s) == 0 || (strlen(s) == top && strncmp(path, s, top) == 0))
            return true;
    }
    return false;
}

/* A changed key: listed, and when only a restart applies it, listed there
 * too and given back its running value. */
static void note_change(const struct config *cur, struct config *next, const char *path,
                        json_t *changed, json_t *restart)
{
    const struct opt *o;

    json_array_append_new(changed, json_string(path));
    if (path_live(path))
        return;
    json_array_append_new(restart, json_string(path));
    o = opt_find(cfg_opts, cfg_nopts, path);
    if (o) {
        opt_copy(next, cur, o);
        next->sources[o - cfg_opts] = cur->sources[o - cfg_opts];
    }
}

/* The keys of a and b (objects; either may be missing one) compared one
 * by one, under prefix (NULL: the top level, where objects are walked one
 * level down). */
static void diff_objects(const struct config *cur, struct config *next, const char *prefix,
                         json_t *a, json_t *b, json_t *changed, json_t *restart)
{
    json_t *keys = json_object();
    const char *k;
    json_t *v;

    json_object_foreach(a, k, v) json_object_set(keys, k, json_null());
    json_object_foreach(b, k, v) json_object_set(keys, k, json_null());
    json_object_foreach(keys, k, v)
    {
        json_t *x = json_object_get(a, k), *y = json_object_get(b, k);
        char path[KEY_MAX * 2];
        if (prefix)
            xsnprintf(path, sizeof(path), "%s.%s", prefix, k);
        else
            xsnprintf(path, sizeof(path), "%s", k);
        if (x && y && json_equal(x, y))
            continue;
        if (!prefix && json_is_object(x) && json_is_object(y))
            diff_objects(cur, next, path, x, y, changed, restart);
        else
            note_change(cur, next, path, changed, restart);
    }
    json_decref(keys);
}

bool cfg_keys_listed(const json_t *keys, const char *key)
{
    size_t i;
    json_t *k;

    json_array_foreach(keys, i, k) if (strcmp(json_string_value(k), key) == 0) return true;
    return false;
}

/* The options printed masked (a password in database_url): compared as
 * they are, since their printed forms hide a change. */
static void diff_secrets(const struct config *cur, struct config *next, json_t *changed,
                         json_t *restart)
{
    for (size_t i = 0; i < cfg_nopts; i++) {
        const struct opt *o = &cfg_opts[i];
        const char *x, *y;
        if (!(o->flags & OPT_SECRET) || o->type != OPT_STR)
            continue;
        x = *(char *const *)((const char *)cur + o->off);
        y = *(char *const *)((const char *)next + o->off);
        if ((x == NULL) != (y == NULL) || (x && strcmp(x, y) != 0))
            if (!cfg_keys_listed(changed, o->key))
                note_change(cur, next, o->key, changed, restart);
    }
}

void cfg_reload_diff(const struct config *cur, struct config *next, json_t **changed,
                     json_t **restart_required)
{
    json_t *a = cfg_to_json(cur), *b = cfg_to_json(next);

    *changed = json_array();
    *restart_required = json_array();
    if (!a || !b || !*changed || !*restart_required)
        abort(); /* out of memory */
    json_object_del(a, "sources");
    json_object_del(b, "sources");
    json_object_del(a, "config_path");
    json_object_del(b, "config_path");
    diff_objects(cur, next, NULL, a, b, *changed, *restart_required);
    diff_secrets(cur, next, *changed, *restart_required);
    json_decref(a);
    json_decref(b);
}
