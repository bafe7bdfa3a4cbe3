/* tests/support/reload.c — reloading a running opsrun's configuration
 * (reload.h). */
#include "reload.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

void th_config_rewrite(const char *path, const char *json)
{
    char tmp[512];
    FILE *f;

    /* A new file renamed over the old one: a reload never reads half of it. */
    snprintf(tmp, sizeof(tmp), "%s.new", path);
    f = fopen(tmp, "w");
    ck_assert_msg(f != NULL, "could not write %s", tmp);
    fputs(json, f);
    ck_assert_int_eq(fclose(f), 0);
    ck_assert_msg(rename(tmp, path) == 0, "could not rename %s", tmp);
}

void th_config_version(const struct th_proc *p, char *out, size_t cap)
{
    struct th_resp r;
    const char *v;

    th_get(p->url, "/healthz", &r);
    ck_assert_msg(r.json != NULL, "GET /healthz: %ld %s", r.status, r.body ? r.body : "");
    v = th_js(json_object_get(r.json, "config"), "version");
    ck_assert_msg(v != NULL, "GET /healthz has no config.version: %s", r.body);
    snprintf(out, cap, "%s", v);
    th_resp_free(&r);
}

void th_reload(const struct th_proc *p, const char *token, const char *key)
{
    struct th_resp r;
    const json_t *changed, *k;
    bool found = key == NULL;
    size_t i;

    th_post_expect(p, "/admin/reload", token, NULL, 200, &r);
    changed = r.json ? json_object_get(r.json, "changed") : NULL;
    ck_assert_msg(json_is_array(changed), "POST /admin/reload: %s", r.body);
    json_array_foreach(changed, i, k) found |= th_streq(json_string_value(k), key);
    ck_assert_msg(found, "POST /admin/reload: %s among the changed keys of %s", key, r.body);
    th_resp_free(&r);
}

void th_reload_signal(const struct th_proc *p)
{
    char before[32], now[32];
    long long until = th_now_ms() + 10000;

    th_config_version(p, before, sizeof(before));
    ck_assert_int_eq(kill(p->pid, SIGHUP), 0);
    do {
        th_sleep_ms(50);
        th_config_version(p, now, sizeof(now));
    } while (strcmp(now, before) == 0 && th_now_ms() < until);
    ck_assert_msg(strcmp(now, before) != 0, "SIGHUP: the configuration stays at version %s",
                  before);
}
