/* libFuzzer target: the registration exchange of blob_comm_list_create, as the peers'
 * bytes reach it. Input: a byte giving the world size (1 to 8), that many headers, then
 * the ranks' entry tables. Invariants: a header no rank sends is refused with ECOMM
 * before it sizes anything; the entries exchanged are never more than one past the
 * shortest list, so never more than one past this rank's own; and the comparison gives
 * BLOB_OK, ESHAPE or the status a failed rank reported, each with its message. */
#include <string.h>

#include "../../src/comm/comm_impl.h"
#include "fuzz.h"

enum { MAX_WORLD = 8, MAX_ENTRIES = 4096 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const int world = 1 + data[0] % MAX_WORLD;
    data++, size--;
    blob__comm_header headers[MAX_WORLD];
    memset(headers, 0, sizeof headers);
    size_t take = size < world * sizeof *headers ? size : world * sizeof *headers;
    memcpy(headers, data, take);
    data += take, size -= take;

    int64_t len = -1;
    blob_status st = blob__comm_table_length(headers, world, &len);
    fuzz_check(st == BLOB_OK || st == BLOB_ECOMM, "status %d", (int)st);
    if (st != BLOB_OK) {
        fuzz_check(len == 0 && strstr(blob_last_error(), "sent a malformed registration"),
                   "len %lld: %s", (long long)len, blob_last_error());
        return 0;
    }
    for (int r = 0; r < world; r++)
        fuzz_check(headers[r].n >= 0 && len <= headers[r].n + 1, "len %lld, rank %d has %lld",
                   (long long)len, r, (long long)headers[r].n);
    if (len > MAX_ENTRIES)
        return 0;

    size_t bytes = (size_t)world * (size_t)len * sizeof(blob__comm_entry);
    blob__comm_entry *tables = calloc(1, bytes ? bytes : 1);
    if (!tables)
        return 0;
    memcpy(tables, data, size < bytes ? size : bytes);
    st = blob__comm_compare(headers, tables, world, len);
    bool failed_rank = false;
    for (int r = 0; r < world; r++)
        failed_rank |= headers[r].status == st && st != BLOB_OK;
    fuzz_check(st == BLOB_OK || st == BLOB_ESHAPE || failed_rank, "status %d", (int)st);
    const char *said = failed_rank         ? "could not register its list"
                       : st == BLOB_ESHAPE ? "registered different lists"
                                           : "";
    fuzz_check(strstr(blob_last_error(), said), "%s", blob_last_error());
    free(tables);
    return 0;
}
