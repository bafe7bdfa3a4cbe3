/* handlers/submitq.h — shared commits for submissions (group commit).
 *
 * POST /alerts hands each request's submissions to this queue as one
 * batch and parks its connection. Flusher threads take everything queued
 * (whole batches, up to batch_max submissions, a larger batch alone), write
 * it with one store_runs_submit_batch on a pooled connection, and call each
 * batch's done callback after the commit. A flusher that is idle flushes at
 * once; while it waits for PostgreSQL, new requests queue up and share its
 * next commit, so the batches grow with the load and add no delay when
 * there is none.
 *
 * Thread-safety: submitq_push, submitq_release and the batch functions may
 * be called from any thread; submitq_new/start/close/free from one. A
 * batch belongs to the caller except between submitq_push and its done
 * callback, which is the flusher's last touch of it. */
#ifndef OPSRUN_HANDLERS_SUBMITQ_H
#define OPSRUN_HANDLERS_SUBMITQ_H

#include "common/common.h"
#include "store/runs.h"

struct hctx;
struct submitq;

typedef void (*submit_done_fn)(void *arg);

/* The submissions of one request and, once done, their answers. */
struct submit_batch {
    struct run_new *items; /* items[0..n), their strings owned (submit_batch_free) */
    size_t n;
    struct run_submitted *out; /* out[0..n), filled when st is ST_OK */
    enum status st;            /* ST_OK, or why none of the items was stored */
    struct error err;
    /* the queue's */
    struct submit_batch *next;
    submit_done_fn done;
    void *done_arg;
};

/* A batch for n items, zeroed. */
struct submit_batch *submit_batch_new(size_t n);
/* Sets items[i] from rn, copying its strings and taking a reference to its input. */
void submit_batch_set(struct submit_batch *b, size_t i, const struct run_new *rn);
void submit_batch_free(struct submit_batch *b); /* NULL is a no-op */
/* Runs b now, on this thread and a pooled connection (no queue). */
void submit_batch_run(const struct hctx *hc, struct submit_batch *b);

struct submitq_options {
    int flushers;  /* threads, each writing one batch at a time */
    int batch_max; /* submissions per statement (a larger request goes alone) */
    int queue_max; /* submissions waiting; past it, push answers ST_BUSY */
};

/* hc must outlive the queue (its pool, metrics and engine are used). */
struct submitq *submitq_new(const struct hctx *hc, const struct submitq_options *o);
enum status submitq_start(struct submitq *q, struct error *err) WUR;
/* Queues b. done(arg) is called once b's answers are in: from a flusher
 * after its commit, or from this thread before the call returns when the
 * queue is full or closing (b->st ST_BUSY). The batch counts as held until
 * submitq_release. */
void submitq_push(struct submitq *q, struct submit_batch *b, submit_done_fn done, void *arg);
/* A pushed batch's answer was sent (or its request ended): no longer held. */
void submitq_release(struct submitq *q);
/* Refuses new batches, writes and answers every queued one, stops the
 * flushers, then waits up to wait_ms for every held batch to be released.
 * Returns false when some still were. */
bool submitq_close(struct submitq *q, int wait_ms);
void submitq_free(struct submitq *q); /* after submitq_close; NULL is a no-op */

#endif
