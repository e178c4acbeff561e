/* InnerProduct: top (M x num_output) = bottom (M x num_input) W^T + b. */
#include "layer_impl.h"

#include <math.h>

typedef struct {
    nn_layer base;
    int64_t num_input, num_output;
    blob *ones; /* M ones: the bias is added by a gemm with it, as in Caffe */
} ip_layer;

static ip_layer *ip_of(nn_layer *l) { return (ip_layer *)l; }

static blob_status ip_reshape(nn_layer *l, blob *const *bottom, blob *top)
{
    ip_layer *ip = ip_of(l);
    int axes = blob_num_axes(bottom[0]);
    int64_t k;
    if (blob_get_dtype(bottom[0]) != l->dtype || axes < 2 ||
        blob_count_range(bottom[0], 1, axes, &k) != BLOB_OK || k != ip->num_input)
        return BLOB_ESHAPE;
    int64_t shape[2] = {blob_shape(bottom[0])[0], ip->num_output};
    NN_TRY(blob_reshape(top, 2, shape));
    return nn__reshape_ones(l, ip->ones, shape[0]);
}

static blob_status ip_forward(nn_layer *l, blob *const *bottom, blob *top)
{
    ip_layer *ip = ip_of(l);
    const nn_math *m = l->m;
    int64_t rows = blob_shape(top)[0];
    const void *x, *w, *b, *ones;
    void *y;
    NN_TRY(m->data(bottom[0], &x));
    NN_TRY(m->data(l->params[0], &w));
    NN_TRY(m->data(l->params[1], &b));
    NN_TRY(m->data(ip->ones, &ones));
    NN_TRY(m->mutable_data(top, &y));
    NN_TRY(m->gemm(l->dtype, BLOB_NO_TRANS, BLOB_TRANS, rows, ip->num_output, ip->num_input,
                   1.0, x, w, 0.0, y));
    return m->gemm(l->dtype, BLOB_NO_TRANS, BLOB_NO_TRANS, rows, ip->num_output, 1, 1.0, ones,
                   b, 1.0, y);
}

static blob_status ip_backward(nn_layer *l, blob *top, bool propagate_down,
                               blob *const *bottom)
{
    ip_layer *ip = ip_of(l);
    const nn_math *m = l->m;
    int64_t rows = blob_shape(top)[0];
    const void *dy, *x, *ones;
    void *dw, *db;
    NN_TRY(m->diff(top, &dy));
    NN_TRY(m->data(bottom[0], &x));
    NN_TRY(m->data(ip->ones, &ones));
    NN_TRY(m->mutable_diff(l->params[0], &dw));
    NN_TRY(m->mutable_diff(l->params[1], &db));
    NN_TRY(m->gemm(l->dtype, BLOB_TRANS, BLOB_NO_TRANS, ip->num_output, ip->num_input, rows,
                   1.0, dy, x, 0.0, dw));
    NN_TRY(m->gemv(l->dtype, BLOB_TRANS, rows, ip->num_output, 1.0, dy, ones, 0.0, db));
    if (!propagate_down)
        return BLOB_OK;
    const void *w;
    void *dx;
    NN_TRY(m->data(l->params[0], &w));
    NN_TRY(m->mutable_diff(bottom[0], &dx));
    return m->gemm(l->dtype, BLOB_NO_TRANS, BLOB_NO_TRANS, rows, ip->num_input, ip->num_output,
                   1.0, dy, w, 0.0, dx);
}

static void ip_destroy(nn_layer *l) { blob_free(ip_of(l)->ones); }

static const nn_layer_ops ip_ops = {ip_reshape, ip_forward, ip_backward, ip_destroy};

/* W uniform in +-sqrt(6 / fan_in) (He et al.), b = 0. */
static blob_status ip_fill(nn_layer *l, int64_t fan_in, uint64_t seed)
{
    double limit = sqrt(6.0 / (double)fan_in);
    NN_TRY(nn_fill_uniform(l->params[0], -limit, limit, &seed));
    void *b;
    return blob_mutable_cpu_data(l->params[1], &b); /* zero-filled on first access */
}

blob_status nn_ip_create(nn_layer **out, nn_mode mode, blob_dtype dtype, int64_t num_input,
                         int64_t num_output, uint64_t seed)
{
    *out = NULL;
    if (num_input <= 0 || num_output <= 0)
        return BLOB_EINVAL;
    nn_layer *l;
    NN_TRY(nn__layer_alloc(&l, sizeof(ip_layer), &ip_ops, mode, dtype));
    ip_layer *ip = ip_of(l);
    ip->num_input = num_input;
    ip->num_output = num_output;
    l->num_params = 2;
    int64_t wshape[2] = {num_output, num_input}, zero = 0;
    blob_status st;
    if ((st = nn_blob_create(&l->params[0], mode, dtype, 2, wshape)) != BLOB_OK ||
        (st = nn_blob_create(&l->params[1], mode, dtype, 1, &num_output)) != BLOB_OK ||
        (st = nn_blob_create(&ip->ones, mode, dtype, 1, &zero)) != BLOB_OK ||
        (st = ip_fill(l, num_input, seed)) != BLOB_OK) {
        nn_layer_free(l);
        return st;
    }
    *out = l;
    return BLOB_OK;
}
