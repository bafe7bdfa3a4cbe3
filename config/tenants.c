/* config/tenants.c — "tenants": settings of one tenant each, today the cap
 * on its running runs (max_running) that overrides queue.tenant_max_running;
 * --print-config's view of them, and the lookup of a tenant's cap. It
 * calls only option.c and errors.c. */
#include "config/config_internal.h"

#include "common/suggest.h"

#include <stdlib.h>
#include <string.h>

/* clang-format off */
#define TN_OFF(f) offsetof(struct tenant_cfg, f)

/* A tenant's keys: null (or absent) max_running is queue.tenant_max_running. */
static const struct opt tn_opts[] = {
    {.key = "max_running", .type = OPT_INT, .flags = OPT_NULL, .def = 0, .min = 1, .max = 100000,
     .off = TN_OFF(max_running)},
};
/* clang-format on */

static struct tenant_cfg *tn_find(const struct config *cfg, const char *name)
{
    for (size_t i = 0; i < cfg->ntenants; i++)
        if (strcmp(cfg->tenants[i].name, name) == 0)
            return &cfg->tenants[i];
    return NULL;
}

/* A tenant the file names again is replaced as a whole; nothing changes
 * unless the new entry is valid. */
static void load_tenant(struct config *cfg, const char *name, const json_t *def, const char *path,
                        struct cfg_errors *errs)
{
    struct tenant_cfg t = {0}, *old = tn_find(cfg, name);
    unsigned before = errs->n;
    char sub[KEY_MAX], label[KEY_MAX + 2];
    const char *key;
    json_t *v;

    json_object_foreach((json_t *)def, key, v)
    {
        const struct opt *o = opt_find(tn_opts, ARRAY_LEN(tn_opts), key);
        struct error one = {0};

        xsnprintf(sub, sizeof(sub), "%s.%s", path, key);
        if (!o) {
            struct suggest s;
            suggest_init(&s, key);
            for (size_t i = 0; i < ARRAY_LEN(tn_opts); i++)
                suggest_add(&s, tn_opts[i].key);
            (void)cfg_unknown_key(errs, sub, &s);
            continue;
        }
        xsnprintf(label, sizeof(label), "\"%s\"", sub);
        (void)cfg_errors_note(errs, opt_from_json(&t, o, v, label, &one), &one);
    }
    if (errs->n != before)
        return;
    if (old) {
        old->max_running = t.max_running;
        return;
    }
    t.name = xstrdup(name);
    cfg->tenants = xrealloc(cfg->tenants, (cfg->ntenants + 1) * sizeof(t));
    cfg->tenants[cfg->ntenants++] = t;
}

static void tn_remove(struct config *cfg, const char *name)
{
    struct tenant_cfg *t = tn_find(cfg, name);
    size_t i;

    if (!t)
        return;
    i = (size_t)(t - cfg->tenants);
    free(t->name);
    memmove(t, t + 1, (cfg->ntenants - i - 1) * sizeof(*t));
    cfg->ntenants--;
}

void load_tenants(struct config *cfg, const json_t *v, struct cfg_errors *errs)
{
    load_named(cfg, "tenants", v, load_tenant, tn_remove, errs);
}

void tenants_free(struct config *cfg)
{
    for (size_t i = 0; i < cfg->ntenants; i++)
        free(cfg->tenants[i].name);
    free(cfg->tenants);
    cfg->tenants = NULL;
    cfg->ntenants = 0;
}

bool tenants_to_json(const struct config *cfg, json_t *root)
{
    json_t *all = json_object();
    bool ok = json_object_set_new(root, "tenants", all) == 0;

    for (size_t i = 0; ok && i < cfg->ntenants; i++) {
        json_t *t = json_object();
        ok = json_object_set_new(all, cfg->tenants[i].name, t) == 0;
        for (size_t k = 0; ok && k < ARRAY_LEN(tn_opts); k++)
            ok = json_object_set_new(t, tn_opts[k].key,
                                     opt_to_json(&cfg->tenants[i], &tn_opts[k])) == 0;
    }
    return ok;
}

int cfg_tenant_max_running(const struct config *cfg, const char *tenant)
{
    const struct tenant_cfg *t = tenant ? tn_find(cfg, tenant) : NULL;

    return t && t->max_running > 0 ? t->max_running : cfg->queue.tenant_max_running;
}
