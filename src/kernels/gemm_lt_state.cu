/* The cuBLASLt GEMM's state of each thread (gemm_lt.cuh): per device a cuBLASLt handle
 * and a stream to capture launches on, the room of the plan cache (gemm_lt_plan.cu fills
 * it), and the workspaces, which come from the device allocator once per thread, device
 * and stream. Owns their making and, at thread exit or blob__lt_thread_release, their
 * destruction. */
#include <pthread.h>
#include <stdlib.h>

#include "blob/alloc.h"
#include "gemm_lt.cuh"

static thread_slot state = {PTHREAD_ONCE_INIT, pthread_key_t(), 0};

static void workspace_free(Workspace *w)
{
    if (w->generation == blob__backend_generation)
        blob_place_free(blob_place_device(w->device), w->ptr);
}

static void state_destroy(void *p)
{
    LtState *st = (LtState *)p;
    for (int i = 0; i < st->num_plans; i++)
        blob__lt_plan_destroy(&st->plans[i]);
    for (int i = 0; i < st->num_ws; i++)
        workspace_free(&st->ws[i]);
    for (int d = 0; d < st->devices; d++) {
        if (st->handle[d])
            (void)cublasLtDestroy(st->handle[d]);
        if (st->capture[d])
            (void)cudaStreamDestroy(st->capture[d]);
    }
    free(st->handle);
    free(st->capture);
    free(st);
}

static void state_key_create(void) { state.err = pthread_key_create(&state.key, state_destroy); }

void blob__lt_thread_release(void) { thread_slot_release(&state, state_key_create, state_destroy); }

blob_status blob__lt_thread_state(const char *func, LtState **out, int *device,
                                  cublasLtHandle_t *handle)
{
    void *slot;
    int count;
    BLOB_TRY(thread_slot_get(func, &state, state_key_create, &slot, &count));
    LtState *st = (LtState *)slot;
    if (!st) {
        st = (LtState *)calloc(1, sizeof *st);
        cublasLtHandle_t *h = (cublasLtHandle_t *)calloc((size_t)count, sizeof *h);
        cudaStream_t *cap = (cudaStream_t *)calloc((size_t)count, sizeof *cap);
        if (!st || !h || !cap || pthread_setspecific(state.key, st) != 0) {
            free(st);
            free(h);
            free(cap);
            return blob__fail(BLOB_ENOMEM, func, "no host memory for the cuBLASLt state");
        }
        st->devices = count;
        st->handle = h;
        st->capture = cap;
    }
    int dev;
    BLOB_TRY(table_device(func, st->devices, &dev));
    if (!st->handle[dev])
        LT_TRY(func, cublasLtCreate(&st->handle[dev]));
    *out = st;
    *device = dev;
    *handle = st->handle[dev];
    return BLOB_OK;
}

blob_status blob__lt_workspace_for(LtState *st, int device, void *stream, Workspace **out)
{
    for (int i = 0; i < st->num_ws; i++) {
        Workspace *w = &st->ws[i];
        if (w->generation != blob__backend_generation) { /* a former table's: forget it */
            *w = st->ws[--st->num_ws];
            i--;
            continue;
        }
        if (w->device == device && w->stream == stream) {
            *out = w;
            return BLOB_OK;
        }
    }
    const size_t bytes = workspace_bytes(device);
    void *p;
    BLOB_TRY(blob_place_alloc(blob_place_device(device), bytes, stream, &p));
    if (st->num_ws == MAX_WORKSPACES) {
        workspace_free(&st->ws[0]);
        st->ws[0] = st->ws[--st->num_ws];
    }
    Workspace *w = &st->ws[st->num_ws++];
    *w = Workspace{device, stream, blob__backend_generation, p, bytes};
    *out = w;
    return BLOB_OK;
}

blob_status blob__lt_workspace(void *stream, void **ptr, size_t *bytes)
{
    LtState *st = nullptr; /* for GCC, which cannot tell that a failure is never BLOB_OK */
    int dev = 0;
    cublasLtHandle_t h;
    BLOB_TRY(blob__lt_thread_state(__func__, &st, &dev, &h));
    Workspace *w;
    BLOB_TRY(blob__lt_workspace_for(st, dev, stream, &w));
    *ptr = w->ptr;
    *bytes = w->bytes;
    return BLOB_OK;
}
