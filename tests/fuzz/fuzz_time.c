/* tests/fuzz/fuzz_time.c — RFC 3339 timestamps: time_parse_rfc3339 on any
 * text; what parses and is in range formats and parses back to the same
 * instant; and any 64-bit instant formats to text that parses. */
#include "tests/fuzz/fuzz.h"

#include "common/time_rfc3339.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = fuzz_cstr(data, size);
    char out[40];
    int64_t us, back;
    uint64_t raw = 0;

    if (time_parse_rfc3339(s, &us) && time_in_range(us)) {
        time_format_rfc3339(us, out, sizeof(out));
        FUZZ_CHECK(time_parse_rfc3339(out, &back) && back == us);
    }
    /* The first 8 bytes as an instant: the output is always valid RFC 3339
     * (clamped to years 0000..9999), and exact inside the range. */
    memcpy(&raw, data, size < sizeof(raw) ? size : sizeof(raw));
    us = (int64_t)raw;
    time_format_rfc3339(us, out, sizeof(out));
    FUZZ_CHECK(time_parse_rfc3339(out, &back));
    FUZZ_CHECK(!time_in_range(us) || back == us);
    free(s);
    return 0;
}
