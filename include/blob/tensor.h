/*
 * blob/tensor.h - the N-D blob: a shape, and a data and a diff block of that many
 * elements of one dtype (blob/types.h): float32, float64, bfloat16, float16, int32, int64
 * or uint8. Every dtype is stored, reshaped, shared, copied and synced alike; the math
 * (update, norms, scaling) takes the float dtypes and gives BLOB_ENOTSUP, naming the
 * dtype, for the integers.
 *
 *   int64_t shape[] = {64, 784};
 *   blob *x;
 *   blob_create(&x, BLOB_FLOAT32, BLOB_DEVICE_DEFAULT, 2, shape);
 *   float *p;
 *   blob_mutable_cpu_data(x, (void **)&p);     // fill on the host ...
 *   const void *d;
 *   blob_gpu_data(x, &d);                      // ... read on the GPU (one H->D copy)
 *   blob_update(x);                            // data -= diff where data's head is
 *   blob_free(x);
 *
 * Counts are int64_t; a 0-axis shape has count 1, a shape with a 0 dim count 0 (and
 * every accessor still works, yielding NULL). Reshape keeps memory and contents while
 * the new count fits the capacity and allocates fresh (lazily zeroed) blocks only when
 * it grows past it; blob_shrink_to_fit gives memory back. A failed call leaves the blob
 * exactly as it was. A blob is not safe for concurrent use by several threads.
 */
#ifndef BLOB_TENSOR_H
#define BLOB_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "blob/status.h"
#include "blob/syncedmem.h"
#include "blob/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define BLOB_MAX_AXES         32
/* Enough for any shape string, terminator included. */
#define BLOB_SHAPE_STRING_MAX (BLOB_MAX_AXES * 21 + 24)

typedef struct blob blob;

/* Create a blob of the given shape (0 <= num_axes <= 32, every dim >= 0) on `device`
 * (a GPU id, BLOB_HOST_ONLY or BLOB_DEVICE_DEFAULT). No data is allocated until first
 * access. *out is NULL on failure.
 * Errors: BLOB_EINVAL, BLOB_ERANGE (no such GPU), BLOB_EOVERFLOW, BLOB_ENOMEM. */
BLOB_API blob_status blob_create(blob **out, blob_dtype dtype, int device, int num_axes,
                                 const int64_t *shape);

/* Free the blob and drop its references to its blocks. NULL is a no-op. */
BLOB_API void blob_free(blob *b);

/* Change the shape. Memory is replaced (by fresh lazy blocks) only for a block whose
 * capacity is below the new count; otherwise memory and contents are kept.
 * Errors: BLOB_EINVAL (bad axes or negative dim), BLOB_EOVERFLOW, BLOB_ENOMEM. */
BLOB_API blob_status blob_reshape(blob *b, int num_axes, const int64_t *shape);
BLOB_API blob_status blob_reshape_like(blob *b, const blob *other);

/* Give back memory beyond count: blocks larger than needed are replaced by blocks of
 * exactly count elements holding the same values. Blocks shared with other blobs are
 * left alone. No-op when nothing is spare. */
BLOB_API blob_status blob_shrink_to_fit(blob *b);

/* Queries. For a NULL blob each records a detail (blob_last_error) and returns a
 * neutral value: BLOB_DTYPE_NONE, BLOB_HOST_ONLY for the device, 0 for the counts,
 * NULL for the shape and the blocks. */
BLOB_API blob_dtype blob_get_dtype(const blob *b);
BLOB_API int blob_device(const blob *b);
BLOB_API int blob_num_axes(const blob *b);
BLOB_API int64_t blob_count(const blob *b);
/* Elements the current data and diff blocks can both hold without reallocation. */
BLOB_API int64_t blob_capacity(const blob *b);
/* The dims, blob_num_axes(b) of them; valid until the next reshape. */
BLOB_API const int64_t *blob_shape(const blob *b);
/* Axis index with negatives counted from the end: valid for -n <= axis < n. */
BLOB_API blob_status blob_canonical_axis(const blob *b, int axis, int *out);
BLOB_API blob_status blob_shape_at(const blob *b, int axis, int64_t *out);
/* Product of dims in [start, end); 1 for an empty range. BLOB_ERANGE out of bounds. */
BLOB_API blob_status blob_count_range(const blob *b, int start, int end, int64_t *out);
/* "2 3 4 5 (120)" into buf of `size` bytes; BLOB_ERANGE if it does not fit. */
BLOB_API blob_status blob_shape_string(const blob *b, char *buf, size_t size);
/* Caffe's num/channels/height/width: only for <= 4 axes (BLOB_ESTATE otherwise);
 * axes past num_axes read as 1, as in Caffe (a 2-axis blob is num x channels x 1 x 1).
 * Any output pointer may be NULL. */
BLOB_API blob_status blob_legacy_shape(const blob *b, int64_t *num, int64_t *channels,
                                       int64_t *height, int64_t *width);
/* Row-major offset of the element at `indices` (n <= num_axes of them; missing trailing
 * indices are 0). Every index must satisfy 0 <= i < dim: BLOB_ERANGE otherwise. */
BLOB_API blob_status blob_offset(const blob *b, int n, const int64_t *indices, int64_t *out);

/* The blocks (borrowed references; valid until the next reshape, share or free); NULL,
 * with a detail, for a NULL blob. */
BLOB_API blob_syncedmem *blob_data_mem(const blob *b);
BLOB_API blob_syncedmem *blob_diff_mem(const blob *b);

/* Data and diff accessors: see blob/syncedmem.h for the head-state rules. */
BLOB_API blob_status blob_cpu_data(blob *b, const void **out);
BLOB_API blob_status blob_mutable_cpu_data(blob *b, void **out);
BLOB_API blob_status blob_gpu_data(blob *b, const void **out);
BLOB_API blob_status blob_mutable_gpu_data(blob *b, void **out);
BLOB_API blob_status blob_cpu_diff(blob *b, const void **out);
BLOB_API blob_status blob_mutable_cpu_diff(blob *b, void **out);
BLOB_API blob_status blob_gpu_diff(blob *b, const void **out);
BLOB_API blob_status blob_mutable_gpu_diff(blob *b, void **out);

/* Borrow caller memory of `bytes` bytes as the data's host (device) side. If the data
 * block is shared with other blobs, this blob gets a block of its own first.
 * Errors: BLOB_EINVAL (bytes < count * element size), as blob_syncedmem_set_*_data. */
BLOB_API blob_status blob_set_cpu_data(blob *b, void *data, size_t bytes);
BLOB_API blob_status blob_set_gpu_data(blob *b, void *data, size_t bytes);

/* data -= diff, by axpy where data's head is: CBLAS when AT_CPU, cuBLAS on the current
 * stream when AT_GPU or SYNCED (data ends AT_GPU); bfloat16 and float16 in float32, each
 * result rounded to nearest even, with the same bits on both sides. Count 0 is a no-op.
 * Errors: BLOB_ENOTSUP (an integer dtype), BLOB_ESTATE when data is UNINITIALIZED,
 * accessor errors. */
BLOB_API blob_status blob_update(blob *b);

/* Sum of |x| and of x^2 of data or diff, computed where the head is (heads unchanged);
 * 0 without allocating when UNINITIALIZED. bfloat16 and float16 accumulate in float32.
 * Errors: BLOB_EINVAL, BLOB_ENOTSUP (an integer dtype), accessor errors. */
BLOB_API blob_status blob_asum_data(blob *b, double *out);
BLOB_API blob_status blob_asum_diff(blob *b, double *out);
BLOB_API blob_status blob_sumsq_data(blob *b, double *out);
BLOB_API blob_status blob_sumsq_diff(blob *b, double *out);
/* Multiply data or diff by s where the head is; no-op when UNINITIALIZED. bfloat16 and
 * float16 as blob_update. Errors: BLOB_EINVAL, BLOB_ENOTSUP (an integer dtype), accessor
 * errors. */
BLOB_API blob_status blob_scale_data(blob *b, double s);
BLOB_API blob_status blob_scale_diff(blob *b, double s);

/* Copy src's data (or diff, if copy_diff) into dst's, on the GPU when src's newest
 * bytes are there and dst has a GPU, else on the host. Shapes must be equal
 * (BLOB_ESHAPE) unless reshape is true; dtypes must be equal (any dtype).
 * Errors: BLOB_EINVAL (NULL, dtypes differ), BLOB_ESHAPE, accessor errors. */
BLOB_API blob_status blob_copy_from(blob *dst, blob *src, bool copy_diff, bool reshape);

/* blob_copy_from with the values converted to dst's dtype, between the float dtypes
 * (float64, float32, bfloat16, float16) in either direction, on the side
 * blob_copy_from would copy on: round to nearest even, overflow to Inf, NaN to the quiet
 * NaN of its sign, the same bits on the host and the GPU (blob_cpu_convert). Equal
 * dtypes copy the bits, as blob_copy_from. A failed call leaves dst as it was.
 *   blob_convert_from(w16, w32, false, true);   // a bfloat16 copy of float32 weights
 * Errors: BLOB_EINVAL (NULL), BLOB_ENOTSUP (an integer dtype, named), BLOB_ESHAPE,
 * accessor errors. */
BLOB_API blob_status blob_convert_from(blob *dst, blob *src, bool copy_diff, bool reshape);

/* Make b use other's data (diff) block, for any dtype. Counts must match (BLOB_ESHAPE)
 * and so must dtype and device (BLOB_EINVAL). b's capacity becomes what the shared block holds, so
 * a later reshape past it allocates instead of writing past the shared memory. */
BLOB_API blob_status blob_share_data(blob *b, blob *other);
BLOB_API blob_status blob_share_diff(blob *b, blob *other);

typedef enum { BLOB_PART_DATA = 0, BLOB_PART_DIFF = 1 } blob_part;

/* Write data or diff as a NumPy .npy file (format 1.0, C order, the header numpy writes),
 * little-endian: '<f4', '<f8', '<f2' (float16), '<i4', '<i8', '|u1'. NumPy has no
 * bfloat16: a bfloat16 blob gives BLOB_ENOTSUP (blob_convert_from makes a float32 copy). A symbolic link at `path` is followed, as numpy does,
 * and the file it points to is replaced; anything at the path that is not a regular file
 * (a directory, FIFO, device) is refused with BLOB_EIO, root or not. The new file is
 * written in the target's directory as an unnamed O_TMPFILE file where the file system has
 * it (otherwise under a temporary name), named ".NAME.blob-tmp-XXXXXX" once complete,
 * synced, renamed over the target, and the directory synced. A process killed while its
 * file has that name (between naming and renaming, or mid-write without O_TMPFILE) leaves
 * it behind; a later save into the directory removes such files of this user once nobody
 * has touched them for an hour, and only those. The new file gets the mode of the file it
 * replaces, or 0666 less the umask when new, as numpy's files. A successful return means
 * the complete new file is at the path and on stable storage; on failure the path holds
 * the old file (or nothing, as before) and no temporary file remains, except a failed sync
 * of the directory (BLOB_EIO, "fsync of the directory"), which comes after the rename: the
 * new file is then in place but may not survive a power loss. Errors: BLOB_EINVAL,
 * BLOB_ENOTSUP (bfloat16), BLOB_EIO, BLOB_ENOMEM, accessor errors. */
BLOB_API blob_status blob_save_npy(blob *b, blob_part part, const char *path);

/* Read a .npy file (format 1.0, 2.0 or 3.0; '<' '>' or '=' byte order, or '|' for u1;
 * f2, f4, f8, i4, i8 or u1; C order) into data or diff, reshaping the blob to the file's
 * shape (the other part is reshaped too). A float file loads into a float32, float64 or
 * float16 blob, converted as blob_cpu_convert does; an integer file only into a blob of
 * its own dtype (BLOB_EFORMAT otherwise); a bfloat16 blob gives BLOB_ENOTSUP, as NumPy
 * has no bfloat16. The loaded part gets a new block: a
 * blob that shared the old one keeps the old values. The file is untrusted: every
 * malformed input gives BLOB_EFORMAT (BLOB_EIO for read errors), nothing is allocated
 * beyond what the file's size justifies, and on any failure the blob is left untouched.
 * A path that is not a regular file (a FIFO, device, directory) gives BLOB_EIO at once,
 * without being opened. The shape must fit in memory as the file's elements, dims of 0
 * or not, as numpy requires (BLOB_EFORMAT otherwise); a shape that does so but not as
 * the blob's wider elements (a count-0 f4 file with huge other dims, into an f64 blob)
 * gives BLOB_EOVERFLOW, as blob_reshape would.
 * Errors: BLOB_EINVAL, BLOB_ENOTSUP (bfloat16), BLOB_EFORMAT, BLOB_EIO, BLOB_EOVERFLOW,
 * BLOB_ENOMEM, BLOB_EDEVMEM. */
BLOB_API blob_status blob_load_npy(blob *b, blob_part part, const char *path);

#ifdef __cplusplus
}
#endif
#endif
