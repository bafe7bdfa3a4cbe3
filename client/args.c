/* client/args.c — see args.h. */
#include "client/args.h"

#include "common/ids.h"
#include "common/suggest.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define CMD_BIT(c) (1u << (c))
#define ALL_CMDS 0xffu
#define TYPE_MAX 128
#define FILTER_TYPE_MAX 64
#define MAX_WORDS 4

static const char *const cmd_names[] = {"submit", "watch",  "runs",      "cancel",
                                        "retry",  "health", "schedules", "schedule"};

/* Every flag, the commands that take it, and where its value goes. */
enum flag_id { F_SERVER, F_TOKEN, F_DATA, F_RUN_ID, F_WATCH, F_STATUS, F_TYPE, F_LIMIT, F_JSON };
static const struct flag {
    const char *name;
    bool has_value;
    unsigned cmds;
} flags[] = {
    [F_SERVER] = {"--server", true, ALL_CMDS},
    [F_TOKEN] = {"--token", true, ALL_CMDS},
    [F_DATA] = {"--data", true, CMD_BIT(CMD_SUBMIT)},
    [F_RUN_ID] = {"--run-id", true, CMD_BIT(CMD_SUBMIT)},
    [F_WATCH] = {"--watch", false,
                 CMD_BIT(CMD_SUBMIT) | CMD_BIT(CMD_RETRY) | CMD_BIT(CMD_SCHEDULE)},
    [F_STATUS] = {"--status", true, CMD_BIT(CMD_RUNS)},
    [F_TYPE] = {"--type", true, CMD_BIT(CMD_RUNS)},
    [F_LIMIT] = {"--limit", true, CMD_BIT(CMD_RUNS)},
    [F_JSON] = {"--json", false, CMD_BIT(CMD_RUNS) | CMD_BIT(CMD_SCHEDULES)},
};
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

/* The flag arg names ("--x" or "--x=..."), or -1. */
static int flag_lookup(const char *arg)
{
    for (size_t k = 0; k < NFLAGS; k++) {
        size_t n = strlen(flags[k].name);
        if (strncmp(arg, flags[k].name, n) == 0 && (arg[n] == '\0' || arg[n] == '='))
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

/* The command and its one operand (TYPE or ID), or none. */
static enum status take_words(const struct raw *r, struct args *out, struct error *err)
{
    static const char *const operand[] = {
        "a run type: opsrun submit TYPE",
        "a run id: opsrun watch ID",
        NULL,
        "a run id: opsrun cancel ID",
        "a run id: opsrun retry ID",
        NULL,
        NULL,
        "an action and a name: opsrun schedule pause|resume|trigger NAME"};
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
    if (r->nwords < want)
        return error_set(err, ST_INVALID, "%s needs %s", cmd_names[out->cmd], operand[out->cmd]);
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
    return ST_OK;
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

static enum status check_limit(const char *v, int *out, struct error *err)
{
    char *end;
    long n;

    errno = 0;
    n = strtol(v, &end, 10);
    if (errno || end == v || *end || strspn(v, "0123456789") != strlen(v) || n < 1 ||
        n > ARGS_LIMIT_MAX)
        return error_set(err, ST_INVALID, "invalid --limit \"%.32s\": must be 1 to %d", v,
                         ARGS_LIMIT_MAX);
    *out = (int)n;
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
    if (st && !STR_IN(st, "queued", "running", "waiting", "cancelling", "completed"))
        return error_set(err, ST_INVALID,
                         "invalid --status \"%.32s\": must be one of queued, running, waiting, "
                         "cancelling, completed",
                         st);
    out->status = st;
    if (r->seen[F_TYPE] && (*r->val[F_TYPE] == '\0' || strlen(r->val[F_TYPE]) > FILTER_TYPE_MAX))
        return error_set(err, ST_INVALID, "invalid --type: must be 1 to %d characters",
                         FILTER_TYPE_MAX);
    if (r->seen[F_TYPE])
        out->type = r->val[F_TYPE];
    if (r->seen[F_LIMIT] && check_limit(r->val[F_LIMIT], &out->limit, err) != ST_OK)
        return ST_INVALID;
    out->watch = r->seen[F_WATCH];
    out->json = r->seen[F_JSON];
    return ST_OK;
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
