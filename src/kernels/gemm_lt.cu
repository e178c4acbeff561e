/* GEMM with fused epilogues over cuBLASLt (blob_gpu_gemm_epilogue, and blob_gpu_gemm on
 * 16-bit floats; gemm_lt.cuh): the launchers. A problem's plan comes from the thread's
 * cache; a fused plan is tuned on its first call with beta 0 outside a capture when tuning
 * is on, then replayed from a graph or launched;
 * a problem cuBLASLt cannot fuse runs as a plain product and the epilogue kernels, and so
 * does a tuned one whose fused form timed slower. Owns that choice of path, and nothing
 * kept between calls. */
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

static bool is_half(blob_dtype dtype) { return dtype == BLOB_BFLOAT16 || dtype == BLOB_FLOAT16; }

/* One call's problem, whole. */
struct Call {
    void *stream;
    blob_dtype dtype;
    blob_math_mode mode;
    blob_trans trans_a, trans_b;
    int64_t M, N, K;
    double alpha;
    const void *A, *B;
    double beta;
    void *C;
    blob_epilogue epilogue;
    void *bias, *mask;
    bool tune;
};

/* The plain product, then the epilogue kernels. The 16-bit product is cuBLASLt's without
 * an epilogue: where cuBLASLt cannot fuse one (an output of 10 columns), cuBLAS's GemmEx
 * takes far slower kernels than its (H100, 10 x 4096 x 512: 22 us against 7.5). */
static blob_status unfused(const char *func, const Call &c)
{
    if (c.M > 0 && c.N > 0) {
        if (c.K == 0)
            CUDA_TRY_AT(func,
                        cudaMemsetAsync(c.C, 0, (size_t)(c.M * c.N) * blob_dtype_size(c.dtype),
                                        (cudaStream_t)c.stream));
        else if (is_half(c.dtype) && c.epilogue != BLOB_EPILOGUE_NONE)
            BLOB_TRY(blob__k_gemm_epilogue(c.stream, c.dtype, c.mode, c.trans_a, c.trans_b, c.M,
                                           c.N, c.K, c.alpha, c.A, c.B, c.beta, c.C,
                                           BLOB_EPILOGUE_NONE, nullptr, nullptr, c.tune));
        else if (c.dtype == BLOB_FLOAT32 && c.mode != BLOB_MATH_FP32)
            BLOB_TRY(blob__k_gemm_mode(c.stream, c.mode, c.trans_a, c.trans_b, c.M, c.N, c.K,
                                       c.alpha, c.A, c.B, c.beta, c.C));
        else
            BLOB_TRY(blob__k_gemm(c.stream, c.dtype, c.trans_a, c.trans_b, c.M, c.N, c.K, c.alpha,
                                  c.A, c.B, c.beta, c.C));
    }
    return blob__k_epilogue_apply(func, c.stream, c.dtype, c.trans_a, c.trans_b, c.M, c.N, c.K, c.A,
                                  c.B, c.C, c.epilogue, c.bias, c.mask);
}

/* Whether the plain product and the epilogue kernels beat fused_ms, timed as the fused
 * candidates are. cuBLASLt runs some epilogues as kernels of their own that cost more
 * than the library's (a DRELU after a bfloat16 product at 512 x 4096 on an H100, alone:
 * 11.4 us against 7.4 before the library's kernel stored whole vectors). A path that
 * fails here is not faster. */
static bool unfused_faster(const Call &c, float fused_ms)
{
    const auto run = [](const void *ctx, int) {
        return unfused("blob_gpu_gemm_epilogue", *(const Call *)ctx) == BLOB_OK;
    };
    float ms = -1;
    return run(&c, 0) && /* warm: tunes the plain product */
           blob__lt_time_ways(c.stream, 1, run, &c, &ms) && ms >= 0 && ms < fused_ms;
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
    const Call c = {stream, dtype, mode, trans_a, trans_b,  M,    N,    K,   alpha,
                    A,      B,     beta, C,       epilogue, bias, mask, tune};
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
        if (p->untimed && !capturing && beta == 0) {
            const float fused_ms = blob__lt_tune_plan(h, p, stream, a, b, A, B, C, w);
            if (epilogue != BLOB_EPILOGUE_NONE && unfused_faster(c, fused_ms)) {
                p->fused = false; /* for every later call of the plan too */
                return unfused(__func__, c);
            }
        }
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
    return unfused(__func__, c);
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
