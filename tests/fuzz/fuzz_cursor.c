/* tests/fuzz/fuzz_cursor.c — list cursors: cursor_decode on any token, and
 * the round trips decode(encode(x)) == x and encode(decode(t)) == t. */
#include "tests/fuzz/fuzz.h"

#include "common/cursor.h"
#include "common/ids.h"
#include "common/time_rfc3339.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *token = fuzz_cstr(data, size);
    char id[129], id2[129];
    int64_t us, us2;

    if (cursor_decode(token, &us, id)) {
        char *again = cursor_encode(us, id);
        FUZZ_CHECK(run_id_valid(id) && time_in_range(us));
        FUZZ_CHECK(strcmp(again, token) == 0);
        free(again);
    }
    /* The input read as a run id: a cursor made from it decodes to it. */
    if (run_id_valid(token)) {
        int64_t at = (int64_t)(size * 86400) * INT64_C(1000000) - INT64_C(3600000000);
        char *made = cursor_encode(at, token);
        FUZZ_CHECK(cursor_decode(made, &us2, id2));
        FUZZ_CHECK(us2 == at && strcmp(id2, token) == 0);
        free(made);
    }
    free(token);
    return 0;
}
