/*
 * blob/blas.h - BLAS-style math on raw arrays, on the host and on the GPU.
 *
 *   // C[M x N] = A[M x K] * B[K x N]  (row-major, as in Caffe)
 *   blob_cpu_gemm(BLOB_FLOAT32, BLOB_NO_TRANS, BLOB_NO_TRANS, M, N, K,
 *                 1.0, A, B, 0.0, C);
 *   blob_gpu_gemm(BLOB_FLOAT32, BLOB_NO_TRANS, BLOB_NO_TRANS, M, N, K,
 *                 1.0, dA, dB, 0.0, dC);            // same, on device pointers
 *
 * blob_cpu_* take host pointers and run on the calling thread (CBLAS where a BLAS call
 * exists). blob_gpu_* take device pointers of the current device and are queued on the
 * calling thread's current stream (blob_stream_set); they return once queued, except
 * those returning a host scalar (dot, asum), which wait for their result. Arrays hold
 * elements of `dtype`; scalars are passed as double and converted. Sizes are int64_t and
 * may exceed INT_MAX. Matrices are row-major; lda etc. are the row lengths implied by
 * the shapes. As in BLAS, beta == 0 means C (y) is not read, so it may hold NaN.
 * Every blob_gpu_* returns BLOB_ENODEV without a GPU. The dtypes are float32 and float64;
 * axpy, axpby, scal, set, add_scalar, mul, dot and asum take bfloat16 and float16 too (each
 * element widened to float32, products, sums and the accumulation in float32, results
 * rounded to nearest even; fused multiply-adds on the GPU may round axpby differently), so
 * do relu_forward and relu_backward (which copy elements, the same bits on both sides)
 * and the softmax_loss_*_mixed calls, and copy takes every dtype. gemv and the softmax
 * calls without _mixed take float32 and float64 only.
 * gemm takes bfloat16 and float16 as well, A, B and C all of `dtype`, alpha and beta
 * rounded to float32: the products summed in float32 and C rounded to nearest even once.
 * On the GPU through cuBLASLt on the tensor cores (CUBLAS_COMPUTE_32F), its plans cached,
 * tuned (blob_gemm_tuning_set; a problem is timed by its first call with beta 0) and
 * replayed as blob_gpu_gemm_epilogue's are, the math mode not applying; on the host in
 * float32 tiles (OpenBLAS's cblas_sbgemm on bfloat16 where the library has it, sgemm on
 * panels widened to float32 otherwise). The order of the float32 sums differs between the
 * sides, so their results may differ by a rounding of the 16-bit dtype.
 * Errors: BLOB_EINVAL (bad dtype, negative size, NULL array with a non-zero size),
 * BLOB_ENOTSUP (a dtype or label dtype the call does not take, named with the call in
 * the detail), BLOB_ERANGE (a bad label, on the host),
 * BLOB_EOVERFLOW (on the host, a row length beyond INT_MAX), BLOB_ENOMEM (the host's
 * 16-bit gemm, its float32 tiles), BLOB_ECUBLAS, BLOB_ECUDA, BLOB_EDEVMEM (the GPU's
 * 16-bit gemm, its cuBLASLt workspace).
 */
#ifndef BLOB_BLAS_H
#define BLOB_BLAS_H

#include <stdint.h>

#include "blob/status.h"
#include "blob/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The whole family, declared for both sides by one macro so the two cannot drift. */
#define BLOB__MATH_DECLARE(side)                                                                   \
    /* C = alpha * op(A) * op(B) + beta * C; op(A) is M x K, op(B) K x N, C M x N. */              \
    BLOB_API blob_status blob_##side##_gemm(                                                       \
        blob_dtype dtype, blob_trans trans_a, blob_trans trans_b, int64_t M, int64_t N, int64_t K, \
        double alpha, const void *A, const void *B, double beta, void *C);                         \
    /* y = alpha * op(A) * x + beta * y; A is M x N. */                                            \
    BLOB_API blob_status blob_##side##_gemv(blob_dtype dtype, blob_trans trans_a, int64_t M,       \
                                            int64_t N, double alpha, const void *A, const void *x, \
                                            double beta, void *y);                                 \
    /* y += alpha * x */                                                                           \
    BLOB_API blob_status blob_##side##_axpy(blob_dtype dtype, int64_t n, double alpha,             \
                                            const void *x, void *y);                               \
    /* y = alpha * x + beta * y */                                                                 \
    BLOB_API blob_status blob_##side##_axpby(blob_dtype dtype, int64_t n, double alpha,            \
                                             const void *x, double beta, void *y);                 \
    /* x *= alpha */                                                                               \
    BLOB_API blob_status blob_##side##_scal(blob_dtype dtype, int64_t n, double alpha, void *x);   \
    /* *out = sum x[i] * y[i] */                                                                   \
    BLOB_API blob_status blob_##side##_dot(blob_dtype dtype, int64_t n, const void *x,             \
                                           const void *y, double *out);                            \
    /* *out = sum |x[i]| */                                                                        \
    BLOB_API blob_status blob_##side##_asum(blob_dtype dtype, int64_t n, const void *x,            \
                                            double *out);                                          \
    /* y = x */                                                                                    \
    BLOB_API blob_status blob_##side##_copy(blob_dtype dtype, int64_t n, const void *x, void *y);  \
    /* y[i] = alpha */                                                                             \
    BLOB_API blob_status blob_##side##_set(blob_dtype dtype, int64_t n, double alpha, void *y);    \
    /* y[i] += alpha */                                                                            \
    BLOB_API blob_status blob_##side##_add_scalar(blob_dtype dtype, int64_t n, double alpha,       \
                                                  void *y);                                        \
    /* y[i] = a[i] * b[i] (y may alias a or b) */                                                  \
    BLOB_API blob_status blob_##side##_mul(blob_dtype dtype, int64_t n, const void *a,             \
                                           const void *b, void *y);                                \
    /* y[i] = max(x[i], 0) (y may alias x) */                                                      \
    BLOB_API blob_status blob_##side##_relu_forward(blob_dtype dtype, int64_t n, const void *x,    \
                                                    void *y);                                      \
    /* dx[i] = x[i] > 0 ? dy[i] : 0, with x the forward input (dx may alias dy) */                 \
    BLOB_API blob_status blob_##side##_relu_backward(blob_dtype dtype, int64_t n, const void *x,   \
                                                     const void *dy, void *dx);                    \
    /* Row-wise softmax of logits[rows x classes] into prob, and per-row cross-entropy     \
     * loss[i] = -log(prob[i, label[i]]) (prob clamped to the dtype's smallest normal).     \
     * labels hold class indices as values of dtype. A bad label (outside [0, classes),   \
     * not an integer, NaN) gives BLOB_ERANGE on the host; on the GPU its loss is NaN. */       \
    BLOB_API blob_status blob_##side##_softmax_loss_forward(                                       \
        blob_dtype dtype, int64_t rows, int64_t classes, const void *logits, const void *labels,   \
        void *prob, void *loss);                                                                   \
    /* dlogits = scale * (prob - onehot(labels)). A bad label gives BLOB_ERANGE on the     \
     * host (nothing written); on the GPU its row of dlogits is zero. */       \
    BLOB_API blob_status blob_##side##_softmax_loss_backward(                                      \
        blob_dtype dtype, int64_t rows, int64_t classes, const void *prob, const void *labels,     \
        double scale, void *dlogits);                                                              \
    /* Both of the above in one pass over logits (one kernel on the GPU), for a training   \
     * step whose backward follows its forward: prob and loss as softmax_loss_forward     \
     * writes them, and dlogits as softmax_loss_backward would from that prob. Bad labels  \
     * as above (on the host, nothing written). */       \
    BLOB_API blob_status blob_##side##_softmax_loss_forward_backward(                              \
        blob_dtype dtype, int64_t rows, int64_t classes, const void *logits, const void *labels,   \
        double scale, void *prob, void *loss, void *dlogits);                                      \
    /* Softmax with loss on mixed storage: logits, prob and dlogits of float32, bfloat16   \
     * or float16 (`dtype`), labels of int32 or int64 (`label_dtype`), the per-row loss in  \
     * float32. Computed in float32 (elements widened, the sums in float32 on the GPU and  \
     * float64 on the host), prob and dlogits rounded to nearest even once from the        \
     * unrounded probabilities, loss[i] = -log(p) with p clamped to float32's smallest     \
     * normal. With dlogits not NULL, the gradient scale * (prob - onehot(labels)) in the  \
     * same pass (one kernel on the GPU). Bad labels as in softmax_loss_forward_backward. */       \
    BLOB_API blob_status blob_##side##_softmax_loss_mixed(                                         \
        blob_dtype dtype, blob_dtype label_dtype, int64_t rows, int64_t classes,                   \
        const void *logits, const void *labels, double scale, void *prob, float *loss,             \
        void *dlogits);                                                                            \
    /* dlogits = scale * (prob - onehot(labels)) on mixed storage, as above: prob widened, \
     * the result rounded once. Bad labels as in softmax_loss_backward. */       \
    BLOB_API blob_status blob_##side##_softmax_loss_backward_mixed(                                \
        blob_dtype dtype, blob_dtype label_dtype, int64_t rows, int64_t classes, const void *prob, \
        const void *labels, double scale, void *dlogits);

BLOB__MATH_DECLARE(cpu)
BLOB__MATH_DECLARE(gpu)

/* y[i] = x[i] converted from float dtype `from` to float dtype `to` (float64, float32,
 * bfloat16, float16), x and y not overlapping: rounded to nearest even in one rounding,
 * overflow to Inf of the sign, subnormals kept; a NaN becomes the quiet NaN of its sign
 * (payload dropped). from == to copies the bits. The host and the GPU give the same bits.
 * Errors: BLOB_EINVAL (bad dtype, negative n, NULL array), BLOB_ENOTSUP (an integer dtype),
 * BLOB_ENODEV and BLOB_ECUDA (GPU). */
BLOB_API blob_status blob_cpu_convert(blob_dtype from, blob_dtype to, int64_t n, const void *x,
                                      void *y);
BLOB_API blob_status blob_gpu_convert(blob_dtype from, blob_dtype to, int64_t n, const void *x,
                                      void *y);

#ifdef __cplusplus
}
#endif
#endif
