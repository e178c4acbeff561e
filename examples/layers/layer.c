#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include "layer_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One table per side, from one macro so the two cannot drift. */
#define NN_MATH(side)                                                                             \
    {                                                                                             \
        .gemm = blob_##side##_gemm, .gemv = blob_##side##_gemv, .axpy = blob_##side##_axpy,       \
        .axpby = blob_##side##_axpby, .copy = blob_##side##_copy, .set = blob_##side##_set,       \
        .gemm_epilogue = blob_##side##_gemm_epilogue, .relu_forward = blob_##side##_relu_forward, \
        .relu_backward = blob_##side##_relu_backward,                                             \
        .softmax_loss_forward = blob_##side##_softmax_loss_forward,                               \
        .softmax_loss_backward = blob_##side##_softmax_loss_backward,                             \
        .softmax_loss_forward_backward = blob_##side##_softmax_loss_forward_backward,             \
        .softmax_loss_mixed = blob_##side##_softmax_loss_mixed,                                   \
        .softmax_loss_backward_mixed = blob_##side##_softmax_loss_backward_mixed,                 \
        .im2col = blob_##side##_im2col, .col2im = blob_##side##_col2im,                           \
        .max_pool_forward = blob_##side##_max_pool_forward,                                       \
        .max_pool_backward = blob_##side##_max_pool_backward,                                     \
        .avg_pool_forward = blob_##side##_avg_pool_forward,                                       \
        .avg_pool_backward = blob_##side##_avg_pool_backward,                                     \
        .optim_step = blob_##side##_optim_step,                                                   \
        .optim_step_split = blob_##side##_optim_step_split, .data = blob_##side##_data,           \
        .mutable_data = blob_mutable_##side##_data, .diff = blob_##side##_diff,                   \
        .mutable_diff = blob_mutable_##side##_diff,                                               \
    }

static const nn_math cpu_math = NN_MATH(cpu);
static const nn_math gpu_math = NN_MATH(gpu);

const nn_math *nn_math_of(nn_mode mode) { return mode == NN_GPU ? &gpu_math : &cpu_math; }

int nn_device(nn_mode mode) { return mode == NN_GPU ? BLOB_DEVICE_DEFAULT : BLOB_HOST_ONLY; }

blob_status nn_blob_create(blob **out, nn_mode mode, blob_dtype dtype, int num_axes,
                           const int64_t *shape)
{
    return blob_create(out, dtype, nn_device(mode), num_axes, shape);
}

double nn_load(const void *p, blob_dtype dtype, int64_t i)
{
    const char *e = (const char *)p + (size_t)i * blob_dtype_size(dtype);
    double v = 0;
    switch (dtype) {
    case BLOB_FLOAT32: return *(const float *)e;
    case BLOB_FLOAT64: return *(const double *)e;
    case BLOB_INT32: return *(const int32_t *)e;
    case BLOB_INT64: return (double)*(const int64_t *)e;
    case BLOB_UINT8: return *(const uint8_t *)e;
    default: blob_cpu_convert(dtype, BLOB_FLOAT64, 1, e, &v); return v;
    }
}

void nn_store(void *p, blob_dtype dtype, int64_t i, double v)
{
    char *e = (char *)p + (size_t)i * blob_dtype_size(dtype);
    switch (dtype) {
    case BLOB_FLOAT32: *(float *)e = (float)v; break;
    case BLOB_FLOAT64: *(double *)e = v; break;
    case BLOB_INT32: *(int32_t *)e = (int32_t)v; break;
    case BLOB_INT64: *(int64_t *)e = (int64_t)v; break;
    case BLOB_UINT8: *(uint8_t *)e = (uint8_t)v; break;
    default: blob_cpu_convert(BLOB_FLOAT64, dtype, 1, &v, e); break;
    }
}

double nn_uniform(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

double nn_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

blob_math_mode nn_math_mode_find(const char *name)
{
    for (blob_math_mode m = BLOB_MATH_FP32; m <= BLOB_MATH_BF16; m++)
        if (!strcmp(name, blob_math_mode_name(m)))
            return m;
    return BLOB_MATH_DEFAULT;
}

blob_status nn_fill_uniform(blob *b, double lo, double hi, uint64_t *state)
{
    void *p;
    NN_TRY(blob_mutable_cpu_data(b, &p));
    for (int64_t i = 0; i < blob_count(b); i++)
        nn_store(p, blob_get_dtype(b), i, lo + (hi - lo) * nn_uniform(state));
    return BLOB_OK;
}

blob_status nn_fill_gaussian(blob *b, double sd, uint64_t *state)
{
    void *p;
    NN_TRY(blob_mutable_cpu_data(b, &p));
    for (int64_t i = 0; i < blob_count(b); i++) { /* Box-Muller, one value per pair */
        double u = 1.0 - nn_uniform(state), v = nn_uniform(state);
        nn_store(p, blob_get_dtype(b), i, sd * sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
    }
    return BLOB_OK;
}

blob_status nn__fill(blob *b, nn_filler filler, int64_t fan_in, uint64_t seed)
{
    if (filler == NN_FILL_XAVIER) {
        double limit = sqrt(3.0 / (double)fan_in);
        return nn_fill_uniform(b, -limit, limit, &seed);
    }
    return nn_fill_gaussian(b, sqrt(2.0 / (double)fan_in), &seed);
}

blob_status nn__layer_alloc(nn_layer **out, size_t size, const nn_layer_ops *ops, nn_mode mode,
                            blob_dtype dtype)
{
    nn_layer *l = calloc(1, size);
    *out = l;
    if (!l)
        return BLOB_ENOMEM;
    l->ops = ops;
    l->m = nn_math_of(mode);
    l->dtype = dtype;
    l->top_dtype = dtype;
    return BLOB_OK;
}

blob_status nn__reshape_filled(const nn_layer *l, blob *b, int64_t n, double value)
{
    if (blob_num_axes(b) == 1 && blob_count(b) == n)
        return BLOB_OK;
    void *p;
    NN_TRY(blob_reshape(b, 1, &n));
    NN_TRY(l->m->mutable_data(b, &p));
    return l->m->set(blob_get_dtype(b), n, value, p);
}

blob_status nn__reshape_ones(const nn_layer *l, blob *ones, int64_t n)
{
    return nn__reshape_filled(l, ones, n, 1.0);
}

blob_conv_geometry nn__window(int64_t kernel_h, int64_t kernel_w, int64_t pad_h, int64_t pad_w,
                              int64_t stride_h, int64_t stride_w)
{
    return (blob_conv_geometry){.kernel_h = kernel_h,
                                .kernel_w = kernel_w,
                                .pad_h = pad_h,
                                .pad_w = pad_w,
                                .stride_h = stride_h,
                                .stride_w = stride_w,
                                .dilation_h = 1,
                                .dilation_w = 1,
                                .rounding = BLOB_ROUND_FLOOR};
}

blob_status nn__window_over(const nn_layer *l, const blob *x, blob_conv_geometry *g)
{
    if (blob_get_dtype(x) != l->dtype || blob_num_axes(x) != 4)
        return BLOB_ESHAPE;
    const int64_t *s = blob_shape(x);
    g->channels = s[1];
    g->height = s[2];
    g->width = s[3];
    return BLOB_OK;
}

blob_status nn_layer_reshape(nn_layer *l, blob *const *bottom, blob *top)
{
    return l->ops->reshape(l, bottom, top);
}

blob_status nn_layer_forward(nn_layer *l, blob *const *bottom, blob *top)
{
    return l->ops->forward(l, bottom, top);
}

blob_status nn_layer_backward(nn_layer *l, blob *top, bool propagate_down, blob *const *bottom)
{
    return l->ops->backward(l, top, propagate_down, bottom);
}

blob_status nn_layer_forward_backward(nn_layer *l, blob *const *bottom, blob *top,
                                      bool propagate_down)
{
    if (l->ops->forward_backward)
        return l->ops->forward_backward(l, bottom, top, propagate_down);
    NN_TRY(l->ops->forward(l, bottom, top));
    return l->ops->backward(l, top, propagate_down, bottom);
}

void nn_layer_on_params_ready(nn_layer *l, nn_params_ready_fn fn, void *ctx)
{
    l->params_ready = fn;
    l->ready_ctx = ctx;
}

blob_status nn__params_ready(nn_layer *l)
{
    return l->params_ready ? l->params_ready(l->ready_ctx, l) : BLOB_OK;
}

void nn_layer_set_side_stream(nn_layer *l, void *stream)
{
    l->side_stream = l->m == &gpu_math ? stream : NULL;
}

blob_status nn__side_begin(nn_layer *l, void **caller)
{
    *caller = blob_stream_get();
    if (!l->side_stream)
        return BLOB_OK;
    NN_TRY(blob_stream_wait_stream(l->side_stream, *caller));
    blob_stream_set(l->side_stream);
    return BLOB_OK;
}

void nn__side_end(void *caller) { blob_stream_set(caller); }

int nn_layer_num_params(const nn_layer *l) { return l->num_params; }
blob_dtype nn_layer_top_dtype(const nn_layer *l) { return l->top_dtype; }
blob *nn_layer_param(const nn_layer *l, int i) { return l->params[i]; }

void nn_layer_free(nn_layer *l)
{
    if (!l)
        return;
    if (l->ops->destroy)
        l->ops->destroy(l);
    for (int i = 0; i < l->num_params; i++)
        blob_free(l->params[i]);
    free(l);
}
