/*
 * blob/alloc.h - where memory comes from: places, caching, and statistics.
 *
 *   blob_alloc_stats st;
 *   blob_alloc_get_stats(blob_place_device(0), &st);
 *   printf("in use %zu, reserved %zu, driver allocs %llu\n",
 *          st.in_use, st.reserved, (unsigned long long)st.driver_allocs);
 *
 * Memory lives at a place: pageable host memory, page-locked (pinned) host memory, or
 * the memory of one GPU. Pinned and device memory come from caching allocators that keep
 * freed blocks for reuse, so steady-state code makes no driver calls. Caching can be
 * turned off (blob_alloc_set_caching, or BLOB_ALLOC_CACHE=0 in the environment), which
 * sends every request to the driver: useful under compute-sanitizer.
 */
#ifndef BLOB_ALLOC_H
#define BLOB_ALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "blob/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    BLOB_PLACE_HOST = 0,   /* pageable host memory (malloc) */
    BLOB_PLACE_PINNED = 1, /* page-locked host memory (cudaMallocHost) */
    BLOB_PLACE_DEVICE = 2  /* memory of GPU `device` */
} blob_place_kind;

typedef struct {
    blob_place_kind kind;
    int device; /* GPU id for BLOB_PLACE_DEVICE, otherwise 0 */
} blob_place;

static inline blob_place blob_place_host(void)
{
    blob_place p = {BLOB_PLACE_HOST, 0};
    return p;
}
static inline blob_place blob_place_pinned(void)
{
    blob_place p = {BLOB_PLACE_PINNED, 0};
    return p;
}
static inline blob_place blob_place_device(int device)
{
    blob_place p = {BLOB_PLACE_DEVICE, device};
    return p;
}

typedef struct {
    size_t in_use;          /* bytes of blocks handed out and not yet freed (requests
                                rounded up to 512 B, or up to 1/8 more when not split) */
    size_t in_use_peak;     /* highest in_use since the last reset */
    size_t reserved;        /* bytes obtained from the driver and not returned */
    size_t reserved_peak;   /* highest reserved since the last reset */
    size_t cached_limit;    /* cap on cached (reserved - in_use) bytes; SIZE_MAX if none */
    uint64_t requests;      /* allocation requests served */
    uint64_t cache_hits;    /* requests served from cached memory */
    uint64_t driver_allocs; /* allocations made by the driver */
    uint64_t driver_frees;  /* frees made by the driver */
    uint64_t oom_count;     /* requests that failed for lack of memory */
} blob_alloc_stats;

/* Allocate `bytes` at a place from its allocator (the memory blobs use), e.g. a device
 * scratch buffer. A device place must be the current device. The block belongs to
 * `stream` (NULL: the default stream) and may be used on it at once; use on other
 * streams must be declared with blob_place_record_stream before it is freed. bytes == 0
 * gives NULL without a driver call. *out is NULL on failure. Out-of-memory is reported
 * only after cached memory has been released and the driver asked again.
 * Errors: BLOB_EINVAL, BLOB_ERANGE (no such GPU), BLOB_EDEVICE (not the current device),
 * BLOB_ENOMEM (host, pinned), BLOB_EDEVMEM (device), driver errors. */
BLOB_API blob_status blob_place_alloc(blob_place place, size_t bytes, void *stream, void **out);

/* Give a block of blob_place_alloc back to its place, from any thread and with any
 * device current. It is reused on its own stream at once and, where other streams were
 * recorded, only once the work queued on them before this call has completed. NULL and
 * pointers the place never handed out are ignored. */
BLOB_API void blob_place_free(blob_place place, void *p);

/* Declare that block p is also used on `stream`. For a pinned block the stream must
 * belong to the device current when it is freed (otherwise that stream is synchronised
 * then). Errors: BLOB_EINVAL (p is not a live block of the place), BLOB_ENOMEM. */
BLOB_API blob_status blob_place_record_stream(blob_place place, void *p, void *stream);

/* Statistics of a place. BLOB_EINVAL for a bad place; BLOB_ERANGE for a missing GPU. */
BLOB_API blob_status blob_alloc_get_stats(blob_place place, blob_alloc_stats *out);

/* Set in_use_peak and reserved_peak to the current values. */
BLOB_API blob_status blob_alloc_reset_peaks(blob_place place);

/* Return all cached, unused memory of a place to the driver: every segment with no
 * block in use (a segment partly in use stays). Waits for pending frees on other
 * streams to complete. */
BLOB_API blob_status blob_alloc_empty_cache(blob_place place);

/* Cap the cached (unused but reserved) bytes of a place; SIZE_MAX removes the cap.
 * Excess cached memory is released at once. */
BLOB_API blob_status blob_alloc_set_cache_limit(blob_place place, size_t bytes);

/* Turn caching on or off for all places. Turning it off empties the caches; blocks in
 * use are still freed correctly later. The initial value is on unless the environment
 * variable BLOB_ALLOC_CACHE is "0" ("1": on); any other value makes blob_place_alloc,
 * and so every allocation, fail with BLOB_EINVAL naming it until this is called. */
BLOB_API blob_status blob_alloc_set_caching(bool enabled);
BLOB_API bool blob_alloc_caching(void);

#ifdef __cplusplus
}
#endif
#endif
