/* config/workflows.c — a workflow type's steps (config/workflows.h): the
 * checks within the type, the compiled form, and the checks across run
 * types (check_wf_refs, config_internal.h): step run types exist, workflow
 * types nest without a cycle and within queue.max_chain_depth, and a
 * workflow type has none of the keys that mean nothing for it, and a
 * step's fixed data holds what its type's concurrency key takes. It calls
 * run_types.c, concurrency.c, option.c and errors.c. */
#include "config/workflows.h"

#include "common/suggest.h"
#include "common/template.h"
#include "config/config_internal.h"

#include <stdlib.h>
#include <string.h>

/* The steps of one type as a graph: need[i][j] when step i needs step j. */
struct wf_graph {
    size_t n;
    const char *name[WF_STEPS_MAX];
    const json_t *def[WF_STEPS_MAX];
    bool need[WF_STEPS_MAX][WF_STEPS_MAX];
};

static const char *const step_keys[] = {"run_type", "needs", "when", "data"};

/* The index of the step named name, or SIZE_MAX. */
static size_t wf_index(const struct wf_graph *g, const char *name)
{
    for (size_t i = 0; name && i < g->n; i++)
        if (strcmp(g->name[i], name) == 0)
            return i;
    return SIZE_MAX;
}

/* 1 to 64 of [A-Za-z0-9_-], not all digits: "<run id>.<digits>" is the
 * id of the run's follow-up (its then rule of that number). */
static bool step_name_valid(const char *s)
{
    size_t n = strlen(s);
    bool digits = true;

    if (n == 0 || n > WF_STEP_NAME_MAX)
        return false;
    for (; *s; s++) {
        if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') ||
              *s == '_' || *s == '-'))
            return false;
        digits = digits && *s >= '0' && *s <= '9';
    }
    return !digits;
}

/* "unknown step \"name\"" and the nearest step's name, for an error. */
static enum status unknown_step(const struct wf_graph *g, const char *name, const char *path,
                                struct error *err)
{
    char hint[WF_STEP_NAME_MAX + 24];
    struct suggest s;

    suggest_init(&s, name);
    for (size_t i = 0; i < g->n; i++)
        suggest_add(&s, g->name[i]);
    return error_set(err, ST_INVALID, "invalid \"%s\": unknown step \"%s\"%s", path, name,
                     suggest_hint(&s, hint, sizeof(hint)));
}

/* Step i's "needs" into g->need[i]; path names the step. */
static enum status check_needs(struct wf_graph *g, size_t i, const char *path, struct error *err)
{
    const json_t *needs = json_object_get(g->def[i], "needs"), *x;
    char sub[KEY_MAX];
    size_t k;

    xsnprintf(sub, sizeof(sub), "%s.needs", path);
    if (!needs)
        return ST_OK;
    if (!json_is_array(needs))
        return error_set(err, ST_INVALID, "invalid \"%s\": expected an array of step names", sub);
    json_array_foreach(needs, k, x)
    {
        size_t j = wf_index(g, json_string_value(x));
        if (!json_is_string(x))
            return error_set(err, ST_INVALID, "invalid \"%s[%zu]\": expected a step's name", sub,
                             k);
        if (j == SIZE_MAX)
            return unknown_step(g, json_string_value(x), sub, err);
        if (j == i)
            return error_set(err, ST_INVALID, "invalid \"%s\": a step cannot need itself", sub);
        if (g->need[i][j])
            return error_set(err, ST_INVALID, "invalid \"%s\": step \"%s\" is named twice", sub,
                             g->name[j]);
        g->need[i][j] = true;
    }
    return ST_OK;
}

static bool has_needs(const struct wf_graph *g, size_t i)
{
    for (size_t j = 0; j < g->n; j++)
        if (g->need[i][j])
            return true;
    return false;
}

/* Step i's "when" and "data" (their placeholders' form; the steps they
 * name are checked once the needs are known to form no cycle). */
static enum status check_when_data(const struct wf_graph *g, size_t i, const char *path,
                                   struct error *err)
{
    const json_t *when = json_object_get(g->def[i], "when");
    const json_t *data = json_object_get(g->def[i], "data");
    char why[160];

    if (when && (!json_is_string(when) ||
                 !STR_IN(json_string_value(when), "succeeded", "failed", "always")))
        return error_set(err, ST_INVALID,
                         "invalid \"%s.when\": expected \"succeeded\", \"failed\" or \"always\"",
                         path);
    if (when && !has_needs(g, i))
        return error_set(err, ST_INVALID,
                         "invalid \"%s.when\": a step without needs starts with the workflow; "
                         "\"when\" goes with \"needs\"",
                         path);
    if (data && !json_is_object(data))
        return error_set(err, ST_INVALID, "invalid \"%s.data\": expected an object", path);
    if (data && !tmpl_step_check_json(data, NULL, why, sizeof(why)))
        return error_set(err, ST_INVALID, "invalid \"%s.data\": %s", path, why);
    return ST_OK;
}

/* One step on its own: its name, its keys, its run type's name, its
 * needs, when and data. */
static enum status check_step(struct wf_graph *g, size_t i, const char *path, struct error *err)
{
    const json_t *def = g->def[i], *rt;
    char sub[KEY_MAX], hint[KEY_MAX];
    const char *key;
    json_t *v;
    enum status st;

    xsnprintf(sub, sizeof(sub), "%s.%s", path, g->name[i]);
    if (!step_name_valid(g->name[i]))
        return error_set(err, ST_INVALID,
                         "invalid \"%s\": a step's name is 1 to 64 of A-Z, a-z, 0-9, \"_\" and "
                         "\"-\", not all digits (those name a run's follow-ups)",
                         sub);
    if (!json_is_object(def))
        return error_set(err, ST_INVALID, "invalid \"%s\": expected an object", sub);
    json_object_foreach((json_t *)def, key, v)
    {
        struct suggest s;
        if (STR_IN(key, step_keys[0], step_keys[1], step_keys[2], step_keys[3]))
            continue;
        suggest_init(&s, key);
        for (size_t k = 0; k < ARRAY_LEN(step_keys); k++)
            suggest_add(&s, step_keys[k]);
        return error_set(err, ST_INVALID, "unknown key \"%s.%s\"%s", sub, key,
                         suggest_hint(&s, hint, sizeof(hint)));
    }
    rt = json_object_get(def, "run_type");
    if (!rt)
        return error_set(err, ST_INVALID, "missing \"%s.run_type\"", sub);
    if (!json_is_string(rt) || !name_valid(json_string_value(rt)))
        return error_set(err, ST_INVALID, "invalid \"%s.run_type\": expected a run type's name",
                         sub);
    st = check_needs(g, i, sub, err);
    return st == ST_OK ? check_when_data(g, i, sub, err) : st;
}

/* Depth-first along the needs from step i; on a cycle, true and the cycle
 * ("a -> b -> a") in out. color: 0 not seen, 1 on the path, 2 done. */
static bool find_cycle(const struct wf_graph *g, size_t i, unsigned char *color, size_t *path,
                       size_t depth, char *out, size_t cap)
{
    color[i] = 1;
    path[depth] = i;
    for (size_t j = 0; j < g->n; j++) {
        if (!g->need[i][j])
            continue;
        if (color[j] == 1) {
            size_t from = 0, len = 0;
            while (path[from] != j)
                from++;
            for (size_t k = from; k <= depth && len < cap; k++)
                len += xsnprintf(out + len, cap - len, "%s -> ", g->name[path[k]]);
            if (len < cap)
                xsnprintf(out + len, cap - len, "%s", g->name[j]);
            return true;
        }
        if (color[j] == 0 && find_cycle(g, j, color, path, depth + 1, out, cap))
            return true;
    }
    color[i] = 2;
    return false;
}

static enum status check_cycle(const struct wf_graph *g, const char *path, struct error *err)
{
    unsigned char color[WF_STEPS_MAX] = {0};
    size_t stack[WF_STEPS_MAX];
    char cycle[384];

    for (size_t i = 0; i < g->n; i++)
        if (color[i] == 0 && find_cycle(g, i, color, stack, 0, cycle, sizeof(cycle)))
            return error_set(err, ST_INVALID, "invalid \"%s\": the needs form a cycle: %s", path,
                             cycle);
    return ST_OK;
}

/* reach[i][j]: step i needs step j, directly or through other steps. The
 * needs form no cycle. */
static void closure(const struct wf_graph *g, bool (*reach)[WF_STEPS_MAX])
{
    memcpy(reach, g->need, sizeof(g->need));
    for (size_t k = 0; k < g->n; k++)
        for (size_t i = 0; i < g->n; i++)
            for (size_t j = 0; reach[i][k] && j < g->n; j++)
                reach[i][j] = reach[i][j] || reach[k][j];
}

/* The steps step i's data names, as an object (keys the names; new
 * reference). */
static json_t *data_refs(const struct wf_graph *g, size_t i)
{
    const json_t *data = json_object_get(g->def[i], "data");
    json_t *named = json_object();
    char why[160];

    if (!named)
        abort();
    if (data)
        (void)tmpl_step_check_json(data, named, why, sizeof(why));
    return named;
}

/* Each step a step's data names is one of its needs, directly or not:
 * only then has it a run (or has it been skipped) when the step starts. */
static enum status check_data_refs(const struct wf_graph *g, bool (*reach)[WF_STEPS_MAX],
                                   const char *path, struct error *err)
{
    enum status st = ST_OK;

    for (size_t i = 0; st == ST_OK && i < g->n; i++) {
        json_t *named = data_refs(g, i), *v;
        char sub[KEY_MAX];
        const char *name;

        xsnprintf(sub, sizeof(sub), "%s.%s.data", path, g->name[i]);
        json_object_foreach(named, name, v)
        {
            size_t j = wf_index(g, name);
            if (j == SIZE_MAX)
                st = unknown_step(g, name, sub, err);
            else if (!reach[i][j])
                st = error_set(err, ST_INVALID,
                               "invalid \"%s\": step \"%s\" is not among its needs, directly or "
                               "through other steps",
                               sub, name);
            if (st != ST_OK)
                break;
        }
        json_decref(named);
    }
    return st;
}

/* The graph of steps, an object of 1 to WF_STEPS_MAX entries; needs are
 * filled in by check_needs. */
static struct wf_graph *graph_new(const json_t *steps)
{
    struct wf_graph *g = xcalloc(1, sizeof(*g));
    const char *name;
    json_t *def;

    json_object_foreach((json_t *)steps, name, def)
    {
        g->name[g->n] = name;
        g->def[g->n++] = def;
    }
    return g;
}

enum status cfg_wf_check_steps(const json_t *steps, const char *path, struct error *err)
{
    bool(*reach)[WF_STEPS_MAX] = NULL;
    struct wf_graph *g;
    enum status st = ST_OK;

    if (!json_is_object(steps))
        return error_set(err, ST_INVALID, "invalid \"%s\": expected an object of steps", path);
    if (json_object_size(steps) == 0)
        return error_set(err, ST_INVALID, "invalid \"%s\": expected at least one step", path);
    if (json_object_size(steps) > WF_STEPS_MAX)
        return error_set(err, ST_INVALID, "invalid \"%s\": %zu steps, more than the %d allowed",
                         path, json_object_size(steps), WF_STEPS_MAX);
    g = graph_new(steps);
    for (size_t i = 0; st == ST_OK && i < g->n; i++)
        st = check_step(g, i, path, err);
    if (st == ST_OK)
        st = check_cycle(g, path, err);
    if (st == ST_OK) {
        reach = xcalloc(WF_STEPS_MAX, sizeof(*reach));
        closure(g, reach);
        st = check_data_refs(g, reach, path, err);
    }
    free(reach);
    free(g);
    return st;
}

bool cfg_run_type_is_workflow(const struct config *cfg, const struct run_type *rt)
{
    return rt->action && cfg->actions && cfg->actions->is_workflow &&
           cfg->actions->is_workflow(rt->action);
}

/* ---- the compiled form ---- */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The names as a sorted JSON array (new reference; NULL when jansson
 * fails). */
static json_t *sorted_names(const char **names, size_t n)
{
    json_t *a = json_array();

    qsort(names, n, sizeof(*names), cmp_str);
    for (size_t i = 0; a && i < n; i++) {
        if (json_array_append_new(a, json_string(names[i])) != 0) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

/* Step i compiled (new reference; NULL when jansson fails). */
static json_t *compile_step(const struct wf_graph *g, size_t i)
{
    const char *names[WF_STEPS_MAX];
    const json_t *when = json_object_get(g->def[i], "when");
    const json_t *data = json_object_get(g->def[i], "data");
    json_t *named = data_refs(g, i), *v, *needs, *refs;
    const char *name;
    size_t n = 0;

    for (size_t j = 0; j < g->n; j++)
        if (g->need[i][j])
            names[n++] = g->name[j];
    needs = sorted_names(names, n);
    n = 0;
    json_object_foreach(named, name, v)
    {
        names[n++] = name;
    }
    refs = sorted_names(names, n);
    v = needs && refs
            ? json_pack("{s:s, s:s, s:O, s:s, s:o, s:O}", "name", g->name[i], "run_type",
                        json_string_value(json_object_get(g->def[i], "run_type")), "needs", needs,
                        "when", when ? json_string_value(when) : "succeeded", "data",
                        data ? json_deep_copy(data) : json_object(), "refs", refs)
            : NULL;
    json_decref(needs);
    json_decref(refs);
    json_decref(named);
    return v;
}

/* The next step in topological order: among those not placed whose needs
 * all are, the first by name. */
static size_t next_step(const struct wf_graph *g, const bool *placed)
{
    size_t best = SIZE_MAX;

    for (size_t i = 0; i < g->n; i++) {
        bool ready = !placed[i];
        for (size_t j = 0; ready && j < g->n; j++)
            ready = !g->need[i][j] || placed[j];
        if (ready && (best == SIZE_MAX || strcmp(g->name[i], g->name[best]) < 0))
            best = i;
    }
    return best;
}

json_t *cfg_wf_compile(const struct run_type *rt)
{
    const json_t *steps = json_object_get(rt->params, "steps");
    bool placed[WF_STEPS_MAX] = {false};
    struct error err = {0};
    struct wf_graph *g;
    json_t *out = json_array();

    if (!out || !json_is_object(steps) || json_object_size(steps) > WF_STEPS_MAX) {
        json_decref(out);
        return NULL;
    }
    g = graph_new(steps);
    for (size_t i = 0; i < g->n; i++)
        if (check_needs(g, i, "", &err) != ST_OK)
            goto fail; /* not a checked type */
    for (size_t k = 0; k < g->n; k++) {
        size_t i = next_step(g, placed);
        if (i == SIZE_MAX || json_array_append_new(out, compile_step(g, i)) != 0)
            goto fail; /* a cycle, or jansson failed */
        placed[i] = true;
    }
    free(g);
    return out;
fail:
    free(g);
    json_decref(out);
    return NULL;
}

/* ---- across run types ---- */

/* The keys of a run type that mean nothing for a workflow, which waits
 * from its insert to its end and is never claimed, attempted, polled nor
 * keyed: each step's run type has its own (the prefix "poll." stands for
 * every key of "poll"). */
static const struct {
    const char *key;
    const char *why;
} refused[] = {
    {"max_attempts", "a workflow is not attempted; each step's run type has its own"},
    {"retry_backoff_ms", "a workflow is not attempted; each step's run type has its own"},
    {"retry_backoff_max_ms", "a workflow is not attempted; each step's run type has its own"},
    {"timeout_s", "a workflow has no deadline of its own; each step's run type has its own"},
    {"max_running", "a workflow never runs on a worker; each step's run type may cap its own"},
    {"poll.", "a workflow is never polled; each step's run type has its own"},
    {"rate_limit", "a workflow makes no calls; each step's run type may name one"},
};

/* Whether the option o of rt has its default value. */
static bool at_default(const struct run_type *rt, const struct opt *o)
{
    const void *f = (const char *)rt + o->off;

    switch (o->type) {
    case OPT_INT:
        return *(const int *)f == (int)o->def;
    case OPT_I64:
        return *(const int64_t *)f == o->def;
    case OPT_STR:
        return o->def_str ? *(char *const *)f && strcmp(*(char *const *)f, o->def_str) == 0
                          : *(char *const *)f == NULL;
    case OPT_BOOL:
        return *(const bool *)f == (o->def != 0);
    case OPT_LEVEL:
        break;
    }
    return true;
}

/* The keys a workflow type takes none of: those of refused[] set to
 * other than their default, "concurrency", and "retrying" in a notify
 * rule. */
static void check_wf_keys(const struct run_type *rt, struct cfg_errors *errs)
{
    const json_t *rule, *x;
    size_t k, m;

    for (size_t i = 0; i < rt_nopts; i++) {
        for (size_t r = 0; r < ARRAY_LEN(refused); r++) {
            size_t n = strlen(refused[r].key);
            bool match = refused[r].key[n - 1] == '.'
                             ? strncmp(rt_opts[i].key, refused[r].key, n) == 0
                             : strcmp(rt_opts[i].key, refused[r].key) == 0;
            if (match && !at_default(rt, &rt_opts[i]))
                (void)cfg_errors_addf(errs,
                                      "invalid \"run_types.%s.%s\": not for a workflow type: %s",
                                      rt->name, rt_opts[i].key, refused[r].why);
        }
    }
    if (rt->conc.on)
        (void)cfg_errors_addf(errs,
                              "invalid \"run_types.%s.concurrency\": not for a workflow type: a "
                              "workflow holds no key; each step's run type may have one",
                              rt->name);
    json_array_foreach(rt->notify, k, rule)
    {
        json_array_foreach(json_object_get(rule, "on"), m, x)
        {
            if (json_is_string(x) && strcmp(json_string_value(x), "retrying") == 0)
                (void)cfg_errors_addf(errs,
                                      "invalid \"run_types.%s.notify[%zu].on[%zu]\": not for a "
                                      "workflow type: a workflow is never retried by itself",
                                      rt->name, k, m);
        }
    }
}

/* Each step's run type is a configured one, and a step's data without
 * placeholders holds what that type's concurrency key takes from it. */
static void check_step_types(const struct config *cfg, const struct run_type *rt,
                             struct cfg_errors *errs)
{
    const json_t *steps = json_object_get(rt->params, "steps");
    char hint[NAME_MAX_LEN + 24];
    const char *name;
    json_t *def;

    json_object_foreach((json_t *)steps, name, def)
    {
        const char *to = json_string_value(json_object_get(def, "run_type"));
        char what[KEY_MAX];
        struct suggest s;
        xsnprintf(what, sizeof(what), "run_types.%s.params.steps.%s.data", rt->name, name);
        if (to && rt_find(cfg, to))
            conc_check_fixed_data(rt_find(cfg, to), json_object_get(def, "data"), what, errs);
        if (!to || rt_find(cfg, to))
            continue;
        suggest_init(&s, to);
        cfg_run_type_suggest(cfg, &s);
        (void)cfg_errors_addf(errs,
                              "invalid \"run_types.%s.params.steps.%s.run_type\": unknown run "
                              "type \"%s\"%s",
                              rt->name, name, to, suggest_hint(&s, hint, sizeof(hint)));
    }
}

/* The nesting of workflow types, by their index in cfg->run_types: a
 * depth-first walk from each type through the steps whose run type is a
 * workflow. depth is the levels of steps a type makes (1 without nested
 * workflows), or -1 when it reaches a cycle; via is the nested type that
 * gives it. */
struct nest {
    const struct config *cfg;
    unsigned char *state; /* 0 not seen, 1 on the walk's path, 2 done */
    int *depth;
    size_t *via;
    size_t *path;       /* the types on the walk's path */
    const char **steps; /* and the step that leads on from each */
    size_t top;
    struct cfg_errors *errs;
};

/* The cycle found when the walk at path[top - 1] reaches c again. */
static void nest_cycle(struct nest *ns, size_t c)
{
    const struct run_type *types = ns->cfg->run_types;
    char cycle[384];
    size_t from = 0, len = 0;

    while (ns->path[from] != c)
        from++;
    for (size_t k = from; k < ns->top && len < sizeof(cycle); k++)
        len += xsnprintf(cycle + len, sizeof(cycle) - len, "%s -> ", types[ns->path[k]].name);
    if (len < sizeof(cycle))
        xsnprintf(cycle + len, sizeof(cycle) - len, "%s", types[c].name);
    (void)cfg_errors_addf(ns->errs,
                          "invalid \"run_types.%s.params.steps.%s.run_type\": workflows nest in "
                          "a cycle: %s",
                          types[c].name, ns->steps[from], cycle);
}

static int nest_depth(struct nest *ns, size_t t)
{
    const struct run_type *rt = &ns->cfg->run_types[t];
    const json_t *steps = json_object_get(rt->params, "steps");
    int best = 0, d;
    bool cycle = false;
    const char *name;
    json_t *def;

    if (ns->state[t] == 2)
        return ns->depth[t];
    ns->state[t] = 1;
    ns->path[ns->top++] = t;
    json_object_foreach((json_t *)steps, name, def)
    {
        const struct run_type *to =
            rt_find(ns->cfg, json_string_value(json_object_get(def, "run_type")));
        size_t c = to ? (size_t)(to - ns->cfg->run_types) : 0;
        if (!to || !cfg_run_type_is_workflow(ns->cfg, to))
            continue;
        ns->steps[ns->top - 1] = name;
        if (ns->state[c] == 1) {
            nest_cycle(ns, c);
            cycle = true;
        } else if ((d = nest_depth(ns, c)) < 0) {
            cycle = true;
        } else if (d > best) {
            best = d;
            ns->via[t] = c;
        }
    }
    ns->top--;
    ns->state[t] = 2;
    ns->depth[t] = cycle ? -1 : best + 1;
    return ns->depth[t];
}

/* A type whose steps nest deeper than queue.max_chain_depth allows: its
 * deepest chain of types is named. */
static void nest_too_deep(struct nest *ns, size_t t)
{
    const struct run_type *types = ns->cfg->run_types;
    char chain[384];
    size_t len = 0, c = t;

    for (int d = ns->depth[t]; d > 0 && len < sizeof(chain); d--, c = ns->via[c])
        len += xsnprintf(chain + len, sizeof(chain) - len, "%s%s", c == t ? "" : " -> ",
                         types[c].name);
    (void)cfg_errors_addf(ns->errs,
                          "invalid \"run_types.%s.params.steps\": its steps nest %d deep (%s), "
                          "more than queue.max_chain_depth (%d) allows",
                          types[t].name, ns->depth[t], chain, ns->cfg->queue.max_chain_depth);
}

static void check_nesting(const struct config *cfg, struct cfg_errors *errs)
{
    size_t n = cfg->nrun_types;
    struct nest ns = {.cfg = cfg, .errs = errs};

    ns.state = xcalloc(n + 1, sizeof(*ns.state));
    ns.depth = xcalloc(n + 1, sizeof(*ns.depth));
    ns.via = xcalloc(n + 1, sizeof(*ns.via));
    ns.path = xcalloc(n + 1, sizeof(*ns.path));
    ns.steps = xcalloc(n + 1, sizeof(*ns.steps));
    for (size_t t = 0; t < n; t++)
        if (cfg_run_type_is_workflow(cfg, &cfg->run_types[t]))
            (void)nest_depth(&ns, t);
    for (size_t t = 0; t < n; t++)
        if (cfg_run_type_is_workflow(cfg, &cfg->run_types[t]) &&
            ns.depth[t] > cfg->queue.max_chain_depth)
            nest_too_deep(&ns, t);
    free(ns.state);
    free(ns.depth);
    free(ns.via);
    free(ns.path);
    free(ns.steps);
}

void check_wf_refs(const struct config *cfg, struct cfg_errors *errs)
{
    for (size_t i = 0; i < cfg->nrun_types; i++) {
        const struct run_type *rt = &cfg->run_types[i];
        if (!cfg_run_type_is_workflow(cfg, rt))
            continue;
        check_wf_keys(rt, errs);
        check_step_types(cfg, rt, errs);
    }
    check_nesting(cfg, errs);
}
