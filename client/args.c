/* client/args.c — see args.h. */
#include "client/args.h"

#include "common/conc_key.h"
#include "common/ids.h"
#include "common/suggest.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define CMD_BIT(c) (1u << (c))
#define ALL_CMDS ((1u << ARRAY_LEN(cmd_names)) - 1u)
#define BULK_CMDS (CMD_BIT(CMD_CANCEL) | CMD_BIT(CMD_RETRY))
#define TYPE_MAX 128
#define FILTER_TYPE_MAX 64
#define MAX_WORDS 4
#define SINCE_MAX_S (3660LL * 86400) /* ten years */

static const char *const cmd_names[] = {"submit",  "watch",  "runs",      "cancel",
                                        "retry",   "health", "schedules", "schedule",
                                        "approve", "reject", "logs"};

/* Every flag, the commands that take it, and where its value goes. */
enum flag_id {
    F_SERVER,
    F_TOKEN,
    F_DATA,
    F_RUN_ID,
    F_WATCH,
    F_STATUS,
    F_TYPE,
    F_LIMIT,
    F_JSON,
    F_COMMENT,
    F_OUTCOME,
    F_SINCE,
    F_SCHEDULE,
    F_PARENT,
    F_ALL,
    F_DRY_RUN,
    F_APPROVAL,
    F_ATTEMPT,
    F_FOLLOW,
    F_CONC_KEY,
    F_CONC_GROUP
};
static const struct flag {
    const char *name;
    bool has_value;
    unsigned cmds;
    const char *alias; /* a short form, or NULL */
} flags[] = {
    [F_SERVER] = {"--server", true, ALL_CMDS, NULL},
    [F_TOKEN] = {"--token", true, ALL_CMDS, NULL},
    [F_DATA] = {"--data", true, CMD_BIT(CMD_SUBMIT), NULL},
    [F_RUN_ID] = {"--run-id", true, CMD_BIT(CMD_SUBMIT), NULL},
    [F_WATCH] = {"--watch", false, CMD_BIT(CMD_SUBMIT) | CMD_BIT(CMD_RETRY) | CMD_BIT(CMD_SCHEDULE),
                 NULL},
    [F_STATUS] = {"--status", true, CMD_BIT(CMD_RUNS) | BULK_CMDS, NULL},
    [F_TYPE] = {"--type", true, CMD_BIT(CMD_RUNS) | BULK_CMDS, NULL},
    [F_LIMIT] = {"--limit", true, CMD_BIT(CMD_RUNS) | BULK_CMDS, NULL},
    [F_JSON] = {"--json", false,
                CMD_BIT(CMD_RUNS) | CMD_BIT(CMD_SCHEDULES) | CMD_BIT(CMD_LOGS) | BULK_CMDS, NULL},
    [F_COMMENT] = {"--comment", true, CMD_BIT(CMD_APPROVE) | CMD_BIT(CMD_REJECT), NULL},
    [F_OUTCOME] = {"--outcome", true, BULK_CMDS, NULL},
    [F_SINCE] = {"--since", true, BULK_CMDS, NULL},
    [F_SCHEDULE] = {"--schedule", true, CMD_BIT(CMD_RUNS) | BULK_CMDS, NULL},
    [F_PARENT] = {"--parent", true, CMD_BIT(CMD_RUNS) | BULK_CMDS, NULL},
    [F_ALL] = {"--all", false, BULK_CMDS, NULL},
    [F_DRY_RUN] = {"--dry-run", false, BULK_CMDS, NULL},
    [F_APPROVAL] = {"--approval", true, CMD_BIT(CMD_RUNS), NULL},
    [F_ATTEMPT] = {"--attempt", true, CMD_BIT(CMD_LOGS), NULL},
    [F_FOLLOW] = {"--follow", false, CMD_BIT(CMD_LOGS), "-f"},
    [F_CONC_KEY] = {"--concurrency-key", true, CMD_BIT(CMD_RUNS), NULL},
    [F_CONC_GROUP] = {"--concurrency-group", true, CMD_BIT(CMD_RUNS), NULL},
};
/* The flags that make cancel and retry act on every run they match. */
static const enum flag_id filter_flags[] = {F_STATUS,   F_OUTCOME, F_TYPE, F_SINCE,
                                            F_SCHEDULE, F_PARENT,  F_ALL};
/* And those that go with them only. */
static const enum flag_id bulk_only_flags[] = {F_STATUS, F_OUTCOME, F_TYPE,    F_SINCE, F_SCHEDULE,
                                               F_PARENT, F_ALL,     F_DRY_RUN, F_LIMIT, F_JSON};
#define NFLAGS ARRAY_LEN(flags)

/* What the first pass collects, before the command is known. */
struct raw {
    bool seen[NFLAGS];
    const char *val[NFLAGS];
    const char *words[MAX_WORDS];
    int nwords;
    bool help;
};

const char *args_cmd_name(enum client_cmd cmd)
{
    return cmd_names[cmd];
}

void args_suggest_command(struct suggest *s)
{
    for (size_t i = 0; i < ARRAY_LEN(cmd_names); i++)
        suggest_add(s, cmd_names[i]);
}

static bool cmd_lookup(const char *word, enum client_cmd *out)
{
    for (size_t i = 0; i < ARRAY_LEN(cmd_names); i++)
        if (strcmp(word, cmd_names[i]) == 0) {
            *out = (enum client_cmd)i;
            return true;
        }
    return false;
}

/* The flag arg names ("--x" or "--x=...", or its short form), or -1. */
static int flag_lookup(const char *arg)
{
    for (size_t k = 0; k < NFLAGS; k++) {
        size_t n = strlen(flags[k].name);
        if (strncmp(arg, flags[k].name, n) == 0 && (arg[n] == '\0' || arg[n] == '='))
            return (int)k;
        if (flags[k].alias && strcmp(arg, flags[k].alias) == 0)
            return (int)k;
    }
    return -1;
}

/* One flag at argv[*i] (moving *i past a separate value). */
static enum status take_flag(int argc, char *const *argv, int *i, struct raw *r, struct error *err)
{
    const char *a = argv[*i], *eq = strchr(a, '=');
    int k = flag_lookup(a);

    if (k < 0)
        return error_set(err, ST_INVALID, "unknown flag \"%.64s\"", a);
    if (!flags[k].has_value && eq)
        return error_set(err, ST_INVALID, "flag %s takes no value", flags[k].name);
    if (flags[k].has_value && !eq && *i + 1 >= argc)
        return error_set(err, ST_INVALID, "flag %s needs a value", flags[k].name);
    r->seen[k] = true;
    if (flags[k].has_value)
        r->val[k] = eq ? eq + 1 : argv[++*i];
    return ST_OK;
}

/* First pass: flags wherever they are, and the words in order. */
static enum status collect(int argc, char *const *argv, struct raw *r, struct error *err)
{
    bool words_only = false;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        enum status st = ST_OK;
        if (!words_only && STR_IN(a, "-h", "--help"))
            r->help = true;
        else if (!words_only && strcmp(a, "--") == 0)
            words_only = true;
        else if (!words_only && a[0] == '-' && a[1] != '\0')
            st = take_flag(argc, argv, &i, r, err);
        else if (r->nwords < MAX_WORDS)
            r->words[r->nwords++] = a;
        else
            st = error_set(err, ST_INVALID, "unexpected argument \"%.64s\"", a);
        if (st != ST_OK)
            return st;
    }
    return ST_OK;
}

static bool any_seen(const struct raw *r, const enum flag_id *which, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (r->seen[which[i]])
            return true;
    return false;
}

/* cancel and retry act on one run (ID) or on every run a filter matches;
 * each form takes its own flags. */
static enum status take_bulk_form(const struct raw *r, struct args *out, struct error *err)
{
    const char *name = cmd_names[out->cmd];

    if (!(CMD_BIT(out->cmd) & BULK_CMDS))
        return ST_OK;
    out->bulk = r->nwords == 1;
    for (size_t i = 0; !out->bulk && i < ARRAY_LEN(bulk_only_flags); i++)
        if (r->seen[bulk_only_flags[i]])
            return error_set(err, ST_INVALID,
                             "flag %s applies to %s by a filter, not to %s ID: opsrun %s "
                             "[--status S] [--type T] ...",
                             flags[bulk_only_flags[i]].name, name, name, name);
    if (out->bulk && r->seen[F_WATCH])
        return error_set(err, ST_INVALID, "flag --watch applies to %s ID only", name);
    return ST_OK;
}

/* The command and its one operand (TYPE or ID), or none. */
static enum status take_words(const struct raw *r, struct args *out, struct error *err)
{
    static const char *const operand[] = {
        "a run type: opsrun submit TYPE",
        "a run id: opsrun watch ID",
        NULL,
        "a run id (opsrun cancel ID) or a filter",
        "a run id (opsrun retry ID) or a filter",
        NULL,
        NULL,
        "an action and a name: opsrun schedule pause|resume|trigger NAME",
        "a run id: opsrun approve ID",
        "a run id: opsrun reject ID",
        "a run id: opsrun logs ID"};
    struct suggest s;
    char hint[96];
    int want;

    if (r->nwords == 0)
        return error_set(err, ST_INVALID, "no command given");
    if (!cmd_lookup(r->words[0], &out->cmd)) {
        suggest_init(&s, r->words[0]);
        args_suggest_command(&s);
        return error_set(err, ST_INVALID, "unknown command \"%.64s\"%s", r->words[0],
                         suggest_hint(&s, hint, sizeof(hint)));
    }
    want = out->cmd == CMD_SCHEDULE ? 3 : operand[out->cmd] ? 2 : 1;
    if ((CMD_BIT(out->cmd) & BULK_CMDS) && r->nwords == 1 &&
        any_seen(r, filter_flags, ARRAY_LEN(filter_flags)))
        want = 1;
    if (r->nwords < want)
        return error_set(
            err, ST_INVALID, "%s needs %s%s", cmd_names[out->cmd], operand[out->cmd],
            (CMD_BIT(out->cmd) & BULK_CMDS)
                ? " (--status, --outcome, --type, --since, --schedule, --parent or --all)"
                : "");
    if (r->nwords > want)
        return error_set(err, ST_INVALID, "unexpected argument \"%.64s\"", r->words[want]);
    if (out->cmd == CMD_SUBMIT)
        out->type = r->words[1];
    else if (out->cmd == CMD_SCHEDULE)
        out->action = r->words[1], out->name = r->words[2];
    else if (want == 2)
        out->id = r->words[1];
    if (out->action && !STR_IN(out->action, "pause", "resume", "trigger"))
        return error_set(err, ST_INVALID,
                         "unknown action \"%.64s\": opsrun schedule pause|resume|trigger NAME",
                         out->action);
    if (out->name && !run_id_valid(out->name))
        return error_set(err, ST_INVALID, "invalid schedule name \"%.140s\"", out->name);
    if (out->action && r->seen[F_WATCH] && strcmp(out->action, "trigger") != 0)
        return error_set(err, ST_INVALID, "flag --watch applies to schedule trigger only");
    return take_bulk_form(r, out, err);
}

static const char *env_value(args_env_fn env, const char *name)
{
    const char *v = env ? env(name) : NULL;
    return v && *v ? v : NULL;
}

/* --server / OPSRUN_SERVER and --token / OPSRUN_TOKEN. The token is never
 * quoted in a message. */
static enum status take_connection(const struct raw *r, args_env_fn env, struct args *out,
                                   struct error *err)
{
    const char *from = r->seen[F_SERVER] ? "--server" : "OPSRUN_SERVER";
    const char *tfrom = r->seen[F_TOKEN] ? "--token" : "OPSRUN_TOKEN";

    out->server = r->seen[F_SERVER] ? r->val[F_SERVER] : env_value(env, "OPSRUN_SERVER");
    if (!out->server)
        out->server = ARGS_DEFAULT_SERVER, from = "the default server";
    if (strncmp(out->server, "http://", 7) != 0 && strncmp(out->server, "https://", 8) != 0)
        return error_set(err, ST_INVALID,
                         "invalid %s \"%.200s\": must start with http:// or https://", from,
                         out->server);
    out->token = r->seen[F_TOKEN] ? r->val[F_TOKEN] : env_value(env, "OPSRUN_TOKEN");
    if (out->token && *out->token == '\0')
        return error_set(err, ST_INVALID, "invalid %s: empty", tfrom);
    for (const char *p = out->token; p && *p; p++)
        if ((unsigned char)*p < 0x21 || *p == 0x7f)
            return error_set(err, ST_INVALID,
                             "invalid %s: must not contain spaces or control characters", tfrom);
    return ST_OK;
}

static enum status check_data(const char *text, struct error *err)
{
    json_error_t jerr;
    json_t *j = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
    bool object = json_is_object(j);

    json_decref(j);
    if (!j)
        return error_set(err, ST_INVALID, "invalid --data: %s", jerr.text);
    if (!object)
        return error_set(err, ST_INVALID, "invalid --data: must be a JSON object");
    return ST_OK;
}

/* --attempt: an attempt's number, from 1. */
static enum status check_attempt(const char *v, int *out, struct error *err)
{
    char *end;
    long n;

    errno = 0;
    n = strtol(v, &end, 10);
    if (errno || end == v || *end || strspn(v, "0123456789") != strlen(v) || n < 1 || n > INT32_MAX)
        return error_set(err, ST_INVALID,
                         "invalid --attempt \"%.32s\": must be an attempt's number, from 1", v);
    *out = (int)n;
    return ST_OK;
}

static enum status check_limit(const char *v, int max, int *out, struct error *err)
{
    char *end;
    long n;

    errno = 0;
    n = strtol(v, &end, 10);
    if (errno || end == v || *end || strspn(v, "0123456789") != strlen(v) || n < 1 || n > max)
        return error_set(err, ST_INVALID, "invalid --limit \"%.32s\": must be 1 to %d", v, max);
    *out = (int)n;
    return ST_OK;
}

/* --since: a whole number and s, m, h or d ("90m", "1h", "7d"). */
static enum status check_since(const char *v, long long *out, struct error *err)
{
    static const struct {
        char unit;
        long long s;
    } units[] = {{'s', 1}, {'m', 60}, {'h', 3600}, {'d', 86400}};
    size_t digits = strspn(v, "0123456789");
    long long n = 0;

    for (size_t i = 0; digits > 0 && digits <= 10 && i < ARRAY_LEN(units); i++) {
        if (v[digits] != units[i].unit || v[digits + 1] != '\0')
            continue;
        n = strtoll(v, NULL, 10) * units[i].s;
        if (n >= 1 && n <= SINCE_MAX_S) {
            *out = n;
            return ST_OK;
        }
    }
    return error_set(err, ST_INVALID,
                     "invalid --since \"%.32s\": must be a duration such as 30s, 15m, 1h or 7d "
                     "(at most ten years)",
                     v);
}

/* A comma list of names, each one that ok accepts; one name without many. */
static enum status check_names(const char *v, const char *flag, bool many,
                               bool (*ok)(const char *name, size_t len), const char *names,
                               struct error *err)
{
    for (const char *p = v;; p++) {
        size_t len = strcspn(p, ",");
        if (!ok(p, len) || (!many && p[len] == ','))
            return error_set(err, ST_INVALID, "invalid %s \"%.64s\": must be %s%s", flag, v,
                             many ? "a comma-separated list of " : "one of ", names);
        p += len;
        if (!*p)
            return ST_OK;
    }
}

static bool name_in(const char *name, size_t len, const char *const *names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strlen(names[i]) == len && strncmp(name, names[i], len) == 0)
            return true;
    return false;
}

static bool status_ok(const char *name, size_t len)
{
    static const char *const v[] = {"queued", "running", "waiting", "cancelling", "completed"};
    return name_in(name, len, v, ARRAY_LEN(v));
}

static bool outcome_ok(const char *name, size_t len)
{
    static const char *const v[] = {"pending", "succeeded", "partially_succeeded",
                                    "failed",  "cancelled", "timed_out"};
    return name_in(name, len, v, ARRAY_LEN(v));
}

/* The filter of cancel and retry by a filter, and --limit. */
static enum status take_filter(const struct raw *r, struct args *out, struct error *err)
{
    const char *sc = r->val[F_SCHEDULE];

    if (r->seen[F_OUTCOME] &&
        check_names(r->val[F_OUTCOME], "--outcome", true, outcome_ok,
                    "pending, succeeded, partially_succeeded, failed, cancelled, timed_out",
                    err) != ST_OK)
        return ST_INVALID;
    out->outcome = r->val[F_OUTCOME];
    if (r->seen[F_SINCE] && check_since(r->val[F_SINCE], &out->since_s, err) != ST_OK)
        return ST_INVALID;
    if (sc && (*sc == '\0' || strlen(sc) > FILTER_TYPE_MAX))
        return error_set(err, ST_INVALID, "invalid --schedule: must be 1 to %d characters",
                         FILTER_TYPE_MAX);
    out->schedule = sc;
    if (r->seen[F_PARENT] && (!*r->val[F_PARENT] || strlen(r->val[F_PARENT]) > RUN_ID_MAX))
        return error_set(err, ST_INVALID,
                         "invalid --parent: must be a run id of 1 to %d characters", RUN_ID_MAX);
    out->parent = r->val[F_PARENT];
    out->all = r->seen[F_ALL];
    out->dry_run = r->seen[F_DRY_RUN];
    if (r->seen[F_LIMIT] && out->bulk)
        return check_limit(r->val[F_LIMIT], ARGS_BULK_LIMIT_MAX, &out->limit, err);
    if (r->seen[F_LIMIT])
        return check_limit(r->val[F_LIMIT], ARGS_LIMIT_MAX, &out->limit, err);
    return ST_OK;
}

/* The values of the command's own flags. */
static enum status take_values(const struct raw *r, struct args *out, struct error *err)
{
    const char *id = out->cmd == CMD_SUBMIT ? r->val[F_RUN_ID] : out->id;
    const char *st = r->val[F_STATUS];

    if (id && !run_id_valid(id))
        return error_set(err, ST_INVALID,
                         "invalid run id \"%.140s\": must match [A-Za-z0-9._:-]{1,128}", id);
    out->id = id;
    if (out->type && (*out->type == '\0' || strlen(out->type) > TYPE_MAX))
        return error_set(err, ST_INVALID, "invalid run type \"%.140s\": must be 1 to %d characters",
                         out->type, TYPE_MAX);
    if (r->seen[F_DATA] && check_data(r->val[F_DATA], err) != ST_OK)
        return ST_INVALID;
    out->data = r->val[F_DATA];
    if (st && check_names(st, "--status", out->bulk, status_ok,
                          "queued, running, waiting, cancelling, completed", err) != ST_OK)
        return ST_INVALID;
    out->status = st;
    if (r->seen[F_TYPE] && (*r->val[F_TYPE] == '\0' || strlen(r->val[F_TYPE]) > FILTER_TYPE_MAX))
        return error_set(err, ST_INVALID, "invalid --type: must be 1 to %d characters",
                         FILTER_TYPE_MAX);
    if (r->seen[F_TYPE])
        out->type = r->val[F_TYPE];
    if (r->seen[F_APPROVAL] && strcmp(r->val[F_APPROVAL], "pending") != 0)
        return error_set(err, ST_INVALID,
                         "invalid --approval \"%.64s\": the only value is pending (the runs "
                         "awaiting approval)",
                         r->val[F_APPROVAL]);
    out->approval = r->val[F_APPROVAL];
    if (r->seen[F_CONC_KEY] &&
        (*r->val[F_CONC_KEY] == '\0' || strlen(r->val[F_CONC_KEY]) > CONC_KEY_MAX))
        return error_set(err, ST_INVALID, "invalid --concurrency-key: must be 1 to %d bytes",
                         CONC_KEY_MAX);
    out->conc_key = r->val[F_CONC_KEY];
    if (r->seen[F_CONC_GROUP] &&
        (*r->val[F_CONC_GROUP] == '\0' || strlen(r->val[F_CONC_GROUP]) > FILTER_TYPE_MAX))
        return error_set(err, ST_INVALID, "invalid --concurrency-group: must be 1 to %d characters",
                         FILTER_TYPE_MAX);
    out->conc_group = r->val[F_CONC_GROUP];
    out->comment = r->val[F_COMMENT];
    out->watch = r->seen[F_WATCH];
    out->json = r->seen[F_JSON];
    out->follow = r->seen[F_FOLLOW];
    if (r->seen[F_ATTEMPT] && check_attempt(r->val[F_ATTEMPT], &out->attempt, err) != ST_OK)
        return ST_INVALID;
    return take_filter(r, out, err);
}

enum status args_parse(int argc, char *const *argv, args_env_fn env, struct args *out,
                       struct error *err)
{
    struct raw r = {0};
    enum status st;

    memset(out, 0, sizeof(*out));
    st = collect(argc, argv, &r, err);
    if (st != ST_OK || (out->help = r.help))
        return st;
    st = take_words(&r, out, err);
    for (size_t k = 0; st == ST_OK && k < NFLAGS; k++)
        if (r.seen[k] && !(flags[k].cmds & CMD_BIT(out->cmd)))
            st = error_set(err, ST_INVALID, "flag %s does not apply to %s", flags[k].name,
                           cmd_names[out->cmd]);
    if (st == ST_OK)
        st = take_connection(&r, env, out, err);
    if (st == ST_OK)
        st = take_values(&r, out, err);
    return st;
}

bool args_is_client(int argc, char *const *argv)
{
    enum client_cmd cmd;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int k;
        if (strcmp(a, "--") == 0)
            return i + 1 < argc && cmd_lookup(argv[i + 1], &cmd);
        if (a[0] != '-' || a[1] == '\0')
            return cmd_lookup(a, &cmd);
        k = flag_lookup(a);
        if (k >= 0 && flags[k].has_value && !strchr(a, '='))
            i++;
    }
    return false;
}
