/* Internal: the layout of a blob, shared by the files of src/blob/. */
#ifndef BLOB_BLOB_IMPL_H
#define BLOB_BLOB_IMPL_H

#include "blob/tensor.h"

struct blob {
    blob_dtype dtype;
    int device; /* GPU id or BLOB_HOST_ONLY, fixed at creation */
    int num_axes;
    int64_t shape[BLOB_MAX_AXES];
    int64_t count;
    blob_syncedmem *data; /* never NULL; may be shared with other blobs */
    blob_syncedmem *diff;
};

/* Product of dims with overflow check (bytes of count * elem must fit in size_t too); a
 * failure is recorded under func, the public call. */
blob_status blob__shape_count(const char *func, blob_dtype dtype, int num_axes,
                              const int64_t *shape, int64_t *count);

/* Elements a block holds. */
int64_t blob__mem_capacity(const blob *b, const blob_syncedmem *mem);

/* A reference to a block that holds `count` elements: `mem` itself (retained) if it is
 * large enough, else a new lazy block on b's device. */
blob_status blob__block_for(const blob *b, blob_syncedmem *mem, int64_t count,
                            blob_syncedmem **out);

/* Replace b's shape and blocks at once. Takes over one reference of data and of diff
 * (retain a block first to keep it, b's current ones included) and releases b's old
 * blocks. Cannot fail. */
void blob__commit(blob *b, int num_axes, const int64_t *shape, int64_t count, blob_syncedmem *data,
                  blob_syncedmem *diff);

#endif
