/* GEMM with fused epilogues (blob/fused.h): argument checks shared by both sides, the host
 * reference (the BLAS product, then one pass over C for the epilogue; gemm16.c for the
 * 16-bit floats), and the GPU side handing validated arguments to the launcher. */
#include <stdint.h>
#include <string.h>

#include "blob/device.h"
#include "blob/blas.h"
#include "blob/fused.h"
#include "../core/core.h"
#include "../kernels/kernels.h"
#include "math_impl.h"

static bool reads_bias(blob_epilogue e)
{
    return e == BLOB_EPILOGUE_BIAS || e == BLOB_EPILOGUE_BIAS_RELU;
}

static bool writes_bias(blob_epilogue e)
{
    return e == BLOB_EPILOGUE_DRELU_BGRAD || e == BLOB_EPILOGUE_BGRADA || e == BLOB_EPILOGUE_BGRADB;
}

static bool reads_mask(blob_epilogue e)
{
    return e == BLOB_EPILOGUE_DRELU || e == BLOB_EPILOGUE_DRELU_BGRAD;
}

static bool relu(blob_epilogue e)
{
    return e == BLOB_EPILOGUE_RELU || e == BLOB_EPILOGUE_BIAS_RELU;
}

static blob_status check_epilogue(const char *fn, blob_dtype dtype, blob_trans trans_a,
                                  blob_trans trans_b, int64_t M, int64_t N, int64_t K,
                                  const void *A, const void *B, const void *C,
                                  blob_epilogue epilogue, const void *bias, const void *mask,
                                  blob_math_mode mode)
{
    BLOB_TRY(blob__check_gemm(fn, dtype, trans_a, trans_b, M, N, K, A, B, C));
    if (epilogue < BLOB_EPILOGUE_NONE || epilogue > BLOB_EPILOGUE_BGRADB)
        return blob__fail(BLOB_EINVAL, fn, "bad epilogue %d", (int)epilogue);
    BLOB_TRY(blob__check_math_mode(fn, mode));
    if (reads_bias(epilogue) || writes_bias(epilogue))
        BLOB_TRY(
            blob__check_array(fn, dtype, epilogue == BLOB_EPILOGUE_BGRADA ? M : N, "bias", bias));
    if (reads_mask(epilogue) || (relu(epilogue) && mask)) {
        size_t bytes = blob_relu_mask_bytes(M, N);
        if (!bytes && M && N)
            return blob__fail(BLOB_EOVERFLOW, fn, "the mask of %lld x %lld overflows", (long long)M,
                              (long long)N);
        if (!mask && bytes)
            return blob__fail(BLOB_EINVAL, fn, "mask is NULL with %zu bytes", bytes);
        if ((uintptr_t)mask % 16)
            return blob__fail(BLOB_EINVAL, fn, "mask %p is not 16-byte aligned", mask);
    }
    return BLOB_OK;
}

/* ---- Host side ---- */

/* Blocks of columns for the loops keeping one sum per column: a thread takes whole
 * blocks, so that a mask byte belongs to one thread. */
enum { COL_BLOCK = 64, SUM_ROWS = 32 };

/* The arguments of the host loops: X is C, or the input summed by BGRADA / BGRADB. */
typedef struct {
    int64_t M, N; /* X is M x N */
    void *X;
    void *bias;
    unsigned char *mask;
    bool relu;
} epilogue_args;

#define T  float
#define V  blob__vec_f32
#define VI blob__vec_i32
#define LANE_BITS                         \
    {                                     \
        {1, 2, 4, 8}, { 16, 32, 64, 128 } \
    }
#define FN(name) name##_f32
#include "fused_host.inc"
#undef T
#undef V
#undef VI
#undef LANE_BITS
#undef FN
#define T  double
#define V  blob__vec_f64
#define VI blob__vec_i64
#define LANE_BITS                             \
    {                                         \
        {1, 2}, {4, 8}, {16, 32}, { 64, 128 } \
    }
#define FN(name) name##_f64
#include "fused_host.inc"
#undef T
#undef V
#undef VI
#undef LANE_BITS
#undef FN

/* The epilogue of C = P (already written), in one pass over C. */
static void cpu_epilogue(blob_dtype dtype, int64_t M, int64_t N, void *C, blob_epilogue e,
                         void *bias, unsigned char *mask)
{
    const bool f = dtype == BLOB_FLOAT32;
    const int nt = blob__host_threads(M * N);
    epilogue_args a = {M, N, C, reads_bias(e) ? bias : NULL, mask, relu(e)};
    if (e == BLOB_EPILOGUE_BIAS || relu(e)) {
        blob__host_for(nt, M, f ? bias_relu_f32 : bias_relu_f64, &a);
    } else if (reads_mask(e)) {
        a.bias = e == BLOB_EPILOGUE_DRELU_BGRAD ? bias : NULL;
        blob__host_for(nt, (N + COL_BLOCK - 1) / COL_BLOCK, f ? drelu_f32 : drelu_f64, &a);
    }
}

/* bias = the sums over K of op(A) (BGRADA) or of op(B) (BGRADB): along the rows of the
 * stored matrix, or down its columns. */
static void cpu_bias_grad(blob_dtype dtype, blob_epilogue e, blob_trans trans_a, blob_trans trans_b,
                          int64_t M, int64_t N, int64_t K, const void *A, const void *B, void *bias)
{
    const bool ga = e == BLOB_EPILOGUE_BGRADA, f = dtype == BLOB_FLOAT32;
    const int64_t out = ga ? M : N;
    const int nt = blob__host_threads(out * K);
    if (ga ? trans_a == BLOB_NO_TRANS : trans_b == BLOB_TRANS) {
        epilogue_args a = {out, K, (void *)(ga ? A : B), bias, NULL, false};
        blob__host_for(nt, out, f ? row_sums_f32 : row_sums_f64, &a);
    } else {
        epilogue_args a = {K, out, (void *)(ga ? A : B), bias, NULL, false};
        blob__host_for(nt, (out + COL_BLOCK - 1) / COL_BLOCK, f ? col_sums_f32 : col_sums_f64, &a);
    }
}

typedef struct {
    epilogue_args a;
    bool f, drelu;
} block_epilogue;

static void epilogue_on_block(void *ctx, int64_t i0, int64_t i1, int64_t j0, int64_t j1)
{
    const block_epilogue *b = ctx;
    if (b->drelu)
        (b->f ? drelu_block_f32 : drelu_block_f64)(&b->a, i0, i1, j0, j1);
    else
        (b->f ? bias_relu_block_f32 : bias_relu_block_f64)(&b->a, i0, i1, j0, j1);
}

blob_status blob_cpu_gemm_epilogue(blob_dtype dtype, blob_trans trans_a, blob_trans trans_b,
                                   int64_t M, int64_t N, int64_t K, const void *A, const void *B,
                                   void *C, blob_epilogue epilogue, void *bias, void *mask,
                                   blob_math_mode mode)
{
    BLOB_TRY(check_epilogue(__func__, dtype, trans_a, trans_b, M, N, K, A, B, C, epilogue, bias,
                            mask, mode));
    if (dtype == BLOB_BFLOAT16 || dtype == BLOB_FLOAT16)
        return blob__cpu_gemm16(__func__, dtype, trans_a, trans_b, M, N, K, 1.0, A, B, 0.0, C,
                                epilogue,
                                reads_bias(epilogue) || writes_bias(epilogue) ? bias : NULL,
                                relu(epilogue) || reads_mask(epilogue) ? mask : NULL);
    const bool bias_grad = epilogue == BLOB_EPILOGUE_BGRADA || epilogue == BLOB_EPILOGUE_BGRADB;
    if (!bias_grad && epilogue != BLOB_EPILOGUE_NONE && M && N && K) {
        /* each thread runs the epilogue on its block of C while it is in its cache */
        int64_t rows, cols;
        blob__gemm_grid(M, N, K, blob_dtype_size(dtype), epilogue == BLOB_EPILOGUE_DRELU_BGRAD,
                        &rows, &cols);
        if (rows < M || cols < N) {
            block_epilogue b = {
                {M, N, C, reads_bias(epilogue) || writes_bias(epilogue) ? bias : NULL,
                 relu(epilogue) || reads_mask(epilogue) ? mask : NULL, relu(epilogue)},
                dtype == BLOB_FLOAT32,
                reads_mask(epilogue)};
            return blob__cpu_gemm_blocks(dtype, trans_a, trans_b, M, N, K, 1.0, A, B, 0.0, C, rows,
                                         cols, epilogue_on_block, &b);
        }
    }
    BLOB_TRY(blob_cpu_gemm(dtype, trans_a, trans_b, M, N, K, 1.0, A, B, 0.0, C));
    if (bias_grad)
        cpu_bias_grad(dtype, epilogue, trans_a, trans_b, M, N, K, A, B, bias);
    else
        cpu_epilogue(dtype, M, N, C, epilogue, bias,
                     relu(epilogue) || reads_mask(epilogue) ? mask : NULL);
    return BLOB_OK;
}

/* The checks of a GPU call: check_epilogue's, then the mode it runs in, the tuning setting
 * (unless tuning is NULL) and a GPU. */
static blob_status check_gpu_epilogue(const char *fn, blob_dtype dtype, blob_trans trans_a,
                                      blob_trans trans_b, int64_t M, int64_t N, int64_t K,
                                      const void *A, const void *B, const void *C,
                                      blob_epilogue epilogue, const void *bias, const void *mask,
                                      blob_math_mode mode, blob_math_mode *run_mode, bool *tuning)
{
    BLOB_TRY(
        check_epilogue(fn, dtype, trans_a, trans_b, M, N, K, A, B, C, epilogue, bias, mask, mode));
    BLOB_TRY(blob__math_mode_for(fn, dtype, mode, run_mode));
    if (tuning)
        BLOB_TRY(blob__gemm_tuning(fn, tuning));
    return blob__require_gpu(fn);
}

blob_status blob_gpu_gemm_epilogue(blob_dtype dtype, blob_trans trans_a, blob_trans trans_b,
                                   int64_t M, int64_t N, int64_t K, const void *A, const void *B,
                                   void *C, blob_epilogue epilogue, void *bias, void *mask,
                                   blob_math_mode mode)
{
    blob_math_mode run_mode;
    bool tuning;
    BLOB_TRY(check_gpu_epilogue(__func__, dtype, trans_a, trans_b, M, N, K, A, B, C, epilogue, bias,
                                mask, mode, &run_mode, &tuning));
    if (!reads_mask(epilogue) && !relu(epilogue))
        mask = NULL;
    if (!reads_bias(epilogue) && !writes_bias(epilogue))
        bias = NULL;
    return blob__k_gemm_epilogue(blob_stream_get(), dtype, run_mode, trans_a, trans_b, M, N, K, 1.0,
                                 A, B, 0.0, C, epilogue, bias, mask, tuning);
}

blob_status blob_gpu_gemm_epilogue_fused(blob_dtype dtype, blob_trans trans_a, blob_trans trans_b,
                                         int64_t M, int64_t N, int64_t K, blob_epilogue epilogue,
                                         bool with_mask, blob_math_mode mode, bool *fused)
{
    if (!fused)
        return BLOB_FAIL(BLOB_EINVAL, "fused is NULL");
    *fused = false;
    /* the checks of a call whose arrays are all present and aligned */
    static _Alignas(16) const char present[16];
    void *const p = (void *)present;
    blob_math_mode run_mode;
    BLOB_TRY(check_gpu_epilogue(__func__, dtype, trans_a, trans_b, M, N, K, p, p, p, epilogue, p, p,
                                mode, &run_mode, NULL));
    return blob__k_gemm_epilogue_fused(dtype, run_mode, trans_a, trans_b, M, N, K, epilogue,
                                       with_mask && relu(epilogue), fused);
}
