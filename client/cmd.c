/* client/cmd.c — see cmd.h. */
#include "client/cmd.h"

#include "client/logs.h"
#include "client/report.h"
#include "common/ids.h"
#include "common/time_rfc3339.h"

#include <string.h>

#define ID_COL_MAX 64
#define TYPE_COL_MAX 32

static const char *jstr(const json_t *o, const char *k)
{
    const char *v = json_string_value(json_object_get(o, k));
    return v ? v : "?";
}

/* The run id of a submission result, checked before it goes into a path. */
static const char *result_id(const struct watch_view *v, const struct api_resp *r)
{
    const char *id = json_string_value(json_object_get(r->json, "run_id"));

    if (id && run_id_valid(id))
        return id;
    fprintf(v->err, "opsrun: the server's answer has no valid run_id\n");
    return NULL;
}

/* Prints a new (or joined) run's id; follows it with --watch. */
static int started(struct api *a, const struct args *args, const struct watch_view *v,
                   const struct api_resp *r)
{
    const char *id = result_id(v, r);

    if (!id)
        return CMD_REFUSED;
    fprintf(v->out, "%s\n", id);
    fflush(v->out);
    if (json_is_true(json_object_get(r->json, "deduplicated")))
        fprintf(v->err, "opsrun: %s is an existing run (deduplicated)\n", id);
    return args->watch ? (int)watch_run(a, id, v) : CMD_OK;
}

json_t *cmd_submit_body(const struct args *args)
{
    json_t *data =
        args->data ? json_loads(args->data, JSON_REJECT_DUPLICATES, NULL) : json_object();
    json_t *body;

    if (!json_is_object(data)) {
        json_decref(data);
        return NULL;
    }
    body = json_pack("{s:s, s:o}", "alert_type", args->type, "data", data);
    if (body && args->id)
        json_object_set_new(body, "run_id", json_string(args->id));
    return body;
}

static int cmd_submit(struct api *a, const struct args *args, const struct watch_view *v)
{
    json_t *body = cmd_submit_body(args);
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    struct api_resp r;
    int rc;

    json_decref(body);
    if (!text) {
        fprintf(v->err, "opsrun: invalid --data: must be a JSON object\n");
        return CMD_USAGE;
    }
    api_resp_init(&r);
    rc = call_expect(a, v, "submit", "POST", "/alerts", text, &r, 202, 200);
    if (rc < 0)
        rc = started(a, args, v, &r);
    api_resp_cleanup(&r);
    free(text);
    return rc;
}

static int cmd_retry(struct api *a, const struct args *args, const struct watch_view *v)
{
    char *path = xasprintf("/runs/%s/retry", args->id);
    struct api_resp r;
    int rc;

    api_resp_init(&r);
    rc = call_expect(a, v, "retry", "POST", path, NULL, &r, 202, 200);
    if (rc < 0)
        rc = started(a, args, v, &r);
    api_resp_cleanup(&r);
    free(path);
    return rc;
}

static int cmd_cancel(struct api *a, const struct args *args, const struct watch_view *v)
{
    char *path = xasprintf("/runs/%s/cancel", args->id);
    struct api_resp r;
    int rc;

    api_resp_init(&r);
    rc = call_expect(a, v, "cancel", "POST", path, NULL, &r, 200, 202);
    if (rc < 0) {
        const char *status = jstr(r.json, "status");
        char now[32];
        /* "cancelled" once it is over, "cancelling" while its worker stops it */
        report_clean(strcmp(status, "completed") == 0 ? jstr(r.json, "outcome") : status, now,
                     sizeof(now), -1);
        fprintf(v->out, "run %s %s\n", args->id, now);
        rc = CMD_OK;
    }
    api_resp_cleanup(&r);
    free(path);
    return rc;
}

/* A comma list as a JSON array of its items. */
static json_t *comma_list(const char *v)
{
    json_t *a = json_array();

    for (const char *p = v;; p++) {
        size_t len = strcspn(p, ",");
        json_array_append_new(a, json_stringn(p, len));
        p += len;
        if (!*p)
            return a;
    }
}

json_t *cmd_bulk_body(const struct args *args, int64_t now_us)
{
    json_t *f = json_object(), *body;
    char after[40];

    if (args->status)
        json_object_set_new(f, "status", comma_list(args->status));
    if (args->outcome)
        json_object_set_new(f, "outcome", comma_list(args->outcome));
    if (args->type)
        json_object_set_new(f, "type", json_string(args->type));
    if (args->since_s > 0) {
        time_format_rfc3339(now_us - args->since_s * 1000000, after, sizeof(after));
        json_object_set_new(f, "created_after", json_string(after));
    }
    if (args->schedule)
        json_object_set_new(f, "schedule", json_string(args->schedule));
    if (args->parent)
        json_object_set_new(f, "parent_id", json_string(args->parent));
    if (args->all)
        json_object_set_new(f, "all", json_true());
    body = json_pack("{s:o, s:b}", "filter", f, "dry_run", args->dry_run);
    if (body && args->limit > 0)
        json_object_set_new(body, "limit", json_integer(args->limit));
    return body;
}

json_t *cmd_decision_body(const struct args *args)
{
    return args->comment ? json_pack("{s:s}", "comment", args->comment) : NULL;
}

/* cancel or retry by a filter: one request, then what it did. */
static int cmd_bulk(struct api *a, const struct args *args, const struct watch_view *v)
{
    bool cancel = args->cmd == CMD_CANCEL;
    json_t *body = cmd_bulk_body(args, clock_wall_ms() * 1000);
    char *text = json_dumps(body, JSON_COMPACT);
    struct api_resp r;
    long long matched, acted, joined;
    int rc;

    json_decref(body);
    api_resp_init(&r);
    rc = call_expect_within(a, v, cancel ? "cancel" : "retry", "POST",
                            cancel ? "/runs/cancel" : "/runs/retry", text, &r, 200, 200,
                            CMD_BULK_TIMEOUT_MS);
    matched = json_integer_value(json_object_get(r.json, "matched"));
    acted = json_integer_value(json_object_get(r.json, "acted"));
    joined = json_integer_value(json_object_get(r.json, "joined"));
    if (rc < 0 && args->json)
        fprintf(v->out, "%s\n", dynbuf_ptr(&r.body));
    else if (rc < 0 && args->dry_run)
        fprintf(v->out, "%lld runs match (dry run: nothing was %s)\n", matched,
                cancel ? "cancelled" : "retried");
    else if (rc < 0 && joined > 0)
        fprintf(v->out,
                "retried %lld of %lld matching runs: %lld new, %lld joined a run already "
                "active\n",
                acted, matched, acted - joined, joined);
    else if (rc < 0)
        fprintf(v->out, "%s %lld of %lld matching runs\n", cancel ? "cancelled" : "retried", acted,
                matched);
    api_resp_cleanup(&r);
    free(text);
    return rc < 0 ? CMD_OK : rc;
}

/* approve or reject ID, with --comment. */
static int cmd_decide(struct api *a, const struct args *args, const struct watch_view *v)
{
    bool approve = args->cmd == CMD_APPROVE;
    char *path = xasprintf("/runs/%s/%s", args->id, approve ? "approve" : "reject");
    json_t *body = cmd_decision_body(args);
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    struct api_resp r;
    int rc;

    json_decref(body);
    api_resp_init(&r);
    rc = call_expect(a, v, approve ? "approve" : "reject", "POST", path, text, &r, 200, 200);
    if (rc < 0) {
        fprintf(v->out, "run %s %s\n", args->id, approve ? "approved" : "rejected");
        rc = CMD_OK;
    }
    api_resp_cleanup(&r);
    free(text);
    free(path);
    return rc;
}

char *cmd_runs_path(const struct args *args)
{
    const char *keys[] = {"status",           "type",     "schedule",
                          "parent_id",        "approval", "concurrency_key",
                          "concurrency_group"},
               *vals[] = {args->status,   args->type,     args->schedule,  args->parent,
                          args->approval, args->conc_key, args->conc_group};
    struct dynbuf b;
    char sep = '?';

    dynbuf_init(&b, 4096);
    if (dynbuf_adds(&b, "/runs") != ST_OK)
        abort();
    for (size_t i = 0; i < ARRAY_LEN(keys); i++) {
        char *e;
        if (!vals[i])
            continue;
        e = api_escape(vals[i]);
        if (dynbuf_addf(&b, "%c%s=%s", sep, keys[i], e) != ST_OK)
            abort(); /* the values are checked to be short */
        free(e);
        sep = '&';
    }
    if (args->limit > 0 && dynbuf_addf(&b, "%climit=%d", sep, args->limit) != ST_OK)
        abort();
    return dynbuf_take(&b);
}

/* "2026-11-22T03:48:12.721395Z" as "2026-11-22 03:48:12". */
static void short_time(const char *ts, char *out, size_t cap)
{
    report_clean(ts ? ts : "", out, cap, 19);
    if (strlen(out) > 10 && out[10] == 'T')
        out[10] = ' ';
}

/* One line of the table, cleaned; w* are widths in characters. */
struct row {
    char id[ID_COL_MAX * 4 + 1], type[TYPE_COL_MAX * 4 + 1], created[32];
    char status[16], outcome[24];
    int progress, wid, wtype;
};

static void row_of(const json_t *run, struct row *w)
{
    w->wid = report_clean(jstr(run, "id"), w->id, sizeof(w->id), ID_COL_MAX);
    w->wtype = report_clean(jstr(run, "type"), w->type, sizeof(w->type), TYPE_COL_MAX);
    report_clean(jstr(run, "status"), w->status, sizeof(w->status), -1);
    report_clean(jstr(run, "outcome"), w->outcome, sizeof(w->outcome), -1);
    w->progress = (int)json_integer_value(json_object_get(run, "progress"));
    short_time(json_string_value(json_object_get(run, "created_at")), w->created,
               sizeof(w->created));
}

void cmd_runs_table(FILE *f, const json_t *runs)
{
    int wid = 2, wtype = 4;
    size_t i;
    const json_t *run;

    json_array_foreach(runs, i, run)
    {
        struct row w;
        row_of(run, &w);
        wid = w.wid > wid ? w.wid : wid;
        wtype = w.wtype > wtype ? w.wtype : wtype;
    }
    fprintf(f, "%-*s  %-*s  %-10s  %-19s  %8s  %s\n", wid, "ID", wtype, "TYPE", "STATUS", "OUTCOME",
            "PROGRESS", "CREATED (UTC)");
    json_array_foreach(runs, i, run)
    {
        struct row w;
        row_of(run, &w);
        /* Padding counts bytes: widen by what multi-byte characters take. */
        fprintf(f, "%-*s  %-*s  %-10s  %-19s  %7d%%  %s\n", wid + (int)strlen(w.id) - w.wid, w.id,
                wtype + (int)strlen(w.type) - w.wtype, w.type, w.status, w.outcome, w.progress,
                w.created);
    }
}

static int cmd_runs(struct api *a, const struct args *args, const struct watch_view *v)
{
    char *path = cmd_runs_path(args);
    const json_t *runs;
    struct api_resp r;
    int rc;

    api_resp_init(&r);
    rc = call_expect(a, v, "runs", "GET", path, NULL, &r, 200, 200);
    runs = json_object_get(r.json, "runs");
    if (rc < 0 && !json_is_array(runs)) {
        fprintf(v->err, "opsrun: the server's answer has no list of runs\n");
        rc = CMD_REFUSED;
    } else if (rc < 0) {
        if (args->json)
            fprintf(v->out, "%s\n", dynbuf_ptr(&r.body));
        else if (json_array_size(runs) == 0)
            fprintf(v->err, "opsrun: no runs\n");
        else
            cmd_runs_table(v->out, runs);
        if (!args->json && json_is_string(json_object_get(r.json, "next_cursor")))
            fprintf(v->err, "opsrun: more runs match than shown (--limit N, at most %d)\n",
                    ARGS_LIMIT_MAX);
        rc = CMD_OK;
    }
    api_resp_cleanup(&r);
    free(path);
    return rc;
}

/* For container health checks: 0 only for a 200 from /readyz, 1 for
 * anything else, with a short time limit. */
static int cmd_health(struct api *a, const struct watch_view *v)
{
    struct error err = {0};
    struct api_resp r;
    char why[512];
    int rc = CMD_REFUSED;
    enum status st;

    api_resp_init(&r);
    st = api_call(a, "GET", "/readyz", NULL, CMD_HEALTH_TIMEOUT_MS, &r, &err);
    if (st != ST_OK) {
        fprintf(v->err, "opsrun: not ready: %s\n", err.message);
    } else if (r.status != 200) {
        report_reason(&r, why, sizeof(why));
        fprintf(v->err, "opsrun: not ready: %s\n", why);
    } else {
        fprintf(v->out, "ready\n");
        rc = CMD_OK;
    }
    api_resp_cleanup(&r);
    return rc;
}

/* "2026-11-22T03:48:12.721395Z" as "2026-11-22 03:48", or "-". */
static void short_minute(const json_t *ts, char *out, size_t cap)
{
    if (!json_is_string(ts)) {
        xsnprintf(out, cap, "-");
        return;
    }
    short_time(json_string_value(ts), out, cap);
    if (strlen(out) > 16)
        out[16] = '\0';
}

void cmd_schedules_table(FILE *f, const json_t *schedules)
{
    size_t i;
    const json_t *s;

    fprintf(f, "%-24s  %-16s  %-20s  %-16s  %-6s  %-16s  %s\n", "NAME", "RUN TYPE", "CRON",
            "TIME ZONE", "PAUSED", "NEXT (UTC)", "LAST OUTCOME");
    json_array_foreach(schedules, i, s)
    {
        char name[ID_COL_MAX * 4 + 1], type[TYPE_COL_MAX * 4 + 1], cron[96], tz[96], next[32],
            last[24];
        int wn = report_clean(jstr(s, "name"), name, sizeof(name), 24);
        int wt = report_clean(jstr(s, "run_type"), type, sizeof(type), 16);
        int wc = report_clean(jstr(s, "cron"), cron, sizeof(cron), 20);
        int wz = report_clean(jstr(s, "time_zone"), tz, sizeof(tz), 16);

        short_minute(json_object_get(s, "next_at"), next, sizeof(next));
        report_clean(json_is_string(json_object_get(s, "last_outcome")) ? jstr(s, "last_outcome")
                                                                        : "-",
                     last, sizeof(last), -1);
        fprintf(f, "%-*s  %-*s  %-*s  %-*s  %-6s  %-16s  %s\n", 24 + (int)strlen(name) - wn, name,
                16 + (int)strlen(type) - wt, type, 20 + (int)strlen(cron) - wc, cron,
                16 + (int)strlen(tz) - wz, tz,
                json_is_true(json_object_get(s, "paused")) ? "yes" : "no", next, last);
    }
}

static int cmd_schedules(struct api *a, const struct args *args, const struct watch_view *v)
{
    const json_t *list;
    struct api_resp r;
    int rc;

    api_resp_init(&r);
    rc = call_expect(a, v, "schedules", "GET", "/schedules", NULL, &r, 200, 200);
    list = json_object_get(r.json, "schedules");
    if (rc < 0 && !json_is_array(list)) {
        fprintf(v->err, "opsrun: the server's answer has no list of schedules\n");
        rc = CMD_REFUSED;
    } else if (rc < 0) {
        if (args->json)
            fprintf(v->out, "%s\n", dynbuf_ptr(&r.body));
        else if (json_array_size(list) == 0)
            fprintf(v->err, "opsrun: no schedules\n");
        else
            cmd_schedules_table(v->out, list);
        rc = CMD_OK;
    }
    api_resp_cleanup(&r);
    return rc;
}

/* pause and resume print the schedule's state; trigger prints the new
 * run's id (then follows it with --watch), as submit does. */
static int cmd_schedule(struct api *a, const struct args *args, const struct watch_view *v)
{
    bool trigger = strcmp(args->action, "trigger") == 0;
    char *path = xasprintf("/schedules/%s/%s", args->name, args->action);
    struct api_resp r;
    int rc;

    api_resp_init(&r);
    rc = call_expect(a, v, "schedule", "POST", path, NULL, &r, trigger ? 202 : 200,
                     trigger ? 202 : 200);
    if (rc < 0 && trigger) {
        rc = started(a, args, v, &r);
    } else if (rc < 0) {
        fprintf(v->out, "schedule %s %s\n", args->name,
                json_is_true(json_object_get(r.json, "paused")) ? "paused" : "resumed");
        rc = CMD_OK;
    }
    api_resp_cleanup(&r);
    free(path);
    return rc;
}

int cmd_run(struct api *a, const struct args *args, const struct watch_view *v)
{
    switch (args->cmd) {
    case CMD_SUBMIT:
        return cmd_submit(a, args, v);
    case CMD_WATCH:
        return (int)watch_run(a, args->id, v);
    case CMD_RUNS:
        return cmd_runs(a, args, v);
    case CMD_CANCEL:
        return args->bulk ? cmd_bulk(a, args, v) : cmd_cancel(a, args, v);
    case CMD_RETRY:
        return args->bulk ? cmd_bulk(a, args, v) : cmd_retry(a, args, v);
    case CMD_HEALTH:
        return cmd_health(a, v);
    case CMD_SCHEDULES:
        return cmd_schedules(a, args, v);
    case CMD_SCHEDULE:
        return cmd_schedule(a, args, v);
    case CMD_APPROVE:
    case CMD_REJECT:
        return cmd_decide(a, args, v);
    case CMD_LOGS:
        return logs_run(a, args, v);
    }
    return CMD_USAGE;
}
