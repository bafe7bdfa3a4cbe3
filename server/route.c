/* server/route.c — the route table. */
#include "server/route.h"

#include "common/ids.h"
#include "handlers/metrics.h"

#include <string.h>

static const struct route_entry routes[] = {
    {"POST", "/alerts", handle_alerts_create, true, false, NEED_SUBMIT},
    {"GET", "/runs", handle_runs_list, false, false, NEED_READ},
    {"POST", "/runs/cancel", handle_runs_bulk_cancel, true, false, NEED_CANCEL},
    {"POST", "/runs/retry", handle_runs_bulk_retry, true, false, NEED_CANCEL},
    {"GET", "/runs/{id}", handle_runs_get, false, false, NEED_READ},
    {"GET", "/runs/{id}/events", handle_runs_events, false, false, NEED_READ},
    {"POST", "/runs/{id}/cancel", handle_runs_cancel, false, false, NEED_CANCEL},
    {"POST", "/runs/{id}/retry", handle_runs_retry, false, false, NEED_CANCEL},
    {"POST", "/runs/{id}/approve", handle_runs_approve, BODY_JSON_OPTIONAL, false, NEED_APPROVE},
    {"POST", "/runs/{id}/reject", handle_runs_reject, BODY_JSON_OPTIONAL, false, NEED_APPROVE},
    {"GET", "/runs/{id}/stream", NULL, false, true, NEED_READ},
    {"GET", "/runs/{id}/logs", handle_runs_logs, false, false, NEED_READ},
    {"GET", "/runs/{id}/logs/stream", NULL, false, true, NEED_READ},
    {"GET", "/schedules", handle_schedules_list, false, false, NEED_READ},
    {"GET", "/schedules/{name}", handle_schedules_get, false, false, NEED_READ},
    {"POST", "/schedules/{name}/pause", handle_schedules_pause, false, false, NEED_CANCEL},
    {"POST", "/schedules/{name}/resume", handle_schedules_resume, false, false, NEED_CANCEL},
    {"POST", "/schedules/{name}/trigger", handle_schedules_trigger, false, false, NEED_SUBMIT},
    {"GET", "/rate_limits", handle_rate_limits_list, false, false, NEED_READ},
    {"GET", "/stats/completions", handle_runs_completions, false, false, NEED_READ},
    {"GET", "/stream", NULL, false, true, NEED_READ},
    {"POST", "/admin/reload", handle_admin_reload, false, false, NEED_ADMIN},
    {"GET", "/healthz", handle_health_healthz, false, false, NEED_HEALTH},
    {"GET", "/livez", handle_health_livez, false, false, NEED_OPEN},
    {"GET", "/readyz", handle_health_readyz, false, false, NEED_OPEN},
    {"GET", "/metrics", handle_metrics_get, false, false, NEED_HEALTH},
    {"GET", "/openapi.yaml", handle_openapi_get, false, false, NEED_OPEN},
    {"GET", "/", handle_web_get, false, false, NEED_OPEN},
    {"GET", "/web/{name}", handle_web_get, false, false, NEED_OPEN},
};

/* Matches path against pattern; the {id} (a run id) or {name} (a file of
 * the dashboard, of the same characters) segment is copied to id. */
static bool route_match_path(const char *pattern, const char *path, char *id, size_t idcap)
{
    while (*pattern && *path) {
        size_t plen = strncmp(pattern, "{id}", 4) == 0     ? 4
                      : strncmp(pattern, "{name}", 6) == 0 ? 6
                                                           : 0;
        if (plen) {
            size_t n = strcspn(path, "/");
            char seg[130];
            if (n == 0 || n >= sizeof(seg) || n >= idcap)
                return false;
            memcpy(seg, path, n);
            seg[n] = '\0';
            if (!run_id_valid(seg))
                return false;
            memcpy(id, seg, n + 1);
            pattern += plen;
            path += n;
            continue;
        }
        if (*pattern != *path)
            return false;
        pattern++;
        path++;
    }
    return *pattern == '\0' && *path == '\0';
}

enum route_result route_find(const char *method, const char *path, struct route_hit *m)
{
    bool path_known = false;
    size_t alen = 0;
    char id[130] = "";

    memset(m, 0, sizeof(*m));
    for (size_t i = 0; i < ARRAY_LEN(routes); i++) {
        id[0] = '\0'; /* a pattern without {id} leaves it empty */
        if (!route_match_path(routes[i].pattern, path, id, sizeof(id)))
            continue;
        path_known = true;
        if (strcmp(routes[i].method, method) == 0 ||
            (strcmp(method, "HEAD") == 0 && strcmp(routes[i].method, "GET") == 0)) {
            m->entry = &routes[i];
            memcpy(m->id, id, sizeof(id));
            return ROUTE_FOUND;
        }
        if (alen + 8 >= sizeof(m->allow))
            continue;
        alen += xsnprintf(m->allow + alen, sizeof(m->allow) - alen, "%s%s", alen ? ", " : "",
                          routes[i].method);
    }
    return path_known ? ROUTE_METHOD : ROUTE_NOT_FOUND;
}

size_t route_patterns(const char **out, size_t cap)
{
    for (size_t i = 0; i < ARRAY_LEN(routes) && i < cap; i++)
        out[i] = routes[i].pattern;
    return ARRAY_LEN(routes);
}
