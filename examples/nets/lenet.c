/* LeNet on 1x28x28 images, as Caffe's examples/mnist/lenet_train_test.prototxt with a ReLU
 * after each convolution too: conv 5x5 (20) -> max pool 2x2/2 -> ReLU -> conv 5x5 (50)
 * -> max pool 2x2/2 -> ReLU -> inner product (500) -> ReLU -> inner product (10). The
 * ReLUs after the convolutions come after their pooling: max pooling and ReLU commute
 * (the same outputs and gradients), and the pooled blob is a quarter of the size. */
#include "net.h"

enum { CONV1 = 20, CONV2 = 50, HIDDEN = 500, CLASSES = 10 };

static blob_status add_conv(net *n, const char *name, nn_mode mode, blob_dtype dtype,
                            int64_t channels, int64_t num_output, uint64_t seed)
{
    nn_conv_param p = {.channels = channels, .num_output = num_output, .kernel_h = 5,
                       .kernel_w = 5, .filler = NN_FILL_HE};
    nn_layer *l;
    NN_TRY(nn_conv_create(&l, mode, dtype, &p, seed));
    return net_add(n, name, l);
}

static blob_status add_relu(net *n, const char *name, nn_mode mode, blob_dtype dtype)
{
    nn_layer *l;
    NN_TRY(nn_relu_create(&l, mode, dtype));
    return net_add(n, name, l);
}

static blob_status add_max_pool(net *n, const char *name, nn_mode mode, blob_dtype dtype)
{
    nn_pool_param p = {.method = NN_POOL_MAX, .kernel_h = 2, .kernel_w = 2, .stride_h = 2,
                       .stride_w = 2, .rounding = BLOB_ROUND_CEIL};
    nn_layer *l;
    NN_TRY(nn_pool_create(&l, mode, dtype, &p));
    return net_add(n, name, l);
}

static blob_status build(net *n, nn_mode mode, blob_dtype dtype, uint64_t seed)
{
    nn_layer *l;
    NN_TRY(add_conv(n, "conv1", mode, dtype, 1, CONV1, seed));
    NN_TRY(add_max_pool(n, "pool1", mode, dtype));
    NN_TRY(add_relu(n, "relu1", mode, dtype));
    NN_TRY(add_conv(n, "conv2", mode, dtype, CONV1, CONV2, seed + 1));
    NN_TRY(add_max_pool(n, "pool2", mode, dtype));
    NN_TRY(add_relu(n, "relu2", mode, dtype));
    NN_TRY(net_add_ip(n, "ip1", "relu3", CONV2 * 4 * 4, HIDDEN, seed + 2));
    NN_TRY(net_add_ip(n, "ip2", NULL, HIDDEN, CLASSES, seed + 3));
    NN_TRY(nn_softmax_loss_create(&l, mode, dtype));
    return net_add(n, "loss", l);
}

static const net_def lenet = {
    .name = "lenet", .title = "LeNet 20-50-500", .input_axes = 3,
    .input_shape = {1, 28, 28}, .build = build, .epochs = 10, .lr_step = 4, .lr = 0.01,
};
NET_DEFINE(lenet)
