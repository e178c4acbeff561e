/*
 * blob/dlpack.h - zero-copy exchange of blobs with other array libraries (NumPy,
 * PyTorch, CuPy, JAX, any C or C++ code) through DLPack managed tensors.
 *
 *   #include <blob/dlpack.h>                  // not included by blob/blob.h
 *
 *   DLManagedTensor *t;                        // export: the consumer sees b's memory
 *   blob_to_dlpack(b, BLOB_PART_DATA, BLOB_DLPACK_DEVICE, BLOB_DLPACK_WRITABLE,
 *                  consumer_stream, &t);
 *   blob_free(b);                              // t keeps the memory alive
 *   ...                                        // the consumer uses t, then calls
 *   t->deleter(t);                             // the deleter, exactly once
 *
 *   blob *c;                                   // import: c borrows the producer's memory
 *   if (blob_from_dlpack(&c, their_tensor, BLOB_HOST_ONLY) != BLOB_OK)
 *       blob_dlpack_delete(their_tensor);      // a failed import leaves it with us
 *   ...
 *   blob_free(c);                              // the last reference calls its deleter
 *
 * The structs come from DLPack's own header <dlpack/dlpack.h> (DLPack 0.6 or later:
 * Debian's libdlpack-dev), which must be in the compiler's system include path (or
 * given with -I): libblob does not install it, and its pkg-config file gives the flag
 * it was built with (DLPACK_CFLAGS), if any. Only blob/dlpack.h needs it.
 *
 * DLPack 1.0 (versioned tensors, with a read-only flag). Where the header has them
 * (DLPACK_MAJOR_VERSION >= 1), BLOB_DLPACK_VERSIONED is defined and the _versioned
 * calls below are declared; the library has them when it was built with such a header
 * (build against the header its pkg-config file names). They behave as the unversioned
 * ones, and a read-only tensor is marked so (exported without BLOB_DLPACK_WRITABLE),
 * refused on import.
 *
 * Dtypes, each with 1 lane: float32, float64 and float16 (kDLFloat, 32, 64 or 16 bits),
 * bfloat16 (kDLBfloat, 16), int32 and int64 (kDLInt, 32 or 64), uint8 (kDLUInt, 8); tensors are
 * C-contiguous (row-major). Host memory is kDLCPU (or kDLCUDAHost, see
 * BLOB_DLPACK_CUDA_HOST), device memory kDLCUDA with the GPU id.
 *
 * Streams follow the Python array API's __dlpack__(stream=...) rule: an exported device
 * side is ordered before the consumer's stream on the device (an event, no host wait).
 * The consumer's stream then becomes the block's latest stream: later library work on
 * the block on another stream waits for the work queued there (so the consumer's writes
 * are seen), and freed device memory is not reused before that work is done. Like a
 * stream given to blob_stream_set, it must outlive the block.
 */
#ifndef BLOB_DLPACK_H
#define BLOB_DLPACK_H

#include <dlpack/dlpack.h>

#include "blob/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Which side of a block an export hands out. */
typedef enum {
    BLOB_DLPACK_HOST = 0,  /* the host side: kDLCPU (or kDLCUDAHost) */
    BLOB_DLPACK_DEVICE = 1 /* the device side of a GPU blob: kDLCUDA */
} blob_dlpack_side;

/* Flags of blob_to_dlpack. */
enum {
    /* The consumer may write: the export claims the head for the side, as the mutable
     * accessors do (otherwise it syncs the side, as the read accessors do, and the
     * consumer must not write). As with a mutable accessor's pointer, the consumer's
     * writes reach the blob's other side at its next access of it only if nothing
     * accessed that side in between. */
    BLOB_DLPACK_WRITABLE = 1,
    /* Describe a pinned host side as kDLCUDAHost instead of kDLCPU (pageable memory
     * stays kDLCPU). Both name memory the host reads directly; PyTorch accepts only
     * kDLCPU, NumPy and CuPy both. */
    BLOB_DLPACK_CUDA_HOST = 2,
    /* The consumer orders its device work itself (the array API's stream=-1): the
     * device side is synced on the calling thread's current stream and `stream` is not
     * used. */
    BLOB_DLPACK_UNORDERED = 4
};

/* Export b's data or diff as a managed tensor of b's shape and dtype (compact strides
 * given) that holds a reference on the block: freeing, reshaping or re-sharing b never
 * frees the memory under the consumer; the tensor's deleter drops the reference (and
 * frees the tensor). The side is brought up to date first (a copy if it is stale,
 * synchronous as in the accessors), on the device side on `stream` (the consumer's;
 * NULL is the legacy default stream) with the current device switched to b's for the
 * call. A blob of count 0 exports a NULL data pointer. *out is NULL on failure, and b is
 * unchanged.
 * Errors: BLOB_EINVAL (NULL or bad argument), BLOB_ENODEV (device side of a host-only
 * blob), BLOB_ENOMEM, accessor errors. */
BLOB_API blob_status blob_to_dlpack(blob *b, blob_part part, blob_dlpack_side side, unsigned flags,
                                    void *stream, DLManagedTensor **out);

/* Make a blob whose data borrows the tensor's memory (data + byte_offset), as
 * blob_set_cpu_data / blob_set_gpu_data do; its diff is a new lazy block. The blob owns
 * the tensor from then on: its deleter is called exactly once, when the last reference
 * to the borrowing block is dropped (the block may be shared with other blobs through
 * blob_share_data; a blob_set_*_data, reshape or load that replaces the block drops one).
 * Host tensors (kDLCPU, kDLCUDAHost, device_id 0) give a blob bound to `host_device`
 * (BLOB_HOST_ONLY, BLOB_DEVICE_DEFAULT or a GPU id); kDLCUDA tensors a blob bound to
 * their GPU, whose pending work the caller has ordered before its current stream (in
 * Python: by passing it to __dlpack__). The tensor is untrusted: only its shape and
 * strides arrays are read; its memory must hold what they describe.
 * On failure *out is NULL, the deleter has not been called and the tensor is still the
 * caller's (to retry, or to free with blob_dlpack_delete).
 * Errors: BLOB_EINVAL (NULL tensor; a dtype other than those above with 1 lane;
 * ndim outside 0..32; NULL shape; a negative dim; strides that are not compact
 * row-major (dims of size 1 may have any stride, a tensor of count 0 any strides); a
 * byte_offset that is not a multiple of the element size or overflows the address; a
 * misaligned or NULL data pointer; a device type other than these three; a host
 * device_id other than 0; data that the driver knows to be elsewhere than the device
 * says: host memory named as a GPU's, a GPU's memory named as another GPU's or as host
 * memory, managed memory being taken as either; the driver is not asked about this
 * library's own export while its data is still its block's memory), BLOB_ENODEV
 * (kDLCUDA without a GPU), BLOB_ERANGE (no such GPU, for kDLCUDA or host_device),
 * BLOB_EOVERFLOW, BLOB_ENOMEM. */
BLOB_API blob_status blob_from_dlpack(blob **out, DLManagedTensor *tensor, int host_device);

/* Call the tensor's deleter, if it has one: how the owner of a tensor gives it up.
 * NULL is a no-op. */
BLOB_API void blob_dlpack_delete(DLManagedTensor *tensor);

#if defined(DLPACK_MAJOR_VERSION) && DLPACK_MAJOR_VERSION >= 1
#define BLOB_DLPACK_VERSIONED 1

/* blob_to_dlpack as a DLPack 1.0 tensor: version DLPACK_MAJOR/MINOR_VERSION of the
 * header, flags DLPACK_FLAG_BITMASK_READ_ONLY unless BLOB_DLPACK_WRITABLE.
 * Errors: as blob_to_dlpack. */
BLOB_API blob_status blob_to_dlpack_versioned(blob *b, blob_part part, blob_dlpack_side side,
                                              unsigned flags, void *stream,
                                              DLManagedTensorVersioned **out);

/* blob_from_dlpack for a DLPack 1.0 tensor.
 * Errors: as blob_from_dlpack, and BLOB_EINVAL for a major version other than the
 * header's or a read-only tensor (DLPACK_FLAG_BITMASK_READ_ONLY). */
BLOB_API blob_status blob_from_dlpack_versioned(blob **out, DLManagedTensorVersioned *tensor,
                                                int host_device);

/* Call the versioned tensor's deleter, if it has one. NULL is a no-op. */
BLOB_API void blob_dlpack_versioned_delete(DLManagedTensorVersioned *tensor);
#endif

#ifdef __cplusplus
}
#endif
#endif
