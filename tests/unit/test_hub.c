/* tests/unit/test_hub.c — the event hub's fan-out without a database or a
 * server: pages of events are injected as the reader thread would publish
 * them, and subscribers read with small buffers through fake wake
 * callbacks. Covers selection and wake-ups, frames cut across reads,
 * keep-alives (also falling due in the middle of a frame), the skip rules
 * of the seam, the end of a run stream, lagging behind the ring, the
 * subscriber limit, waiters, and close. */
#include "live/hub.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct conn {
    int suspends, resumes;
    bool suspended;
    bool peer_gone;
};

static bool fake_suspend(void *arg)
{
    struct conn *c = arg;

    if (c->peer_gone)
        return false;
    ck_assert_msg(!c->suspended, "suspended twice");
    c->suspended = true;
    c->suspends++;
    return true;
}

static void fake_resume(void *arg)
{
    struct conn *c = arg;

    ck_assert_msg(c->suspended, "resumed while not suspended (undefined in libmicrohttpd)");
    c->suspended = false;
    c->resumes++;
}

static struct hub *new_hub(int frames, int64_t bytes, int max_subs)
{
    const struct hub_options o = {
        .ring_frames = frames,
        .ring_bytes = bytes,
        .max_subscribers = max_subs,
        .heartbeat_ms = 15000,
        .poll_ms = 1000,
        .retry_ms = 3000,
    };
    struct hub *h = hub_new(&o);

    hub_inject(h, NULL, 0, 0); /* ready at position 0 */
    return h;
}

/* A status by its name; the test fails on a name that is not one. */
static enum run_status status_of(const char *name)
{
    enum run_status s = RUN_QUEUED;

    ck_assert_msg(run_status_parse(name, &s), "\"%s\" is not a status", name);
    return s;
}

static struct hub_sub *subscribe(struct hub *h, const char *run_id, const char *type,
                                 const char *status, struct conn *c)
{
    const struct event_filter f = {
        "t", run_id, type, status != NULL, status ? status_of(status) : RUN_QUEUED, NULL};
    const struct hub_wake w = {fake_suspend, fake_resume, c};
    struct hub_sub *s = NULL;
    struct error err = {0};
    int64_t pos = -1;

    ck_assert_int_eq(hub_sub_new(h, &f, &w, &s, &pos, &err), ST_OK);
    ck_assert_int_ge(pos, 0);
    return s;
}

/* One event of run r in tenant t, type T, with a small run JSON, the run's
 * parent_id parent (NULL: none). */
static void inject_child(struct hub *h, int64_t id, const char *run, const char *status,
                         const char *parent)
{
    char json[160];
    struct event_row ev = {id,
                           "t",
                           run,
                           strcmp(status, "completed") ? "progress" : "status",
                           status_of(status),
                           "T",
                           json,
                           false,
                           parent};

    snprintf(json, sizeof(json), "{\"id\" : \"%s\", \"status\" : \"%s\", \"n\" : %lld}", run,
             status, (long long)id);
    hub_inject(h, &ev, 1, id);
}

static void inject(struct hub *h, int64_t id, const char *run, const char *status)
{
    inject_child(h, id, run, status, NULL);
}

/* Reads everything available, max bytes per call; returns the last result
 * and appends the text to out. */
static enum hub_read read_all(struct hub_sub *s, char *out, size_t cap, size_t max)
{
    size_t len = strlen(out);
    enum hub_read r;

    for (;;) {
        char buf[4096];
        size_t n = 0;
        ck_assert_uint_le(max, sizeof(buf));
        r = hub_sub_read(s, buf, max, &n);
        if (r != HUB_DATA)
            return r;
        ck_assert_uint_gt(n, 0);
        ck_assert_uint_le(n, max);
        ck_assert_uint_lt(len + n, cap);
        memcpy(out + len, buf, n);
        len += n;
        out[len] = '\0';
    }
}

START_TEST(select_and_wake)
{
    struct hub *h = new_hub(64, 1 << 20, 10);
    struct conn ca = {0}, cb = {0}, cg = {0};
    struct hub_sub *a = subscribe(h, "r1", NULL, NULL, &ca);
    struct hub_sub *b = subscribe(h, "r2", NULL, NULL, &cb);
    struct hub_sub *g = subscribe(h, NULL, NULL, NULL, &cg);
    char out[4096] = "";

    ck_assert_int_eq(read_all(a, out, sizeof(out), 100), HUB_SUSPENDED);
    ck_assert_int_eq(read_all(b, out, sizeof(out), 100), HUB_SUSPENDED);
    ck_assert_int_eq(read_all(g, out, sizeof(out), 100), HUB_SUSPENDED);
    ck_assert_str_eq(out, "");
    inject(h, 5, "r1", "running");
    ck_assert_int_eq(ca.resumes, 1); /* wants it */
    ck_assert_int_eq(cb.resumes, 0); /* another run: left asleep */
    ck_assert_int_eq(cg.resumes, 1);
    ck_assert_int_eq(read_all(a, out, sizeof(out), 7), HUB_SUSPENDED);
    ck_assert_str_eq(
        out, "id: 5\nevent: progress\ndata: {\"id\":\"r1\",\"status\":\"running\",\"n\":5}\n\n");
    out[0] = '\0';
    inject(h, 6, "r2", "running");
    ck_assert_int_eq(cb.resumes, 1);
    ck_assert_int_eq(read_all(b, out, sizeof(out), 4096), HUB_SUSPENDED);
    ck_assert_ptr_nonnull(strstr(out, "id: 6\n"));
    out[0] = '\0';
    ck_assert_int_eq(read_all(g, out, sizeof(out), 3), HUB_SUSPENDED);
    ck_assert_ptr_nonnull(strstr(out, "id: 5\n"));
    ck_assert_ptr_nonnull(strstr(out, "id: 6\n"));
    hub_sub_free(a);
    hub_sub_free(b);
    hub_sub_free(g);
    hub_free(h);
}
END_TEST

START_TEST(filters)
{
    struct hub *h = new_hub(64, 1 << 20, 10);
    struct conn c1 = {0}, c2 = {0};
    struct hub_sub *typed = subscribe(h, NULL, "other", NULL, &c1);
    struct hub_sub *done = subscribe(h, NULL, NULL, "completed", &c2);
    char out[4096] = "";

    inject(h, 1, "r1", "running");
    inject(h, 2, "r1", "completed");
    ck_assert_int_eq(read_all(typed, out, sizeof(out), 100), HUB_SUSPENDED);
    ck_assert_str_eq(out, "");
    ck_assert_int_eq(c1.resumes, 0);
    ck_assert_int_eq(read_all(done, out, sizeof(out), 100), HUB_SUSPENDED);
    ck_assert_ptr_null(strstr(out, "id: 1\n"));
    ck_assert_ptr_nonnull(strstr(out, "id: 2\n"));
    hub_sub_free(typed);
    hub_sub_free(done);
    hub_free(h);
}
END_TEST

/* GET /stream?parent_id=w1: the frames of w1's steps (or follow-ups) only,
 * not w1's own nor another parent's children nor runs without a parent. */
START_TEST(parent_filter)
{
    struct hub *h = new_hub(64, 1 << 20, 10);
    struct conn c = {0};
    const struct event_filter f = {"t", NULL, NULL, false, RUN_QUEUED, "w1"};
    const struct hub_wake w = {fake_suspend, fake_resume, &c};
    struct hub_sub *s = NULL;
    struct error err = {0};
    char out[4096] = "";
    int64_t pos = -1;

    ck_assert_int_eq(hub_sub_new(h, &f, &w, &s, &pos, &err), ST_OK);
    inject(h, 1, "w1", "waiting");
    inject_child(h, 2, "w1.a", "running", "w1");
    inject_child(h, 3, "w2.a", "running", "w2");
    inject(h, 4, "x", "running");
    inject_child(h, 5, "w1.b", "completed", "w1");
    ck_assert_int_eq(read_all(s, out, sizeof(out), 4096), HUB_SUSPENDED);
    ck_assert_ptr_null(strstr(out, "id: 1\n"));
    ck_assert_ptr_nonnull(strstr(out, "id: 2\n"));
    ck_assert_ptr_null(strstr(out, "id: 3\n"));
    ck_assert_ptr_null(strstr(out, "id: 4\n"));
    ck_assert_ptr_nonnull(strstr(out, "id: 5\n"));
    hub_sub_free(s);
    hub_free(h);
}
END_TEST

/* A subscriber sees its tenant only; one without a tenant (an admin's
 * GET /stream) sees every tenant; a run stream never sees the same run id
 * of another tenant. */
START_TEST(tenants)
{
    struct hub *h = new_hub(64, 1 << 20, 10);
    struct conn ct = {0}, ca = {0}, cr = {0};
    const struct event_filter all = {NULL, NULL, NULL, false, RUN_QUEUED, NULL};
    const struct hub_wake w = {fake_suspend, fake_resume, &ca};
    struct hub_sub *t = subscribe(h, NULL, NULL, NULL, &ct);
    struct hub_sub *r = subscribe(h, "r1", NULL, NULL, &cr);
    struct hub_sub *a = NULL;
    struct error err = {0};
    char out[4096] = "", json[64] = "{\"id\":\"r1\"}";
    struct event_row ev = {1, "u", "r1", "progress", RUN_RUNNING, "T", json, false, NULL};
    int64_t pos;

    ck_assert_int_eq(hub_sub_new(h, &all, &w, &a, &pos, &err), ST_OK);
    hub_inject(h, &ev, 1, 1);
    inject(h, 2, "r1", "running");
    ck_assert_int_eq(read_all(t, out, sizeof(out), 4096), HUB_SUSPENDED);
    ck_assert_ptr_null(strstr(out, "id: 1\n"));
    ck_assert_ptr_nonnull(strstr(out, "id: 2\n"));
    out[0] = '\0';
    ck_assert_int_eq(read_all(r, out, sizeof(out), 4096), HUB_SUSPENDED);
    ck_assert_ptr_null(strstr(out, "id: 1\n"));
    ck_assert_ptr_nonnull(strstr(out, "id: 2\n"));
    out[0] = '\0';
    ck_assert_int_eq(read_all(a, out, sizeof(out), 4096), HUB_SUSPENDED);
    ck_assert_ptr_nonnull(strstr(out, "id: 1\n"));
    ck_assert_ptr_nonnull(strstr(out, "id: 2\n"));
    hub_sub_free(t);
    hub_sub_free(r);
    hub_sub_free(a);
    hub_free(h);
}
END_TEST

/* A keep-alive that falls due while a frame is half sent goes out after
 * that frame, never inside it, and never stalls the stream. */
#define F1 "id: 1\nevent: progress\ndata: {\"id\":\"r1\",\"status\":\"running\",\"n\":1}\n\n"
#define F2 "id: 2\nevent: progress\ndata: {\"id\":\"r1\",\"status\":\"running\",\"n\":2}\n\n"
START_TEST(heartbeat_between_frames)
{
    struct hub *h = new_hub(64, 1 << 20, 10);
    struct conn c = {0};
    struct hub_sub *s = subscribe(h, NULL, NULL, NULL, &c);
    char out[4096] = "", buf[16];
    size_t n;

    ck_assert_int_eq(read_all(s, out, sizeof(out), 100), HUB_SUSPENDED);
    hub_heartbeat(h);
    ck_assert_int_eq(read_all(s, out, sizeof(out), 3), HUB_SUSPENDED);
    ck_assert_str_eq(out, ": hb\n\n");
    out[0] = '\0';
    inject(h, 1, "r1", "running");
    ck_assert_int_eq(hub_sub_read(s, buf, 10, &n), HUB_DATA); /* part of the frame */
    ck_assert_uint_eq(n, 10);
    memcpy(out, buf, n);
    out[n] = '\0';
    hub_heartbeat(h);
    inject(h, 2, "r1", "running");
    ck_assert_int_eq(read_all(s, out, sizeof(out), 10), HUB_SUSPENDED);
    ck_assert_msg(strcmp(out, F1 ": hb\n\n" F2) == 0 || strcmp(out, F1 F2 ": hb\n\n") == 0,
                  "a keep-alive inside a frame, or a frame lost: %s", out);
    hub_sub_free(s);
    hub_free(h);
}
END_TEST

/* The seam: skip_upto drops what the snapshot or replay covered; a run
 * skip drops that run's older events and keeps the id: line off while it
 * is pending. */
START_TEST(skip_rules)
{
    struct hub *h = new_hub(64, 1 << 20, 10);
    struct conn c = {0};
    struct hub_sub *s = subscribe(h, NULL, NULL, NULL, &c);
    char out[4096] = "";
    bool with_id;

    hub_sub_skip_upto(s, 2);
    hub_sub_skip_run(s, "t", "r1", 5);
    ck_assert(!hub_sub_gate(s, 2, "t", "r9", &with_id));
    ck_assert(!hub_sub_gate(s, 3, "t", "r1", &with_id));
    ck_assert(hub_sub_gate(s, 3, "t2", "r1", &with_id)); /* the same id in another tenant */
    ck_assert(hub_sub_gate(s, 3, "t", "r2", &with_id));
    ck_assert(!with_id);
    ck_assert(hub_sub_gate(s, 6, "t", "r1", &with_id));
    ck_assert(with_id);
    for (int64_t id = 1; id <= 6; id++)
        inject(h, id, id == 3 || id == 5 ? "r1" : "r2", "running");
    ck_assert_int_eq(read_all(s, out, sizeof(out), 4096), HUB_SUSPENDED);
    /* 1, 2: covered; 3, 5: r1 up to 5 is in its snapshot; 4: r2, without
     * its id: line (a skip is pending); 6: past every skip, with its id. */
    ck_assert_str_eq(out,
                     "event: progress\ndata: {\"id\":\"r2\",\"status\":\"running\",\"n\":4}\n\n"
                     "id: 6\nevent: progress\ndata: {\"id\":\"r2\",\"status\":\"running\","
                     "\"n\":6}\n\n");
    hub_sub_free(s);
    hub_free(h);
}
END_TEST

/* A run stream ends after its run's terminal event. */
START_TEST(run_stream_ends)
{
    struct hub *h = new_hub(64, 1 << 20, 10);
    struct conn c = {0};
    struct hub_sub *s = subscribe(h, "r1", NULL, NULL, &c);
    char out[4096] = "";

    inject(h, 1, "r1", "running");
    inject(h, 2, "r1", "completed");
    inject(h, 3, "r1", "running"); /* never sent: the stream is over */
    ck_assert_int_eq(read_all(s, out, sizeof(out), 5), HUB_END);
    ck_assert_ptr_nonnull(strstr(out, "id: 2\nevent: status\n"));
    ck_assert_ptr_null(strstr(out, "id: 3\n"));
    hub_sub_free(s);
    hub_free(h);
}
END_TEST

/* A reader that falls behind the ring lags; one that was asleep with
 * nothing wanted does not, however far the ring moves. */
START_TEST(lagging)
{
    struct hub *h = new_hub(16, 1 << 20, 10);
    struct conn cslow = {0}, cidle = {0};
    struct hub_sub *slow = subscribe(h, NULL, NULL, NULL, &cslow);
    struct hub_sub *idle = subscribe(h, "quiet", NULL, NULL, &cidle);
    char out[65536] = "", buf[64];
    size_t n;
    int64_t pos;

    ck_assert_int_eq(read_all(idle, out, sizeof(out), 100), HUB_SUSPENDED);
    inject(h, 1, "r1", "running");
    ck_assert_int_eq(hub_sub_read(slow, buf, 20, &n), HUB_DATA); /* mid-frame, then stalls */
    ck_assert_uint_eq(hub_sub_live(slow), 1);
    for (int64_t id = 2; id <= 40; id++)
        inject(h, id, "r1", "running");
    ck_assert_int_eq(hub_sub_read(slow, buf, sizeof(buf), &n), HUB_LAGGED);
    ck_assert_int_eq(cidle.resumes, 0);
    inject(h, 41, "quiet", "running");
    ck_assert_int_eq(cidle.resumes, 1);
    ck_assert_int_eq(read_all(idle, out, sizeof(out), 100), HUB_SUSPENDED);
    ck_assert_ptr_nonnull(strstr(out, "id: 41\n"));
    /* rejoin: at the head, the caller replays the gap */
    hub_sub_rejoin(slow, &pos);
    ck_assert_int_eq(pos, 41);
    out[0] = '\0';
    ck_assert_int_eq(read_all(slow, out, sizeof(out), 100), HUB_SUSPENDED);
    ck_assert_str_eq(out, "");
    hub_sub_free(slow);
    hub_sub_free(idle);
    hub_free(h);
}
END_TEST

START_TEST(byte_bound)
{
    struct hub *h = new_hub(1000, 400, 10); /* room for about 4 small frames */
    struct hub_stats st;

    for (int64_t id = 1; id <= 50; id++)
        inject(h, id, "r1", "running");
    hub_stats(h, &st);
    ck_assert_int_le(st.ring_bytes, 400);
    ck_assert_int_ge(st.ring_frames, 1);
    ck_assert_int_le(st.ring_frames, 5);
    ck_assert_int_eq(st.published_total, 50);
    ck_assert_int_eq(st.pos, 50);
    hub_free(h);
}
END_TEST

START_TEST(limit_and_close)
{
    struct hub *h = new_hub(64, 1 << 20, 2);
    struct conn c1 = {0}, c2 = {0}, c3 = {0};
    struct hub_sub *s1 = subscribe(h, NULL, NULL, NULL, &c1);
    struct hub_sub *s2 = subscribe(h, "r1", NULL, NULL, &c2), *s3 = NULL;
    const struct event_filter f = {"t", NULL, NULL, false, RUN_QUEUED, NULL};
    const struct hub_wake w = {fake_suspend, fake_resume, &c3};
    struct error err = {0};
    struct hub_stats st;
    char out[256] = "";
    int64_t pos;

    ck_assert_int_eq(hub_sub_new(h, &f, &w, &s3, &pos, &err), ST_BUSY);
    ck_assert_str_eq(err.message, "too many stream subscribers (limit 2)");
    ck_assert_ptr_null(s3);
    ck_assert_int_eq(read_all(s1, out, sizeof(out), 100), HUB_SUSPENDED);
    c2.peer_gone = true; /* the peek before suspending sees the peer gone */
    ck_assert_int_eq(read_all(s2, out, sizeof(out), 100), HUB_GONE);
    hub_close(h);
    ck_assert_int_eq(c1.resumes, 1);
    ck_assert_int_eq(read_all(s1, out, sizeof(out), 100), HUB_END);
    ck_assert_int_eq(hub_sub_new(h, &f, &w, &s3, &pos, &err), ST_BUSY);
    ck_assert(!hub_wait_empty(h, 10));
    hub_sub_free(s1);
    hub_sub_free(s2);
    ck_assert(hub_wait_empty(h, 10));
    hub_stats(h, &st);
    ck_assert_int_eq(st.refused_total, 1);
    hub_free(h);
}
END_TEST

/* A waiter fires on its run's terminal event only; fired before its
 * connection was parked, it is not parked at all; released, it no longer
 * holds up a drain. */
/* hub_wake_all: a suspended subscriber is resumed and reads HUB_WOKEN once;
 * one that was not suspended gets it at the read that would have
 * suspended it, after what it had to send, so no wake-up is lost between
 * its owner's check and its suspension. */
START_TEST(wake_all)
{
    struct hub *h = new_hub(64, 1 << 20, 10);
    struct conn c1 = {0}, c2 = {0};
    struct hub_sub *s1 = subscribe(h, NULL, NULL, NULL, &c1);
    struct hub_sub *s2 = subscribe(h, NULL, NULL, NULL, &c2);
    char out[1024] = "", buf[256];
    size_t n = 1;

    ck_assert_int_eq(read_all(s1, out, sizeof(out), 100), HUB_SUSPENDED);
    inject(h, 1, "r1", "running");
    hub_wake_all(h);
    ck_assert_int_eq(c1.resumes, 1);
    ck_assert_int_eq(c2.resumes, 0); /* not suspended: nothing to resume */
    ck_assert_int_eq(read_all(s1, out, sizeof(out), 100), HUB_WOKEN);
    ck_assert_ptr_nonnull(strstr(out, "id: 1\n"));
    ck_assert_int_eq(hub_sub_read(s1, buf, sizeof(buf), &n), HUB_SUSPENDED);
    ck_assert_uint_eq(n, 0);
    out[0] = '\0';
    ck_assert_int_eq(read_all(s2, out, sizeof(out), 100), HUB_WOKEN);
    ck_assert_ptr_nonnull(strstr(out, "id: 1\n"));
    ck_assert_int_eq(hub_sub_read(s2, buf, sizeof(buf), &n), HUB_SUSPENDED);
    ck_assert_int_eq(c2.suspends, 1);
    hub_sub_free(s1);
    hub_sub_free(s2);
    hub_free(h);
}
END_TEST

START_TEST(waiters)
{
    struct hub *h = new_hub(64, 1 << 20, 2);
    struct conn c1 = {0}, c2 = {0};
    struct hub_waiter w1 = {.tenant = "t",
                            .run_id = "r1",
                            .deadline_ms = INT64_MAX,
                            .wake = {fake_suspend, fake_resume, &c1}};
    struct hub_waiter w2 = {.tenant = "t",
                            .run_id = "r2",
                            .deadline_ms = INT64_MAX,
                            .wake = {fake_suspend, fake_resume, &c2}};
    struct error err = {0};

    ck_assert_int_eq(hub_wait_add(h, &w1, &err), ST_OK);
    ck_assert_int_eq(hub_wait_add(h, &w2, &err), ST_OK);
    ck_assert(hub_wait_suspend(h, &w1));
    inject(h, 1, "r1", "running");
    ck_assert_int_eq(c1.resumes, 0);
    inject(h, 2, "r2", "completed"); /* w2 fires before it is parked */
    ck_assert(!hub_wait_suspend(h, &w2));
    ck_assert_int_eq(c2.suspends, 0);
    inject(h, 3, "r1", "completed");
    ck_assert_int_eq(c1.resumes, 1);
    hub_wait_remove(h, &w1);
    hub_wait_remove(h, &w2);
    hub_close(h);
    ck_assert(!hub_wait_empty(h, 10)); /* their answers are not sent yet */
    hub_wait_release(h, &w1);
    hub_wait_release(h, &w2);
    hub_wait_release(h, &w2);
    ck_assert(hub_wait_empty(h, 10));
    ck_assert_int_eq(hub_wait_add(h, &w1, &err), ST_BUSY);
    hub_free(h);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("hub");
    TCase *t = tcase_create("fanout");
    SRunner *r;
    int failed;

    tcase_add_test(t, select_and_wake);
    tcase_add_test(t, filters);
    tcase_add_test(t, parent_filter);
    tcase_add_test(t, tenants);
    tcase_add_test(t, heartbeat_between_frames);
    tcase_add_test(t, skip_rules);
    tcase_add_test(t, run_stream_ends);
    tcase_add_test(t, lagging);
    tcase_add_test(t, byte_bound);
    tcase_add_test(t, limit_and_close);
    tcase_add_test(t, wake_all);
    tcase_add_test(t, waiters);
    suite_add_tcase(s, t);
    r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed == 0 ? 0 : 1;
}
