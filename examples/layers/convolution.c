/* Convolution: im2col over a chunk of images, one GEMM per group for the whole chunk, a
 * GEMM with a ones vector for the bias, and a reorder of the product into NCHW. */
#include "layer_impl.h"

#include <stdint.h>

typedef struct {
    nn_layer base;
    nn_conv_param p;      /* with the defaults filled in */
    blob_conv_geometry g; /* one input image's windows (its plane from the last reshape) */
    /* The output plane as a 1x1-kernel geometry of num_output channels: im2col over it
     * turns NCHW into the channel-major layout of the GEMM's product (num_output x
     * (images x out_h x out_w)), and col2im turns it back. */
    blob_conv_geometry plane;
    int64_t num, chunk; /* images in the batch, and per im2col */
    blob *col;          /* (channels kernel_h kernel_w) x (chunk out_h out_w) */
    blob *dcol;         /* with a side stream: the columns' gradient, as col */
    blob *product;      /* num_output x (chunk out_h out_w): output, then top diff */
    blob *ones;         /* chunk out_h out_w ones: the bias is a GEMM with them */
    bool col_fresh;     /* col holds the columns of the whole batch's last forward */
} conv_layer;

static conv_layer *conv_of(nn_layer *l) { return (conv_layer *)l; }

static blob_status conv_reshape(nn_layer *l, blob *const *bottom, blob *top)
{
    conv_layer *cv = conv_of(l);
    const nn_conv_param *p = &cv->p;
    blob_conv_geometry g = cv->g;
    NN_TRY(nn__window_over(l, bottom[0], &g));
    if (g.channels != p->channels)
        return BLOB_ESHAPE;
    int64_t oh, ow;
    NN_TRY(blob_conv_output_size(&g, &oh, &ow)); /* BLOB_ESHAPE: kernel beyond the input */
    const int64_t rows = p->channels * p->kernel_h * p->kernel_w, plane = oh * ow;
    const int64_t elem = (int64_t)blob_dtype_size(l->dtype);
    if (plane > INT64_MAX / rows / elem)
        return BLOB_EOVERFLOW;
    const int64_t image_bytes = rows * plane * elem, num = blob_shape(bottom[0])[0];
    int64_t chunk = (int64_t)(p->max_col_bytes / (size_t)image_bytes);
    chunk = chunk < 1 ? 1 : chunk > num ? num : chunk;
    int64_t top_shape[4] = {num, p->num_output, oh, ow};
    int64_t col_shape[2] = {rows, chunk * plane}, product_shape[2] = {p->num_output, chunk * plane};
    NN_TRY(blob_reshape(top, 4, top_shape));
    NN_TRY(blob_reshape(cv->col, 2, col_shape));
    if (l->side_stream) /* the columns' gradient beside the columns that dW reads */
        NN_TRY(blob_reshape(cv->dcol, 2, col_shape));
    NN_TRY(blob_reshape(cv->product, 2, product_shape));
    NN_TRY(nn__reshape_ones(l, cv->ones, chunk * plane));
    cv->g = g;
    cv->plane = nn__window(1, 1, 0, 0, 1, 1);
    cv->plane.channels = p->num_output;
    cv->plane.height = oh;
    cv->plane.width = ow;
    cv->num = num;
    cv->chunk = chunk;
    cv->col_fresh = false;
    return BLOB_OK;
}

/* Sizes of one call, in elements: per group, per image and per chunk. */
typedef struct {
    int64_t m, k;  /* output channels and column rows of a group */
    int64_t plane; /* out_h x out_w */
    int64_t in_image, out_image;
    size_t elem;
} conv_sizes;

static conv_sizes sizes_of(const conv_layer *cv)
{
    const nn_conv_param *p = &cv->p;
    return (conv_sizes){
        .m = p->num_output / p->groups,
        .k = p->channels / p->groups * p->kernel_h * p->kernel_w,
        .plane = cv->plane.height * cv->plane.width,
        .in_image = p->channels * cv->g.height * cv->g.width,
        .out_image = p->num_output * cv->plane.height * cv->plane.width,
        .elem = blob_dtype_size(cv->base.dtype),
    };
}

/* Element i of an array of elem-byte elements. */
static void *at(const void *array, int64_t i, size_t elem)
{
    return (char *)array + (size_t)i * elem;
}

static blob_status conv_forward(nn_layer *l, blob *const *bottom, blob *top)
{
    conv_layer *cv = conv_of(l);
    const nn_math *m = l->m;
    const blob_dtype dt = l->dtype;
    const conv_sizes z = sizes_of(cv);
    const void *x, *w, *b, *ones;
    void *y, *col, *product;
    NN_TRY(m->data(bottom[0], &x));
    NN_TRY(m->data(l->params[0], &w));
    NN_TRY(m->data(l->params[1], &b));
    NN_TRY(m->data(cv->ones, &ones));
    NN_TRY(m->mutable_data(cv->col, &col));
    NN_TRY(m->mutable_data(cv->product, &product));
    NN_TRY(m->mutable_data(top, &y));
    for (int64_t n0 = 0; n0 < cv->num; n0 += cv->chunk) {
        const int64_t images = cv->num - n0 < cv->chunk ? cv->num - n0 : cv->chunk;
        const int64_t cols = images * z.plane;
        /* one image's channel-major product is NCHW already: it goes to top directly */
        void *out = images == 1 ? at(y, n0 * z.out_image, z.elem) : product;
        NN_TRY(m->im2col(dt, &cv->g, images, at(x, n0 * z.in_image, z.elem), col));
        for (int64_t g = 0; g < cv->p.groups; g++) {
            const void *wg = at(w, g * z.m * z.k, z.elem), *cg = at(col, g * z.k * cols, z.elem);
            NN_TRY(m->gemm(dt, BLOB_NO_TRANS, BLOB_NO_TRANS, z.m, cols, z.k, 1.0, wg, cg, 0.0,
                           at(out, g * z.m * cols, z.elem)));
        }
        NN_TRY(m->gemm(dt, BLOB_NO_TRANS, BLOB_NO_TRANS, cv->p.num_output, cols, 1, 1.0, b, ones,
                       1.0, out));
        if (images > 1)
            NN_TRY(m->col2im(dt, &cv->plane, images, product, at(y, n0 * z.out_image, z.elem)));
    }
    cv->col_fresh = cv->num > 0 && cv->chunk == cv->num;
    return BLOB_OK;
}

/* The parameter gradients of the chunk of `images` images from n0, whose top diff in
 * the channel-major layout is dout; the listener is told after the last chunk. */
static blob_status conv_param_grads(nn_layer *l, const void *dout, const void *x, int64_t n0,
                                    int64_t images, const void *ones, void *col, void *dw, void *db)
{
    conv_layer *cv = conv_of(l);
    const nn_math *m = l->m;
    const blob_dtype dt = l->dtype;
    const conv_sizes z = sizes_of(cv);
    const int64_t cols = images * z.plane;
    const double beta = n0 ? 1.0 : 0.0;            /* later chunks add to the param diffs */
    if (dt == BLOB_BFLOAT16 || dt == BLOB_FLOAT16) /* which gemv does not take */
        NN_TRY(m->gemm(dt, BLOB_NO_TRANS, BLOB_NO_TRANS, cv->p.num_output, 1, cols, 1.0, dout, ones,
                       beta, db));
    else
        NN_TRY(m->gemv(dt, BLOB_NO_TRANS, cv->p.num_output, cols, 1.0, dout, ones, beta, db));
    if (!cv->col_fresh)
        NN_TRY(m->im2col(dt, &cv->g, images, at(x, n0 * z.in_image, z.elem), col));
    for (int64_t g = 0; g < cv->p.groups; g++) {
        const void *pg = at(dout, g * z.m * cols, z.elem);
        NN_TRY(m->gemm(dt, BLOB_NO_TRANS, BLOB_TRANS, z.m, z.k, cols, 1.0, pg,
                       at(col, g * z.k * cols, z.elem), beta, at(dw, g * z.m * z.k, z.elem)));
    }
    return n0 + images == cv->num ? nn__params_ready(l) : BLOB_OK;
}

/* With a side stream and the batch in one chunk, the parameter gradients (they read the
 * top diff, or its reorder in product, and col, which they may fill from the bottom's
 * data, and write the parameter diffs) run beside the bottom gradient, which reads the
 * same top diff and W's data and writes dcol and the bottom's diff: nothing one writes,
 * the other touches. Several chunks share col and product, so they run in order. */
static blob_status conv_backward(nn_layer *l, blob *top, bool propagate_down, blob *const *bottom)
{
    conv_layer *cv = conv_of(l);
    const nn_math *m = l->m;
    const blob_dtype dt = l->dtype;
    const conv_sizes z = sizes_of(cv);
    const bool side = propagate_down && l->side_stream && cv->chunk == cv->num;
    const void *dy, *x, *w, *ones;
    void *dw, *db, *col, *product, *dx = NULL, *dcol = NULL;
    NN_TRY(m->diff(top, &dy));
    NN_TRY(m->data(bottom[0], &x));
    NN_TRY(m->data(l->params[0], &w));
    NN_TRY(m->data(cv->ones, &ones));
    NN_TRY(m->mutable_diff(l->params[0], &dw));
    NN_TRY(m->mutable_diff(l->params[1], &db));
    NN_TRY(m->mutable_data(cv->col, &col));
    NN_TRY(m->mutable_data(cv->product, &product));
    if (propagate_down)
        NN_TRY(m->mutable_diff(bottom[0], &dx));
    if (side)
        NN_TRY(m->mutable_data(cv->dcol, &dcol));
    if (cv->num == 0) { /* no image: the gradients are 0 */
        NN_TRY(m->set(dt, blob_count(l->params[0]), 0.0, dw));
        return m->set(dt, blob_count(l->params[1]), 0.0, db);
    }
    for (int64_t n0 = 0; n0 < cv->num; n0 += cv->chunk) {
        const int64_t images = cv->num - n0 < cv->chunk ? cv->num - n0 : cv->chunk;
        const int64_t cols = images * z.plane;
        const void *dout = at(dy, n0 * z.out_image, z.elem); /* channel-major if one image */
        if (images > 1) {
            NN_TRY(m->im2col(dt, &cv->plane, images, dout, product));
            dout = product;
        }
        void *caller = NULL;
        blob_status st = side ? nn__side_begin(l, &caller) : BLOB_OK;
        if (st == BLOB_OK)
            st = conv_param_grads(l, dout, x, n0, images, ones, col, dw, db);
        if (side)
            nn__side_end(caller);
        NN_TRY(st);
        if (!propagate_down)
            continue;
        /* the columns' gradient (in place of the columns, unless beside them), then back
         * to the images */
        void *dc = side ? dcol : col;
        for (int64_t g = 0; g < cv->p.groups; g++) {
            const void *wg = at(w, g * z.m * z.k, z.elem);
            NN_TRY(m->gemm(dt, BLOB_TRANS, BLOB_NO_TRANS, z.k, cols, z.m, 1.0, wg,
                           at(dout, g * z.m * cols, z.elem), 0.0, at(dc, g * z.k * cols, z.elem)));
        }
        NN_TRY(m->col2im(dt, &cv->g, images, dc, at(dx, n0 * z.in_image, z.elem)));
        cv->col_fresh = cv->col_fresh && side;
    }
    return BLOB_OK;
}

static void conv_destroy(nn_layer *l)
{
    conv_layer *cv = conv_of(l);
    blob_free(cv->col);
    blob_free(cv->dcol);
    blob_free(cv->product);
    blob_free(cv->ones);
}

static const nn_layer_ops conv_ops = {.reshape = conv_reshape,
                                      .forward = conv_forward,
                                      .backward = conv_backward,
                                      .destroy = conv_destroy};

/* p with its defaults filled in, if it is valid. */
static bool conv_param(const nn_conv_param *in, nn_conv_param *p)
{
    *p = *in;
    int64_t *defaults_one[] = {&p->stride_h, &p->stride_w, &p->dilation_h, &p->dilation_w,
                               &p->groups};
    for (size_t i = 0; i < sizeof defaults_one / sizeof defaults_one[0]; i++)
        if (*defaults_one[i] == 0)
            *defaults_one[i] = 1;
    if (!p->max_col_bytes)
        p->max_col_bytes = NN_CONV_MAX_COL_BYTES;
    return p->channels >= 1 && p->num_output >= 1 && p->kernel_h >= 1 && p->kernel_w >= 1 &&
           p->pad_h >= 0 && p->pad_w >= 0 && p->stride_h >= 1 && p->stride_w >= 1 &&
           p->dilation_h >= 1 && p->dilation_w >= 1 && p->groups >= 1 &&
           p->channels % p->groups == 0 && p->num_output % p->groups == 0 &&
           (p->filler == NN_FILL_HE || p->filler == NN_FILL_XAVIER);
}

blob_status nn_conv_create(nn_layer **out, nn_mode mode, blob_dtype dtype,
                           const nn_conv_param *param, uint64_t seed)
{
    *out = NULL;
    nn_conv_param p;
    if (!conv_param(param, &p))
        return BLOB_EINVAL;
    nn_layer *l;
    NN_TRY(nn__layer_alloc(&l, sizeof(conv_layer), &conv_ops, mode, dtype));
    conv_layer *cv = conv_of(l);
    cv->p = p;
    cv->g = nn__window(p.kernel_h, p.kernel_w, p.pad_h, p.pad_w, p.stride_h, p.stride_w);
    cv->g.dilation_h = p.dilation_h;
    cv->g.dilation_w = p.dilation_w;
    l->num_params = 2;
    const int64_t fan_in = p.channels / p.groups * p.kernel_h * p.kernel_w;
    int64_t wshape[4] = {p.num_output, p.channels / p.groups, p.kernel_h, p.kernel_w};
    int64_t zero = 0;
    void *bias;
    blob_status st;
    if ((st = nn_blob_create(&l->params[0], mode, dtype, 4, wshape)) != BLOB_OK ||
        (st = nn_blob_create(&l->params[1], mode, dtype, 1, &p.num_output)) != BLOB_OK ||
        (st = nn_blob_create(&cv->col, mode, dtype, 1, &zero)) != BLOB_OK ||
        (st = nn_blob_create(&cv->dcol, mode, dtype, 1, &zero)) != BLOB_OK ||
        (st = nn_blob_create(&cv->product, mode, dtype, 1, &zero)) != BLOB_OK ||
        (st = nn_blob_create(&cv->ones, mode, dtype, 1, &zero)) != BLOB_OK ||
        (st = nn__fill(l->params[0], p.filler, fan_in, seed)) != BLOB_OK ||
        (st = blob_mutable_cpu_data(l->params[1], &bias)) != BLOB_OK) { /* zero-filled */
        nn_layer_free(l);
        return st;
    }
    *out = l;
    return BLOB_OK;
}
