/*
 * layer_impl.h - what a layer type implements, for the files of this directory.
 *
 * A layer type is a struct whose first member is the nn_layer base, a table of its
 * operations, and a constructor that calls nn__layer_alloc. The common code (layer.c)
 * dispatches through the table and frees the parameters; destroy frees the rest.
 */
#ifndef NN_LAYER_IMPL_H
#define NN_LAYER_IMPL_H

#include <stddef.h>

#include "layers.h"

#define NN_MAX_PARAMS 2

typedef struct {
    blob_status (*reshape)(nn_layer *, blob *const *bottom, blob *top);
    blob_status (*forward)(nn_layer *, blob *const *bottom, blob *top);
    blob_status (*backward)(nn_layer *, blob *top, bool propagate_down, blob *const *bottom);
    /* Free what the type holds beyond the params (NULL: nothing). */
    void (*destroy)(nn_layer *);
    /* forward and backward in one pass (NULL: the two in turn); see
     * nn_layer_forward_backward. */
    blob_status (*forward_backward)(nn_layer *, blob *const *bottom, blob *top,
                                    bool propagate_down);
} nn_layer_ops;

struct nn_layer {
    const nn_layer_ops *ops;
    const nn_math *m;
    blob_dtype dtype;
    blob_dtype top_dtype; /* see nn_layer_top_dtype */
    int num_params;
    blob *params[NN_MAX_PARAMS];
    nn_params_ready_fn params_ready; /* see nn_layer_on_params_ready; NULL: none */
    void *ready_ctx;
    void *side_stream; /* see nn_layer_set_side_stream; NULL: none */
};

/* A zeroed layer of `size` bytes (the type's struct) with its base filled in. */
blob_status nn__layer_alloc(nn_layer **out, size_t size, const nn_layer_ops *ops, nn_mode mode,
                            blob_dtype dtype);

/* Fill weights b as filler says for fan_in inputs per output, from seed. */
blob_status nn__fill(blob *b, nn_filler filler, int64_t fan_in, uint64_t seed);

/* Tell the listener, if any, that the layer's parameter diffs are queued: a layer with
 * parameters calls it in backward after its weight and bias gradients, before the work
 * on its bottom's gradient. */
blob_status nn__params_ready(nn_layer *l);

/* Side work (nn_layer_set_side_stream): with a side stream, make it wait for the work
 * queued so far on the current stream and make it current; *caller is the stream to go
 * back to (nn__side_end). Without one, nothing changes. Take every device pointer the
 * side work needs before this, while the caller's stream is current. */
blob_status nn__side_begin(nn_layer *l, void **caller);
void nn__side_end(void *caller);

/* Give b (of its own dtype) n elements, all `value` (kept when it already has n: the value must be the
 * same for the same n); nn__reshape_ones with value 1. */
blob_status nn__reshape_filled(const nn_layer *l, blob *b, int64_t n, double value);
blob_status nn__reshape_ones(const nn_layer *l, blob *ones, int64_t n);

/* Windows of the given kernel, pad and stride: dilation 1, floor rounding, and no plane
 * until nn__window_over gives it one. */
blob_conv_geometry nn__window(int64_t kernel_h, int64_t kernel_w, int64_t pad_h, int64_t pad_w,
                              int64_t stride_h, int64_t stride_w);

/* g's windows over the images of bottom x: g takes x's channels, height and width. x must
 * be a 4-D (NCHW) blob of l's dtype; BLOB_ESHAPE, g unchanged, for another. */
blob_status nn__window_over(const nn_layer *l, const blob *x, blob_conv_geometry *g);

#endif
