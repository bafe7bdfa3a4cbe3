/* engine/thread.c — how every engine thread is started: one policy for a
 * thread that cannot start. The caller gets ST_INTERNAL with the thread's
 * name and the reason, and stops what it had already started, so a failed
 * engine_start leaves no thread running. */
#include "engine/engine_internal.h"

#include <string.h>

enum status thread_start(struct engine *e, pthread_t *t, void *(*fn)(void *), void *arg,
                         const char *what, struct error *err)
{
    int rc = e->spawn ? e->spawn(t, fn, arg) : pthread_create(t, NULL, fn, arg);

    if (rc != 0)
        return error_set(err, ST_INTERNAL, "could not start the %s thread: %s", what, strerror(rc));
    return ST_OK;
}
