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

#include <stdbool.h>
#include <stddef.h>
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
                                                             double scale, void *dlogits);  \
    /* Both of the above in one pass over logits (one kernel on the GPU), for a training   \
     * step whose backward follows its forward: prob and loss as softmax_loss_forward     \
     * writes them, and dlogits as softmax_loss_backward would from that prob. Bad labels  \
     * as above (on the host, nothing written). */                                          \
    BLOB_API blob_status blob_##side##_softmax_loss_forward_backward(                       \
        blob_dtype dtype, int64_t rows, int64_t classes, const void *logits,                \
        const void *labels, double scale, void *prob, void *loss, void *dlogits);

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
 * As above, blob_cpu_* run on the calling thread and blob_gpu_* are queued on the current stream. Input and output arrays
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

/* ==== Math modes, GEMM with fused epilogues, multi-tensor optimizer steps, host BLAS ====
 *
 *   // a layer's forward (relu(X W^T + b), keeping the mask) and backward, on the GPU
 *   size_t mbytes = blob_relu_mask_bytes(batch, out);     // allocate mask with this
 *   blob_gpu_gemm_epilogue(BLOB_FLOAT32, BLOB_NO_TRANS, BLOB_TRANS, batch, out, in, X, W,
 *                          Y, BLOB_EPILOGUE_BIAS_RELU, b, mask, BLOB_MATH_DEFAULT);
 *   ...                                                   // dY of this layer's output
 *   blob_gpu_gemm_epilogue(BLOB_FLOAT32, BLOB_TRANS, BLOB_NO_TRANS, out, in, batch, dZ, X,
 *                          dW, BLOB_EPILOGUE_BGRADA, db, NULL, BLOB_MATH_DEFAULT);
 *
 * Math modes choose how float32 products are computed on the GPU: exactly (FP32, the
 * default, as PyTorch's default), or on tensor cores with the inputs rounded to TF32
 * (10-bit mantissa) or bfloat16 (7-bit mantissa), always with float32 storage and float32
 * accumulation (cuBLAS's CUBLAS_COMPUTE_32F_FAST_TF32 and _FAST_16BF). The mode is a
 * process-wide setting, read from the environment variable BLOB_MATH_MODE (fp32, tf32 or
 * bf16, in any case) on first use and changed by blob_set_math_mode; any other value
 * makes the calls that would use it fail with BLOB_EINVAL naming it, until
 * blob_set_math_mode chooses a mode (blob_get_math_mode then says fp32). It applies to
 * blob_gpu_gemm and to every blob_gpu_gemm_epilogue called with
 * BLOB_MATH_DEFAULT. float64 products, and everything on the host, are always exact: the
 * blob_cpu_* functions check the mode argument and otherwise ignore it.
 */
typedef enum {
    BLOB_MATH_DEFAULT = 0, /* per call: the process-wide setting */
    BLOB_MATH_FP32 = 1,    /* exact float32 */
    BLOB_MATH_TF32 = 2,    /* tensor cores, TF32 inputs, float32 accumulation */
    BLOB_MATH_BF16 = 3     /* tensor cores, bfloat16 inputs, float32 accumulation */
} blob_math_mode;

/* Set the process-wide mode; BLOB_MATH_DEFAULT restores the one the environment gave.
 * Thread-safe; work already queued keeps the mode it was queued with.
 * Errors: BLOB_EINVAL for a value outside the enum. */
BLOB_API blob_status blob_set_math_mode(blob_math_mode mode);

/* The process-wide mode (never BLOB_MATH_DEFAULT). */
BLOB_API blob_math_mode blob_get_math_mode(void);

/* "default", "fp32", "tf32", "bf16"; "unknown" outside the enum. */
BLOB_API const char *blob_math_mode_name(blob_math_mode mode);

/* GEMM tuning, as cuDNN's benchmark mode or PyTorch's TunableOp. cuBLASLt picks the
 * algorithm of a product by a heuristic. With tuning on, blob_gpu_gemm_epilogue times
 * instead, on the device, the heuristic's candidates and the splits of K each allows,
 * the first time the calling thread meets a problem (its shape, transposes, epilogue,
 * mode and pointer alignments), and keeps the fastest. That first call waits on the host
 * for the stream's work and runs the product some hundred times on its own arrays (what
 * it writes, the call then writes again), tens of milliseconds; a problem met first while
 * its stream is captured is timed at its first call outside a capture. The fastest can
 * differ from run to run, and with it how a split K rounds. Off by default; the
 * environment variable BLOB_GEMM_TUNING=1 turns it on at first use (0 leaves it off; any
 * other value makes blob_gpu_gemm_epilogue fail with BLOB_EINVAL naming it, until
 * blob_set_gemm_tuning is called). Process-wide and thread-safe; problems already met
 * keep what they had. */
BLOB_API void blob_set_gemm_tuning(bool on);
BLOB_API bool blob_get_gemm_tuning(void);

/* What blob_*_gemm_epilogue does after the product P = op(A) op(B) (M x N, row-major),
 * which it writes to C (M x N) with nothing added from C's old contents:
 *   NONE         C = P
 *   BIAS         C[i,j] = P[i,j] + bias[j]                      bias: N, read
 *   RELU         C = max(P, 0)                                  mask written if not NULL
 *   BIAS_RELU    C[i,j] = max(P[i,j] + bias[j], 0)              bias: N, read; mask too
 *   DRELU        C[i,j] = mask bit (i,j) set ? P[i,j] : 0       mask read
 *   DRELU_BGRAD  as DRELU, and bias[j] = sum_i C[i,j]           mask read; bias: N, written
 *   BGRADA       C = P, and bias[i] = sum_k op(A)[i,k]          bias: M, written
 *   BGRADB       C = P, and bias[j] = sum_k op(B)[k,j]          bias: N, written
 * The forward ReLU epilogues record in mask which outputs were positive, and the DRELU
 * epilogues take such a mask to compute the ReLU's backward pass fused into the GEMM that
 * produces its input gradient: after C = relu(X W^T + b) with mask, the backward of the
 * next layer, dX = dY W, runs as DRELU_BGRAD and yields this layer's dZ and db at once;
 * its dW = dZ^T X runs as BGRADA with op(A) = dZ^T, which yields db as well.
 * A ReLU of NaN gives 0 and a clear bit, as cuBLASLt's does. */
typedef enum {
    BLOB_EPILOGUE_NONE = 0,
    BLOB_EPILOGUE_BIAS = 1,
    BLOB_EPILOGUE_RELU = 2,
    BLOB_EPILOGUE_BIAS_RELU = 3,
    BLOB_EPILOGUE_DRELU = 4,
    BLOB_EPILOGUE_DRELU_BGRAD = 5,
    BLOB_EPILOGUE_BGRADA = 6,
    BLOB_EPILOGUE_BGRADB = 7
} blob_epilogue;

/* The ReLU mask of an M x N output is cuBLASLt's bit mask, on both sides: row i of C
 * takes BLOB_RELU_MASK_ROW_BITS(N) bits (N rounded up to a multiple of 128), starting at
 * bit i * BLOB_RELU_MASK_ROW_BITS(N); bit b of the mask is bit b % 8 of byte b / 8, and
 * it is set when C[i,j] > 0. The bits past N in a row are unspecified. A mask must be
 * 16-byte aligned and hold blob_relu_mask_bytes(M, N) bytes, in the memory of the side
 * that uses it (a mask can be copied between sides as plain bytes). Initialise its
 * memory once (any value; a blob's is zero-filled) before the first forward: cuBLASLt
 * reads the bytes it updates. */
#define BLOB_RELU_MASK_ROW_BITS(N) ((((int64_t)(N) + 127) / 128) * 128)

/* Bytes of the ReLU mask of an M x N output; 0 for a negative size or one that overflows. */
BLOB_API size_t blob_relu_mask_bytes(int64_t M, int64_t N);

/* C = epilogue(op(A) op(B)), row-major, as described at blob_epilogue; op(A) is M x K,
 * op(B) K x N, C M x N. bias and mask are needed only by the epilogues that name them (a
 * ReLU's mask is optional) and may be NULL otherwise. mode applies to float32 on the GPU
 * (BLOB_MATH_DEFAULT: the process-wide mode); the host is always exact. C must not
 * overlap A, B, bias or mask. With K == 0 the product is 0 (bias sums too).
 * The GPU side runs cuBLASLt with the epilogue fused where cuBLASLt offers it for the
 * problem, and otherwise cuBLAS and one or two kernels of its own with the same results;
 * it queues its work on the current stream and may be captured in a graph (see
 * blob_graph_begin). Matmul descriptors and the algorithm chosen are cached per thread
 * and problem, and its workspace per thread, device and stream.
 * Errors: BLOB_EINVAL (bad dtype, transpose flag, epilogue or mode, negative size, a NULL
 * array the epilogue needs, a misaligned mask), BLOB_EOVERFLOW, BLOB_ENODEV (GPU side
 * without a GPU), BLOB_ECUBLAS, BLOB_ECUDA, BLOB_EDEVMEM (its workspace). */
BLOB_API blob_status blob_cpu_gemm_epilogue(blob_dtype dtype, blob_trans trans_a,
                                            blob_trans trans_b, int64_t M, int64_t N, int64_t K,
                                            const void *A, const void *B, void *C,
                                            blob_epilogue epilogue, void *bias, void *mask,
                                            blob_math_mode mode);
BLOB_API blob_status blob_gpu_gemm_epilogue(blob_dtype dtype, blob_trans trans_a,
                                            blob_trans trans_b, int64_t M, int64_t N, int64_t K,
                                            const void *A, const void *B, void *C,
                                            blob_epilogue epilogue, void *bias, void *mask,
                                            blob_math_mode mode);

/* *fused = whether blob_gpu_gemm_epilogue runs this problem as one cuBLASLt call with the
 * epilogue fused (true) or as a product followed by kernels of its own (false), on the
 * current GPU, for arrays aligned as the allocator's blocks are; with_mask says whether a
 * ReLU epilogue writes its mask. Empty products never fuse. *fused is false on failure.
 * Errors: as blob_gpu_gemm_epilogue's (the arrays are not needed), BLOB_ENODEV. */
BLOB_API blob_status blob_gpu_gemm_epilogue_fused(blob_dtype dtype, blob_trans trans_a,
                                                  blob_trans trans_b, int64_t M, int64_t N,
                                                  int64_t K, blob_epilogue epilogue,
                                                  bool with_mask, blob_math_mode mode,
                                                  bool *fused);

/* Optimizers, as PyTorch defines them (torch.optim.SGD, Adam, AdamW, without amsgrad or
 * maximize) and as Caffe's SGD solver does. With w a parameter, g its gradient, t the
 * step number (1 for the first step), and lr, wd the learning rate and weight decay:
 *   SGD        d = g + wd*w; if momentum != 0: h = (t == 1) ? d : momentum*h +
 *              (1 - dampening)*d, and d = nesterov ? d + momentum*h : h; then w -= lr*d
 *   SGD_CAFFE  h = lr*(g + wd*w) + momentum*h; w -= h
 *   ADAM       d = g + wd*w; m = beta1*m + (1-beta1)*d; v = beta2*v + (1-beta2)*d*d;
 *              w -= lr/(1-beta1^t) * m / (sqrt(v)/sqrt(1-beta2^t) + eps)
 *   ADAMW      w *= 1 - lr*wd; then ADAM with d = g
 * h is the first history array (momentum), m and v the first and second (Adam's moment
 * estimates); all of them start at zero. g is never written. */
typedef enum {
    BLOB_OPTIM_SGD = 0,
    BLOB_OPTIM_SGD_CAFFE = 1,
    BLOB_OPTIM_ADAM = 2,
    BLOB_OPTIM_ADAMW = 3
} blob_optim_kind;

typedef struct {
    blob_optim_kind kind;
    double lr;           /* >= 0 */
    double weight_decay; /* >= 0 */
    double momentum;     /* SGD: >= 0 */
    double dampening;    /* SGD: 0 with nesterov */
    bool nesterov;       /* SGD: needs momentum > 0 and dampening 0 */
    double beta1, beta2; /* Adam: in [0, 1) */
    double eps;          /* Adam: >= 0 */
} blob_optim;

/* PyTorch's defaults for kind with learning rate lr: no momentum, dampening or weight
 * decay for SGD; betas 0.9 and 0.999, eps 1e-8 and weight decay 0 (Adam) or 0.01 (AdamW). */
BLOB_API blob_optim blob_optim_default(blob_optim_kind kind, double lr);

/* History arrays per parameter that opt uses: 0 (SGD without momentum), 1 (SGD with
 * momentum, SGD_CAFFE) or 2 (Adam, AdamW); -1 for NULL or an unknown kind. */
BLOB_API int blob_optim_history_count(const blob_optim *opt);

/* The step counter of the multi-tensor steps: BLOB_OPTIM_STEP_WORDS int64_t in the
 * memory of the side, zero before the first step. step[0] counts the steps taken; the
 * other word is the GPU side's scratch and stays 0 between steps. */
#define BLOB_OPTIM_STEP_WORDS 2

/* One optimizer step over n tensors: tensor i has counts[i] elements of dtype at data[i]
 * (updated), diff[i] (its gradient, read) and, as blob_optim_history_count says,
 * hist1[i] and hist2[i] (updated; the arrays hist1 / hist2 may be NULL when unused).
 * Then step[0] is incremented. counts and the pointer arrays are host memory; the arrays
 * they point to, and step, are memory of the side. Arrays of different tensors must not
 * overlap. The GPU side queues one kernel for up to 512 tensors (one per 512 more) on
 * the current stream; it reads the step number from step on the device and increments it
 * there, so a captured graph replays with the right count.
 * Errors: BLOB_EINVAL (NULL opt or step, a bad field of opt, bad dtype, n < 0, a negative
 * count, a NULL array that is needed), BLOB_ENODEV, BLOB_ECUDA. */
BLOB_API blob_status blob_cpu_optim_step(const blob_optim *opt, blob_dtype dtype, int n,
                                         const int64_t *counts, void *const *data,
                                         const void *const *diff, void *const *hist1,
                                         void *const *hist2, int64_t *step);
BLOB_API blob_status blob_gpu_optim_step(const blob_optim *opt, blob_dtype dtype, int n,
                                         const int64_t *counts, void *const *data,
                                         const void *const *diff, void *const *hist1,
                                         void *const *hist2, int64_t *step);

/* The host BLAS, as the library uses it. */
typedef struct {
    char name[64];    /* the BLAS and its version: "OpenBLAS 0.3.21", "BLIS 0.9.0",
                         "MKL 2026.2", or "CBLAS" for another */
    char core[32];    /* the kernel set in use, e.g. "SkylakeX" (OpenBLAS), "zen3" (BLIS);
                         "" when unknown */
    char detected[32]; /* the one OpenBLAS chose by itself, when the library changed it */
    int threads;      /* the library's host threads (blob_set_host_threads) */
    char summary[192]; /* one line, e.g. "OpenBLAS 0.3.21, core Prescott -> SkylakeX
                          (AVX-512 CPU; OPENBLAS_CORETYPE chooses), 16 threads (GEMMs cut
                          into blocks, one BLAS thread each)" */
} blob_blas_info;

/* Describe the host BLAS. OpenBLAS's runtime core choice is checked when the library is
 * loaded: where it chose a generic core (Prescott, Nehalem, ...) on a CPU with AVX-512 or
 * AVX2, as it does on virtual machines that hide the CPU model, the library switches it
 * to SkylakeX or Haswell, once; a core set with OPENBLAS_CORETYPE is always kept.
 *
 * The host math of blob_cpu_* runs on the library's host threads: a GEMM is cut into
 * blocks of C, one per thread, each a one-thread BLAS call; vector operations, epilogues,
 * ReLU, softmax and optimizer steps split their arrays the same way when large enough to
 * gain. With OpenBLAS built for pthreads (or serial), BLIS or MKL, the library sets the
 * BLAS's thread count to 1 at load time for this: other BLAS calls of the process then
 * run on one thread too, until openblas_set_num_threads, bli_thread_set_num_threads or
 * mkl_set_num_threads gives it more, after which the library's GEMMs are handed to the
 * BLAS whole. With an OpenMP OpenBLAS, or another CBLAS, GEMMs are always handed over
 * whole, to be threaded by the BLAS.
 * Errors: BLOB_EINVAL for NULL. */
BLOB_API blob_status blob_blas_get_info(blob_blas_info *out);

/* Set the number of the library's host threads (the calling thread included), 1 to 64.
 * The default is the thread count the BLAS chose at load time (OpenBLAS:
 * OPENBLAS_NUM_THREADS or OMP_NUM_THREADS, else the cores; BLIS: BLIS_NUM_THREADS or
 * OMP_NUM_THREADS, else the cores; MKL: MKL_NUM_THREADS or OMP_NUM_THREADS, else its
 * count of physical cores); 1 runs all host math on the calling thread.
 * Errors: BLOB_EINVAL for n out of range. */
BLOB_API blob_status blob_set_host_threads(int n);

#ifdef __cplusplus
}
#endif
#endif
