/* Internal: the device backend table, error recording and object allocation shared by
 * every layer. Names shared across files start with blob__. Never installed. */
#ifndef BLOB_CORE_H
#define BLOB_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "blob/status.h"
#include "checks.h"

/* D2H_PINNED: device to page-locked host memory from the pinned place, which the device
 * can address. */
typedef enum { BLOB__H2D, BLOB__D2H, BLOB__D2H_PINNED, BLOB__D2D } blob__copy_kind;

/* Every device operation the library performs goes through one of these tables: the
 * CUDA runtime by default, a "no GPU" table in builds without CUDA, and an instrumented
 * host-memory device in the tests. Device entries act on the calling thread's current
 * device. Streams and events are opaque; NULL is the default stream. Device entries
 * are NULL-safe on free/destroy. */
/* What blob__backend.pointer_device says of memory that is not one GPU's own. */
#define BLOB__HOST_MEMORY    (-1)
#define BLOB__MANAGED_MEMORY (-2)

typedef struct blob__backend {
    const char *name;
    int (*device_count)(void);
    blob_status (*get_device)(int *device);
    blob_status (*set_device)(int device);
    blob_status (*host_alloc)(size_t bytes, void **out); /* pageable */
    void (*host_free)(void *p);
    blob_status (*pinned_alloc)(size_t bytes, void **out);
    void (*pinned_free)(void *p);
    blob_status (*device_alloc)(size_t bytes, void **out);
    void (*device_free)(void *p);
    /* *device: the GPU whose device memory p is; BLOB__HOST_MEMORY for host memory,
     * pinned or not, and addresses the driver does not know; BLOB__MANAGED_MEMORY. */
    blob_status (*pointer_device)(const void *p, int *device);
    /* Copies and fills are queued on a stream; callers synchronize as needed. */
    blob_status (*copy_async)(void *dst, const void *src, size_t bytes, blob__copy_kind kind,
                              void *stream);
    blob_status (*memset_async)(void *dst, int value, size_t bytes, void *stream);
    blob_status (*device_synchronize)(void);
    /* priority: 0 the default, each level above more urgent (clamped to the device's) */
    blob_status (*stream_create)(void **out, int priority);
    void (*stream_destroy)(void *stream);
    blob_status (*stream_synchronize)(void *stream);
    blob_status (*stream_wait_event)(void *stream, void *event);
    blob_status (*event_create)(void **out);
    void (*event_destroy)(void *event);
    blob_status (*event_record)(void *event, void *stream);
    /* The same, but while stream is being captured the record is a node of the graph,
     * which records the event at each launch for waiters outside the graph (not a
     * dependency within the capture); outside a capture a plain record. */
    blob_status (*event_record_external)(void *event, void *stream);
    /* *done = whether all work captured by the event has completed. */
    blob_status (*event_query)(void *event, bool *done);
    blob_status (*event_synchronize)(void *event);
    /* An event that also keeps the time it completed at, and the milliseconds between
     * two such events, both completed. */
    blob_status (*event_create_timed)(void **out);
    blob_status (*event_elapsed)(void *from, void *to, double *ms);
    /* Stream capture into a graph (opaque), kept beside its executable form (opaque). */
    blob_status (*graph_begin)(void *stream);
    blob_status (*graph_end)(void *stream, void **graph, void **exec);
    blob_status (*graph_launch)(void *exec, void *stream);
    void (*graph_destroy)(void *graph, void *exec);
    /* Add the kernel launches, the host functions and all operations of a captured graph
     * (child graphs counted by their contents) to the counts. */
    blob_status (*graph_count_nodes)(void *graph, int64_t *kernels, int64_t *host, int64_t *total);
} blob__backend;

/* The entries of a table whose functions are named P_<entry>: P_device_count,
 * P_get_device, ..., P_graph_count_nodes; the table gives its name. */
#define BLOB__BACKEND_ENTRIES(P)                                                                  \
    .device_count = P##_device_count, .get_device = P##_get_device, .set_device = P##_set_device, \
    .host_alloc = P##_host_alloc, .host_free = P##_host_free, .pinned_alloc = P##_pinned_alloc,   \
    .pinned_free = P##_pinned_free, .device_alloc = P##_device_alloc,                             \
    .device_free = P##_device_free, .pointer_device = P##_pointer_device,                         \
    .copy_async = P##_copy_async, .memset_async = P##_memset_async,                               \
    .device_synchronize = P##_device_synchronize, .stream_create = P##_stream_create,             \
    .stream_destroy = P##_stream_destroy, .stream_synchronize = P##_stream_synchronize,           \
    .stream_wait_event = P##_stream_wait_event, .event_create = P##_event_create,                 \
    .event_destroy = P##_event_destroy, .event_record = P##_event_record,                         \
    .event_record_external = P##_event_record_external, .event_query = P##_event_query,           \
    .event_synchronize = P##_event_synchronize, .event_create_timed = P##_event_create_timed,     \
    .event_elapsed = P##_event_elapsed, .graph_begin = P##_graph_begin,                           \
    .graph_end = P##_graph_end, .graph_launch = P##_graph_launch,                                 \
    .graph_destroy = P##_graph_destroy, .graph_count_nodes = P##_graph_count_nodes

/* The table in use. Read on every device operation; changed only by install. */
extern const blob__backend *blob__be;

/* Bumped by every install, so per-thread records of the old table are dropped. */
extern unsigned blob__backend_generation;

/* The table this build uses by default (CUDA, or "no GPU"). */
const blob__backend *blob__backend_default(void);

/* Switch tables (NULL: the default). The caller guarantees that no memory, stream or
 * event of the old table is still alive, allocator caches included. For tests. */
void blob__backend_install(const blob__backend *be);

/* Pageable host memory from malloc, shared by the real tables. */
blob_status blob__system_host_alloc(size_t bytes, void **out);
void blob__system_host_free(void *p);

/* Small host allocations for library objects, through the backend so that tests can
 * make any of them fail. blob__obj_alloc zero-fills; NULL means out of memory (the
 * detail is recorded). */
void *blob__obj_alloc(size_t bytes);
void blob__obj_free(void *p);

/* BLOB_ENODEV, with the detail recorded under func, when no GPU is usable. */
blob_status blob__require_gpu(const char *func);

/* The calling thread's current device as the library knows it: set by blob_device_set
 * and blob_device_get, read from the backend once per thread (and table) otherwise. A
 * plain load on the hot path, where asking the driver costs ~50 ns. */
blob_status blob__current_device(int *device);

/* Run a stretch of work on `stream`: blob__stream_enter makes it the calling thread's
 * current stream (blob_stream_set) and returns the one it replaces, which
 * blob__stream_leave makes current again. */
void *blob__stream_enter(void *stream);
void blob__stream_leave(void *prev);

/* Destroy the pooled streams of the current table that no caller holds (see
 * blob_stream_create), and the idle pooled events of blob_stream_wait_stream. For tests,
 * before switching tables. */
void blob__stream_pool_drain(void);

/* Check that `device` is the calling thread's current device; a failure is recorded
 * under func. */
blob_status blob__check_device(const char *func, int device);

/* ---- The host BLAS (blas.c) ---- */

/* The most host threads the library runs, the caller's included. */
enum { BLOB__MAX_HOST_THREADS = 64 };

/* Threads for a host loop over `work` elements: 1 below the size where more pay off,
 * else the library's host threads (at most one per 256K elements). */
int blob__host_threads(int64_t work);

/* The blocks a host GEMM's C (M x N, reduction K, elements of elem bytes) is cut into, one
 * per host thread: *rows x *cols each (the last of a row or column smaller; *rows == M
 * with whole_rows), chosen for the least work on one thread, each worth enough to pay for
 * its hand-over. M x N (one block) when the BLAS threads its calls itself or there is one
 * host thread. Blocks start on multiples of 8 rows and of 64 bytes of a row. */
void blob__gemm_grid(int64_t M, int64_t N, int64_t K, size_t elem, bool whole_rows, int64_t *rows,
                     int64_t *cols);

/* The threads the host BLAS runs a call on, by its own setting (openblas_get_num_threads,
 * bli_thread_get_num_threads, mkl_get_max_threads): < 1 when it has none. */
int blob__blas_threads(void);

/* Set that count (openblas_set_num_threads, ...); nothing for another CBLAS. */
void blob__blas_set_threads(int n);

/* Whether the BLAS runs a call on its caller alone, so that the library set it to one
 * thread at load time and cuts GEMMs into blocks while its count stays 1. */
bool blob__blas_one_thread(void);

/* ---- Host threads (pool.c) ---- */

/* The body of a host loop: the iterations [begin, end) of ctx's loop. */
typedef void (*blob__range_fn)(void *ctx, int64_t begin, int64_t end);

/* Run fn over [0, n) split into up to nt contiguous ranges, one on the calling thread and
 * the others on the library's host threads; returns when all are done. With nt <= 1, or
 * while another thread's loop has the host threads, fn runs alone on the caller. */
void blob__host_for(int nt, int64_t n, blob__range_fn fn, void *ctx);

/* Check OpenBLAS's core and switch a generic one to the CPU's fast one, unless
 * user_coretype (the OPENBLAS_CORETYPE the user set) is non-empty; done at load time.
 * The tests call it again after forcing a core, with no other thread in OpenBLAS. */
void blob__blas_select_core(const char *user_coretype);

#endif
