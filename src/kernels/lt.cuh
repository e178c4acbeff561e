/* Internal to src/kernels: what the cuBLASLt GEMM (gemm_lt*.cu), its fallback epilogue
 * kernels (epilogue.cu) and the cuBLAS handles (cublas.cu) share. */
#ifndef BLOB_KERNELS_LT_CUH
#define BLOB_KERNELS_LT_CUH

#include <pthread.h>

#include "common.cuh"

/* The calling thread's cuBLASLt workspace for stream on the current device, made (with
 * the thread's cuBLASLt handle) on first use, which must come before a stream capture.
 * The thread's cuBLAS handle takes it too: the calls queued on one stream run in order,
 * so they can share it, and cuBLAS calls on different streams never share one (as they
 * would share the handle's default pool, which makes results depend on how the streams
 * overlap). */
blob_status blob__lt_workspace(void *stream, void **ptr, size_t *bytes);

/* Drop the calling thread's cuBLASLt handles, plans and workspaces. */
void blob__lt_thread_release(void);

/* A value of each thread (cublas.cu's handles, gemm_lt_state.cu's state) behind a pthread
 * key made on first use by its owner's pthread_once routine `make`, which stores
 * pthread_key_create's result in err. */
typedef struct {
    pthread_once_t once;
    pthread_key_t key;
    int err;
} thread_slot;

/* The calling thread's value of s, NULL when it has none yet; *devices is then the
 * device count, for the per-device table the caller makes, else 0. Errors, recorded
 * under func: BLOB_ENOMEM when the key could not be made, or the device count's. */
static inline blob_status thread_slot_get(const char *func, thread_slot *s, void (*make)(void),
                                          void **out, int *devices)
{
    *devices = 0;
    pthread_once(&s->once, make);
    if (s->err)
        return blob__fail(BLOB_ENOMEM, func, "pthread_key_create failed (%d)", s->err);
    *out = pthread_getspecific(s->key);
    if (!*out) {
        int count;
        CUDA_TRY_AT(func, cudaGetDeviceCount(&count));
        *devices = count;
    }
    return BLOB_OK;
}

/* Take the calling thread's value of s away and destroy it; nothing when it has none. */
static inline void thread_slot_release(thread_slot *s, void (*make)(void), void (*destroy)(void *))
{
    pthread_once(&s->once, make);
    void *v = s->err ? NULL : pthread_getspecific(s->key);
    if (!v)
        return;
    (void)pthread_setspecific(s->key, NULL);
    destroy(v);
}

/* The current device, an index into a thread's table of count devices: BLOB_ECUDA,
 * recorded under func, outside [0, count). */
static inline blob_status table_device(const char *func, int count, int *dev)
{
    BLOB_TRY(blob__current_device(dev));
    if (*dev < 0 || *dev >= count)
        return blob__fail(BLOB_ECUDA, func, "current device %d outside [0, %d)", *dev, count);
    return BLOB_OK;
}

#endif
