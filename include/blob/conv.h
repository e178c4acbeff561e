/*
 * blob/conv.h - convolution and pooling on NCHW arrays.
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
 * The window geometry is a blob_conv_geometry (blob/types.h). As in blob/blas.h,
 * blob_cpu_* run on the calling thread and blob_gpu_* are queued on the current stream.
 * Every float dtype is taken: bfloat16 and float16 are compared and summed in float32
 * (col2im's sums, the averages and the gradients) and rounded once to nearest even on
 * store, in the same order on both sides, so the host and the GPU give the same bits; the
 * host works on float32 copies of the input and output.
 * Input and output arrays must not overlap. The GPU side uses 32-bit index arithmetic
 * when every array has fewer than 2^31 elements and 64-bit beyond. Errors, all checked
 * before anything is written (the GPU side then BLOB_ENODEV without a GPU, BLOB_ECUDA):
 *   BLOB_ENOTSUP    an integer dtype;
 *   BLOB_EINVAL     bad dtype, NULL geometry, negative channels/height/width/pad/num,
 *                   kernel, stride or dilation below 1, a bad rounding, pooling with a
 *                   dilation other than 1 or a pad not below its kernel, a NULL array
 *                   of non-zero size;
 *   BLOB_ESHAPE     a (dilated) kernel larger than the padded input, or pooling over an
 *                   empty plane;
 *   BLOB_EOVERFLOW  a size that overflows int64 or the address space, or (max pooling)
 *                   a plane of more than INT32_MAX elements, which argmax cannot index;
 *   BLOB_ENOMEM     (host, 16-bit) no memory for the float32 copies.
 * Every function details its failure for blob_last_error().
 */
#ifndef BLOB_CONV_H
#define BLOB_CONV_H

#include <stdint.h>

#include "blob/status.h"
#include "blob/types.h"

#ifdef __cplusplus
extern "C" {
#endif

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

#define BLOB__CONV_DECLARE(side)                                                                  \
    /* col = im2col(im): im is num images of g (NCHW), col the column matrix above.        \
     * Every entry of col is written (0 for padding). */      \
    BLOB_API blob_status blob_##side##_im2col(blob_dtype dtype, const blob_conv_geometry *g,      \
                                              int64_t num, const void *im, void *col);            \
    /* im = col2im(col), the adjoint of im2col: each image cell is set to the sum of the   \
     * column entries that im2col copies from it (entries of padding are dropped). im is   \
     * overwritten, not added to; every cell is written (0 where no window reaches). The   \
     * GPU side gathers per cell: deterministic, no atomics. */      \
    BLOB_API blob_status blob_##side##_col2im(blob_dtype dtype, const blob_conv_geometry *g,      \
                                              int64_t num, const void *col, void *im);            \
    /* y = the maximum of each pooling window of x; argmax (as many int32 as y) gets the   \
     * index h * width + w within its input plane of the cell chosen: the first maximum in \
     * row-major window order; a NaN wins over numbers (the first NaN), as in PyTorch. */      \
    BLOB_API blob_status blob_##side##_max_pool_forward(blob_dtype dtype,                         \
                                                        const blob_conv_geometry *g, int64_t num, \
                                                        const void *x, void *y, int32_t *argmax); \
    /* dx = the gradient of max pooling: each cell of dx is set to the sum of dy over the  \
     * windows whose argmax names it (0 if none). dx is overwritten. An argmax entry that  \
     * names no cell of its own window contributes nothing. Gathered per cell on the GPU:  \
     * deterministic, no atomics. */      \
    BLOB_API blob_status blob_##side##_max_pool_backward(                                         \
        blob_dtype dtype, const blob_conv_geometry *g, int64_t num, const void *dy,               \
        const int32_t *argmax, void *dx);                                                         \
    /* y = the average of each pooling window of x, divided by Caffe's window size: the    \
     * window clipped to the padded plane (height + 2 pad_h rows), padding included, as    \
     * PyTorch's avg_pool2d with count_include_pad=True; the sum runs over the cells      \
     * inside the plane. */      \
    BLOB_API blob_status blob_##side##_avg_pool_forward(                                          \
        blob_dtype dtype, const blob_conv_geometry *g, int64_t num, const void *x, void *y);      \
    /* dx = the gradient of average pooling: each cell gets the sum over the windows that  \
     * hold it of dy / that window's divisor. dx is overwritten; deterministic. */      \
    BLOB_API blob_status blob_##side##_avg_pool_backward(                                         \
        blob_dtype dtype, const blob_conv_geometry *g, int64_t num, const void *dy, void *dx);

BLOB__CONV_DECLARE(cpu)
BLOB__CONV_DECLARE(gpu)

#ifdef __cplusplus
}
#endif
#endif
