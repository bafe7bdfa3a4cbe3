/* tests/support/receiver.h — a receiver of opsrun's notifications for the
 * end-to-end suites: libmicrohttpd on 127.0.0.1 inside the test process,
 * on a port of th_free_port, a thread per connection (so that an answer can
 * hang without holding the others up). It records every request, and
 * answers as the request's path says, so that a test configures a
 * notifier's URL and needs no control API:
 *
 *   /codes/S1,S2,.../<name>  the k-th request to this exact path gets step
 *                            Sk, the last step repeating; a step is a
 *                            status code ("503"), or a code and a delay in
 *                            milliseconds ("200@30000": 200, 30 s later)
 *   /sleep/<ms>/<name>       200, ms milliseconds later
 *   /gone/<name>             410
 *   anything else            200
 *
 * Answers have an empty body. A delayed answer is cut short when the
 * receiver stops, so that a stop never waits for one: the test's opsrun
 * has long given up on it by then, or been stopped.
 *
 * Thread-safe: requests arrive on the server's threads while the test
 * reads what arrived. */
#ifndef OPSRUN_TEST_RECEIVER_H
#define OPSRUN_TEST_RECEIVER_H

#include <stdbool.h>
#include <stddef.h>

struct receiver; /* opaque */

/* A request as it arrived, with what it was answered. Header values are
 * "" when the request had no such header; each field is cut at its size. */
struct rcv_request {
    char method[16];
    char path[512];
    char event[64];      /* Opsrun-Event */
    char delivery[64];   /* Opsrun-Delivery */
    char signature[160]; /* Opsrun-Signature */
    char content_type[128];
    char *body;            /* heap, NUL-terminated */
    long long at_ms;       /* arrival (th_now_ms: monotonic), once the body is in */
    long long answered_ms; /* 0 while it is not answered */
    unsigned status;       /* the status answered; 0 while it is not answered */
};

/* Starts a receiver; aborts the test when it cannot. */
struct receiver *receiver_start(void);
/* Cuts delayed answers short, stops the server and frees rv (NULL: a
 * no-op). Records copied out before stay the caller's. */
void receiver_stop(struct receiver *rv);
int receiver_port(const struct receiver *rv);
/* "http://127.0.0.1:<port><path>" into out. */
void receiver_url(const struct receiver *rv, const char *path, char *out, size_t cap);

/* Copies of the requests to path (exactly; NULL: to any path), oldest
 * first, up to max into out; returns how many there are (past max too).
 * Each copy's body is the caller's: rcv_requests_free. */
int receiver_requests(struct receiver *rv, const char *path, struct rcv_request *out, int max);
void rcv_requests_free(struct rcv_request *r, int n);
/* How many requests path (NULL: any path) received; *in_flight (may be
 * NULL) gets how many of them are not answered yet. */
int receiver_count(struct receiver *rv, const char *path, int *in_flight);
/* Waits up to timeout_ms until path has received at least n requests;
 * returns how many it has then. */
int receiver_wait(struct receiver *rv, const char *path, int n, int timeout_ms);

/* The Opsrun-Signature value of body signed with secret at t (unix
 * seconds): "t=<t>,v1=<hex HMAC-SHA256 with secret of "<t>.<body>">",
 * into out (at least 96 bytes). The HMAC is common/digest.c's (libcrypto),
 * which tests/unit/test_util.c checks against RFC 4231. */
void receiver_sign(const char *secret, long long t, const char *body, char *out, size_t cap);
/* Whether header, an Opsrun-Signature value "t=<unix seconds>,v1=<64 hex
 * digits>", is the HMAC-SHA256 with secret of "<t>.<body>"; *t (may be
 * NULL) gets its t when it parses. */
bool receiver_signature_ok(const char *secret, const char *header, const char *body, long long *t);

#endif
