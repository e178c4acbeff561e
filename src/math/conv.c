/* blob/conv.h, convolution and pooling: the geometry checks shared by both sides, the host
 * loops (conv_loops.h, once per element type), and the GPU side handing validated
 * arguments to the launchers of src/kernels/. */
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "blob/device.h"
#include "blob/conv.h"
#include "../core/core.h"
#include "../kernels/kernels.h"
#include "math_impl.h"

/* ---- Geometry ---- */

/* The output length of one axis, or a failure recorded under fn. */
static blob_status axis_output(const char *fn, const char *axis, int64_t in, int64_t kernel,
                               int64_t pad, int64_t stride, int64_t dilation,
                               blob_rounding rounding, int64_t *out)
{
    if (kernel - 1 > (INT64_MAX - 1) / dilation || pad > (INT64_MAX - in) / 2)
        return blob__fail(BLOB_EOVERFLOW, fn,
                          "%s: kernel %lld, dilation %lld, input %lld, pad %lld overflow", axis,
                          (long long)kernel, (long long)dilation, (long long)in, (long long)pad);
    const int64_t extent = dilation * (kernel - 1) + 1, padded = in + 2 * pad;
    if (extent > padded)
        return blob__fail(BLOB_ESHAPE, fn,
                          "%s: kernel extent %lld exceeds the padded input %lld (%lld + 2 x %lld)",
                          axis, (long long)extent, (long long)padded, (long long)in,
                          (long long)pad);
    const int64_t span = padded - extent;
    int64_t n = span / stride + 1;
    /* ceil: one more window for a partial remainder; then, as PyTorch, none may start at
     * or past in + pad: (n - 1) * stride >= in + pad, written so as not to overflow
     * (in + pad >= 1 since padded >= extent >= 1) */
    if (rounding == BLOB_ROUND_CEIL) {
        n += span % stride != 0;
        n -= n - 1 > (in + pad - 1) / stride;
    }
    *out = n;
    return BLOB_OK;
}

/* g is a valid geometry (of a pooling window if pool); its output plane into oh x ow. */
static blob_status check_geometry(const char *fn, const blob_conv_geometry *g, bool pool,
                                  int64_t *oh, int64_t *ow)
{
    if (!g)
        return blob__fail(BLOB_EINVAL, fn, "geometry is NULL");
    if (g->channels < 0 || g->height < 0 || g->width < 0)
        return blob__fail(BLOB_EINVAL, fn, "negative input size %lld x %lld x %lld",
                          (long long)g->channels, (long long)g->height, (long long)g->width);
    if (g->kernel_h < 1 || g->kernel_w < 1 || g->stride_h < 1 || g->stride_w < 1 ||
        g->dilation_h < 1 || g->dilation_w < 1)
        return blob__fail(BLOB_EINVAL, fn,
                          "kernel %lld x %lld, stride %lld x %lld, dilation %lld x %lld: each "
                          "must be at least 1",
                          (long long)g->kernel_h, (long long)g->kernel_w, (long long)g->stride_h,
                          (long long)g->stride_w, (long long)g->dilation_h,
                          (long long)g->dilation_w);
    if (g->pad_h < 0 || g->pad_w < 0)
        return blob__fail(BLOB_EINVAL, fn, "negative pad %lld x %lld", (long long)g->pad_h,
                          (long long)g->pad_w);
    if (g->rounding != BLOB_ROUND_FLOOR && g->rounding != BLOB_ROUND_CEIL)
        return blob__fail(BLOB_EINVAL, fn, "bad rounding %d", (int)g->rounding);
    if (pool && (g->dilation_h != 1 || g->dilation_w != 1))
        return blob__fail(BLOB_EINVAL, fn, "pooling takes dilation 1, not %lld x %lld",
                          (long long)g->dilation_h, (long long)g->dilation_w);
    if (pool && (g->pad_h >= g->kernel_h || g->pad_w >= g->kernel_w))
        return blob__fail(BLOB_EINVAL, fn,
                          "pooling pad %lld x %lld must be below the kernel "
                          "%lld x %lld",
                          (long long)g->pad_h, (long long)g->pad_w, (long long)g->kernel_h,
                          (long long)g->kernel_w);
    if (pool && (g->height == 0 || g->width == 0))
        return blob__fail(BLOB_ESHAPE, fn, "pooling over an empty %lld x %lld plane",
                          (long long)g->height, (long long)g->width);
    int64_t h, w;
    BLOB_TRY(axis_output(fn, "height", g->height, g->kernel_h, g->pad_h, g->stride_h, g->dilation_h,
                         g->rounding, &h));
    BLOB_TRY(axis_output(fn, "width", g->width, g->kernel_w, g->pad_w, g->stride_w, g->dilation_w,
                         g->rounding, &w));
    *oh = h;
    *ow = w;
    return BLOB_OK;
}

static blob_status output_size(const char *fn, const blob_conv_geometry *g, bool pool,
                               int64_t *out_h, int64_t *out_w)
{
    if (!out_h || !out_w)
        return blob__fail(BLOB_EINVAL, fn, "%s is NULL", out_h ? "out_w" : "out_h");
    return check_geometry(fn, g, pool, out_h, out_w);
}

blob_status blob_conv_output_size(const blob_conv_geometry *g, int64_t *out_h, int64_t *out_w)
{
    return output_size(__func__, g, false, out_h, out_w);
}

blob_status blob_pool_output_size(const blob_conv_geometry *g, int64_t *out_h, int64_t *out_w)
{
    return output_size(__func__, g, true, out_h, out_w);
}

/* ---- Argument checks of the array functions ---- */

typedef enum { OP_CONV, OP_POOL, OP_MAX_POOL } op_kind;

/* a * b * c * d elements of elem bytes each are addressable. */
static bool product(int64_t a, int64_t b, int64_t c, int64_t d, size_t elem, int64_t *out)
{
    int64_t ab, abc, abcd;
    if (__builtin_mul_overflow(a, b, &ab) || __builtin_mul_overflow(ab, c, &abc) ||
        __builtin_mul_overflow(abc, d, &abcd) || abcd > (int64_t)(PTRDIFF_MAX / elem))
        return false;
    *out = abcd;
    return true;
}

/* An array of count elements may be NULL only when empty. */
static blob_status check_array(const char *fn, const char *name, const void *p, int64_t count)
{
    if (!p && count > 0)
        return blob__fail(BLOB_EINVAL, fn, "%s is NULL with %lld elements", name, (long long)count);
    return BLOB_OK;
}

/* The arrays of a call: those of the image side (x, im, dx) and the other side (y, col,
 * dy), named for messages, and for max pooling argmax, as large as the other side. */
typedef struct {
    const char *image_name;
    const void *image;
    const char *other_name;
    const void *other;
    const int32_t *argmax;
} call_arrays;

/* A valid call of fn on the host or (gpu) the GPU: its dtype, geometry and sizes (into *c),
 * its arrays a, and on the GPU side a GPU. */
static blob_status check_call(const char *fn, bool gpu, blob_dtype dtype,
                              const blob_conv_geometry *g, op_kind op, int64_t num, call_arrays a,
                              blob__conv_call *c)
{
    BLOB_TRY(blob__check_dtype(fn, dtype));
    const size_t elem = blob_dtype_size(dtype);
    if (num < 0)
        return blob__fail(BLOB_EINVAL, fn, "negative num = %lld", (long long)num);
    c->g = g;
    c->num = num;
    BLOB_TRY(check_geometry(fn, g, op != OP_CONV, &c->oh, &c->ow));
    int64_t taps = 1;
    if (!product(num, g->channels, g->height, g->width, elem, &c->n_image) ||
        (op == OP_CONV && !product(g->channels, g->kernel_h, g->kernel_w, 1, elem, &taps)) ||
        !product(num, op == OP_CONV ? taps : g->channels, c->oh, c->ow, elem, &c->n_other))
        return blob__fail(BLOB_EOVERFLOW, fn,
                          "%lld images of %lld x %lld x %lld (out %lld x %lld, kernel %lld x "
                          "%lld) overflow",
                          (long long)num, (long long)g->channels, (long long)g->height,
                          (long long)g->width, (long long)c->oh, (long long)c->ow,
                          (long long)g->kernel_h, (long long)g->kernel_w);
    if (op == OP_MAX_POOL && g->height > INT32_MAX / g->width)
        return blob__fail(BLOB_EOVERFLOW, fn,
                          "a %lld x %lld plane has more cells than argmax's int32 can index",
                          (long long)g->height, (long long)g->width);
    BLOB_TRY(check_array(fn, a.image_name, a.image, c->n_image));
    BLOB_TRY(check_array(fn, a.other_name, a.other, c->n_other));
    if (op == OP_MAX_POOL)
        BLOB_TRY(check_array(fn, "argmax", a.argmax, c->n_other));
    return gpu ? blob__require_gpu(fn) : BLOB_OK;
}

/* ---- Host loops ---- */

/* The output columns [*x0, *x1) of ow whose cell x * stride_w + off lies in [0, width). */
static void valid_columns(const blob_conv_geometry *g, int64_t off, int64_t ow, int64_t *x0,
                          int64_t *x1)
{
    const int64_t s = g->stride_w, lo = off >= 0 ? 0 : (-off - 1) / s + 1;
    const int64_t hi = g->width - off <= 0 ? 0 : (g->width - off - 1) / s + 1;
    *x0 = lo < ow ? lo : ow;
    *x1 = hi < *x0 ? *x0 : hi < ow ? hi : ow;
}

/* A pooling window clipped to the plane, and its divisor for averaging: its size clipped
 * to the padded plane (Caffe). */
typedef struct {
    int64_t h0, h1, w0, w1, divisor;
} window;

static inline window pool_window(const blob_conv_geometry *g, int64_t py, int64_t px)
{
    int64_t h0 = py * g->stride_h - g->pad_h, w0 = px * g->stride_w - g->pad_w;
    int64_t h1 = h0 + g->kernel_h, w1 = w0 + g->kernel_w;
    h1 = h1 < g->height + g->pad_h ? h1 : g->height + g->pad_h;
    w1 = w1 < g->width + g->pad_w ? w1 : g->width + g->pad_w;
    window w = {h0 > 0 ? h0 : 0, h1 < g->height ? h1 : g->height, w0 > 0 ? w0 : 0,
                w1 < g->width ? w1 : g->width, (h1 - h0) * (w1 - w0)};
    return w;
}

/* Whether v replaces the running maximum m: larger, or the first NaN (bitwise operators:
 * no short-circuit branches). */
#define MAX_BEATS(v, m) (((v) > (m)) | (((v) != (v)) & ((m) == (m))))

#define T       float
#define U       uint32_t
#define NAME(f) f##_f32
#include "conv_loops.h"
#undef T
#undef U
#undef NAME
#define T       double
#define U       uint64_t
#define NAME(f) f##_f64
#include "conv_loops.h"
#undef T
#undef U
#undef NAME

/* Call the float or double instance of a host loop, by dtype. */
#define HOST(dtype, f, ...) ((dtype) == BLOB_FLOAT32 ? f##_f32(__VA_ARGS__) : f##_f64(__VA_ARGS__))

/* ---- The public functions, host and GPU side by side ---- */

blob_status blob_cpu_im2col(blob_dtype dtype, const blob_conv_geometry *g, int64_t num,
                            const void *im, void *col)
{
    blob__conv_call c;
    BLOB_TRY(check_call(__func__, false, dtype, g, OP_CONV, num,
                        (call_arrays){"im", im, "col", col, NULL}, &c));
    if (c.n_other)
        HOST(dtype, im2col, g, c.oh, c.ow, num, im, col);
    return BLOB_OK;
}

blob_status blob_gpu_im2col(blob_dtype dtype, const blob_conv_geometry *g, int64_t num,
                            const void *im, void *col)
{
    blob__conv_call c;
    BLOB_TRY(check_call(__func__, true, dtype, g, OP_CONV, num,
                        (call_arrays){"im", im, "col", col, NULL}, &c));
    return c.n_other ? blob__k_im2col(blob_stream_get(), dtype, &c, im, col) : BLOB_OK;
}

blob_status blob_cpu_col2im(blob_dtype dtype, const blob_conv_geometry *g, int64_t num,
                            const void *col, void *im)
{
    blob__conv_call c;
    BLOB_TRY(check_call(__func__, false, dtype, g, OP_CONV, num,
                        (call_arrays){"im", im, "col", col, NULL}, &c));
    if (c.n_image)
        HOST(dtype, col2im, g, c.oh, c.ow, num, col, im);
    return BLOB_OK;
}

blob_status blob_gpu_col2im(blob_dtype dtype, const blob_conv_geometry *g, int64_t num,
                            const void *col, void *im)
{
    blob__conv_call c;
    BLOB_TRY(check_call(__func__, true, dtype, g, OP_CONV, num,
                        (call_arrays){"im", im, "col", col, NULL}, &c));
    return c.n_image ? blob__k_col2im(blob_stream_get(), dtype, &c, col, im) : BLOB_OK;
}

blob_status blob_cpu_max_pool_forward(blob_dtype dtype, const blob_conv_geometry *g, int64_t num,
                                      const void *x, void *y, int32_t *argmax)
{
    blob__conv_call c;
    BLOB_TRY(check_call(__func__, false, dtype, g, OP_MAX_POOL, num,
                        (call_arrays){"x", x, "y", y, argmax}, &c));
    if (c.n_other)
        HOST(dtype, max_pool_forward, g, c.oh, c.ow, num, x, y, argmax);
    return BLOB_OK;
}

blob_status blob_gpu_max_pool_forward(blob_dtype dtype, const blob_conv_geometry *g, int64_t num,
                                      const void *x, void *y, int32_t *argmax)
{
    blob__conv_call c;
    BLOB_TRY(check_call(__func__, true, dtype, g, OP_MAX_POOL, num,
                        (call_arrays){"x", x, "y", y, argmax}, &c));
    if (!c.n_other)
        return BLOB_OK;
    return blob__k_max_pool_forward(blob_stream_get(), dtype, &c, x, y, argmax);
}

blob_status blob_cpu_max_pool_backward(blob_dtype dtype, const blob_conv_geometry *g, int64_t num,
                                       const void *dy, const int32_t *argmax, void *dx)
{
    blob__conv_call c;
    BLOB_TRY(check_call(__func__, false, dtype, g, OP_MAX_POOL, num,
                        (call_arrays){"dx", dx, "dy", dy, argmax}, &c));
    if (c.n_image)
        HOST(dtype, pool_backward, g, c.oh, c.ow, num, dy, argmax, dx);
    return BLOB_OK;
}

blob_status blob_gpu_max_pool_backward(blob_dtype dtype, const blob_conv_geometry *g, int64_t num,
                                       const void *dy, const int32_t *argmax, void *dx)
{
    blob__conv_call c;
    BLOB_TRY(check_call(__func__, true, dtype, g, OP_MAX_POOL, num,
                        (call_arrays){"dx", dx, "dy", dy, argmax}, &c));
    if (!c.n_image)
        return BLOB_OK;
    return blob__k_max_pool_backward(blob_stream_get(), dtype, &c, dy, argmax, dx);
}

blob_status blob_cpu_avg_pool_forward(blob_dtype dtype, const blob_conv_geometry *g, int64_t num,
                                      const void *x, void *y)
{
    blob__conv_call c;
    BLOB_TRY(check_call(__func__, false, dtype, g, OP_POOL, num,
                        (call_arrays){"x", x, "y", y, NULL}, &c));
    if (c.n_other)
        HOST(dtype, avg_pool_forward, g, c.oh, c.ow, num, x, y);
    return BLOB_OK;
}

blob_status blob_gpu_avg_pool_forward(blob_dtype dtype, const blob_conv_geometry *g, int64_t num,
                                      const void *x, void *y)
{
    blob__conv_call c;
    BLOB_TRY(check_call(__func__, true, dtype, g, OP_POOL, num, (call_arrays){"x", x, "y", y, NULL},
                        &c));
    return c.n_other ? blob__k_avg_pool_forward(blob_stream_get(), dtype, &c, x, y) : BLOB_OK;
}

blob_status blob_cpu_avg_pool_backward(blob_dtype dtype, const blob_conv_geometry *g, int64_t num,
                                       const void *dy, void *dx)
{
    blob__conv_call c;
    BLOB_TRY(check_call(__func__, false, dtype, g, OP_POOL, num,
                        (call_arrays){"dx", dx, "dy", dy, NULL}, &c));
    if (c.n_image)
        HOST(dtype, pool_backward, g, c.oh, c.ow, num, dy, NULL, dx);
    return BLOB_OK;
}

blob_status blob_gpu_avg_pool_backward(blob_dtype dtype, const blob_conv_geometry *g, int64_t num,
                                       const void *dy, void *dx)
{
    blob__conv_call c;
    BLOB_TRY(check_call(__func__, true, dtype, g, OP_POOL, num,
                        (call_arrays){"dx", dx, "dy", dy, NULL}, &c));
    return c.n_image ? blob__k_avg_pool_backward(blob_stream_get(), dtype, &c, dy, dx) : BLOB_OK;
}
