/* engine/actions/remote_request.c — request descriptions checked at
 * configuration load (engine/actions/remote.h): their keys, method,
 * headers, bodies and timeout, each with its rule (params.h). */
#include "engine/actions/remote_internal.h"

#include <string.h>

/* Every string inside a JSON template. */
static enum status check_json_template(const json_t *t, const char *path, struct error *err)
{
    const char *key;
    json_t *x;
    size_t i;
    enum status st = ST_OK;

    if (json_is_string(t))
        return remote_check_template(json_string_value(t), path, err);
    if (json_is_object(t)) {
        json_object_foreach((json_t *)t, key, x)
        {
            if ((st = check_json_template(x, path, err)) != ST_OK)
                return st;
        }
    }
    if (json_is_array(t)) {
        json_array_foreach(t, i, x)
        {
            if ((st = check_json_template(x, path, err)) != ST_OK)
                return st;
        }
    }
    return st;
}

static enum status check_method(const struct param *p, struct error *err)
{
    if (STR_IN(json_string_value(p->v), "GET", "POST", "PUT", "PATCH", "DELETE"))
        return ST_OK;
    return error_set(err, ST_INVALID, "invalid \"%s\": expected GET, POST, PUT, PATCH or DELETE",
                     p->path);
}

static enum status check_headers(const struct param *p, struct error *err)
{
    char sub[200];
    const char *key;
    json_t *x;

    if (!json_is_object(p->v))
        return error_set(err, ST_INVALID, "invalid \"%s\": expected an object", p->path);
    json_object_foreach((json_t *)p->v, key, x)
    {
        xsnprintf(sub, sizeof(sub), "%s.%s", p->path, key);
        if (!json_is_string(x) || strpbrk(json_string_value(x), "\r\n") || strpbrk(key, "\r\n: ") ||
            !*key)
            return error_set(err, ST_INVALID,
                             "invalid \"%s\": expected a header name and a one-line string", sub);
        if (remote_check_template(json_string_value(x), sub, err) != ST_OK)
            return ST_INVALID;
    }
    return ST_OK;
}

static enum status check_body(const struct param *p, struct error *err)
{
    if (json_object_get(p->in, "body_text"))
        return error_set(err, ST_INVALID,
                         "invalid \"%s\": \"body\" and \"body_text\" exclude each other",
                         p->in_path);
    return check_json_template(p->v, p->path, err);
}

static enum status check_body_text(const struct param *p, struct error *err)
{
    if (!json_is_string(p->v))
        return error_set(err, ST_INVALID, "invalid \"%s\": expected a string", p->path);
    return remote_check_template(json_string_value(p->v), p->path, err);
}

/* "xml_escape": false puts values in as they are: the operator's only. */
static enum status check_xml_escape(const struct param *p, struct error *err)
{
    const char *text = json_string_value(json_object_get(p->in, "body_text"));

    if (!json_is_boolean(p->v))
        return error_set(err, ST_INVALID, "invalid \"%s\": expected true or false", p->path);
    if (json_is_false(p->v) && text && !remote_template_operator_only(text))
        return error_set(err, ST_INVALID,
                         "invalid \"%s.body_text\": with \"xml_escape\": false only {{env:...}} "
                         "placeholders may be used (a run's values would go in unescaped)",
                         p->in_path);
    return ST_OK;
}

/* A request description's rules, "url" as url_need says. */
/* clang-format off */
#define REQUEST_RULES(url_need)                                  \
    {"method", check_method, .need = PARAM_OPTIONAL},            \
    {"url", remote_rule_url, .need = (url_need)},                      \
    {"headers", check_headers, .need = PARAM_OPTIONAL},          \
    {"body", check_body, .need = PARAM_OPTIONAL},                \
    {"body_text", check_body_text, .need = PARAM_OPTIONAL},      \
    {"content_type", params_string, .need = PARAM_OPTIONAL},     \
    {"xml_escape", check_xml_escape, .need = PARAM_OPTIONAL},    \
    {"timeout_ms", params_int, .min = 1, .max = REMOTE_TIMEOUT_MAX_MS}
/* clang-format on */

static const struct param_rule request_rules[] = {REQUEST_RULES(PARAM_REQUIRED), {0}};
static const struct param_rule job_request_rules[] = {REQUEST_RULES(PARAM_OPTIONAL), {0}};

enum status remote_check_request(const json_t *req, const char *path, bool need_url,
                                 struct error *err)
{
    if (!json_is_object(req))
        return error_set(err, ST_INVALID, "invalid \"%s\": expected an object", path);
    return params_check(req, need_url ? request_rules : job_request_rules, path, err);
}

enum status remote_rule_request(const struct param *p, struct error *err)
{
    return remote_check_request(p->v, p->path, true, err);
}

enum status remote_rule_job_request(const struct param *p, struct error *err)
{
    return remote_check_request(p->v, p->path, false, err);
}
