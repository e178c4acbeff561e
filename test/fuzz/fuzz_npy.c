/* The .npy loader on arbitrary files, into data and diff of blobs of every dtype.
 * Invariants: the status is OK, EFORMAT or EOVERFLOW (ENOTSUP, always, for bfloat16, which
 * NumPy lacks), with a detail on failure; a failed
 * load leaves the blob exactly as it was (shape, blocks, heads, values); a successful
 * one holds what the file's size justifies; and no load allocates more than the file
 * justifies (its header, and its data converted to the wider dtype), plus a fixed
 * allowance for the library's objects and stdio's buffer. */
#include <string.h>

#include <blob/blob.h>

#include "fuzz.h"

#define ALLOWANCE (64 << 10)

#define N_DTYPES 7 /* BLOB_FLOAT32 ... BLOB_UINT8 */

/* The blob each load starts from: 2x3, data bytes 100 + i, diff bytes i, on the host. */
static blob *make_guard(blob_dtype dt)
{
    int64_t shape[] = {2, 3};
    blob *b;
    void *data, *diff;
    fuzz_check(blob_create(&b, dt, BLOB_HOST_ONLY, 2, shape) == BLOB_OK &&
                   blob_mutable_cpu_data(b, &data) == BLOB_OK &&
                   blob_mutable_cpu_diff(b, &diff) == BLOB_OK,
               "%s", blob_last_error());
    for (size_t i = 0; i < 6 * blob_dtype_size(dt); i++) {
        ((unsigned char *)data)[i] = (unsigned char)(100 + i);
        ((unsigned char *)diff)[i] = (unsigned char)i;
    }
    return b;
}

typedef struct {
    int num_axes;
    int64_t shape[BLOB_MAX_AXES], count, capacity;
    blob_syncedmem *mem[2];
    blob_head head[2];
    unsigned char bytes[2][6 * sizeof(double)];
} snapshot;

static void take(blob *b, snapshot *s)
{
    memset(s, 0, sizeof *s);
    s->num_axes = blob_num_axes(b);
    memcpy(s->shape, blob_shape(b), (size_t)s->num_axes * sizeof(int64_t));
    s->count = blob_count(b);
    s->capacity = blob_capacity(b);
    s->mem[0] = blob_data_mem(b);
    s->mem[1] = blob_diff_mem(b);
    for (int p = 0; p < 2; p++) {
        s->head[p] = blob_syncedmem_head(s->mem[p]);
        const void *v;
        fuzz_check(blob_syncedmem_cpu_data(s->mem[p], &v) == BLOB_OK, "%s", blob_last_error());
        memcpy(s->bytes[p], v, blob_syncedmem_size(s->mem[p]));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fuzz_file(0, data, size));
    for (int i = 0; i < 2 * N_DTYPES; i++) {
        blob_dtype dt = (blob_dtype)(i / 2);
        blob_part part = (blob_part)(i % 2);
        blob *b = make_guard(dt);
        snapshot before, after;
        take(b, &before);
        fuzz_count_begin();
        blob_status st = blob_load_npy(b, part, path);
        size_t allocated = fuzz_count_end();
        fuzz_check(allocated <= 5 * size + ALLOWANCE,
                   /* f2 into float64: 4x */ "%zu bytes allocated for a %zu-byte file", allocated,
                   size);
        if (st == BLOB_OK) {
            /* every element took at least a byte of the file */
            fuzz_check(blob_count(b) <= (int64_t)size, "count %lld from %zu bytes",
                       (long long)blob_count(b), size);
            fuzz_check(blob_capacity(b) >= blob_count(b), "capacity %lld < count %lld",
                       (long long)blob_capacity(b), (long long)blob_count(b));
            const void *v;
            fuzz_check((part == BLOB_PART_DATA ? blob_cpu_data(b, &v) : blob_cpu_diff(b, &v)) ==
                           BLOB_OK,
                       "%s", blob_last_error());
        } else {
            fuzz_check(dt == BLOB_BFLOAT16 ? st == BLOB_ENOTSUP
                                           : st == BLOB_EFORMAT || st == BLOB_EOVERFLOW,
                       "status %s: %s", blob_status_name(st), blob_last_error());
            fuzz_check(!strncmp(blob_last_error(), "blob_load_npy: ", 15), "detail '%s'",
                       blob_last_error());
            take(b, &after);
            fuzz_check(!memcmp(&before, &after, sizeof before),
                       "a failed load (%s) changed the blob", blob_last_error());
        }
        blob_free(b);
    }
    return 0;
}
