/* engine/actions/params.h — an action's params checked against a table of
 * rules when the configuration is loaded: one rule for each key the params
 * (or an object inside them) may hold, in the order they are checked. A key
 * without a rule is refused; each rule says whether its key must be there
 * and how its value is checked.
 *
 *   static const struct param_rule rules[] = {
 *       {"argv", check_argv, PARAM_ALWAYS},
 *       {"grace_ms", params_int, .min = 0, .max = 600000},
 *       {NULL},
 *   };
 *
 * Errors name the key under the path of the object ("run_types.etl.params"
 * + ".grace_ms"); the first one found is reported. Tables are constant and
 * every function is reentrant. */
#ifndef OPSRUN_ENGINE_ACTIONS_PARAMS_H
#define OPSRUN_ENGINE_ACTIONS_PARAMS_H

#include "common/common.h"

#include <jansson.h>

/* What a key's absence means. */
enum param_need {
    PARAM_OPTIONAL, /* nothing: its check is skipped */
    PARAM_REQUIRED, /* missing "<path>" */
    PARAM_ALWAYS,   /* its check runs with a NULL value and says what absence means */
};

struct param_rule;

/* One value being checked. */
struct param {
    const json_t *v;               /* NULL when absent (PARAM_ALWAYS) */
    const char *path;              /* names the value in errors: "<in_path>.<key>" */
    const json_t *in;              /* the object that holds it, for checks across keys */
    const char *in_path;           /* and names that object */
    const struct param_rule *rule; /* the rule being checked */
};

struct param_rule {
    const char *key; /* NULL ends a table */
    /* NULL: any value. Otherwise ST_OK, or a failure with err set. */
    enum status (*check)(const struct param *p, struct error *err);
    enum param_need need;
    json_int_t min, max;              /* params_int's bounds */
    const char *const *choices;       /* params_choice's: two or three, NULL-terminated */
    const struct param_rule *members; /* params_object's rules */
};

/* Checks obj (an object, or NULL for none) against rules: first that every
 * key has a rule ("unknown key"), then each rule in turn. */
enum status params_check(const json_t *obj, const struct param_rule *rules, const char *path,
                         struct error *err) WUR;

/* The common checks of a rule. */
enum status params_int(const struct param *p, struct error *err);     /* min to max */
enum status params_bool(const struct param *p, struct error *err);    /* true or false */
enum status params_string(const struct param *p, struct error *err);  /* a string */
enum status params_strings(const struct param *p, struct error *err); /* [string, ...] */
enum status params_pointer(const struct param *p, struct error *err); /* a JSON pointer */
enum status params_choice(const struct param *p, struct error *err);  /* one of choices */
enum status params_object(const struct param *p, struct error *err);  /* members' rules */

#endif
