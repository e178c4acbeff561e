/*
 * blob/math.h - BLAS-style math on raw arrays, on the host and on the GPU.
 *
 *   // C[M x N] = A[M x K] * B[K x N]  (row-major, as in Caffe)
 *   blob_cpu_gemm(BLOB_FLOAT32, BLOB_NO_TRANS, BLOB_NO_TRANS, M, N, K,
 *                 1.0, A, B, 0.0, C);
 *   blob_gpu_gemm(BLOB_FLOAT32, BLOB_NO_TRANS, BLOB_NO_TRANS, M, N, K,
 *                 1.0, dA, dB, 0.0, dC);            // same, on device pointers
 *
 * blob_cpu_* take host pointers and run on the calling thread (CBLAS where a BLAS call
 * exists). blob_gpu_* take device pointers of the current device and are queued on the
 * calling thread's current stream (blob_set_stream); they return once queued, except
 * those returning a host scalar (dot, asum), which wait for their result. Arrays hold
 * elements of `dtype`; scalars are passed as double and converted. Sizes are int64_t and
 * may exceed INT_MAX. Matrices are row-major; lda etc. are the row lengths implied by
 * the shapes. As in BLAS, beta == 0 means C (y) is not read, so it may hold NaN.
 * Every blob_gpu_* returns BLOB_ENODEV without a GPU.
 * Errors: BLOB_EINVAL (bad dtype, negative size, NULL array with a non-zero size),
 * BLOB_EOVERFLOW (on the host, a row length beyond INT_MAX), BLOB_ECUBLAS, BLOB_ECUDA.
 */
#ifndef BLOB_MATH_H
#define BLOB_MATH_H

#include <stdint.h>

#include "blob/status.h"
#include "blob/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { BLOB_NO_TRANS = 0, BLOB_TRANS = 1 } blob_trans;

/* The whole family, declared for both sides by one macro so the two cannot drift. */
#define BLOB__MATH_DECLARE(side)                                                            \
    /* C = alpha * op(A) * op(B) + beta * C; op(A) is M x K, op(B) K x N, C M x N. */       \
    BLOB_API blob_status blob_##side##_gemm(blob_dtype dtype, blob_trans trans_a,           \
                                            blob_trans trans_b, int64_t M, int64_t N,       \
                                            int64_t K, double alpha, const void *A,         \
                                            const void *B, double beta, void *C);           \
    /* y = alpha * op(A) * x + beta * y; A is M x N. */                                     \
    BLOB_API blob_status blob_##side##_gemv(blob_dtype dtype, blob_trans trans_a,           \
                                            int64_t M, int64_t N, double alpha,             \
                                            const void *A, const void *x, double beta,      \
                                            void *y);                                       \
    /* y += alpha * x */                                                                    \
    BLOB_API blob_status blob_##side##_axpy(blob_dtype dtype, int64_t n, double alpha,      \
                                            const void *x, void *y);                        \
    /* y = alpha * x + beta * y */                                                          \
    BLOB_API blob_status blob_##side##_axpby(blob_dtype dtype, int64_t n, double alpha,     \
                                             const void *x, double beta, void *y);          \
    /* x *= alpha */                                                                        \
    BLOB_API blob_status blob_##side##_scal(blob_dtype dtype, int64_t n, double alpha,      \
                                            void *x);                                       \
    /* *out = sum x[i] * y[i] */                                                            \
    BLOB_API blob_status blob_##side##_dot(blob_dtype dtype, int64_t n, const void *x,      \
                                           const void *y, double *out);                     \
    /* *out = sum |x[i]| */                                                                 \
    BLOB_API blob_status blob_##side##_asum(blob_dtype dtype, int64_t n, const void *x,     \
                                            double *out);                                   \
    /* y = x */                                                                             \
    BLOB_API blob_status blob_##side##_copy(blob_dtype dtype, int64_t n, const void *x,     \
                                            void *y);                                       \
    /* y[i] = alpha */                                                                      \
    BLOB_API blob_status blob_##side##_set(blob_dtype dtype, int64_t n, double alpha,       \
                                           void *y);                                        \
    /* y[i] += alpha */                                                                     \
    BLOB_API blob_status blob_##side##_add_scalar(blob_dtype dtype, int64_t n, double alpha, \
                                                  void *y);                                 \
    /* y[i] = a[i] * b[i] (y may alias a or b) */                                           \
    BLOB_API blob_status blob_##side##_mul(blob_dtype dtype, int64_t n, const void *a,      \
                                           const void *b, void *y);                         \
    /* y[i] = max(x[i], 0) (y may alias x) */                                               \
    BLOB_API blob_status blob_##side##_relu_forward(blob_dtype dtype, int64_t n,            \
                                                    const void *x, void *y);                \
    /* dx[i] = x[i] > 0 ? dy[i] : 0, with x the forward input (dx may alias dy) */          \
    BLOB_API blob_status blob_##side##_relu_backward(blob_dtype dtype, int64_t n,           \
                                                     const void *x, const void *dy,         \
                                                     void *dx);                             \
    /* Row-wise softmax of logits[rows x classes] into prob, and per-row cross-entropy     \
     * loss[i] = -log(prob[i, label[i]]) (prob clamped to the dtype's smallest normal).     \
     * labels hold class indices as values of dtype. A bad label (outside [0, classes),   \
     * not an integer, NaN) gives BLOB_ERANGE on the host; on the GPU its loss is NaN. */   \
    BLOB_API blob_status blob_##side##_softmax_loss_forward(blob_dtype dtype, int64_t rows, \
                                                            int64_t classes,                \
                                                            const void *logits,             \
                                                            const void *labels,             \
                                                            void *prob, void *loss);        \
    /* dlogits = scale * (prob - onehot(labels)). A bad label gives BLOB_ERANGE on the     \
     * host (nothing written); on the GPU its row of dlogits is zero. */                    \
    BLOB_API blob_status blob_##side##_softmax_loss_backward(blob_dtype dtype,              \
                                                             int64_t rows, int64_t classes, \
                                                             const void *prob,              \
                                                             const void *labels,            \
                                                             double scale, void *dlogits);

BLOB__MATH_DECLARE(cpu)
BLOB__MATH_DECLARE(gpu)

/* ---- Convolution and pooling on NCHW arrays ----
 *
 *   blob_conv_geometry g = {.channels = 64, .height = 56, .width = 56,
 *                           .kernel_h = 3, .kernel_w = 3, .pad_h = 1, .pad_w = 1,
 *                           .stride_h = 1, .stride_w = 1, .dilation_h = 1, .dilation_w = 1};
 *   int64_t oh, ow;
 *   blob_conv_output_size(&g, &oh, &ow);              // 56 x 56
 *   // col: (64*3*3) x (num*oh*ow); then out' = W[M x 576] * col is M x (num*oh*ow)
 *   blob_gpu_im2col(BLOB_FLOAT32, &g, num, d_images, d_col);
 *
 * An image batch x is num x channels x height x width, row-major (NCHW); an output
 * batch is num x channels x out_h x out_w with out_h, out_w from blob_conv_output_size
 * (im2col, col2im) or blob_pool_output_size (pooling). Window (oh, ow) of a plane covers
 * rows oh*stride_h - pad_h + i*dilation_h (0 <= i < kernel_h) and the columns likewise.
 * Cells outside the plane (the padding) read as 0 in im2col and are skipped by pooling.
 *
 * Column layout: col is a (channels*kernel_h*kernel_w) x (num*out_h*out_w) row-major
 * matrix; entry [(c*kernel_h + i)*kernel_w + j][(n*out_h + oh)*out_w + ow] is image n's
 * cell (c, i, j) of window (oh, ow). With num = 1 this is Caffe's per-image layout (one
 * GEMM per image and group); with num > 1 one GEMM covers the whole batch and yields
 * the output channel-major, M x num x (out_h*out_w). The rows of group g of G are the
 * contiguous block [g, g+1) * channels*kernel_h*kernel_w / G.
 *
 * As above, blob_cpu_* run on the calling thread (over OpenMP threads in builds with
 * OpenMP) and blob_gpu_* are queued on the current stream. Input and output arrays
 * must not overlap. The GPU side uses 32-bit index arithmetic when every array has fewer
 * than 2^31 elements and 64-bit beyond. Errors, all checked before anything is written
 * (the GPU side then BLOB_ENODEV without a GPU, BLOB_ECUDA):
 *   BLOB_EINVAL     bad dtype, NULL geometry, negative channels/height/width/pad/num,
 *                   kernel, stride or dilation below 1, a bad rounding, pooling with a
 *                   dilation other than 1 or a pad not below its kernel, a NULL array
 *                   of non-zero size;
 *   BLOB_ESHAPE     a (dilated) kernel larger than the padded input, or pooling over an
 *                   empty plane;
 *   BLOB_EOVERFLOW  a size that overflows int64 or the address space, or (max pooling)
 *                   a plane of more than INT32_MAX elements, which argmax cannot index.
 * Every function details its failure for blob_last_error(). */

/* How an output size that does not divide evenly is rounded. BLOB_ROUND_CEIL is Caffe's
 * pooling (and PyTorch's ceil_mode): one more window where a partial one remains, but a
 * last window that would start past height + pad_h is dropped (PyTorch's rule, which
 * Caffe applies only when padded; without padding Caffe would keep an empty window). */
typedef enum { BLOB_ROUND_FLOOR = 0, BLOB_ROUND_CEIL = 1 } blob_rounding;

/* One image's window geometry, shared by im2col, col2im and pooling. Zero-initialised
 * fields other than kernel, stride and dilation are valid defaults (no pad, floor). */
typedef struct {
    int64_t channels, height, width; /* of one input image */
    int64_t kernel_h, kernel_w;      /* >= 1 */
    int64_t pad_h, pad_w;            /* >= 0, on each side */
    int64_t stride_h, stride_w;      /* >= 1 */
    int64_t dilation_h, dilation_w;  /* >= 1; pooling takes 1 only */
    blob_rounding rounding;          /* of the output size; convolutions use FLOOR */
} blob_conv_geometry;

/* The output plane of im2col/col2im over g: out = (in + 2 pad - (dilation (kernel - 1)
 * + 1)) / stride + 1 per axis, rounded by g->rounding; *out_h and *out_w are left
 * alone on failure. Errors: BLOB_EINVAL (also for a NULL out_h or out_w), BLOB_ESHAPE,
 * BLOB_EOVERFLOW, as above. */
BLOB_API blob_status blob_conv_output_size(const blob_conv_geometry *g, int64_t *out_h,
                                           int64_t *out_w);

/* The output plane of pooling over g: as blob_conv_output_size, and g must also be a
 * pooling window: dilation 1, pad < kernel on each axis, a non-empty plane (so that
 * every window holds at least one input cell). */
BLOB_API blob_status blob_pool_output_size(const blob_conv_geometry *g, int64_t *out_h,
                                           int64_t *out_w);

#define BLOB__CONV_DECLARE(side)                                                            \
    /* col = im2col(im): im is num images of g (NCHW), col the column matrix above.        \
     * Every entry of col is written (0 for padding). */                                   \
    BLOB_API blob_status blob_##side##_im2col(blob_dtype dtype, const blob_conv_geometry *g, \
                                              int64_t num, const void *im, void *col);      \
    /* im = col2im(col), the adjoint of im2col: each image cell is set to the sum of the   \
     * column entries that im2col copies from it (entries of padding are dropped). im is   \
     * overwritten, not added to; every cell is written (0 where no window reaches). The   \
     * GPU side gathers per cell: deterministic, no atomics. */                            \
    BLOB_API blob_status blob_##side##_col2im(blob_dtype dtype, const blob_conv_geometry *g, \
                                              int64_t num, const void *col, void *im);      \
    /* y = the maximum of each pooling window of x; argmax (as many int32 as y) gets the   \
     * index h * width + w within its input plane of the cell chosen: the first maximum in \
     * row-major window order; a NaN wins over numbers (the first NaN), as in PyTorch. */   \
    BLOB_API blob_status blob_##side##_max_pool_forward(blob_dtype dtype,                   \
                                                        const blob_conv_geometry *g,        \
                                                        int64_t num, const void *x, void *y, \
                                                        int32_t *argmax);                   \
    /* dx = the gradient of max pooling: each cell of dx is set to the sum of dy over the  \
     * windows whose argmax names it (0 if none). dx is overwritten. An argmax entry that  \
     * names no cell of its own window contributes nothing. Gathered per cell on the GPU:  \
     * deterministic, no atomics. */                                                        \
    BLOB_API blob_status blob_##side##_max_pool_backward(blob_dtype dtype,                  \
                                                         const blob_conv_geometry *g,       \
                                                         int64_t num, const void *dy,       \
                                                         const int32_t *argmax, void *dx);  \
    /* y = the average of each pooling window of x, divided by Caffe's window size: the    \
     * window clipped to the padded plane (height + 2 pad_h rows), padding included, as    \
     * PyTorch's avg_pool2d with count_include_pad=True; the sum runs over the cells      \
     * inside the plane. */                                                                 \
    BLOB_API blob_status blob_##side##_avg_pool_forward(blob_dtype dtype,                   \
                                                        const blob_conv_geometry *g,        \
                                                        int64_t num, const void *x,         \
                                                        void *y);                           \
    /* dx = the gradient of average pooling: each cell gets the sum over the windows that  \
     * hold it of dy / that window's divisor. dx is overwritten; deterministic. */          \
    BLOB_API blob_status blob_##side##_avg_pool_backward(blob_dtype dtype,                  \
                                                         const blob_conv_geometry *g,       \
                                                         int64_t num, const void *dy,       \
                                                         void *dx);

BLOB__CONV_DECLARE(cpu)
BLOB__CONV_DECLARE(gpu)

#ifdef __cplusplus
}
#endif
#endif
