/* blob/conv.h, convolution and pooling: the geometry checks shared by both sides, the host
 * loops (conv_loops.h, once for float32 and once for float64; the 16-bit floats run the
 * float32 loops on widened copies), and the GPU side handing validated arguments to the
 * launchers of src/kernels/. Every public function is one call of run, with its op. */
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "blob/blas.h"
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

/* The six array functions, and what each is: its kind, and the names of what it reads
 * and writes; image_out for those that write the image side (x, im, dx), the others
 * writing the other side (y, col, dy). */
typedef enum { IM2COL, COL2IM, MAX_FORWARD, MAX_BACKWARD, AVG_FORWARD, AVG_BACKWARD } conv_op;

static const struct {
    op_kind kind;
    const char *in, *out;
    bool image_out;
} ops[] = {
    [IM2COL] = {OP_CONV, "im", "col", false},
    [COL2IM] = {OP_CONV, "col", "im", true},
    [MAX_FORWARD] = {OP_MAX_POOL, "x", "y", false},
    [MAX_BACKWARD] = {OP_MAX_POOL, "dy", "dx", true},
    [AVG_FORWARD] = {OP_POOL, "x", "y", false},
    [AVG_BACKWARD] = {OP_POOL, "dy", "dx", true},
};

/* The arrays of a call: in and out as ops[] names them, and for max pooling argmax, as
 * large as the other side (argmax_out the same array, for max_pool_forward, which
 * writes it). */
typedef struct {
    const void *in;
    void *out;
    const int32_t *argmax;
    int32_t *argmax_out;
} conv_args;

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

/* A valid call of op as fn on the host or (gpu) the GPU: its dtype (a float dtype),
 * geometry and sizes (into *c), its arrays a (the image side's first), and on the GPU
 * side a GPU. */
static blob_status check_call(const char *fn, bool gpu, conv_op op, blob_dtype dtype,
                              const blob_conv_geometry *g, int64_t num, conv_args a,
                              blob__conv_call *c)
{
    BLOB_TRY(blob__check_float_dtype(fn, dtype));
    const size_t elem = blob_dtype_size(dtype);
    const op_kind kind = ops[op].kind;
    if (num < 0)
        return blob__fail(BLOB_EINVAL, fn, "negative num = %lld", (long long)num);
    c->g = g;
    c->num = num;
    BLOB_TRY(check_geometry(fn, g, kind != OP_CONV, &c->oh, &c->ow));
    int64_t taps = 1;
    if (!product(num, g->channels, g->height, g->width, elem, &c->n_image) ||
        (kind == OP_CONV && !product(g->channels, g->kernel_h, g->kernel_w, 1, elem, &taps)) ||
        !product(num, kind == OP_CONV ? taps : g->channels, c->oh, c->ow, elem, &c->n_other))
        return blob__fail(BLOB_EOVERFLOW, fn,
                          "%lld images of %lld x %lld x %lld (out %lld x %lld, kernel %lld x "
                          "%lld) overflow",
                          (long long)num, (long long)g->channels, (long long)g->height,
                          (long long)g->width, (long long)c->oh, (long long)c->ow,
                          (long long)g->kernel_h, (long long)g->kernel_w);
    if (kind == OP_MAX_POOL && g->height > INT32_MAX / g->width)
        return blob__fail(BLOB_EOVERFLOW, fn,
                          "a %lld x %lld plane has more cells than argmax's int32 can index",
                          (long long)g->height, (long long)g->width);
    const bool io = ops[op].image_out;
    BLOB_TRY(check_array(fn, io ? ops[op].out : ops[op].in, io ? a.out : a.in, c->n_image));
    BLOB_TRY(check_array(fn, io ? ops[op].in : ops[op].out, io ? a.in : a.out, c->n_other));
    if (kind == OP_MAX_POOL)
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

/* Call the float (f32) or double instance of a host loop. */
#define HOST(f32, f, ...) ((f32) ? f##_f32(__VA_ARGS__) : f##_f64(__VA_ARGS__))

/* op on the host in float32 (f32) or float64, for a checked call c. */
static void host_loop(conv_op op, bool f32, const blob__conv_call *c, conv_args a)
{
    const blob_conv_geometry *g = c->g;
    switch (op) {
    case IM2COL: HOST(f32, im2col, g, c->oh, c->ow, c->num, a.in, a.out); break;
    case COL2IM: HOST(f32, col2im, g, c->oh, c->ow, c->num, a.in, a.out); break;
    case MAX_FORWARD:
        HOST(f32, max_pool_forward, g, c->oh, c->ow, c->num, a.in, a.out, a.argmax_out);
        break;
    case MAX_BACKWARD:
        HOST(f32, pool_backward, g, c->oh, c->ow, c->num, a.in, a.argmax, a.out);
        break;
    case AVG_FORWARD: HOST(f32, avg_pool_forward, g, c->oh, c->ow, c->num, a.in, a.out); break;
    case AVG_BACKWARD: HOST(f32, pool_backward, g, c->oh, c->ow, c->num, a.in, NULL, a.out); break;
    }
}

/* op on the host in bfloat16 or float16: its input widened to float32, the float32 loop
 * (its sums in float32), its output rounded once to nearest even. Errors: BLOB_ENOMEM
 * (the float32 copies), before anything is written. */
static blob_status host_half(const char *fn, conv_op op, blob_dtype dtype, const blob__conv_call *c,
                             conv_args a)
{
    const int64_t n_in = ops[op].image_out ? c->n_other : c->n_image;
    const int64_t n_out = ops[op].image_out ? c->n_image : c->n_other;
    float *in = malloc((size_t)(n_in ? n_in : 1) * sizeof(float));
    float *out = malloc((size_t)n_out * sizeof(float));
    blob_status st = BLOB_OK;
    if (!in || !out)
        st = blob__fail(BLOB_ENOMEM, fn, "no host memory for %lld float32 elements",
                        (long long)(n_in + n_out));
    if (st == BLOB_OK)
        st = blob_cpu_convert(dtype, BLOB_FLOAT32, n_in, a.in, in);
    if (st == BLOB_OK) {
        host_loop(op, true, c, (conv_args){in, out, a.argmax, a.argmax_out});
        st = blob_cpu_convert(BLOB_FLOAT32, dtype, n_out, out, a.out);
    }
    free(in);
    free(out);
    return st;
}

/* op on the GPU, for a checked call c. */
static blob_status gpu_launch(conv_op op, blob_dtype dtype, const blob__conv_call *c, conv_args a)
{
    void *s = blob_stream_get();
    switch (op) {
    case IM2COL: return blob__k_im2col(s, dtype, c, a.in, a.out);
    case COL2IM: return blob__k_col2im(s, dtype, c, a.in, a.out);
    case MAX_FORWARD: return blob__k_max_pool_forward(s, dtype, c, a.in, a.out, a.argmax_out);
    case MAX_BACKWARD: return blob__k_max_pool_backward(s, dtype, c, a.in, a.argmax, a.out);
    case AVG_FORWARD: return blob__k_avg_pool_forward(s, dtype, c, a.in, a.out);
    case AVG_BACKWARD: break;
    }
    return blob__k_avg_pool_backward(s, dtype, c, a.in, a.out);
}

/* The public function fn: op checked, then run on its side unless its output is empty. */
static blob_status run(const char *fn, bool gpu, conv_op op, blob_dtype dtype,
                       const blob_conv_geometry *g, int64_t num, conv_args a)
{
    blob__conv_call c;
    BLOB_TRY(check_call(fn, gpu, op, dtype, g, num, a, &c));
    if (!(ops[op].image_out ? c.n_image : c.n_other))
        return BLOB_OK;
    if (gpu)
        return gpu_launch(op, dtype, &c, a);
    if (dtype == BLOB_BFLOAT16 || dtype == BLOB_FLOAT16)
        return host_half(fn, op, dtype, &c, a);
    host_loop(op, dtype == BLOB_FLOAT32, &c, a);
    return BLOB_OK;
}

/* ---- The public functions, host and GPU side by side ---- */

/* blob_cpu_<name> and blob_gpu_<name>, taking params: run of op on the arrays that follow
 * (conv_args). */
#define CONV_PAIR(name, op, params, ...)                                          \
    blob_status blob_cpu_##name params                                            \
    {                                                                             \
        return run(__func__, false, op, dtype, g, num, (conv_args){__VA_ARGS__}); \
    }                                                                             \
    blob_status blob_gpu_##name params                                            \
    {                                                                             \
        return run(__func__, true, op, dtype, g, num, (conv_args){__VA_ARGS__});  \
    }

CONV_PAIR(im2col, IM2COL,
          (blob_dtype dtype, const blob_conv_geometry *g, int64_t num, const void *im, void *col),
          im, col, NULL, NULL)
CONV_PAIR(col2im, COL2IM,
          (blob_dtype dtype, const blob_conv_geometry *g, int64_t num, const void *col, void *im),
          col, im, NULL, NULL)
CONV_PAIR(max_pool_forward, MAX_FORWARD,
          (blob_dtype dtype, const blob_conv_geometry *g, int64_t num, const void *x, void *y,
           int32_t *argmax),
          x, y, argmax, argmax)
CONV_PAIR(max_pool_backward, MAX_BACKWARD,
          (blob_dtype dtype, const blob_conv_geometry *g, int64_t num, const void *dy,
           const int32_t *argmax, void *dx),
          dy, dx, argmax, NULL)
CONV_PAIR(avg_pool_forward, AVG_FORWARD,
          (blob_dtype dtype, const blob_conv_geometry *g, int64_t num, const void *x, void *y), x,
          y, NULL, NULL)
CONV_PAIR(avg_pool_backward, AVG_BACKWARD,
          (blob_dtype dtype, const blob_conv_geometry *g, int64_t num, const void *dy, void *dx),
          dy, dx, NULL, NULL)
