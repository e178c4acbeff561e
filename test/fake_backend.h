/* An instrumented host-memory "device" for the tests: plugs into the backend table,
 * counts every allocation and transfer, queues asynchronous work per stream until it
 * is synchronised, checks that every copy stays inside live blocks, and can make any
 * allocation fail on demand. Two fake GPUs, 0 and 1. Every entry point and function
 * here is thread-safe (one lock), so tests may use the fake from several threads. */
#ifndef BLOB_TEST_FAKE_BACKEND_H
#define BLOB_TEST_FAKE_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FAKE_DEVICES 2

typedef struct {
    uint64_t host_allocs, pinned_allocs, device_allocs; /* successful allocations */
    uint64_t host_frees, pinned_frees, device_frees;
    uint64_t failed_allocs; /* injected failures */
    uint64_t h2d, d2h, d2d; /* copies executed */
    uint64_t h2d_bytes, d2h_bytes;
    uint64_t memsets;
    uint64_t stream_syncs, event_syncs, device_syncs;
    uint64_t events_created, streams_created;
    uint64_t pointer_queries;                     /* pointer_device calls */
    int64_t live_blocks;                          /* pinned + device + streams + events */
    int64_t live_host_blocks;                     /* pageable host allocations */
    uint64_t violations;                          /* copies outside live blocks, etc. */
    int64_t live_pinned_bytes, live_device_bytes; /* bytes of live pinned/device blocks */
} fake_stats;

/* Install the fake as the library's backend, with zeroed counters and device 0 current. */
void fake_install(void);
/* Empty the allocator caches, check for leaks, and restore the default backend.
 * Returns the number of blocks still alive (0 means no leak). */
int64_t fake_uninstall(void);

/* Counters since install or the last fake_reset_counts (live counts are never reset). */
fake_stats fake_get_stats(void);
void fake_reset_counts(void);

/* Make the n-th allocation from now fail (n >= 1); with persistent, every later one too.
 * Allocations are host, pinned and device blocks, streams and events. n = 0 disarms. */
void fake_fail_alloc_at(uint64_t n, bool persistent);
/* Allocations attempted since install (successful or failed). */
uint64_t fake_alloc_attempts(void);
/* Make every copy/memset fail (true) or succeed (false), e.g. to test a failed transfer. */
void fake_fail_copies(bool fail);

/* Run all queued asynchronous work on every stream, as a device would eventually. */
void fake_drain(void);
/* Number of queued operations not yet executed, over all streams. */
int fake_queued(void);
/* The priority a fake stream was created with (0 for the default stream). */
int fake_stream_priority(void *stream);

/* Memory of the fake device is host memory: tests may read it directly. */

#endif
