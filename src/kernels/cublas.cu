/* The BLAS launchers over cuBLAS (the 32-bit entries, the 64-bit ones past INT_MAX).
 * Each thread has one handle per device, created on first use (pointer mode host, the
 * default) and destroyed at thread exit; its workspace is the thread's cuBLASLt
 * workspace of the stream it is bound to (lt.cuh). Row-major matrices are handed to
 * column-major cuBLAS as their transposes. */
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>

#include <cublas_v2.h>

#include "blob/device.h"
#include "lt.cuh"

static blob_status cublas_fail(cublasStatus_t st, const char *call, const char *func)
{
    (void)cudaGetLastError();
    return blob__fail(BLOB_ECUBLAS, func, "%s failed: %s", call, cublasGetStatusName(st));
}

/* Sizes that all fit in int take cuBLAS's 32-bit entry, the one raw cuBLAS callers use
 * and the cheaper to launch; larger ones its _64 entry. */
#define FITS(n) ((n) <= INT_MAX)
#define CUBLAS_SIZED(fits, fn, args)             \
    do {                                         \
        if (fits)                                \
            CUBLAS_TRY(__func__, fn, args);      \
        else                                     \
            CUBLAS_TRY(__func__, fn##_64, args); \
    } while (0)

/* Call fn with the parenthesised args; on failure record #fn under func and return. */
#define CUBLAS_TRY(func, fn, args)                       \
    do {                                                 \
        cublasStatus_t cublas_st_ = fn args;             \
        if (cublas_st_ != CUBLAS_STATUS_SUCCESS)         \
            return cublas_fail(cublas_st_, #fn, (func)); \
    } while (0)

typedef struct {
    int count;
    cublasHandle_t *handle; /* [count], NULL until first used on that device */
    void **stream;          /* [count], the stream each handle is bound to */
    void **workspace;       /* [count], and its workspace there */
} handle_table;

static thread_slot table = {PTHREAD_ONCE_INIT, pthread_key_t(), 0};

/* At thread exit: destroy each handle on its own device (cublasDestroy synchronises it). */
static void table_destroy(void *p)
{
    handle_table *t = (handle_table *)p;
    int prev;
    bool restore = cudaGetDevice(&prev) == cudaSuccess;
    for (int d = 0; d < t->count; d++)
        if (t->handle[d] && cudaSetDevice(d) == cudaSuccess)
            (void)cublasDestroy(t->handle[d]);
    if (restore)
        (void)cudaSetDevice(prev);
    (void)cudaGetLastError();
    free(t);
}

static void table_key_create(void) { table.err = pthread_key_create(&table.key, table_destroy); }

extern "C" void blob_thread_release(void)
{
    blob__lt_thread_release();
    thread_slot_release(&table, table_key_create, table_destroy);
}

/* The calling thread's handle for the current device, bound to stream. */
static blob_status handle_for(const char *func, void *stream, cublasHandle_t *out)
{
    void *slot;
    int count;
    BLOB_TRY(thread_slot_get(func, &table, table_key_create, &slot, &count));
    handle_table *t = (handle_table *)slot;
    if (!t) {
        t = (handle_table *)calloc(
            1, sizeof *t + (size_t)count * (sizeof(cublasHandle_t) + 2 * sizeof(void *)));
        if (!t)
            return blob__fail(BLOB_ENOMEM, func, "no host memory for the cuBLAS handle table");
        t->count = count;
        t->handle = (cublasHandle_t *)(t + 1);
        t->stream = (void **)(t->handle + count);
        t->workspace = t->stream + count;
        if (pthread_setspecific(table.key, t) != 0) {
            free(t);
            return blob__fail(BLOB_ENOMEM, func, "pthread_setspecific failed");
        }
    }
    int dev;
    BLOB_TRY(table_device(func, t->count, &dev));
    if (!t->handle[dev]) {
        cublasHandle_t h;
        CUBLAS_TRY(func, cublasCreate, (&h));
        t->handle[dev] = h;
        t->stream[dev] = NULL; /* a new handle starts on the default stream */
        t->workspace[dev] = NULL;
    }
    void *ws;
    size_t ws_bytes;
    BLOB_TRY(blob__lt_workspace(stream, &ws, &ws_bytes));
    if (t->stream[dev] != stream || t->workspace[dev] != ws) {
        t->workspace[dev] = NULL;
        /* cublasSetStream goes back to the default workspace: set ours after it */
        CUBLAS_TRY(func, cublasSetStream, (t->handle[dev], (cudaStream_t)stream));
        t->stream[dev] = stream;
        CUBLAS_TRY(func, cublasSetWorkspace, (t->handle[dev], ws, ws_bytes));
        t->workspace[dev] = ws;
    }
    *out = t->handle[dev];
    return BLOB_OK;
}

extern "C" blob_status blob__k_prepare(void *stream)
{
    cublasHandle_t h;
    return handle_for(__func__, stream, &h); /* the workspace of stream too */
}

static cublasOperation_t op(blob_trans t) { return t == BLOB_TRANS ? CUBLAS_OP_T : CUBLAS_OP_N; }

extern "C" blob_status blob__k_gemm(void *stream, blob_dtype dtype, blob_trans trans_a,
                                    blob_trans trans_b, int64_t M, int64_t N, int64_t K,
                                    double alpha, const void *A, const void *B, double beta,
                                    void *C)
{
    cublasHandle_t h;
    BLOB_TRY(handle_for(__func__, stream, &h));
    /* Column-major C^T (N x M, ld N) = op(B)^T op(A)^T, where each stored row-major matrix
     * reads as its transpose. */
    const int64_t lda = trans_a ? M : K, ldb = trans_b ? K : N;
    const bool fits = FITS(M) && FITS(N) && FITS(K);
    if (dtype == BLOB_BFLOAT16 || dtype == BLOB_FLOAT16) {
        const float a = (float)alpha, b = (float)beta;
        const cudaDataType_t t = dtype == BLOB_BFLOAT16 ? CUDA_R_16BF : CUDA_R_16F;
        CUBLAS_SIZED(fits, cublasGemmEx,
                     (h, op(trans_b), op(trans_a), N, M, K, &a, B, t, ldb, A, t, lda, &b, C, t, N,
                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    } else if (dtype == BLOB_FLOAT32) {
        const float a = (float)alpha, b = (float)beta;
        CUBLAS_SIZED(fits, cublasSgemm,
                     (h, op(trans_b), op(trans_a), N, M, K, &a, (const float *)B, ldb,
                      (const float *)A, lda, &b, (float *)C, N));
    } else {
        CUBLAS_SIZED(fits, cublasDgemm,
                     (h, op(trans_b), op(trans_a), N, M, K, &alpha, (const double *)B, ldb,
                      (const double *)A, lda, &beta, (double *)C, N));
    }
    return BLOB_OK;
}

/* The same on tensor cores: float32 storage and accumulation, inputs rounded as the
 * mode's compute type allows. */
extern "C" blob_status blob__k_gemm_mode(void *stream, blob_math_mode mode, blob_trans trans_a,
                                         blob_trans trans_b, int64_t M, int64_t N, int64_t K,
                                         double alpha, const void *A, const void *B, double beta,
                                         void *C)
{
    if (mode != BLOB_MATH_TF32 && mode != BLOB_MATH_BF16)
        return blob__k_gemm(stream, BLOB_FLOAT32, trans_a, trans_b, M, N, K, alpha, A, B, beta, C);
    cublasHandle_t h;
    BLOB_TRY(handle_for(__func__, stream, &h));
    const int64_t lda = trans_a ? M : K, ldb = trans_b ? K : N;
    const float a = (float)alpha, b = (float)beta;
    const cublasComputeType_t compute =
        mode == BLOB_MATH_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F_FAST_16BF;
    CUBLAS_SIZED(FITS(M) && FITS(N) && FITS(K), cublasGemmEx,
                 (h, op(trans_b), op(trans_a), N, M, K, &a, B, CUDA_R_32F, ldb, A, CUDA_R_32F, lda,
                  &b, C, CUDA_R_32F, N, compute, CUBLAS_GEMM_DEFAULT));
    return BLOB_OK;
}

extern "C" blob_status blob__k_gemv(void *stream, blob_dtype dtype, blob_trans trans_a, int64_t M,
                                    int64_t N, double alpha, const void *A, const void *x,
                                    double beta, void *y)
{
    cublasHandle_t h;
    BLOB_TRY(handle_for(__func__, stream, &h));
    /* Row-major A (M x N) is column-major A^T (N x M, ld N): flip the operation. */
    const cublasOperation_t o = trans_a == BLOB_TRANS ? CUBLAS_OP_N : CUBLAS_OP_T;
    const bool fits = FITS(M) && FITS(N);
    if (dtype == BLOB_FLOAT32) {
        const float a = (float)alpha, b = (float)beta;
        CUBLAS_SIZED(fits, cublasSgemv,
                     (h, o, N, M, &a, (const float *)A, N, (const float *)x, 1, &b, (float *)y, 1));
    } else {
        CUBLAS_SIZED(fits, cublasDgemv,
                     (h, o, N, M, &alpha, (const double *)A, N, (const double *)x, 1, &beta,
                      (double *)y, 1));
    }
    return BLOB_OK;
}

extern "C" blob_status blob__k_axpy(void *stream, blob_dtype dtype, int64_t n, double alpha,
                                    const void *x, void *y)
{
    cublasHandle_t h;
    BLOB_TRY(handle_for(__func__, stream, &h));
    if (dtype == BLOB_FLOAT32) {
        const float a = (float)alpha;
        CUBLAS_SIZED(FITS(n), cublasSaxpy, (h, n, &a, (const float *)x, 1, (float *)y, 1));
    } else {
        CUBLAS_SIZED(FITS(n), cublasDaxpy, (h, n, &alpha, (const double *)x, 1, (double *)y, 1));
    }
    return BLOB_OK;
}

extern "C" blob_status blob__k_scal(void *stream, blob_dtype dtype, int64_t n, double alpha,
                                    void *x)
{
    cublasHandle_t h;
    BLOB_TRY(handle_for(__func__, stream, &h));
    if (dtype == BLOB_FLOAT32) {
        const float a = (float)alpha;
        CUBLAS_SIZED(FITS(n), cublasSscal, (h, n, &a, (float *)x, 1));
    } else {
        CUBLAS_SIZED(FITS(n), cublasDscal, (h, n, &alpha, (double *)x, 1));
    }
    return BLOB_OK;
}

extern "C" blob_status blob__k_dot(void *stream, blob_dtype dtype, int64_t n, const void *x,
                                   const void *y, double *out)
{
    cublasHandle_t h;
    BLOB_TRY(handle_for(__func__, stream, &h));
    if (dtype == BLOB_FLOAT32) {
        float r = 0;
        CUBLAS_SIZED(FITS(n), cublasSdot, (h, n, (const float *)x, 1, (const float *)y, 1, &r));
        *out = r;
    } else {
        double r = 0;
        CUBLAS_SIZED(FITS(n), cublasDdot, (h, n, (const double *)x, 1, (const double *)y, 1, &r));
        *out = r;
    }
    return BLOB_OK;
}

extern "C" blob_status blob__k_asum(void *stream, blob_dtype dtype, int64_t n, const void *x,
                                    double *out)
{
    cublasHandle_t h;
    BLOB_TRY(handle_for(__func__, stream, &h));
    if (dtype == BLOB_FLOAT32) {
        float r = 0;
        CUBLAS_SIZED(FITS(n), cublasSasum, (h, n, (const float *)x, 1, &r));
        *out = r;
    } else {
        double r = 0;
        CUBLAS_SIZED(FITS(n), cublasDasum, (h, n, (const double *)x, 1, &r));
        *out = r;
    }
    return BLOB_OK;
}

/* A device-to-device copy: no cuBLAS needed. */
extern "C" blob_status blob__k_copy(void *stream, blob_dtype dtype, int64_t n, const void *x,
                                    void *y)
{
    if (n > 0 && x != y)
        CUDA_TRY(cudaMemcpyAsync(y, x, (size_t)n * blob_dtype_size(dtype), cudaMemcpyDeviceToDevice,
                                 (cudaStream_t)stream));
    return BLOB_OK;
}
