/*
 * layers.h - the layer set of the examples: Caffe-style layers on libblob, each running
 * on the host or on the GPU. One file per layer type in this directory.
 *
 *   nn_layer *ip;
 *   nn_ip_param p = {.num_input = 784, .num_output = 256};
 *   nn_ip_create(&ip, NN_GPU, BLOB_FLOAT32, &p, seed);  // params made and filled
 *   blob *bottom[] = {x};
 *   nn_layer_reshape(ip, bottom, h);        // h becomes batch x 256
 *   nn_layer_forward(ip, bottom, h);        // h = x W^T + b
 *   ...                                     // h's diff set by the layer above
 *   nn_layer_backward(ip, h, true, bottom); // W and b diffs, and x's diff
 *   nn_layer_free(ip);
 *
 * A layer reads its bottom blobs and writes its top blob. Forward writes top data;
 * backward reads the top diff and overwrites (never accumulates) the param diffs and,
 * when propagate_down, bottom[0]'s diff. The mode picks blob_cpu_* or blob_gpu_* and
 * the matching accessors; in NN_GPU mode forward and backward only queue work on the
 * calling thread's current stream, so they can be captured in a graph. All blobs of a
 * layer have the layer's dtype and live on the mode's device (nn_device).
 */
#ifndef NN_LAYERS_H
#define NN_LAYERS_H

#include <stdbool.h>
#include <stdint.h>

#include <blob/blob.h>

/* Return the status of a failing libblob call. */
#define NN_TRY(expr)                 \
    do {                             \
        blob_status nn_st_ = (expr); \
        if (nn_st_ != BLOB_OK)       \
            return nn_st_;           \
    } while (0)

typedef enum { NN_CPU = 0, NN_GPU = 1 } nn_mode;

/* The math and accessors of one side, so layer code is written once for both. */
typedef struct {
    blob_status (*gemm)(blob_dtype, blob_trans, blob_trans, int64_t, int64_t, int64_t, double,
                        const void *, const void *, double, void *);
    blob_status (*gemv)(blob_dtype, blob_trans, int64_t, int64_t, double, const void *,
                        const void *, double, void *);
    blob_status (*axpy)(blob_dtype, int64_t, double, const void *, void *);
    blob_status (*axpby)(blob_dtype, int64_t, double, const void *, double, void *);
    blob_status (*copy)(blob_dtype, int64_t, const void *, void *);
    blob_status (*set)(blob_dtype, int64_t, double, void *);
    blob_status (*gemm_epilogue)(blob_dtype, blob_trans, blob_trans, int64_t, int64_t, int64_t,
                                 const void *, const void *, void *, blob_epilogue, void *, void *,
                                 blob_math_mode);
    blob_status (*relu_forward)(blob_dtype, int64_t, const void *, void *);
    blob_status (*relu_backward)(blob_dtype, int64_t, const void *, const void *, void *);
    blob_status (*softmax_loss_forward)(blob_dtype, int64_t, int64_t, const void *, const void *,
                                        void *, void *);
    blob_status (*softmax_loss_backward)(blob_dtype, int64_t, int64_t, const void *, const void *,
                                         double, void *);
    blob_status (*softmax_loss_forward_backward)(blob_dtype, int64_t, int64_t, const void *,
                                                 const void *, double, void *, void *, void *);
    blob_status (*softmax_loss_mixed)(blob_dtype, blob_dtype, int64_t, int64_t, const void *,
                                      const void *, double, void *, float *, void *);
    blob_status (*softmax_loss_backward_mixed)(blob_dtype, blob_dtype, int64_t, int64_t,
                                               const void *, const void *, double, void *);
    blob_status (*im2col)(blob_dtype, const blob_conv_geometry *, int64_t, const void *, void *);
    blob_status (*col2im)(blob_dtype, const blob_conv_geometry *, int64_t, const void *, void *);
    blob_status (*max_pool_forward)(blob_dtype, const blob_conv_geometry *, int64_t, const void *,
                                    void *, int32_t *);
    blob_status (*max_pool_backward)(blob_dtype, const blob_conv_geometry *, int64_t, const void *,
                                     const int32_t *, void *);
    blob_status (*avg_pool_forward)(blob_dtype, const blob_conv_geometry *, int64_t, const void *,
                                    void *);
    blob_status (*avg_pool_backward)(blob_dtype, const blob_conv_geometry *, int64_t, const void *,
                                     void *);
    blob_status (*optim_step)(const blob_optim *, blob_dtype, int, const int64_t *, void *const *,
                              const void *const *, void *const *, void *const *, int64_t *);
    blob_status (*optim_step_split)(const blob_optim *, double, int, const int64_t *, void *const *,
                                    void *const *, const void *const *, void *const *,
                                    void *const *, int64_t *);
    blob_status (*data)(blob *, const void **);
    blob_status (*mutable_data)(blob *, void **);
    blob_status (*diff)(blob *, const void **);
    blob_status (*mutable_diff)(blob *, void **);
} nn_math;

const nn_math *nn_math_of(nn_mode mode);

/* Where blobs of a mode live: the current GPU, or host-only memory. */
int nn_device(nn_mode mode);

/* A blob of the mode's device; *out is NULL on failure. */
blob_status nn_blob_create(blob **out, nn_mode mode, blob_dtype dtype, int num_axes,
                           const int64_t *shape);

/* Element i of an array of dtype (any), as a double, and the reverse (rounded to nearest
 * even into the 16-bit floats). */
double nn_load(const void *p, blob_dtype dtype, int64_t i);
void nn_store(void *p, blob_dtype dtype, int64_t i, double v);

/* A uniform double in [0, 1) from a splitmix64 state. */
double nn_uniform(uint64_t *state);

/* Seconds on the monotonic clock: the one clock of the examples and their benchmarks. */
double nn_now(void);

/* The math mode called name (fp32, tf32, bf16), or BLOB_MATH_DEFAULT (0) for none. */
blob_math_mode nn_math_mode_find(const char *name);

/* Fill b's data with uniform values in [lo, hi) on the host. */
blob_status nn_fill_uniform(blob *b, double lo, double hi, uint64_t *state);

/* Fill b's data with normal values of mean 0 and standard deviation sd on the host. */
blob_status nn_fill_gaussian(blob *b, double sd, uint64_t *state);

/* How a layer's weights start, as Caffe's fillers, with fan_in the inputs of one output
 * (num_input, or channels / groups x kernel_h x kernel_w):
 *   NN_FILL_HE      Caffe's "msra": normal, standard deviation sqrt(2 / fan_in);
 *   NN_FILL_XAVIER  Caffe's "xavier": uniform in +-sqrt(3 / fan_in). */
typedef enum { NN_FILL_HE = 0, NN_FILL_XAVIER = 1 } nn_filler;

typedef struct nn_layer nn_layer;

/* InnerProduct: top (M x num_output) = bottom (M x num_input) W^T + b, with W
 * (num_output x num_input) filled He-uniform from `seed` and b zero; with relu, the
 * ReLU after it as one layer: top = max(bottom W^T + b, 0).
 * The fused kind (the default) runs each pass through blob_*_gemm_epilogue: forward
 * is one GEMM with the bias (and the ReLU, keeping its mask when the layer above needs
 * it) as its epilogue; backward's weight gradient GEMM yields the bias gradient
 * (BGRADA), and the ReLU's backward goes into the GEMM above (see
 * nn_layer_fuse_relu_backward) or, alone, is a pass over the top diff. The plain kind is
 * Caffe's: a gemm, the bias added by a gemm with a ones vector and summed by a gemv
 * with it, the ReLU a pass of its own each way. Both compute the same values. */
typedef struct {
    int64_t num_input, num_output; /* >= 1 */
    bool relu;
    bool plain;
} nn_ip_param;

/* Errors: BLOB_EINVAL for a size below 1. */
blob_status nn_ip_create(nn_layer **out, nn_mode mode, blob_dtype dtype, const nn_ip_param *p,
                         uint64_t seed);

/* Fuse the backward of lower's ReLU into upper's: where upper is a fused InnerProduct
 * whose bottom is the top of lower, a fused InnerProduct with relu, upper's backward
 * computes its bottom's gradient with the DRELU epilogue on lower's ReLU mask, so that
 * one GEMM writes lower's gradient before the ReLU (into lower's top diff), and on the
 * host lower's bias diff too (DRELU_BGRAD; on the GPU lower's weight gradient GEMM
 * yields it, beside the chain); lower's backward then starts from them. upper's backward then always writes its bottom's diff. Returns whether the pair fused (false: any other
 * pair, each layer keeping its own backward). Call it before the first reshape. */
bool nn_layer_fuse_relu_backward(nn_layer *upper, nn_layer *lower);

/* Convolution of NCHW images, Caffe's: top (N x num_output x out_h x out_w) = the
 * correlation of bottom (N x channels x H x W) with weights (num_output x channels /
 * groups x kernel_h x kernel_w), plus a bias per output channel. Output channels of group
 * g see input channels of group g only. Zero fields of stride and dilation mean 1, of
 * groups 1, of max_col_bytes NN_CONV_MAX_COL_BYTES. */
typedef struct {
    int64_t channels, num_output;
    int64_t kernel_h, kernel_w, pad_h, pad_w, stride_h, stride_w, dilation_h, dilation_w;
    int64_t groups;
    nn_filler filler; /* of the weights; the bias starts at 0 */
    /* Bound on the column buffer: as many images as fit in it go through im2col and one
     * GEMM per group at a time (at least one image, however large). A batch in one chunk
     * is fastest on the GPU, and on the host where the BLAS runs on several threads (a
     * GEMM per image is a little faster on one thread). */
    size_t max_col_bytes;
} nn_conv_param;

#define NN_CONV_MAX_COL_BYTES ((size_t)256 << 20)

/* The weights come from `seed`. Errors: BLOB_EINVAL for a size below 1 (a pad below 0),
 * channels or num_output not divisible by groups. A bottom whose channels differ, or
 * whose padded plane is smaller than the dilated kernel, is refused by reshape
 * (BLOB_ESHAPE). Forward runs, per chunk of images, im2col, one GEMM per group and one
 * for the bias, and (chunks of several images) a reorder of the channel-major product
 * into NCHW (an im2col/col2im with a 1x1 kernel); backward reuses forward's columns when
 * the batch was one chunk, so the bottom must not change between the two (as in a net). */
blob_status nn_conv_create(nn_layer **out, nn_mode mode, blob_dtype dtype, const nn_conv_param *p,
                           uint64_t seed);

/* Pooling of NCHW images over windows of each plane, Caffe's: the maximum (with the
 * cell chosen remembered for backward) or the average (Caffe's divisor, see
 * blob_avg_pool_forward). Zero fields of stride mean 1. Caffe rounds the output size up
 * (BLOB_ROUND_CEIL); the channels come from the bottom. */
typedef enum { NN_POOL_MAX = 0, NN_POOL_AVE = 1 } nn_pool_method;

typedef struct {
    nn_pool_method method;
    int64_t kernel_h, kernel_w, pad_h, pad_w, stride_h, stride_w;
    blob_rounding rounding;
} nn_pool_param;

/* Errors: BLOB_EINVAL for a bad method, a kernel below 1, a pad below 0 or not below its
 * kernel; reshape refuses (BLOB_ESHAPE) a bottom that is not 4-D or whose plane is empty
 * or smaller than the window. */
blob_status nn_pool_create(nn_layer **out, nn_mode mode, blob_dtype dtype, const nn_pool_param *p);

/* ReLU: top = max(bottom, 0), elementwise. */
blob_status nn_relu_create(nn_layer **out, nn_mode mode, blob_dtype dtype);

/* SoftmaxWithLoss: bottom[0] logits (M x C), bottom[1] labels (M class indices, int32 or
 * int64, or for float32 and float64 stored as dtype values); top a scalar, the mean
 * cross-entropy (float32 for 16-bit logits, computed in float32: the _mixed calls of
 * blob/blas.h). Backward treats the loss weight as 1 (the top diff is not read), scales
 * the gradient by the grad scale, and gives labels no diff. */
blob_status nn_softmax_loss_create(nn_layer **out, nn_mode mode, blob_dtype dtype);

/* Multiply the logits' gradient by scale (1 at first) from the next pass on: the loss
 * scale of float16 training (blob_grad_scaler). */
void nn_softmax_loss_set_grad_scale(nn_layer *layer, double scale);

/* The softmax probabilities (M x C) of the last forward of a SoftmaxWithLoss layer. */
blob *nn_softmax_loss_prob(const nn_layer *layer);

/* Shape top (and the layer's buffers) for bottom. Only this call changes shapes, so it
 * stays out of forward/backward; it may allocate. Errors: BLOB_ESHAPE for a bottom the
 * layer cannot take (its shape, or a dtype other than the layer's), libblob errors. */
blob_status nn_layer_reshape(nn_layer *layer, blob *const *bottom, blob *top);
blob_status nn_layer_forward(nn_layer *layer, blob *const *bottom, blob *top);
blob_status nn_layer_backward(nn_layer *layer, blob *top, bool propagate_down, blob *const *bottom);
/* nn_layer_forward, then nn_layer_backward with top's diff as it is: for the last layer
 * of a training step (a loss, whose backward needs no top diff). A type that can do both
 * in one pass (SoftmaxWithLoss, in one kernel on the GPU) does. */
blob_status nn_layer_forward_backward(nn_layer *layer, blob *const *bottom, blob *top,
                                      bool propagate_down);

/* A listener for a layer's parameter diffs: fn(ctx, layer) is called during the layer's
 * backward once the diffs of all its parameters are written (on the GPU: queued on the
 * current stream, which is the layer's side stream if it has one, see
 * nn_layer_set_side_stream), before the layer queues its bottom's gradient, so that they
 * can be reduced across devices while that runs. A failure of fn fails the backward. Layers
 * without parameters never call it. fn NULL removes the listener. */
typedef blob_status (*nn_params_ready_fn)(void *ctx, nn_layer *layer);
void nn_layer_on_params_ready(nn_layer *layer, nn_params_ready_fn fn, void *ctx);

/* NN_GPU: a second stream (borrowed) for work of a pass that the rest of the pass does not
 * read, so that it runs beside the chain of the layers, as PyTorch's autograd runs the
 * weight gradients on side streams, and as parallel branches of a captured graph:
 *   - backward's weight and bias gradients, where the layer then computes its bottom's
 *     gradient (InnerProduct; Convolution when its batch is one chunk): the bottom
 *     gradient goes on the current stream meanwhile, and the params_ready listener is
 *     called with the side stream current, behind the parameter gradients;
 *   - forward's mean loss of SoftmaxWithLoss (backward does not read it).
 * The layer takes every device pointer while the current stream is current (so the blobs
 * keep the current stream as theirs and no accessor orders anything behind the side
 * stream), makes the side stream wait for the current one (blob_stream_wait_stream),
 * queues the side work there, and goes back to the current stream. The ordering after
 * that is the caller's: the current stream must wait for the side stream before anything
 * writes what the side work reads (the top's diff, the bottom's data, the row losses) or
 * reads what it writes (the parameter diffs, the loss), and before those blobs are freed
 * (their memory is the allocator's again once the current stream is done with it).
 * A Convolution with a side stream keeps a second column buffer for its bottom's
 * gradient. Call it before the first reshape; NULL (the default) puts everything on the
 * current stream; NN_CPU layers ignore it. */
void nn_layer_set_side_stream(nn_layer *layer, void *stream);

/* The dtype of the layer's top: the layer's, but float32 for the loss of a
 * SoftmaxWithLoss of 16-bit floats. */
blob_dtype nn_layer_top_dtype(const nn_layer *layer);

/* Learnable parameters: InnerProduct and Convolution have weights (0) and bias (1), the
 * others none. */
int nn_layer_num_params(const nn_layer *layer);
blob *nn_layer_param(const nn_layer *layer, int i);

/* NULL is a no-op. */
void nn_layer_free(nn_layer *layer);

#endif
