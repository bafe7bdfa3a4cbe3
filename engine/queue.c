/* engine/queue.c — the two kinds of in-memory queue between engine threads
 * (engine_internal.h): a ring of fixed capacity (claimed runs waiting for a
 * worker, claimed checks waiting for a checker) and a growable hand-off
 * that one writer thread drains in batches (finished runs for the
 * completer, next checks for the poll writer). Neither locks: the owner's
 * mutex guards both. */
#include "engine/engine_internal.h"

#include <assert.h>
#include <string.h>

size_t ring_at(const struct ring *r, size_t i)
{
    assert(i < r->len);
    return (r->head + i) % r->cap;
}

size_t ring_push(struct ring *r)
{
    assert(r->len < r->cap);
    return (r->head + r->len++) % r->cap;
}

size_t ring_pop(struct ring *r)
{
    size_t i = r->head;

    assert(r->len > 0);
    r->head = (r->head + 1) % r->cap;
    r->len--;
    return i;
}

void handoff_init(struct handoff *q, size_t item_size)
{
    *q = (struct handoff){.size = item_size};
}

size_t handoff_add(struct handoff *q, const void *item)
{
    if (q->n == q->cap) {
        q->cap = q->cap ? q->cap * 2 : 64;
        q->items = xrealloc(q->items, q->cap * q->size);
    }
    memcpy(q->items + q->n * q->size, item, q->size);
    return ++q->n;
}

size_t handoff_take(struct handoff *q, void *out, size_t max)
{
    size_t n = q->n < max ? q->n : max;

    if (n == 0)
        return 0;
    memcpy(out, q->items, n * q->size);
    memmove(q->items, q->items + n * q->size, (q->n - n) * q->size);
    q->n -= n;
    return n;
}

void handoff_cleanup(struct handoff *q)
{
    free(q->items);
    *q = (struct handoff){.size = q->size};
}
