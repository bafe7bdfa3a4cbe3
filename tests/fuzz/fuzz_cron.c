/* tests/fuzz/fuzz_cron.c — schedule expressions: cron_parse on any text;
 * what parses has a next slot after each of a few instants in UTC and in a
 * zone with daylight saving that is later than the instant (or none at all
 * for dates that never come), and the error text of what does not parse is
 * valid UTF-8 (it ends up in a start-up message and in JSON). */
#include "tests/fuzz/fuzz.h"

#include "common/cron.h"

static struct tz *zone(const char *name)
{
    struct tz *tz = NULL;
    struct error err = {0};

    if (tz_load(name, &tz, &err) != ST_OK) {
        fprintf(stderr, "fuzz_cron: %s\n", err.message);
        abort();
    }
    return tz;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct tz *zones[2];
    static const int64_t instants[] = {0, 1774746000 - 1, 1792882800 - 1800, 4102444800};
    char *s = fuzz_cstr(data, size);
    struct cron c;
    struct error err = {0};
    int64_t next;

    if (!zones[0]) {
        zones[0] = zone("UTC");
        zones[1] = zone("Europe/Berlin");
    }
    if (cron_parse(s, &c, &err) != ST_OK) {
        FUZZ_CHECK(err.message[0] != '\0' && fuzz_utf8(err.message));
        free(s);
        return 0;
    }
    for (size_t z = 0; z < ARRAY_LEN(zones); z++)
        for (size_t i = 0; i < ARRAY_LEN(instants); i++)
            if (cron_next(&c, zones[z], instants[i], &next))
                FUZZ_CHECK(next > instants[i]);
    free(s);
    return 0;
}
