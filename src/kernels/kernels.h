/* Internal: the plain-C launchers behind blob_gpu_* (blob/blas.h, conv.h, fused.h and
 * optim.h). They take device pointers of the current device, validated arguments and the
 * stream to queue on, and return a status with the detail recorded. The CUDA build
 * implements them in src/kernels/ (*.cu), the CPU-only build in none.c (every one returns
 * BLOB_ENODEV). Sizes may be 0 unless stated. Errors: BLOB_ECUDA, BLOB_ECUBLAS, BLOB_ENOMEM. */
#ifndef BLOB_KERNELS_H
#define BLOB_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "blob/status.h"
#include "blob/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Row-major C = alpha * op(A) * op(B) + beta * C with M, N, K > 0 (beta == 0: C not read);
 * bfloat16 and float16 on the tensor cores with float32 accumulation. */
blob_status blob__k_gemm(void *stream, blob_dtype dtype, blob_trans trans_a, blob_trans trans_b,
                         int64_t M, int64_t N, int64_t K, double alpha, const void *A,
                         const void *B, double beta, void *C);
/* Row-major y = alpha * op(A) * x + beta * y, A M x N with M, N > 0 (beta == 0: y not read). */
blob_status blob__k_gemv(void *stream, blob_dtype dtype, blob_trans trans_a, int64_t M, int64_t N,
                         double alpha, const void *A, const void *x, double beta, void *y);
blob_status blob__k_axpy(void *stream, blob_dtype dtype, int64_t n, double alpha, const void *x,
                         void *y);
/* beta == 0: y is not read. */
blob_status blob__k_axpby(void *stream, blob_dtype dtype, int64_t n, double alpha, const void *x,
                          double beta, void *y);
blob_status blob__k_scal(void *stream, blob_dtype dtype, int64_t n, double alpha, void *x);
/* dot and asum wait for their result. */
blob_status blob__k_dot(void *stream, blob_dtype dtype, int64_t n, const void *x, const void *y,
                        double *out);
blob_status blob__k_asum(void *stream, blob_dtype dtype, int64_t n, const void *x, double *out);
/* x of float dtype `from` into y of float dtype `to` (from != to), as blob_gpu_convert. */
blob_status blob__k_convert(void *stream, blob_dtype from, blob_dtype to, int64_t n, const void *x,
                            void *y);
/* axpy, scal, dot and asum on bfloat16 or float16 (half.cu): computed in float32, as the
 * host does them. */
blob_status blob__k_half_axpy(void *stream, blob_dtype dtype, int64_t n, double alpha,
                              const void *x, void *y);
blob_status blob__k_half_scal(void *stream, blob_dtype dtype, int64_t n, double alpha, void *x);
blob_status blob__k_half_dot(void *stream, blob_dtype dtype, int64_t n, const void *x,
                             const void *y, double *out);
blob_status blob__k_half_asum(void *stream, blob_dtype dtype, int64_t n, const void *x,
                              double *out);
/* Make the calling thread's resources for the current device (its cuBLAS handle, bound
 * to stream, and its workspace there) exist, so that a stream capture can start. */
blob_status blob__k_prepare(void *stream);
blob_status blob__k_copy(void *stream, blob_dtype dtype, int64_t n, const void *x, void *y);
blob_status blob__k_set(void *stream, blob_dtype dtype, int64_t n, double alpha, void *y);
blob_status blob__k_add_scalar(void *stream, blob_dtype dtype, int64_t n, double alpha, void *y);
blob_status blob__k_mul(void *stream, blob_dtype dtype, int64_t n, const void *a, const void *b,
                        void *y);
blob_status blob__k_relu_forward(void *stream, blob_dtype dtype, int64_t n, const void *x, void *y);
blob_status blob__k_relu_backward(void *stream, blob_dtype dtype, int64_t n, const void *x,
                                  const void *dy, void *dx);
/* A label that is not an integer in [0, classes) gives a NaN loss and a zero dlogits row. */
blob_status blob__k_softmax_loss_forward(void *stream, blob_dtype dtype, int64_t rows,
                                         int64_t classes, const void *logits, const void *labels,
                                         void *prob, void *loss);
blob_status blob__k_softmax_loss_backward(void *stream, blob_dtype dtype, int64_t rows,
                                          int64_t classes, const void *prob, const void *labels,
                                          double scale, void *dlogits);
/* Both in one kernel: prob, loss and dlogits = scale * (prob - onehot). */
blob_status blob__k_softmax_loss_forward_backward(void *stream, blob_dtype dtype, int64_t rows,
                                                  int64_t classes, const void *logits,
                                                  const void *labels, double scale, void *prob,
                                                  void *loss, void *dlogits);
blob_status blob__k_softmax_loss_mixed(void *stream, blob_dtype dtype, blob_dtype label_dtype,
                                       int64_t rows, int64_t classes, const void *logits,
                                       const void *labels, double scale, void *prob, float *loss,
                                       void *dlogits);
blob_status blob__k_softmax_loss_backward_mixed(void *stream, blob_dtype dtype,
                                                blob_dtype label_dtype, int64_t rows,
                                                int64_t classes, const void *prob,
                                                const void *labels, double scale, void *dlogits);

/* A validated convolution or pooling call (blob/conv.h) over num > 0 images of geometry g:
 * its output plane oh x ow, never empty, and the element counts of the image side (num x
 * channels x height x width) and of the other side (the columns of im2col, or the pooled
 * batch). */
typedef struct {
    const blob_conv_geometry *g;
    int64_t num, oh, ow, n_image, n_other;
} blob__conv_call;

/* Convolution and pooling of a call whose output side is not empty. */
blob_status blob__k_im2col(void *stream, blob_dtype dtype, const blob__conv_call *c, const void *im,
                           void *col);
blob_status blob__k_col2im(void *stream, blob_dtype dtype, const blob__conv_call *c,
                           const void *col, void *im);
blob_status blob__k_max_pool_forward(void *stream, blob_dtype dtype, const blob__conv_call *c,
                                     const void *x, void *y, int32_t *argmax);
blob_status blob__k_max_pool_backward(void *stream, blob_dtype dtype, const blob__conv_call *c,
                                      const void *dy, const int32_t *argmax, void *dx);
blob_status blob__k_avg_pool_forward(void *stream, blob_dtype dtype, const blob__conv_call *c,
                                     const void *x, void *y);
blob_status blob__k_avg_pool_backward(void *stream, blob_dtype dtype, const blob__conv_call *c,
                                      const void *dy, void *dx);

/* ==== GEMM in a math mode, GEMM with epilogues (fused.h), optimizer steps (optim.h) ==== */

/* Row-major float32 C = alpha * op(A) * op(B) + beta * C on tensor cores with mode
 * BLOB_MATH_TF32 or BLOB_MATH_BF16, as blob__k_gemm otherwise. */
blob_status blob__k_gemm_mode(void *stream, blob_math_mode mode, blob_trans trans_a,
                              blob_trans trans_b, int64_t M, int64_t N, int64_t K, double alpha,
                              const void *A, const void *B, double beta, void *C);
/* C = epilogue(alpha * op(A) op(B) + beta * C) as blob_gpu_gemm_epilogue (alpha 1, beta 0)
 * and blob_gpu_gemm on 16-bit floats (epilogue NONE, K > 0) do it, with validated
 * arguments (any size >= 0), mode resolved (BLOB_MATH_FP32 but for float32), and bias /
 * mask NULL unless the epilogue uses them; with tune, a problem met for the first time
 * has its algorithm timed (blob_gemm_tuning_set) by a call with beta 0. */
blob_status blob__k_gemm_epilogue(void *stream, blob_dtype dtype, blob_math_mode mode,
                                  blob_trans trans_a, blob_trans trans_b, int64_t M, int64_t N,
                                  int64_t K, double alpha, const void *A, const void *B,
                                  double beta, void *C, blob_epilogue epilogue, void *bias,
                                  void *mask, bool tune);
/* C already holds P = op(A) op(B) (M x N, row-major): apply the epilogue to it and write
 * bias / mask as blob_gpu_gemm_epilogue does (the bias sums of BGRADA and BGRADB come
 * from A and B), by the library's kernels: where cuBLASLt does not fuse, or its fused
 * form was timed slower. Queued on stream; errors recorded under func. */
blob_status blob__k_epilogue_apply(const char *func, void *stream, blob_dtype dtype,
                                   blob_trans trans_a, blob_trans trans_b, int64_t M, int64_t N,
                                   int64_t K, const void *A, const void *B, void *C,
                                   blob_epilogue epilogue, void *bias, void *mask);
/* *fused = whether cuBLASLt fuses the epilogue of this problem on the current device
 * (for 256-byte aligned arrays); empty problems never fuse. */
blob_status blob__k_gemm_epilogue_fused(blob_dtype dtype, blob_math_mode mode, blob_trans trans_a,
                                        blob_trans trans_b, int64_t M, int64_t N, int64_t K,
                                        blob_epilogue epilogue, bool with_mask, bool *fused);
/* The form of an optimizer step: PLAIN (data and diff of one dtype), MIXED (float32 data,
 * a 16-bit diff and working copy) or SPLIT (float32 master weights kept as a bfloat16
 * working copy and its remainders lo, no data). */
typedef enum { BLOB__STEP_PLAIN, BLOB__STEP_MIXED, BLOB__STEP_SPLIT } blob__step_form;
/* One optimizer step of the given form, as blob_gpu_optim_step (PLAIN: gdtype the dtype
 * of every array, work and lo unused, inv_scale 1), blob_gpu_optim_step_mixed (MIXED:
 * float32 data and histories, gdtype the 16-bit dtype of diff and work, lo unused) or
 * blob_gpu_optim_step_split (SPLIT: data unused, gdtype bfloat16), with validated
 * arguments (opt's fields included; the arrays the form uses non-NULL where there are
 * tensors). */
blob_status blob__k_optim_step(void *stream, const blob_optim *opt, blob__step_form form,
                               blob_dtype gdtype, int n, const int64_t *counts, void *const *data,
                               void *const *lo, const void *const *diff, void *const *hist1,
                               void *const *hist2, void *const *work, double inv_scale,
                               int64_t *step);
/* *found = 1 (an int32 on the device) if any of the n arrays x[i] (counts[i] elements of
 * float dtype) holds an Inf or a NaN; left alone otherwise. One kernel per non-empty array. */
blob_status blob__k_find_nonfinite(void *stream, blob_dtype dtype, int n, const int64_t *counts,
                                   const void *const *x, int32_t *found);

#ifdef __cplusplus
}
#endif
#endif
