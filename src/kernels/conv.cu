/* Convolution and pooling over NCHW batches: im2col, col2im (gathered per image cell),
 * max and average pooling forward and backward (the backward passes gathered per input
 * cell over the windows that hold it: deterministic, no atomics). Every kernel comes in
 * a 32-bit index instance, used when all its indices fit, and a 64-bit one, for each
 * float dtype; the 16-bit floats are compared and summed in float32 (half.cuh) and
 * rounded once on store, in the host's order, so both sides give the same bits. */
#include <stdint.h>

#include <type_traits>

#include "common.cuh"
#include "half.cuh"

/* n / d for 0 <= n and 1 <= d in the index type I: the hardware division for 64-bit
 * indices; for 32-bit ones (n < 2^31) a multiply-high, an add and a shift with a magic
 * number made on the host (Granlund and Montgomery), as index arithmetic dominates the
 * kernels below once their memory traffic is coalesced. */
template <typename I>
struct Div {
    I d;
    __device__ I operator()(I n) const { return n / d; }
};

template <>
struct Div<int32_t> {
    uint32_t magic, shift;
    __device__ int32_t operator()(int32_t n) const
    {
        return (int32_t)((__umulhi((uint32_t)n, magic) + (uint32_t)n) >> shift);
    }
};

template <typename I>
static Div<I> divider(int64_t d)
{
    return {(I)d};
}

template <>
Div<int32_t> divider<int32_t>(int64_t d)
{
    uint32_t shift = 0;
    while (((int64_t)1 << shift) < d)
        shift++;
    /* 2^32 (2^shift - d) / d + 1 < 2^32 since 2^shift < 2d */
    const uint64_t magic =
        ((uint64_t)1 << 32) * (((uint64_t)1 << shift) - (uint64_t)d) / (uint64_t)d + 1;
    return {(uint32_t)magic, shift};
}

/* A validated geometry, its output plane and dividers by its sizes, in the index type I. */
template <typename I>
struct Geo {
    I channels, height, width, kh, kw, ph, pw, sh, sw, dh, dw, oh, ow;
    Div<I> by_channels, by_height, by_width, by_sh, by_sw, by_dh, by_dw, by_oh, by_ow, by_plane_out;
};

/* An axis with one window never uses its stride, nor one with a kernel of 1 its
 * dilation, and either may be huge: 1 keeps them small. Empty sizes get dividers by 1,
 * never used. */
template <typename I>
static Geo<I> geo(const blob_conv_geometry *g, int64_t oh, int64_t ow)
{
    const int64_t sh = oh > 1 ? g->stride_h : 1, sw = ow > 1 ? g->stride_w : 1;
    const int64_t dh = g->kernel_h > 1 ? g->dilation_h : 1;
    const int64_t dw = g->kernel_w > 1 ? g->dilation_w : 1;
    const int64_t c = g->channels > 0 ? g->channels : 1, h = g->height > 0 ? g->height : 1;
    const int64_t w = g->width > 0 ? g->width : 1;
    return {(I)g->channels,
            (I)g->height,
            (I)g->width,
            (I)g->kernel_h,
            (I)g->kernel_w,
            (I)g->pad_h,
            (I)g->pad_w,
            (I)sh,
            (I)sw,
            (I)dh,
            (I)dw,
            (I)oh,
            (I)ow,
            divider<I>(c),
            divider<I>(h),
            divider<I>(w),
            divider<I>(sh),
            divider<I>(sw),
            divider<I>(dh),
            divider<I>(dw),
            divider<I>(oh),
            divider<I>(ow),
            divider<I>(oh * ow)};
}

/* 0 <= i < n, in one comparison. */
template <typename I>
static __device__ bool inside(I i, I n)
{
    using U = typename std::make_unsigned<I>::type;
    return (U)i < (U)n;
}

/* Whether 32-bit indices suffice for a call: the arrays of both sides, and sums of a
 * padded axis with a window offset (each below twice the padded axis). */
static bool fits32(const blob__conv_call *c)
{
    const int64_t lim = INT32_MAX / 2;
    return c->n_image < INT32_MAX && c->n_other < INT32_MAX &&
           c->g->height + 2 * c->g->pad_h < lim && c->g->width + 2 * c->g->pad_w < lim;
}

/* Call launch<T, I>(args...) with T by dtype and I by fits. */
#define BY_INDEX(T, fits, launch, ...) \
    ((fits) ? launch<T, int32_t>(__VA_ARGS__) : launch<T, int64_t>(__VA_ARGS__))
#define DISPATCH(dtype, fits, launch, ...)                                           \
    ((dtype) == BLOB_FLOAT32    ? BY_INDEX(float, fits, launch, __VA_ARGS__)         \
     : (dtype) == BLOB_FLOAT64  ? BY_INDEX(double, fits, launch, __VA_ARGS__)        \
     : (dtype) == BLOB_BFLOAT16 ? BY_INDEX(__nv_bfloat16, fits, launch, __VA_ARGS__) \
                                : BY_INDEX(__half, fits, launch, __VA_ARGS__))

/* A value computed in wide_t<T> stored as T: as it is for float32 and float64, rounded
 * once to nearest even (narrow) for the 16-bit floats. */
template <typename T>
static __device__ T store(wide_t<T> v)
{
    if constexpr (std::is_same<T, wide_t<T>>::value)
        return v;
    else
        return narrow<T>(v);
}

/* ---- im2col and col2im ---- */

/* V elements of T stored at once: 16 bytes as a uint4, or (V = 1) T itself. */
template <typename T, int V>
using VecOf = typename std::conditional<V * sizeof(T) == 16, uint4, T>::type;

/* One thread per V consecutive columns and a channel c writes the kernel_h * kernel_w
 * rows of c at those columns, one V-wide store per row: consecutive threads write
 * consecutive columns, and read neighbouring image cells, which the caches serve for
 * the overlapping windows. cols is a multiple of V and each row V-aligned. */
template <typename T, typename I, int V>
static __global__ void im2col_kernel(Geo<I> g, I cols, const T *__restrict__ im,
                                     T *__restrict__ col)
{
    using Vec = VecOf<T, V>;
    const I plane = g.height * g.width, taps = g.kh * g.kw, plane_out = g.oh * g.ow;
    for (I c = blockIdx.y; c < g.channels; c += gridDim.y)
        GRID_LOOP(v64, cols / V)
        {
            const I q = (I)v64 * V;
            I n = g.by_plane_out(q), p = q - n * plane_out, y = g.by_ow(p), x = p - y * g.ow;
            const T *src[V];
            I h0[V], w0[V];
#pragma unroll
            for (int e = 0; e < V; e++) { /* the window of column q + e */
                src[e] = im + (n * g.channels + c) * plane;
                h0[e] = y * g.sh - g.ph;
                w0[e] = x * g.sw - g.pw;
                if (++x == g.ow) {
                    x = 0;
                    if (++y == g.oh) {
                        y = 0;
                        n++;
                    }
                }
            }
            T *dst = col + c * taps * cols + q;
            for (I i = 0; i < g.kh; i++)
                for (I j = 0; j < g.kw; j++, dst += cols) {
                    Vec out;
                    T *o = reinterpret_cast<T *>(&out);
#pragma unroll
                    for (int e = 0; e < V; e++) {
                        const I h = h0[e] + i * g.dh, w = w0[e] + j * g.dw;
                        o[e] = inside(h, g.height) && inside(w, g.width) ? src[e][h * g.width + w]
                                                                         : T(0.0f);
                    }
                    *reinterpret_cast<Vec *>(dst) = out;
                }
        }
}

template <typename T, typename I, int V>
static void im2col_queue(const dim3 &grid, cudaStream_t stream, const Geo<I> &d, I cols,
                         const void *im, void *col)
{
    im2col_kernel<T, I, V><<<grid, THREADS, 0, stream>>>(d, cols, (const T *)im, (T *)col);
}

template <typename T, typename I>
static blob_status im2col_launch(const char *func, void *stream, const blob__conv_call *c,
                                 const void *im, void *col)
{
    constexpr int V = 16 / sizeof(T);
    const int64_t cols = c->num * c->oh * c->ow;
    const bool wide = cols % V == 0 && (uintptr_t)col % 16 == 0;
    const dim3 grid(grid_for(wide ? cols / V : cols, THREADS),
                    (unsigned)(c->g->channels < 65535 ? c->g->channels : 65535));
    const Geo<I> d = geo<I>(c->g, c->oh, c->ow);
    if (wide)
        im2col_queue<T, I, V>(grid, (cudaStream_t)stream, d, (I)cols, im, col);
    else
        im2col_queue<T, I, 1>(grid, (cudaStream_t)stream, d, (I)cols, im, col);
    return launch_check("im2col_kernel", func);
}

extern "C" blob_status blob__k_im2col(void *stream, blob_dtype dtype, const blob__conv_call *c,
                                      const void *im, void *col)
{
    return DISPATCH(dtype, fits32(c), im2col_launch, __func__, stream, c, im, col);
}

/* Visit the cells of rows [r0, r1) x columns [c0, c1) in row-major order, N at a time:
 * the N loads of a chunk, load(r, c, &keep), are all issued before use(value, r, c) runs
 * on the kept ones, in order; so N memory accesses of a thread are in flight together,
 * where a plain loop would wait for each. */
template <int N, typename T, typename I, typename Load, typename Use>
static __device__ void gather(I r0, I r1, I c0, I c1, Load load, Use use)
{
    const I width = c1 - c0;
    I left = r1 > r0 && width > 0 ? (r1 - r0) * width : 0, r = r0, c = c0;
    for (; left > 0; left -= N) {
        T v[N];
        I rs[N], cs[N];
        bool keep[N];
#pragma unroll
        for (int e = 0; e < N; e++) {
            keep[e] = e < left;
            rs[e] = r;
            cs[e] = c;
            v[e] = keep[e] ? load(r, c, &keep[e]) : T(0.0f);
            if (++c == c1) {
                c = c0;
                r++;
            }
        }
#pragma unroll
        for (int e = 0; e < N; e++)
            if (keep[e])
                use(v[e], rs[e], cs[e]);
    }
}

/* The windows [lo, hi) of an axis with `out` windows that reach padded cell p (cell +
 * pad), for a kernel of extent `extent`. */
template <typename I>
static __device__ void covering(I p, I extent, const Div<I> &by_stride, I out, I *lo, I *hi)
{
    *lo = p < extent ? 0 : by_stride(p - extent) + 1;
    const I h = by_stride(p) + 1;
    *hi = h < out ? h : out;
}

/* Image cell t as (plane, h, w) of its batch. */
template <typename I>
static __device__ void split_cell(const Geo<I> &g, I t, I *plane, I *h, I *w)
{
    const I r = g.by_width(t);
    *w = t - r * g.width;
    *plane = g.by_height(r);
    *h = r - *plane * g.height;
}

/* One thread per image cell sums the column entries copied from it (in wide_t<T>), 9 loads
 * at a time (a 3x3 kernel's). Windows come in ascending order, so taps in descending
 * order, the host's order. */
template <typename T, typename I, bool Dilated>
static __global__ void col2im_kernel(Geo<I> g, I cols, I count, const T *__restrict__ col,
                                     T *__restrict__ im)
{
    const I plane_out = g.oh * g.ow, ext_h = (g.kh - 1) * g.dh + 1, ext_w = (g.kw - 1) * g.dw + 1;
    GRID_LOOP(t64, count)
    {
        const I t = (I)t64;
        I nc, h, w;
        split_cell(g, t, &nc, &h, &w);
        const I n = g.by_channels(nc), c = nc - n * g.channels, hp = h + g.ph, wp = w + g.pw;
        I y0, y1, x0, x1;
        covering(hp, ext_h, g.by_sh, g.oh, &y0, &y1);
        covering(wp, ext_w, g.by_sw, g.ow, &x0, &x1);
        const T *src = col + c * g.kh * g.kw * cols + n * plane_out;
        wide_t<T> sum = 0;
        gather<9, T>(
            y0, y1, x0, x1,
            [&](I y, I x, bool *keep) {
                I i = hp - y * g.sh, j = wp - x * g.sw;
                if (Dilated) {
                    const I ki = g.by_dh(i), kj = g.by_dw(j);
                    *keep = ki * g.dh == i && kj * g.dw == j;
                    i = *keep ? ki : 0;
                    j = *keep ? kj : 0;
                }
                return src[(i * g.kw + j) * cols + y * g.ow + x];
            },
            [&](T v, I, I) { sum += wide(v); });
        im[t] = store<T>(sum);
    }
}

template <typename T, typename I>
static blob_status col2im_launch(const char *func, void *stream, const blob__conv_call *c,
                                 const void *col, void *im)
{
    const int64_t count = c->n_image;
    const Geo<I> d = geo<I>(c->g, c->oh, c->ow);
    const I cols = (I)(c->num * c->oh * c->ow);
    if (c->g->dilation_h == 1 && c->g->dilation_w == 1)
        col2im_kernel<T, I, false><<<grid_for(count, THREADS), THREADS, 0, (cudaStream_t)stream>>>(
            d, cols, (I)count, (const T *)col, (T *)im);
    else
        col2im_kernel<T, I, true><<<grid_for(count, THREADS), THREADS, 0, (cudaStream_t)stream>>>(
            d, cols, (I)count, (const T *)col, (T *)im);
    return launch_check("col2im_kernel", func);
}

extern "C" blob_status blob__k_col2im(void *stream, blob_dtype dtype, const blob__conv_call *c,
                                      const void *col, void *im)
{
    return DISPATCH(dtype, fits32(c), col2im_launch, __func__, stream, c, col, im);
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
    const I r = g.by_ow(t);
    *px = t - r * g.ow;
    *plane = g.by_oh(r);
    *py = r - *plane * g.oh;
}

/* Whether v replaces the running maximum m: larger, or the first NaN. */
template <typename T>
static __device__ bool max_beats(T v, T m)
{
    return v > m || (v != v && m == m);
}

/* Forward: one thread per output t meets its window's cells in row-major order, 4 at a
 * time: the maximum and its cell (the first maximum, or the first NaN), or (!Max) the
 * average, both in wide_t<T>. */
template <typename T, typename I, bool Max>
static __global__ void pool_forward_kernel(Geo<I> g, I count, const T *__restrict__ x,
                                           T *__restrict__ y, int32_t *__restrict__ argmax)
{
    GRID_LOOP(t64, count)
    {
        const I t = (I)t64;
        I p, py, px;
        split_out(g, t, &p, &py, &px);
        const Window<I> w = pool_window(g, py, px);
        const T *src = x + p * g.height * g.width;
        using W = wide_t<T>;
        W m = 0, sum = 0;
        I best = 0;
        bool first = true;
        gather<4, T>(
            w.h0, w.h1, w.w0, w.w1, [&](I h, I v, bool *) { return src[h * g.width + v]; },
            [&](T value, I h, I v) {
                const W e = wide(value);
                if (!Max) {
                    sum += e;
                } else if (first || max_beats(e, m)) {
                    m = e;
                    best = h * g.width + v;
                    first = false;
                }
            });
        if (Max) {
            y[t] = store<T>(m);
            argmax[t] = (int32_t)best;
        } else {
            y[t] = store<T>(sum / W(w.divisor));
        }
    }
}

/* Backward: one thread per input cell t sums (in wide_t<T>) over the windows that hold
 * it, in order; for max pooling those whose argmax names it. */
template <typename T, typename I, bool Max>
static __global__ void pool_backward_kernel(Geo<I> g, I count, const T *__restrict__ dy,
                                            const int32_t *__restrict__ argmax, T *__restrict__ dx)
{
    GRID_LOOP(t64, count)
    {
        const I t = (I)t64;
        I plane, h, w;
        split_cell(g, t, &plane, &h, &w);
        const I off = plane * g.oh * g.ow, cell = h * g.width + w;
        I y0, y1, x0, x1;
        covering(h + g.ph, g.kh, g.by_sh, g.oh, &y0, &y1);
        covering(w + g.pw, g.kw, g.by_sw, g.ow, &x0, &x1);
        using W = wide_t<T>;
        W sum = 0;
        gather<4, W>(
            y0, y1, x0, x1,
            [&](I py, I px, bool *keep) {
                const I o = off + py * g.ow + px;
                if (Max) {
                    *keep = argmax[o] == cell;
                    return wide(dy[o]);
                }
                return wide(dy[o]) / W(pool_window(g, py, px).divisor);
            },
            [&](W v, I, I) { sum += v; });
        dx[t] = store<T>(sum);
    }
}

/* Backward where windows do not overlap (stride >= kernel on both axes): a cell lies in
 * one window at most, found without a loop; each thread takes U cells, a block's width
 * apart, so that their loads are in flight together. */
template <typename T, typename I, bool Max, int U>
static __global__ void pool_backward_disjoint_kernel(Geo<I> g, I count, const T *__restrict__ dy,
                                                     const int32_t *__restrict__ argmax,
                                                     T *__restrict__ dx)
{
    using W = wide_t<T>;
    const int64_t span = (int64_t)blockDim.x * U;
    for (int64_t base = blockIdx.x * span + threadIdx.x; base < count; base += gridDim.x * span) {
        T out[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t t64 = base + u * blockDim.x;
            const I t = (I)(t64 < count ? t64 : 0); /* past the end: any cell, unused */
            I plane, h, w;
            split_cell(g, t, &plane, &h, &w);
            const I hp = h + g.ph, wp = w + g.pw, py = g.by_sh(hp), px = g.by_sw(wp);
            const I o = plane * g.oh * g.ow + py * g.ow + px;
            const bool held = t64 < count && py < g.oh && px < g.ow && hp - py * g.sh < g.kh &&
                              wp - px * g.sw < g.kw;
            const W d = held ? wide(dy[o]) : W(0); /* loaded beside argmax, not after it */
            if (Max)
                out[u] = store<T>(held && argmax[o] == h * g.width + w ? d : W(0));
            else
                out[u] = store<T>(held ? d / W(pool_window(g, py, px).divisor) : W(0));
        }
#pragma unroll
        for (int u = 0; u < U; u++)
            if (base + u * blockDim.x < count)
                dx[base + u * blockDim.x] = out[u];
    }
}

/* argmax NULL: average pooling. */
template <typename T, typename I>
static blob_status pool_forward_launch(const char *func, void *stream, const blob__conv_call *c,
                                       const void *x, void *y, int32_t *argmax)
{
    const int64_t count = c->n_other;
    const Geo<I> d = geo<I>(c->g, c->oh, c->ow);
    const unsigned blocks = grid_for(count, THREADS);
    const cudaStream_t s = (cudaStream_t)stream;
    if (argmax)
        pool_forward_kernel<T, I, true>
            <<<blocks, THREADS, 0, s>>>(d, (I)count, (const T *)x, (T *)y, argmax);
    else
        pool_forward_kernel<T, I, false>
            <<<blocks, THREADS, 0, s>>>(d, (I)count, (const T *)x, (T *)y, argmax);
    return launch_check("pool_forward_kernel", func);
}

/* argmax NULL: average pooling. */
template <typename T, typename I>
static blob_status pool_backward_launch(const char *func, void *stream, const blob__conv_call *c,
                                        const void *dy, const int32_t *argmax, void *dx)
{
    constexpr int U = 4;
    const blob_conv_geometry *g = c->g;
    const int64_t count = c->n_image;
    const Geo<I> d = geo<I>(g, c->oh, c->ow);
    const cudaStream_t s = (cudaStream_t)stream;
    const bool disjoint = g->stride_h >= g->kernel_h && g->stride_w >= g->kernel_w;
    const unsigned blocks = grid_for(count, disjoint ? THREADS * U : THREADS);
    const T *pdy = (const T *)dy;
    if (disjoint && argmax)
        pool_backward_disjoint_kernel<T, I, true, U>
            <<<blocks, THREADS, 0, s>>>(d, (I)count, pdy, argmax, (T *)dx);
    else if (disjoint)
        pool_backward_disjoint_kernel<T, I, false, U>
            <<<blocks, THREADS, 0, s>>>(d, (I)count, pdy, argmax, (T *)dx);
    else if (argmax)
        pool_backward_kernel<T, I, true>
            <<<blocks, THREADS, 0, s>>>(d, (I)count, pdy, argmax, (T *)dx);
    else
        pool_backward_kernel<T, I, false>
            <<<blocks, THREADS, 0, s>>>(d, (I)count, pdy, argmax, (T *)dx);
    return launch_check("pool_backward_kernel", func);
}

extern "C" blob_status blob__k_max_pool_forward(void *stream, blob_dtype dtype,
                                                const blob__conv_call *c, const void *x, void *y,
                                                int32_t *argmax)
{
    return DISPATCH(dtype, fits32(c), pool_forward_launch, __func__, stream, c, x, y, argmax);
}

extern "C" blob_status blob__k_max_pool_backward(void *stream, blob_dtype dtype,
                                                 const blob__conv_call *c, const void *dy,
                                                 const int32_t *argmax, void *dx)
{
    return DISPATCH(dtype, fits32(c), pool_backward_launch, __func__, stream, c, dy, argmax, dx);
}

extern "C" blob_status blob__k_avg_pool_forward(void *stream, blob_dtype dtype,
                                                const blob__conv_call *c, const void *x, void *y)
{
    return DISPATCH(dtype, fits32(c), pool_forward_launch, __func__, stream, c, x, y,
                    (int32_t *)NULL);
}

extern "C" blob_status blob__k_avg_pool_backward(void *stream, blob_dtype dtype,
                                                 const blob__conv_call *c, const void *dy, void *dx)
{
    return DISPATCH(dtype, fits32(c), pool_backward_launch, __func__, stream, c, dy,
                    (const int32_t *)NULL, dx);
}
