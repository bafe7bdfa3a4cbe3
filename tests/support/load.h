/* tests/support/load.h — a steady stream of submissions for the tests of
 * failover and rolling upgrades: client threads that each POST one demo
 * run after another to /alerts, with run ids of their own
 * (<prefix>-<client>-<n>), to the servers of the moment in turn, and
 * record every answer as an acknowledgement (202), a refusal (503
 * problem+json with Retry-After: nothing was promised), or anything else
 * (a transport failure, another status: "bad"). Thread-safe: the test
 * reads it and changes its servers while the clients run. */
#ifndef OPSRUN_TEST_LOAD_H
#define OPSRUN_TEST_LOAD_H

#include <stdbool.h>
#include <stddef.h>

#define TH_LOAD_SERVERS 8 /* distinct servers over a load's life */

struct th_load;

/* Starts `clients` threads, which wait until th_load_targets names a
 * server. Each run takes run_ms (the demo action's duration_ms); a client
 * pauses pause_ms after each answer. */
struct th_load *th_load_start(const char *prefix, int clients, int run_ms, int pause_ms);
/* From now on the clients send to these servers (base URLs, as
 * th_proc.url), in turn; n 0: they wait. Returns once no request to a
 * server that left the set is under way (at most the client's 30 s
 * timeout), so that server can be stopped without failing one. */
void th_load_targets(struct th_load *l, const char *const *urls, int n);
/* Stops the clients and waits for their last answers. */
void th_load_stop(struct th_load *l);
void th_load_free(struct th_load *l); /* NULL is a no-op */

struct th_load_tally {
    int acked, refused, bad;
    char refusal[160];     /* the reason of the last refusal */
    char bad_example[512]; /* the last bad answer: status and body */
};
/* What the clients were told so far. */
void th_load_tally(struct th_load *l, struct th_load_tally *t);
/* Acknowledgements from the server at url so far. */
int th_load_acked_by(struct th_load *l, const char *url);
/* The id of the i-th acknowledged (or refused) submission, i below the
 * tally's count; valid until th_load_free. Call after th_load_stop. */
const char *th_load_acked_id(const struct th_load *l, int i);
const char *th_load_refused_id(const struct th_load *l, int i);
/* The body the clients sent for submission id, into body (cap bytes): to
 * repeat a refused one. */
void th_load_body(const struct th_load *l, const char *id, char *body, size_t cap);
/* When (th_now_ms) the first acknowledgement arrived at or after since_ms;
 * 0 when none has yet. */
long long th_load_first_ack_after(struct th_load *l, long long since_ms);

#endif
