/* libFuzzer target: a rank's reading of its host's board (blob__board_explain_page), as
 * the other processes of the host may have left the shared page. Input: a byte for the
 * world (2 to 8), one for the reader's rank, one for the message's size (1 to 256),
 * eight for the collective's number, then the page's bytes over a board's own page.
 * Invariants: the message is terminated within its size, names only ranks of the world
 * other than the reader, and is empty unless the page's header is the world's. */
#include <stdio.h>
#include <string.h>

#include "../../src/comm/board.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 11)
        return 0;
    const int world = 2 + data[0] % 7, self = data[1] % world;
    const size_t msg_size = 1 + data[2];
    uint64_t seq;
    memcpy(&seq, data + 3, sizeof seq);
    data += 11, size -= 11;
    blob__board *b = blob__board_new_local(world);
    fuzz_check(b, "no board");
    blob__board_page *p = blob__board_page_of(b);
    const size_t bytes = blob__board_page_bytes(world);
    memcpy(p, data, size < bytes ? size : bytes);
    char msg[257];
    memset(msg, 'x', sizeof msg);
    blob__board_explain_page(p, world, self, seq, msg, msg_size);
    fuzz_check(memchr(msg, '\0', msg_size), "not terminated within %zu bytes", msg_size);
    for (const char *m = msg; (m = strstr(m, "rank ")); m += 5) {
        int r, end = 0;
        if (sscanf(m, "rank %d (pid%n", &r, &end) == 1 && end) /* not cut short */
            fuzz_check(r >= 0 && r < world && r != self, "names rank %d of %d (reader %d)", r,
                       world, self);
    }
    blob__board_drop(b);
    return 0;
}
