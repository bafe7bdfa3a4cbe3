/* handlers/labels.c — an alert's labels checked (handlers/labels.h). */
#include "handlers/labels.h"

const json_t *labels_check(const json_t *labels, const char *field, struct error *err)
{
    const char *key;
    const json_t *v;

    if (!labels)
        return NULL;
    if (!json_is_object(labels)) {
        error_field(err, ST_INVALID, field, "must be an object of strings");
        return NULL;
    }
    json_object_foreach((json_t *)labels, key, v)
    {
        if (!json_is_string(v)) {
            error_field(err, ST_INVALID, field, "label \"%.64s\" must be a string", key);
            return NULL;
        }
    }
    return labels;
}
