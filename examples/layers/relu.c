/* ReLU: top = max(bottom, 0), elementwise. */
#include "layer_impl.h"

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

static blob_status relu_backward(nn_layer *l, blob *top, bool propagate_down, blob *const *bottom)
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

static const nn_layer_ops relu_ops = {
    .reshape = relu_reshape, .forward = relu_forward, .backward = relu_backward};

blob_status nn_relu_create(nn_layer **out, nn_mode mode, blob_dtype dtype)
{
    return nn__layer_alloc(out, sizeof(nn_layer), &relu_ops, mode, dtype);
}
