/* tests/fuzz/fuzz_evparse.c — the client's event-stream parser
 * (client/evparse.c) on any body, as a server or a proxy could send it:
 * fed whole, one byte at a time, and split at a point the input chooses,
 * it dispatches the same events and ends with the same status (a line or
 * an event past the cap is refused however the bytes arrive). Each event's
 * text, cleaned as watch cleans it for a terminal, holds no control
 * character and is valid UTF-8. */
#include "tests/fuzz/fuzz.h"

#include "client/evparse.h"
#include "client/report.h"
#include "common/dynbuf.h"

#define CAP 512

static enum status on_event(void *arg, const struct evparse_event *ev, struct error *err)
{
    struct dynbuf *log = arg;
    char clean[CAP * 4 + 1];

    (void)err;
    FUZZ_CHECK(ev->type && ev->id && ev->data_len < CAP);
    report_clean(ev->data, clean, sizeof(clean), -1);
    FUZZ_CHECK(fuzz_utf8(clean));
    for (const unsigned char *p = (const unsigned char *)clean; *p; p++)
        FUZZ_CHECK(*p >= 0x20 && *p != 0x7f);
    if (dynbuf_addf(log, "%s|%s|%zu|", ev->type, ev->id, ev->data_len) != ST_OK ||
        dynbuf_add(log, ev->data, ev->data_len) != ST_OK || dynbuf_add(log, "\n", 1) != ST_OK)
        abort();
    return ST_OK;
}

/* Feeds data in pieces: at most step bytes each, the first one first_len. */
static enum status parse(const uint8_t *data, size_t size, size_t first_len, size_t step,
                         struct dynbuf *log)
{
    struct evparse p;
    struct error err = {0};
    enum status st = ST_OK;

    evparse_init(&p, CAP, on_event, log);
    for (size_t i = 0, n = first_len; st == ST_OK && i < size; i += n, n = step) {
        if (n > size - i)
            n = size - i;
        st = evparse_feed(&p, (const char *)data + i, n, &err);
    }
    if (st != ST_OK)
        FUZZ_CHECK(st == ST_TOO_LARGE && fuzz_utf8(err.message));
    evparse_cleanup(&p);
    return st;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct dynbuf whole, bytes, split;
    size_t cut = size ? data[0] % size : 0;
    enum status a, b, c;

    dynbuf_init(&whole, (size_t)1 << 24);
    dynbuf_init(&bytes, (size_t)1 << 24);
    dynbuf_init(&split, (size_t)1 << 24);
    a = parse(data, size, size, size ? size : 1, &whole);
    b = parse(data, size, 1, 1, &bytes);
    c = parse(data, size, cut ? cut : 1, size ? size : 1, &split);
    FUZZ_CHECK(a == b && b == c);
    FUZZ_CHECK(dynbuf_len(&whole) == dynbuf_len(&bytes) &&
               dynbuf_len(&whole) == dynbuf_len(&split));
    FUZZ_CHECK(dynbuf_len(&whole) == 0 ||
               (memcmp(dynbuf_ptr(&whole), dynbuf_ptr(&bytes), dynbuf_len(&whole)) == 0 &&
                memcmp(dynbuf_ptr(&whole), dynbuf_ptr(&split), dynbuf_len(&whole)) == 0));
    dynbuf_free(&whole);
    dynbuf_free(&bytes);
    dynbuf_free(&split);
    return 0;
}
