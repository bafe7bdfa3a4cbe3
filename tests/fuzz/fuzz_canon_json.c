/* tests/fuzz/fuzz_canon_json.c — canonical JSON of any document jansson
 * parses (any top-level value): never NULL, valid JSON that reads back
 * equal to the input, and a fixed point (canonical of the canonical is
 * itself). identity and request hashes rest on this. */
#include "tests/fuzz/fuzz.h"

#include "common/canon_json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_error_t jerr;
    json_t *v =
        json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
    json_t *back;
    char *canon, *again;

    if (!v)
        return 0;
    canon = canon_json(v);
    FUZZ_CHECK(canon != NULL);
    back = json_loads(canon, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
    FUZZ_CHECK(back != NULL);
    FUZZ_CHECK(json_equal(v, back));
    again = canon_json(back);
    FUZZ_CHECK(again != NULL && strcmp(canon, again) == 0);
    free(again);
    free(canon);
    json_decref(back);
    json_decref(v);
    return 0;
}
