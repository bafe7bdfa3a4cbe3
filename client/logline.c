/* client/logline.c — see logline.h. */
#include "client/logline.h"

#include "client/report.h"

#include <string.h>

#define DIM "\033[2m"
#define CYAN "\033[36m"
#define RESET "\033[0m"

static const char *jstr(const json_t *o, const char *k, const char *dflt)
{
    const char *v = json_string_value(json_object_get(o, k));
    return v ? v : dflt;
}

/* "2026-12-06T14:46:10.864845Z" as "14:46:10" (UTC, as the server gives
 * it), or "--:--:--". */
static void time_of_day(const json_t *line, char out[9])
{
    const char *at = jstr(line, "at", "");

    if (strlen(at) >= 19 && at[10] == 'T' && strspn(at + 11, "0123456789:") >= 8)
        memcpy(out, at + 11, 8), out[8] = '\0';
    else
        memcpy(out, "--:--:--", 9);
}

static void print_terminal(FILE *f, const json_t *line, const char *text, size_t n, bool color)
{
    bool own = strcmp(jstr(line, "stream", ""), "opsrun") == 0;
    char hms[9];

    time_of_day(line, hms);
    fprintf(f, "%s%s%s %s", color ? DIM : "", hms, color ? RESET : "",
            own ? (color ? CYAN "* " : "* ") : "  ");
    report_put_clean(f, text, n, true);
    fputs(own && color ? RESET "\n" : "\n", f);
}

void logline_print(FILE *f, const json_t *line, enum logline_form form, bool color)
{
    const json_t *t = json_object_get(line, "text");
    const char *text = json_is_string(t) ? json_string_value(t) : "";
    size_t n = json_is_string(t) ? json_string_length(t) : 0;
    char stream[32];

    switch (form) {
    case LOGLINE_JSON:
        json_dumpf(line, f, JSON_COMPACT);
        fputc('\n', f);
        break;
    case LOGLINE_TEXT:
        fwrite(text, 1, n, f);
        fputc('\n', f);
        break;
    case LOGLINE_WATCH:
        report_clean(jstr(line, "stream", "?"), stream, sizeof(stream), 16);
        fprintf(f, "%-8s  %-6s  ", "log", stream);
        report_put_clean(f, text, n, true);
        fputc('\n', f);
        break;
    case LOGLINE_TERMINAL:
        print_terminal(f, line, text, n, color);
        break;
    }
}

int64_t logline_seq(const json_t *line)
{
    const json_t *seq = json_object_get(line, "seq");

    return json_is_integer(seq) ? (int64_t)json_integer_value(seq) : 0;
}

json_t *logline_of_event(const struct evparse_event *ev)
{
    json_t *line;

    if (strcmp(ev->type, "log") != 0)
        return NULL;
    line = json_loadb(ev->data, ev->data_len, JSON_ALLOW_NUL, NULL);
    if (json_is_object(line) && logline_seq(line) > 0)
        return line;
    json_decref(line);
    return NULL;
}
