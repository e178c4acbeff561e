/* GEMM with fused epilogues over cuBLASLt (blob_gpu_gemm_epilogue, and blob_gpu_gemm on
 * 16-bit floats; gemm_lt.cuh): the launchers. A problem's plan comes from the thread's
 * cache; a fused plan is tuned on its first call with beta 0 outside a capture when tuning
 * is on, then replayed from a graph or launched;
 * a problem cuBLASLt cannot fuse runs as a cuBLAS product and the epilogue kernels. Owns
 * that choice of path, and nothing kept between calls. */
#include "gemm_lt.cuh"

/* Whether stream is being captured (or cannot be asked: taken as yes). */
static bool stream_capturing(void *stream)
{
    cudaStreamCaptureStatus status;
    if (cudaStreamIsCapturing((cudaStream_t)stream, &status) != cudaSuccess) {
        (void)cudaGetLastError();
        return true;
    }
    return status != cudaStreamCaptureStatusNone;
}

/* The product by cuBLAS (in the mode), then the epilogue kernels. */
static blob_status unfused(const char *func, void *stream, blob_dtype dtype, blob_math_mode mode,
                           blob_trans trans_a, blob_trans trans_b, int64_t M, int64_t N, int64_t K,
                           double alpha, const void *A, const void *B, double beta, void *C,
                           blob_epilogue e, void *bias, void *mask)
{
    if (M > 0 && N > 0) {
        if (K == 0)
            CUDA_TRY_AT(func, cudaMemsetAsync(C, 0, (size_t)(M * N) * blob_dtype_size(dtype),
                                              (cudaStream_t)stream));
        else if (dtype == BLOB_FLOAT32 && mode != BLOB_MATH_FP32)
            BLOB_TRY(
                blob__k_gemm_mode(stream, mode, trans_a, trans_b, M, N, K, alpha, A, B, beta, C));
        else
            BLOB_TRY(blob__k_gemm(stream, dtype, trans_a, trans_b, M, N, K, alpha, A, B, beta, C));
    }
    return blob__epilogue_apply(func, stream, dtype, trans_a, trans_b, M, N, K, A, B, C, e, bias,
                                mask);
}

/* The plan of a problem (NULL for the empty ones, which never fuse). */
static blob_status find_plan(const char *func, blob_dtype dtype, blob_math_mode mode,
                             blob_trans trans_a, blob_trans trans_b, int64_t M, int64_t N,
                             int64_t K, const void *A, const void *B, const void *C,
                             blob_epilogue e, void *bias, void *mask, bool tune, LtState **st,
                             cublasLtHandle_t *h, int *device, Plan **plan)
{
    *plan = nullptr;
    BLOB_TRY(blob__lt_thread_state(func, st, device, h));
    if (M == 0 || N == 0 || K == 0)
        return BLOB_OK;
    const Key k =
        blob__lt_key(*device, dtype, mode, trans_a, trans_b, M, N, K, A, B, C, e, bias, mask, tune);
    return blob__lt_plan_for(func, *st, *h, k, bias, mask, plan);
}

extern "C" blob_status blob__k_gemm_epilogue(void *stream, blob_dtype dtype, blob_math_mode mode,
                                             blob_trans trans_a, blob_trans trans_b, int64_t M,
                                             int64_t N, int64_t K, double alpha, const void *A,
                                             const void *B, double beta, void *C,
                                             blob_epilogue epilogue, void *bias, void *mask,
                                             bool tune)
{
    LtState *st;
    cublasLtHandle_t h;
    int dev;
    Plan *p;
    BLOB_TRY(find_plan(__func__, dtype, mode, trans_a, trans_b, M, N, K, A, B, C, epilogue, bias,
                       mask, tune, &st, &h, &dev, &p));
    if (p && p->fused) {
        Workspace *w;
        BLOB_TRY(blob__lt_workspace_for(st, dev, stream, &w));
        BLOB_TRY(blob__lt_plan_set_pointers(__func__, p, bias, mask));
        const float a32 = (float)alpha, b32 = (float)beta;
        const bool f64 = dtype == BLOB_FLOAT64;
        const void *a = f64 ? (const void *)&alpha : &a32;
        const void *b = f64 ? (const void *)&beta : &b32;
        const bool capturing = stream_capturing(stream);
        if (p->untimed && !capturing && beta == 0)
            blob__lt_tune_plan(h, p, stream, a, b, A, B, C, w);
        if (!capturing && !p->untimed &&
            blob__lt_replay(st, dev, h, p, stream, a, b, A, B, C, bias, mask, w))
            return BLOB_OK;
        cublasStatus_t s = lt_matmul(h, p, &p->algo, a, b, A, B, C, w, (cudaStream_t)stream);
        if (s == CUBLAS_STATUS_SUCCESS)
            return BLOB_OK;
        if (!refused(s))
            return lt_fail(s, "cublasLtMatmul", __func__);
        (void)cudaGetLastError();
        p->fused = false; /* refused at launch: take the other path from now on */
    }
    return unfused(__func__, stream, dtype, mode, trans_a, trans_b, M, N, K, alpha, A, B, beta, C,
                   epilogue, bias, mask);
}

extern "C" blob_status blob__k_gemm_epilogue_fused(blob_dtype dtype, blob_math_mode mode,
                                                   blob_trans trans_a, blob_trans trans_b,
                                                   int64_t M, int64_t N, int64_t K,
                                                   blob_epilogue epilogue, bool with_mask,
                                                   bool *fused)
{
    /* stand-ins, 256-byte aligned like the allocator's blocks; never dereferenced */
    void *const aligned = (void *)(uintptr_t)4096;
    const bool bias = epilogue == BLOB_EPILOGUE_BIAS || epilogue == BLOB_EPILOGUE_BIAS_RELU ||
                      epilogue >= BLOB_EPILOGUE_DRELU_BGRAD;
    const bool mask =
        with_mask || epilogue == BLOB_EPILOGUE_DRELU || epilogue == BLOB_EPILOGUE_DRELU_BGRAD;
    LtState *st;
    cublasLtHandle_t h;
    int dev;
    Plan *p;
    BLOB_TRY(find_plan(__func__, dtype, mode, trans_a, trans_b, M, N, K, aligned, aligned, aligned,
                       epilogue, bias ? aligned : nullptr, mask ? aligned : nullptr, false, &st, &h,
                       &dev, &p));
    *fused = p && p->fused;
    return BLOB_OK;
}
