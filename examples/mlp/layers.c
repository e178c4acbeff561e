#include "layers.h"

#include <math.h>
#include <stdlib.h>

/* One table per side, from one macro so the two cannot drift. */
#define NN_MATH(side)                                                                        \
    {                                                                                        \
        .gemm = blob_##side##_gemm, .gemv = blob_##side##_gemv, .axpy = blob_##side##_axpy,  \
        .axpby = blob_##side##_axpby, .copy = blob_##side##_copy, .set = blob_##side##_set,  \
        .relu_forward = blob_##side##_relu_forward,                                          \
        .relu_backward = blob_##side##_relu_backward,                                        \
        .softmax_loss_forward = blob_##side##_softmax_loss_forward,                          \
        .softmax_loss_backward = blob_##side##_softmax_loss_backward,                        \
        .data = blob_##side##_data, .mutable_data = blob_mutable_##side##_data,              \
        .diff = blob_##side##_diff, .mutable_diff = blob_mutable_##side##_diff,              \
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
    return dtype == BLOB_FLOAT64 ? ((const double *)p)[i] : ((const float *)p)[i];
}

void nn_store(void *p, blob_dtype dtype, int64_t i, double v)
{
    if (dtype == BLOB_FLOAT64)
        ((double *)p)[i] = v;
    else
        ((float *)p)[i] = (float)v;
}

double nn_uniform(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

blob_status nn_fill_uniform(blob *b, double lo, double hi, uint64_t *state)
{
    void *p;
    NN_TRY(blob_mutable_cpu_data(b, &p));
    for (int64_t i = 0; i < blob_count(b); i++)
        nn_store(p, blob_get_dtype(b), i, lo + (hi - lo) * nn_uniform(state));
    return BLOB_OK;
}

typedef struct {
    blob_status (*reshape)(nn_layer *, blob *const *bottom, blob *top);
    blob_status (*forward)(nn_layer *, blob *const *bottom, blob *top);
    blob_status (*backward)(nn_layer *, blob *top, bool propagate_down, blob *const *bottom);
} layer_type;

struct nn_layer {
    const layer_type *type;
    const nn_math *m;
    blob_dtype dtype;
    int num_params;
    blob *params[2];
    /* InnerProduct */
    int64_t num_input, num_output;
    /* InnerProduct (bias) and SoftmaxWithLoss (mean) */
    blob *ones;
    /* SoftmaxWithLoss */
    blob *prob, *row_loss;
};

static blob_status layer_alloc(nn_layer **out, const layer_type *type, nn_mode mode,
                               blob_dtype dtype)
{
    nn_layer *l = calloc(1, sizeof *l);
    *out = l;
    if (!l)
        return BLOB_ENOMEM;
    l->type = type;
    l->m = nn_math_of(mode);
    l->dtype = dtype;
    return BLOB_OK;
}

/* Give `ones` n elements, all 1. */
static blob_status reshape_ones(nn_layer *l, int64_t n)
{
    if (blob_num_axes(l->ones) == 1 && blob_count(l->ones) == n)
        return BLOB_OK;
    void *p;
    NN_TRY(blob_reshape(l->ones, 1, &n));
    NN_TRY(l->m->mutable_data(l->ones, &p));
    return l->m->set(l->dtype, n, 1.0, p);
}

/* ---- InnerProduct ---- */

static blob_status ip_reshape(nn_layer *l, blob *const *bottom, blob *top)
{
    int axes = blob_num_axes(bottom[0]);
    int64_t k;
    if (blob_get_dtype(bottom[0]) != l->dtype || axes < 2 ||
        blob_count_range(bottom[0], 1, axes, &k) != BLOB_OK || k != l->num_input)
        return BLOB_ESHAPE;
    int64_t shape[2] = {blob_shape(bottom[0])[0], l->num_output};
    NN_TRY(blob_reshape(top, 2, shape));
    return reshape_ones(l, shape[0]);
}

static blob_status ip_forward(nn_layer *l, blob *const *bottom, blob *top)
{
    const nn_math *m = l->m;
    int64_t rows = blob_shape(top)[0];
    const void *x, *w, *b, *ones;
    void *y;
    NN_TRY(m->data(bottom[0], &x));
    NN_TRY(m->data(l->params[0], &w));
    NN_TRY(m->data(l->params[1], &b));
    NN_TRY(m->data(l->ones, &ones));
    NN_TRY(m->mutable_data(top, &y));
    NN_TRY(m->gemm(l->dtype, BLOB_NO_TRANS, BLOB_TRANS, rows, l->num_output, l->num_input,
                   1.0, x, w, 0.0, y));
    return m->gemm(l->dtype, BLOB_NO_TRANS, BLOB_NO_TRANS, rows, l->num_output, 1, 1.0, ones,
                   b, 1.0, y);
}

static blob_status ip_backward(nn_layer *l, blob *top, bool propagate_down,
                               blob *const *bottom)
{
    const nn_math *m = l->m;
    int64_t rows = blob_shape(top)[0];
    const void *dy, *x, *ones;
    void *dw, *db;
    NN_TRY(m->diff(top, &dy));
    NN_TRY(m->data(bottom[0], &x));
    NN_TRY(m->data(l->ones, &ones));
    NN_TRY(m->mutable_diff(l->params[0], &dw));
    NN_TRY(m->mutable_diff(l->params[1], &db));
    NN_TRY(m->gemm(l->dtype, BLOB_TRANS, BLOB_NO_TRANS, l->num_output, l->num_input, rows,
                   1.0, dy, x, 0.0, dw));
    NN_TRY(m->gemv(l->dtype, BLOB_TRANS, rows, l->num_output, 1.0, dy, ones, 0.0, db));
    if (!propagate_down)
        return BLOB_OK;
    const void *w;
    void *dx;
    NN_TRY(m->data(l->params[0], &w));
    NN_TRY(m->mutable_diff(bottom[0], &dx));
    return m->gemm(l->dtype, BLOB_NO_TRANS, BLOB_NO_TRANS, rows, l->num_input, l->num_output,
                   1.0, dy, w, 0.0, dx);
}

static const layer_type ip_type = {ip_reshape, ip_forward, ip_backward};

/* W uniform in +-sqrt(6 / fan_in) (He et al.), b = 0. */
static blob_status ip_fill(nn_layer *l, uint64_t seed)
{
    double limit = sqrt(6.0 / (double)l->num_input);
    NN_TRY(nn_fill_uniform(l->params[0], -limit, limit, &seed));
    void *b;
    return blob_mutable_cpu_data(l->params[1], &b); /* zero-filled on first access */
}

blob_status nn_ip_create(nn_layer **out, nn_mode mode, blob_dtype dtype, int64_t num_input,
                         int64_t num_output, uint64_t seed)
{
    if (num_input <= 0 || num_output <= 0)
        return BLOB_EINVAL;
    nn_layer *l;
    NN_TRY(layer_alloc(&l, &ip_type, mode, dtype));
    l->num_input = num_input;
    l->num_output = num_output;
    l->num_params = 2;
    int64_t wshape[2] = {num_output, num_input}, zero = 0;
    blob_status st;
    if ((st = nn_blob_create(&l->params[0], mode, dtype, 2, wshape)) != BLOB_OK ||
        (st = nn_blob_create(&l->params[1], mode, dtype, 1, &num_output)) != BLOB_OK ||
        (st = nn_blob_create(&l->ones, mode, dtype, 1, &zero)) != BLOB_OK ||
        (st = ip_fill(l, seed)) != BLOB_OK) {
        nn_layer_free(l);
        return st;
    }
    *out = l;
    return BLOB_OK;
}

/* ---- ReLU ---- */

static blob_status relu_reshape(nn_layer *l, blob *const *bottom, blob *top)
{
    if (blob_get_dtype(bottom[0]) != l->dtype)
        return BLOB_ESHAPE;
    return blob_reshape_like(top, bottom[0]);
}

static blob_status relu_forward(nn_layer *l, blob *const *bottom, blob *top)
{
    const void *x;
    void *y;
    NN_TRY(l->m->data(bottom[0], &x));
    NN_TRY(l->m->mutable_data(top, &y));
    return l->m->relu_forward(l->dtype, blob_count(top), x, y);
}

static blob_status relu_backward(nn_layer *l, blob *top, bool propagate_down,
                                 blob *const *bottom)
{
    if (!propagate_down)
        return BLOB_OK;
    const void *x, *dy;
    void *dx;
    NN_TRY(l->m->data(bottom[0], &x));
    NN_TRY(l->m->diff(top, &dy));
    NN_TRY(l->m->mutable_diff(bottom[0], &dx));
    return l->m->relu_backward(l->dtype, blob_count(top), x, dy, dx);
}

static const layer_type relu_type = {relu_reshape, relu_forward, relu_backward};

blob_status nn_relu_create(nn_layer **out, nn_mode mode, blob_dtype dtype)
{
    return layer_alloc(out, &relu_type, mode, dtype);
}

/* ---- SoftmaxWithLoss ---- */

static blob_status softmax_loss_reshape(nn_layer *l, blob *const *bottom, blob *top)
{
    if (blob_get_dtype(bottom[0]) != l->dtype || blob_get_dtype(bottom[1]) != l->dtype ||
        blob_num_axes(bottom[0]) != 2 || blob_count(bottom[1]) != blob_shape(bottom[0])[0])
        return BLOB_ESHAPE;
    int64_t rows = blob_shape(bottom[0])[0];
    NN_TRY(blob_reshape_like(l->prob, bottom[0]));
    NN_TRY(blob_reshape(l->row_loss, 1, &rows));
    NN_TRY(blob_reshape(top, 0, NULL));
    return reshape_ones(l, rows);
}

static blob_status softmax_loss_forward(nn_layer *l, blob *const *bottom, blob *top)
{
    const nn_math *m = l->m;
    const int64_t *shape = blob_shape(l->prob);
    const void *logits, *labels, *ones;
    void *prob, *row_loss, *loss;
    NN_TRY(m->data(bottom[0], &logits));
    NN_TRY(m->data(bottom[1], &labels));
    NN_TRY(m->data(l->ones, &ones));
    NN_TRY(m->mutable_data(l->prob, &prob));
    NN_TRY(m->mutable_data(l->row_loss, &row_loss));
    NN_TRY(m->mutable_data(top, &loss));
    NN_TRY(m->softmax_loss_forward(l->dtype, shape[0], shape[1], logits, labels, prob,
                                   row_loss));
    /* mean over rows: a 1-column gemv, so nothing waits for the result */
    return m->gemv(l->dtype, BLOB_TRANS, shape[0], 1, 1.0 / (double)shape[0], row_loss, ones,
                   0.0, loss);
}

static blob_status softmax_loss_backward(nn_layer *l, blob *top, bool propagate_down,
                                         blob *const *bottom)
{
    (void)top;
    if (!propagate_down)
        return BLOB_OK;
    const nn_math *m = l->m;
    const int64_t *shape = blob_shape(l->prob);
    const void *prob, *labels;
    void *dlogits;
    NN_TRY(m->data(l->prob, &prob));
    NN_TRY(m->data(bottom[1], &labels));
    NN_TRY(m->mutable_diff(bottom[0], &dlogits));
    return m->softmax_loss_backward(l->dtype, shape[0], shape[1], prob, labels,
                                    1.0 / (double)shape[0], dlogits);
}

static const layer_type softmax_loss_type = {softmax_loss_reshape, softmax_loss_forward,
                                             softmax_loss_backward};

blob_status nn_softmax_loss_create(nn_layer **out, nn_mode mode, blob_dtype dtype)
{
    nn_layer *l;
    NN_TRY(layer_alloc(&l, &softmax_loss_type, mode, dtype));
    int64_t zero = 0;
    blob_status st;
    if ((st = nn_blob_create(&l->prob, mode, dtype, 1, &zero)) != BLOB_OK ||
        (st = nn_blob_create(&l->row_loss, mode, dtype, 1, &zero)) != BLOB_OK ||
        (st = nn_blob_create(&l->ones, mode, dtype, 1, &zero)) != BLOB_OK) {
        nn_layer_free(l);
        return st;
    }
    *out = l;
    return BLOB_OK;
}

blob *nn_softmax_loss_prob(const nn_layer *l) { return l->prob; }

/* ---- dispatch ---- */

blob_status nn_layer_reshape(nn_layer *l, blob *const *bottom, blob *top)
{
    return l->type->reshape(l, bottom, top);
}

blob_status nn_layer_forward(nn_layer *l, blob *const *bottom, blob *top)
{
    return l->type->forward(l, bottom, top);
}

blob_status nn_layer_backward(nn_layer *l, blob *top, bool propagate_down, blob *const *bottom)
{
    return l->type->backward(l, top, propagate_down, bottom);
}

int nn_layer_num_params(const nn_layer *l) { return l->num_params; }
blob *nn_layer_param(const nn_layer *l, int i) { return l->params[i]; }

void nn_layer_free(nn_layer *l)
{
    if (!l)
        return;
    blob_free(l->params[0]);
    blob_free(l->params[1]);
    blob_free(l->ones);
    blob_free(l->prob);
    blob_free(l->row_loss);
    free(l);
}
