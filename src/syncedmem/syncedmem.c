/* The head-state machine: a switch on the head in to_cpu()/to_gpu(), every device
 * operation through the backend table, every allocation through the allocators. */
#include <stdatomic.h>
#include <string.h>

#include "blob/syncedmem.h"
#include "blob/alloc.h"
#include "blob/device.h"
#include "../core/core.h"
#include "syncedmem_internal.h"

struct blob_syncedmem {
    void *host;
    void *dev;
    size_t size;
    blob_head head;
    int device; /* GPU id or BLOB_HOST_ONLY */
    bool own_host;
    bool own_dev;
    bool host_pinned; /* owned host side came from the pinned place */
    bool pending;     /* an async copy may be in flight: host users wait for `event` */
    bool dev_work;    /* device work on the block has been queued (see use_on) */
    blob_release_fn host_release, dev_release; /* give a borrowed side back, or NULL */
    void *host_release_ctx, *dev_release_ctx;
    void *stream; /* the stream of the latest device work on the block */
    void *event;  /* orders streams and marks async copies; made on first need */
    atomic_int refs;
};

static blob_place host_place(const blob_syncedmem *m)
{
    return m->device >= 0 ? blob_place_pinned() : blob_place_host();
}

blob_status blob_syncedmem_create(blob_syncedmem **out, size_t bytes, int device)
{
    if (!out)
        return BLOB_FAIL(BLOB_EINVAL, "out is NULL");
    *out = NULL;
    int n = blob__be->device_count();
    if (device == BLOB_DEVICE_DEFAULT) {
        device = BLOB_HOST_ONLY;
        if (n > 0)
            BLOB_TRY(blob__current_device(&device));
    } else if (device < BLOB_HOST_ONLY) {
        return BLOB_FAIL(BLOB_EINVAL, "bad device %d", device);
    } else if (device >= n) {
        return BLOB_FAIL(BLOB_ERANGE, "no GPU %d (%d present)", device, n);
    }
    blob_syncedmem *m = blob__obj_alloc(sizeof *m);
    if (!m)
        return BLOB_ENOMEM;
    m->size = bytes;
    m->head = BLOB_HEAD_UNINITIALIZED;
    m->device = device;
    atomic_init(&m->refs, 1);
    *out = m;
    return BLOB_OK;
}

void blob_syncedmem_retain(blob_syncedmem *m)
{
    if (m)
        atomic_fetch_add_explicit(&m->refs, 1, memory_order_relaxed);
}

/* Let go of the host side: free it if owned, give it back if borrowed with a release.
 * Callers have waited for the async copies touching it (settle). */
static void free_host(blob_syncedmem *m)
{
    blob_release_fn release = m->host_release;
    void *ctx = m->host_release_ctx;
    if (m->own_host)
        blob_place_free(m->host_pinned ? blob_place_pinned() : blob_place_host(), m->host);
    m->host = NULL;
    m->own_host = false;
    m->host_pinned = false;
    m->host_release = NULL;
    m->host_release_ctx = NULL;
    if (release)
        release(ctx);
}

/* Wait on the host for the device work queued on the block: its latest stream was
 * ordered after the earlier ones. The block's GPU is made current for the wait (the
 * legacy default stream is per device), whichever is current. */
static void wait_device_work(const blob_syncedmem *m)
{
    int cur = -1;
    bool switched = blob__be->get_device(&cur) == BLOB_OK && cur != m->device &&
                    blob__be->set_device(m->device) == BLOB_OK;
    if (blob__be->stream_synchronize(m->stream) != BLOB_OK)
        (void)blob__be->device_synchronize();
    if (switched)
        (void)blob__be->set_device(cur);
}

/* The same for the device side. An owned side goes back to the allocator, which keeps it
 * until the streams that used it are done; a borrowed one goes back to an owner that
 * knows nothing of those streams, so the host waits for the block's device work first. */
static void free_dev(blob_syncedmem *m)
{
    blob_release_fn release = m->dev_release;
    void *ctx = m->dev_release_ctx;
    if (m->own_dev)
        blob_place_free(blob_place_device(m->device), m->dev);
    else if (release && m->dev_work)
        wait_device_work(m);
    m->dev = NULL;
    m->own_dev = false;
    m->dev_work = false;
    m->dev_release = NULL;
    m->dev_release_ctx = NULL;
    if (release)
        release(ctx);
}

/* Wait for the in-flight async copy, if any. */
static blob_status settle(blob_syncedmem *m)
{
    if (!m->pending)
        return BLOB_OK;
    BLOB_TRY(blob__be->event_synchronize(m->event));
    m->pending = false;
    return BLOB_OK;
}

void blob_syncedmem_free(blob_syncedmem *m)
{
    if (!m || atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (m->pending && settle(m) != BLOB_OK)
        (void)blob__be->device_synchronize();
    blob__be->event_destroy(m->event);
    free_host(m);
    free_dev(m);
    blob__obj_free(m);
}

/* A query: for NULL, the detail is recorded and the neutral value returned. */
#define BLOB__QUERY(type, name, neutral, expr) \
    BLOB__QUERY_FN(type, blob_syncedmem_##name, blob_syncedmem, m, "block", neutral, expr)
BLOB__QUERY(size_t, size, 0, m->size)
BLOB__QUERY(blob_head, head, BLOB_HEAD_UNINITIALIZED, m->head)
BLOB__QUERY(int, device, BLOB_HOST_ONLY, m->device)
BLOB__QUERY(bool, host_pinned, false, m->host && m->host_pinned)
BLOB__QUERY(bool, pending, false, m->pending)
#undef BLOB__QUERY

bool blob__syncedmem_shared(const blob_syncedmem *m)
{
    return atomic_load_explicit(&m->refs, memory_order_acquire) > 1;
}

const void *blob__syncedmem_side(const blob_syncedmem *m, bool gpu)
{
    return gpu ? m->dev : m->host;
}

/* GPU work is allowed: the block is bound to a GPU and it is the current one. Failures
 * here and below are recorded under func, the public call. */
static blob_status check_gpu(const char *func, const blob_syncedmem *m)
{
    if (m->device < 0)
        return blob__fail(BLOB_ENODEV, func, "block is host-only");
    return blob__check_device(func, m->device);
}

/* The host side belongs to no stream: every copy touching it is waited for before it
 * is freed. */
static blob_status alloc_host(blob_syncedmem *m)
{
    blob_place place = host_place(m);
    BLOB_TRY(blob_place_alloc(place, m->size, NULL, &m->host));
    m->own_host = true;
    m->host_pinned = place.kind == BLOB_PLACE_PINNED;
    return BLOB_OK;
}

static blob_status alloc_dev(blob_syncedmem *m, void *stream)
{
    BLOB_TRY(blob_place_alloc(blob_place_device(m->device), m->size, stream, &m->dev));
    m->own_dev = true;
    return BLOB_OK;
}

/* Device work on the block is about to be queued on `stream`: order it after the work
 * queued on the block's previous stream (on the device; the host does not wait), and
 * tell the allocator that the device side is used there too. */
static blob_status use_on(blob_syncedmem *m, void *stream)
{
    m->dev_work = true;
    if (stream == m->stream)
        return BLOB_OK;
    if (m->dev) {
        if (!m->event)
            BLOB_TRY(blob__be->event_create(&m->event));
        BLOB_TRY(blob__be->event_record(m->event, m->stream));
        BLOB_TRY(blob__be->stream_wait_event(stream, m->event));
        if (m->own_dev)
            BLOB_TRY(blob_place_record_stream(blob_place_device(m->device), m->dev, stream));
    }
    m->stream = stream;
    return BLOB_OK;
}

/* The kind of a copy to the host side: pinned memory lets the backend store into it. */
static blob__copy_kind d2h_kind(const blob_syncedmem *m)
{
    return m->host_pinned ? BLOB__D2H_PINNED : BLOB__D2H;
}

/* Copy between the sides on `stream` and wait for it. */
static blob_status copy_sync(void *dst, const void *src, size_t bytes, blob__copy_kind kind,
                             void *stream)
{
    BLOB_TRY(blob__be->copy_async(dst, src, bytes, kind, stream));
    return blob__be->stream_synchronize(stream);
}

/* Make the host side current. On failure nothing has changed. */
static blob_status to_cpu(const char *func, blob_syncedmem *m)
{
    BLOB_TRY(settle(m));
    switch (m->head) {
    case BLOB_HEAD_UNINITIALIZED:
        if (m->size) {
            if (!m->host)
                BLOB_TRY(alloc_host(m));
            memset(m->host, 0, m->size);
        }
        blob__syncedmem_claim(m, false);
        return BLOB_OK;
    case BLOB_HEAD_AT_GPU: {
        if (m->size) {
            BLOB_TRY(check_gpu(func, m));
            void *stream = blob_stream_get();
            bool fresh = !m->host;
            if (fresh)
                BLOB_TRY(alloc_host(m));
            blob_status st = use_on(m, stream);
            if (st == BLOB_OK)
                st = copy_sync(m->host, m->dev, m->size, d2h_kind(m), stream);
            if (st != BLOB_OK) {
                if (fresh)
                    free_host(m);
                return st;
            }
        }
        m->head = BLOB_HEAD_SYNCED;
        return BLOB_OK;
    }
    case BLOB_HEAD_AT_CPU:
    case BLOB_HEAD_SYNCED: return BLOB_OK;
    }
    return blob__fail(BLOB_ESTATE, func, "corrupt head %d", (int)m->head);
}

/* Make the device side current for work on the current stream. A pending async copy
 * is waited for on the device, not on the host. On failure nothing has changed. */
static blob_status to_gpu(const char *func, blob_syncedmem *m)
{
    BLOB_TRY(check_gpu(func, m));
    void *stream = blob_stream_get();
    if (!m->size || m->head == BLOB_HEAD_AT_GPU || m->head == BLOB_HEAD_SYNCED) {
        BLOB_TRY(use_on(m, stream));
        if (m->head == BLOB_HEAD_UNINITIALIZED)
            m->head = BLOB_HEAD_AT_GPU;
        else if (m->head == BLOB_HEAD_AT_CPU)
            m->head = BLOB_HEAD_SYNCED;
        return BLOB_OK;
    }
    BLOB_TRY(use_on(m, stream)); /* before a fresh allocation, which needs no ordering */
    bool fresh = !m->dev;
    if (fresh)
        BLOB_TRY(alloc_dev(m, stream));
    blob_status st = m->head == BLOB_HEAD_UNINITIALIZED
                         ? blob__be->memset_async(m->dev, 0, m->size, stream)
                         : copy_sync(m->dev, m->host, m->size, BLOB__H2D, stream);
    if (st != BLOB_OK) {
        if (fresh)
            free_dev(m);
        return st;
    }
    m->head = m->head == BLOB_HEAD_UNINITIALIZED ? BLOB_HEAD_AT_GPU : BLOB_HEAD_SYNCED;
    return BLOB_OK;
}

/* An accessor: m's side (the device's if gpu) made current and, for a caller that writes
 * it (write), claimed as the head; its pointer into *out. */
#define BLOB__ACCESS(name, out_type, gpu, write)                        \
    blob_status blob_syncedmem_##name(blob_syncedmem *m, out_type *out) \
    {                                                                   \
        if (!m || !out)                                                 \
            return BLOB_FAIL(BLOB_EINVAL, "NULL argument");             \
        BLOB_TRY((gpu) ? to_gpu(__func__, m) : to_cpu(__func__, m));    \
        if (write)                                                      \
            blob__syncedmem_claim(m, (gpu));                            \
        *out = (gpu) ? m->dev : m->host;                                \
        return BLOB_OK;                                                 \
    }
BLOB__ACCESS(cpu_data, const void *, false, false)
BLOB__ACCESS(mutable_cpu_data, void *, false, true)
BLOB__ACCESS(gpu_data, const void *, true, false)
BLOB__ACCESS(mutable_gpu_data, void *, true, true)
#undef BLOB__ACCESS

blob_status blob__syncedmem_write_side(const char *func, blob_syncedmem *m, bool gpu, void **out)
{
    if (!gpu) {
        BLOB_TRY(settle(m));
        if (!m->host && m->size)
            BLOB_TRY(alloc_host(m));
        *out = m->host;
        return BLOB_OK;
    }
    BLOB_TRY(check_gpu(func, m));
    void *stream = blob_stream_get();
    BLOB_TRY(use_on(m, stream));
    if (!m->dev && m->size)
        BLOB_TRY(alloc_dev(m, stream));
    *out = m->dev;
    return BLOB_OK;
}

void blob__syncedmem_claim(blob_syncedmem *m, bool gpu)
{
    m->head = gpu ? BLOB_HEAD_AT_GPU : BLOB_HEAD_AT_CPU;
}

static blob_status check_borrow(const char *func, const blob_syncedmem *m, const void *data,
                                size_t bytes)
{
    if (!m)
        return blob__fail(BLOB_EINVAL, func, "block is NULL");
    if (bytes < m->size)
        return blob__fail(BLOB_EINVAL, func, "borrowed memory holds %zu bytes, block needs %zu",
                          bytes, m->size);
    if (!data && m->size)
        return blob__fail(BLOB_EINVAL, func, "borrowed memory is NULL");
    return BLOB_OK;
}

blob_status blob_syncedmem_set_cpu_data_release(blob_syncedmem *m, void *data, size_t bytes,
                                                blob_release_fn release, void *ctx)
{
    BLOB_TRY(check_borrow(__func__, m, data, bytes));
    BLOB_TRY(settle(m));
    free_host(m);
    m->host = data;
    m->host_release = release;
    m->host_release_ctx = ctx;
    blob__syncedmem_claim(m, false);
    return BLOB_OK;
}

blob_status blob_syncedmem_set_gpu_data_release(blob_syncedmem *m, void *data, size_t bytes,
                                                blob_release_fn release, void *ctx)
{
    BLOB_TRY(check_borrow(__func__, m, data, bytes));
    BLOB_TRY(check_gpu(__func__, m));
    BLOB_TRY(settle(m));
    free_dev(m);
    m->dev = data;
    m->dev_release = release;
    m->dev_release_ctx = ctx;
    blob__syncedmem_claim(m, true);
    return BLOB_OK;
}

blob_status blob_syncedmem_set_cpu_data(blob_syncedmem *m, void *data, size_t bytes)
{
    return blob_syncedmem_set_cpu_data_release(m, data, bytes, NULL, NULL);
}

blob_status blob_syncedmem_set_gpu_data(blob_syncedmem *m, void *data, size_t bytes)
{
    return blob_syncedmem_set_gpu_data_release(m, data, bytes, NULL, NULL);
}

/* Queue a copy between the sides on `stream` and mark the block pending on its event. */
static blob_status copy_pending(blob_syncedmem *m, void *dst, const void *src, blob__copy_kind kind,
                                void *stream)
{
    if (!m->event)
        BLOB_TRY(blob__be->event_create(&m->event));
    BLOB_TRY(blob__be->copy_async(dst, src, m->size, kind, stream));
    if (blob__be->event_record(m->event, stream) != BLOB_OK)
        BLOB_TRY(blob__be->stream_synchronize(stream)); /* the copy is queued: finish it */
    else
        m->pending = true;
    m->head = BLOB_HEAD_SYNCED;
    return BLOB_OK;
}

/* Queue the copy that brings the device side (to_gpu) or the host side up to date from
 * the other one, which must hold the head. */
static blob_status async_copy(const char *func, blob_syncedmem *m, void *stream, bool to_gpu)
{
    if (!m)
        return blob__fail(BLOB_EINVAL, func, "block is NULL");
    BLOB_TRY(check_gpu(func, m));
    if (m->head == BLOB_HEAD_SYNCED)
        return BLOB_OK;
    if (m->head != (to_gpu ? BLOB_HEAD_AT_CPU : BLOB_HEAD_AT_GPU))
        return blob__fail(BLOB_ESTATE, func, "needs the head at the %s (head %d)",
                          to_gpu ? "CPU" : "GPU", (int)m->head);
    BLOB_TRY(settle(m));
    if (!m->size) {
        m->head = BLOB_HEAD_SYNCED;
        return BLOB_OK;
    }
    BLOB_TRY(use_on(m, stream));
    bool fresh = !(to_gpu ? m->dev : m->host);
    if (fresh)
        BLOB_TRY(to_gpu ? alloc_dev(m, stream) : alloc_host(m));
    blob_status st = to_gpu ? copy_pending(m, m->dev, m->host, BLOB__H2D, stream)
                            : copy_pending(m, m->host, m->dev, d2h_kind(m), stream);
    if (st != BLOB_OK && fresh) {
        if (to_gpu)
            free_dev(m);
        else
            free_host(m);
    }
    return st;
}

blob_status blob_syncedmem_async_gpu_push(blob_syncedmem *m, void *stream)
{
    return async_copy(__func__, m, stream, true);
}

blob_status blob_syncedmem_async_cpu_pull(blob_syncedmem *m, void *stream)
{
    return async_copy(__func__, m, stream, false);
}

blob_status blob_syncedmem_wait(blob_syncedmem *m)
{
    if (!m)
        return BLOB_FAIL(BLOB_EINVAL, "block is NULL");
    return settle(m);
}
