/* SoftmaxWithLoss: the mean cross-entropy of a row-wise softmax against class labels. */
#include "layer_impl.h"

typedef struct {
    nn_layer base;
    blob *prob;     /* M x C probabilities of the last forward */
    blob *row_loss; /* M per-row losses */
    blob *weights;  /* M values 1/M: the mean is their product with the row losses */
    double grad_scale;
} softmax_loss_layer;

static softmax_loss_layer *sl_of(nn_layer *l) { return (softmax_loss_layer *)l; }

static blob_status softmax_loss_reshape(nn_layer *l, blob *const *bottom, blob *top)
{
    softmax_loss_layer *sl = sl_of(l);
    const blob_dtype ldt = blob_get_dtype(bottom[1]);
    const bool int_labels = ldt == BLOB_INT32 || ldt == BLOB_INT64;
    if (blob_get_dtype(bottom[0]) != l->dtype || blob_get_dtype(top) != l->top_dtype ||
        !(int_labels ? l->dtype != BLOB_FLOAT64 : ldt == l->dtype && l->dtype == l->top_dtype) ||
        blob_num_axes(bottom[0]) != 2 || blob_count(bottom[1]) != blob_shape(bottom[0])[0])
        return BLOB_ESHAPE;
    int64_t rows = blob_shape(bottom[0])[0];
    NN_TRY(blob_reshape_like(sl->prob, bottom[0]));
    NN_TRY(blob_reshape(sl->row_loss, 1, &rows));
    NN_TRY(blob_reshape(top, 0, NULL));
    return nn__reshape_filled(l, sl->weights, rows, 1.0 / (double)rows);
}

/* The forward pass, and with dlogits (bottom[0]'s diff) the backward in the same pass. */
static blob_status softmax_loss_pass(nn_layer *l, blob *const *bottom, blob *top, bool backward)
{
    softmax_loss_layer *sl = sl_of(l);
    const nn_math *m = l->m;
    const int64_t *shape = blob_shape(sl->prob);
    const void *logits, *labels, *weights;
    void *prob, *row_loss, *loss, *dlogits;
    NN_TRY(m->data(bottom[0], &logits));
    NN_TRY(m->data(bottom[1], &labels));
    NN_TRY(m->data(sl->weights, &weights));
    NN_TRY(m->mutable_data(sl->prob, &prob));
    NN_TRY(m->mutable_data(sl->row_loss, &row_loss));
    NN_TRY(m->mutable_data(top, &loss));
    const blob_dtype ldt = blob_get_dtype(bottom[1]);
    const double scale = sl->grad_scale / (double)shape[0];
    if (backward)
        NN_TRY(m->mutable_diff(bottom[0], &dlogits));
    if (ldt != l->dtype) { /* integer labels */
        NN_TRY(m->softmax_loss_mixed(l->dtype, ldt, shape[0], shape[1], logits, labels, scale, prob,
                                     row_loss, backward ? dlogits : NULL));
    } else if (backward) {
        NN_TRY(m->softmax_loss_forward_backward(l->dtype, shape[0], shape[1], logits, labels, scale,
                                                prob, row_loss, dlogits));
    } else {
        NN_TRY(
            m->softmax_loss_forward(l->dtype, shape[0], shape[1], logits, labels, prob, row_loss));
    }
    /* mean over rows: a 1 x 1 product (1 x M row losses by M x 1 weights), so nothing
     * waits for the result, in float32 whatever the math mode (on the GPU one cuBLASLt
     * kernel; cuBLAS's gemv takes two, and three times as long); what follows reads
     * prob or dlogits only, so the mean can go beside it on a side stream (reading
     * row_loss and weights, writing the loss) */
    void *caller;
    blob_status st = nn__side_begin(l, &caller);
    if (st == BLOB_OK)
        st = m->gemm_epilogue(l->top_dtype, BLOB_NO_TRANS, BLOB_NO_TRANS, 1, 1, shape[0], row_loss,
                              weights, loss, BLOB_EPILOGUE_NONE, NULL, NULL, BLOB_MATH_FP32);
    nn__side_end(caller);
    return st;
}

static blob_status softmax_loss_forward(nn_layer *l, blob *const *bottom, blob *top)
{
    return softmax_loss_pass(l, bottom, top, false);
}

static blob_status softmax_loss_forward_backward(nn_layer *l, blob *const *bottom, blob *top,
                                                 bool propagate_down)
{
    return softmax_loss_pass(l, bottom, top, propagate_down);
}

static blob_status softmax_loss_backward(nn_layer *l, blob *top, bool propagate_down,
                                         blob *const *bottom)
{
    (void)top;
    if (!propagate_down)
        return BLOB_OK;
    softmax_loss_layer *sl = sl_of(l);
    const nn_math *m = l->m;
    const int64_t *shape = blob_shape(sl->prob);
    const void *prob, *labels;
    void *dlogits;
    NN_TRY(m->data(sl->prob, &prob));
    NN_TRY(m->data(bottom[1], &labels));
    NN_TRY(m->mutable_diff(bottom[0], &dlogits));
    const blob_dtype ldt = blob_get_dtype(bottom[1]);
    const double scale = sl->grad_scale / (double)shape[0];
    if (ldt != l->dtype) /* integer labels */
        return m->softmax_loss_backward_mixed(l->dtype, ldt, shape[0], shape[1], prob, labels,
                                              scale, dlogits);
    return m->softmax_loss_backward(l->dtype, shape[0], shape[1], prob, labels, scale, dlogits);
}

static void softmax_loss_destroy(nn_layer *l)
{
    softmax_loss_layer *sl = sl_of(l);
    blob_free(sl->prob);
    blob_free(sl->row_loss);
    blob_free(sl->weights);
}

static const nn_layer_ops softmax_loss_ops = {.reshape = softmax_loss_reshape,
                                              .forward = softmax_loss_forward,
                                              .backward = softmax_loss_backward,
                                              .destroy = softmax_loss_destroy,
                                              .forward_backward = softmax_loss_forward_backward};

blob_status nn_softmax_loss_create(nn_layer **out, nn_mode mode, blob_dtype dtype)
{
    nn_layer *l;
    NN_TRY(nn__layer_alloc(&l, sizeof(softmax_loss_layer), &softmax_loss_ops, mode, dtype));
    softmax_loss_layer *sl = sl_of(l);
    sl->grad_scale = 1;
    if (dtype == BLOB_BFLOAT16 || dtype == BLOB_FLOAT16)
        l->top_dtype = BLOB_FLOAT32;
    int64_t zero = 0;
    blob_status st;
    if ((st = nn_blob_create(&sl->prob, mode, dtype, 1, &zero)) != BLOB_OK ||
        (st = nn_blob_create(&sl->row_loss, mode, l->top_dtype, 1, &zero)) != BLOB_OK ||
        (st = nn_blob_create(&sl->weights, mode, l->top_dtype, 1, &zero)) != BLOB_OK) {
        nn_layer_free(l);
        *out = NULL;
        return st;
    }
    *out = l;
    return BLOB_OK;
}

blob *nn_softmax_loss_prob(const nn_layer *l) { return sl_of((nn_layer *)l)->prob; }

void nn_softmax_loss_set_grad_scale(nn_layer *l, double scale) { sl_of(l)->grad_scale = scale; }
