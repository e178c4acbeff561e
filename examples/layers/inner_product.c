/* InnerProduct: top (M x num_output) = bottom (M x num_input) W^T + b, and with relu
 * max(that, 0); fused GEMM epilogues, or Caffe's gemm + ones-gemm bias (plain). */
#include "layer_impl.h"

#include <math.h>

typedef struct ip_layer ip_layer;
struct ip_layer {
    nn_layer base;
    nn_ip_param p;
    nn_mode mode;
    blob *ones; /* plain: M ones, the bias is added by a gemm with it, as in Caffe */
    /* Fused with relu, when the layer above takes over the ReLU's backward: the mask of
     * the last forward (blob/math.h's bits, blob_relu_mask_bytes of the top's shape), held
     * in a blob of the layer's dtype so that it reshapes and lives on the mode's side. */
    blob *mask;
    bool relu_from_above; /* that layer writes our top diff before the ReLU */
    ip_layer *below;      /* the layer whose ReLU backward our bottom-gradient GEMM takes */
};

/* Whether the bias gradient of a layer whose ReLU backward the layer above takes comes
 * with it (DRELU_BGRAD), rather than from the layer's own weight gradient (BGRADA). On
 * the host DRELU_BGRAD sums the columns in the pass that applies the mask, where BGRADA
 * makes a pass of its own; on the GPU DRELU_BGRAD costs kernels on the chain of the
 * bottom gradients, where BGRADA runs beside it on the side stream. */
static bool bias_grad_from_above(const ip_layer *lower) { return lower->mode == NN_CPU; }

static const nn_layer_ops ip_ops;

static ip_layer *ip_of(nn_layer *l) { return (ip_layer *)l; }

static blob_status ip_reshape(nn_layer *l, blob *const *bottom, blob *top)
{
    ip_layer *ip = ip_of(l);
    int axes = blob_num_axes(bottom[0]);
    int64_t k;
    if (blob_get_dtype(bottom[0]) != l->dtype || axes < 2 ||
        blob_count_range(bottom[0], 1, axes, &k) != BLOB_OK || k != ip->p.num_input)
        return BLOB_ESHAPE;
    int64_t shape[2] = {blob_shape(bottom[0])[0], ip->p.num_output};
    NN_TRY(blob_reshape(top, 2, shape));
    if (ip->mask) {
        size_t bytes = blob_relu_mask_bytes(shape[0], shape[1]);
        if (!bytes && shape[0])
            return BLOB_EOVERFLOW;
        int64_t count = (int64_t)(bytes / blob_dtype_size(l->dtype)); /* rows of 16 bytes */
        NN_TRY(blob_reshape(ip->mask, 1, &count));
    }
    return ip->p.plain ? nn__reshape_ones(l, ip->ones, shape[0]) : BLOB_OK;
}

static blob_status ip_forward(nn_layer *l, blob *const *bottom, blob *top)
{
    ip_layer *ip = ip_of(l);
    const nn_math *m = l->m;
    const blob_dtype dt = l->dtype;
    const int64_t rows = blob_shape(top)[0], in = ip->p.num_input, out = ip->p.num_output;
    const void *x, *w, *b;
    void *y;
    NN_TRY(m->data(bottom[0], &x));
    NN_TRY(m->data(l->params[0], &w));
    NN_TRY(m->data(l->params[1], &b));
    NN_TRY(m->mutable_data(top, &y));
    if (!ip->p.plain) {
        void *mask = NULL;
        if (ip->mask)
            NN_TRY(m->mutable_data(ip->mask, &mask));
        return m->gemm_epilogue(dt, BLOB_NO_TRANS, BLOB_TRANS, rows, out, in, x, w, y,
                                ip->p.relu ? BLOB_EPILOGUE_BIAS_RELU : BLOB_EPILOGUE_BIAS,
                                (void *)b, mask, BLOB_MATH_DEFAULT);
    }
    const void *ones;
    NN_TRY(m->data(ip->ones, &ones));
    NN_TRY(m->gemm(dt, BLOB_NO_TRANS, BLOB_TRANS, rows, out, in, 1.0, x, w, 0.0, y));
    NN_TRY(m->gemm(dt, BLOB_NO_TRANS, BLOB_NO_TRANS, rows, out, 1, 1.0, ones, b, 1.0, y));
    return ip->p.relu ? m->relu_forward(dt, rows * out, y, y) : BLOB_OK;
}

/* Where backward's parameter gradients go: dw, and db unless the layer above writes it;
 * plainly the ones vector that sums the bias gradient. */
typedef struct {
    void *dw, *db;
    const void *ones;
} param_diffs;

static blob_status param_diffs_of(nn_layer *l, param_diffs *d)
{
    ip_layer *ip = ip_of(l);
    const nn_math *m = l->m;
    *d = (param_diffs){0};
    NN_TRY(m->mutable_diff(l->params[0], &d->dw));
    if (ip->relu_from_above && bias_grad_from_above(ip))
        return BLOB_OK;
    NN_TRY(m->mutable_diff(l->params[1], &d->db));
    return ip->p.plain ? m->data(ip->ones, &d->ones) : BLOB_OK;
}

/* The weight and bias gradients from dz, the gradient before the ReLU (if any). */
static blob_status param_grads(nn_layer *l, const void *dz, const void *x, int64_t rows,
                               const param_diffs *d)
{
    ip_layer *ip = ip_of(l);
    const nn_math *m = l->m;
    const blob_dtype dt = l->dtype;
    const int64_t in = ip->p.num_input, out = ip->p.num_output;
    if (ip->relu_from_above && bias_grad_from_above(ip)) /* the bias gradient came with dz */
        return m->gemm(dt, BLOB_TRANS, BLOB_NO_TRANS, out, in, rows, 1.0, dz, x, 0.0, d->dw);
    if (!ip->p.plain)
        return m->gemm_epilogue(dt, BLOB_TRANS, BLOB_NO_TRANS, out, in, rows, dz, x, d->dw,
                                BLOB_EPILOGUE_BGRADA, d->db, NULL, BLOB_MATH_DEFAULT);
    NN_TRY(m->gemm(dt, BLOB_TRANS, BLOB_NO_TRANS, out, in, rows, 1.0, dz, x, 0.0, d->dw));
    return m->gemv(dt, BLOB_TRANS, rows, out, 1.0, dz, d->ones, 0.0, d->db);
}

/* With a side stream, the parameter gradients (they read dz and x, and write the
 * parameter diffs) run beside the bottom gradient (it reads dz, W's data and the mask
 * below, and writes the bottom's diff, and on the host the bias diff below): nothing one
 * writes, the other touches. */
static blob_status ip_backward(nn_layer *l, blob *top, bool propagate_down, blob *const *bottom)
{
    ip_layer *ip = ip_of(l);
    const nn_math *m = l->m;
    const blob_dtype dt = l->dtype;
    const int64_t rows = blob_shape(top)[0], in = ip->p.num_input, out = ip->p.num_output;
    const bool bottom_grad = propagate_down || ip->below;
    const void *x, *dz, *w = NULL;
    void *dx = NULL, *mask = NULL, *db_below = NULL;
    param_diffs d;
    if (ip->p.relu && !ip->relu_from_above) { /* the ReLU's backward, in place */
        const void *y;
        void *dy;
        NN_TRY(m->data(top, &y));
        NN_TRY(m->mutable_diff(top, &dy));
        NN_TRY(m->relu_backward(dt, rows * out, y, dy, dy));
    }
    NN_TRY(m->diff(top, &dz));
    NN_TRY(m->data(bottom[0], &x));
    NN_TRY(param_diffs_of(l, &d));
    if (bottom_grad) {
        NN_TRY(m->data(l->params[0], &w));
        NN_TRY(m->mutable_diff(bottom[0], &dx));
    }
    if (ip->below)
        NN_TRY(m->mutable_data(ip->below->mask, &mask));
    if (ip->below && bias_grad_from_above(ip->below))
        NN_TRY(m->mutable_diff(ip->below->base.params[1], &db_below));
    void *caller = NULL;
    blob_status st = bottom_grad ? nn__side_begin(l, &caller) : BLOB_OK;
    if (st == BLOB_OK)
        st = param_grads(l, dz, x, rows, &d);
    if (st == BLOB_OK)
        st = nn__params_ready(l);
    if (bottom_grad)
        nn__side_end(caller);
    if (st != BLOB_OK || !bottom_grad)
        return st;
    if (!ip->below)
        return m->gemm(dt, BLOB_NO_TRANS, BLOB_NO_TRANS, rows, in, out, 1.0, dz, w, 0.0, dx);
    /* dx goes through the ReLU below, with that layer's bias gradient or without it */
    return m->gemm_epilogue(dt, BLOB_NO_TRANS, BLOB_NO_TRANS, rows, in, out, dz, w, dx,
                            db_below ? BLOB_EPILOGUE_DRELU_BGRAD : BLOB_EPILOGUE_DRELU, db_below,
                            mask, BLOB_MATH_DEFAULT);
}

static void ip_destroy(nn_layer *l)
{
    blob_free(ip_of(l)->ones);
    blob_free(ip_of(l)->mask);
}

static const nn_layer_ops ip_ops = {
    .reshape = ip_reshape, .forward = ip_forward, .backward = ip_backward, .destroy = ip_destroy};

bool nn_layer_fuse_relu_backward(nn_layer *upper, nn_layer *lower)
{
    if (upper->ops != &ip_ops || lower->ops != &ip_ops || upper->m != lower->m ||
        upper->dtype != lower->dtype)
        return false;
    ip_layer *u = ip_of(upper), *lo = ip_of(lower);
    if (u->p.plain || lo->p.plain || !lo->p.relu || u->below || lo->relu_from_above ||
        u->p.num_input != lo->p.num_output)
        return false;
    int64_t zero = 0;
    if (nn_blob_create(&lo->mask, lo->mode, lower->dtype, 1, &zero) != BLOB_OK)
        return false;
    lo->relu_from_above = true;
    u->below = lo;
    return true;
}

/* W uniform in +-sqrt(6 / fan_in) (He et al.), b = 0. */
static blob_status ip_fill(nn_layer *l, int64_t fan_in, uint64_t seed)
{
    double limit = sqrt(6.0 / (double)fan_in);
    NN_TRY(nn_fill_uniform(l->params[0], -limit, limit, &seed));
    void *b;
    return blob_mutable_cpu_data(l->params[1], &b); /* zero-filled on first access */
}

blob_status nn_ip_create(nn_layer **out, nn_mode mode, blob_dtype dtype, const nn_ip_param *p,
                         uint64_t seed)
{
    *out = NULL;
    if (p->num_input <= 0 || p->num_output <= 0)
        return BLOB_EINVAL;
    nn_layer *l;
    NN_TRY(nn__layer_alloc(&l, sizeof(ip_layer), &ip_ops, mode, dtype));
    ip_layer *ip = ip_of(l);
    ip->p = *p;
    ip->mode = mode;
    l->num_params = 2;
    int64_t wshape[2] = {p->num_output, p->num_input}, zero = 0;
    blob_status st;
    if ((st = nn_blob_create(&l->params[0], mode, dtype, 2, wshape)) != BLOB_OK ||
        (st = nn_blob_create(&l->params[1], mode, dtype, 1, &p->num_output)) != BLOB_OK ||
        (p->plain && (st = nn_blob_create(&ip->ones, mode, dtype, 1, &zero)) != BLOB_OK) ||
        (st = ip_fill(l, p->num_input, seed)) != BLOB_OK) {
        nn_layer_free(l);
        return st;
    }
    *out = l;
    return BLOB_OK;
}
