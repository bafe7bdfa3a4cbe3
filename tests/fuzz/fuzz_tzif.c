/* tests/fuzz/fuzz_tzif.c — time zone files: tz_parse on any bytes; what
 * loads gives offsets within a day of UTC, and every local time resolves to
 * instants that read back as that local time (or, in a gap, to the instant
 * the clock jumped). */
#include "tests/fuzz/fuzz.h"

#include "common/tz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const int64_t instants[] = {-2208988800, 0, 1774746000, 2147483647, 7258118400};
    struct tz *tz = NULL;
    struct error err = {0};
    int64_t at[2];
    int n;

    if (tz_parse("fuzz", data, size, &tz, &err) != ST_OK) {
        FUZZ_CHECK(tz == NULL && fuzz_utf8(err.message));
        return 0;
    }
    for (size_t i = 0; i < ARRAY_LEN(instants); i++) {
        int32_t off = tz_offset(tz, instants[i]);

        FUZZ_CHECK(off >= -26 * 3600 && off <= 26 * 3600);
        n = tz_from_local(tz, instants[i], at);
        FUZZ_CHECK(n >= 0 && n <= 2);
        for (int k = 0; k < n; k++)
            FUZZ_CHECK(at[k] + tz_offset(tz, at[k]) == instants[i]);
        FUZZ_CHECK(n < 2 || at[0] < at[1]);
    }
    tz_free(tz);
    return 0;
}
