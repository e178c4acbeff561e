/* Convolution and pooling over NCHW batches: im2col, col2im (gathered per image cell),
 * max and average pooling forward and backward (the backward passes gathered per input
 * cell over the windows that hold it: deterministic, no atomics). Every kernel comes in
 * a 32-bit index instance, used when all its indices fit, and a 64-bit one. */
#include <stdint.h>

#include "common.cuh"

/* A validated geometry and its output plane in the index type I. */
template <typename I>
struct Geo {
    I channels, height, width, kh, kw, ph, pw, sh, sw, dh, dw, oh, ow;
};

/* An axis with one window never uses its stride, which may be huge: 1 keeps it small. */
template <typename I>
static Geo<I> geo(const blob_conv_geometry *g, int64_t oh, int64_t ow)
{
    return {(I)g->channels, (I)g->height,     (I)g->width,      (I)g->kernel_h,
            (I)g->kernel_w, (I)g->pad_h,      (I)g->pad_w,      (I)(oh > 1 ? g->stride_h : 1),
            (I)(ow > 1 ? g->stride_w : 1),    (I)g->dilation_h, (I)g->dilation_w,
            (I)oh,          (I)ow};
}

/* Whether 32-bit indices suffice: arrays of n1 and n2 elements, and sums of a padded
 * axis with a window offset (each below twice the padded axis). */
static bool fits32(const blob_conv_geometry *g, int64_t n1, int64_t n2)
{
    const int64_t lim = INT32_MAX / 2;
    return n1 < INT32_MAX && n2 < INT32_MAX && g->height + 2 * g->pad_h < lim &&
           g->width + 2 * g->pad_w < lim;
}

/* Call launch<T, I>(args...) with T by dtype and I by fits. */
#define DISPATCH(dtype, fits, launch, ...)                                         \
    ((dtype) == BLOB_FLOAT32                                                       \
         ? ((fits) ? launch<float, int32_t>(__VA_ARGS__)                           \
                   : launch<float, int64_t>(__VA_ARGS__))                          \
         : ((fits) ? launch<double, int32_t>(__VA_ARGS__)                          \
                   : launch<double, int64_t>(__VA_ARGS__)))

/* ---- im2col and col2im ---- */

/* One thread per column q and channel c writes the kernel_h * kernel_w rows of c at q:
 * consecutive threads write consecutive columns, and read neighbouring image cells,
 * which the caches serve for the overlapping windows. */
template <typename T, typename I>
static __global__ void im2col_kernel(Geo<I> g, I cols, const T *__restrict__ im,
                                     T *__restrict__ col)
{
    const I plane_out = g.oh * g.ow, plane = g.height * g.width, taps = g.kh * g.kw;
    for (I c = blockIdx.y; c < g.channels; c += gridDim.y)
        GRID_LOOP(q64, cols) {
            const I q = (I)q64, n = q / plane_out, p = q - n * plane_out, y = p / g.ow;
            const I x = p - y * g.ow, h0 = y * g.sh - g.ph, w0 = x * g.sw - g.pw;
            const T *src = im + (n * g.channels + c) * plane;
            T *dst = col + c * taps * cols + q;
            for (I i = 0; i < g.kh; i++) {
                const I h = h0 + i * g.dh;
                const bool row_inside = h >= 0 && h < g.height;
                for (I j = 0; j < g.kw; j++, dst += cols) {
                    const I w = w0 + j * g.dw;
                    *dst = row_inside && w >= 0 && w < g.width ? src[h * g.width + w] : T(0);
                }
            }
        }
}

template <typename T, typename I>
static blob_status im2col_launch(const char *func, void *stream, const blob_conv_geometry *g,
                                 int64_t oh, int64_t ow, int64_t num, const void *im, void *col)
{
    const int64_t cols = num * oh * ow;
    const dim3 grid(grid_for(cols, THREADS), (unsigned)(g->channels < 65535 ? g->channels : 65535));
    im2col_kernel<T, I><<<grid, THREADS, 0, (cudaStream_t)stream>>>(
        geo<I>(g, oh, ow), (I)cols, (const T *)im, (T *)col);
    return launch_check("im2col_kernel", func);
}

extern "C" blob_status blob__k_im2col(void *stream, blob_dtype dtype,
                                      const blob_conv_geometry *g, int64_t out_h,
                                      int64_t out_w, int64_t num, const void *im, void *col)
{
    const int64_t n_im = num * g->channels * g->height * g->width;
    const int64_t n_col = g->channels * g->kernel_h * g->kernel_w * num * out_h * out_w;
    return DISPATCH(dtype, fits32(g, n_im, n_col), im2col_launch, __func__, stream, g, out_h,
                    out_w, num, im, col);
}

/* The windows [lo, hi) of an axis with `out` windows that reach padded cell p (cell +
 * pad), for a kernel of extent `extent`. */
template <typename I>
static __device__ void covering(I p, I extent, I stride, I out, I *lo, I *hi)
{
    *lo = p < extent ? 0 : (p - extent) / stride + 1;
    const I h = p / stride + 1;
    *hi = h < out ? h : out;
}

/* One thread per image cell sums the column entries copied from it. Windows are visited
 * from the last to the first, so that taps come in ascending order, as on the host. */
template <typename T, typename I, bool Dilated>
static __global__ void col2im_kernel(Geo<I> g, I cols, I count, const T *__restrict__ col,
                                     T *__restrict__ im)
{
    const I plane_out = g.oh * g.ow, ext_h = (g.kh - 1) * g.dh + 1, ext_w = (g.kw - 1) * g.dw + 1;
    GRID_LOOP(t64, count) {
        const I t = (I)t64, w = t % g.width, r = t / g.width, h = r % g.height;
        const I nc = r / g.height, c = nc % g.channels, n = nc / g.channels;
        const I hp = h + g.ph, wp = w + g.pw;
        I y0, y1, x0, x1;
        covering(hp, ext_h, g.sh, g.oh, &y0, &y1);
        covering(wp, ext_w, g.sw, g.ow, &x0, &x1);
        const T *src = col + c * g.kh * g.kw * cols + n * plane_out;
        T sum = 0;
        for (I y = y1 - 1; y >= y0; y--) {
            I i = hp - y * g.sh;
            if (Dilated) {
                if (i % g.dh)
                    continue;
                i /= g.dh;
            }
            for (I x = x1 - 1; x >= x0; x--) {
                I j = wp - x * g.sw;
                if (Dilated) {
                    if (j % g.dw)
                        continue;
                    j /= g.dw;
                }
                sum += src[(i * g.kw + j) * cols + y * g.ow + x];
            }
        }
        im[t] = sum;
    }
}

template <typename T, typename I>
static blob_status col2im_launch(const char *func, void *stream, const blob_conv_geometry *g,
                                 int64_t oh, int64_t ow, int64_t num, const void *col, void *im)
{
    const int64_t count = num * g->channels * g->height * g->width;
    const Geo<I> d = geo<I>(g, oh, ow);
    const I cols = (I)(num * oh * ow);
    if (g->dilation_h == 1 && g->dilation_w == 1)
        col2im_kernel<T, I, false><<<grid_for(count, THREADS), THREADS, 0, (cudaStream_t)stream>>>(
            d, cols, (I)count, (const T *)col, (T *)im);
    else
        col2im_kernel<T, I, true><<<grid_for(count, THREADS), THREADS, 0, (cudaStream_t)stream>>>(
            d, cols, (I)count, (const T *)col, (T *)im);
    return launch_check("col2im_kernel", func);
}

extern "C" blob_status blob__k_col2im(void *stream, blob_dtype dtype,
                                      const blob_conv_geometry *g, int64_t out_h,
                                      int64_t out_w, int64_t num, const void *col, void *im)
{
    const int64_t n_im = num * g->channels * g->height * g->width;
    const int64_t n_col = g->channels * g->kernel_h * g->kernel_w * num * out_h * out_w;
    return DISPATCH(dtype, fits32(g, n_im, n_col), col2im_launch, __func__, stream, g, out_h,
                    out_w, num, col, im);
}

/* ---- Pooling ---- */

/* Pooling window (py, px) clipped to the plane, and its divisor for averaging: its size
 * clipped to the padded plane (Caffe). */
template <typename I>
struct Window {
    I h0, h1, w0, w1, divisor;
};

template <typename I>
static __device__ Window<I> pool_window(const Geo<I> &g, I py, I px)
{
    I h0 = py * g.sh - g.ph, w0 = px * g.sw - g.pw;
    I h1 = min(h0 + g.kh, g.height + g.ph), w1 = min(w0 + g.kw, g.width + g.pw);
    const I divisor = (h1 - h0) * (w1 - w0);
    return {max(h0, I(0)), min(h1, g.height), max(w0, I(0)), min(w1, g.width), divisor};
}

/* Output t as (plane, py, px). */
template <typename I>
static __device__ void split_out(const Geo<I> &g, I t, I *plane, I *py, I *px)
{
    *px = t % g.ow;
    const I r = t / g.ow;
    *py = r % g.oh;
    *plane = r / g.oh;
}

/* Whether v replaces the running maximum m: larger, or the first NaN. */
template <typename T>
static __device__ bool max_beats(T v, T m)
{
    return v > m || (v != v && m == m);
}

template <typename T, typename I>
static __global__ void max_pool_forward_kernel(Geo<I> g, I count, const T *__restrict__ x,
                                               T *__restrict__ y, int32_t *__restrict__ argmax)
{
    GRID_LOOP(t64, count) {
        const I t = (I)t64;
        I p, py, px;
        split_out(g, t, &p, &py, &px);
        const Window<I> w = pool_window(g, py, px);
        const T *src = x + p * g.height * g.width;
        I best = w.h0 * g.width + w.w0;
        T m = src[best];
        for (I h = w.h0; h < w.h1; h++)
            for (I v = w.w0; v < w.w1; v++) {
                const T e = src[h * g.width + v];
                if (max_beats(e, m)) {
                    m = e;
                    best = h * g.width + v;
                }
            }
        y[t] = m;
        argmax[t] = (int32_t)best;
    }
}

template <typename T, typename I>
static __global__ void avg_pool_forward_kernel(Geo<I> g, I count, const T *__restrict__ x,
                                               T *__restrict__ y)
{
    GRID_LOOP(t64, count) {
        const I t = (I)t64;
        I p, py, px;
        split_out(g, t, &p, &py, &px);
        const Window<I> w = pool_window(g, py, px);
        const T *src = x + p * g.height * g.width;
        T sum = 0;
        for (I h = w.h0; h < w.h1; h++)
            for (I v = w.w0; v < w.w1; v++)
                sum += src[h * g.width + v];
        y[t] = sum / T(w.divisor);
    }
}

/* Backward: one thread per input cell t sums over the windows that hold it. */
template <typename T, typename I, bool Max>
static __global__ void pool_backward_kernel(Geo<I> g, I count, const T *__restrict__ dy,
                                            const int32_t *__restrict__ argmax,
                                            T *__restrict__ dx)
{
    GRID_LOOP(t64, count) {
        const I t = (I)t64, w = t % g.width, r = t / g.width, h = r % g.height;
        const I plane_off = r / g.height * g.oh * g.ow, cell = h * g.width + w;
        I y0, y1, x0, x1;
        covering(h + g.ph, g.kh, g.sh, g.oh, &y0, &y1);
        covering(w + g.pw, g.kw, g.sw, g.ow, &x0, &x1);
        T sum = 0;
        for (I py = y0; py < y1; py++)
            for (I px = x0; px < x1; px++) {
                const I o = plane_off + py * g.ow + px;
                if (Max)
                    sum += argmax[o] == cell ? dy[o] : T(0);
                else
                    sum += dy[o] / T(pool_window(g, py, px).divisor);
            }
        dx[t] = sum;
    }
}

template <typename T, typename I>
static blob_status max_pool_forward_launch(const char *func, void *stream,
                                           const blob_conv_geometry *g, int64_t oh, int64_t ow,
                                           int64_t count, const void *x, void *y, int32_t *argmax)
{
    max_pool_forward_kernel<T, I><<<grid_for(count, THREADS), THREADS, 0, (cudaStream_t)stream>>>(
        geo<I>(g, oh, ow), (I)count, (const T *)x, (T *)y, argmax);
    return launch_check("max_pool_forward_kernel", func);
}

template <typename T, typename I>
static blob_status avg_pool_forward_launch(const char *func, void *stream,
                                           const blob_conv_geometry *g, int64_t oh, int64_t ow,
                                           int64_t count, const void *x, void *y)
{
    avg_pool_forward_kernel<T, I><<<grid_for(count, THREADS), THREADS, 0, (cudaStream_t)stream>>>(
        geo<I>(g, oh, ow), (I)count, (const T *)x, (T *)y);
    return launch_check("avg_pool_forward_kernel", func);
}

/* argmax NULL: average pooling. */
template <typename T, typename I>
static blob_status pool_backward_launch(const char *func, void *stream,
                                        const blob_conv_geometry *g, int64_t oh, int64_t ow,
                                        int64_t count, const void *dy, const int32_t *argmax,
                                        void *dx)
{
    const Geo<I> d = geo<I>(g, oh, ow);
    if (argmax)
        pool_backward_kernel<T, I, true><<<grid_for(count, THREADS), THREADS, 0,
                                           (cudaStream_t)stream>>>(d, (I)count, (const T *)dy,
                                                                   argmax, (T *)dx);
    else
        pool_backward_kernel<T, I, false><<<grid_for(count, THREADS), THREADS, 0,
                                            (cudaStream_t)stream>>>(d, (I)count, (const T *)dy,
                                                                    argmax, (T *)dx);
    return launch_check("pool_backward_kernel", func);
}

/* The element counts of the image batch and of the pooled batch. */
static int64_t image_count(const blob_conv_geometry *g, int64_t num)
{
    return num * g->channels * g->height * g->width;
}

static int64_t pooled_count(const blob_conv_geometry *g, int64_t oh, int64_t ow, int64_t num)
{
    return num * g->channels * oh * ow;
}

extern "C" blob_status blob__k_max_pool_forward(void *stream, blob_dtype dtype,
                                                const blob_conv_geometry *g, int64_t out_h,
                                                int64_t out_w, int64_t num, const void *x,
                                                void *y, int32_t *argmax)
{
    const int64_t n_x = image_count(g, num), n_y = pooled_count(g, out_h, out_w, num);
    return DISPATCH(dtype, fits32(g, n_x, n_y), max_pool_forward_launch, __func__, stream, g,
                    out_h, out_w, n_y, x, y, argmax);
}

extern "C" blob_status blob__k_max_pool_backward(void *stream, blob_dtype dtype,
                                                 const blob_conv_geometry *g, int64_t out_h,
                                                 int64_t out_w, int64_t num, const void *dy,
                                                 const int32_t *argmax, void *dx)
{
    const int64_t n_x = image_count(g, num), n_y = pooled_count(g, out_h, out_w, num);
    return DISPATCH(dtype, fits32(g, n_x, n_y), pool_backward_launch, __func__, stream, g,
                    out_h, out_w, n_x, dy, argmax, dx);
}

extern "C" blob_status blob__k_avg_pool_forward(void *stream, blob_dtype dtype,
                                                const blob_conv_geometry *g, int64_t out_h,
                                                int64_t out_w, int64_t num, const void *x,
                                                void *y)
{
    const int64_t n_x = image_count(g, num), n_y = pooled_count(g, out_h, out_w, num);
    return DISPATCH(dtype, fits32(g, n_x, n_y), avg_pool_forward_launch, __func__, stream, g,
                    out_h, out_w, n_y, x, y);
}

extern "C" blob_status blob__k_avg_pool_backward(void *stream, blob_dtype dtype,
                                                 const blob_conv_geometry *g, int64_t out_h,
                                                 int64_t out_w, int64_t num, const void *dy,
                                                 void *dx)
{
    const int64_t n_x = image_count(g, num), n_y = pooled_count(g, out_h, out_w, num);
    return DISPATCH(dtype, fits32(g, n_x, n_y), pool_backward_launch, __func__, stream, g,
                    out_h, out_w, n_x, dy, (const int32_t *)NULL, dx);
}
