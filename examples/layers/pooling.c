/* Pooling: the maximum or the average of each window of each plane. */
#include "layer_impl.h"

typedef struct {
    nn_layer base;
    nn_pool_param p;      /* with the defaults filled in */
    blob_conv_geometry g; /* one input image's windows (its plane from the last reshape) */
    int64_t num;
    /* Max: the cell each output took its value from, as int32 (blob/math.h's argmax),
     * held in a float32 blob of the top's shape (same size), so that it reshapes and
     * lives on the mode's side like any blob. */
    blob *argmax;
} pool_layer;

static pool_layer *pool_of(nn_layer *l) { return (pool_layer *)l; }

static blob_status pool_reshape(nn_layer *l, blob *const *bottom, blob *top)
{
    pool_layer *pl = pool_of(l);
    blob_conv_geometry g = pl->g;
    NN_TRY(nn__window_over(l, bottom[0], &g));
    int64_t oh, ow;
    NN_TRY(blob_pool_output_size(&g, &oh, &ow)); /* BLOB_ESHAPE: window beyond the plane */
    const int64_t num = blob_shape(bottom[0])[0], top_shape[4] = {num, g.channels, oh, ow};
    NN_TRY(blob_reshape(top, 4, top_shape));
    if (pl->p.method == NN_POOL_MAX)
        NN_TRY(blob_reshape(pl->argmax, 4, top_shape));
    pl->g = g;
    pl->num = num;
    return BLOB_OK;
}

static blob_status pool_forward(nn_layer *l, blob *const *bottom, blob *top)
{
    pool_layer *pl = pool_of(l);
    const nn_math *m = l->m;
    const void *x;
    void *y, *argmax;
    NN_TRY(m->data(bottom[0], &x));
    NN_TRY(m->mutable_data(top, &y));
    if (pl->p.method == NN_POOL_AVE)
        return m->avg_pool_forward(l->dtype, &pl->g, pl->num, x, y);
    NN_TRY(m->mutable_data(pl->argmax, &argmax));
    return m->max_pool_forward(l->dtype, &pl->g, pl->num, x, y, argmax);
}

static blob_status pool_backward(nn_layer *l, blob *top, bool propagate_down, blob *const *bottom)
{
    if (!propagate_down)
        return BLOB_OK;
    pool_layer *pl = pool_of(l);
    const nn_math *m = l->m;
    const void *dy, *argmax;
    void *dx;
    NN_TRY(m->diff(top, &dy));
    NN_TRY(m->mutable_diff(bottom[0], &dx));
    if (pl->p.method == NN_POOL_AVE)
        return m->avg_pool_backward(l->dtype, &pl->g, pl->num, dy, dx);
    NN_TRY(m->data(pl->argmax, &argmax));
    return m->max_pool_backward(l->dtype, &pl->g, pl->num, dy, argmax, dx);
}

static void pool_destroy(nn_layer *l) { blob_free(pool_of(l)->argmax); }

static const nn_layer_ops pool_ops = {.reshape = pool_reshape,
                                      .forward = pool_forward,
                                      .backward = pool_backward,
                                      .destroy = pool_destroy};

blob_status nn_pool_create(nn_layer **out, nn_mode mode, blob_dtype dtype,
                           const nn_pool_param *param)
{
    *out = NULL;
    nn_pool_param p = *param;
    p.stride_h = p.stride_h ? p.stride_h : 1;
    p.stride_w = p.stride_w ? p.stride_w : 1;
    if ((p.method != NN_POOL_MAX && p.method != NN_POOL_AVE) || p.kernel_h < 1 || p.kernel_w < 1 ||
        p.pad_h < 0 || p.pad_w < 0 || p.pad_h >= p.kernel_h || p.pad_w >= p.kernel_w ||
        p.stride_h < 1 || p.stride_w < 1 ||
        (p.rounding != BLOB_ROUND_FLOOR && p.rounding != BLOB_ROUND_CEIL))
        return BLOB_EINVAL;
    nn_layer *l;
    NN_TRY(nn__layer_alloc(&l, sizeof(pool_layer), &pool_ops, mode, dtype));
    pool_layer *pl = pool_of(l);
    pl->p = p;
    pl->g = nn__window(p.kernel_h, p.kernel_w, p.pad_h, p.pad_w, p.stride_h, p.stride_w);
    pl->g.rounding = p.rounding;
    int64_t zero = 0;
    blob_status st;
    if (p.method == NN_POOL_MAX &&
        (st = nn_blob_create(&pl->argmax, mode, BLOB_FLOAT32, 1, &zero)) != BLOB_OK) {
        nn_layer_free(l);
        return st;
    }
    *out = l;
    return BLOB_OK;
}
