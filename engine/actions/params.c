/* engine/actions/params.c — params checked against a table of rules
 * (engine/actions/params.h). */
#include "engine/actions/params.h"

#include "common/jsonptr.h"

#include <string.h>

/* The longest path an error names: the run type's ("run_types.NAME.params")
 * and the keys below it. */
#define PARAM_PATH_MAX 256

static const struct param_rule *rule_find(const struct param_rule *rules, const char *key)
{
    for (; rules->key; rules++)
        if (strcmp(rules->key, key) == 0)
            return rules;
    return NULL;
}

static enum status check_rule(const json_t *obj, const struct param_rule *r, const char *path,
                              struct error *err)
{
    char sub[PARAM_PATH_MAX];
    const struct param p = {json_object_get(obj, r->key), sub, obj, path, r};

    xsnprintf(sub, sizeof(sub), "%s.%s", path, r->key);
    if (!p.v && r->need == PARAM_REQUIRED)
        return error_set(err, ST_INVALID, "missing \"%s\"", sub);
    if ((!p.v && r->need != PARAM_ALWAYS) || !r->check)
        return ST_OK;
    return r->check(&p, err);
}

enum status params_check(const json_t *obj, const struct param_rule *rules, const char *path,
                         struct error *err)
{
    const char *key;
    json_t *v;

    json_object_foreach((json_t *)obj, key, v)
    {
        if (!rule_find(rules, key))
            return error_set(err, ST_INVALID, "unknown key \"%s.%s\"", path, key);
    }
    for (const struct param_rule *r = rules; r->key; r++)
        if (check_rule(obj, r, path, err) != ST_OK)
            return ST_INVALID;
    return ST_OK;
}

enum status params_int(const struct param *p, struct error *err)
{
    const struct param_rule *r = p->rule;

    if (!json_is_integer(p->v) || json_integer_value(p->v) < r->min ||
        json_integer_value(p->v) > r->max)
        return error_set(err, ST_INVALID, "invalid \"%s\": must be between %lld and %lld", p->path,
                         (long long)r->min, (long long)r->max);
    return ST_OK;
}

enum status params_bool(const struct param *p, struct error *err)
{
    if (!json_is_boolean(p->v))
        return error_set(err, ST_INVALID, "invalid \"%s\": expected true or false", p->path);
    return ST_OK;
}

enum status params_string(const struct param *p, struct error *err)
{
    if (!json_is_string(p->v))
        return error_set(err, ST_INVALID, "invalid \"%s\": expected a string", p->path);
    return ST_OK;
}

enum status params_strings(const struct param *p, struct error *err)
{
    size_t i;
    json_t *x;

    if (!json_is_array(p->v) || json_array_size(p->v) == 0)
        return error_set(err, ST_INVALID, "invalid \"%s\": expected an array of strings", p->path);
    json_array_foreach(p->v, i, x)
    {
        if (!json_is_string(x))
            return error_set(err, ST_INVALID, "invalid \"%s\": expected an array of strings",
                             p->path);
    }
    return ST_OK;
}

enum status params_pointer(const struct param *p, struct error *err)
{
    if (!json_is_string(p->v) || !jptr_valid(json_string_value(p->v)))
        return error_set(err, ST_INVALID, "invalid \"%s\": expected a JSON pointer", p->path);
    return ST_OK;
}

enum status params_choice(const struct param *p, struct error *err)
{
    const char *const *set = p->rule->choices;

    if (!str_in(json_string_value(p->v), set))
        return error_set(err, ST_INVALID, "invalid \"%s\": expected one of %s, %s%s%s", p->path,
                         set[0], set[1], set[2] ? ", " : "", set[2] ? set[2] : "");
    return ST_OK;
}

enum status params_object(const struct param *p, struct error *err)
{
    if (!json_is_object(p->v))
        return error_set(err, ST_INVALID, "invalid \"%s\": expected an object", p->path);
    return params_check(p->v, p->rule->members, p->path, err);
}
