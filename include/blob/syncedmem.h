/*
 * blob/syncedmem.h - a block of memory with a host side and a device side.
 *
 *   blob_syncedmem *m;
 *   blob_syncedmem_create(&m, 1024, BLOB_DEVICE_DEFAULT);  // nothing allocated yet
 *   float *h;
 *   blob_syncedmem_mutable_cpu_data(m, (void **)&h);      // host alloc+zero, AT_CPU
 *   h[0] = 1.0f;
 *   const void *d;
 *   blob_syncedmem_gpu_data(m, &d);                        // device alloc, H->D, SYNCED
 *   blob_syncedmem_cpu_data(m, (const void **)&h);         // no copy
 *   blob_syncedmem_free(m);
 *
 * Each side is allocated on its first use and the head says which side holds the newest
 * bytes, so data crosses the bus only when the side being read is stale:
 *
 *   head \ access  cpu_data        mutable_cpu     gpu_data        mutable_gpu
 *   UNINITIALIZED  alloc+zero ->C  alloc+zero ->C  alloc+zero ->G  alloc+zero ->G
 *   AT_CPU         -               -               H->D ->SYNCED   H->D ->G
 *   AT_GPU         D->H ->SYNCED   D->H ->C        -               -
 *   SYNCED         -               ->C             -               ->G
 *
 * Read accessors return const pointers and never downgrade SYNCED; mutable accessors
 * claim the head. A block of size 0 is valid: every accessor succeeds, moves the head as
 * above, and yields NULL. Blocks are reference counted (blob_syncedmem_retain/_free) so
 * blobs can share them. A block is not safe for concurrent use by several threads.
 *
 * Streams: device work on a block goes on the calling thread's current stream
 * (blob_stream_set). When a block is used on a stream other than the one of its latest
 * device work, the new stream is made to wait (on the device) for the old one, and the
 * allocator does not hand the device memory to another owner until both are done.
 */
#ifndef BLOB_SYNCEDMEM_H
#define BLOB_SYNCEDMEM_H

#include <stdbool.h>
#include <stddef.h>

#include "blob/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    BLOB_HEAD_UNINITIALIZED = 0,
    BLOB_HEAD_AT_CPU = 1,
    BLOB_HEAD_AT_GPU = 2,
    BLOB_HEAD_SYNCED = 3
} blob_head;

/* Device arguments: a GPU id, or one of these. */
#define BLOB_HOST_ONLY      (-1) /* never touches a GPU; host side is pageable */
#define BLOB_DEVICE_DEFAULT (-2) /* the current GPU if one is present, else BLOB_HOST_ONLY */

typedef struct blob_syncedmem blob_syncedmem;

/* Create a block of `bytes` bytes bound to `device`; allocates no data. Blocks bound to a
 * GPU use pinned host memory, host-only blocks pageable memory. *out is NULL on failure.
 * Errors: BLOB_EINVAL, BLOB_ERANGE (no such GPU), BLOB_ENOMEM. */
BLOB_API blob_status blob_syncedmem_create(blob_syncedmem **out, size_t bytes, int device);

/* Add a reference. Each reference is dropped by one blob_syncedmem_free. */
BLOB_API void blob_syncedmem_retain(blob_syncedmem *mem);

/* Drop a reference; the last one waits for pending copies and frees the owned sides
 * (borrowed memory is never freed). NULL is a no-op. */
BLOB_API void blob_syncedmem_free(blob_syncedmem *mem);

/* Queries. For a NULL block each records a detail (blob_last_error) and returns a
 * neutral value: size 0, head BLOB_HEAD_UNINITIALIZED, device BLOB_HOST_ONLY, false. */
BLOB_API size_t blob_syncedmem_size(const blob_syncedmem *mem);
BLOB_API blob_head blob_syncedmem_head(const blob_syncedmem *mem);
/* The GPU the block is bound to, or BLOB_HOST_ONLY. */
BLOB_API int blob_syncedmem_device(const blob_syncedmem *mem);
/* Whether the host side exists and is page-locked memory. */
BLOB_API bool blob_syncedmem_host_pinned(const blob_syncedmem *mem);
/* Whether an asynchronous copy is in flight (see async_gpu_push / async_cpu_pull). */
BLOB_API bool blob_syncedmem_pending(const blob_syncedmem *mem);

/* Accessors. On failure *out is untouched and so is the block (head, sides, bytes).
 * GPU accessors and any access that must copy check that the current device is the
 * block's (BLOB_EDEVICE otherwise); on a host-only block they return BLOB_ENODEV.
 * Copies are synchronous. A pending asynchronous copy is waited for on the host by the
 * host accessors, and on the device (the current stream waits) by the GPU accessors.
 * Errors: BLOB_ENOMEM, BLOB_EDEVMEM, BLOB_ENODEV, BLOB_EDEVICE, BLOB_ECUDA. */
BLOB_API blob_status blob_syncedmem_cpu_data(blob_syncedmem *mem, const void **out);
BLOB_API blob_status blob_syncedmem_mutable_cpu_data(blob_syncedmem *mem, void **out);
BLOB_API blob_status blob_syncedmem_gpu_data(blob_syncedmem *mem, const void **out);
BLOB_API blob_status blob_syncedmem_mutable_gpu_data(blob_syncedmem *mem, void **out);

/* Borrow `bytes` bytes of caller memory as the host (device) side: the owned block of
 * that side is freed (pointers taken from it before, an accessor's or a DLPack export's,
 * dangle), the head moves to AT_CPU (AT_GPU), and the other side is kept, so
 * the next access of it copies from or into the borrowed memory. Borrowed memory is
 * never freed by the library and must outlive the block or the next set_*.
 * Errors: BLOB_EINVAL (NULL data with a non-zero size, or bytes < the block's size),
 * BLOB_ENODEV and BLOB_EDEVICE for set_gpu_data. */
BLOB_API blob_status blob_syncedmem_set_cpu_data(blob_syncedmem *mem, void *data, size_t bytes);
BLOB_API blob_status blob_syncedmem_set_gpu_data(blob_syncedmem *mem, void *data, size_t bytes);

/* Gives borrowed memory back to its owner; ctx is the pointer given with it. */
typedef void (*blob_release_fn)(void *ctx);

/* Borrow as set_cpu_data (set_gpu_data) does, and call release(ctx) exactly once when
 * the block lets go of the memory: when its last reference is dropped, or when a later
 * set_* replaces that side (even by the same pointer). Before a borrowed device side is
 * released, the host waits for the device work queued on the block, so the owner may
 * reuse the memory at once. release may be NULL (plain borrowing). release must not
 * use this block; it may use the library otherwise.
 * On failure release is not called and the memory stays the caller's.
 * Errors: as blob_syncedmem_set_cpu_data (set_gpu_data). */
BLOB_API blob_status blob_syncedmem_set_cpu_data_release(blob_syncedmem *mem, void *data,
                                                         size_t bytes, blob_release_fn release,
                                                         void *ctx);
BLOB_API blob_status blob_syncedmem_set_gpu_data_release(blob_syncedmem *mem, void *data,
                                                         size_t bytes, blob_release_fn release,
                                                         void *ctx);

/* Queue the host-to-device copy on `stream` and return at once; the head becomes SYNCED.
 * Only from AT_CPU (or SYNCED, a no-op); BLOB_ESTATE otherwise. Until the copy completes
 * the block is pending: a device reader on any stream is ordered after the copy, and the
 * host accessors, set_* and free wait for the copy's own event, so nothing sees the
 * device side before the copy has landed and nothing writes the host side while the
 * copy reads it. */
BLOB_API blob_status blob_syncedmem_async_gpu_push(blob_syncedmem *mem, void *stream);

/* The reverse: queue the device-to-host copy on `stream`; only from AT_GPU (or SYNCED,
 * a no-op). A later host read waits only for this copy's event, not for the device. */
BLOB_API blob_status blob_syncedmem_async_cpu_pull(blob_syncedmem *mem, void *stream);

/* Wait for a pending asynchronous copy, if any. */
BLOB_API blob_status blob_syncedmem_wait(blob_syncedmem *mem);

#ifdef __cplusplus
}
#endif
#endif
